"""The runtime semantics of filters and actions: three-valued comparisons, C#-style
arithmetic, IN, LIKE, ``property()`` and ``newid()``.

Compiled functions call these through :data:`RUNTIME`, the namespace each one starts with.
The code generator inlines some of them for constant operands and must agree with them
(tests/unit/test_filters.py checks compiled filters against a reference interpreter).

Rule 1: an error raised here is a :class:`FilterEvaluationError` (it dead-letters the
message), never another exception type.
Rule 2: nothing here sees SQL text or the syntax tree; only values and the message view.
"""

from __future__ import annotations

import functools
import math
import re
import uuid
from collections.abc import Callable
from typing import Any, Final, NoReturn

from sbctld.filters.values import (
    INT64_MAX,
    INT64_MIN,
    NUMERIC,
    SYSTEM_PROPERTIES,
    TEXTUAL,
    FilterEvaluationError,
    MessageView,
    cs_type,
    sys_value,
    to_text,
)

_MISSING: Final[Any] = object()
_NO_ESCAPE: Final[Any] = object()


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
        f"'{cs_type(a)}' and '{cs_type(b)}'.",
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
    if ta in NUMERIC and tb in NUMERIC:
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
    if ta in NUMERIC and tb in NUMERIC:
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
    if ta in NUMERIC and tb in NUMERIC:
        return float(a) + float(b)
    if ta is str and tb in TEXTUAL:
        return _text(a + to_text(b))
    if tb is str and ta in TEXTUAL:
        return _text(to_text(a) + b)
    raise _binary_error("Add", a, b)


# no message can hold a longer string (daemon/README.md §13.1: 1 MB on Premium)
MAX_TEXT = 1024 * 1024


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
    if ta in NUMERIC and tb in NUMERIC:
        return float(a) - float(b)
    raise _binary_error("Subtract", a, b)


def _mul(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is int and tb is int:
        return _checked(a * b)
    if ta in NUMERIC and tb in NUMERIC:
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
    if ta in NUMERIC and tb in NUMERIC:
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
    if ta in NUMERIC and tb in NUMERIC:
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
        f"The unary operator Negate is not defined for the type '{cs_type(a)}'.",
    )


def _pos(a: Any) -> Any:
    if a is None or type(a) in NUMERIC:
        return a
    raise FilterEvaluationError(
        "InvalidOperationException",
        f"The unary operator UnaryPlus is not defined for the type '{cs_type(a)}'.",
    )


def in_items(x: Any, items: tuple[Any, ...]) -> bool | None:
    if x is None:
        return None
    return any(_eq(x, item) is True for item in items)


def _like(s: Any, pattern: Any, escape: Any) -> bool | None:
    if s is None or pattern is None or escape is None:
        return None
    if type(pattern) is not str:
        raise FilterEvaluationError(
            "ArgumentException", f"The LIKE pattern must be a string, not {cs_type(pattern)}."
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
            "ArgumentException", f"property() needs a string name, not {cs_type(name)}."
        )
    prefix = name[:5].lower()
    if prefix.startswith("sys."):
        prop = SYSTEM_PROPERTIES.get(name[4:].lower())
        if prop is None:
            raise _no_such_system_property(name[4:])
        return sys_value(view, prop)
    if prefix == "user.":
        name = name[5:]
    value = view.properties.get(name, _MISSING)
    return view.ci(name.lower()) if value is _MISSING else value


def _internal(exc: BaseException) -> FilterEvaluationError:
    return FilterEvaluationError("InternalError", f"{type(exc).__name__}: {exc}")


RUNTIME: Final[dict[str, Any]] = {
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
    "_in": in_items,
    "_like": _like,
    "_newid": _newid,
    "_dynprop": _dynprop,
    "_nosys": _nosys,
}
CMP_FUNCTIONS: Final[dict[str, Callable[[Any, Any], bool | None]]] = {
    "=": _eq,
    "<>": _ne,
    "<": _lt,
    "<=": _le,
    ">": _gt,
    ">=": _ge,
}
CMP_NAMES: Final = {"=": "_eq", "<>": "_ne", "<": "_lt", "<=": "_le", ">": "_gt", ">=": "_ge"}
CMP_PYTHON: Final = {"=": "==", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
CMP_SWAPPED: Final = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
ARITH_NAMES: Final = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}
