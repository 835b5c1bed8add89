"""The imperative shell: Unix socket, request dispatch, group commit, timers.

One event loop owns all broker state, so nothing here takes a lock. Requests on one
connection may be pipelined; each is decoded, handed to the broker synchronously, and its
reply written once what it wrote is durable (:class:`Committer`). A long-poll receive
parks a :class:`Waiter` that a later send, abandon or lock expiry wakes.

A request that touched a store with an injected ``slow`` fault (sbctld.faults) is answered
that much later, with a timer: the loop never blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from sbctl import __version__
from sbctl.errors import BadRequest, GeneralError, SbctlError, ServiceTimeout
from sbctl.names import entity_key
from sbctl.protocol import (
    LENGTH,
    MAX_REQUEST_BYTES,
    Delivered,
    Receive,
    decode_args,
    decode_envelope,
    encode_reply,
)
from sbctld import loads
from sbctld.broker import Broker
from sbctld.queue import Queue
from sbctld.storage.sync import Syncer, sync_fds

log = logging.getLogger("sbctld")
TICK_SECONDS = 0.05
CHECKPOINT_SECONDS = 5.0
CHECKPOINT_MIN_CHANGES = 50_000
DEFAULT_REPLY_BUFFER_BYTES = 64 * 1024 * 1024
# One connection's pipelined requests are handled in bursts of at most this many requests or
# reply bytes; then the loop serves everyone else before the next burst.
BURST_REQUESTS = 256
BURST_BYTES = 1024 * 1024


class Committer:
    """Group commit: one fdatasync per dirty file covers every write made before it.

    A reply that needs durability registers a callback. The first one schedules a round
    with ``call_soon``, which runs after the loop has handled every request already
    readable; the round fdatasyncs what they wrote (inline for one file, in parallel
    threads for several) and then runs the callbacks. Requests that arrive during a round
    are read by the next loop iteration and share the next round.
    """

    def __init__(self, syncer: Syncer) -> None:
        self.syncer = syncer
        self._callbacks: list[Callable[[SbctlError | None], None]] = []
        self._scheduled = False
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="sbctld-sync")
        self.rounds = 0
        self.synced_files = 0

    def after_durable(self, callback: Callable[[SbctlError | None], None]) -> None:
        if not self.syncer.durable and not self.syncer.pending:
            callback(None)
            return
        self._callbacks.append(callback)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._round)

    async def drain(self) -> None:
        """Wait until everything written so far is durable."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done(_error: SbctlError | None) -> None:
            if not fut.done():
                fut.set_result(None)

        self.after_durable(done)
        await fut

    def _round(self) -> None:
        self._scheduled = False
        callbacks, self._callbacks = self._callbacks, []
        dirty, closing = self.syncer.take()
        self.synced_files += len(dirty)
        error: SbctlError | None = None
        try:
            if len(dirty) > 1 and self.syncer.durable:
                list(self._pool.map(os.fdatasync, dirty))
                dirty = []
            sync_fds(dirty, closing, self.syncer.durable)
        except OSError as exc:
            log.error("fdatasync failed: %s", exc)
            error = GeneralError(f"the daemon could not make the write durable: {exc}")
        self.rounds += 1
        for callback in callbacks:
            callback(error)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class Waiter:
    __slots__ = ("args", "conn", "handle", "req_id")

    def __init__(self, conn: Connection, req_id: int, args: Receive) -> None:
        self.conn = conn
        self.req_id = req_id
        self.args = args
        self.handle: asyncio.TimerHandle | None = None


class Connection(asyncio.Protocol):
    """One client connection; requests may be pipelined.

    Back-pressure: ``reply_buffer_bytes`` bounds what a connection's unread replies may
    cost the daemon. When they exceed half of it, the transport calls
    :meth:`pause_writing`; the connection then stops reading and dispatching its requests
    (those already read wait in ``buf``) until the client has read them down to an eighth.
    The other half covers the reply that crossed the mark and the buffers made while
    encoding it, so a client that never reads grows the daemon by about the bound at most
    (unless one reply alone is larger).
    Requests already read are handled in bursts (``BURST_REQUESTS``, ``BURST_BYTES``) so
    that one pipelining client cannot hold the loop while others wait.
    """

    def __init__(self, server: Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.closed = False
        self.paused = False  # by back-pressure: resumed by resume_writing
        self.yielding = False  # after a burst: resumed by the next loop iteration
        self.burst_bytes = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        bound = self.server.reply_buffer_bytes
        self.transport.set_write_buffer_limits(high=bound // 2, low=bound // 8)
        sock = transport.get_extra_info("socket")
        if sock is not None and not self.server.peer_allowed(sock):
            log.warning("refused a connection from another user")
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.buf = bytearray()
        self.server.forget(self)

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is None or self.closed:
            return
        self.transport.resume_reading()
        self._dispatch_buffered()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.paused and not self.yielding:
            self._dispatch_buffered()

    def _yield_burst(self) -> None:
        assert self.transport is not None
        self.yielding = True
        self.transport.pause_reading()
        asyncio.get_running_loop().call_soon(self._after_burst)

    def _after_burst(self) -> None:
        self.yielding = False
        if self.closed or self.paused or self.transport is None:
            return  # resume_writing carries on
        self.transport.resume_reading()
        self._dispatch_buffered()

    def _dispatch_buffered(self) -> None:
        buf = self.buf
        pos = 0
        end = len(buf)
        handled = 0
        self.burst_bytes = 0
        while end - pos >= 4 and not self.paused and not self.closed:
            if handled >= BURST_REQUESTS or self.burst_bytes >= BURST_BYTES:
                self._yield_burst()
                break
            handled += 1
            (n,) = LENGTH.unpack_from(buf, pos)
            if n > MAX_REQUEST_BYTES:
                # The stream cannot be resynchronised after a bad length: answer, then close.
                self.reply_error(
                    0,
                    BadRequest(
                        f"request frame of {n} bytes exceeds the {MAX_REQUEST_BYTES} byte limit"
                    ),
                )
                self.buf = bytearray()
                assert self.transport is not None
                self.transport.close()
                return
            if end - pos - 4 < n:
                break
            body = bytes(buf[pos + 4 : pos + 4 + n])
            pos += 4 + n
            self.server.dispatch(self, body)
        if pos and buf is self.buf:
            del buf[:pos]

    def send(self, frame: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.burst_bytes += len(frame)
            self.transport.write(frame)

    def reply_error(self, req_id: int, err: SbctlError) -> None:
        self.send(encode_reply(req_id, False, err.to_wire()))


class Server:
    def __init__(
        self,
        broker: Broker,
        syncer: Syncer,
        socket_path: Path,
        *,
        reply_buffer_bytes: int = DEFAULT_REPLY_BUFFER_BYTES,
    ) -> None:
        self.broker = broker
        self.reply_buffer_bytes = reply_buffer_bytes
        self.faults = broker.faults
        self.syncer = syncer
        self.committer = Committer(syncer)
        self.socket_path = socket_path
        self.started = time.time()
        self.stopping = asyncio.Event()
        self.waiters: dict[tuple[str, str], list[Waiter]] = {}
        self._server: asyncio.AbstractServer | None = None
        self.requests = 0
        self._proc: Any = None  # psutil.Process, made on the first metrics request
        self._tasks: list[asyncio.Task[None]] = []
        self._adoptions: set[asyncio.Task[None]] = set()  # loads being checked (sbctld.loads)
        self._load_locks: dict[tuple[Any, str], tuple[asyncio.Lock, int]] = {}  # (lock, users)
        # Other front-ends (AMQP) wake their own waiting receivers on the same keys.
        self.wake_hooks: list[Callable[[tuple[str, str]], None]] = []
        self.info: dict[str, Any] = {}  # what front-ends add to `status` (amqp_port)
        self._handlers: dict[str, Callable[[Connection, int, Any], None]] = {
            name[3:]: getattr(self, name) for name in dir(self) if name.startswith("op_")
        }

    def register(self, op: str, handler: Callable[[Connection, int, Any], None]) -> None:
        """An operation served by another front-end (e.g. ``amqp_endpoint``)."""
        self._handlers[op] = handler

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        path = str(self.socket_path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # socket file mode 0600 (daemon/README.md §23)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            lambda: Connection(self), sock=sock, backlog=1024
        )
        self._tasks = [loop.create_task(self._ticker()), loop.create_task(self._checkpointer())]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._adoptions):  # nothing of a load is stored before its commit
            task.cancel()
        for waiters in self.waiters.values():
            for w in waiters:
                if w.handle:
                    w.handle.cancel()
        self.waiters.clear()
        # Let in-flight commits finish before the final checkpoint.
        await self.committer.drain()
        self.broker.close()
        self.committer.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    def peer_allowed(self, sock: socket.socket) -> bool:
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        except OSError:
            return True
        _pid, uid, _gid = struct.unpack("3i", creds)
        return uid in (os.getuid(), 0)

    async def _ticker(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(TICK_SECONDS)
            try:
                for key in self.broker.tick() + list(self.broker.take_touched()):
                    self.wake(key)
            except Exception:
                log.error("tick failed:\n%s", traceback.format_exc())

    async def _checkpointer(self) -> None:
        while not self.stopping.is_set():
            await asyncio.sleep(CHECKPOINT_SECONDS)
            try:
                self.broker.checkpoint(min_changes=CHECKPOINT_MIN_CHANGES)
            except Exception:
                log.error("checkpoint failed:\n%s", traceback.format_exc())

    # ------------------------------------------------------------ dispatch

    def dispatch(self, conn: Connection, body: bytes) -> None:
        self.requests += 1
        self.faults.delay_ms = 0
        req_id = 0
        try:
            req = decode_envelope(body)
            req_id = req.id
            args = decode_args(req)
            self._handlers[req.op](conn, req_id, args)
            if self.broker.touched:  # forwarding filled other queues: wake their receivers
                for key in self.broker.take_touched():
                    self.wake(key)
        except SbctlError as err:
            if self.faults.delay_ms:  # a slow store answered with an error
                frame = encode_reply(req_id, False, err.to_wire())
                self._send_late(conn, frame, self._take_delay())
            else:
                conn.reply_error(req_id, err)
        except Exception as exc:
            log.error("request %s failed:\n%s", req_id, traceback.format_exc())
            conn.reply_error(req_id, GeneralError(f"internal error: {exc}"))

    def reply_now(self, conn: Connection, req_id: int, result: Any) -> None:
        if self.faults.delay_ms:
            self._send_late(conn, encode_reply(req_id, True, result), self._take_delay())
        else:
            conn.send(encode_reply(req_id, True, result))

    def reply_durable(self, conn: Connection, req_id: int, result: Any) -> None:
        """Reply once every write made so far is on disk (daemon/README.md §21 "Durability")."""
        delay = self._take_delay() if self.faults.delay_ms else 0

        def done(error: SbctlError | None) -> None:
            if error is not None:
                conn.reply_error(req_id, error)
            elif delay:
                self._send_late(conn, encode_reply(req_id, True, result), delay)
            else:
                conn.send(encode_reply(req_id, True, result))

        self.committer.after_durable(done)

    def _take_delay(self) -> int:
        """The latency of the slow stores the request touched (sbctld.faults)."""
        delay, self.faults.delay_ms = self.faults.delay_ms, 0
        return delay

    def _send_late(self, conn: Connection, frame: bytes, delay_ms: int) -> None:
        asyncio.get_running_loop().call_later(delay_ms / 1000, conn.send, frame)

    # ------------------------------------------------------------ operations

    def op_ping(self, conn: Connection, req_id: int, args: Any) -> None:
        self.reply_now(conn, req_id, {"version": __version__, "pid": os.getpid()})

    def op_status(self, conn: Connection, req_id: int, args: Any) -> None:
        info: dict[str, Any] = {
            "version": __version__,
            "pid": os.getpid(),
            "data_dir": str(self.broker.data_dir),
            "socket": str(self.socket_path),
            "durability": "fsync" if self.syncer.durable else "os",
            "reply_buffer_bytes": self.reply_buffer_bytes,
            "uptime_s": round(time.time() - self.started, 3),
            "requests": self.requests,
            "commit_rounds": self.committer.rounds,
            # receives waiting for a message (tests poll this instead of sleeping)
            "parked_receives": sum(len(w) for w in self.waiters.values()),
            **self.broker.stats(),
            **self.info,
        }
        info.update(self._process_stats())
        self.reply_now(conn, req_id, info)

    def op_shutdown(self, conn: Connection, req_id: int, args: Any) -> None:
        self.reply_now(conn, req_id, {"stopping": True, "pid": os.getpid()})
        self.stopping.set()

    def op_namespace_create(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.namespace_create(
            a.name,
            a.sku,
            a.premium_messaging_partitions,
            a.capacity,
            a.credits_per_second,
            a.ops_per_unit,
        )
        self.reply_durable(conn, req_id, result)

    def op_namespace_update(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.namespace_update(
            a.name, a.credits_per_second, a.capacity, a.ops_per_unit
        )
        self.reply_durable(conn, req_id, result)

    def op_namespace_credits(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.namespace_credits(a.name))

    # --- overview (sbctl top; sbctld.overview) ---
    def op_overview(self, conn: Connection, req_id: int, a: Any) -> None:
        from sbctld.overview import overview

        self.reply_now(conn, req_id, overview(self.broker, a.name))

    # --- end overview ---
    def op_namespace_metrics(self, conn: Connection, req_id: int, a: Any) -> None:
        """Premium-style metrics (daemon/README.md §20.3): throttled and served requests, and the
        daemon's own CPU and memory (shared by every namespace it serves)."""
        credits = self.broker.namespace_credits(a.name)
        info: dict[str, Any] = {
            "namespace": credits["namespace"],
            "sku": credits["sku"],
            "capacity": credits.get("capacity"),
            "throttled_requests": credits["throttled_requests"],
            "requests_served": credits["requests_served"],
            "cpu_percent": None,
            "rss_bytes": None,
        }
        stats = self._process_stats()
        info.update({k: stats[k] for k in ("cpu_percent", "rss_bytes") if k in stats})
        self.reply_now(conn, req_id, info)

    def _process_stats(self) -> dict[str, Any]:
        """The daemon's own memory and CPU (psutil is imported here: it slows start-up)."""
        import psutil

        try:
            if self._proc is None:
                self._proc = psutil.Process()
            proc = self._proc
            return {
                "rss_bytes": proc.memory_info().rss,
                "cpu_seconds": round(sum(proc.cpu_times()[:2]), 3),
                "cpu_percent": proc.cpu_percent(interval=None),
            }
        except (psutil.Error, OSError) as exc:
            log.warning("process statistics unavailable: %s", exc)
            return {}

    def op_namespace_pair(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.pairings.pair(
            a.name,
            a.secondary,
            a.backlog_queue_count,
            a.failover_interval_ms,
            a.ping_primary_interval_ms,
            a.enable_syphon,
        )
        self.reply_durable(conn, req_id, result)

    def op_namespace_unpair(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_durable(conn, req_id, self.broker.pairings.unpair(a.name))

    def op_namespace_pair_status(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.pairings.status(a.name))

    def op_namespace_get(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.namespace_get(a.name))

    def op_namespace_list(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.namespace_list())

    def op_namespace_delete(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.namespace_delete(a.name)
        prefix = entity_key(a.name)
        for key in [k for k in self.waiters if k[0] == prefix]:
            self._fail_waiters(key, f"namespace {a.name!r} was deleted")
        self.reply_durable(conn, req_id, result)

    def op_queue_create(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_durable(conn, req_id, self.broker.queue_create(a.namespace, a.name, a.options))

    def op_queue_update(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_durable(conn, req_id, self.broker.queue_update(a.namespace, a.name, a.options))

    def op_queue_get(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.queue_get(a.namespace, a.name))

    def op_queue_list(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.queue_list(a.namespace))

    def op_queue_delete(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.queue_delete(a.namespace, a.name)
        self._fail_waiters(
            (entity_key(a.namespace), entity_key(a.name)), f"queue {a.name!r} was deleted"
        )
        self.reply_durable(conn, req_id, result)

    def op_topic_create(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_durable(conn, req_id, self.broker.topic_create(a.namespace, a.name, a.options))

    def op_topic_update(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_durable(conn, req_id, self.broker.topic_update(a.namespace, a.name, a.options))

    def op_topic_get(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.topic_get(a.namespace, a.name))

    def op_topic_list(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.topic_list(a.namespace))

    def op_topic_delete(self, conn: Connection, req_id: int, a: Any) -> None:
        keys = self.broker.subscription_keys(a.namespace, a.name)
        result = self.broker.topic_delete(a.namespace, a.name)
        for key in keys:
            self._fail_waiters(key, f"topic {a.name!r} was deleted")
        self.reply_durable(conn, req_id, result)

    def op_subscription_create(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.subscription_create(a.namespace, a.topic, a.name, a.options)
        self.reply_durable(conn, req_id, result)

    def op_subscription_update(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.subscription_update(a.namespace, a.topic, a.name, a.options)
        self.reply_durable(conn, req_id, result)

    def op_subscription_get(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.subscription_get(a.namespace, a.topic, a.name))

    def op_subscription_list(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.subscription_list(a.namespace, a.topic))

    def op_subscription_delete(self, conn: Connection, req_id: int, a: Any) -> None:
        key = self._key(a.namespace, f"{a.topic}/subscriptions/{a.name}")
        result = self.broker.subscription_delete(a.namespace, a.topic, a.name)
        self._fail_waiters(key, f"subscription {a.name!r} was deleted")
        self.reply_durable(conn, req_id, result)

    def op_rule_create(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.rule_create(
            a.namespace, a.topic, a.subscription, a.name, a.filter, a.action
        )
        self.reply_durable(conn, req_id, result)

    def op_rule_get(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.rule_get(a.namespace, a.topic, a.subscription, a.name)
        self.reply_now(conn, req_id, result)

    def op_rule_list(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.rule_list(a.namespace, a.topic, a.name))

    def op_rule_delete(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.rule_delete(a.namespace, a.topic, a.subscription, a.name)
        self.reply_durable(conn, req_id, result)

    def op_send(self, conn: Connection, req_id: int, a: Any) -> None:
        # The connection is the sender a paired primary keeps a backlog queue for.
        seqs = self.broker.send(a.namespace, a.entity, a.messages, id(conn))
        if not a.report:
            self.reply_durable(conn, req_id, seqs)
        else:  # sbctl send: also say where a paired primary diverted the messages
            where = None
            if self.broker.paired and seqs and not any(seqs):
                where = self.broker.pairings.backlog_of(a.namespace, a.entity, id(conn))
            report = {"sequence_numbers": seqs, "diverted_to": where}
            if where is not None:
                pairing = self.broker.paired[entity_key(a.namespace)]
                report["diverted_namespace"] = pairing.secondary
            self.reply_durable(conn, req_id, report)
        self.wake(self._key(a.namespace, a.entity))

    def op_peek(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(
            conn, req_id, self.broker.peek(a.namespace, a.entity, a.count, a.from_sequence)
        )

    def _receive(self, a: Receive) -> list[Delivered]:
        return self.broker.receive(a.namespace, a.entity, a.count, a.mode, a.session_lock_token)

    def op_receive(self, conn: Connection, req_id: int, a: Any) -> None:
        got = self._receive(a)
        if got or a.max_wait_ms <= 0:
            self._reply_received(conn, req_id, a.mode, got)
            return
        self.faults.delay_ms = 0  # a parked receive is answered by a later one
        waiter = Waiter(conn, req_id, a)
        key = self._key(a.namespace, a.entity)
        self.waiters.setdefault(key, []).append(waiter)
        loop = asyncio.get_running_loop()
        waiter.handle = loop.call_later(a.max_wait_ms / 1000, self._timeout, key, waiter)

    def op_settle(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.settle(
            a.namespace, a.entity, a.op, a.lock_tokens, a.properties, a.reason, a.description
        )
        self.reply_durable(conn, req_id, result)
        if a.op in ("abandon", "dead-letter"):
            self.wake(self._key(a.namespace, a.entity))

    def op_session_accept(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(
            conn, req_id, self.broker.session_accept(a.namespace, a.entity, a.session_id)
        )

    def op_session_renew(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.session_renew(a.namespace, a.entity, a.session_lock_token)
        self.reply_now(conn, req_id, result)

    def op_session_close(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.session_close(a.namespace, a.entity, a.session_lock_token)
        self.reply_now(conn, req_id, result)

    def op_session_list(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.session_list(a.namespace, a.entity))

    def op_session_get_state(self, conn: Connection, req_id: int, a: Any) -> None:
        state = self.broker.session_get_state(a.namespace, a.entity, a.session_id)
        self.reply_now(conn, req_id, {"session_id": a.session_id, "state": state})

    def op_session_set_state(self, conn: Connection, req_id: int, a: Any) -> None:
        self.broker.session_set_state(a.namespace, a.entity, a.session_id, a.state)
        self.reply_durable(conn, req_id, {"session_id": a.session_id, "set": a.state is not None})

    def op_transact(self, conn: Connection, req_id: int, a: Any) -> None:
        settlements = [
            (s.op, s.lock_token, s.properties, s.reason, s.description) for s in a.settlements
        ]
        result = self.broker.transact(a.namespace, a.entity, a.messages, settlements)
        self.reply_durable(conn, req_id, result)
        if a.messages or any(s.op in ("abandon", "dead-letter") for s in a.settlements):
            self.wake(self._key(a.namespace, a.entity))

    def op_receive_deferred(self, conn: Connection, req_id: int, a: Any) -> None:
        got = self.broker.receive_deferred(a.namespace, a.entity, a.sequence_numbers, a.mode)
        self._reply_received(conn, req_id, a.mode, got)

    def op_cancel_scheduled(self, conn: Connection, req_id: int, a: Any) -> None:
        cancelled = self.broker.cancel_scheduled(a.namespace, a.entity, a.sequence_numbers)
        self.reply_durable(conn, req_id, {"cancelled": cancelled})

    def op_purge(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_durable(conn, req_id, {"purged": self.broker.purge(a.namespace, a.entity)})

    def op_dlq_resubmit(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.dlq_resubmit(a.namespace, a.entity, a.count, a.to)
        self.reply_durable(conn, req_id, result)
        if result["resubmitted"]:
            self.wake(self._key(a.namespace, a.to or a.entity))

    def op_load_adopt(self, conn: Connection, req_id: int, a: Any) -> None:
        """Check the staged files off the loop, then commit in one step (sbctld.loads)."""
        files = [(f.partition, f.path) for f in a.files]
        self.broker.load_queue(a.namespace, a.entity, files)  # refuse what is refused now
        task = asyncio.get_running_loop().create_task(self._load_adopt(conn, req_id, a, files))
        self._adoptions.add(task)
        task.add_done_callback(self._adoptions.discard)

    async def _load_adopt(
        self, conn: Connection, req_id: int, a: Any, files: list[tuple[int, str]]
    ) -> None:
        try:
            queue = self.broker.load_queue(a.namespace, a.entity, files)
            self.faults.delay_ms = 0
            key = (queue.key, a.load_id)
            lock, users = self._load_locks.get(key) or (asyncio.Lock(), 0)
            self._load_locks[key] = (lock, users + 1)
            try:
                async with lock:  # the same load sent twice: the second sees it committed
                    result = await self._adopt_locked(a, files, queue)
            finally:
                lock, users = self._load_locks[key]
                if users > 1:
                    self._load_locks[key] = (lock, users - 1)
                else:
                    del self._load_locks[key]
        except SbctlError as err:
            if self.faults.delay_ms:
                self._send_late(
                    conn, encode_reply(req_id, False, err.to_wire()), self._take_delay()
                )
            else:
                conn.reply_error(req_id, err)
            return
        except Exception as exc:
            log.error("load %r failed:\n%s", a.load_id, traceback.format_exc())
            conn.reply_error(req_id, GeneralError(f"internal error: {exc}"))
            return
        self.reply_durable(conn, req_id, result)
        self.wake(self._key(a.namespace, a.entity))

    async def _adopt_locked(
        self, a: Any, files: list[tuple[int, str]], queue: Queue
    ) -> dict[str, Any]:
        t0 = time.perf_counter()
        prepared = await loads.check(queue, a.load_id, files, self.broker.clock.now_ms)
        t1 = time.perf_counter()
        self.faults.delay_ms = 0
        if self.broker.load_queue(a.namespace, a.entity, files) is not queue:
            raise BadRequest(
                f"load {a.load_id!r} refused, nothing adopted: {a.entity!r} was deleted or "
                f"replaced while the load was being checked"
            )
        if isinstance(prepared, dict):
            return prepared  # this load id had already committed
        result = self.broker.load_adopted(queue, loads.commit(queue, a.load_id, prepared))
        log.info(
            "load %r: %d messages checked in %.2f s, committed in %.3f s",
            a.load_id,
            result["messages"],
            t1 - t0,
            time.perf_counter() - t1,
        )
        return result

    def op_load_status(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.load_status(a.namespace, a.entity, a.load_id))

    def op_fault_add(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.fault_add(a.namespace, a.entity, a.partitions, a.kind, a.latency_ms)
        self.reply_now(conn, req_id, result)
        self._wake_namespace(entity_key(a.namespace))  # parked receives of a dead store fail

    def op_fault_list(self, conn: Connection, req_id: int, a: Any) -> None:
        self.reply_now(conn, req_id, self.broker.fault_list(a.namespace))

    def op_fault_clear(self, conn: Connection, req_id: int, a: Any) -> None:
        result = self.broker.fault_clear(a.namespace, a.ids, a.all_namespaces)
        self.reply_now(conn, req_id, result)
        for ns_key in dict.fromkeys(entity_key(f["namespace"]) for f in result["cleared"]):
            self._wake_namespace(ns_key)  # what the stores held is there again

    def _wake_namespace(self, ns_key: str) -> None:
        for key in [k for k in self.waiters if k[0] == ns_key]:
            self.wake(key)

    # ------------------------------------------------------------ long polling

    def _key(self, namespace: str, entity: str) -> tuple[str, str]:
        return self.broker.resolve(namespace, entity)[0].key

    def _reply_received(
        self, conn: Connection, req_id: int, mode: str, got: list[Delivered]
    ) -> None:
        if mode == "receive-and-delete":
            self.reply_durable(conn, req_id, got)
        else:
            self.reply_now(conn, req_id, got)

    def wake(self, key: tuple[str, str]) -> None:
        for hook in self.wake_hooks:
            hook(key)
        waiters = self.waiters.get(key)
        while waiters:
            w = waiters[0]
            if w.conn.closed:
                waiters.pop(0)
                if w.handle:
                    w.handle.cancel()
                continue
            try:
                got = self._receive(w.args)
            except SbctlError as err:
                waiters.pop(0)
                if w.handle:
                    w.handle.cancel()
                w.conn.reply_error(w.req_id, err)
                continue
            if not got:
                self.faults.delay_ms = 0
                break
            waiters.pop(0)
            if w.handle:
                w.handle.cancel()
            self._reply_received(w.conn, w.req_id, w.args.mode, got)
        if not waiters:
            self.waiters.pop(key, None)

    def _timeout(self, key: tuple[str, str], waiter: Waiter) -> None:
        waiters = self.waiters.get(key, [])
        if waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                self.waiters.pop(key, None)
            self.reply_now(waiter.conn, waiter.req_id, [])

    def _fail_waiters(self, key: tuple[str, str], why: str) -> None:
        for w in self.waiters.pop(key, []):
            if w.handle:
                w.handle.cancel()
            w.conn.reply_error(w.req_id, ServiceTimeout(why))

    def forget(self, conn: Connection) -> None:
        """A dropped connection drops its parked receives."""
        for key in list(self.waiters):
            kept = [w for w in self.waiters[key] if w.conn is not conn]
            for w in self.waiters[key]:
                if w.conn is conn and w.handle:
                    w.handle.cancel()
            if kept:
                self.waiters[key] = kept
            else:
                del self.waiters[key]
