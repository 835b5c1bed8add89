"""A message that is a body alone, maybe after a header and empty properties (what the AMQP
clients send: rhea and pyamqp put a durable header on every message), is taken in without
the general reading; what it gives, fields and stored form, with or without a message id to
give, is exactly what the general reading gives, and anything else is left to it."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core import message_form as mf
from sbctl.core.amqp import codec
from sbctl.core.amqp.types import Header, UByte, UInt


def _data(body: bytes) -> bytes:
    if len(body) < 256 and body[:1] != b"\x00":
        return b"\x00\x53\x75\xa0" + bytes((len(body),)) + body
    return b"\x00\x53\x75\xb0" + len(body).to_bytes(4, "big") + body


headers = st.one_of(
    st.just(b""),
    st.just(b"\x00\x53\x70\x45"),  # an empty list
    st.just(b"\x00\x53\x70\xc0\x02\x01\x41"),  # rhea's durable: true
    st.just(b"\x00\x53\x70\xc0\x03\x02\x56\x01"),  # long boolean, then nothing
    st.builds(
        Header,
        st.one_of(st.none(), st.booleans()),
        st.one_of(st.none(), st.integers(0, 255).map(UByte)),
        st.one_of(st.none(), st.integers(0, 2**32 - 1).map(UInt)),  # a time to live
        st.one_of(st.none(), st.booleans()),
        st.one_of(st.none(), st.integers(0, 2**32 - 1).map(UInt)),
    ).map(lambda h: b"\x00\x53\x70" + codec.encode(h)[3:]),
    st.just(b"\x00\x53\x70\xc0\x05\x02\x41"),  # a size its items do not fill
    st.just(b"\x00\x53\x70"),  # cut short
)
middles = st.sampled_from([b"", b"\x00\x53\x73\x45", b"\x00\x53\x73\xc0\x01\x00"])
bodies = st.binary(max_size=600)
tails = st.sampled_from(
    [b"", b"", b"\x00\x53\x75\xa0\x01z", b"\x00\x53\x78\xc1\x01\x00", b"\x00\x53\x75"]  # (cut)
)


def _both(raw: bytes, new_id: str | None) -> tuple[Any, Any]:
    """What the quick path gives, and what the intake gives with the quick path declining."""
    quick = mf._quick(raw, 0, len(raw), new_id)
    with patch.object(mf, "_quick", lambda *_: None):
        try:
            general: Any = mf._intake_one(raw, 0, len(raw), new_id)
        except Exception as exc:  # refused: the quick path must have declined it
            general = exc
    return quick, general


@settings(max_examples=600, deadline=None)
@given(headers, middles, bodies, tails, st.booleans())
def test_the_quick_intake_gives_what_the_general_reading_gives(
    header: bytes, middle: bytes, body: bytes, tail: bytes, give_id: bool
) -> None:
    raw = header + middle + _data(body) + tail
    new_id = "0123456789abcdef0123456789abcdef" if give_id else None
    quick, general = _both(raw, new_id)
    if quick is None:
        return
    assert not isinstance(general, Exception), f"quick took what the reading refuses: {general}"
    assert quick.message == general.message
    assert quick.payload == general.payload


def test_a_durable_header_takes_the_quick_path_and_is_kept() -> None:
    raw = b"\x00\x53\x70\xc0\x02\x01\x41" + _data(b"x" * 1024)
    quick, general = _both(raw, "0123456789abcdef0123456789abcdef")
    assert quick is not None and quick.payload.startswith(b"\x00\x53\x70\xc0\x02\x01\x41")
    assert (quick.message, quick.payload) == (general.message, general.payload)
    assert mf.decode(quick.payload).message_id == "0123456789abcdef0123456789abcdef"


def test_a_time_to_live_leaves_the_message_to_the_general_reading() -> None:
    header = b"\x00\x53\x70" + codec.encode(Header(True, None, UInt(5000)))[3:]
    raw = header + _data(b"x")
    quick, general = _both(raw, None)
    assert quick is None and general.message.time_to_live_ms == 5000


def test_a_data_section_cut_short_is_left_to_the_general_reading() -> None:
    for head in (b"", b"\x00\x53\x70\xc0\x02\x01\x41", b"\x00\x53\x73\x45"):
        raw = head + b"\x00\x53\x75"
        quick, general = _both(raw, None)
        assert quick is None and isinstance(general, codec.DecodeError)


@given(headers, st.binary(max_size=6))
def test_a_header_read_once_is_known_by_its_bytes(header: bytes, after: bytes) -> None:
    """The header's end (or -1: a time to live, or no header that reads) is the same the
    first time it is read and when its bytes are known; only headers without a time to
    live are kept, and a header cut short is never taken for a known one."""
    raw = header + after
    if len(raw) < 4:
        return
    mf._PLAIN_HEADERS.clear()
    cold = mf._header_end(raw, 3, len(raw))
    assert mf._header_end(raw, 3, len(raw)) == cold
    assert all(cold >= 0 for _ in mf._PLAIN_HEADERS)
    for cut in range(4, len(raw)):  # the same bytes, ending earlier
        mf._PLAIN_HEADERS.clear()
        expected = mf._header_end(raw[:cut], 3, cut)
        mf._header_end(raw, 3, len(raw))  # (known now, if it reads whole)
        assert mf._header_end(raw[:cut], 3, cut) == expected
        assert mf._header_end(raw, 3, cut) == expected  # (a message of a batch: bytes go on)
