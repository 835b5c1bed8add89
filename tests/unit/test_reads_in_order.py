"""Reading a partition log's records in order: a read that follows the previous record reads
ahead in one call (daemon/README.md §21.11), and what it returns is always the record indexed,
across segments, appends made after the read-ahead, other logs read in between, and damage."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core.records import NOT_SCHEDULED, StagedRecord
from sbctld.storage import log as log_module
from sbctld.storage import reading
from sbctld.storage.log import PartitionLog
from sbctld.storage.space import CorruptRecord
from sbctld.storage.sync import Syncer

NOW = 1_767_225_600_000


def payloads(n: int, seed: int = 0) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(rnd.randint(0, 3000)) for _ in range(n)]


def append(log: PartitionLog, bodies: list[bytes]) -> int:
    return log.append([StagedRecord(b, -1, NOT_SCHEDULED) for b in bodies], NOW)


@pytest.fixture
def opened(tmp_path: Path) -> Iterator[list[PartitionLog]]:
    logs: list[PartitionLog] = []
    yield logs
    for log in logs:
        log.close()


def open_log(directory: Path, opened: list[PartitionLog], segment_bytes: int) -> PartitionLog:
    log = PartitionLog.open(directory, Syncer("os"), segment_bytes)
    opened.append(log)
    return log


def count_preads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.pread

    def spy(fd: int, n: int, offset: int) -> bytes:
        calls.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(log_module.os, "pread", spy)
    return calls


def test_reading_in_order_reads_ahead_and_returns_every_record(
    tmp_path: Path, opened: list[PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "p", opened, 40_000)  # several segments
    bodies = payloads(300)
    first = append(log, bodies[:10])
    for at in range(10, len(bodies), 10):
        append(log, bodies[at : at + 10])
    assert len(log.segments) > 3
    calls = count_preads(monkeypatch)
    got = [log.read_payload(first + i) for i in range(len(bodies))]
    assert got == bodies
    assert len(calls) < len(bodies) / 4  # one read per run of records, not one each


def test_a_read_out_of_order_reads_only_its_record(
    tmp_path: Path, opened: list[PartitionLog], monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "p", opened, log_module.DEFAULT_SEGMENT_BYTES)
    bodies = [b"x" * 1000] * 50
    first = append(log, bodies)
    calls = count_preads(monkeypatch)
    assert log.read_payload(first + 30) == bodies[30]
    assert log.read_payload(first + 10) == bodies[10]
    assert max(calls) < 1100


def test_records_appended_after_a_read_ahead_are_read_from_the_file(
    tmp_path: Path, opened: list[PartitionLog]
) -> None:
    log = open_log(tmp_path / "p", opened, log_module.DEFAULT_SEGMENT_BYTES)
    bodies = payloads(40, seed=1)
    first = append(log, bodies[:20])
    assert [log.read_payload(first + i) for i in range(20)] == bodies[:20]
    append(log, bodies[20:])
    assert [log.read_payload(first + i) for i in range(40)] == bodies


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 59)), max_size=120))
def test_any_interleaving_of_two_logs_reads_the_indexed_records(
    tmp_path_factory: pytest.TempPathFactory, reads: list[tuple[str, int]]
) -> None:
    root = tmp_path_factory.mktemp("two")
    logs: list[PartitionLog] = []
    try:
        a = open_log(root / "a", logs, 20_000)
        b = open_log(root / "b", logs, 20_000)
        bodies = {"a": payloads(60, seed=2), "b": payloads(60, seed=3)}
        firsts = {"a": append(a, bodies["a"]), "b": append(b, bodies["b"])}
        by_name = {"a": a, "b": b}
        for name, i in reads:
            assert by_name[name].read_payload(firsts[name] + i) == bodies[name][i]
            if i + 1 < 60:  # and the next one, in order (the read-ahead case)
                assert by_name[name].read_payload(firsts[name] + i + 1) == bodies[name][i + 1]
    finally:
        for log in logs:
            log.close()


def test_a_damaged_record_is_still_refused_when_read_in_order(
    tmp_path: Path, opened: list[PartitionLog]
) -> None:
    log = open_log(tmp_path / "p", opened, log_module.DEFAULT_SEGMENT_BYTES)
    bodies = [bytes([i]) * 500 for i in range(10)]
    first = append(log, bodies)
    seg = log.segments[0]
    i = 5
    where = log.offset[first + i - log.base] + 100
    fd = os.open(seg.path, os.O_WRONLY)  # (a pwrite on the log's O_APPEND fd appends)
    try:
        os.pwrite(fd, b"\xff\x00\xff", where)
    finally:
        os.close(fd)
    assert log.read_payload(first) == bodies[0]  # not the preceding record: read alone
    for k in range(1, 5):
        assert log.read_payload(first + k) == bodies[k]  # in order: read ahead
    with pytest.raises(CorruptRecord):
        log.read_payload(first + i)
    assert log.read_payload(first + 6) == bodies[6]


def damage(log: PartitionLog, seq: int) -> None:
    """Flip bytes of ``seq``'s record on disk (its header when it has no body)."""
    i = seq - log.base
    k = max(j for j, s in enumerate(log.segments) if s.base <= seq)
    where = log.offset[i] + (log.length[i] // 2 if log.length[i] else -3)
    fd = os.open(log.segments[k].path, os.O_WRONLY)  # (a pwrite on the log's O_APPEND fd appends)
    try:
        os.pwrite(fd, b"\xa5", where)
    finally:
        os.close(fd)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.integers(0, 79), max_size=60),
    st.sets(st.integers(0, 79), max_size=6),
    st.integers(0, 79),
)
def test_a_batch_read_returns_what_reading_each_returns(
    tmp_path_factory: pytest.TempPathFactory, picks: list[int], damaged: set[int], before: int
) -> None:
    """read_payloads (a receive's batch) == read_payload of each, None where that refuses:
    in order or not, across segments, with damaged records, whatever was read before."""
    logs: list[PartitionLog] = []
    try:
        log = open_log(tmp_path_factory.mktemp("batch") / "p", logs, 30_000)
        bodies = payloads(80, seed=4)
        first = append(log, bodies[:40])
        append(log, bodies[40:])
        for i in damaged:
            damage(log, first + i)
        seqs = [first + i for i in (sorted(picks) if before % 2 else picks)]

        def one(seq: int) -> bytes | None:
            try:
                return log.read_payload(seq)
            except CorruptRecord:
                return None

        expected = [None if s - first in damaged else bodies[s - first] for s in seqs]
        reading.forget_read_ahead()
        assert [one(s) for s in seqs] == expected
        reading.forget_read_ahead()
        one(first + before)  # whatever buffer the read before left
        assert log.read_payloads(seqs) == expected
    finally:
        for log in logs:
            log.close()
