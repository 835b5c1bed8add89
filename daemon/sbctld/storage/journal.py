"""The settlement journal: an append-only record of what happened to stored messages.

Each append is one CRC'd batch of entries, written twice in a row (one write, one sync): a
damaged byte spoils one copy, and recovery applies the other (applying an entry twice is
harmless: every entry sets a value). Layout (little-endian)::

    batch:  length u32 (bytes after this field) | crc32c u32 (of the entries) | entries
    entry:  op u8 | local_seq u64 | arg i64 | extra_len u32 | extra bytes

Journals are numbered by generation; a checkpoint names the (generation, offset) it covers,
after which older generations are deleted.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import crc32c

from sbctld.storage.files import JOURNAL_SUFFIX, fsync_dir, journal_name, numbered, write_all
from sbctld.storage.space import SPACE_ERRNOS, Reserve, storage_error

BATCH = struct.Struct("<II")
ENTRY = struct.Struct("<BQqI")
MAX_JOURNAL_BATCH = 64 * 1024 * 1024


class Entry(NamedTuple):
    op: int
    seq: int
    arg: int
    extra: bytes


def encode_entries(entries: Iterable[Entry]) -> bytes:
    pack = ENTRY.pack
    parts = []
    for op, seq, arg, extra in entries:
        parts.append(pack(op, seq, arg, len(extra)))
        if extra:
            parts.append(extra)
    body = b"".join(parts)
    return BATCH.pack(len(body) + 4, crc32c.crc32c(body)) + body


def decode_entries(buf: bytes, start: int, end: int) -> Iterator[Entry]:
    pos = start
    unpack = ENTRY.unpack_from
    while pos < end:
        op, seq, arg, n = unpack(buf, pos)
        pos += ENTRY.size
        yield Entry(op, seq, arg, bytes(buf[pos : pos + n]) if n else b"")
        pos += n


def _valid_at(buf: bytes, pos: int, end: int) -> int:
    """The end of a whole, CRC-valid batch at ``pos``; 0 if there is none."""
    if end - pos < BATCH.size:
        return 0
    length, crc = BATCH.unpack_from(buf, pos)
    # Never an empty batch: 8 zero bytes would pass as one (crc32c of nothing is 0).
    if length < 4 + ENTRY.size or length > MAX_JOURNAL_BATCH or pos + 4 + length > end:
        return 0
    if crc32c.crc32c(memoryview(buf)[pos + BATCH.size : pos + 4 + length]) != crc:
        return 0
    try:
        for _entry in decode_entries(buf, pos + BATCH.size, pos + 4 + length):
            pass
    except struct.error:
        return 0
    return pos + 4 + length


def scan(buf: bytes) -> tuple[list[tuple[int, int]], int, list[tuple[int, int]], str]:
    """Valid batches as (entries_start, entries_end); the valid end (where a torn tail
    starts); damaged ranges skipped in the middle; the first problem found.

    A batch that fails its checks is skipped by scanning for the next valid batch (a length
    and CRC that match, entries that decode), so one damaged batch loses only itself. If no
    valid batch follows, the damage is a torn tail and ``valid_end`` is where it starts.
    """
    spans: list[tuple[int, int]] = []
    damaged: list[tuple[int, int]] = []
    problem = ""
    pos, end = 0, len(buf)
    while pos < end:
        nxt = _valid_at(buf, pos, end)
        if nxt:
            spans.append((pos + BATCH.size, nxt))
            pos = nxt
            continue
        if not problem:
            problem = "truncated batch header" if end - pos < BATCH.size else "bad batch"
        resync = pos + 1
        while resync < end and not _valid_at(buf, resync, end):
            resync += 1
        if resync >= end:
            return spans, pos, damaged, problem
        damaged.append((pos, resync))
        pos = resync
    return spans, pos, damaged, problem


class Journal:
    """The journal files of one partition store; appends go to the newest generation."""

    def __init__(self, directory: Path, generation: int, fd: int | None, size: int) -> None:
        self.directory = directory
        self.generation = generation
        self.fd = fd
        self.size = size

    @property
    def position(self) -> tuple[int, int]:
        return self.generation, self.size

    def append(self, entries: Iterable[Entry], reserve: Reserve | None = None) -> int:
        """Append one batch; returns the descriptor to mark dirty.

        A failed write is cut back, so the journal never holds a partial batch; on a full
        disk ``reserve`` (the settlement reserve, sbctld.storage.space) is released and the
        write tried once more. Raises StorageError when it cannot be written.
        """
        once = encode_entries(entries)
        data = once + once  # module docstring
        path = self.directory / journal_name(self.generation)
        for attempt in (0, 1):
            try:
                if self.fd is None:
                    self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                    fsync_dir(self.directory)  # the new file's entry (once a generation)
                write_all(self.fd, data)
            except OSError as exc:
                if self.fd is not None:
                    try:
                        os.ftruncate(self.fd, self.size)
                    except OSError:
                        pass
                if attempt == 0 and exc.errno in SPACE_ERRNOS and reserve and reserve.release():
                    continue
                raise storage_error(exc, path) from exc
            break
        self.size += len(data)
        assert self.fd is not None
        return self.fd

    def truncate(self, size: int) -> None:
        """Take back the batches appended after ``size`` (not yet applied anywhere)."""
        if self.fd is not None:
            os.ftruncate(self.fd, size)
        self.size = size

    def rotate(self) -> int | None:
        """Start a new generation; returns the old descriptor (close it after a sync)."""
        old = self.fd
        self.generation += 1
        self.fd = None
        self.size = 0
        return old

    def files(self) -> list[tuple[int, Path]]:
        return numbered(self.directory, JOURNAL_SUFFIX)
