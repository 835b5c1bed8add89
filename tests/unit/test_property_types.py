"""Every AMQP primitive type an application property or annotation is sent with is kept:
AMQP in, the stored record, AMQP out, and JSON (daemon/README.md §1.2); SQL filters still
compare numbers across types; what is stored always encodes at delivery; an AMQP-encoded
body counts as body."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core import send_rules, typed
from sbctl.core.amqp import codec as amqp
from sbctl.core.amqp import types as t
from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.message_form import intake, intake_transfer
from sbctl.core.messages import check_properties, json_value, parse_property
from sbctl.core.records import Message
from sbctl.core.splice import splice
from sbctld.filters import MessageView, compile_filter

DATETIME_MS = (-62_135_596_800_000, 253_402_300_799_999)  # years 1 to 9999
INTS = {name: st.integers(low, high).map(cls) for name, (cls, low, high) in typed.INTEGERS.items()}
# Each AMQP primitive type, as the AMQP codec decodes it (a long as a plain int).
AMQP_VALUES = st.one_of(
    *(s for name, s in INTS.items() if name != "long"),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32, allow_nan=False).map(t.Float),
    st.floats(allow_nan=False),
    st.characters(exclude_categories=["Cs"]).map(t.Char),
    st.text(st.characters(max_codepoint=127), max_size=20).map(t.Symbol),
    st.binary(min_size=4, max_size=4).map(t.Decimal32),
    st.binary(min_size=8, max_size=8).map(t.Decimal64),
    st.binary(min_size=16, max_size=16).map(t.Decimal128),
    st.booleans(),
    st.none(),
    st.integers(*DATETIME_MS).map(t.Timestamp),
    st.uuids(),
    st.binary(max_size=40),
    st.text(max_size=40),
)
KEYS = st.text(max_size=12)


def same(got: Any, sent: Any) -> bool:
    """The same AMQP type and value (a NaN-free float compares by value)."""
    return type(got) is type(sent) and got == sent


def delivered(stored: Message, **kw: Any) -> Delivered:
    return Delivered(7, 1_000, 1, None, None, 2_000, None, 1, encode_message(stored))


def round_trip_amqp(sent: amqp.Message) -> amqp.Message:
    """An AMQP message → its stored form → delivered → the AMQP message out."""
    (stored,) = intake_transfer(amqp.encode_message(sent), 0)
    d = Delivered(7, 1_000, 1, None, None, 2_000, None, 1, stored.payload)
    return amqp.decode_message(splice(d, received=True, lock=True))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, AMQP_VALUES, max_size=8))
def test_every_amqp_type_comes_back_as_sent(props: dict[str, Any]) -> None:
    ann = {t.Symbol(f"x-opt-k{i}"): v for i, v in enumerate(props.values())}
    sent = amqp.Message(application_properties=props, message_annotations=ann, body=[b"x"])
    got = round_trip_amqp(sent)
    assert got.application_properties is not None or not props
    for key, value in props.items():
        assert same(got.application_properties[key], value), key  # type: ignore[index]
    for key, value in ann.items():
        assert same(got.message_annotations[key], value), key  # type: ignore[index]


STORED_VALUES = st.one_of(
    *(s for name, s in INTS.items() if name not in ("int", "long")),
    # A Long fits 32 bits, a plain int 64 (beyond, each is the same AMQP long or ulong as a
    # plain int: the AMQP form keeps the AMQP type, sbctl.core.message_form).
    st.integers(typed.INT32_MIN, typed.INT32_MAX).map(t.Long),
    st.integers(-(2**63), 2**63 - 1),  # plain: an int, or a long by size
    st.floats(width=32, allow_nan=False, allow_infinity=False).map(t.Float),  # (JSON)
    st.floats(allow_nan=False, allow_infinity=False),
    st.characters(exclude_categories=["Cs"]).map(t.Char),
    st.text(st.characters(max_codepoint=127), max_size=20).map(t.Symbol),
    st.binary(min_size=4, max_size=4).map(t.Decimal32),
    st.binary(min_size=16, max_size=16).map(t.Decimal128),
    st.booleans(),
    st.none(),
    st.integers(*DATETIME_MS).map(lambda ms: datetime.fromtimestamp(ms / 1000, tz=UTC)),
    st.uuids(),
    st.binary(max_size=40),
    st.text(max_size=40),
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, STORED_VALUES, max_size=8))
def test_the_record_codec_and_json_keep_every_type(props: dict[str, Any]) -> None:
    m = Message(b"x", application_properties=props, message_annotations=props or None)
    back = decode_message(encode_message(m))
    for key, value in props.items():
        assert same(back.application_properties[key], value)  # type: ignore[index]
        assert same(back.message_annotations[key], value)  # type: ignore[index]
    shown = msgspec.json.decode(msgspec.json.encode({k: json_value(v) for k, v in props.items()}))
    read = check_properties(shown)
    for key, value in props.items():
        assert same(read[key], value), (key, shown[key])


def test_json_names_each_type() -> None:
    props = {
        "l": t.Long(42),
        "s": t.Short(-3),
        "ub": t.UByte(255),
        "ul": t.ULong(2**64 - 1),
        "f": t.Float(1.5),
        "c": t.Char("é"),
        "y": t.Symbol("sym"),
        "d": t.Decimal32(b"\x32\x80\x00\x01"),
        "i": 42,
        "x": 1.5,
    }
    assert {k: json_value(v) for k, v in props.items()} == {
        "l": {"$type": "long", "value": 42},
        "s": {"$type": "short", "value": -3},
        "ub": {"$type": "ubyte", "value": 255},
        "ul": {"$type": "ulong", "value": 2**64 - 1},
        "f": {"$type": "float", "value": 1.5},
        "c": {"$type": "char", "value": "é"},
        "y": {"$type": "symbol", "value": "sym"},
        "d": {"$type": "decimal32", "value": "32800001"},
        "i": 42,
        "x": 1.5,
    }
    assert parse_property('n={"$type":"ushort","value":7}') == ("n", t.UShort(7))
    assert type(parse_property('n={"$type":"int","value":7}')[1]) is int


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({"$type": "short", "value": 70000}, "a short is an integer from -32768 to 32767"),
        ({"$type": "ulong", "value": -1}, "a ulong is an integer from 0"),
        ({"$type": "char", "value": "ab"}, "a char is one character"),
        ({"$type": "symbol", "value": "é"}, "a symbol is ASCII text"),
        ({"$type": "decimal64", "value": "00"}, "a decimal64 is its 8 bytes in hex"),
        ({"$type": "float", "value": 1e300}, "out of the float range"),
        ({"$type": "long", "value": True}, "a long is an integer"),
        (t.Short(70000), "is not a valid short"),
        (t.Char("ab"), "is not a valid char"),
        (t.Decimal32(b"12345"), "is not a valid decimal32"),
    ],
)
def test_a_value_outside_its_type_is_refused_naming_the_property(value: Any, fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        check_properties({"p": value})
    assert "'p'" in info.value.message and fragment in info.value.message


def test_the_python_client_cannot_store_a_value_outside_its_type() -> None:
    with pytest.raises(ValueError, match=r"property 'p': Short\(70000\)|property 'p'"):
        encode_message(Message(b"", application_properties={"p": t.Short(70000)}))


def _out(stored: Message) -> amqp.Message:
    return amqp.decode_message(splice(delivered(stored), received=True, lock=False))


def test_a_plain_int_goes_out_as_int_long_or_ulong_by_size() -> None:
    """Records written before typed values (and the CLI's numbers) hold plain ints."""
    props = {"i": 5, "l": 2**40, "u": 2**64 - 1, "n": -(2**63)}
    got = _out(Message(b"x", application_properties=props)).application_properties
    assert got is not None
    assert [type(got[k]) for k in props] == [t.Int, int, t.ULong, int]
    assert got == props


def test_a_ttl_beyond_the_headers_uint_is_left_out_not_fatal() -> None:
    ttl = 60 * 86_400_000  # 60 days: more than 2**32 ms
    m = Message(b"x", message_id="a", time_to_live_ms=ttl)
    got = _out(m)
    assert got.header is not None and got.header.ttl is None
    assert decode_message(encode_message(m)).time_to_live_ms == ttl  # kept in the record


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ("s = 5", True),
        ("l = 5", True),
        ("u > 9223372036854775807", True),
        ("f = 1.5", True),
        ("b + 1 = 2", True),
        ("y = 'sym'", True),
        ("y LIKE 's%'", True),
        ("c = 'x'", True),
        ("s IN (4, 5)", True),
        ("s = '5'", False),
    ],
)
def test_sql_compares_numbers_and_text_across_amqp_types(expression: str, matches: bool) -> None:
    props = {
        "s": t.Short(5),
        "l": t.Long(5),
        "u": t.ULong(2**64 - 1),
        "f": t.Float(1.5),
        "b": t.Byte(1),
        "y": t.Symbol("sym"),
        "c": t.Char("x"),
    }
    view = MessageView(
        Message(b"", application_properties=props), sequence_number=1, enqueued_time_ms=0, size=1
    )
    assert compile_filter({"type": "sql", "sql_expression": expression}).matches(view) is matches


def test_a_correlation_filter_matches_an_integer_of_any_width() -> None:
    spec = {"type": "correlation", "properties": {"n": 5}}
    for value in (t.Short(5), t.Long(5), t.UByte(5), 5):
        message = Message(b"", application_properties={"n": value})
        view = MessageView(message, sequence_number=1, enqueued_time_ms=0, size=1)
        assert compile_filter(spec).matches(view), type(value)


@pytest.mark.parametrize("value", ["s" * 204_800, b"\x00" * 204_800])
def test_a_large_string_or_binary_value_body_is_stored_once_and_counts_as_body(
    value: Any,
) -> None:
    raw = amqp.encode_message(amqp.Message(body=value, body_kind="value"))
    sent = intake(raw)
    stored, payload = sent.message, sent.payload
    assert len(payload) < len(raw) + 100  # not a second copy
    size = len(payload)
    assert size - send_rules.body_size(stored) < 100
    send_rules.check_encoded(stored, size, False)  # the header is small: no error
    got = _out(decode_message(payload))
    assert got.body_kind == "value" and same(got.body, value)


def test_a_large_map_value_body_counts_once_and_as_body() -> None:
    value = {"k": "v" * 204_800, "n": t.Short(1)}
    raw = amqp.encode_message(amqp.Message(body=value, body_kind="value"))
    sent = intake(raw)
    stored, payload = sent.message, sent.payload
    size = len(payload)
    assert size < len(raw) + 200 and size - send_rules.body_size(stored) < 100
    got = _out(stored)
    assert got.body == value and type(got.body["n"]) is t.Short


def test_a_value_body_written_by_the_previous_record_version_still_comes_back() -> None:
    old = Message(b"text", body_kind="value", body_amqp=amqp.encode("text"))
    assert _out(old).body == "text"
    bad = Message(b"\xff", body_kind="value", body_amqp=b"\xa1")  # not UTF-8: sent as data
    assert _out(bad).body == [b"\xff"]


def test_float_nan_is_kept() -> None:
    back = decode_message(
        encode_message(Message(b"", application_properties={"f": t.Float("nan")}))
    )
    value = back.application_properties["f"]  # type: ignore[index]
    assert type(value) is t.Float and math.isnan(value)


def test_the_unix_protocol_carries_typed_values_outside_a_record_as_plain_ones() -> None:
    """A settlement's property changes (kept as plain values) from the Python client."""
    from sbctl.core.protocol import LENGTH, encode_frame

    frame = encode_frame({"properties": {"n": t.Short(5), "s": t.Symbol("x")}})
    assert msgspec.msgpack.decode(frame[LENGTH.size :]) == {"properties": {"n": 5, "s": "x"}}
    with pytest.raises(TypeError, match="unsupported"):
        encode_frame({"properties": {"o": object()}})
