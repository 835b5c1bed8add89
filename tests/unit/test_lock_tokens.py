"""Lock tokens are GUIDs that carry (public sequence number, nonce): made and read without
uuid.UUID on the hot path, and equal to what uuid.UUID makes and reads."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbctl.core.errors import BadRequest
from sbctl.core.locks import lock_token_for, parse_lock_token

U64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(U64, U64)
def test_a_token_is_the_guid_of_its_parts_and_reads_back(seq: int, nonce: int) -> None:
    token = lock_token_for(seq, nonce)
    assert token == str(uuid.UUID(bytes=seq.to_bytes(8, "big") + nonce.to_bytes(8, "big")))
    assert parse_lock_token(token) == (seq, nonce)


@given(U64, U64)
def test_every_spelling_uuid_accepts_reads_the_same(seq: int, nonce: int) -> None:
    guid = uuid.UUID(bytes=seq.to_bytes(8, "big") + nonce.to_bytes(8, "big"))
    for spelling in (str(guid).upper(), "{" + str(guid) + "}", guid.urn, guid.hex):
        assert parse_lock_token(spelling) == (seq, nonce)


@given(st.text(max_size=40))
def test_anything_else_is_refused_as_bad_request_or_read_as_uuid_reads_it(text: str) -> None:
    try:
        raw = uuid.UUID(text).bytes
    except ValueError:
        with pytest.raises(BadRequest, match="invalid lock token"):
            parse_lock_token(text)
    else:
        assert parse_lock_token(text) == (
            int.from_bytes(raw[:8], "big"),
            int.from_bytes(raw[8:], "big"),
        )


@pytest.mark.parametrize(
    "token",
    [
        "0000000+-0000-0000-0000-000000000000",  # int() would take the sign
        "00000000-0000-0000-0000-00000000000g",
        "",
        None,
        12,
    ],
)
def test_near_guids_and_non_strings_are_refused(token: object) -> None:
    with pytest.raises(BadRequest, match="invalid lock token"):
        parse_lock_token(token)  # type: ignore[arg-type]


def test_parts_beyond_64_bits_are_refused() -> None:
    with pytest.raises(OverflowError):
        lock_token_for(2**64, 0)
    with pytest.raises(OverflowError):
        lock_token_for(0, -1)
