"""What a hostile peer's bytes may cost the decoder and a connection (daemon/README.md §29.11):
values nest at most ``MAX_DEPTH`` deep, an array holds at most one element per byte of its
encoding, a connection's sessions and links are bounded, and one call reads at most
``FRAMES_PER_TURN`` frames. Past a bound: a typed error, never a Python one."""

from __future__ import annotations

import struct
import time
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core import records as records
from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from sbctl.core.errors import BadRequest
from sbctl.core.message_form import intake, intake_transfer
from sbctld.frontends.amqp import connection as amqp_connection
from sbctld.frontends.amqp.arguments import Args
from sbctld.frontends.amqp.connection import Connection
from tests.unit.test_amqp_connection import Recorder, f, frames, opened


def nested_lists(depth: int) -> bytes:
    """``depth`` lists, each holding the next (list8 or list32 ... list0)."""
    out = b"\x45"
    for _ in range(depth - 1):
        if len(out) + 1 < 256:
            out = bytes((0xC0, len(out) + 1, 1)) + out
        else:
            out = b"\xd0" + struct.pack(">II", len(out) + 4, 1) + out
    return out


def test_values_nest_at_most_max_depth_deep() -> None:
    assert codec.MAX_DEPTH == 32
    assert codec.decode_all(nested_lists(codec.MAX_DEPTH + 1))  # list0 is a leaf
    deep = bytes((0xC0, 3, 1)) * 1 + nested_lists(codec.MAX_DEPTH + 1)
    with pytest.raises(codec.DecodeError, match="nested more than 32 deep"):
        codec.decode_all(bytes((0xD0,)) + struct.pack(">II", len(deep) + 4, 1) + deep)


def wrap(kind: str, inner: bytes) -> bytes:
    """``inner`` inside one compound of ``kind``."""
    if kind == "described":
        return b"\x00\x53\xff" + inner
    items = codec.encode("k") + inner if kind == "map" else inner
    code = 0xD1 if kind == "map" else 0xD0
    return bytes((code,)) + struct.pack(">II", len(items) + 4, 2 if kind == "map" else 1) + items


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["list", "map", "described"]), min_size=1, max_size=70))
def test_any_nesting_decodes_up_to_max_depth_and_is_refused_past_it(kinds: list[str]) -> None:
    raw = b"\x40"
    for kind in reversed(kinds):
        raw = wrap(kind, raw)
    if len(kinds) <= codec.MAX_DEPTH:
        codec.decode_all(raw)
    else:
        with pytest.raises(codec.DecodeError, match="nested more than"):
            codec.decode_all(raw)


@pytest.mark.parametrize("depth", [1_000, 20_000])
def test_deep_nesting_is_a_decode_error_not_a_recursion_error(depth: int) -> None:
    lists = nested_lists(depth) if depth < 2_000 else b"\xc0\x00\x01" * depth  # (truncated)
    described = b"\x00" * depth + b"\x40\x40"  # descriptors of descriptors
    for raw in (lists, described):
        with pytest.raises(codec.DecodeError):
            codec.decode_all(raw)


def null_arrays(n: int, count: int = 65_536) -> bytes:
    """A map of ``n`` arrays, each of ``count`` nulls in 10 bytes (f0 00000005 count 40)."""
    body = b"".join(
        codec.encode(f"k{i}") + b"\xf0" + struct.pack(">II", 5, count) + b"\x40" for i in range(n)
    )
    return b"\xd1" + struct.pack(">II", len(body) + 4, 2 * n) + body


def test_an_array_of_zero_width_elements_is_charged_a_byte_each() -> None:
    """600 arrays of 65,536 nulls (a 6 KB open) decoded to 39 million elements in 3.2 s."""
    started = time.monotonic()
    with pytest.raises(codec.DecodeError, match="array count exceeds"):
        codec.decode_all(null_arrays(600))
    assert time.monotonic() - started < 0.5
    # as many elements as the array's encoding has bytes: decoded
    assert codec.decode_all(b"\xe0\x02\x03\x40") == t.Array("null", [None, None, None])
    assert len(codec.decode_all(b"\xf0\x00\x00\x00\x05\x00\x00\x00\x09\x41")) == 9
    with pytest.raises(codec.DecodeError):
        codec.decode_all(b"\xf0\x00\x00\x00\x05\x00\x00\x00\x0a\x41")


def elements(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) * 2 + sum(elements(k) + elements(v) for k, v in value.items())
    if isinstance(value, list):
        return len(value) + sum(elements(v) for v in value)
    if isinstance(value, t.Described):
        return 1 + elements(value.value)
    return 0


zero_width = st.sampled_from([0x40, 0x41, 0x42, 0x43, 0x44, 0x45])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(zero_width, st.integers(0, 70_000), st.booleans()), max_size=20),
    st.binary(max_size=64),
)
def test_what_any_buffer_decodes_to_is_bounded_by_its_size(
    arrays: list[tuple[int, int, bool]], junk: bytes
) -> None:
    """Arrays of zero-width elements of any count, wide or narrow, with junk after: the
    decoder gives a value of at most one element per byte, or a DecodeError."""
    items = b""
    for code, count, wide in arrays:
        if wide or count > 255:
            items += b"\xf0" + struct.pack(">II", 5, count) + bytes((code,))
        else:
            items += bytes((0xE0, 2, count, code))
    raw = b"\xd0" + struct.pack(">II", len(items) + 4, len(arrays)) + items + junk
    try:
        value, _ = codec.decode(raw)
    except codec.DecodeError:
        return
    assert elements(value) <= len(raw)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_raise_a_decode_error(raw: bytes) -> None:
    try:
        value, _ = codec.decode(raw)
    except codec.DecodeError:
        return
    assert elements(value) <= len(raw)


def test_a_performative_that_does_not_decode_closes_with_decode_error() -> None:
    for hostname in (nested_lists(1_000), null_arrays(600)):
        conn = Connection(Recorder())
        body = b"\x00\x53\x10" + b"\xd0" + struct.pack(">II", 4 + 2 + len(hostname), 2)
        body += b"\xa1\x01c" + hostname
        conn.receive_data(framing.PROTOCOL_AMQP + struct.pack(">IBBH", 8 + len(body), 2, 0, 0))
        conn.receive_data(body)
        out = frames(conn.data_to_send())
        assert isinstance(out[-1].body, t.Close) and conn.closed
        assert out[-1].body.error.condition == "amqp:decode-error"


def test_an_application_property_key_must_be_a_string() -> None:
    raw = codec.encode_message(codec.Message(application_properties={None: "v"}, body=[b"x"]))
    with pytest.raises(codec.DecodeError, match="key None is not a string"):
        intake(raw)
    with pytest.raises(codec.DecodeError, match="key None is not a string"):
        intake_transfer(raw, 0)


def test_a_record_stored_with_a_null_key_still_reads() -> None:
    """An older release stored ``{null: "v"}``: the record reads, the key as text."""
    raw = msgspec.msgpack.encode([b"body", "id", *[None] * 10, {None: "v", "k": 1}])
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(raw, type=records.Message)
    m = records.decode_legacy(raw)
    assert (m.body, m.message_id, m.application_properties) == (b"body", "id", {"": "v", "k": 1})


def test_the_cli_shows_a_record_it_cannot_read_flagged_instead_of_failing() -> None:
    from sbctl.core.delivered import Delivered
    from sbctl.core.messages import UNREADABLE, ReceivedMessage

    raw = msgspec.msgpack.encode([b"x", "id", msgspec.msgpack.Ext(99, b"?")])  # unknown ext
    m = ReceivedMessage.from_wire(Delivered(7, 0, 1, None, None, 0, None, 1, msgspec.Raw(raw)))
    assert m.sequence_number == 7
    assert "cannot be read" in m.application_properties[UNREADABLE]


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"from-sequence-number": "abc"}, "from-sequence-number must be an integer"),
        ({"from-sequence-number": -1}, "from-sequence-number -1 is out of range"),
        ({"message-count": [1]}, "message-count must be an integer"),
        ({"lock-tokens": "x"}, "lock-tokens must be a list"),
        ({"lock-tokens": [1]}, "lock-tokens must hold lock tokens"),
        ({"sequence-numbers": ["a"]}, "sequence-numbers must be an integer"),
        ({"messages": [1]}, "messages must hold maps"),
        ({"session-state": 1}, "session-state must be a binary"),
        ({"properties-to-modify": []}, "properties-to-modify must be a map"),
    ],
)
def test_management_arguments_of_the_wrong_type_name_their_field(body: Any, error: str) -> None:
    args = Args(body)
    getters = {
        "from-sequence-number": lambda: args.integer("from-sequence-number", 0),
        "message-count": lambda: args.integer("message-count", 1),
        "lock-tokens": lambda: args.tokens("lock-tokens"),
        "sequence-numbers": lambda: args.integers("sequence-numbers"),
        "messages": lambda: args.maps("messages"),
        "session-state": lambda: args.binary("session-state"),
        "properties-to-modify": lambda: args.map("properties-to-modify"),
    }
    with pytest.raises(BadRequest, match=error):
        getters[next(iter(body))]()


def test_one_call_reads_at_most_frames_per_turn() -> None:
    conn, _ = opened()
    n = amqp_connection.FRAMES_PER_TURN
    conn.receive_data(framing.HEARTBEAT * (3 * n))
    assert conn.more_input
    conn.receive_data(b"")
    assert conn.more_input
    conn.receive_data(b"")
    assert not conn.more_input


def test_links_past_the_limit_are_refused_with_resource_limit_exceeded() -> None:
    conn, _ = opened()
    conn.receive_data(f(0, t.Begin(None, 0, 5000, 5000)))
    limit = amqp_connection.MAX_LINKS_PER_SESSION
    for h in range(limit + 2):
        attach = t.Attach(f"l{h}", h, False, 0, 0, t.Source("s"), t.Target("q"))
        conn.receive_data(f(0, attach))
        while conn.more_input:
            conn.receive_data(b"")
    out = frames(conn.data_to_send())
    detaches = [fr.body for fr in out if isinstance(fr.body, t.Detach)]
    assert len(detaches) == 2 and not conn.closed
    assert {d.error.condition for d in detaches} == {"amqp:resource-limit-exceeded"}
    assert conn.link_count == limit


def test_sessions_past_the_limit_close_the_connection() -> None:
    conn, _ = opened()
    for channel in range(2, amqp_connection.MAX_SESSIONS + 2):  # (1 has one)
        conn.receive_data(f(channel, t.Begin(None, 0, 5000, 5000)))
        while conn.more_input:
            conn.receive_data(b"")
    out = frames(conn.data_to_send())
    assert isinstance(out[-1].body, t.Close) and conn.closed
    assert out[-1].body.error.condition == "amqp:resource-limit-exceeded"


def test_a_performative_is_decoded_from_its_own_frame_only() -> None:
    """A list claiming 4 MB in a 20-byte frame, 4 MB of valid items after the frame: the
    decoder never walks past the frame (it walked the whole buffer, per frame, before)."""
    claimed = 4 * 1024 * 1024
    body = b"\x00\x53\x10\xd0" + struct.pack(">II", claimed, claimed // 2)
    raw = struct.pack(">IBBH", 8 + len(body), 2, 0, 0) + body + b"\xa0\x00" * (claimed // 2)
    started = time.monotonic()
    with pytest.raises(framing.UndecodableFrame):
        framing.parse_frame(raw, 0, 1 << 20)
    assert time.monotonic() - started < 0.2


def test_links_are_bounded_per_connection_across_sessions() -> None:
    conn, _ = opened()  # (a session on channel 1)
    conn.receive_data(f(0, t.Begin(None, 0, 5000, 5000)))
    per_session = 600
    for channel in (0, 1):
        for h in range(per_session):
            target = t.Target("q")
            attach = t.Attach(f"c{channel}-{h}", h, False, 0, 0, t.Source("s"), target)
            conn.receive_data(f(channel, attach))
            while conn.more_input:
                conn.receive_data(b"")
    refused = [fr for fr in frames(conn.data_to_send()) if isinstance(fr.body, t.Detach)]
    assert len(refused) == 2 * per_session - amqp_connection.MAX_LINKS
    assert conn.link_count == amqp_connection.MAX_LINKS and not conn.closed
