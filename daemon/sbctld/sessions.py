"""Sessions of a session-enabled queue (daemon/README.md §9): session locks and session state.

- A session lock is held by one receiver at a time (SessionCannotBeLocked otherwise),
  lasts the entity's LockDuration, can be renewed, and ends when its holder closes it or it
  expires; afterwards its token fails with SessionLockLost (daemon/README.md §9.6-9.7). Locks are
  not
  persistent, as a dropped connection drops them (daemon/README.md §3.7).
- Session state is an opaque blob (null when never set; set to null clears it) that
  survives restarts (daemon/README.md §9.8), kept in a :class:`~sbctld.keyed.KeyedLog` under
  ``<queue>/sessions/``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from sbctl.core.errors import MessageSizeExceeded, SessionCannotBeLocked, SessionLockLost
from sbctld.keyed import KeyedLog
from sbctld.storage.sync import Syncer

SESSION_LOCK_LOST = (
    "The session lock was lost. Request a new session receiver (the session lock expired, "
    "was closed, or never existed)."
)


class Sessions:
    def __init__(self, directory: Path, syncer: Syncer) -> None:
        self.states = KeyedLog.open(directory, syncer)
        self.locks: dict[str, tuple[str, int]] = {}  # session id -> (token, locked until)
        self.by_token: dict[str, str] = {}  # token -> session id
        # Messages a session receiver holds: their locks are the session lock (daemon/README.md
        # §9.7).
        self.owned: dict[str, list[tuple[int, int]]] = {}  # token -> [(partition, seq)]
        self.owner: dict[tuple[int, int], str] = {}  # (partition, seq) -> token

    def held(self, session_id: str, now: int) -> bool:
        lock = self.locks.get(session_id)
        if lock is None:
            return False
        if lock[1] <= now:
            self._drop(session_id)
            return False
        return True

    def lock(self, session_id: str, now: int, lock_ms: int) -> tuple[str, int]:
        if self.held(session_id, now):
            raise SessionCannotBeLocked(f"the session {session_id!r} is locked by another receiver")
        token = str(uuid.uuid4())
        until = now + lock_ms
        self.locks[session_id] = (token, until)
        self.by_token[token] = session_id
        return token, until

    def check(self, token: str, now: int) -> str:
        """The session a live lock token holds; SessionLockLost otherwise."""
        session_id = self.by_token.get(token)
        if session_id is None or not self.held(session_id, now):
            raise SessionLockLost(SESSION_LOCK_LOST)
        return session_id

    def renew(self, token: str, now: int, lock_ms: int) -> int:
        session_id = self.check(token, now)
        until = now + lock_ms
        self.locks[session_id] = (token, until)
        return until

    def close(self, token: str, now: int) -> tuple[str, list[tuple[int, int]]]:
        """End a session lock; returns the session and the messages its holder still had."""
        session_id = self.check(token, now)
        held = [key for key in self.owned.get(token, []) if self.owner.get(key) == token]
        self._drop(session_id)
        return session_id, held

    def _drop(self, session_id: str) -> None:
        token, _until = self.locks.pop(session_id)
        self.by_token.pop(token, None)
        for key in self.owned.pop(token, []):
            if self.owner.get(key) == token:
                del self.owner[key]

    def own(self, token: str, keys: list[tuple[int, int]]) -> None:
        self.owned.setdefault(token, []).extend(keys)
        for key in keys:
            self.owner[key] = token

    def disown(self, key: tuple[int, int]) -> None:
        self.owner.pop(key, None)

    def holds_message(self, session_id: str, key: tuple[int, int], now: int) -> bool:
        """Does the current holder of ``session_id`` hold the message ``key``?"""
        token = self.owner.get(key)
        if token is None or not self.held(session_id, now):
            return False
        return self.locks[session_id][0] == token

    @property
    def state_bytes(self) -> int:
        return sum(len(value) for _arg, _seq, value in self.states.items.values())

    def get_state(self, session_id: str) -> bytes | None:
        item = self.states.items.get(session_id)
        return None if item is None else item[2]

    def set_state(self, session_id: str, state: bytes | None, limit: int) -> None:
        if state is not None and len(state) > limit:
            # daemon/README.md §9.8: at most one message size.
            raise MessageSizeExceeded(
                f"session state of {len(state)} bytes exceeds the {limit // 1024} KB limit"
            )
        self.states.set_many([(session_id, None if state is None else (0, 0, state))])

    def close_files(self) -> None:
        self.states.close()
