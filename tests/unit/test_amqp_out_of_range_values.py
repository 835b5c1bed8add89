"""Numbers a message carries that a stored record cannot hold are refused with a one-line
BadRequest naming the field, never an internal error (daemon/README.md §29)."""

from __future__ import annotations

import struct

import pytest

from sbctl.core.amqp import codec
from sbctl.core.amqp import types as t
from sbctl.core.errors import BadRequest
from sbctl.core.message_form import intake_transfer

DATA = b"\x00\x53\x75\xa0\x02hi"


def header_with_ttl(encoded_ttl: bytes) -> bytes:
    """A header section whose ttl is ``encoded_ttl`` (any AMQP type, as a peer may send)."""
    items = b"\x40\x40" + encoded_ttl
    return b"\x00\x53\x70\xc0" + bytes((len(items) + 1, 3)) + items


def intake_answer(payload: bytes) -> list[object]:
    """The intake's answer: the messages' fields, or the error."""
    try:
        return [[sent.message for sent in intake_transfer(payload, 0)]]
    except BadRequest as exc:
        return [exc]


@pytest.mark.parametrize(
    ("ttl", "why"),
    [
        (b"\x82" + struct.pack(">d", 1e300), "header ttl 1e+300 is out of range"),
        (b"\x82" + struct.pack(">d", float("nan")), "header ttl must be a number of milliseconds"),
        (b"\x81" + struct.pack(">q", -5), "header ttl -5 is out of range"),
    ],
)
def test_a_ttl_the_record_cannot_hold_is_refused_naming_it(ttl: bytes, why: str) -> None:
    for result in intake_answer(header_with_ttl(ttl) + DATA):
        assert isinstance(result, BadRequest), result
        assert why in str(result)


def test_a_plain_uint_ttl_is_kept() -> None:
    for result in intake_answer(header_with_ttl(b"\x70" + struct.pack(">I", 60_000)) + DATA):
        assert isinstance(result, list)
        assert result[0].time_to_live_ms == 60_000


@pytest.mark.parametrize("ms", [-62_135_596_800_001, 253_402_300_800_000, 2**62])
def test_a_timestamp_property_beyond_year_9999_is_refused_naming_it(ms: int) -> None:
    payload = codec.encode_message(
        codec.Message(application_properties={"when": t.Timestamp(ms)}, body=[b"x"])
    )
    for result in intake_answer(payload):
        assert isinstance(result, BadRequest), result
        assert f"application property timestamp {ms} is out of range" in str(result)


def test_a_scheduled_time_beyond_the_record_is_refused_naming_it() -> None:
    payload = codec.encode_message(
        codec.Message(
            message_annotations={"x-opt-scheduled-enqueue-time": t.Timestamp(-1)}, body=[b"x"]
        )
    )
    for result in intake_answer(payload):
        assert isinstance(result, BadRequest), result
        assert "x-opt-scheduled-enqueue-time -1 is out of range" in str(result)


def test_an_annotation_timestamp_beyond_year_9999_is_dropped_like_other_unkeepable_ones() -> None:
    payload = codec.encode_message(
        codec.Message(message_annotations={"x-mine": t.Timestamp(2**62)}, body=[b"x"])
    )
    for result in intake_answer(payload):
        assert isinstance(result, list), result
        assert not result[0].message_annotations
