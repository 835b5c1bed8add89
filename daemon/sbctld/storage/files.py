"""Atomic metadata writes for the data directory, each with a sealed copy (the file names
are :mod:`sbctl.core.layout`'s)."""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import crc32c

from sbctl.core.layout import seal_path, temp_path


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


SEAL_MAGIC = b"SBSL"

log = logging.getLogger("sbctld")


def _write_file(path: Path, data: bytes, durable: bool) -> None:
    tmp = temp_path(path)
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


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write-temp-then-rename, so a reader sees the old or the new file, never a torn one.

    A sealed copy (``<name>.seal``: magic, CRC-32C, the same bytes) is written first, so
    that a damaged or lost file is read back from its seal (:func:`read_verified`).
    """
    seal = SEAL_MAGIC + struct.pack("<I", crc32c.crc32c(data)) + data
    _write_file(seal_path(path), seal, durable)
    _write_file(path, data, durable)
    if durable:
        fsync_dir(path.parent)


def remove_verified(path: Path) -> None:
    """Remove a file written by :func:`write_atomic`, its seal first (so that a crash in
    between never brings the file back from its seal)."""
    seal_path(path).unlink(missing_ok=True)
    path.unlink(missing_ok=True)


def exists_verified(path: Path) -> bool:
    """Does the file (or its sealed copy) exist?"""
    return path.exists() or seal_path(path).exists()


def read_verified(path: Path) -> bytes:
    """The content of a file written by :func:`write_atomic`: its seal when the seal is
    intact (it is written first, so it is never older), else the file itself."""
    try:
        raw = seal_path(path).read_bytes()
    except FileNotFoundError:
        return path.read_bytes()
    body = raw[8:]
    if len(raw) >= 8 and raw[:4] == SEAL_MAGIC:
        (crc,) = struct.unpack_from("<I", raw, 4)
        if crc32c.crc32c(body) == crc:
            try:
                if path.read_bytes() == body:
                    return body
                why = "differs from its sealed copy"
            except FileNotFoundError:
                why = "is missing"
            log.warning("%s %s: using the sealed copy and restoring the file", path, why)
            try:
                _write_file(path, body, True)
            except OSError as exc:
                log.warning("could not restore %s: %s", path, exc)
            return body
    log.warning("%s: its sealed copy is damaged; using the file", path)
    return path.read_bytes()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
