"""The partition function and sequence numbers (daemon/README.md §22, §0.1.4, §0.1.7, §1.7)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbctl.core.errors import BadRequest, InvalidOperation
from sbctl.core.partitioning import (
    PARTITION_SEED,
    STANDARD_PARTITION_COUNT,
    key_hash,
    partition_for_key,
    partition_key_of,
    public_sequence_number,
    split_sequence_number,
)

# Each row was computed with xxhash and checked against Spark 4.3 SQL
# `xxhash64(key), pmod(xxhash64(key), 16), pmod(xxhash64(key), 4), pmod(xxhash64(key), 2)`.
SPARK_VECTORS = [
    ("", -7444071767201028348, 4, 0, 0),
    ("a", -8582455328737087284, 12, 0, 0),
    ("abc", 1423657621850124518, 6, 2, 0),
    ("abcdefgh", 2470326616177429180, 12, 0, 0),
    ("orders", -8807140214309234074, 6, 2, 0),
    ("session-1", 8919173090395227369, 9, 1, 1),
    ("customer-42", -7330110856932682949, 11, 3, 1),
    ("héllo", 501425390238239234, 2, 2, 0),
    ("Ä", -4513091314176209326, 2, 2, 0),
    ("日本語", -619341062884681239, 9, 1, 1),
    ("😀", -5869505314936196641, 15, 3, 1),
    ("\x00", -8959994473701255385, 7, 3, 1),
    ("x" * 1000, -8448076897081045321, 7, 3, 1),
]


def test_constants() -> None:
    assert PARTITION_SEED == 42
    assert STANDARD_PARTITION_COUNT == 16


@pytest.mark.parametrize(("key", "hashed", "p16", "p4", "p2"), SPARK_VECTORS)
def test_known_vectors(key: str, hashed: int, p16: int, p4: int, p2: int) -> None:
    assert key_hash(key) == hashed
    assert partition_for_key(key, 16) == p16
    assert partition_for_key(key, 4) == p4
    assert partition_for_key(key, 2) == p2
    assert partition_for_key(key, 1) == 0


def test_hash_is_signed_and_case_sensitive() -> None:
    assert key_hash("orders") < 0 < key_hash("abc")
    assert key_hash("Orders") != key_hash("orders")
    # Unicode normalisation is not applied: composed and decomposed é differ.
    assert key_hash("\u00e9") != key_hash("e\u0301")


@pytest.mark.parametrize("partitions", [0, -1, -16])
def test_partition_count_must_be_positive(partitions: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        partition_for_key("k", partitions)


def test_lone_surrogate_has_no_utf8_form() -> None:
    with pytest.raises(UnicodeEncodeError):
        key_hash("\ud800")


keys = st.text(st.characters(codec="utf-8"), max_size=200)
counts = st.integers(min_value=1, max_value=64)


@given(keys, counts)
def test_partition_in_range_and_deterministic(key: str, partitions: int) -> None:
    chosen = partition_for_key(key, partitions)
    assert 0 <= chosen < partitions
    assert chosen == partition_for_key(key, partitions)


@given(keys)
def test_hash_is_a_signed_int64(key: str) -> None:
    assert -(2**63) <= key_hash(key) < 2**63


@given(keys, st.sampled_from([1, 2, 4]))
def test_premium_counts_nest_in_sixteen(key: str, partitions: int) -> None:
    # pmod by a divisor of 16 is pmod of the 16-way partition: a property of pmod on the
    # same signed hash, which an unsigned or truncating modulo would break.
    assert partition_for_key(key, partitions) == partition_for_key(key, 16) % partitions


def test_keys_spread_over_all_partitions() -> None:
    seen = {partition_for_key(f"key-{i}", 16) for i in range(1_000)}
    assert seen == set(range(16))


# --- key precedence (daemon/README.md §0.1.4, §1.7)
# --------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "partition_key", "message_id", "dedup", "expected"),
    [
        ("s", None, None, False, "s"),
        ("s", None, "m", True, "s"),
        ("s", "s", "m", True, "s"),
        (None, "p", None, False, "p"),
        (None, "p", "m", True, "p"),
        (None, None, "m", True, "m"),
        (None, None, "m", False, None),
        (None, None, None, True, None),
        (None, None, None, False, None),
        ("", None, "m", True, ""),
        (None, "", "m", True, ""),
    ],
)
def test_partition_key_precedence(
    session_id: str | None,
    partition_key: str | None,
    message_id: str | None,
    dedup: bool,
    expected: str | None,
) -> None:
    assert partition_key_of(session_id, partition_key, message_id, dedup) == expected


@pytest.mark.parametrize(("session_id", "partition_key"), [("s1", "s2"), ("S", "s"), ("a", "")])
def test_session_and_partition_key_must_match(session_id: str, partition_key: str) -> None:
    with pytest.raises(InvalidOperation) as info:
        partition_key_of(session_id, partition_key, "m", True)
    assert not isinstance(info.value, BadRequest)
    message = str(info.value)
    assert repr(session_id) in message and repr(partition_key) in message
    assert "must be equal" in message


def test_mismatch_message_escapes_hostile_values() -> None:
    with pytest.raises(InvalidOperation) as info:
        partition_key_of("a\x1b[2Jb", "c\nd", None, False)
    assert str(info.value).isprintable()


@given(st.text(max_size=20), st.text(max_size=20), st.none() | st.text(max_size=20), st.booleans())
def test_session_and_partition_key_rule(s: str, p: str, m: str | None, dedup: bool) -> None:
    if s == p:
        assert partition_key_of(s, p, m, dedup) == s
    else:
        with pytest.raises(InvalidOperation):
            partition_key_of(s, p, m, dedup)


# --- sequence numbers (daemon/README.md §0.1.7, §2.2, §22) -------------------------------------


@pytest.mark.parametrize(
    ("partition", "local", "public"),
    [
        (0, 1, 1),
        (0, 2**48 - 1, 2**48 - 1),
        (1, 1, 2**48 + 1),
        (15, 7, 15 * 2**48 + 7),
        (2**15 - 1, 2**48 - 1, 2**63 - 1),
    ],
)
def test_public_sequence_number(partition: int, local: int, public: int) -> None:
    assert public_sequence_number(partition, local) == public
    assert split_sequence_number(public) == (partition, local)


@pytest.mark.parametrize(
    ("partition", "local"),
    [(0, 0), (0, -1), (0, 2**48), (-1, 1), (2**15, 1), (2**16, 1)],
)
def test_public_sequence_number_refuses_out_of_range(partition: int, local: int) -> None:
    with pytest.raises(ValueError):
        public_sequence_number(partition, local)


@pytest.mark.parametrize("seq", [0, -1, 2**48, 3 * 2**48, 2**63, 2**64])
def test_split_sequence_number_refuses_out_of_range(seq: int) -> None:
    with pytest.raises(ValueError):
        split_sequence_number(seq)


@given(st.integers(0, 2**15 - 1), st.integers(1, 2**48 - 1))
def test_sequence_number_round_trip(partition: int, local: int) -> None:
    public = public_sequence_number(partition, local)
    assert 0 < public < 2**63
    assert split_sequence_number(public) == (partition, local)
    assert public >> 48 == partition


@given(st.integers(1, 2**48 - 1))
def test_non_partitioned_public_number_is_local(local: int) -> None:
    assert public_sequence_number(0, local) == local


@given(st.integers(0, 15), st.integers(1, 2**48 - 2))
def test_sequence_numbers_order_within_a_partition(partition: int, local: int) -> None:
    assert public_sequence_number(partition, local) < public_sequence_number(partition, local + 1)
