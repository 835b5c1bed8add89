"""Incoming AMQP transfers → stored messages, read straight off the payload.

The messages the SDKs send have a fixed shape: a batch envelope (message format
0x80013700) whose data sections each hold one encoded message, and messages made of
header, message-annotations, properties, application-properties and data sections
(daemon/README.md §29). :func:`stored_messages` reads that shape by position in the
transfer payload, without building the generic decoder's intermediate objects (a
``codec.Message`` per message, composites, a copy of every message before its sections
are read), and gives exactly what the generic path gives: ``convert.to_stored`` over
``codec.split_batch``. The field mapping is convert's own (``_text``, ``_property``,
``annotation_fields``, ``_client_annotations``); only the reading of the bytes is done here.

Rule: this module never decides anything about a message. Whatever it does not read
itself (another descriptor form, an amqp-value or amqp-sequence body, delivery
annotations, a footer, a section given twice, a map key that is not a string, a value
that does not decode) goes to the generic path for that message, which then answers it,
error included. tests/unit/test_amqp_message_decoding.py checks the two agree.
"""

from __future__ import annotations

import functools
import struct
import uuid
from random import getrandbits
from typing import Any

from sbctl.core.amqp import codec
from sbctl.core.amqp.codec import DECODERS
from sbctl.core.amqp.types import Int, Symbol, Timestamp, UInt
from sbctl.core.records import Message as Stored
from sbctld.frontends.amqp import convert

_U32 = struct.Struct(">I").unpack_from
_U32X2 = struct.Struct(">II").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_F64 = struct.Struct(">d").unpack_from

HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES, DATA = (
    0x70,
    0x72,
    0x73,
    0x74,
    0x75,
)
# Sections a batch envelope may carry besides its data sections (the SDKs copy the first
# message's properties and partition key there); they are checked, not used.
_ENVELOPE_OTHERS = frozenset((0x70, 0x71, 0x72, 0x73, 0x74, 0x78))
# properties list index → stored field (convert.to_stored's mapping).
_PROPERTY_FIELDS = (
    "message_id",
    None,  # user-id
    "to",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    None,  # content-encoding
    None,  # absolute-expiry-time
    None,  # creation-time
    "session_id",  # group-id
    None,  # group-sequence
    "reply_to_session_id",  # reply-to-group-id
)
_PLAIN_DATA = b"\x00\x53\x75\xb0"  # a data section, binary with a 4-byte length
_TWO_DATA_HEADERS = struct.Struct(">4sI4sI").unpack_from  # a batch's section, its message's
# Values convert._property keeps as they are (not int: a long that fits 32 bits is a Long).
_PLAIN = frozenset((str, float, bool, bytes, type(None), uuid.UUID))


class _Generic(Exception):
    """What this module does not read: the generic path takes the message."""


def stored_messages(payload: bytes, message_format: int) -> list[Stored]:
    """The stored messages of one incoming transfer: each message of a batch (format
    0x80013700) or the transfer's one message. Raises what the generic path raises
    (``codec.DecodeError`` for an undecodable batch, ``BadRequest`` for a message)."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    if message_format == codec.BATCH_FORMAT:
        items = _batch(payload)
        if items is None:
            return [convert.to_stored(p) for p in codec.split_batch(payload)]
    else:
        items = [(0, len(payload))]
    out: list[Stored] = []
    append = out.append
    for item in items:
        if isinstance(item, tuple):
            start, end = item
            try:
                append(_message(payload, start, end))
            except Exception:  # anything unusual: the generic path decides (see the docstring)
                append(convert.to_stored(payload[start:end]))
        else:
            append(item)
    for m, message_id in zip(out, new_message_ids(len(out)), strict=True):
        if m.message_id is None:  # sent without one (convert.to_stored gave its own)
            m.message_id = message_id
    return out


def new_message_ids(n: int) -> list[str]:
    """``n`` ids as :func:`convert.new_message_id` makes them (random version-4 UUIDs in
    hex), from one draw of random bits."""
    clear, set_, slices = _id_masks(n)
    text = (getrandbits(128 * n) & clear | set_).to_bytes(16 * n, "big").hex()
    return list(map(text.__getitem__, slices))


@functools.lru_cache(maxsize=64)
def _id_masks(n: int) -> tuple[int, int, list[slice]]:
    """The version-4 bit masks for ``n`` ids side by side, and where each id lies."""
    clear = int(f"{convert._V4_CLEAR:032x}" * n, 16)
    set_ = int(f"{convert._V4_SET:032x}" * n, 16)
    return clear, set_, [slice(i, i + 32) for i in range(0, 32 * n, 32)]


def _batch(buf: bytes) -> list[Stored | tuple[int, int]] | None:
    """The messages of a batch envelope: stored already when one is a lone data section
    (``ServiceBusMessage(body)`` as the SDKs send it), else where it lies; None for an
    envelope this module does not read (the generic split then answers)."""
    items: list[Stored | tuple[int, int]] = []
    append = items.append
    others: list[bytes] = []
    pos, end = 0, len(buf)
    plain = _PLAIN_DATA
    try:
        while pos < end:
            if pos + 16 <= end:  # a data section holding a lone data section?
                outer, size, inner, length = _TWO_DATA_HEADERS(buf, pos)
                stop = pos + 8 + size
                if outer == plain and inner == plain and size == length + 8 and stop <= end:
                    append(Stored(buf[pos + 16 : stop]))
                    pos = stop
                    continue
            if buf[pos] or buf[pos + 1] != 0x53:
                return None
            code, ctor = buf[pos + 2], buf[pos + 3]
            if code == DATA:
                if ctor == 0xB0:
                    start = pos + 8
                    stop = start + _U32(buf, pos + 4)[0]
                elif ctor == 0xA0:
                    start = pos + 5
                    stop = start + buf[pos + 4]
                else:
                    return None
                if stop > end:
                    return None
                append((start, stop))
                pos = stop
            elif code in _ENVELOPE_OTHERS:
                _, stop = DECODERS[ctor](buf, pos + 4)
                others.append(buf[pos:stop])
                pos = stop
            else:
                return None
        if others:  # the generic checks of those sections (a map where a map belongs...)
            codec.decode_message(b"".join(others))
    except Exception:  # an envelope the generic split refuses (it gives the error)
        return None
    return items


def _message(buf: bytes, pos: int, end: int) -> Stored:
    """One message lying in ``buf[pos:end]``, as convert.to_stored stores it."""
    fields: dict[str, Any] = {}
    body = b""
    seen = 0
    while pos < end:
        if buf[pos] or buf[pos + 1] != 0x53:
            raise _Generic
        code, ctor = buf[pos + 2], buf[pos + 3]
        pos += 4
        if code == DATA:
            if ctor == 0xB0:
                start = pos + 4
                stop = start + _U32(buf, pos)[0]
            elif ctor == 0xA0:
                start = pos + 1
                stop = start + buf[pos]
            else:
                raise _Generic
            if stop > end:
                raise _Generic
            body = buf[start:stop] if not body else body + buf[start:stop]
            pos = stop
            continue
        bit = 1 << (code & 0x0F)
        if seen & bit or not HEADER <= code <= APPLICATION_PROPERTIES or code == 0x71:
            raise _Generic  # twice (the generic keeps the last), delivery annotations, ...
        seen |= bit
        if code == APPLICATION_PROPERTIES:
            pos = _application_properties(buf, pos, ctor, end, fields)
        elif code == PROPERTIES:
            pos = _properties(buf, pos, ctor, end, fields)
        elif code == MESSAGE_ANNOTATIONS:
            pos = _annotations(buf, pos, ctor, end, fields)
        else:
            pos = _header(buf, pos, ctor, end, fields)
    if pos != end:
        raise _Generic
    fields["body"] = body
    return Stored(**fields)  # (without a message-id: stored_messages gives it one)


def _compound(buf: bytes, pos: int, ctor: int, end: int) -> tuple[int, int, int]:
    """(count, first item, end) of the list or map whose constructor ``ctor`` was read."""
    if ctor == 0xC0 or ctor == 0xC1:
        count, start, stop = buf[pos + 1], pos + 2, pos + 1 + buf[pos]
    elif ctor == 0xD0 or ctor == 0xD1:
        size, count = _U32X2(buf, pos)
        start, stop = pos + 8, pos + 4 + size
    elif ctor == 0x45:
        return 0, pos, pos
    else:
        raise _Generic
    if stop > end or stop < start:
        raise _Generic
    return count, start, stop


def _header(buf: bytes, pos: int, ctor: int, end: int, fields: dict[str, Any]) -> int:
    if ctor != 0xC0 and ctor != 0xD0 and ctor != 0x45:
        raise _Generic
    count, pos, stop = _compound(buf, pos, ctor, end)
    for i in range(count):
        value, pos = _value(buf, pos)
        if i == 2 and value is not None:
            fields["time_to_live_ms"] = convert.milliseconds(value, "header ttl")
    if pos != stop:
        raise _Generic
    return pos


def _properties(buf: bytes, pos: int, ctor: int, end: int, fields: dict[str, Any]) -> int:
    if ctor != 0xC0 and ctor != 0xD0 and ctor != 0x45:
        raise _Generic
    count, pos, stop = _compound(buf, pos, ctor, end)
    names = _PROPERTY_FIELDS
    for i in range(count):
        value, pos = _value(buf, pos)
        if value is not None and i < 13:
            name = names[i]
            if name is not None:
                fields[name] = value if type(value) is str else convert._text(value)
    if pos != stop:
        raise _Generic
    return pos


def _map_items(buf: bytes, pos: int, ctor: int, end: int) -> tuple[list[Any], int]:
    """A map section's keys and values, alternating (keys strings or symbols)."""
    if ctor != 0xC1 and ctor != 0xD1:
        raise _Generic
    count, pos, stop = _compound(buf, pos, ctor, end)
    if count % 2:
        raise _Generic
    items: list[Any] = []
    append = items.append
    for i in range(count):
        value, pos = _value(buf, pos)
        if not i % 2 and not isinstance(value, str):
            raise _Generic  # (the generic texts other keys; none of the SDKs sends one)
        append(value)
    if pos != stop:
        raise _Generic
    return items, pos


def _application_properties(
    buf: bytes, pos: int, ctor: int, end: int, fields: dict[str, Any]
) -> int:
    if ctor == 0x40:
        return pos
    items, pos = _map_items(buf, pos, ctor, end)
    if items:
        prop = convert._property
        plain = _PLAIN
        fields["application_properties"] = {
            str(k): v if type(v) in plain else prop(v)
            for k, v in zip(items[::2], items[1::2], strict=True)
        }
    return pos


def _annotations(buf: bytes, pos: int, ctor: int, end: int, fields: dict[str, Any]) -> int:
    if ctor == 0x40:
        return pos
    items, pos = _map_items(buf, pos, ctor, end)
    ann: dict[Any, Any] = {}
    for k, v in zip(items[::2], items[1::2], strict=True):
        ann[k] = v  # (as the generic map: the first key object, the last value)
    convert.annotation_fields(ann, fields)
    kept = convert._client_annotations(ann)
    if kept:
        fields["message_annotations"] = kept
    return pos


def _value(buf: bytes, pos: int) -> tuple[Any, int]:
    """The value at ``pos`` as ``codec.decode`` gives it: the SDKs' common encodings read
    here, the others by the codec."""
    code = buf[pos]
    if code == 0x40:
        return None, pos + 1
    if code == 0xA1:
        start = pos + 2
        stop = start + buf[pos + 1]
        return buf[start:stop].decode(), stop
    if code == 0xA3:
        start = pos + 2
        stop = start + buf[pos + 1]
        return Symbol(buf[start:stop].decode("ascii")), stop
    if code == 0x52:
        return UInt(buf[pos + 1]), pos + 2
    if code == 0x71:
        return Int(_I32(buf, pos + 1)[0]), pos + 5
    if code == 0x83:
        return Timestamp(_I64(buf, pos + 1)[0]), pos + 9
    if code == 0x81:
        return _I64(buf, pos + 1)[0], pos + 9
    if code == 0x82:
        return _F64(buf, pos + 1)[0], pos + 9
    return DECODERS[code](buf, pos + 1)
