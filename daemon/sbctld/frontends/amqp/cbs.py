"""The ``$cbs`` node: claims-based security with Shared Access Signature tokens.

A client puts a token (``SharedAccessSignature sr=<url-encoded audience>&sig=<base64
HMAC-SHA256 of "sr\\nse">&se=<expiry epoch s>&skn=<key name>``) for each entity it uses.
The token is accepted (202) when the key name is the namespace's and the signature was
made with its key and has not expired; otherwise refused (401), which the SDKs raise as
their authentication error. Keys live in ``<data dir>/amqp/keys.json`` (mode 0600).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from sbctl import layout
from sbctl.sas import DEFAULT_KEY, DEFAULT_KEY_NAME, check_token, make_token

__all__ = ["DEFAULT_KEY", "DEFAULT_KEY_NAME", "Keys", "check_token", "make_token"]


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
