"""Duplicate detection history (SPEC §8): the MessageIds an entity saw within its window.

Kept in memory as an insertion-ordered dict (oldest first, so pruning is cheap) and
persisted in the journal file format under ``<entity>/dedup/``: one entry per accepted
message (``seq`` = its sequence number, ``arg`` = when, ``extra`` = the key). Writes ride
the same group commit as the send that made them. When the files hold many entries that
fell out of the window, the live ones are rewritten into a new generation.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from sbctld.storage import journal as jnl
from sbctld.storage.files import JOURNAL_SUFFIX, fsync_dir, journal_name, numbered, write_all
from sbctld.storage.sync import Syncer

OP_SEEN = 1
COMPACT_FACTOR = 4  # rewrite when the files hold 4x more entries than the window does


class DuplicateHistory:
    def __init__(self, directory: Path, syncer: Syncer) -> None:
        self.directory = directory
        self.syncer = syncer
        self.seen: OrderedDict[str, tuple[int, int]] = OrderedDict()  # key -> (when, seq)
        self._written = 0  # entries in the files
        self._journal: jnl.Journal | None = None

    @classmethod
    def open(cls, directory: Path, syncer: Syncer, window_ms: int, now: int) -> DuplicateHistory:
        history = cls(directory, syncer)
        files = numbered(directory, JOURNAL_SUFFIX) if directory.exists() else []
        generation = files[-1][0] if files else 0
        for _generation, path in files:
            data = path.read_bytes()
            spans, _end, _problem = jnl.scan(data)  # a torn tail only loses history
            for a, b in spans:
                for entry in jnl.decode_entries(data, a, b):
                    key = entry.extra.decode(errors="replace")
                    history.seen.pop(key, None)
                    history.seen[key] = (entry.arg, entry.seq)
                    history._written += 1
        history.prune(now, window_ms)
        history._journal = jnl.Journal(directory, generation + 1, None, 0)
        history._rewrite()
        return history

    def prune(self, now: int, window_ms: int) -> None:
        horizon = now - window_ms
        seen = self.seen
        while seen:
            key, (when, _seq) = next(iter(seen.items()))
            if when >= horizon:
                break
            del seen[key]

    def get(self, key: str, now: int, window_ms: int) -> int | None:
        """The sequence number of an earlier message with ``key`` within the window."""
        hit = self.seen.get(key)
        if hit is None or hit[0] < now - window_ms:
            return None
        return hit[1]

    def add(self, items: Iterable[tuple[str, int]], now: int) -> None:
        entries = []
        for key, seq in items:
            self.seen.pop(key, None)
            self.seen[key] = (now, seq)
            entries.append(jnl.Entry(OP_SEEN, seq, now, key.encode()))
        if not entries:
            return
        assert self._journal is not None
        if self._journal.fd is None:
            self.directory.mkdir(mode=0o700, exist_ok=True)
        self.syncer.mark(self._journal.append(entries))
        self._written += len(entries)
        if self._written > COMPACT_FACTOR * max(len(self.seen), 1024):
            self._rewrite()

    def _rewrite(self) -> None:
        """Write the live entries as a new generation and drop the older files."""
        assert self._journal is not None
        if not self.directory.exists():
            return
        old = self._journal.rotate()
        if old is not None:
            self.syncer.close_later(old)
        path = self.directory / journal_name(self._journal.generation)
        entries = [
            jnl.Entry(OP_SEEN, seq, when, key.encode()) for key, (when, seq) in self.seen.items()
        ]
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if entries:
            write_all(fd, jnl.encode_entries(entries))
        os.fsync(fd)
        fsync_dir(self.directory)
        self._journal.fd = fd
        self._journal.size = os.fstat(fd).st_size
        for generation, stale in numbered(self.directory, JOURNAL_SUFFIX):
            if generation < self._journal.generation:
                stale.unlink()
        self._written = len(entries)

    def close(self) -> None:
        if self._journal is not None and self._journal.fd is not None:
            self.syncer.close_later(self._journal.fd)
            self._journal.fd = None
