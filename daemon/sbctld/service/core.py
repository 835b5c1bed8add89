"""The service: the broker API every front-end calls (Unix socket, AMQP, HTTP), the only door.

A front-end decodes a request, calls :meth:`Service.run` with the name of an operation declared
in :mod:`sbctl.core.operations` and its arguments, and encodes what its reply gets. ``run``
makes the operation's domain call (its handler in :mod:`sbctld.service.operations`) and
applies what every protocol needs around it, here once:

- ``with service.request() as req:`` around the domain call counts the request, measures
  the slow-store delay it met (``req.delay_ms``, sbctld.faults: per request, not left on a
  shared object) and, after it, completes what the broker's writes touched (forwarding);
- :meth:`Service.acknowledge` answers once what it wrote is durable (group commit,
  :class:`~sbctld.service.commit.Committer`) when the declaration says so, and its delay
  has passed;
- :meth:`Service.written` / :meth:`Service.wake` complete the requests parked in the
  :class:`~sbctld.service.purgatory.Purgatory` on the entities the declaration says the
  operation wakes, whichever front-end parked them; :meth:`Service.gone` fails them when
  the entity is deleted;
- :meth:`Service.new_sender` numbers each client connection of any front-end: the sender a
  paired primary keeps a backlog queue for (sbctld.pairing);
- the ticker (lock expiry, scheduled messages, pairing) and the checkpointer run here.

A front-end request made of several operations (an HTTP PUT of a subscription with its
default rule, an AMQP transaction's commit) is one :meth:`Service.run_steps`: the steps run
in order in one request, and the answer is durable and wakes as their declarations say.

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
from pathlib import Path
from typing import Any

from sbctl.core import __version__, layout
from sbctl.core.errors import GeneralError, SbctlError
from sbctl.core.names import entity_key
from sbctl.core.operations import OPERATIONS, Operation
from sbctld.broker import Broker
from sbctld.pairing import SenderId
from sbctld.service.commit import Committer
from sbctld.service.keys import Keys
from sbctld.service.operations import LATER, Call, Operations, Provider, Reply, Request
from sbctld.service.process import ProcessStats
from sbctld.service.purgatory import DelayedOperation, Key, Purgatory, Timers
from sbctld.storage.sync import Syncer

log = logging.getLogger("sbctld")
TICK_SECONDS = 0.05
CHECKPOINT_SECONDS = 5.0
CHECKPOINT_MIN_CHANGES = 50_000
MIRROR_SYNC_SECONDS = 1.0  # how far a journal's mirror may lag the journal on disk

Callback = Callable[[SbctlError | None], None]
# Runs one declared operation inside run_steps: (name, arguments) -> its result.
Step = Callable[[str, Any], Any]


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
        # ... and where they add it: after the data dir (the socket), after the durability
        # (the Unix front-end's reply buffer)
        self.info_where: dict[str, Any] = {}
        self.info_settings: dict[str, Any] = {}
        self.providers: dict[str, Provider] = {}
        self.keys: Keys | None = None  # the namespaces' SAS keys (key_store)
        self._tasks: list[asyncio.Task[None]] = []
        self._senders = 0
        self.operations = Operations(self)
        # each operation's declaration and handler
        self._table = {name: (OPERATIONS[name], fn) for name, fn in self.operations.table().items()}

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
        for task in [*self._tasks, *self.operations.adoptions]:
            task.cancel()  # (nothing of a load is stored before its commit)
        self.purgatory.clear()
        await self.committer.drain()
        self.broker.housekeeping.close()
        self.committer.close()

    async def _ticker(self) -> None:
        mirrors_due = time.monotonic() + MIRROR_SYNC_SECONDS
        while not self.stopping.is_set():
            await asyncio.sleep(TICK_SECONDS)
            if time.monotonic() >= mirrors_due:  # the journals' mirrors (storage.sync)
                mirrors_due = time.monotonic() + MIRROR_SYNC_SECONDS
                self.syncer.take_lazy()
                self.committer.flush_soon()
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

    # ------------------------------------------------------------ the door

    def run(
        self,
        name: str,
        args: Any,
        reply: Reply,
        *,
        sender: SenderId | None = None,
        alive: Callable[[], bool] | None = None,
        parked: set[DelayedOperation] | None = None,
    ) -> None:
        """Run the declared operation ``name`` with its decoded ``args``: its domain call in
        one request, then ``reply(result)`` (once durable when the declaration says so,
        after the request's slow-store delay) and the wake-ups the declaration names; or
        ``reply(error)`` with the SbctlError it failed with, after the delay. A receive or a
        session accept that waits is parked and answered later, unless ``alive()`` says the
        asker is gone; ``parked``: the asker's set of parked requests (:meth:`cancel`).
        ``sender``: the asker's connection (:meth:`new_sender`). Any other exception is the
        caller's."""
        op, handler = self._table[name]
        call = Call(op, args, reply, sender, alive, parked)
        # (what request() does, inline: this is every front-end's hot path)
        self.requests += 1
        req = Request()
        faults = self.faults
        faults.delay_ms = 0
        try:
            result = handler(args, call)
        except SbctlError as err:
            self._ended(req)
            self.later(req, reply, err)
            return
        except BaseException:
            self._ended(req)
            raise
        self._ended(req)
        if result is not LATER:
            self.answer(call, req, result)

    def run_steps(
        self, steps: Callable[[Step], Any], reply: Reply, *, sender: SenderId | None = None
    ) -> None:
        """Run a front-end request made of several declared operations: ``steps(step)``
        calls ``step(name, args)`` for each, in order, in one request, and returns what
        ``reply`` gets. The reply is durable when any step was, and the wake-ups of every
        step that ran are applied, whether or not a later one failed (an SbctlError raised
        by ``steps``, which ``reply`` gets)."""
        durable = False
        wakes: list[Any] = []
        noop: Reply = _ignore

        def step(name: str, args: Any) -> Any:
            nonlocal durable
            op, handler = self._table[name]
            result = handler(args, Call(op, args, noop, sender))
            if result is LATER:
                raise GeneralError(f"{name} cannot wait inside another request")
            durable = durable or op.is_durable(args, result)
            wakes.extend(op.woken(args, result))
            return result

        req = None
        try:
            with self.request() as req:
                result = steps(step)
        except SbctlError as err:
            self._wake(wakes)
            if req is None:
                reply(err)
            else:
                self.later(req, reply, err)
            return

        def done(error: SbctlError | None) -> None:
            reply(result if error is None else error)

        self.acknowledge(req, done, durable=durable)
        self._wake(wakes)

    def answer(self, call: Call, req: Request, result: Any) -> None:
        """Reply ``result`` to ``call`` (once durable when its operation is, after the
        request's delay), then complete what waits on the entities it declares it wakes."""
        op: Operation = call.op
        durable = op.durable
        if callable(durable):
            durable = durable(call.args, result)
        if durable or req.delay_ms:
            call.result = result
            self.acknowledge(req, call.acknowledged, durable=durable)
        else:
            call.reply(result)
        if op.wakes is not None:
            self._wake(op.wakes(call.args, result))

    def _wake(self, wakes: Any) -> None:
        if not self.purgatory.watching():
            return  # nothing parked: no entity to look up (what forwarding touched: _ended's)
        namespaces: list[str] | None = None  # (most operations wake one entity)
        for namespace, entity in wakes:
            if entity is not None:
                self.written(namespace, entity)
            elif namespaces is None:
                namespaces = [entity_key(namespace)]
            else:
                namespaces.append(entity_key(namespace))
        if namespaces:
            for ns_key in dict.fromkeys(namespaces):
                self.wake_namespace(ns_key)

    def cancel(self, parked: set[DelayedOperation]) -> None:
        """The asker went away: drop its parked requests unanswered."""
        for op in list(parked):
            self.purgatory.cancel(op)
        parked.clear()

    # ------------------------------------------------------------ lookups

    def namespaces(self) -> list[str]:
        """The namespaces' names (what a front-end serves at start)."""
        return [ns.name for ns in self.broker.management.namespace_list()]

    def max_message_bytes(self, namespace: str) -> int:
        """The largest message ``namespace`` takes (raises when it does not exist)."""
        return self.broker.namespace(namespace).max_message_bytes

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
            self._ended(req)

    def _ended(self, req: Request) -> None:
        """After a request's domain call: the slow-store delay it met is its own; what
        forwarding filled (other entities) completes its waits."""
        req.delay_ms, self.faults.delay_ms = self.faults.delay_ms, 0
        if self.broker.touched:
            self.wake_touched()

    def acknowledge(self, req: Request, callback: Callback, *, durable: bool = True) -> None:
        """Run ``callback(error)`` once the request's writes are durable (``durable``) and
        its slow-store delay has passed; a failed sync is answered at once."""
        delay = req.delay_ms
        if not delay:  # (the hot path: no closure)
            if durable:
                self.committer.after_durable(callback)
            else:
                callback(None)
            return

        def done(error: SbctlError | None) -> None:
            if error is None:
                self._timers().call_later(delay / 1000, callback, None)
            else:
                callback(error)

        if durable:
            self.committer.after_durable(done)
        else:
            done(None)

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

    def status(self) -> dict[str, Any]:
        """What `sbctl daemon status` shows."""
        info: dict[str, Any] = {
            "version": __version__,
            "pid": os.getpid(),
            "data_dir": str(self.broker.data_dir),
            **self.info_where,
            "durability": "fsync" if self.syncer.durable else "os",
            **self.info_settings,
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


def _ignore(_result: Any) -> None:
    """The reply of a step: its result is the steps' own."""
