"""The limits table: one source for every quota and size the daemon and the bulk loader
enforce (daemon/README.md §0.1.11, §1.3-1.4, §12.2, §13-14), and the service's own refusal texts."""

# MessageId, SessionId, PartitionKey, ReplyToSessionId (daemon/README.md §1.3, §14.4)
MAX_ID_LENGTH = 128
MAX_HEADER_BYTES = 64 * 1024  # all properties together (daemon/README.md §1.4)
MAX_PROPERTY_BYTES = 32 * 1024  # one property (daemon/README.md §1.4)
# 9999-12-31T23:59:59.999Z, Azure's largest date (daemon/README.md §1.8)
MAX_TIME_MS = 253402300799999
# a message, and a batch, on Basic/Standard (daemon/README.md §13.1)
STANDARD_MESSAGE_BYTES = 256 * 1024
PREMIUM_MESSAGE_BYTES = 1024 * 1024
MAX_ENTITIES = 10_000  # queues and topics per namespace (daemon/README.md §14)
PREMIUM_ENTITIES_PER_UNIT = 1_000
# partitioned entities per Basic/Standard namespace (daemon/README.md §0.1.11)
MAX_PARTITIONED = 100
MAX_TRANSACTION = 100  # operations per transaction (daemon/README.md §12.2)
MAX_TRANSFER_HOPS = 4  # auto-forwarding (daemon/README.md §11.3)

SESSION_REQUIRED = (
    # daemon/README.md §9.3, the service's own text.
    "The SessionId was not set on a message, and it cannot be sent to the entity. Entities "
    "that have session support enabled can only receive messages that have the SessionId set "
    "to a valid value."
)
MAX_SUBSCRIPTIONS = 2_000  # per topic (daemon/README.md §14)
MAX_SQL_FILTERS = 2_000  # per topic (daemon/README.md §10.9, §14.5)
MAX_CORRELATION_FILTERS = 100_000  # per topic (daemon/README.md §10.9, §14.5)
MAX_PEEK = 250  # messages per peek request (daemon/README.md §13.2)
MAX_RECEIVE = 5000  # messages per receive request
