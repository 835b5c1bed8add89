"""The limits table: one source for every quota and size the daemon and the bulk loader
enforce (SPEC §0.1.11, §1.3-1.4, §12.2, §13-14), and the service's own refusal texts."""

MAX_ID_LENGTH = 128  # MessageId, SessionId, PartitionKey, ReplyToSessionId (SPEC §1.3, §14.4)
MAX_HEADER_BYTES = 64 * 1024  # all properties together (SPEC §1.4)
MAX_PROPERTY_BYTES = 32 * 1024  # one property (SPEC §1.4)
MAX_TIME_MS = 253402300799999  # 9999-12-31T23:59:59.999Z, Azure's largest date (SPEC §1.8)
STANDARD_MESSAGE_BYTES = 256 * 1024  # a message, and a batch, on Basic/Standard (SPEC §13.1)
PREMIUM_MESSAGE_BYTES = 1024 * 1024
MAX_ENTITIES = 10_000  # queues and topics per namespace (SPEC §14)
PREMIUM_ENTITIES_PER_UNIT = 1_000
MAX_PARTITIONED = 100  # partitioned entities per Basic/Standard namespace (SPEC §0.1.11)
MAX_TRANSACTION = 100  # operations per transaction (SPEC §12.2)
MAX_TRANSFER_HOPS = 4  # auto-forwarding (SPEC §11.3)

SESSION_REQUIRED = (
    # SPEC §9.3, the service's own text.
    "The SessionId was not set on a message, and it cannot be sent to the entity. Entities "
    "that have session support enabled can only receive messages that have the SessionId set "
    "to a valid value."
)
MAX_SUBSCRIPTIONS = 2_000  # per topic (SPEC §14)
MAX_SQL_FILTERS = 2_000  # per topic (SPEC §10.9, §14.5)
MAX_CORRELATION_FILTERS = 100_000  # per topic (SPEC §10.9, §14.5)
