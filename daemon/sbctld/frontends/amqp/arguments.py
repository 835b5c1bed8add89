"""The arguments of a ``$management`` request, read by type (daemon/README.md §29.11).

A request's body is an amqp-value map the client fills; every operation reads its fields
through :class:`Args`, whose getters check the type and the range and raise a
:class:`BadRequest` naming the field (status 400, ``com.microsoft:argument-error``) where
the value does not fit: ``from-sequence-number: "abc"`` is the client's error, never a
Python exception answered as an internal error.
"""

from __future__ import annotations

import uuid
from typing import Any

from sbctl.core.errors import BadRequest

MAX_LONG = 2**63 - 1


def text_of(value: Any) -> str:
    """A key or a text value as text (a binary as UTF-8, its invalid bytes replaced)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Args(dict[str, Any]):
    """A request map with text keys (anything else than a map is an empty request)."""

    def __init__(self, body: Any) -> None:
        super().__init__({text_of(k): v for k, v in body.items()} if isinstance(body, dict) else {})

    def integer(self, key: str, default: int, low: int = 0, high: int = MAX_LONG) -> int:
        value = self.get(key)
        if value is None:
            return default
        return _integer(key, value, low, high)

    def integers(self, key: str) -> list[int]:
        return [_integer(key, v, 0, MAX_LONG) for v in self._list(key)]

    def text(self, key: str) -> str | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, str | bytes | uuid.UUID):
            raise BadRequest(f"{key} must be a string, not {_shown(value)}")
        return text_of(value)

    def tokens(self, key: str) -> list[str]:
        """Lock tokens: UUIDs (or their text)."""
        out = []
        for v in self._list(key):
            if not isinstance(v, str | uuid.UUID):
                raise BadRequest(f"{key} must hold lock tokens (UUIDs), not {_shown(v)}")
            out.append(str(v))
        return out

    def binary(self, key: str) -> bytes | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, bytes):
            raise BadRequest(f"{key} must be a binary, not {_shown(value)}")
        return value

    def map(self, key: str) -> dict[Any, Any] | None:
        value = self.get(key)
        if value is not None and not isinstance(value, dict):
            raise BadRequest(f"{key} must be a map, not {_shown(value)}")
        return value

    def maps(self, key: str) -> list[Args]:
        out = []
        for v in self._list(key):
            if not isinstance(v, dict):
                raise BadRequest(f"{key} must hold maps, not {_shown(v)}")
            out.append(Args(v))
        return out

    def _list(self, key: str) -> list[Any]:
        value = self.get(key)
        if value is None:
            return []
        if not isinstance(value, list):  # (an Array is a list)
            raise BadRequest(f"{key} must be a list, not {_shown(value)}")
        return value


def _integer(key: str, value: Any, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequest(f"{key} must be an integer, not {_shown(value)}")
    if not low <= value <= high:
        raise BadRequest(f"{key} {int(value)} is out of range ({low} to {high})")
    return int(value)


def _shown(value: Any) -> str:
    """A value as an error message names it: its type and, if short, itself."""
    text = repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 40 else type(value).__name__
