"""The service: the broker API every front-end calls (Unix socket, AMQP, HTTP).

An operation is the domain call plus what every protocol needs around it, here once:

- ``with service.request() as req:`` around the domain call counts the request, measures
  the slow-store delay it met (``req.delay_ms``, sbctld.faults: per request, not left on a
  shared object) and, after it, completes what the broker's writes touched (forwarding);
- :meth:`Service.acknowledge` answers once what it wrote is durable (group commit,
  :class:`~sbctld.service.commit.Committer`) and its delay has passed;
- :meth:`Service.written` / :meth:`Service.wake` complete the requests parked in the
  :class:`~sbctld.service.purgatory.Purgatory` on the entity written, whichever front-end
  parked them; :meth:`Service.gone` fails them when the entity is deleted;
- :meth:`Service.new_sender` numbers each client connection of any front-end: the sender a
  paired primary keeps a backlog queue for (sbctld.pairing);
- the ticker (lock expiry, scheduled messages, pairing) and the checkpointer run here.

Rules kept here: the service imports no front-end; it calls the broker through its public
methods only; one event loop owns all state, so nothing takes a lock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbctl.core import __version__, layout
from sbctl.core.errors import SbctlError
from sbctld.broker import Broker
from sbctld.pairing import SenderId
from sbctld.service.commit import Committer
from sbctld.service.keys import Keys
from sbctld.service.process import ProcessStats
from sbctld.service.purgatory import DelayedOperation, Key, Purgatory, Timers
from sbctld.storage.sync import Syncer

log = logging.getLogger("sbctld")
TICK_SECONDS = 0.05
CHECKPOINT_SECONDS = 5.0
CHECKPOINT_MIN_CHANGES = 50_000

Callback = Callable[[SbctlError | None], None]
# An operation a front-end serves for the others (e.g. "amqp_endpoint": the AMQP port of a
# namespace): called with the request's arguments and a reply taking a result or an error.
Provider = Callable[[Any, Callable[[Any], None]], None]


@dataclass(frozen=True)
class OperationCall:
    """An operation of :mod:`sbctl.core.operations` one front-end asks another to run for it
    (the explorer page asks the Unix front-end: provider ``"operation"``): the decoded
    arguments, the sender (a paired primary's backlog key) and whether the asker still waits."""

    name: str
    args: Any
    sender: SenderId
    alive: Callable[[], bool]


class Request:
    """One front-end request as the service sees it."""

    __slots__ = ("delay_ms",)

    def __init__(self) -> None:
        self.delay_ms = 0  # the latency of the slow stores it touched (sbctld.faults)


class Service:
    def __init__(
        self, broker: Broker, syncer: Syncer, *, timers: Callable[[], Timers] | None = None
    ) -> None:
        self.broker = broker
        self.syncer = syncer
        self.faults = broker.faults
        self.committer = Committer(syncer)
        self._timers = timers or asyncio.get_running_loop
        self.purgatory = Purgatory(self._timers)
        self.started = time.time()
        self.stopping = asyncio.Event()
        self.requests = 0
        self.process = ProcessStats()
        self.info: dict[str, Any] = {}  # what front-ends add to `status` (ports)
        self.providers: dict[str, Provider] = {}
        self.keys: Keys | None = None  # the namespaces' SAS keys (key_store)
        self._tasks: list[asyncio.Task[None]] = []
        self._senders = 0

    def key_store(self, data_dir: Path) -> Keys:
        """The namespaces' SAS keys (sbctld.service.keys): one store for every front-end,
        so that a key set at runtime is the one AMQP and HTTP check."""
        if self.keys is None:
            self.keys = Keys(layout.amqp_keys_file(data_dir))
        return self.keys

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the ticker and the checkpointer (needs the running loop)."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._ticker()), loop.create_task(self._checkpointer())]

    async def stop(self) -> None:
        """After the front-ends stopped: finish the commits, checkpoint, close the stores."""
        for task in self._tasks:
            task.cancel()
        self.purgatory.clear()
        await self.committer.drain()
        self.broker.housekeeping.close()
        self.committer.close()

    async def _ticker(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(TICK_SECONDS)
            try:
                for key in self.broker.housekeeping.tick() + list(self.broker.take_touched()):
                    self.wake(key)
            except Exception:
                log.error("tick failed:\n%s", traceback.format_exc())

    async def _checkpointer(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(CHECKPOINT_SECONDS)
            try:
                self.broker.housekeeping.checkpoint(min_changes=CHECKPOINT_MIN_CHANGES)
            except Exception:
                log.error("checkpoint failed:\n%s", traceback.format_exc())

    # ------------------------------------------------------------ requests

    @contextmanager
    def request(self, *, count: bool = True) -> Iterator[Request]:
        """Around one domain call: see the module docstring. ``count=False`` for a retry of
        a parked request (it was counted when it came in)."""
        if count:
            self.requests += 1
        req = Request()
        self.faults.delay_ms = 0
        try:
            yield req
        finally:
            req.delay_ms, self.faults.delay_ms = self.faults.delay_ms, 0
            if self.broker.touched:  # forwarding filled other entities: complete their waits
                self.wake_touched()

    def acknowledge(self, req: Request, callback: Callback, *, durable: bool = True) -> None:
        """Run ``callback(error)`` once the request's writes are durable (``durable``) and
        its slow-store delay has passed; a failed sync is answered at once."""
        delay = req.delay_ms

        def done(error: SbctlError | None) -> None:
            if delay and error is None:
                self._timers().call_later(delay / 1000, callback, None)
            else:
                callback(error)

        if durable:
            self.committer.after_durable(done)
        else:
            done(None)

    def after_durable(self, callback: Callback) -> None:
        """Run ``callback(error)`` once every write made so far is durable (no delay)."""
        self.committer.after_durable(callback)

    def later(self, req: Request, fn: Callable[..., None], *args: Any) -> None:
        """Call ``fn(*args)`` after the request's slow-store delay (at once without one)."""
        if req.delay_ms:
            self._timers().call_later(req.delay_ms / 1000, fn, *args)
        else:
            fn(*args)

    # ------------------------------------------------------------ parked requests

    def new_sender(self) -> SenderId:
        """The identity of a new client connection, whichever front-end took it: what a
        paired primary keys its per-sender backlog queue on. Never reused while the daemon
        runs (a connection object's ``id()`` is, once it is collected)."""
        self._senders += 1
        return SenderId(self._senders)

    def park(
        self, op: DelayedOperation, namespace: str, entity: str, timeout_s: float | None
    ) -> bool:
        """Complete ``op`` now, or park it on the entity until a write there, a time-out
        or a delete. True when completed now."""
        return self.purgatory.try_complete_else_watch(op, [self.key(namespace, entity)], timeout_s)

    def key(self, namespace: str, entity: str) -> Key:
        """The key parked requests on an entity wait under (raises when it does not exist)."""
        return self.broker.resolve(namespace, entity)[0].key

    def written(self, namespace: str, entity: str) -> None:
        """After a write to an entity: complete the requests waiting on it."""
        try:
            key = self.key(namespace, entity)
        except SbctlError:
            key = None
        if key is not None:
            self.wake(key)
        self.wake_touched()

    def wake(self, key: Key) -> None:
        self.purgatory.check_and_complete(key)

    def wake_touched(self) -> None:
        for key in self.broker.take_touched():
            self.wake(key)

    def wake_namespace(self, ns_key: str) -> None:
        for key in self.purgatory.watched_keys():
            if key[0] == ns_key:
                self.wake(key)

    def gone(self, keys: list[Key], error: SbctlError) -> None:
        """Entities were deleted: fail what waits on them."""
        for key in keys:
            self.purgatory.fail(key, error)

    def namespace_gone(self, ns_key: str, error: SbctlError) -> None:
        self.gone([k for k in self.purgatory.watched_keys() if k[0] == ns_key], error)

    # ------------------------------------------------------------ status

    def status(self, front: dict[str, Any] | None = None) -> dict[str, Any]:
        """What `sbctl daemon status` shows; ``front``: the asking front-end's own lines."""
        info: dict[str, Any] = {
            "version": __version__,
            "pid": os.getpid(),
            "data_dir": str(self.broker.data_dir),
            **(front or {}),
            "durability": "fsync" if self.syncer.durable else "os",
            "uptime_s": round(time.time() - self.started, 3),
            "requests": self.requests,
            "commit_rounds": self.committer.rounds,
            # receives waiting for a message (tests poll this instead of sleeping)
            "parked_receives": self.purgatory.watched("receive"),
            **self.broker.housekeeping.stats(),
            **self.info,
        }
        info.update(self.process.read())
        return info
