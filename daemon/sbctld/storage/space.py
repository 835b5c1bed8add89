"""Write failures of the data dir's disk, and the space reserved for settling on a full one.

A send that cannot be written (ENOSPC, EDQUOT, EIO...) is rolled back by the store that
tried it and refused with :class:`StorageError`, a ``QuotaExceeded`` naming the disk and the
file, so that nothing of it is stored or indexed (daemon/README.md §0.1.3).

Settling must keep working on a full disk, or users could not free space through sbctl. The
daemon therefore keeps a *reserve*: ``reserve.bin`` in the data dir, ``RESERVE_BYTES``
allocated up front. When a journal write (a settlement, a delivery count, a purge) hits a
full disk, the reserve file is emptied, which frees its blocks, and the write is retried.
From then on sends are refused until the reserve can be allocated again, so only
settlements use the freed space; once space is free (messages settled and their segments
dropped, or the disk cleaned up) the next send re-allocates the reserve and the daemon is
back to normal, without a restart.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from sbctl.core.errors import QuotaExceeded

RESERVE_BYTES = int(os.environ.get("SBCTLD_RESERVE_BYTES", 4 * 1024 * 1024))

# Write errors that say the disk (not the request) is at fault.
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})

log = logging.getLogger("sbctld")


class StorageError(QuotaExceeded):
    """A write the data dir's disk refused; nothing of the request was kept."""


class CorruptRecord(ValueError):
    """A stored record whose CRC fails: never served (daemon/README.md §0.4)."""

    def __init__(self, seq: int, where: str) -> None:
        super().__init__(f"record {seq} in {where} fails its CRC check")
        self.seq = seq
        self.where = where


def storage_error(exc: OSError, path: Path | str) -> StorageError:
    why = os.strerror(exc.errno) if exc.errno else str(exc)
    if exc.errno in SPACE_ERRNOS:
        return StorageError(f"the data dir's disk is full ({why}) writing {path}")
    return StorageError(f"the data dir's disk failed a write ({why}) writing {path}")


class Reserve:
    """The space kept for settling on a full disk (module docstring)."""

    def __init__(self, path: Path | None, size: int = RESERVE_BYTES) -> None:
        self.path = path
        self.size = size
        self.full = False  # the reserve is (partly) spent: sends wait until it is back

    def ensure(self) -> bool:
        """Allocate the reserve; False while the disk cannot hold it."""
        if self.path is None or self.size <= 0:
            self.full = False
            return True
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError as exc:
            log.warning("could not create the disk reserve %s: %s", self.path, exc)
            return False
        try:
            os.posix_fallocate(fd, 0, self.size)
        except OSError as exc:
            if not self.full:
                log.warning("could not allocate the disk reserve %s: %s", self.path, exc)
            self.full = True
            return False
        finally:
            os.close(fd)
        if self.full:
            log.warning("the data dir's disk has space again: sends are accepted")
        self.full = False
        return True

    def release(self) -> bool:
        """Free the reserve for a settlement; False if there was nothing left to free."""
        first = not self.full
        self.full = True
        if self.path is None:
            return False
        try:
            size = os.stat(self.path).st_size
            if size == 0:
                return False
            os.truncate(self.path, 0)
        except OSError:
            return False
        if first:
            log.warning(
                "the data dir's disk is full: released the %d byte reserve for settlements; "
                "sends are refused until space is free",
                size,
            )
        return True

    def check_send(self) -> None:
        """Refuse a send while the reserve is spent and cannot be allocated again."""
        if self.full and not self.ensure():
            raise StorageError(
                f"the data dir's disk is full (No space left on device) "
                f"keeping the settlement reserve {self.path}"
            )
