"""Adoption of staged segment files (spark-load, sbctld.loads): check, number, link and
index whole files of record batches into a partition store (daemon/README.md §21)."""

from __future__ import annotations

import errno
import os
import shutil
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from sbctl.core.layout import ADOPTING_SUFFIX, SEGMENT_SUFFIX, adopting_path, numbered, segment_name
from sbctld.storage.files import fsync_dir
from sbctld.storage.log import ACTIVE_BYTE, PartitionLog, Segment, State, expiries


class StagedSegment(NamedTuple):
    """A staged file checked and numbered for adoption (spark-load), not yet visible."""

    source: Path
    base: int
    size: int
    offsets: array  # payload offsets in the file
    lengths: array
    ttls: array
    scheds: array
    crcs: array  # each record's CRC-32C (header and payload)
    # Worked out ahead (off the event loop) by sbctld.staged, or here when None / -1.
    exp: array | None = None  # expiry times
    payload_bytes: int = -1
    scheduled: list[int] | None = None  # indexes of the scheduled records


class AdoptionError(Exception):
    """A staged file that is not whole, valid record batches."""


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
            tmp = adopting_path(target)
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
        log.live_bytes += st.payload_bytes if st.payload_bytes >= 0 else sum(st.lengths)
        log.exp.extend(st.exp if st.exp is not None else expiries(st.ttls, now_ms))
        log.enq.extend(array("q", [now_ms]) * n)
        log.dc.extend(array("I", [0]) * n)
        sched_idx = st.scheduled
        if sched_idx is None:
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
    for leftover in directory.glob(f"*{ADOPTING_SUFFIX}"):
        leftover.unlink()
        removed += 1
    if removed:
        fsync_dir(directory)
    return removed
