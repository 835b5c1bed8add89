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

A partition is the only way into its store (``log``: a queue's or a topic's
:class:`~sbctld.storage.log.PartitionLog`, or a subscription's
:class:`~sbctld.storage.topic.SubLog` view): queues, topics, the broker and the tools call
the methods below, never the log (tests/unit/test_architecture.py).
"""

from __future__ import annotations

import heapq
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbctl.core.delivered import Delivered
from sbctl.core.locks import lock_token_for
from sbctl.core.records import NOT_SCHEDULED, RECORD_HEADER, StagedRecord
from sbctld.storage.adoption import StagedSegment, commit_adoption, link_adoption
from sbctld.storage.journal import Entry
from sbctld.storage.log import OP_DELIVERY, OP_STATE, PartitionLog, Staged, State
from sbctld.storage.space import CorruptRecord, StorageError
from sbctld.storage.topic import SubLog, TopicLog

log = logging.getLogger("sbctld")

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

    def _candidates(self, view: View, n: int, taken: set[int]) -> list[int]:
        """Up to ``n`` messages of ``view`` to hand out next, none locked or in ``taken``
        (each added to it: one handed back twice comes once): those handed back first, then
        from the cursor on (which moves past them)."""
        log, locks, want = self.log, self.locks, view.state
        out: list[int] = []
        returned = view.returned
        while returned and len(out) < n:
            seq = heapq.heappop(returned)
            if log.state_of(seq) == want and seq not in locks and seq not in taken:
                taken.add(seq)
                out.append(seq)
        base, state = log.base, log.state
        start = max(view.cursor, log.head) - base
        while len(out) < n:
            i = state.find(want, start)
            if i < 0:
                view.cursor = log.next_seq
                break
            seq = base + i
            view.cursor = seq + 1
            start = i + 1
            if seq not in locks and seq not in taken:
                taken.add(seq)
                out.append(seq)
        return out

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
        deleted when ``lock_ms`` is None (receive-and-delete), all journaled or none
        (:meth:`_hand_back`)."""
        journal: list[Entry] = []
        taken: set[int] = set()
        first = len(out)
        try:
            while len(out) < count:
                seqs = self._candidates(view, count - len(out), taken)
                if not seqs:
                    break
                if view.state == State.ACTIVE:
                    seqs = self._unexpired(view, seqs, now, expire)
                self.deliver_all(seqs, now, lock_ms, journal, out)
            self.log.record(journal)
        except BaseException:
            self._hand_back(journal, out, first)
            raise

    def _unexpired(
        self, view: View, seqs: list[int], now: int, expire: Callable[[Partition, int], None]
    ) -> list[int]:
        """``seqs`` less the expired, which ``expire`` takes (daemon/README.md §6.2: an
        expired message can no longer be received). If it fails (the disk refuses its
        journal entry), the candidates not yet handled are handed back before it raises."""
        exp, base = self.log.exp, self.log.base
        live: list[int] = []
        for k, seq in enumerate(seqs):
            if exp[seq - base] > now:
                live.append(seq)
                continue
            try:
                expire(self, seq)
            except BaseException:
                for other in live + seqs[k + 1 :]:
                    heapq.heappush(view.returned, other)
                raise
        return live

    def deliver(
        self,
        seq: int,
        now: int,
        lock_ms: int | None,
        journal: list[Entry],
        until: int | None = None,
    ) -> Delivered | None:
        """:meth:`deliver_all` of one message: its delivery, or None (a damaged record)."""
        out: list[Delivered] = []
        self.deliver_all((seq,), now, lock_ms, journal, out, until)
        return out[0] if out else None

    def deliver_all(
        self,
        seqs: Sequence[int],
        now: int,
        lock_ms: int | None,
        journal: list[Entry],
        out: list[Delivered],
        until: int | None = None,
    ) -> None:
        """Lock each of ``seqs`` for ``lock_ms`` (until ``until`` if given; delete them when
        ``lock_ms`` is None) and append its delivery to ``out``; the caller records
        ``journal``.

        A record that fails its CRC is never served: discarded (counted), left out, nothing
        locked (daemon/README.md §0.4). One loop for a whole receive: the receive path's
        per-message work, without a call per step.
        """
        log = self.log
        base, dcs, enq, exp, states, props = (
            log.base,
            log.dc,
            log.enq,
            log.exp,
            log.state,
            log.props,
        )
        locks, heap, shift, pid = self.locks, self.lock_heap, self.shift, self.id
        held = 0 if lock_ms is None else until if until is not None else now + lock_ms
        draw = random.getrandbits
        for seq, payload in zip(seqs, log.read_payloads(seqs), strict=True):
            if payload is None:
                log.discard_corrupt(seq)
                continue
            i = seq - base
            dc = dcs[i] + 1
            if lock_ms is None:
                journal.append(Entry(OP_STATE, seq, State.GONE, b""))
                token = None
            else:
                nonce = draw(64)  # (what lock() does, inline)
                locks[seq] = (nonce, held)
                heapq.heappush(heap, (held, seq, nonce))
                token = lock_token_for(shift | seq, nonce)
            journal.append(Entry(OP_DELIVERY, seq, dc, b""))
            out.append(
                Delivered(
                    shift | seq,
                    enq[i],
                    dc,
                    token,
                    None if lock_ms is None else held,
                    exp[i],
                    pid,
                    states[i],
                    payload,
                    props.get(seq),
                )
            )

    def _hand_back(
        self, journal: list[Entry], out: list[Delivered] | None = None, first: int = 0
    ) -> None:
        """Undo deliveries not journaled (daemon/README.md §21.9): their locks released, each
        handed out again later; with ``out``, their deliveries (from ``first`` on) taken back
        from the answer."""
        for entry in journal:
            if entry.op == OP_DELIVERY:
                self.locks.pop(entry.seq, None)
                self.give_back(entry.seq)
        if out is not None:
            del out[first:]

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
        first = len(out)
        gone: list[int] = []  # (out of the session once journaled)
        try:
            while heap and len(out) < count:
                seq = heapq.heappop(heap)
                if log.state_of(seq) != State.ACTIVE or seq in self.locks:
                    continue
                if log.exp[seq - log.base] <= now:
                    heapq.heappush(heap, seq)  # (until its expiry is journaled)
                    # daemon/README.md §6.4: with a listener on the session, one expired
                    # message expires every message of that session.
                    for other in list(heap):
                        if log.state_of(other) == State.ACTIVE and other not in self.locks:
                            expire(self, other)
                    heap.clear()
                    break
                got = self.deliver(seq, now, lock_ms, journal, until)
                if got is not None:
                    out.append(got)
                if lock_ms is None or got is None:
                    gone.append(seq)
            self.log.record(journal)
        except BaseException:
            self._hand_back(journal, out, first)
            raise
        for seq in gone:
            self.session_of.pop(seq, None)

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

    # ------------------------------------------------------------ the store
    # Every other module reads and changes the partition's store through what follows
    # (tests/unit/test_architecture.py): which store it is (a queue's, a topic's, a
    # subscription's view of a topic's) and how it lays messages out stay this class's.

    @property
    def counts(self) -> list[int]:
        """Messages per State (read only)."""
        return self.log.counts

    @property
    def next_seq(self) -> int:
        """The local sequence number the next message stored here gets."""
        return self.log.next_seq

    @property
    def live_bytes(self) -> int:
        return self.log.live_bytes

    @property
    def corrupt_count(self) -> int:
        """Records that failed their CRC check, never served (daemon/README.md §0.4)."""
        return self.log.corrupt_count

    @property
    def message_count(self) -> int:
        return self.log.message_count

    @property
    def directory(self) -> Path:
        return self.log.directory

    def state_of(self, seq: int) -> State:
        return self.log.state_of(seq)

    def seqs_in(self, state: State, start: int | None = None) -> Iterator[int]:
        """Local sequence numbers in ``state`` from ``start`` on, ascending."""
        return self.log.seqs_in(state, start)

    def read_payload(self, seq: int) -> bytes:
        """The stored message (CorruptRecord when its record fails its CRC)."""
        return self.log.read_payload(seq)

    def discard_corrupt(self, seq: int) -> None:
        self.log.discard_corrupt(seq)

    def props_of(self, seq: int) -> dict[str, Any] | None:
        """Property changes made after the message was stored (abandon, dead-letter)."""
        return self.log.props.get(seq)

    def delivery_count(self, seq: int) -> int:
        log = self.log
        return log.dc[seq - log.base]

    def enqueued_at(self, seq: int) -> int:
        log = self.log
        return log.enq[seq - log.base]

    def expired(self, seq: int, now: int) -> bool:
        """Has the message's time to live run out by ``now`` (daemon/README.md §6.2)?"""
        log = self.log
        return log.exp[seq - log.base] <= now

    def expired_unlocked(self, now: int) -> list[int]:
        """Active, unlocked messages whose time to live ran out by ``now``."""
        log, locks = self.log, self.locks
        exp, base = log.exp, log.base
        return [s for s in log.seqs_in(State.ACTIVE) if exp[s - base] <= now and s not in locks]

    def set_state(self, seq: int, state: State, changes: dict[str, Any] | None = None) -> None:
        """Move a message to ``state`` with these property changes, journaled."""
        self.log.set_state(seq, state, changes)

    def record(self, entries: Iterable[Entry]) -> None:
        """Journal changes to stored messages (then apply them)."""
        self.log.record(entries)

    def append(self, records: Sequence[StagedRecord], now: int) -> int:
        """Store messages enqueued at ``now``; returns the first one's sequence number."""
        return self.log.append(records, now)

    def has_payload_since(self, start: int, payload: bytes) -> bool:
        """Is a message with exactly ``payload`` stored at or after ``start``? (Records
        that cannot be read are passed over.)"""
        log = self.log
        for seq in range(max(start, log.base), log.next_seq):
            try:
                if log.read_payload(seq) == payload:
                    return True
            except (IndexError, OSError, CorruptRecord):
                continue
        return False

    def close(self) -> None:
        self.log.close()

    # ------------------------------------------------------------ checkpoints

    def checkpoint_recovered(self) -> list[str]:
        """Checkpoint what recovery rebuilt (a queue's or topic's store); returns the
        trouble to report."""
        log = self.log
        if not isinstance(log, PartitionLog):
            return []
        log.checkpoint_recovered()
        return [note for note in log.notes[-1:] if "not checkpointed" in note]

    def checkpoint_due(self, min_changes: int, full: bool) -> bool:
        """At least ``min_changes`` changes; or, on a full disk or for ``min_changes`` 1,
        any change or a settled segment to delete."""
        log = self.log
        changes = log.changes_since_checkpoint
        return changes >= min_changes or (
            (full or min_changes <= 1) and bool(changes or log.settled_segments)
        )

    def checkpoint(self) -> None:
        self.log.checkpoint()

    # ------------------------------------------------------------ topics and loads

    def _topic_log(self) -> TopicLog:
        log = self.log
        assert isinstance(log, TopicLog), "a topic's partition"
        return log

    def subscription(self, sub_id: int, partitioned: bool) -> Partition:
        """The partition of subscription ``sub_id`` over this topic partition's store."""
        return Partition(self._topic_log().subs[sub_id], self.id, partitioned)

    def add_subscription(self, sub_id: int, ttl_cap_ms: int | None) -> None:
        self._topic_log().add_sub(sub_id, ttl_cap_ms)

    def remove_subscription(self, sub_id: int) -> None:
        self._topic_log().remove_sub(sub_id)

    def set_ttl_cap(self, ttl_cap_ms: int | None) -> None:
        """A subscription's default TTL below its topic's caps what it sees (§1.6)."""
        log = self.log
        assert isinstance(log, SubLog), "a subscription's partition"
        if log.ttl_cap_ms != ttl_cap_ms:
            log.set_ttl_cap(ttl_cap_ms)

    def stage_routed(
        self,
        records: Sequence[StagedRecord],
        now: int,
        routes: dict[int, bytes],
        props: Sequence[tuple[int, int, dict[str, Any]]],
    ) -> tuple[Staged, list[Entry], int]:
        """A topic's batch and its routes written, not applied (sbctld.storage.topic)."""
        return self._topic_log().stage_routed(records, now, routes, props)

    def unstage_routed(self, staged: tuple[Staged, list[Entry], int]) -> None:
        self._topic_log().unstage_routed(staged)

    def commit_routed(self, staged: tuple[Staged, list[Entry], int]) -> int:
        return self._topic_log().commit_routed(staged)

    @property
    def takes_loads(self) -> bool:
        """Spark loads adopt segments into a queue's store only (sbctld.loads)."""
        return isinstance(self.log, PartitionLog) and not isinstance(self.log, TopicLog)

    def link_adoption(self, segments: Sequence[StagedSegment]) -> None:
        assert isinstance(self.log, PartitionLog)
        link_adoption(self.log, segments)

    def commit_adoption(self, segments: Sequence[StagedSegment], now: int) -> None:
        """Index linked segments (their messages become visible) and time the scheduled."""
        assert isinstance(self.log, PartitionLog)
        for when, seq in commit_adoption(self.log, segments, now):
            self.schedule(when, seq)


def append_all(batches: list[tuple[Partition, Sequence[StagedRecord]]], now: int) -> list[int]:
    """Store each partition's records, all or nothing (daemon/README.md §0.4: a send that
    cannot be written fails whole, on every partition of the batch); returns each
    partition's first sequence number."""
    if len(batches) == 1:  # one write: all or nothing by itself (a subscription's too)
        ((p, records),) = batches
        return [p.log.append(records, now)]
    staged = []
    try:
        for p, records in batches:
            log = p.log
            assert isinstance(log, PartitionLog)
            staged.append((log, log.stage(records, now)))
    except StorageError:
        for log, batch in staged:
            log.unstage(batch)
        raise
    return [log.commit(batch) for log, batch in staged]


def deliver_deferred(
    found: list[tuple[Partition, int]],
    now: int,
    lock_ms: int | None,
    until: int | None,
    expire: Callable[[Partition, int], None],
) -> list[Delivered]:
    """Hand out the deferred messages ``found`` (daemon/README.md §3.9) in their order, each
    partition's journaled or none of them: when a partition's journal fails, it and those
    after it hand theirs back, and :func:`partial_or_raise` decides. One that expired
    meanwhile is expired and left out."""
    got: list[tuple[Partition, Delivered]] = []
    journals: dict[Partition, list[Entry]] = {}
    try:
        for p, seq in found:
            if p.expired(seq, now):
                expire(p, seq)
                continue
            delivered = p.deliver(seq, now, lock_ms, journals.setdefault(p, []), until)
            if delivered is not None:
                got.append((p, delivered))
    except BaseException:
        for p, journal in journals.items():
            p._hand_back(journal)
        raise
    recorded: set[Partition] = set()
    failure: BaseException | None = None
    for p, journal in journals.items():
        if failure is None:
            try:
                p.log.record(journal)
                recorded.add(p)
                continue
            except BaseException as exc:
                failure = exc
        p._hand_back(journal)
    answer = [d for p, d in got if p in recorded]
    if failure is not None:
        partial_or_raise(failure, answer)
    return answer


_warned_at = [-1e9]  # when partial_or_raise last logged (time.monotonic)


def partial_or_raise(error: BaseException, out: list[Delivered]) -> None:
    """A receive across partitions, one of which failed with ``error`` and handed its
    deliveries back (daemon/README.md §21.9): when the disk refused and other partitions
    handed out ``out``, journaled already, the receive answers with those (a warning in the
    log, once a minute at most, however often clients poll) rather than fail, so a
    receive-and-delete never drops what it took; otherwise ``error`` is raised."""
    if not out or not isinstance(error, StorageError):
        raise error
    now = time.monotonic()
    if now - _warned_at[0] >= 60:
        _warned_at[0] = now
        log.warning("a receive answers without the messages of a partition: %s", error)
