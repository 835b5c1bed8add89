"""Time travel for tests (daemon/README.md §31): a namespace's time is the clock plus an
offset that only grows; an advance runs every timer of the namespace up to the new time.

Rule 1: the new offset is on disk before any timer runs: a crash in the middle restarts at
the new time, and the next ticks run what was left, at that time.
Rule 2: what the advance does is what the times in between would have done, in their
order. A scheduled message is enqueued at its own scheduled time (so its expiry and
sequence number follow from that time), in the order of those times; a lock that ran out is
released (counted, dead-lettered at the maximum delivery count). Neither depends on the
other, so each entity runs them once, up to the new time, instead of stepping through every
instant. Then the expiry clean-up (§6.2), forwarding, idle deletion and the pairings run at
the new time.
"""

from __future__ import annotations

import time

import msgspec

from sbctl.core import layout
from sbctl.core.durations import MAX_INSTANT_MS, format_duration_iso, format_instant
from sbctl.core.errors import BadRequest
from sbctld.broker.core import BrokerState
from sbctld.broker.namespace import Namespace
from sbctld.config import save_toml
from sbctld.queue import Queue
from sbctld.results import ClockInfo
from sbctld.topic import Topic


class TimeTravel:
    """A namespace's clock: show, advance, set (see the module docstring)."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state

    def clock_show(self, namespace: str) -> ClockInfo:
        """The namespace's time and how far it is ahead of the daemon's clock."""
        ns = self.state.namespace(namespace)
        return ClockInfo(namespace=ns.name, now_ms=self.state.time_of(ns), offset_ms=ns.offset_ms)

    def clock_advance(self, namespace: str, by_ms: int) -> ClockInfo:
        """Move the namespace's time forward by ``by_ms`` and run what became due."""
        ns = self.state.namespace(namespace)
        if by_ms <= 0:
            shown = format_duration_iso(by_ms) if by_ms == 0 else f"{by_ms} ms"
            raise BadRequest(
                f"the clock only moves forward: advance by a positive duration, not {shown}"
            )
        real = self.state.clock.now_ms()
        return self._travel(ns, real + ns.offset_ms + by_ms, real)

    def clock_set(self, namespace: str, at_ms: int) -> ClockInfo:
        """Move the namespace's time forward to ``at_ms`` (not before its time now)."""
        ns = self.state.namespace(namespace)
        real = self.state.clock.now_ms()
        now = real + ns.offset_ms
        if at_ms < now:
            raise BadRequest(
                f"{format_instant(at_ms)} is before the time of namespace {ns.name!r}, "
                f"{format_instant(now)}: the clock only moves forward"
            )
        return self._travel(ns, at_ms, real)

    def _travel(self, ns: Namespace, target: int, real: int) -> ClockInfo:
        """Rule 1, then Rule 2 (see the module docstring)."""
        if target > MAX_INSTANT_MS:
            raise BadRequest(f"the clock cannot go past {format_instant(MAX_INSTANT_MS)}")
        started = time.perf_counter()
        final = msgspec.structs.replace(ns.config, clock_offset_ms=target - real)
        save_toml(layout.namespace_file(ns.directory), final)  # Rule 1
        scheduled = sum(q.scheduled_count for q in ns.entities())
        ns.config, ns.offset_ms = final, target - real
        expired = 0
        for entity in ns.entities():
            self.state.run_timers(entity, target, own_times=True)  # Rule 2
            self._note_locks(entity)
            if not isinstance(entity, Topic):
                expired += entity.expire_due(target)
                self.state.flow(entity)  # what expiry dead-lettered may be forwarded
        deleted = self.state.delete_idle(ns, target)
        if self.state.paired:
            for key in self.state.pairings.tick(self.state.clock.now_ms()):
                self.state.wake(key)
        self.state.report(
            f"clock of {ns.name} advanced to {format_instant(target)} "
            f"({time.perf_counter() - started:.3f} s)"
        )
        return ClockInfo(
            namespace=ns.name,
            now_ms=self.state.time_of(ns),
            offset_ms=ns.offset_ms,
            activated=scheduled - sum(q.scheduled_count for q in ns.entities()),
            expired=expired,
            deleted_entities=deleted,
        )

    def _note_locks(self, queue: Queue) -> None:
        """Put the entity's next lock deadline on the timer heap (entries pushed before the
        advance come due later than they should: an offset only grows)."""
        times = [t for p in queue.partitions if (t := p.next_lock_deadline()) is not None]
        if times:
            self.state.due_at(min(times), *queue.key)
