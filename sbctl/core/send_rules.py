"""The send rules: what a message must satisfy to be sent (daemon/README.md §1.3-1.7, §9.3,
§13.1), checked by the daemon for every send and by the Spark loader for every staged row.

One copy, used by both sides: :meth:`sbctld.queue.Queue.send` (and a paired primary before it
diverts a message) and :mod:`sbctl.spark.stage`, which runs in Spark's Python workers and so
imports neither the daemon nor pyspark. Rules this module keeps:

- each check raises the catalogue's error (:mod:`sbctl.core.errors`) with the text a sender sees;
  the loader writes that text as the row's reject reason, so a row is refused for exactly
  what a send of the same message would be;
- the checks run in one order (:func:`check_message`: :func:`check_fields`, then
  :func:`check_encoded`; :func:`check_size` after duplicate detection), so a message with
  several faults is refused for the same one on both sides;
- nothing here depends on stored state: the entity's quota and the batch total stay with the
  queue.
"""

from __future__ import annotations

from sbctl.core.durations import MAX_TIMESPAN_MS
from sbctl.core.errors import BadRequest, InvalidOperation, MessageSizeExceeded
from sbctl.core.limits import (
    MAX_HEADER_BYTES,
    MAX_ID_LENGTH,
    MAX_PROPERTY_BYTES,
    MAX_TIME_MS,
    SESSION_REQUIRED,
)
from sbctl.core.partitioning import partition_key_of
from sbctl.core.records import STRING_FIELDS, Message

# The id fields limited to MAX_ID_LENGTH characters (daemon/README.md §1.3, §14.4).
ID_FIELDS = ("session_id", "partition_key", "reply_to_session_id")


def check_message(
    m: Message, size: int, *, requires_session: bool, duplicate_detection: bool
) -> str | None:
    """Every per-message rule, in order, for a message whose encoded size is ``size``;
    returns its partition key. The tier's size limit is :func:`check_size`, which the daemon
    checks after duplicate detection (a duplicate is accepted and dropped, daemon/README.md
    §8.3)."""
    check_fields(m, requires_session)
    return check_encoded(m, size, duplicate_detection)


def check_fields(m: Message, requires_session: bool) -> None:
    """The rules on the message's fields, before it is encoded: ids, TTL, scheduled time,
    the session an entity requires."""
    # MessageId 1-128 characters; the other ids at most 128 (daemon/README.md §1.3, §14.4).
    if m.message_id is not None and not message_id_fits(m.message_id):
        raise BadRequest("message_id must be 1-128 characters")
    s, p, r = m.session_id, m.partition_key, m.reply_to_session_id
    if (
        (s is not None and len(s) > MAX_ID_LENGTH)
        or (p is not None and len(p) > MAX_ID_LENGTH)
        or (r is not None and len(r) > MAX_ID_LENGTH)
    ):  # rare: only then find which one, in ID_FIELDS order
        name = next(f for f in ID_FIELDS if len(getattr(m, f) or "") > MAX_ID_LENGTH)
        raise BadRequest(f"{name} must be at most 128 characters")
    # daemon/README.md §1.6, §1.8
    if m.time_to_live_ms is not None and not 0 < m.time_to_live_ms <= MAX_TIMESPAN_MS:
        raise BadRequest("time_to_live must be positive and at most TimeSpan.MaxValue")
    sched = m.scheduled_enqueue_time_ms
    if sched is not None and not 0 <= sched <= MAX_TIME_MS:
        raise BadRequest("scheduled_enqueue_time must be between 1970 and 9999")
    if requires_session and not m.session_id:  # daemon/README.md §9.3
        raise InvalidOperation(SESSION_REQUIRED)


def check_encoded(m: Message, size: int, duplicate_detection: bool) -> str | None:
    """The rules that need the encoded size (of its stored form, sbctl.core.message_form):
    the properties (the size less the body) fit 64 KB, each one 32 KB (daemon/README.md
    §1.4); then the partition key, where SessionId and PartitionKey must agree
    (daemon/README.md §1.7), which it returns."""
    header = size - body_size(m)
    if not header_fits(header):
        raise MessageSizeExceeded(f"the message header of {header} bytes exceeds the 64 KB limit")
    if header > MAX_PROPERTY_BYTES:  # only then can one property be over 32 KB
        values = list((m.application_properties or {}).items())
        values += [(f, getattr(m, f)) for f in STRING_FIELDS]
        for k, v in values:
            if isinstance(v, str) and len(v.encode()) > MAX_PROPERTY_BYTES:
                raise MessageSizeExceeded(f"property {k!r} exceeds the 32 KB limit")
    return partition_key_of(m.session_id, m.partition_key, m.message_id, duplicate_detection)


def message_id_fits(message_id: str) -> bool:
    """A MessageId of 1-128 characters (daemon/README.md §1.3)."""
    return 1 <= len(message_id) <= MAX_ID_LENGTH


def header_fits(header: int) -> bool:
    """All properties together within 64 KB (daemon/README.md §1.4)."""
    return header <= MAX_HEADER_BYTES


def body_size(m: Message) -> int:
    """The bytes of a message's body in its encoded size: the data, or the AMQP encoding of
    an amqp-value or amqp-sequence body, so that neither counts as header (daemon/README.md
    §1.4)."""
    amqp = m.body_amqp
    return len(m.body) if amqp is None or len(amqp) < 2 else len(amqp)


def check_size(size: int, limit: int) -> None:
    """One message against the tier's limit (daemon/README.md §13.1)."""
    if size > limit:
        raise MessageSizeExceeded(
            f"the message of {size} bytes is larger than the {limit // 1024} KB allowed for "
            "this tier"
        )


def check_not_broker_set(m: Message) -> None:
    """Senders may not set what only the broker sets (forwarding, resubmission)."""
    if (
        m.enqueued_sequence_number is not None
        or m.transfer_hops is not None
        or m.dead_letter_source is not None
    ):
        raise BadRequest(
            "enqueued_sequence_number, transfer_hops and dead_letter_source are set "
            "by the broker, not by senders"
        )


def stored_time_to_live(ttl_ms: int | None, default_ttl_ms: int) -> int:
    """The TTL a message is stored with: capped by the entity's default (daemon/README.md
    §1.6)."""
    return default_ttl_ms if ttl_ms is None or ttl_ms > default_ttl_ms else ttl_ms
