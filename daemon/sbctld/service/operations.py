"""The operations every front-end runs: one handler per operation declared in
:mod:`sbctl.core.operations`, keyed by its name.

``op_<name>(args, call)`` makes the domain call(s) of the operation ``<name>`` with its decoded
arguments and returns the result; ``call`` is who asked (:class:`Call`: the sender a paired
primary keys its backlog on, whether the asker still waits, the reply). What every operation
needs around its handler (request counting, the slow-store delay, the durable answer, the
wake-ups the declaration names) is :meth:`sbctld.service.core.Service.run`'s, not the
handlers'. ``LATER``: the handler answers later itself (a parked receive or session accept,
a load, the AMQP endpoint), through :meth:`Door.answer` or ``call.reply``.

Rules kept here: a handler calls the broker through its public methods only and speaks no
protocol (results are the domain's typed results, or plain dicts and lists); every declared
operation has a handler and every handler a declaration (checked when the service starts).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import msgspec
from msgspec import UNSET

from sbctl.core import __version__
from sbctl.core.errors import BadRequest, GeneralError, InvalidOperation, SbctlError, ServiceTimeout
from sbctl.core.names import entity_key
from sbctl.core.operations import OPERATIONS, Operation
from sbctl.core.protocol import Receive, SessionAccept
from sbctld import loads
from sbctld.broker import Broker
from sbctld.overview import overview
from sbctld.pairing import SenderId
from sbctld.queue import Queue
from sbctld.service.keys import Keys
from sbctld.service.process import ProcessStats
from sbctld.service.purgatory import DelayedOperation, Key, Purgatory

log = logging.getLogger("sbctld")

# What a handler returns when it answers later itself.
LATER: Any = object()
# Gets an operation's result, or the SbctlError it failed with.
Reply = Callable[[Any], None]
# An operation a front-end serves for the others (e.g. "amqp_endpoint": the AMQP port of a
# namespace): called with the operation's arguments and a reply.
Provider = Callable[[Any, Reply], None]


def replying(ok: Callable[[Any], None], failed: Callable[[SbctlError], None]) -> Reply:
    """A front-end's reply: ``ok(result)`` encodes a result (and may raise an SbctlError),
    ``failed(error)`` encodes an error; any other exception of ``ok`` is logged and
    answered as an internal error (a reply may run after the group commit, where no caller
    would catch it)."""

    def reply(result: Any) -> None:
        try:
            if isinstance(result, SbctlError):
                raise result
            ok(result)
        except SbctlError as err:
            failed(err)
        except Exception as exc:
            log.error("answering failed:\n%s", traceback.format_exc())
            failed(GeneralError(f"internal error: {exc}"))

    return reply


class Call(msgspec.Struct):
    """One operation being run: its declaration and arguments, the reply, the sender (a
    paired primary's backlog key), whether the asker still waits, and the set the asker
    keeps its parked requests in (to cancel them when it goes away), if any. (A Struct: made
    for every request, in C.)"""

    op: Operation
    args: Any
    reply: Reply
    sender: SenderId | None = None
    alive: Callable[[], bool] | None = None  # None: always
    parked: set[DelayedOperation] | None = None
    result: Any = None  # what an answer that waits (durability, a delay) will reply

    def acknowledged(self, error: SbctlError | None) -> None:
        """The answer's wait is over: reply the result, or the error the sync met."""
        self.reply(self.result if error is None else error)


class Request:
    """One front-end request as the service sees it."""

    __slots__ = ("delay_ms",)

    def __init__(self) -> None:
        self.delay_ms = 0  # the latency of the slow stores it touched (sbctld.faults)


class Door(Protocol):
    """What the handlers need of the service (sbctld.service.core.Service)."""

    broker: Broker
    purgatory: Purgatory
    process: ProcessStats
    stopping: asyncio.Event
    keys: Keys | None
    providers: dict[str, Provider]

    def request(self, *, count: bool = True) -> AbstractContextManager[Request]: ...

    def answer(self, call: Call, req: Request, result: Any) -> None: ...

    def status(self) -> dict[str, Any]: ...

    def key(self, namespace: str, entity: str) -> Key: ...

    def gone(self, keys: list[Key], error: SbctlError) -> None: ...

    def namespace_gone(self, ns_key: str, error: SbctlError) -> None: ...


class Operations:
    """The handlers, over one service."""

    def __init__(self, service: Door) -> None:
        self.service = service
        self.broker = service.broker
        self.adoptions: set[asyncio.Task[None]] = set()  # loads being checked (sbctld.loads)
        self._load_locks: dict[tuple[Any, str], tuple[asyncio.Lock, int]] = {}  # (lock, users)

    def table(self) -> dict[str, Callable[[Any, Call], Any]]:
        """``op_<name>`` for every declared operation; a declared operation without a
        handler, or a handler without a declaration, is refused."""
        found = {name[3:] for name in dir(self) if name.startswith("op_")}
        if found != set(OPERATIONS):
            missing = ", ".join(sorted(set(OPERATIONS) - found)) or "none"
            undeclared = ", ".join(sorted(found - set(OPERATIONS))) or "none"
            raise RuntimeError(f"handlers without declaration: {undeclared}; missing: {missing}")
        return {name: getattr(self, f"op_{name}") for name in OPERATIONS}

    # ------------------------------------------------------------ the daemon

    def op_ping(self, a: Any, call: Call) -> Any:
        return {"version": __version__, "pid": os.getpid()}

    def op_status(self, a: Any, call: Call) -> Any:
        return self.service.status()

    def op_shutdown(self, a: Any, call: Call) -> Any:
        self.service.stopping.set()
        return {"stopping": True, "pid": os.getpid()}

    # ------------------------------------------------------------ namespaces

    def op_namespace_create(self, a: Any, call: Call) -> Any:
        return self.broker.management.namespace_create(
            a.name,
            a.sku,
            a.premium_messaging_partitions,
            a.capacity,
            a.credits_per_second,
            a.ops_per_unit,
        )

    def op_namespace_update(self, a: Any, call: Call) -> Any:
        return self.broker.management.namespace_update(
            a.name, a.credits_per_second, a.capacity, a.ops_per_unit
        )

    def op_namespace_credits(self, a: Any, call: Call) -> Any:
        return self.broker.management.namespace_credits(a.name)

    def op_overview(self, a: Any, call: Call) -> Any:
        return overview(self.broker, a.name)

    def op_namespace_metrics(self, a: Any, call: Call) -> Any:
        """Premium-style metrics (daemon/README.md §20.3): throttled and served requests, and the
        daemon's own CPU and memory (shared by every namespace it serves)."""
        credits = self.broker.management.namespace_credits(a.name)
        info: dict[str, Any] = {
            "namespace": credits.namespace,
            "sku": credits.sku,
            "capacity": None if credits.capacity is UNSET else credits.capacity,
            "throttled_requests": credits.throttled_requests,
            "requests_served": credits.requests_served,
            "cpu_percent": None,
            "rss_bytes": None,
        }
        stats = self.service.process.read()
        info.update({k: stats[k] for k in ("cpu_percent", "rss_bytes") if k in stats})
        return info

    def op_namespace_pair(self, a: Any, call: Call) -> Any:
        return self.broker.pairings.pair(
            a.name,
            a.secondary,
            a.backlog_queue_count,
            a.failover_interval_ms,
            a.ping_primary_interval_ms,
            a.enable_syphon,
        )

    def op_namespace_unpair(self, a: Any, call: Call) -> Any:
        return self.broker.pairings.unpair(a.name)

    def op_namespace_pair_status(self, a: Any, call: Call) -> Any:
        return self.broker.pairings.status(a.name)

    def op_namespace_get(self, a: Any, call: Call) -> Any:
        return self.broker.management.namespace_get(a.name)

    def op_namespace_list(self, a: Any, call: Call) -> Any:
        return self.broker.management.namespace_list()

    def op_namespace_delete(self, a: Any, call: Call) -> Any:
        result = self.broker.management.namespace_delete(a.name)
        if self.service.keys is not None:
            self.service.keys.drop(a.name)
        why = ServiceTimeout(f"namespace {a.name!r} was deleted")
        self.service.namespace_gone(entity_key(a.name), why)
        return result

    def op_namespace_set_key(self, a: Any, call: Call) -> Any:
        """`sbctl namespace set-key`: the store AMQP and HTTP check tokens against."""
        name = self.broker.namespace(a.name).name  # raises when it does not exist
        if self.service.keys is None:
            raise InvalidOperation("the daemon keeps no SAS keys")
        self.service.keys.set(name, a.key_name, a.key)
        return {"namespace": name, "key_name": a.key_name, "key": a.key}

    def op_amqp_endpoint(self, a: Any, call: Call) -> Any:
        """`sbctl namespace connection-string`: served by the AMQP front-end, when it runs,
        for the namespace's name as it was created."""
        provider = self.service.providers.get("amqp_endpoint")
        if provider is None:
            raise InvalidOperation("the daemon runs without AMQP (--no-amqp)")
        name = self.broker.namespace(a.name).name  # raises when it does not exist
        provider(type(a)(name), call.reply)
        return LATER

    # ------------------------------------------------------------ queues, topics, rules

    def op_queue_create(self, a: Any, call: Call) -> Any:
        return self.broker.management.queue_create(a.namespace, a.name, a.options)

    def op_queue_update(self, a: Any, call: Call) -> Any:
        return self.broker.management.queue_update(a.namespace, a.name, a.options)

    def op_queue_get(self, a: Any, call: Call) -> Any:
        return self.broker.management.queue_get(a.namespace, a.name)

    def op_queue_list(self, a: Any, call: Call) -> Any:
        return self.broker.management.queue_list(a.namespace)

    def op_queue_delete(self, a: Any, call: Call) -> Any:
        result = self.broker.management.queue_delete(a.namespace, a.name)
        key = (entity_key(a.namespace), entity_key(a.name))
        self.service.gone([key], ServiceTimeout(f"queue {a.name!r} was deleted"))
        return result

    def op_topic_create(self, a: Any, call: Call) -> Any:
        return self.broker.management.topic_create(a.namespace, a.name, a.options)

    def op_topic_update(self, a: Any, call: Call) -> Any:
        return self.broker.management.topic_update(a.namespace, a.name, a.options)

    def op_topic_get(self, a: Any, call: Call) -> Any:
        return self.broker.management.topic_get(a.namespace, a.name)

    def op_topic_list(self, a: Any, call: Call) -> Any:
        return self.broker.management.topic_list(a.namespace)

    def op_topic_delete(self, a: Any, call: Call) -> Any:
        keys = self.broker.management.subscription_keys(a.namespace, a.name)
        result = self.broker.management.topic_delete(a.namespace, a.name)
        self.service.gone(keys, ServiceTimeout(f"topic {a.name!r} was deleted"))
        return result

    def op_subscription_create(self, a: Any, call: Call) -> Any:
        return self.broker.management.subscription_create(a.namespace, a.topic, a.name, a.options)

    def op_subscription_update(self, a: Any, call: Call) -> Any:
        return self.broker.management.subscription_update(a.namespace, a.topic, a.name, a.options)

    def op_subscription_get(self, a: Any, call: Call) -> Any:
        return self.broker.management.subscription_get(a.namespace, a.topic, a.name)

    def op_subscription_list(self, a: Any, call: Call) -> Any:
        return self.broker.management.subscription_list(a.namespace, a.topic)

    def op_subscription_delete(self, a: Any, call: Call) -> Any:
        key = self.service.key(a.namespace, f"{a.topic}/subscriptions/{a.name}")
        result = self.broker.management.subscription_delete(a.namespace, a.topic, a.name)
        self.service.gone([key], ServiceTimeout(f"subscription {a.name!r} was deleted"))
        return result

    def op_rule_create(self, a: Any, call: Call) -> Any:
        return self.broker.management.rule_create(
            a.namespace, a.topic, a.subscription, a.name, a.filter, a.action, a.action_parameters
        )

    def op_rule_get(self, a: Any, call: Call) -> Any:
        return self.broker.management.rule_get(a.namespace, a.topic, a.subscription, a.name)

    def op_rule_list(self, a: Any, call: Call) -> Any:
        return self.broker.management.rule_list(a.namespace, a.topic, a.name)

    def op_rule_delete(self, a: Any, call: Call) -> Any:
        return self.broker.management.rule_delete(a.namespace, a.topic, a.subscription, a.name)

    # ------------------------------------------------------------ messages

    def op_send(self, a: Any, call: Call) -> Any:
        # The asker's connection is the sender a paired primary keeps a backlog queue for.
        seqs = self.broker.messaging.send(a.namespace, a.entity, a.messages, call.sender)
        if not a.report:
            return seqs
        # sbctl send: also say where a paired primary diverted the messages
        where = None
        if self.broker.paired and seqs and not any(seqs):
            where = self.broker.pairings.backlog_of(a.namespace, a.entity, call.sender)
        report = {"sequence_numbers": seqs, "diverted_to": where}
        if where is not None:
            pairing = self.broker.paired[entity_key(a.namespace)]
            report["diverted_namespace"] = pairing.secondary
        return report

    def op_peek(self, a: Any, call: Call) -> Any:
        return self.broker.messaging.peek(a.namespace, a.entity, a.count, a.from_sequence)

    def _receive(self, a: Receive) -> Any:
        got = self.broker.messaging.receive(
            a.namespace, a.entity, a.count, a.mode, a.session_lock_token
        )
        return got or None

    def op_receive(self, a: Any, call: Call) -> Any:
        got = self._receive(a)
        if got or a.max_wait_ms <= 0:
            return got or []
        # parked: answered by a later try, which has its own slow-store delay
        op = Parked(self.service, call, lambda: self._receive(a), list, kind="receive")
        self._park(op, call, a.namespace, a.entity, a.max_wait_ms)
        return LATER

    def op_settle(self, a: Any, call: Call) -> Any:
        return self.broker.messaging.settle(
            a.namespace, a.entity, a.op, a.lock_tokens, a.properties, a.reason, a.description
        )

    def op_transact(self, a: Any, call: Call) -> Any:
        settlements = [
            (s.op, s.lock_token, s.properties, s.reason, s.description) for s in a.settlements
        ]
        return self.broker.messaging.transact(a.namespace, a.entity, a.messages, settlements)

    def op_receive_deferred(self, a: Any, call: Call) -> Any:
        return self.broker.messaging.receive_deferred(
            a.namespace, a.entity, a.sequence_numbers, a.mode, a.session_lock_token
        )

    def op_delete_messages(self, a: Any, call: Call) -> Any:
        deleted = self.broker.messaging.delete_messages(
            a.namespace, a.entity, a.count, a.before_ms, a.session_id
        )
        return {"deleted": deleted}

    # ------------------------------------------------------------ sessions

    def _accept(self, a: SessionAccept) -> Any:
        try:
            return self.broker.messaging.session_accept(a.namespace, a.entity, a.session_id)
        except ServiceTimeout:
            return None  # no session free yet

    def op_session_accept(self, a: Any, call: Call) -> Any:
        if a.session_id is not None or a.max_wait_ms <= 0:
            return self.broker.messaging.session_accept(a.namespace, a.entity, a.session_id)
        got = self._accept(a)
        if got is not None:
            return got

        def last_try() -> Any:  # time is up: the lock, or why there is none
            return self.broker.messaging.session_accept(a.namespace, a.entity, None)

        op = Parked(self.service, call, lambda: self._accept(a), last_try, kind="session")
        self._park(op, call, a.namespace, a.entity, a.max_wait_ms)
        return LATER

    def op_session_renew(self, a: Any, call: Call) -> Any:
        return self.broker.messaging.session_renew(a.namespace, a.entity, a.session_lock_token)

    def op_session_close(self, a: Any, call: Call) -> Any:
        return self.broker.messaging.session_close(a.namespace, a.entity, a.session_lock_token)

    def op_session_list(self, a: Any, call: Call) -> Any:
        return self.broker.messaging.session_list(a.namespace, a.entity)

    def op_session_get_state(self, a: Any, call: Call) -> Any:
        state = self.broker.messaging.session_get_state(a.namespace, a.entity, a.session_id)
        return {"session_id": a.session_id, "state": state}

    def op_session_set_state(self, a: Any, call: Call) -> Any:
        self.broker.messaging.session_set_state(a.namespace, a.entity, a.session_id, a.state)
        return {"session_id": a.session_id, "set": a.state is not None}

    def _park(self, op: Parked, call: Call, namespace: str, entity: str, wait_ms: int) -> None:
        if call.parked is not None:
            call.parked.add(op)
        key = self.service.key(namespace, entity)
        self.service.purgatory.watch(op, [key], wait_ms / 1000)

    # ------------------------------------------------------------ maintenance

    def op_cancel_scheduled(self, a: Any, call: Call) -> Any:
        cancelled = self.broker.messaging.cancel_scheduled(
            a.namespace, a.entity, a.sequence_numbers
        )
        return {"cancelled": cancelled}

    def op_purge(self, a: Any, call: Call) -> Any:
        return {"purged": self.broker.messaging.purge(a.namespace, a.entity)}

    def op_dlq_resubmit(self, a: Any, call: Call) -> Any:
        return self.broker.messaging.dlq_resubmit(a.namespace, a.entity, a.count, a.to)

    def op_load_adopt(self, a: Any, call: Call) -> Any:
        """Check the staged files off the loop, then commit in one step (sbctld.loads)."""
        files = [(f.partition, f.path) for f in a.files]
        # refuse what is refused now
        self.broker.housekeeping.load_queue(a.namespace, a.entity, files)
        task = asyncio.get_running_loop().create_task(self._load_adopt(call, a, files))
        self.adoptions.add(task)
        task.add_done_callback(self.adoptions.discard)
        return LATER

    async def _load_adopt(self, call: Call, a: Any, files: list[tuple[int, str]]) -> None:
        try:
            queue = self.broker.housekeeping.load_queue(a.namespace, a.entity, files)
            with self._load_lock((queue.key, a.load_id)) as lock:
                async with lock:  # the same load sent twice: the second sees it committed
                    result, req = await self._adopt_locked(a, files, queue)
        except SbctlError as err:
            call.reply(err)
            return
        except Exception as exc:
            log.error("load %r failed:\n%s", a.load_id, traceback.format_exc())
            call.reply(GeneralError(f"internal error: {exc}"))
            return
        self.service.answer(call, req, result)

    def _load_lock(self, key: tuple[Any, str]) -> _Users:
        return _Users(self._load_locks, key)

    async def _adopt_locked(
        self, a: Any, files: list[tuple[int, str]], queue: Queue
    ) -> tuple[dict[str, Any], Request]:
        t0 = time.perf_counter()
        ns_key = queue.key[0]
        prepared = await loads.check(queue, a.load_id, files, lambda: self.broker.now_in(ns_key))
        t1 = time.perf_counter()
        # The commit runs in one step of the loop: its slow-store delay is this request's.
        with self.service.request(count=False) as req:
            if self.broker.housekeeping.load_queue(a.namespace, a.entity, files) is not queue:
                raise BadRequest(
                    f"load {a.load_id!r} refused, nothing adopted: {a.entity!r} was deleted "
                    f"or replaced while the load was being checked"
                )
            if isinstance(prepared, dict):
                return prepared, req  # this load id had already committed
            result = self.broker.housekeeping.load_adopted(
                queue, loads.commit(queue, a.load_id, prepared)
            )
        log.info(
            "load %r: %d messages checked in %.2f s, committed in %.3f s",
            a.load_id,
            result["messages"],
            t1 - t0,
            time.perf_counter() - t1,
        )
        return result, req

    def op_load_status(self, a: Any, call: Call) -> Any:
        return self.broker.housekeeping.load_status(a.namespace, a.entity, a.load_id)

    # ------------------------------------------------------------ faults and time travel

    def op_fault_add(self, a: Any, call: Call) -> Any:
        return self.broker.housekeeping.fault_add(
            a.namespace, a.entity, a.partitions, a.kind, a.latency_ms
        )

    def op_fault_list(self, a: Any, call: Call) -> Any:
        return self.broker.housekeeping.fault_list(a.namespace)

    def op_fault_clear(self, a: Any, call: Call) -> Any:
        return self.broker.housekeeping.fault_clear(a.namespace, a.ids, a.all_namespaces)

    def op_clock_show(self, a: Any, call: Call) -> Any:
        return self.broker.time_travel.clock_show(a.name)

    def op_clock_advance(self, a: Any, call: Call) -> Any:
        return self.broker.time_travel.clock_advance(a.namespace, a.by_ms)

    def op_clock_set(self, a: Any, call: Call) -> Any:
        return self.broker.time_travel.clock_set(a.namespace, a.at_ms)


class _Users:
    """The lock of one load id, shared by the requests adopting it, dropped with the last."""

    def __init__(self, locks: dict[tuple[Any, str], tuple[asyncio.Lock, int]], key: Any) -> None:
        self.locks = locks
        self.key = key

    def __enter__(self) -> asyncio.Lock:
        lock, users = self.locks.get(self.key) or (asyncio.Lock(), 0)
        self.locks[self.key] = (lock, users + 1)
        return lock

    def __exit__(self, *exc: object) -> None:
        lock, users = self.locks[self.key]
        if users > 1:
            self.locks[self.key] = (lock, users - 1)
        else:
            del self.locks[self.key]


class Parked(DelayedOperation):
    """A request waiting on an entity (daemon/README.md §8): a long-poll receive, or a
    next-available session accept. ``attempt()`` is the result, or None while there is
    nothing; ``expired()`` what time running out answers (or raises)."""

    def __init__(
        self,
        service: Door,
        call: Call,
        attempt: Callable[[], Any],
        expired: Callable[[], Any],
        *,
        kind: str,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.service = service
        self.call = call
        self.attempt = attempt
        self.expired = expired

    def alive(self) -> bool:
        return self.call.alive is None or self.call.alive()

    def try_complete(self) -> bool:
        return self._answer(self.attempt)

    def _answer(self, attempt: Callable[[], Any]) -> bool:
        try:
            with self.service.request(count=False) as req:
                result = attempt()
        except SbctlError as err:
            self._done()
            self.call.reply(err)
            return True
        if result is None:
            return False
        self._done()
        self.service.answer(self.call, req, result)
        return True

    def on_expire(self) -> None:
        self._answer(self.expired)

    def on_fail(self, error: SbctlError) -> None:
        if self.kind != "receive":  # a session accept answers what the entity answers now
            super().on_fail(error)
            return
        self._done()
        self.call.reply(error)

    def on_cancel(self) -> None:
        self._done()

    def _done(self) -> None:
        if self.call.parked is not None:
            self.call.parked.discard(self)
