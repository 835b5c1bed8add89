"""The record-batch codec shared by the daemon's partition logs and by spark-load.

A partition log is a sequence of *batches*; every write appends whole batches
(daemon/README.md §21, after Kafka's log layer). All integers are little-endian.

Batch layout::

    offset size field
    0      8    base_seq       u64  local sequence number of the first record   } not covered
    8      8    base_time_ms   i64  enqueue time of every record in the batch     } by the CRC
    16     4    length         u32  bytes after this field (crc .. end)           }
    20     4    crc            u32  CRC-32C of bytes [24, end)
    24     1    magic          u8   = 1
    25     1    attributes     u8   = 0 (reserved)
    26     2    reserved       u16  = 0
    28     4    record_count   u32
    32     ...  records

Record layout (inside the CRC)::

    0      4    length         u32  bytes after this field
    4      4    rel_seq        u32  sequence number relative to base_seq
    8      8    ttl_ms         i64  effective time to live (already capped by the entity)
    16     8    scheduled_ms   i64  scheduled enqueue time, or -1 when not scheduled
    24     ...  payload        the message (see below)

Because ``base_seq`` and ``base_time_ms`` sit before the CRC'd region, a batch staged
elsewhere (spark-load) is adopted by rewriting those 16 header bytes only; the records, their
relative sequence numbers and the CRC stay as written.

The payload's version is told by its first byte. Version 4 (this release writes only it) is
the AMQP 1.0 encoding of the message as its sender sent it, whose first byte is always 0x00
(a described section): :mod:`sbctl.core.message_form` owns it. Versions 1-3 are a MessagePack
array of :class:`Message` (its first byte 0x90-0x9F or 0xDC/0xDD, never 0x00); they are read
here (:func:`decode_legacy`) and converted once, where they are read, to version 4.
:class:`Message` stays the fields every side works with (what a sender sets; what the
broker reads of a message).
"""

from __future__ import annotations

import operator
import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import accumulate, chain, repeat
from typing import Any, NamedTuple

import msgspec

from sbctl.core.amqp.types import Int, Timestamp
from sbctl.core.typed import TYPED, from_bytes, stored, to_bytes

MAGIC = 1
BATCH_HEADER = struct.Struct("<QqII")  # base_seq, base_time_ms, length, crc
BATCH_INNER = struct.Struct("<BBHI")  # magic, attributes, reserved, record_count
RECORD_HEADER = struct.Struct("<IIqq")  # length, rel_seq, ttl_ms, scheduled_ms
BATCH_OVERHEAD = BATCH_HEADER.size + BATCH_INNER.size  # 32
RECORD_OVERHEAD = RECORD_HEADER.size  # 24
CRC_START = 24
NOT_SCHEDULED = -1
MAX_BATCH_BYTES = 64 * 1024 * 1024

# An application property value (daemon/README.md §1.5). The plain JSON-like values are stored as
# themselves; a timestamp (an aware datetime) as MessagePack's timestamp extension (-1), bytes as
# MessagePack bin, a UUID as extension UUID_EXT with its 16 bytes, and the AMQP types plain
# Python values cannot tell apart (sbctl.core.typed: Long, Short, Symbol, ...) as extension
# AMQP_EXT holding the value's AMQP encoding (record version 3). Records written before typed
# values existed hold plain values only and decode unchanged.
# (msgspec cannot type-check such a union, so the record holds ``Any`` and decode_legacy
# checks the values instead.)
PropertyValue = str | int | float | bool | None | datetime | uuid.UUID | bytes
VALUE_TYPES = frozenset(
    (str, int, float, bool, type(None), datetime, uuid.UUID, bytes, Int, Timestamp, *TYPED)
)
UUID_EXT = 1
AMQP_EXT = 2

# The string properties a sender sets (daemon/README.md §1.2); flags and JSON fields use these
# names.
STRING_FIELDS = (
    "message_id",
    "session_id",
    "partition_key",
    "correlation_id",
    "subject",
    "content_type",
    "to",
    "reply_to",
    "reply_to_session_id",
)


class Message(msgspec.Struct, array_like=True, omit_defaults=True, forbid_unknown_fields=True):
    """What a sender sets (daemon/README.md §1.2); the stored payload of records of versions
    1-3.

    Field order is the format of those records: append new fields at the end only. Such a
    record is a MessagePack array whose length is its version: every field added later is optional
    and trailing, so a record written before it existed (a shorter array) decodes with the
    field's default. Fields 0-15 are version 1 (the first release, 16 elements); 16-18
    (``message_annotations``, ``body_kind``, ``body_amqp``) are version 2 (19 elements).
    Version 3 adds no field but two value forms: property and annotation values of the
    AMQP types in :mod:`sbctl.core.typed` (MessagePack extension ``AMQP_EXT``), and a
    ``body_amqp`` of one byte, the constructor of a string (0xA1) or binary (0xA0) value,
    meaning "the value is ``body``" (so a string or binary amqp-value body is stored once).
    A release refuses records longer than it knows (``forbid_unknown_fields``): data dirs
    open forwards, not backwards.
    """

    body: bytes = b""
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    content_type: str | None = None
    to: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    time_to_live_ms: int | None = None
    scheduled_enqueue_time_ms: int | None = None
    application_properties: dict[str, Any] | None = None  # values: PropertyValue
    # Set by the broker, never by a sender (daemon/README.md §1.8, §11): the sequence number a
    # forwarded message had where it was first enqueued, how many forwarding hops it made,
    # and the entity whose DLQ forwarded it.
    enqueued_sequence_number: int | None = None
    transfer_hops: int | None = None
    dead_letter_source: str | None = None
    # -- version 2
    # Message annotations an AMQP client set (``x-opt-*`` other than the broker-owned ones),
    # with typed values as for application properties.
    message_annotations: dict[str, Any] | None = None
    # How an AMQP body was sent when it was not data sections: "value" (one amqp-value) or
    # "sequence" (amqp-sequence sections); ``body_amqp`` is then the AMQP encoding of the
    # value (or of the list of sequences) and ``body`` the value's text or bytes when it
    # was a string or binary (else empty). None: data sections, ``body`` their bytes.
    body_kind: str | None = None
    body_amqp: bytes | None = None


def _ext_hook(code: int, data: memoryview) -> Any:
    if code == UUID_EXT and len(data) == 16:
        return uuid.UUID(bytes=bytes(data))
    if code == AMQP_EXT:
        try:
            return from_bytes(data)
        except ValueError as exc:
            raise msgspec.ValidationError(str(exc)) from None
    raise msgspec.ValidationError(f"unknown MessagePack extension type {code}")


def _check_values(values: dict[str, Any], what: str) -> None:
    for key, value in values.items():
        if type(value) not in VALUE_TYPES:
            raise msgspec.ValidationError(
                f"{what} {key!r}: a {type(value).__name__} is not a property value"
            )


def _tag(key: str, value: Any) -> Any:
    kind = type(value)
    if kind is uuid.UUID:
        return msgspec.msgpack.Ext(UUID_EXT, value.bytes)
    if kind is datetime and value.tzinfo is None:  # naive: UTC (else it is text)
        return value.replace(tzinfo=UTC)
    if kind in TYPED:
        try:
            return msgspec.msgpack.Ext(AMQP_EXT, to_bytes(value))
        except ValueError as exc:
            raise ValueError(f"property {key!r}: {exc}") from None
    return stored(value)


def _tag_values(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """``values`` as stored: UUIDs and the AMQP-typed values as their extensions, naive
    datetimes as UTC (the same mapping when it has none of them). ValueError naming the
    property when a typed value does not fit its type."""
    for v in values.values():  # (a plain loop is the fastest scan for a few values)
        if type(v) in _TAGGED:
            return {k: _tag(k, v) for k, v in values.items()}
    return values


def _tagged(message: Message) -> Message:
    """``message`` ready for MessagePack: a copy when it holds a UUID value, else itself."""
    props = message.application_properties
    ann = message.message_annotations
    if props:
        new = _tag_values(props)
        if new is not props:
            message = msgspec.structs.replace(message, application_properties=new)
    if ann:
        new = _tag_values(ann)
        if new is not ann:
            message = msgspec.structs.replace(message, message_annotations=new)
    return message


_TAGGED = frozenset((uuid.UUID, datetime, Int, Timestamp, *TYPED))
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Message, ext_hook=_ext_hook)


def encode_legacy(message: Message) -> bytes:
    """A record as version 3 wrote it (MessagePack): what tests use to make the records of
    an older data dir (this release writes version 4 only)."""
    # (the scan is inlined: this is the hot path, and a call costs more than the loop)
    props = message.application_properties
    if props:
        for v in props.values():
            if type(v) in _TAGGED:
                message = _tagged(message)
                break
    if message.message_annotations:
        message = _tagged(message)
    return _encoder.encode(message)


def decode_legacy(payload: bytes | memoryview) -> Message:
    """A record of versions 1-3 (a MessagePack array; checked when it was sent). A record
    an older release stored with a property key that is not a string (a null key: the AMQP
    front-end let one through) reads with that key as text, so it never blocks a queue's
    reads (daemon/README.md §29.11); a record that does not decode even so raises."""
    try:
        return _decoder.decode(payload)
    except msgspec.ValidationError:
        return _repaired(payload)


def _repaired(payload: bytes | memoryview) -> Message:
    fields = _loose.decode(payload)
    if not isinstance(fields, list):
        raise msgspec.ValidationError("a stored record must be a MessagePack array")
    for i in _KEYED_FIELDS:
        if i < len(fields) and isinstance(fields[i], dict):
            fields[i] = {k if type(k) is str else _key_text(k): v for k, v in fields[i].items()}
    message = msgspec.convert(fields, Message)
    if not _REPAIRS:
        import logging  # here: the client never logs, and logging costs the CLI ~2 ms

        logging.getLogger("sbctld").warning(
            "a stored message has a property key that is not a string (stored by an older "
            "release): it is read with the key as text (logged once)"
        )
    _REPAIRS.append(1)
    return message


def _key_text(key: Any) -> str:
    return "" if key is None else key.decode(errors="replace") if type(key) is bytes else str(key)


_loose = msgspec.msgpack.Decoder(ext_hook=_ext_hook)
_KEYED_FIELDS = (12, 16)  # application_properties, message_annotations
_REPAIRS: list[int] = []  # (the warning is logged at the first)


def decode_sent_message(payload: bytes | memoryview) -> Message:
    """A record as a client sent it: also checks that every property and annotation value
    is a property value (MessagePack could carry a list or a map there). Raises
    msgspec.DecodeError naming the offending key."""
    message: Message = _decoder.decode(payload)
    props = message.application_properties
    if props:
        for v in props.values():  # (inlined: the hot path of a send)
            if type(v) not in VALUE_TYPES:
                _check_values(props, "application property")
    if message.message_annotations:
        _check_values(message.message_annotations, "message annotation")
    return message


class StagedRecord(NamedTuple):
    payload: bytes
    ttl_ms: int
    scheduled_ms: int


class Indexed(NamedTuple):
    """What a log's index keeps of a batch's records, column by column (:func:`encode_indexed`)."""

    offsets: list[int]  # each payload's offset in the batch
    lengths: list[int]
    ttls: list[int]
    scheduled: list[int]
    crcs: list[int]  # CRC-32C of each record, header and payload (checked on every read)


def encode_indexed(
    base_seq: int, base_time_ms: int, records: Sequence[tuple[bytes, int, int]]
) -> tuple[bytes, Indexed]:
    """:func:`encode_batch`, with what the index keeps of each record (the daemon's send
    path): the CRCs taken by one map over the records' spans of the batch."""
    import crc32c  # see _encoded

    batch, offsets, lengths, ttls, scheduled = _encoded(base_seq, base_time_ms, records)
    starts = map(operator.sub, offsets, repeat(RECORD_HEADER.size))
    spans = map(
        memoryview(batch).__getitem__, map(slice, starts, map(operator.add, offsets, lengths))
    )
    crcs = list(map(crc32c.crc32c, spans))
    return batch, Indexed(offsets, lengths, list(ttls), list(scheduled), crcs)


def encode_batch(
    base_seq: int, base_time_ms: int, records: Sequence[tuple[bytes, int, int]]
) -> tuple[bytes, list[int]]:
    """Encode one batch; returns the bytes and each record's payload offset in them."""
    batch, offsets, *_columns = _encoded(base_seq, base_time_ms, records)
    return batch, offsets


def _encoded(
    base_seq: int, base_time_ms: int, records: Sequence[tuple[bytes, int, int]]
) -> tuple[bytes, list[int], list[int], Sequence[int], Sequence[int]]:
    """The batch's bytes, each payload's offset in them, and the records' lengths, TTLs and
    schedules; each step maps over a whole column (no Python-level work a record)."""
    import crc32c  # here, not at the top: the client and the CLI never need it (~10 ms)

    n = len(records)
    payloads, ttls, scheduled = zip(*records, strict=True) if n else ((), (), ())
    lengths = list(map(len, payloads))
    heads = list(
        map(
            RECORD_HEADER.pack,
            map(operator.add, lengths, repeat(RECORD_OVERHEAD - 4)),
            range(n),
            ttls,
            scheduled,
        )
    )
    inner = b"".join(
        chain(
            (BATCH_INNER.pack(MAGIC, 0, 0, n),),
            chain.from_iterable(zip(heads, payloads, strict=True)),
        )
    )
    offsets = list(
        accumulate(
            map(operator.add, lengths, repeat(RECORD_OVERHEAD)),
            initial=BATCH_OVERHEAD + RECORD_OVERHEAD,
        )
    )
    offsets.pop()  # (the end of the last record)
    header = BATCH_HEADER.pack(base_seq, base_time_ms, len(inner) + 4, crc32c.crc32c(inner))
    return header + inner, offsets, lengths, ttls, scheduled


def rewrite_header(batch: bytearray | memoryview, base_seq: int, base_time_ms: int) -> None:
    """Assign sequence numbers and enqueue time to a staged batch in place."""
    struct.pack_into("<Qq", batch, 0, base_seq, base_time_ms)


class BatchInfo(NamedTuple):
    offset: int  # file offset of the batch header
    base_seq: int
    base_time_ms: int
    size: int  # whole batch size in bytes
    record_count: int


class RecordInfo(NamedTuple):
    rel_seq: int
    payload_offset: int  # absolute offset of the payload in the scanned buffer
    payload_length: int
    ttl_ms: int
    scheduled_ms: int


class CorruptBatch(Exception):
    """A batch that fails its length or CRC check; everything from ``offset`` on is torn."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt batch at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


def read_batch_header(buf: bytes | memoryview, offset: int, end: int) -> BatchInfo:
    """Validate the batch at ``offset`` (length, magic, CRC) and describe it."""
    if end - offset < BATCH_OVERHEAD:
        raise CorruptBatch(offset, f"truncated header ({end - offset} bytes)")
    base_seq, base_time, length, crc = BATCH_HEADER.unpack_from(buf, offset)
    size = 20 + length
    if length < BATCH_INNER.size + 4 or length > MAX_BATCH_BYTES or offset + size > end:
        raise CorruptBatch(offset, f"bad length {length}")
    inner = memoryview(buf)[offset + CRC_START : offset + size]
    import crc32c  # see encode_batch

    if crc32c.crc32c(inner) != crc:
        raise CorruptBatch(offset, "CRC mismatch")
    magic, _attrs, _res, count = BATCH_INNER.unpack_from(buf, offset + CRC_START)
    if magic != MAGIC:
        raise CorruptBatch(offset, f"unknown magic {magic}")
    return BatchInfo(offset, base_seq, base_time, size, count)


def iter_records(buf: bytes | memoryview, batch: BatchInfo) -> Iterator[RecordInfo]:
    """The records of a batch already validated by :func:`read_batch_header`."""
    pos = batch.offset + BATCH_OVERHEAD
    end = batch.offset + batch.size
    unpack = RECORD_HEADER.unpack_from
    for _ in range(batch.record_count):
        if pos + RECORD_OVERHEAD > end:
            raise CorruptBatch(batch.offset, "record overruns its batch")
        length, rel, ttl_ms, scheduled_ms = unpack(buf, pos)
        payload_len = length - (RECORD_OVERHEAD - 4)
        if payload_len < 0 or pos + 4 + length > end:
            raise CorruptBatch(batch.offset, "record overruns its batch")
        yield RecordInfo(rel, pos + RECORD_OVERHEAD, payload_len, ttl_ms, scheduled_ms)
        pos += 4 + length


def scan_batches(buf: bytes | memoryview, start: int = 0) -> tuple[list[BatchInfo], int, str]:
    """Walk valid batches from ``start``; returns (batches, valid_end, problem or '')."""
    end = len(buf)
    batches: list[BatchInfo] = []
    pos = start
    while pos < end:
        try:
            info = read_batch_header(buf, pos, end)
        except CorruptBatch as exc:
            return batches, pos, exc.reason
        batches.append(info)
        pos += info.size
    return batches, pos, ""
