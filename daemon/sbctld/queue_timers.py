"""A queue's timers: message expiry, locks running out, scheduled messages coming due,
idleness.

One :class:`QueueTimers` per :class:`sbctld.queue.Queue`, held as ``timers`` over the
queue's :class:`~sbctld.queue_state.QueueState`; the queue's data plane calls
:meth:`QueueTimers.expire` and :meth:`QueueTimers.release` when it meets a message whose
time ran out or whose lock ended unsettled.

Rule 1: a scheduled message's copy is appended before the original is retired: a crash in
between can duplicate it, never lose it.
"""

from __future__ import annotations

from itertools import groupby

from sbctl.core.durations import MAX_TIMESPAN_MS
from sbctl.core.message_form import decode as decode_message
from sbctld.partition import Partition
from sbctld.queue_state import (
    DEAD_LETTER_DESCRIPTION,
    DEAD_LETTER_REASON,
    SCHEDULE_RETRY_MS,
    QueueState,
)
from sbctld.storage.journal import Entry
from sbctld.storage.log import OP_STATE, State
from sbctld.storage.space import StorageError


class QueueTimers:
    """Expiry, scheduling and idleness of a queue (see the module docstring)."""

    def __init__(self, state: QueueState) -> None:
        self.state = state

    def expire(self, p: Partition, seq: int) -> None:
        """daemon/README.md §6.2-6.3: drop, or dead-letter when the entity says so."""
        if self.state.config.dead_lettering_on_message_expiration:
            p.set_state(
                seq,
                State.DEADLETTERED,
                {
                    DEAD_LETTER_REASON: "TTLExpiredException",
                    DEAD_LETTER_DESCRIPTION: "The message expired and was dead lettered.",
                },
            )
        else:
            p.set_state(seq, State.GONE)
        p.give_back(seq)

    def release(self, p: Partition, seq: int) -> None:
        """A lock ended without settlement (abandon, expiry): redeliver or dead-letter."""
        max_count = self.state.config.max_delivery_count
        if p.state_of(seq) == State.ACTIVE and p.delivery_count(seq) >= max_count:
            # daemon/README.md §3.8
            p.set_state(
                seq,
                State.DEADLETTERED,
                {
                    DEAD_LETTER_REASON: "MaxDeliveryCountExceeded",
                    DEAD_LETTER_DESCRIPTION: "Message could not be consumed after "
                    f"{max_count} delivery attempts.",
                },
            )
        p.give_back(seq)

    def expire_locks(self, now: int) -> bool:
        """Release every lock that ran out; True when something became available."""
        freed = False
        for p in self.state.partitions:
            if p.fault is not None and p.fault.down:
                continue  # its timers wait for the store (the broker revisits on clear)
            for seq in p.expired_locks(now):
                self.release(p, seq)  # daemon/README.md §3.5: delivery count already counts it
                freed = True
        return freed

    def activate_scheduled(self, now: int, *, own_times: bool = False) -> bool:
        """Enqueue scheduled messages whose time came, with new sequence numbers (daemon/README.md
        §7, §2.4), enqueued ``now`` or, with ``own_times`` (an advance of the namespace's
        time, §31), each at its scheduled time (those due at one time in one batch). Rule 1:
        the copies are appended before the originals are retired."""
        woke = False
        for p in self.state.partitions:
            if p.fault is not None and p.fault.down:
                continue  # its timers wait for the store (the broker revisits on clear)
            due = p.due_scheduled_at(now)
            retired: list[int] = []
            for at, group in groupby(due, key=lambda item: item[0] if own_times else now):
                retired += self._activate(p, [seq for _when, seq in group], at, now)
            if retired:
                p.record(Entry(OP_STATE, seq, State.GONE, b"") for seq in retired)
                woke = True
        return woke

    def _activate(self, p: Partition, seqs: list[int], at: int, now: int) -> list[int]:
        """Append copies of the scheduled ``seqs``, enqueued at ``at``; returns those copied
        (a corrupt record is discarded; on a full disk they are tried again later)."""
        copied, records = [], []
        for seq in seqs:
            record = p.activation_record(seq)
            if record is not None:
                records.append(record)
                copied.append(seq)
        try:
            first = p.append(records, at) if records else 0
        except StorageError:  # a full disk: they activate once there is space
            for seq in copied:
                p.schedule(now + SCHEDULE_RETRY_MS, seq)
            return []
        if self.state.session_store is not None:
            for i, record in enumerate(records):
                session_id = decode_message(record.payload).session_id
                if session_id is not None:
                    p.index_session(first + i, session_id)
        return copied

    def expire_due(self, now: int) -> int:
        """The clean-up an advance of the namespace's time runs (daemon/README.md §31, §6.2):
        every unlocked active message whose expiry time passed is expired; returns how many."""
        done = 0
        for p in self.state.partitions:
            if p.fault is not None and p.fault.down:
                continue
            due = p.expired_unlocked(now)
            for seq in due:
                self.expire(p, seq)
            done += len(due)
        return done

    @property
    def scheduled_count(self) -> int:
        return sum(p.counts[State.SCHEDULED] for p in self.state.partitions)

    def idle(self, now: int) -> bool:
        """daemon/README.md §6.5: no send, receive, peek or update for auto_delete_on_idle; a
        queue with scheduled messages, or one that forwards, is never idle."""
        state = self.state
        cfg = state.config
        return (
            cfg.auto_delete_on_idle < MAX_TIMESPAN_MS
            and cfg.forward_to is None
            and not self.scheduled_pending
            and now - state.accessed_at_ms >= cfg.auto_delete_on_idle
        )

    @property
    def scheduled_pending(self) -> bool:
        # Every send asks: a loop, not any() over a generator (two frames fewer).
        for p in self.state.partitions:  # noqa: SIM110
            if p.next_scheduled() is not None:
                return True
        return False

    def next_scheduled(self) -> int | None:
        times = [t for p in self.state.partitions if (t := p.next_scheduled()) is not None]
        return min(times) if times else None
