"""Subscription-rule filters and rule actions (SPEC §10.4-10.9).

The broker compiles a rule once, when it is created or loaded, and evaluates it per message::

    view = MessageView(message, sequence_number=seq, enqueued_time_ms=now, size=size)
    for rule in rules:                       # one view per message, shared by every rule
        if rule.filter.matches(view):        # may raise FilterEvaluationError
            copy = rule.action.apply(view) if rule.action else message

A :class:`FilterEvaluationError` dead-letters the message with ``reason = type_name`` and
``description`` (SPEC §4.4, §10.7). Anything wrong with the rule itself (syntax, keys,
limits, read-only targets) is a :class:`~sbctl.errors.BadRequest` from the ``compile_*``
functions, naming the 1-based character position where there is one.

How SQL is compiled: tokenizer, recursive-descent parser, a small tree, then Python source
(one function per filter: straight-line statements over temporaries, nested ``if`` only for
AND/OR short-circuits) handed to ``compile()``. The source holds only identifiers made here
and numeric literals from ``repr(int)``/``repr(float)``; every string, name and pattern
from the user reaches it through the function's namespace, never spliced into source.

Semantics. Sources: learn.microsoft.com "Subscription Rule SQL Filter Syntax" and "SQL Action
Syntax", the .NET SDK; * marks this project's decisions where they are silent.

- Three-valued logic: a missing user property, a null value and NULL are *unknown*.
  F AND U = F, T OR U = T, any other operation with U gives U, NOT U = U; only TRUE
  selects. AND and OR evaluate left to right and stop at the first F (AND) or T (OR)*,
  so an error in a skipped operand is not raised. ``x IS NULL`` is TRUE for missing or null;
  ``EXISTS(x)`` is TRUE when the user property is present, even with a null value*.
- Types: integers are Int64, decimals and scientific numbers Double, 'text' String,
  TRUE/FALSE Boolean. Int64 with Double promotes to Double (C#). Arithmetic on Int64 that
  leaves the Int64 range raises ``OverflowException``*; Int64 ``/`` truncates toward zero and
  ``%`` takes the dividend's sign (C#); Int64 ``/`` or ``%`` by 0 raises
  ``DivideByZeroException``; Double follows IEEE (1.0/0 = infinity). ``+`` with a String
  operand concatenates, printing numbers and booleans as .NET does ("True", "1E+20")*.
  Any other arithmetic on a String or Boolean raises ``InvalidOperationException``.
- Comparisons: numbers numerically; strings ordinally and case-sensitively; booleans only
  with ``=``/``<>``. Values of incompatible types (String with number, Boolean with
  anything else) are never equal: ``=`` is FALSE and ``<>`` TRUE*, while ``<``, ``<=``,
  ``>``, ``>=`` and LIKE on them are unknown* (no dead letter; the message just does not
  match). Correlation filters compare with the same typed equality, so 5 does not match "5".
- ``IN``: unknown when the left operand is unknown (doc); otherwise TRUE if any item is equal
  as for ``=``, else FALSE* (unknown items do not make the result unknown).
- ``LIKE``: ``%`` any run, ``_`` one character, the ESCAPE character makes the next one
  literal; case-sensitive*; no ``[...]`` classes*. Constant patterns are matched without
  regular expressions where they are plain prefixes, suffixes or infixes.
- Names are case-insensitive: an exact-case user property wins, else the first property in
  the message whose lower-cased name matches*. ``property(name)``/``p(name)`` read a user
  property, or a system one when the name starts with ``sys.``*. ``newid()`` is a String
  GUID*.
- System properties (``sys.`` names, see :data:`SYSTEM_PROPERTIES`): an unset one is NULL.
  TimeToLive is Int64 milliseconds, times (EnqueuedTimeUtc, ScheduledEnqueueTimeUtc) are Int64
  milliseconds since the Unix epoch, DeliveryCount is 0 while filtering*. A ``sys.`` name
  that is not a system property compiles but raises ``FilterException`` when evaluated
  (doc), except inside EXISTS, which is then FALSE*.
- Grammar strictness*: a bare value is not a condition (``WHERE flag`` needs ``flag = TRUE``),
  IS NULL and EXISTS take a property, SqlFilter parameters (``@name``) are refused, and
  expressions nest at most :data:`MAX_NESTING` levels (parentheses, NOT, signs).
- Filters: ``None``/``{"type": "true"}`` and ``{"type": "false"}`` are the TrueFilter (SQL
  ``1=1``) and FalseFilter. A correlation filter with no condition at all is refused*: the
  .NET SDK would send it (its parameterless constructor), but the Terraform/Pulumi providers
  reject it ("at least one property must be set") and a match-everything rule is better
  written as a TrueFilter. Correlation system fields must be non-empty strings*.
- Actions: statements run in order, each seeing the earlier ones' effects*. SET on a user
  property keeps an existing Double a Double when given an Int64 (C# implicit conversion)*;
  REMOVE of a missing user property does nothing (doc). SET on a String system property
  converts numbers and booleans as above; TimeToLive and ScheduledEnqueueTimeUtc take
  numbers (milliseconds). Read-only system properties are refused at compile time; so is
  REMOVE sys.MessageId*. Setting MessageId to NULL or "", an id over 128 characters, a
  TimeToLive <= 0, or SessionId and PartitionKey to different values raises at runtime*.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Final, NamedTuple, NoReturn

import msgspec

from sbctl.codec import Message, PropertyValue
from sbctl.errors import BadRequest
from sbctl.limits import MAX_ID_LENGTH, MAX_TIME_MS

MAX_EXPRESSION_LENGTH: Final = 1024  # filter and action strings (SPEC §10.9, §14.5)
MAX_ACTION_STATEMENTS: Final = 32  # SPEC §10.8, §14.5
MAX_NESTING: Final = 64  # keeps the generated code within Python's indentation limit
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1


class FilterEvaluationError(Exception):
    """A runtime error while evaluating a filter or action; the broker dead-letters the message
    with reason = ``type_name`` and description = ``description`` (SPEC §4.4)."""

    def __init__(self, type_name: str, description: str) -> None:
        super().__init__(f"{type_name}: {description}")
        self.type_name = type_name
        self.description = description


_NO_PROPERTIES: Final[Mapping[str, PropertyValue]] = MappingProxyType({})


class MessageView:
    """One message as filters see it: built once per message per send and shared, read-only,
    by every subscription's filters, so the case-insensitive name table is built at most once
    (lazily, on the first lookup that misses an exact-case name)."""

    __slots__ = ("_folded", "enqueued_time_ms", "message", "properties", "sequence_number", "size")

    def __init__(
        self, message: Message, *, sequence_number: int, enqueued_time_ms: int, size: int
    ) -> None:
        self.message = message
        self.sequence_number = sequence_number
        self.enqueued_time_ms = enqueued_time_ms
        self.size = size
        self.properties: Mapping[str, PropertyValue] = (
            message.application_properties or _NO_PROPERTIES
        )
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
        # SPEC §7.3: settable, but the broker ignores it on the subscription itself.
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
_STRING_FIELDS: Final = frozenset(
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
_ID_FIELDS: Final = frozenset({"message_id", "session_id", "reply_to_session_id", "partition_key"})


def _sys_value(view: MessageView, prop: SystemProperty) -> Any:
    if prop.source == "m":
        return getattr(view.message, prop.attr)
    if prop.source == "v":
        return getattr(view, prop.attr)
    return prop.attr


# -- Runtime semantics, shared by the generated code ----------------------------------------

_MISSING: Final[Any] = object()
_NO_ESCAPE: Final[Any] = object()
_NUMERIC: Final = frozenset({int, float})  # by type identity, so bool is not a number
_TEXTUAL: Final = frozenset({str, int, float, bool})
_CS_TYPES: Final[dict[type, str]] = {
    str: "System.String",
    int: "System.Int64",
    float: "System.Double",
    bool: "System.Boolean",
}


def _cs_type(value: object) -> str:
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
    return "" if value is None else str(value)


def _overflow() -> FilterEvaluationError:
    return FilterEvaluationError(
        "OverflowException", "Arithmetic operation resulted in an overflow."
    )


def _divide_by_zero() -> FilterEvaluationError:
    return FilterEvaluationError("DivideByZeroException", "Attempted to divide by zero.")


def _binary_error(operator: str, a: object, b: object) -> FilterEvaluationError:
    return FilterEvaluationError(
        "InvalidOperationException",
        f"The binary operator {operator} is not defined for the types "
        f"'{_cs_type(a)}' and '{_cs_type(b)}'.",
    )


def _checked(n: int) -> int:
    if INT64_MIN <= n <= INT64_MAX:
        return n
    raise _overflow()


def _eq(a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is tb:
        return bool(a == b)
    if ta in _NUMERIC and tb in _NUMERIC:
        return float(a) == float(b)  # C#: long -> double
    return False


def _ne(a: Any, b: Any) -> bool | None:
    r = _eq(a, b)
    return None if r is None else not r


def _ordered(a: Any, b: Any) -> tuple[Any, Any] | None:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is tb and ta is not bool:
        return a, b
    if ta in _NUMERIC and tb in _NUMERIC:
        return float(a), float(b)
    return None


def _lt(a: Any, b: Any) -> bool | None:
    p = _ordered(a, b)
    return None if p is None else bool(p[0] < p[1])


def _le(a: Any, b: Any) -> bool | None:
    p = _ordered(a, b)
    return None if p is None else bool(p[0] <= p[1])


def _gt(a: Any, b: Any) -> bool | None:
    p = _ordered(a, b)
    return None if p is None else bool(p[0] > p[1])


def _ge(a: Any, b: Any) -> bool | None:
    p = _ordered(a, b)
    return None if p is None else bool(p[0] >= p[1])


def _add(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return _checked(a + b)
    if ta in _NUMERIC and tb in _NUMERIC:
        return float(a) + float(b)
    if ta is str and tb in _TEXTUAL:
        return _text(a + to_text(b))
    if tb is str and ta in _TEXTUAL:
        return _text(to_text(a) + b)
    raise _binary_error("Add", a, b)


MAX_TEXT = 1024 * 1024  # no message can hold a longer string (SPEC §13.1: 1 MB on Premium)


def _text(s: str) -> str:
    """A joined string, refused once it outgrows any message: 32 statements of
    ``SET v = v + v`` would otherwise build gigabytes in the daemon."""
    if len(s) > MAX_TEXT:
        raise FilterEvaluationError(
            "MessageSizeExceeded", f"a string of {len(s)} characters is longer than any message"
        )
    return s


def _sub(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return _checked(a - b)
    if ta in _NUMERIC and tb in _NUMERIC:
        return float(a) - float(b)
    raise _binary_error("Subtract", a, b)


def _mul(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return _checked(a * b)
    if ta in _NUMERIC and tb in _NUMERIC:
        return float(a) * float(b)
    raise _binary_error("Multiply", a, b)


def _div(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        if b == 0:
            raise _divide_by_zero()
        q = abs(a) // abs(b)
        return _checked(q if (a < 0) == (b < 0) else -q)
    if ta in _NUMERIC and tb in _NUMERIC:
        x, y = float(a), float(b)
        if y == 0.0:  # IEEE, as C# does; Python would raise
            if x == 0.0 or math.isnan(x):
                return math.nan
            return math.copysign(math.inf, x) * math.copysign(1.0, y)
        return x / y
    raise _binary_error("Divide", a, b)


def _mod(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        if b == 0:
            raise _divide_by_zero()
        r = abs(a) % abs(b)
        return -r if a < 0 else r
    if ta in _NUMERIC and tb in _NUMERIC:
        x, y = float(a), float(b)
        if y == 0.0 or math.isinf(x):
            return math.nan
        return math.fmod(x, y)
    raise _binary_error("Modulo", a, b)


def _neg(a: Any) -> Any:
    kind = type(a)
    if kind is int:
        return _checked(-a)
    if kind is float:
        return -a
    if a is None:
        return None
    raise FilterEvaluationError(
        "InvalidOperationException",
        f"The unary operator Negate is not defined for the type '{_cs_type(a)}'.",
    )


def _pos(a: Any) -> Any:
    if a is None or type(a) in _NUMERIC:
        return a
    raise FilterEvaluationError(
        "InvalidOperationException",
        f"The unary operator UnaryPlus is not defined for the type '{_cs_type(a)}'.",
    )


def _in(x: Any, items: tuple[Any, ...]) -> bool | None:
    if x is None:
        return None
    return any(_eq(x, item) is True for item in items)


def _like(s: Any, pattern: Any, escape: Any) -> bool | None:
    if s is None or pattern is None or escape is None:
        return None
    if type(pattern) is not str:
        raise FilterEvaluationError(
            "ArgumentException", f"The LIKE pattern must be a string, not {_cs_type(pattern)}."
        )
    if escape is _NO_ESCAPE:
        escape = None
    elif type(escape) is not str or len(escape) != 1:
        raise FilterEvaluationError(
            "ArgumentException", "The LIKE escape must be a string of one character."
        )
    if type(s) is not str:
        return None
    try:
        match = _like_callable(pattern, escape)
    except ValueError as exc:
        raise FilterEvaluationError("ArgumentException", str(exc)) from None
    return match(s)


_LIT, _ANY, _ONE = 0, 1, 2


def like_plan(pattern: str, escape: str | None) -> tuple[str, Any]:
    """How to match a LIKE pattern: ("eq" | "prefix" | "suffix" | "contains", text),
    ("any", None) or ("regex", compiled). ValueError for a pattern ending in its escape."""
    items: list[tuple[int, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        kind = _LIT
        if c == escape:
            if i + 1 == n:
                raise ValueError("The LIKE pattern ends with its escape character.")
            i += 1
            c = pattern[i]
        elif c == "%":
            kind = _ANY
        elif c == "_":
            kind = _ONE
        i += 1
        if kind == _LIT and items and items[-1][0] == _LIT:
            items[-1] = (_LIT, items[-1][1] + c)
        elif not (kind == _ANY and items and items[-1][0] == _ANY):
            items.append((kind, c))
    shape = tuple(kind for kind, _ in items)
    texts = [text for kind, text in items if kind == _LIT]
    if shape in ((), (_LIT,)):
        return "eq", texts[0] if texts else ""
    if shape == (_ANY,):
        return "any", None
    if shape == (_LIT, _ANY):
        return "prefix", texts[0]
    if shape == (_ANY, _LIT):
        return "suffix", texts[0]
    if shape == (_ANY, _LIT, _ANY):
        return "contains", texts[0]
    if _ANY in shape:
        return "regex", _Glob(items)  # never a backtracking regex: see _Glob
    regex = "".join(re.escape(text) if kind == _LIT else "." for kind, text in items)
    return "regex", re.compile(regex, re.DOTALL)


class _Glob:
    """A LIKE pattern with ``%`` matched in linear passes, never by a backtracking regex
    (``.*a.*a.*a...`` would take exponential time on a long non-matching value, and one
    send would stall the daemon). The pieces between ``%`` have fixed lengths (literals and
    ``_``), so the leftmost place each middle piece fits is always a right one. Has the
    ``fullmatch`` of a compiled regex: True or None."""

    __slots__ = ("head", "middle", "min_length", "tail")

    def __init__(self, items: list[tuple[int, str]]) -> None:
        pieces: list[list[tuple[int, str]]] = [[]]
        for kind, text in items:
            if kind == _ANY:
                pieces.append([])
            else:
                pieces[-1].append((kind, text))
        compiled = [self._piece(p) for p in pieces]
        self.head = compiled[0]
        self.tail = compiled[-1]
        self.middle = [c for c in compiled[1:-1] if c[1]]
        self.min_length = sum(length for _rx, length in compiled)

    @staticmethod
    def _piece(items: list[tuple[int, str]]) -> tuple[re.Pattern[str], int]:
        regex = "".join(re.escape(text) if kind == _LIT else "." for kind, text in items)
        length = sum(len(text) if kind == _LIT else 1 for kind, text in items)
        return re.compile(regex, re.DOTALL), length

    def fullmatch(self, s: str) -> bool | None:
        if len(s) < self.min_length:
            return None
        head, head_length = self.head
        tail, tail_length = self.tail
        end = len(s) - tail_length
        if head_length and head.match(s) is None:
            return None
        if tail_length and tail.fullmatch(s, end) is None:
            return None
        pos = head_length
        for rx, _length in self.middle:
            m = rx.search(s, pos, end)
            if m is None:
                return None
            pos = m.end()
        return True


@functools.lru_cache(maxsize=512)
def _like_callable(pattern: str, escape: str | None) -> Callable[[str], bool]:
    kind, arg = like_plan(pattern, escape)
    if kind == "eq":
        return lambda s: s == arg
    if kind == "prefix":
        return lambda s: s.startswith(arg)
    if kind == "suffix":
        return lambda s: s.endswith(arg)
    if kind == "contains":
        return lambda s: arg in s
    if kind == "any":
        return lambda s: True
    return lambda s: arg.fullmatch(s) is not None


def _no_such_system_property(name: str) -> FilterEvaluationError:
    return FilterEvaluationError(
        "FilterException", f"The system property 'sys.{name}' does not exist."
    )


def _nosys(name: str) -> NoReturn:
    raise _no_such_system_property(name)


def _newid() -> str:
    return str(uuid.uuid4())


def _dynprop(view: MessageView, name: Any) -> Any:
    """``property(name)``: a user property, or a system one for a ``sys.`` prefix."""
    if name is None:
        return None
    if type(name) is not str:
        raise FilterEvaluationError(
            "ArgumentException", f"property() needs a string name, not {_cs_type(name)}."
        )
    prefix = name[:5].lower()
    if prefix.startswith("sys."):
        prop = SYSTEM_PROPERTIES.get(name[4:].lower())
        if prop is None:
            raise _no_such_system_property(name[4:])
        return _sys_value(view, prop)
    if prefix == "user.":
        name = name[5:]
    value = view.properties.get(name, _MISSING)
    return view.ci(name.lower()) if value is _MISSING else value


def _internal(exc: BaseException) -> FilterEvaluationError:
    return FilterEvaluationError("InternalError", f"{type(exc).__name__}: {exc}")


_RUNTIME: Final[dict[str, Any]] = {
    "_M": _MISSING,
    "_NOESC": _NO_ESCAPE,
    "_FEE": FilterEvaluationError,
    "_internal": _internal,
    "_eq": _eq,
    "_ne": _ne,
    "_lt": _lt,
    "_le": _le,
    "_gt": _gt,
    "_ge": _ge,
    "_add": _add,
    "_sub": _sub,
    "_mul": _mul,
    "_div": _div,
    "_mod": _mod,
    "_neg": _neg,
    "_pos": _pos,
    "_in": _in,
    "_like": _like,
    "_newid": _newid,
    "_dynprop": _dynprop,
    "_nosys": _nosys,
}
_CMP_FUNCTIONS: Final[dict[str, Callable[[Any, Any], bool | None]]] = {
    "=": _eq,
    "<>": _ne,
    "<": _lt,
    "<=": _le,
    ">": _gt,
    ">=": _ge,
}
_CMP_NAMES: Final = {"=": "_eq", "<>": "_ne", "<": "_lt", "<=": "_le", ">": "_gt", ">=": "_ge"}
_CMP_PYTHON: Final = {"=": "==", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_CMP_SWAPPED: Final = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_ARITH_NAMES: Final = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}


# -- Tokens ---------------------------------------------------------------------------------


class _Syntax(Exception):
    def __init__(self, pos: int, message: str, label: str = "syntax error") -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message
        self.label = label


class _Tok(NamedTuple):
    kind: str  # "int" "float" "str" "id" (regular identifier) "qid" (delimited) "op" "eof"
    value: Any
    pos: int  # 0-based start
    end: int


_DIGITS: Final = "0123456789"
_TWO_CHAR_OPS: Final = ("<>", "!=", ">=", "<=")
_ONE_CHAR_OPS: Final = "=<>+-*/%(),.;"
_KEYWORDS: Final = frozenset(
    {"AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE"}
)


def _scan_quoted(text: str, start: int, close: str, what: str) -> tuple[str, int]:
    parts = []
    i = start + 1
    while True:
        j = text.find(close, i)
        if j < 0:
            raise _Syntax(start, f"{what} starting here is never closed with {close}")
        parts.append(text[i:j])
        if text.startswith(close, j + 1):  # doubled: an escaped closing character
            parts.append(close)
            i = j + 2
            continue
        return "".join(parts), j + 1


def _scan_number(text: str, start: int) -> tuple[_Tok, int]:
    n = len(text)
    j = start
    while j < n and text[j] in _DIGITS:
        j += 1
    is_float = False
    if j < n and text[j] == ".":
        is_float = True
        j += 1
        while j < n and text[j] in _DIGITS:
            j += 1
    if j < n and text[j] in "eE":
        k = j + 1
        if k < n and text[k] in "+-":
            k += 1
        if k < n and text[k] in _DIGITS:
            is_float = True
            j = k
            while j < n and text[j] in _DIGITS:
                j += 1
    if j < n and (text[j].isalnum() or text[j] == "_"):
        raise _Syntax(j, f"unexpected character {text[j]!r} after a number")
    literal = text[start:j]
    if not is_float:
        return _Tok("int", int(literal), start, j), j
    value = float(literal)
    if math.isinf(value):
        raise _Syntax(start, f"the number {literal} is out of the Double range")
    return _Tok("float", value, start, j), j


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        start = i
        if c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            tok, i = _scan_number(text, i)
            toks.append(tok)
        elif c.isalpha():  # [[:IsLetter:]][_[:IsLetter:][:IsDigit:]]* (the doc)
            i += 1
            while i < n and (text[i].isalpha() or text[i].isdecimal() or text[i] == "_"):
                i += 1
            toks.append(_Tok("id", text[start:i], start, i))
        elif c == "'":
            value, i = _scan_quoted(text, i, "'", "a string")
            toks.append(_Tok("str", value, start, i))
        elif c == "[":
            value, i = _scan_quoted(text, i, "]", "a [delimited] name")
            toks.append(_Tok("qid", value, start, i))
        elif c == '"':
            value, i = _scan_quoted(text, i, '"', 'a "quoted" name')
            toks.append(_Tok("qid", value, start, i))
        elif text.startswith(_TWO_CHAR_OPS, i):
            toks.append(_Tok("op", text[i : i + 2], start, i + 2))
            i += 2
        elif c in _ONE_CHAR_OPS:
            toks.append(_Tok("op", c, start, i + 1))
            i += 1
        elif c == "@":
            raise _Syntax(i, "parameters such as @name are not supported; write the value itself")
        else:
            raise _Syntax(i, f"unexpected character {c!r}")
    toks.append(_Tok("eof", None, n, n))
    return toks


# -- Tree -----------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Node:
    pos: int  # 0-based; error positions are 1-based
    is_pred: ClassVar[bool] = False


@dataclass(slots=True, eq=False)
class _Const(_Node):
    value: PropertyValue


@dataclass(slots=True, eq=False)
class _Prop(_Node):
    scope: str  # "user" | "sys"
    name: str
    system: SystemProperty | None = dataclasses.field(init=False)  # None: user, or no such sys name

    def __post_init__(self) -> None:
        self.system = SYSTEM_PROPERTIES.get(self.name.lower()) if self.scope == "sys" else None


@dataclass(slots=True, eq=False)
class _Call(_Node):
    function: str  # "newid" | "property"
    arg: _Node | None


@dataclass(slots=True, eq=False)
class _Unary(_Node):
    op: str
    operand: _Node


@dataclass(slots=True, eq=False)
class _Arith(_Node):
    """A left-associative chain at one precedence level: first (op operand)*."""

    first: _Node
    rest: list[tuple[str, _Node]]


@dataclass(slots=True, eq=False)
class _Cmp(_Node):
    is_pred: ClassVar[bool] = True
    op: str
    left: _Node
    right: _Node


@dataclass(slots=True, eq=False)
class _IsNull(_Node):
    is_pred: ClassVar[bool] = True
    prop: _Prop
    negated: bool


@dataclass(slots=True, eq=False)
class _Exists(_Node):
    is_pred: ClassVar[bool] = True
    prop: _Prop


@dataclass(slots=True, eq=False)
class _In(_Node):
    is_pred: ClassVar[bool] = True
    operand: _Node
    items: list[_Node]
    negated: bool


@dataclass(slots=True, eq=False)
class _Like(_Node):
    is_pred: ClassVar[bool] = True
    operand: _Node
    pattern: _Node
    escape: _Node | None
    negated: bool
    plan: tuple[str, Any] | None  # like_plan() of a constant pattern and escape


@dataclass(slots=True, eq=False)
class _Not(_Node):
    is_pred: ClassVar[bool] = True
    operand: _Node


@dataclass(slots=True, eq=False)
class _Logic(_Node):
    is_pred: ClassVar[bool] = True
    op: str  # "AND" | "OR"
    operands: list[_Node]


class _Statement(NamedTuple):
    remove: bool
    target: _Prop
    value: _Node | None


# -- Parser ---------------------------------------------------------------------------------


class _Parser:
    """Recursive descent; precedence from loosest: OR, AND, NOT, predicates, + -, * / %, signs."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0
        self.depth = 0

    # tokens

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    @staticmethod
    def is_kw(tok: _Tok, *words: str) -> bool:
        return tok.kind == "id" and tok.value.upper() in words

    @staticmethod
    def is_op(tok: _Tok, *ops: str) -> bool:
        return tok.kind == "op" and tok.value in ops

    def show(self, tok: _Tok) -> str:
        if tok.kind == "eof":
            return "the end"
        text = self.text[tok.pos : tok.end]
        return repr(text if len(text) <= 24 else text[:21] + "...")

    def found(self, tok: _Tok) -> str:
        return "" if tok.kind == "eof" else f", found {self.show(tok)}"

    def after(self) -> str:
        """' after <previous token>' for messages."""
        return f" after {self.show(self.toks[self.i - 1])}" if self.i else ""

    @staticmethod
    def fail(tok: _Tok | _Node, message: str, label: str = "syntax error") -> NoReturn:
        raise _Syntax(tok.pos, message, label)

    def expect_op(self, op: str, what: str) -> _Tok:
        tok = self.peek()
        if not self.is_op(tok, op):
            self.fail(tok, f"expected {what}{self.after()}{self.found(tok)}")
        return self.take()

    def enter(self, tok: _Tok) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            self.fail(tok, f"the expression nests more than {MAX_NESTING} levels deep")

    def need_pred(self, node: _Node) -> None:
        if not node.is_pred:
            tok = self.peek()
            self.fail(
                tok,
                "expected a comparison (=, <>, !=, <, <=, >, >=), IS, IN or LIKE"
                f"{self.after()}{self.found(tok)}",
            )

    def need_value(self, node: _Node) -> None:
        if node.is_pred:
            self.fail(node, "expected a value here, found a condition")

    # entry points

    def parse_filter(self) -> _Node:
        node = self.parse_or()
        self.need_pred(node)
        tok = self.peek()
        if tok.kind != "eof":
            self.fail(tok, f"expected AND, OR or the end of the expression{self.found(tok)}")
        return node

    def parse_action(self) -> list[_Statement]:
        statements: list[_Statement] = []
        while (tok := self.peek()).kind != "eof":
            if not self.is_kw(tok, "SET", "REMOVE"):
                self.fail(tok, f"expected SET or REMOVE{self.after()}{self.found(tok)}")
            if len(statements) == MAX_ACTION_STATEMENTS:
                self.fail(
                    tok,
                    f"an action has at most {MAX_ACTION_STATEMENTS} statements",
                    "error",
                )
            self.take()
            remove = tok.value.upper() == "REMOVE"
            target_tok = self.take()
            if target_tok.kind not in ("id", "qid") or (
                target_tok.kind == "id"
                and target_tok.value.upper() in _KEYWORDS
                and not self.is_op(self.peek(), ".")
            ):
                self.fail(target_tok, f"expected a property after {self.show(tok)}")
            target = self.parse_property(target_tok)
            self.check_target(target, remove)
            value = None
            if not remove:
                self.expect_op("=", "'='")
                value = self.parse_additive()
                self.need_value(value)
            statements.append(_Statement(remove, target, value))
            nxt = self.peek()
            if self.is_op(nxt, ";"):
                self.take()
            elif nxt.kind != "eof" and not self.is_kw(nxt, "SET", "REMOVE"):
                self.fail(
                    nxt, f"expected ';', SET, REMOVE or the end of the action{self.found(nxt)}"
                )
        return statements

    def check_target(self, target: _Prop, remove: bool) -> None:
        if target.scope != "sys":
            return
        prop = target.system
        if prop is None:
            self.fail(target, f"sys.{target.name} is not a system property", "error")
        if not prop.settable:
            self.fail(target, f"sys.{prop.name} is read-only", "error")
        if remove and prop.attr == "message_id":
            self.fail(target, "sys.MessageId cannot be removed", "error")

    # predicates

    def parse_or(self) -> _Node:
        return self.parse_logic("OR", self.parse_and)

    def parse_and(self) -> _Node:
        return self.parse_logic("AND", self.parse_not)

    def parse_logic(self, word: str, operand: Callable[[], _Node]) -> _Node:
        first = operand()
        if not self.is_kw(self.peek(), word):
            return first
        self.need_pred(first)
        operands: list[_Node] = []
        node = first
        while True:
            # a AND (b AND c) is a AND b AND c, evaluation order included: flatten
            if isinstance(node, _Logic) and node.op == word:
                operands.extend(node.operands)
            else:
                operands.append(node)
            if not self.is_kw(self.peek(), word):
                return _Logic(first.pos, word, operands)
            self.take()
            node = operand()
            self.need_pred(node)

    def parse_not(self) -> _Node:
        tok = self.peek()
        if not self.is_kw(tok, "NOT"):
            return self.parse_predicate()
        self.take()
        self.enter(tok)
        operand = self.parse_not()
        self.need_pred(operand)
        self.depth -= 1
        if isinstance(operand, _Not):  # NOT NOT x is x, unknown included
            return operand.operand
        return _Not(tok.pos, operand)

    def parse_predicate(self) -> _Node:
        tok = self.peek()
        if self.is_kw(tok, "EXISTS"):
            self.take()
            self.expect_op("(", "'('")
            name_tok = self.take()
            if name_tok.kind not in ("id", "qid") or (
                name_tok.kind == "id"
                and name_tok.value.upper() in _KEYWORDS
                and not self.is_op(self.peek(), ".")
            ):
                self.fail(
                    name_tok, f"expected a property name inside EXISTS(){self.found(name_tok)}"
                )
            prop = self.parse_property(name_tok)
            self.expect_op(")", "')'")
            return _Exists(tok.pos, prop)
        left = self.parse_additive()
        tok = self.peek()
        if tok.kind == "op" and tok.value in ("=", "<>", "!=", "<", "<=", ">", ">="):
            self.need_value(left)
            self.take()
            right = self.parse_additive()
            self.need_value(right)
            return _Cmp(left.pos, "<>" if tok.value == "!=" else tok.value, left, right)
        if self.is_kw(tok, "IS"):
            if not isinstance(left, _Prop):
                self.fail(tok, "IS [NOT] NULL applies to a property only")
            self.take()
            negated = self.is_kw(self.peek(), "NOT")
            if negated:
                self.take()
            if not self.is_kw(self.peek(), "NULL"):
                self.fail(self.peek(), f"expected NULL{self.after()}{self.found(self.peek())}")
            self.take()
            return _IsNull(left.pos, left, negated)
        negated = False
        if self.is_kw(tok, "NOT"):
            self.need_value(left)
            self.take()
            negated = True
            tok = self.peek()
            if not self.is_kw(tok, "IN", "LIKE"):
                self.fail(tok, f"expected IN or LIKE after 'NOT'{self.found(tok)}")
        if self.is_kw(tok, "IN"):
            self.need_value(left)
            self.take()
            return self.parse_in(left, negated)
        if self.is_kw(tok, "LIKE"):
            self.need_value(left)
            self.take()
            return self.parse_like(left, negated)
        return left

    def parse_in(self, operand: _Node, negated: bool) -> _Node:
        self.expect_op("(", "'('")
        items = []
        while True:
            item = self.parse_additive()
            self.need_value(item)
            items.append(item)
            tok = self.take()
            if self.is_op(tok, ")"):
                return _In(operand.pos, operand, items, negated)
            if not self.is_op(tok, ","):
                self.fail(tok, f"expected ',' or ')' in the IN list{self.found(tok)}")

    def parse_like(self, operand: _Node, negated: bool) -> _Node:
        pattern = self.parse_additive()
        self.need_value(pattern)
        escape = None
        if self.is_kw(self.peek(), "ESCAPE"):
            self.take()
            escape = self.parse_additive()
            self.need_value(escape)
        plan = None
        if isinstance(pattern, _Const) and pattern.value is not None:
            if type(pattern.value) is not str:
                self.fail(pattern, "the LIKE pattern must be a string", "error")
            escape_char: Any = None
            if escape is not None:
                if not isinstance(escape, _Const):
                    return _Like(operand.pos, operand, pattern, escape, negated, None)
                escape_char = escape.value
                if escape_char is None:
                    return _Like(operand.pos, operand, pattern, escape, negated, None)
                if type(escape_char) is not str or len(escape_char) != 1:
                    self.fail(escape, "ESCAPE takes a string of exactly one character", "error")
            try:
                plan = like_plan(pattern.value, escape_char)
            except ValueError:
                self.fail(pattern, "the LIKE pattern ends with its escape character", "error")
        elif (
            isinstance(escape, _Const)
            and escape.value is not None
            and (type(escape.value) is not str or len(escape.value) != 1)
        ):
            self.fail(escape, "ESCAPE takes a string of exactly one character", "error")
        return _Like(operand.pos, operand, pattern, escape, negated, plan)

    # expressions

    def parse_additive(self) -> _Node:
        return self.parse_chain(("+", "-"), self.parse_multiplicative)

    def parse_multiplicative(self) -> _Node:
        return self.parse_chain(("*", "/", "%"), self.parse_unary)

    def parse_chain(self, ops: tuple[str, ...], operand: Callable[[], _Node]) -> _Node:
        first = operand()
        rest: list[tuple[str, _Node]] = []
        while (tok := self.peek()).kind == "op" and tok.value in ops:
            self.need_value(first)
            self.take()
            node = operand()
            self.need_value(node)
            rest.append((tok.value, node))
        return _Arith(first.pos, first, rest) if rest else first

    def parse_unary(self) -> _Node:
        tok = self.peek()
        if not self.is_op(tok, "+", "-"):
            return self.parse_primary()
        self.take()
        nxt = self.peek()
        if tok.value == "-" and nxt.kind == "int" and nxt.value == -INT64_MIN:
            self.take()  # -9223372036854775808: the one literal only valid negated
            return _Const(tok.pos, INT64_MIN)
        self.enter(tok)
        operand = self.parse_unary()
        self.need_value(operand)
        self.depth -= 1
        if isinstance(operand, _Const) and type(operand.value) in _NUMERIC:
            value = operand.value
            assert isinstance(value, int | float)
            if tok.value == "-":
                value = -value
                if type(value) is int and value > INT64_MAX:
                    self.fail(tok, "the integer is out of the Int64 range", "error")
            return _Const(tok.pos, value)
        return _Unary(tok.pos, tok.value, operand)

    def parse_primary(self) -> _Node:
        tok = self.peek()
        kind = tok.kind
        if kind == "int":
            if tok.value > INT64_MAX:
                self.fail(tok, "the integer is out of the Int64 range", "error")
            self.take()
            return _Const(tok.pos, tok.value)
        if kind in ("float", "str"):
            self.take()
            return _Const(tok.pos, tok.value)
        if self.is_op(tok, "("):
            self.take()
            self.enter(tok)
            node = self.parse_or()
            self.depth -= 1
            close = self.peek()
            if not self.is_op(close, ")"):
                what = "AND, OR or ')'" if node.is_pred else "an operator or ')'"
                self.fail(
                    close,
                    f"expected {what} to close the '(' at position {tok.pos + 1}"
                    f"{self.found(close)}",
                )
            self.take()
            node.pos = tok.pos
            return node
        if kind == "id":
            word = tok.value.upper()
            if word in ("TRUE", "FALSE", "NULL"):
                self.take()
                return _Const(tok.pos, None if word == "NULL" else word == "TRUE")
            if word not in _KEYWORDS:
                self.take()
                if self.is_op(self.peek(), "("):
                    return self.parse_call(tok)
                return self.parse_property(tok)
        if kind == "qid":
            self.take()
            return self.parse_property(tok)
        self.fail(tok, f"expected an expression{self.after()}{self.found(tok)}")

    def parse_call(self, tok: _Tok) -> _Node:
        name = tok.value.lower()
        self.take()  # '('
        if name == "newid":
            close = self.take()
            if not self.is_op(close, ")"):
                self.fail(close, f"newid() takes no argument{self.found(close)}")
            return _Call(tok.pos, "newid", None)
        if name in ("property", "p"):
            arg = self.parse_additive()
            self.need_value(arg)
            close = self.take()
            if not self.is_op(close, ")"):
                self.fail(close, f"{tok.value}() takes one argument, then ')'{self.found(close)}")
            return _Call(tok.pos, "property", arg)
        self.fail(
            tok, f"unknown function {tok.value}(): the functions are newid(), property(), p()"
        )

    def parse_property(self, tok: _Tok) -> _Prop:
        """A property from its first token, already taken: name, [name], "name" or scope.name."""
        scope, name = "user", tok.value
        if tok.kind == "id" and self.is_op(self.peek(), "."):
            if tok.value.lower() not in ("sys", "user"):
                self.fail(
                    tok,
                    f"unknown scope {self.show(tok)}: expected sys or user "
                    "(write names containing '.' as [a.b])",
                )
            scope = tok.value.lower()
            dot = self.take()
            name_tok = self.take()
            if name_tok.kind not in ("id", "qid"):
                self.fail(name_tok, f"expected a property name after '{tok.value}{dot.value}'")
            name = name_tok.value
        if self.is_op(self.peek(), "."):
            self.fail(self.peek(), "names containing '.' must be delimited, as in [order.id]")
        if not name:
            self.fail(tok, "a property name cannot be empty")
        return _Prop(tok.pos, scope, name)


# -- Code generation ------------------------------------------------------------------------

_NOT_CONST: Final[Any] = object()
_LITERALS: Final = {"True": True, "False": False, "None": None}


class _Gen:
    """Emits the body of ``def _f(v)``: ``m`` is the message, ``ap`` its user properties."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(_RUNTIME)
        self.level = 2  # inside def and try
        self.temps = 0
        self.uses_m = False
        self.uses_ap = False

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.level + line)

    def tmp(self) -> str:
        self.temps += 1
        return f"t{self.temps}"

    def const(self, value: Any) -> str:
        kind = type(value)
        if value is None or kind is bool or kind is int:
            return repr(value)
        if kind is float and math.isfinite(value):
            return repr(value)
        name = f"k{len(self.ns)}"
        self.ns[name] = value
        return name

    def named(self, code: str) -> str:
        """``code`` as something safe to repeat and to test with ``is``."""
        if code.isidentifier() or code.startswith(("m.", "v.")):
            return code
        t = self.tmp()
        self.emit(f"{t} = {code}")
        return t

    # values: (code, constant value or _NOT_CONST)

    def value(self, node: _Node) -> tuple[str, Any]:
        if isinstance(node, _Const):
            return self.const(node.value), node.value
        if isinstance(node, _Prop):
            return self.prop(node)
        if isinstance(node, _Call):
            arg = "" if node.arg is None else self.value(node.arg)[0]
            t = self.tmp()
            self.emit(f"{t} = _newid()" if node.arg is None else f"{t} = _dynprop(v, {arg})")
            return t, _NOT_CONST
        if isinstance(node, _Unary):
            x, _ = self.value(node.operand)
            t = self.tmp()
            self.emit(f"{t} = {'_neg' if node.op == '-' else '_pos'}({x})")
            return t, _NOT_CONST
        assert isinstance(node, _Arith)
        current, _ = self.value(node.first)
        for op, operand in node.rest:
            y, _ = self.value(operand)
            t = self.tmp()
            self.emit(f"{t} = {_ARITH_NAMES[op]}({current}, {y})")
            current = t
        return current, _NOT_CONST

    def prop(self, node: _Prop) -> tuple[str, Any]:
        if node.scope == "user":
            self.uses_ap = True
            t = self.tmp()
            self.emit(f"{t} = ap.get({self.const(node.name)}, _M)")
            self.emit(f"if {t} is _M: {t} = v.ci({self.const(node.name.lower())})")
            return t, _NOT_CONST
        prop = node.system
        if prop is None:
            self.emit(f"_nosys({self.const(node.name)})")
            return "None", _NOT_CONST
        if prop.source == "m":
            self.uses_m = True
            return f"m.{prop.attr}", _NOT_CONST
        if prop.source == "v":
            return f"v.{prop.attr}", _NOT_CONST
        return self.const(prop.attr), prop.attr

    # predicates: a name or literal holding True, False or None

    def pred(self, node: _Node) -> str:
        if isinstance(node, _Cmp):
            return self.compare(node)
        if isinstance(node, _Logic):
            return self.logic(node)
        if isinstance(node, _Not):
            x = self.pred(node.operand)
            if x in _LITERALS:
                value = _LITERALS[x]
                return repr(None if value is None else not value)
            t = self.tmp()
            self.emit(f"{t} = None if {x} is None else not {x}")
            return t
        if isinstance(node, _IsNull):
            x, c = self.value(node.prop)
            if c is not _NOT_CONST:
                return repr((c is None) != node.negated)
            t = self.tmp()
            self.emit(f"{t} = {x} is {'not ' if node.negated else ''}None")
            return t
        if isinstance(node, _Exists):
            return self.exists(node.prop)
        if isinstance(node, _In):
            return self.in_list(node)
        assert isinstance(node, _Like)
        return self.like(node)

    def negate(self, t: str, negated: bool) -> str:
        if negated:
            self.emit(f"if {t} is not None: {t} = not {t}")
        return t

    def logic(self, node: _Logic) -> str:
        # AND stops at the first False, OR at the first True; None (unknown) carries on.
        stop, other = ("False", "True") if node.op == "AND" else ("True", "False")
        t = self.tmp()
        self.emit(f"{t} = {self.pred(node.operands[0])}")
        for operand in node.operands[1:]:
            self.emit(f"if {t} is not {stop}:")
            self.level += 1
            header = len(self.lines)
            x = self.pred(operand)
            if x == stop:
                self.emit(f"{t} = {stop}")
            elif x == "None":
                self.emit(f"{t} = None")
            elif x != other:
                self.emit(f"if {x} is {stop}: {t} = {stop}")
                self.emit(f"elif {x} is None: {t} = None")
            if len(self.lines) == header:
                self.emit("pass")
            self.level -= 1
        return t

    def compare(self, node: _Cmp) -> str:
        op = node.op
        left, lc = self.value(node.left)
        right, rc = self.value(node.right)
        if lc is not _NOT_CONST and rc is not _NOT_CONST:
            return repr(_CMP_FUNCTIONS[op](lc, rc))
        if lc is not _NOT_CONST:
            left, lc, right, rc, op = right, rc, left, lc, _CMP_SWAPPED[op]
        t = self.tmp()
        if rc is _NOT_CONST:
            self.emit(f"{t} = {_CMP_NAMES[op]}({left}, {right})")
            return t
        # x OP constant: inline the type dispatch of _eq/_ne/_lt/... for the constant's type
        x = self.named(left)
        ordering = op not in ("=", "<>")
        mismatch = "None" if ordering else repr(op == "<>")
        py = _CMP_PYTHON[op]
        kind = type(rc)
        if rc is None or (kind is bool and ordering):
            return "None"
        if kind is str or kind is bool:
            k = self.const(rc)
            self.emit(f"if type({x}) is {kind.__name__}: {t} = {x} {py} {k}")
        elif kind is int:
            self.emit(f"if type({x}) is int: {t} = {x} {py} {self.const(rc)}")
            self.emit(f"elif type({x}) is float: {t} = {x} {py} {self.const(float(rc))}")
        else:
            k = self.const(rc)
            self.emit(f"if type({x}) is float: {t} = {x} {py} {k}")
            self.emit(f"elif type({x}) is int: {t} = float({x}) {py} {k}")
        self.emit(f"elif {x} is None: {t} = None")
        self.emit(f"else: {t} = {mismatch}")
        return t

    def exists(self, node: _Prop) -> str:
        if node.scope == "user":
            self.uses_ap = True
            t = self.tmp()
            name, lowered = self.const(node.name), self.const(node.name.lower())
            self.emit(f"{t} = {name} in ap or v.ci({lowered}, _M) is not _M")
            return t
        prop = node.system
        if prop is None:
            return "False"
        if prop.source != "m":
            return "True"
        self.uses_m = True
        t = self.tmp()
        self.emit(f"{t} = m.{prop.attr} is not None")
        return t

    def in_list(self, node: _In) -> str:
        x, xc = self.value(node.operand)
        items = [self.value(item) for item in node.items]
        t = self.tmp()
        if all(c is not _NOT_CONST for _, c in items):
            values = tuple(c for _, c in items)
            if xc is not _NOT_CONST:
                result = _in(xc, values)
                return repr(None if result is None else result != node.negated)
            if all(type(c) is str for c in values):
                x = self.named(x)
                members = self.const(frozenset(values))
                self.emit(f"if type({x}) is str: {t} = {x} in {members}")
                self.emit(f"elif {x} is None: {t} = None")
                self.emit(f"else: {t} = False")
            else:
                self.emit(f"{t} = _in({x}, {self.const(values)})")
        else:
            self.emit(f"{t} = _in({x}, ({', '.join(code for code, _ in items)},))")
        return self.negate(t, node.negated)

    def like(self, node: _Like) -> str:
        x, _ = self.value(node.operand)
        pattern, _ = self.value(node.pattern)
        escape = "_NOESC" if node.escape is None else self.value(node.escape)[0]
        t = self.tmp()
        if node.plan is None:
            self.emit(f"{t} = _like({x}, {pattern}, {escape})")
            return self.negate(t, node.negated)
        x = self.named(x)
        kind, arg = node.plan
        k = self.const(arg)
        test = {
            "eq": f"{x} == {k}",
            "prefix": f"{x}.startswith({k})",
            "suffix": f"{x}.endswith({k})",
            "contains": f"{k} in {x}",
            "any": "True",
            "regex": f"{k}.fullmatch({x}) is not None",
        }[kind]
        self.emit(f"if type({x}) is str: {t} = {test}")
        self.emit(f"else: {t} = None")
        return self.negate(t, node.negated)

    def function(self, result: str, what: str) -> Callable[[MessageView], Any]:
        head = ["def _f(v):"]
        if self.uses_m:
            head.append("    m = v.message")
        if self.uses_ap:
            head.append("    ap = v.properties")
        head.append("    try:")
        tail = [
            f"        return {result}",
            "    except _FEE:",
            "        raise",
            "    except Exception as exc:",  # a bug here must not take the broker down
            "        raise _internal(exc) from exc",
        ]
        return _build(head + self.lines + tail, self.ns, what)


def _build(lines: list[str], ns: dict[str, Any], what: str) -> Callable[[MessageView], Any]:
    source = "\n".join(lines) + "\n"
    try:
        code = compile(source, f"<sbctl {what}>", "exec")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        raise BadRequest(f"{what}: the expression is too complex") from exc
    exec(code, ns)  # our generated source only: user values live in ns
    function: Callable[[MessageView], Any] = ns["_f"]
    function.source = source  # type: ignore[attr-defined]
    return function


def _parse(what: str, text: Any, action: bool) -> Any:
    if not isinstance(text, str):
        raise BadRequest(f"{what}: must be a string")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise BadRequest(
            f"{what}: {len(text):,} characters is over the limit of {MAX_EXPRESSION_LENGTH:,}"
        )
    try:
        parser = _Parser(text)
        return parser.parse_action() if action else parser.parse_filter()
    except _Syntax as exc:
        raise BadRequest(f"{what}: {exc.label} at position {exc.pos + 1}: {exc.message}") from None


# -- Filters --------------------------------------------------------------------------------


def _always_true(view: MessageView) -> bool:
    return True


def _always_false(view: MessageView) -> bool:
    return False


class CompiledFilter:
    """A rule's filter, compiled once. ``matches`` is a plain function attribute (no bound
    method call on the hot path); it raises :class:`FilterEvaluationError`."""

    __slots__ = ("kind", "matches", "spec")

    def __init__(
        self, kind: str, matches: Callable[[MessageView], bool], spec: dict[str, Any]
    ) -> None:
        self.kind = kind  # "sql" | "correlation" | "true" | "false"
        self.matches = matches
        self.spec = spec  # normalize_filter's form

    def __repr__(self) -> str:
        return f"CompiledFilter({self.spec!r})"


CORRELATION_FIELDS: Final = (
    "correlation_id",
    "message_id",
    "to",
    "reply_to",
    "subject",
    "session_id",
    "reply_to_session_id",
    "content_type",
)
_FILTER_TYPES: Final = ("sql", "correlation", "true", "false")


def _check_keys(spec: dict[str, Any], kind: str, allowed: tuple[str, ...]) -> None:
    for key in spec:
        if key not in allowed:
            raise BadRequest(
                f"filter: unknown key {key!r} for a {kind} filter (allowed: {', '.join(allowed)})"
            )


def _check_spec(spec: dict[str, Any] | None) -> tuple[dict[str, Any], _Node | None]:
    """The canonical form of a filter spec, and the parsed tree of a SQL filter."""
    if spec is None:
        return {"type": "true"}, None
    if not isinstance(spec, dict):
        raise BadRequest("filter: must be an object with a 'type'")
    kind = spec.get("type")
    if not isinstance(kind, str) or kind.lower() not in _FILTER_TYPES:
        raise BadRequest(f"filter: 'type' must be one of {', '.join(_FILTER_TYPES)}, not {kind!r}")
    kind = kind.lower()
    if kind in ("true", "false"):
        _check_keys(spec, kind, ("type",))
        return {"type": kind}, None
    if kind == "sql":
        _check_keys(spec, kind, ("type", "sql_expression"))
        text = spec.get("sql_expression")
        if text is None or (isinstance(text, str) and not text.strip()):
            raise BadRequest("filter: a sql filter needs a non-empty 'sql_expression'")
        tree = _parse("sql_expression", text, action=False)
        return {"type": "sql", "sql_expression": text}, tree
    _check_keys(spec, kind, ("type", *CORRELATION_FIELDS, "label", "properties"))
    if spec.get("label") is not None and spec.get("subject") is not None:
        raise BadRequest("filter: give 'subject' or its alias 'label', not both")
    canonical: dict[str, Any] = {"type": "correlation"}
    for field in CORRELATION_FIELDS:
        value = spec.get(field)
        if value is None and field == "subject":
            value = spec.get("label")
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise BadRequest(f"filter: correlation field {field!r} must be a non-empty string")
        canonical[field] = value
    properties = spec.get("properties")
    if properties is not None:
        if not isinstance(properties, dict):
            raise BadRequest("filter: 'properties' must be an object of name: value")
        for name, value in properties.items():
            if not isinstance(name, str) or not name:
                raise BadRequest("filter: correlation property names must be non-empty strings")
            if value is not None and type(value) not in _TEXTUAL:
                raise BadRequest(
                    f"filter: correlation property {name!r} must be a string, number, "
                    f"boolean or null, not {type(value).__name__}"
                )
            if type(value) is int and not INT64_MIN <= value <= INT64_MAX:
                raise BadRequest(f"filter: correlation property {name!r} is out of the Int64 range")
        if properties:
            canonical["properties"] = dict(properties)
    if len(canonical) == 1:
        raise BadRequest(
            "filter: a correlation filter needs at least one field or property to match; "
            'use {"type": "true"} to take every message'
        )
    return canonical, None


def normalize_filter(spec: dict[str, Any] | None) -> dict[str, Any]:
    """The canonical form to store, show and export; raises BadRequest like compile_filter.
    ``compile_filter(normalize_filter(s))`` behaves as ``compile_filter(s)``."""
    return _check_spec(spec)[0]


def compile_filter(spec: dict[str, Any] | None) -> CompiledFilter:
    canonical, tree = _check_spec(spec)
    kind = canonical["type"]
    if kind == "true":
        return CompiledFilter(kind, _always_true, canonical)
    if kind == "false":
        return CompiledFilter(kind, _always_false, canonical)
    if kind == "correlation":
        return CompiledFilter(kind, _correlation_function(canonical), canonical)
    assert tree is not None
    gen = _Gen()
    result = gen.pred(tree)
    return CompiledFilter(kind, gen.function(f"{result} is True", "sql_expression"), canonical)


def _correlation_function(spec: dict[str, Any]) -> Callable[[MessageView], bool]:
    ns: dict[str, Any] = dict(_RUNTIME)
    lines = ["def _f(v):"]
    fields = [field for field in CORRELATION_FIELDS if field in spec]
    if fields:
        lines.append("    m = v.message")
    for i, field in enumerate(fields):
        ns[f"s{i}"] = spec[field]
        lines.append(f"    if m.{field} != s{i}: return False")
    properties = spec.get("properties") or {}
    if properties:
        lines.append("    ap = v.properties")
    for i, (name, value) in enumerate(properties.items()):
        ns[f"n{i}"], ns[f"l{i}"] = name, name.lower()
        lines += [
            f"    x = ap.get(n{i}, _M)",
            "    if x is _M:",
            f"        x = v.ci(l{i}, _M)",
            "        if x is _M: return False",
        ]
        if value is None:
            lines.append("    if x is not None: return False")
        else:  # typed equality: 5 is not "5", 5.0 or True
            ns[f"p{i}"], ns[f"c{i}"] = value, type(value)
            lines.append(f"    if type(x) is not c{i} or x != p{i}: return False")
    lines.append("    return True")
    return _build(lines, ns, "filter")


# -- Actions --------------------------------------------------------------------------------


class _Step(NamedTuple):
    remove: bool
    system: SystemProperty | None  # None for a user property
    name: str
    value: Callable[[MessageView], Any] | None


class CompiledAction:
    """A rule's SQL action, compiled once; ``apply`` returns a new Message and never changes
    the view's. Raises :class:`FilterEvaluationError`."""

    __slots__ = ("_steps", "text")

    def __init__(self, text: str, steps: list[_Step]) -> None:
        self.text = text
        self._steps = steps

    def __repr__(self) -> str:
        return f"CompiledAction({self.text!r})"

    def apply(self, view: MessageView) -> Message:
        message = view.message
        props: dict[str, PropertyValue] = dict(message.application_properties or {})
        fields: dict[str, Any] = {}
        current = view
        last = len(self._steps) - 1
        for index, step in enumerate(self._steps):
            value = None if step.value is None else step.value(current)
            if step.system is not None:
                fields[step.system.attr] = (
                    None if step.remove else _system_value(step.system, value)
                )
            else:
                key = _find_key(props, step.name)
                if step.remove:
                    if key is not None:
                        del props[key]
                else:
                    if key is not None and type(props[key]) is float and type(value) is int:
                        value = float(value)  # C#: an implicit long -> double conversion
                    props[step.name if key is None else key] = value
            if index < last:  # the next statement sees this one's effect
                current = MessageView(
                    msgspec.structs.replace(
                        message, application_properties=dict(props) or None, **fields
                    ),
                    sequence_number=view.sequence_number,
                    enqueued_time_ms=view.enqueued_time_ms,
                    size=view.size,
                )
        result = msgspec.structs.replace(message, application_properties=props or None, **fields)
        if (
            result.session_id is not None
            and result.partition_key is not None
            and result.session_id != result.partition_key
        ):
            raise FilterEvaluationError(
                "InvalidOperationException",
                "The action left SessionId and PartitionKey set to different values.",
            )
        return result


def _find_key(props: dict[str, PropertyValue], name: str) -> str | None:
    if name in props:
        return name
    lowered = name.lower()
    for key in props:
        if key.lower() == lowered:
            return key
    return None


def _milliseconds(prop: SystemProperty, value: Any) -> int:
    kind = type(value)
    if kind is int:
        return int(value)
    if kind is float and math.isfinite(value):
        return int(value)
    raise FilterEvaluationError(
        "InvalidCastException",
        f"Cannot convert {_cs_type(value)} to sys.{prop.name} (an Int64 of milliseconds).",
    )


def _system_value(prop: SystemProperty, value: Any) -> Any:
    """SET's implicit conversion to a system property's type, and its range checks."""
    attr = prop.attr
    if attr in _STRING_FIELDS:
        if value is None:
            if attr == "message_id":
                raise FilterEvaluationError("ArgumentException", "sys.MessageId cannot be NULL.")
            return None
        text = to_text(value)
        if attr == "message_id" and not text:
            raise FilterEvaluationError("ArgumentException", "sys.MessageId cannot be empty.")
        if attr in _ID_FIELDS and len(text) > MAX_ID_LENGTH:
            raise FilterEvaluationError(
                "ArgumentOutOfRangeException",
                f"sys.{prop.name} is longer than {MAX_ID_LENGTH} characters.",
            )
        return text
    if value is None:
        return None
    ms = _milliseconds(prop, value)
    if attr == "time_to_live_ms" and ms <= 0:
        raise FilterEvaluationError(
            "ArgumentOutOfRangeException", "sys.TimeToLive must be positive."
        )
    if attr == "scheduled_enqueue_time_ms" and not 0 <= ms <= MAX_TIME_MS:
        raise FilterEvaluationError(
            "ArgumentOutOfRangeException", f"sys.{prop.name} is out of the DateTime range."
        )
    return ms


def compile_action(text: str | None) -> CompiledAction | None:
    """None for no action (None, "" or blank); BadRequest for anything invalid."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    statements: list[_Statement] = _parse("action", text, action=True)
    steps = []
    for statement in statements:
        value = None
        if statement.value is not None:
            gen = _Gen()
            code, _ = gen.value(statement.value)
            value = gen.function(code, "action")
        target = statement.target
        steps.append(_Step(statement.remove, target.system, target.name, value))
    return CompiledAction(text, steps)
