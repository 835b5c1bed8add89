"""A frame read where it lies in the connection's buffer (its performative in place, its
payload copied once) is what reading it from its own bytes gives: the same performative,
payload and end, or the same error, whatever comes before and after it."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.amqp import framing
from sbctl.core.amqp import types as t
from tests.unit.test_amqp_codec import composite_values, same

performatives = st.sampled_from(t.PERFORMATIVES).flatmap(composite_values)


def read(buf: bytes | bytearray, pos: int) -> Any:
    try:
        return framing.parse_frame(buf, pos, 1 << 20)
    except framing.FrameError as exc:
        return ("error", str(exc))


def alone_and_in_place(frame: bytes, before: bytes, after: bytes) -> None:
    expected = read(frame, 0)
    for kind in (bytes, bytearray):
        got = read(kind(before + frame + after), len(before))
        if isinstance(expected, tuple) and isinstance(expected[0], framing.Frame):
            frame_got, end = got
            assert end == len(before) + expected[1]
            assert frame_got._replace(body=None) == expected[0]._replace(body=None)
            assert same(frame_got.body, expected[0].body)  # (NaN-proof)
            assert type(frame_got.payload) is bytes
        else:
            assert got == expected


@settings(max_examples=300, deadline=None)
@given(performatives, st.binary(max_size=3000), st.binary(max_size=40), st.binary(max_size=40))
def test_a_frame_reads_the_same_in_place(
    performative: t.Composite, payload: bytes, before: bytes, after: bytes
) -> None:
    alone_and_in_place(framing.encode_frame(1, performative, payload), before, after)


@settings(max_examples=300, deadline=None)
@given(performatives, st.binary(max_size=200), st.binary(max_size=40), st.data())
def test_a_damaged_performative_reads_the_same_in_place(
    performative: t.Composite, payload: bytes, after: bytes, data: st.DataObject
) -> None:
    frame = bytearray(framing.encode_frame(0, performative, payload))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(8, len(frame) - 1))  # past the header: the frame stays whole
        frame[i] = data.draw(st.integers(0, 255))
    alone_and_in_place(bytes(frame), b"", after)
