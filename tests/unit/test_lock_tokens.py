"""Lock tokens are GUIDs that carry (public sequence number, nonce): made and read without
uuid.UUID on the hot path, and equal to what uuid.UUID makes and reads."""

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbctl.core.errors import BadRequest
from sbctl.core.locks import lock_token_for, parse_lock_token, parse_lock_tokens

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


def _one_by_one(tokens: list[object]) -> list[object]:
    out: list[object] = []
    for token in tokens:
        try:
            out.append(parse_lock_token(token))  # type: ignore[arg-type]
        except BadRequest as exc:
            out.append(("BadRequest", str(exc)))
    return out


def _token(draw: st.DrawFn) -> object:
    seq, nonce = draw(U64), draw(U64)
    token = lock_token_for(seq, nonce)
    kind = draw(st.sampled_from(["canonical"] * 6 + ["upper", "braces", "hex", "cut", "text"]))
    if kind == "upper":
        return token.upper()
    if kind == "braces":
        return "{" + token + "}"
    if kind == "hex":
        return token.replace("-", "")
    if kind == "cut":  # 36 characters, not a GUID; or a GUID less one character
        at = draw(st.integers(0, 35))
        return token[:at] + draw(st.sampled_from(["g", "-", "+", " ", "A"])) + token[at + 1 :]
    if kind == "text":
        return draw(st.one_of(st.text(max_size=40), st.none(), st.integers()))
    return token


@given(st.lists(st.composite(_token)(), max_size=30))
def test_a_batch_reads_as_its_tokens_one_by_one(tokens: list[object]) -> None:
    got = [
        ("BadRequest", str(v)) if isinstance(v, BadRequest) else v
        for v in parse_lock_tokens(tokens)  # type: ignore[arg-type]
    ]
    assert got == _one_by_one(tokens)


def test_a_batch_whose_join_is_canonical_is_still_read_token_by_token() -> None:
    a, b = lock_token_for(1, 2), lock_token_for(3, 4)
    shifted = [a[:35], a[35] + b, b]  # lengths 35, 37, 36: joined, a run of canonical tokens
    got = parse_lock_tokens(shifted)
    assert isinstance(got[0], BadRequest) and isinstance(got[1], BadRequest)
    assert got[2] == (3, 4)
