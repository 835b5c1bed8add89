"""The syntax tree of a SQL filter or action: plain dataclasses that the parser builds and
the code generator reads.

Rule: a node's class fixes whether it is a condition (``is_pred``) or a value; nodes hold no
behaviour beyond resolving a ``sys.`` name once (:attr:`Prop.system`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from sbctl.core.records import PropertyValue
from sbctld.filters.values import SYSTEM_PROPERTIES, SystemProperty


@dataclass(slots=True, eq=False)
class Node:
    pos: int  # 0-based; error positions are 1-based
    is_pred: ClassVar[bool] = False


@dataclass(slots=True, eq=False)
class Const(Node):
    value: PropertyValue


@dataclass(slots=True, eq=False)
class Prop(Node):
    scope: str  # "user" | "sys"
    name: str
    system: SystemProperty | None = dataclasses.field(init=False)  # None: user, or no such sys name

    def __post_init__(self) -> None:
        self.system = SYSTEM_PROPERTIES.get(self.name.lower()) if self.scope == "sys" else None


@dataclass(slots=True, eq=False)
class Call(Node):
    function: str  # "newid" | "property"
    arg: Node | None


@dataclass(slots=True, eq=False)
class Unary(Node):
    op: str
    operand: Node


@dataclass(slots=True, eq=False)
class Arith(Node):
    """A left-associative chain at one precedence level: first (op operand)*."""

    first: Node
    rest: list[tuple[str, Node]]


@dataclass(slots=True, eq=False)
class Cmp(Node):
    is_pred: ClassVar[bool] = True
    op: str
    left: Node
    right: Node


@dataclass(slots=True, eq=False)
class IsNull(Node):
    is_pred: ClassVar[bool] = True
    prop: Prop
    negated: bool


@dataclass(slots=True, eq=False)
class Exists(Node):
    is_pred: ClassVar[bool] = True
    prop: Prop


@dataclass(slots=True, eq=False)
class In(Node):
    is_pred: ClassVar[bool] = True
    operand: Node
    items: list[Node]
    negated: bool


@dataclass(slots=True, eq=False)
class Like(Node):
    is_pred: ClassVar[bool] = True
    operand: Node
    pattern: Node
    escape: Node | None
    negated: bool
    plan: tuple[str, Any] | None  # like_plan() of a constant pattern and escape


@dataclass(slots=True, eq=False)
class Not(Node):
    is_pred: ClassVar[bool] = True
    operand: Node


@dataclass(slots=True, eq=False)
class Logic(Node):
    is_pred: ClassVar[bool] = True
    op: str  # "AND" | "OR"
    operands: list[Node]


class Statement(NamedTuple):
    remove: bool
    target: Prop
    value: Node | None
