"""The asyncio client, :class:`AsyncClient`: one connection, many requests in flight."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import msgspec

from sbctl.convert import Duration, Instant, Sendable
from sbctl.core import paths
from sbctl.core.errors import InvalidOperation, SbctlError, ServiceCommunicationProblem
from sbctl.core.messages import ReceivedMessage
from sbctl.core.protocol import (
    LENGTH,
    MAX_REPLY_BYTES,
    Reply,
    decode_reply,
    encode_request,
)
from sbctl.core.records import Message
from sbctl.retry import DEFAULT_BACKOFF, DEFAULT_MAX, DEFAULT_TOTAL

if TYPE_CHECKING:
    from sbctl.core.messages import Tokens
from sbctl.client._calls import (
    DEFAULT_NAMESPACE,
    Call,
    Local,
    Transaction,
    _Answered,
    _Calls,
    _gave_up,
    _policy,
    _raise_or_result,
    _scheduled,
    _unreachable,
    documented,
)


@documented
class AsyncClient:
    """asyncio client; requests are pipelined on one connection."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        namespace: str | None = None,
        retry_total: int = DEFAULT_TOTAL,
        retry_backoff_factor: float = DEFAULT_BACKOFF,
        retry_backoff_max: float = DEFAULT_MAX,
    ) -> None:
        self.socket_path = str(socket_path or paths.default_socket())
        self.namespace = namespace or os.environ.get("SBCTL_NAMESPACE") or DEFAULT_NAMESPACE
        self.retry = _policy(retry_total, retry_backoff_factor, retry_backoff_max)
        self._calls = _Calls(self.namespace)
        self._transport: asyncio.Transport | None = None
        self._closed: asyncio.Future[None] | None = None  # done when the transport is gone
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[msgspec.Raw], Any]]] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    async def _connect(self) -> asyncio.Transport:
        transport = self._transport
        if transport is not None:
            return transport
        async with self._lock:
            if self._transport is None:
                loop = asyncio.get_running_loop()
                try:
                    await loop.create_unix_connection(lambda: _Replies(self), self.socket_path)
                except OSError as exc:
                    raise _unreachable(self.socket_path, exc) from exc
            assert self._transport is not None
            return self._transport

    def _answer(self, reply: Reply) -> None:
        """One reply read: settle the request it answers."""
        pending = self._pending
        if reply.id == 0 and not reply.ok and len(pending) == 1:
            reply.id = next(iter(pending))  # an unreadable request's error
        fut, read = pending.pop(reply.id, (None, None))
        if fut is None or read is None or fut.done():
            return
        try:
            fut.set_result(_raise_or_result(reply.ok, reply.result, read))
        except SbctlError as exc:
            fut.set_exception(_Answered(exc))

    def _lost(self, transport: asyncio.Transport | None, error: SbctlError) -> None:
        """The connection ``transport`` ended: every request still waiting fails with
        ``error``."""
        if self._transport is transport:
            self._transport = None  # (not a newer connection's, made after an aclose)
        for fut, _ in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()

    async def _call(self, call: Call | Local) -> Any:
        if isinstance(call, Local):
            return call.value
        attempt = 0
        while True:
            try:
                return await self._call_once(call)
            except _Answered as answered:
                wait = self.retry.delay(answered.error, attempt)
                if wait is None:
                    raise _gave_up(answered.error, attempt) from None
            attempt += 1
            await asyncio.sleep(wait)

    async def _call_once(self, call: Call) -> Any:
        op, args, read = call
        transport = await self._connect()
        req_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = (fut, read)
        transport.write(encode_request(req_id, op, args))
        return await fut

    async def aclose(self) -> None:
        transport, self._transport = self._transport, None
        if transport is not None:
            closed = self._closed
            transport.close()
            if closed is not None:
                await closed

    def using(self, namespace: str) -> AsyncClient:
        """The same connection settings, another namespace."""
        return AsyncClient(
            self.socket_path,
            namespace=namespace,
            retry_total=self.retry.total,
            retry_backoff_factor=self.retry.backoff,
            retry_backoff_max=self.retry.max_backoff,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """Buffer this client's sends and settlements and commit them at once, all or
        nothing (daemon/README.md §12); an exception in the block discards them."""
        if self._calls.tx is not None:
            raise InvalidOperation("a transaction is already open on this client")
        tx = self._calls.tx = Transaction()
        try:
            yield tx
        finally:
            self._calls.tx = None
        if tx.entity is not None:
            tx.result = await self._call(tx.commit_call(self.namespace))

    async def ping(self) -> dict[str, Any]:
        return await self._call(self._calls.ping())

    async def status(self) -> dict[str, Any]:
        return await self._call(self._calls.status())

    async def shutdown(self) -> dict[str, Any]:
        return await self._call(self._calls.shutdown())

    async def namespace_create(
        self,
        name: str,
        sku: str = "standard",
        premium_messaging_partitions: int = 1,
        capacity: int = 1,
        credits_per_second: int | None = None,
        ops_per_unit: int | None = None,
    ) -> dict[str, Any]:
        call = self._calls.namespace_create(
            name, sku, premium_messaging_partitions, capacity, credits_per_second, ops_per_unit
        )
        return await self._call(call)

    async def namespace_update(
        self,
        name: str,
        credits_per_second: int | None = None,
        capacity: int | None = None,
        ops_per_unit: int | None = None,
    ) -> dict[str, Any]:
        return await self._call(
            self._calls.namespace_update(name, credits_per_second, capacity, ops_per_unit)
        )

    async def namespace_credits(self, name: str | None = None) -> dict[str, Any]:
        return await self._call(self._calls.namespace_credits(name))

    async def namespace_metrics(self, name: str | None = None) -> dict[str, Any]:
        return await self._call(self._calls.namespace_metrics(name))

    async def overview(self, name: str | None = None) -> dict[str, Any]:
        """:meth:`Client.overview`."""
        result: dict[str, Any] = await self._call(self._calls.overview(name))
        return result

    async def namespace_pair(
        self,
        primary: str,
        secondary: str,
        *,
        backlog_queue_count: int = 10,
        failover_interval_ms: Duration = 60_000,
        ping_primary_interval_ms: Duration = 60_000,
        enable_syphon: bool = False,
    ) -> dict[str, Any]:
        return await self._call(
            self._calls.namespace_pair(
                primary,
                secondary,
                backlog_queue_count,
                failover_interval_ms,
                ping_primary_interval_ms,
                enable_syphon,
            )
        )

    async def namespace_unpair(self, primary: str) -> dict[str, Any]:
        return await self._call(self._calls.namespace_unpair(primary))

    async def namespace_pair_status(self, primary: str) -> dict[str, Any]:
        return await self._call(self._calls.namespace_pair_status(primary))

    async def namespace_get(self, name: str) -> dict[str, Any]:
        return await self._call(self._calls.namespace_get(name))

    async def namespace_set_key(self, name: str, key_name: str, key: str) -> dict[str, Any]:
        return await self._call(self._calls.namespace_set_key(name, key_name, key))

    async def amqp_endpoint(self, name: str) -> dict[str, Any]:
        return await self._call(self._calls.amqp_endpoint(name))

    async def namespace_list(self) -> list[dict[str, Any]]:
        return await self._call(self._calls.namespace_list())

    async def namespace_delete(self, name: str) -> dict[str, Any]:
        return await self._call(self._calls.namespace_delete(name))

    async def queue_create(self, name: str, **options: Any) -> dict[str, Any]:
        return await self._call(self._calls.queue_create(name, options))

    async def queue_update(self, name: str, **options: Any) -> dict[str, Any]:
        return await self._call(self._calls.queue_update(name, options))

    async def queue_get(self, name: str) -> dict[str, Any]:
        return await self._call(self._calls.queue_get(name))

    async def queue_list(self) -> list[dict[str, Any]]:
        return await self._call(self._calls.queue_list())

    async def queue_delete(self, name: str) -> dict[str, Any]:
        return await self._call(self._calls.queue_delete(name))

    # -- topics, subscriptions and rules (daemon/README.md §10)
    async def topic_create(self, name: str, **options: Any) -> dict[str, Any]:
        return await self._call(self._calls.topic_create(name, options))

    async def topic_update(self, name: str, **options: Any) -> dict[str, Any]:
        return await self._call(self._calls.topic_update(name, options))

    async def topic_get(self, name: str) -> dict[str, Any]:
        return await self._call(self._calls.topic_get(name))

    async def topic_list(self) -> list[dict[str, Any]]:
        return await self._call(self._calls.topic_list())

    async def topic_delete(self, name: str) -> dict[str, Any]:
        return await self._call(self._calls.topic_delete(name))

    async def subscription_create(self, topic: str, name: str, **options: Any) -> dict[str, Any]:
        return await self._call(self._calls.subscription_create(topic, name, options))

    async def subscription_update(self, topic: str, name: str, **options: Any) -> dict[str, Any]:
        return await self._call(self._calls.subscription_update(topic, name, options))

    async def subscription_get(self, topic: str, name: str) -> dict[str, Any]:
        return await self._call(self._calls.subscription_get(topic, name))

    async def subscription_list(self, topic: str) -> list[dict[str, Any]]:
        return await self._call(self._calls.subscription_list(topic))

    async def subscription_delete(self, topic: str, name: str) -> dict[str, Any]:
        return await self._call(self._calls.subscription_delete(topic, name))

    async def rule_create(
        self,
        topic: str,
        subscription: str,
        name: str,
        filter: dict[str, Any] | None = None,
        action: str | None = None,
    ) -> dict[str, Any]:
        """Add a rule; ``filter`` as in :class:`sbctl.core.protocol.RuleCreate`
        (None: TrueFilter)."""
        return await self._call(self._calls.rule_create(topic, subscription, name, filter, action))

    async def rule_get(self, topic: str, subscription: str, name: str) -> dict[str, Any]:
        return await self._call(self._calls.rule_get(topic, subscription, name))

    async def rule_list(self, topic: str, subscription: str) -> list[dict[str, Any]]:
        return await self._call(self._calls.rule_list(topic, subscription))

    async def rule_delete(self, topic: str, subscription: str, name: str) -> dict[str, Any]:
        return await self._call(self._calls.rule_delete(topic, subscription, name))

    async def send(self, entity: str, messages: Sendable) -> list[int]:
        return await self._call(self._calls.send(entity, messages))

    async def send_report(self, entity: str, messages: Sequence[Message]) -> dict[str, Any]:
        """:meth:`Client.send_report`."""
        result: dict[str, Any] = await self._call(self._calls.send_report(entity, messages))
        return result

    async def peek(
        self, entity: str, count: int = 1, from_sequence: int | None = None
    ) -> list[ReceivedMessage]:
        return await self._call(self._calls.peek(entity, count, from_sequence))

    async def receive(
        self,
        entity: str,
        count: int = 1,
        max_wait: float | timedelta = 0.0,
        mode: str = "peek-lock",
        session_lock_token: str | None = None,
    ) -> list[ReceivedMessage]:
        """Receive; with ``session_lock_token`` (from :meth:`accept_session`), that
        session's messages in order."""
        call = self._calls.receive(entity, count, max_wait, mode, session_lock_token)
        return await self._call(call)

    async def settle(
        self,
        entity: str,
        op: str,
        lock_tokens: Tokens,
        properties: dict[str, Any] | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> list[dict[str, Any]]:
        call = self._calls.settle(entity, op, lock_tokens, properties, reason, description)
        return await self._call(call)

    async def complete(self, entity: str, lock_tokens: Tokens) -> list[dict[str, Any]]:
        return await self.settle(entity, "complete", lock_tokens)

    async def abandon(
        self,
        entity: str,
        lock_tokens: Tokens,
        properties: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        return await self.settle(entity, "abandon", lock_tokens, properties)

    async def defer(
        self, entity: str, lock_tokens: Tokens, properties: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        return await self.settle(entity, "defer", lock_tokens, properties)

    async def dead_letter(
        self,
        entity: str,
        lock_tokens: Tokens,
        reason: str | None = None,
        description: str | None = None,
        properties: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        return await self.settle(
            entity, "dead-letter", lock_tokens, properties, reason, description
        )

    async def renew_lock(self, entity: str, lock_tokens: Tokens) -> list[dict[str, Any]]:
        return await self.settle(entity, "renew-lock", lock_tokens)

    async def receive_deferred(
        self,
        entity: str,
        sequence_numbers: Sequence[int],
        mode: str = "peek-lock",
        session_lock_token: str | None = None,
    ) -> list[ReceivedMessage]:
        """Deferred messages by sequence number; on a session-enabled entity those of the
        session ``session_lock_token`` (from :meth:`accept_session`) holds."""
        call = self._calls.receive_deferred(entity, sequence_numbers, mode, session_lock_token)
        return await self._call(call)

    async def schedule(self, entity: str, messages: Sendable, at_ms: Instant) -> list[int]:
        """Send messages to appear at ``at_ms`` (daemon/README.md §7.1); returns their numbers."""
        return await self.send(entity, _scheduled(messages, at_ms))

    async def cancel_scheduled(
        self, entity: str, sequence_numbers: Sequence[int]
    ) -> dict[str, Any]:
        return await self._call(self._calls.cancel_scheduled(entity, sequence_numbers))

    async def delete_messages(
        self,
        entity: str,
        count: int,
        before_ms: int | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Delete up to ``count`` of the oldest unlocked messages (enqueued before
        ``before_ms``, of ``session_id``) without receiving them: ``{"deleted": n}``."""
        return await self._call(self._calls.delete_messages(entity, count, before_ms, session_id))

    async def purge(self, entity: str) -> dict[str, Any]:
        """Delete every message of a queue, or of ``queue/$deadletterqueue``."""
        return await self._call(self._calls.purge(entity))

    async def dlq_resubmit(
        self, entity: str, count: int | None = None, to: str | None = None
    ) -> dict[str, Any]:
        """Move dead-lettered messages back to the queue (or to ``to``)."""
        return await self._call(self._calls.dlq_resubmit(entity, count, to))

    async def fault_add(
        self,
        entity: str | None = None,
        partitions: Sequence[int] = (),
        *,
        kind: str = "unavailable",
        latency_ms: Duration | None = None,
    ) -> dict[str, Any]:
        return await self._call(self._calls.fault_add(entity, partitions, kind, latency_ms))

    async def fault_list(self, *, all_namespaces: bool = False) -> list[dict[str, Any]]:
        return await self._call(self._calls.fault_list(all_namespaces))

    async def fault_clear(
        self, ids: Sequence[str] = (), *, all_namespaces: bool = False
    ) -> dict[str, Any]:
        return await self._call(self._calls.fault_clear(ids, all_namespaces))

    async def clock_show(self, namespace: str | None = None) -> dict[str, Any]:
        """The namespace's time and its offset (see :meth:`sbctl.Client.clock_show`)."""
        return await self._call(self._calls.clock_show(namespace))

    async def clock_advance(
        self, by: Duration | str, namespace: str | None = None
    ) -> dict[str, Any]:
        """Move the namespace's time forward (see :meth:`sbctl.Client.clock_advance`)."""
        return await self._call(self._calls.clock_advance(by, namespace))

    async def clock_set(self, at: Instant | str, namespace: str | None = None) -> dict[str, Any]:
        """Move the namespace's time forward to ``at`` (see :meth:`sbctl.Client.clock_set`)."""
        return await self._call(self._calls.clock_set(at, namespace))

    async def accept_session(self, entity: str, session_id: str | None = None) -> dict[str, Any]:
        """Lock ``session_id`` (or the next session with messages) for this caller: returns
        ``session_id``, ``session_lock_token`` and ``locked_until_utc`` (daemon/README.md §9.6)."""
        return await self._call(self._calls.session_accept(entity, session_id))

    async def renew_session_lock(self, entity: str, session_lock_token: str) -> dict[str, Any]:
        call = self._calls.session_renew(entity, session_lock_token)
        return await self._call(call)

    async def close_session(self, entity: str, session_lock_token: str) -> dict[str, Any]:
        call = self._calls.session_close(entity, session_lock_token)
        return await self._call(call)

    async def list_sessions(self, entity: str) -> list[dict[str, Any]]:
        return await self._call(self._calls.session_list(entity))

    async def get_session_state(self, entity: str, session_id: str) -> bytes | None:
        return await self._call(self._calls.session_get_state(entity, session_id))

    async def set_session_state(
        self, entity: str, session_id: str, state: bytes | str | None
    ) -> dict[str, Any]:
        """Set (or, with None, clear) a session's state (daemon/README.md §9.8)."""
        return await self._call(self._calls.session_set_state(entity, session_id, state))

    async def load_adopt(
        self, entity: str, load_id: str, files: Sequence[tuple[int, str]]
    ) -> dict[str, Any]:
        return await self._call(self._calls.load_adopt(entity, load_id, files))

    async def load_status(self, entity: str, load_id: str) -> dict[str, Any]:
        return await self._call(self._calls.load_status(entity, load_id))


class _Replies(asyncio.Protocol):
    """The read side of an :class:`AsyncClient` connection: splits the byte stream into
    length-prefixed replies and hands each to the client as it completes (no reader task:
    a reply costs one callback, not a task wake-up per read)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.failure: str | None = None  # why the client dropped the connection
        self.closed: asyncio.Future[None] | None = None  # done when the connection is gone

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self.transport = self.client._transport = cast(asyncio.Transport, transport)
        self.closed = self.client._closed = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        if not buffer:
            # the common case: whole replies, read straight from the bytes received
            end = self._split(data)
            if end < len(data):
                buffer += memoryview(data)[end:]
            return
        buffer += data
        end = self._split(buffer)
        if end:
            del buffer[:end]

    def _split(self, data: bytes | bytearray) -> int:
        """Answer every whole reply in ``data``; returns where the rest begins."""
        size, pos, answer = len(data), 0, self.client._answer
        while size - pos >= 4:
            (n,) = LENGTH.unpack_from(data, pos)
            end = pos + 4 + n
            if n > MAX_REPLY_BYTES:
                return self._fail(f"a reply of {n} bytes, more than {MAX_REPLY_BYTES}", size)
            if end > size:
                break
            # a slice is a copy: a reply's Raw result outlives the buffer's reuse
            try:
                reply = decode_reply(data[pos + 4 : end])
            except msgspec.DecodeError as exc:
                return self._fail(f"an unreadable reply ({exc})", size)
            answer(reply)
            pos = end
        return pos

    def _fail(self, why: str, size: int) -> int:
        """Drop a connection whose replies cannot be read (every waiting request fails)."""
        self.failure = why
        if self.transport is not None:
            self.transport.abort()
        return size

    def connection_lost(self, exc: Exception | None) -> None:
        client = self.client
        if self.failure is not None:
            error = ServiceCommunicationProblem(f"lost the sbctl daemon connection: {self.failure}")
        elif exc is not None:
            error = ServiceCommunicationProblem(f"lost the sbctl daemon connection: {exc}")
        else:
            error = ServiceCommunicationProblem("the sbctl daemon closed the connection")
        client._lost(self.transport, error)
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)
