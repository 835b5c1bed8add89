"""Shared Access Signature tokens, made and checked the way Service Bus does.

A token is ``SharedAccessSignature sr=<url-encoded audience>&sig=<base64 HMAC-SHA256 of
"sr\\nse">&se=<expiry epoch s>&skn=<key name>``. The CLI makes them (``sbctl namespace
sas-token``); the daemon's AMQP ``$cbs`` node and HTTP endpoint check them
(daemon/README.md §30). One module for both sides, so they cannot drift apart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote_plus, unquote_plus

DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_KEY = "SAS_KEY_VALUE"  # the Microsoft emulator's key, so its samples work unchanged


def check_token(token: str, key_name: str, key: str, now_s: float) -> str | None:
    """None when the token is valid; otherwise why not (one line, for the 401)."""
    problem = token_problem(token, key_name, key, now_s)
    return None if problem is None else problem[1]


def token_problem(token: str, key_name: str, key: str, now_s: float) -> tuple[str, str] | None:
    """None when the token is valid; otherwise (Service Bus's code for the refusal:
    ``MalformedToken``, ``InvalidSignature`` or ``ExpiredToken``; why, one line)."""
    prefix = "SharedAccessSignature "
    if not token.startswith(prefix):
        return "MalformedToken", "the token is not a SharedAccessSignature"
    fields: dict[str, str] = {}
    for part in token[len(prefix) :].split("&"):
        name, sep, value = part.partition("=")
        if sep:
            fields[name.strip().lower()] = value
    missing = [f for f in ("sr", "sig", "se", "skn") if f not in fields]
    if missing:
        return "MalformedToken", f"the token has no {missing[0]!r} field"
    if unquote_plus(fields["skn"]).lower() != key_name.lower():
        return "InvalidSignature", f"unknown key name {unquote_plus(fields['skn'])!r}"
    try:
        expiry = int(fields["se"])
    except ValueError:
        return "MalformedToken", "the token's expiry is not a number"
    if expiry < now_s:
        return "ExpiredToken", "the token has expired"
    signed = f"{fields['sr']}\n{fields['se']}".encode()
    expected = base64.b64encode(hmac.new(key.encode(), signed, hashlib.sha256).digest())
    if not hmac.compare_digest(expected, unquote_plus(fields["sig"]).encode()):
        return "InvalidSignature", "the token's signature does not match the namespace key"
    return None


def make_token(audience: str, key_name: str, key: str, expiry_s: int) -> str:
    """A token as the SDKs make it (for tests and tools)."""
    sr = quote_plus(audience)
    sig = base64.b64encode(
        hmac.new(key.encode(), f"{sr}\n{expiry_s}".encode(), hashlib.sha256).digest()
    ).decode()
    return f"SharedAccessSignature sr={sr}&sig={quote_plus(sig)}&se={expiry_s}&skn={key_name}"
