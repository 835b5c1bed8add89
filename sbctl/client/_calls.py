"""What both clients share, free of I/O: what each operation needs (:class:`_Calls`, built
on the declarations of :mod:`sbctl.core.operations`), transactions, retry policy and error
helpers.

Rule 1: nothing here opens a socket or waits; :mod:`sbctl.client._sync` and
:mod:`sbctl.client._async` move the frames.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import msgspec

from sbctl import convert
from sbctl.convert import Duration, Instant, Sendable
from sbctl.core.errors import InvalidOperation, SbctlError, ServiceCommunicationProblem
from sbctl.core.messages import ReceivedMessage
from sbctl.core.operations import OPERATIONS, Call, delivered
from sbctl.core.protocol import StagedFile, TxSettle, decode_result
from sbctl.core.records import Message
from sbctl.core.wire_errors import error_from_wire
from sbctl.retry import RetryPolicy

if TYPE_CHECKING:
    from sbctl.core.messages import Tokens


DEFAULT_NAMESPACE = "sbemulatorns"


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
        return OPERATIONS["transact"].call(namespace, self.entity, self.messages, self.settlements)


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


class Local(NamedTuple):
    """An answer the client gives itself without a request: what a send or a settlement
    buffered in a transaction answers."""

    value: Any


class _Calls:
    """What each operation needs of a client, free of I/O: the request to send (op, args,
    how to read the result: :class:`Call`, built from the declaration in
    :mod:`sbctl.core.operations`), or the answer to give at once (:class:`Local`). It also keeps
    the state both clients share: the open transaction and the peek positions."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.tx: Transaction | None = None
        # daemon/README.md §5.3: a peek without a start continues after the last one peeked.
        self.peek_next: dict[str, int] = {}

    @staticmethod
    def _op(name: str, *fields: Any, **named: Any) -> Call:
        return OPERATIONS[name].call(*fields, **named)

    def ping(self) -> Call:
        return self._op("ping")

    def status(self) -> Call:
        return self._op("status")

    def shutdown(self) -> Call:
        return self._op("shutdown")

    def namespace_create(
        self,
        name: str,
        sku: str = "standard",
        premium_messaging_partitions: int = 1,
        capacity: int = 1,
        credits_per_second: int | None = None,
        ops_per_unit: int | None = None,
    ) -> Call:
        return self._op(
            "namespace_create",
            name,
            sku,
            premium_messaging_partitions,
            capacity,
            credits_per_second,
            ops_per_unit,
        )

    def namespace_update(
        self,
        name: str,
        credits_per_second: int | None = None,
        capacity: int | None = None,
        ops_per_unit: int | None = None,
    ) -> Call:
        return self._op("namespace_update", name, credits_per_second, capacity, ops_per_unit)

    def namespace_credits(self, name: str | None) -> Call:
        return self._op("namespace_credits", name or self.namespace)

    def namespace_metrics(self, name: str | None) -> Call:
        return self._op("namespace_metrics", name or self.namespace)

    def overview(self, name: str | None) -> Call:
        return self._op("overview", name or self.namespace)

    def namespace_pair(
        self,
        primary: str,
        secondary: str,
        backlog_queue_count: int,
        failover_interval_ms: Duration,
        ping_primary_interval_ms: Duration,
        enable_syphon: bool,
    ) -> Call:
        return self._op(
            "namespace_pair",
            primary,
            secondary,
            backlog_queue_count,
            convert.duration_ms(failover_interval_ms, "failover_interval_ms"),
            convert.duration_ms(ping_primary_interval_ms, "ping_primary_interval_ms"),
            enable_syphon,
        )

    def namespace_unpair(self, primary: str) -> Call:
        return self._op("namespace_unpair", primary)

    def namespace_pair_status(self, primary: str) -> Call:
        return self._op("namespace_pair_status", primary)

    def namespace_get(self, name: str) -> Call:
        return self._op("namespace_get", name)

    def namespace_set_key(self, name: str, key_name: str, key: str) -> Call:
        return self._op("namespace_set_key", name, key_name, key)

    def amqp_endpoint(self, name: str) -> Call:
        return self._op("amqp_endpoint", name)

    def namespace_list(self) -> Call:
        return self._op("namespace_list")

    def namespace_delete(self, name: str) -> Call:
        return self._op("namespace_delete", name)

    def queue_create(self, name: str, options: dict[str, Any]) -> Call:
        return self._op("queue_create", self.namespace, name, convert.options(options))

    def queue_update(self, name: str, options: dict[str, Any]) -> Call:
        return self._op("queue_update", self.namespace, name, convert.options(options))

    def queue_get(self, name: str) -> Call:
        return self._op("queue_get", self.namespace, name)

    def queue_list(self) -> Call:
        return self._op("queue_list", self.namespace)

    def queue_delete(self, name: str) -> Call:
        return self._op("queue_delete", self.namespace, name)

    def topic_create(self, name: str, options: dict[str, Any]) -> Call:
        return self._op("topic_create", self.namespace, name, convert.options(options))

    def topic_update(self, name: str, options: dict[str, Any]) -> Call:
        return self._op("topic_update", self.namespace, name, convert.options(options))

    def topic_get(self, name: str) -> Call:
        return self._op("topic_get", self.namespace, name)

    def topic_list(self) -> Call:
        return self._op("topic_list", self.namespace)

    def topic_delete(self, name: str) -> Call:
        return self._op("topic_delete", self.namespace, name)

    def subscription_create(self, topic: str, name: str, options: dict[str, Any]) -> Call:
        options = convert.options(options)
        return self._op("subscription_create", self.namespace, topic, name, options)

    def subscription_update(self, topic: str, name: str, options: dict[str, Any]) -> Call:
        options = convert.options(options)
        return self._op("subscription_update", self.namespace, topic, name, options)

    def subscription_get(self, topic: str, name: str) -> Call:
        return self._op("subscription_get", self.namespace, topic, name)

    def subscription_list(self, topic: str) -> Call:
        return self._op("subscription_list", self.namespace, topic)

    def subscription_delete(self, topic: str, name: str) -> Call:
        return self._op("subscription_delete", self.namespace, topic, name)

    def rule_create(
        self,
        topic: str,
        subscription: str,
        name: str,
        filter: dict[str, Any] | None,
        action: str | None,
    ) -> Call:
        return self._op("rule_create", self.namespace, topic, subscription, name, filter, action)

    def rule_get(self, topic: str, subscription: str, name: str) -> Call:
        return self._op("rule_get", self.namespace, topic, subscription, name)

    def rule_list(self, topic: str, subscription: str) -> Call:
        return self._op("rule_list", self.namespace, topic, subscription)

    def rule_delete(self, topic: str, subscription: str, name: str) -> Call:
        return self._op("rule_delete", self.namespace, topic, subscription, name)

    def send(self, entity: str, messages: Sendable) -> Call | Local:
        """In a transaction, the messages wait for its commit: no numbers yet."""
        messages = convert.messages(messages)
        if self.tx is not None:
            self.tx.add(entity, messages=messages)
            return Local([])
        return self._op("send", self.namespace, entity, messages)

    def send_report(self, entity: str, messages: Sequence[Message]) -> Call | Local:
        if self.tx is not None:
            self.send(entity, messages)
            return Local({"sequence_numbers": [], "diverted_to": None})
        return self._op("send", self.namespace, entity, list(messages), report=True)

    def peek(self, entity: str, count: int, from_sequence: int | None) -> Call:
        start = self.peek_next.get(entity) if from_sequence is None else from_sequence

        def read(raw: msgspec.Raw) -> list[ReceivedMessage]:
            got = delivered(raw)
            if got:
                self.peek_next[entity] = got[-1].sequence_number + 1
            return got

        return self._op("peek", self.namespace, entity, count, start, reads=read)

    def receive(
        self,
        entity: str,
        count: int,
        max_wait: float | timedelta,
        mode: str,
        session: str | None = None,
    ) -> Call:
        _refuse_in_transaction(self.tx, "receive")
        wait_ms = max(0, int(convert.wait_seconds(max_wait) * 1000))
        return self._op("receive", self.namespace, entity, count, wait_ms, mode, session)

    def session_accept(self, entity: str, session_id: str | None) -> Call:
        return self._op("session_accept", self.namespace, entity, session_id)

    def session_renew(self, entity: str, token: str) -> Call:
        return self._op("session_renew", self.namespace, entity, token)

    def session_close(self, entity: str, token: str) -> Call:
        return self._op("session_close", self.namespace, entity, token)

    def session_list(self, entity: str) -> Call:
        return self._op("session_list", self.namespace, entity)

    def session_get_state(self, entity: str, session_id: str) -> Call:
        return self._op("session_get_state", self.namespace, entity, session_id)

    def session_set_state(self, entity: str, session_id: str, state: bytes | str | None) -> Call:
        state = convert.state_bytes(state)
        return self._op("session_set_state", self.namespace, entity, session_id, state)

    def settle(
        self,
        entity: str,
        op: str,
        lock_tokens: Tokens,
        properties: dict[str, Any] | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> Call | Local:
        """In a transaction, the settlements wait for its commit: each is pending."""
        if self.tx is not None:
            settles, pending = _tx_settlements(op, lock_tokens, properties, reason, description)
            self.tx.add(entity, settlements=settles)
            return Local(pending)
        tokens = convert.lock_tokens(lock_tokens)
        return self._op(
            "settle", self.namespace, entity, op, tokens, properties, reason, description
        )

    def receive_deferred(
        self,
        entity: str,
        sequence_numbers: Sequence[int],
        mode: str,
        session: str | None = None,
    ) -> Call:
        _refuse_in_transaction(self.tx, "receive_deferred")
        numbers = list(sequence_numbers)
        return self._op("receive_deferred", self.namespace, entity, numbers, mode, session)

    def cancel_scheduled(self, entity: str, sequence_numbers: Sequence[int]) -> Call:
        numbers = list(sequence_numbers)
        return self._op("cancel_scheduled", self.namespace, entity, numbers)

    def delete_messages(
        self, entity: str, count: int, before_ms: int | None, session_id: str | None
    ) -> Call:
        return self._op("delete_messages", self.namespace, entity, count, before_ms, session_id)

    def purge(self, entity: str) -> Call:
        return self._op("purge", self.namespace, entity)

    def dlq_resubmit(self, entity: str, count: int | None, to: str | None) -> Call:
        return self._op("dlq_resubmit", self.namespace, entity, count, to)

    def fault_add(
        self,
        entity: str | None,
        partitions: Sequence[int],
        kind: str,
        latency_ms: Duration | None,
    ) -> Call:
        latency = None if latency_ms is None else convert.duration_ms(latency_ms, "latency_ms")
        return self._op("fault_add", self.namespace, entity, list(partitions), kind, latency)

    def fault_list(self, all_namespaces: bool) -> Call:
        return self._op("fault_list", None if all_namespaces else self.namespace)

    def fault_clear(self, ids: Sequence[str], all_namespaces: bool) -> Call:
        namespace = None if ids or all_namespaces else self.namespace
        return self._op("fault_clear", namespace, list(ids), all_namespaces)

    def clock_show(self, namespace: str | None) -> Call:
        return self._op("clock_show", namespace or self.namespace)

    def clock_advance(self, by: Duration | str, namespace: str | None) -> Call:
        return self._op("clock_advance", namespace or self.namespace, clock_duration_ms(by))

    def clock_set(self, at: Instant | str, namespace: str | None) -> Call:
        return self._op("clock_set", namespace or self.namespace, clock_instant_ms(at))

    def load_adopt(self, entity: str, load_id: str, files: Sequence[tuple[int, str]]) -> Call:
        staged = [StagedFile(pid, path) for pid, path in files]
        return self._op("load_adopt", self.namespace, entity, load_id, staged)

    def load_status(self, entity: str, load_id: str) -> Call:
        return self._op("load_status", self.namespace, entity, load_id)


# The clients' methods named otherwise than the operation they send.
METHOD_OPS = {
    "accept_session": "session_accept",
    "renew_session_lock": "session_renew",
    "close_session": "session_close",
    "list_sessions": "session_list",
    "get_session_state": "session_get_state",
    "set_session_state": "session_set_state",
    "send_report": "send",
}
_C = TypeVar("_C", bound=type)


def documented(cls: _C) -> _C:
    """Give each of ``cls``'s operation methods that has no docstring its operation's
    about line (sbctl.core.operations), for ``help()`` and editors."""
    for name, fn in vars(cls).items():
        op = OPERATIONS.get(METHOD_OPS.get(name, name))
        if op is not None and callable(fn) and fn.__doc__ is None:
            fn.__doc__ = op.about
    return cls


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


def clock_duration_ms(by: Duration | str) -> int:
    """How far a clock moves: milliseconds, a timedelta, or text (``90s``, ``2h``, ``1d``,
    ``PT1H``)."""
    if isinstance(by, str):
        from sbctl.core.durations import parse_duration_ms

        return parse_duration_ms(by)
    return convert.duration_ms(by, "the advance")


def clock_instant_ms(at: Instant | str) -> int:
    """Where a clock moves to: epoch milliseconds, a datetime (naive: UTC), or ISO 8601
    text (``2030-01-01T00:00:00Z``)."""
    if not isinstance(at, str):
        return convert.instant_ms(at, "the instant")
    from sbctl.core.durations import parse_absolute_instant_ms

    return parse_absolute_instant_ms(at)
