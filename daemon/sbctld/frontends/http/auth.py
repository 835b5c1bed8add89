"""SharedAccessSignature checks for HTTP requests (daemon/README.md §30).

The signature itself is checked by the same function as the AMQP endpoint's ``$cbs``
node (:func:`sbctl.core.sas.check_token`: key name, HMAC-SHA256 over the ``sr``
exactly as the client sent it, ``se`` not past). Over HTTP the token must also cover the
resource requested: its ``sr`` (scheme ignored) names the same host and a path that is the
request's path or a prefix of it at a ``/`` boundary (``localhost``, ``127.0.0.1`` and ``::1``
are the same host; ports are not compared) — the namespace URL, the entity URL
or the full URL with its query, as the different SDKs scope it.
"""

from __future__ import annotations

from urllib.parse import unquote_plus, urlsplit

from sbctl.core.sas import check_token, make_token

__all__ = ["check_request", "make_token"]


def _fields(token: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in token.partition(" ")[2].split("&"):
        name, sep, value = part.partition("=")
        if sep:
            fields[name.strip().lower()] = value
    return fields


LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def _host(netloc: str) -> str:
    """``Host:`` or a URL's netloc → the lower-case host without port; the loopback names
    are one host."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        host = netloc[1 : netloc.find("]")]
    else:
        host = netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc
    return "localhost" if host in LOOPBACK else host


def covers(sr: str, host: str, path: str) -> bool:
    """Whether the audience ``sr`` (decoded) covers ``host`` + ``path`` (no query)."""
    audience = sr.strip()
    if "://" not in audience:
        audience = "//" + audience
    parts = urlsplit(audience)
    if _host(parts.netloc) != _host(host):
        return False
    scope = parts.path.rstrip("/").lower()
    wanted = path.rstrip("/").lower()
    return wanted == scope or wanted.startswith(scope + "/") or not scope


def check_request(
    header: str | None, host: str, path: str, key_name: str, key: str, now_s: float
) -> str | None:
    """None when ``header`` authorizes ``path`` on ``host``; otherwise why not (one line)."""
    if not header:
        return "the request has no Authorization header with a SharedAccessSignature"
    token = header.strip()
    why = check_token(token, key_name, key, now_s)
    if why is not None:
        return why
    sr = unquote_plus(_fields(token)["sr"])
    if not covers(sr, host, path.split("?", 1)[0]):
        return f"the token's audience {sr!r} does not cover {path.split('?', 1)[0]!r}"
    return None
