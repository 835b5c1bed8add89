"""The performatives a client sends for every message (flow, transfer, disposition) are read
by a short path in their usual forms; whatever form they take, the frame parsed is the one
the generic decoder gives, field for field and type for type, and a form the short path does
not take is still read (or refused) by the decoder."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.amqp import framing
from sbctl.core.amqp import types as t
from sbctl.core.amqp.codec import decode

PAYLOAD = b"\x00\x53\x75\xa0\x03abc"


def _typed(body: Any) -> list[tuple[type, Any]]:
    return [(type(body), None)] + [(type(getattr(body, n)), getattr(body, n)) for n in body.NAMES]


def _generic(performative: bytes) -> Any:
    body, used = decode(performative, 0)
    assert used == len(performative)
    return body


def _frame(performative: bytes, payload: bytes = PAYLOAD) -> bytes:
    body = performative + payload
    return framing.FRAME_HEADER.pack(8 + len(body), 2, 0, 5) + body


uints = st.one_of(st.none(), st.integers(0, 2**32 - 1).map(t.UInt))
flags = st.one_of(st.none(), st.booleans())
transfers = st.builds(
    t.Transfer,
    uints,
    uints,
    st.one_of(st.none(), st.binary(max_size=40)),
    uints,
    flags,
    flags,
    st.one_of(st.none(), st.integers(0, 1).map(t.UByte)),
    st.one_of(st.none(), st.just(t.Accepted()), st.just(t.Received(t.UInt(1), t.ULong(2)))),
    flags,
    flags,
    flags,
)


@settings(max_examples=400, deadline=None)
@given(transfers)
def test_a_transfer_parses_as_the_decoder_reads_it(transfer: Any) -> None:
    raw = framing.encode_frame(5, transfer, PAYLOAD)
    frame, end = framing.parse_frame(raw, 0, 1 << 20) or (None, 0)
    assert frame is not None and end == len(raw)
    assert isinstance(frame.body, t.Transfer) and frame.payload == PAYLOAD
    assert _typed(frame.body) == _typed(_generic(raw[8 : len(raw) - len(PAYLOAD)]))
    assert _typed(frame.body) == _typed(transfer)


def _item(draw: Any) -> bytes:
    """One field in any of the encodings a peer may choose."""
    kind = draw(
        st.sampled_from(
            ["null", "uint0", "smalluint", "uint", "bool", "long-bool", "tag", "ubyte", "other"]
        )
    )
    if kind == "null":
        return b"\x40"
    if kind == "uint0":
        return b"\x43"
    if kind == "smalluint":
        return bytes((0x52, draw(st.integers(0, 255))))
    if kind == "uint":
        return b"\x70" + draw(st.integers(0, 2**32 - 1)).to_bytes(4, "big")
    if kind == "bool":
        return draw(st.sampled_from([b"\x41", b"\x42"]))
    if kind == "long-bool":
        return bytes((0x56, draw(st.integers(0, 2))))  # 2: invalid
    if kind == "tag":
        tag = draw(st.binary(max_size=20))
        return bytes((0xA0, len(tag))) + tag
    if kind == "ubyte":
        return bytes((0x50, draw(st.integers(0, 255))))
    return draw(
        st.sampled_from(
            [
                b"\x00\x53\x24\x45",  # accepted
                b"\x00\x53\x24\xc0\x01\x00",  # accepted, as a list8
                b"\x00\x53\x24\xc0\x02\x00",  # a wrong size
                b"\x00\x53\x25\x45",  # rejected
                b"\x00\x53\x24",  # cut short
                b"\xa1\x01x",
                b"\x80" + b"\0" * 8,
                b"\xc1\x01\x00",  # a map (a flow's properties)
            ]
        )
    )


@st.composite
def performatives(draw: Any) -> bytes:
    """A flow, transfer or disposition as list8 or list32, with any field count and
    encodings, sometimes with a wrong size or count."""
    items = [_item(draw) for _ in range(draw(st.integers(0, 13)))]
    data = b"".join(items)
    count = len(items) + draw(st.sampled_from([0, 0, 0, 1, -1]))
    size_skew = draw(st.sampled_from([0, 0, 0, 1, -1]))
    if draw(st.booleans()) and len(data) + 1 < 255 and 0 <= count < 256:
        head = bytes((0xC0, max(0, len(data) + 1 + size_skew), count))
    else:
        head = b"\xd0" + max(0, len(data) + 4 + size_skew).to_bytes(4, "big")
        head += max(0, count).to_bytes(4, "big")
    return b"\x00\x53" + bytes((draw(st.sampled_from([0x13, 0x14, 0x15])),)) + head + data


@settings(max_examples=1500, deadline=None)
@given(performatives())
def test_any_performative_form_parses_as_the_decoder_reads_it(performative: bytes) -> None:
    raw = _frame(performative)
    try:
        expected: Any = framing.parse_frame(raw, 0, 1 << 20)
    except framing.UndecodableFrame as exc:  # (the short path declined it: the decoder's)
        expected = exc
    fast = framing._performative(raw, 8, len(raw))
    if fast is None:
        return  # the decoder read it: that is the parse above
    body, used = fast
    assert not isinstance(expected, Exception), "the short path read what the decoder refuses"
    frame, _ = expected
    assert _typed(frame.body) == _typed(body)
    assert raw[used:] == frame.payload


def test_the_sdks_forms_take_the_short_path() -> None:
    for performative in (
        t.Transfer(t.UInt(0), t.UInt(7), b"\x00\x00\x00\x07", t.UInt(0), False, False),
        t.Transfer(t.UInt(1), t.UInt(300), b"tag", t.UInt(0x80013700), True),
        t.Transfer(t.UInt(2), more=True),
        t.Disposition(True, t.UInt(5), None, True, t.Accepted()),
        t.Disposition(True, t.UInt(5), t.UInt(70000), True, t.Accepted(), False),
        t.Flow(
            t.UInt(1),
            t.UInt(5000),
            t.UInt(0),
            t.UInt(5000),
            t.UInt(0),
            t.UInt(0),
            t.UInt(100),
            None,
            False,
            False,
        ),
    ):
        raw = framing.encode_frame(0, performative, PAYLOAD)
        fast = framing._performative(raw, 8, len(raw))
        assert fast is not None and _typed(fast[0]) == _typed(performative)
