"""A partition as the broker sees it: a persistent log plus transient delivery state.

Transient state (lost on restart, as locks are lost when a connection drops, daemon/README.md §3.7):
- ``locks``: local seq → (nonce, locked_until_ms) for peek-locked messages;
- per view (the entity itself, its DLQ) a ``cursor`` below which every message was handed
  out at least once since start, and a heap of messages handed back (abandoned, lock
  expired) that are served first, "at or near the front" (daemon/README.md §3.4).

A lock token is a GUID carrying the public sequence number and a random nonce, so settling
needs no token table (:func:`sbctl.core.locks.lock_token_for`).

``fault`` is None while the store is healthy, else what an injected fault does to it
(sbctld.faults); the queue checks it only when its ``faulty`` flag is up.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from sbctl.core.delivered import Delivered
from sbctl.core.locks import lock_token_for
from sbctl.core.records import NOT_SCHEDULED, RECORD_HEADER, StagedRecord
from sbctld.storage.journal import Entry
from sbctld.storage.log import OP_DELIVERY, OP_STATE, PartitionLog, State
from sbctld.storage.space import CorruptRecord, StorageError
from sbctld.storage.topic import SubLog

if TYPE_CHECKING:
    from sbctld.faults import StoreFault

PEEKABLE = frozenset((State.ACTIVE, State.DEFERRED, State.SCHEDULED))


class View:
    """Delivery bookkeeping for one sub-queue of a partition."""

    __slots__ = ("cursor", "returned", "state")

    def __init__(self, state: State, cursor: int) -> None:
        self.state = state
        self.cursor = cursor
        self.returned: list[int] = []


class Partition:
    __slots__ = (
        "by_session",
        "dlq",
        "fault",
        "id",
        "lock_heap",
        "locks",
        "log",
        "main",
        "scheduled",
        "session_of",
        "shift",
        "tdlq",
    )

    def __init__(self, log: PartitionLog | SubLog, partition_id: int, partitioned: bool) -> None:
        self.log = log
        self.id = partition_id
        self.fault: StoreFault | None = None
        self.shift = partition_id << 48 if partitioned else 0
        self.locks: dict[int, tuple[int, int]] = {}
        self.lock_heap: list[tuple[int, int, int]] = []
        self.main = View(State.ACTIVE, log.head)
        self.dlq = View(State.DEADLETTERED, log.head)
        self.tdlq = View(State.TRANSFER_DEADLETTERED, log.head)
        # Session-enabled queues: each session's undelivered messages, oldest first (a heap
        # per session, daemon/README.md §9.7 FIFO), and the session of every message indexed there.
        self.by_session: dict[str, list[int]] = {}
        self.session_of: dict[int, str] = {}
        self.scheduled = []
        for s in list(log.seqs_in(State.SCHEDULED)):
            try:
                self.scheduled.append((log.record_header(s)[1], s))
            except CorruptRecord:
                log.discard_corrupt(s)
        heapq.heapify(self.scheduled)

    def view(self, subqueue: str) -> View:
        """The entity itself (""), its "deadletter" or its "transfer-deadletter" queue."""
        if subqueue == "deadletter":
            return self.dlq
        return self.tdlq if subqueue == "transfer-deadletter" else self.main

    # ------------------------------------------------------------ receiving

    def _next_candidate(self, view: View) -> int | None:
        log = self.log
        while view.returned:
            seq = heapq.heappop(view.returned)
            if log.state_of(seq) == view.state and seq not in self.locks:
                return seq
        base = log.base
        start = max(view.cursor, log.head) - base
        while True:
            i = log.state.find(view.state, start)
            if i < 0:
                view.cursor = log.next_seq
                return None
            seq = base + i
            view.cursor = seq + 1
            if seq not in self.locks:
                return seq
            start = i + 1

    def take(
        self,
        view: View,
        count: int,
        now: int,
        lock_ms: int | None,
        out: list[Delivered],
        expire: Callable[[Partition, int], None],
    ) -> None:
        """Hand out up to ``count`` messages of ``view``: locked for ``lock_ms``, or
        deleted when ``lock_ms`` is None (receive-and-delete)."""
        log = self.log
        journal: list[Entry] = []
        while len(out) < count:
            seq = self._next_candidate(view)
            if seq is None:
                break
            i = seq - log.base
            if view.state == State.ACTIVE and log.exp[i] <= now:
                # daemon/README.md §6.2: an expired message can no longer be received
                expire(self, seq)
                continue
            got = self.deliver(seq, now, lock_ms, journal)
            if got is not None:
                out.append(got)
        self.record_delivered(journal)

    def deliver(
        self,
        seq: int,
        now: int,
        lock_ms: int | None,
        journal: list[Entry],
        until: int | None = None,
    ) -> Delivered | None:
        """Lock ``seq`` for ``lock_ms`` (until ``until`` if given; delete it when
        ``lock_ms`` is None); the caller records ``journal``.

        A record that fails its CRC is never served: discarded (counted), None returned,
        nothing locked (daemon/README.md §0.4).
        """
        log = self.log
        try:
            payload = log.read_payload(seq)
        except CorruptRecord:
            log.discard_corrupt(seq)
            return None
        i = seq - log.base
        dc = log.dc[i] + 1
        if lock_ms is None:
            journal.append(Entry(OP_STATE, seq, State.GONE, b""))
            token, until = None, None
        else:
            until = self.lock(seq, until if until is not None else now + lock_ms)
            token = lock_token_for(self.shift | seq, self.locks[seq][0])
        journal.append(Entry(OP_DELIVERY, seq, dc, b""))
        return Delivered(
            self.shift | seq,
            log.enq[i],
            dc,
            token,
            until,
            log.exp[i],
            self.id,
            log.state[i],
            payload,
            log.props.get(seq),
        )

    def record_delivered(self, journal: list[Entry]) -> None:
        """Journal deliveries just handed out; if the disk refuses (StorageError), their
        locks are released and they are handed out again later."""
        try:
            self.log.record(journal)
        except StorageError:
            for entry in journal:
                if entry.op == OP_DELIVERY:
                    self.locks.pop(entry.seq, None)
                    self.give_back(entry.seq)
            raise

    def lock(self, seq: int, until: int, nonce: int | None = None) -> int:
        """Take (or, with the holder's ``nonce``, renew) the lock on ``seq``."""
        nonce = random.getrandbits(64) if nonce is None else nonce
        self.locks[seq] = (nonce, until)
        heapq.heappush(self.lock_heap, (until, seq, nonce))
        return until

    def give_back(self, seq: int) -> None:
        """Make a message that (re)entered a view available, ahead of newer ones.

        Only messages behind the view's cursor need the heap: the cursor finds the others.
        """
        state = self.log.state_of(seq)
        session = self.session_of.get(seq)
        if session is not None and state == State.ACTIVE:
            heapq.heappush(self.by_session.setdefault(session, []), seq)
            return
        view = {State.ACTIVE: self.main, State.DEADLETTERED: self.dlq}.get(state, self.tdlq)
        if view.state == state and seq < view.cursor:
            heapq.heappush(view.returned, seq)

    def index_session(self, seq: int, session_id: str) -> None:
        self.session_of[seq] = session_id
        heapq.heappush(self.by_session.setdefault(session_id, []), seq)

    def session_available(self, session_id: str) -> bool:
        """Does the session have a message ready for delivery?"""
        heap = self.by_session.get(session_id)
        while heap and (self.log.state_of(heap[0]) != State.ACTIVE or heap[0] in self.locks):
            heapq.heappop(heap)
        return bool(heap)

    def take_session(
        self,
        session_id: str,
        count: int,
        now: int,
        lock_ms: int | None,
        out: list[Delivered],
        expire: Callable[[Partition, int], None],
        until: int | None = None,
    ) -> None:
        """Hand out the session's messages in order (daemon/README.md §9.7), locked ``until``."""
        heap = self.by_session.get(session_id, [])
        journal: list[Entry] = []
        log = self.log
        while heap and len(out) < count:
            seq = heapq.heappop(heap)
            if log.state_of(seq) != State.ACTIVE or seq in self.locks:
                continue
            if log.exp[seq - log.base] <= now:
                # daemon/README.md §6.4: with a listener on the session, one expired message expires
                # every message of that session.
                for other in [seq, *heap]:
                    if log.state_of(other) == State.ACTIVE and other not in self.locks:
                        expire(self, other)
                heap.clear()
                break
            got = self.deliver(seq, now, lock_ms, journal, until)
            if got is not None:
                out.append(got)
            if lock_ms is None or got is None:
                self.session_of.pop(seq, None)
        self.record_delivered(journal)

    def schedule(self, when_ms: int, seq: int) -> None:
        heapq.heappush(self.scheduled, (when_ms, seq))

    def next_scheduled(self) -> int | None:
        """When the next still-scheduled message is due (cancelled ones are dropped)."""
        heap = self.scheduled
        while heap and self.log.state_of(heap[0][1]) != State.SCHEDULED:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def activation_record(self, seq: int) -> StagedRecord | None:
        """What the scheduled ``seq`` is enqueued as when its time comes (the same message,
        no longer scheduled); None when its record fails its CRC (it is discarded)."""
        try:
            raw = self.log.read_record(seq)
        except CorruptRecord:
            self.log.discard_corrupt(seq)
            return None
        ttl = RECORD_HEADER.unpack_from(raw)[2]
        return StagedRecord(raw[RECORD_HEADER.size :], ttl, NOT_SCHEDULED)

    def due_scheduled(self, now: int) -> list[int]:
        """Scheduled messages whose time has come (daemon/README.md §7.2), oldest first."""
        return [seq for _when, seq in self.due_scheduled_at(now)]

    def due_scheduled_at(self, now: int) -> list[tuple[int, int]]:
        """(scheduled time, sequence number) of the scheduled messages due by ``now``, in
        the order of their times."""
        out = []
        while self.scheduled and self.scheduled[0][0] <= now:
            when, seq = heapq.heappop(self.scheduled)
            if self.log.state_of(seq) == State.SCHEDULED:
                out.append((when, seq))
        return out

    def expired_locks(self, now: int) -> list[int]:
        """Pop the locks that ran out by ``now``; returns their sequence numbers."""
        out = []
        heap = self.lock_heap
        while heap and heap[0][0] <= now:
            _until, seq, nonce = heapq.heappop(heap)
            held = self.locks.get(seq)
            # A renewal keeps the nonce but pushes a later deadline: only the current one counts.
            if held is not None and held[0] == nonce and held[1] <= now:
                del self.locks[seq]
                out.append(seq)
        return out

    def next_lock_deadline(self) -> int | None:
        return self.lock_heap[0][0] if self.lock_heap else None

    # ------------------------------------------------------------ peeking

    def peek(self, subqueue: str, start: int, count: int, out: list[Delivered]) -> None:
        """Browse from local ``start`` (daemon/README.md §5): no locks, no state change."""
        log = self.log
        states = (self.view(subqueue).state,) if subqueue else PEEKABLE
        seq = max(start, log.head)
        base, end = log.base, log.next_seq
        while seq < end and len(out) < count:
            i = seq - base
            st = log.state[i]
            if st in states:
                try:
                    payload = log.read_payload(seq)
                except CorruptRecord:
                    log.discard_corrupt(seq)
                    seq += 1
                    continue
                out.append(
                    Delivered(
                        self.shift | seq,
                        log.enq[i],
                        log.dc[i],
                        None,
                        None,
                        log.exp[i],
                        self.id,
                        st,
                        payload,
                        log.props.get(seq),
                    )
                )
            seq += 1

    def has_peekable(self, subqueue: str) -> bool:
        counts = self.log.counts
        if subqueue:
            return counts[self.view(subqueue).state] > 0
        return any(counts[s] for s in PEEKABLE)
