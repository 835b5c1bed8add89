"""Encode and decode AMQP 1.0 values (the AMQP 1.0 specification, part 1, "Types").

``encode(value) -> bytes`` and ``decode(buf, pos) -> (value, next_pos)``. The encoder
picks the compact form where one exists (``smalluint``, ``str8``, ``list8`` ...); the
decoder accepts every form, including the long boolean form ``0x56 0x01`` pyamqp sends.
Described values with a known composite code decode to that composite's class.

Hot paths (performatives, message sections) use the dispatch tables directly; nothing
here does I/O.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from sbctl.core.amqp.constructors import ELEMENT_NAMES as _ELEMENT_NAMES
from sbctl.core.amqp.generated import composite_encoder
from sbctl.core.amqp.types import (
    COMPOSITES,
    Array,
    Byte,
    Char,
    Composite,
    Decimal32,
    Decimal64,
    Decimal128,
    Described,
    Float,
    Int,
    Long,
    Short,
    Symbol,
    Timestamp,
    UByte,
    UInt,
    ULong,
    UShort,
)


class DecodeError(ValueError):
    """Bytes that are not a valid AMQP encoding."""


_B = struct.Struct(">B")
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_Q = struct.Struct(">Q")
_b = struct.Struct(">b")
_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_f = struct.Struct(">f")
_d = struct.Struct(">d")
_BB = struct.Struct(">BB")
_II = struct.Struct(">II")

# ------------------------------------------------------------------ encoding


def _enc_null(v: Any, out: bytearray) -> None:
    out.append(0x40)


def _enc_bool(v: Any, out: bytearray) -> None:
    out.append(0x41 if v else 0x42)


def _enc_ubyte(v: Any, out: bytearray) -> None:
    out += b"\x50" + _B.pack(v)


def _enc_ushort(v: Any, out: bytearray) -> None:
    out += b"\x60" + _H.pack(v)


def _enc_uint(v: Any, out: bytearray) -> None:
    if v == 0:
        out.append(0x43)
    elif v < 256:
        out += b"\x52" + _B.pack(v)
    else:
        out += b"\x70" + _I.pack(v)


def _enc_ulong(v: Any, out: bytearray) -> None:
    if v == 0:
        out.append(0x44)
    elif v < 256:
        out += b"\x53" + _B.pack(v)
    else:
        out += b"\x80" + _Q.pack(v)


def _enc_byte(v: Any, out: bytearray) -> None:
    out += b"\x51" + _b.pack(v)


def _enc_short(v: Any, out: bytearray) -> None:
    out += b"\x61" + _h.pack(v)


def _enc_int(v: Any, out: bytearray) -> None:
    if -128 <= v <= 127:
        out += b"\x54" + _b.pack(v)
    else:
        out += b"\x71" + _i.pack(v)


def _enc_long(v: Any, out: bytearray) -> None:
    if -128 <= v <= 127:
        out += b"\x55" + _b.pack(v)
    else:
        out += b"\x81" + _q.pack(v)


def _enc_timestamp(v: Any, out: bytearray) -> None:
    out += b"\x83" + _q.pack(v)


def _enc_float(v: Any, out: bytearray) -> None:
    out += b"\x72" + _f.pack(v)


def _enc_double(v: Any, out: bytearray) -> None:
    out += b"\x82" + _d.pack(v)


def _enc_char(v: Any, out: bytearray) -> None:
    out += b"\x73" + _I.pack(ord(v))


def _enc_dec32(v: Any, out: bytearray) -> None:
    out += b"\x74" + bytes(v)


def _enc_dec64(v: Any, out: bytearray) -> None:
    out += b"\x84" + bytes(v)


def _enc_dec128(v: Any, out: bytearray) -> None:
    out += b"\x94" + bytes(v)


def _enc_uuid(v: Any, out: bytearray) -> None:
    out += b"\x98" + v.bytes


def _variable(small: int, large: int, raw: bytes, out: bytearray) -> None:
    n = len(raw)
    if n < 256:
        out += _BB.pack(small, n)
    else:
        out.append(large)
        out += _I.pack(n)
    out += raw


def _enc_binary(v: Any, out: bytearray) -> None:
    _variable(0xA0, 0xB0, bytes(v), out)


def _enc_string(v: Any, out: bytearray) -> None:
    _variable(0xA1, 0xB1, v.encode(), out)


# Encoded symbols by text: the same few (annotation keys, conditions) go out on every
# message; bounded, so a peer's arbitrary symbols cannot grow it.
_SYMBOLS: dict[str, bytes] = {}
_SYMBOLS_MAX = 1024


def _enc_symbol(v: Any, out: bytearray) -> None:
    raw = _SYMBOLS.get(v)
    if raw is None:
        tmp = bytearray()
        _variable(0xA3, 0xB3, v.encode("ascii"), tmp)
        raw = bytes(tmp)
        if len(_SYMBOLS) < _SYMBOLS_MAX and len(raw) <= 64:
            _SYMBOLS[str(v)] = raw
    out += raw


def _compound(small: int, large: int, count: int, body: bytearray, out: bytearray) -> None:
    if len(body) + 1 < 256 and count < 256:
        out += bytes((small, len(body) + 1, count))
    else:
        out.append(large)
        out += _II.pack(len(body) + 4, count)
    out += body


def _enc_list(v: Any, out: bytearray) -> None:
    if not v:
        out.append(0x45)
        return
    body = bytearray()
    for item in v:
        ENCODERS.get(type(item), _enc_other)(item, body)
    _compound(0xC0, 0xD0, len(v), body, out)


def _enc_map(v: Any, out: bytearray) -> None:
    body = bytearray()
    for key, item in v.items():
        ENCODERS.get(type(key), _enc_other)(key, body)
        ENCODERS.get(type(item), _enc_other)(item, body)
    _compound(0xC1, 0xD1, 2 * len(v), body, out)


def _enc_described(v: Any, out: bytearray) -> None:
    out.append(0x00)
    encode_into(v.descriptor, out)
    encode_into(v.value, out)


_ENCODERS_BY_CLASS: dict[type, Callable[[Any, bytearray], None]] = {}


def _enc_composite(v: Any, out: bytearray) -> None:
    cls = type(v)
    enc = _ENCODERS_BY_CLASS.get(cls)
    if enc is None:
        enc = _ENCODERS_BY_CLASS[cls] = composite_encoder(
            cls, ENCODERS, _enc_other, _compound, _enc_map
        )
    enc(v, out)


# Array element constructors and their fixed-width encoders (no compact forms inside).
_ARRAY_ELEMENT: dict[str, tuple[int, Callable[[Any], bytes]]] = {
    "boolean": (0x56, lambda v: b"\x01" if v else b"\x00"),
    "ubyte": (0x50, _B.pack),
    "ushort": (0x60, _H.pack),
    "uint": (0x70, _I.pack),
    "ulong": (0x80, _Q.pack),
    "byte": (0x51, _b.pack),
    "short": (0x61, _h.pack),
    "int": (0x71, _i.pack),
    "long": (0x81, _q.pack),
    "timestamp": (0x83, _q.pack),
    "float": (0x72, _f.pack),
    "double": (0x82, _d.pack),
    "char": (0x73, lambda v: _I.pack(ord(v))),
    "uuid": (0x98, lambda v: v.bytes),
    "binary": (0xB0, lambda v: _I.pack(len(v)) + bytes(v)),
    "string": (0xB1, lambda v: _I.pack(len(v.encode())) + v.encode()),
    "symbol": (0xB3, lambda v: _I.pack(len(v)) + v.encode("ascii")),
}


def _enc_array(v: Any, out: bytearray) -> None:
    body = bytearray()
    if v.type in ("list", "map"):
        body.append(0xD0 if v.type == "list" else 0xD1)
        for item in v:
            tmp = bytearray()
            (_enc_list if v.type == "list" else _enc_map)(item, tmp)
            if tmp[0] == 0x45:  # list0 inside a list32 array: an empty list32
                tmp = bytearray(_II.pack(4, 0))
            elif tmp[0] in (0xC0, 0xC1):
                size, count = tmp[1], tmp[2]
                tmp = bytearray(_II.pack(size + 3, count)) + tmp[3:]
            else:
                del tmp[0]
            body += tmp
    else:
        code, pack = _ARRAY_ELEMENT[v.type]
        body.append(code)
        for item in v:
            body += pack(item)
    if len(body) + 1 < 256 and len(v) < 256:
        out += bytes((0xE0, len(body) + 1, len(v)))
    else:
        out.append(0xF0)
        out += _II.pack(len(body) + 4, len(v))
    out += body


def _enc_other(v: Any, out: bytearray) -> None:
    if isinstance(v, Composite):
        _enc_composite(v, out)
        return
    for kind, enc in ENCODERS.items():
        if isinstance(v, kind) and kind is not bool:
            enc(v, out)
            return
    raise TypeError(f"cannot encode a {type(v).__name__} as AMQP")


ENCODERS: dict[type, Callable[[Any, bytearray], None]] = {
    type(None): _enc_null,
    bool: _enc_bool,
    int: _enc_long,
    float: _enc_double,
    str: _enc_string,
    bytes: _enc_binary,
    bytearray: _enc_binary,
    memoryview: _enc_binary,
    uuid.UUID: _enc_uuid,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    UByte: _enc_ubyte,
    UShort: _enc_ushort,
    UInt: _enc_uint,
    ULong: _enc_ulong,
    Byte: _enc_byte,
    Short: _enc_short,
    Int: _enc_int,
    Long: _enc_long,
    Timestamp: _enc_timestamp,
    Float: _enc_float,
    Symbol: _enc_symbol,
    Char: _enc_char,
    Decimal32: _enc_dec32,
    Decimal64: _enc_dec64,
    Decimal128: _enc_dec128,
    Array: _enc_array,
    Described: _enc_described,
}


def encode_into(value: Any, out: bytearray) -> None:
    ENCODERS.get(type(value), _enc_other)(value, out)


def encode(value: Any) -> bytes:
    out = bytearray()
    ENCODERS.get(type(value), _enc_other)(value, out)
    return bytes(out)


# ------------------------------------------------------------------ decoding

Decoder = Callable[[bytes, int], tuple[Any, int]]


def _fixed(size: int, make: Callable[[bytes, int], Any]) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        end = pos + size
        if end > len(buf):
            raise DecodeError("value runs past the end of the buffer")
        return make(buf, pos), end

    return dec


def _const(value: Any) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        return value, pos

    return dec


def _unpacker(st: struct.Struct, wrap: Callable[[Any], Any]) -> Decoder:
    unpack = st.unpack_from
    return _fixed(st.size, lambda b, p: wrap(unpack(b, p)[0]))


def _bool_long(buf: bytes, pos: int) -> tuple[Any, int]:
    if pos >= len(buf):
        raise DecodeError("value runs past the end of the buffer")
    flag = buf[pos]
    if flag > 1:
        raise DecodeError(f"invalid boolean byte 0x{flag:02x}")
    return flag == 1, pos + 1


def _var(width: int, make: Callable[[bytes], Any]) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        if width == 1:
            if pos >= len(buf):
                raise DecodeError("value runs past the end of the buffer")
            n = buf[pos]
            pos += 1
        else:
            if pos + 4 > len(buf):
                raise DecodeError("value runs past the end of the buffer")
            (n,) = _I.unpack_from(buf, pos)
            pos += 4
        end = pos + n
        if end > len(buf):
            raise DecodeError("value runs past the end of the buffer")
        return make(bytes(buf[pos:end])), end

    return dec


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise DecodeError("string is not valid UTF-8") from None


def _ascii(raw: bytes) -> Symbol:
    try:
        return Symbol(raw.decode("ascii"))
    except UnicodeDecodeError:
        raise DecodeError("symbol is not ASCII") from None


def _char(buf: bytes, pos: int) -> tuple[Any, int]:
    if pos + 4 > len(buf):
        raise DecodeError("value runs past the end of the buffer")
    (cp,) = _I.unpack_from(buf, pos)
    try:
        return Char(chr(cp)), pos + 4
    except (ValueError, OverflowError):
        raise DecodeError(f"invalid char code point {cp}") from None


def _header(buf: bytes, pos: int, width: int) -> tuple[int, int, int]:
    """(count, body start, end) of a list or map."""
    if width == 1:
        if pos + 2 > len(buf):
            raise DecodeError("compound header runs past the end of the buffer")
        size, count = buf[pos], buf[pos + 1]
        start = pos + 2
        end = pos + 1 + size
    else:
        if pos + 8 > len(buf):
            raise DecodeError("compound header runs past the end of the buffer")
        size, count = _II.unpack_from(buf, pos)
        start = pos + 8
        end = pos + 4 + size
    if end > len(buf) or end < start:
        raise DecodeError("compound value runs past the end of the buffer")
    return count, start, end


def _list(width: int, depth: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        count, pos, end = _header(buf, pos, width)
        if count > end - pos:
            raise DecodeError("list count exceeds what its size can hold")
        items: list[Any] = []
        append = items.append
        decoders = _TABLES[depth + 1]
        for _ in range(count):
            if pos >= end:
                raise DecodeError("list holds fewer items than its count")
            code = buf[pos]
            if code == 0x40:  # null: most fields of most performatives
                append(None)
                pos += 1
                continue
            value, pos = decoders[code](buf, pos + 1)
            append(value)
        if pos != end:
            raise DecodeError("list size does not match its items")
        return items, end

    return dec


def _map(width: int, depth: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        count, pos, end = _header(buf, pos, width)
        if count % 2:
            raise DecodeError("map has an odd number of items")
        if count > end - pos:
            raise DecodeError("map count exceeds what its size can hold")
        decoders = _TABLES[depth + 1]
        out: dict[Any, Any] = {}
        for _ in range(count // 2):
            if pos >= end:
                raise DecodeError("map holds fewer items than its count")
            key, pos = decoders[buf[pos]](buf, pos + 1)
            if pos >= end:
                raise DecodeError("map holds fewer items than its count")
            value, pos = decoders[buf[pos]](buf, pos + 1)
            try:
                out[key] = value
            except TypeError:
                raise DecodeError("map key is not hashable here") from None
        if pos != end:
            raise DecodeError("map size does not match its items")
        return out, end

    return dec


def _array(width: int, depth: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        count, start, end = _header(buf, pos, width)
        # Every element is charged one byte of the array's encoding at least, zero-width ones
        # (nulls, true, uint0...) included: what a frame decodes to stays bounded by its size
        # (daemon/README.md §29.11).
        if count > end - pos:
            raise DecodeError("array count exceeds what its size can hold")
        pos = start
        if pos >= end:
            raise DecodeError("array has no element constructor")
        decoders = _TABLES[depth + 1]
        code = buf[pos]
        pos += 1
        descriptor = None
        if code == 0x00:
            descriptor, pos = _decode_in(decoders, buf, pos)
            if pos >= end:
                raise DecodeError("array has no element constructor")
            code = buf[pos]
            pos += 1
        element = decoders[code]
        items = []
        for _ in range(count):
            if pos > end:
                raise DecodeError("array holds fewer items than its count")
            value, pos = element(buf, pos)
            if descriptor is not None:
                value = _described_value(descriptor, value)
            items.append(value)
        if pos != end:
            raise DecodeError("array size does not match its items")
        return Array(_ELEMENT_NAMES.get(code, "described"), items), end

    return dec


def _described_value(descriptor: Any, value: Any) -> Any:
    if type(descriptor) is ULong and type(value) is list:
        cls = COMPOSITES.get(descriptor)
        if cls is not None:
            return cls.from_list(value)
    return Described(descriptor, value)


def _described(depth: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        decoders = _TABLES[depth + 1]
        if pos + 1 < len(buf) and buf[pos] == 0x53:  # the common case: smallulong descriptor
            descriptor: Any = ULong(buf[pos + 1])
            pos += 2
        else:
            descriptor, pos = _decode_in(decoders, buf, pos)
        if pos >= len(buf):
            raise DecodeError("described value has no value")
        value, pos = decoders[buf[pos]](buf, pos + 1)
        return _described_value(descriptor, value), pos

    return dec


def _decode_in(decoders: list[Decoder], buf: bytes, pos: int) -> tuple[Any, int]:
    if pos >= len(buf):
        raise DecodeError("expected a value, found the end of the buffer")
    return decoders[buf[pos]](buf, pos + 1)


def _invalid(code: int) -> Decoder:
    def dec(buf: bytes, pos: int) -> tuple[Any, int]:
        raise DecodeError(f"unknown AMQP type code 0x{code:02x}")

    return dec


DECODERS: list[Decoder] = [_invalid(c) for c in range(256)]
DECODERS[0x40] = _const(None)
DECODERS[0x41] = _const(True)
DECODERS[0x42] = _const(False)
DECODERS[0x56] = _bool_long
DECODERS[0x50] = _unpacker(_B, UByte)
DECODERS[0x60] = _unpacker(_H, UShort)
DECODERS[0x70] = _unpacker(_I, UInt)
DECODERS[0x52] = _unpacker(_B, UInt)
DECODERS[0x43] = _const(UInt(0))
DECODERS[0x80] = _unpacker(_Q, ULong)
DECODERS[0x53] = _unpacker(_B, ULong)
DECODERS[0x44] = _const(ULong(0))
DECODERS[0x51] = _unpacker(_b, Byte)
DECODERS[0x61] = _unpacker(_h, Short)
DECODERS[0x71] = _unpacker(_i, Int)
DECODERS[0x54] = _unpacker(_b, Int)
DECODERS[0x81] = _unpacker(_q, int)
DECODERS[0x55] = _unpacker(_b, int)
DECODERS[0x72] = _unpacker(_f, Float)
DECODERS[0x82] = _unpacker(_d, float)
DECODERS[0x73] = _char
DECODERS[0x74] = _fixed(4, lambda b, p: Decimal32(b[p : p + 4]))
DECODERS[0x84] = _fixed(8, lambda b, p: Decimal64(b[p : p + 8]))
DECODERS[0x94] = _fixed(16, lambda b, p: Decimal128(b[p : p + 16]))
DECODERS[0x83] = _unpacker(_q, Timestamp)
DECODERS[0x98] = _fixed(16, lambda b, p: uuid.UUID(bytes=bytes(b[p : p + 16])))
DECODERS[0xA0] = _var(1, bytes)
DECODERS[0xB0] = _var(4, bytes)
DECODERS[0xA1] = _var(1, _utf8)
DECODERS[0xB1] = _var(4, _utf8)
DECODERS[0xA3] = _var(1, _ascii)
DECODERS[0xB3] = _var(4, _ascii)


def _list0(buf: bytes, pos: int) -> tuple[Any, int]:
    return [], pos


DECODERS[0x45] = _list0


def _too_deep(buf: bytes, pos: int) -> tuple[Any, int]:
    raise DecodeError(f"values nested more than {MAX_DEPTH} deep")


# Compound values (described, list, map, array) nest at most MAX_DEPTH deep (daemon/README.md
# §29.11): one decoder table per depth, the compound decoders of table ``d`` reading their items
# with table ``d + 1``, those of the last table refusing. No counter, nothing shared between
# threads; ``DECODERS`` is the top level's table.
MAX_DEPTH = 32
_COMPOUNDS: dict[int, Callable[[int], Decoder]] = {
    0x00: _described,
    0xC0: lambda d: _list(1, d),
    0xD0: lambda d: _list(4, d),
    0xC1: lambda d: _map(1, d),
    0xD1: lambda d: _map(4, d),
    0xE0: lambda d: _array(1, d),
    0xF0: lambda d: _array(4, d),
}
_TABLES: list[list[Decoder]] = [DECODERS] + [list(DECODERS) for _ in range(MAX_DEPTH)]
for _depth, _table in enumerate(_TABLES):
    for _code, _make in _COMPOUNDS.items():
        _table[_code] = _make(_depth) if _depth < MAX_DEPTH else _too_deep


def decode(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """One value at ``pos``; returns it and the position after it."""
    if pos >= len(buf):
        raise DecodeError("expected a value, found the end of the buffer")
    return DECODERS[buf[pos]](buf, pos + 1)


def decode_all(buf: bytes) -> Any:
    value, pos = decode(buf)
    if pos != len(buf):
        raise DecodeError(f"{len(buf) - pos} bytes left after the value")
    return value


# ------------------------------------------------------------------ messages

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES = 0x70, 0x71, 0x72, 0x73
APPLICATION_PROPERTIES, DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x74, 0x75, 0x76, 0x77, 0x78
BATCH_FORMAT = 0x80013700  # a transfer whose data sections each hold one encoded message


class Message:
    """An AMQP message: its sections, ``None`` where absent (§3.2).

    The body is ``data`` (a list of binaries), ``value`` (one amqp-value) or ``sequence``
    (a list of amqp-sequence lists): ``body_kind`` says which.
    """

    __slots__ = (
        "application_properties",
        "body",
        "body_kind",
        "delivery_annotations",
        "footer",
        "header",
        "message_annotations",
        "properties",
    )

    def __init__(
        self,
        *,
        header: Composite | None = None,
        delivery_annotations: dict[Any, Any] | None = None,
        message_annotations: dict[Any, Any] | None = None,
        properties: Composite | None = None,
        application_properties: dict[Any, Any] | None = None,
        body: Any = None,
        body_kind: str = "data",
        footer: dict[Any, Any] | None = None,
    ) -> None:
        self.header = header
        self.delivery_annotations = delivery_annotations
        self.message_annotations = message_annotations
        self.properties = properties
        self.application_properties = application_properties
        self.body = [] if body is None and body_kind == "data" else body
        self.body_kind = body_kind
        self.footer = footer

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and all(
            getattr(self, n) == getattr(other, n) for n in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{n}={getattr(self, n)!r}" for n in self.__slots__ if getattr(self, n) is not None
        )
        return f"Message({shown})"


def _section_map(code: int, value: dict[Any, Any], out: bytearray) -> None:
    out += bytes((0x00, 0x53, code))
    _enc_map(value, out)


def encode_message(msg: Message) -> bytes:
    out = bytearray()
    if msg.header is not None:
        _enc_composite(msg.header, out)
    if msg.delivery_annotations is not None:
        _section_map(DELIVERY_ANNOTATIONS, msg.delivery_annotations, out)
    if msg.message_annotations is not None:
        _section_map(MESSAGE_ANNOTATIONS, msg.message_annotations, out)
    if msg.properties is not None:
        _enc_composite(msg.properties, out)
    if msg.application_properties is not None:
        _section_map(APPLICATION_PROPERTIES, msg.application_properties, out)
    if msg.body_kind == "data":
        for chunk in msg.body:
            out += b"\x00\x53\x75"
            _enc_binary(chunk, out)
    elif msg.body_kind == "sequence":
        for seq in msg.body:
            out += b"\x00\x53\x76"
            _enc_list(seq, out)
    else:
        out += b"\x00\x53\x77"
        encode_into(msg.body, out)
    if msg.footer is not None:
        _section_map(FOOTER, msg.footer, out)
    return bytes(out)


def decode_message(buf: bytes) -> Message:
    """Sections in any order the spec allows; unknown descriptors are an error."""
    msg = Message()
    pos = 0
    end = len(buf)
    data: list[bytes] = []
    sequences: list[Any] = []
    value: Any = None
    kind = ""
    while pos < end:
        if buf[pos] != 0x00:
            raise DecodeError("a message section must be a described value")
        if pos + 2 < end and buf[pos + 1] == 0x53:
            code = buf[pos + 2]
            pos += 3
        else:
            descriptor, pos = decode(buf, pos + 1)
            if not isinstance(descriptor, int):
                raise DecodeError(f"unknown message section {descriptor!r}")
            code = int(descriptor)
        if pos >= end:
            raise DecodeError("message section has no value")
        item, pos = DECODERS[buf[pos]](buf, pos + 1)
        if code == DATA:
            if not isinstance(item, bytes):
                raise DecodeError("a data section must hold binary")
            data.append(item)
            kind = kind or "data"
        elif code == AMQP_VALUE:
            value, kind = item, "value"
        elif code == AMQP_SEQUENCE:
            sequences.append(item)
            kind = kind or "sequence"
        elif code == HEADER:
            msg.header = COMPOSITES[HEADER].from_list(item or [])
        elif code == PROPERTIES:
            msg.properties = COMPOSITES[PROPERTIES].from_list(item or [])
        elif code in (DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, APPLICATION_PROPERTIES, FOOTER):
            if item is not None and not isinstance(item, dict):
                raise DecodeError(f"message section 0x{code:02x} must be a map")
            name = {
                DELIVERY_ANNOTATIONS: "delivery_annotations",
                MESSAGE_ANNOTATIONS: "message_annotations",
                APPLICATION_PROPERTIES: "application_properties",
                FOOTER: "footer",
            }[code]
            setattr(msg, name, item)
        else:
            raise DecodeError(f"unknown message section 0x{code:02x}")
    msg.body_kind = kind or "data"
    msg.body = value if kind == "value" else sequences if kind == "sequence" else data
    return msg


def split_batch(payload: bytes) -> list[bytes]:
    """The messages of a batch transfer (message format 0x80013700): one per data section."""
    return [bytes(chunk) for chunk in decode_message(payload).body]
