"""A queue's timers: message expiry, scheduled messages coming due, idleness.

The second layer of :class:`sbctld.queue.Queue` (over :class:`sbctld.queue_state.QueueState`).

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
from sbctld.storage.log import (
    OP_STATE,
    State,
)
from sbctld.storage.space import StorageError


class QueueTimers(QueueState):
    """Expiry, scheduling and idleness of a queue (see the module docstring)."""

    def _expire(self, p: Partition, seq: int) -> None:
        """daemon/README.md §6.2-6.3: drop, or dead-letter when the entity says so."""
        if self.config.dead_lettering_on_message_expiration:
            p.log.set_state(
                seq,
                State.DEADLETTERED,
                {
                    DEAD_LETTER_REASON: "TTLExpiredException",
                    DEAD_LETTER_DESCRIPTION: "The message expired and was dead lettered.",
                },
            )
        else:
            p.log.set_state(seq, State.GONE)
        p.give_back(seq)

    def activate_scheduled(self, now: int, *, own_times: bool = False) -> bool:
        """Enqueue scheduled messages whose time came, with new sequence numbers (daemon/README.md
        §7, §2.4), enqueued ``now`` or, with ``own_times`` (an advance of the namespace's
        time, §31), each at its scheduled time (those due at one time in one batch). Rule 1:
        the copies are appended before the originals are retired."""
        woke = False
        for p in self.partitions:
            if p.fault is not None and p.fault.down:
                continue  # its timers wait for the store (the broker revisits on clear)
            due = p.due_scheduled_at(now)
            retired: list[int] = []
            for at, group in groupby(due, key=lambda item: item[0] if own_times else now):
                retired += self._activate(p, [seq for _when, seq in group], at, now)
            if retired:
                p.log.record(Entry(OP_STATE, seq, State.GONE, b"") for seq in retired)
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
            first = p.log.append(records, at) if records else 0
        except StorageError:  # a full disk: they activate once there is space
            for seq in copied:
                p.schedule(now + SCHEDULE_RETRY_MS, seq)
            return []
        if self.sessions:
            for i, record in enumerate(records):
                session_id = decode_message(record.payload).session_id
                if session_id is not None:
                    p.index_session(first + i, session_id)
        return copied

    def expire_due(self, now: int) -> int:
        """The clean-up an advance of the namespace's time runs (daemon/README.md §31, §6.2):
        every unlocked active message whose expiry time passed is expired; returns how many."""
        done = 0
        for p in self.partitions:
            if p.fault is not None and p.fault.down:
                continue
            log, locks = p.log, p.locks
            exp, base = log.exp, log.base
            due = [s for s in log.seqs_in(State.ACTIVE) if exp[s - base] <= now and s not in locks]
            for seq in due:
                self._expire(p, seq)
            done += len(due)
        return done

    def next_deadline(self) -> int | None:
        """When a timer of this entity is next due (a scheduled message, a lock running out),
        over the stores that are up."""
        times = [
            t
            for p in self.partitions
            if p.fault is None or not p.fault.down
            for t in (p.next_scheduled(), p.next_lock_deadline())
            if t is not None
        ]
        return min(times) if times else None

    @property
    def scheduled_count(self) -> int:
        return sum(p.log.counts[State.SCHEDULED] for p in self.partitions)

    def idle(self, now: int) -> bool:
        """daemon/README.md §6.5: no send, receive, peek or update for auto_delete_on_idle; a queue
        with
        scheduled messages, or one that forwards, is never idle."""
        cfg = self.config
        return (
            cfg.auto_delete_on_idle < MAX_TIMESPAN_MS
            and cfg.forward_to is None
            and not self.scheduled_pending
            and now - self.accessed_at_ms >= cfg.auto_delete_on_idle
        )

    @property
    def scheduled_pending(self) -> bool:
        return any(p.next_scheduled() is not None for p in self.partitions)

    def next_scheduled(self) -> int | None:
        times = [t for p in self.partitions if (t := p.next_scheduled()) is not None]
        return min(times) if times else None
