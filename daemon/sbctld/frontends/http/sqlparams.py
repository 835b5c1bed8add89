"""SQL filter and action parameters as the management API's clients sent them.

The broker stores a SQL rule's text with its ``@parameters`` already replaced by their
values (daemon/README.md §30). So that a client reads back what it wrote (and the SDKs'
get-modify-update flows keep working), the expression as sent and its parameters are kept
in ``<data dir>/http/sql_parameters.json``, keyed by namespace/topic/subscription/rule and
shown only while the stored text is still the one they produced.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from sbctl.names import entity_key
from sbctld.storage.files import write_atomic


class SqlParameters:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.rules: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(FileNotFoundError, ValueError):
            raw = json.loads(path.read_text())
            if isinstance(raw, dict):
                self.rules = raw

    @staticmethod
    def key(ns: str, topic: str, sub: str, rule: str) -> str:
        return "/".join((entity_key(ns), entity_key(topic), entity_key(sub), rule.lower()))

    def get(self, key: str) -> dict[str, Any] | None:
        return self.rules.get(key)

    def set(self, key: str, params: dict[str, Any]) -> None:
        if not params and key not in self.rules:
            return
        if params:
            self.rules[key] = params
        else:
            del self.rules[key]
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(self.rules).encode())
