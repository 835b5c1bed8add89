"""The REST data plane (daemon/README.md §30), on the broker operations every path uses.

* ``POST /{entity}/messages``: send; the body is the message body, ``BrokerProperties`` a
  JSON object of system properties, every other non-standard header a custom property
  (``"text"`` in quotes is a string, a bare number or ``true``/``false`` that value).
  With ``Content-Type: application/vnd.microsoft.servicebus.json`` the body is a JSON
  array of ``{"Body", "BrokerProperties", "UserProperties"}`` sent as one batch.
  Answered 201 once durable.
* ``POST /{entity}/messages/head?timeout=N``: peek-lock one message (201, body,
  ``BrokerProperties`` with ``LockToken`` and ``SequenceNumber``, ``Location`` to settle
  it), or 204 after N seconds without one.
* ``DELETE /{entity}/messages/head?timeout=N``: receive and delete (200, or 204).
* ``DELETE|PUT|POST /{entity}/messages/{seq}/{lock}``: complete, unlock (abandon), renew.
"""

from __future__ import annotations

import base64
import email.utils
import json
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sbctl.core.delivered import Delivered
from sbctl.core.durations import MAX_TIMESPAN_MS, parse_instant_ms
from sbctl.core.errors import BadRequest, SbctlError
from sbctl.core.message_form import decode as decode_message
from sbctl.core.protocol import Receive, SendEncoded, Settle
from sbctl.core.records import Message
from sbctl.core.typed import TYPED, to_json
from sbctld.frontends.http.management import MethodNotAllowed, answering, error, fail
from sbctld.frontends.http.request import Request, Respond
from sbctld.results import LockRenewed, SettleFailed

if TYPE_CHECKING:
    from sbctld.frontends.http.host import HttpHost

BATCH_TYPE = "application/vnd.microsoft.servicebus.json"
DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 300.0
STANDARD_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "content-encoding",
        "authorization",
        "brokerproperties",
        "accept",
        "accept-encoding",
        "accept-language",
        "user-agent",
        "connection",
        "keep-alive",
        "expect",
        "transfer-encoding",
        "te",
        "upgrade",
        "cookie",
        "date",
        "origin",
        "referer",
        "cache-control",
        "pragma",
        "traceparent",
        "tracestate",
        "request-id",
    }
)
STANDARD_PREFIXES = ("x-ms-", "proxy-", "x-forwarded-", "sec-")
# BrokerProperties a sender sets → stored message fields.
SETTABLE = {
    "MessageId": "message_id",
    "CorrelationId": "correlation_id",
    "SessionId": "session_id",
    "Label": "subject",
    "ReplyTo": "reply_to",
    "To": "to",
    "ReplyToSessionId": "reply_to_session_id",
    "PartitionKey": "partition_key",
    "ContentType": "content_type",
}
READ_ONLY = frozenset(
    {
        "DeliveryCount",
        "EnqueuedSequenceNumber",
        "EnqueuedTimeUtc",
        "LockToken",
        "LockedUntilUtc",
        "SequenceNumber",
        "State",
        "DeadLetterSource",
        "ForcePersistence",
        "ViaPartitionKey",
        "Size",
    }
)
TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
STATES = {1: "Active", 2: "Deferred", 3: "Scheduled", 4: "Active", 5: "Active"}


def rfc1123(ms: int) -> str:
    return email.utils.formatdate(ms / 1000, usegmt=True)


def _instant_ms(text: Any, what: str) -> int:
    if not isinstance(text, str):
        raise BadRequest(f"BrokerProperties {what} must be a date string")
    try:
        return int(email.utils.parsedate_to_datetime(text).timestamp() * 1000)
    except (TypeError, ValueError, OverflowError):
        return parse_instant_ms(text, 0)


def message_from(
    body: bytes, props: Any, custom: dict[str, Any], content_type: str | None
) -> Message:
    """One REST message → the stored message."""
    if props is None:
        props = {}
    if not isinstance(props, dict):
        raise BadRequest("BrokerProperties must be a JSON object")
    fields: dict[str, Any] = {"body": body}
    if content_type:
        fields["content_type"] = content_type
    for key, value in props.items():
        if key in SETTABLE:
            if value is not None:
                fields[SETTABLE[key]] = str(value)
        elif key == "TimeToLive":
            if (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not 0 < value * 1000 <= MAX_TIMESPAN_MS
            ):
                raise BadRequest(
                    "BrokerProperties TimeToLive must be a positive number of seconds "
                    "(at most TimeSpan.MaxValue)"
                )
            fields["time_to_live_ms"] = int(value * 1000)
        elif key == "ScheduledEnqueueTimeUtc":
            fields["scheduled_enqueue_time_ms"] = _instant_ms(value, key)
        elif key not in READ_ONLY:
            raise BadRequest(f"unknown BrokerProperties field {key!r}")
    if custom:
        fields["application_properties"] = custom
    if "message_id" not in fields:
        fields["message_id"] = uuid.uuid4().hex  # Service Bus gives every message an id
    return Message(**fields)


def _property_value(text: str) -> Any:
    """A custom property header's value: JSON string, number, boolean or null, else text."""
    text = text.strip()
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if value is None or isinstance(value, str | bool | int | float):
        return value
    return text


def custom_properties(req: Request) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in req.raw_headers:
        low = name.lower()
        if low in STANDARD_HEADERS or low.startswith(STANDARD_PREFIXES):
            continue
        out[name] = _property_value(value)
    return out


def _json(text: bytes | str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from None


def messages_of(req: Request) -> list[Message]:
    content_type = req.headers.get("content-type")
    if content_type is not None and content_type.split(";")[0].strip().lower() == BATCH_TYPE:
        items = _json(req.body, "the batch body")
        if not isinstance(items, list) or not items:
            raise BadRequest("a batch body must be a non-empty JSON array of messages")
        out = []
        for item in items:
            if not isinstance(item, dict):
                raise BadRequest("each batch item must be an object with a Body")
            body = item.get("Body", "")
            if not isinstance(body, str):
                raise BadRequest("a batch item's Body must be a string")
            user = item.get("UserProperties") or {}
            if not isinstance(user, dict):
                raise BadRequest("a batch item's UserProperties must be an object")
            out.append(message_from(body.encode(), item.get("BrokerProperties"), user, None))
        return out
    raw = req.headers.get("brokerproperties")
    props = _json(raw, "the BrokerProperties header") if raw else None
    return [message_from(req.body, props, custom_properties(req), content_type)]


def delivered_headers(d: Delivered, m: Message, location: str | None) -> list[tuple[str, str]]:
    props: dict[str, Any] = {
        "DeliveryCount": d.delivery_count,
        "EnqueuedTimeUtc": rfc1123(d.enqueued_time_ms),
        "SequenceNumber": d.sequence_number,
        "State": STATES.get(d.state, "Active"),
    }
    if d.lock_token is not None:
        props["LockToken"] = d.lock_token
    if d.locked_until_ms is not None:
        props["LockedUntilUtc"] = rfc1123(d.locked_until_ms)
    for key, attr in SETTABLE.items():
        value = getattr(m, attr)
        if value is not None and key != "ContentType":
            props[key] = value
    if m.time_to_live_ms is not None:
        props["TimeToLive"] = m.time_to_live_ms / 1000
    if m.scheduled_enqueue_time_ms is not None:
        props["ScheduledEnqueueTimeUtc"] = rfc1123(m.scheduled_enqueue_time_ms)
    if m.enqueued_sequence_number is not None:  # where a forwarded message came from
        props["EnqueuedSequenceNumber"] = m.enqueued_sequence_number
    if m.dead_letter_source is not None:
        props["DeadLetterSource"] = m.dead_letter_source
    if d.partition_id is not None:
        props["PartitionId"] = d.partition_id
    headers = [
        ("BrokerProperties", json.dumps(props)),
        ("Content-Type", m.content_type or "application/octet-stream"),
    ]
    if location is not None:
        headers.append(("Location", location))
    app = dict(m.application_properties or {})
    if d.changes:
        app.update(d.changes)
    for name, value in app.items():
        if TOKEN.match(name) and name.lower() not in STANDARD_HEADERS:
            headers.append((name, _header_value(value)))
    return headers


def _header_value(value: Any) -> str:
    """A custom property as its header: JSON, a timestamp as a quoted RFC 1123 date (as
    Service Bus's REST API sends DateTime properties), a UUID as its quoted text, binary as
    quoted base64."""
    if isinstance(value, datetime):
        return json.dumps(rfc1123(round(value.timestamp() * 1000)))
    if isinstance(value, uuid.UUID):
        return json.dumps(str(value))
    if type(value) in TYPED:  # a Service Bus REST header has no AMQP type: the value
        return json.dumps(to_json(value)["value"])
    if isinstance(value, bytes):
        return json.dumps(base64.b64encode(value).decode())
    return json.dumps(value)


class DataPlane:
    def __init__(self, frontend: HttpHost) -> None:
        self.frontend = frontend
        self.service = frontend.service

    def handle(
        self, req: Request, entity: str, rest: list[str], respond: Respond, alive: Alive
    ) -> None:
        try:
            if not rest:
                if req.method != "POST":
                    raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")
                self.send(req, entity, respond)
            elif rest == ["head"]:
                if req.method == "POST":
                    self.receive(req, entity, "peek-lock", respond, alive)
                elif req.method == "DELETE":
                    self.receive(req, entity, "receive-and-delete", respond, alive)
                else:
                    raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")
            elif len(rest) == 2:
                ops = {"DELETE": "complete", "PUT": "abandon", "POST": "renew-lock"}
                if req.method not in ops:
                    raise MethodNotAllowed(f"{req.method} is not allowed on {req.path}")
                self.settle(req.namespace, entity, ops[req.method], rest[1], respond)
            else:
                error(respond, 404, f"no such resource {req.path!r}")
        except SbctlError as err:
            fail(respond, err)

    # ------------------------------------------------------------ send

    def send(self, req: Request, entity: str, respond: Respond) -> None:
        messages: Any = messages_of(req)  # stored as they are (sbctld.service.operations)
        args = SendEncoded(req.namespace, entity, messages)
        reply = answering(respond, lambda _seqs: respond(201, [], b""))
        self.service.run("send", args, reply, sender=req.sender)

    # ------------------------------------------------------------ receive

    def _timeout(self, req: Request) -> float:
        text = req.query.get("timeout")
        if text is None or text == "":
            return DEFAULT_TIMEOUT_S
        try:
            value = float(text)
        except ValueError:
            raise BadRequest(f"timeout must be a number of seconds, not {text!r}") from None
        if value < 0:
            raise BadRequest("timeout must not be negative")
        return min(value, MAX_TIMEOUT_S)

    def receive(self, req: Request, entity: str, mode: str, respond: Respond, alive: Alive) -> None:
        """One message, waiting up to ``?timeout`` seconds for it (parked in the service,
        woken by a write from any front-end); 204 when none came."""
        wait_ms = round(self._timeout(req) * 1000)

        def got(messages: list[Delivered]) -> None:
            if not messages:
                respond(204, [], b"")
                return
            d = messages[0]
            m = decode_message(d.payload)
            location = None
            if mode == "peek-lock":
                location = req.url(f"/{entity}/messages/{d.sequence_number}/{d.lock_token}")
            respond(201 if location else 200, delivered_headers(d, m, location), m.body)

        args = Receive(req.namespace, entity, 1, wait_ms, mode)
        reply = answering(respond, got)
        self.service.run("receive", args, reply, alive=alive, parked=self.frontend.waiting)

    # ------------------------------------------------------------ settle

    def settle(self, req_ns: str, entity: str, op: str, token: str, respond: Respond) -> None:
        def settled(results: list[Any]) -> None:
            (result,) = results
            if isinstance(result, SettleFailed):
                raise result.error
            headers: list[tuple[str, str]] = []
            if isinstance(result, LockRenewed):
                until = rfc1123(result.locked_until_ms)
                headers.append(("BrokerProperties", json.dumps({"LockedUntilUtc": until})))
            respond(200, headers, b"")

        self.service.run("settle", Settle(req_ns, entity, op, [token]), answering(respond, settled))


Alive = Callable[[], bool]
