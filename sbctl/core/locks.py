"""Lock tokens: GUID-shaped, each carrying the message it locks (daemon/README.md §3.3).

The first 8 bytes are the message's public sequence number, the last 8 a nonce the broker
draws per lock, so a settle names its message without a lookup table.

Both directions are on the receive path (one token made per delivery, one read per
settlement), so the canonical form is built and read with string slicing instead of
:class:`uuid.UUID` (a third of the daemon's time per received message went there); any
other spelling :class:`uuid.UUID` accepts (upper case, braces, ``urn:uuid:``, no hyphens)
is still read, through it.
"""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Sequence

from sbctl.core.errors import BadRequest

_CANONICAL = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PARTS = struct.Struct(">QQ")  # public sequence number, nonce
_LOW64 = (1 << 64) - 1


def lock_token_for(public_seq: int, nonce: int) -> str:
    """A GUID-shaped lock token that carries the message it locks (see broker locks):
    ``str(uuid.UUID(bytes=public_seq (8 bytes, big-endian) + nonce (8 bytes)))``."""
    try:
        h = _PARTS.pack(public_seq, nonce).hex()
    except struct.error:
        raise OverflowError(f"lock token parts out of range: {public_seq}, {nonce}") from None
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def parse_lock_token(token: str) -> tuple[int, int]:
    """(public sequence number, nonce) of a lock token; BadRequest when not a GUID."""
    if isinstance(token, str) and _CANONICAL.fullmatch(token):
        both = int(token.replace("-", ""), 16)
        return both >> 64, both & _LOW64
    try:
        raw = uuid.UUID(token).bytes
    except (ValueError, AttributeError, TypeError):
        raise BadRequest(f"invalid lock token {token!r}: expected a GUID") from None
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")


_CANONICAL_RUN = re.compile(f"(?:{_CANONICAL.pattern})*")


def parse_lock_tokens(tokens: Sequence[str]) -> list[tuple[int, int] | BadRequest]:
    """:func:`parse_lock_token` of each token, or the BadRequest it raises in its place: a
    settle's batch of canonical tokens (what the clients send) is read in one pass of C (one
    match, one hex conversion, one unpack); any other batch token by token."""
    n = len(tokens)
    if n > 1 and all(type(t) is str and len(t) == 36 for t in tokens):
        joined = "".join(tokens)
        if _CANONICAL_RUN.fullmatch(joined):  # (36 characters each: every token matched)
            parts = struct.unpack(f">{2 * n}Q", bytes.fromhex(joined.replace("-", "")))
            return list(zip(parts[::2], parts[1::2], strict=True))
    out: list[tuple[int, int] | BadRequest] = []
    for token in tokens:
        try:
            out.append(parse_lock_token(token))
        except BadRequest as exc:
            out.append(exc)
    return out
