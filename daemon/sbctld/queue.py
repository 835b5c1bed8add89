"""A queue: the data-plane rules that apply to it (send, receive, peek, settle, transact,
deferred and scheduled messages, purge), over the parts it owns.

A :class:`Queue` holds ``state`` (:class:`~sbctld.queue_state.QueueState`: its attributes,
counts, description and availability), ``timers`` (:class:`~sbctld.queue_timers.QueueTimers`)
and ``sessions`` (:class:`~sbctld.queue_sessions.QueueSessions`), the last two over that one
state; what the broker asks of a part it asks of the queue, which answers through the part
(the end of the class). A topic and a subscription are queues (:mod:`sbctld.topic`).

Pure and synchronous: every method takes ``now`` from the broker's clock and only writes
through its partitions (:class:`sbctld.partition.Partition`); the server awaits durability
before acknowledging.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from sbctl.core import layout, send_rules
from sbctl.core.delivered import Delivered
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    MessageSizeExceeded,
    QuotaExceeded,
    SbctlError,
)
from sbctl.core.limits import MAX_TRANSACTION
from sbctl.core.message_form import Sendable, intake_bare, intake_batch, sent_bare
from sbctl.core.partitioning import partition_for_key, partition_key_of
from sbctl.core.records import NOT_SCHEDULED, Message, StagedRecord
from sbctld.config import MB, QueueConfig, save_toml
from sbctld.dedup import DuplicateHistory
from sbctld.faults import all_down
from sbctld.partition import Partition, append_all, deliver_deferred, partial_or_raise
from sbctld.queue_sessions import QueueSessions
from sbctld.queue_state import (
    DUPLICATE_IN_BATCH,
    DUPLICATE_OF_SEQ,
    LOCK_LOST,
    NOT_RECEIVING,
    NOT_SENDING,
    PURGE_CHUNK,
    PURGEABLE,
    QueueState,
)
from sbctld.queue_timers import QueueTimers
from sbctld.results import (
    LockRenewed,
    QueueInfo,
    SessionEntry,
    SessionLock,
    Settled,
    SettleFailed,
    SettleResult,
    Transacted,
)
from sbctld.storage.journal import Entry
from sbctld.storage.log import OP_PROPS, OP_STATE, PartitionLog, State
from sbctld.storage.space import StorageError
from sbctld.storage.sync import Syncer


class Queue:
    """A queue: it owns its shared state (``state``), its timers (``timers``) and its
    sessions (``sessions``), and keeps the data-plane rules (see the module docstring)."""

    kind = "queue"  # how errors name it (a Topic and a Subscription say so)
    sessions_span_partitions = False  # see QueueSessions.receive_session

    def __init__(
        self,
        directory: Path,
        config: QueueConfig,
        partitions: list[Partition],
        *,
        max_message_bytes: int,
    ) -> None:
        self.state = QueueState(
            directory, config, partitions, max_message_bytes=max_message_bytes, kind=self.kind
        )
        self.timers = QueueTimers(self.state)
        self.sessions = QueueSessions(
            self.state, self.timers, span_partitions=self.sessions_span_partitions
        )

    @classmethod
    def open(
        cls,
        directory: Path,
        config: QueueConfig,
        partition_count: int,
        syncer: Syncer,
        *,
        max_message_bytes: int,
        segment_bytes: int,
        notes: list[str],
        now: int,
    ) -> Queue:
        parts = []
        for pid in range(partition_count):
            log = PartitionLog.open(layout.partition_dir(directory, pid), syncer, segment_bytes)
            notes.extend(log.notes)
            parts.append(Partition(log, pid, partition_count > 1))
        queue = cls(directory, config, parts, max_message_bytes=max_message_bytes)
        # The idle clock restarts with the daemon: time it was down is not idleness.
        queue.accessed_at_ms = max(config.updated_at_ms, now)
        queue.sessions.open(syncer)
        if config.requires_duplicate_detection:
            window = config.duplicate_detection_history_time_window
            queue.dedup = DuplicateHistory.open(layout.dedup_dir(directory), syncer, window, now)
        return queue

    def save(self) -> None:
        save_toml(layout.queue_file(self.state.directory), self.state.config)

    def close(self) -> None:
        state = self.state
        for p in state.partitions:
            p.close()
        if state.dedup is not None:
            state.dedup.close()
        if state.session_store is not None:
            state.session_store.close_files()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.state.directory, ignore_errors=True)

    # ------------------------------------------------------------ sending

    def send(
        self,
        batch: Sequence[Sendable],
        now: int,
        *,
        detect_duplicates: bool = True,
        from_broker: bool = False,
        via_partition: int | None = None,
        charge: Callable[[int], None] | None = None,
    ) -> list[int]:
        """Validate the whole batch first; store all of it or none of it.

        ``batch`` holds Messages or their encoded bytes (as they arrive on the wire).
        Returns one sequence number per message; a duplicate (daemon/README.md §8.3: accepted, then
        dropped) gets the number of the message it duplicates.
        """
        sent = self._send_bare(batch, now, detect_duplicates, charge)
        if sent is not None:
            return sent
        messages, payloads = intake_batch(batch)
        state = self.state
        cfg = state.config
        state.refuse_if(NOT_SENDING, "sends are refused")
        if not messages:
            raise BadRequest("a send needs at least one message")
        limit = state.max_message_bytes
        count = len(state.partitions)
        default_ttl = cfg.default_message_time_to_live
        groups: dict[int, list[StagedRecord]] = {}
        group_msgs: dict[int, list[Message]] = {}
        sizes: dict[int, int] = {}
        order: list[tuple[int, int]] = []
        scheduled: list[tuple[int, int, int]] = []  # (partition, index in group, when)
        in_session: list[tuple[int, int, str]] = []  # (partition, index in group, session)
        total = 0
        rr = state.rr_send
        dedup = state.dedup if detect_duplicates else None
        window = cfg.duplicate_detection_history_time_window
        if dedup is not None:
            dedup.prune(now, window)
        fresh: dict[str, int] = {}  # duplicate-detection key -> index in ``order``
        faulty = state.faulty
        requires_session = cfg.requires_session
        keyed_by_id = cfg.requires_duplicate_detection
        for m, payload in zip(messages, payloads, strict=True):
            size = len(payload)
            # send_rules.check_message, its two halves called here directly (the hot loop)
            send_rules.check_fields(m, requires_session)
            key = send_rules.check_encoded(m, size, keyed_by_id)
            if not from_broker:
                send_rules.check_not_broker_set(m)
            if (
                dedup is not None
                and m.message_id is not None
                and self._duplicate(dedup, m.message_id, key, now, fresh, order)
            ):
                continue
            if size > limit:
                send_rules.check_size(size, limit)  # raises, with the rule's text
            total += size
            if count == 1 and not faulty:
                pid = 0
            else:
                pid, rr = self._partition_of(key, via_partition, rr)
            ttl = send_rules.stored_time_to_live(m.time_to_live_ms, default_ttl)
            group = groups.get(pid)
            if group is None:
                group = groups[pid] = []
                group_msgs[pid] = []
                sizes[pid] = 0
            sched = self._timing(m, pid, len(group), now, scheduled, in_session)
            order.append((pid, len(group)))
            group.append(StagedRecord(payload, ttl, sched))
            group_msgs[pid].append(m)
            sizes[pid] += size
        self._check_room(total, len(messages), sizes)
        firsts = self._store(groups, group_msgs, now, charge)
        for pid, k, session_id in in_session:
            state.partitions[pid].index_session(firsts[pid] + k, session_id)
        for pid, k, when in scheduled:
            state.partitions[pid].schedule(when, firsts[pid] + k)
        state.rr_send = rr
        state.accessed_at_ms = now
        if count == 1 and not fresh and len(order) == len(messages) and groups:
            return list(range(firsts[0], firsts[0] + len(messages)))
        seqs = self._sequence_numbers(order, firsts)
        if dedup is not None and fresh:
            dedup.add(((dkey, seqs[i]) for dkey, i in fresh.items()), now)
        return seqs

    def _send_bare(
        self,
        batch: Sequence[Sendable],
        now: int,
        detect_duplicates: bool,
        charge: Callable[[int], None] | None,
    ) -> list[int] | None:
        """:meth:`send` of bodies alone (``intake_bare``), or with a message id alone where
        no duplicates are detected (``sent_bare``), to one partition without a fault or
        required sessions; None for any other batch or queue. The same checks and store,
        without the per-message rules such a message cannot break (no key, TTL, schedule or
        session; an id within its limits; nothing a broker sets)."""
        state = self.state
        if len(state.partitions) > 1 or state.faulty or state.config.requires_session:
            return None  # (one partition: a transaction's via_partition changes nothing)
        bare = intake_bare(batch)
        if bare is None and (not detect_duplicates or state.dedup is None):
            bare = sent_bare(batch)  # (with message ids: none to detect)
        if bare is None or not bare[0]:
            return None  # (not bodies alone, or none: send says what is wrong)
        messages, payloads = bare
        state.refuse_if(NOT_SENDING, "sends are refused")
        if detect_duplicates and state.dedup is not None:  # (none to detect: no MessageId)
            state.dedup.prune(now, state.config.duplicate_detection_history_time_window)
        limit = state.max_message_bytes
        sizes = [len(p) for p in payloads]
        for size in sizes:
            if size > limit:
                send_rules.check_size(size, limit)  # raises, with the rule's text
        total = sum(sizes)
        self._check_room(total, len(messages), {0: total})
        ttl = send_rules.stored_time_to_live(None, state.config.default_message_time_to_live)
        records = [StagedRecord(p, ttl, NOT_SCHEDULED) for p in payloads]
        first = self._store({0: records}, {0: messages}, now, charge)[0]
        state.accessed_at_ms = now
        return list(range(first, first + len(messages)))

    def _duplicate(
        self,
        dedup: DuplicateHistory,
        message_id: str,
        key: str | None,
        now: int,
        fresh: dict[str, int],
        order: list[tuple[int, int]],
    ) -> bool:
        """Whether a message is a duplicate (then its place in ``order`` says of what);
        else it is noted in ``fresh`` (daemon/README.md §8.3: MessageId, plus the partition key on
        partitioned entities)."""
        dkey = message_id if len(self.state.partitions) == 1 else f"{message_id}\x00{key}"
        prior = dedup.get(dkey, now, self.state.config.duplicate_detection_history_time_window)
        if prior is not None:
            order.append((DUPLICATE_OF_SEQ, prior))
            return True
        if dkey in fresh:
            order.append((DUPLICATE_IN_BATCH, fresh[dkey]))
            return True
        fresh[dkey] = len(order)
        return False

    def _timing(
        self,
        m: Message,
        pid: int,
        k: int,
        now: int,
        scheduled: list[tuple[int, int, int]],
        in_session: list[tuple[int, int, str]],
    ) -> int:
        """A sent message's scheduled time (NOT_SCHEDULED: now), noting it in ``scheduled``
        or, when it enters now with a session id, in ``in_session``."""
        sched = m.scheduled_enqueue_time_ms
        if sched is not None and sched > now:
            scheduled.append((pid, k, sched))
            return sched
        if self.state.session_store is not None and m.session_id is not None:
            in_session.append((pid, k, m.session_id))
        return NOT_SCHEDULED

    def _partition_of(self, key: str | None, via_partition: int | None, rr: int) -> tuple[int, int]:
        """The partition a message goes to, and the round-robin counter after it."""
        count = len(self.state.partitions)
        if count == 1:
            pid = 0
        elif via_partition is not None:
            pid = via_partition  # a transaction's partition (daemon/README.md §0.1.8)
        elif key is not None:
            pid = partition_for_key(key, count)  # daemon/README.md §0.1.4
        else:
            pid = rr % count  # keyless: round-robin
            rr += 1
        if self.state.faulty:
            pid = self._writable(pid, keyless=key is None and via_partition is None)
        return pid, rr

    def _check_room(self, total: int, messages: int, sizes: dict[int, int]) -> None:
        """The batch fits the tier's size limit and each partition's quota."""
        cfg = self.state.config
        limit = self.state.max_message_bytes
        if total > limit and messages > 1:
            raise MessageSizeExceeded(
                f"the batch of {total} bytes is larger than the {limit // 1024} KB allowed "
                "for this tier"
            )
        quota = cfg.max_size_in_megabytes * MB
        for pid, size in sizes.items():
            if self.state.partitions[pid].live_bytes + size > quota:
                # daemon/README.md §0.1.3: each partition holds up to the entity's max size.
                raise QuotaExceeded(
                    f"the maximum entity size has been reached or exceeded for queue "
                    f"{cfg.name!r} ({cfg.max_size_in_megabytes} MB per partition)"
                )

    def _sequence_numbers(self, order: list[tuple[int, int]], firsts: dict[int, int]) -> list[int]:
        """Each sent message's number, in batch order (a duplicate: its original's)."""
        seqs: list[int] = []
        for pid, k in order:
            if pid == DUPLICATE_OF_SEQ:
                seqs.append(k)
            elif pid == DUPLICATE_IN_BATCH:
                seqs.append(seqs[k])
            else:
                seqs.append(self.state.partitions[pid].shift | (firsts[pid] + k))
        return seqs

    def _writable(self, pid: int, *, keyless: bool) -> int:
        """The partition a message chosen for ``pid`` is written to, with faults
        (daemon/README.md §0.1.5): a keyless message skips unavailable partitions, a keyed
        one fails."""
        fault = self.state.partitions[pid].fault
        if fault is None or fault.reachable():
            return pid
        n = len(self.state.partitions)
        if not keyless or n == 1:
            raise fault.error()
        for k in range(1, n):
            p = self.state.partitions[(pid + k) % n]
            if p.fault is None or p.fault.reachable():
                return p.id
        raise all_down(self)

    def _store(
        self,
        groups: dict[int, list[StagedRecord]],
        messages: dict[int, list[Message]],
        now: int,
        charge: Callable[[int], None] | None,
    ) -> dict[int, int]:
        """Append each partition's records; returns each partition's first sequence number.
        (A topic routes them to its subscriptions here: sbctld.topic.)"""
        del messages, charge
        partitions = self.state.partitions
        firsts = append_all([(partitions[pid], recs) for pid, recs in groups.items()], now)
        return dict(zip(groups, firsts, strict=True))

    def check_message(self, m: Message, size: int) -> str | None:
        """Per-message rules (sbctl.core.send_rules, shared with the Spark loader); returns the
        partition key."""
        cfg = self.state.config
        return send_rules.check_message(
            m,
            size,
            requires_session=cfg.requires_session,
            duplicate_detection=cfg.requires_duplicate_detection,
        )

    # ------------------------------------------------------------ receiving

    def receive(self, count: int, now: int, *, delete: bool, subqueue: str) -> list[Delivered]:
        """daemon/README.md §0.1.6: ask every partition, starting with a different one each time."""
        state = self.state
        state.check_receive(subqueue)
        out: list[Delivered] = []
        lock_ms = None if delete else state.config.lock_duration
        n = len(state.partitions)
        start = state.rr_receive
        state.rr_receive = (start + 1) % n
        faulty = state.faulty
        if faulty:
            state.check_reachable()
        for k in range(n):
            p = state.partitions[(start + k) % n]
            if faulty and p.fault is not None and not p.fault.reachable():
                continue  # daemon/README.md §0.1.6: the available partitions answer
            try:
                p.take(p.view(subqueue), count, now, lock_ms, out, self.timers.expire)
            except StorageError as exc:
                partial_or_raise(exc, out)
            if len(out) >= count:
                break
        state.accessed_at_ms = now
        return out

    def peek(self, count: int, from_sequence: int | None, *, subqueue: str) -> list[Delivered]:
        """daemon/README.md §5, §0.1.7: in sequence-number order from ``from_sequence`` (the
        lowest held without one), walking on across partitions (the partition id is the top
        16 bits, so partition order is sequence-number order); a down partition other than
        the one ``from_sequence`` names is passed over."""
        state = self.state
        state.refuse_if(NOT_RECEIVING, "peeks are refused")
        pid, local = state.peek_start(from_sequence)
        named = pid if from_sequence is not None else -1
        faulty = state.faulty
        if faulty:
            state.check_reachable()
        out: list[Delivered] = []
        for p in state.partitions[pid:]:
            if p.fault is not None:
                if p.id == named:
                    p.fault.touch()  # the partition asked for answers or fails
                elif not p.fault.reachable():
                    continue
            p.peek(subqueue, local, count, out)
            if len(out) >= count:
                break
            local = 0
        return out

    # ------------------------------------------------------------ settling

    def settle(
        self,
        op: str,
        tokens: Sequence[str],
        now: int,
        properties: dict[str, Any] | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> list[SettleResult]:
        """Settle by lock token (daemon/README.md §3.4, §3.6, §4); one result per token."""
        state = self.state
        changes = self.state.settlement_changes(op, properties, reason, description)
        if state.faulty:
            state.reach_tokens(tokens)  # all or nothing: the client retries the request
        extra = msgspec.msgpack.encode(changes) if changes else b""
        results: list[SettleResult] = []
        journals: dict[int, list[Entry]] = {}
        released: list[tuple[Partition, int]] = []
        for token, found in zip(tokens, state.locked_all(tokens, now), strict=True):
            if isinstance(found, SbctlError):
                results.append(SettleFailed(lock_token=token, error=found))
                continue
            p, seq = found
            refused: SbctlError | None
            if seq in p.locks:
                refused = self._refusal(op, p, seq)
            else:  # the batch named its token before and settled it: what it meets alone now
                again = state.locked_all((token,), now)[0]
                refused = again if isinstance(again, SbctlError) else MessageLockLost(LOCK_LOST)
            if refused is not None:
                results.append(SettleFailed(lock_token=token, error=refused))
                continue
            if op == "renew-lock":
                # daemon/README.md §3.6: LockDuration more, counted from now.
                until = p.lock(seq, now + state.config.lock_duration, p.locks[seq][0])
                results.append(LockRenewed(lock_token=token, locked_until_ms=until))
                continue
            del p.locks[seq]
            if state.session_store is not None:
                state.session_store.disown((p.id, seq))
            if op != "abandon":
                p.session_of.pop(seq, None)
            entries = journals.setdefault(p.id, [])
            if op == "complete":
                entries.append(Entry(OP_STATE, seq, State.GONE, b""))
            elif op == "abandon":
                if extra:
                    entries.append(Entry(OP_PROPS, seq, 0, extra))
                released.append((p, seq))
            elif op == "defer":
                entries.append(Entry(OP_STATE, seq, State.DEFERRED, extra))
            else:
                entries.append(Entry(OP_STATE, seq, State.DEADLETTERED, extra))
                released.append((p, seq))
            results.append(Settled(lock_token=token))
        for pid, entries in journals.items():
            state.partitions[pid].record(entries)
        for p, seq in released:
            self.timers.release(p, seq)
        return results

    def transact(
        self,
        batch: Sequence[Sendable],
        settlements: Sequence[tuple[str, str, dict[str, Any] | None, str | None, str | None]],
        now: int,
    ) -> Transacted:
        """Sends and settlements on this queue, all or nothing (daemon/README.md §12, §0.1.8).

        Everything is checked before anything is applied: the 100-operation limit, the
        partitioned-entity key rules and every lock token.
        """
        if len(batch) + len(settlements) > MAX_TRANSACTION:
            raise QuotaExceeded("Can't send more than 100 messages in a single transaction")
        messages, _payloads = intake_batch(batch)
        partitions: set[int] = set()
        if self.state.partitioned:
            keys: set[str] = set()
            sessions: set[str] = set()
            for m in messages:
                key = partition_key_of(m.session_id, m.partition_key, m.message_id, True)
                if key is None:
                    raise InvalidOperation(
                        "every message of a transaction on a partitioned entity needs a "
                        "partition key: SessionId, PartitionKey or MessageId"
                    )
                keys.add(key)
                if m.session_id is not None:
                    sessions.add(m.session_id)
            if len(sessions) > 1:
                raise InvalidOperation(
                    "a transaction may not send to several sessions of a partitioned entity "
                )
            if len(keys) > 1:
                raise InvalidOperation(
                    "all messages of a transaction on a partitioned entity must share one "
                    f"partition key, not {len(keys)}"
                )
            partitions = {partition_for_key(k, len(self.state.partitions)) for k in keys}
        tokens: set[str] = set()
        for op, token, props, reason, description in settlements:
            if op == "renew-lock":
                raise BadRequest("renew-lock cannot be part of a transaction")
            self.state.settlement_changes(op, props, reason, description)
            p, _seq = self._settleable(op, token, now)  # raises: nothing is applied
            if token in tokens:
                raise InvalidOperation(f"lock token {token} is settled twice in the transaction")
            tokens.add(token)
            partitions.add(p.id)
        if len(partitions) > 1:
            raise InvalidOperation(
                "a transaction on a partitioned entity works within one partition; these "
                f"operations touch {len(partitions)}"
            )
        via = next(iter(partitions)) if self.state.partitioned and partitions else None
        seqs = self.send(batch, now, via_partition=via) if batch else []
        results = [
            self.settle(op, [token], now, props, reason, description)[0]
            for op, token, props, reason, description in settlements
        ]
        return Transacted(sequence_numbers=seqs, settlements=results)

    def _settleable(self, op: str, token: str, now: int) -> tuple[Partition, int]:
        """The locked message ``token`` names, if ``op`` may settle it; raises otherwise."""
        p, seq = self.state.locked(token, now)
        refused = self._refusal(op, p, seq)
        if refused is not None:
            raise refused
        return p, seq

    @staticmethod
    def _refusal(op: str, p: Partition, seq: int) -> InvalidOperation | None:
        """Why ``op`` may not settle the locked message ``seq``, if it may not."""
        if op in ("dead-letter", "defer") and p.state_of(seq) == State.DEADLETTERED:
            # daemon/README.md §4.3: a DLQ message cannot be dead-lettered again (nor deferred out
            # of it).
            return InvalidOperation(
                "a dead-lettered message cannot be dead-lettered again"
                if op == "dead-letter"
                else "a dead-lettered message cannot be deferred"
            )
        return None

    def receive_deferred(
        self,
        sequence_numbers: Sequence[int],
        now: int,
        *,
        delete: bool,
        session_token: str | None = None,
    ) -> list[Delivered]:
        """Fetch deferred messages by sequence number (daemon/README.md §3.4, §3.9). Every number
        must name a deferred, unlocked message (of the session ``session_token`` holds, on a
        session-enabled entity: daemon/README.md §9.7) else MessageNotFound and nothing is
        taken; one that expired meanwhile is expired now and left out."""
        session_id, until = self.sessions.deferred_receiver(session_token, now)
        found = []
        for public in sequence_numbers:
            p, seq = self.state.split(public)
            if p.fault is not None:
                p.fault.touch()
            if (
                p.state_of(seq) != State.DEFERRED
                or seq in p.locks
                or not self.sessions.in_session(p, seq, session_id)
            ):
                raise MessageNotFound(
                    f"no deferred message with sequence number {public} in {self.state.name!r}"
                )
            found.append((p, seq))
        lock_ms = None if delete else self.state.config.lock_duration
        out = deliver_deferred(found, now, lock_ms, until, self.timers.expire)
        self.sessions.own_deferred(session_token, out, delete)
        self.state.accessed_at_ms = now
        return out

    def cancel_scheduled(self, sequence_numbers: Sequence[int]) -> int:
        """daemon/README.md §7.2: cancelling deletes a scheduled message. All or nothing."""
        # Cancelling is a sender's operation (daemon/README.md §17).
        self.state.refuse_if(NOT_SENDING, "cancelling is refused")
        found = []
        for public in sequence_numbers:
            p, seq = self.state.split(public)
            if p.fault is not None:
                p.fault.touch()
            if p.state_of(seq) != State.SCHEDULED:
                raise MessageNotFound(
                    f"no scheduled message with sequence number {public} in {self.state.name!r}"
                )
            found.append((p, seq))
        for p, seq in found:
            p.set_state(seq, State.GONE)
        return len(found)

    def purge(self, *, subqueue: str) -> int:
        """Delete every message of the queue (or of its DLQ), locked ones included."""
        states = (self.state.partitions[0].view(subqueue).state,) if subqueue else PURGEABLE
        self.state.reach_all()  # every message or none
        total = 0
        for p in self.state.partitions:
            seqs = sorted(seq for st in states for seq in p.seqs_in(st))
            for k in range(0, len(seqs), PURGE_CHUNK):
                chunk = seqs[k : k + PURGE_CHUNK]
                for seq in chunk:
                    p.locks.pop(seq, None)
                p.record(Entry(OP_STATE, seq, State.GONE, b"") for seq in chunk)
            total += len(seqs)
        return total

    # ------------------------------------------------------------ the parts, read through
    # What the broker, topics and tools ask of a queue, answered by the part that owns it.

    @property
    def config(self) -> QueueConfig:
        return self.state.config

    @config.setter
    def config(self, config: QueueConfig) -> None:
        self.state.config = config

    @property
    def key(self) -> tuple[str, str]:
        """(namespace key, entity key), set by the broker."""
        return self.state.key

    @key.setter
    def key(self, key: tuple[str, str]) -> None:
        self.state.key = key

    @property
    def accessed_at_ms(self) -> int:
        return self.state.accessed_at_ms

    @accessed_at_ms.setter
    def accessed_at_ms(self, when: int) -> None:
        self.state.accessed_at_ms = when

    @property
    def faulty(self) -> bool:
        return self.state.faulty

    @faulty.setter
    def faulty(self, faulty: bool) -> None:
        self.state.faulty = faulty

    @property
    def dedup(self) -> DuplicateHistory | None:
        return self.state.dedup

    @dedup.setter
    def dedup(self, dedup: DuplicateHistory | None) -> None:
        self.state.dedup = dedup

    @property
    def name(self) -> str:
        return self.state.config.name

    @property
    def directory(self) -> Path:
        return self.state.directory

    @property
    def partitions(self) -> list[Partition]:
        return self.state.partitions

    @property
    def partitioned(self) -> bool:
        return self.state.partitioned

    @property
    def max_message_bytes(self) -> int:
        return self.state.max_message_bytes

    @property
    def availability_status(self) -> str:
        return self.state.availability_status

    def counts(self) -> dict[str, int]:
        return self.state.counts()

    def describe(self, *, partitions: bool = True) -> QueueInfo:
        return self.state.describe(partitions=partitions)

    def check_reachable(self) -> None:
        self.state.check_reachable()

    def reach_all(self) -> None:
        self.state.reach_all()

    def unavailable(self) -> list[int]:
        return self.state.unavailable()

    def waiting(self, state: State, count: int | None = None) -> list[tuple[Partition, int]]:
        return self.state.waiting(state, count)

    def resubmittable(self, p: Partition, seq: int) -> Message:
        return self.state.resubmittable(p, seq)

    def in_session(self, p: Partition, seq: int, session_id: str | None) -> bool:
        return self.sessions.in_session(p, seq, session_id)

    def accept_session(self, session_id: str | None, now: int) -> SessionLock:
        return self.sessions.accept_session(session_id, now)

    def receive_session(self, token: str, count: int, now: int, *, delete: bool) -> list[Delivered]:
        return self.sessions.receive_session(token, count, now, delete=delete)

    def renew_session(self, token: str, now: int) -> SessionLock:
        return self.sessions.renew_session(token, now)

    def close_session(self, token: str, now: int) -> dict[str, Any]:
        return self.sessions.close_session(token, now)

    def list_sessions(self, now: int) -> list[SessionEntry]:
        return self.sessions.list_sessions(now)

    def get_session_state(self, session_id: str) -> bytes | None:
        return self.sessions.get_session_state(session_id)

    def set_session_state(self, session_id: str, state: bytes | None) -> None:
        self.sessions.set_session_state(session_id, state)

    def activate_scheduled(self, now: int, *, own_times: bool = False) -> bool:
        return self.timers.activate_scheduled(now, own_times=own_times)

    def expire_locks(self, now: int) -> bool:
        return self.timers.expire_locks(now)

    def expire_due(self, now: int) -> int:
        return self.timers.expire_due(now)

    def idle(self, now: int) -> bool:
        return self.timers.idle(now)

    def next_scheduled(self) -> int | None:
        return self.timers.next_scheduled()

    @property
    def scheduled_pending(self) -> bool:
        return self.timers.scheduled_pending

    @property
    def scheduled_count(self) -> int:
        return self.timers.scheduled_count
