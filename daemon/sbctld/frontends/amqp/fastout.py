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
import uuid
from collections.abc import Callable
from hashlib import sha1
from typing import Any

from msgspec.structs import astuple

from sbctl.core.amqp.codec import _enc_symbol, _section_map
from sbctl.core.delivered import Delivered
from sbctl.core.records import Message as Stored
from sbctl.core.records import decode_message as decode_stored
from sbctld.frontends.amqp.convert import _NO_ID, MESSAGE_STATE, _to_amqp, from_delivered

_q = struct.Struct(">q")
_I = struct.Struct(">I")
_h = struct.Struct(">h")
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


def _header(ttl: int | None, count: int) -> bytes:
    """The header section (durable, priority, ttl, first-acquirer, delivery-count)."""
    fields = b"\x40\x40" + (_NULL if ttl is None else _uint(ttl)) + _NULL + _uint(count)
    header = _HEADER + bytes((0xC0, len(fields) + 1, 5)) + fields
    if len(_HEADERS) < _HEADERS_MAX:
        _HEADERS[ttl, count] = header
    return header


_HEADERS: dict[tuple[int | None, int], bytes] = {}  # the few (ttl, count) pairs in use
_HEADERS_MAX = 4096


def encode_delivered(d: Delivered, *, received: bool, lock: bool) -> bytes:
    """A peeked or received message → the encoded AMQP message sent to the client
    (byte for byte what :func:`.convert.from_delivered` gives)."""
    return encode_all([d], received=received, lock=lock)[0]


def renderable(
    got: list[Delivered], *, received: bool, lock: bool
) -> tuple[list[Delivered], list[bytes], list[tuple[Delivered, str]]]:
    """:func:`encode_all` of a batch that may hold a record that cannot be rendered (stored
    damaged, or by a release with a bug): (the deliveries that render, their bytes, the
    others with why). One such record never blocks the others (daemon/README.md §29.11)."""
    try:
        return got, encode_all(got, received=received, lock=lock), []
    except Exception:  # (rare: the batch again, message by message)
        pass
    good: list[Delivered] = []
    out: list[bytes] = []
    bad: list[tuple[Delivered, str]] = []
    for d in got:
        try:
            out.append(encode_delivered(d, received=received, lock=lock))
            good.append(d)
        except Exception as exc:
            bad.append((d, f"{type(exc).__name__}: {exc}"[:200]))
    return good, out, bad


def encode_all(got: list[Delivered], *, received: bool, lock: bool) -> list[bytes]:
    """:func:`encode_delivered` of each delivery (a receive's batch). A message stored with
    nothing but a body and an id (the usual shape: every other field unset, one tuple
    comparison) is packed with one cached struct per (delivery count, lock, partition, id
    length) here; the others, and values outside that struct, by :func:`_encode`."""
    out = []
    for d in got:
        m = decode_stored(d.payload)
        fields = astuple(m)
        if fields[1] is not None and fields[2:] == _UNSET and not d.changes:
            count = d.delivery_count - 1 if received else d.delivery_count
            seq = d.sequence_number
            pid = d.partition_id
            raw = fields[1].encode()
            locked = d.locked_until_ms if lock else None
            plain = (
                (
                    _PLAIN.get((count, locked is not None, pid is not None, len(raw)))
                    or _plain_layout(count, locked is not None, pid is not None, len(raw))
                )
                if 0 <= count < _UINT_END
                and 127 < seq <= _LONG_MAX
                and (pid is None or 0 <= pid <= 127)
                and len(raw) < 200
                else None  # (a received message's count is never < 0: a peek's may be 0)
            )
            if plain is not None:
                pack, head, props = plain
                enqueued = d.enqueued_time_ms
                args = [head, seq, _ENQUEUED, enqueued, _STATE.get(d.state, _STATE[0])]
                if locked is not None:
                    args += (_LOCKED, locked)
                if pid is not None:
                    args += (_PARTITION_ID_SHORT, pid)
                args += (props, raw, _ID_TO_CREATION, enqueued, _NULL * 3)
                body = fields[0]
                n = len(body)
                data = _DATA_SHORT[n] if n < 256 else _DATA_LONG + _I.pack(n)
                out.append(b"".join((pack(*args), data, body)))
                continue
        out.append(_encode(d, m, received, lock))
    return out


def _encode(d: Delivered, m: Stored, received: bool, lock: bool) -> bytes:
    """A delivery of any shape, ``m`` its decoded stored message."""
    count = max(0, d.delivery_count - 1) if received else d.delivery_count
    ttl = m.time_to_live_ms
    if (
        m.message_annotations
        or (m.body_kind in ("value", "sequence") and m.body_amqp is not None)
        or not 0 <= count < _UINT_END
        or (ttl is not None and not 0 <= ttl < _UINT_END)
    ):
        return from_delivered(d, received=received, lock=lock)
    body = m.body
    n = len(body)
    header = _HEADERS.get((ttl, count)) or _header(ttl, count)
    parts: list[bytes | bytearray] = [header, _annotations(d, m, lock), _properties(d, m)]
    if m.application_properties or d.changes:
        app: dict[str, Any] = dict(m.application_properties or {})
        if d.changes:
            app.update(d.changes)
        if app:
            section = bytearray()
            _section_map(0x74, {k: _to_amqp(v) for k, v in app.items()}, section)
            parts.append(section)
    parts.append(_DATA + bytes((0xA0, n)) if n < 256 else _DATA + b"\xb0" + _I.pack(n))
    parts.append(body)
    return b"".join(parts)


_UNSET = (None,) * (len(Stored.__struct_fields__) - 2)  # all a stored message's fields but two


_PlainLayout = tuple[Callable[..., bytes], bytes, bytes]
_PLAIN: dict[tuple[int, bool, bool, int], _PlainLayout] = {}
_PLAIN_MAX = 4096
_ID_TO_CREATION = _NULL * 8 + b"\x83"  # user-id .. absolute-expiry-time null; creation-time
_DATA_SHORT = tuple(_DATA + bytes((0xA0, n)) for n in range(256))
_DATA_LONG = _DATA + b"\xb0"


def _plain_layout(count: int, lock: bool, partitioned: bool, id_size: int) -> _PlainLayout | None:
    """The struct of :func:`encode_all` for one shape: header, annotations, properties (the
    id, then nulls but the creation time), and the constant bytes it is given."""
    if len(_PLAIN) >= _PLAIN_MAX:
        return None
    ann, ann_head = _layout(lock, partitioned)
    head = (_HEADERS.get((None, count)) or _header(None, count)) + ann_head
    props = bytes((0x00, 0x53, 0x73, 0xC0, id_size + 23, 13, 0xA1, id_size))
    fmt = f">{len(head)}s" + ann.format[ann.format.index("s") + 1 :]
    fmt += f"{len(props)}s{id_size}s{len(_ID_TO_CREATION)}sq3s"
    layout = (struct.Struct(fmt).pack, head, props)
    _PLAIN[count, lock, partitioned, id_size] = layout
    return layout


def _layout(lock: bool, partitioned: bool) -> tuple[struct.Struct, bytes]:
    """The annotations section of the usual shape as one struct: a long sequence number,
    the enqueued time and state, maybe the lock and a small partition id; with the
    constant bytes before the sequence number's value (descriptor, map header, key)."""
    fmt = f"q{len(_ENQUEUED)}sq{len(_STATE[0])}s"
    size = len(_SEQUENCE) + 9 + len(_ENQUEUED) + 8 + len(_STATE[0])
    if lock:
        fmt += f"{len(_LOCKED)}sq"
        size += len(_LOCKED) + 8
    if partitioned:
        fmt += f"{len(_PARTITION_ID_SHORT)}sh"
        size += len(_PARTITION_ID_SHORT) + 2
    head = _ANNOTATIONS + bytes((0xC1, size + 1, 2 * (3 + lock + partitioned)))
    head += _SEQUENCE + b"\x81"
    return struct.Struct(f">{len(head)}s" + fmt), head


# The partition id is an AMQP short, as Service Bus sends it: the .NET SDKs unbox it as one
# (``(short)pair.Value``), and a long there fails every receive (daemon/README.md §29).
_PARTITION_ID_SHORT = _PARTITION_ID + b"\x61"  # (then the id as a signed 16-bit integer)
_LAYOUTS = {(lock, part): _layout(lock, part) for lock in (False, True) for part in (False, True)}
_LONG_MAX = 2**63 - 1


def _annotations(d: Delivered, m: Stored, lock: bool) -> bytes:
    """The message annotations section: the broker's, in convert.from_delivered's order."""
    seq = d.sequence_number
    pid = d.partition_id
    if (
        127 < seq <= _LONG_MAX
        and (pid is None or 0 <= pid <= 127)
        and m.partition_key is None
        and m.scheduled_enqueue_time_ms is None
        and m.enqueued_sequence_number is None
        and m.dead_letter_source is None
    ):
        locked = d.locked_until_ms if lock else None
        layout, head = _LAYOUTS[locked is not None, pid is not None]
        args = [head, seq, _ENQUEUED, d.enqueued_time_ms, _STATE.get(d.state, _STATE[0])]
        if locked is not None:
            args += (_LOCKED, locked)
        if pid is not None:
            args += (_PARTITION_ID_SHORT, pid)
        return layout.pack(*args)
    return _ANNOTATIONS + _annotations_any(d, m, lock, _q.pack(d.enqueued_time_ms))


def _annotations_any(d: Delivered, m: Stored, lock: bool, enqueued: bytes) -> bytes:
    """The message annotations map of any shape."""
    seq = d.sequence_number
    ann = [
        _SEQUENCE,
        bytes((0x55, seq & 0xFF)) if -128 <= seq <= 127 else b"\x81" + _q.pack(seq),
        _ENQUEUED,
        enqueued,
        _STATE.get(d.state, _STATE[0]),
    ]
    if lock and d.locked_until_ms is not None:
        ann += (_LOCKED, _q.pack(d.locked_until_ms))
    if m.partition_key is not None:
        ann += (_PARTITION_KEY, _string(m.partition_key))
    if m.scheduled_enqueue_time_ms is not None:
        ann += (_SCHEDULED, _q.pack(m.scheduled_enqueue_time_ms))
    if m.enqueued_sequence_number is not None:
        ann += (_ENQUEUE_SEQUENCE, _long(m.enqueued_sequence_number))
    if m.dead_letter_source is not None:
        ann += (_DEADLETTER_SOURCE, _string(m.dead_letter_source))
    if d.partition_id is not None:
        ann += (_PARTITION_ID_SHORT, _h.pack(d.partition_id))
    return _compound(0xC1, 0xD1, len(ann) + 1, b"".join(ann))  # (2 per entry, 1 in _STATE)


def _properties(d: Delivered, m: Stored) -> bytes:
    """The properties section (13 fields, trailing nulls kept as the codec writes them)."""
    message_id = m.message_id
    if message_id is None:
        message_id = stable_message_id(d.partition_id, d.sequence_number)
    expiry = _NULL if m.time_to_live_ms is None else b"\x83" + _q.pack(d.expires_at_ms)
    if (
        m.to is None
        and m.subject is None
        and m.reply_to is None
        and m.correlation_id is None
        and m.content_type is None
        and m.session_id is None
        and m.reply_to_session_id is None
    ):
        raw = message_id.encode()
        n = len(raw)
        if n < 200:  # (one list8: the id, seven nulls, expiry, creation time, three nulls)
            return b"".join(
                (
                    bytes((0x00, 0x53, 0x73, 0xC0, n + 22 + len(expiry), 13, 0xA1, n)),
                    raw,
                    _NULL * 7,
                    expiry,
                    _CREATION.pack(0x83, d.enqueued_time_ms, 0x40, 0x40, 0x40),
                )
            )
    return _PROPERTIES + _properties_any(d, m, message_id, expiry)


_CREATION = struct.Struct(">BqBBB")  # creation time, then group-id, group-sequence, reply-to-group


def _properties_any(d: Delivered, m: Stored, message_id: str, expiry: bytes) -> bytes:
    """The properties list of any shape."""
    content_type = m.content_type
    if content_type is not None:
        symbol = bytearray()
        _enc_symbol(content_type, symbol)
    props = (
        _string(message_id),
        _NULL,  # user-id
        _NULL if m.to is None else _string(m.to),
        _NULL if m.subject is None else _string(m.subject),
        _NULL if m.reply_to is None else _string(m.reply_to),
        _NULL if m.correlation_id is None else _string(m.correlation_id),
        _NULL if content_type is None else symbol,
        _NULL,  # content-encoding
        expiry,
        b"\x83" + _q.pack(d.enqueued_time_ms),  # creation-time
        _NULL if m.session_id is None else _string(m.session_id),
        _NULL,  # group-sequence
        _NULL if m.reply_to_session_id is None else _string(m.reply_to_session_id),
    )
    return _compound(0xC0, 0xD0, 13, b"".join(props))


# delivery-annotations {x-opt-lock-token: uuid} (map8: size 36, 2 items; sym8; uuid)
_LOCK_TOKEN_SECTION = b"\x00\x53\x71\xc1\x24\x02\xa3\x10x-opt-lock-token\x98"


def with_lock_token(encoded: bytes, lock_token: str) -> bytes:
    """An encoded message (as :func:`encode_delivered` gives it: a header section maybe,
    never delivery annotations) with the delivery annotation ``x-opt-lock-token``, placed
    after the header as AMQP orders sections: how Service Bus returns a deferred message
    received by sequence number (the Go and .NET SDKs take its lock token from there)."""
    end = 0
    if encoded[:3] == b"\x00\x53\x70":  # header: list0, list8 or list32
        kind = encoded[3]
        if kind == 0x45:
            end = 4
        elif kind == 0xC0:
            end = 5 + encoded[4]
        else:
            end = 8 + _I.unpack_from(encoded, 4)[0]
    section = _LOCK_TOKEN_SECTION + uuid.UUID(lock_token).bytes
    return b"".join((encoded[:end], section, encoded[end:]))
