"""Names a package exports but imports only on first use (so that ``sbctl --help`` and
every CLI command do not pay for the client's, or asyncio's, imports)."""

from __future__ import annotations

import importlib
from typing import Any


def lazy_exports(package: str, exports: dict[str, str], namespace: dict[str, Any]) -> Any:
    """A module ``__getattr__`` importing each name of ``exports`` (name -> module) on first
    use and keeping it in ``namespace`` (the package's globals), so later uses are plain."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
