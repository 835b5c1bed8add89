"""AMQP messages to and from the broker's stored :class:`sbctl.core.records.Message`.

What an SDK sends maps onto the stored fields the CLI shows (daemon/README.md §29):
properties → message_id, correlation_id, subject, content_type, to, reply_to,
session_id (group-id), reply_to_session_id (reply-to-group-id); header.ttl →
time_to_live; message annotations x-opt-partition-key and x-opt-scheduled-enqueue-time;
application properties keep every AMQP primitive type they were sent with (sbctl.core.typed,
daemon/README.md §1.5), so they come back as sent.
Message annotations a client set (other than the broker-owned ``x-opt-*`` ones) are stored
and come back. A body is the concatenated data sections; an amqp-value or amqp-sequence
body is kept AMQP-encoded (``body_kind``/``body_amqp``) and sent back as such, its stored
``body`` being the value's text or bytes (a string or binary value) or its JSON.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from random import getrandbits
from typing import Any

import msgspec

from sbctl.core.amqp import codec
from sbctl.core.amqp.types import (
    Header,
    Int,
    Long,
    Properties,
    Short,
    Symbol,
    Timestamp,
    UInt,
    ULong,
)
from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest
from sbctl.core.messages import json_value
from sbctl.core.records import Message as Stored
from sbctl.core.records import decode_message as decode_stored
from sbctl.core.typed import LONG_MAX, TYPED

INT32 = (-(2**31), 2**31 - 1)
UINT_END = 2**32
VALUE_STRING, VALUE_BINARY = b"\xa1", b"\xa0"  # a stored body_amqp: "the value is the body"
UNDECODABLE = "undecodable AMQP message"
_NO_ID = uuid.UUID("5b1c7d2e-0000-4000-8000-5bc71d000000")  # namespace of fallback message ids
# Annotations the broker sets on delivery or reads into stored fields: never stored as sent.
BROKER_ANNOTATIONS = frozenset(
    (
        "x-opt-sequence-number",
        "x-opt-enqueued-time",
        "x-opt-locked-until",
        "x-opt-lock-token",
        "x-opt-message-state",
        "x-opt-partition-id",
        "x-opt-partition-key",
        "x-opt-scheduled-enqueue-time",
        "x-opt-enqueue-sequence-number",
        "x-opt-deadletter-source",
    )
)
# sbctl's stored states → x-opt-message-state (0 active, 1 deferred, 2 scheduled).
MESSAGE_STATE = {1: 0, 2: 1, 3: 2, 4: 0, 5: 0}


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _property(value: Any, what: str = "application property") -> Any:
    """An AMQP value → the stored value, its AMQP type kept (sbctl.core.typed): an ``int`` as a
    plain int, a ``long`` that fits 32 bits as a ``Long``, a timestamp as an aware UTC
    datetime; the other types as the codec decoded them."""
    kind = type(value)
    if value is None or kind in _KEPT:
        return value
    if kind is int:
        return Long(value) if INT32[0] <= value <= INT32[1] else value
    if kind is Int:
        return int(value)
    if kind is Timestamp:
        try:
            return datetime.fromtimestamp(int(value) / 1000, tz=UTC)
        except (ValueError, OverflowError, OSError):
            raise BadRequest(
                f"{what} timestamp {int(value)} is out of range (years 1 to 9999)"
            ) from None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise BadRequest(f"{what} value of type {kind.__name__} is not supported")


_KEPT = frozenset((bool, str, float, bytes, uuid.UUID, *TYPED))


def _key(key: Any) -> str:
    """An application property's key: AMQP restricts them to strings (AMQP 1.0 §3.2.5), and
    Service Bus refuses others; a null key stored once made the queue unreadable."""
    if not isinstance(key, str):
        raise codec.DecodeError(f"application property key {key!r} is not a string")
    return str(key)


def _client_annotations(ann: dict[Any, Any]) -> dict[str, Any]:
    """The annotations a client set that are kept: symbol keys other than the broker's,
    with property-like values (others, which sbctl cannot store, are dropped as before)."""
    kept: dict[str, Any] = {}
    for k, v in ann.items():
        if isinstance(k, str) and k not in BROKER_ANNOTATIONS:
            try:
                kept[str(k)] = _property(v)
            except BadRequest:
                continue
    return kept


def _to_amqp(value: Any) -> Any:
    """A stored value → what goes on the wire (inverse of :func:`_property`): a plain int
    an ``int`` when it fits 32 bits, else a ``long``, else (from 2**63) a ``ulong``."""
    kind = type(value)
    if kind is int:
        if INT32[0] <= value <= INT32[1]:
            return Int(value)
        return ULong(value) if value > LONG_MAX else value
    if kind is datetime:
        return Timestamp(round(value.timestamp() * 1000))
    return value


def _json_body(value: Any) -> bytes:
    """What the CLI and the other front-ends see of a non-string body: its JSON."""
    try:
        return msgspec.json.encode(json_value(value))
    except (TypeError, ValueError, OverflowError):
        return b""


def _body(msg: codec.Message, fields: dict[str, Any]) -> None:
    if msg.body_kind == "data":
        fields["body"] = b"".join(msg.body)
        return
    fields["body_kind"] = msg.body_kind
    value = msg.body if msg.body_kind == "value" else list(msg.body)
    if msg.body_kind == "value" and isinstance(value, str | bytes):
        # Stored once: ``body`` is the value, ``body_amqp`` only its constructor
        # (sbctl.core.records).
        fields["body"] = value.encode() if isinstance(value, str) else value
        fields["body_amqp"] = VALUE_STRING if isinstance(value, str) else VALUE_BINARY
        return
    fields["body"] = b"" if value is None else _json_body(value)
    try:
        fields["body_amqp"] = codec.encode(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise BadRequest(f"unsupported AMQP body: {exc}") from None


def _stored_body(m: Stored) -> tuple[Any, str]:
    """The body of a stored message as it goes out, and its kind."""
    amqp = m.body_amqp
    if m.body_kind in ("value", "sequence") and amqp is not None:
        try:
            if amqp == VALUE_BINARY:
                return m.body, "value"
            if amqp == VALUE_STRING:
                return m.body.decode(), "value"
            return codec.decode(amqp)[0], m.body_kind
        except (codec.DecodeError, UnicodeDecodeError):
            pass  # a stored body the codec cannot read: its bytes as data
    return [m.body], "data"


def new_message_id() -> str:
    """A random version-4 UUID in hex, like ``uuid.uuid4().hex`` at a fifth of the cost (no
    system call per message; an id is not a secret, 122 random bits keep it unique)."""
    return "%032x" % (getrandbits(128) & _V4_CLEAR | _V4_SET)


MAX_MS = 2**63 - 1  # what a stored record's millisecond fields hold
_V4_CLEAR = 0xFFFFFFFF_FFFF_0FFF_3FFF_FFFFFFFFFFFF
_V4_SET = 0x00000000_0000_4000_8000_000000000000


def annotation_fields(ann: dict[Any, Any], fields: dict[str, Any]) -> None:
    """The stored fields two of a message's annotations give: partition key and scheduled
    enqueue time (also used by :mod:`.fastin`)."""
    pk = ann.get("x-opt-partition-key")
    if pk is not None:
        fields["partition_key"] = _text(pk)
    scheduled = ann.get("x-opt-scheduled-enqueue-time")
    if scheduled is not None:
        fields["scheduled_enqueue_time_ms"] = milliseconds(
            scheduled, "x-opt-scheduled-enqueue-time"
        )


def milliseconds(value: Any, what: str) -> int:
    """A count of milliseconds a message carries, as a stored integer; BadRequest naming
    ``what`` when it is not a number or does not fit the record (0 to 2**63 - 1)."""
    try:
        ms = int(value)
    except (TypeError, ValueError, OverflowError):
        raise BadRequest(f"{what} must be a number of milliseconds, not {value!r}") from None
    if not 0 <= ms <= MAX_MS:
        raise BadRequest(f"{what} {value!r} is out of range (0 to {MAX_MS} milliseconds)")
    return ms


def to_stored(payload: bytes) -> Stored:
    """One encoded AMQP message → the stored message. Raises codec.DecodeError when it does
    not decode (or an application property's key is not a string), BadRequest for a value
    sbctl does not store."""
    try:
        msg = codec.decode_message(payload)
    except codec.DecodeError as exc:
        raise codec.DecodeError(f"{UNDECODABLE}: {exc}") from None
    fields: dict[str, Any] = {}
    _body(msg, fields)
    p = msg.properties
    if p is not None:
        for name, attr in (
            ("message_id", "message_id"),
            ("correlation_id", "correlation_id"),
            ("subject", "subject"),
            ("content_type", "content_type"),
            ("to", "to"),
            ("reply_to", "reply_to"),
            ("session_id", "group_id"),
            ("reply_to_session_id", "reply_to_group_id"),
        ):
            value = _text(getattr(p, attr))
            if value is not None:
                fields[name] = value
    if "message_id" not in fields:
        # Service Bus gives a message sent without a message-id one of its own, and SDKs
        # rely on it: @azure/service-bus keys its message-lock renewal by message id and
        # fails to settle a message that has none (daemon/README.md §1).
        fields["message_id"] = new_message_id()
    h = msg.header
    if h is not None and h.ttl is not None:
        fields["time_to_live_ms"] = milliseconds(h.ttl, "header ttl")
    ann = msg.message_annotations or {}
    annotation_fields(ann, fields)
    if msg.application_properties:
        fields["application_properties"] = {
            _key(k): _property(v) for k, v in msg.application_properties.items()
        }
    kept = _client_annotations(ann)
    if kept:
        fields["message_annotations"] = kept
    return Stored(**fields)


def from_delivered(d: Delivered, *, received: bool, lock: bool) -> bytes:
    """A peeked or received message → the encoded AMQP message sent to the client.

    The header's delivery-count is the number of *earlier* deliveries (AMQP), so a
    received message carries the broker's count minus one; a peeked one carries it as is.
    Whatever a stored message holds encodes (nothing accepted can fail at delivery).
    """
    m = decode_stored(d.payload)
    count = max(0, d.delivery_count - 1) if received else d.delivery_count
    ttl = m.time_to_live_ms
    # A TTL of 2**32 ms (49.7 days) or more does not fit the header's uint: it is left out,
    # and the absolute-expiry-time less the creation-time still gives it.
    header = Header(None, None, ttl if ttl is None or ttl < UINT_END else None, None, count)
    ann: dict[Any, Any] = {}
    if m.message_annotations:
        ann.update((Symbol(k), _to_amqp(v)) for k, v in m.message_annotations.items())
    ann |= {
        Symbol("x-opt-sequence-number"): d.sequence_number,
        Symbol("x-opt-enqueued-time"): Timestamp(d.enqueued_time_ms),
        Symbol("x-opt-message-state"): Int(MESSAGE_STATE.get(d.state, 0)),
    }
    if lock and d.locked_until_ms is not None:
        ann[Symbol("x-opt-locked-until")] = Timestamp(d.locked_until_ms)
    if m.partition_key is not None:
        ann[Symbol("x-opt-partition-key")] = m.partition_key
    if m.scheduled_enqueue_time_ms is not None:
        ann[Symbol("x-opt-scheduled-enqueue-time")] = Timestamp(m.scheduled_enqueue_time_ms)
    if m.enqueued_sequence_number is not None:
        ann[Symbol("x-opt-enqueue-sequence-number")] = m.enqueued_sequence_number
    if m.dead_letter_source is not None:
        ann[Symbol("x-opt-deadletter-source")] = m.dead_letter_source
    if d.partition_id is not None:
        ann[Symbol("x-opt-partition-id")] = Short(d.partition_id)  # (a short, as Azure's)
    message_id = m.message_id
    if message_id is None:
        # Stored without one (sent over the Unix socket without --message-id): a stable id
        # derived from the message's place, so peeks and redeliveries agree (see to_stored).
        message_id = uuid.uuid5(_NO_ID, f"{d.partition_id}:{d.sequence_number}").hex
    props = Properties(
        message_id,
        None,
        m.to,
        m.subject,
        m.reply_to,
        m.correlation_id,
        Symbol(m.content_type) if m.content_type is not None else None,
        None,
        Timestamp(d.expires_at_ms) if m.time_to_live_ms is not None else None,
        Timestamp(d.enqueued_time_ms),
        m.session_id,
        None,
        m.reply_to_session_id,
    )
    app = dict(m.application_properties or {})
    if d.changes:
        app.update(d.changes)
    body, kind = _stored_body(m)
    msg = codec.Message(
        header=header,
        message_annotations=ann,
        properties=props,
        application_properties={k: _to_amqp(v) for k, v in app.items()} if app else None,
        body=body,
        body_kind=kind,
    )
    return codec.encode_message(msg)


def uint(value: int) -> UInt:
    return UInt(value)
