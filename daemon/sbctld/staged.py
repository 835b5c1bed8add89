"""Checking and numbering a spark-load's staged files (sbctld.loads), off the event loop.

A staged file is whole record batches (:mod:`sbctl.core.records`) numbered from 0. Checking it
means reading every byte (CRC of each batch, lengths, record numbering, message sizes) and
noting where each record is, which for a large load is seconds of work: the daemon does it
while it keeps serving. The check is written once, as a generator that asks for reads
(:class:`Read`) and marks the points where it may be paused (``None``); :func:`check_now`
runs it with plain reads, :func:`check` streams the file with ``aiofiles`` and yields to the
event loop at every pause point, so no step holds the loop for more than about a megabyte
of CRC or a few thousand records.

Numbering rewrites each batch's first 16 bytes (base sequence number and enqueue time, not
covered by the CRC) and fdatasyncs the file: in a worker thread ahead of the commit
(:func:`number_in_thread`), and again on the loop only for a partition that received other
messages in the meantime (:func:`number_now`).
"""

from __future__ import annotations

import asyncio
import os
import struct
from array import array
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import NamedTuple

import aiofiles
import crc32c

from sbctl.core.records import (
    BATCH_HEADER,
    BATCH_INNER,
    CRC_START,
    MAGIC,
    MAX_BATCH_BYTES,
    RECORD_HEADER,
)
from sbctld.storage.adoption import AdoptionError, StagedSegment
from sbctld.storage.log import expiries

CRC_SLICE = 1024 * 1024  # bytes checksummed between two pauses
RECORD_SLICE = 2048  # records parsed between two pauses
HEADER_AT = struct.Struct("<Qq")  # base_seq, base_time_ms: the bytes numbering rewrites


class Read(NamedTuple):
    offset: int
    size: int


class CheckedFile(NamedTuple):
    """A staged file that passed every check; numbered later, from a partition's next_seq."""

    source: Path
    size: int
    batches: list[tuple[int, int]]  # (file offset of the batch header, record count)
    offsets: array  # payload offsets in the file
    lengths: array
    ttls: array
    scheds: array
    crcs: array  # each record's CRC-32C (header and payload), checked on every read
    payload_bytes: int
    scheduled: list[int]  # indexes of the scheduled records
    one_ttl: int | None  # the TTL of every record, or None when they differ

    def segment(self, base: int, now_ms: int) -> StagedSegment:
        """The segment to link, with what indexing it needs worked out ahead."""
        n = len(self.offsets)
        if self.one_ttl is None:
            exp = expiries(self.ttls, now_ms)
        else:
            exp = expiries(array("q", [self.one_ttl]), now_ms) * n
        return StagedSegment(
            self.source,
            base,
            self.size,
            self.offsets,
            self.lengths,
            self.ttls,
            self.scheds,
            self.crcs,
            exp,
            self.payload_bytes,
            self.scheduled,
        )


Checker = Generator[Read | None, bytes | None, CheckedFile]


def _read_batch(
    pos: int, size: int, bad: Callable[[str, int], AdoptionError]
) -> Generator[Read | None, bytes | None, tuple[memoryview, int, int]]:
    """Read and check the batch at ``pos`` (header, length, CRC, magic); returns its
    inner bytes, its record count and its size in the file."""
    if size - pos < CRC_START + BATCH_INNER.size:
        raise bad(f"truncated header ({size - pos} bytes)", pos)
    head = yield Read(pos, CRC_START)
    if head is None or len(head) != CRC_START:
        raise bad("file shrank while it was read", pos)
    _seq, _time, length, crc = BATCH_HEADER.unpack_from(head, 0)
    batch_size = 20 + length
    if length < BATCH_INNER.size + 4 or length > MAX_BATCH_BYTES or pos + batch_size > size:
        raise bad(f"bad length {length}", pos)
    data = yield Read(pos + CRC_START, batch_size - CRC_START)
    if data is None or len(data) != batch_size - CRC_START:
        raise bad("file shrank while it was read", pos)
    inner = memoryview(data)
    value = 0
    for k in range(0, len(inner), CRC_SLICE):
        value = crc32c.crc32c(inner[k : k + CRC_SLICE], value)
        yield None
    if value != crc:
        raise bad("CRC mismatch", pos)
    magic, _attrs, _res, count = BATCH_INNER.unpack_from(inner, 0)
    if magic != MAGIC:
        raise bad(f"unknown magic {magic}", pos)
    return inner, count, batch_size


def _checker(source: Path, size: int, max_payload: int) -> Checker:
    """Check a staged file of ``size`` bytes; yields reads (answered with the bytes) and
    pause points (``None``). Raises AdoptionError naming the file and what is wrong."""

    def bad(why: str, at: int) -> AdoptionError:
        return AdoptionError(f"{source}: not a valid staged file ({why} at {at})")

    if size == 0:
        raise bad("empty", 0)
    offs, lens, ttls, scheds = array("I"), array("I"), array("q"), array("q")
    crcs = array("I")
    batches: list[tuple[int, int]] = []
    payload_bytes = 0
    scheduled: list[int] = []
    first_ttl: int | None = None
    one_ttl = True
    pos = 0
    while pos < size:
        inner, count, batch_size = yield from _read_batch(pos, size, bad)
        base_at = pos + CRC_START  # file offset of inner[0]
        at = BATCH_INNER.size
        end = len(inner)
        unpack = RECORD_HEADER.unpack_from
        for k in range(count):
            if k and k % RECORD_SLICE == 0:
                yield None
            if at + RECORD_HEADER.size > end:
                raise bad("record overruns its batch", pos)
            rec_len, rel, ttl_ms, scheduled_ms = unpack(inner, at)
            payload = rec_len - (RECORD_HEADER.size - 4)
            if payload < 0 or at + 4 + rec_len > end:
                raise bad("record overruns its batch", pos)
            if rel != k:
                raise AdoptionError(f"{source}: record {k} is numbered {rel}")
            if payload > max_payload:
                raise AdoptionError(
                    f"{source}: a record of {payload} bytes is over the {max_payload} byte "
                    f"message limit"
                )
            if scheduled_ms >= 0:
                scheduled.append(len(offs))
            if first_ttl is None:
                first_ttl = ttl_ms
            elif ttl_ms != first_ttl:
                one_ttl = False
            offs.append(base_at + at + RECORD_HEADER.size)
            lens.append(payload)
            ttls.append(ttl_ms)
            scheds.append(scheduled_ms)
            crcs.append(crc32c.crc32c(inner[at : at + RECORD_HEADER.size + payload]))
            payload_bytes += payload
            at += 4 + rec_len
        batches.append((pos, count))
        pos += batch_size
        yield None
    return CheckedFile(
        source,
        size,
        batches,
        offs,
        lens,
        ttls,
        scheds,
        crcs,
        payload_bytes,
        scheduled,
        first_ttl if one_ttl else None,
    )


def check_now(source: Path, max_payload: int) -> CheckedFile:
    """Check a staged file in one go (tests and synchronous callers)."""
    with open(source, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        gen = _checker(source, size, max_payload)
        answer: bytes | None = None  # a generator starts with None
        while True:
            try:
                step = gen.send(answer)
            except StopIteration as stop:
                result: CheckedFile = stop.value
                return result
            answer = None if step is None else os.pread(fh.fileno(), step.size, step.offset)


async def check(source: Path, max_payload: int) -> CheckedFile:
    """Check a staged file, streaming it with aiofiles and yielding to the loop as it goes."""
    async with aiofiles.open(source, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        gen = _checker(source, size, max_payload)
        answer: bytes | None = None  # a generator starts with None
        while True:
            try:
                step = gen.send(answer)
            except StopIteration as stop:
                result: CheckedFile = stop.value
                return result
            if step is None:
                answer = None
                await asyncio.sleep(0)
            else:
                await fh.seek(step.offset)
                answer = await fh.read(step.size)


def identity(path: Path) -> tuple[int, int, int, int]:
    """What says a file is still the one that was checked and numbered."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def number_now(
    files: Sequence[CheckedFile], base: int, now_ms: int
) -> tuple[list[StagedSegment], list[tuple[int, int, int, int]]]:
    """Number ``files`` from ``base`` (in order), owner-only and durably.

    Returns the segments to link and the files' identities after the rewrite."""
    segments: list[StagedSegment] = []
    ids = []
    seq = base
    for f in files:
        fd = os.open(f.source, os.O_RDWR)
        try:
            os.fchmod(fd, 0o600)  # a segment of the data dir now (Spark may stage 0644)
            for offset, count in f.batches:
                os.pwrite(fd, HEADER_AT.pack(seq, now_ms), offset)
                seq += count
            os.fdatasync(fd)
        finally:
            os.close(fd)
        segments.append(f.segment(seq - len(f.offsets), now_ms))
        ids.append(identity(f.source))
    return segments, ids


async def number_in_thread(
    files: Sequence[CheckedFile], base: int, now_ms: int
) -> tuple[list[StagedSegment], list[tuple[int, int, int, int]]]:
    """:func:`number_now` in a worker thread (the fdatasync of a large file takes a while)."""
    return await asyncio.to_thread(number_now, files, base, now_ms)
