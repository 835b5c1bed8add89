"""Values as filters see them: the message view, system properties, .NET typing and text.

Owns the limits (expression length, action statements, nesting, the Int64 range),
:class:`FilterEvaluationError`, :class:`MessageView`, the system-property table, and how a
value prints (:func:`format_double`, :func:`to_text`) and is named in errors (:func:`cs_type`).

Rule 1: nothing here knows SQL; the lexer, parser, code generator and runtime all read values
and system properties through this module.
Rule 2: :data:`SYSTEM_PROPERTIES` is the one map from a ``sys.`` name to a Message field or
MessageView attribute; nothing else spells those field names for filters.
"""

from __future__ import annotations

import decimal
import math
import uuid
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, Final, NamedTuple

from sbctl.core.records import Message, PropertyValue
from sbctl.core.typed import TYPED, plain

MAX_EXPRESSION_LENGTH: Final = 1024  # filter and action strings (daemon/README.md §10.9, §14.5)
MAX_ACTION_STATEMENTS: Final = 32  # daemon/README.md §10.8, §14.5
MAX_NESTING: Final = 64  # keeps the generated code within Python's indentation limit
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


class FilterEvaluationError(Exception):
    """A runtime error while evaluating a filter or action; the broker dead-letters the message
    with reason = ``type_name`` and description = ``description`` (daemon/README.md §4.4)."""

    def __init__(self, type_name: str, description: str) -> None:
        super().__init__(f"{type_name}: {description}")
        self.type_name = type_name
        self.description = description


_NO_PROPERTIES: Final[Mapping[str, PropertyValue]] = MappingProxyType({})


class MessageView:
    """One message as filters see it: built once per message per send and shared, read-only,
    by every subscription's filters, so the case-insensitive name table is built at most once
    (lazily, on the first lookup that misses an exact-case name). Typed property values
    (sbctl.core.typed: a short, a ulong, a symbol...) are seen as their plain int, float or str,
    so numbers compare across AMQP types as Service Bus compares them."""

    __slots__ = ("_folded", "enqueued_time_ms", "message", "properties", "sequence_number", "size")

    def __init__(
        self, message: Message, *, sequence_number: int, enqueued_time_ms: int, size: int
    ) -> None:
        self.message = message
        self.sequence_number = sequence_number
        self.enqueued_time_ms = enqueued_time_ms
        self.size = size
        props: Mapping[str, PropertyValue] = message.application_properties or _NO_PROPERTIES
        for value in props.values():  # (a loop: the usual message has no typed value)
            if type(value) in TYPED:
                props = {k: plain(v) for k, v in props.items()}
                break
        self.properties = props
        self._folded: dict[str, PropertyValue] | None = None

    def ci(self, lowered: str, default: Any = None) -> Any:
        """The user property whose lower-cased name is ``lowered`` (first in message order)."""
        folded = self._folded
        if folded is None:
            folded = {}
            for name, value in self.properties.items():
                folded.setdefault(name.lower(), value)
            self._folded = folded
        return folded.get(lowered, default)


# -- System properties --------------------------------------------------------------------


class SystemProperty(NamedTuple):
    name: str  # as documented, e.g. "Label"
    source: str  # "m": a Message field, "v": a MessageView attribute, "c": a constant
    attr: Any  # the field or attribute name, or the constant
    settable: bool


def _sys(name: str, source: str, attr: Any, settable: bool = False) -> SystemProperty:
    return SystemProperty(name, source, attr, settable)


SYSTEM_PROPERTIES: Final[dict[str, SystemProperty]] = {
    p.name.lower(): p
    for p in (
        _sys("MessageId", "m", "message_id", True),
        _sys("CorrelationId", "m", "correlation_id", True),
        _sys("To", "m", "to", True),
        _sys("ReplyTo", "m", "reply_to", True),
        _sys("Label", "m", "subject", True),
        _sys("Subject", "m", "subject", True),
        _sys("SessionId", "m", "session_id", True),
        _sys("ReplyToSessionId", "m", "reply_to_session_id", True),
        _sys("ContentType", "m", "content_type", True),
        _sys("PartitionKey", "m", "partition_key", True),
        _sys("TimeToLive", "m", "time_to_live_ms", True),
        # daemon/README.md §7.3: settable, but the broker ignores it on the subscription itself.
        _sys("ScheduledEnqueueTimeUtc", "m", "scheduled_enqueue_time_ms", True),
        _sys("ScheduledEnqueueTime", "m", "scheduled_enqueue_time_ms", True),
        _sys("EnqueuedSequenceNumber", "m", "enqueued_sequence_number"),
        _sys("DeadLetterSource", "m", "dead_letter_source"),
        _sys("SequenceNumber", "v", "sequence_number"),
        _sys("EnqueuedTimeUtc", "v", "enqueued_time_ms"),
        _sys("EnqueuedTime", "v", "enqueued_time_ms"),
        _sys("Size", "v", "size"),
        _sys("DeliveryCount", "c", 0),
    )
}
STRING_FIELDS: Final = frozenset(
    {
        "message_id",
        "correlation_id",
        "to",
        "reply_to",
        "subject",
        "session_id",
        "reply_to_session_id",
        "content_type",
        "partition_key",
    }
)
ID_FIELDS: Final = frozenset({"message_id", "session_id", "reply_to_session_id", "partition_key"})


def sys_value(view: MessageView, prop: SystemProperty) -> Any:
    if prop.source == "m":
        return getattr(view.message, prop.attr)
    if prop.source == "v":
        return getattr(view, prop.attr)
    return prop.attr


# -- Types and text -----------------------------------------------------------------------

NUMERIC: Final = frozenset({int, float})  # by type identity, so bool is not a number
TEXTUAL: Final = frozenset({str, int, float, bool})
_CS_TYPES: Final[dict[type, str]] = {
    str: "System.String",
    int: "System.Int64",
    float: "System.Double",
    bool: "System.Boolean",
    datetime: "System.DateTime",
    uuid.UUID: "System.Guid",
    bytes: "System.Byte[]",
}


def cs_type(value: object) -> str:
    return _CS_TYPES.get(type(value), type(value).__name__)


def format_double(x: float) -> str:
    """``double.ToString()`` as .NET Core 3.0+ prints it: shortest round-trip digits,
    scientific notation from 1E+15 up and below 1E-04."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "-∞"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign, digit_tuple, exponent = decimal.Decimal(repr(x)).as_tuple()
    assert isinstance(exponent, int)
    raw = "".join(map(str, digit_tuple))
    digits = raw.rstrip("0")
    exponent += len(raw) - len(digits)
    point = len(digits) + exponent  # where the decimal point falls within the digits
    power = point - 1  # of the first digit
    neg = "-" if sign else ""
    if power >= 15 or power < -4:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{neg}{mantissa}E{'+' if power >= 0 else '-'}{abs(power):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{neg}{digits}{'0' * (point - len(digits))}"
    return f"{neg}{digits[:point]}.{digits[point:]}"


def to_text(value: PropertyValue) -> str:
    """``value.ToString()`` in .NET's invariant culture (``+`` on strings, SET conversions)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return format_double(value)
    if isinstance(value, datetime):  # DateTime.ToString() in the invariant culture
        return value.strftime("%m/%d/%Y %H:%M:%S")
    if isinstance(value, bytes):
        return "System.Byte[]"
    return "" if value is None else str(value)
