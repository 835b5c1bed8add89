"""What both clients share, free of I/O: the request table (:class:`_Calls`), reply
readers, transactions, retry policy and error helpers.

Rule 1: nothing here opens a socket or waits; :mod:`sbctl.client._sync` and
:mod:`sbctl.client._async` move the frames.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from sbctl import convert
from sbctl.codec import Message
from sbctl.convert import Duration, Instant, Sendable
from sbctl.errors import InvalidOperation, SbctlError, ServiceCommunicationProblem
from sbctl.messages import ReceivedMessage
from sbctl.protocol import (
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
    decode_result,
)
from sbctl.retry import RetryPolicy
from sbctl.wire_errors import error_from_wire

if TYPE_CHECKING:
    from sbctl.messages import Tokens


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

    def overview(self, name: str) -> Call:
        return "overview", NamespaceRef(name), _plain

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
        raise error_from_wire(err if isinstance(err, dict) else {"message": str(err)})
    return read(raw)
