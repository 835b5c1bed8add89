"""The settlement journal: an append-only record of what happened to stored messages.

Each append is one CRC'd batch of entries, written to two files: the journal
``<generation>.jnl`` and its mirror ``<generation>.jnm``, at the same offset. An
acknowledgement waits for the journal's sync only (one device flush per commit round); the
mirror is a redundant copy, synced within a second (sbctld.storage.sync, ``mark_lazily``), at
every checkpoint, rotation and close. A process crash loses neither (both writes are in the
kernel before the acknowledgement); only a power loss in that second, and then damage to
the journal itself, can cost a batch the mirror did not yet hold on disk. A damaged,
truncated or deleted file is read from the other: recovery (:func:`merge`) takes, at each
offset, the batch that is valid in either copy, so each batch applies once and only a batch
damaged in both files is lost. Journals written before the mirror held every batch twice
in a row in the one file; they are still read (applying an entry twice is harmless: every
entry sets a value). Layout (little-endian)::

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

from sbctl.core.layout import (
    JOURNAL_SUFFIX,
    MIRROR_SUFFIX,
    corrupt_path,
    journal_name,
    mirror_name,
    numbered,
)
from sbctld.storage.files import fsync_dir, write_all
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


class Merged(NamedTuple):
    """The union of a journal generation's two copies (:func:`merge`)."""

    spans: list[tuple[bytes, int, int]]  # (buffer, entries_start, entries_end), in order
    end: int  # where the next batch would go: the end of the last valid batch
    lost: list[tuple[int, int]]  # byte ranges valid in neither copy (lost batches)
    problems: list[str]  # what was wrong with each copy, for the daemon log
    intact: bool  # both copies present, undamaged and valid up to ``end`` (torn tails aside)


def merge(primary: bytes | None, mirror: bytes | None, start: int = 0) -> Merged:
    """Valid batches of a generation from ``start``: at each offset the batch valid in
    either copy (``None``: the file is missing). Both copies hold the same bytes at the same
    offsets, so a batch found in both is applied once."""
    found: dict[int, tuple[bytes, int, int]] = {}
    ends: list[int] = []
    problems: list[str] = []
    clean = primary is not None and mirror is not None
    for name, data in (("journal", primary), ("mirror", mirror)):
        if data is None:
            problems.append(f"{name} missing")
            continue
        spans, valid_end, damaged, problem = scan(data[start:])
        for a, b in spans:
            found.setdefault(a - BATCH.size, (data, start + a, start + b))
        ends.append(valid_end)
        if problem:
            problems.append(
                f"{name}: {problem} at byte {start + (damaged or [(valid_end, 0)])[0][0]}"
            )
        if damaged:
            clean = False
    spans_out: list[tuple[bytes, int, int]] = []
    lost: list[tuple[int, int]] = []
    pos = 0
    for offset in sorted(found):
        if offset < pos:
            continue  # a batch found inside damage that the other copy has whole: not one
        if offset > pos:
            lost.append((start + pos, start + offset))
        data, a, b = found[offset]
        spans_out.append((data, a, b))
        pos = b - start
    end = start + pos
    if clean:
        clean = ends[0] == ends[1] == pos
    return Merged(spans_out, end, lost, problems, clean)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def recover_generation(directory: Path, generation: int, start: int, notes: list[str]) -> Merged:
    """Read a generation from both copies (:func:`merge`) at start-up. What was wrong goes
    to ``notes``; bytes valid in neither copy are copied to ``<journal>.corrupt``; a torn
    tail (bytes after the last valid batch) is cut off both files."""
    path = directory / journal_name(generation)
    names = (path.name, mirror_name(generation))
    copies = [_read_or_none(directory / name) for name in names]
    merged = merge(copies[0], copies[1], start)
    if merged.problems:
        notes.append(
            f"{path} (and its mirror): {'; '.join(merged.problems)}; {len(merged.spans)} "
            f"batches applied from the two copies, {len(merged.lost)} lost"
        )
    source = copies[0] if copies[0] is not None else copies[1]
    if merged.lost and source is not None:
        with open(corrupt_path(path), "ab") as fh:
            for a, b in merged.lost:
                fh.write(source[a:b])
    for copy, name in zip(copies, names, strict=True):
        if copy is not None and len(copy) > merged.end:
            with open(directory / name, "r+b") as fh:  # a torn tail
                fh.truncate(merged.end)
                os.fsync(fh.fileno())
    return merged


class Journal:
    """The journal files of one partition store; appends go to the newest generation.

    With ``mirror`` every batch also goes to ``<generation>.jnm`` (module docstring).
    """

    def __init__(
        self,
        directory: Path,
        generation: int,
        fd: int | None,
        size: int,
        *,
        mirror: bool = False,
        mirror_fd: int | None = None,
    ) -> None:
        self.directory = directory
        self.generation = generation
        self.fd = fd
        self.size = size
        self.mirror = mirror
        self.mirror_fd = mirror_fd

    @property
    def position(self) -> tuple[int, int]:
        return self.generation, self.size

    @property
    def fds(self) -> list[int]:
        return [fd for fd in (self.fd, self.mirror_fd) if fd is not None]

    def _open(self) -> None:
        created = False
        if self.fd is None:
            path = self.directory / journal_name(self.generation)
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            created = True
        if self.mirror and self.mirror_fd is None:
            path = self.directory / mirror_name(self.generation)
            self.mirror_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            created = True
        if created:
            fsync_dir(self.directory)  # the new files' entries (once a generation)

    def append(self, entries: Iterable[Entry], reserve: Reserve | None = None) -> list[int]:
        """Append one batch (to the journal and its mirror); returns the descriptor an
        acknowledgement waits for (the journal's; the mirror is :attr:`mirror_fd`, synced
        lazily: module docstring).

        A failed write is cut back, so the journal never holds a partial batch; on a full
        disk ``reserve`` (the settlement reserve, sbctld.storage.space) is released and the
        write tried once more. Raises StorageError when it cannot be written.
        """
        data = encode_entries(entries)
        if not self.mirror:
            data = data + data  # a lone file holds each batch twice (module docstring)
        for attempt in (0, 1):
            name = journal_name  # (the file a failed write names)
            try:
                self._open()
                assert self.fd is not None
                write_all(self.fd, data)
                if self.mirror_fd is not None:
                    name = mirror_name
                    write_all(self.mirror_fd, data)
            except OSError as exc:
                for fd in self.fds:
                    try:
                        os.ftruncate(fd, self.size)
                    except OSError:
                        pass
                if attempt == 0 and exc.errno in SPACE_ERRNOS and reserve and reserve.release():
                    continue
                raise storage_error(exc, self.directory / name(self.generation)) from exc
            break
        self.size += len(data)
        assert self.fd is not None
        return [self.fd]

    def truncate(self, size: int) -> None:
        """Take back the batches appended after ``size`` (not yet applied anywhere)."""
        for fd in self.fds:
            os.ftruncate(fd, size)
        self.size = size

    def rotate(self) -> list[int]:
        """Start a new generation; returns the old descriptors (close them after a sync)."""
        old = self.fds
        self.generation += 1
        self.fd = self.mirror_fd = None
        self.size = 0
        return old

    def files(self) -> list[tuple[int, Path]]:
        return numbered(self.directory, JOURNAL_SUFFIX)

    def generations(self) -> list[int]:
        """Every generation with a journal or a mirror file."""
        found = {g for g, _p in numbered(self.directory, JOURNAL_SUFFIX)}
        found.update(g for g, _p in numbered(self.directory, MIRROR_SUFFIX))
        return sorted(found)

    def remove(self, generation: int) -> None:
        """Delete a generation's files, the journal and its mirror."""
        for name in (journal_name(generation), mirror_name(generation)):
            (self.directory / name).unlink(missing_ok=True)
