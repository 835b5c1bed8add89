"""The SQL lexer: the text of a filter or action to tokens.

Rule 1: only this module reads the characters of an expression; the parser sees tokens
(kind, value, start and end positions) and nothing else.
Rule 2: every lexical error is a :class:`SqlSyntaxError` with a 0-based position;
:func:`sbctld.filters.parser.parse` turns it into the BadRequest the user sees, 1-based.
"""

from __future__ import annotations

import math
from typing import Any, Final, NamedTuple


class SqlSyntaxError(Exception):
    def __init__(self, pos: int, message: str, label: str = "syntax error") -> None:
        super().__init__(message)
        self.pos = pos
        self.message = message
        self.label = label


class Token(NamedTuple):
    kind: str  # "int" "float" "str" "id" (regular identifier) "qid" (delimited) "param" (@name)
    # "op" "eof"
    value: Any
    pos: int  # 0-based start
    end: int


_DIGITS: Final = "0123456789"
_TWO_CHAR_OPS: Final = ("<>", "!=", ">=", "<=")
_ONE_CHAR_OPS: Final = "=<>+-*/%(),.;"
KEYWORDS: Final = frozenset(
    {"AND", "OR", "NOT", "IS", "NULL", "IN", "LIKE", "ESCAPE", "EXISTS", "TRUE", "FALSE"}
)


def _scan_quoted(text: str, start: int, close: str, what: str) -> tuple[str, int]:
    parts = []
    i = start + 1
    while True:
        j = text.find(close, i)
        if j < 0:
            raise SqlSyntaxError(start, f"{what} starting here is never closed with {close}")
        parts.append(text[i:j])
        if text.startswith(close, j + 1):  # doubled: an escaped closing character
            parts.append(close)
            i = j + 2
            continue
        return "".join(parts), j + 1


def _scan_number(text: str, start: int) -> tuple[Token, int]:
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
        raise SqlSyntaxError(j, f"unexpected character {text[j]!r} after a number")
    literal = text[start:j]
    if not is_float:
        return Token("int", int(literal), start, j), j
    value = float(literal)
    if math.isinf(value):
        raise SqlSyntaxError(start, f"the number {literal} is out of the Double range")
    return Token("float", value, start, j), j


def tokenize(text: str) -> list[Token]:
    toks: list[Token] = []
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
            toks.append(Token("id", text[start:i], start, i))
        elif c == "'":
            value, i = _scan_quoted(text, i, "'", "a string")
            toks.append(Token("str", value, start, i))
        elif c == "[":
            value, i = _scan_quoted(text, i, "]", "a [delimited] name")
            toks.append(Token("qid", value, start, i))
        elif c == '"':
            value, i = _scan_quoted(text, i, '"', 'a "quoted" name')
            toks.append(Token("qid", value, start, i))
        elif text.startswith(_TWO_CHAR_OPS, i):
            toks.append(Token("op", text[i : i + 2], start, i + 2))
            i += 2
        elif c in _ONE_CHAR_OPS:
            toks.append(Token("op", c, start, i + 1))
            i += 1
        elif c == "@":  # a parameter: @ then a regular identifier
            i += 1
            while i < n and (text[i].isalpha() or text[i].isdecimal() or text[i] == "_"):
                i += 1
            if i == start + 1:
                raise SqlSyntaxError(start, "expected a parameter name after '@'")
            toks.append(Token("param", text[start:i], start, i))
        else:
            raise SqlSyntaxError(i, f"unexpected character {c!r}")
    toks.append(Token("eof", None, n, n))
    return toks
