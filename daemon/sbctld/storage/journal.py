"""The settlement journal: an append-only record of what happened to stored messages.

Each append is one CRC'd batch of entries. Layout (little-endian)::

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

from sbctld.storage.files import JOURNAL_SUFFIX, journal_name, numbered, write_all

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


def scan(buf: bytes) -> tuple[list[tuple[int, int]], int, str]:
    """Valid batches as (entries_start, entries_end); the valid end; the problem found."""
    spans: list[tuple[int, int]] = []
    pos, end = 0, len(buf)
    while pos < end:
        if end - pos < BATCH.size:
            return spans, pos, f"truncated batch header ({end - pos} bytes)"
        length, crc = BATCH.unpack_from(buf, pos)
        if length < 4 or length > MAX_JOURNAL_BATCH or pos + 4 + length > end:
            return spans, pos, f"bad length {length}"
        body = memoryview(buf)[pos + BATCH.size : pos + 4 + length]
        if crc32c.crc32c(body) != crc:
            return spans, pos, "CRC mismatch"
        spans.append((pos + BATCH.size, pos + 4 + length))
        pos += 4 + length
    return spans, pos, ""


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

    def append(self, entries: Iterable[Entry]) -> int:
        """Append one batch; returns the descriptor to mark dirty."""
        data = encode_entries(entries)
        if self.fd is None:
            self.fd = os.open(
                self.directory / journal_name(self.generation),
                os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                0o600,
            )
        write_all(self.fd, data)
        self.size += len(data)
        return self.fd

    def rotate(self) -> int | None:
        """Start a new generation; returns the old descriptor (close it after a sync)."""
        old = self.fd
        self.generation += 1
        self.fd = None
        self.size = 0
        return old

    def files(self) -> list[tuple[int, Path]]:
        return numbered(self.directory, JOURNAL_SUFFIX)
