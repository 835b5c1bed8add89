"""Parked requests, in the manner of Kafka's delayed-operation purgatory.

A request that cannot be answered yet (a long-poll receive, an AMQP link with credit and no
message, a next-available session accept, an HTTP receive with a time-out) is a
:class:`DelayedOperation` watched under the keys of what it waits on (an entity's
``(namespace key, entity key)``). Any write to that entity, whichever front-end made it,
calls :meth:`Purgatory.check_and_complete` for its key, which retries the operations
watching it, oldest first.

Rules kept here: an operation completes at most once (answered, expired, failed or
cancelled); completing it cancels its timer; a key's operations are retried in the order
they were parked, and one parked while its key is being checked waits for the next check;
time-outs run on the injected timer (the event loop in the daemon, a fake one in tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sbctl.core.errors import SbctlError

Key = tuple[str, str]


class Handle(Protocol):
    def cancel(self) -> None: ...


class Timers(Protocol):
    """What the purgatory and the service need of the event loop."""

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Handle: ...


class DelayedOperation:
    """A parked request. Subclasses say how to complete it."""

    kind = "operation"  # what status counts: "receive" for parked receives

    def __init__(self) -> None:
        self.completed = False
        self.keys: tuple[Key, ...] = ()
        self.handle: Handle | None = None

    def try_complete(self) -> bool:
        """Answer the request if it can be answered now: True once it is (or is moot)."""
        raise NotImplementedError

    def on_expire(self) -> None:
        """Time ran out: answer with what there is (nothing)."""

    def on_fail(self, error: SbctlError) -> None:
        """What it waits on went away (deleted): by default, try once more, then expire."""
        if not self.try_complete():
            self.on_expire()

    def alive(self) -> bool:
        """False when nobody waits for the answer any more (the client hung up)."""
        return True

    def on_cancel(self) -> None:
        """Dropped unanswered (its client went away): forget what refers to it."""


class Purgatory:
    def __init__(self, timers: Callable[[], Timers] | None = None) -> None:
        self._timers = timers or asyncio.get_running_loop
        self._watchers: dict[Key, list[DelayedOperation]] = {}

    # ------------------------------------------------------------ parking

    def try_complete_else_watch(
        self, op: DelayedOperation, keys: Iterable[Key], timeout_s: float | None = None
    ) -> bool:
        """Complete ``op`` now if it can; else watch it under ``keys`` until a check
        completes it or ``timeout_s`` passes (None: no time-out). True when completed now."""
        if op.try_complete():
            op.completed = True
            return True
        self.watch(op, keys, timeout_s)
        return False

    def watch(self, op: DelayedOperation, keys: Iterable[Key], timeout_s: float | None) -> None:
        """Park ``op`` without trying it first (its front-end just did)."""
        op.keys = tuple(keys)
        for key in op.keys:
            self._watchers.setdefault(key, []).append(op)
        if timeout_s is not None:
            op.handle = self._timers().call_later(timeout_s, self._expire, op)

    # ------------------------------------------------------------ completing

    def watching(self) -> bool:
        """Whether any operation is parked (else no check can complete anything)."""
        return bool(self._watchers)

    def check_and_complete(self, key: Key) -> int:
        """Retry the operations watching ``key``; the number completed."""
        ops = self._watchers.pop(key, None)
        if not ops:
            return 0
        kept: list[DelayedOperation] = []
        completed = 0
        for op in ops:
            if op.completed:
                continue
            if not op.alive():
                self.cancel(op)
            elif op.try_complete():
                self._finish(op)
                completed += 1
            else:
                kept.append(op)
        added = self._watchers.pop(key, [])  # parked while this check ran
        if kept or added:
            self._watchers[key] = kept + added
        return completed

    def fail(self, key: Key, error: SbctlError) -> None:
        """What ``key`` names went away: every operation watching it gets ``error``."""
        for op in self._watchers.pop(key, []):
            if not op.completed:
                self._finish(op)
                if op.alive():
                    op.on_fail(error)

    def cancel(self, op: DelayedOperation) -> None:
        """Forget ``op`` without answering it (its client went away)."""
        if not op.completed:
            self._finish(op)
            for key in op.keys:
                ops = self._watchers.get(key)
                if ops is not None and op in ops:
                    ops.remove(op)
                    if not ops:
                        del self._watchers[key]
            op.on_cancel()

    def _expire(self, op: DelayedOperation) -> None:
        if op.completed:
            return
        self.cancel(op)
        if op.alive():
            op.on_expire()

    def _finish(self, op: DelayedOperation) -> None:
        op.completed = True
        if op.handle is not None:
            op.handle.cancel()
            op.handle = None

    # ------------------------------------------------------------ looking

    def watched_keys(self) -> list[Key]:
        return list(self._watchers)

    def watched(self, kind: str | None = None) -> int:
        """How many operations are parked (of ``kind``)."""
        seen = {
            id(op)
            for ops in self._watchers.values()
            for op in ops
            if not op.completed and (kind is None or op.kind == kind)
        }
        return len(seen)

    def clear(self) -> None:
        """Stop: cancel every timer, answer nothing."""
        for ops in self._watchers.values():
            for op in ops:
                self._finish(op)
        self._watchers.clear()
