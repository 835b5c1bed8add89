"""Spark and sbctl place every key in the same partition (daemon/README.md §22, §0.4.3).

Spark SQL's ``pmod(xxhash64(key), P)`` on a string column must equal
:func:`sbctl.core.partitioning.partition_for_key` for every key, so that a Spark job can
pre-partition data exactly as the daemon routes it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from sbctl.core.partitioning import STANDARD_PARTITION_COUNT, key_hash, partition_for_key

pytestmark = pytest.mark.spark

PARTITION_COUNTS = (STANDARD_PARTITION_COUNT, 1, 2, 4)
RANDOM_SEED = 20261121
RANDOM_KEYS = 5_000

# Code point ranges the generated keys draw from: ASCII, Latin-1 and Latin Extended, Greek
# and Cyrillic, CJK, Hangul, emoji and other astral planes, combining marks, controls.
_RANGES = [
    (0x20, 0x7E),
    (0x00, 0x1F),
    (0xA0, 0x24F),
    (0x370, 0x4FF),
    (0x300, 0x36F),
    (0x4E00, 0x9FFF),
    (0xAC00, 0xD7A3),
    (0xE000, 0xF8FF),
    (0xFFF0, 0xFFFD),
    (0x1F300, 0x1FAFF),
    (0x10000, 0x10FFFF),
]


def _random_key(rng: random.Random) -> str:
    length = rng.choice([0, 1, 2, 3, 7, 8, 9, 15, 16, 31, 32, 33, rng.randint(0, 300)])
    chars: list[str] = []
    while len(chars) < length:
        low, high = rng.choice(_RANGES)
        code = rng.randint(low, high)
        if not 0xD800 <= code <= 0xDFFF:  # surrogates have no UTF-8 form
            chars.append(chr(code))
    return "".join(chars)


def _keys() -> list[str]:
    rng = random.Random(RANDOM_SEED)
    fixed = [
        "",
        " ",
        "a",
        "orders",
        "session-1",
        "Session-1",
        "héllo",
        "e\u0301",
        "日本語のキー",
        "中文",
        "한국어",
        "😀",
        "👩‍👩‍👧‍👦",
        "🇮🇹🇪🇸",
        "\x00",
        "a\x00b",
        "\ufeff",
        "\U0010ffff",
        "x" * 1_000,
        "長" * 5_000,
        "🙂" * 4_096,
    ]
    # Every length 0..40 around XXH64's 4-, 8- and 32-byte stripes.
    fixed += ["k" * n for n in range(41)]
    fixed += ["é" * n for n in range(41)]
    fixed += [f"customer-{i}" for i in range(500)]
    fixed += [str(rng.getrandbits(64)) for _ in range(200)]
    return fixed + [_random_key(rng) for _ in range(RANDOM_KEYS)]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from sbctl.spark import session

    spark = session.start(
        "local[1]",
        {"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1"},
        "sbctl-partition-agreement",
    )
    try:
        yield spark
    finally:
        session.stop(spark)


def test_spark_places_every_key_like_sbctl(spark: Any) -> None:
    keys = _keys()
    assert len(keys) >= 5_000
    frame = spark.createDataFrame(list(enumerate(keys)), "i INT, key STRING")
    columns = [f"pmod(xxhash64(key), {p}) AS p{p}" for p in PARTITION_COUNTS]
    rows = frame.selectExpr("i", "key", "xxhash64(key) AS h", *columns).collect()
    assert len(rows) == len(keys)

    mismatches = []
    for row in rows:
        key = keys[row["i"]]
        assert row["key"] == key, f"Spark changed key {row['i']} on the way in"
        ours = [key_hash(key)] + [partition_for_key(key, p) for p in PARTITION_COUNTS]
        theirs = [row["h"]] + [row[f"p{p}"] for p in PARTITION_COUNTS]
        if ours != theirs:
            mismatches.append((key[:40], ours, theirs))
    assert not mismatches, f"{len(mismatches)} of {len(keys)} keys disagree: {mismatches[:5]}"


def test_spark_null_key_is_not_a_partition_key(spark: Any) -> None:
    # Spark hashes NULL to the seed (42) itself; sbctl never hashes a missing key, it
    # round-robins instead (daemon/README.md §0.1.4). A Spark job must filter or fill NULL keys.
    (row,) = spark.sql("SELECT xxhash64(CAST(NULL AS STRING)) AS h").collect()
    assert row["h"] == 42
