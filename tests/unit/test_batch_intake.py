"""A batch of bodies alone (the bare form a client sends: one data section per message, maybe
after empty properties) is taken in by one pass over the envelope; what it gives is exactly
what the general intake gives each message, and any other batch is left to the general
intake."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core import message_form as mf
from sbctl.core.amqp import codec
from sbctl.core.amqp.sections import batch_messages
from sbctl.core.records import Message


def _data(body: bytes) -> bytes:
    return b"\x00\x53\x75\xb0" + len(body).to_bytes(4, "big") + body


def _batch(messages: list[bytes]) -> bytes:
    return b"".join(_data(m) for m in messages)


BARE = st.binary(min_size=1, max_size=3000).flatmap(
    lambda body: st.sampled_from([_data(body), b"\x00\x53\x73\x45" + _data(body)])
)
OTHER = st.sampled_from(
    [
        mf.encode(Message(b"body", "an-id")),  # properties with an id
        mf.encode(Message(b"")),  # a short binary
        mf.encode(Message(b"x", application_properties={"k": 1})),
        b"\x00\x53\x77\xa1\x03abc",  # an amqp-value body
    ]
)


def _general(payload: bytes, ids: list[str]) -> list[mf.Sent]:
    spans = batch_messages(payload)
    return [mf._intake_one(payload, s, e, i) for (s, e), i in zip(spans, ids, strict=True)]


@settings(max_examples=200, deadline=None)
@given(st.lists(BARE, max_size=12))
def test_a_bare_batch_is_taken_in_as_the_general_intake_takes_it(messages: list[bytes]) -> None:
    payload = _batch(messages)
    fast = mf._bare_batch(payload)
    assert fast is not None
    ids = [sent.message.message_id or "" for sent in fast]
    assert len(set(ids)) == len(messages) and all(len(i) == 32 for i in ids)
    slow = _general(payload, ids)
    assert [(s.message, s.payload) for s in fast] == [(s.message, s.payload) for s in slow]
    assert [s.message.body for s in fast] == [mf.decode(m).body for m in messages]


@settings(max_examples=100, deadline=None)
@given(st.lists(BARE, max_size=6), OTHER, st.lists(BARE, max_size=6))
def test_any_other_message_leaves_the_batch_to_the_general_intake(
    before: list[bytes], other: bytes, after: list[bytes]
) -> None:
    payload = _batch([*before, other, *after])
    assert mf._bare_batch(payload) is None
    taken = mf.intake_transfer(payload, codec.BATCH_FORMAT)
    assert len(taken) == len(before) + 1 + len(after)


def test_a_cut_envelope_is_left_to_the_general_intake() -> None:
    payload = _batch([_data(b"x" * 100)])
    for cut in range(1, len(payload)):
        assert mf._bare_batch(payload[:cut]) is None


# The Unix socket's send: each message is its AMQP form as encode() wrote it.
UNIX_ANY = st.one_of(
    st.binary(max_size=3000).map(lambda body: mf.encode(Message(body))),
    OTHER,
    st.binary(max_size=40),  # not a message at all: left to the general intake, which refuses it
)


def _a_body_alone(item: bytes) -> bool:
    try:
        return mf.encode(Message(mf.decode(item).body)) == item
    except Exception:
        return False


@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=20))
@settings(max_examples=150)
def test_a_unix_send_of_bodies_alone_is_read_as_each_message_alone(bodies: list[bytes]) -> None:
    items = [mf.encode(Message(b)) for b in bodies]
    got = mf.intake_bare(items)
    assert got is not None
    each = [mf.intake_sent(i) for i in items]
    assert got == ([s.message for s in each], [s.payload for s in each])
    assert got[0] == [Message(b) for b in bodies]


@given(st.lists(UNIX_ANY, min_size=1, max_size=8))
@settings(max_examples=150)
def test_a_unix_send_with_any_other_item_is_read_message_by_message(items: list[bytes]) -> None:
    got = mf.intake_bare(items)
    bare = [_a_body_alone(i) for i in items]
    if got is None:
        assert not all(bare)
    else:
        assert all(bare)
        assert got[1] == items


def test_an_older_clients_fields_are_not_bare() -> None:
    assert mf.intake_bare([mf.encode(Message(b"x")), [b"x"]]) is None
