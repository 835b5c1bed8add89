"""Messages as users see them: building them from JSON, and received messages out.

JSON Lines input (``sbctl send --input``) and JSON output both use the snake_case names of
the azure-servicebus Python SDK (daemon/README.md §1.2).
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

import msgspec

from sbctl.core import typed
from sbctl.core.delivered import Delivered
from sbctl.core.durations import format_instant, instant_ms, parse_duration_ms, parse_instant_ms
from sbctl.core.errors import BadRequest
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import STRING_FIELDS, Message, PropertyValue
from sbctl.core.typed import json_value

_PLAIN = frozenset((str, int, float, bool, type(None)))
STATE_NAMES = {1: "active", 2: "deferred", 3: "scheduled", 4: "deadlettered", 5: "deadlettered"}
INPUT_FIELDS = frozenset(
    (
        "body",
        "body_base64",
        "time_to_live",
        "scheduled_enqueue_time_utc",
        "application_properties",
        *STRING_FIELDS,
    )
)


def message_from_json(obj: Any, now_ms: int) -> Message:
    """One JSON Lines object → Message. Raises BadRequest naming the offending field."""
    if not isinstance(obj, dict):
        raise BadRequest(f"a message must be a JSON object, not {type(obj).__name__}")
    unknown = sorted(set(obj) - INPUT_FIELDS)
    if unknown:
        raise BadRequest(f"unknown message field {unknown[0]!r}")
    if "body" in obj and "body_base64" in obj:
        raise BadRequest("give either body or body_base64, not both")
    body: bytes = b""
    if "body_base64" in obj:
        try:
            body = base64.b64decode(str(obj["body_base64"]), validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest("body_base64 is not valid base64") from None
    elif "body" in obj:
        raw = obj["body"]
        body = raw.encode() if isinstance(raw, str) else msgspec.json.encode(raw)
    fields: dict[str, Any] = {"body": body}
    for name in STRING_FIELDS:
        value = obj.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise BadRequest(f"{name} must be a string")
            fields[name] = value
    if obj.get("time_to_live") is not None:
        ttl = obj["time_to_live"]
        fields["time_to_live_ms"] = (
            int(ttl * 1000) if isinstance(ttl, int | float) else parse_duration_ms(str(ttl))
        )
    if obj.get("scheduled_enqueue_time_utc") is not None:
        fields["scheduled_enqueue_time_ms"] = parse_instant_ms(
            str(obj["scheduled_enqueue_time_utc"]), now_ms
        )
    props = obj.get("application_properties")
    if props is not None:
        fields["application_properties"] = check_properties(props)
    return Message(**fields)


# A JSON Lines message of a text body and text fields only (the usual line); its fields
# after the body are Message's, in Message's order.
_TextLine = msgspec.defstruct(
    "_TextLine",
    [("body", str, ""), *((name, str | None, None) for name in STRING_FIELDS)],
    forbid_unknown_fields=True,
)
assert Message.__struct_fields__[1 : 1 + len(STRING_FIELDS)] == STRING_FIELDS
_text_line = msgspec.json.Decoder(_TextLine).decode
_fields = msgspec.structs.astuple


def message_from_line(line: bytes, now_ms: int) -> Message:
    """One JSON Lines line → Message, as :func:`message_from_json` reads its object (the
    usual line, text fields only, without building the object first). Raises
    msgspec.DecodeError for a line that is not JSON, else as message_from_json."""
    try:
        body, *fields = _fields(_text_line(line))
    except msgspec.DecodeError:  # (ValidationError too: any other line)
        return message_from_json(msgspec.json.decode(line), now_ms)
    return Message(body.encode(), *fields)


TYPED_NAMES = ("timestamp", "uuid", "binary", *typed.NAMES)


def check_properties(props: Any) -> dict[str, PropertyValue]:
    """Application properties from JSON or Python: plain values as they are, a typed value
    as ``{"$type": NAME, "value": ...}`` (what ``to_dict`` writes; NAME ``timestamp``,
    ``uuid``, ``binary`` or an AMQP type, see :mod:`sbctl.core.typed`) or as a datetime, UUID,
    bytes or one of :mod:`sbctl.core.amqp.types`' classes."""
    if not isinstance(props, dict):
        raise BadRequest("application_properties must be a JSON object")
    out: dict[str, PropertyValue] = {}
    for key, value in props.items():
        if not isinstance(key, str):
            raise BadRequest(f"application property name {key!r} must be a string")
        out[key] = property_value(key, value)
    return out


def property_value(key: str, value: Any) -> PropertyValue:
    """One property value, checked; typed JSON objects become their Python values."""
    if isinstance(value, str | int | float | bool | uuid.UUID | bytes) or value is None:
        if type(value) in typed.TYPED:
            try:
                typed.to_bytes(value)
            except ValueError as exc:
                raise BadRequest(f"application property {key!r}: {exc}") from None
        return value
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, dict) and set(value) == {"$type", "value"}:
        return _typed_value(key, value["$type"], value["value"])
    raise BadRequest(
        f"application property {key!r} must be a string, number, boolean, null or "
        '{"$type": TYPE, "value": ...}'
    )


def _typed_value(key: str, kind: Any, raw: Any) -> PropertyValue:
    """The value of ``{"$type": kind, "value": raw}``."""
    try:
        if kind == "timestamp":
            return datetime.fromtimestamp(parse_instant_ms(str(raw), 0) / 1000, tz=UTC)
        if kind == "uuid":
            return uuid.UUID(str(raw))
        if kind == "binary":
            return base64.b64decode(str(raw), validate=True)
        if kind in typed.NAMES:
            value: PropertyValue = typed.from_json(kind, raw)
            return value
    except ValueError as exc:
        detail = f" ({exc})" if kind in typed.NAMES else ""
        raise BadRequest(f"application property {key!r}: invalid {kind} {raw!r}{detail}") from None
    except (BadRequest, binascii.Error):
        raise BadRequest(f"application property {key!r}: invalid {kind} {raw!r}") from None
    raise BadRequest(
        f"application property {key!r}: unknown $type {kind!r} (use {', '.join(TYPED_NAMES)})"
    )


def parse_property(text: str) -> tuple[str, PropertyValue]:
    """``k=v`` from the command line. A JSON scalar (``5``, ``2.5``, ``true``, ``null``,
    ``"5"``) keeps its type; anything else is a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise BadRequest(f"invalid property {text!r}: use key=value")
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return key, raw
    if isinstance(value, str | int | float | bool) or value is None:
        return key, value
    if isinstance(value, dict) and "$type" in value:
        return key, property_value(key, value)
    return key, raw


# The property a peeked or received message shows when its stored record cannot be read
# (daemon/README.md §29.11).
UNREADABLE = "UnreadableRecord"


class ReceivedMessage:
    """A peeked or received message (daemon/README.md §1.8 broker properties included).

    Reads like the azure-servicebus SDK's ``ServiceBusReceivedMessage``: ``body``,
    ``message_id``, ``session_id`` and the other sender fields, ``dead_letter_reason``,
    ``dead_letter_error_description``, ``delivery_count``, ``sequence_number``,
    ``enqueued_time_utc`` (an aware UTC datetime), ``time_to_live`` (a timedelta),
    ``application_properties``; ``str(msg)`` is the body as text. The raw epoch
    milliseconds stay available as ``enqueued_time_ms``, ``locked_until_ms`` and
    ``expires_at_ms``, and the sent fields as ``message``.

    A message received from the daemon keeps its stored form and decodes it the first
    time ``message``, ``application_properties`` or a field read from them is asked for:
    a consumer that only settles by lock token never pays for the decoding
    (sbctl/guides/python.md, "Received messages"). A stored record that cannot be read
    decodes to an empty body with the ``UnreadableRecord`` property saying why, never
    failing the rest."""

    sequence_number: int
    enqueued_time_ms: int
    delivery_count: int
    lock_token: str | None
    locked_until_ms: int | None
    expires_at_ms: int
    partition_id: int | None
    state: str

    __hash__ = None  # type: ignore[assignment]  # (mutable, compared by value)

    def __init__(
        self,
        sequence_number: int,
        enqueued_time_utc: int | datetime,
        delivery_count: int,
        lock_token: str | None,
        locked_until_utc: int | datetime | None,
        expires_at_utc: int | datetime,
        partition_id: int | None,
        state: str,
        message: Message,
        application_properties: dict[str, PropertyValue] | None = None,
    ) -> None:
        self.sequence_number = sequence_number
        self.enqueued_time_ms = instant_ms(enqueued_time_utc)
        self.delivery_count = delivery_count
        self.lock_token = lock_token
        self.locked_until_ms = None if locked_until_utc is None else instant_ms(locked_until_utc)
        self.expires_at_ms = instant_ms(expires_at_utc)
        self.partition_id = partition_id
        self.state = state
        self._stored: Delivered | None = None
        self.__dict__["_decoded"] = (message, dict(application_properties or {}))

    @classmethod
    def from_wire(cls, d: Delivered) -> ReceivedMessage:
        self = cls.__new__(cls)
        self.sequence_number = d.sequence_number
        self.enqueued_time_ms = d.enqueued_time_ms
        self.delivery_count = d.delivery_count
        self.lock_token = d.lock_token
        self.locked_until_ms = d.locked_until_ms
        self.expires_at_ms = d.expires_at_ms
        self.partition_id = d.partition_id
        self.state = STATE_NAMES.get(d.state, "active")
        self._stored = d
        return self

    def _read(self) -> tuple[Message, dict[str, PropertyValue]]:
        """(message, application properties), decoded once: threads that read a message
        at once all get the first decoding (one dict.setdefault, atomic)."""
        decoded: tuple[Message, dict[str, PropertyValue]] | None = self.__dict__.get("_decoded")
        if decoded is None:
            decoded = self.__dict__.setdefault("_decoded", self._decode())
        return decoded

    def _decode(self) -> tuple[Message, dict[str, PropertyValue]]:
        d = self._stored
        assert d is not None
        try:
            msg = decode_message(d.payload)
        except msgspec.DecodeError as exc:  # (a damaged record: shown, never blocking the rest)
            why = f"the stored record cannot be read: {exc}"
            msg = Message(b"", application_properties={UNREADABLE: why})
        props = dict(msg.application_properties or {})
        if d.changes:
            props.update(d.changes)
        return msg, props

    @property
    def message(self) -> Message:
        return self._read()[0]

    @message.setter
    def message(self, value: Message) -> None:
        self.__dict__["_decoded"] = (value, self._read()[1])

    @property
    def application_properties(self) -> dict[str, PropertyValue]:
        return self._read()[1]

    @application_properties.setter
    def application_properties(self, value: dict[str, PropertyValue]) -> None:
        self.__dict__["_decoded"] = (self._read()[0], value)

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "message" in state:  # pickled when this class was a dataclass: its fields
            state = dict(state)
            state["_decoded"] = (state.pop("message"), state.pop("application_properties"))
            state.setdefault("_stored", None)
        self.__dict__.update(state)

    __match_args__ = (  # (also what equality and repr compare, as the dataclass did)
        "sequence_number",
        "enqueued_time_ms",
        "delivery_count",
        "lock_token",
        "locked_until_ms",
        "expires_at_ms",
        "partition_id",
        "state",
        "message",
        "application_properties",
    )

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in self.__match_args__)

    def __repr__(self) -> str:
        fields = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.__match_args__)
        return f"{type(self).__name__}({fields})"

    def __str__(self) -> str:
        return self.body.decode(errors="replace")

    @property
    def body(self) -> bytes:
        return self.message.body

    # -- times, as the SDK gives them (aware UTC datetimes)
    @property
    def enqueued_time_utc(self) -> datetime:
        return _utc(self.enqueued_time_ms)

    @property
    def locked_until_utc(self) -> datetime | None:
        return None if self.locked_until_ms is None else _utc(self.locked_until_ms)

    @property
    def expires_at_utc(self) -> datetime:
        return _utc(self.expires_at_ms)

    @property
    def scheduled_enqueue_time_utc(self) -> datetime | None:
        at = self.message.scheduled_enqueue_time_ms
        return None if at is None else _utc(at)

    @property
    def time_to_live(self) -> timedelta | None:
        ttl = self.message.time_to_live_ms
        return None if ttl is None else timedelta(milliseconds=ttl)

    # -- what the sender set
    @property
    def message_id(self) -> str | None:
        return self.message.message_id

    @property
    def session_id(self) -> str | None:
        return self.message.session_id

    @property
    def partition_key(self) -> str | None:
        return self.message.partition_key

    @property
    def correlation_id(self) -> str | None:
        return self.message.correlation_id

    @property
    def subject(self) -> str | None:
        return self.message.subject

    @property
    def content_type(self) -> str | None:
        return self.message.content_type

    @property
    def to(self) -> str | None:
        return self.message.to

    @property
    def reply_to(self) -> str | None:
        return self.message.reply_to

    @property
    def reply_to_session_id(self) -> str | None:
        return self.message.reply_to_session_id

    # -- set by the broker
    @property
    def dead_letter_reason(self) -> str | None:
        return _text(self.application_properties.get("DeadLetterReason"))

    @property
    def dead_letter_error_description(self) -> str | None:
        return _text(self.application_properties.get("DeadLetterErrorDescription"))

    @property
    def dead_letter_source(self) -> str | None:
        return self.message.dead_letter_source

    @property
    def enqueued_sequence_number(self) -> int | None:
        return self.message.enqueued_sequence_number

    def to_dict(self) -> dict[str, Any]:
        m = self.message
        out: dict[str, Any] = {}
        try:
            out["body"] = m.body.decode()
        except UnicodeDecodeError:
            out["body_base64"] = base64.b64encode(m.body).decode()
        for name in STRING_FIELDS:
            out[name] = getattr(m, name)
        out["time_to_live"] = m.time_to_live_ms / 1000 if m.time_to_live_ms is not None else None
        out["scheduled_enqueue_time_utc"] = (
            format_instant(m.scheduled_enqueue_time_ms)
            if m.scheduled_enqueue_time_ms is not None
            else None
        )
        props = self.application_properties
        if any(type(v) not in _PLAIN for v in props.values()):
            props = {k: json_value(v) for k, v in props.items()}
        out["application_properties"] = props
        # The SDK surfaces these application properties on their own (daemon/README.md §1.9).
        out["dead_letter_reason"] = self.application_properties.get("DeadLetterReason")
        out["dead_letter_error_description"] = self.application_properties.get(
            "DeadLetterErrorDescription"
        )
        out["sequence_number"] = self.sequence_number
        out["enqueued_time_utc"] = format_instant(self.enqueued_time_ms)
        out["delivery_count"] = self.delivery_count
        out["lock_token"] = self.lock_token
        out["locked_until_utc"] = (
            format_instant(self.locked_until_ms) if self.locked_until_ms is not None else None
        )
        out["expires_at_utc"] = format_instant(self.expires_at_ms)
        out["partition_id"] = self.partition_id
        out["enqueued_sequence_number"] = m.enqueued_sequence_number
        out["dead_letter_source"] = m.dead_letter_source
        out["state"] = self.state
        if m.message_annotations:
            out["message_annotations"] = json_value(m.message_annotations)
        if m.body_kind is not None:
            out["body_kind"] = m.body_kind
        return out


def _utc(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _text(value: PropertyValue) -> str | None:
    return None if value is None else str(value)


# What the clients' settle calls take: lock tokens or received messages, one or a sequence.
Tokens: TypeAlias = str | ReceivedMessage | Sequence[str | ReceivedMessage]
