"""The one partition function, shared with Spark (daemon/README.md §22, §0.1.4, §0.4.3).

A keyed message goes to ``pmod(xxhash64(utf8(key), seed 42), P)``: exactly what Spark SQL
computes as ``pmod(xxhash64(key), P)`` on a string column, so a Spark job can pre-partition
data the way the daemon will. Keyless messages go round-robin (the broker's business).

Public sequence numbers of a partitioned entity carry the partition in their top 16 bits
(daemon/README.md §0.1.7, §2.2, §22).
"""

from __future__ import annotations

from typing import Final

import xxhash

from sbctl.core.errors import InvalidOperation
from sbctl.core.names import display_value

PARTITION_SEED: Final = 42  # Spark's xxhash64 seed
STANDARD_PARTITION_COUNT: Final = 16  # Basic/Standard partitioned entities, daemon/README.md §0.1.2

SEQUENCE_LOCAL_BITS: Final = 48  # daemon/README.md §2.2
_LOCAL_LIMIT: Final = 1 << SEQUENCE_LOCAL_BITS
# Sequence numbers are signed 64-bit (.NET ``long``): partitions 0..2**15-1 keep them positive.
_PARTITION_LIMIT: Final = 1 << (63 - SEQUENCE_LOCAL_BITS)
_SEQUENCE_LIMIT: Final = 1 << 63


def key_hash(key: str) -> int:
    """XXH64 of the key's UTF-8 bytes with seed 42, as a signed 64-bit integer.

    Equal to Spark SQL's ``xxhash64(key)`` for a non-null string column. A ``str`` holding
    lone surrogates has no UTF-8 form and raises ``UnicodeEncodeError``; wire strings never do.
    """
    unsigned = xxhash.xxh64_intdigest(key.encode("utf-8"), seed=PARTITION_SEED)
    return unsigned - (1 << 64) if unsigned >= (1 << 63) else unsigned


def partition_for_key(key: str, partitions: int) -> int:
    """The partition in ``[0, partitions)`` of a keyed message: Spark's ``pmod(hash, P)``."""
    if partitions < 1:
        raise ValueError(f"partition count must be at least 1, not {partitions}")
    # Python's % with a positive divisor is already non-negative, as Spark's pmod is.
    return key_hash(key) % partitions


def partition_key_of(
    session_id: str | None,
    partition_key: str | None,
    message_id: str | None,
    duplicate_detection: bool,
) -> str | None:
    """The key that places a message (daemon/README.md §0.1.4), or ``None`` for round-robin.

    SessionId if set, else PartitionKey if set, else MessageId when the entity has duplicate
    detection, else ``None``. "Set" means not ``None``. A SessionId and a PartitionKey that
    are both set must be equal (daemon/README.md §1.7); otherwise :class:`InvalidOperation`.
    """
    if session_id is not None:
        if partition_key is not None and partition_key != session_id:
            raise InvalidOperation(
                f"PartitionKey {display_value(partition_key)} differs from SessionId "
                f"{display_value(session_id)}: when both are set they must be equal"
            )
        return session_id
    if partition_key is not None:
        return partition_key
    if duplicate_detection:
        return message_id
    return None


def public_sequence_number(partition: int, local: int) -> int:
    """``(partition << 48) | local``: the sequence number clients see (daemon/README.md §22).

    ``local`` is the partition store's own number, in ``[1, 2**48)``; ``partition`` is in
    ``[0, 2**15)`` so the result stays a positive signed 64-bit value. A non-partitioned
    entity uses partition 0, so its public number is its local one.
    """
    if not 0 <= partition < _PARTITION_LIMIT:
        raise ValueError(f"partition must be in [0, {_PARTITION_LIMIT}), not {partition}")
    if not 1 <= local < _LOCAL_LIMIT:
        raise ValueError(f"local sequence number must be in [1, 2**48), not {local}")
    return (partition << SEQUENCE_LOCAL_BITS) | local


def split_sequence_number(seq: int) -> tuple[int, int]:
    """The ``(partition, local)`` pair of a public sequence number; the inverse of the above."""
    if not 0 < seq < _SEQUENCE_LIMIT:
        raise ValueError(f"sequence number must be in [1, 2**63), not {seq}")
    partition, local = seq >> SEQUENCE_LOCAL_BITS, seq & (_LOCAL_LIMIT - 1)
    if local == 0:
        raise ValueError(f"sequence number {seq} has local part 0; local numbers start at 1")
    return partition, local
