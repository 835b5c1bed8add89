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
