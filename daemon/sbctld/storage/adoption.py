"""Adoption of staged segment files (spark-load, sbctld.loads): check, number, link and
index whole files of record batches into a partition store (DESIGN.md §2)."""

from __future__ import annotations

import errno
import os
import shutil
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from sbctl.codec import iter_records, rewrite_header, scan_batches
from sbctl.limits import MAX_TIME_MS
from sbctld.storage.files import SEGMENT_SUFFIX, fsync_dir, numbered, segment_name
from sbctld.storage.log import ACTIVE_BYTE, PartitionLog, Segment, State, record_crc


class StagedSegment(NamedTuple):
    """A staged file checked and numbered for adoption (spark-load), not yet visible."""

    source: Path
    base: int
    size: int
    offsets: array  # payload offsets in the file
    lengths: array
    ttls: array
    scheds: array
    crcs: array


class AdoptionError(Exception):
    """A staged file that is not whole, valid record batches."""


def prepare_adoption(
    log: PartitionLog, sources: Sequence[Path], now_ms: int, max_payload: int
) -> list[StagedSegment]:
    """Check staged files and number them from ``next_seq``, in place, durably.

    Every batch must pass its CRC and length checks (the whole file, no torn tail) and
    every record fit ``max_payload``. The batch headers are rewritten with their sequence
    numbers and enqueue time (DESIGN.md §2) and the files fdatasynced. Nothing of this
    store changes: :func:`link_adoption` and :func:`commit_adoption` follow.
    """
    staged = []
    seq = log.next_seq
    for source in sources:
        fd = os.open(source, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            buf = bytearray(os.pread(fd, size, 0))
            batches, valid_end, problem = scan_batches(memoryview(buf))
            if problem or valid_end != size or not batches:
                why = problem or ("empty" if not batches else "trailing bytes")
                raise AdoptionError(f"{source}: not a valid staged file ({why} at {valid_end})")
            offs, lens, ttls, scheds = array("I"), array("I"), array("q"), array("q")
            crcs = array("I")
            base = seq
            for info in batches:
                for k, rec in enumerate(iter_records(memoryview(buf), info)):
                    if rec.rel_seq != k:
                        raise AdoptionError(f"{source}: record {k} is numbered {rec.rel_seq}")
                    if rec.payload_length > max_payload:
                        raise AdoptionError(
                            f"{source}: a record of {rec.payload_length} bytes is over the "
                            f"{max_payload} byte message limit"
                        )
                    offs.append(rec.payload_offset)
                    lens.append(rec.payload_length)
                    ttls.append(rec.ttl_ms)
                    scheds.append(rec.scheduled_ms)
                    crcs.append(record_crc(buf, rec.payload_offset, rec.payload_length))
                rewrite_header(memoryview(buf)[info.offset :], seq, now_ms)
                os.pwrite(fd, bytes(buf[info.offset : info.offset + 16]), info.offset)
                seq += info.record_count
            os.fdatasync(fd)
        finally:
            os.close(fd)
        staged.append(StagedSegment(source, base, size, offs, lens, ttls, scheds, crcs))
    return staged


def link_adoption(log: PartitionLog, staged: Sequence[StagedSegment]) -> None:
    """Move prepared files into this store as segments; still invisible (not indexed).

    A crash from here until the load's manifest says committed is undone by
    :func:`rollback_adoption` on the next start.
    """
    if not staged:
        return
    if log.segments and log.segments[-1].size == 0 and log.segments[-1].base == staged[0].base:
        # An empty segment named like the first adopted one (a crash right after a roll).
        empty = log.segments.pop()
        log._bases.pop()
        log.seg_live.pop(empty.base, None)
        os.close(empty.fd)
        empty.path.unlink()
    for st in staged:
        target = log.directory / segment_name(st.base)
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
    fsync_dir(log.directory)


def commit_adoption(
    log: PartitionLog, staged: Sequence[StagedSegment], now_ms: int
) -> list[tuple[int, int]]:
    """Index linked segments: their messages become visible.

    Returns ``(scheduled time, seq)`` of the scheduled ones, for the broker's timers.
    """
    scheduled: list[tuple[int, int]] = []
    for st in staged:
        path = log.directory / segment_name(st.base)
        fd = os.open(path, os.O_RDWR | os.O_APPEND)
        log.segments.append(Segment(st.base, path, fd, st.size))
        log._bases.append(st.base)
        n = len(st.offsets)
        log.offset.extend(st.offsets)
        log.length.extend(st.lengths)
        log.crc.extend(st.crcs)
        log.live_bytes += sum(st.lengths)
        log.exp.extend(
            array(
                "q",
                [min(now_ms + t, MAX_TIME_MS) if t >= 0 else MAX_TIME_MS for t in st.ttls],
            )
        )
        log.enq.extend(array("q", [now_ms]) * n)
        log.dc.extend(array("I", [0]) * n)
        sched_idx = [k for k, when in enumerate(st.scheds) if when >= 0]
        if sched_idx:
            log.state.extend(
                bytes(State.SCHEDULED if when >= 0 else State.ACTIVE for when in st.scheds)
            )
            scheduled.extend((st.scheds[k], st.base + k) for k in sched_idx)
        else:
            log.state.extend(ACTIVE_BYTE * n)
        log.counts[State.SCHEDULED] += len(sched_idx)
        log.counts[State.ACTIVE] += n - len(sched_idx)
        log.seg_live[st.base] = n
        log.next_seq = st.base + n
        log.changes_since_checkpoint += n
    log._roll = False
    return scheduled


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
