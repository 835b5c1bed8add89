"""Group commit bookkeeping (daemon/README.md §21 "Durability").

Writers append with plain ``os.write`` and :meth:`Syncer.mark` the descriptor dirty. The
server's commit loop repeatedly takes the dirty set and fdatasyncs it in a worker thread;
every request whose writes happened before a round started is acknowledged when that round
ends. Many concurrent requests thus share one fdatasync per file. The server syncs a round's
files concurrently (threads), so several files cost one sync's latency.

A redundant copy (a journal's mirror, sbctld.storage.journal) is marked with
:meth:`mark_lazily`: no acknowledgement waits for it, so an awaited settlement costs one
device flush, not two. The server hands those to the next round each second
(:meth:`take_lazy`); a file closed (:meth:`close_later`) or synced now is synced anyway.

Only the event-loop thread calls :meth:`mark`, :meth:`take` and :meth:`close_later`; the
worker thread only runs :func:`sync_fds` on the list it was handed.
"""

from __future__ import annotations

import os

from sbctld.storage.space import Reserve


class Syncer:
    def __init__(self, durability: str = "fsync") -> None:
        if durability not in ("fsync", "os"):
            raise ValueError(f"durability must be fsync or os, not {durability!r}")
        self.durable = durability == "fsync"
        self._dirty: set[int] = set()
        self._lazy: set[int] = set()  # redundant copies: synced soon, never waited for
        self._closing: list[int] = []
        # The settlement reserve of the data dir (sbctld.storage.space); none by default.
        self.reserve = Reserve(None, 0)

    @property
    def pending(self) -> bool:
        return bool(self._dirty or self._closing)

    def mark(self, fd: int) -> None:
        self._dirty.add(fd)

    def mark_lazily(self, fd: int) -> None:
        """``fd`` holds a redundant copy: synced by a round after :meth:`take_lazy`."""
        self._lazy.add(fd)

    def take_lazy(self) -> None:
        """Hand the redundant copies written since the last call to the next round."""
        self._dirty |= self._lazy
        self._lazy.clear()

    def close_later(self, fd: int) -> None:
        """Close ``fd`` after the next round, which may still be syncing it (and syncs it
        first)."""
        self._lazy.discard(fd)
        self._closing.append(fd)

    def take(self) -> tuple[list[int], list[int]]:
        dirty, self._dirty = list(self._dirty), set()
        closing, self._closing = self._closing, []
        return dirty, closing

    def sync_now(self) -> None:
        """Synchronous round (used by tests, shutdown and the storage's own tools)."""
        self.take_lazy()
        dirty, closing = self.take()
        sync_fds(dirty, closing, self.durable)


def sync_fds(dirty: list[int], closing: list[int], durable: bool) -> None:
    if durable:
        for fd in dirty:
            os.fdatasync(fd)
    for fd in closing:
        if durable:
            os.fdatasync(fd)
        os.close(fd)
