"""The fast reading of incoming transfers (sbctld.frontends.amqp.fastin) stores exactly what
the generic decoder stores: ``convert.to_stored`` over ``codec.split_batch``, the same
messages or the same error, for random messages with every section, typed property and
annotation values and every body kind, for batch envelopes, and for damaged bytes. The
SDKs' shapes are read by the fast path itself, not handed back to the generic one."""

from __future__ import annotations

import re
import struct
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core.amqp import codec
from sbctl.core.amqp import types as t
from sbctl.core.records import encode_message as encode_stored
from sbctld.frontends.amqp import convert, fastin
from tests.unit.test_amqp_codec import hashable, ints, scalars, symbol_text, values

GENERATED = "generated-id"
BATCH = codec.BATCH_FORMAT

# What the SDKs put in each section (daemon/README.md §29), then anything at all.
texts = st.text(max_size=300)
ids = st.one_of(texts, st.uuids(), st.integers(0, 2**64 - 1).map(t.ULong), st.binary(max_size=20))
timestamps = st.integers(-(2**40), 2**40).map(t.Timestamp)
sdk_timestamps = st.integers(0, 2**41).map(t.Timestamp)  # 1970 to 2039
sdk_typed = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**31), 2**31 - 1).map(t.Int),
    st.integers(0, 2**32 - 1).map(t.UInt),
    sdk_timestamps,
    st.floats(allow_nan=False),
    texts,
    st.binary(max_size=300),
    st.uuids(),
)
typed = st.one_of(
    sdk_typed,
    ints(),
    timestamps,
    st.floats(allow_nan=False),
    st.floats(width=32, allow_nan=False).map(t.Float),
    texts,
    st.binary(max_size=300),
    st.uuids(),
    symbol_text.map(t.Symbol),
)
property_values = st.one_of(typed, scalars, values)
ANNOTATION_KEYS = [
    "x-opt-partition-key",
    "x-opt-scheduled-enqueue-time",
    "x-opt-via-partition-key",
    *sorted(convert.BROKER_ANNOTATIONS),
]
annotation_keys = st.one_of(st.sampled_from(ANNOTATION_KEYS), symbol_text).map(t.Symbol)
annotation_values = st.one_of(texts, timestamps, property_values)


def header_fields() -> st.SearchStrategy[list[Any]]:
    usual = st.tuples(
        st.one_of(st.none(), st.booleans()),
        st.one_of(st.none(), st.integers(0, 255).map(t.UByte)),
        st.one_of(st.none(), st.integers(0, 2**32 - 1).map(t.UInt)),
        st.one_of(st.none(), st.booleans()),
        st.one_of(st.none(), st.integers(0, 2**32 - 1).map(t.UInt)),
    ).map(list)
    return st.one_of(usual, st.lists(st.one_of(scalars, values), max_size=7))


def property_fields() -> st.SearchStrategy[list[Any]]:
    maybe = st.none().__or__
    usual = st.tuples(
        maybe(ids),
        maybe(st.binary(max_size=10)),
        maybe(texts),
        maybe(texts),
        maybe(texts),
        maybe(ids),
        maybe(symbol_text.map(t.Symbol)),
        maybe(symbol_text.map(t.Symbol)),
        maybe(timestamps),
        maybe(timestamps),
        maybe(texts),
        maybe(st.integers(0, 2**32 - 1).map(t.UInt)),
        maybe(texts),
    ).map(list)
    trimmed = usual.flatmap(lambda f: st.integers(0, 13).map(lambda n: f[:n]))
    return st.one_of(usual, trimmed, st.lists(st.one_of(scalars, values), max_size=15))


def section(code: int, value: Any) -> bytes:
    return bytes((0x00, 0x53, code)) + codec.encode(value)


def map_section(code: int, pairs: list[tuple[Any, Any]]) -> bytes:
    """A map section written pair by pair, so a key may come twice (a dict cannot say it)."""
    body = b"".join(codec.encode(k) + codec.encode(v) for k, v in pairs)
    return (
        bytes((0x00, 0x53, code, 0xD1)) + struct.pack(">II", len(body) + 4, 2 * len(pairs)) + body
    )


few_keys = st.sampled_from(
    ["k", t.Symbol("k"), "x-opt-partition-key", t.Char("k"), "j", None, 1, "1", b"k", t.UInt(1)]
)
repeated_keys = st.one_of(few_keys, st.sampled_from(ANNOTATION_KEYS).map(t.Symbol))


def sections() -> st.SearchStrategy[bytes]:
    """One message section of any kind, usually as the SDKs write it."""
    return st.one_of(
        header_fields().map(lambda v: section(0x70, v)),
        st.dictionaries(symbol_text.map(t.Symbol), scalars, max_size=3).map(
            lambda v: section(0x71, v)
        ),
        st.dictionaries(
            st.one_of(annotation_keys, annotation_keys, hashable), annotation_values, max_size=6
        ).map(lambda v: section(0x72, v)),
        property_fields().map(lambda v: section(0x73, v)),
        st.dictionaries(
            st.one_of(texts, texts, symbol_text.map(t.Symbol), hashable),
            property_values,
            max_size=8,
        ).map(lambda v: section(0x74, v)),
        st.binary(max_size=400).map(lambda v: section(0x75, v)),
        st.lists(scalars, max_size=3).map(lambda v: section(0x76, v)),
        values.map(lambda v: section(0x77, v)),
        st.dictionaries(symbol_text.map(t.Symbol), scalars, max_size=2).map(
            lambda v: section(0x78, v)
        ),
        st.one_of(st.none(), property_values).map(lambda v: section(0x74, v)),  # not a map
        st.tuples(
            st.sampled_from([0x72, 0x74]),
            st.lists(st.tuples(repeated_keys, annotation_values), max_size=6),
        ).map(lambda a: map_section(*a)),
    )


def sdk_messages() -> st.SearchStrategy[bytes]:
    """Messages as the SDKs send them: header, annotations, properties, application
    properties (typed values), one or more data sections."""
    message = st.builds(
        codec.Message,
        header=st.one_of(
            st.none(),
            st.builds(t.Header, st.booleans(), st.none(), st.integers(0, 2**32 - 1)),
        ),
        message_annotations=st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    t.Symbol("x-opt-partition-key"): texts,
                    t.Symbol("x-opt-scheduled-enqueue-time"): sdk_timestamps,
                    t.Symbol("x-opt-via-partition-key"): texts,
                    t.Symbol("x-custom"): sdk_typed,
                },
            ),
        ),
        properties=st.one_of(
            st.none(),
            st.builds(
                t.Properties,
                message_id=st.one_of(st.none(), texts, st.uuids()),
                to=st.one_of(st.none(), texts),
                subject=st.one_of(st.none(), texts),
                reply_to=st.one_of(st.none(), texts),
                correlation_id=st.one_of(st.none(), texts),
                content_type=st.one_of(st.none(), symbol_text),
                absolute_expiry_time=st.one_of(st.none(), sdk_timestamps),
                creation_time=st.one_of(st.none(), sdk_timestamps),
                group_id=st.one_of(st.none(), texts),
                reply_to_group_id=st.one_of(st.none(), texts),
            ),
        ),
        application_properties=st.one_of(
            st.none(), st.dictionaries(st.one_of(texts, symbol_text.map(t.Symbol)), sdk_typed)
        ),
        body=st.lists(st.binary(max_size=2000), min_size=1, max_size=3),
    )
    return message.map(codec.encode_message)


any_messages = st.one_of(
    sdk_messages(), st.lists(sections(), max_size=7).map(b"".join), st.binary(max_size=60)
)


def envelope(payloads: list[bytes], extra: list[bytes]) -> bytes:
    """A batch transfer's payload: ``extra`` sections (as the SDKs copy the first message's
    properties and partition key there) then one data section per message."""
    return b"".join(extra) + b"".join(section(0x75, p) for p in payloads)


def generic(payload: bytes, message_format: int) -> list[Any]:
    """What the front-end stored before the fast path (server._send's former lines)."""
    payloads = codec.split_batch(payload) if message_format == BATCH else [payload]
    return [convert.to_stored(p) for p in payloads]


def typed_view(value: Any) -> Any:
    """``value`` with the type of everything in it (Int(5) and 5 are equal, not the same)."""
    if isinstance(value, dict):
        return [(typed_view(k), typed_view(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [typed_view(v) for v in value]
    if isinstance(value, float):
        return (type(value), repr(value))  # (a damaged float may be a NaN)
    return (type(value), value)


def outcome(work: Callable[[], Any]) -> Any:
    try:
        stored = work()
    except Exception as exc:
        return ("raised", type(exc), str(exc))
    return [(typed_view(msgspec.structs.astuple(m)), outcome_of(encode_stored, m)) for m in stored]


def outcome_of(work: Callable[[Any], Any], arg: Any) -> Any:
    try:
        return work(arg)
    except Exception as exc:  # (the broker refuses it the same way for both)
        return ("raised", type(exc), str(exc))


def agree(payload: bytes, message_format: int) -> Any:
    """Both paths on ``payload``, message ids made deterministic; they must agree."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(convert, "new_message_id", lambda: GENERATED)
        mp.setattr(fastin, "new_message_ids", lambda n: [GENERATED] * n)
        slow = outcome(lambda: generic(payload, message_format))
        fast = outcome(lambda: fastin.stored_messages(payload, message_format))
    assert fast == slow
    return fast


def damaged(payload: bytes, data: st.DataObject) -> bytes:
    """``payload`` with a byte changed, a piece cut out or its end cut off."""
    if not payload:
        return payload
    buf = bytearray(payload)
    how = data.draw(st.sampled_from(["flip", "cut", "truncate"]))
    i = data.draw(st.integers(0, len(buf) - 1))
    if how == "flip":
        buf[i] = data.draw(st.integers(0, 255))
    elif how == "cut":
        del buf[i : i + data.draw(st.integers(1, 9))]
    else:
        del buf[i:]
    return bytes(buf)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(any_messages)
def test_a_single_message_is_stored_as_the_generic_decoder_stores_it(payload: bytes) -> None:
    agree(payload, 0)


@SETTINGS
@given(st.lists(any_messages, max_size=6), st.lists(sections(), max_size=3), st.data())
def test_a_batch_is_stored_as_the_generic_decoder_stores_it(
    payloads: list[bytes], extra: list[bytes], data: st.DataObject
) -> None:
    order = data.draw(st.permutations([*([None] * len(payloads)), *extra]))
    queue = iter(payloads)
    parts = [section(0x75, next(queue)) if s is None else s for s in order]
    agree(b"".join(parts), BATCH)


@SETTINGS
@given(
    st.sampled_from([0x72, 0x74]),
    st.lists(st.tuples(repeated_keys, annotation_values), min_size=2, max_size=6),
    st.binary(max_size=20),
)
def test_a_key_given_twice_keeps_its_last_value_as_before(
    code: int, pairs: list[tuple[Any, Any]], body: bytes
) -> None:
    agree(map_section(code, pairs) + section(0x75, body), 0)


@SETTINGS
@given(st.one_of(sdk_messages(), any_messages), st.data())
def test_damaged_messages_get_the_same_answer(payload: bytes, data: st.DataObject) -> None:
    agree(damaged(payload, data), 0)


@SETTINGS
@given(st.lists(sdk_messages(), min_size=1, max_size=4), st.data())
def test_damaged_batches_get_the_same_answer(payloads: list[bytes], data: st.DataObject) -> None:
    agree(damaged(envelope(payloads, []), data), BATCH)


@SETTINGS
@given(sdk_messages())
def test_the_sdks_messages_are_read_by_the_fast_path_itself(payload: bytes) -> None:
    expected = agree(payload, 0)
    m = fastin._message(payload, 0, len(payload))  # raises if it had to hand it back
    if m.message_id is None:
        m.message_id = GENERATED
    assert outcome(lambda: [m]) == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(sdk_messages(), min_size=1, max_size=5), st.data())
def test_an_sdk_batch_envelope_is_split_by_the_fast_path_itself(
    payloads: list[bytes], data: st.DataObject
) -> None:
    first = codec.decode_message(payloads[0])
    extra = [  # the envelope carries the first message's properties and partition key
        codec.encode_message(codec.Message(properties=first.properties)),
        section(0x72, first.message_annotations or {}),
    ]
    payload = envelope(payloads, data.draw(st.sampled_from([[], extra])))
    assert fastin._batch(payload) is not None
    assert len(agree(payload, BATCH)) == len(payloads)


def test_a_plain_message_gets_a_random_v4_id_and_a_given_one_is_kept() -> None:
    plain = codec.encode_message(codec.Message(body=[b"x" * 100]))
    named = codec.encode_message(codec.Message(properties=t.Properties("mine"), body=[b"y"]))
    batch = envelope([plain] * 500 + [named], [])
    got = fastin.stored_messages(batch, BATCH)
    assert [m.body for m in got] == [b"x" * 100] * 500 + [b"y"]
    assert got[-1].message_id == "mine"
    generated = [m.message_id for m in got[:-1]]
    assert len(set(generated)) == 500
    for message_id in generated:
        assert message_id and re.fullmatch(r"[0-9a-f]{32}", message_id)
        assert uuid.UUID(message_id).version == 4
    assert fastin.stored_messages(plain, 0)[0].message_id != got[0].message_id


@pytest.mark.parametrize("n", [1, 2, 100, 6000])
def test_message_ids_in_bulk_are_random_v4_uuids(n: int) -> None:
    made = fastin.new_message_ids(n)
    assert len(made) == n == len(set(made))
    assert all(uuid.UUID(m).version == 4 and uuid.UUID(m).hex == m for m in made)
    assert made != fastin.new_message_ids(n)


def test_errors_read_as_before() -> None:
    bad_batch = envelope([b"\x00\x53\x75"], [])[:-1]
    with pytest.raises(codec.DecodeError):
        fastin.stored_messages(bad_batch, BATCH)
    with pytest.raises(Exception, match="undecodable AMQP message"):
        fastin.stored_messages(envelope([b"\x00\x53\x75\xa0\x05ab"], []), BATCH)
    unsupported = codec.encode_message(
        codec.Message(application_properties={"list": [t.Int(1)]}, body=[b""])
    )
    with pytest.raises(Exception, match="application property value of type list"):
        fastin.stored_messages(unsupported, 0)
