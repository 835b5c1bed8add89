"""The Python client: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both build requests with the same I/O-free :class:`_Calls` table and differ only in how
they move frames; their public method names mirror each other (``close``/``aclose``).
The CLI uses :class:`Client`; tests and scripts embed either::

    from sbctl import Client
    with Client() as sb:
        sb.queue_create("orders", enable_partitioning=True)
        sb.send("orders", [Message(body=b"hi", partition_key="customer-7")])
        for msg in sb.receive("orders", count=10):
            sb.complete("orders", [msg.lock_token])
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from sbctl import convert, paths
from sbctl.codec import Message
from sbctl.convert import Duration, Instant, Sendable
from sbctl.errors import GeneralError, InvalidOperation, SbctlError, ServiceCommunicationProblem
from sbctl.messages import ReceivedMessage
from sbctl.protocol import (
    LENGTH,
    MAX_REPLY_BYTES,
    Delivered,
    Empty,
    EntityCreate,
    EntityPath,
    EntityRef,
    FaultAdd,
    FaultClear,
    FaultList,
    LoadAdopt,
    LoadRef,
    NamespaceCreate,
    NamespacePair,
    NamespaceRef,
    NamespaceScope,
    NamespaceUpdate,
    Peek,
    Receive,
    ReceiveDeferred,
    Resubmit,
    RuleCreate,
    RuleRef,
    Send,
    SequenceNumbers,
    SessionAccept,
    SessionRef,
    SessionState,
    SessionToken,
    Settle,
    StagedFile,
    SubscriptionCreate,
    SubscriptionRef,
    TopicScope,
    Transact,
    TxSettle,
    decode_reply,
    decode_result,
    encode_request,
)
from sbctl.retry import DEFAULT_BACKOFF, DEFAULT_MAX, DEFAULT_TOTAL, RetryPolicy

if TYPE_CHECKING:
    from sbctl.convert import Tokens

DEFAULT_NAMESPACE = "sbemulatorns"

Call = tuple[str, msgspec.Struct, Callable[[msgspec.Raw], Any]]


def _plain(raw: msgspec.Raw) -> Any:
    return decode_result(raw)


def _state(raw: msgspec.Raw) -> bytes | None:
    state = decode_result(raw)["state"]
    return bytes(state) if state is not None else None


def _delivered(raw: msgspec.Raw) -> list[ReceivedMessage]:
    return [ReceivedMessage.from_wire(d) for d in decode_result(raw, list[Delivered])]


def _unreachable(path: str, exc: OSError) -> ServiceCommunicationProblem:
    if exc.errno in (errno.ENOENT, errno.ECONNREFUSED):
        why = "it is not running (start it with `sbctl daemon start`)"
    else:
        why = exc.strerror or str(exc)
    return ServiceCommunicationProblem(f"cannot reach the sbctl daemon at {path}: {why}")


class Transaction:
    """Sends and settlements buffered by ``with client.transaction():`` and committed as one
    request when the block ends without an exception (daemon/README.md §12): on one entity, at most
    100 operations, within 2 minutes of the first. ``result`` holds the sequence numbers
    and settlement results after the commit."""

    TIMEOUT_S = 120.0

    def __init__(self) -> None:
        self.entity: str | None = None
        self.messages: list[Message] = []
        self.settlements: list[TxSettle] = []
        self.started = 0.0
        self.result: dict[str, Any] | None = None

    def add(
        self,
        entity: str,
        messages: Sequence[Message] = (),
        settlements: Sequence[TxSettle] = (),
    ) -> None:
        if self.entity is None:
            self.entity = entity
            self.started = time.monotonic()
        elif entity != self.entity:
            raise InvalidOperation(
                f"a transaction works on one entity: it began on {self.entity!r}, not {entity!r}"
            )
        self.messages += messages
        self.settlements += settlements

    def commit_call(self, namespace: str) -> Call:
        assert self.entity is not None
        if time.monotonic() - self.started > self.TIMEOUT_S:
            raise InvalidOperation(
                "the transaction timed out: more than 2 minutes since its first operation"
            )
        args = Transact(namespace, self.entity, self.messages, self.settlements)
        return "transact", args, _plain


def _refuse_in_transaction(tx: Transaction | None, what: str) -> None:
    if tx is not None:
        # daemon/README.md §12.1
        raise InvalidOperation(
            f"{what} cannot be part of a transaction: receive in peek-lock first, then settle "
            "inside the transaction"
        )


def _tx_settlements(
    op: str,
    lock_tokens: Tokens,
    properties: dict[str, Any] | None,
    reason: str | None,
    description: str | None,
) -> tuple[list[TxSettle], list[dict[str, Any]]]:
    tokens = convert.lock_tokens(lock_tokens)
    settles = [TxSettle(op, t, properties, reason, description) for t in tokens]
    return settles, [{"lock_token": t, "pending": True} for t in tokens]


class _Answered(Exception):
    """An error the daemon replied with (as opposed to a failure to reach it)."""

    def __init__(self, error: SbctlError) -> None:
        super().__init__(error.message)
        self.error = error


class _Calls:
    """Request builders: (op, args, how to read the result). No I/O here."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def ping(self) -> Call:
        return "ping", Empty(), _plain

    def status(self) -> Call:
        return "status", Empty(), _plain

    def shutdown(self) -> Call:
        return "shutdown", Empty(), _plain

    def namespace_create(
        self,
        name: str,
        sku: str = "standard",
        premium_messaging_partitions: int = 1,
        capacity: int = 1,
        credits_per_second: int | None = None,
        ops_per_unit: int | None = None,
    ) -> Call:
        args = NamespaceCreate(
            name, sku, premium_messaging_partitions, capacity, credits_per_second, ops_per_unit
        )
        return "namespace_create", args, _plain

    def namespace_update(
        self,
        name: str,
        credits_per_second: int | None = None,
        capacity: int | None = None,
        ops_per_unit: int | None = None,
    ) -> Call:
        args = NamespaceUpdate(name, credits_per_second, capacity, ops_per_unit)
        return "namespace_update", args, _plain

    def namespace_credits(self, name: str) -> Call:
        return "namespace_credits", NamespaceRef(name), _plain

    def namespace_metrics(self, name: str) -> Call:
        return "namespace_metrics", NamespaceRef(name), _plain

    def namespace_pair(
        self,
        primary: str,
        secondary: str,
        backlog_queue_count: int,
        failover_interval_ms: Duration,
        ping_primary_interval_ms: Duration,
        enable_syphon: bool,
    ) -> Call:
        args = NamespacePair(
            primary,
            secondary,
            backlog_queue_count,
            convert.duration_ms(failover_interval_ms, "failover_interval_ms"),
            convert.duration_ms(ping_primary_interval_ms, "ping_primary_interval_ms"),
            enable_syphon,
        )
        return "namespace_pair", args, _plain

    def namespace_unpair(self, primary: str) -> Call:
        return "namespace_unpair", NamespaceRef(primary), _plain

    def namespace_pair_status(self, primary: str) -> Call:
        return "namespace_pair_status", NamespaceRef(primary), _plain

    def namespace_get(self, name: str) -> Call:
        return "namespace_get", NamespaceRef(name), _plain

    def amqp_endpoint(self, name: str) -> Call:
        return "amqp_endpoint", NamespaceRef(name), _plain

    def namespace_list(self) -> Call:
        return "namespace_list", Empty(), _plain

    def namespace_delete(self, name: str) -> Call:
        return "namespace_delete", NamespaceRef(name), _plain

    def queue_create(self, name: str, options: dict[str, Any]) -> Call:
        return "queue_create", EntityCreate(self.namespace, name, convert.options(options)), _plain

    def queue_update(self, name: str, options: dict[str, Any]) -> Call:
        return "queue_update", EntityCreate(self.namespace, name, convert.options(options)), _plain

    def queue_get(self, name: str) -> Call:
        return "queue_get", EntityRef(self.namespace, name), _plain

    def queue_list(self) -> Call:
        return "queue_list", NamespaceScope(self.namespace), _plain

    def queue_delete(self, name: str) -> Call:
        return "queue_delete", EntityRef(self.namespace, name), _plain

    def topic_create(self, name: str, options: dict[str, Any]) -> Call:
        return "topic_create", EntityCreate(self.namespace, name, convert.options(options)), _plain

    def topic_update(self, name: str, options: dict[str, Any]) -> Call:
        return "topic_update", EntityCreate(self.namespace, name, convert.options(options)), _plain

    def topic_get(self, name: str) -> Call:
        return "topic_get", EntityRef(self.namespace, name), _plain

    def topic_list(self) -> Call:
        return "topic_list", NamespaceScope(self.namespace), _plain

    def topic_delete(self, name: str) -> Call:
        return "topic_delete", EntityRef(self.namespace, name), _plain

    def subscription_create(self, topic: str, name: str, options: dict[str, Any]) -> Call:
        args = SubscriptionCreate(self.namespace, topic, name, convert.options(options))
        return "subscription_create", args, _plain

    def subscription_update(self, topic: str, name: str, options: dict[str, Any]) -> Call:
        args = SubscriptionCreate(self.namespace, topic, name, convert.options(options))
        return "subscription_update", args, _plain

    def subscription_get(self, topic: str, name: str) -> Call:
        return "subscription_get", SubscriptionRef(self.namespace, topic, name), _plain

    def subscription_list(self, topic: str) -> Call:
        return "subscription_list", TopicScope(self.namespace, topic), _plain

    def subscription_delete(self, topic: str, name: str) -> Call:
        return "subscription_delete", SubscriptionRef(self.namespace, topic, name), _plain

    def rule_create(
        self,
        topic: str,
        subscription: str,
        name: str,
        filter: dict[str, Any] | None,
        action: str | None,
    ) -> Call:
        args = RuleCreate(self.namespace, topic, subscription, name, filter, action)
        return "rule_create", args, _plain

    def rule_get(self, topic: str, subscription: str, name: str) -> Call:
        return "rule_get", RuleRef(self.namespace, topic, subscription, name), _plain

    def rule_list(self, topic: str, subscription: str) -> Call:
        return "rule_list", SubscriptionRef(self.namespace, topic, subscription), _plain

    def rule_delete(self, topic: str, subscription: str, name: str) -> Call:
        return "rule_delete", RuleRef(self.namespace, topic, subscription, name), _plain

    def send(self, entity: str, messages: Sequence[Message], report: bool = False) -> Call:
        # The clients' send() already turned what the caller passed into Messages.
        return "send", Send(self.namespace, entity, list(messages), report), _plain

    def peek(self, entity: str, count: int, from_sequence: int | None) -> Call:
        return "peek", Peek(self.namespace, entity, count, from_sequence), _delivered

    def receive(
        self,
        entity: str,
        count: int,
        max_wait: float | timedelta,
        mode: str,
        session: str | None = None,
    ) -> Call:
        wait_ms = max(0, int(convert.wait_seconds(max_wait) * 1000))
        args = Receive(self.namespace, entity, count, wait_ms, mode, session)
        return "receive", args, _delivered

    def session_accept(self, entity: str, session_id: str | None) -> Call:
        return "session_accept", SessionAccept(self.namespace, entity, session_id), _plain

    def session_token(self, op: str, entity: str, token: str) -> Call:
        return op, SessionToken(self.namespace, entity, token), _plain

    def session_list(self, entity: str) -> Call:
        return "session_list", EntityPath(self.namespace, entity), _plain

    def session_get_state(self, entity: str, session_id: str) -> Call:
        return "session_get_state", SessionRef(self.namespace, entity, session_id), _state

    def session_set_state(self, entity: str, session_id: str, state: bytes | str | None) -> Call:
        args = SessionState(self.namespace, entity, session_id, convert.state_bytes(state))
        return "session_set_state", args, _plain

    def settle(
        self,
        entity: str,
        op: str,
        lock_tokens: Tokens,
        properties: dict[str, Any] | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> Call:
        tokens = convert.lock_tokens(lock_tokens)
        args = Settle(self.namespace, entity, op, tokens, properties, reason, description)
        return "settle", args, _plain

    def receive_deferred(self, entity: str, sequence_numbers: Sequence[int], mode: str) -> Call:
        args = ReceiveDeferred(self.namespace, entity, list(sequence_numbers), mode)
        return "receive_deferred", args, _delivered

    def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int]) -> Call:
        args = SequenceNumbers(self.namespace, entity, list(sequence_numbers))
        return "cancel_scheduled", args, _plain

    def purge(self, entity: str) -> Call:
        return "purge", EntityPath(self.namespace, entity), _plain

    def dlq_resubmit(self, entity: str, count: int | None, to: str | None) -> Call:
        return "dlq_resubmit", Resubmit(self.namespace, entity, count, to), _plain

    def fault_add(
        self,
        entity: str | None,
        partitions: Sequence[int],
        kind: str,
        latency_ms: Duration | None,
    ) -> Call:
        latency = None if latency_ms is None else convert.duration_ms(latency_ms, "latency_ms")
        args = FaultAdd(self.namespace, entity, list(partitions), kind, latency)
        return "fault_add", args, _plain

    def fault_list(self, all_namespaces: bool) -> Call:
        return "fault_list", FaultList(None if all_namespaces else self.namespace), _plain

    def fault_clear(self, ids: Sequence[str], all_namespaces: bool) -> Call:
        namespace = None if ids or all_namespaces else self.namespace
        return "fault_clear", FaultClear(namespace, list(ids), all_namespaces), _plain

    def load_adopt(self, entity: str, load_id: str, files: Sequence[tuple[int, str]]) -> Call:
        staged = [StagedFile(pid, path) for pid, path in files]
        return "load_adopt", LoadAdopt(self.namespace, entity, load_id, staged), _plain

    def load_status(self, entity: str, load_id: str) -> Call:
        return "load_status", LoadRef(self.namespace, entity, load_id), _plain


# Adoption checks and fdatasyncs every staged byte: allow it time on large loads.
ADOPT_TIMEOUT = 1800.0


def _scheduled(messages: Sendable, at_ms: Instant) -> list[Message]:
    at = convert.instant_ms(at_ms, "at_ms")
    return [
        msgspec.structs.replace(m, scheduled_enqueue_time_ms=at) for m in convert.messages(messages)
    ]


def _policy(total: int, backoff: float, backoff_max: float) -> RetryPolicy:
    if not 0 <= total <= 100:  # daemon/README.md §16.4: MaxRetries 0-100
        raise InvalidOperation("retry_total must be between 0 and 100")
    return RetryPolicy(total=total, backoff=backoff, max_backoff=backoff_max)


def _gave_up(error: SbctlError, retries: int) -> SbctlError:
    """The error to raise once the retry policy gives up: after retries of a transient
    error it says how many were made."""
    if not retries or not error.transient:
        return error
    times = "retry" if retries == 1 else "retries"
    return type(error)(f"{error.message} (gave up after {retries} {times})", retry_after=None)


def _raise_or_result(reply_ok: bool, raw: msgspec.Raw, read: Callable[[msgspec.Raw], Any]) -> Any:
    if not reply_ok:
        err = decode_result(raw)
        raise SbctlError.from_wire(err if isinstance(err, dict) else {"message": str(err)})
    return read(raw)


class Client:
    """Blocking client; one request at a time on one Unix-socket connection."""

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        namespace: str | None = None,
        timeout: float | None = 120.0,
        retry_total: int = DEFAULT_TOTAL,
        retry_backoff_factor: float = DEFAULT_BACKOFF,
        retry_backoff_max: float = DEFAULT_MAX,
    ) -> None:
        """``retry_*``: the retry policy (daemon/README.md §16.5; :mod:`sbctl.retry`), 0 retries
        turns it off. Only transient errors the daemon answers (ServerBusy,
        ServiceTimeout, ServiceCommunicationProblem from an unavailable store) are retried;
        a daemon that cannot be reached is reported at once."""
        self.socket_path = str(socket_path or paths.default_socket())
        self.namespace = namespace or os.environ.get("SBCTL_NAMESPACE") or DEFAULT_NAMESPACE
        self.timeout = timeout
        self.retry = _policy(retry_total, retry_backoff_factor, retry_backoff_max)
        self._calls = _Calls(self.namespace)
        self._sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._tx: Transaction | None = None
        # daemon/README.md §5.3: a peek without a start continues after the last message peeked.
        self._peek_next: dict[str, int] = {}

    # -- plumbing
    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(self.timeout)
            try:
                sock.connect(self.socket_path)
            except OSError as exc:
                sock.close()
                raise _unreachable(self.socket_path, exc) from exc
            self._sock = sock
        return self._sock

    def _recv_exact(self, sock: socket.socket, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ServiceCommunicationProblem("the sbctl daemon closed the connection")
            buf += chunk
        return bytes(buf)

    def _call(self, call: Call, timeout: float | None = None) -> Any:
        attempt = 0
        while True:
            try:
                return self._call_once(call, timeout)
            except _Answered as answered:
                wait = self.retry.delay(answered.error, attempt)
                if wait is None:
                    raise _gave_up(answered.error, attempt) from None
            attempt += 1
            time.sleep(wait)

    def _call_once(self, call: Call, timeout: float | None = None) -> Any:
        op, args, read = call
        sock = self._connect()
        req_id = next(self._ids)
        try:
            if timeout is not None:
                sock.settimeout(None if self.timeout is None else max(self.timeout, timeout))
            sock.sendall(encode_request(req_id, op, args))
            (n,) = LENGTH.unpack(self._recv_exact(sock, 4))
            if n > MAX_REPLY_BYTES:
                raise GeneralError(f"reply frame of {n} bytes exceeds the client limit")
            reply = decode_reply(self._recv_exact(sock, n))
        except OSError as exc:
            self.close()
            raise ServiceCommunicationProblem(f"lost the sbctl daemon connection: {exc}") from exc
        except SbctlError:
            self.close()
            raise
        finally:
            if timeout is not None and self._sock is not None:
                self._sock.settimeout(self.timeout)
        if reply.id == 0 and not reply.ok:
            pass  # the daemon could not read the request's id: the error is still ours
        elif reply.id != req_id:
            self.close()
            raise GeneralError(f"reply id {reply.id} does not match request {req_id}")
        try:
            return _raise_or_result(reply.ok, reply.result, read)
        except SbctlError as exc:
            raise _Answered(exc) from None

    def close(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def using(self, namespace: str) -> Client:
        """The same connection settings, another namespace."""
        return Client(
            self.socket_path,
            namespace=namespace,
            timeout=self.timeout,
            retry_total=self.retry.total,
            retry_backoff_factor=self.retry.backoff,
            retry_backoff_max=self.retry.max_backoff,
        )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """Buffer this client's sends and settlements and commit them at once, all or
        nothing (daemon/README.md §12); an exception in the block discards them."""
        if self._tx is not None:
            raise InvalidOperation("a transaction is already open on this client")
        tx = self._tx = Transaction()
        try:
            yield tx
        finally:
            self._tx = None
        if tx.entity is not None:
            tx.result = self._call(tx.commit_call(self.namespace))

    # -- daemon
    def ping(self) -> dict[str, Any]:
        return self._call(self._calls.ping())

    def status(self) -> dict[str, Any]:
        return self._call(self._calls.status())

    def shutdown(self) -> dict[str, Any]:
        return self._call(self._calls.shutdown())

    # -- namespaces
    def namespace_create(
        self,
        name: str,
        sku: str = "standard",
        premium_messaging_partitions: int = 1,
        capacity: int = 1,
        credits_per_second: int | None = None,
        ops_per_unit: int | None = None,
    ) -> dict[str, Any]:
        """``credits_per_second`` (Basic/Standard; 0: unlimited; None: the daemon's
        default) and ``ops_per_unit`` (Premium) set the namespace's throttling."""
        call = self._calls.namespace_create(
            name, sku, premium_messaging_partitions, capacity, credits_per_second, ops_per_unit
        )
        return self._call(call)

    def namespace_update(
        self,
        name: str,
        credits_per_second: int | None = None,
        capacity: int | None = None,
        ops_per_unit: int | None = None,
    ) -> dict[str, Any]:
        """Change throttling at runtime; ``capacity`` scales a premium namespace."""
        return self._call(
            self._calls.namespace_update(name, credits_per_second, capacity, ops_per_unit)
        )

    def namespace_credits(self, name: str | None = None) -> dict[str, Any]:
        """Throttling state: credits left, consumption by kind, throttled requests."""
        return self._call(self._calls.namespace_credits(name or self.namespace))

    def namespace_metrics(self, name: str | None = None) -> dict[str, Any]:
        """Throttled and served requests, and the daemon's CPU and memory."""
        return self._call(self._calls.namespace_metrics(name or self.namespace))

    def overview(self, name: str | None = None) -> dict[str, Any]:
        """A namespace at a glance (``sbctl top``): credits, every entity with its
        partitions, faults, pairing. Costs the namespace no credits."""
        return self._call(("overview", NamespaceRef(name or self.namespace), _plain))

    def namespace_pair(
        self,
        primary: str,
        secondary: str,
        *,
        backlog_queue_count: int = 10,
        failover_interval_ms: Duration = 60_000,
        ping_primary_interval_ms: Duration = 60_000,
        enable_syphon: bool = False,
    ) -> dict[str, Any]:
        """Pair ``primary`` with ``secondary`` for send availability (daemon/README.md §0.3): the
        daemon creates the missing backlog queues in ``secondary`` and, from then on,
        fails sends to ``primary`` over to them. Returns the pairing's status."""
        return self._call(
            self._calls.namespace_pair(
                primary,
                secondary,
                backlog_queue_count,
                failover_interval_ms,
                ping_primary_interval_ms,
                enable_syphon,
            )
        )

    def namespace_unpair(self, primary: str) -> dict[str, Any]:
        """Stop failing ``primary``'s sends over; the backlog queues stay as they are."""
        return self._call(self._calls.namespace_unpair(primary))

    def namespace_pair_status(self, primary: str) -> dict[str, Any]:
        """State (Active, FailedOver, Faulted and why), failing and failed-over entities,
        backlog queues with what they hold, and the counters (moved, pings, failovers)."""
        return self._call(self._calls.namespace_pair_status(primary))

    def namespace_get(self, name: str) -> dict[str, Any]:
        return self._call(self._calls.namespace_get(name))

    def amqp_endpoint(self, name: str) -> dict[str, Any]:
        """The AMQP port serving namespace ``name`` and its SAS key name and key."""
        return self._call(self._calls.amqp_endpoint(name))

    def namespace_list(self) -> list[dict[str, Any]]:
        return self._call(self._calls.namespace_list())

    def namespace_delete(self, name: str) -> dict[str, Any]:
        return self._call(self._calls.namespace_delete(name))

    # -- queues
    def queue_create(self, name: str, **options: Any) -> dict[str, Any]:
        return self._call(self._calls.queue_create(name, options))

    def queue_update(self, name: str, **options: Any) -> dict[str, Any]:
        return self._call(self._calls.queue_update(name, options))

    def queue_get(self, name: str) -> dict[str, Any]:
        return self._call(self._calls.queue_get(name))

    def queue_list(self) -> list[dict[str, Any]]:
        return self._call(self._calls.queue_list())

    def queue_delete(self, name: str) -> dict[str, Any]:
        return self._call(self._calls.queue_delete(name))

    # -- topics, subscriptions and rules (daemon/README.md §10)
    def topic_create(self, name: str, **options: Any) -> dict[str, Any]:
        return self._call(self._calls.topic_create(name, options))

    def topic_update(self, name: str, **options: Any) -> dict[str, Any]:
        return self._call(self._calls.topic_update(name, options))

    def topic_get(self, name: str) -> dict[str, Any]:
        return self._call(self._calls.topic_get(name))

    def topic_list(self) -> list[dict[str, Any]]:
        return self._call(self._calls.topic_list())

    def topic_delete(self, name: str) -> dict[str, Any]:
        return self._call(self._calls.topic_delete(name))

    def subscription_create(self, topic: str, name: str, **options: Any) -> dict[str, Any]:
        return self._call(self._calls.subscription_create(topic, name, options))

    def subscription_update(self, topic: str, name: str, **options: Any) -> dict[str, Any]:
        return self._call(self._calls.subscription_update(topic, name, options))

    def subscription_get(self, topic: str, name: str) -> dict[str, Any]:
        return self._call(self._calls.subscription_get(topic, name))

    def subscription_list(self, topic: str) -> list[dict[str, Any]]:
        return self._call(self._calls.subscription_list(topic))

    def subscription_delete(self, topic: str, name: str) -> dict[str, Any]:
        return self._call(self._calls.subscription_delete(topic, name))

    def rule_create(
        self,
        topic: str,
        subscription: str,
        name: str,
        filter: dict[str, Any] | None = None,
        action: str | None = None,
    ) -> dict[str, Any]:
        """Add a rule; ``filter`` as in :class:`sbctl.protocol.RuleCreate` (None: TrueFilter)."""
        return self._call(self._calls.rule_create(topic, subscription, name, filter, action))

    def rule_get(self, topic: str, subscription: str, name: str) -> dict[str, Any]:
        return self._call(self._calls.rule_get(topic, subscription, name))

    def rule_list(self, topic: str, subscription: str) -> list[dict[str, Any]]:
        return self._call(self._calls.rule_list(topic, subscription))

    def rule_delete(self, topic: str, subscription: str, name: str) -> dict[str, Any]:
        return self._call(self._calls.rule_delete(topic, subscription, name))

    # -- data plane
    def send(self, entity: str, messages: Sendable) -> list[int]:
        """Send a batch (atomically stored); returns the sequence numbers assigned.
        ``messages``: Messages or bodies (bytes, or str sent as UTF-8), or just one."""
        messages = convert.messages(messages)
        if self._tx is not None:
            self._tx.add(entity, messages=messages)
            return []
        return self._call(self._calls.send(entity, messages))

    def send_report(self, entity: str, messages: Sequence[Message]) -> dict[str, Any]:
        """Send like :meth:`send`; the answer also says where a paired primary diverted the
        batch: ``{"sequence_numbers": [...], "diverted_to": <backlog queue> or None,
        "diverted_namespace": <secondary>}`` (diverted messages answer sequence number 0).
        Within a transaction it sends as :meth:`send` does (the numbers come at commit)."""
        if self._tx is not None:
            return {"sequence_numbers": self.send(entity, messages), "diverted_to": None}
        result: dict[str, Any] = self._call(self._calls.send(entity, messages, report=True))
        return result

    def peek(
        self, entity: str, count: int = 1, from_sequence: int | None = None
    ) -> list[ReceivedMessage]:
        """Browse (daemon/README.md §5); without ``from_sequence``, continue after the last message
        this client peeked on ``entity``."""
        start = self._peek_next.get(entity) if from_sequence is None else from_sequence
        got: list[ReceivedMessage] = self._call(self._calls.peek(entity, count, start))
        if got:
            self._peek_next[entity] = got[-1].sequence_number + 1
        return got

    def receive(
        self,
        entity: str,
        count: int = 1,
        max_wait: float | timedelta = 0.0,
        mode: str = "peek-lock",
        session_lock_token: str | None = None,
    ) -> list[ReceivedMessage]:
        """Receive; with ``session_lock_token`` (from :meth:`accept_session`), that
        session's messages in order."""
        _refuse_in_transaction(self._tx, "receive")
        wait = convert.wait_seconds(max_wait)
        call = self._calls.receive(entity, count, wait, mode, session_lock_token)
        return self._call(call, timeout=wait + 30)

    def settle(
        self,
        entity: str,
        op: str,
        lock_tokens: Tokens,
        properties: dict[str, Any] | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> list[dict[str, Any]]:
        """Settle locked messages; returns one result per token (``ok`` or ``error``)."""
        if self._tx is not None:
            settles, pending = _tx_settlements(op, lock_tokens, properties, reason, description)
            self._tx.add(entity, settlements=settles)
            return pending
        call = self._calls.settle(entity, op, lock_tokens, properties, reason, description)
        return self._call(call)

    def complete(self, entity: str, lock_tokens: Tokens) -> list[dict[str, Any]]:
        return self.settle(entity, "complete", lock_tokens)

    def abandon(
        self,
        entity: str,
        lock_tokens: Tokens,
        properties: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        return self.settle(entity, "abandon", lock_tokens, properties)

    def defer(
        self, entity: str, lock_tokens: Tokens, properties: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        return self.settle(entity, "defer", lock_tokens, properties)

    def dead_letter(
        self,
        entity: str,
        lock_tokens: Tokens,
        reason: str | None = None,
        description: str | None = None,
        properties: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        return self.settle(entity, "dead-letter", lock_tokens, properties, reason, description)

    def renew_lock(self, entity: str, lock_tokens: Tokens) -> list[dict[str, Any]]:
        return self.settle(entity, "renew-lock", lock_tokens)

    def receive_deferred(
        self, entity: str, sequence_numbers: Sequence[int], mode: str = "peek-lock"
    ) -> list[ReceivedMessage]:
        _refuse_in_transaction(self._tx, "receive_deferred")
        return self._call(self._calls.receive_deferred(entity, sequence_numbers, mode))

    def schedule(self, entity: str, messages: Sendable, at_ms: Instant) -> list[int]:
        """Send messages to appear at ``at_ms`` (daemon/README.md §7.1); returns their numbers."""
        return self.send(entity, _scheduled(messages, at_ms))

    def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int]) -> dict[str, Any]:
        return self._call(self._calls.cancel_scheduled(entity, sequence_numbers))

    def purge(self, entity: str) -> dict[str, Any]:
        """Delete every message of a queue, or of ``queue/$deadletterqueue``."""
        return self._call(self._calls.purge(entity))

    def dlq_resubmit(
        self, entity: str, count: int | None = None, to: str | None = None
    ) -> dict[str, Any]:
        """Move dead-lettered messages back to the queue (or to ``to``)."""
        return self._call(self._calls.dlq_resubmit(entity, count, to))

    # -- faults (test tooling, sbctld.faults)
    def fault_add(
        self,
        entity: str | None = None,
        partitions: Sequence[int] = (),
        *,
        kind: str = "unavailable",
        latency_ms: Duration | None = None,
    ) -> dict[str, Any]:
        """Make this namespace's stores unavailable (or, with ``kind="slow"``, answer
        ``latency_ms`` late): every one, ``entity``'s (a queue or topic), or only its
        ``partitions``. Returns the fault, with its id."""
        return self._call(self._calls.fault_add(entity, partitions, kind, latency_ms))

    def fault_list(self, *, all_namespaces: bool = False) -> list[dict[str, Any]]:
        return self._call(self._calls.fault_list(all_namespaces))

    def fault_clear(
        self, ids: Sequence[str] = (), *, all_namespaces: bool = False
    ) -> dict[str, Any]:
        """Clear the faults ``ids``, else every fault of this namespace (of every
        namespace with ``all_namespaces``); ``cleared`` lists them."""
        return self._call(self._calls.fault_clear(ids, all_namespaces))

    def accept_session(self, entity: str, session_id: str | None = None) -> dict[str, Any]:
        """Lock ``session_id`` (or the next session with messages) for this caller: returns
        ``session_id``, ``session_lock_token`` and ``locked_until_utc`` (daemon/README.md §9.6)."""
        return self._call(self._calls.session_accept(entity, session_id))

    def renew_session_lock(self, entity: str, session_lock_token: str) -> dict[str, Any]:
        call = self._calls.session_token("session_renew", entity, session_lock_token)
        return self._call(call)

    def close_session(self, entity: str, session_lock_token: str) -> dict[str, Any]:
        call = self._calls.session_token("session_close", entity, session_lock_token)
        return self._call(call)

    def list_sessions(self, entity: str) -> list[dict[str, Any]]:
        return self._call(self._calls.session_list(entity))

    def get_session_state(self, entity: str, session_id: str) -> bytes | None:
        return self._call(self._calls.session_get_state(entity, session_id))

    def set_session_state(
        self, entity: str, session_id: str, state: bytes | str | None
    ) -> dict[str, Any]:
        """Set (or, with None, clear) a session's state (daemon/README.md §9.8)."""
        return self._call(self._calls.session_set_state(entity, session_id, state))

    # -- bulk load (spark-load; daemon/README.md §0.4.6: charged no credits)
    def load_adopt(
        self, entity: str, load_id: str, files: Sequence[tuple[int, str]]
    ) -> dict[str, Any]:
        """Make staged batch files ``(partition, path)`` the entity's messages, atomically;
        a load id already adopted is a no-op (``adopted`` is then false)."""
        return self._call(self._calls.load_adopt(entity, load_id, files), timeout=ADOPT_TIMEOUT)

    def load_status(self, entity: str, load_id: str) -> dict[str, Any]:
        """``state`` is ``committed`` (with the load's result) or ``unknown``."""
        return self._call(self._calls.load_status(entity, load_id))


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
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[msgspec.Raw], Any]]] = {}
        self._reader_task: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._tx: Transaction | None = None
        # daemon/README.md §5.3: a peek without a start continues after the last message peeked.
        self._peek_next: dict[str, int] = {}
        self._lock = asyncio.Lock()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._lock:
            if self._writer is None:
                try:
                    reader, writer = await asyncio.open_unix_connection(
                        self.socket_path, limit=MAX_REPLY_BYTES
                    )
                except OSError as exc:
                    raise _unreachable(self.socket_path, exc) from exc
                self._reader, self._writer = reader, writer
                self._reader_task = asyncio.get_running_loop().create_task(self._read_loop())
            return self._writer

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reader = self._reader
        error: SbctlError = ServiceCommunicationProblem("the sbctl daemon closed the connection")
        try:
            while True:
                head = await reader.readexactly(4)
                (n,) = LENGTH.unpack(head)
                reply = decode_reply(await reader.readexactly(n))
                if reply.id == 0 and not reply.ok and len(self._pending) == 1:
                    reply.id = next(iter(self._pending))  # an unreadable request's error
                fut, read = self._pending.pop(reply.id, (None, None))
                if fut is None or read is None or fut.done():
                    continue
                try:
                    fut.set_result(_raise_or_result(reply.ok, reply.result, read))
                except SbctlError as exc:
                    fut.set_exception(_Answered(exc))
        except (asyncio.IncompleteReadError, OSError) as exc:
            error = ServiceCommunicationProblem(f"lost the sbctl daemon connection: {exc}")
        finally:
            for fut, _ in self._pending.values():
                if not fut.done():
                    fut.set_exception(error)
            self._pending.clear()
            self._writer = None

    async def _call(self, call: Call) -> Any:
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
        writer = await self._connect()
        req_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = (fut, read)
        writer.write(encode_request(req_id, op, args))
        return await fut

    async def aclose(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader_task
            self._reader_task = None

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
        if self._tx is not None:
            raise InvalidOperation("a transaction is already open on this client")
        tx = self._tx = Transaction()
        try:
            yield tx
        finally:
            self._tx = None
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
        return await self._call(self._calls.namespace_credits(name or self.namespace))

    async def namespace_metrics(self, name: str | None = None) -> dict[str, Any]:
        return await self._call(self._calls.namespace_metrics(name or self.namespace))

    async def overview(self, name: str | None = None) -> dict[str, Any]:
        """:meth:`Client.overview`."""
        result: dict[str, Any] = await self._call(
            ("overview", NamespaceRef(name or self.namespace), _plain)
        )
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
        """Add a rule; ``filter`` as in :class:`sbctl.protocol.RuleCreate` (None: TrueFilter)."""
        return await self._call(self._calls.rule_create(topic, subscription, name, filter, action))

    async def rule_get(self, topic: str, subscription: str, name: str) -> dict[str, Any]:
        return await self._call(self._calls.rule_get(topic, subscription, name))

    async def rule_list(self, topic: str, subscription: str) -> list[dict[str, Any]]:
        return await self._call(self._calls.rule_list(topic, subscription))

    async def rule_delete(self, topic: str, subscription: str, name: str) -> dict[str, Any]:
        return await self._call(self._calls.rule_delete(topic, subscription, name))

    async def send(self, entity: str, messages: Sendable) -> list[int]:
        messages = convert.messages(messages)
        if self._tx is not None:
            self._tx.add(entity, messages=messages)
            return []
        return await self._call(self._calls.send(entity, messages))

    async def send_report(self, entity: str, messages: Sequence[Message]) -> dict[str, Any]:
        """:meth:`Client.send_report`."""
        if self._tx is not None:
            return {"sequence_numbers": await self.send(entity, messages), "diverted_to": None}
        result: dict[str, Any] = await self._call(self._calls.send(entity, messages, report=True))
        return result

    async def peek(
        self, entity: str, count: int = 1, from_sequence: int | None = None
    ) -> list[ReceivedMessage]:
        start = self._peek_next.get(entity) if from_sequence is None else from_sequence
        got: list[ReceivedMessage] = await self._call(self._calls.peek(entity, count, start))
        if got:
            self._peek_next[entity] = got[-1].sequence_number + 1
        return got

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
        _refuse_in_transaction(self._tx, "receive")
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
        if self._tx is not None:
            settles, pending = _tx_settlements(op, lock_tokens, properties, reason, description)
            self._tx.add(entity, settlements=settles)
            return pending
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
        self, entity: str, sequence_numbers: Sequence[int], mode: str = "peek-lock"
    ) -> list[ReceivedMessage]:
        _refuse_in_transaction(self._tx, "receive_deferred")
        return await self._call(self._calls.receive_deferred(entity, sequence_numbers, mode))

    async def schedule(self, entity: str, messages: Sendable, at_ms: Instant) -> list[int]:
        """Send messages to appear at ``at_ms`` (daemon/README.md §7.1); returns their numbers."""
        return await self.send(entity, _scheduled(messages, at_ms))

    async def cancel_scheduled(
        self, entity: str, sequence_numbers: Sequence[int]
    ) -> dict[str, Any]:
        return await self._call(self._calls.cancel_scheduled(entity, sequence_numbers))

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

    async def accept_session(self, entity: str, session_id: str | None = None) -> dict[str, Any]:
        """Lock ``session_id`` (or the next session with messages) for this caller: returns
        ``session_id``, ``session_lock_token`` and ``locked_until_utc`` (daemon/README.md §9.6)."""
        return await self._call(self._calls.session_accept(entity, session_id))

    async def renew_session_lock(self, entity: str, session_lock_token: str) -> dict[str, Any]:
        call = self._calls.session_token("session_renew", entity, session_lock_token)
        return await self._call(call)

    async def close_session(self, entity: str, session_lock_token: str) -> dict[str, Any]:
        call = self._calls.session_token("session_close", entity, session_lock_token)
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
