"""Messages of text fields and a data body, written and read without the generic codec.

The usual message a client or a `send --input` line makes has only string properties (and
maybe a partition key) and one data section. :func:`plain_head` writes its AMQP form and
:func:`plain_message` reads it back, byte for byte and field for field what
:mod:`sbctl.core.message_form`'s generic encoder and reader give (property-tested in
tests/unit/test_plain_message_encoding.py); anything else returns None and goes the generic
way.
"""

from __future__ import annotations

import struct
from typing import Any

from sbctl.core.records import Message

_U32 = struct.Struct(">I").unpack_from
DATA_SECTION = b"\x00\x53\x75"
# properties list index → Message field (group-id is the session id).
PROPERTY_FIELDS = (
    "message_id",
    None,  # user-id
    "to",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    None,  # content-encoding
    None,  # absolute-expiry-time
    None,  # creation-time
    "session_id",  # group-id
    None,  # group-sequence
    "reply_to_session_id",  # reply-to-group-id
)


def _text(value: str, small: int, large: int) -> bytes:
    """A string (or symbol) as the codec writes it: one-byte size under 256 bytes."""
    raw = value.encode()
    n = len(raw)
    return (bytes((small, n)) if n < 256 else bytes((large,)) + n.to_bytes(4, "big")) + raw


def _sized(small: int, large: int, count: int, body: bytes) -> bytes:
    """A list or map of ``count`` items as the codec writes it (list8/map8 when small)."""
    n = len(body) + 1
    if n < 256:
        return bytes((small, n, count)) + body
    return bytes((large,)) + (n + 3).to_bytes(4, "big") + count.to_bytes(4, "big") + body


_PK_KEY = b"\xa3\x13x-opt-partition-key"
_NULL = b"\x40"


def property_fields(m: Message, content_type: Any, expires: Any, created: Any) -> list[Any]:
    """The values of the properties section's 13 fields, in :data:`PROPERTY_FIELDS`' order
    (user-id, content-encoding and group-sequence never set)."""
    return [
        m.message_id,
        None,
        m.to,
        m.subject,
        m.reply_to,
        m.correlation_id,
        content_type,
        None,
        expires,
        created,
        m.session_id,
        None,
        m.reply_to_session_id,
    ]


def plain_head(m: Message) -> bytes | None:
    """For a message with text fields and a data body only (no TTL, schedule, properties,
    annotations or broker fields), what its AMQP form holds before the body: the bytes the
    generic encoder writes, without it (Spark staging and `send --input` encode one per
    line). None for any other message."""
    if (
        m.time_to_live_ms is not None
        or m.scheduled_enqueue_time_ms is not None
        or m.application_properties
        or m.message_annotations
        or m.body_amqp is not None
        or m.enqueued_sequence_number is not None
        or m.transfer_hops is not None
        or m.dead_letter_source is not None
        or (m.content_type is not None and not m.content_type.isascii())
    ):
        return None
    fields = property_fields(m, m.content_type, None, None)
    count = len(fields)
    while count and fields[count - 1] is None:
        count -= 1
    parts = []
    for i in range(count):
        value = fields[i]
        if value is None:
            parts.append(_NULL)
        elif i == 6:  # content-type is a symbol
            parts.append(_text(value, 0xA3, 0xB3))
        else:
            parts.append(_text(value, 0xA1, 0xB1))
    head = b""
    if m.partition_key is not None:
        pk = _PK_KEY + _text(m.partition_key, 0xA1, 0xB1)
        head = b"\x00\x53\x72" + _sized(0xC1, 0xD1, 2, pk)
    props = _sized(0xC0, 0xD0, count, b"".join(parts)) if count else b"\x45"
    n = len(m.body)
    size = bytes((0xA0, n)) if n < 256 else b"\xb0" + n.to_bytes(4, "big")
    return head + b"\x00\x53\x73" + props + DATA_SECTION + size


_PK_ANNOTATION = b"\x00\x53\x72\xc1"


def _plain_text(buf: bytes, pos: int, end: int, symbol: bool) -> tuple[str, int]:
    """The string (``symbol``: symbol) at ``pos``; ValueError for any other value."""
    ctor = buf[pos]
    if ctor == (0xA3 if symbol else 0xA1):
        start, stop = pos + 2, pos + 2 + buf[pos + 1]
    elif ctor == (0xB3 if symbol else 0xB1):
        start = pos + 5
        stop = start + _U32(buf, pos + 1)[0]
    else:
        raise ValueError("not plain")
    if stop > end:
        raise ValueError("not plain")
    raw = buf[start:stop]
    return (raw.decode("ascii") if symbol else raw.decode()), stop


def plain_message(buf: bytes, pos: int, end: int) -> Message | None:
    """The fields of what :func:`plain_head` writes (text fields, a partition key
    annotation, one data section), read without the generic reader: the Message it would
    give. None for anything else (the generic reader then reads, or refuses, it)."""
    fields: dict[str, Any] = {}
    try:
        if buf.startswith(_PK_ANNOTATION, pos):
            stop = pos + 5 + buf[pos + 4]
            if buf[pos + 5] != 2 or not buf.startswith(_PK_KEY, pos + 6):
                return None
            fields["partition_key"], at = _plain_text(buf, pos + 6 + len(_PK_KEY), stop, False)
            if at != stop:
                return None
            pos = stop
        if not buf.startswith(b"\x00\x53\x73", pos):
            return None
        ctor = buf[pos + 3]
        if ctor == 0x45:
            count, at, stop = 0, pos + 4, pos + 4
        elif ctor == 0xC0:
            count, at, stop = buf[pos + 5], pos + 6, pos + 5 + buf[pos + 4]
        elif ctor == 0xD0:
            count, at, stop = _U32(buf, pos + 8)[0], pos + 12, pos + 8 + _U32(buf, pos + 4)[0]
        else:
            return None
        if count > len(PROPERTY_FIELDS) or stop > end:
            return None
        for i in range(count):
            if buf[at] == 0x40:
                at += 1
                continue
            name = PROPERTY_FIELDS[i]
            if name is None:
                return None
            fields[name], at = _plain_text(buf, at, stop, i == 6)
        if at != stop or not buf.startswith(DATA_SECTION, stop):
            return None
        ctor = buf[stop + 3]
        if ctor == 0xA0:
            at = stop + 5
            size = buf[stop + 4]
        elif ctor == 0xB0:
            at = stop + 8
            size = _U32(buf, stop + 4)[0]
        else:
            return None
        if at + size != end:
            return None
    except (ValueError, IndexError, struct.error):
        return None
    return Message(buf[at:end], **fields)
