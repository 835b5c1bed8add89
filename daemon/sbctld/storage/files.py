"""File naming and atomic metadata writes for the data directory.

Names follow Kafka's habit: 20-digit zero-padded numbers, so that a plain sort is the
numeric order.
"""

from __future__ import annotations

import os
from pathlib import Path

SEGMENT_SUFFIX = ".log"
JOURNAL_SUFFIX = ".jnl"
CHECKPOINT = "checkpoint.bin"


def segment_name(base_seq: int) -> str:
    return f"{base_seq:020d}{SEGMENT_SUFFIX}"


def journal_name(generation: int) -> str:
    return f"{generation:020d}{JOURNAL_SUFFIX}"


def numbered(directory: Path, suffix: str) -> list[tuple[int, Path]]:
    """The files ``<20 digits><suffix>`` of a folder, in numeric order."""
    found = []
    for entry in os.scandir(directory):
        name = entry.name
        if name.endswith(suffix) and len(name) == 20 + len(suffix) and name[:20].isdigit():
            found.append((int(name[:20]), Path(entry.path)))
    found.sort()
    return found


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write-temp-then-rename, so a reader sees the old or the new file, never a torn one."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
