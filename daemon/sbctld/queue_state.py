"""What a queue's parts share: its attributes, and what it says about itself (counts,
description, availability) and about the messages it holds (which one a sequence number or a
lock token names, which wait in a state, what a settlement would change).

One :class:`QueueState` per :class:`sbctld.queue.Queue` (and so per topic and subscription),
held by the queue as ``state`` and shared with the parts it owns: its timers
(:mod:`sbctld.queue_timers`) and its sessions (:mod:`sbctld.queue_sessions`). The data-plane
rules live in :mod:`sbctld.queue`.

Rule 1: nothing here changes a message; with no injected faults (``faulty`` False) the
availability checks cost one attribute read.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    MessagingEntityDisabled,
    SbctlError,
    SessionLockLost,
)
from sbctl.core.locks import parse_lock_token, parse_lock_tokens
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import Message
from sbctl.core.typed import plain
from sbctld.config import QueueConfig
from sbctld.dedup import DuplicateHistory
from sbctld.faults import ENTITY_UNAVAILABLE, all_down
from sbctld.partition import Partition
from sbctld.results import QueueInfo, QueuePartition, Result, UnavailablePartition
from sbctld.sessions import SESSION_LOCK_LOST, Sessions
from sbctld.storage.log import (
    State,
)

R = TypeVar("R", bound=Result)
SESSION_RECEIVER_ON_PLAIN = (
    # daemon/README.md §9.5
    "A sessionful message receiver cannot be created on an entity that does not require sessions."
)
NON_SESSION_RECEIVER = (
    # daemon/README.md §9.5
    "It is not possible for an entity that requires sessions to create a non-sessionful "
    "message receiver."
)
NOT_SENDING = ("Disabled", "SendDisabled")  # daemon/README.md §17: statuses refusing a sender
NOT_RECEIVING = ("Disabled", "ReceiveDisabled")  # and a receiver
SETTLEMENTS = ("complete", "abandon", "defer", "dead-letter", "renew-lock")
DEAD_LETTER_REASON = "DeadLetterReason"  # application properties (daemon/README.md §1.9)
DEAD_LETTER_DESCRIPTION = "DeadLetterErrorDescription"
DEAD_LETTER_SOURCE = "DeadLetterSource"
LOCAL_MASK = (1 << 48) - 1
PURGEABLE = (State.ACTIVE, State.DEFERRED, State.SCHEDULED)
PURGE_CHUNK = 100_000
SCHEDULE_RETRY_MS = 1_000  # a scheduled message the disk could not take: tried again
DUPLICATE_OF_SEQ = -1  # in Queue.send's ``order``: (marker, the earlier sequence number)
DUPLICATE_IN_BATCH = -2  # (marker, index of the first copy in ``order``)
LOCK_LOST = (
    "The lock supplied is invalid. Either the lock expired, or the message has already been "
    "removed from the queue, or was received by a different receiver instance."
)


class QueueState:
    """A queue's attributes and its read-only views (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        config: QueueConfig,
        partitions: list[Partition],
        *,
        max_message_bytes: int,
        kind: str,
    ) -> None:
        self.directory = directory
        self.config = config
        self.partitions = partitions
        self.max_message_bytes = max_message_bytes
        self.kind = kind  # how errors name it: "queue", "topic" or "subscription"
        self.accessed_at_ms = config.updated_at_ms
        self.key = ("", "")  # (namespace key, queue key), set by the broker
        self.dedup: DuplicateHistory | None = None
        # Session-enabled: the session locks and states (sbctld.sessions); else None.
        self.session_store: Sessions | None = None
        # Some partition has an injected fault (sbctld.faults): the one check the data
        # plane makes while there are none.
        self.faulty = False
        self.rr_send = 0  # round-robin counters: where the next keyless send goes,
        self.rr_receive = 0  # and which partition the next receive asks first

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def partitioned(self) -> bool:
        return len(self.partitions) > 1

    def counts(self) -> dict[str, int]:
        c = [0] * len(State)
        size = 0
        for p in self.partitions:
            if p.fault is not None and not p.fault.reachable():
                continue  # daemon/README.md §0.1.10: the available partitions' counts
            counts = p.counts
            for st in State:
                c[st] += counts[st]
            size += p.live_bytes
        if self.session_store is not None:
            size += self.session_store.state_bytes  # daemon/README.md §9.8
        active = c[State.ACTIVE] + c[State.DEFERRED]  # daemon/README.md §0.4.1
        return {
            "active_message_count": active,
            "deferred_message_count": c[State.DEFERRED],
            "dead_letter_message_count": c[State.DEADLETTERED],
            "scheduled_message_count": c[State.SCHEDULED],
            "transfer_message_count": 0,
            "transfer_dead_letter_message_count": c[State.TRANSFER_DEADLETTERED],
            "total_message_count": active
            + c[State.DEADLETTERED]
            + c[State.SCHEDULED]
            + c[State.TRANSFER_DEADLETTERED],
            "size_in_bytes": size,
            # Records that failed their CRC check: never served (daemon/README.md §0.4).
            "corrupt_message_count": sum(p.corrupt_count for p in self.partitions),
        }

    def described(self, cls: type[R], **fields: Any) -> R:
        """A description (sbctld.results) of this entity: its settings and ``fields``,
        each kept when ``cls`` has it; durations and instants in milliseconds."""
        cfg = self.config
        every = {
            "name": cfg.name,
            "max_size_in_megabytes": cfg.max_size_in_megabytes,
            "max_message_size_in_kilobytes": self.max_message_bytes // 1024,
            "lock_duration_ms": cfg.lock_duration,
            "max_delivery_count": cfg.max_delivery_count,
            "default_message_time_to_live_ms": cfg.default_message_time_to_live,
            "requires_duplicate_detection": cfg.requires_duplicate_detection,
            "duplicate_detection_history_time_window_ms": (
                cfg.duplicate_detection_history_time_window
            ),
            "requires_session": cfg.requires_session,
            "enable_partitioning": self.partitioned,
            "forward_to": cfg.forward_to,
            "forward_dead_lettered_messages_to": cfg.forward_dead_lettered_messages_to,
            "dead_lettering_on_message_expiration": cfg.dead_lettering_on_message_expiration,
            "auto_delete_on_idle_ms": cfg.auto_delete_on_idle,
            "enable_batched_operations": cfg.enable_batched_operations,
            "enable_express": False,
            "status": cfg.status,
            "user_metadata": cfg.user_metadata,
            "created_at_ms": cfg.created_at_ms,
            "updated_at_ms": cfg.updated_at_ms,
            "accessed_at_ms": self.accessed_at_ms,
            "partition_count": len(self.partitions),
            "availability_status": self.availability_status,
        }
        wanted = cls.__struct_fields__
        return cls(**{k: v for k, v in (every | fields).items() if k in wanted})

    def describe(self, *, partitions: bool = True) -> QueueInfo:
        info = self.described(QueueInfo, **self.counts())
        if partitions:
            info.partitions = [
                self.partition_fault(p)
                or QueuePartition(
                    partition_id=p.id,
                    active_message_count=p.counts[State.ACTIVE] + p.counts[State.DEFERRED],
                    dead_letter_message_count=p.counts[State.DEADLETTERED],
                    size_in_bytes=p.live_bytes,
                    next_sequence_number=p.shift | p.next_seq,
                    **self.partition_slowness(p),
                )
                for p in self.partitions
            ]
        return info

    def check_reachable(self) -> None:
        """Raise ServiceCommunicationProblem when no partition is available."""
        if all(p.fault is not None and p.fault.down for p in self.partitions):
            raise all_down(self)

    def reach_all(self) -> None:
        """Touch every partition (daemon/README.md §0.1.10: management must succeed on each)."""
        if self.faulty:
            for p in self.partitions:
                if p.fault is not None:
                    p.fault.touch()

    def unavailable(self) -> list[int]:
        """The partitions whose store is unavailable."""
        if not self.faulty:
            return []
        return [p.id for p in self.partitions if p.fault is not None and p.fault.down]

    @property
    def availability_status(self) -> str:
        """daemon/README.md §0.1.10: Limited while some partition is unavailable (Azure's Unknown
        when none is available)."""
        down = len(self.unavailable())
        if not down:
            return "Available"
        return ENTITY_UNAVAILABLE if down == len(self.partitions) else "Limited"

    def partition_fault(self, p: Partition) -> UnavailablePartition | None:
        """A faulty partition's entry in :meth:`describe` (None when it is healthy): an
        unavailable one has no counts; a slow one says how slow."""
        fault = p.fault
        if fault is None or not fault.down:
            return None
        return UnavailablePartition(partition_id=p.id, faults=list(fault.fault_ids))

    @staticmethod
    def partition_slowness(p: Partition) -> dict[str, Any]:
        """The fields a slow partition's entry adds."""
        fault = p.fault
        if fault is None:
            return {}
        return {
            "availability_status": "Slow",
            "latency_ms": fault.latency_ms,
            "faults": list(fault.fault_ids),
        }

    def reach_tokens(self, tokens: Sequence[str]) -> None:
        """Touch the partitions of these lock tokens before settling any of them."""
        for token in tokens:
            try:
                public, _nonce = parse_lock_token(token)
            except BadRequest:
                continue  # reported with the token's result
            pid = public >> 48 if self.partitioned else 0
            if pid < len(self.partitions):
                p = self.partitions[pid]
                if p.fault is not None:
                    p.fault.touch()

    def refuse_if(self, statuses: tuple[str, ...], refused: str) -> None:
        """MessagingEntityDisabled, saying what is ``refused``, when the entity's status is
        one of ``statuses``."""
        cfg = self.config
        if cfg.status in statuses:
            raise MessagingEntityDisabled(f"{self.kind} {cfg.name!r} is {cfg.status}: {refused}")

    def check_receive(self, subqueue: str) -> None:
        """Whether a receiver of ``subqueue`` may receive here (the status, forwarding,
        sessions)."""
        self.refuse_if(NOT_RECEIVING, "receives are refused")
        cfg = self.config
        if cfg.forward_to is not None and not subqueue:
            # daemon/README.md §11.2
            raise InvalidOperation(
                f"cannot receive from {cfg.name!r}: it forwards every message to {cfg.forward_to!r}"
            )
        if cfg.forward_dead_lettered_messages_to is not None and subqueue == "deadletter":
            # daemon/README.md §4.7
            raise InvalidOperation(
                f"cannot receive from the dead-letter queue of {cfg.name!r}: it forwards "
                f"dead-lettered messages to {cfg.forward_dead_lettered_messages_to!r}"
            )
        if cfg.requires_session and not subqueue:
            raise InvalidOperation(NON_SESSION_RECEIVER)

    def peek_start(self, from_sequence: int | None) -> tuple[int, int]:
        """(partition, local sequence number) a peek starts at."""
        if from_sequence is None:
            return 0, 0
        if not self.partitioned:
            return 0, from_sequence
        pid, local = from_sequence >> 48, from_sequence & LOCAL_MASK
        if pid >= len(self.partitions):
            raise BadRequest(f"sequence number {from_sequence} names no partition of this queue")
        return pid, local

    def split(self, public: int) -> tuple[Partition, int]:
        """The partition and local sequence number a public sequence number names."""
        pid, seq = (public >> 48, public & LOCAL_MASK) if self.partitioned else (0, public)
        if pid >= len(self.partitions) or seq <= 0:
            raise MessageNotFound(f"no message with sequence number {public} in {self.name!r}")
        return self.partitions[pid], seq

    def locked(self, token: str, now: int) -> tuple[Partition, int]:
        """The message a lock token names, while the token holds its lock; raises otherwise."""
        found = self.locked_all((token,), now)[0]
        if isinstance(found, SbctlError):
            raise found
        return found

    def locked_all(
        self, tokens: Sequence[str], now: int
    ) -> list[tuple[Partition, int] | SbctlError]:
        """:meth:`locked` of each token, or the error it fails with (MessageLockLost,
        SessionLockLost, BadRequest for a token that is no GUID) in its place: one loop for
        a settle's batch. A fault of the store raises, for the whole batch."""
        partitions, sessions = self.partitions, self.session_store
        count = len(partitions)
        out: list[tuple[Partition, int] | SbctlError] = []
        for parsed in parse_lock_tokens(tokens):
            if isinstance(parsed, BadRequest):
                out.append(parsed)
                continue
            public, nonce = parsed
            pid, seq = (public >> 48, public & LOCAL_MASK) if count > 1 else (0, public)
            if pid >= count:
                out.append(MessageLockLost(LOCK_LOST))
                continue
            p = partitions[pid]
            if p.fault is not None:
                p.fault.touch()
            session_id = p.session_of.get(seq)
            if (
                session_id is not None
                and sessions is not None
                and not sessions.holds_message(session_id, (pid, seq), now)
            ):
                # daemon/README.md §9.7: a session's messages are held by its session lock.
                out.append(SessionLockLost(SESSION_LOCK_LOST))
                continue
            held = p.locks.get(seq)
            if held is None or held[0] != nonce or held[1] <= now:
                out.append(MessageLockLost(LOCK_LOST))
                continue
            out.append((p, seq))
        return out

    def waiting(self, state: State, count: int | None = None) -> list[tuple[Partition, int]]:
        """Unlocked messages in ``state``, partition by partition, oldest first."""
        out: list[tuple[Partition, int]] = []
        for p in self.partitions:
            if p.fault is not None and not p.fault.reachable():
                continue  # forwarding and resubmitting wait for the store
            for seq in p.seqs_in(state):
                if count is not None and len(out) >= count:
                    return out
                if seq not in p.locks:
                    out.append((p, seq))
        return out

    def resubmittable(self, p: Partition, seq: int) -> Message:
        """A dead-lettered message as it was sent, with later property changes kept and
        the dead-letter properties stripped."""
        message = decode_message(p.read_payload(seq))
        props = {**(message.application_properties or {}), **(p.props_of(seq) or {})}
        for name in (DEAD_LETTER_REASON, DEAD_LETTER_DESCRIPTION, DEAD_LETTER_SOURCE):
            props.pop(name, None)
        return msgspec.structs.replace(
            message,
            application_properties=props or None,
            enqueued_sequence_number=None,
            transfer_hops=None,
            dead_letter_source=None,
        )

    def settlement_changes(
        self,
        op: str,
        properties: dict[str, Any] | None,
        reason: str | None,
        description: str | None,
    ) -> dict[str, Any]:
        """Check a settlement's arguments; returns the property changes it makes."""
        if op not in SETTLEMENTS:
            raise BadRequest(f"unknown settlement {op!r}: use {', '.join(SETTLEMENTS)}")
        # Settling is the receiver's side (daemon/README.md §17).
        self.refuse_if(NOT_RECEIVING, "settlements are refused")
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
