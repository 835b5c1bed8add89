"""The record-batch codec and the Message payload (sbctl.core.records, daemon/README.md §21)."""

from __future__ import annotations

import math
import struct
import uuid
from datetime import UTC, datetime

import crc32c
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.records import (
    BATCH_HEADER,
    BATCH_INNER,
    BATCH_OVERHEAD,
    CRC_START,
    NOT_SCHEDULED,
    RECORD_HEADER,
    RECORD_OVERHEAD,
    UUID_EXT,
    CorruptBatch,
    Message,
    StagedRecord,
    decode_legacy,
    decode_sent_message,
    encode_batch,
    encode_indexed,
    encode_legacy,
    iter_records,
    read_batch_header,
    rewrite_header,
    scan_batches,
)

U64 = st.integers(min_value=0, max_value=2**64 - 1)
I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)

records_st = st.lists(
    st.builds(
        StagedRecord,
        payload=st.binary(max_size=300),
        ttl_ms=I64,
        scheduled_ms=st.one_of(st.just(NOT_SCHEDULED), I64),
    ),
    min_size=0,
    max_size=12,
)


def _records_of(buf: bytes | bytearray, offset: int = 0) -> list[StagedRecord]:
    info = read_batch_header(buf, offset, len(buf))
    out = []
    for k, r in enumerate(iter_records(buf, info)):
        assert r.rel_seq == k
        payload = bytes(buf[r.payload_offset : r.payload_offset + r.payload_length])
        out.append(StagedRecord(payload, r.ttl_ms, r.scheduled_ms))
    return out


def _small_batch() -> bytes:
    batch, _ = encode_batch(
        7, 1_000, [StagedRecord(b"alpha", 60_000, NOT_SCHEDULED), StagedRecord(b"b", -1, 5)]
    )
    return batch


# --------------------------------------------------------------------- batches


@given(records=records_st, base_seq=U64, base_time=I64)
def test_batch_round_trip(records: list[StagedRecord], base_seq: int, base_time: int) -> None:
    batch, offsets = encode_batch(base_seq, base_time, records)
    info = read_batch_header(batch, 0, len(batch))
    assert info == (0, base_seq, base_time, len(batch), len(records))
    assert _records_of(batch) == records
    # The returned offsets point at each payload inside the batch.
    for off, rec in zip(offsets, records, strict=True):
        assert batch[off : off + len(rec.payload)] == rec.payload
    assert len(batch) == BATCH_OVERHEAD + sum(RECORD_OVERHEAD + len(r.payload) for r in records)


@given(batches=st.lists(st.tuples(records_st, U64, I64), max_size=5), lead=st.binary(max_size=9))
def test_scan_walks_consecutive_batches(
    batches: list[tuple[list[StagedRecord], int, int]], lead: bytes
) -> None:
    encoded = [encode_batch(seq, t, recs)[0] for recs, seq, t in batches]
    buf = lead + b"".join(encoded)
    found, end, problem = scan_batches(buf, len(lead))
    assert (end, problem) == (len(buf), "")
    assert [(b.base_seq, b.base_time_ms, b.record_count) for b in found] == [
        (seq, t, len(recs)) for recs, seq, t in batches
    ]
    offset = len(lead)
    for info, enc, (recs, _, _) in zip(found, encoded, batches, strict=True):
        assert (info.offset, info.size) == (offset, len(enc))
        assert _records_of(buf, offset) == recs
        offset += len(enc)


@given(records=records_st, staged=st.tuples(U64, I64), final=st.tuples(U64, I64))
def test_rewrite_header_keeps_crc_valid(
    records: list[StagedRecord], staged: tuple[int, int], final: tuple[int, int]
) -> None:
    batch, _ = encode_batch(*staged, records)
    buf = bytearray(batch)
    rewrite_header(buf, *final)
    info = read_batch_header(buf, 0, len(buf))
    assert (info.base_seq, info.base_time_ms) == final
    assert buf[16:] == batch[16:]  # only the 16 header bytes changed
    assert _records_of(buf) == records
    # The adopted batch is byte-identical to one encoded with the final numbers.
    assert bytes(buf) == encode_batch(*final, records)[0]


def test_rewrite_header_through_memoryview_of_a_bigger_buffer() -> None:
    batch = _small_batch()
    buf = bytearray(b"x" * 5 + batch)
    rewrite_header(memoryview(buf)[5:], 99, 123)
    info = read_batch_header(buf, 5, len(buf))
    assert (info.base_seq, info.base_time_ms) == (99, 123)
    assert buf[:5] == b"xxxxx"


def test_every_flipped_byte_in_the_crc_region_is_detected() -> None:
    batch = _small_batch()
    assert len(batch) > CRC_START + 10
    # The CRC field itself (bytes 20..24) and everything it covers (24..end).
    for pos in range(20, len(batch)):
        for mask in (0x01, 0x80, 0xFF):
            buf = bytearray(batch)
            buf[pos] ^= mask
            with pytest.raises(CorruptBatch) as info:
                read_batch_header(buf, 0, len(buf))
            assert info.value.offset == 0
            found, end, problem = scan_batches(buf)
            assert (found, end) == ([], 0)
            assert problem


@given(data=st.data())
@settings(max_examples=200)
def test_flipped_byte_detected_in_random_batches(data: st.DataObject) -> None:
    records = data.draw(records_st.filter(bool))
    batch, _ = encode_batch(1, 2, records)
    pos = data.draw(st.integers(min_value=CRC_START - 4, max_value=len(batch) - 1))
    delta = data.draw(st.integers(min_value=1, max_value=255))
    buf = bytearray(batch)
    buf[pos] ^= delta
    with pytest.raises(CorruptBatch):
        read_batch_header(buf, 0, len(buf))


def test_length_field_damage_is_detected() -> None:
    batch = _small_batch()
    for pos in range(16, 20):
        for mask in (0x01, 0x10, 0x80):
            buf = bytearray(batch)
            buf[pos] ^= mask
            with pytest.raises(CorruptBatch):
                read_batch_header(buf + bytes(300), 0, len(buf) + 300)


def test_base_seq_and_time_are_outside_the_crc() -> None:
    """By design (adoption rewrites them): damage there is not a CRC failure."""
    batch = _small_batch()
    buf = bytearray(batch)
    buf[0] ^= 0xFF
    buf[9] ^= 0xFF
    info = read_batch_header(buf, 0, len(buf))
    assert info.base_seq != 7
    assert info.base_time_ms != 1_000


def test_truncation_at_every_offset_keeps_the_valid_prefix() -> None:
    b1, _ = encode_batch(1, 10, [StagedRecord(b"one", 5, NOT_SCHEDULED)])
    b2, _ = encode_batch(2, 20, [StagedRecord(b"two", 5, NOT_SCHEDULED)] * 3)
    b3, _ = encode_batch(5, 30, [])
    whole = b1 + b2 + b3
    bounds = [0, len(b1), len(b1) + len(b2), len(whole)]
    for cut in range(len(whole) + 1):
        found, end, problem = scan_batches(whole[:cut])
        complete = [b for b in bounds[1:] if b <= cut]
        assert [b.offset + b.size for b in found] == complete
        assert end == (complete[-1] if complete else 0)
        if cut in bounds:
            assert problem == ""
        else:
            assert problem, cut
            assert "truncated" in problem or "bad length" in problem
            with pytest.raises(CorruptBatch):
                read_batch_header(whole[:cut], end, cut)


@given(garbage=st.binary(min_size=1, max_size=64))
def test_garbage_after_valid_batches_is_reported(garbage: bytes) -> None:
    batch = _small_batch()
    found, end, problem = scan_batches(batch + garbage)
    assert len(found) == 1
    assert end == len(batch)
    assert problem


def test_zero_filled_tail_is_reported() -> None:
    batch = _small_batch()
    found, end, problem = scan_batches(batch + bytes(100))
    assert (len(found), end) == (1, len(batch))
    assert problem == "bad length 0"


def _with_crc(inner: bytes, base_seq: int = 1, base_time: int = 0) -> bytes:
    return BATCH_HEADER.pack(base_seq, base_time, len(inner) + 4, crc32c.crc32c(inner)) + inner


def test_unknown_magic_is_corrupt_even_with_a_good_crc() -> None:
    batch = _with_crc(BATCH_INNER.pack(2, 0, 0, 0))
    with pytest.raises(CorruptBatch, match="unknown magic 2"):
        read_batch_header(batch, 0, len(batch))


def test_record_overrunning_its_batch_is_corrupt_even_with_a_good_crc() -> None:
    # One record whose length says 100 payload bytes, but only 3 follow.
    inner = BATCH_INNER.pack(1, 0, 0, 1) + struct.pack("<IIqq", 100 + 20, 0, 0, -1) + b"abc"
    batch = _with_crc(inner)
    info = read_batch_header(batch, 0, len(batch))
    with pytest.raises(CorruptBatch, match="overruns"):
        list(iter_records(batch, info))
    # A record count larger than what the batch holds.
    inner = BATCH_INNER.pack(1, 0, 0, 2) + struct.pack("<IIqq", 20, 0, 0, -1)
    batch = _with_crc(inner)
    info = read_batch_header(batch, 0, len(batch))
    with pytest.raises(CorruptBatch, match="overruns"):
        list(iter_records(batch, info))


def test_too_short_length_field_is_corrupt() -> None:
    inner = BATCH_INNER.pack(1, 0, 0, 0)
    batch = bytearray(_with_crc(inner))
    struct.pack_into("<I", batch, 16, 3)  # less than crc + inner header
    with pytest.raises(CorruptBatch, match="bad length 3"):
        read_batch_header(batch, 0, len(batch))


# --------------------------------------------------------------------- messages

ids = st.one_of(st.none(), st.text(max_size=40))
property_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=30),
    # typed values (a timestamp is an aware UTC datetime)
    st.datetimes(
        min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31), timezones=st.just(UTC)
    ),
    st.uuids(),
    st.binary(max_size=30),
)
messages_st = st.builds(
    Message,
    body=st.binary(max_size=200),
    message_id=ids,
    session_id=ids,
    partition_key=ids,
    correlation_id=ids,
    subject=ids,
    content_type=ids,
    to=ids,
    reply_to=ids,
    reply_to_session_id=ids,
    time_to_live_ms=st.one_of(st.none(), I64),
    scheduled_enqueue_time_ms=st.one_of(st.none(), I64),
    application_properties=st.one_of(
        st.none(), st.dictionaries(st.text(max_size=20), property_values, max_size=8)
    ),
    message_annotations=st.one_of(
        st.none(), st.dictionaries(st.text(max_size=20), property_values, max_size=4)
    ),
    body_kind=st.sampled_from([None, "value", "sequence"]),
    body_amqp=st.one_of(st.none(), st.binary(max_size=40)),
)


@given(message=messages_st)
def test_message_round_trip(message: Message) -> None:
    decoded = decode_legacy(encode_legacy(message))
    assert decoded == message
    # bool stays bool and int stays int (True == 1 in Python, so compare types too).
    for key, value in (message.application_properties or {}).items():
        assert type(decoded.application_properties[key]) is type(value)  # type: ignore[index]
    for key, value in (message.message_annotations or {}).items():
        assert type(decoded.message_annotations[key]) is type(value)  # type: ignore[index]


def test_a_version_1_record_decodes_with_version_2_defaults() -> None:
    """The first release wrote 16-element arrays with plain property values only."""
    v1 = [b"x", "id", *[None] * 10, {"s": "v", "i": 1, "f": 0.5, "b": True, "n": None}]
    v1 += [7, 2, "q"]
    assert len(v1) == 16
    m = decode_legacy(msgspec.msgpack.encode(v1))
    assert m == Message(
        b"x",
        "id",
        application_properties={"s": "v", "i": 1, "f": 0.5, "b": True, "n": None},
        enqueued_sequence_number=7,
        transfer_hops=2,
        dead_letter_source="q",
    )
    assert (m.message_annotations, m.body_kind, m.body_amqp) == (None, None, None)
    # and its plain values encode as the first release encoded them
    assert msgspec.msgpack.decode(encode_legacy(m))[:16] == v1


def test_typed_values_are_stored_as_tagged_msgpack() -> None:
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    at = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    m = Message(b"", application_properties={"u": u, "t": at, "b": b"\x00\xff"})
    raw = msgspec.msgpack.decode(encode_legacy(m), ext_hook=lambda c, d: (c, bytes(d)))
    assert raw[12] == {"u": (UUID_EXT, u.bytes), "t": at, "b": b"\x00\xff"}
    assert decode_legacy(encode_legacy(m)) == m
    assert m.application_properties == {"u": u, "t": at, "b": b"\x00\xff"}  # not mutated


def test_message_round_trip_keeps_nan_and_unicode() -> None:
    m = Message(
        body="ünïcødé 🚀".encode(),
        message_id="id-ß-日本",
        session_id="\u202e\x00 bidi and nul",
        application_properties={"nan": math.nan, "inf": -math.inf, "ключ": "значение"},
    )
    decoded = decode_legacy(memoryview(encode_legacy(m)))
    props = decoded.application_properties
    assert props is not None
    assert math.isnan(props["nan"])  # type: ignore[arg-type]
    assert props["inf"] == -math.inf
    assert props["ключ"] == "значение"
    assert (decoded.body, decoded.message_id, decoded.session_id) == (
        m.body,
        m.message_id,
        m.session_id,
    )


def test_message_encoding_is_positional() -> None:
    """Field order is the disk format: body first, message_id second, properties last."""
    fields = msgspec.msgpack.decode(encode_legacy(Message(b"x", "id", subject="s")))
    assert fields[:2] == [b"x", "id"]
    assert fields[Message.__struct_fields__.index("subject")] == "s"
    # A shorter array (written before later fields existed) still decodes.
    assert decode_legacy(msgspec.msgpack.encode([b"x", "id"])) == Message(b"x", "id")


@pytest.mark.parametrize(
    "payload",
    [
        msgspec.msgpack.encode([b"x", 5]),  # message_id must be a string
        # one field too many
        msgspec.msgpack.encode([b"x"] + [None] * len(Message.__struct_fields__)),
        msgspec.msgpack.encode({"body": b"x"}),  # a map, not an array
        msgspec.msgpack.encode([b"x", *[None] * 11, {"k": [1, 2]}]),  # list property
        msgspec.msgpack.encode([b"x", *[None] * 11, {"k": {"a": 1}}]),  # map property
        msgspec.msgpack.encode([b"x", *[None] * 11, {"k": msgspec.msgpack.Ext(9, b"")}]),
        msgspec.msgpack.encode([b"x", *[None] * 11, {"k": msgspec.msgpack.Ext(1, b"short")}]),
        msgspec.msgpack.encode([b"x", *[None] * 15, {"k": [1]}]),  # list annotation
        b"\xc1",
        b"",
    ],
)
def test_malformed_payloads_are_refused(payload: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_sent_message(payload)


@given(records_st, U64, I64)
def test_a_batch_encoded_with_its_index_columns(
    records: list[StagedRecord], base_seq: int, base_time: int
) -> None:
    """The daemon's encoder writes encode_batch's bytes and, for each record, what the index
    keeps: payload offset, length, TTL, schedule, CRC-32C of its header and payload."""
    batch, offsets = encode_batch(base_seq, base_time, records)
    same, cols = encode_indexed(base_seq, base_time, records)
    assert same == batch
    assert cols.offsets == offsets
    assert cols.lengths == [len(r.payload) for r in records]
    assert cols.ttls == [r.ttl_ms for r in records]
    assert cols.scheduled == [r.scheduled_ms for r in records]
    assert cols.crcs == [
        crc32c.crc32c(batch[off - RECORD_HEADER.size : off + len(r.payload)])
        for off, r in zip(offsets, records, strict=True)
    ]
