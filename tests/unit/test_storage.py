"""Partition logs: append, recovery from torn tails, checkpoints and GC (daemon/README.md §21).

Tests corrupt and truncate files on purpose (after Kafka's log tests).
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core.layout import CHECKPOINT_FILE as CHECKPOINT
from sbctl.core.layout import PREVIOUS_CHECKPOINT_FILE as PREVIOUS
from sbctl.core.layout import journal_name, mirror_name, segment_name
from sbctl.core.records import BATCH_OVERHEAD, NOT_SCHEDULED, RECORD_OVERHEAD, StagedRecord
from sbctld.storage import log as log_module
from sbctld.storage.journal import Entry
from sbctld.storage.log import MAX_TIME_MS, OP_DELIVERY, OP_PROPS, PartitionLog, State
from sbctld.storage.sync import Syncer

NOW = 1_767_225_600_000
LIVE = [s for s in State if s != State.GONE]


def rec(payload: bytes, ttl: int = -1, scheduled: int = NOT_SCHEDULED) -> StagedRecord:
    return StagedRecord(payload, ttl, scheduled)


def batch_size(*payloads: bytes) -> int:
    return BATCH_OVERHEAD + sum(RECORD_OVERHEAD + len(p) for p in payloads)


class Logs:
    """Opens partition logs on one folder and closes every one of them at the end."""

    def __init__(self, directory: Path, syncer: Syncer) -> None:
        self.directory = directory
        self.syncer = syncer
        self.opened: list[PartitionLog] = []

    def open(self, segment_bytes: int = log_module.DEFAULT_SEGMENT_BYTES) -> PartitionLog:
        log = PartitionLog.open(self.directory, self.syncer, segment_bytes)
        self.opened.append(log)
        return log

    def reopen(self, log: PartitionLog) -> PartitionLog:
        """A clean restart without a checkpoint: what a crash after a sync leaves."""
        self.close(log)
        return self.open(log.segment_bytes)

    def close(self, log: PartitionLog) -> None:
        log.close()
        self.syncer.sync_now()

    def close_all(self) -> None:
        for log in self.opened:
            log.close()
        self.syncer.sync_now()


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[Logs]:
    made = Logs(tmp_path / "p00", Syncer("os"))
    yield made
    made.close_all()


def files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def segment_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.log"))


def snapshot(log: PartitionLog) -> dict[str, Any]:
    """Everything observable about a log, independent of how much of it was trimmed."""
    out: dict[str, Any] = {
        "next_seq": log.next_seq,
        "head": log.head,
        "live_counts": [log.counts[s] for s in LIVE],
        "message_count": log.message_count,
        "live_bytes": log.live_bytes,
    }
    for seq in range(1, log.next_seq):
        st_ = log.state_of(seq)
        if st_ == State.GONE:
            out[str(seq)] = "gone"
            continue
        i = seq - log.base
        out[str(seq)] = (
            int(st_),
            log.read_payload(seq),
            log.enq[i],
            log.exp[i],
            log.dc[i],
            log.props.get(seq),
        )
    return out


def check_invariants(log: PartitionLog) -> None:
    """Derived figures against a brute-force recount of the index."""
    assert len(log.state) == len(log.offset) == len(log.length) == len(log.dc)
    assert len(log.state) == len(log.enq) == len(log.exp) == log.next_seq - log.base
    for s in State:
        assert log.counts[s] == log.state.count(s), s
    live = [log.base + i for i, s in enumerate(log.state) if s != State.GONE]
    assert log.message_count == len(live)
    assert log.live_bytes == sum(log.length[q - log.base] for q in live)
    assert log.head == (live[0] if live else log.next_seq)
    bases = [s.base for s in log.segments]
    assert bases == sorted(bases) == log._bases
    for k, base in enumerate(bases):
        end = bases[k + 1] if k + 1 < len(bases) else log.next_seq
        assert log.seg_live.get(base, 0) == sum(base <= q < end for q in live), base
    assert segment_files(log.directory) == [segment_name(b) for b in bases]
    for q in live:
        assert q >= bases[0]


# --------------------------------------------------------------------- appending


def test_sequence_numbers_start_at_1_and_are_gap_free(logs: Logs) -> None:
    log = logs.open()
    assert (log.base, log.head, log.next_seq, log.message_count) == (1, 1, 1, 0)
    firsts = [
        log.append([rec(b"a"), rec(b"bb"), rec(b"ccc")], NOW),
        log.append([rec(b"d")], NOW + 1),
        log.append([rec(b"e"), rec(b"f")], NOW + 2),
    ]
    assert firsts == [1, 4, 5]
    assert log.next_seq == 7
    assert [log.read_payload(q) for q in range(1, 7)] == [b"a", b"bb", b"ccc", b"d", b"e", b"f"]
    assert list(log.enq) == [NOW] * 3 + [NOW + 1] + [NOW + 2] * 2
    assert log.counts[State.ACTIVE] == 6
    assert log.live_bytes == 9
    assert log.state_of(0) == log.state_of(7) == State.GONE
    assert segment_files(log.directory) == [segment_name(1)]
    check_invariants(log)


def test_an_empty_batch_between_others_is_recovered(logs: Logs) -> None:
    log = logs.open()
    log.append([rec(b"a"), rec(b"bb")], NOW)
    log.append([], NOW + 1)
    log.append([rec(b"c", 5_000)], NOW + 2)
    before = snapshot(log)
    log = logs.reopen(log)  # (no checkpoint: every batch is scanned)
    assert snapshot(log) == before
    assert [log.read_payload(q) for q in range(1, 4)] == [b"a", b"bb", b"c"]
    check_invariants(log)


def test_append_records_ttl_and_schedule(logs: Logs) -> None:
    log = logs.open()
    log.append(
        [rec(b"ttl", 5_000), rec(b"forever"), rec(b"huge", 2**62), rec(b"later", 10, NOW + 60_000)],
        NOW,
    )
    assert list(log.exp) == [NOW + 5_000, MAX_TIME_MS, MAX_TIME_MS, NOW + 10]
    assert [log.state_of(q) for q in range(1, 5)] == [State.ACTIVE] * 3 + [State.SCHEDULED]
    assert log.counts[State.SCHEDULED] == 1
    assert list(log.seqs_in(State.ACTIVE)) == [1, 2, 3]
    assert list(log.seqs_in(State.SCHEDULED)) == [4]
    assert list(log.seqs_in(State.ACTIVE, 2)) == [2, 3]


def test_segments_roll_at_the_size_limit(logs: Logs) -> None:
    one = batch_size(b"x" * 40)
    log = logs.open(segment_bytes=2 * one)
    for _ in range(5):
        log.append([rec(b"x" * 40)], NOW)
    assert segment_files(log.directory) == [segment_name(b) for b in (1, 3, 5)]
    # A batch bigger than a whole segment still goes in (alone in a fresh segment).
    log.append([rec(b"y" * (3 * one))], NOW)
    assert log.read_payload(6) == b"y" * (3 * one)
    assert segment_files(log.directory)[-1] == segment_name(6)
    check_invariants(log)


def test_set_state_counts_and_props(logs: Logs) -> None:
    log = logs.open()
    log.append([rec(b"a"), rec(b"bb"), rec(b"ccc")], NOW)
    log.set_state(2, State.DEADLETTERED, {"DeadLetterReason": "x"})
    assert log.props[2] == {"DeadLetterReason": "x"}
    assert log.counts[State.DEADLETTERED] == 1
    log.set_state(1, State.GONE)
    assert (log.head, log.live_bytes, log.message_count) == (2, 5, 2)
    # GONE is final: later changes to a settled message are ignored.
    log.set_state(1, State.ACTIVE)
    log.record([Entry(OP_PROPS, 1, 0, msgspec.msgpack.encode({"k": 1}))])
    assert log.state_of(1) == State.GONE
    assert 1 not in log.props
    log.set_state(2, State.GONE)
    assert 2 not in log.props
    assert log.head == 3
    check_invariants(log)


# --------------------------------------------------------------------- reopening


def build_history(log: PartitionLog, *, checkpoint_at: int | None) -> None:
    """A mix of appends and state changes; optionally a checkpoint in the middle."""
    rng = random.Random(7)
    for step in range(30):
        n = rng.randint(1, 3)
        log.append(
            [
                rec(rng.randbytes(rng.randint(0, 80)), rng.choice([-1, 60_000]), NOT_SCHEDULED)
                for _ in range(n)
            ],
            NOW + step,
        )
        if step % 3 == 2:
            seq = rng.randrange(1, log.next_seq)
            log.set_state(seq, rng.choice(list(State)), {"step": step})
            log.record([Entry(OP_DELIVERY, rng.randrange(1, log.next_seq), step, b"")])
        if step == checkpoint_at:
            log.checkpoint()


@pytest.mark.parametrize("segment_bytes", [log_module.DEFAULT_SEGMENT_BYTES, 300])
@pytest.mark.parametrize("checkpoint_at", [None, 0, 14, 29])
def test_reopen_recovers_everything(
    logs: Logs, segment_bytes: int, checkpoint_at: int | None
) -> None:
    log = logs.open(segment_bytes)
    build_history(log, checkpoint_at=checkpoint_at)
    if segment_bytes == 300:
        assert len(log.segments) > 5
    before = snapshot(log)
    check_invariants(log)
    log = logs.reopen(log)
    assert log.notes == []
    assert snapshot(log) == before
    check_invariants(log)
    # Appends continue where the log left off, and survive another restart.
    assert log.append([rec(b"next")], NOW + 100) == before["next_seq"]
    after = snapshot(log)
    log.checkpoint()
    log = logs.reopen(log)
    assert snapshot(log) == after
    check_invariants(log)


def test_settlements_replayed_without_a_checkpoint(logs: Logs) -> None:
    """Regression: replaying a completion before any checkpoint crashed with KeyError."""
    log = logs.open()
    log.append([rec(b"a"), rec(b"b"), rec(b"c")], NOW)
    log.set_state(1, State.GONE)
    log.set_state(3, State.GONE)
    log = logs.reopen(log)
    assert [log.state_of(q) for q in (1, 2, 3)] == [State.GONE, State.ACTIVE, State.GONE]
    assert log.head == 2
    check_invariants(log)


def test_journal_after_checkpoint_is_replayed(logs: Logs) -> None:
    log = logs.open()
    log.append([rec(b"a"), rec(b"b"), rec(b"c"), rec(b"d")], NOW)
    log.set_state(1, State.GONE)
    log.checkpoint()
    # Kept for the previous checkpoint generation until the next checkpoint.
    assert (log.directory / journal_name(0)).exists()
    log.set_state(2, State.DEFERRED, {"why": "later"})
    log.record([Entry(OP_DELIVERY, 3, 4, b"")])
    log.record([Entry(OP_PROPS, 3, 0, msgspec.msgpack.encode({"p": 1.5}))])
    log.set_state(4, State.GONE)
    assert (log.directory / journal_name(1)).exists()
    before = snapshot(log)
    log = logs.reopen(log)
    assert snapshot(log) == before
    assert log.state_of(2) == State.DEFERRED
    assert log.props == {2: {"why": "later"}, 3: {"p": 1.5}}
    assert log.dc[3 - log.base] == 4
    assert log.state_of(4) == State.GONE
    check_invariants(log)


def test_unreadable_checkpoint_is_reported_and_logs_rebuilt(logs: Logs) -> None:
    log = logs.open()
    log.append([rec(b"a"), rec(b"b")], NOW)
    log.checkpoint()
    path = log.directory / CHECKPOINT
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    log = logs.reopen(log)
    assert any("unreadable" in n for n in log.notes)
    assert [log.read_payload(q) for q in (1, 2)] == [b"a", b"b"]
    assert log.next_seq == 3


# --------------------------------------------------------------------- torn segment tails


def three_batches(log: PartitionLog, *, checkpoint_before_last: bool = False) -> list[int]:
    """Appends 5 messages in 3 batches; returns the batch end offsets."""
    ends: list[int] = []
    for payloads in ([b"one", b"two"], [b"three"], [b"four", b"five"]):
        if checkpoint_before_last and len(ends) == 2:
            log.checkpoint()
        log.append([rec(p) for p in payloads], NOW)
        ends.append(log.segments[-1].size)
    return ends


def assert_recovered(log: PartitionLog, survivors: int, dropped: int) -> None:
    assert len(log.notes) == 1, log.notes
    assert f"truncated {dropped} torn bytes" in log.notes[0]
    assert segment_name(1) in log.notes[0]
    assert log.next_seq == survivors + 1
    expected = [b"one", b"two", b"three", b"four", b"five"][:survivors]
    assert [log.read_payload(q) for q in range(1, survivors + 1)] == expected
    check_invariants(log)


@pytest.mark.parametrize("with_checkpoint", [False, True])
@pytest.mark.parametrize("cut", [1, 10, BATCH_OVERHEAD - 1, BATCH_OVERHEAD, -1])
def test_truncated_last_batch(logs: Logs, cut: int, with_checkpoint: bool) -> None:
    log = logs.open()
    ends = three_batches(log, checkpoint_before_last=with_checkpoint)
    seg = log.segments[0].path
    log = logs.reopen(log)
    keep = ends[1] + cut if cut > 0 else ends[2] + cut
    os.truncate(seg, keep)
    log = logs.reopen(log)
    assert_recovered(log, survivors=3, dropped=keep - ends[1])
    assert seg.stat().st_size == ends[1]
    assert log.append([rec(b"six")], NOW) == 4
    log = logs.reopen(log)
    assert log.notes == []
    assert [log.read_payload(q) for q in (3, 4)] == [b"three", b"six"]
    check_invariants(log)


@pytest.mark.parametrize("garbage", [b"\x00", b"\x00" * 100, b"garbage!" * 5, b"\xff" * 40])
def test_garbage_after_the_last_batch(logs: Logs, garbage: bytes) -> None:
    log = logs.open()
    ends = three_batches(log)
    seg = log.segments[0].path
    log = logs.reopen(log)
    with open(seg, "ab") as fh:
        fh.write(garbage)
    log = logs.reopen(log)
    assert_recovered(log, survivors=5, dropped=len(garbage))
    assert seg.stat().st_size == ends[2]
    assert log.append([rec(b"six")], NOW) == 6


@pytest.mark.parametrize("where", ["crc", "header", "record", "payload", "end"])
def test_flipped_byte_in_the_last_batch(logs: Logs, where: str) -> None:
    log = logs.open()
    ends = three_batches(log)
    seg = log.segments[0].path
    log = logs.reopen(log)
    offset = {
        "crc": ends[1] + 21,
        "header": ends[1] + 28,
        "record": ends[1] + BATCH_OVERHEAD + 4,
        "payload": ends[1] + BATCH_OVERHEAD + RECORD_OVERHEAD,
        "end": ends[2] - 1,
    }[where]
    data = bytearray(seg.read_bytes())
    data[offset] ^= 0x5A
    seg.write_bytes(bytes(data))
    log = logs.reopen(log)
    assert_recovered(log, survivors=3, dropped=ends[2] - ends[1])
    assert "CRC mismatch" in log.notes[0]
    assert log.append([rec(b"again")], NOW) == 4
    assert log.read_payload(4) == b"again"


def test_tear_in_an_earlier_segment_sets_later_ones_aside(logs: Logs) -> None:
    one = batch_size(b"m" * 10)
    log = logs.open(segment_bytes=2 * one)
    for k in range(6):
        log.append([rec(b"m" * 9 + bytes([48 + k]))], NOW)
    assert segment_files(log.directory) == [segment_name(b) for b in (1, 3, 5)]
    middle = log.segments[1].path
    log = logs.reopen(log)
    data = bytearray(middle.read_bytes())
    data[one + 30] ^= 1  # message 4, the second batch of the middle segment
    middle.write_bytes(bytes(data))
    log = logs.reopen(log)
    # Only the damaged message is lost: the later segment is kept (daemon/README.md §0.4).
    assert log.next_seq == 7
    assert log.state_of(4) == State.GONE
    assert log.corrupt_count == 1
    assert any("copied to" in n for n in log.notes)
    assert (log.directory / (segment_name(3) + ".corrupt")).stat().st_size == one
    assert segment_files(log.directory) == [segment_name(b) for b in (1, 3, 5)]
    kept = (1, 2, 3, 5, 6)
    assert [log.read_payload(q) for q in kept] == [b"m" * 9 + bytes([47 + q]) for q in kept]
    assert log.append([rec(b"new")], NOW) == 7
    log = logs.reopen(log)
    assert log.read_payload(7) == b"new"
    check_invariants(log)


def test_journal_entries_about_torn_messages_never_apply_to_new_ones(logs: Logs) -> None:
    """A settlement journaled for a message whose append was lost must not settle the
    new message that reuses its sequence number after the next restart."""
    log = logs.open()
    log.append([rec(b"a")], NOW)
    first_end = log.segments[0].size
    log.append([rec(b"b")], NOW)
    log.set_state(2, State.GONE)
    log.record([Entry(OP_DELIVERY, 2, 9, b"")])
    seg = log.segments[0].path
    log = logs.reopen(log)
    os.truncate(seg, first_end + 7)
    log = logs.reopen(log)
    assert log.next_seq == 2
    assert log.append([rec(b"acknowledged")], NOW) == 2
    log = logs.reopen(log)
    assert log.state_of(2) == State.ACTIVE
    assert log.dc[2 - log.base] == 0
    assert log.read_payload(2) == b"acknowledged"
    check_invariants(log)


# --------------------------------------------------------------------- torn journal tails


def journal_history(log: PartitionLog) -> list[int]:
    """Five messages, then four journal batches; returns the journal size after each."""
    log.append([rec(bytes([97 + k])) for k in range(5)], NOW)
    sizes = []
    log.set_state(1, State.GONE)
    sizes.append(log.journal.size)
    log.set_state(2, State.DEFERRED, {"d": True})
    sizes.append(log.journal.size)
    log.record([Entry(OP_DELIVERY, 3, 2, b"")])
    sizes.append(log.journal.size)
    log.set_state(4, State.DEADLETTERED, {"DeadLetterReason": "r"})
    sizes.append(log.journal.size)
    return sizes


def assert_journal_prefix(log: PartitionLog) -> None:
    assert log.state_of(1) == State.GONE
    assert log.state_of(2) == State.DEFERRED
    assert log.props.get(2) == {"d": True}
    assert log.dc[3 - log.base] == 2
    assert log.state_of(4) == State.ACTIVE  # the torn batch is lost
    assert 4 not in log.props
    check_invariants(log)


@pytest.mark.parametrize("damage", ["cut-1", "cut-4", "cut-9", "flip-first", "flip-last"])
def test_torn_journal_tail(logs: Logs, damage: str) -> None:
    """Each journal batch is also written to the mirror: damage to one copy loses nothing."""
    log = logs.open()
    sizes = journal_history(log)
    path = log.directory / journal_name(0)
    log = logs.reopen(log)
    data = bytearray(path.read_bytes())
    assert len(data) == sizes[-1] == (log.directory / mirror_name(0)).stat().st_size
    if damage.startswith("cut-"):
        data = data[: sizes[-1] - int(damage[4:])]
    else:
        data[sizes[2] + (4 if damage == "flip-first" else sizes[3] - sizes[2] - 1)] ^= 0x10
    path.write_bytes(bytes(data))
    log = logs.reopen(log)
    assert len(log.notes) == 1, log.notes
    assert "0 lost" in log.notes[0]
    assert log.state_of(4) == State.DEADLETTERED  # from the mirror
    assert log.props.get(4) == {"DeadLetterReason": "r"}
    assert [log.state_of(q) for q in (1, 2)] == [State.GONE, State.DEFERRED]
    assert log.dc[3 - log.base] == 2
    check_invariants(log)
    # Later journal writes go to a new generation (both copies whole) and survive.
    assert log.journal.generation == 1
    log.set_state(5, State.GONE)
    log = logs.reopen(log)
    assert log.state_of(5) == State.GONE
    assert log.state_of(4) == State.DEADLETTERED


@pytest.mark.parametrize("cut", [1, 7])
def test_a_journal_batch_torn_in_both_copies_is_lost(logs: Logs, cut: int) -> None:
    log = logs.open()
    sizes = journal_history(log)
    paths = [log.directory / journal_name(0), log.directory / mirror_name(0)]
    log = logs.reopen(log)
    for path in paths:
        os.truncate(path, sizes[2] + (sizes[3] - sizes[2]) // 2 - cut)
    log = logs.reopen(log)
    assert [path.stat().st_size for path in paths] == [sizes[2]] * 2
    assert_journal_prefix(log)


def test_garbage_after_the_journal(logs: Logs) -> None:
    log = logs.open()
    sizes = journal_history(log)
    paths = [log.directory / journal_name(0), log.directory / mirror_name(0)]
    log = logs.reopen(log)
    for path in paths:
        with open(path, "ab") as fh:
            fh.write(b"\x07\x00\x00\x00junk")
    log = logs.reopen(log)
    assert "0 lost" in log.notes[0]
    assert [path.stat().st_size for path in paths] == [sizes[-1]] * 2
    assert log.state_of(4) == State.DEADLETTERED
    check_invariants(log)


# --------------------------------------------------------------------- checkpoint and GC


def one_per_segment(logs: Logs, n: int) -> PartitionLog:
    size = batch_size(b"p" * 20)
    log = logs.open(segment_bytes=size + size // 2)
    for k in range(n):
        log.append([rec(b"p" * 19 + bytes([48 + k]))], NOW)
    assert segment_files(log.directory) == [segment_name(b) for b in range(1, n + 1)]
    return log


def test_checkpoint_deletes_settled_segments_and_old_journals(logs: Logs) -> None:
    log = one_per_segment(logs, 6)
    for q in (1, 2, 4, 5, 6):
        log.set_state(q, State.GONE)
    assert files(log.directory) == [journal_name(0), mirror_name(0)] + [
        segment_name(b) for b in range(1, 7)
    ]
    log.checkpoint()
    # Settled segments and the journal stay for the previous checkpoint generation ...
    assert segment_name(1) in files(log.directory)
    assert journal_name(0) in files(log.directory)
    assert mirror_name(0) in files(log.directory)
    log.checkpoint()
    # ... until the next one. Segment 3 holds a live message; 6 is the one appends go to.
    assert files(log.directory) == [segment_name(3), segment_name(6), CHECKPOINT, PREVIOUS]
    assert (log.base, log.head) == (3, 3)
    assert log.read_payload(3) == b"p" * 19 + b"2"
    check_invariants(log)
    log = logs.reopen(log)
    assert log.read_payload(3) == b"p" * 19 + b"2"
    assert log.append([rec(b"seven")], NOW) == 7
    log.set_state(3, State.GONE)
    assert files(log.directory) == [
        journal_name(2),
        mirror_name(2),
        segment_name(3),
        segment_name(6),
        segment_name(7),
        CHECKPOINT,
        PREVIOUS,
    ]
    log.checkpoint()
    log.checkpoint()
    assert files(log.directory) == [segment_name(7), CHECKPOINT, PREVIOUS]
    assert (log.base, log.head) == (7, 7)
    check_invariants(log)
    log = logs.reopen(log)
    assert log.read_payload(7) == b"seven"
    assert [log.state_of(q) for q in range(1, 8)] == [State.GONE] * 6 + [State.ACTIVE]
    check_invariants(log)


@pytest.mark.parametrize("live_state", LIVE)
@pytest.mark.parametrize("position", [0, 1, 2])
def test_gc_never_deletes_a_segment_with_a_live_message(
    logs: Logs, live_state: State, position: int
) -> None:
    size = batch_size(b"a", b"b", b"c")
    log = logs.open(segment_bytes=size)
    log.append([rec(b"a"), rec(b"b"), rec(b"c")], NOW)
    log.append([rec(b"d"), rec(b"e"), rec(b"f")], NOW)
    log.append([rec(b"g")], NOW)
    for q in range(1, 8):
        if q != 1 + position:
            log.set_state(q, State.GONE)
    log.set_state(1 + position, live_state)
    log.checkpoint()
    log.checkpoint()  # settled segments go at the checkpoint after the one that saw them
    assert segment_files(log.directory) == [segment_name(1), segment_name(7)]
    assert log.read_payload(1 + position) == b"abc"[position : position + 1]
    log = logs.reopen(log)
    assert log.state_of(1 + position) == live_state
    assert log.read_payload(1 + position) == b"abc"[position : position + 1]
    check_invariants(log)


def test_trim_keeps_counts_right(logs: Logs) -> None:
    log = logs.open()
    log.append([rec(bytes([65 + k]) * (k + 1)) for k in range(10)], NOW)
    for q in (1, 2, 3, 4, 6):
        log.set_state(q, State.GONE)
    log.set_state(8, State.DEADLETTERED)
    log.checkpoint()
    assert (log.base, log.head, len(log.state)) == (5, 5, 6)
    assert log.counts[State.GONE] == 1
    assert log.counts[State.ACTIVE] == 4
    assert log.counts[State.DEADLETTERED] == 1
    assert log.message_count == 5
    assert log.live_bytes == 5 + 7 + 8 + 9 + 10
    assert list(log.seqs_in(State.ACTIVE)) == [5, 7, 9, 10]
    assert log.state_of(3) == State.GONE
    check_invariants(log)
    log.set_state(5, State.GONE)
    assert log.head == 7
    log.checkpoint()
    assert (log.base, log.counts[State.GONE]) == (7, 0)
    check_invariants(log)
    before = snapshot(log)
    log = logs.reopen(log)
    assert snapshot(log) == before
    check_invariants(log)


def test_checkpoint_of_a_fully_settled_log(logs: Logs) -> None:
    log = logs.open()
    log.append([rec(b"a"), rec(b"b")], NOW)
    log.set_state(1, State.GONE)
    log.set_state(2, State.GONE)
    log.checkpoint()
    assert (log.base, log.head, log.next_seq, len(log.state)) == (3, 3, 3, 0)
    log = logs.reopen(log)
    assert (log.base, log.head, log.next_seq) == (3, 3, 3)
    assert log.append([rec(b"c")], NOW) == 3
    assert log.read_payload(3) == b"c"
    check_invariants(log)


def test_checkpoint_syncs_every_segment_written_since_the_last_one(
    logs: Logs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A segment rolled between two commit rounds may hold unsynced appends."""
    synced: list[int] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", spy)
    log = one_per_segment(logs, 3)
    log.checkpoint()
    assert {s.fd for s in log.segments} <= set(synced)
    synced.clear()
    log.append([rec(b"p" * 20)], NOW)
    log.append([rec(b"p" * 20)], NOW)
    log.checkpoint()
    assert {s.fd for s in log.segments if s.base >= 3} <= set(synced)


# --------------------------------------------------------------------- model-based


class Model:
    def __init__(self) -> None:
        self.next_seq = 1
        self.msgs: dict[int, dict[str, Any]] = {}

    def append(self, payloads: list[bytes], scheduled: bool) -> None:
        for p in payloads:
            state = State.SCHEDULED if scheduled else State.ACTIVE
            self.msgs[self.next_seq] = {"payload": p, "state": state, "dc": 0, "props": {}}
            self.next_seq += 1

    def set_state(self, seq: int, state: State, changes: dict[str, Any] | None) -> None:
        m = self.msgs[seq]
        if m["state"] == State.GONE:
            return
        if changes:
            m["props"].update(changes)
        m["state"] = state
        if state == State.GONE:
            m["props"] = {}


def compare(log: PartitionLog, model: Model) -> None:
    assert log.next_seq == model.next_seq
    for seq, m in model.msgs.items():
        assert log.state_of(seq) == m["state"], seq
        if m["state"] != State.GONE:
            assert log.read_payload(seq) == m["payload"]
            assert log.dc[seq - log.base] == m["dc"]
            assert log.props.get(seq, {}) == m["props"]
    check_invariants(log)


op_st = st.one_of(
    st.tuples(
        st.just("append"), st.lists(st.binary(max_size=70), min_size=1, max_size=4), st.booleans()
    ),
    st.tuples(
        st.just("state"),
        st.integers(min_value=0),
        st.sampled_from(list(State)),
        st.one_of(
            st.none(),
            st.dictionaries(st.sampled_from("abc"), st.integers(-(2**63), 2**63 - 1), max_size=2),
        ),
    ),
    st.tuples(st.just("deliver"), st.integers(min_value=0), st.integers(0, 2**32 - 1)),
    st.tuples(
        st.just("props"),
        st.integers(min_value=0),
        st.dictionaries(st.sampled_from("xyz"), st.text(max_size=3), min_size=1, max_size=2),
    ),
    st.tuples(st.just("checkpoint")),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("crash")),
)


def run_ops(logs: Logs, ops: list[tuple[Any, ...]], segment_bytes: int) -> None:
    model = Model()
    log = logs.open(segment_bytes)
    for op in ops:
        kind = op[0]
        if kind == "append":
            log.append([rec(p, -1, NOW + 1 if op[2] else NOT_SCHEDULED) for p in op[1]], NOW)
            model.append(op[1], op[2])
        elif kind in ("state", "deliver", "props"):
            if model.next_seq == 1:
                continue
            seq = 1 + op[1] % (model.next_seq - 1)
            if kind == "state":
                log.set_state(seq, op[2], op[3])
                model.set_state(seq, op[2], op[3])
            elif kind == "deliver":
                log.record([Entry(OP_DELIVERY, seq, op[2], b"")])
                model.msgs[seq]["dc"] = op[2]
            else:
                log.record([Entry(OP_PROPS, seq, 0, msgspec.msgpack.encode(op[2]))])
                if model.msgs[seq]["state"] != State.GONE:
                    model.msgs[seq]["props"].update(op[2])
        elif kind == "checkpoint":
            log.checkpoint()
        elif kind == "reopen":
            log = logs.reopen(log)
            assert log.notes == []
        else:  # crash: a second store opens the files the first one still holds
            old = log
            log = logs.open(segment_bytes)
            logs.close(old)
            assert log.notes == []
        compare(log, model)
    log = logs.reopen(log)
    compare(log, model)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(ops=st.lists(op_st, max_size=40), segment_bytes=st.sampled_from([120, 400, 1 << 20]))
def test_random_operations_match_a_model(ops: list[tuple[Any, ...]], segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        logs = Logs(Path(tmp) / "p", Syncer("os"))
        try:
            run_ops(logs, ops, segment_bytes)
        finally:
            logs.close_all()


@pytest.mark.parametrize("seed", range(4))
def test_long_seeded_sequences_match_a_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    ops: list[tuple[Any, ...]] = []
    for _ in range(300):
        r = rng.random()
        if r < 0.35:
            payloads = [rng.randbytes(rng.randint(0, 60)) for _ in range(rng.randint(1, 5))]
            ops.append(("append", payloads, rng.random() < 0.1))
        elif r < 0.8:
            changes = {"k": rng.randint(0, 9)} if rng.random() < 0.3 else None
            weights = [5, 3, 1, 1, 1, 1]  # mostly settle, as real traffic does
            state = rng.choices(list(State), weights)[0]
            ops.append(("state", rng.randint(0, 10**6), state, changes))
        elif r < 0.9:
            ops.append(("deliver", rng.randint(0, 10**6), rng.randint(0, 20)))
        elif r < 0.96:
            ops.append(("checkpoint",))
        else:
            ops.append((rng.choice(["reopen", "crash"]),))
    logs = Logs(tmp_path / "p", Syncer("os"))
    try:
        run_ops(logs, ops, rng.choice([150, 500, 4096]))
    finally:
        logs.close_all()
