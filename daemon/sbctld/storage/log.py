"""One partition store: message segments, settlement journal, compact index, checkpoint.

Invariants:
- Local sequence numbers start at 1 (daemon/README.md §0.4.1) and are gap-free within a partition.
- The index covers ``[base, next_seq)``; every message before ``head`` is GONE.
- The index holds a few parallel arrays (no Python object per message); bodies stay in
  segment files and are read with ``os.pread`` on demand (daemon/README.md §21 "Memory").
- Every change of a message's persistent state goes through the journal first, then into
  the index. Locks are not persistent: they belong to the broker.
- Appends and journal writes are only ``os.write``; durability comes from the
  :class:`~sbctld.storage.sync.Syncer` round that the caller awaits before acknowledging.

Only the daemon's event-loop thread uses a PartitionLog.
"""

from __future__ import annotations

import logging
import operator
import os
import shutil
from array import array
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from enum import IntEnum
from itertools import compress, repeat
from pathlib import Path
from typing import Any, NamedTuple

import crc32c
import msgspec

from sbctl.core.layout import (
    SEGMENT_SUFFIX,
    corrupt_path,
    journal_name,
    mirror_name,
    numbered,
    segment_name,
)
from sbctl.core.limits import MAX_TIME_MS
from sbctl.core.records import (
    RECORD_HEADER,
    Indexed,
    StagedRecord,
    encode_indexed,
    iter_records,
    scan_batches,
)
from sbctld.storage import checkpoint as ckp
from sbctld.storage import journal as jnl
from sbctld.storage.files import fsync_dir, write_all
from sbctld.storage.reading import RecordReading, forget_read_ahead
from sbctld.storage.space import StorageError, storage_error
from sbctld.storage.sync import Syncer

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024

OP_STATE = 1  # arg = new State; extra = property changes (msgpack map) or empty
OP_DELIVERY = 2  # arg = delivery count
OP_PROPS = 3  # extra = property changes (msgpack map)
OP_CORRUPT = 4  # the record failed its CRC when read: never served again, counted

log = logging.getLogger("sbctld")


def record_crc(
    buf: bytes | bytearray | memoryview, payload_offset: int, payload_length: int
) -> int:
    """CRC-32C of one record (header and payload), checked on every read."""
    return crc32c.crc32c(
        memoryview(buf)[payload_offset - RECORD_HEADER.size : payload_offset + payload_length]
    )


def expiry(ttl_ms: int, now_ms: int) -> int:
    """When a record with this TTL (-1: none) enqueued at ``now_ms`` expires."""
    return min(now_ms + ttl_ms, MAX_TIME_MS) if ttl_ms >= 0 else MAX_TIME_MS


def expiries(ttls: Iterable[int], now_ms: int) -> array:
    """:func:`expiry` of each of ``ttls``."""
    return array("q", [min(now_ms + t, MAX_TIME_MS) if t >= 0 else MAX_TIME_MS for t in ttls])


class State(IntEnum):
    GONE = 0  # completed, expired, purged: never served again
    ACTIVE = 1
    DEFERRED = 2
    SCHEDULED = 3
    DEADLETTERED = 4
    TRANSFER_DEADLETTERED = 5


STATE_COUNT = len(State)
ACTIVE_BYTE = bytes([State.ACTIVE])


class Segment:
    __slots__ = ("base", "fd", "path", "size")

    def __init__(self, base: int, path: Path, fd: int, size: int) -> None:
        self.base = base
        self.path = path
        self.fd = fd
        self.size = size


class Staged(NamedTuple):
    """A batch written to its segment but not yet indexed (:meth:`PartitionLog.stage`)."""

    seg: Segment
    offset: int  # where the batch starts in the segment
    size: int
    now_ms: int
    cols: Indexed  # (payload offsets in the batch)


class StateIndex:
    """Queries over a per-message ``state`` bytearray indexed from ``base`` (shared by a
    partition log and a subscription's view of a topic's log)."""

    base: int
    head: int
    next_seq: int
    state: bytearray
    counts: list[int]
    corrupt_count: int  # records found damaged (never served), daemon/README.md §0.4

    def state_of(self, seq: int) -> State:
        i = seq - self.base
        if i < 0 or seq >= self.next_seq:
            return State.GONE
        return State(self.state[i])

    def seqs_in(self, state: State, start: int | None = None) -> Iterator[int]:
        """Sequence numbers in ``state`` from ``start`` on, ascending (a C-speed scan)."""
        buf, base = self.state, self.base
        needle = bytes([state])
        i = buf.find(needle, max((start or self.head) - base, 0))
        while i >= 0:
            yield base + i
            i = buf.find(needle, i + 1)

    @property
    def message_count(self) -> int:
        return len(self.state) - self.counts[State.GONE]


class PartitionLog(RecordReading, StateIndex):
    def __init__(self, directory: Path, syncer: Syncer, segment_bytes: int) -> None:
        self.directory = directory
        self.syncer = syncer
        self.segment_bytes = segment_bytes
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.base = 1
        self.head = 1
        self.next_seq = 1
        self.offset = array("I")  # payload offset in its segment file
        self.length = array("I")  # payload length
        self.enq = array("q")  # enqueued time, ms since the epoch
        self.exp = array("q")  # expiry time, ms since the epoch
        self.state = bytearray()  # State per message
        self.dc = array("I")  # delivery count
        self.crc = array("I")  # CRC-32C of each record, checked on every read
        self.props: dict[int, dict[str, Any]] = {}  # property changes (abandon, dead-letter)
        self.counts = [0] * STATE_COUNT
        self.corrupt_count = 0
        self.live_bytes = 0
        self.seg_live: dict[int, int] = {}
        self.journal = jnl.Journal(directory, 0, None, 0, mirror=True)
        self.changes_since_checkpoint = 0
        self._roll = False  # next append starts a new segment (after recovery cut one)
        self.synced_base = 0  # segments from this base on may hold unsynced appends
        self.notes: list[str] = []  # what recovery found, for the daemon log
        # Checkpoint generations (sbctld.storage.checkpoint): the journal generation the
        # current checkpoint starts from (older ones are kept for the previous generation
        # until the next checkpoint), and the segments already settled at that checkpoint
        # (deleted at the next one, when no kept checkpoint needs them any more).
        self._ckpt_gen = 0
        self._settled_at_ckpt: set[int] = set()
        self._holes: list[tuple[int, int]] = []  # seqs lost to damage found by recovery

    # ---------------------------------------------------------------- opening

    @classmethod
    def open(
        cls,
        directory: Path,
        syncer: Syncer,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> PartitionLog:
        """Open (creating if needed) and recover a partition store."""
        created = not directory.exists()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if created:
            fsync_dir(directory.parent)
        log = cls(directory, syncer, segment_bytes)
        log._recover()
        return log

    def checkpoint_recovered(self) -> None:
        """Checkpoint what recovery rebuilt, so the next start need not redo it (the
        daemon calls it once every store is open: restart time stays flat)."""
        if self.changes_since_checkpoint:
            try:
                self.checkpoint()
            except StorageError as exc:
                self.notes.append(f"{self.directory}: recovered but not checkpointed: {exc}")

    def _recover(self) -> None:
        ckpt, fallback = ckp.load(self.directory, self.notes)
        scan_from: tuple[int, ...] = (0, 0)
        jpos = (0, 0)
        if ckpt is not None:
            self.base = self.head = ckpt["base"]
            self.next_seq = ckpt["next_seq"]
            self.offset.frombytes(ckpt["offset"])
            self.length.frombytes(ckpt["length"])
            self.enq.frombytes(ckpt["enq"])
            self.exp.frombytes(ckpt["exp"])
            self.state.extend(ckpt["state"])
            self.dc.frombytes(ckpt["dc"])
            self.crc.frombytes(ckpt.get("crc", b""))
            self.corrupt_count = ckpt.get("corrupt", 0)
            self.props = {int(k): v for k, v in ckpt["props"].items()}
            self._restore_extra(ckpt)
            scan_from = tuple(ckpt["log"])
            self.synced_base = scan_from[0]
            jpos = tuple(ckpt["journal"])
            self._ckpt_gen = jpos[0]
            if fallback:
                self.changes_since_checkpoint += 1  # write a current one
        for base, path in numbered(self.directory, SEGMENT_SUFFIX):
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
            self.segments.append(Segment(base, path, fd, os.fstat(fd).st_size))
            self._bases.append(base)
        if ckpt is None and self.segments:
            self.base = self.head = self.next_seq = self.segments[0].base
        if ckpt is not None:
            if "crc" not in ckpt:
                self._crcs_from_segments()
            scan_from = self._check_checkpointed(scan_from)
        self._scan_segments(scan_from)
        stale = self._replay_journal(jpos)
        self._holes = []
        self._rebuild_derived()
        if stale:
            # The journal names messages the log lost (a torn tail). Their sequence numbers
            # will be reused: a checkpoint retires those entries before that can happen.
            self.notes.append(
                f"{self.directory}: {stale} journal entries name messages lost from the "
                "log; checkpointed so they never apply to new messages"
            )
            self.checkpoint()

    def _crcs_from_segments(self) -> None:
        """Per-record CRCs for a checkpoint written before they were kept: read from the
        segments (their batch CRCs checked); a record in no valid batch is unreadable."""
        n = len(self.state)
        crc = array("I", bytes(4 * n))
        found = bytearray(n)
        for seg in self.segments:
            buf = os.pread(seg.fd, seg.size, 0)
            batches, _damaged, _end, _problem = ckp.scan_segment(buf, seg.base)
            for info in batches:
                for r in iter_records(buf, info):
                    i = info.base_seq + r.rel_seq - self.base
                    if 0 <= i < n and self.offset[i] == r.payload_offset:
                        crc[i] = record_crc(buf, r.payload_offset, r.payload_length)
                        found[i] = 1
        self.crc = crc
        self.changes_since_checkpoint += 1  # keep them in the next checkpoint
        for i in range(n):
            if not found[i] and self.state[i] != State.GONE:
                self.state[i] = State.GONE
                self.corrupt_count += 1
                self._lost(i)

    # Hooks for stores that keep more per message (sbctld.storage.topic): what the
    # checkpoint adds, how it is restored, and what happens when recovery loses index ``j``.
    def _restore_extra(self, ckpt: dict[str, Any]) -> None:
        pass

    def _checkpoint_extra(self) -> dict[str, Any]:
        return {}

    def _lost(self, j: int) -> None:
        pass

    def _check_checkpointed(self, scan_from: tuple[int, ...]) -> tuple[int, ...]:
        """Find segments cut below what the checkpoint indexed (outside damage).

        The damaged segment is cut back to its valid batches; live messages whose bytes
        are gone are marked GONE and reported; later segments are kept. Appends then go
        to a fresh segment, so the gap lies on a segment boundary.
        """
        for k, seg in enumerate(self.segments):
            hi = self._bases[k + 1] if k + 1 < len(self.segments) else self.next_seq
            lo_i = max(seg.base, self.base) - self.base
            hi_i = min(hi, self.next_seq) - self.base
            live = bytes(self.state[lo_i:hi_i]).rstrip(b"\x00")
            if not live:
                continue
            i = lo_i + len(live) - 1
            if self.offset[i] + self.length[i] <= seg.size:
                continue
            buf = os.pread(seg.fd, seg.size, 0)
            batches, valid_end, problem = scan_batches(buf)
            good = seg.base
            for info in batches:
                if info.base_seq != good:
                    valid_end = info.offset
                    break
                good += info.record_count
            lost = 0
            for j in range(max(good - self.base, lo_i), hi_i):
                if self.state[j] != State.GONE:
                    self.state[j] = State.GONE
                    self.props.pop(self.base + j, None)
                    self._lost(j)
                    lost += 1
            self._truncate_segment(k, valid_end, problem or "segment shorter than indexed")
            self.notes.append(f"{seg.path}: {lost} indexed messages were missing and are lost")
            self._roll = True
            if seg.base == scan_from[0]:
                scan_from = (seg.base, seg.size)
        return scan_from

    def _truncate_segment(self, k: int, valid_end: int, problem: str) -> None:
        """Cut segment ``k`` at ``valid_end`` (a torn tail)."""
        seg = self.segments[k]
        forget_read_ahead()
        dropped, seg.size = seg.size - valid_end, valid_end
        os.ftruncate(seg.fd, valid_end)
        os.fsync(seg.fd)
        self.notes.append(
            f"{seg.path}: {problem} at byte {valid_end}; truncated {dropped} torn bytes"
        )

    def _scan_segments(self, scan_from: tuple[int, ...]) -> None:
        """Index the batches after the checkpoint, isolating damage (daemon/README.md §0.4).

        A torn tail is cut off. A damaged batch in the middle is skipped, its bytes copied
        to ``<segment>.corrupt`` beside it, its sequence numbers counted as corrupt and
        every valid batch after it kept.
        """
        start_base, start_pos = scan_from
        torn = False
        for k, seg in enumerate(self.segments):
            if seg.base < start_base:
                continue
            pos = start_pos if seg.base == start_base else 0
            if pos == 0 and seg.base > self.next_seq:
                if torn:  # the damaged end of the segment before held these
                    self._lose(seg.base)
                else:
                    self._fill_gone(seg.base)  # a settled segment was deleted before it
            buf = os.pread(seg.fd, seg.size - pos, pos) if seg.size > pos else b""
            batches, damaged, valid_end, problem = ckp.scan_segment(buf, self.next_seq)
            for info in batches:
                if info.base_seq > self.next_seq:
                    self._lose(info.base_seq)
                rows = [
                    (
                        r.payload_offset,
                        r.payload_length,
                        r.ttl_ms,
                        r.scheduled_ms,
                        record_crc(buf, r.payload_offset, r.payload_length),
                    )
                    for r in iter_records(buf, info)
                ]
                if rows:
                    self._index_batch(
                        info.base_time_ms, pos, Indexed(*map(list, zip(*rows, strict=True)))
                    )
                self.changes_since_checkpoint += info.record_count
            torn = valid_end < len(buf) and k + 1 < len(self.segments)
            if torn:  # not the last segment's: damage, not an interrupted append
                damaged.append((valid_end, len(buf)))
            if damaged:
                self._set_aside(seg, buf, pos, damaged, problem)
            if valid_end < len(buf):
                self._truncate_segment(k, pos + valid_end, problem)

    def _lose(self, upto: int) -> None:
        """Sequence numbers up to ``upto`` whose records were damaged: gone, counted."""
        lost = upto - self.next_seq
        self._holes.append((self.next_seq, upto))
        self.corrupt_count += lost
        self._fill_gone(upto)
        self.notes.append(f"{self.directory}: {lost} damaged messages skipped (counted corrupt)")

    def _set_aside(
        self, seg: Segment, buf: bytes, pos: int, damaged: list[tuple[int, int]], problem: str
    ) -> None:
        """Copy the damaged ranges of a segment to ``<segment>.corrupt`` for inspection."""
        aside = corrupt_path(seg.path)
        try:
            with open(aside, "ab") as fh:
                for a, b in damaged:
                    fh.write(bytes(buf[a:b]))
        except OSError as exc:
            self.notes.append(f"{aside}: could not keep the damaged bytes: {exc}")
        for a, b in damaged:
            self.notes.append(
                f"{seg.path}: {problem}: bytes {pos + a}-{pos + b} damaged, skipped and "
                f"copied to {aside.name}; the valid records after them are kept"
            )

    def _replay_journal(self, jpos: tuple[int, ...]) -> int:
        """Apply the journal after ``jpos``; returns how many entries were beyond the log.

        Each generation is read from both its copies (sbctld.storage.journal.merge): a
        damaged, truncated or missing copy loses nothing the other holds. Bytes valid in
        neither copy lose only their batches (copied to ``<journal>.corrupt``); a torn tail
        is cut off. Appends continue in the last generation only when both its copies are
        whole; otherwise in a new generation, so the two copies never disagree again.
        """
        start_gen, start_off = jpos
        generations = [g for g in self.journal.generations() if g >= start_gen]
        generation, size = start_gen, 0
        stale = 0
        intact = True
        for g in generations:
            off = start_off if g == start_gen else 0
            merged = jnl.recover_generation(self.directory, g, off, self.notes)
            for data, a, b in merged.spans:
                for entry in jnl.decode_entries(data, a, b):
                    stale += entry.seq >= self.next_seq
                    self._apply(entry)
                    self.changes_since_checkpoint += 1
            generation, size, intact = g, merged.end, merged.intact
            self.changes_since_checkpoint += bool(merged.problems)  # checkpoint past it
        fd = mirror_fd = None
        if generations and intact:
            fd = os.open(self.directory / journal_name(generation), os.O_WRONLY | os.O_APPEND)
            mirror_fd = os.open(self.directory / mirror_name(generation), os.O_WRONLY | os.O_APPEND)
        elif generations:
            generation, size = generation + 1, 0
        self.journal = jnl.Journal(
            self.directory, generation, fd, size, mirror=True, mirror_fd=mirror_fd
        )
        return stale

    def _rebuild_derived(self) -> None:
        for st in State:
            self.counts[st] = self.state.count(st)
        self.live_bytes = sum(compress(self.length, self.state))
        self.seg_live = {}
        for k, seg in enumerate(self.segments):
            lo = max(seg.base, self.base) - self.base
            hi = (self._bases[k + 1] if k + 1 < len(self.segments) else self.next_seq) - self.base
            window = self.state[lo:hi] if hi > lo else b""
            self.seg_live[seg.base] = len(window) - window.count(State.GONE)
        self._advance_head()

    # ---------------------------------------------------------------- writing

    def append(self, records: Sequence[StagedRecord], now_ms: int) -> int:
        """Append one batch; returns its first local sequence number.

        Raises StorageError (nothing written, nothing indexed) if the disk refuses it.
        """
        return self.commit(self.stage(records, now_ms))

    def stage(self, records: Sequence[StagedRecord], now_ms: int) -> Staged:
        """Write one batch without indexing it: :meth:`commit` or :meth:`unstage` follows.

        A write that fails is cut back to the segment's last good end and raises
        StorageError, so a partial batch never stays in the file.
        """
        self.syncer.reserve.check_send()
        first = self.next_seq
        batch, cols = encode_indexed(first, now_ms, records)
        try:
            seg = self._writable_segment(len(batch))
        except OSError as exc:
            raise storage_error(exc, self.directory / segment_name(first)) from exc
        try:
            write_all(seg.fd, batch)
        except OSError as exc:
            self._cut(seg, seg.size)
            raise storage_error(exc, seg.path) from exc
        return Staged(seg, seg.size, len(batch), now_ms, cols)

    def unstage(self, staged: Staged) -> None:
        """Take back a staged batch (another part of the same request failed)."""
        self._cut(staged.seg, staged.offset)

    def _cut(self, seg: Segment, size: int) -> None:
        forget_read_ahead()
        try:
            os.ftruncate(seg.fd, size)
        except OSError as exc:  # cannot happen on a shrink; the next recovery would cut it
            log.error("could not cut %s back to %d bytes: %s", seg.path, size, exc)
            self._roll = True

    def commit(self, staged: Staged) -> int:
        """Index a staged batch: its messages become visible."""
        first = self.next_seq
        seg = staged.seg
        seg.size += staged.size
        self.syncer.mark(seg.fd)
        self._index_batch(staged.now_ms, staged.offset, staged.cols)
        n = len(staged.cols.lengths)
        self.seg_live[seg.base] = self.seg_live.get(seg.base, 0) + n
        self.changes_since_checkpoint += n
        return first

    def _fill_gone(self, upto: int) -> None:
        """Index ``[next_seq, upto)`` as GONE: sequence numbers whose segment is gone."""
        n = upto - self.next_seq
        self.offset.extend([0] * n)
        self.length.extend([0] * n)
        self.enq.extend([0] * n)
        self.exp.extend([0] * n)
        self.dc.extend([0] * n)
        self.crc.extend([0] * n)
        self.state.extend(bytes(n))
        self.next_seq = upto

    def _index_batch(self, now_ms: int, at: int, cols: Indexed) -> None:
        """Index a batch's records (``cols``: payload offsets from ``at``), each step over a
        whole column: a batch of a hundred costs little more than one."""
        offsets, lengths, ttls, scheduled, crcs = cols
        n = len(lengths)
        if n == 1 and scheduled[0] < 0:  # one message to enter now (a single send): directly
            self.offset.append(at + offsets[0])
            self.length.append(lengths[0])
            self.crc.append(crcs[0])
            self.live_bytes += lengths[0]
            self.exp.append(expiry(ttls[0], now_ms))
            self.state.append(State.ACTIVE)
            self.counts[State.ACTIVE] += 1
            self.enq.append(now_ms)
            self.dc.append(0)
            self.next_seq += 1
            return
        if not n:
            return
        self.offset.extend(map(operator.add, offsets, repeat(at)))
        self.length.extend(lengths)
        self.crc.extend(crcs)
        self.live_bytes += sum(lengths)
        if min(ttls) == max(ttls):  # (the usual batch: one TTL for all)
            self.exp.extend([expiry(ttls[0], now_ms)] * n)
        else:
            self.exp.extend(expiries(ttls, now_ms))
        if max(scheduled) < 0:
            count = 0
            self.state.extend(ACTIVE_BYTE * n)
        else:
            count = sum(1 for at_ms in scheduled if at_ms >= 0)
            self.state.extend(
                [State.SCHEDULED if at_ms >= 0 else State.ACTIVE for at_ms in scheduled]
            )
        self.counts[State.SCHEDULED] += count
        self.counts[State.ACTIVE] += n - count
        self.enq.extend([now_ms] * n)
        self.dc.extend([0] * n)
        self.next_seq += n

    def _writable_segment(self, need: int) -> Segment:
        if self.segments and not self._roll:
            seg = self.segments[-1]
            if seg.size == 0 or seg.size + need <= self.segment_bytes:
                return seg
        self._roll = False
        path = self.directory / segment_name(self.next_seq)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        fsync_dir(self.directory)
        seg = Segment(self.next_seq, path, fd, 0)
        self.segments.append(seg)
        self._bases.append(seg.base)
        self.seg_live.setdefault(seg.base, 0)
        return seg

    def record(self, entries: Iterable[jnl.Entry], *, reserve: bool = True) -> None:
        """Journal then apply state changes (one journal batch).

        Settlements may use the settlement reserve on a full disk (sbctld.storage.space);
        a send's own entries (``reserve=False``) may not. Raises StorageError, with nothing
        applied, if the journal cannot be written.
        """
        entries = list(entries)
        if not entries:
            return
        self.journaled(self.journal.append(entries, self.syncer.reserve if reserve else None))
        self._apply_all(entries)
        self.changes_since_checkpoint += len(entries)

    def journaled(self, fds: list[int]) -> None:
        """Mark what a journal append wrote: the journal for the commit round, its mirror
        lazily (sbctld.storage.journal)."""
        for fd in fds:
            self.syncer.mark(fd)
        if self.journal.mirror_fd is not None:
            self.syncer.mark_lazily(self.journal.mirror_fd)

    def set_state(self, seq: int, state: State, changes: dict[str, Any] | None = None) -> None:
        extra = msgspec.msgpack.encode(changes) if changes else b""
        self.record([jnl.Entry(OP_STATE, seq, int(state), extra)])

    def _apply(self, entry: jnl.Entry) -> None:
        PartitionLog._apply_all(self, (entry,))

    def _apply_all(self, entries: Iterable[jnl.Entry]) -> None:
        """Apply journaled changes in order: one loop for a receive's or a settle's batch,
        the head moved once after it (to the same place as after each change)."""
        base, end = self.base, self.next_seq
        state, counts, length, bases = self.state, self.counts, self.length, self._bases
        moved = False
        try:
            for op, seq, arg, extra in entries:
                i = seq - base
                if i < 0 or seq >= end:
                    continue  # settled before the checkpoint, or never durably appended
                if op == OP_DELIVERY:
                    self.dc[i] = arg
                elif op == OP_STATE:
                    old = state[i]
                    if old == State.GONE:
                        continue
                    if extra:
                        self._merge_props(seq, extra)
                    if old == arg:
                        continue
                    state[i] = arg
                    counts[old] -= 1
                    counts[arg] += 1
                    if arg == State.GONE:
                        self.live_bytes -= length[i]
                        self.props.pop(seq, None)
                        k = bisect_right(bases, seq) - 1
                        # seg_live is empty while recovery replays the journal; rebuilt after.
                        if k >= 0 and bases[k] in self.seg_live:
                            self.seg_live[bases[k]] -= 1
                        moved = moved or seq == self.head
                elif op == OP_PROPS and state[i] != State.GONE:
                    self._merge_props(seq, extra)
                elif op == OP_CORRUPT and state[i] != State.GONE:
                    self.corrupt_count += 1
                    PartitionLog._apply_all(self, (jnl.Entry(OP_STATE, seq, State.GONE, b""),))
        finally:  # (a change that fails leaves the head after those applied)
            if moved:
                self._advance_head()

    def _merge_props(self, seq: int, extra: bytes) -> None:
        changes = msgspec.msgpack.decode(extra)
        if isinstance(changes, dict):
            self.props.setdefault(seq, {}).update(changes)

    def _advance_head(self) -> None:
        state, base, end = self.state, self.base, self.next_seq
        h = self.head
        while h < end and state[h - base] == State.GONE:
            h += 1
        self.head = h

    # ---------------------------------------------------------------- reading

    def discard_corrupt(self, seq: int, where: str = "") -> None:
        """A record failed its CRC: never served again, counted, reported."""
        log.error(
            "%s: message %d fails its CRC check: not served, counted in corrupt_message_count",
            where or self.directory,
            seq,
        )
        entry = jnl.Entry(OP_CORRUPT, seq, 0, b"")
        try:
            self.record([entry])
        except StorageError:
            self._apply(entry)  # not journaled: found again (and skipped) after a restart

    # ---------------------------------------------------------------- housekeeping

    def checkpoint(self) -> None:
        """Persist the index, rotate the journal and drop fully settled files.

        Everything the index reflects is made durable first, so the checkpoint never
        describes bytes a crash could still lose. The checkpoint it replaces is kept as the
        previous generation (sbctld.storage.checkpoint), with the journals after it and the
        segments it still names. Raises StorageError (nothing changed) on a write error.
        """
        self._trim()
        # Every segment written since the last checkpoint, not only the last: a segment
        # rolled between two commit rounds may still hold unsynced appends.
        for seg in self.segments:
            if seg.base >= self.synced_base:
                os.fdatasync(seg.fd)
        if self.segments:
            self.synced_base = self.segments[-1].base
        for fd in self.journal.fds:
            os.fdatasync(fd)
        last = self.segments[-1] if self.segments else None
        generation = self.journal.generation + 1
        ckp.write(
            self.directory,
            {
                "v": ckp.VERSION,
                "base": self.base,
                "next_seq": self.next_seq,
                "log": [last.base, last.size] if last else [0, 0],
                "journal": [generation, 0],
                "offset": self.offset.tobytes(),
                "length": self.length.tobytes(),
                "enq": self.enq.tobytes(),
                "exp": self.exp.tobytes(),
                "state": bytes(self.state),
                "dc": self.dc.tobytes(),
                "crc": self.crc.tobytes(),
                "corrupt": self.corrupt_count,
                "props": {str(k): v for k, v in self.props.items()},
                **self._checkpoint_extra(),
            },
        )
        for fd in self.journal.rotate():
            self.syncer.close_later(fd)
        for g in self.journal.generations():
            if g < self._ckpt_gen:  # needed by neither kept generation
                self.journal.remove(g)
        self._ckpt_gen = generation
        self._drop_settled_segments()
        self.changes_since_checkpoint = 0

    @property
    def settled_segments(self) -> bool:
        """Are there settled segments the next checkpoint deletes?"""
        return bool(self._settled_at_ckpt)

    def _drop_settled_segments(self) -> None:
        """Delete segments settled at the previous checkpoint already (so neither kept
        checkpoint names a live message in them); the last one stays."""
        keep: list[Segment] = []
        settled: set[int] = set()
        for seg in self.segments[:-1]:
            if self.seg_live.get(seg.base, 0) != 0:
                keep.append(seg)
            elif seg.base in self._settled_at_ckpt:
                self.syncer.close_later(seg.fd)
                seg.path.unlink()
                self.seg_live.pop(seg.base, None)
            else:
                settled.add(seg.base)
                keep.append(seg)
        self._settled_at_ckpt = settled
        if self.segments:
            keep.append(self.segments[-1])
        if len(keep) != len(self.segments):
            self.segments = keep
            self._bases = [s.base for s in keep]
            fsync_dir(self.directory)

    def _trim(self) -> None:
        """Drop the settled prefix of the index arrays."""
        k = self.head - self.base
        if k <= 0:
            return
        for arr in (self.offset, self.length, self.enq, self.exp, self.dc, self.crc):
            del arr[:k]
        del self.state[:k]
        self.counts[State.GONE] -= k
        self.base = self.head

    def close(self) -> None:
        for seg in self.segments:
            self.syncer.close_later(seg.fd)
        for fd in self.journal.fds:
            self.syncer.close_later(fd)
        self.segments = []
        self._bases = []
        self.journal.fd = self.journal.mirror_fd = None

    def destroy(self) -> None:
        """Close and delete this store's files (entity deletion)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
