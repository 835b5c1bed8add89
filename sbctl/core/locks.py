"""Lock tokens: GUID-shaped, each carrying the message it locks (daemon/README.md §3.3).

The first 8 bytes are the message's public sequence number, the last 8 a nonce the broker
draws per lock, so a settle names its message without a lookup table.
"""

from __future__ import annotations

import uuid

from sbctl.core.errors import BadRequest


def lock_token_for(public_seq: int, nonce: int) -> str:
    """A GUID-shaped lock token that carries the message it locks (see broker locks)."""
    return str(uuid.UUID(bytes=public_seq.to_bytes(8, "big") + nonce.to_bytes(8, "big")))


def parse_lock_token(token: str) -> tuple[int, int]:
    try:
        raw = uuid.UUID(token).bytes
    except (ValueError, AttributeError, TypeError):
        raise BadRequest(f"invalid lock token {token!r}: expected a GUID") from None
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")
