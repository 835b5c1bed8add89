"""The sections of an encoded AMQP message read and spliced as bytes (AMQP 1.0 §3.2).

What :mod:`sbctl.core.message_form` and :mod:`sbctl.core.splice` need below the level of
values: where a value ends from its constructor alone, the items of a list or map, a map
made of encoded entries, a properties section with its message id set, where each message of
a batch transfer lies (message format 0x80013700), and a fast reader of the values the SDKs
send most (the others through the codec). Nothing here builds a message.
"""

from __future__ import annotations

import struct
from typing import Any

from sbctl.core.amqp import codec
from sbctl.core.amqp.codec import DECODERS
from sbctl.core.amqp.types import Int, Symbol, Timestamp, UInt

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x74, 0x75, 0x76, 0x77, 0x78
_U32 = struct.Struct(">I").unpack_from
_U32X2 = struct.Struct(">II").unpack_from
_I32 = struct.Struct(">i").unpack_from
_I64 = struct.Struct(">q").unpack_from
_F64 = struct.Struct(">d").unpack_from


def read_value(buf: bytes, pos: int) -> tuple[Any, int]:
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


def skip(buf: bytes, pos: int) -> int:
    """The end of the value at ``pos``, read from its constructor alone (AMQP 1.0 §1.2: the
    constructor gives the width of its fixed value or of its size); DecodeError for a byte
    that is no constructor."""
    code = buf[pos]
    if code == 0x00:  # described: a descriptor, then the value
        return skip(buf, skip(buf, pos + 1))
    width = _WIDTHS[code]
    if width >= 0:
        return pos + 1 + width
    if width == -1:
        return pos + 2 + buf[pos + 1]
    if width == -4:
        return pos + 5 + _U32(buf, pos + 1)[0]
    raise codec.DecodeError(f"unknown AMQP type code 0x{code:02x}")


# Each constructor's fixed width, or -1 / -4 for a one- / four-byte size; -9: none.
_WIDTHS = [-9] * 256
for _codes, _width in (
    ((0x40, 0x41, 0x42, 0x43, 0x44, 0x45), 0),
    ((0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56), 1),
    ((0x60, 0x61), 2),
    ((0x70, 0x71, 0x72, 0x73, 0x74), 4),
    ((0x80, 0x81, 0x82, 0x83, 0x84), 8),
    ((0x94, 0x98), 16),
    ((0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0), -1),
    ((0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0), -4),
):
    for _code in _codes:
        _WIDTHS[_code] = _width


def list_items(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(count, first item, end) of the list or map at ``pos`` (its constructor)."""
    ctor = buf[pos]
    if ctor == 0xC0 or ctor == 0xC1:
        count, start, stop = buf[pos + 2], pos + 3, pos + 2 + buf[pos + 1]
    elif ctor == 0xD0 or ctor == 0xD1:
        size, count = _U32X2(buf, pos + 1)
        start, stop = pos + 9, pos + 5 + size
    elif ctor == 0x45 or ctor == 0x40:
        return 0, pos + 1, pos + 1
    else:
        raise codec.DecodeError(f"a list or map was expected, not type 0x{ctor:02x}")
    if stop > end or stop < start:
        raise codec.DecodeError("a list or map overruns its message")
    return count, start, stop


def properties_with_id(value: bytes, message_id: str) -> bytes:
    """A properties section whose value (a list, or empty for none) is ``value``, with
    ``message_id`` as its first field: the other fields' bytes as they were."""
    rest = b""
    count = 1
    if value:
        n, item, stop = list_items(value, 0, len(value))
        if n:
            rest = value[skip(value, item) : stop]
            count = n
    body = codec.encode(message_id) + rest
    n = len(body)
    if n + 1 < 256 and count < 256:
        return bytes((0x00, 0x53, 0x73, 0xC0, n + 1, count)) + body
    return b"\x00\x53\x73\xd0" + struct.pack(">II", n + 4, count) + body


def map_of(pairs: int, body: bytes) -> bytes:
    """A map of ``pairs`` entries whose encoded keys and values are ``body``."""
    n = len(body)
    if n + 1 < 256 and 2 * pairs < 256:
        return bytes((0xC1, n + 1, 2 * pairs)) + body
    return b"\xd1" + struct.pack(">II", n + 4, 2 * pairs) + body


def batch_messages(buf: bytes) -> list[tuple[int, int]]:
    """Where each message of a batch envelope lies (its data sections' values); the other
    sections of the envelope (the SDKs copy the first message's properties there) are
    checked and not used."""
    out: list[tuple[int, int]] = []
    pos, end = 0, len(buf)
    try:
        while pos < end:
            if buf[pos] or buf[pos + 1] != 0x53:  # (another descriptor form: rare)
                return [(s, s + len(c)) for s, c in _located(buf)]
            code, ctor = buf[pos + 2], buf[pos + 3]
            if code == DATA:
                if ctor == 0xB0:
                    start, stop = pos + 8, pos + 8 + _U32(buf, pos + 4)[0]
                elif ctor == 0xA0:
                    start, stop = pos + 5, pos + 5 + buf[pos + 4]
                else:
                    raise codec.DecodeError("a data section must hold binary")
                if stop > end:
                    raise codec.DecodeError("a data section overruns the transfer")
                out.append((start, stop))
                pos = stop
            elif HEADER <= code <= APPLICATION_PROPERTIES or code == FOOTER:
                pos = _checked(buf, pos + 3, code)
            else:
                raise codec.DecodeError(f"unknown message section 0x{code:02x}")
    except (IndexError, struct.error) as exc:
        raise codec.DecodeError(f"a batch that does not decode: {exc}") from None
    return out


def _checked(buf: bytes, pos: int, code: int) -> int:
    """The end of an envelope section's value, which must decode as its kind."""
    value, stop = codec.decode(buf, pos)
    if code in (HEADER, PROPERTIES):
        if not isinstance(value, list):
            raise codec.DecodeError(f"message section 0x{code:02x} must be a list")
    elif value is not None and not isinstance(value, dict):
        raise codec.DecodeError(f"message section 0x{code:02x} must be a map")
    return stop


def _located(buf: bytes) -> list[tuple[int, bytes]]:
    """The data sections of an envelope written with long descriptors (rare), copied."""
    chunks = codec.decode_message(buf)
    if chunks.body_kind != "data":
        raise codec.DecodeError("a batch's messages must be data sections")
    out = []
    pos = 0
    for chunk in chunks.body:
        at = buf.index(chunk, pos)
        out.append((at, chunk))
        pos = at + len(chunk)
    return out
