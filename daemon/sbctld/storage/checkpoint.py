"""Checkpoint files, in two generations, and damage-tolerant segment scanning.

A partition's checkpoint is ``checkpoint.bin``; when a new one is written the one it replaces
is kept as ``checkpoint.prev.bin``, and the journals and segments that previous generation
needs are kept too (sbctld.storage.log). So the loss or damage of ``checkpoint.bin`` falls
back to the previous generation plus the journals since, with a warning: completed messages
never come back and subscriptions keep their messages (daemon/README.md §0.4).

File layout: ``b"SBCK"`` | crc32c u32 (of the rest) | MessagePack map.
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path
from typing import Any

import crc32c
import msgspec

from sbctl.core import layout
from sbctl.core.records import (
    BATCH_HEADER,
    RECORD_OVERHEAD,
    BatchInfo,
    CorruptBatch,
    read_batch_header,
)
from sbctld.storage.files import fsync_dir
from sbctld.storage.space import storage_error

CHECKPOINT = layout.CHECKPOINT_FILE
PREVIOUS = layout.PREVIOUS_CHECKPOINT_FILE
MAGIC = b"SBCK"
VERSIONS = (1, 2)  # 1: no per-record CRCs (computed from the segments when loaded)
VERSION = 2


def decode(data: bytes) -> dict[str, Any] | None:
    if len(data) < 8 or data[:4] != MAGIC:
        return None
    (crc,) = struct.unpack_from("<I", data, 4)
    if crc32c.crc32c(memoryview(data)[8:]) != crc:
        return None
    try:
        ckpt = msgspec.msgpack.decode(data[8:])
    except msgspec.DecodeError:
        return None
    if not isinstance(ckpt, dict) or ckpt.get("v") not in VERSIONS:
        return None
    return ckpt


def load(directory: Path, notes: list[str]) -> tuple[dict[str, Any] | None, bool]:
    """The newest readable checkpoint, and whether it is the previous generation.

    A damaged ``checkpoint.bin`` is renamed ``checkpoint.bin.corrupt`` so that the next
    checkpoint does not keep it as the previous generation.
    """
    current, previous = (
        layout.checkpoint_file(directory),
        layout.previous_checkpoint_file(directory),
    )
    problem = ""
    try:
        ckpt = decode(current.read_bytes())
        if ckpt is not None:
            return ckpt, False
        problem = "unreadable (fails its checks)"
        os.replace(current, layout.corrupt_path(current))
    except FileNotFoundError:
        problem = "missing"
    try:
        ckpt = decode(previous.read_bytes())
    except FileNotFoundError:
        if problem != "missing":
            notes.append(f"{current}: {problem}; no previous generation: rebuilding from the logs")
        return None, False
    if ckpt is None:
        notes.append(
            f"{current}: {problem}, and {PREVIOUS} is unreadable too: rebuilding from the logs"
        )
        return None, False
    notes.append(f"{current}: {problem}; recovered from the previous generation {PREVIOUS}")
    return ckpt, True


def write(directory: Path, body: dict[str, Any]) -> None:
    """Write a new checkpoint durably, keeping the current one as the previous generation.

    At every instant ``checkpoint.bin`` is the old or the new checkpoint, whole. On a write
    error nothing changes (the temporary file is removed) and StorageError is raised.
    """
    data = msgspec.msgpack.encode(body)
    blob = MAGIC + struct.pack("<I", crc32c.crc32c(data)) + data
    current = layout.checkpoint_file(directory)
    tmp = layout.temp_path(current)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(blob)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise storage_error(exc, tmp) from exc
    if current.exists():
        previous = layout.previous_checkpoint_file(directory)
        keep = layout.temp_path(previous)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(keep)
        os.link(current, keep)
        os.replace(keep, previous)
    os.replace(tmp, current)
    fsync_dir(directory)


def scan_segment(
    buf: bytes | memoryview, expected: int
) -> tuple[list[BatchInfo], list[tuple[int, int]], int, str]:
    """Valid batches of a segment buffer whose first batch is numbered ``expected``.

    Returns (batches, damaged ranges skipped in the middle, valid end, first problem). A
    batch that fails its checks is skipped by looking for the next whole, CRC-valid batch
    numbered at most as many messages later as the skipped bytes can hold: one bad batch
    costs only its own records. When none follows, the damage is a torn tail that starts
    at ``valid end``. A batch that follows a valid one (or starts the buffer) is numbered
    from it: its ``base_seq`` lies outside the CRC, so a flipped bit there is repaired.
    """
    end = len(buf)
    batches: list[BatchInfo] = []
    damaged: list[tuple[int, int]] = []
    problem = ""
    pos = 0
    after_damage = False
    while pos < end:
        try:
            info = read_batch_header(buf, pos, end)
        except CorruptBatch as exc:
            problem = problem or exc.reason
            resync = _resync(buf, pos, end, expected)
            if resync < 0:
                return batches, damaged, pos, problem
            damaged.append((pos, resync))
            pos, after_damage = resync, True
            continue
        if info.base_seq != expected and not after_damage:
            info = info._replace(base_seq=expected)
        after_damage = False
        batches.append(info)
        expected = info.base_seq + info.record_count
        pos += info.size
    return batches, damaged, pos, problem


_INNER = b"\x01\x00\x00\x00"  # magic 1, attributes 0, reserved 0: 24 bytes into a batch


def _resync(buf: bytes | memoryview, damage: int, end: int, expected: int) -> int:
    """The offset of the next valid batch after the damage at ``damage``, or -1."""
    data = bytes(buf) if isinstance(buf, memoryview) else buf
    probe = data.find(_INNER, damage + 1 + 24)
    while probe >= 0:
        pos = probe - 24
        if end - pos >= BATCH_HEADER.size:
            (base_seq,) = struct.unpack_from("<Q", data, pos)
            # Each skipped message took at least a record header of the skipped bytes.
            if expected <= base_seq <= expected + (pos - damage) // RECORD_OVERHEAD:
                try:
                    read_batch_header(data, pos, end)
                    return pos
                except CorruptBatch:
                    pass
        probe = data.find(_INNER, probe + 1)
    return -1
