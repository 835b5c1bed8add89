"""AMQP 1.0 values that Python's own types cannot tell apart, and the composite types.

Decoding keeps every wire type: ``uint`` comes back as :class:`UInt`, ``symbol`` as
:class:`Symbol`, and so on, so that a value re-encodes to the same bytes. Plain Python
values map to the natural AMQP type: ``int`` is ``long``, ``float`` is ``double``, ``str``
is ``string``, ``bytes`` is ``binary``, ``uuid.UUID`` is ``uuid``, ``list`` and ``dict``
are ``list`` and ``map``.

Composite types (performatives, termini, outcomes, message sections that are lists) are
classes made by :func:`composite` from one declaration: name, descriptor code, fields and
their AMQP types (daemon/README.md §29; the AMQP 1.0 specification's field tables).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar


class UByte(int):
    __slots__ = ()


class UShort(int):
    __slots__ = ()


class UInt(int):
    __slots__ = ()


class ULong(int):
    __slots__ = ()


class Byte(int):
    __slots__ = ()


class Short(int):
    __slots__ = ()


class Int(int):
    __slots__ = ()


class Long(int):
    """A ``long`` that a stored property keeps as such even when it fits 32 bits (a plain
    ``int`` encodes as ``long`` too; the decoder gives plain ints)."""

    __slots__ = ()


class Timestamp(int):
    """Milliseconds since the Unix epoch."""

    __slots__ = ()


class Float(float):
    """A 32-bit IEEE 754 float (a plain ``float`` is a ``double``)."""

    __slots__ = ()


class Symbol(str):
    __slots__ = ()


class Char(str):
    """One Unicode code point (UTF-32 on the wire)."""

    __slots__ = ()


class Decimal32(bytes):
    """The 4 raw bytes of an IEEE 754 decimal32 (kept opaque)."""


class Decimal64(bytes):
    """The 8 raw bytes of an IEEE 754 decimal64 (kept opaque)."""


class Decimal128(bytes):
    """The 16 raw bytes of an IEEE 754 decimal128 (kept opaque)."""


class Array(list[Any]):
    """An AMQP array: every element has the type named by ``type`` (e.g. ``"symbol"``)."""

    __slots__ = ("type",)

    def __init__(self, type_: str, items: Any = ()) -> None:
        super().__init__(items)
        self.type = type_

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Array) and other.type == self.type and list.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        return f"Array({self.type!r}, {list.__repr__(self)})"


class Described:
    """A described value whose descriptor is not one of the known composites."""

    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor: Any, value: Any) -> None:
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Described)
            and type(other.descriptor) is type(self.descriptor)
            and other.descriptor == self.descriptor
            and other.value == self.value
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Described({self.descriptor!r}, {self.value!r})"


# Primitive type names a composite field may declare, and the wrapper that makes a plain
# Python value encode as that type. "*" keeps the value as it is.
WRAP: dict[str, Any] = {
    "ubyte": UByte,
    "ushort": UShort,
    "uint": UInt,
    "ulong": ULong,
    "byte": Byte,
    "short": Short,
    "int": Int,
    "long": int,
    "timestamp": Timestamp,
    "symbol": Symbol,
    "string": str,
    "binary": bytes,
    "boolean": bool,
}


def _symbols(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return Array("symbol", [Symbol(v) for v in value])
    return Symbol(value)


def _fields(value: Any) -> Any:
    return {Symbol(k) if type(k) is str else k: v for k, v in value.items()}


class Composite:
    """Base of the generated composite classes; fields are attributes, None when absent."""

    __slots__ = ()
    NAME: ClassVar[str] = ""
    CODE: ClassVar[int] = 0
    FIELDS: ClassVar[tuple[tuple[str, str], ...]] = ()
    NAMES: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self.NAMES
        for name, value in zip(names, args, strict=False):
            setattr(self, name, value)
        for name in names[len(args) :]:
            setattr(self, name, kwargs.pop(name, None))
        if kwargs:
            raise TypeError(f"{self.NAME} has no field {next(iter(kwargs))!r}")

    @classmethod
    def from_list(cls, values: list[Any]) -> Composite:
        obj = cls.__new__(cls)
        n = len(values)
        for i, name in enumerate(cls.NAMES):
            setattr(obj, name, values[i] if i < n else None)
        return obj

    def to_list(self) -> list[Any]:
        """The field values typed for the wire; trailing nulls are kept (old SDKs index
        fields by position)."""
        out = []
        for name, kind in self.FIELDS:
            value = getattr(self, name)
            if value is not None:
                if kind == "symbols":
                    value = _symbols(value)
                elif kind == "fields":
                    value = _fields(value)
                else:
                    wrap = WRAP.get(kind)
                    if wrap is not None and type(value) is not wrap:
                        value = wrap(value)
            out.append(value)
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in self.NAMES
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{n}={getattr(self, n)!r}" for n in self.NAMES if getattr(self, n) is not None
        )
        return f"{self.NAME}({shown})"


COMPOSITES: dict[int, type[Composite]] = {}


def composite(name: str, code: int, spec: str) -> type[Composite]:
    """Declare a composite: ``spec`` is ``"field:type field:type ..."`` in wire order."""
    fields = tuple(tuple(item.split(":")) for item in spec.split())
    names = tuple(f[0].replace("-", "_") for f in fields)
    attrs: dict[str, Any] = {
        "__slots__": names,
        "NAME": name,
        "NAMES": names,
        "CODE": code,
        "FIELDS": tuple((f[0].replace("-", "_"), f[1]) for f in fields),
    }
    if names:
        # A plain __init__ with one keyword per field (a performative is built for every
        # frame and message section: this is several times faster than the generic one).
        params = ", ".join(f"{n}=None" for n in names)
        stores = "".join(f"\n    self.{n} = {n}" for n in names)
        scope: dict[str, Any] = {}  # the names are the specs' below, never a peer's
        exec(f"def __init__(self, {params}):{stores}\n", scope)
        attrs["__init__"] = scope["__init__"]
    cls = type(name, (Composite,), attrs)
    COMPOSITES[code] = cls
    return cls


# Performatives (AMQP 1.0 §2.7).
Open = composite(
    "Open",
    0x10,
    "container-id:string hostname:string max-frame-size:uint channel-max:ushort "
    "idle-time-out:uint outgoing-locales:symbols incoming-locales:symbols "
    "offered-capabilities:symbols desired-capabilities:symbols properties:fields",
)
Begin = composite(
    "Begin",
    0x11,
    "remote-channel:ushort next-outgoing-id:uint incoming-window:uint outgoing-window:uint "
    "handle-max:uint offered-capabilities:symbols desired-capabilities:symbols properties:fields",
)
Attach = composite(
    "Attach",
    0x12,
    "name:string handle:uint role:boolean snd-settle-mode:ubyte rcv-settle-mode:ubyte "
    "source:* target:* unsettled:map incomplete-unsettled:boolean "
    "initial-delivery-count:uint max-message-size:ulong offered-capabilities:symbols "
    "desired-capabilities:symbols properties:fields",
)
Flow = composite(
    "Flow",
    0x13,
    "next-incoming-id:uint incoming-window:uint next-outgoing-id:uint outgoing-window:uint "
    "handle:uint delivery-count:uint link-credit:uint available:uint drain:boolean "
    "echo:boolean properties:fields",
)
Transfer = composite(
    "Transfer",
    0x14,
    "handle:uint delivery-id:uint delivery-tag:binary message-format:uint settled:boolean "
    "more:boolean rcv-settle-mode:ubyte state:* resume:boolean aborted:boolean "
    "batchable:boolean",
)
Disposition = composite(
    "Disposition",
    0x15,
    "role:boolean first:uint last:uint settled:boolean state:* batchable:boolean",
)
Detach = composite("Detach", 0x16, "handle:uint closed:boolean error:*")
End = composite("End", 0x17, "error:*")
Close = composite("Close", 0x18, "error:*")
Error = composite("Error", 0x1D, "condition:symbol description:string info:fields")

# Delivery states and outcomes (§3.4).
Received = composite("Received", 0x23, "section-number:uint section-offset:ulong")
Accepted = composite("Accepted", 0x24, "")
Rejected = composite("Rejected", 0x25, "error:*")
Released = composite("Released", 0x26, "")
Modified = composite(
    "Modified",
    0x27,
    "delivery-failed:boolean undeliverable-here:boolean message-annotations:fields",
)

# Termini (§3.5).
Source = composite(
    "Source",
    0x28,
    "address:string durable:uint expiry-policy:symbol timeout:uint dynamic:boolean "
    "dynamic-node-properties:fields distribution-mode:symbol filter:fields "
    "default-outcome:* outcomes:symbols capabilities:symbols",
)
Target = composite(
    "Target",
    0x29,
    "address:string durable:uint expiry-policy:symbol timeout:uint dynamic:boolean "
    "dynamic-node-properties:fields capabilities:symbols",
)

# Transactions (§4.5).
Coordinator = composite("Coordinator", 0x30, "capabilities:symbols")
Declare = composite("Declare", 0x31, "global-id:*")
Discharge = composite("Discharge", 0x32, "txn-id:binary fail:boolean")
Declared = composite("Declared", 0x33, "txn-id:binary")
TransactionalState = composite("TransactionalState", 0x34, "txn-id:binary outcome:*")

# SASL (§5.3).
SaslMechanisms = composite("SaslMechanisms", 0x40, "sasl-server-mechanisms:symbols")
SaslInit = composite("SaslInit", 0x41, "mechanism:symbol initial-response:binary hostname:string")
SaslChallenge = composite("SaslChallenge", 0x42, "challenge:binary")
SaslResponse = composite("SaslResponse", 0x43, "response:binary")
SaslOutcome = composite("SaslOutcome", 0x44, "code:ubyte additional-data:binary")

# Message sections that are lists (§3.2).
Header = composite(
    "Header",
    0x70,
    "durable:boolean priority:ubyte ttl:uint first-acquirer:boolean delivery-count:uint",
)
Properties = composite(
    "Properties",
    0x73,
    "message-id:* user-id:binary to:string subject:string reply-to:string correlation-id:* "
    "content-type:symbol content-encoding:symbol absolute-expiry-time:timestamp "
    "creation-time:timestamp group-id:string group-sequence:uint reply-to-group-id:string",
)

PERFORMATIVES = (Open, Begin, Attach, Flow, Transfer, Disposition, Detach, End, Close)
SASL_FRAMES = (SaslMechanisms, SaslInit, SaslChallenge, SaslResponse, SaslOutcome)
