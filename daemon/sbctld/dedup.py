"""Duplicate detection history (daemon/README.md §8): the MessageIds an entity saw within its
window.

A :class:`~sbctld.keyed.KeyedLog` under ``<entity>/dedup/`` maps each key to
(when, sequence number); oldest first, so pruning the window is cheap.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sbctld.keyed import KeyedLog
from sbctld.storage.sync import Syncer


class DuplicateHistory:
    def __init__(self, log: KeyedLog) -> None:
        self.log = log

    @classmethod
    def open(cls, directory: Path, syncer: Syncer, window_ms: int, now: int) -> DuplicateHistory:
        log = KeyedLog.open(directory, syncer)
        history = cls(log)
        history.prune(now, window_ms)
        if log.items or directory.exists():
            log.rewrite()  # start from a file holding only the live window
        return history

    def prune(self, now: int, window_ms: int) -> None:
        horizon = now - window_ms
        stale = []
        for key, (when, _seq, _value) in self.log.items.items():
            if when >= horizon:
                break
            stale.append(key)
        self.log.forget(stale)

    def get(self, key: str, now: int, window_ms: int) -> int | None:
        """The sequence number of an earlier message with ``key`` within the window."""
        hit = self.log.items.get(key)
        if hit is None or hit[0] < now - window_ms:
            return None
        return hit[1]

    def add(self, items: Iterable[tuple[str, int]], now: int) -> None:
        self.log.set_many((key, (now, seq, b"")) for key, seq in items)

    def close(self) -> None:
        self.log.close()
