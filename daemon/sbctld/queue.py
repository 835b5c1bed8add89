"""A queue: its description, its partitions, and the data-plane rules that apply to it.

Pure and synchronous: every method takes ``now`` from the broker's clock and only writes
through the partition logs; the server awaits durability before acknowledging.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from sbctl.core import layout, send_rules
from sbctl.core.amqp import codec
from sbctl.core.delivered import Delivered
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    MessageSizeExceeded,
    MessagingEntityDisabled,
    QuotaExceeded,
    SessionLockLost,
)
from sbctl.core.limits import (
    MAX_TRANSACTION,
)
from sbctl.core.locks import parse_lock_token
from sbctl.core.message_form import Sendable, Sent, intake, intake_sent
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.partitioning import partition_for_key, partition_key_of
from sbctl.core.records import NOT_SCHEDULED, Message, StagedRecord
from sbctl.core.typed import plain
from sbctld.config import MB, QueueConfig, save_toml
from sbctld.dedup import DuplicateHistory
from sbctld.faults import all_down
from sbctld.partition import Partition
from sbctld.queue_sessions import QueueSessions
from sbctld.queue_state import (
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SOURCE,
    DUPLICATE_IN_BATCH,
    DUPLICATE_OF_SEQ,
    LOCAL_MASK,
    LOCK_LOST,
    PURGE_CHUNK,
    PURGEABLE,
    SETTLEMENTS,
)
from sbctld.results import LockRenewed, Settled, SettleFailed, SettleResult, Transacted
from sbctld.sessions import SESSION_LOCK_LOST, Sessions
from sbctld.storage.journal import Entry
from sbctld.storage.log import (
    OP_PROPS,
    OP_STATE,
    PartitionLog,
    State,
)
from sbctld.storage.space import StorageError
from sbctld.storage.sync import Syncer


def decode_batch(
    batch: Sequence[Sendable],
) -> tuple[list[Message], list[bytes]]:
    """Messages and their stored forms, each read once (sbctl.core.message_form): a message
    a front-end took in already (``Sent``), the AMQP encoding of one, the bytes a Unix
    client sent, or fields (encoded here); one that does not decode is a BadRequest."""
    messages: list[Message] = []
    payloads: list[bytes] = []
    for i, item in enumerate(batch, 1):
        if isinstance(item, Sent):
            messages.append(item.message)
            payloads.append(item.payload)
            continue
        try:
            sent = intake(encode_message(item)) if isinstance(item, Message) else intake_sent(item)
        except (codec.DecodeError, msgspec.DecodeError, ValueError) as exc:
            raise BadRequest(f"message {i} of the batch is malformed: {exc}") from None
        messages.append(sent.message)
        payloads.append(sent.payload)
    return messages, payloads


class Queue(QueueSessions):
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
        queue.open_sessions(syncer)
        if config.requires_duplicate_detection:
            window = config.duplicate_detection_history_time_window
            queue.dedup = DuplicateHistory.open(layout.dedup_dir(directory), syncer, window, now)
        return queue

    def open_sessions(self, syncer: Syncer) -> None:
        """Session-enabled: open the session states and index the stored messages."""
        if not self.config.requires_session:
            return
        self.sessions = Sessions(layout.sessions_dir(self.directory), syncer)
        for p in self.partitions:
            for seq in p.log.seqs_in(State.ACTIVE):
                session_id = decode_message(p.log.read_payload(seq)).session_id
                if session_id is not None:
                    p.index_session(seq, session_id)

    def save(self) -> None:
        save_toml(layout.queue_file(self.directory), self.config)

    def close(self) -> None:
        for p in self.partitions:
            p.log.close()
        if self.dedup is not None:
            self.dedup.close()
        if self.sessions is not None:
            self.sessions.close_files()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

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
        messages, payloads = decode_batch(batch)
        cfg = self.config
        if cfg.status in ("Disabled", "SendDisabled"):
            raise MessagingEntityDisabled(
                f"{self.kind} {cfg.name!r} is {cfg.status}: sends are refused"
            )
        if not messages:
            raise BadRequest("a send needs at least one message")
        limit = self.max_message_bytes
        count = len(self.partitions)
        default_ttl = cfg.default_message_time_to_live
        groups: dict[int, list[StagedRecord]] = {}
        group_msgs: dict[int, list[Message]] = {}
        sizes: dict[int, int] = {}
        order: list[tuple[int, int]] = []
        scheduled: list[tuple[int, int, int]] = []  # (partition, index in group, when)
        in_session: list[tuple[int, int, str]] = []  # (partition, index in group, session)
        total = 0
        rr = self._rr_send
        dedup = self.dedup if detect_duplicates else None
        window = cfg.duplicate_detection_history_time_window
        if dedup is not None:
            dedup.prune(now, window)
        fresh: dict[str, int] = {}  # duplicate-detection key -> index in ``order``
        faulty = self.faulty
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
            self.partitions[pid].index_session(firsts[pid] + k, session_id)
        for pid, k, when in scheduled:
            self.partitions[pid].schedule(when, firsts[pid] + k)
        self._rr_send = rr
        self.accessed_at_ms = now
        if count == 1 and not fresh and len(order) == len(messages) and groups:
            return list(range(firsts[0], firsts[0] + len(messages)))
        seqs = self._sequence_numbers(order, firsts)
        if dedup is not None and fresh:
            dedup.add(((dkey, seqs[i]) for dkey, i in fresh.items()), now)
        return seqs

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
        dkey = message_id if len(self.partitions) == 1 else f"{message_id}\x00{key}"
        prior = dedup.get(dkey, now, self.config.duplicate_detection_history_time_window)
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
        if self.sessions is not None and m.session_id is not None:
            in_session.append((pid, k, m.session_id))
        return NOT_SCHEDULED

    def _partition_of(self, key: str | None, via_partition: int | None, rr: int) -> tuple[int, int]:
        """The partition a message goes to, and the round-robin counter after it."""
        count = len(self.partitions)
        if count == 1:
            pid = 0
        elif via_partition is not None:
            pid = via_partition  # a transaction's partition (daemon/README.md §0.1.8)
        elif key is not None:
            pid = partition_for_key(key, count)  # daemon/README.md §0.1.4
        else:
            pid = rr % count  # keyless: round-robin
            rr += 1
        if self.faulty:
            pid = self._writable(pid, keyless=key is None and via_partition is None)
        return pid, rr

    def _check_room(self, total: int, messages: int, sizes: dict[int, int]) -> None:
        """The batch fits the tier's size limit and each partition's quota."""
        cfg = self.config
        limit = self.max_message_bytes
        if total > limit and messages > 1:
            raise MessageSizeExceeded(
                f"the batch of {total} bytes is larger than the {limit // 1024} KB allowed "
                "for this tier"
            )
        quota = cfg.max_size_in_megabytes * MB
        for pid, size in sizes.items():
            if self.partitions[pid].log.live_bytes + size > quota:
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
                seqs.append(self.partitions[pid].shift | (firsts[pid] + k))
        return seqs

    def _writable(self, pid: int, *, keyless: bool) -> int:
        """The partition a message chosen for ``pid`` is written to, with faults
        (daemon/README.md §0.1.5): a keyless message skips unavailable partitions, a keyed
        one fails."""
        fault = self.partitions[pid].fault
        if fault is None or fault.reachable():
            return pid
        n = len(self.partitions)
        if not keyless or n == 1:
            raise fault.error()
        for k in range(1, n):
            p = self.partitions[(pid + k) % n]
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
        logs = {pid: self.partitions[pid].log for pid in groups}
        if len(logs) == 1:  # one write: all or nothing by itself (a subscription's too)
            ((pid, log1),) = logs.items()
            return {pid: log1.append(groups[pid], now)}
        staged = []
        try:
            for pid, recs in groups.items():
                log = logs[pid]
                assert isinstance(log, PartitionLog)
                staged.append((log, log.stage(recs, now)))
        except StorageError:
            # daemon/README.md §0.4: a send that cannot be written fails whole, on every
            # partition of the batch.
            for log, batch in staged:
                log.unstage(batch)
            raise
        return {pid: log.commit(batch) for pid, (log, batch) in zip(groups, staged, strict=True)}

    def _check(self, m: Message, size: int) -> str | None:
        """Per-message rules (sbctl.core.send_rules, shared with the Spark loader); returns the
        partition key."""
        cfg = self.config
        return send_rules.check_message(
            m,
            size,
            requires_session=cfg.requires_session,
            duplicate_detection=cfg.requires_duplicate_detection,
        )

    # ------------------------------------------------------------ receiving

    def receive(self, count: int, now: int, *, delete: bool, subqueue: str) -> list[Delivered]:
        """daemon/README.md §0.1.6: ask every partition, starting with a different one each time."""
        self.check_receive(subqueue)
        out: list[Delivered] = []
        lock_ms = None if delete else self.config.lock_duration
        n = len(self.partitions)
        start = self._rr_receive
        self._rr_receive = (start + 1) % n
        faulty = self.faulty
        if faulty:
            self.check_reachable()
        for k in range(n):
            p = self.partitions[(start + k) % n]
            if faulty and p.fault is not None and not p.fault.reachable():
                continue  # daemon/README.md §0.1.6: the available partitions answer
            p.take(p.view(subqueue), count, now, lock_ms, out, self._expire)
            if len(out) >= count:
                break
        self.accessed_at_ms = now
        return out

    def peek(self, count: int, from_sequence: int | None, *, subqueue: str) -> list[Delivered]:
        """daemon/README.md §5, §0.1.7: in sequence-number order from ``from_sequence`` (the
        lowest held without one), walking on across partitions (the partition id is the top
        16 bits, so partition order is sequence-number order); a down partition other than
        the one ``from_sequence`` names is passed over."""
        if self.config.status in ("Disabled", "ReceiveDisabled"):
            raise MessagingEntityDisabled(
                f"{self.kind} {self.config.name!r} is {self.config.status}: peeks are refused"
            )
        pid, local = self._peek_start(from_sequence)
        named = pid if from_sequence is not None else -1
        faulty = self.faulty
        if faulty:
            self.check_reachable()
        out: list[Delivered] = []
        for p in self.partitions[pid:]:
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

    def _peek_start(self, from_sequence: int | None) -> tuple[int, int]:
        """(partition, local sequence number) a peek starts at."""
        if from_sequence is None:
            return 0, 0
        if not self.partitioned:
            return 0, from_sequence
        pid, local = from_sequence >> 48, from_sequence & LOCAL_MASK
        if pid >= len(self.partitions):
            raise BadRequest(f"sequence number {from_sequence} names no partition of this queue")
        return pid, local

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
        changes = self._settlement_changes(op, properties, reason, description)
        if self.faulty:
            self._reach_tokens(tokens)  # all or nothing: the client retries the request
        extra = msgspec.msgpack.encode(changes) if changes else b""
        results: list[SettleResult] = []
        journals: dict[int, list[Entry]] = {}
        released: list[tuple[Partition, int]] = []
        for token in tokens:
            try:
                p, seq = self._settleable(op, token, now)
            except (MessageLockLost, BadRequest, InvalidOperation, SessionLockLost) as exc:
                results.append(SettleFailed(lock_token=token, error=exc))
                continue
            if op == "renew-lock":
                # daemon/README.md §3.6: LockDuration more, counted from now.
                until = p.lock(seq, now + self.config.lock_duration, p.locks[seq][0])
                results.append(LockRenewed(lock_token=token, locked_until_ms=until))
                continue
            del p.locks[seq]
            if self.sessions is not None:
                self.sessions.disown((p.id, seq))
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
            self.partitions[pid].log.record(entries)
        for p, seq in released:
            self.release(p, seq)
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
        messages, _payloads = decode_batch(batch)
        partitions: set[int] = set()
        if self.partitioned:
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
            partitions = {partition_for_key(k, len(self.partitions)) for k in keys}
        tokens: set[str] = set()
        for op, token, props, reason, description in settlements:
            if op == "renew-lock":
                raise BadRequest("renew-lock cannot be part of a transaction")
            self._settlement_changes(op, props, reason, description)
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
        via = next(iter(partitions)) if self.partitioned and partitions else None
        seqs = self.send(batch, now, via_partition=via) if batch else []
        results = [
            self.settle(op, [token], now, props, reason, description)[0]
            for op, token, props, reason, description in settlements
        ]
        return Transacted(sequence_numbers=seqs, settlements=results)

    def _settlement_changes(
        self,
        op: str,
        properties: dict[str, Any] | None,
        reason: str | None,
        description: str | None,
    ) -> dict[str, Any]:
        """Check a settlement's arguments; returns the property changes it makes."""
        if op not in SETTLEMENTS:
            raise BadRequest(f"unknown settlement {op!r}: use {', '.join(SETTLEMENTS)}")
        if self.config.status in ("Disabled", "ReceiveDisabled"):
            # Settling is the receiver's side (daemon/README.md §17).
            raise MessagingEntityDisabled(
                f"{self.kind} {self.config.name!r} is {self.config.status}: settlements are refused"
            )
        # Property changes are kept as plain values (a short as an int...): the journal and
        # checkpoints store them as plain MessagePack (daemon/README.md §1.5).
        changes = {k: plain(v) for k, v in properties.items()} if properties else {}
        if changes and op not in ("abandon", "defer", "dead-letter"):
            raise BadRequest(f"{op} takes no property changes")
        if op == "dead-letter":
            if reason is not None:
                changes[DEAD_LETTER_REASON] = reason
            if description is not None:
                changes[DEAD_LETTER_DESCRIPTION] = description
        elif reason is not None or description is not None:
            raise BadRequest("only dead-letter takes a reason and a description")
        return changes

    def _settleable(self, op: str, token: str, now: int) -> tuple[Partition, int]:
        """The locked message ``token`` names, if ``op`` may settle it; raises otherwise."""
        p, seq = self._locked(token, now)
        if op in ("dead-letter", "defer") and p.log.state_of(seq) == State.DEADLETTERED:
            # daemon/README.md §4.3: a DLQ message cannot be dead-lettered again (nor deferred out
            # of it).
            raise InvalidOperation(
                "a dead-lettered message cannot be dead-lettered again"
                if op == "dead-letter"
                else "a dead-lettered message cannot be deferred"
            )
        return p, seq

    def _split(self, public: int) -> tuple[Partition, int]:
        pid, seq = (public >> 48, public & LOCAL_MASK) if self.partitioned else (0, public)
        if pid >= len(self.partitions) or seq <= 0:
            raise MessageNotFound(f"no message with sequence number {public} in {self.name!r}")
        return self.partitions[pid], seq

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
        session_id, until = self._deferred_receiver(session_token, now)
        found = []
        for public in sequence_numbers:
            p, seq = self._split(public)
            if p.fault is not None:
                p.fault.touch()
            if (
                p.log.state_of(seq) != State.DEFERRED
                or seq in p.locks
                or not self.in_session(p, seq, session_id)
            ):
                raise MessageNotFound(
                    f"no deferred message with sequence number {public} in {self.name!r}"
                )
            found.append((p, seq))
        out: list[Delivered] = []
        lock_ms = None if delete else self.config.lock_duration
        journals: dict[int, list[Entry]] = {}
        for p, seq in found:
            if p.log.exp[seq - p.log.base] <= now:
                self._expire(p, seq)
                continue
            got = p.deliver(seq, now, lock_ms, journals.setdefault(p.id, []), until)
            if got is not None:
                out.append(got)
        for pid, entries in journals.items():
            self.partitions[pid].record_delivered(entries)
        self._own_deferred(session_token, out, delete)
        self.accessed_at_ms = now
        return out

    def cancel_scheduled(self, sequence_numbers: Sequence[int]) -> int:
        """daemon/README.md §7.2: cancelling deletes a scheduled message. All or nothing."""
        if self.config.status in ("Disabled", "SendDisabled"):
            # Cancelling is a sender's operation (daemon/README.md §17).
            raise MessagingEntityDisabled(
                f"{self.kind} {self.config.name!r} is {self.config.status}: cancelling is refused"
            )
        found = []
        for public in sequence_numbers:
            p, seq = self._split(public)
            if p.fault is not None:
                p.fault.touch()
            if p.log.state_of(seq) != State.SCHEDULED:
                raise MessageNotFound(
                    f"no scheduled message with sequence number {public} in {self.name!r}"
                )
            found.append((p, seq))
        for p, seq in found:
            p.log.set_state(seq, State.GONE)
        return len(found)

    def waiting(self, state: State, count: int | None = None) -> list[tuple[Partition, int]]:
        """Unlocked messages in ``state``, partition by partition, oldest first."""
        out: list[tuple[Partition, int]] = []
        for p in self.partitions:
            if p.fault is not None and not p.fault.reachable():
                continue  # forwarding and resubmitting wait for the store
            for seq in p.log.seqs_in(state):
                if count is not None and len(out) >= count:
                    return out
                if seq not in p.locks:
                    out.append((p, seq))
        return out

    def resubmittable(self, p: Partition, seq: int) -> Message:
        """A dead-lettered message as it was sent, with later property changes kept and
        the dead-letter properties stripped."""
        message = decode_message(p.log.read_payload(seq))
        props = {**(message.application_properties or {}), **p.log.props.get(seq, {})}
        for name in (DEAD_LETTER_REASON, DEAD_LETTER_DESCRIPTION, DEAD_LETTER_SOURCE):
            props.pop(name, None)
        return msgspec.structs.replace(
            message,
            application_properties=props or None,
            enqueued_sequence_number=None,
            transfer_hops=None,
            dead_letter_source=None,
        )

    def purge(self, *, subqueue: str) -> int:
        """Delete every message of the queue (or of its DLQ), locked ones included."""
        states = (self.partitions[0].view(subqueue).state,) if subqueue else PURGEABLE
        self.reach_all()  # every message or none
        total = 0
        for p in self.partitions:
            seqs = sorted(seq for st in states for seq in p.log.seqs_in(st))
            for k in range(0, len(seqs), PURGE_CHUNK):
                chunk = seqs[k : k + PURGE_CHUNK]
                for seq in chunk:
                    p.locks.pop(seq, None)
                p.log.record(Entry(OP_STATE, seq, State.GONE, b"") for seq in chunk)
            total += len(seqs)
        return total

    def release(self, p: Partition, seq: int) -> None:
        """A lock ended without settlement (abandon, expiry): redeliver or dead-letter."""
        log = p.log
        if (
            log.state_of(seq) == State.ACTIVE
            and log.dc[seq - log.base] >= self.config.max_delivery_count
        ):
            # daemon/README.md §3.8
            log.set_state(
                seq,
                State.DEADLETTERED,
                {
                    DEAD_LETTER_REASON: "MaxDeliveryCountExceeded",
                    DEAD_LETTER_DESCRIPTION: "Message could not be consumed after "
                    f"{self.config.max_delivery_count} delivery attempts.",
                },
            )
        p.give_back(seq)

    def _locked(self, token: str, now: int) -> tuple[Partition, int]:
        public, nonce = parse_lock_token(token)
        pid, seq = (public >> 48, public & (2**48 - 1)) if self.partitioned else (0, public)
        if pid >= len(self.partitions):
            raise MessageLockLost(LOCK_LOST)
        p = self.partitions[pid]
        if p.fault is not None:
            p.fault.touch()
        session_id = p.session_of.get(seq)
        sessions = self.sessions
        if (
            session_id is not None
            and sessions is not None
            and not sessions.holds_message(session_id, (pid, seq), now)
        ):
            # daemon/README.md §9.7: a session's messages are held by its session lock.
            raise SessionLockLost(SESSION_LOCK_LOST)
        held = p.locks.get(seq)
        if held is None or held[0] != nonce or held[1] <= now:
            raise MessageLockLost(LOCK_LOST)
        return p, seq

    def expire_locks(self, now: int) -> bool:
        """Release every lock that ran out; True when something became available."""
        freed = False
        for p in self.partitions:
            if p.fault is not None and p.fault.down:
                continue  # its timers wait for the store (the broker revisits on clear)
            for seq in p.expired_locks(now):
                self.release(p, seq)  # daemon/README.md §3.5: delivery count already counts it
                freed = True
        return freed
