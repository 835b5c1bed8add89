"""AMQP frames: headers, heartbeats, and transfers split at the peer's max frame size
and joined back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.amqp import framing
from sbctl.core.amqp import types as t


def test_a_frame_is_header_performative_payload() -> None:
    # size 15, doff 2, type 0 (AMQP), channel 3; close (0x18) as a list8 of one null
    # field (trailing nulls are kept: old SDKs index fields by position).
    raw = framing.encode_frame(3, t.Close(), b"")
    assert raw.hex() == "0000000f02000003" + "005318" + "c0020140"
    frame, end = framing.parse_frame(raw, 0, 1 << 20) or (None, 0)
    assert end == len(raw)
    assert frame is not None and frame.channel == 3 and isinstance(frame.body, t.Close)


def test_the_payload_follows_the_performative() -> None:
    raw = framing.encode_frame(0, t.Transfer(1), b"PAYLOAD")
    frame, _ = framing.parse_frame(raw, 0, 1 << 20) or (None, 0)
    assert frame is not None and frame.payload == b"PAYLOAD" and frame.body.handle == 1


def test_heartbeat_is_an_empty_frame() -> None:
    assert framing.HEARTBEAT.hex() == "0000000802000000"
    frame, end = framing.parse_frame(framing.HEARTBEAT, 0, 512) or (None, 0)
    assert end == 8 and frame is not None and frame.body is None


def test_incomplete_frames_wait_for_more_bytes() -> None:
    raw = framing.encode_frame(0, t.Open("c"))
    for cut in range(len(raw)):
        assert framing.parse_frame(raw[:cut], 0, 1 << 20) is None


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (bytes.fromhex("0000000401000000"), "malformed"),
        (bytes.fromhex("0000000802050000"), "frame type"),
        (bytes.fromhex("0001000002000000"), "exceeds"),
        (bytes.fromhex("0000000a02000000ff00"), "undecodable"),
        (bytes.fromhex("0000000a020000005505"), "performative"),
    ],
)
def test_bad_frames_are_errors(raw: bytes, why: str) -> None:
    with pytest.raises(framing.FrameError, match=why):
        framing.parse_frame(raw, 0, 4096)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=20_000), st.integers(512, 6000))
def test_transfers_split_at_max_frame_size_and_join_back(payload: bytes, max_size: int) -> None:
    transfer = t.Transfer(1, 7, b"\x00\x00\x00\x01", 0, False, False)
    frames = list(framing.transfer_frames(5, transfer, payload, max_size))
    assert all(len(f) <= max_size for f in frames)
    parsed = []
    for raw in frames:
        got = framing.parse_frame(raw, 0, max_size)
        assert got is not None and got[1] == len(raw)
        parsed.append(got[0])
    assert [bool(f.body.more) for f in parsed] == [True] * (len(parsed) - 1) + [False]
    assert all(f.body.delivery_id == 7 and f.channel == 5 for f in parsed)
    joined = framing.Reassembly(parsed[0].body)
    for f in parsed:
        joined.add(f.payload, 0)
    assert joined.payload() == payload


def test_reassembly_enforces_a_limit() -> None:
    r = framing.Reassembly(t.Transfer(1))
    r.add(b"x" * 10, 15)
    with pytest.raises(framing.FrameError):
        r.add(b"x" * 10, 15)


@settings(max_examples=300, deadline=None)
@given(
    channel=st.integers(0, 65535),
    handle=st.integers(0, 2**32 - 1),
    delivery_id=st.integers(0, 2**32 - 1),
    tag=st.binary(max_size=300),
    message_format=st.sampled_from([0, 255, 256, 0x80013700]),
    settled=st.booleans(),
    payload=st.binary(max_size=300),
)
def test_the_direct_transfer_encoding_is_the_generic_one(
    channel: int,
    handle: int,
    delivery_id: int,
    tag: bytes,
    message_format: int,
    settled: bool,
    payload: bytes,
) -> None:
    generic = framing.encode_frame(
        channel,
        t.Transfer(handle, delivery_id, tag, message_format, settled, False, None, None),
        payload,
    )
    direct = (
        framing.transfer_head(
            channel, handle, delivery_id, tag, message_format, settled, len(payload)
        )
        + payload
    )
    assert direct == generic


@given(
    st.integers(0, 0xFFFF),
    st.booleans(),
    st.integers(0, 2**32 - 1),
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
)
def test_an_accepted_disposition_is_written_as_the_generic_encoder_writes_it(
    channel: int, role: bool, first: int, last: int | None
) -> None:
    from sbctl.core.amqp.types import Accepted, Disposition

    generic = framing.encode_frame(channel, Disposition(role, first, last, True, Accepted()))
    assert framing.accepted_disposition(channel, role, first, last) == generic
