"""Property values of the AMQP types that Python's own values cannot tell apart.

Service Bus keeps every AMQP primitive type a sender gives an application property or a
message annotation (daemon/README.md §1.5). sbctl holds the ones Python's plain values
cannot say as the classes of :mod:`sbctl.core.amqp.types`: ``UByte``, ``UShort``, ``UInt``,
``ULong``, ``Byte``, ``Short``, ``Long``, ``Float`` (32-bit), ``Char``, ``Symbol`` and
``Decimal32``/``Decimal64``/``Decimal128`` (their IEEE 754 bytes, kept opaque). The plain
values keep their meaning: ``str`` is a string, ``bool`` a boolean, ``float`` a double,
``bytes`` binary, ``uuid.UUID`` a uuid, an aware ``datetime`` a timestamp, and a plain
``int`` is an ``int`` when it fits 32 bits, else a ``long`` (else, from 2**63, a ``ulong``),
as the Python SDK sends an ``int`` and as records written before typed values kept them.
So an AMQP ``int`` is stored as a plain ``int`` and an AMQP ``long`` that fits 32 bits as a
``Long``.

JSON (``-o json``, ``send --input``, ``--property k=JSON``) shows the plain values as
themselves and the others as ``{"$type": NAME, "value": ...}``: NAME is the AMQP type
(``long``, ``short``, ``symbol``, ...); the value is a number for the numeric types, the
text for ``char`` and ``symbol``, the bytes in hex for the decimals.
"""

from __future__ import annotations

import base64
import math
import struct
import uuid
from datetime import UTC, datetime
from typing import Any

from sbctl.core.amqp import codec as amqp
from sbctl.core.amqp.types import (
    Byte,
    Char,
    Decimal32,
    Decimal64,
    Decimal128,
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
from sbctl.core.durations import format_instant, instant_ms
from sbctl.core.errors import BadRequest

# The integer types: class and range.
INTEGERS: dict[str, tuple[type[int], int, int]] = {
    "ubyte": (UByte, 0, 2**8 - 1),
    "ushort": (UShort, 0, 2**16 - 1),
    "uint": (UInt, 0, 2**32 - 1),
    "ulong": (ULong, 0, 2**64 - 1),
    "byte": (Byte, -(2**7), 2**7 - 1),
    "short": (Short, -(2**15), 2**15 - 1),
    "int": (Int, -(2**31), 2**31 - 1),
    "long": (Long, -(2**63), 2**63 - 1),
}
DECIMALS: dict[str, tuple[type[bytes], int]] = {
    "decimal32": (Decimal32, 4),
    "decimal64": (Decimal64, 8),
    "decimal128": (Decimal128, 16),
}
# The classes a stored value may have besides the plain ones, by their JSON name.
TYPED: dict[type, str] = {
    **{cls: name for name, (cls, _, _) in INTEGERS.items() if cls is not Int},
    **{cls: name for name, (cls, _) in DECIMALS.items()},
    Float: "float",
    Char: "char",
    Symbol: "symbol",
}
NAMES = (*INTEGERS, "float", "double", "char", "symbol", *DECIMALS, "string", "boolean")
INT32_MIN, INT32_MAX = INTEGERS["int"][1:]
LONG_MAX = INTEGERS["long"][2]


def stored(value: Any) -> Any:
    """``value`` as a stored property holds it: an ``Int`` as a plain ``int`` (the same
    thing), a ``Timestamp`` as an aware datetime; anything else unchanged."""
    if type(value) is Int:
        return int(value)
    if type(value) is Timestamp:
        return datetime.fromtimestamp(int(value) / 1000, tz=UTC)
    return value


def plain(value: Any) -> Any:
    """The plain Python value of a typed one (an int, float, str or bytes), as SQL filters
    compare it (numbers across types, daemon/README.md §1.5); others unchanged."""
    if type(value) not in TYPED:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value) if isinstance(value, str) else bytes(value)


def to_bytes(value: Any) -> bytes:
    """The AMQP encoding of a typed value (what a record keeps); ValueError naming the
    type when the value does not fit it (a ``Short(70000)``, a two-letter ``Char``)."""
    try:
        raw = amqp.encode(value)
        amqp.decode_all(raw)  # (a decimal of the wrong size encodes, but not decodes)
    except (struct.error, TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{value!r} is not a valid {TYPED[type(value)]}") from exc
    return raw


def from_bytes(raw: bytes | memoryview) -> Any:
    """The typed value :func:`to_bytes` encoded; ValueError for anything else."""
    try:
        value = amqp.decode_all(bytes(raw))
    except amqp.DecodeError as exc:
        raise ValueError(f"invalid typed value: {exc}") from None
    if type(value) is int:
        return Long(value)
    if type(value) not in TYPED:
        raise ValueError(f"a {type(value).__name__} is not a typed property value")
    return value


def to_json(value: Any) -> dict[str, Any]:
    """``{"$type": NAME, "value": ...}`` of a typed value."""
    name = TYPED[type(value)]
    shown: Any
    if isinstance(value, bytes):
        shown = value.hex()
    elif isinstance(value, str):
        shown = str(value)
    elif isinstance(value, float):
        shown = float(value)
    else:
        shown = int(value)
    return {"$type": name, "value": shown}


def from_json(name: str, raw: Any) -> Any:
    """The value of ``{"$type": name, "value": raw}`` for the AMQP type names (not the
    timestamp, uuid and binary forms); ValueError saying what is wrong."""
    if name in INTEGERS:
        cls, low, high = INTEGERS[name]
        if type(raw) is not int or not low <= raw <= high:
            raise ValueError(f"a {name} is an integer from {low} to {high}")
        return int(raw) if cls is Int else cls(raw)
    if name in DECIMALS:
        dec, size = DECIMALS[name]
        try:
            data = bytes.fromhex(raw) if isinstance(raw, str) else b""
        except ValueError:
            data = b""
        if len(data) != size:
            raise ValueError(f"a {name} is its {size} bytes in hex")
        return dec(data)
    return _from_json_other(name, raw)


def _from_json_other(name: str, raw: Any) -> Any:
    if name in ("float", "double"):
        if type(raw) not in (int, float):
            raise ValueError(f"a {name} is a number")
        if name == "double":
            return float(raw)
        if math.isfinite(raw) and abs(raw) > 3.4028234663852886e38:
            raise ValueError("the number is out of the float range")
        return Float(struct.unpack(">f", struct.pack(">f", raw))[0])
    if name == "char" and isinstance(raw, str) and len(raw) == 1:
        return Char(raw)
    if name == "symbol" and isinstance(raw, str) and raw.isascii():
        return Symbol(raw)
    if name == "string" and isinstance(raw, str):
        return raw
    if name == "boolean" and isinstance(raw, bool):
        return raw
    what = {"char": "one character", "symbol": "ASCII text", "string": "text"}
    raise ValueError(f"a {name} is {what.get(name, 'true or false')}")


def json_value(value: Any) -> Any:
    """A property or annotation value for JSON output: typed values as
    ``{"$type": ..., "value": ...}`` (a timestamp in ISO 8601 UTC, a UUID canonical, binary
    base64, the AMQP types as :func:`sbctl.core.to_json` shows them), plain values as
    they are."""
    kind = type(value)
    if value is None or kind in (str, int, float, bool):
        return value
    if kind in TYPED:
        return to_json(value)
    if isinstance(value, datetime):
        return {"$type": "timestamp", "value": format_instant(instant_ms(value))}
    if isinstance(value, uuid.UUID):
        return {"$type": "uuid", "value": str(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$type": "binary", "value": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, list):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    for base in (bool, int, float, str):  # subclasses (AMQP's Int, Timestamp...) as the base
        if isinstance(value, base):
            return base(value)
    return str(value)


# ------------------------------------------------------------------ AMQP values

INT32 = (INT32_MIN, INT32_MAX)
MAX_MS = 2**63 - 1  # what a stored record's millisecond fields hold
_KEPT = frozenset((bool, str, float, bytes, uuid.UUID, *TYPED))


def text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def property_value(value: Any, what: str = "application property") -> Any:
    """An AMQP value → the property value the broker and clients see, its AMQP type kept
    (sbctl.core.typed): an ``int`` as a plain int, a ``long`` that fits 32 bits as a
    ``Long``, a timestamp as an aware UTC datetime; the other types as the codec decoded
    them. BadRequest for a value that is no property value (a list, a map)."""
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


def amqp_value(value: Any) -> Any:
    """A property value → what goes on the wire (inverse of :func:`property_value`): a
    plain int an ``int`` when it fits 32 bits, else a ``long``, else (from 2**63) a
    ``ulong``; a datetime a timestamp."""
    kind = type(value)
    if kind is int:
        if INT32[0] <= value <= INT32[1]:
            return Int(value)
        return ULong(value) if value > LONG_MAX else value
    if kind is datetime:
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return Timestamp(round(value.timestamp() * 1000))
    return value


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
