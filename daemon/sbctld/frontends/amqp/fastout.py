"""The encoded AMQP message of a delivery, written directly (the receive hot path).

:func:`encode_delivered` gives the bytes :func:`.convert.from_delivered` gives, for every
input, without building the header, properties and annotations objects and dispatching
on each field's type: the sections are described lists and maps whose descriptors, keys
and field types are fixed (AMQP 1.0 §3.2: header 0x70, message-annotations 0x72,
properties 0x73, application-properties 0x74, data 0x75), so they are written from
constant prefixes. What is not of that fixed shape (annotations a client set, an
amqp-value or amqp-sequence body, a header field outside the uint range) goes through
:func:`.convert.from_delivered` itself. Application properties, whose values are typed,
are encoded by the generic codec from the same map. ``tests/unit/test_amqp_delivery_encoding.py``
proves the two byte-identical over random stored messages.
"""

from __future__ import annotations

import struct
from hashlib import sha1
from typing import Any

from sbctl.amqp.codec import _enc_symbol, _section_map
from sbctl.codec import Message as Stored
from sbctl.codec import decode_message as decode_stored
from sbctl.protocol import Delivered
from sbctld.frontends.amqp.convert import _NO_ID, MESSAGE_STATE, _to_amqp, from_delivered

_q = struct.Struct(">q")
_I = struct.Struct(">I")
_II = struct.Struct(">II")
_UINT_END = 2**32
_NULL = b"\x40"
_NO_ID_BYTES = _NO_ID.bytes


def _sym(name: str) -> bytes:
    raw = name.encode("ascii")
    return bytes((0xA3, len(raw))) + raw


_SEQUENCE = _sym("x-opt-sequence-number")
_ENQUEUED = _sym("x-opt-enqueued-time") + b"\x83"
_STATE = {
    state: _sym("x-opt-message-state") + bytes((0x54, amqp))
    for state, amqp in {0: 0, **MESSAGE_STATE}.items()
}
_LOCKED = _sym("x-opt-locked-until") + b"\x83"
_PARTITION_KEY = _sym("x-opt-partition-key")
_SCHEDULED = _sym("x-opt-scheduled-enqueue-time") + b"\x83"
_ENQUEUE_SEQUENCE = _sym("x-opt-enqueue-sequence-number")
_DEADLETTER_SOURCE = _sym("x-opt-deadletter-source")
_PARTITION_ID = _sym("x-opt-partition-id")
_HEADER = b"\x00\x53\x70"
_ANNOTATIONS = b"\x00\x53\x72"
_PROPERTIES = b"\x00\x53\x73"
_DATA = b"\x00\x53\x75"


def _uint(v: int) -> bytes:
    if v == 0:
        return b"\x43"
    if v < 256:
        return bytes((0x52, v))
    return b"\x70" + _I.pack(v)


def _long(v: int) -> bytes:
    if -128 <= v <= 127:
        return bytes((0x55, v & 0xFF))
    return b"\x81" + _q.pack(v)


def _string(v: str | None) -> bytes:
    if v is None:
        return _NULL
    raw = v.encode()
    n = len(raw)
    return (bytes((0xA1, n)) if n < 256 else b"\xb1" + _I.pack(n)) + raw


def _compound(small: int, large: int, count: int, body: bytes | bytearray) -> bytes:
    n = len(body)
    if n + 1 < 256:
        return bytes((small, n + 1, count)) + body
    return bytes((large,)) + _II.pack(n + 4, count) + body


def stable_message_id(partition_id: int | None, sequence_number: int) -> str:
    """``uuid.uuid5(_NO_ID, f"{partition_id}:{sequence_number}").hex`` without the UUID
    objects: the id a message stored without one is given (see convert.from_delivered)."""
    digest = sha1(_NO_ID_BYTES + f"{partition_id}:{sequence_number}".encode()).digest()
    n = int.from_bytes(digest[:16], "big")
    n = n & ~(0xC000 << 48) | 0x8000 << 48  # variant RFC 4122
    n = n & ~(0xF000 << 64) | 5 << 76  # version 5
    return f"{n:032x}"


def encode_delivered(d: Delivered, *, received: bool, lock: bool) -> bytes:
    """A peeked or received message → the encoded AMQP message sent to the client
    (byte for byte what :func:`.convert.from_delivered` gives)."""
    m = decode_stored(d.payload)
    count = max(0, d.delivery_count - 1) if received else d.delivery_count
    ttl = m.time_to_live_ms
    if (
        m.message_annotations
        or (m.body_kind in ("value", "sequence") and m.body_amqp is not None)
        or not 0 <= count < _UINT_END
        or (ttl is not None and not 0 <= ttl < _UINT_END)
    ):
        return from_delivered(d, received=received, lock=lock)
    header = b"\x40\x40" + (_NULL if ttl is None else _uint(ttl)) + _NULL + _uint(count)
    out = bytearray(_HEADER)
    out += bytes((0xC0, len(header) + 1, 5))
    out += header
    enqueued = _q.pack(d.enqueued_time_ms)
    out += _ANNOTATIONS
    out += _annotations(d, m, lock, enqueued)
    out += _PROPERTIES
    out += _properties(d, m, enqueued)
    if m.application_properties or d.changes:
        app: dict[str, Any] = dict(m.application_properties or {})
        if d.changes:
            app.update(d.changes)
        if app:
            _section_map(0x74, {k: _to_amqp(v) for k, v in app.items()}, out)
    body = m.body
    n = len(body)
    out += _DATA
    out += bytes((0xA0, n)) if n < 256 else b"\xb0" + _I.pack(n)
    out += body
    return bytes(out)


def _annotations(d: Delivered, m: Stored, lock: bool, enqueued: bytes) -> bytes:
    """The message annotations map: the broker's, in convert.from_delivered's order."""
    ann = bytearray(_SEQUENCE)
    ann += _long(d.sequence_number)
    ann += _ENQUEUED
    ann += enqueued
    ann += _STATE.get(d.state, _STATE[0])
    entries = 3
    if lock and d.locked_until_ms is not None:
        ann += _LOCKED
        ann += _q.pack(d.locked_until_ms)
        entries += 1
    if m.partition_key is not None:
        ann += _PARTITION_KEY
        ann += _string(m.partition_key)
        entries += 1
    if m.scheduled_enqueue_time_ms is not None:
        ann += _SCHEDULED
        ann += _q.pack(m.scheduled_enqueue_time_ms)
        entries += 1
    if m.enqueued_sequence_number is not None:
        ann += _ENQUEUE_SEQUENCE
        ann += _long(m.enqueued_sequence_number)
        entries += 1
    if m.dead_letter_source is not None:
        ann += _DEADLETTER_SOURCE
        ann += _string(m.dead_letter_source)
        entries += 1
    if d.partition_id is not None:
        ann += _PARTITION_ID
        ann += _long(d.partition_id)
        entries += 1
    return _compound(0xC1, 0xD1, 2 * entries, ann)


def _properties(d: Delivered, m: Stored, enqueued: bytes) -> bytes:
    """The properties list (13 fields, trailing nulls kept as the codec writes them)."""
    message_id = m.message_id
    if message_id is None:
        message_id = stable_message_id(d.partition_id, d.sequence_number)
    props = bytearray(_string(message_id))
    props += _NULL  # user-id
    props += _string(m.to)
    props += _string(m.subject)
    props += _string(m.reply_to)
    props += _string(m.correlation_id)
    if m.content_type is None:
        props += _NULL
    else:
        _enc_symbol(m.content_type, props)
    props += _NULL  # content-encoding
    props += _NULL if m.time_to_live_ms is None else b"\x83" + _q.pack(d.expires_at_ms)
    props += b"\x83"
    props += enqueued  # creation-time
    props += _string(m.session_id)
    props += _NULL  # group-sequence
    props += _string(m.reply_to_session_id)
    return _compound(0xC0, 0xD0, 13, props)
