"""What Python users write, turned into what the wire carries.

Both clients accept, besides their own forms (``bytes`` bodies, milliseconds, epoch
milliseconds, lock-token strings), the forms of the azure-servicebus SDK:

- a body as ``str`` (sent as UTF-8), a bare body or message instead of a list;
- a duration as :class:`datetime.timedelta`;
- a time as :class:`datetime.datetime` (a naive one is taken as UTC, like the SDK's
  ``*_utc`` parameters);
- a received message wherever a lock token is expected.

:func:`ServiceBusMessage` builds a :class:`Message` with the SDK's keyword names
(``time_to_live``, ``scheduled_enqueue_time_utc``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

from sbctl.core.durations import instant_ms
from sbctl.core.errors import BadRequest
from sbctl.core.records import Message, PropertyValue

Body = bytes | bytearray | memoryview | str
Sendable = Message | Body | Sequence[Message | Body]
Duration = int | timedelta
Instant = int | datetime


def body_bytes(body: Any) -> bytes:
    """A body as bytes: ``str`` is encoded as UTF-8."""
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    raise BadRequest(f"a message body must be bytes or str, not {type(body).__name__}")


def duration_ms(value: Any, name: str = "duration") -> int:
    """Milliseconds from an int (already milliseconds) or a timedelta."""
    if isinstance(value, timedelta):
        return round(value / timedelta(milliseconds=1))
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise BadRequest(f"{name} must be milliseconds (int) or a timedelta, not {value!r}")


def wait_seconds(value: Any) -> float:
    """A receive's ``max_wait``: seconds (int or float) or a timedelta."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    raise BadRequest(f"max_wait must be seconds or a timedelta, not {value!r}")


def message(value: Any) -> Message:
    """A Message whose fields hold wire types: a str body encoded, a timedelta TTL and a
    datetime schedule converted."""
    if not isinstance(value, Message):
        return Message(body=body_bytes(value))
    changes: dict[str, Any] = {}
    if not isinstance(value.body, bytes):
        changes["body"] = body_bytes(value.body)
    ttl = value.time_to_live_ms
    if ttl is not None and not isinstance(ttl, int):
        changes["time_to_live_ms"] = duration_ms(ttl, "time_to_live_ms")
    at = value.scheduled_enqueue_time_ms
    if at is not None and not isinstance(at, int):
        changes["scheduled_enqueue_time_ms"] = instant_ms(at, "scheduled_enqueue_time_ms")
    return msgspec.structs.replace(value, **changes) if changes else value


def messages(value: Any) -> list[Message]:
    """One message, one body, or a sequence of them, as a list of Messages."""
    if isinstance(value, Message | bytes | bytearray | memoryview | str):
        return [message(value)]
    return [message(m) for m in value]


def lock_tokens(value: Any) -> list[str]:
    """Lock tokens from tokens or received messages, one or a sequence."""
    if type(value) is list and all(type(item) is str for item in value):
        return list(value)  # (the usual call: a list of tokens)
    items = [value] if isinstance(value, str) or hasattr(value, "lock_token") else list(value)
    tokens = []
    for item in items:
        token = item if isinstance(item, str) else getattr(item, "lock_token", None)
        if not isinstance(token, str):
            raise BadRequest(
                f"settle a received peek-lock message or its lock token: {item!r} has no lock token"
            )
        tokens.append(token)
    return tokens


def options(values: Mapping[str, Any]) -> dict[str, Any]:
    """Entity options with timedelta durations as milliseconds."""
    return {k: duration_ms(v) if isinstance(v, timedelta) else v for k, v in values.items()}


def state_bytes(state: Any) -> bytes | None:
    """Session state: bytes, str (UTF-8) or None (clears it)."""
    return None if state is None else body_bytes(state)


def ServiceBusMessage(  # named after the SDK class it stands in for
    body: Body = b"",
    *,
    application_properties: Mapping[str, PropertyValue] | None = None,
    session_id: str | None = None,
    message_id: str | None = None,
    scheduled_enqueue_time_utc: datetime | None = None,
    time_to_live: timedelta | None = None,
    content_type: str | None = None,
    correlation_id: str | None = None,
    subject: str | None = None,
    partition_key: str | None = None,
    to: str | None = None,
    reply_to: str | None = None,
    reply_to_session_id: str | None = None,
) -> Message:
    """A :class:`Message` built with the azure-servicebus SDK's ``ServiceBusMessage``
    keywords, so code written for the SDK sends through sbctl unchanged."""
    return Message(
        body=body_bytes(body),
        message_id=message_id,
        session_id=session_id,
        partition_key=partition_key,
        correlation_id=correlation_id,
        subject=subject,
        content_type=content_type,
        to=to,
        reply_to=reply_to,
        reply_to_session_id=reply_to_session_id,
        time_to_live_ms=None if time_to_live is None else duration_ms(time_to_live),
        scheduled_enqueue_time_ms=(
            None if scheduled_enqueue_time_utc is None else instant_ms(scheduled_enqueue_time_utc)
        ),
        application_properties=(
            dict(application_properties) if application_properties is not None else None
        ),
    )
