"""Who may drive the explorer (daemon/README.md §33).

- **Host**: the ``Host:`` header must name a loopback address (``localhost``,
  ``127.0.0.0/8``, ``::1``) or the address the daemon listens on; anything else is refused
  (403) on every explorer route, so a DNS-rebinding page (a foreign name resolving to
  127.0.0.1) gets nothing, not even the page.
- **Origin**: a browser sends ``Origin:`` (and ``Sec-Fetch-Site:``) with its requests; an API
  request that carries a foreign one (another scheme, host or port than the ``Host:`` it was
  sent to, or ``null``) is refused (403). The page never gets CORS headers either.
- **Authorization** on every API call: ``Bearer <token>`` with the daemon's explorer token
  (random, made at each start, kept in memory and in a 0600 file that `sbctl explorer` reads
  and puts in the URL's fragment, which browsers never send), or a SharedAccessSignature of
  the port's namespace (:mod:`sbctld.frontends.http.auth`), which then reaches that
  namespace only. No cookie is ever set or read.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import time
from pathlib import Path
from urllib.parse import urlsplit

from sbctl.core import layout
from sbctld.frontends.http import auth
from sbctld.frontends.http.request import Request

FULL = "token"  # authorised by the daemon's token: every namespace
SAS = "sas"  # authorised by a namespace's SAS token: that namespace only


def new_token(data_dir: Path) -> str:
    """A fresh token, also written (0600) where `sbctl explorer` reads it."""
    token = secrets.token_urlsafe(32)
    path = layout.explorer_token_file(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = layout.temp_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return token


def host_name(netloc: str) -> str:
    """``Host:`` or an origin's netloc → the host, lower case, without port or brackets."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[1 : netloc.find("]")]
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_refusal(req: Request, listen_host: str) -> str | None:
    """Why the ``Host:`` is refused (DNS rebinding), or None."""
    host = host_name(req.headers.get("host", ""))
    if is_loopback(host) or host == listen_host.strip("[]").lower():
        return None
    return f"the Host {req.headers.get('host', '')!r} is not this daemon's address"


def origin_refusal(req: Request) -> str | None:
    """Why the request's ``Origin:`` / ``Sec-Fetch-Site:`` is refused, or None."""
    if req.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return f"a {req.headers['sec-fetch-site']} request may not call the explorer"
    origin = req.headers.get("origin")
    if origin is None:
        return None
    parts = urlsplit(origin.strip())
    if parts.scheme != req.scheme or parts.netloc.lower() != req.host.strip().lower():
        return f"the Origin {origin!r} is not this page's"
    return None


def authorise(req: Request, token: str, key_name: str, key: str) -> tuple[str | None, str]:
    """``(FULL | SAS, "")`` when authorised, else ``(None, why)``."""
    header = req.headers.get("authorization", "").strip()
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "bearer":
        if hmac.compare_digest(value.strip().encode(), token.encode()):
            return FULL, ""
        return None, "the Bearer token is not this daemon's explorer token"
    if scheme == "SharedAccessSignature":
        why = auth.check_request(header, req.host, "/", key_name, key, time.time())
        return (SAS, "") if why is None else (None, why)
    return None, "the request has no Authorization: Bearer <explorer token> or SAS token"
