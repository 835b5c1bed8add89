"""Group commit: the durable acknowledgement every front-end waits for.

Rules kept here: a callback runs only after the fdatasync round that covers every write made
before it was registered; callbacks run in the order they were registered; a failed sync
hands every callback of its round the same error (daemon/README.md §21 "Durability").
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from sbctl.core.errors import GeneralError, SbctlError
from sbctld.storage.sync import Syncer, sync_fds

log = logging.getLogger("sbctld")


class Committer:
    """Group commit: one fdatasync per dirty file covers every write made before it.

    A reply that needs durability registers a callback. The first one schedules a round
    with ``call_soon``, which runs after the loop has handled every request already
    readable; the round fdatasyncs what they wrote (inline for one file, in parallel
    threads for several) and then runs the callbacks. Requests that arrive during a round
    are read by the next loop iteration and share the next round.
    """

    def __init__(self, syncer: Syncer) -> None:
        self.syncer = syncer
        self._callbacks: list[Callable[[SbctlError | None], None]] = []
        self._scheduled = False
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sbctld-sync")
        self.rounds = 0
        self.synced_files = 0

    def after_durable(self, callback: Callable[[SbctlError | None], None]) -> None:
        if not self.syncer.durable and not self.syncer.pending:
            callback(None)
            return
        self._callbacks.append(callback)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._round)

    def flush_soon(self) -> None:
        """A round soon for writes no one waits for (a settled complete, an expired lock):
        they reach the disk within the group-commit window all the same (daemon/README.md
        §21 "Durability"). Nothing to do outside the event loop or without fsync."""
        if self._scheduled or not self.syncer.durable or not self.syncer.pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._scheduled = True
        loop.call_soon(self._round)

    async def drain(self) -> None:
        """Wait until everything written so far is durable."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(_error: SbctlError | None) -> None:
            if not fut.done():
                fut.set_result(None)

        self.after_durable(done)
        await fut

    def _round(self) -> None:
        self._scheduled = False
        callbacks, self._callbacks = self._callbacks, []
        dirty, closing = self.syncer.take()
        self.synced_files += len(dirty)
        error: SbctlError | None = None
        try:
            if len(dirty) > 1 and self.syncer.durable:
                list(self._pool.map(os.fdatasync, dirty))
                dirty = []
            sync_fds(dirty, closing, self.syncer.durable)
        except OSError as exc:
            log.error("fdatasync failed: %s", exc)
            error = GeneralError(f"the daemon could not make the write durable: {exc}")
        self.rounds += 1
        for callback in callbacks:
            callback(error)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
