"""The wire protocol between the client and the daemon: one module, imported by both.

Framing: each frame is a 4-byte little-endian length followed by that many bytes of
MessagePack. The receiver checks the length against its limit *before* reading the body.

Request: ``[v, id, op, args]``; reply: ``[id, ok, result]`` where ``result`` is the op's
result when ``ok`` and ``{"code", "message", "retry_after"?}`` otherwise (sbctl.core.errors).
Requests may be pipelined on one connection; replies carry the request id and may come
back in any order (a long-poll receive answers late).

Every op's arguments are a typed Struct below; which op takes which, and what each op is
(durable, what it wakes, how the client reads it), is declared once in
:mod:`sbctl.core.operations`, which also decodes them. Decoding is strict, so a malformed request
becomes a BadRequest naming the field, never a traceback. Bodies travel as raw bytes.
"""

from __future__ import annotations

import struct
from typing import Any

import msgspec

from sbctl.core.errors import BadRequest
from sbctl.core.message_form import bare_head
from sbctl.core.message_form import encode as encode_message
from sbctl.core.records import Message
from sbctl.core.typed import TYPED, plain

PROTOCOL_VERSION = 1
LENGTH = struct.Struct("<I")
MAX_REQUEST_BYTES = 16 * 1024 * 1024
MAX_REPLY_BYTES = 1024 * 1024 * 1024


class Request(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    v: int
    id: int
    op: str
    args: msgspec.Raw = msgspec.Raw(b"\x80")


class Reply(msgspec.Struct, array_like=True):
    id: int
    ok: bool
    result: msgspec.Raw


class _Args(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class Empty(_Args):
    pass


class NamespaceCreate(_Args):
    name: str
    sku: str = "standard"
    premium_messaging_partitions: int = 1
    capacity: int = 1
    credits_per_second: int | None = None  # None: the daemon's default
    ops_per_unit: int | None = None


class NamespaceUpdate(_Args):
    name: str
    credits_per_second: int | None = None
    capacity: int | None = None
    ops_per_unit: int | None = None


class NamespaceRef(_Args):
    name: str


class NamespaceSetKey(_Args):
    """Set a namespace's SAS key name and key (daemon/README.md §3)."""

    name: str
    key_name: str
    key: str


class NamespacePair(_Args):
    """Pair the primary ``name`` with ``secondary`` (daemon/README.md §0.3; defaults §0.3.7)."""

    name: str
    secondary: str
    backlog_queue_count: int = 10
    failover_interval_ms: int = 60_000
    ping_primary_interval_ms: int = 60_000
    enable_syphon: bool = False


class NamespaceScope(_Args):
    namespace: str


class EntityRef(_Args):
    namespace: str
    name: str


class EntityCreate(_Args):
    """``options`` use the SDK's QueueProperties names; durations in milliseconds."""

    namespace: str
    name: str
    options: dict[str, Any] = {}


class TopicScope(_Args):
    namespace: str
    topic: str


class SubscriptionCreate(_Args):
    """``options`` use the SDK's SubscriptionProperties names; durations in milliseconds."""

    namespace: str
    topic: str
    name: str
    options: dict[str, Any] = {}


class SubscriptionRef(_Args):
    namespace: str
    topic: str
    name: str


class RuleCreate(_Args):
    """``filter``: ``{"type": "sql", "sql_expression": ...}``, ``{"type": "correlation",
    <correlation_id, message_id, to, reply_to, subject, session_id, reply_to_session_id,
    content_type>: ..., "properties": {...}}``, ``{"type": "true"}`` or ``{"type": "false"}``;
    None is the TrueFilter. ``action``: a SQL rule action (``SET ...; REMOVE ...``) or None."""

    namespace: str
    topic: str
    subscription: str
    name: str
    filter: dict[str, Any] | None = None
    action: str | None = None
    action_parameters: dict[str, Any] | None = None  # a SQL action's @parameters


class RuleRef(_Args):
    namespace: str
    topic: str
    subscription: str
    name: str


class Send(_Args):
    namespace: str
    entity: str
    messages: list[Message | bytes]  # each sent as its AMQP form (sbctl.core.message_form)
    # True: the reply is {"sequence_numbers": [...], "diverted_to": <backlog queue or
    # null>, "diverted_namespace": ...} instead of the list (a paired primary's diverted
    # sends answer sequence number 0).
    report: bool = False


class SendEncoded(_Args):
    """How the daemon reads a :class:`Send`: each message stays its encoded bytes (its AMQP
    form, MessagePack binary on the wire), read once and stored as it is (no re-encoding on
    the hot path; sbctl.core.message_form.intake_sent, which also reads the fields an older
    client sent as a MessagePack array)."""

    namespace: str
    entity: str
    messages: list[bytes | list[Any]]
    report: bool = False


class Peek(_Args):
    namespace: str
    entity: str
    count: int = 1
    from_sequence: int | None = None


class Receive(_Args):
    namespace: str
    entity: str
    count: int = 1
    max_wait_ms: int = 0
    mode: str = "peek-lock"
    session_lock_token: str | None = None


class Settle(_Args):
    namespace: str
    entity: str
    op: str
    lock_tokens: list[str]
    properties: dict[str, Any] | None = None
    reason: str | None = None
    description: str | None = None


class SessionAccept(_Args):
    namespace: str
    entity: str
    session_id: str | None = None
    # the next available session (no session_id): wait up to this long for one to be free
    max_wait_ms: int = 0


class SessionToken(_Args):
    namespace: str
    entity: str
    session_lock_token: str


class SessionRef(_Args):
    namespace: str
    entity: str
    session_id: str


class SessionState(_Args):
    namespace: str
    entity: str
    session_id: str
    state: bytes | None = None


class TxSettle(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    op: str
    lock_token: str
    properties: dict[str, Any] | None = None
    reason: str | None = None
    description: str | None = None


class Transact(_Args):
    namespace: str
    entity: str
    messages: list[Message | bytes] = []
    settlements: list[TxSettle] = []


class TransactEncoded(_Args):
    """How the daemon reads a :class:`Transact` (messages stay encoded, as in a send)."""

    namespace: str
    entity: str
    messages: list[bytes | list[Any]] = []
    settlements: list[TxSettle] = []


class ReceiveDeferred(_Args):
    namespace: str
    entity: str
    sequence_numbers: list[int]
    mode: str = "peek-lock"
    session_lock_token: str | None = None


class SequenceNumbers(_Args):
    namespace: str
    entity: str
    sequence_numbers: list[int]


class DeleteMessages(_Args):
    """Delete up to ``count`` of the oldest unlocked messages enqueued before ``before_ms``
    (None: now), of ``session_id`` if given, without receiving them."""

    namespace: str
    entity: str
    count: int
    before_ms: int | None = None
    session_id: str | None = None


class EntityPath(_Args):
    namespace: str
    entity: str


class Resubmit(_Args):
    namespace: str
    entity: str
    count: int | None = None
    to: str | None = None


class StagedFile(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A file of record batches staged by spark-load for one partition."""

    partition: int
    path: str


class LoadAdopt(_Args):
    """Adopt staged files (in order per partition) as one atomic load (sbctld.loads)."""

    namespace: str
    entity: str
    load_id: str
    files: list[StagedFile]


class LoadRef(_Args):
    namespace: str
    entity: str
    load_id: str


class FaultAdd(_Args):
    """Make stores unavailable or slow (sbctld.faults): every store of ``namespace``, or
    of the queue or topic ``entity``, or only its ``partitions``."""

    namespace: str
    entity: str | None = None
    partitions: list[int] = []
    kind: str = "unavailable"  # or "slow", with latency_ms
    latency_ms: int | None = None


class FaultList(_Args):
    namespace: str | None = None  # None: every namespace


class FaultClear(_Args):
    """Clear the faults ``ids``, or every fault of ``namespace``, or every fault."""

    namespace: str | None = None
    ids: list[str] = []
    all_namespaces: bool = False


class ClockAdvance(_Args):
    """Move a namespace's time forward by ``by_ms`` (daemon/README.md §31)."""

    namespace: str
    by_ms: int


class ClockSet(_Args):
    """Move a namespace's time forward to ``at_ms`` (ms since the epoch, UTC)."""

    namespace: str
    at_ms: int


def _plain_value(value: Any) -> Any:
    """A typed property value outside a record (settlement property changes) as its plain
    value: the protocol carries those untyped (daemon/README.md §1.5)."""
    if type(value) in TYPED:
        return plain(value)
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


_encoder = msgspec.msgpack.Encoder(enc_hook=_plain_value)
_request_decoder = msgspec.msgpack.Decoder(Request)
_reply_decoder = msgspec.msgpack.Decoder(Reply)


def encode_frame(obj: Any) -> bytearray:
    """One length-prefixed frame, encoded in place (a frame of a send or a receive is large:
    no copy of it is made, and none of its messages)."""
    frame = bytearray(LENGTH.size)
    _encoder.encode_into(obj, frame, LENGTH.size)
    LENGTH.pack_into(frame, 0, len(frame) - LENGTH.size)
    return frame


def _messages_array(messages: list[Message | bytes]) -> msgspec.Raw:
    """A send's messages as a MessagePack array of binaries, each the message's AMQP form
    (sbctl.core.message_form), written into one buffer: a body alone is written as it is,
    never copied into a message of its own first."""
    n = len(messages)
    out = bytearray(bytes((0x90 | n,)) if n < 16 else _HEAD16(0xDC, n) if n < 65536 else b"")
    if not out:
        out += _HEAD32(0xDD, n)
    for m in messages:
        if isinstance(m, Message):
            head = bare_head(m)
            if head is not None:
                out += _bin_head(len(head) + len(m.body))
                out += head
                out += m.body
                continue
            m = encode_message(m)
        out += _bin_head(len(m))
        out += m
    return msgspec.Raw(out)


def _bin_head(n: int) -> bytes:
    """The MessagePack head of a binary of ``n`` bytes."""
    if n < 256:
        return bytes((0xC4, n))
    return _HEAD16(0xC5, n) if n < 65536 else _HEAD32(0xC6, n)


_HEAD16 = struct.Struct(">BH").pack  # a MessagePack type byte and a 16- or 32-bit length
_HEAD32 = struct.Struct(">BI").pack


def encode_request(req_id: int, op: str, args: msgspec.Struct) -> bytearray:
    messages = getattr(args, "messages", None)
    if messages and any(isinstance(m, Message) for m in messages):
        # Each message travels in its AMQP form, as stored (sbctl.core.message_form).
        args = msgspec.structs.replace(args, messages=_messages_array(messages))
    try:
        return encode_frame((PROTOCOL_VERSION, req_id, op, args))
    except OverflowError:
        raise BadRequest(
            f"{op}: a number in the request is too large (at most 2**63 - 1)"
        ) from None


def decode_envelope(body: bytes | memoryview) -> Request:
    """The ``[v, id, op, args]`` envelope; raises BadRequest (the id is then unknown: 0)."""
    try:
        req = _request_decoder.decode(body)
    except (msgspec.DecodeError, ValueError) as exc:  # ValueError: invalid UTF-8 in a str
        raise BadRequest(f"malformed request frame: {exc}") from None
    except RecursionError:
        raise BadRequest("malformed request frame: nested too deeply") from None
    return req


def encode_reply(req_id: int, ok: bool, result: Any) -> bytearray:
    return encode_frame((req_id, ok, result))


def decode_reply(body: bytes | bytearray | memoryview) -> Reply:
    return _reply_decoder.decode(body)


def decode_result(raw: msgspec.Raw, type_: Any = Any) -> Any:
    return msgspec.msgpack.decode(raw, type=type_)
