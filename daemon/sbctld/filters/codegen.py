"""Code generation: a checked syntax tree to a Python function of a :class:`MessageView`.

One function per filter (or per action value): straight-line statements over temporaries,
nested ``if`` only for AND/OR short-circuits, handed to ``compile()``. Constant operands are
folded, and comparisons with a constant inline the runtime's type dispatch.

Rule 1: the generated source holds only identifiers made here and numeric literals from
``repr(int)``/``repr(float)``; every string, name and pattern from the user reaches it through
the function's namespace, never spliced into source.
Rule 2: the only exception that leaves a compiled function is FilterEvaluationError; anything
else becomes an ``InternalError`` one, so a bug here dead-letters a message instead of taking
the broker down.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from sbctl.core.errors import BadRequest
from sbctld.filters.runtime import (
    ARITH_NAMES,
    CMP_FUNCTIONS,
    CMP_NAMES,
    CMP_PYTHON,
    CMP_SWAPPED,
    RUNTIME,
    in_items,
)
from sbctld.filters.tree import (
    Arith,
    Call,
    Cmp,
    Const,
    Exists,
    In,
    IsNull,
    Like,
    Logic,
    Node,
    Not,
    Prop,
    Unary,
)
from sbctld.filters.values import MessageView

_NOT_CONST: Final[Any] = object()
_LITERALS: Final = {"True": True, "False": False, "None": None}


class CodeGen:
    """Emits the body of ``def _f(v)``: ``m`` is the message, ``ap`` its user properties."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = dict(RUNTIME)
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

    def value(self, node: Node) -> tuple[str, Any]:
        if isinstance(node, Const):
            return self.const(node.value), node.value
        if isinstance(node, Prop):
            return self.prop(node)
        if isinstance(node, Call):
            arg = "" if node.arg is None else self.value(node.arg)[0]
            t = self.tmp()
            self.emit(f"{t} = _newid()" if node.arg is None else f"{t} = _dynprop(v, {arg})")
            return t, _NOT_CONST
        if isinstance(node, Unary):
            x, _ = self.value(node.operand)
            t = self.tmp()
            self.emit(f"{t} = {'_neg' if node.op == '-' else '_pos'}({x})")
            return t, _NOT_CONST
        assert isinstance(node, Arith)
        current, _ = self.value(node.first)
        for op, operand in node.rest:
            y, _ = self.value(operand)
            t = self.tmp()
            self.emit(f"{t} = {ARITH_NAMES[op]}({current}, {y})")
            current = t
        return current, _NOT_CONST

    def prop(self, node: Prop) -> tuple[str, Any]:
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

    def pred(self, node: Node) -> str:
        if isinstance(node, Cmp):
            return self.compare(node)
        if isinstance(node, Logic):
            return self.logic(node)
        if isinstance(node, Not):
            x = self.pred(node.operand)
            if x in _LITERALS:
                value = _LITERALS[x]
                return repr(None if value is None else not value)
            t = self.tmp()
            self.emit(f"{t} = None if {x} is None else not {x}")
            return t
        if isinstance(node, IsNull):
            x, c = self.value(node.prop)
            if c is not _NOT_CONST:
                return repr((c is None) != node.negated)
            t = self.tmp()
            self.emit(f"{t} = {x} is {'not ' if node.negated else ''}None")
            return t
        if isinstance(node, Exists):
            return self.exists(node.prop)
        if isinstance(node, In):
            return self.in_list(node)
        assert isinstance(node, Like)
        return self.like(node)

    def negate(self, t: str, negated: bool) -> str:
        if negated:
            self.emit(f"if {t} is not None: {t} = not {t}")
        return t

    def logic(self, node: Logic) -> str:
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

    def compare(self, node: Cmp) -> str:
        op = node.op
        left, lc = self.value(node.left)
        right, rc = self.value(node.right)
        if lc is not _NOT_CONST and rc is not _NOT_CONST:
            return repr(CMP_FUNCTIONS[op](lc, rc))
        if lc is not _NOT_CONST:
            left, lc, right, rc, op = right, rc, left, lc, CMP_SWAPPED[op]
        t = self.tmp()
        if rc is _NOT_CONST:
            self.emit(f"{t} = {CMP_NAMES[op]}({left}, {right})")
            return t
        # x OP constant: inline the type dispatch of _eq/_ne/_lt/... for the constant's type
        x = self.named(left)
        ordering = op not in ("=", "<>")
        mismatch = "None" if ordering else repr(op == "<>")
        py = CMP_PYTHON[op]
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

    def exists(self, node: Prop) -> str:
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

    def in_list(self, node: In) -> str:
        x, xc = self.value(node.operand)
        items = [self.value(item) for item in node.items]
        t = self.tmp()
        if all(c is not _NOT_CONST for _, c in items):
            values = tuple(c for _, c in items)
            if xc is not _NOT_CONST:
                result = in_items(xc, values)
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

    def like(self, node: Like) -> str:
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
        return build(head + self.lines + tail, self.ns, what)


def build(lines: list[str], ns: dict[str, Any], what: str) -> Callable[[MessageView], Any]:
    source = "\n".join(lines) + "\n"
    try:
        code = compile(source, f"<sbctl {what}>", "exec")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        raise BadRequest(f"{what}: the expression is too complex") from exc
    exec(code, ns)  # our generated source only: user values live in ns
    function: Callable[[MessageView], Any] = ns["_f"]
    function.source = source  # type: ignore[attr-defined]
    return function
