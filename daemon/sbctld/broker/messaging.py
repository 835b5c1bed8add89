"""The data plane: send, peek, receive, settle, deferred and scheduled messages, sessions,
transactions, purge and dead-letter resubmission.

Rule 1: every request is charged to its namespace's meter before it changes anything, and a
batch is admitted whole or not at all (daemon/README.md §0.4.4).
Rule 2: after anything that may make messages forwardable, the state's
:meth:`~sbctld.broker.core.BrokerState.flow` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sbctl.core.delivered import Delivered
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
)
from sbctl.core.limits import MAX_PEEK, MAX_RECEIVE
from sbctl.core.message_form import Sendable
from sbctl.core.names import (
    entity_key,
)
from sbctld import batch_delete
from sbctld.broker.core import BrokerState
from sbctld.broker.namespace import (
    check_mode,
)
from sbctld.credits import (
    DATA_COST,
)
from sbctld.pairing import SenderId
from sbctld.queue import Queue
from sbctld.results import SessionEntry, SessionLock, SettleResult, Transacted
from sbctld.storage.log import State
from sbctld.topic import (
    Subscription,
    Topic,
)


class Messaging:
    """The data plane (see the module docstring), over the broker's state."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state

    def send(
        self,
        namespace: str,
        path: str,
        messages: Sequence[Sendable],
        sender: SenderId | None = None,
        *,
        direct: bool = False,
    ) -> list[int]:
        """``sender``: the client connection, numbered by the service (a paired primary keeps
        a backlog queue per sender, sbctld.pairing); ``direct``: past the pairing (its own
        sends)."""
        if self.state.paired and not direct:
            pairing = self.state.paired.get(entity_key(namespace))
            if pairing is not None:
                return self.state.pairings.send(pairing, namespace, path, messages, sender)
        queue, dlq = self.state.resolve(namespace, path)
        if dlq:
            # daemon/README.md §4.3: only the parent's dead-letter operation fills a DLQ.
            raise InvalidOperation("messages cannot be sent to a dead-letter queue")
        if isinstance(queue, Subscription):
            raise InvalidOperation(
                f"messages cannot be sent to subscription {path!r}: send to its topic"
            )
        ns = self.state.namespace(namespace)
        now = self.state.time_of(ns)
        meter = ns.meter
        if isinstance(queue, Topic):
            data = DATA_COST * len(messages)

            def charge(filters: int) -> None:
                # daemon/README.md §0.2.1: 1 per message and 1 per filter evaluated, all or nothing.
                meter.check(data + filters, now)
                meter.record("data", data, now)
                meter.record("filter", filters, now)

            seqs = queue.send(messages, now, charge=charge)
            self.state.fanned_out(queue)
            return seqs
        # daemon/README.md §0.4.4: the whole batch is admitted or nothing of it is stored.
        meter.charge("data", DATA_COST * len(messages), now)
        seqs = queue.send(messages, now)
        if queue.scheduled_pending:
            self.state.note_scheduled(*queue.key, queue)
        self.state.flow(queue)
        return seqs

    def peek(
        self, namespace: str, path: str, count: int, from_sequence: int | None
    ) -> list[Delivered]:
        if not 1 <= count <= MAX_PEEK:
            raise BadRequest(f"peek count must be between 1 and {MAX_PEEK}")
        if from_sequence is not None and from_sequence < 0:
            raise BadRequest("from_sequence must not be negative")
        queue, dlq = self.state.reader(namespace, path)
        ns = self.state.namespace(namespace)
        now = queue.accessed_at_ms = self.state.time_of(ns)
        meter = ns.meter
        count = meter.admit_count(count, now)  # at most what the period has left
        got = queue.peek(count, from_sequence, subqueue=dlq)
        meter.record("data", DATA_COST * len(got), now)
        return got

    def receive(
        self,
        namespace: str,
        path: str,
        count: int,
        mode: str,
        session_lock_token: str | None = None,
    ) -> list[Delivered]:
        if not 1 <= count <= MAX_RECEIVE:
            raise BadRequest(f"receive count must be between 1 and {MAX_RECEIVE}")
        check_mode(mode)
        queue, dlq = self.state.reader(namespace, path)
        ns = self.state.namespace(namespace)
        now = self.state.time_of(ns)
        meter = ns.meter
        count = meter.admit_count(count, now)  # at most what the period has left
        queue.expire_locks(now)
        delete = mode == "receive-and-delete"
        if session_lock_token is not None:
            if dlq:
                raise InvalidOperation("a dead-letter queue has no sessions")
            got = queue.receive_session(session_lock_token, count, now, delete=delete)
        else:
            got = queue.receive(count, now, delete=delete, subqueue=dlq)
        meter.record("data", DATA_COST * len(got), now)
        if got and mode == "peek-lock":
            self.state.due_at(now + queue.config.lock_duration, *queue.key)
        self.state.flow(queue)  # expiry may have dead-lettered something
        return got

    def settle(
        self,
        namespace: str,
        path: str,
        op: str,
        tokens: Sequence[str],
        properties: dict[str, Any] | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> list[SettleResult]:
        queue, _dlq = self.state.reader(namespace, path)
        now = queue.accessed_at_ms = self.state.now_in(queue.key[0])
        results = queue.settle(op, tokens, now, properties, reason, description)
        if op == "renew-lock":
            self.state.due_at(now + queue.config.lock_duration, *queue.key)
        self.state.flow(queue)
        return results

    def receive_deferred(
        self,
        namespace: str,
        path: str,
        sequence_numbers: Sequence[int],
        mode: str,
        session_lock_token: str | None = None,
    ) -> list[Delivered]:
        check_mode(mode)
        queue, dlq = self.state.reader(namespace, path)
        if dlq:
            raise InvalidOperation("deferred messages live in the queue, not in its DLQ")
        ns = self.state.namespace(namespace)
        now = self.state.time_of(ns)
        meter = ns.meter
        meter.check(DATA_COST * len(sequence_numbers), now)
        got = queue.receive_deferred(
            sequence_numbers,
            now,
            delete=mode == "receive-and-delete",
            session_token=session_lock_token,
        )
        meter.record("data", DATA_COST * len(got), now)
        if got and mode == "peek-lock":
            self.state.due_at(now + queue.config.lock_duration, *queue.key)
        return got

    def transact(
        self,
        namespace: str,
        path: str,
        messages: Sequence[Sendable],
        settlements: Sequence[tuple[str, str, dict[str, Any] | None, str | None, str | None]],
    ) -> Transacted:
        """Sends and settlements on one entity, all or nothing (daemon/README.md §12)."""
        if self.state.namespace(namespace).config.sku == "basic":
            raise InvalidOperation("transactions are not supported on the Basic tier")
        queue, dlq = self.state.resolve(namespace, path)
        if dlq and messages:
            raise InvalidOperation("messages cannot be sent to a dead-letter queue")
        if isinstance(queue, Subscription) and messages:
            raise InvalidOperation(
                f"messages cannot be sent to subscription {path!r}: send to its topic"
            )
        if isinstance(queue, Topic) and settlements:
            raise InvalidOperation(f"{queue.name!r} is a topic: settle on its subscriptions")
        ns = self.state.namespace(namespace)
        now = self.state.time_of(ns)
        # The commit's sends are charged (settlements are free; README "Throttling").
        ns.charge("data", DATA_COST * len(messages), now)
        result = queue.transact(messages, settlements, now)
        if isinstance(queue, Topic):
            self.state.fanned_out(queue)
            return result
        if messages and queue.scheduled_pending:
            self.state.note_scheduled(*queue.key, queue)
        self.state.flow(queue)
        return result

    def _session_queue(self, namespace: str, path: str) -> Queue:
        queue, dlq = self.state.reader(namespace, path)
        if dlq:
            raise InvalidOperation("a dead-letter queue has no sessions")
        return queue

    def session_accept(self, namespace: str, path: str, session_id: str | None) -> SessionLock:
        """Lock a session (or the next available one) for a session receiver (daemon/README.md
        §9.6)."""
        queue = self._session_queue(namespace, path)
        return queue.accept_session(session_id, self.state.now_in(queue.key[0]))

    def session_renew(self, namespace: str, path: str, token: str) -> SessionLock:
        queue = self._session_queue(namespace, path)
        return queue.renew_session(token, self.state.now_in(queue.key[0]))

    def session_close(self, namespace: str, path: str, token: str) -> dict[str, Any]:
        queue = self._session_queue(namespace, path)
        return queue.close_session(token, self.state.now_in(queue.key[0]))

    def session_list(self, namespace: str, path: str) -> list[SessionEntry]:
        queue = self._session_queue(namespace, path)
        return queue.list_sessions(self.state.now_in(queue.key[0]))

    def session_get_state(self, namespace: str, path: str, session_id: str) -> bytes | None:
        return self._session_queue(namespace, path).get_session_state(session_id)

    def session_set_state(
        self, namespace: str, path: str, session_id: str, state: bytes | None
    ) -> None:
        self._session_queue(namespace, path).set_session_state(session_id, state)

    def cancel_scheduled(self, namespace: str, path: str, sequence_numbers: Sequence[int]) -> int:
        queue, dlq = self.state.resolve(namespace, path)
        if dlq:
            raise InvalidOperation("a dead-letter queue holds no scheduled messages")
        return queue.cancel_scheduled(sequence_numbers)

    def purge(self, namespace: str, path: str) -> int:
        """Delete every message of a queue or of its DLQ (beyond Azure: a chore)."""
        queue, dlq = self.state.reader(namespace, path)
        return queue.purge(subqueue=dlq)

    def delete_messages(
        self,
        namespace: str,
        path: str,
        count: int,
        before_ms: int | None,
        session_id: str | None,
    ) -> int:
        """Delete up to ``count`` of the oldest unlocked messages enqueued before
        ``before_ms`` (None: now), of ``session_id`` if given, without receiving them."""
        queue, sub = self.state.reader(namespace, path)
        before = self.state.now_in(queue.key[0]) if before_ms is None else before_ms
        return batch_delete.delete_oldest(queue, count, before, sub, session_id)

    def dlq_resubmit(
        self, namespace: str, path: str, count: int | None, to: str | None
    ) -> dict[str, Any]:
        """Move dead-lettered messages back (to the queue itself or to ``to``), without
        their dead-letter properties; each gets a new sequence number there."""
        queue, from_sub = self.state.reader(namespace, path)
        target, into_dlq = (queue, "") if to is None else self.state.resolve(namespace, to)
        if into_dlq:
            raise InvalidOperation("messages cannot be resubmitted into a dead-letter queue")
        if count is not None and count < 1:
            raise BadRequest("count must be at least 1")
        if queue.faulty:
            queue.check_reachable()  # daemon/README.md §0.1.6: what the available partitions hold
        now = self.state.now_in(queue.key[0])
        moved: list[int] = []
        if isinstance(target, Subscription) and target is not queue:
            raise InvalidOperation(
                f"messages cannot be resubmitted to subscription {to!r}: use its topic"
            )
        state = (
            State.TRANSFER_DEADLETTERED if from_sub == "transfer-deadletter" else State.DEADLETTERED
        )
        for p, seq in queue.waiting(state, count):
            message = queue.resubmittable(p, seq)
            # The copy is stored before the DLQ entry is retired: never lost, at worst twice.
            moved += target.send([message], now, detect_duplicates=False)
            p.set_state(seq, State.GONE)
        if isinstance(target, Topic):
            self.state.fanned_out(target)
        self.state.flow(target)  # a forwarding target passes them on (daemon/README.md §11)
        return {"resubmitted": len(moved), "to": target.name, "sequence_numbers": moved}
