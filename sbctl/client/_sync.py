"""The blocking client, :class:`Client` (what the CLI uses)."""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sbctl import convert
from sbctl.convert import Duration, Instant, Sendable
from sbctl.core import paths
from sbctl.core.errors import (
    GeneralError,
    InvalidOperation,
    SbctlError,
    ServiceCommunicationProblem,
)
from sbctl.core.messages import ReceivedMessage
from sbctl.core.protocol import (
    LENGTH,
    MAX_REPLY_BYTES,
    decode_reply,
    encode_request,
)
from sbctl.core.records import Message
from sbctl.retry import DEFAULT_BACKOFF, DEFAULT_MAX, DEFAULT_TOTAL

if TYPE_CHECKING:
    from sbctl.core.messages import Tokens
from sbctl.client._calls import (
    ADOPT_TIMEOUT,
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

    def _call(self, call: Call | Local, timeout: float | None = None) -> Any:
        if isinstance(call, Local):
            return call.value
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
        if self._calls.tx is not None:
            raise InvalidOperation("a transaction is already open on this client")
        tx = self._calls.tx = Transaction()
        try:
            yield tx
        finally:
            self._calls.tx = None
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
        return self._call(self._calls.namespace_credits(name))

    def namespace_metrics(self, name: str | None = None) -> dict[str, Any]:
        """Throttled and served requests, and the daemon's CPU and memory."""
        return self._call(self._calls.namespace_metrics(name))

    def overview(self, name: str | None = None) -> dict[str, Any]:
        """A namespace at a glance (``sbctl top``): credits, every entity with its
        partitions, faults, pairing. Costs the namespace no credits."""
        return self._call(self._calls.overview(name))

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

    def namespace_set_key(self, name: str, key_name: str, key: str) -> dict[str, Any]:
        """Set namespace ``name``'s SAS key name and key: tokens signed with the old key are
        refused from now on (AMQP and HTTP); kept across restarts."""
        return self._call(self._calls.namespace_set_key(name, key_name, key))

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
        """Add a rule; ``filter`` as in :class:`sbctl.core.protocol.RuleCreate`
        (None: TrueFilter)."""
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
        return self._call(self._calls.send(entity, messages))

    def send_report(self, entity: str, messages: Sequence[Message]) -> dict[str, Any]:
        """Send like :meth:`send`; the answer also says where a paired primary diverted the
        batch: ``{"sequence_numbers": [...], "diverted_to": <backlog queue> or None,
        "diverted_namespace": <secondary>}`` (diverted messages answer sequence number 0).
        Within a transaction it sends as :meth:`send` does (the numbers come at commit)."""
        result: dict[str, Any] = self._call(self._calls.send_report(entity, messages))
        return result

    def peek(
        self, entity: str, count: int = 1, from_sequence: int | None = None
    ) -> list[ReceivedMessage]:
        """Browse (daemon/README.md §5); without ``from_sequence``, continue after the last message
        this client peeked on ``entity``."""
        return self._call(self._calls.peek(entity, count, from_sequence))

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
        call = self._calls.receive(entity, count, max_wait, mode, session_lock_token)
        return self._call(call, timeout=convert.wait_seconds(max_wait) + 30)

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
        self,
        entity: str,
        sequence_numbers: Sequence[int],
        mode: str = "peek-lock",
        session_lock_token: str | None = None,
    ) -> list[ReceivedMessage]:
        """Deferred messages by sequence number; on a session-enabled entity those of the
        session ``session_lock_token`` (from :meth:`accept_session`) holds."""
        call = self._calls.receive_deferred(entity, sequence_numbers, mode, session_lock_token)
        return self._call(call)

    def schedule(self, entity: str, messages: Sendable, at_ms: Instant) -> list[int]:
        """Send messages to appear at ``at_ms`` (daemon/README.md §7.1); returns their numbers."""
        return self.send(entity, _scheduled(messages, at_ms))

    def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int]) -> dict[str, Any]:
        return self._call(self._calls.cancel_scheduled(entity, sequence_numbers))

    def delete_messages(
        self,
        entity: str,
        count: int,
        before_ms: int | None = None,
        session_id: str | None = None,
    ) -> dict[str, Any]:
        """Delete up to ``count`` of the oldest unlocked messages (enqueued before
        ``before_ms``, of ``session_id``) without receiving them: ``{"deleted": n}``."""
        return self._call(self._calls.delete_messages(entity, count, before_ms, session_id))

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

    def clock_show(self, namespace: str | None = None) -> dict[str, Any]:
        """The namespace's time (``now_utc``) and how far it is ahead of the daemon's clock
        (``offset``, ISO 8601) (daemon/README.md §31)."""
        return self._call(self._calls.clock_show(namespace))

    def clock_advance(self, by: Duration | str, namespace: str | None = None) -> dict[str, Any]:
        """Move the namespace's time forward by ``by`` (a timedelta, milliseconds, or text
        like ``1d``, ``PT1H``); every timer up to the new time runs before it answers."""
        return self._call(self._calls.clock_advance(by, namespace))

    def clock_set(self, at: Instant | str, namespace: str | None = None) -> dict[str, Any]:
        """Move the namespace's time forward to ``at`` (a datetime, epoch milliseconds, or
        ISO 8601 text); refused when that is before its time now."""
        return self._call(self._calls.clock_set(at, namespace))

    def accept_session(self, entity: str, session_id: str | None = None) -> dict[str, Any]:
        """Lock ``session_id`` (or the next session with messages) for this caller: returns
        ``session_id``, ``session_lock_token`` and ``locked_until_utc`` (daemon/README.md §9.6)."""
        return self._call(self._calls.session_accept(entity, session_id))

    def renew_session_lock(self, entity: str, session_lock_token: str) -> dict[str, Any]:
        call = self._calls.session_renew(entity, session_lock_token)
        return self._call(call)

    def close_session(self, entity: str, session_lock_token: str) -> dict[str, Any]:
        call = self._calls.session_close(entity, session_lock_token)
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
