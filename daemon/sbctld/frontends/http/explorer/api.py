"""The explorer's JSON API: ``POST /explorer/api/op/<name>`` runs one service operation.

The operations are the Unix socket's (:mod:`sbctl.core.operations`), run by
:meth:`sbctld.service.Service.run` as every front-end runs them: the same arguments (as a
JSON object), the same durability (answered once durable when the declaration says so), the
same wake-ups of parked receives and the same errors.
What differs from the socket is only the encoding:

- ``send`` takes its ``messages`` as the JSON Lines objects of ``sbctl send --input``
  (:func:`sbctl.core.messages.message_from_json`: ``body``, ``content_type``, ``message_id``,
  ``session_id``, ``partition_key``, ``scheduled_enqueue_time_utc``, typed
  ``application_properties``...); ``settle``'s ``properties`` are typed the same way;
- peeked and received messages come back as ``sbctl peek -o json`` prints them, plus
  ``body_base64`` (always) and ``properties``: ``[{name, type, value}]``, each application
  property with its type (string, int, double, boolean, null, timestamp, uuid, binary);
- an error is ``{"error": {"code", "message"}}`` with the HTTP status of the error.

Only the operations in :data:`ALLOWED` run here (not ``shutdown``, loads or keys).
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest, GeneralError, InvalidOperation, SbctlError
from sbctl.core.message_form import encode as encode_message
from sbctl.core.messages import ReceivedMessage, check_properties, json_value, message_from_json
from sbctl.core.operations import OPERATIONS
from sbctld.frontends.http.request import Respond
from sbctld.frontends.statuses import status_of
from sbctld.service import SenderId, Service

ALLOWED = frozenset(
    (
        *("status", "namespace_list", "namespace_get", "namespace_credits"),
        *("namespace_metrics", "overview", "namespace_pair_status", "namespace_update"),
        *("queue_create", "queue_update", "queue_get", "queue_list", "queue_delete"),
        *("topic_create", "topic_update", "topic_get", "topic_list", "topic_delete"),
        *("subscription_create", "subscription_update", "subscription_get"),
        *("subscription_list", "subscription_delete"),
        *("rule_create", "rule_get", "rule_list", "rule_delete"),
        *("send", "peek", "receive", "settle", "receive_deferred", "cancel_scheduled"),
        *("purge", "dlq_resubmit", "session_list", "session_accept", "session_close"),
        *("fault_add", "fault_list", "fault_clear"),
    )
)
TYPE_NAMES: dict[type, str] = {
    bool: "boolean",
    int: "int",
    float: "double",
    str: "string",
    type(None): "null",
    datetime: "timestamp",
    uuid.UUID: "uuid",
    bytes: "binary",
}
JSON_TYPE = "application/json; charset=utf-8"
_encoder = msgspec.json.Encoder()


class Forbidden(InvalidOperation):
    """A SAS token's caller reached past its namespace: 403."""

    code = "Unauthorized"


def answer_json(respond: Respond, status: int, obj: Any) -> None:
    headers = [("Content-Type", JSON_TYPE), ("Cache-Control", "no-store")]
    respond(status, headers, _encoder.encode(obj))


def answer_error(respond: Respond, err: SbctlError) -> None:
    status = 503 if err.code in ("ServiceCommunicationProblem", "ServerBusy") else status_of(err)
    status = 403 if isinstance(err, Forbidden) else status
    answer_json(respond, status, {"error": {"code": err.code, "message": err.message}})


def run(
    service: Service,
    name: str,
    body: bytes,
    call: tuple[SenderId, Callable[[], bool]],
    scope: str | None,
    respond: Respond,
) -> None:
    """Run operation ``name`` with the JSON arguments ``body`` and answer it. ``call``: the
    sender and whether the page still waits; ``scope``: the only namespace reachable (None:
    every one)."""
    try:
        args = decode(name, body)
        check_scope(name, args, scope)
    except SbctlError as err:
        answer_error(respond, err)
        return

    def reply(result: Any) -> None:
        if isinstance(result, SbctlError):
            answer_error(respond, result)
            return
        if name == "namespace_list" and scope is not None:
            result = [ns for ns in result if ns.name.lower() == scope.lower()]
        answer_json(respond, 200, to_json(result))

    sender, alive = call
    service.run(name, args, reply, sender=sender, alive=alive)


def decode(name: str, body: bytes) -> Any:
    """The operation's typed arguments from a JSON object; BadRequest naming what is wrong."""
    if name not in ALLOWED:
        raise BadRequest(f"unknown explorer operation {name!r}")
    try:
        obj = msgspec.json.decode(body or b"{}")
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("the body must be a JSON object of the operation's arguments")
    if name == "send":
        obj = {**obj, "messages": encoded(obj.get("messages"))}
    elif name == "settle" and obj.get("properties") is not None:
        obj = {**obj, "properties": check_properties(obj["properties"])}
    try:
        return msgspec.convert(obj, OPERATIONS[name].args)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"bad arguments for {name}: {exc}") from None


def encoded(messages: Any) -> list[bytes]:
    """``send``'s messages (JSON objects as ``sbctl send --input`` reads) as stored."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("send: 'messages' must be a non-empty list of messages")
    now = int(time.time() * 1000)
    try:
        return [encode_message(message_from_json(m, now)) for m in messages]
    except OverflowError:
        raise BadRequest("send: a number is too large (at most 2**63 - 1)") from None


def check_scope(name: str, args: Any, scope: str | None) -> None:
    """A SAS caller reaches its own namespace only (namespace_list is filtered)."""
    if scope is None or name == "namespace_list":
        return
    if getattr(args, "all_namespaces", False):
        raise Forbidden(f"a SAS token of namespace {scope!r} cannot reach every namespace")
    own = name.startswith("namespace_") or name == "overview"
    target = getattr(args, "name" if own else "namespace", None)
    if not isinstance(target, str) or target.lower() != scope.lower():
        raise Forbidden(f"a SAS token of namespace {scope!r} cannot run {name} on {target!r}")


def to_json(result: Any) -> Any:
    """A result as JSON takes it: delivered messages as the page shows them."""
    if isinstance(result, list) and result and isinstance(result[0], Delivered):
        return [message_json(d) for d in result]
    return result


def message_json(d: Delivered) -> dict[str, Any]:
    received = ReceivedMessage.from_wire(d)
    out = received.to_dict()
    out["body_base64"] = base64.b64encode(received.message.body).decode()
    out["properties"] = [
        {"name": k, "type": type_name(v), "value": json_value(v)}
        for k, v in received.application_properties.items()
    ]
    return out


def type_name(value: Any) -> str:
    for kind, name in TYPE_NAMES.items():
        if isinstance(value, kind):
            return name
    return type(value).__name__


def internal(respond: Respond, exc: Exception) -> None:
    answer_error(respond, GeneralError(f"internal error: {exc}"))
