"""A delivered message's AMQP encoding: the direct encoder of the receive hot path
(sbctld.frontends.amqp.fastout) writes exactly the bytes the generic one
(convert.from_delivered, through the codec's objects) writes, for any stored message."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.amqp import codec as amqp
from sbctl.core.amqp import types as t
from sbctl.core.delivered import Delivered
from sbctl.core.records import Message, encode_message
from sbctld.frontends.amqp import convert, fastout

INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=300)
MAYBE_TEXT = st.none() | TEXT
# Values as stored (sbctl.core.records.VALUE_TYPES): ints across the int/long boundary and up to
# the ulong range, aware UTC datetimes at millisecond precision, UUIDs, binaries, and the
# AMQP-typed values of sbctl.core.typed.
VALUES = (
    st.none()
    | st.booleans()
    | INT64
    | st.integers(2**63 - 2, 2**64 - 1)
    | st.integers(-(2**15), 2**15 - 1).map(t.Short)
    | st.integers(-5, 5).map(t.Long)
    | st.integers(0, 2**64 - 1).map(t.ULong)
    | st.floats(width=32, allow_nan=False).map(t.Float)
    | st.text(st.characters(max_codepoint=127), max_size=5).map(t.Symbol)
    | st.binary(min_size=16, max_size=16).map(t.Decimal128)
    | st.integers(-(2**31) - 2, -(2**31) + 2)
    | st.integers(2**31 - 2, 2**31 + 2)
    | st.floats(allow_nan=False)
    | TEXT
    | st.binary(max_size=40)
    | st.uuids()
    | st.integers(0, 2**41).map(lambda ms: datetime.fromtimestamp(ms / 1000, tz=UTC))
)
KEYS = st.sampled_from(["x-opt-partition-key", "x-opt-sequence-number", "x-opt-foo"]) | st.text(
    min_size=1, max_size=20
)
PROPS = st.none() | st.dictionaries(st.text(max_size=20), VALUES, max_size=6)
ANNOTATIONS: st.SearchStrategy[dict[str, Any] | None] = (
    st.none() | st.just({}) | st.dictionaries(KEYS, VALUES, max_size=3)
)
UINTISH = st.integers(0, 2**32 + 3) | st.integers(0, 300)
CONTENT_TYPES = st.none() | st.sampled_from(["application/json", "text/plain"]) | TEXT


@st.composite
def bodies(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from([None, "data", "value", "sequence"]))
    body = draw(st.binary(max_size=600))
    if kind in (None, "data"):
        return {"body": body}
    value: Any = draw(st.none() | TEXT | st.binary(max_size=40) | st.lists(INT64, max_size=4))
    if kind == "sequence":
        value = [draw(st.lists(INT64 | TEXT, max_size=3)) for _ in range(draw(st.integers(1, 3)))]
    encoded = draw(
        st.sampled_from([amqp.encode(value), b"\xff\x00", None])  # undecodable, missing
    )
    return {"body": body, "body_kind": kind, "body_amqp": encoded}


@st.composite
def stored_messages(draw: Any) -> Message:
    return Message(
        message_id=draw(MAYBE_TEXT),
        session_id=draw(MAYBE_TEXT),
        partition_key=draw(MAYBE_TEXT),
        correlation_id=draw(MAYBE_TEXT),
        subject=draw(MAYBE_TEXT),
        content_type=draw(CONTENT_TYPES),
        to=draw(MAYBE_TEXT),
        reply_to=draw(MAYBE_TEXT),
        reply_to_session_id=draw(MAYBE_TEXT),
        time_to_live_ms=draw(st.none() | UINTISH),
        scheduled_enqueue_time_ms=draw(st.none() | INT64),
        application_properties=draw(PROPS),
        enqueued_sequence_number=draw(st.none() | INT64),
        transfer_hops=draw(st.none() | st.integers(0, 5)),
        dead_letter_source=draw(MAYBE_TEXT),
        message_annotations=draw(ANNOTATIONS),
        **draw(bodies()),
    )


@st.composite
def plain_messages(draw: Any) -> Message:
    """The usual shape: a body and an id (of any length), nothing else."""
    return Message(
        body=draw(st.binary(max_size=600)),
        message_id=draw(st.uuids().map(lambda u: u.hex) | st.uuids().map(str) | TEXT),
        transfer_hops=draw(st.none() | st.just(1)),
    )


@st.composite
def deliveries(draw: Any) -> Delivered:
    return Delivered(
        sequence_number=draw(st.integers(0, 2**63 - 1) | st.integers(100, 300)),
        enqueued_time_ms=draw(INT64),
        delivery_count=draw(UINTISH | st.integers(0, 2)),
        lock_token=draw(st.none() | st.uuids().map(str)),
        locked_until_ms=draw(st.none() | INT64),
        expires_at_ms=draw(INT64),
        partition_id=draw(st.none() | st.integers(0, 31) | st.integers(120, 300)),
        state=draw(st.integers(0, 6)),
        payload=msgspec.Raw(encode_message(draw(stored_messages() | plain_messages()))),
        changes=draw(st.none() | st.just({}) | PROPS),
    )


def _outcome(encode: Any, d: Delivered, received: bool, lock: bool) -> tuple[str, Any]:
    try:
        return "ok", encode(d, received=received, lock=lock)
    except Exception as exc:  # the same failure (a value out of its AMQP type's range)
        return "error", type(exc)


@settings(max_examples=1000, deadline=None)
@given(deliveries(), st.booleans(), st.booleans())
def test_the_direct_encoding_is_the_generic_one(d: Delivered, received: bool, lock: bool) -> None:
    assert _outcome(fastout.encode_delivered, d, received, lock) == _outcome(
        convert.from_delivered, d, received, lock
    )


@settings(max_examples=400, deadline=None)
@given(
    st.builds(
        Delivered,
        sequence_number=st.integers(100, 2**63 - 1),
        enqueued_time_ms=INT64,
        delivery_count=st.integers(0, 3) | UINTISH,
        lock_token=st.none(),
        locked_until_ms=st.none() | INT64,
        expires_at_ms=INT64,
        partition_id=st.none() | st.integers(0, 140),
        state=st.integers(0, 6),
        payload=plain_messages().map(lambda m: msgspec.Raw(encode_message(m))),
        changes=st.none() | st.just({}) | PROPS,
    ),
    st.booleans(),
    st.booleans(),
)
def test_the_usual_shape_is_encoded_as_the_generic_encoder_does(
    d: Delivered, received: bool, lock: bool
) -> None:
    assert _outcome(fastout.encode_delivered, d, received, lock) == _outcome(
        convert.from_delivered, d, received, lock
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(deliveries(), max_size=6), st.booleans(), st.booleans())
def test_a_batch_is_encoded_message_by_message(
    batch: list[Delivered], received: bool, lock: bool
) -> None:
    try:
        expected = [convert.from_delivered(d, received=received, lock=lock) for d in batch]
    except Exception as exc:  # a value outside its AMQP type's range: the batch fails alike
        with pytest.raises(type(exc)):
            fastout.encode_all(batch, received=received, lock=lock)
        return
    assert fastout.encode_all(batch, received=received, lock=lock) == expected


def test_a_plain_received_message_takes_the_direct_path_and_decodes() -> None:
    stored = Message(body=b"hello", message_id="m1", session_id="s", time_to_live_ms=60_000)
    d = Delivered(7, 1_700_000_000_000, 2, str(uuid.uuid4()), 1_700_000_030_000,
                  1_700_000_060_000, 3, 1, msgspec.Raw(encode_message(stored)),
                  {"k": 1})  # fmt: skip
    raw = fastout.encode_delivered(d, received=True, lock=True)
    msg = amqp.decode_message(raw)
    assert msg.header is not None and msg.properties is not None
    assert msg.message_annotations is not None
    assert msg.body == [b"hello"] and msg.header.delivery_count == 1 and msg.header.ttl == 60_000
    assert msg.properties.message_id == "m1" and msg.properties.group_id == "s"
    assert msg.message_annotations["x-opt-sequence-number"] == 7
    assert msg.message_annotations["x-opt-locked-until"] == 1_700_000_030_000
    assert msg.message_annotations["x-opt-partition-id"] == 3
    assert msg.application_properties == {"k": 1}
    assert raw == convert.from_delivered(d, received=True, lock=True)


@given(st.none() | st.integers(0, 31), st.integers(0, 2**63 - 1))
def test_the_stable_message_id_is_the_uuid5_of_its_place(
    partition: int | None, sequence: int
) -> None:
    expected = uuid.uuid5(convert._NO_ID, f"{partition}:{sequence}").hex
    assert fastout.stable_message_id(partition, sequence) == expected
