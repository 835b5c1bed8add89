"""Time travel for tests (daemon/README.md §31): a namespace's time is the clock plus an
offset that only grows; an advance runs every timer of the namespace up to the new time.

Rule 1: the new offset is on disk before any timer runs: a crash in the middle restarts at
the new time, and the next ticks run what was left, at that time.
Rule 2: timers run in the order of their times: each step moves the namespace's time to the
next deadline of one entity (a scheduled message, a lock) and runs that entity's timers
there, so a message scheduled for +1 h is enqueued at +1 h and its locks and expiry follow
from there. Then, at the new time, every entity's timers, the expiry clean-up, idle deletion
and the pairings run once.
"""

from __future__ import annotations

import heapq
import time

import msgspec

from sbctl import layout
from sbctl.durations import MAX_INSTANT_MS, format_duration_iso, format_instant
from sbctl.errors import BadRequest
from sbctld.broker.core import BrokerCore
from sbctld.broker.namespace import Namespace
from sbctld.config import save_toml
from sbctld.queue import Queue
from sbctld.results import ClockInfo
from sbctld.topic import Topic

# Steps one advance takes at most; past them, what is left runs at the new time at once.
MAX_STEPS = 2_000_000


class TimeTravel(BrokerCore):
    def clock_show(self, namespace: str) -> ClockInfo:
        """The namespace's time and how far it is ahead of the daemon's clock."""
        ns = self.namespace(namespace)
        return ClockInfo(namespace=ns.name, now_ms=self._time(ns), offset_ms=ns.offset_ms)

    def clock_advance(self, namespace: str, by_ms: int) -> ClockInfo:
        """Move the namespace's time forward by ``by_ms`` and run what became due."""
        ns = self.namespace(namespace)
        if by_ms <= 0:
            shown = format_duration_iso(by_ms) if by_ms == 0 else f"{by_ms} ms"
            raise BadRequest(
                f"the clock only moves forward: advance by a positive duration, not {shown}"
            )
        return self._travel(ns, self._time(ns) + by_ms)

    def clock_set(self, namespace: str, at_ms: int) -> ClockInfo:
        """Move the namespace's time forward to ``at_ms`` (not before its time now)."""
        ns = self.namespace(namespace)
        now = self._time(ns)
        if at_ms < now:
            raise BadRequest(
                f"{_instant(at_ms)} is before the time of namespace {ns.name!r}, "
                f"{_instant(now)}: the clock only moves forward"
            )
        return self._travel(ns, at_ms)

    def _travel(self, ns: Namespace, target: int) -> ClockInfo:
        if target > MAX_INSTANT_MS:
            raise BadRequest(f"the clock cannot go past {_instant(MAX_INSTANT_MS)}")
        started = time.perf_counter()
        real = self.clock.now_ms()
        final = msgspec.structs.replace(ns.config, clock_offset_ms=target - real)
        save_toml(layout.namespace_file(ns.directory), final)  # Rule 1
        entities = ns.entities()
        scheduled = sum(q.scheduled_count for q in entities)
        steps = self._step_through(ns, entities, real, target)
        ns.config = final
        expired = 0
        for entity in ns.entities():
            self.run_timers(entity, target)
            self._note_locks(entity)
            if not isinstance(entity, Topic):
                expired += entity.expire_due(target)
                self.flow(entity)  # what expiry dead-lettered may be forwarded
        deleted = self._delete_idle(ns, target)
        if self.paired:
            for key in self.pairings.tick(self.clock.now_ms()):
                self.wake(key)
        self.report(
            f"clock of {ns.name} advanced to {_instant(target)} in {steps} steps "
            f"({time.perf_counter() - started:.3f} s)"
        )
        return ClockInfo(
            namespace=ns.name,
            now_ms=self._time(ns),
            offset_ms=ns.offset_ms,
            activated=scheduled - sum(q.scheduled_count for q in ns.entities()),
            expired=expired,
            deleted_entities=deleted,
        )

    def _step_through(self, ns: Namespace, entities: list[Queue], real: int, target: int) -> int:
        """Rule 2: run each entity's timers at their times up to ``target``; returns the
        number of steps."""
        heap = [(when, i, e) for i, e in enumerate(entities) if (when := e.next_deadline())]
        heapq.heapify(heap)
        steps = 0
        while heap and heap[0][0] <= target and steps < MAX_STEPS:
            when, i, entity = heapq.heappop(heap)
            due = entity.next_deadline()
            if due == when:
                ns.config.clock_offset_ms = max(ns.config.clock_offset_ms, when - real)
                self.run_timers(entity, when, note=False)
                steps += 1
                due = entity.next_deadline()
            if due is not None:
                heapq.heappush(heap, (due, i, entity))
        return steps

    def _note_locks(self, queue: Queue) -> None:
        """Put the entity's next lock deadline on the timer heap (entries pushed before the
        advance come due later than they should: an offset only grows)."""
        times = [t for p in queue.partitions if (t := p.next_lock_deadline()) is not None]
        if times:
            self._due_at(min(times), *queue.key)


def _instant(ms: int) -> str:
    return format_instant(ms)
