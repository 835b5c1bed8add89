"""The AMQP 1.0 type system: every type round-trips with its wire type kept, the
encoder picks the compact forms, and the SDK's own decoder reads what we write."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.amqp import codec
from sbctl.core.amqp import types as t

INT_TYPES = {
    t.UByte: (0, 2**8 - 1),
    t.UShort: (0, 2**16 - 1),
    t.UInt: (0, 2**32 - 1),
    t.ULong: (0, 2**64 - 1),
    t.Byte: (-(2**7), 2**7 - 1),
    t.Short: (-(2**15), 2**15 - 1),
    t.Int: (-(2**31), 2**31 - 1),
    int: (-(2**63), 2**63 - 1),
    t.Timestamp: (-(2**63), 2**63 - 1),
}
symbol_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=300)


def ints() -> st.SearchStrategy[Any]:
    return st.one_of(*(st.integers(lo, hi).map(kind) for kind, (lo, hi) in INT_TYPES.items()))


scalars = st.one_of(
    st.none(),
    st.booleans(),
    ints(),
    st.floats(allow_nan=False),
    st.floats(width=32, allow_nan=False).map(t.Float),
    st.text(max_size=300),
    st.binary(max_size=300),
    symbol_text.map(t.Symbol),
    st.characters(codec="utf-8", exclude_categories=["Cs"]).map(t.Char),
    st.uuids(),
    st.binary(min_size=4, max_size=4).map(t.Decimal32),
    st.binary(min_size=8, max_size=8).map(t.Decimal64),
    st.binary(min_size=16, max_size=16).map(t.Decimal128),
)
ARRAY_ELEMENTS = {
    "boolean": st.booleans(),
    "ubyte": st.integers(0, 255),
    "uint": st.integers(0, 2**32 - 1),
    "ulong": st.integers(0, 2**64 - 1),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "timestamp": st.integers(-(2**63), 2**63 - 1),
    "double": st.floats(allow_nan=False),
    "uuid": st.uuids(),
    "binary": st.binary(max_size=40),
    "string": st.text(max_size=40),
    "symbol": symbol_text,
}
arrays = st.sampled_from(sorted(ARRAY_ELEMENTS)).flatmap(
    lambda kind: st.lists(ARRAY_ELEMENTS[kind], max_size=300).map(lambda v: t.Array(kind, v))
)
hashable = st.one_of(
    st.none(), st.booleans(), ints(), st.text(max_size=20), symbol_text.map(t.Symbol)
)
values = st.recursive(
    st.one_of(scalars, arrays),
    lambda inner: st.one_of(
        st.lists(inner, max_size=20),
        st.dictionaries(hashable, inner, max_size=10),
        st.tuples(st.integers(0, 2**64 - 1).map(t.ULong), inner).map(
            lambda p: t.Described(p[0], p[1]) if p[0] not in t.COMPOSITES else p[1]
        ),
        st.tuples(symbol_text.map(t.Symbol), inner).map(lambda p: t.Described(*p)),
    ),
    max_leaves=30,
)


def same(a: Any, b: Any) -> bool:
    """Equal *and* of the same wire type, all the way down."""
    if type(a) is not type(b):
        return isinstance(a, tuple) and type(b) is list and same(list(a), b)
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, t.Array):
        # Elements take the array's type: compare values (a NaN-free float compares too).
        return (
            a.type == b.type and len(a) == len(b) and all(x == y for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(
            any(same(k, k2) for k2 in b) and same(v, b[k]) for k, v in a.items()
        )
    if isinstance(a, t.Described):
        return same(a.descriptor, b.descriptor) and same(a.value, b.value)
    if isinstance(a, t.Composite):
        try:
            pairs = zip(a.to_list(), b.to_list(), strict=True)
        except (AttributeError, TypeError, ValueError):
            # a damaged frame decoded a field as a value its type cannot hold: the fields as read
            return type(a) is type(b) and all(same(getattr(a, n), getattr(b, n)) for n in a.NAMES)
        return all(same(x, y) for x, y in pairs)
    return bool(a == b)


@settings(max_examples=400, deadline=None)
@given(values)
def test_every_value_round_trips_with_its_type(value: Any) -> None:
    assert same(value, codec.decode_all(codec.encode(value)))


def composite_values(cls: type[t.Composite]) -> st.SearchStrategy[t.Composite]:
    kinds = {
        "string": st.text(max_size=30),
        "symbol": symbol_text,
        "symbols": st.lists(symbol_text, max_size=3),
        "boolean": st.booleans(),
        "ubyte": st.integers(0, 255),
        "ushort": st.integers(0, 2**16 - 1),
        "uint": st.integers(0, 2**32 - 1),
        "ulong": st.integers(0, 2**64 - 1),
        "timestamp": st.integers(0, 2**62),
        "binary": st.binary(max_size=30),
        "fields": st.dictionaries(symbol_text.map(t.Symbol), scalars, max_size=3),
        "map": st.dictionaries(st.binary(max_size=8), st.none(), max_size=3),
        "*": st.one_of(scalars, st.just(t.Accepted()), st.just(t.Error(t.Symbol("x"), "y"))),
    }
    fields = [st.one_of(st.none(), kinds[kind]) for _name, kind in cls.FIELDS]
    return st.tuples(*fields).map(lambda args: cls(*args))


@pytest.mark.parametrize("cls", list(t.COMPOSITES.values()), ids=lambda c: c.NAME)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_every_performative_and_composite_round_trips(cls: type[t.Composite], data: Any) -> None:
    value = data.draw(composite_values(cls))
    back = codec.decode_all(codec.encode(value))
    assert type(back) is cls
    assert same(codec.decode_all(codec.encode(value.to_list())), back.to_list())


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (None, "40"),
        (True, "41"),
        (False, "42"),
        (t.UInt(0), "43"),
        (t.UInt(7), "5207"),
        (t.UInt(256), "7000000100"),
        (t.ULong(0), "44"),
        (t.ULong(0x14), "5314"),
        (5, "5505"),
        (-200, "81ffffffffffffff38"),
        (t.Int(-1), "54ff"),
        (t.Timestamp(1), "830000000000000001"),
        ("a", "a10161"),
        (t.Symbol("ab"), "a3026162"),
        (b"\x01", "a00101"),
        ([], "45"),
        ([True], "c0020141"),
        ({t.Symbol("k"): None}, "c10502a3016b40"),
        (t.Array("symbol", ["a"]), "e00701b30000000161"),
        (t.Accepted(), "005324" + "45"),
    ],
)
def test_compact_encodings_are_exact(value: Any, wire: str) -> None:
    assert codec.encode(value).hex() == wire
    assert same(codec.decode_all(bytes.fromhex(wire)), value)


def test_long_boolean_and_wide_forms_decode() -> None:
    # pyamqp writes booleans as 0x56 0x01; peers may use the wide forms everywhere.
    assert codec.decode_all(bytes.fromhex("5601")) is True
    assert codec.decode_all(bytes.fromhex("5600")) is False
    assert codec.decode_all(bytes.fromhex("b10000000161")) == "a"
    assert codec.decode_all(bytes.fromhex("d00000000500000001" + "41")) == [True]
    assert codec.decode_all(bytes.fromhex("f0000000050000000241")) == t.Array(
        "boolean", [True, True]
    )


@pytest.mark.parametrize(
    "wire",
    ["a105616263", "c00502", "5602", "ff", "b0ffffffff", "c10301" + "40", "a102c3"],
    ids=[
        "short-string",
        "short-list",
        "bad-bool",
        "unknown-code",
        "huge-binary",
        "odd-map",
        "bad-utf8",
    ],
)
def test_malformed_input_is_a_decode_error(wire: str) -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode_all(bytes.fromhex(wire))


messages = st.builds(
    codec.Message,
    header=st.one_of(st.none(), composite_values(t.Header)),
    delivery_annotations=st.one_of(
        st.none(), st.dictionaries(symbol_text.map(t.Symbol), scalars, max_size=3)
    ),
    message_annotations=st.one_of(
        st.none(), st.dictionaries(symbol_text.map(t.Symbol), scalars, max_size=3)
    ),
    properties=st.one_of(st.none(), composite_values(t.Properties)),
    application_properties=st.one_of(
        st.none(), st.dictionaries(st.text(max_size=10), scalars, max_size=5)
    ),
    footer=st.one_of(st.none(), st.dictionaries(symbol_text.map(t.Symbol), scalars, max_size=2)),
)


@settings(max_examples=200, deadline=None)
@given(messages, st.sampled_from(["data", "value", "sequence"]), st.data())
def test_messages_round_trip_with_every_body_kind(msg: codec.Message, kind: str, data: Any) -> None:
    if kind == "data":
        msg.body = data.draw(st.lists(st.binary(max_size=100), min_size=1, max_size=3))
    elif kind == "value":
        msg.body = data.draw(values)
    else:
        msg.body = data.draw(st.lists(st.lists(scalars, max_size=3), min_size=1, max_size=3))
    msg.body_kind = kind
    back = codec.decode_message(codec.encode_message(msg))
    assert back.body_kind == kind
    assert same(back.body, msg.body)
    for name in ("delivery_annotations", "message_annotations", "application_properties", "footer"):
        assert same(getattr(back, name), getattr(msg, name))
    for name in ("header", "properties"):
        a, b = getattr(msg, name), getattr(back, name)
        assert (a is None and b is None) or same(a, b)


def test_a_batch_splits_into_its_messages() -> None:
    inner = [codec.encode_message(codec.Message(body=[f"m{i}".encode()])) for i in range(3)]
    batch = codec.encode_message(codec.Message(body=inner))
    assert codec.split_batch(batch) == inner


def test_the_sdks_decoder_reads_our_frames_and_messages() -> None:
    pyamqp = pytest.importorskip("azure.servicebus._pyamqp._decode")
    msg = codec.Message(
        properties=t.Properties("id-1", None, None, "subj"),
        application_properties={"n": t.Int(5), "s": "x", "f": 1.5, "b": True},
        body=[b"hello"],
    )
    decoded = pyamqp.decode_payload(memoryview(codec.encode_message(msg)))
    assert decoded.data == [b"hello"]
    assert decoded.application_properties == {b"n": 5, b"s": b"x", b"f": 1.5, b"b": True}
    assert decoded.properties[0] == b"id-1"
    attach = t.Attach("l", 1, True, 0, 1, t.Source("q"), t.Target("r"), None, None, 0)
    code, fields = pyamqp.decode_frame(memoryview(codec.encode(attach)))
    assert code == 0x12
    assert fields[0] == b"l"
    assert fields[9] == 0  # initial-delivery-count present: pyamqp detaches without it


def test_uuid_and_timestamp_keep_their_types() -> None:
    u = uuid.uuid4()
    assert codec.decode_all(codec.encode([u, t.Timestamp(5)])) == [u, 5]
    assert type(codec.decode_all(codec.encode(t.Timestamp(5)))) is t.Timestamp
