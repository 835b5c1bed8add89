"""The namespaces' Shared Access Signature keys, one store for every front-end.

Each namespace has one key name and key (daemon/README.md §3); a namespace without an entry
uses the defaults (``RootManageSharedAccessKey`` / ``SAS_KEY_VALUE``, like Microsoft's
emulator). The AMQP ``$cbs`` node and the HTTP endpoint check tokens against this store, and
``sbctl namespace set-key`` changes it while the daemon runs: a token is checked against the
key current when it arrives. The store is ``<data dir>/amqp/keys.json``, written
write-temp-then-rename with a sealed copy, owner-only (mode 0600).
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from sbctl.core.errors import BadRequest
from sbctl.core.sas import DEFAULT_KEY, DEFAULT_KEY_NAME
from sbctld.storage.files import exists_verified, read_verified, write_atomic

# Azure's rule for an authorization rule's name: letters, digits, periods, hyphens and
# underscores, 1 to 256 characters.
KEY_NAME = re.compile(r"[A-Za-z0-9._-]{1,256}")
MAX_KEY = 256


def check_key(key_name: str, key: str) -> None:
    """Refuse a key name or key the SDKs could not use (BadRequest, one line)."""
    if not KEY_NAME.fullmatch(key_name):
        raise BadRequest(
            f"key name {key_name!r} is not valid: use 1 to 256 letters, digits, "
            "periods, hyphens or underscores"
        )
    if not key:
        raise BadRequest("the key is empty: give a key or generate one")
    if len(key) > MAX_KEY or any(c == ";" or not c.isprintable() or c.isspace() for c in key):
        raise BadRequest(
            f"the key is not valid: use 1 to {MAX_KEY} printable characters without "
            "spaces or ';' (it goes into a connection string)"
        )


class Keys:
    """Each namespace's (key name, key); namespaces without an entry use the defaults."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.keys: dict[str, tuple[str, str]] = {}
        if not exists_verified(path):
            return
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
            raw = json.loads(read_verified(path))
            for ns, entry in raw.items():
                self.keys[ns.lower()] = (str(entry["key_name"]), str(entry["key"]))

    def get(self, namespace: str) -> tuple[str, str]:
        return self.keys.get(namespace.lower(), (DEFAULT_KEY_NAME, DEFAULT_KEY))

    def set(self, namespace: str, key_name: str, key: str) -> None:
        """Check, write durably (0600), then use the namespace's new key name and key."""
        check_key(key_name, key)
        keys = dict(self.keys)
        keys[namespace.lower()] = (key_name, key)
        self._write(keys)

    def drop(self, namespace: str) -> None:
        """Forget a deleted namespace's key: one created again under its name has the
        defaults (Azure gives a new namespace new keys)."""
        keys = dict(self.keys)
        if keys.pop(namespace.lower(), None) is not None:
            self._write(keys)

    def _write(self, keys: dict[str, tuple[str, str]]) -> None:
        data = {ns: {"key_name": n, "key": k} for ns, (n, k) in keys.items()}
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(data).encode())
        self.keys = keys
