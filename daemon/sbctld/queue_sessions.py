"""A queue's sessions (daemon/README.md §9): accepting, receiving from, renewing and closing a
session lock, listing sessions, session state.

One :class:`QueueSessions` per :class:`sbctld.queue.Queue`, held as ``sessions`` over the
queue's :class:`~sbctld.queue_state.QueueState` (whose ``session_store`` holds the locks and
states, :mod:`sbctld.sessions`, on a session-enabled entity) and using its timers to expire
what it finds expired.

Rule 1: a session lives in the partition its id hashes to (daemon/README.md §0.1.4); an unavailable
partition refuses the session, not the queue.
"""

from __future__ import annotations

from typing import Any

from sbctl.core.delivered import Delivered
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    ServiceTimeout,
)
from sbctl.core.layout import sessions_dir
from sbctl.core.limits import (
    MAX_ID_LENGTH,
)
from sbctl.core.message_form import decode as decode_message
from sbctl.core.partitioning import partition_for_key
from sbctld.partition import Partition, partial_or_raise
from sbctld.queue_state import LOCAL_MASK, SESSION_RECEIVER_ON_PLAIN, QueueState
from sbctld.queue_timers import QueueTimers
from sbctld.results import SessionEntry, SessionLock
from sbctld.sessions import Sessions
from sbctld.storage.journal import Entry
from sbctld.storage.log import OP_DELIVERY, State
from sbctld.storage.space import CorruptRecord, StorageError
from sbctld.storage.sync import Syncer


class QueueSessions:
    """Session operations of a queue (see the module docstring)."""

    def __init__(self, state: QueueState, timers: QueueTimers, *, span_partitions: bool) -> None:
        self.state = state
        self.timers = timers
        # A subscription's copy whose SessionId a rule action set stays in the topic
        # partition of its original (sbctld.topic): its session spans partitions.
        self.span_partitions = span_partitions

    def open(self, syncer: Syncer) -> None:
        """Session-enabled: open the session states and index the stored messages."""
        state = self.state
        if not state.config.requires_session:
            return
        state.session_store = Sessions(sessions_dir(state.directory), syncer)
        for p in state.partitions:
            for seq in p.seqs_in(State.ACTIVE):
                session_id = decode_message(p.read_payload(seq)).session_id
                if session_id is not None:
                    p.index_session(seq, session_id)

    def _sessions(self) -> Sessions:
        if self.state.session_store is None:
            raise InvalidOperation(SESSION_RECEIVER_ON_PLAIN)
        return self.state.session_store

    def _session_partition(self, session_id: str) -> Partition:
        """The partition holding the session (daemon/README.md §0.1.4); raises when it is
        unavailable."""
        partitions = self.state.partitions
        n = len(partitions)
        p = partitions[partition_for_key(session_id, n) if n > 1 else 0]
        if p.fault is not None:
            p.fault.touch()
        return p

    def accept_session(self, session_id: str | None, now: int) -> SessionLock:
        """Lock a given session, or the next unlocked one with messages (daemon/README.md §9.6)."""
        sessions = self._sessions()
        state = self.state
        if state.config.status in ("Disabled", "ReceiveDisabled"):
            state.check_receive("")
        lock_ms = state.config.lock_duration
        if session_id is not None:
            if not 0 < len(session_id) <= MAX_ID_LENGTH:
                raise BadRequest("session_id must be 1-128 characters")
            if state.faulty:
                self._session_partition(session_id)
            token, until = sessions.lock(session_id, now, lock_ms)
            return self._session_info(session_id, token, until)
        partitions = state.partitions
        n = len(partitions)
        if state.faulty:
            state.check_reachable()
        for k in range(n):
            p = partitions[(state.rr_receive + k) % n]
            if p.fault is not None and not p.fault.reachable():
                continue
            for candidate in list(p.by_session):
                if not sessions.held(candidate, now) and p.session_available(candidate):
                    state.rr_receive = (state.rr_receive + k + 1) % n
                    token, until = sessions.lock(candidate, now, lock_ms)
                    return self._session_info(candidate, token, until)
        raise ServiceTimeout(f"no unlocked session with messages is available in {state.name!r}")

    @staticmethod
    def _session_info(session_id: str, token: str, until: int) -> SessionLock:
        return SessionLock(session_id=session_id, session_lock_token=token, locked_until_ms=until)

    def receive_session(self, token: str, count: int, now: int, *, delete: bool) -> list[Delivered]:
        """A session receiver's receive: that session's messages, in order (daemon/README.md
        §9.7)."""
        sessions = self._sessions()
        session_id = sessions.check(token, now)
        state = self.state
        if state.config.status in ("Disabled", "ReceiveDisabled"):
            state.check_receive("")
        out: list[Delivered] = []
        lock_ms = None if delete else state.config.lock_duration
        p = self._session_partition(session_id)
        until = sessions.locks[session_id][1]  # the session lock covers its messages
        expire = self.timers.expire
        p.take_session(session_id, count, now, lock_ms, out, expire, until)
        if self.span_partitions and len(out) < count:
            for other in state.partitions:
                if other is not p and other.fault is None and other.by_session.get(session_id):
                    try:
                        other.take_session(session_id, count, now, lock_ms, out, expire, until)
                    except StorageError as exc:
                        partial_or_raise(exc, out)
        if not delete:
            sessions.own(
                token,
                [(d.partition_id or 0, d.sequence_number & LOCAL_MASK) for d in out],
            )
        state.accessed_at_ms = now
        return out

    def deferred_receiver(self, token: str | None, now: int) -> tuple[str | None, int | None]:
        """Who may receive deferred messages: anyone on a plain entity; on a session-enabled
        one only the holder of a session lock, for that session's messages, locked as long as
        the session (daemon/README.md §9.7). Returns (session id, lock end) or (None, None)."""
        state = self.state
        if token is None:
            state.check_receive("")
            return None, None
        sessions = self._sessions()
        session_id = sessions.check(token, now)
        if state.config.status in ("Disabled", "ReceiveDisabled"):
            state.check_receive("")
        return session_id, sessions.locks[session_id][1]

    @staticmethod
    def in_session(p: Partition, seq: int, session_id: str | None) -> bool:
        """Is message ``seq`` of session ``session_id`` (always, with no session)?"""
        if session_id is None:
            return True
        try:
            return decode_message(p.read_payload(seq)).session_id == session_id
        except CorruptRecord:
            return True  # delivering it discards it (daemon/README.md §0.4)

    def own_deferred(self, token: str | None, out: list[Delivered], delete: bool) -> None:
        """Deferred messages a session receiver took are held by its session lock."""
        if token is not None and not delete:
            self._sessions().own(
                token, [(d.partition_id or 0, d.sequence_number & LOCAL_MASK) for d in out]
            )

    def renew_session(self, token: str, now: int) -> SessionLock:
        sessions = self._sessions()
        state = self.state
        if state.faulty and token in sessions.by_token:
            self._session_partition(sessions.by_token[token])
        until = sessions.renew(token, now, state.config.lock_duration)
        for pid, seq in sessions.owned.get(token, []):  # daemon/README.md §9.7: its messages too
            p = state.partitions[pid]
            if sessions.owner.get((pid, seq)) == token and seq in p.locks:
                p.lock(seq, until, p.locks[seq][0])
        return self._session_info(sessions.by_token[token], token, until)

    def close_session(self, token: str, now: int) -> dict[str, Any]:
        """Release the session; its unsettled messages go back, their delivery not counted
        (daemon/README.md §9.9)."""
        sessions = self._sessions()
        state = self.state
        if state.faulty and token in sessions.by_token:
            self._session_partition(sessions.by_token[token])
        session_id, held = sessions.close(token, now)
        for pid, seq in held:
            p = state.partitions[pid]
            if p.locks.pop(seq, None) is not None:
                dc = p.delivery_count(seq)
                p.record([Entry(OP_DELIVERY, seq, max(dc - 1, 0), b"")])
                p.give_back(seq)
        return {"session_id": session_id, "closed": True}

    def list_sessions(self, now: int) -> list[SessionEntry]:
        """Sessions with messages or state (daemon/README.md §9.2: a session exists while it has
        some)."""
        sessions = self._sessions()
        state = self.state
        active: dict[str, int] = {}
        down: set[int] = set()
        if state.faulty:
            state.check_reachable()
            down = set(state.unavailable())
        for p in state.partitions:
            if p.id in down:
                continue  # daemon/README.md §0.1.10: what the available partitions hold
            for seq, session_id in p.session_of.items():
                if p.state_of(seq) in (State.ACTIVE, State.DEFERRED):
                    active[session_id] = active.get(session_id, 0) + 1
        names = sorted(set(active) | set(sessions.states.items))
        if down:
            n = len(state.partitions)
            names = [s for s in names if partition_for_key(s, n) not in down]
        out = []
        for session_id in names:
            lock = sessions.locks.get(session_id) if sessions.held(session_id, now) else None
            out.append(
                SessionEntry(
                    session_id=session_id,
                    active_message_count=active.get(session_id, 0),
                    locked_until_ms=lock[1] if lock else None,
                    has_state=session_id in sessions.states.items,
                )
            )
        return out

    def get_session_state(self, session_id: str) -> bytes | None:
        sessions = self._sessions()
        if self.state.faulty:
            self._session_partition(session_id)
        return sessions.get_state(session_id)

    def set_session_state(self, session_id: str, data: bytes | None) -> None:
        if not 0 < len(session_id) <= MAX_ID_LENGTH:
            raise BadRequest("session_id must be 1-128 characters")
        sessions = self._sessions()
        if self.state.faulty:
            self._session_partition(session_id)
        sessions.set_state(session_id, data, self.state.max_message_bytes)
