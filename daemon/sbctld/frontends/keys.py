"""Each namespace's Shared Access key (name and key), which every front-end that checks SAS
tokens (sbctl.sas) checks them against: the AMQP ``$cbs`` node and the HTTP endpoint.

Rules kept here: the keys live in ``<data dir>/amqp/keys.json`` (sbctl.layout; mode 0600,
replaced atomically); a namespace without an entry uses the defaults, the Microsoft
emulator's key name and key; namespace names compare case-insensitively.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from sbctl import layout
from sbctl.sas import DEFAULT_KEY, DEFAULT_KEY_NAME


class Keys:
    """Each namespace's (key name, key); namespaces without an entry use the defaults."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys: dict[str, tuple[str, str]] = {}
        with contextlib.suppress(FileNotFoundError, ValueError):
            raw = json.loads(path.read_text())
            for ns, entry in raw.items():
                self.keys[ns.lower()] = (str(entry["key_name"]), str(entry["key"]))

    def get(self, namespace: str) -> tuple[str, str]:
        return self.keys.get(namespace.lower(), (DEFAULT_KEY_NAME, DEFAULT_KEY))

    def set(self, namespace: str, key_name: str, key: str) -> None:
        self.keys[namespace.lower()] = (key_name, key)
        data = {ns: {"key_name": n, "key": k} for ns, (n, k) in self.keys.items()}
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = layout.temp_sibling(self.path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
