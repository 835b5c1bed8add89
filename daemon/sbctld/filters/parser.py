"""The SQL parser: tokens to a checked syntax tree, and :func:`parse`, the one entry point,
which turns every syntax problem into a BadRequest naming the 1-based position.

Rule 1: every compile-time rejection of a rule's text happens here (grammar, nesting and
statement limits, SET/REMOVE targets, constant LIKE patterns and escapes); the code generator
may assume a valid tree.
Rule 2: recursive descent, one method per precedence level, from loosest: OR, AND, NOT,
predicates, ``+ -``, ``* / %``, signs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from sbctl.core.errors import BadRequest
from sbctld.filters.lexer import KEYWORDS, SqlSyntaxError, Token, tokenize
from sbctld.filters.runtime import like_plan
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
    Statement,
    Unary,
)
from sbctld.filters.values import (
    INT64_MAX,
    INT64_MIN,
    MAX_ACTION_STATEMENTS,
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING,
    NUMERIC,
)


class Parser:
    """Recursive descent; precedence from loosest: OR, AND, NOT, predicates, + -, * / %, signs."""

    def __init__(self, text: str, parameters: Mapping[str, Any] | None = None) -> None:
        self.text = text
        # @name → its value; names match case-insensitively, with or without the @
        self.parameters = {
            (k if k.startswith("@") else "@" + k).lower(): v for k, v in (parameters or {}).items()
        }
        self.toks = tokenize(text)
        self.i = 0
        self.depth = 0

    # tokens

    def peek(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        tok = self.toks[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    @staticmethod
    def is_kw(tok: Token, *words: str) -> bool:
        return tok.kind == "id" and tok.value.upper() in words

    @staticmethod
    def is_op(tok: Token, *ops: str) -> bool:
        return tok.kind == "op" and tok.value in ops

    def show(self, tok: Token) -> str:
        if tok.kind == "eof":
            return "the end"
        text = self.text[tok.pos : tok.end]
        return repr(text if len(text) <= 24 else text[:21] + "...")

    def found(self, tok: Token) -> str:
        return "" if tok.kind == "eof" else f", found {self.show(tok)}"

    def after(self) -> str:
        """' after <previous token>' for messages."""
        return f" after {self.show(self.toks[self.i - 1])}" if self.i else ""

    @staticmethod
    def fail(tok: Token | Node, message: str, label: str = "syntax error") -> NoReturn:
        raise SqlSyntaxError(tok.pos, message, label)

    def expect_op(self, op: str, what: str) -> Token:
        tok = self.peek()
        if not self.is_op(tok, op):
            self.fail(tok, f"expected {what}{self.after()}{self.found(tok)}")
        return self.take()

    def enter(self, tok: Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            self.fail(tok, f"the expression nests more than {MAX_NESTING} levels deep")

    def need_pred(self, node: Node) -> None:
        if not node.is_pred:
            tok = self.peek()
            self.fail(
                tok,
                "expected a comparison (=, <>, !=, <, <=, >, >=), IS, IN or LIKE"
                f"{self.after()}{self.found(tok)}",
            )

    def need_value(self, node: Node) -> None:
        if node.is_pred:
            self.fail(node, "expected a value here, found a condition")

    # entry points

    def parse_filter(self) -> Node:
        node = self.parse_or()
        self.need_pred(node)
        tok = self.peek()
        if tok.kind != "eof":
            self.fail(tok, f"expected AND, OR or the end of the expression{self.found(tok)}")
        return node

    def parse_action(self) -> list[Statement]:
        statements: list[Statement] = []
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
                and target_tok.value.upper() in KEYWORDS
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
            statements.append(Statement(remove, target, value))
            nxt = self.peek()
            if self.is_op(nxt, ";"):
                self.take()
            elif nxt.kind != "eof" and not self.is_kw(nxt, "SET", "REMOVE"):
                self.fail(
                    nxt, f"expected ';', SET, REMOVE or the end of the action{self.found(nxt)}"
                )
        return statements

    def check_target(self, target: Prop, remove: bool) -> None:
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

    def parse_or(self) -> Node:
        return self.parse_logic("OR", self.parse_and)

    def parse_and(self) -> Node:
        return self.parse_logic("AND", self.parse_not)

    def parse_logic(self, word: str, operand: Callable[[], Node]) -> Node:
        first = operand()
        if not self.is_kw(self.peek(), word):
            return first
        self.need_pred(first)
        operands: list[Node] = []
        node = first
        while True:
            # a AND (b AND c) is a AND b AND c, evaluation order included: flatten
            if isinstance(node, Logic) and node.op == word:
                operands.extend(node.operands)
            else:
                operands.append(node)
            if not self.is_kw(self.peek(), word):
                return Logic(first.pos, word, operands)
            self.take()
            node = operand()
            self.need_pred(node)

    def parse_not(self) -> Node:
        tok = self.peek()
        if not self.is_kw(tok, "NOT"):
            return self.parse_predicate()
        self.take()
        self.enter(tok)
        operand = self.parse_not()
        self.need_pred(operand)
        self.depth -= 1
        if isinstance(operand, Not):  # NOT NOT x is x, unknown included
            return operand.operand
        return Not(tok.pos, operand)

    def parse_predicate(self) -> Node:
        tok = self.peek()
        if self.is_kw(tok, "EXISTS"):
            self.take()
            self.expect_op("(", "'('")
            name_tok = self.take()
            if name_tok.kind not in ("id", "qid") or (
                name_tok.kind == "id"
                and name_tok.value.upper() in KEYWORDS
                and not self.is_op(self.peek(), ".")
            ):
                self.fail(
                    name_tok, f"expected a property name inside EXISTS(){self.found(name_tok)}"
                )
            prop = self.parse_property(name_tok)
            self.expect_op(")", "')'")
            return Exists(tok.pos, prop)
        left = self.parse_additive()
        tok = self.peek()
        if tok.kind == "op" and tok.value in ("=", "<>", "!=", "<", "<=", ">", ">="):
            self.need_value(left)
            self.take()
            right = self.parse_additive()
            self.need_value(right)
            return Cmp(left.pos, "<>" if tok.value == "!=" else tok.value, left, right)
        if self.is_kw(tok, "IS"):
            if not isinstance(left, Prop):
                self.fail(tok, "IS [NOT] NULL applies to a property only")
            self.take()
            negated = self.is_kw(self.peek(), "NOT")
            if negated:
                self.take()
            if not self.is_kw(self.peek(), "NULL"):
                self.fail(self.peek(), f"expected NULL{self.after()}{self.found(self.peek())}")
            self.take()
            return IsNull(left.pos, left, negated)
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

    def parse_in(self, operand: Node, negated: bool) -> Node:
        self.expect_op("(", "'('")
        items = []
        while True:
            item = self.parse_additive()
            self.need_value(item)
            items.append(item)
            tok = self.take()
            if self.is_op(tok, ")"):
                return In(operand.pos, operand, items, negated)
            if not self.is_op(tok, ","):
                self.fail(tok, f"expected ',' or ')' in the IN list{self.found(tok)}")

    def parse_like(self, operand: Node, negated: bool) -> Node:
        pattern = self.parse_additive()
        self.need_value(pattern)
        escape = None
        if self.is_kw(self.peek(), "ESCAPE"):
            self.take()
            escape = self.parse_additive()
            self.need_value(escape)
        plan = None
        if isinstance(pattern, Const) and pattern.value is not None:
            if type(pattern.value) is not str:
                self.fail(pattern, "the LIKE pattern must be a string", "error")
            escape_char: Any = None
            if escape is not None:
                if not isinstance(escape, Const):
                    return Like(operand.pos, operand, pattern, escape, negated, None)
                escape_char = escape.value
                if escape_char is None:
                    return Like(operand.pos, operand, pattern, escape, negated, None)
                if type(escape_char) is not str or len(escape_char) != 1:
                    self.fail(escape, "ESCAPE takes a string of exactly one character", "error")
            try:
                plan = like_plan(pattern.value, escape_char)
            except ValueError:
                self.fail(pattern, "the LIKE pattern ends with its escape character", "error")
        elif (
            isinstance(escape, Const)
            and escape.value is not None
            and (type(escape.value) is not str or len(escape.value) != 1)
        ):
            self.fail(escape, "ESCAPE takes a string of exactly one character", "error")
        return Like(operand.pos, operand, pattern, escape, negated, plan)

    # expressions

    def parse_additive(self) -> Node:
        return self.parse_chain(("+", "-"), self.parse_multiplicative)

    def parse_multiplicative(self) -> Node:
        return self.parse_chain(("*", "/", "%"), self.parse_unary)

    def parse_chain(self, ops: tuple[str, ...], operand: Callable[[], Node]) -> Node:
        first = operand()
        rest: list[tuple[str, Node]] = []
        while (tok := self.peek()).kind == "op" and tok.value in ops:
            self.need_value(first)
            self.take()
            node = operand()
            self.need_value(node)
            rest.append((tok.value, node))
        return Arith(first.pos, first, rest) if rest else first

    def parse_unary(self) -> Node:
        tok = self.peek()
        if not self.is_op(tok, "+", "-"):
            return self.parse_primary()
        self.take()
        nxt = self.peek()
        if tok.value == "-" and nxt.kind == "int" and nxt.value == -INT64_MIN:
            self.take()  # -9223372036854775808: the one literal only valid negated
            return Const(tok.pos, INT64_MIN)
        self.enter(tok)
        operand = self.parse_unary()
        self.need_value(operand)
        self.depth -= 1
        if isinstance(operand, Const) and type(operand.value) in NUMERIC:
            value = operand.value
            assert isinstance(value, int | float)
            if tok.value == "-":
                value = -value
                if type(value) is int and value > INT64_MAX:
                    self.fail(tok, "the integer is out of the Int64 range", "error")
            return Const(tok.pos, value)
        return Unary(tok.pos, tok.value, operand)

    def parse_primary(self) -> Node:
        tok = self.peek()
        kind = tok.kind
        if kind == "int":
            if tok.value > INT64_MAX:
                self.fail(tok, "the integer is out of the Int64 range", "error")
            self.take()
            return Const(tok.pos, tok.value)
        if kind in ("float", "str"):
            self.take()
            return Const(tok.pos, tok.value)
        if kind == "param":
            return self.parse_parameter(self.take())
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
                return Const(tok.pos, None if word == "NULL" else word == "TRUE")
            if word not in KEYWORDS:
                self.take()
                if self.is_op(self.peek(), "("):
                    return self.parse_call(tok)
                return self.parse_property(tok)
        if kind == "qid":
            self.take()
            return self.parse_property(tok)
        self.fail(tok, f"expected an expression{self.after()}{self.found(tok)}")

    def parse_parameter(self, tok: Token) -> Const:
        """``@name``: the value the rule's parameters give it, as a literal."""
        key = tok.value.lower()
        if key not in self.parameters:
            given = ", ".join(sorted(self.parameters)) or "none"
            self.fail(tok, f"no value given for {tok.value} (parameters given: {given})")
        return Const(tok.pos, self.parameters[key])

    def parse_call(self, tok: Token) -> Node:
        name = tok.value.lower()
        self.take()  # '('
        if name == "newid":
            close = self.take()
            if not self.is_op(close, ")"):
                self.fail(close, f"newid() takes no argument{self.found(close)}")
            return Call(tok.pos, "newid", None)
        if name in ("property", "p"):
            arg = self.parse_additive()
            self.need_value(arg)
            close = self.take()
            if not self.is_op(close, ")"):
                self.fail(close, f"{tok.value}() takes one argument, then ')'{self.found(close)}")
            return Call(tok.pos, "property", arg)
        self.fail(
            tok, f"unknown function {tok.value}(): the functions are newid(), property(), p()"
        )

    def parse_property(self, tok: Token) -> Prop:
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
        return Prop(tok.pos, scope, name)


def parse(what: str, text: Any, action: bool, parameters: Mapping[str, Any] | None = None) -> Any:
    """The checked tree of a filter (or the statements of an action); ``parameters`` give
    the values of its ``@names``. BadRequest naming the 1-based position of an error."""
    if not isinstance(text, str):
        raise BadRequest(f"{what}: must be a string")
    if len(text) > MAX_EXPRESSION_LENGTH:
        raise BadRequest(
            f"{what}: {len(text):,} characters is over the limit of {MAX_EXPRESSION_LENGTH:,}"
        )
    try:
        parser = Parser(text, parameters)
        return parser.parse_action() if action else parser.parse_filter()
    except SqlSyntaxError as exc:
        raise BadRequest(f"{what}: {exc.label} at position {exc.pos + 1}: {exc.message}") from None
