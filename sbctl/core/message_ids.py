"""The message ids the broker gives a message sent without one (as Service Bus does; SDKs
rely on it: @azure/service-bus keys its lock renewal by message id)."""

from __future__ import annotations

import functools
from random import getrandbits


def new_message_id() -> str:
    """A random version-4 UUID in hex, like ``uuid.uuid4().hex`` at a fifth of the cost (no
    system call per message; an id is not a secret, 122 random bits keep it unique)."""
    return "%032x" % (getrandbits(128) & _V4_CLEAR | _V4_SET)


def new_message_ids(n: int) -> list[str]:
    """``n`` ids as :func:`new_message_id` makes them, from one draw of random bits."""
    if n == 0:
        return []
    clear, set_, slices = _id_masks(n)
    text = (getrandbits(128 * n) & clear | set_).to_bytes(16 * n, "big").hex()
    return list(map(text.__getitem__, slices))


@functools.lru_cache(maxsize=64)
def _id_masks(n: int) -> tuple[int, int, list[slice]]:
    """The version-4 bit masks for ``n`` ids side by side, and where each id lies."""
    clear = int(f"{_V4_CLEAR:032x}" * n, 16)
    set_ = int(f"{_V4_SET:032x}" * n, 16)
    return clear, set_, [slice(i, i + 32) for i in range(0, 32 * n, 32)]


_V4_CLEAR = 0xFFFFFFFF_FFFF_0FFF_3FFF_FFFFFFFFFFFF
_V4_SET = 0x00000000_0000_4000_8000_000000000000
