"""A small durable map ``key -> (arg, seq, value)`` in the journal file format.

Used for an entity's duplicate-detection history (daemon/README.md §8) and its session states
(daemon/README.md §9.8). Every change is appended as one journal entry (``op`` 1 = set, 2 = delete;
``extra`` = msgpack ``[key, value]``), riding the same group commit as the request that
made it. When the files hold many more entries than the map, the live entries are
rewritten as a new generation and the older files dropped. A torn tail loses only the
newest changes that were never acknowledged.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

import msgspec

from sbctl.core.layout import JOURNAL_SUFFIX, journal_name, numbered
from sbctld.storage import journal as jnl
from sbctld.storage.files import fsync_dir, write_all
from sbctld.storage.sync import Syncer

log = logging.getLogger("sbctld")

OP_SET = 1
OP_DELETE = 2
COMPACT_FACTOR = 4

Item = tuple[int, int, bytes]  # (arg, seq, value)


class KeyedLog:
    """Insertion-ordered (oldest change first); only the event-loop thread uses it."""

    def __init__(self, directory: Path, syncer: Syncer) -> None:
        self.directory = directory
        self.syncer = syncer
        self.items: OrderedDict[str, Item] = OrderedDict()
        self._written = 0
        self._journal = jnl.Journal(directory, 0, None, 0)

    @classmethod
    def open(cls, directory: Path, syncer: Syncer) -> KeyedLog:
        log = cls(directory, syncer)
        files = numbered(directory, JOURNAL_SUFFIX) if directory.exists() else []
        for _generation, path in files:
            data = path.read_bytes()
            spans, _end, _damaged, _problem = jnl.scan(data)
            for a, b in spans:
                for entry in jnl.decode_entries(data, a, b):
                    key, value = msgspec.msgpack.decode(entry.extra)
                    log.items.pop(key, None)
                    if entry.op == OP_SET:
                        log.items[key] = (entry.arg, entry.seq, value)
                    log._written += 1
        size = files[-1][1].stat().st_size if files else 0
        log._journal = jnl.Journal(directory, files[-1][0] if files else 0, None, size)
        return log

    def set_many(self, changes: Iterable[tuple[str, Item | None]]) -> None:
        """Apply and journal changes; ``None`` deletes the key."""
        entries = []
        changes = list(changes)
        for key, item in changes:
            if item is None:
                entries.append(jnl.Entry(OP_DELETE, 0, 0, msgspec.msgpack.encode([key, b""])))
            else:
                arg, seq, value = item
                entries.append(jnl.Entry(OP_SET, seq, arg, msgspec.msgpack.encode([key, value])))
        if not entries:
            return
        self.directory.mkdir(mode=0o700, exist_ok=True)
        # Journaled first: a write the disk refuses (StorageError) changes nothing.
        for fd in self._journal.append(entries, self.syncer.reserve):
            self.syncer.mark(fd)
        for key, item in changes:
            self.items.pop(key, None)
            if item is not None:
                self.items[key] = item
        self._written += len(entries)
        if self._written > COMPACT_FACTOR * max(len(self.items), 1024):
            try:
                self.rewrite()
            except OSError as exc:  # e.g. a full disk: the journal stays as it is
                log.warning("could not compact %s: %s", self.directory, exc)

    def forget(self, keys: Iterable[str]) -> None:
        """Drop keys from memory only (they fall out on the next rewrite)."""
        for key in keys:
            self.items.pop(key, None)

    def rewrite(self) -> None:
        """Write the live items as a new generation and drop the older files."""
        for old in self._journal.rotate():
            self.syncer.close_later(old)
        self.directory.mkdir(mode=0o700, exist_ok=True)
        path = self.directory / journal_name(self._journal.generation)
        entries = [
            jnl.Entry(OP_SET, seq, arg, msgspec.msgpack.encode([key, value]))
            for key, (arg, seq, value) in self.items.items()
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
        if self._journal.fd is not None:
            self.syncer.close_later(self._journal.fd)
            self._journal.fd = None
