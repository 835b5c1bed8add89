"""One form for a message: the AMQP 1.0 encoding its sender sent (record version 4).

A stored record's payload is an AMQP message (daemon/README.md §21): the sender's sections
as it sent them. Every front-end hands the daemon that form (the AMQP front-end the bytes of
a transfer, the Unix client and HTTP what :func:`encode` made of their fields), and the
daemon reads each message once, at :func:`intake`, into the :class:`~sbctl.core.records.Message`
fields the broker works with (ids, session, partition key, TTL, schedule, what filters
read). Delivery splices the broker's facts in front of the stored bytes
(:mod:`sbctl.core.splice`); nothing the sender sent is re-encoded on the way.

The stored form is the sender's message with these changes, made once at intake and only
when needed (an SDK's message is stored byte for byte):

- delivery annotations are dropped (they are per hop); a record the broker writes itself
  (forwarding, dead-lettering into another entity) carries its own facts there:
  ``x-opt-enqueue-sequence-number``, ``x-opt-deadletter-source``, ``x-opt-sbctl-hops``
  and, for a time to live a header cannot hold, ``x-opt-sbctl-ttl``;
- message annotations only the broker sets (:data:`BROKER_ANNOTATIONS` but the partition
  key and scheduled enqueue time) are dropped from the map;
- sections come in the spec's order with the short descriptor form (§3.2); a section
  given twice keeps its last copy.

A payload of versions 1-3 (a MessagePack array, :mod:`sbctl.core.records`) never starts
with 0x00, which every AMQP message does: :func:`decode` reads both, and :func:`stored_form`
converts an older record once when it is read for delivery.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import msgspec.structs

from sbctl.core.amqp import codec
from sbctl.core.amqp.sections import (
    AMQP_SEQUENCE,
    AMQP_VALUE,
    APPLICATION_PROPERTIES,
    DATA,
    DELIVERY_ANNOTATIONS,
    FOOTER,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    batch_messages,
    list_items,
    map_of,
    properties_with_id,
    read_value,
    skip,
)
from sbctl.core.errors import BadRequest
from sbctl.core.message_ids import new_message_id, new_message_ids
from sbctl.core.message_plain import DATA_SECTION as _DATA
from sbctl.core.message_plain import PROPERTY_FIELDS as _PROPERTY_FIELDS
from sbctl.core.message_plain import plain_head, plain_message
from sbctl.core.message_write import (
    DEAD_LETTER_SOURCE,
    ENQUEUED_SEQUENCE,
    HOPS,
    LONG_TTL,
    encode_general,
)
from sbctl.core.records import Message, decode_legacy, decode_sent_message
from sbctl.core.send_rules import body_size, header_fits, message_id_fits
from sbctl.core.typed import json_value, milliseconds, property_value, text

UNDECODABLE = "undecodable AMQP message"
# Annotations the broker sets on delivery: never stored as a sender sent them (the partition
# key and scheduled enqueue time are the sender's, and stay).
BROKER_ANNOTATIONS = frozenset(
    (
        "x-opt-sequence-number",
        "x-opt-enqueued-time",
        "x-opt-locked-until",
        "x-opt-lock-token",
        "x-opt-message-state",
        "x-opt-partition-id",
        "x-opt-partition-key",
        "x-opt-scheduled-enqueue-time",
        "x-opt-enqueue-sequence-number",
        "x-opt-deadletter-source",
    )
)
_SENDERS = frozenset(("x-opt-partition-key", "x-opt-scheduled-enqueue-time"))
_DROPPED = BROKER_ANNOTATIONS - _SENDERS
_ORDER = (HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES)
_U32 = struct.Struct(">I").unpack_from
_PLAIN = frozenset((str, float, bool, bytes, type(None), uuid.UUID))


class Sent(msgspec.Struct, array_like=True, gc=False):
    """One message as the daemon takes it in: its fields, read once, and its stored form."""

    message: Message
    payload: bytes


# What a send takes: fields, a message taken in already, or an encoded one.
Sendable = Message | Sent | bytes | list[Any] | msgspec.Raw


def is_amqp(payload: bytes | memoryview) -> bool:
    """Whether a record's payload is the AMQP form (version 4), not a MessagePack array."""
    return len(payload) > 0 and payload[0] == 0x00


# ------------------------------------------------------------------ reading


# Where each field lies in a Message (array-like: its order is the record's).
_AT = {name: i for i, name in enumerate(Message.__struct_fields__)}
_BODY, _TTL, _SCHEDULED = _AT["body"], _AT["time_to_live_ms"], _AT["scheduled_enqueue_time_ms"]
_APP, _ANN, _KIND, _AMQP = (
    _AT["application_properties"],
    _AT["message_annotations"],
    _AT["body_kind"],
    _AT["body_amqp"],
)
_MESSAGE_ID = _AT["message_id"]
_PROPERTY_AT = tuple(None if n is None else _AT[n] for n in _PROPERTY_FIELDS)
_UNSET = [None] * len(_AT)


class _Read:
    """What one pass over a message's sections found: the Message's fields in order, and
    where each section lies (its last copy), for the stored form."""

    __slots__ = ("body", "f", "facts", "kind", "new_id", "peer", "rewrite", "spans")

    def __init__(self) -> None:
        self.f: list[Any] = _UNSET.copy()
        self.spans: dict[int, tuple[int, int]] = {}  # section code → (value start, end)
        self.body: list[tuple[int, int, int]] = []  # (code, value start, end)
        self.kind = ""
        self.rewrite = False  # the stored form differs from the bytes read
        self.facts = False  # the delivery annotations hold the broker's facts (kept)
        self.new_id: str | None = None  # a message id given at intake
        # An AMQP peer's message: a scheduled time out of range is refused naming the
        # annotation (the others' are refused by the send rules, as the loader's are).
        self.peer = False


def _read(buf: bytes, pos: int, end: int, delivered: bool, peer: bool = False) -> _Read:
    """One pass over the sections of the message in ``buf[pos:end]``. ``delivered``: a
    message as delivered (the broker's annotations read, as a client reads them); ``peer``:
    sent by an AMQP peer."""
    r = _Read()
    r.peer = peer
    spans = r.spans
    last = -1
    while pos < end:
        if buf[pos] == 0x00 and pos + 2 < end and buf[pos + 1] == 0x53:
            code = buf[pos + 2]
            pos += 3
        else:
            code, pos = _descriptor(buf, pos)
            r.rewrite = True
        if pos >= end:
            raise codec.DecodeError("message section has no value")
        if code == DATA and r.kind != "value" and r.kind != "sequence" and FOOTER not in spans:
            ctor = buf[pos]
            if ctor == 0xB0:
                stop = pos + 5 + _U32(buf, pos + 1)[0]
            elif ctor == 0xA0:
                stop = pos + 2 + buf[pos + 1]
            else:
                raise codec.DecodeError("a data section must hold binary")
            r.kind = "data"
            r.body.append((DATA, pos, stop))
        elif code >= DATA:
            stop = _body_section(buf, pos, code, r)
        elif HEADER <= code <= APPLICATION_PROPERTIES:
            if code in spans or code < last or r.body:
                r.rewrite = True
            last = code
            stop = _SECTION_READERS[code](buf, pos, end, r, delivered)
            spans[code] = (pos, stop)
        else:
            raise codec.DecodeError(f"unknown message section 0x{code:02x}")
        if stop > end:
            raise codec.DecodeError("a message section overruns its message")
        pos = stop
    return r


def _descriptor(buf: bytes, pos: int) -> tuple[int, int]:
    """A section's descriptor in its long form (a ulong, not the small one): its code."""
    if buf[pos] != 0x00:
        raise codec.DecodeError("a message section must be a described value")
    descriptor, pos = codec.decode(buf, pos + 1)
    if not isinstance(descriptor, int):
        raise codec.DecodeError(f"unknown message section {descriptor!r}")
    return int(descriptor), pos


def _body_section(buf: bytes, pos: int, code: int, r: _Read) -> int:
    """A body section other than the usual data sections, or the footer."""
    if code > FOOTER:
        raise codec.DecodeError(f"unknown message section 0x{code:02x}")
    ctor = buf[pos]
    stop = skip(buf, pos)
    if code == FOOTER:
        if ctor != 0x40 and ctor != 0xC1 and ctor != 0xD1:
            raise codec.DecodeError("message section 0x78 must be a map")
        if FOOTER in r.spans:
            r.rewrite = True
        r.spans[FOOTER] = (pos, stop)
        return stop
    if FOOTER in r.spans:
        r.rewrite = True
    if code == DATA:
        if ctor != 0xA0 and ctor != 0xB0:
            raise codec.DecodeError("a data section must hold binary")
        r.kind = r.kind or "data"
    elif code == AMQP_SEQUENCE:
        if ctor != 0x45 and ctor != 0xC0 and ctor != 0xD0:
            raise codec.DecodeError("an amqp-sequence section must hold a list")
        r.kind = r.kind or "sequence"
    else:
        if r.kind == "value":
            r.rewrite = True  # (the last value counts)
        r.kind = "value"
    if code != DATA and codec.decode(buf, pos)[1] != stop:  # (a value that does not decode)
        raise codec.DecodeError("a body section's size is wrong")
    r.body.append((code, pos, stop))
    return stop


def _header_end(buf: bytes, pos: int, end: int) -> int:
    """The end of the header section's value at ``pos`` if it has no time to live, else -1
    (also when it does not read: the general reading refuses it, in its words). A list8
    header read once is known by its bytes (a sender puts the same on every message)."""
    if buf[pos] == 0xC0 and pos + 1 < end:
        stop = pos + 2 + buf[pos + 1]
        if stop <= end and buf[pos:stop] in _PLAIN_HEADERS:
            return stop
    r = _Read()
    try:
        stop = _header(buf, pos, end, r, False)
    except (ValueError, TypeError, IndexError, struct.error, BadRequest):
        return -1
    if r.f[_TTL] is not None:
        return -1
    if buf[pos] == 0xC0 and len(_PLAIN_HEADERS) < 256:
        _PLAIN_HEADERS.add(buf[pos:stop])
    return stop


_PLAIN_HEADERS: set[bytes] = set()  # list8 headers without a time to live, as read


def _header(buf: bytes, pos: int, end: int, r: _Read, _: bool) -> int:
    if buf[pos] not in (0x45, 0xC0, 0xD0):
        raise codec.DecodeError("the header section must be a list")
    count, pos, stop = list_items(buf, pos, end)
    for i in range(count):
        value, pos = read_value(buf, pos)
        if i == 2 and value is not None:
            r.f[_TTL] = milliseconds(value, "header ttl")
    if pos != stop:
        raise codec.DecodeError("the header section's size is wrong")
    return stop


def _map_pairs(buf: bytes, pos: int, end: int, what: int) -> tuple[list[Any], int]:
    """A map section's keys and values, alternating."""
    ctor = buf[pos]
    if ctor == 0x40:
        return [], pos + 1
    if ctor != 0xC1 and ctor != 0xD1:
        raise codec.DecodeError(f"message section 0x{what:02x} must be a map")
    count, pos, stop = list_items(buf, pos, end)
    if count % 2:
        raise codec.DecodeError("a map has an odd number of items")
    items: list[Any] = []
    append = items.append
    for _ in range(count):
        value, pos = read_value(buf, pos)
        append(value)
    if pos != stop:
        raise codec.DecodeError("a map's size is wrong")
    return items, stop


_FACTS: dict[str, tuple[int, Callable[[Any], Any]]] = {
    ENQUEUED_SEQUENCE: (_AT["enqueued_sequence_number"], int),
    DEAD_LETTER_SOURCE: (_AT["dead_letter_source"], text),
    HOPS: (_AT["transfer_hops"], int),
    LONG_TTL: (_TTL, int),  # (checked by the send rules, as a sender's TTL is)
}


def _facts(buf: bytes, pos: int, end: int, r: _Read, _: bool) -> int:
    """Delivery annotations: dropped from the stored form, but for the broker's facts."""
    items, stop = _map_pairs(buf, pos, end, DELIVERY_ANNOTATIONS)
    for k, v in zip(items[::2], items[1::2], strict=True):
        fact = _FACTS.get(k) if isinstance(k, str) else None
        if fact is not None and v is not None:
            r.f[fact[0]] = fact[1](v)
            r.facts = True
    if not r.facts:
        r.rewrite = True  # (a sender's: dropped)
    return stop


def _annotations(buf: bytes, pos: int, end: int, r: _Read, delivered: bool) -> int:
    items, stop = _map_pairs(buf, pos, end, MESSAGE_ANNOTATIONS)
    kept: dict[str, Any] = {}
    f = r.f
    for k, v in zip(items[::2], items[1::2], strict=True):
        if not isinstance(k, str):
            continue
        if k in BROKER_ANNOTATIONS:
            if v is None:
                pass
            elif k == "x-opt-partition-key":
                f[_AT["partition_key"]] = text(v)
            elif k == "x-opt-scheduled-enqueue-time":
                f[_SCHEDULED] = milliseconds(v, k) if r.peer else int(v)
            elif delivered and k in (ENQUEUED_SEQUENCE, DEAD_LETTER_SOURCE):
                at, read = _FACTS[k]
                f[at] = read(v)
            if not delivered and k in _DROPPED:
                r.rewrite = True  # (dropped from the stored form)
            continue
        try:
            kept[str(k)] = property_value(v)
        except BadRequest:
            continue  # (kept in the stored form, not shown as a property value)
    f[_ANN] = kept or None
    return stop


def _compound(buf: bytes, pos: int, end: int, kind: int, what: str) -> tuple[int, int, int]:
    """(count, first item, end) of the list (``kind`` 0xC0) or map (0xC1) at ``pos``, its
    small form read here; DecodeError saying ``what`` it must be otherwise."""
    ctor = buf[pos]
    if ctor == kind:
        return buf[pos + 2], pos + 3, pos + 2 + buf[pos + 1]
    if ctor == kind + 0x10 or ctor == (0x45 if kind == 0xC0 else 0x40):
        return list_items(buf, pos, end)
    raise codec.DecodeError(what)


def _properties(buf: bytes, pos: int, end: int, r: _Read, _: bool) -> int:
    count, p, stop = _compound(buf, pos, end, 0xC0, "the properties section must be a list")
    f = r.f
    at = _PROPERTY_AT
    for i in range(count):
        code = buf[p]
        field = at[i] if i < 13 else None
        if code == 0x40 or field is None:
            p = skip(buf, p)
        elif code == 0xA1:
            start = p + 2
            p = start + buf[p + 1]
            f[field] = buf[start:p].decode()
        else:
            value, p = read_value(buf, p)
            f[field] = value if type(value) is str else text(value)
    if p != stop:
        raise codec.DecodeError("the properties section's size is wrong")
    return stop


def _application_properties(buf: bytes, pos: int, end: int, r: _Read, _: bool) -> int:
    count, p, stop = _compound(buf, pos, end, 0xC1, "message section 0x74 must be a map")
    if count % 2:
        raise codec.DecodeError("a map has an odd number of items")
    props: dict[str, Any] = {}
    plain = _PLAIN
    for _pair in range(count // 2):
        if buf[p] == 0xA1:
            start = p + 2
            p = start + buf[p + 1]
            key = buf[start:p].decode()
        else:
            key, p = read_value(buf, p)
            if not isinstance(key, str):
                # AMQP restricts keys to strings (§3.2.5), and Service Bus refuses others.
                raise codec.DecodeError(f"application property key {key!r} is not a string")
            key = str(key)
        value, p = read_value(buf, p)
        props[key] = value if type(value) in plain else property_value(value)
    if p != stop:
        raise codec.DecodeError("a map's size is wrong")
    r.f[_APP] = props or None
    return stop


_SECTION_READERS = {
    HEADER: _header,
    DELIVERY_ANNOTATIONS: _facts,
    MESSAGE_ANNOTATIONS: _annotations,
    PROPERTIES: _properties,
    APPLICATION_PROPERTIES: _application_properties,
}


def _message(buf: bytes, r: _Read) -> Message:
    """The Message of a read message."""
    f = r.f
    kind = r.kind
    if kind == "data" or not kind:
        body = r.body
        if len(body) == 1:
            _, s, e = body[0]
            f[_BODY] = buf[s + 2 : e] if buf[s] == 0xA0 else buf[s + 5 : e]
        else:
            f[_BODY] = b"".join(
                buf[s + 2 : e] if buf[s] == 0xA0 else buf[s + 5 : e] for _, s, e in body
            )
        return Message(*f)
    f[_KIND] = kind
    if kind == "value":
        _, s, e = r.body[-1]
        raw = buf[s:e]
        value = codec.decode(raw)[0]
        f[_AMQP] = raw
        if isinstance(value, str | bytes):
            f[_BODY] = value.encode() if isinstance(value, str) else value
            return Message(*f)
    else:
        value = [codec.decode(buf[s:e])[0] for c, s, e in r.body if c == AMQP_SEQUENCE]
        f[_AMQP] = codec.encode(value)
    try:
        f[_BODY] = b"" if value is None else msgspec.json.encode(json_value(value))
    except (TypeError, ValueError, OverflowError):
        f[_BODY] = b""
    return Message(*f)


def _stored(buf: bytes, start: int, end: int, r: _Read) -> bytes:
    """The stored form of a message read from ``buf[start:end]`` (see the module's rules)."""
    parts: list[bytes] = []
    if r.new_id is not None and PROPERTIES not in r.spans:
        r.spans[PROPERTIES] = (0, 0)  # (none sent: one made for the id)
    for code in _ORDER:
        span = r.spans.get(code)
        if span is None or (code == DELIVERY_ANNOTATIONS and not r.facts):
            continue
        s, e = span
        if code == MESSAGE_ANNOTATIONS:
            parts.append(_broker_keys_dropped(buf, s, e))
        elif code == PROPERTIES and r.new_id is not None:
            parts.append(properties_with_id(buf[s:e], r.new_id))
        else:
            parts.append(bytes((0x00, 0x53, code)) + buf[s:e])
    kind = {"data": DATA, "sequence": AMQP_SEQUENCE, "value": AMQP_VALUE}.get(r.kind, DATA)
    body = [(c, s, e) for c, s, e in r.body if c == kind]
    for c, s, e in body[-1:] if kind == AMQP_VALUE else body:
        parts.append(bytes((0x00, 0x53, c)) + buf[s:e])
    if FOOTER in r.spans:
        s, e = r.spans[FOOTER]
        parts.append(b"\x00\x53\x78" + buf[s:e])
    return b"".join(parts)


_EMPTY_PROPERTIES = b"\x00\x53\x73\x45"  # a properties section with no field


def _id_properties(raw: bytes) -> bytes:
    """The start of a properties section holding only a message id (``raw``, UTF-8, < 250
    bytes), up to the id's bytes."""
    return bytes((0x00, 0x53, 0x73, 0xC0, len(raw) + 3, 1, 0xA1, len(raw)))


_ID32 = _id_properties(b"0" * 32)  # (the ids given: 32 hex digits)


def _with_id(buf: bytes, start: int, end: int, r: _Read, message_id: str) -> bytes:
    """A message in the spec's order with ``message_id`` put in its properties."""
    span = r.spans.get(PROPERTIES)
    if span is not None:
        s, e = span
        return b"".join((buf[start : s - 3], properties_with_id(buf[s:e], message_id), buf[e:end]))
    spans = r.spans
    after = spans.get(APPLICATION_PROPERTIES) or (r.body[0][1:] if r.body else spans.get(FOOTER))
    at = end if after is None else after[0] - 3
    raw = message_id.encode()
    section = _id_properties(raw) + raw
    if len(raw) > 250:
        section = properties_with_id(b"", message_id)
    return b"".join((buf[start:at], section, buf[at:end]))


def _broker_keys_dropped(buf: bytes, pos: int, end: int) -> bytes:
    """The message-annotations section at ``pos`` without the keys only the broker sets:
    the other entries' bytes as they were."""
    count, item, _ = list_items(buf, pos, end)
    kept: list[bytes] = []
    for _ in range(count // 2):
        key, after = read_value(buf, item)
        value_end = skip(buf, after)
        if not (isinstance(key, str) and key in _DROPPED):
            kept.append(buf[item:value_end])
        item = value_end
    return b"\x00\x53\x72" + map_of(len(kept), b"".join(kept))


_HEADER = b"\x00\x53\x70"  # a header section's descriptor


def _quick(buf: bytes, start: int, end: int, new_id: str | None) -> Sent | None:
    """A body alone (a data section, maybe after a header without a time to live and empty
    properties: the bare form a client sends) or text fields only
    (:mod:`sbctl.core.message_plain`); None for any other."""
    headed = data = start
    if buf.startswith(_HEADER, start):  # (durable, priority...: kept as sent, read by no one)
        headed = data = _header_end(buf, start + 3, end)
        if data < 0:
            return None
    if buf.startswith(_EMPTY_PROPERTIES, data):
        data += 4
    if buf.startswith(_DATA, data) and data + 3 < end:
        ctor = buf[data + 3]
        at = -1
        if ctor == 0xB0 and end - data >= 8 and data + 8 + _U32(buf, data + 4)[0] == end:
            at = data + 8
        elif ctor == 0xA0 and end - data >= 5 and data + 5 + buf[data + 4] == end:
            at = data + 5
        if at >= 0:
            if new_id is None:
                whole = buf if start == 0 and end == len(buf) else buf[start:end]
                return Sent(Message(buf[at:end]), whole)
            raw = new_id.encode()
            head = _ID32 if len(raw) == 32 else _id_properties(raw)
            stored = b"".join((buf[start:headed], head, raw, buf[data:end]))
            return Sent(Message(buf[at:end], new_id), stored)
    if headed != start:
        return None
    plain = plain_message(buf, start, end)
    if plain is not None and (new_id is None or plain.message_id is not None):
        return Sent(plain, buf[start:end] if start or end != len(buf) else buf)
    return None


def _intake_one(buf: bytes, start: int, end: int, new_id: str | None = None) -> Sent:
    """One message read; ``new_id``: the id it is given if it has none (:func:`_quick`,
    else :func:`_read`)."""
    if (quick := _quick(buf, start, end, new_id)) is not None:
        return quick
    try:
        r = _read(buf, start, end, False, new_id is not None)
        if new_id is not None and r.f[_MESSAGE_ID] is None:
            r.f[_MESSAGE_ID] = r.new_id = new_id
        message = _message(buf, r)
    except (ValueError, TypeError, IndexError, struct.error) as exc:
        raise codec.DecodeError(f"{UNDECODABLE}: {exc}") from None
    if r.rewrite:
        return Sent(message, _stored(buf, start, end, r))
    if r.new_id is not None:
        return Sent(message, _with_id(buf, start, end, r, r.new_id))
    return Sent(message, buf[start:end] if start or end != len(buf) else buf)


def intake(raw: bytes, *, give_id: bool = False) -> Sent:
    """One message as a sender encoded it: its fields and its stored form (``give_id``: a
    message id given when it has none, as :func:`intake_transfer` does). Raises
    codec.DecodeError when it does not decode (or an application property's key is not a
    string), BadRequest for a value sbctl cannot keep."""
    if type(raw) is not bytes:
        raw = bytes(raw)
    return _intake_one(raw, 0, len(raw), new_message_id() if give_id else None)


def intake_sent(raw: bytes | list[Any] | memoryview | msgspec.Raw) -> Sent:
    """One message of a Unix client's send: its AMQP form (bytes, or MessagePack binary still
    encoded), or the fields of record version 3 an older client sent (a MessagePack array,
    decoded or not), encoded here."""
    if type(raw) is bytes:
        return _intake_one(raw, 0, len(raw))
    if isinstance(raw, list):
        return intake(encode(decode_sent_message(msgspec.msgpack.encode(raw))))
    try:
        data: bytes = _binary.decode(raw)
    except msgspec.DecodeError:  # not MessagePack binary: the AMQP form itself, or fields
        data = bytes(raw)
        if not is_amqp(data):
            return intake(encode(decode_sent_message(data)))
    return _intake_one(data, 0, len(data))


_BARE_SHORT = _EMPTY_PROPERTIES + _DATA + b"\xa0"  # how encode() writes a body alone:
_BARE_LONG = _EMPTY_PROPERTIES + _DATA + b"\xb0"  # (< 256 bytes, or a 4-byte length)


def intake_bare(items: Sequence[Any]) -> tuple[list[Message], list[bytes]] | None:
    """The fields and stored forms of a send's messages when each is a body alone as
    :func:`encode` writes it (the usual Unix send), in one tight pass; None when any item
    is something else (the caller then reads each with :func:`intake_sent`, which gives the
    same result for these)."""
    messages: list[Message] = []
    for b in items:
        if type(b) is not bytes:
            return None
        n = len(b)
        if b.startswith(_BARE_LONG) and n >= 12 and 12 + _U32(b, 8)[0] == n:
            messages.append(Message(b[12:]))
        elif b.startswith(_BARE_SHORT) and n >= 9 and 9 + b[8] == n:
            messages.append(Message(b[9:]))
        else:
            return None
    return messages, list(items)


def sent_bare(items: Sequence[Any]) -> tuple[list[Message], list[bytes]] | None:
    """The fields and stored forms of a send of messages taken in already (``Sent``: what
    the AMQP endpoint stores) when each is a body of data and a message id of 1-128
    characters, nothing else, within the 64 KB its other sections may take: the rules of
    send_rules cannot refuse one (daemon/README.md §1.3, §1.4); None for any other batch."""
    messages: list[Message] = []
    for s in items:
        if type(s) is not Sent:
            return None
        m = s.message
        mid = m.message_id
        if (
            mid is None
            or not message_id_fits(mid)
            or msgspec.structs.astuple(m)[2:] != _ONLY_AN_ID
            or not header_fits(len(s.payload) - body_size(m))
        ):
            return None
        messages.append(m)
    return messages, [s.payload for s in items]


_ONLY_AN_ID = msgspec.structs.astuple(Message(b"", "id"))[2:]  # (every other field unset)


def intake_batch(batch: Sequence[Any]) -> tuple[list[Message], list[bytes]]:
    """A send's messages and their stored forms, each read once: a message a front-end
    took in already (``Sent``), the AMQP encoding of one, the bytes a Unix client sent, or
    fields (encoded here); one that does not decode is a BadRequest."""
    bare = intake_bare(batch)
    if bare is not None:
        return bare
    messages: list[Message] = []
    payloads: list[bytes] = []
    for i, item in enumerate(batch, 1):
        if isinstance(item, Sent):
            messages.append(item.message)
            payloads.append(item.payload)
            continue
        try:
            sent = intake(encode(item)) if isinstance(item, Message) else intake_sent(item)
        except (codec.DecodeError, msgspec.DecodeError, ValueError) as exc:
            raise BadRequest(f"message {i} of the batch is malformed: {exc}") from None
        messages.append(sent.message)
        payloads.append(sent.payload)
    return messages, payloads


_binary = msgspec.msgpack.Decoder(bytes)


def intake_transfer(payload: bytes, message_format: int) -> list[Sent]:
    """The messages of one incoming AMQP transfer: each message of a batch (format
    0x80013700, each data section one encoded message) or the transfer's one message.
    A message sent without a message id is given one, as Service Bus gives it (SDKs rely on
    it: @azure/service-bus keys its lock renewal by message id)."""
    if type(payload) is not bytes:
        payload = bytes(payload)
    if message_format != codec.BATCH_FORMAT:
        return [_intake_one(payload, 0, len(payload), new_message_id())]
    bare = _bare_batch(payload)
    if bare is not None:
        return bare
    spans = batch_messages(payload)
    ids = new_message_ids(len(spans))
    return [_intake_one(payload, s, e, i) for (s, e), i in zip(spans, ids, strict=True)]


_SECTION_AND_MESSAGE = struct.Struct(">4sI4sI").unpack_from  # a batch's data section, and
_SECTION = struct.Struct(">4sI").unpack_from  # the first section of the message it holds
_DATA_B0 = _DATA + b"\xb0"  # a data section of binary with a 4-byte length


def _bare_batch(payload: bytes) -> list[Sent] | None:
    """The messages of a batch that holds bodies alone (each message one data section, maybe
    after empty properties: the bare form a client sends), each given an id, in one pass
    over the envelope; None for any other batch (:func:`intake_transfer` then reads it the
    general way, which gives the same result for a bare one)."""
    end = len(payload)
    pos = 0
    spans: list[tuple[int, int]] = []
    while pos < end:
        if end - pos < 16:
            return None
        outer, size, inner, length = _SECTION_AND_MESSAGE(payload, pos)
        start = data = pos + 8
        stop = start + size
        if outer != _DATA_B0 or stop > end:
            return None
        if inner == _EMPTY_PROPERTIES:
            if stop - start < 12:
                return None
            data = start + 4
            inner, length = _SECTION(payload, data)
        if inner != _DATA_B0 or data + 8 + length != stop:
            return None
        spans.append((data, stop))
        pos = stop
    ids = new_message_ids(len(spans))
    return [
        Sent(Message(payload[d + 8 : s], i), b"".join((_ID32, i.encode(), payload[d:s])))
        for (d, s), i in zip(spans, ids, strict=True)
    ]


def decode(payload: bytes | memoryview | msgspec.Raw) -> Message:
    """A stored record's payload (any version) or a delivered message → its fields."""
    if type(payload) is msgspec.Raw:
        payload = bytes(payload)
    if not is_amqp(payload):
        return decode_legacy(payload)
    buf = bytes(payload)
    plain = plain_message(buf, 0, len(buf))  # the usual message: text fields and a body
    if plain is not None:
        return plain
    try:
        return _message(buf, _read(buf, 0, len(buf), True))
    except (ValueError, TypeError, IndexError, struct.error) as exc:
        raise msgspec.DecodeError(f"{UNDECODABLE}: {exc}") from None
    except BadRequest as exc:
        raise msgspec.DecodeError(str(exc)) from None


def stored_form(
    payload: bytes | memoryview, enqueued_ms: int | None = None, expires_ms: int | None = None
) -> bytes:
    """A record's payload in the AMQP form: as it is, or (a record of versions 1-3)
    converted once, as it is read. A delivery gives the message's enqueued and expiry
    times: a converted record then carries them as its properties' creation-time and (when
    it has a time to live) absolute-expiry-time, as the releases that stored it sent them."""
    if is_amqp(payload):
        return payload if type(payload) is bytes else bytes(payload)
    m = decode_legacy(payload)
    if m.time_to_live_ms is None:
        expires_ms = None
    return encode_general(m, enqueued_ms, expires_ms)


# ------------------------------------------------------------------ writing


def encode(m: Message) -> bytes:
    """A message's fields → its AMQP form (a client's send, HTTP's, Spark staging, a record
    the broker writes). ValueError naming the property when a typed value does not fit,
    BadRequest for a number no AMQP type holds."""
    head = bare_head(m)
    if head is not None:
        return head + m.body
    head = plain_head(m)
    if head is not None:
        return head + m.body
    try:
        return encode_general(m, None, None)
    except (struct.error, OverflowError) as exc:
        raise BadRequest(f"a number in the message is too large for its AMQP type: {exc}") from None


def bare_head(m: Message) -> bytes | None:
    """For a message that is a body alone (the usual send), what its AMQP form holds before
    the body (empty properties, the data section's start); None for any other message."""
    if m != Message(m.body):
        return None
    n = len(m.body)
    return _BARE_SHORT + bytes((n,)) if n < 256 else _BARE_LONG + n.to_bytes(4, "big")
