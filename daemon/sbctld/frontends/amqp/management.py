"""The ``$management`` node: request/response operations on an entity (daemon/README.md
§29). Each request is an amqp-value map; the answer carries ``statusCode``,
``statusDescription`` and, on failure, ``errorCondition``.

Each request is the service's declared operation (sbctl.core.operations) run with the
arguments the map gives (``renew-lock`` is ``settle`` with ``renew-lock``, ``schedule-message``
a ``send``, ...): durable, woken and delayed as the Unix socket's (:func:`.host.run`)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from sbctl.core import message_form, splice, typed
from sbctl.core.amqp import codec
from sbctl.core.amqp.types import Array, Timestamp
from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest, InvalidOperation, SbctlError
from sbctl.core.protocol import (
    DeleteMessages,
    EntityPath,
    Peek,
    ReceiveDeferred,
    SendEncoded,
    SequenceNumbers,
    SessionRef,
    SessionState,
    SessionToken,
    Settle,
    TxSettle,
)
from sbctld.frontends.amqp import rules
from sbctld.frontends.amqp.arguments import Args, text_of
from sbctld.frontends.amqp.errors import condition_of, status_of
from sbctld.frontends.amqp.host import Host, Respond, answering, run
from sbctld.frontends.amqp.transactions import Transaction
from sbctld.results import LockRenewed, SettleFailed
from sbctld.service import Step

log = logging.getLogger("sbctld")
OP_PREFIX = "com.microsoft:"
Handler = Callable[[Host, str, Args, Respond], None]
Disposition = tuple[str, list[str], dict[str, Any] | None, str | None, str | None]
ALL_SESSIONS = 253_402_300_800_000


def handle(
    conn: Host, path: str, request: codec.Message, respond: Respond, txn: Transaction | None = None
) -> None:
    """Serve one request; ``txn``: the transaction whose txn-id it carries (daemon/README.md
    §29.7)."""
    app = Args(request.application_properties)
    op = text_of(app.get("operation", ""))
    name = op.removeprefix(OP_PREFIX).replace("-", "_")
    handler = OPS.get(name)
    if handler is None:
        respond(501, f"operation {op!r} is not supported", None, "amqp:not-implemented")
        return
    args = Args(request.body)
    if "session-id" not in args and (linked := _associated_session(conn, app)) is not None:
        args["session-id"] = linked
    try:
        if txn is not None:
            handler = _in_transaction(name, op, handler, txn)
        handler(conn, path, args, respond)
    except SbctlError as err:
        condition, text = condition_of(err)
        respond(status_of(err), text, None, condition)
    except codec.DecodeError as exc:  # a message inside the request (schedule) does not decode
        respond(400, f"undecodable message: {exc}", None, "amqp:decode-error")


def _in_transaction(name: str, op: str, handler: Handler, txn: Transaction) -> Handler:
    """A request inside a transaction (daemon/README.md §29.7): a write is held until the
    commit; what a rollback does not undo on Azure either (reads, receives, lock renewals) is
    served at once; scheduling, batch delete and rules are refused."""
    if name in AT_ONCE:
        return handler
    hold = HOLD.get(name)
    if hold is None:
        hint = TRANSACTION_HINTS.get(name, "run it outside the transaction")
        raise InvalidOperation(f"{op} cannot be part of a transaction in sbctl; {hint}")

    def held(conn: Host, path: str, args: Args, respond: Respond) -> None:
        hold(conn, path, args, txn)
        respond(200, "OK", None, None)

    return held


def _associated_session(conn: Host, app: Args) -> str | None:
    """The session locked by the receiver link a request names in ``associated-link-name``:
    a session receiver's requests are scoped to its session, as Service Bus scopes them,
    whether or not they carry ``session-id`` (the Go SDK's receive-by-sequence-number and
    peek send none)."""
    name = app.get("associated-link-name")
    if name is None:
        return None
    name = text_of(name)
    for session in conn.conn.sessions.values():
        for link in session.links.values():
            if link.name == name:
                lock = getattr(link.context, "session", None)
                return None if lock is None else str(lock.session_id)
    return None


def _hold_disposition(conn: Host, path: str, args: Args, txn: Transaction) -> None:
    op, tokens, props, reason, description = _disposition(args)
    txn.entity(path)[1].extend(TxSettle(op, token, props, reason, description) for token in tokens)


def _hold_cancel(conn: Host, path: str, args: Args, txn: Transaction) -> None:
    seqs = args.integers("sequence-numbers")
    txn.later.append(("cancel_scheduled", SequenceNumbers(conn.namespace, path, seqs)))


def _hold_session_state(conn: Host, path: str, args: Args, txn: Transaction) -> None:
    session, value = _session(args) or "", args.binary("session-state")
    txn.later.append(("session_set_state", SessionState(conn.namespace, path, session, value)))


def _session(args: Args) -> str | None:
    return args.text("session-id")


def peek_message(conn: Host, path: str, args: Args, respond: Respond) -> None:
    start = args.integer("from-sequence-number", 0)
    count = args.integer("message-count", 1, low=-(2**31), high=2**31 - 1)
    session = _session(args)
    count = min(max(count, 1), 250)

    def peeked(got: list[Delivered]) -> None:
        if not got:
            respond(204, "No Content", None, None)
            return
        _, payloads, bad = splice.splice_all(got, received=False, lock=False)
        for d, why in bad:  # (skipped: one record never blocks a peek)
            log.warning("message %s of %s cannot be peeked: %s", d.sequence_number, path, why)
        respond(200, "OK", {"messages": [{"message": p} for p in payloads]}, None)

    if session is None:
        run(conn, "peek", Peek(conn.namespace, path, count, start), respond, peeked)
        return

    def session_pages(step: Step) -> list[Delivered]:
        """A session receiver peeks its session's messages only: page through the entity
        from ``start`` until ``count`` of them are found or nothing is left (daemon/README.md
        §9.7)."""
        out: list[Delivered] = []
        at = start
        while len(out) < count:
            page = step("peek", Peek(conn.namespace, path, 250, at))
            if not page:
                break
            out.extend(d for d in page if _session_of(d) == session)
            at = page[-1].sequence_number + 1
        return out[:count]

    conn.frontend.service.run_steps(session_pages, answering(respond, peeked), sender=conn.sender)


def _session_of(d: Any) -> str | None:
    from sbctl.core.message_form import decode as decode_message

    return decode_message(d.payload).session_id


def _ok(respond: Respond) -> Callable[[Any], None]:
    """Answer 200 without a body."""
    return lambda _result: respond(200, "OK", None, None)


def _settled(results: list[Any]) -> None:
    """Raise the error of the first lock token that failed."""
    for r in results:
        if isinstance(r, SettleFailed):
            raise r.error


def renew_lock(conn: Host, path: str, args: Args, respond: Respond) -> None:
    tokens = args.tokens("lock-tokens")

    def renewed(results: list[Any]) -> None:
        _settled(results)
        expirations = [r.locked_until_ms for r in results if isinstance(r, LockRenewed)]
        respond(200, "OK", {"expirations": Array("timestamp", expirations)}, None)

    run(conn, "settle", Settle(conn.namespace, path, "renew-lock", tokens), respond, renewed)


def update_disposition(conn: Host, path: str, args: Args, respond: Respond) -> None:
    op, tokens, props, reason, description = _disposition(args)
    settle = Settle(conn.namespace, path, op, tokens, props, reason, description)

    def settled(results: list[Any]) -> None:
        _settled(results)
        respond(200, "OK", None, None)

    run(conn, "settle", settle, respond, settled)


def _disposition(args: Args) -> Disposition:
    """(op, lock tokens, properties to modify, reason, description) of an update-disposition."""
    status = args.text("disposition-status") or ""
    op = {
        "completed": "complete",
        "abandoned": "abandon",
        "defered": "defer",
        "deferred": "defer",
        "suspended": "dead-letter",
    }.get(status)
    if op is None:
        raise BadRequest(f"unknown disposition-status {status!r}")
    tokens = args.tokens("lock-tokens")
    props = args.map("properties-to-modify")
    props = {text_of(k): typed.property_value(v) for k, v in props.items()} if props else None
    reason = args.text("deadletter-reason")
    description = args.text("deadletter-description")
    return (op, tokens, props, reason or None, description or None)


def receive_by_sequence_number(conn: Host, path: str, args: Args, respond: Respond) -> None:
    seqs = args.integers("sequence-numbers")
    mode = "receive-and-delete" if args.integer("receiver-settle-mode", 1) == 0 else "peek-lock"
    session = _session(args)  # a session receiver's request names its session
    token = conn.session_token(path, session) if session is not None else None

    def received(got: list[Delivered]) -> None:
        messages = [
            {
                "lock-token": uuid.UUID(d.lock_token) if d.lock_token else uuid.uuid4(),
                "message": _deferred(d, mode == "peek-lock"),
            }
            for d in got
        ]
        respond(200, "OK", {"messages": messages}, None)

    deferred = ReceiveDeferred(conn.namespace, path, seqs, mode, token)
    run(conn, "receive_deferred", deferred, respond, received)


def _deferred(d: Delivered, lock: bool) -> bytes:
    """A message received by sequence number, encoded; a locked one carries its lock token
    in the delivery annotation ``x-opt-lock-token`` too, as Service Bus sends it."""
    encoded = splice.splice(d, received=True, lock=lock)
    return splice.with_lock_token(encoded, d.lock_token) if lock and d.lock_token else encoded


def schedule_message(conn: Host, path: str, args: Args, respond: Respond) -> None:
    messages: Any = [
        message_form.intake(item.binary("message") or b"", give_id=True)
        for item in args.maps("messages")
    ]

    def scheduled(seqs: list[int]) -> None:
        respond(200, "OK", {"sequence-numbers": Array("long", seqs)}, None)

    run(conn, "send", SendEncoded(conn.namespace, path, messages), respond, scheduled)


def cancel_scheduled_message(conn: Host, path: str, args: Args, respond: Respond) -> None:
    seqs = SequenceNumbers(conn.namespace, path, args.integers("sequence-numbers"))
    run(conn, "cancel_scheduled", seqs, respond, _ok(respond))


def batch_delete_messages(conn: Host, path: str, args: Args, respond: Respond) -> None:
    """Delete the oldest messages without receiving them (daemon/README.md §29.6)."""
    count = args.get("message-count")
    if not isinstance(count, int) or isinstance(count, bool):
        raise BadRequest(f"message-count must be an integer, not {count!r}")
    cutoff = args.get("enqueued-time-utc")
    before = None if cutoff is None else typed.milliseconds(cutoff, "enqueued-time-utc")
    delete = DeleteMessages(conn.namespace, path, count, before, _session(args))

    def deleted(result: dict[str, Any]) -> None:
        respond(200, "OK", {"message-count": result["deleted"]}, None)

    run(conn, "delete_messages", delete, respond, deleted)


def renew_session_lock(conn: Host, path: str, args: Args, respond: Respond) -> None:
    token = conn.session_token(path, _session(args))

    def renewed(lock: Any) -> None:
        respond(200, "OK", {"expiration": Timestamp(lock.locked_until_ms)}, None)

    run(conn, "session_renew", SessionToken(conn.namespace, path, token), respond, renewed)


def get_session_state(conn: Host, path: str, args: Args, respond: Respond) -> None:
    def state(result: dict[str, Any]) -> None:
        respond(200, "OK", {"session-state": result["state"]}, None)

    ref = SessionRef(conn.namespace, path, _session(args) or "")
    run(conn, "session_get_state", ref, respond, state)


def set_session_state(conn: Host, path: str, args: Args, respond: Respond) -> None:
    value = args.binary("session-state")
    state = SessionState(conn.namespace, path, _session(args) or "", value)
    run(conn, "session_set_state", state, respond, _ok(respond))


def get_message_sessions(conn: Host, path: str, args: Args, respond: Respond) -> None:
    skip = args.integer("skip", 0, high=2**31 - 1)
    top = args.integer("top", 100, high=2**31 - 1) or 100

    def listed(sessions: list[Any]) -> None:
        ids = [s.session_id for s in sessions][skip : skip + top]
        if not ids:
            respond(204, "No Content", None, None)
            return
        body = {"skip": skip + len(ids), "sessions-ids": Array("string", ids)}
        respond(200, "OK", body, None)

    run(conn, "session_list", EntityPath(conn.namespace, path), respond, listed)


# Inside a transaction (daemon/README.md §29.7): served at once, held until the commit, and why
# the rest is refused.
AT_ONCE = frozenset(
    (
        "peek_message",
        "get_session_state",
        "get_message_sessions",
        "enumerate_rules",
        "receive_by_sequence_number",
        "renew_lock",
        "renew_session_lock",
    )
)
HOLD: dict[str, Callable[[Host, str, Args, Transaction], None]] = {
    "update_disposition": _hold_disposition,
    "cancel_scheduled_message": _hold_cancel,
    "set_session_state": _hold_session_state,
}
TRANSACTION_HINTS = {
    "schedule_message": "its sequence number would only exist at the commit: send the "
    "message with its ScheduledEnqueueTime set inside the transaction instead (it is "
    "scheduled at the commit), or schedule it outside",
    "batch_delete_messages": "delete outside the transaction",
}

OPS: dict[str, Handler] = {
    "peek_message": peek_message,
    "renew_lock": renew_lock,
    "update_disposition": update_disposition,
    "receive_by_sequence_number": receive_by_sequence_number,
    "schedule_message": schedule_message,
    "cancel_scheduled_message": cancel_scheduled_message,
    "batch_delete_messages": batch_delete_messages,
    "renew_session_lock": renew_session_lock,
    "get_session_state": get_session_state,
    "set_session_state": set_session_state,
    "get_message_sessions": get_message_sessions,
    "add_rule": rules.add_rule,
    "remove_rule": rules.remove_rule,
    "enumerate_rules": rules.enumerate_rules,
}
