"""The ``$cbs`` node: claims-based security with Shared Access Signature tokens.

A client puts a token (``SharedAccessSignature sr=<url-encoded audience>&sig=<base64
HMAC-SHA256 of "sr\\nse">&se=<expiry epoch s>&skn=<key name>``) for each entity it uses.
The token is accepted (202) when the key name is the namespace's and the signature was
made with its key and has not expired; otherwise refused (401), which the SDKs raise as
their authentication error. Keys live in ``<data dir>/amqp/keys.json`` (mode 0600).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
from pathlib import Path
from urllib.parse import unquote_plus

DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_KEY = "SAS_KEY_VALUE"  # the Microsoft emulator's key, so its samples work unchanged


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
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)


def check_token(token: str, key_name: str, key: str, now_s: float) -> str | None:
    """None when the token is valid; otherwise why not (one line, for the 401)."""
    prefix = "SharedAccessSignature "
    if not token.startswith(prefix):
        return "the token is not a SharedAccessSignature"
    fields: dict[str, str] = {}
    for part in token[len(prefix) :].split("&"):
        name, sep, value = part.partition("=")
        if sep:
            fields[name.strip().lower()] = value
    missing = [f for f in ("sr", "sig", "se", "skn") if f not in fields]
    if missing:
        return f"the token has no {missing[0]!r} field"
    if unquote_plus(fields["skn"]).lower() != key_name.lower():
        return f"unknown key name {unquote_plus(fields['skn'])!r}"
    try:
        expiry = int(fields["se"])
    except ValueError:
        return "the token's expiry is not a number"
    if expiry < now_s:
        return "the token has expired"
    signed = f"{fields['sr']}\n{fields['se']}".encode()
    expected = base64.b64encode(hmac.new(key.encode(), signed, hashlib.sha256).digest())
    if not hmac.compare_digest(expected, unquote_plus(fields["sig"]).encode()):
        return "the token's signature does not match the namespace key"
    return None


def make_token(audience: str, key_name: str, key: str, expiry_s: int) -> str:
    """A token as the SDKs make it (for tests and tools)."""
    from urllib.parse import quote_plus

    sr = quote_plus(audience)
    sig = base64.b64encode(
        hmac.new(key.encode(), f"{sr}\n{expiry_s}".encode(), hashlib.sha256).digest()
    ).decode()
    return f"SharedAccessSignature sr={sr}&sig={quote_plus(sig)}&se={expiry_s}&skn={key_name}"
