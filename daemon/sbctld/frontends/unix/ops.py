"""The Unix socket's operations: decoded arguments in, the result out.

Each ``op_<name>`` serves the operation ``<name>`` declared in :mod:`sbctl.core.operations`: it
calls the service and the broker through their public methods and returns the result. Whether
the answer waits for durability, and which entities it woke (their parked requests, on any
front-end, are completed after it), is the declaration's, applied by :meth:`answer`.
``LATER``: the handler answers later itself (a parked receive, a load, the AMQP endpoint).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import traceback
from typing import Any

from msgspec import UNSET

from sbctl.core import __version__
from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest, GeneralError, InvalidOperation, SbctlError, ServiceTimeout
from sbctl.core.names import entity_key
from sbctl.core.operations import OPERATIONS, Operation
from sbctl.core.protocol import Receive
from sbctld import loads
from sbctld.broker import Broker
from sbctld.frontends.unix.connection import Connection
from sbctld.queue import Queue
from sbctld.service import DelayedOperation, Request, Service

log = logging.getLogger("sbctld")


# What a handler returns when it answers later itself.
LATER: Any = object()


class Operations:
    """The handlers; :class:`sbctld.frontends.unix.server.UnixFrontend` dispatches to them."""

    service: Service
    broker: Broker
    socket_path: Any
    reply_buffer_bytes: int
    _adoptions: set[asyncio.Task[None]]
    _load_locks: dict[tuple[Any, str], tuple[asyncio.Lock, int]]

    def op_ping(self, conn: Connection, req_id: int, args: Any) -> Any:
        return {"version": __version__, "pid": os.getpid()}

    def op_status(self, conn: Connection, req_id: int, args: Any) -> Any:
        info = self.service.status({"socket": str(self.socket_path)})
        # the reply buffer is this front-end's setting: shown after the durability
        keys = list(info)
        at = keys.index("durability") + 1
        return (
            {k: info[k] for k in keys[:at]}
            | {"reply_buffer_bytes": self.reply_buffer_bytes}
            | {k: info[k] for k in keys[at:]}
        )

    def op_shutdown(self, conn: Connection, req_id: int, args: Any) -> Any:
        self.service.stopping.set()
        return {"stopping": True, "pid": os.getpid()}

    def op_namespace_create(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.namespace_create(
            a.name,
            a.sku,
            a.premium_messaging_partitions,
            a.capacity,
            a.credits_per_second,
            a.ops_per_unit,
        )
        return result

    def op_namespace_update(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.namespace_update(
            a.name, a.credits_per_second, a.capacity, a.ops_per_unit
        )
        return result

    def op_namespace_credits(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.namespace_credits(a.name)

    # --- overview (sbctl top; sbctld.overview) ---
    def op_overview(self, conn: Connection, req_id: int, a: Any) -> Any:
        from sbctld.overview import overview

        return overview(self.broker, a.name)

    # --- end overview ---
    def op_namespace_metrics(self, conn: Connection, req_id: int, a: Any) -> Any:
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

    def op_namespace_pair(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.pairings.pair(
            a.name,
            a.secondary,
            a.backlog_queue_count,
            a.failover_interval_ms,
            a.ping_primary_interval_ms,
            a.enable_syphon,
        )
        return result

    def op_namespace_unpair(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.pairings.unpair(a.name)

    def op_namespace_pair_status(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.pairings.status(a.name)

    def op_namespace_get(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.namespace_get(a.name)

    def op_namespace_list(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.namespace_list()

    def op_namespace_delete(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.namespace_delete(a.name)
        if self.service.keys is not None:
            self.service.keys.drop(a.name)
        why = ServiceTimeout(f"namespace {a.name!r} was deleted")
        self.service.namespace_gone(entity_key(a.name), why)
        return result

    def op_queue_create(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.queue_create(a.namespace, a.name, a.options)

    def op_queue_update(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.queue_update(a.namespace, a.name, a.options)

    def op_queue_get(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.queue_get(a.namespace, a.name)

    def op_queue_list(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.queue_list(a.namespace)

    def op_queue_delete(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.queue_delete(a.namespace, a.name)
        key = (entity_key(a.namespace), entity_key(a.name))
        self.service.gone([key], ServiceTimeout(f"queue {a.name!r} was deleted"))
        return result

    def op_topic_create(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.topic_create(a.namespace, a.name, a.options)

    def op_topic_update(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.topic_update(a.namespace, a.name, a.options)

    def op_topic_get(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.topic_get(a.namespace, a.name)

    def op_topic_list(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.topic_list(a.namespace)

    def op_topic_delete(self, conn: Connection, req_id: int, a: Any) -> Any:
        keys = self.broker.management.subscription_keys(a.namespace, a.name)
        result = self.broker.management.topic_delete(a.namespace, a.name)
        self.service.gone(keys, ServiceTimeout(f"topic {a.name!r} was deleted"))
        return result

    def op_subscription_create(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.subscription_create(a.namespace, a.topic, a.name, a.options)
        return result

    def op_subscription_update(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.subscription_update(a.namespace, a.topic, a.name, a.options)
        return result

    def op_subscription_get(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.subscription_get(a.namespace, a.topic, a.name)

    def op_subscription_list(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.subscription_list(a.namespace, a.topic)

    def op_subscription_delete(self, conn: Connection, req_id: int, a: Any) -> Any:
        key = self.service.key(a.namespace, f"{a.topic}/subscriptions/{a.name}")
        result = self.broker.management.subscription_delete(a.namespace, a.topic, a.name)
        self.service.gone([key], ServiceTimeout(f"subscription {a.name!r} was deleted"))
        return result

    def op_rule_create(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.rule_create(
            a.namespace, a.topic, a.subscription, a.name, a.filter, a.action
        )
        return result

    def op_rule_get(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.rule_get(a.namespace, a.topic, a.subscription, a.name)
        return result

    def op_rule_list(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.management.rule_list(a.namespace, a.topic, a.name)

    def op_rule_delete(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.management.rule_delete(a.namespace, a.topic, a.subscription, a.name)
        return result

    def op_send(self, conn: Connection, req_id: int, a: Any) -> Any:
        # The connection is the sender a paired primary keeps a backlog queue for.
        seqs = self.broker.messaging.send(a.namespace, a.entity, a.messages, conn.sender)
        if not a.report:
            return seqs
        # sbctl send: also say where a paired primary diverted the messages
        where = None
        if self.broker.paired and seqs and not any(seqs):
            where = self.broker.pairings.backlog_of(a.namespace, a.entity, conn.sender)
        report = {"sequence_numbers": seqs, "diverted_to": where}
        if where is not None:
            pairing = self.broker.paired[entity_key(a.namespace)]
            report["diverted_namespace"] = pairing.secondary
        return report

    def op_peek(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.messaging.peek(a.namespace, a.entity, a.count, a.from_sequence)

    def op_receive(self, conn: Connection, req_id: int, a: Any) -> Any:
        got = receive(self.broker, a)
        if got or a.max_wait_ms <= 0:
            return got
        # parked: answered by a later try, which has its own slow-store delay
        op = ParkedReceive(self.service, conn, req_id, a)
        conn.parked.add(op)
        key = self.service.key(a.namespace, a.entity)
        self.service.purgatory.watch(op, [key], a.max_wait_ms / 1000)
        return LATER

    def op_settle(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.messaging.settle(
            a.namespace, a.entity, a.op, a.lock_tokens, a.properties, a.reason, a.description
        )
        return result

    def op_session_accept(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.messaging.session_accept(a.namespace, a.entity, a.session_id)

    def op_session_renew(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.messaging.session_renew(a.namespace, a.entity, a.session_lock_token)
        return result

    def op_session_close(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.messaging.session_close(a.namespace, a.entity, a.session_lock_token)
        return result

    def op_session_list(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.messaging.session_list(a.namespace, a.entity)

    def op_session_get_state(self, conn: Connection, req_id: int, a: Any) -> Any:
        state = self.broker.messaging.session_get_state(a.namespace, a.entity, a.session_id)
        return {"session_id": a.session_id, "state": state}

    def op_session_set_state(self, conn: Connection, req_id: int, a: Any) -> Any:
        self.broker.messaging.session_set_state(a.namespace, a.entity, a.session_id, a.state)
        return {"session_id": a.session_id, "set": a.state is not None}

    def op_transact(self, conn: Connection, req_id: int, a: Any) -> Any:
        settlements = [
            (s.op, s.lock_token, s.properties, s.reason, s.description) for s in a.settlements
        ]
        result = self.broker.messaging.transact(a.namespace, a.entity, a.messages, settlements)
        return result

    def op_receive_deferred(self, conn: Connection, req_id: int, a: Any) -> Any:
        got = self.broker.messaging.receive_deferred(
            a.namespace, a.entity, a.sequence_numbers, a.mode, a.session_lock_token
        )
        return got

    def op_cancel_scheduled(self, conn: Connection, req_id: int, a: Any) -> Any:
        cancelled = self.broker.messaging.cancel_scheduled(
            a.namespace, a.entity, a.sequence_numbers
        )
        return {"cancelled": cancelled}

    def op_purge(self, conn: Connection, req_id: int, a: Any) -> Any:
        return {"purged": self.broker.messaging.purge(a.namespace, a.entity)}

    def op_dlq_resubmit(self, conn: Connection, req_id: int, a: Any) -> Any:
        result = self.broker.messaging.dlq_resubmit(a.namespace, a.entity, a.count, a.to)
        return result

    def op_load_adopt(self, conn: Connection, req_id: int, a: Any) -> Any:
        """Check the staged files off the loop, then commit in one step (sbctld.loads)."""
        files = [(f.partition, f.path) for f in a.files]
        # refuse what is refused now
        self.broker.housekeeping.load_queue(a.namespace, a.entity, files)
        task = asyncio.get_running_loop().create_task(self._load_adopt(conn, req_id, a, files))
        self._adoptions.add(task)
        task.add_done_callback(self._adoptions.discard)
        return LATER

    async def _load_adopt(
        self, conn: Connection, req_id: int, a: Any, files: list[tuple[int, str]]
    ) -> None:
        try:
            queue = self.broker.housekeeping.load_queue(a.namespace, a.entity, files)
            key = (queue.key, a.load_id)
            lock, users = self._load_locks.get(key) or (asyncio.Lock(), 0)
            self._load_locks[key] = (lock, users + 1)
            try:
                async with lock:  # the same load sent twice: the second sees it committed
                    result, req = await self._adopt_locked(a, files, queue)
            finally:
                lock, users = self._load_locks[key]
                if users > 1:
                    self._load_locks[key] = (lock, users - 1)
                else:
                    del self._load_locks[key]
        except SbctlError as err:
            conn.reply_error(req_id, err)
            return
        except Exception as exc:
            log.error("load %r failed:\n%s", a.load_id, traceback.format_exc())
            conn.reply_error(req_id, GeneralError(f"internal error: {exc}"))
            return
        self.answer(conn, req_id, req, OPERATIONS["load_adopt"], a, result)

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

    def op_load_status(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.housekeeping.load_status(a.namespace, a.entity, a.load_id)

    def op_fault_add(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.housekeeping.fault_add(
            a.namespace, a.entity, a.partitions, a.kind, a.latency_ms
        )

    def op_fault_list(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.housekeeping.fault_list(a.namespace)

    def op_fault_clear(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.housekeeping.fault_clear(a.namespace, a.ids, a.all_namespaces)

    def op_clock_show(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.time_travel.clock_show(a.name)

    def op_clock_advance(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.time_travel.clock_advance(a.namespace, a.by_ms)

    def op_clock_set(self, conn: Connection, req_id: int, a: Any) -> Any:
        return self.broker.time_travel.clock_set(a.namespace, a.at_ms)

    def op_namespace_set_key(self, conn: Connection, req_id: int, a: Any) -> Any:
        """`sbctl namespace set-key`: the store AMQP and HTTP check tokens against."""
        name = self.broker.namespace(a.name).name  # raises when it does not exist
        if self.service.keys is None:
            raise InvalidOperation("the daemon keeps no SAS keys")
        self.service.keys.set(name, a.key_name, a.key)
        return {"namespace": name, "key_name": a.key_name, "key": a.key}

    def op_amqp_endpoint(self, conn: Connection, req_id: int, a: Any) -> Any:
        """`sbctl namespace connection-string`: served by the AMQP front-end, when it runs."""
        provider = self.service.providers.get("amqp_endpoint")
        if provider is None:
            raise InvalidOperation("the daemon runs without AMQP (--no-amqp)")

        def reply(result: Any) -> None:
            if isinstance(result, SbctlError):
                conn.reply_error(req_id, result)
            else:
                conn.reply(req_id, result)

        provider(a, reply)
        return LATER

    def answer(
        self, conn: Connection, req_id: int, req: Request, op: Operation, args: Any, result: Any
    ) -> None:
        """Send ``result`` (once durable when ``op`` is, after the request's delay), then
        complete what waits on the entities ``op`` declares it wakes."""

        def done(error: SbctlError | None) -> None:
            if error is not None:
                conn.reply_error(req_id, error)
            else:
                conn.reply(req_id, result)

        self.service.acknowledge(req, done, durable=op.is_durable(args))
        wakes = op.woken(args, result)
        if not wakes:
            return
        for namespace, entity in wakes:
            if entity is not None:
                self.service.written(namespace, entity)
        for ns_key in dict.fromkeys(entity_key(ns) for ns, entity in wakes if entity is None):
            self.service.wake_namespace(ns_key)


def receive(broker: Broker, a: Receive) -> list[Delivered]:
    return broker.messaging.receive(a.namespace, a.entity, a.count, a.mode, a.session_lock_token)


class ParkedReceive(DelayedOperation):
    """A long-poll receive waiting for a message (daemon/README.md §8)."""

    kind = "receive"

    def __init__(self, service: Service, conn: Connection, req_id: int, args: Receive) -> None:
        super().__init__()
        self.service = service
        self.conn = conn
        self.req_id = req_id
        self.args = args

    def alive(self) -> bool:
        return not self.conn.closed

    def try_complete(self) -> bool:
        try:
            with self.service.request(count=False) as req:
                got = receive(self.service.broker, self.args)
        except SbctlError as err:
            self._done()
            self.conn.reply_error(self.req_id, err)
            return True
        if not got:
            return False
        self._done()
        conn, req_id = self.conn, self.req_id

        def done(error: SbctlError | None) -> None:
            if error is not None:
                conn.reply_error(req_id, error)
            else:
                conn.reply(req_id, got)

        self.service.acknowledge(req, done, durable=OPERATIONS["receive"].is_durable(self.args))
        return True

    def on_expire(self) -> None:
        self._done()
        self.conn.reply(self.req_id, [])

    def on_fail(self, error: SbctlError) -> None:
        self._done()
        self.conn.reply_error(self.req_id, error)

    def on_cancel(self) -> None:
        self._done()

    def _done(self) -> None:
        self.conn.parked.discard(self)
