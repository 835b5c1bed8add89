"""A received message decodes its stored form when it is first read, with the result an
eager decoding gave; lock tokens are read without decoding anything."""

from __future__ import annotations

import pickle
import sys
import threading

import msgspec
import pytest

from sbctl import convert
from sbctl.core import messages
from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest
from sbctl.core.message_form import encode
from sbctl.core.messages import UNREADABLE, ReceivedMessage
from sbctl.core.records import Message

SENT = Message(
    b"hello",
    message_id="m-1",
    session_id="s",
    subject="greeting",
    application_properties={"region": "eu", "n": 3},
)


def _delivered(payload: bytes, changes: dict | None = None, token: str | None = "t") -> Delivered:
    return Delivered(
        42, 1_700_000_000_000, 2, token, 1_700_000_060_000, 1_800_000_000_000, 0, 1,
        payload, changes,
    )  # fmt: skip


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = messages.decode_message

    def counted(payload: bytes) -> Message:
        calls.append(1)
        return real(payload)

    monkeypatch.setattr(messages, "decode_message", counted)
    return calls


def test_settling_by_lock_token_decodes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    got = [ReceivedMessage.from_wire(_delivered(encode(SENT), token=f"t{i}")) for i in range(5)]
    assert convert.lock_tokens(got) == [f"t{i}" for i in range(5)]
    assert [m.sequence_number for m in got] == [42] * 5
    assert [m.delivery_count for m in got] == [2] * 5
    assert got[0].state == "active" and got[0].locked_until_ms == 1_700_000_060_000
    assert calls == []
    assert got[0].body == b"hello"
    assert got[0].message_id == "m-1" and got[0].application_properties["n"] == 3
    assert calls == [1]  # once, however many fields are read after


def test_lazy_reading_equals_the_eager_one() -> None:
    lazy = ReceivedMessage.from_wire(_delivered(encode(SENT), {"DeadLetterReason": "why"}))
    eager = ReceivedMessage(
        42, 1_700_000_000_000, 2, "t", 1_700_000_060_000, 1_800_000_000_000, 0, "active",
        SENT, {"region": "eu", "n": 3, "DeadLetterReason": "why"},
    )  # fmt: skip
    assert lazy == eager
    assert repr(lazy) == repr(eager)
    assert lazy.dead_letter_reason == "why"
    assert lazy.to_dict() == eager.to_dict()
    assert lazy != ReceivedMessage.from_wire(_delivered(encode(Message(b"other"))))
    with pytest.raises(TypeError):
        hash(lazy)


def test_a_record_that_cannot_be_read_shows_why_when_read() -> None:
    got = ReceivedMessage.from_wire(_delivered(b"\x00\x53\x75\xb0\xff"))  # a cut data section
    assert got.lock_token == "t"
    assert got.body == b""
    assert got.application_properties[UNREADABLE].startswith("the stored record cannot be read")


def test_fields_set_after_receiving_are_kept() -> None:
    got = ReceivedMessage.from_wire(_delivered(encode(SENT)))
    got.application_properties = {"x": 1}
    assert got.application_properties == {"x": 1}
    assert got.body == b"hello"
    got = ReceivedMessage.from_wire(_delivered(encode(SENT)))
    got.message = Message(b"replaced")
    assert got.body == b"replaced"
    assert got.application_properties == {"region": "eu", "n": 3}


def test_lock_tokens_from_every_form() -> None:
    got = ReceivedMessage.from_wire(_delivered(encode(SENT), token="tok"))
    assert convert.lock_tokens("a") == ["a"]
    assert convert.lock_tokens(["a", "b"]) == ["a", "b"]
    assert convert.lock_tokens(("a", got)) == ["a", "tok"]
    assert convert.lock_tokens(got) == ["tok"]
    tokens = ["a"]
    assert convert.lock_tokens(tokens) is not tokens
    with pytest.raises(BadRequest, match="has no lock token"):
        convert.lock_tokens(["a", 5])
    with pytest.raises(BadRequest, match="has no lock token"):
        convert.lock_tokens([ReceivedMessage.from_wire(_delivered(encode(SENT), token=None))])


def test_a_raw_payload_from_the_wire_decodes_too() -> None:
    got = ReceivedMessage.from_wire(_delivered(msgspec.Raw(encode(SENT))))  # type: ignore[arg-type]
    assert got.body == b"hello" and got.subject == "greeting"


def test_threads_reading_one_message_share_one_decoding() -> None:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads switch between nearly every bytecode)
    try:
        got = [ReceivedMessage.from_wire(_delivered(encode(SENT))) for _ in range(5000)]
        seen: list[list[object]] = [[] for _ in range(4)]
        errors: list[BaseException] = []

        def read(k: int) -> None:
            try:
                seen[k].extend(m.application_properties for m in got)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=read, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    for other in seen[1:]:
        assert all(a is b for a, b in zip(seen[0], other, strict=True))
    assert all(m.body == b"hello" for m in got)


def test_a_received_message_pickles_and_reads_an_older_pickle() -> None:
    got = ReceivedMessage.from_wire(_delivered(encode(SENT), {"x": 1}))
    assert pickle.loads(pickle.dumps(got)) == got
    older = ReceivedMessage.__new__(ReceivedMessage)
    fields = {f: getattr(got, f) for f in ReceivedMessage.__match_args__}
    older.__setstate__(fields)  # what a pickle of the dataclass version holds
    assert older == got and older.body == b"hello"
