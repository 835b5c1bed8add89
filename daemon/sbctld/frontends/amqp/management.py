"""The ``$management`` node: request/response operations on an entity (daemon/README.md
§29). Each request is an amqp-value map; the answer carries ``statusCode``,
``statusDescription`` and, on failure, ``errorCondition``."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sbctl.amqp import codec
from sbctl.amqp.types import Array, Timestamp
from sbctl.errors import BadRequest, InvalidOperation, SbctlError
from sbctl.operations import deletes_on_receive, redelivers
from sbctld.frontends.amqp import convert, fastout, rules
from sbctld.frontends.amqp.errors import condition_of, status_of
from sbctld.frontends.amqp.host import Host, Respond, ok_when_durable
from sbctld.frontends.amqp.transactions import Transaction
from sbctld.results import LockRenewed, SettleFailed

OP_PREFIX = "com.microsoft:"
Handler = Callable[[Host, str, dict[str, Any], Respond], None]
Disposition = tuple[str, list[str], dict[str, Any] | None, str | None, str | None]
ALL_SESSIONS = 253_402_300_800_000


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _args(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        return {}
    return {_text(k): v for k, v in body.items()}


def handle(
    conn: Host, path: str, request: codec.Message, respond: Respond, txn: Transaction | None = None
) -> None:
    """Serve one request; ``txn``: the transaction whose txn-id it carries (daemon/README.md
    §29.7)."""
    app = {_text(k): v for k, v in (request.application_properties or {}).items()}
    op = _text(app.get("operation", ""))
    name = op.removeprefix(OP_PREFIX).replace("-", "_")
    handler = OPS.get(name)
    if handler is None:
        respond(501, f"operation {op!r} is not supported", None, "amqp:not-implemented")
        return
    try:
        if txn is not None:
            handler = _in_transaction(name, op, handler, txn)
        # answered without the slow-store delay, as before the service layer
        with conn.frontend.service.request():
            handler(conn, path, _args(request.body), respond)
    except SbctlError as err:
        condition, text = condition_of(err)
        respond(status_of(err), text, None, condition)


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

    def held(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
        hold(conn, path, args, txn)
        respond(200, "OK", None, None)

    return held


def _hold_disposition(conn: Host, path: str, args: dict[str, Any], txn: Transaction) -> None:
    op, tokens, props, reason, description = _disposition(args)
    txn.entity(path)[1].extend((op, token, props, reason, description) for token in tokens)


def _hold_cancel(conn: Host, path: str, args: dict[str, Any], txn: Transaction) -> None:
    seqs = [int(s) for s in args.get("sequence-numbers") or []]
    txn.later.append(lambda: conn.broker.cancel_scheduled(conn.namespace, path, seqs))


def _hold_session_state(conn: Host, path: str, args: dict[str, Any], txn: Transaction) -> None:
    session, state = _session(args) or "", args.get("session-state")
    value = bytes(state) if state is not None else None
    txn.later.append(lambda: conn.broker.session_set_state(conn.namespace, path, session, value))


def _session(args: dict[str, Any]) -> str | None:
    value = args.get("session-id")
    return None if value is None else _text(value)


def peek_message(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    start = int(args.get("from-sequence-number", 0) or 0)
    count = int(args.get("message-count", 1) or 1)
    session = _session(args)
    count = min(max(count, 1), 250)
    if session is None:
        got = conn.broker.peek(conn.namespace, path, count, start)
    else:
        got = _peek_session(conn, path, session, start, count)
    if not got:
        respond(204, "No Content", None, None)
        return
    messages = [{"message": fastout.encode_delivered(d, received=False, lock=False)} for d in got]
    respond(200, "OK", {"messages": messages}, None)


def _peek_session(conn: Host, path: str, session: str, start: int, count: int) -> list[Any]:
    """A session receiver peeks its session's messages only: page through the entity from
    ``start`` until ``count`` of them are found or nothing is left (daemon/README.md §9.7)."""
    out: list[Any] = []
    while len(out) < count:
        page = conn.broker.peek(conn.namespace, path, 250, start)
        if not page:
            break
        out.extend(d for d in page if _session_of(d) == session)
        start = page[-1].sequence_number + 1
    return out[:count]


def _session_of(d: Any) -> str | None:
    from sbctl.codec import decode_message

    return decode_message(d.payload).session_id


def renew_lock(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    tokens = [str(t) for t in args.get("lock-tokens") or []]
    results = conn.broker.settle(conn.namespace, path, "renew-lock", tokens)
    expirations = []
    for r in results:
        if isinstance(r, SettleFailed):
            raise r.error
        assert isinstance(r, LockRenewed)
        expirations.append(r.locked_until_ms)
    respond(200, "OK", {"expirations": Array("timestamp", expirations)}, None)


def update_disposition(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    op, tokens, props, reason, description = _disposition(args)
    results = conn.broker.settle(conn.namespace, path, op, tokens, props, reason, description)
    for r in results:
        if isinstance(r, SettleFailed):
            raise r.error
    if redelivers(op):
        conn.frontend.wake(conn.namespace, path)
    ok_when_durable(conn, respond, None)


def _disposition(args: dict[str, Any]) -> Disposition:
    """(op, lock tokens, properties to modify, reason, description) of an update-disposition."""
    status = _text(args.get("disposition-status", ""))
    op = {
        "completed": "complete",
        "abandoned": "abandon",
        "defered": "defer",
        "deferred": "defer",
        "suspended": "dead-letter",
    }.get(status)
    if op is None:
        raise BadRequest(f"unknown disposition-status {status!r}")
    tokens = [str(t) for t in args.get("lock-tokens") or []]
    props = args.get("properties-to-modify")
    props = {_text(k): convert._property(v) for k, v in props.items()} if props else None
    reason = args.get("deadletter-reason")
    description = args.get("deadletter-description")
    return (
        op,
        tokens,
        props,
        _text(reason) if reason else None,
        _text(description) if description else None,
    )


def receive_by_sequence_number(
    conn: Host, path: str, args: dict[str, Any], respond: Respond
) -> None:
    seqs = [int(s) for s in args.get("sequence-numbers") or []]
    mode = (
        "receive-and-delete" if int(args.get("receiver-settle-mode", 1) or 0) == 0 else "peek-lock"
    )
    session = _session(args)  # a session receiver's request names its session
    token = conn.session_token(path, session) if session is not None else None
    got = conn.broker.receive_deferred(conn.namespace, path, seqs, mode, token)
    messages = [
        {
            "lock-token": uuid.UUID(d.lock_token) if d.lock_token else uuid.uuid4(),
            "message": fastout.encode_delivered(d, received=True, lock=mode == "peek-lock"),
        }
        for d in got
    ]
    body = {"messages": messages}
    if deletes_on_receive(mode):
        ok_when_durable(conn, respond, body)
    else:
        respond(200, "OK", body, None)


def schedule_message(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    items = args.get("messages") or []
    messages = []
    for item in items:
        fields = _args(item)
        messages.append(convert.to_stored(bytes(fields.get("message") or b"")))
    seqs = conn.broker.send(conn.namespace, path, messages, conn.sender)
    conn.frontend.wake(conn.namespace, path)
    ok_when_durable(conn, respond, {"sequence-numbers": Array("long", seqs)})


def cancel_scheduled_message(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    seqs = [int(s) for s in args.get("sequence-numbers") or []]
    conn.broker.cancel_scheduled(conn.namespace, path, seqs)
    ok_when_durable(conn, respond, None)


def batch_delete_messages(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    """Delete the oldest messages without receiving them (daemon/README.md §29.6)."""
    count = args.get("message-count")
    if not isinstance(count, int) or isinstance(count, bool):
        raise BadRequest(f"message-count must be an integer, not {count!r}")
    cutoff = args.get("enqueued-time-utc")
    before = None if cutoff is None else convert.milliseconds(cutoff, "enqueued-time-utc")
    deleted = conn.broker.delete_messages(conn.namespace, path, count, before, _session(args))
    ok_when_durable(conn, respond, {"message-count": deleted})


def renew_session_lock(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    session = _session(args)
    token = conn.session_token(path, session)
    info = conn.broker.session_renew(conn.namespace, path, token)
    respond(200, "OK", {"expiration": Timestamp(info.locked_until_ms)}, None)


def get_session_state(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    session = _session(args) or ""
    state = conn.broker.session_get_state(conn.namespace, path, session)
    respond(200, "OK", {"session-state": state}, None)


def set_session_state(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    session = _session(args) or ""
    state = args.get("session-state")
    conn.broker.session_set_state(
        conn.namespace, path, session, bytes(state) if state is not None else None
    )
    ok_when_durable(conn, respond, None)


def get_message_sessions(conn: Host, path: str, args: dict[str, Any], respond: Respond) -> None:
    skip = int(args.get("skip", 0) or 0)
    top = int(args.get("top", 100) or 100)
    sessions = conn.broker.session_list(conn.namespace, path)
    ids = [s.session_id for s in sessions][skip : skip + top]
    if not ids:
        respond(204, "No Content", None, None)
        return
    respond(200, "OK", {"skip": skip + len(ids), "sessions-ids": Array("string", ids)}, None)


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
HOLD: dict[str, Callable[[Host, str, dict[str, Any], Transaction], None]] = {
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
