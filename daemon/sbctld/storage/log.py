"""One partition store: message segments, settlement journal, compact index, checkpoint.

Invariants:
- Local sequence numbers start at 1 (SPEC §0.4.1) and are gap-free within a partition.
- The index covers ``[base, next_seq)``; every message before ``head`` is GONE.
- The index holds a few parallel arrays (no Python object per message); bodies stay in
  segment files and are read with ``os.pread`` on demand (DESIGN.md §2 "Memory").
- Every change of a message's persistent state goes through the journal first, then into
  the index. Locks are not persistent: they belong to the broker.
- Appends and journal writes are only ``os.write``; durability comes from the
  :class:`~sbctld.storage.sync.Syncer` round that the caller awaits before acknowledging.

Only the daemon's event-loop thread uses a PartitionLog.
"""

from __future__ import annotations

import errno
import os
import shutil
import struct
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import IntEnum
from itertools import compress
from pathlib import Path
from typing import Any, NamedTuple

import crc32c
import msgspec

from sbctl.codec import (
    RECORD_HEADER,
    StagedRecord,
    encode_batch,
    iter_records,
    scan_batches,
)
from sbctl.limits import MAX_TIME_MS
from sbctld.storage import journal as jnl
from sbctld.storage.files import (
    CHECKPOINT,
    SEGMENT_SUFFIX,
    fsync_dir,
    numbered,
    segment_name,
    write_all,
    write_atomic,
)
from sbctld.storage.sync import Syncer

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
CHECKPOINT_MAGIC = b"SBCK"
CHECKPOINT_VERSION = 1

OP_STATE = 1  # arg = new State; extra = property changes (msgpack map) or empty
OP_DELIVERY = 2  # arg = delivery count
OP_PROPS = 3  # extra = property changes (msgpack map)


class State(IntEnum):
    GONE = 0  # completed, expired, purged: never served again
    ACTIVE = 1
    DEFERRED = 2
    SCHEDULED = 3
    DEADLETTERED = 4
    TRANSFER_DEADLETTERED = 5


STATE_COUNT = len(State)
ACTIVE_BYTE = bytes([State.ACTIVE])


class StagedSegment(NamedTuple):
    """A staged file checked and numbered for adoption (spark-load, sbctld.staged), not
    yet visible."""

    source: Path
    base: int
    size: int
    offsets: array  # payload offsets in the file
    lengths: array
    ttls: array
    scheds: array
    # Worked out ahead (off the event loop) by sbctld.staged, or here when None / -1.
    exp: array | None = None  # expiry times
    payload_bytes: int = -1
    scheduled: list[int] | None = None  # indexes of the scheduled records


class AdoptionError(Exception):
    """A staged file that is not whole, valid record batches."""


class Segment:
    __slots__ = ("base", "fd", "path", "size")

    def __init__(self, base: int, path: Path, fd: int, size: int) -> None:
        self.base = base
        self.path = path
        self.fd = fd
        self.size = size


class StateIndex:
    """Queries over a per-message ``state`` bytearray indexed from ``base`` (shared by a
    partition log and a subscription's view of a topic's log)."""

    base: int
    head: int
    next_seq: int
    state: bytearray
    counts: list[int]

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


class PartitionLog(StateIndex):
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
        self.props: dict[int, dict[str, Any]] = {}  # property changes (abandon, dead-letter)
        self.counts = [0] * STATE_COUNT
        self.live_bytes = 0
        self.seg_live: dict[int, int] = {}
        self.journal = jnl.Journal(directory, 0, None, 0)
        self.changes_since_checkpoint = 0
        self._roll = False  # next append starts a new segment (after recovery cut one)
        self.synced_base = 0  # segments from this base on may hold unsynced appends
        self.notes: list[str] = []  # what recovery found, for the daemon log

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

    def _recover(self) -> None:
        ckpt = self._load_checkpoint()
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
            self.props = {int(k): v for k, v in ckpt["props"].items()}
            self._restore_extra(ckpt)
            scan_from = tuple(ckpt["log"])
            self.synced_base = scan_from[0]
            jpos = tuple(ckpt["journal"])
        for base, path in numbered(self.directory, SEGMENT_SUFFIX):
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
            self.segments.append(Segment(base, path, fd, os.fstat(fd).st_size))
            self._bases.append(base)
        if ckpt is None and self.segments:
            self.base = self.head = self.next_seq = self.segments[0].base
        if ckpt is not None:
            scan_from = self._check_checkpointed(scan_from)
        self._scan_segments(scan_from)
        stale = self._replay_journal(jpos)
        self._rebuild_derived()
        if stale:
            # The journal names messages the log lost (a torn tail). Their sequence numbers
            # will be reused: a checkpoint retires those entries before that can happen.
            self.notes.append(
                f"{self.directory}: {stale} journal entries name messages lost from the "
                "log; checkpointed so they never apply to new messages"
            )
            self.checkpoint()

    def _load_checkpoint(self) -> dict[str, Any] | None:
        path = self.directory / CHECKPOINT
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) >= 8 and data[:4] == CHECKPOINT_MAGIC:
            (crc,) = struct.unpack_from("<I", data, 4)
            if crc32c.crc32c(memoryview(data)[8:]) == crc:
                ckpt: dict[str, Any] = msgspec.msgpack.decode(data[8:])
                if ckpt.get("v") == CHECKPOINT_VERSION:
                    return ckpt
        self.notes.append(f"{path}: unreadable checkpoint ignored; rebuilding from the logs")
        return None

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
            self._truncate_segment(
                k, valid_end, problem or "segment shorter than indexed", set_aside=False
            )
            self.notes.append(f"{seg.path}: {lost} indexed messages were missing and are lost")
            self._roll = True
            if seg.base == scan_from[0]:
                scan_from = (seg.base, seg.size)
        return scan_from

    def _truncate_segment(
        self, k: int, valid_end: int, problem: str, *, set_aside: bool = True
    ) -> None:
        """Cut segment ``k`` at ``valid_end`` and (by default) set later segments aside."""
        seg = self.segments[k]
        dropped = seg.size - valid_end
        os.ftruncate(seg.fd, valid_end)
        seg.size = valid_end
        self.notes.append(
            f"{seg.path}: {problem} at byte {valid_end}; truncated {dropped} torn bytes"
        )
        os.fsync(seg.fd)
        if not set_aside:
            return
        for later in self.segments[k + 1 :]:
            os.close(later.fd)
            later.path.rename(later.path.with_suffix(".corrupt"))
            self.notes.append(f"{later.path}: follows a torn batch; set aside as .corrupt")
        del self.segments[k + 1 :]
        del self._bases[k + 1 :]

    def _scan_segments(self, scan_from: tuple[int, ...]) -> None:
        start_base, start_pos = scan_from
        for k, seg in enumerate(self.segments):
            if seg.base < start_base:
                continue
            pos = start_pos if seg.base == start_base else 0
            if pos == 0 and seg.base > self.next_seq:
                self._fill_gone(seg.base)  # a settled segment was deleted before it
            buf = os.pread(seg.fd, seg.size - pos, pos) if seg.size > pos else b""
            batches, valid_end, problem = scan_batches(buf)
            for info in batches:
                if info.base_seq != self.next_seq:
                    problem = f"batch starts at seq {info.base_seq}, expected {self.next_seq}"
                    valid_end = info.offset
                    break
                self._index_batch(
                    info.base_time_ms,
                    [
                        (pos + r.payload_offset, r.payload_length, r.ttl_ms, r.scheduled_ms)
                        for r in iter_records(buf, info)
                    ],
                )
            if problem:
                self._truncate_segment(k, pos + valid_end, problem)
                break

    def _replay_journal(self, jpos: tuple[int, ...]) -> int:
        """Apply the journal after ``jpos``; returns how many entries were beyond the log."""
        start_gen, start_off = jpos
        files = [(g, p) for g, p in self.journal.files() if g >= start_gen]
        generation, size = start_gen, 0
        stale = 0
        for g, path in files:
            data = path.read_bytes()
            off = start_off if g == start_gen else 0
            spans, valid_end, problem = jnl.scan(data[off:])
            for a, b in spans:
                for entry in jnl.decode_entries(data, off + a, off + b):
                    stale += entry.seq >= self.next_seq
                    self._apply(entry)
            generation, size = g, off + valid_end
            if problem:
                with open(path, "r+b") as fh:
                    fh.truncate(size)
                    os.fsync(fh.fileno())
                self.notes.append(
                    f"{path}: {problem} at byte {size}; truncated {len(data) - size} torn bytes"
                )
        fd = None
        if files:
            path = self.directory / jnl.journal_name(generation)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self.journal = jnl.Journal(self.directory, generation, fd, size)
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
        """Append one batch; returns its first local sequence number."""
        first = self.next_seq
        batch, offsets = encode_batch(first, now_ms, records)
        seg = self._writable_segment(len(batch))
        base_off = seg.size
        write_all(seg.fd, batch)
        seg.size += len(batch)
        self.syncer.mark(seg.fd)
        self._index_batch(
            now_ms,
            [
                (base_off + off, len(rec.payload), rec.ttl_ms, rec.scheduled_ms)
                for off, rec in zip(offsets, records, strict=True)
            ],
        )
        n = len(records)
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
        self.state.extend(bytes(n))
        self.next_seq = upto

    def _index_batch(self, now_ms: int, recs: list[tuple[int, int, int, int]]) -> None:
        """Index records given as (payload offset, payload length, ttl, scheduled)."""
        n = len(recs)
        offs, lens, ttls, scheds = zip(*recs, strict=True) if recs else ((), (), (), ())
        self.offset.extend(offs)
        self.length.extend(lens)
        self.live_bytes += sum(lens)
        self.exp.extend(
            [min(now_ms + ttl, MAX_TIME_MS) if ttl >= 0 else MAX_TIME_MS for ttl in ttls]
        )
        scheduled = sum(1 for sched in scheds if sched >= 0)
        if scheduled:
            self.state.extend([State.SCHEDULED if sched >= 0 else State.ACTIVE for sched in scheds])
        else:
            self.state.extend(ACTIVE_BYTE * n)
        self.counts[State.SCHEDULED] += scheduled
        self.counts[State.ACTIVE] += n - scheduled
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

    def record(self, entries: Iterable[jnl.Entry]) -> None:
        """Journal then apply state changes (one journal batch)."""
        entries = list(entries)
        if not entries:
            return
        fd = self.journal.append(entries)
        self.syncer.mark(fd)
        for entry in entries:
            self._apply(entry)
        self.changes_since_checkpoint += len(entries)

    def set_state(self, seq: int, state: State, changes: dict[str, Any] | None = None) -> None:
        extra = msgspec.msgpack.encode(changes) if changes else b""
        self.record([jnl.Entry(OP_STATE, seq, int(state), extra)])

    def _apply(self, entry: jnl.Entry) -> None:
        op, seq, arg, extra = entry
        i = seq - self.base
        if i < 0 or seq >= self.next_seq:
            return  # settled before the checkpoint, or never durably appended
        if op == OP_STATE:
            old = self.state[i]
            if old == State.GONE:
                return
            if extra:
                self._merge_props(seq, extra)
            if old == arg:
                return
            self.state[i] = arg
            self.counts[old] -= 1
            self.counts[arg] += 1
            if arg == State.GONE:
                self.live_bytes -= self.length[i]
                self.props.pop(seq, None)
                k = bisect_right(self._bases, seq) - 1
                # seg_live is empty while recovery replays the journal; rebuilt after.
                if k >= 0 and self._bases[k] in self.seg_live:
                    self.seg_live[self._bases[k]] -= 1
                if seq == self.head:
                    self._advance_head()
        elif op == OP_DELIVERY:
            self.dc[i] = arg
        elif op == OP_PROPS and self.state[i] != State.GONE:
            self._merge_props(seq, extra)

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

    # ---------------------------------------------------------------- adoption

    def link_adoption(self, staged: Sequence[StagedSegment]) -> None:
        """Move prepared files into this store as segments; still invisible (not indexed).

        A crash from here until the load's manifest says committed is undone by
        :func:`rollback_adoption` on the next start.
        """
        if not staged:
            return
        if (
            self.segments
            and self.segments[-1].size == 0
            and self.segments[-1].base == staged[0].base
        ):
            # An empty segment named like the first adopted one (a crash right after a roll).
            empty = self.segments.pop()
            self._bases.pop()
            self.seg_live.pop(empty.base, None)
            os.close(empty.fd)
            empty.path.unlink()
        for st in staged:
            target = self.directory / segment_name(st.base)
            try:
                os.rename(st.source, target)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                tmp = target.with_name(target.name + ".adopting")
                shutil.copyfile(st.source, tmp)
                with open(tmp, "rb") as fh:
                    os.fsync(fh.fileno())
                os.rename(tmp, target)
                st.source.unlink()
        fsync_dir(self.directory)

    def commit_adoption(
        self, staged: Sequence[StagedSegment], now_ms: int
    ) -> list[tuple[int, int]]:
        """Index linked segments: their messages become visible.

        Returns ``(scheduled time, seq)`` of the scheduled ones, for the broker's timers.
        """
        scheduled: list[tuple[int, int]] = []
        for st in staged:
            path = self.directory / segment_name(st.base)
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
            self.segments.append(Segment(st.base, path, fd, st.size))
            self._bases.append(st.base)
            n = len(st.offsets)
            self.offset.extend(st.offsets)
            self.length.extend(st.lengths)
            self.live_bytes += st.payload_bytes if st.payload_bytes >= 0 else sum(st.lengths)
            self.exp.extend(st.exp if st.exp is not None else expiries(st.ttls, now_ms))
            self.enq.extend(array("q", [now_ms]) * n)
            self.dc.extend(array("I", [0]) * n)
            sched_idx = st.scheduled
            if sched_idx is None:
                sched_idx = [k for k, when in enumerate(st.scheds) if when >= 0]
            if sched_idx:
                self.state.extend(
                    bytes(State.SCHEDULED if when >= 0 else State.ACTIVE for when in st.scheds)
                )
                scheduled.extend((st.scheds[k], st.base + k) for k in sched_idx)
            else:
                self.state.extend(ACTIVE_BYTE * n)
            self.counts[State.SCHEDULED] += len(sched_idx)
            self.counts[State.ACTIVE] += n - len(sched_idx)
            self.seg_live[st.base] = n
            self.next_seq = st.base + n
            self.changes_since_checkpoint += n
        self._roll = False
        return scheduled

    # ---------------------------------------------------------------- reading

    def read_payload(self, seq: int) -> bytes:
        i = seq - self.base
        seg = self.segments[bisect_right(self._bases, seq) - 1]
        return os.pread(seg.fd, self.length[i], self.offset[i])

    def record_header(self, seq: int) -> tuple[int, int]:
        """(ttl_ms, scheduled_ms) of a stored record, read from its segment."""
        i = seq - self.base
        seg = self.segments[bisect_right(self._bases, seq) - 1]
        raw = os.pread(seg.fd, RECORD_HEADER.size, self.offset[i] - RECORD_HEADER.size)
        _length, _rel, ttl_ms, scheduled_ms = RECORD_HEADER.unpack(raw)
        return ttl_ms, scheduled_ms

    # ---------------------------------------------------------------- housekeeping

    def checkpoint(self) -> None:
        """Persist the index, rotate the journal and drop fully settled files.

        Everything the index reflects is made durable first, so the checkpoint never
        describes bytes a crash could still lose.
        """
        self._trim()
        # Every segment written since the last checkpoint, not only the last: a segment
        # rolled between two commit rounds may still hold unsynced appends.
        for seg in self.segments:
            if seg.base >= self.synced_base:
                os.fdatasync(seg.fd)
        if self.segments:
            self.synced_base = self.segments[-1].base
        if self.journal.fd is not None:
            os.fdatasync(self.journal.fd)
        old_journal_fd = self.journal.rotate()
        last = self.segments[-1] if self.segments else None
        body = msgspec.msgpack.encode(
            {
                "v": CHECKPOINT_VERSION,
                "base": self.base,
                "next_seq": self.next_seq,
                "log": [last.base, last.size] if last else [0, 0],
                "journal": list(self.journal.position),
                "offset": self.offset.tobytes(),
                "length": self.length.tobytes(),
                "enq": self.enq.tobytes(),
                "exp": self.exp.tobytes(),
                "state": bytes(self.state),
                "dc": self.dc.tobytes(),
                "props": {str(k): v for k, v in self.props.items()},
                **self._checkpoint_extra(),
            }
        )
        crc = struct.pack("<I", crc32c.crc32c(body))
        write_atomic(self.directory / CHECKPOINT, CHECKPOINT_MAGIC + crc + body)
        if old_journal_fd is not None:
            self.syncer.close_later(old_journal_fd)
        for g, path in self.journal.files():
            if g < self.journal.generation:
                path.unlink()
        self._drop_settled_segments()
        self.changes_since_checkpoint = 0

    def _drop_settled_segments(self) -> None:
        keep: list[Segment] = []
        for seg in self.segments[:-1]:
            if self.seg_live.get(seg.base, 0) == 0:
                self.syncer.close_later(seg.fd)
                seg.path.unlink()
                self.seg_live.pop(seg.base, None)
            else:
                keep.append(seg)
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
        for arr in (self.offset, self.length, self.enq, self.exp, self.dc):
            del arr[:k]
        del self.state[:k]
        self.counts[State.GONE] -= k
        self.base = self.head

    def close(self) -> None:
        for seg in self.segments:
            self.syncer.close_later(seg.fd)
        if self.journal.fd is not None:
            self.syncer.close_later(self.journal.fd)
        self.segments = []
        self._bases = []
        self.journal.fd = None

    def destroy(self) -> None:
        """Close and delete this store's files (entity deletion)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)


def expiries(ttls: array, now_ms: int) -> array:
    """Expiry times of records with these TTLs (-1: none) enqueued at ``now_ms``."""
    return array("q", [min(now_ms + t, MAX_TIME_MS) if t >= 0 else MAX_TIME_MS for t in ttls])


def rollback_adoption(directory: Path, next_seq: int) -> int:
    """Undo an adoption that never committed: remove the segments from ``next_seq`` on.

    Works on files only, before the store is opened; returns how many files it removed.
    Adoption only adds segments numbered from the store's ``next_seq`` at the time, so the
    store is left exactly as it was before.
    """
    removed = 0
    if not directory.exists():
        return 0
    for base, path in numbered(directory, SEGMENT_SUFFIX):
        if base >= next_seq:
            path.unlink()
            removed += 1
    for leftover in directory.glob("*.adopting"):
        leftover.unlink()
        removed += 1
    if removed:
        fsync_dir(directory)
    return removed


def open_partitions(
    directories: Iterable[Path], syncer: Syncer, report: Callable[[str], None]
) -> list[PartitionLog]:
    logs = []
    for d in directories:
        log = PartitionLog.open(d, syncer)
        for note in log.notes:
            report(note)
        logs.append(log)
    return logs
