"""Deliveries sent on a link several at a time (a receive's batch) go out exactly as they
would one at a time: the same frames, ids, credit, session window and unsettled map, and
the same delivery tags."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.amqp import framing
from sbctl.core.amqp import types as t
from sbctld.frontends.amqp.connection import Connection, Link, Session
from sbctld.frontends.amqp.settlement import lock_tag, lock_tags

TAGS = st.binary(min_size=16, max_size=16) | st.binary(max_size=300)


@settings(max_examples=200, deadline=None)
@given(
    channel=st.integers(0, 65535),
    handle=st.integers(0, 2**32 - 1) | st.integers(0, 300),
    first=st.integers(0, 2**32 - 200) | st.integers(0, 300),
    tags=st.lists(TAGS, max_size=8) | st.lists(st.binary(min_size=16, max_size=16), max_size=8),
    message_format=st.sampled_from([0, 255, 256, 0x80013700]),
    settled=st.booleans(),
    data=st.data(),
)
def test_transfer_heads_are_the_heads_one_at_a_time(
    channel: int,
    handle: int,
    first: int,
    tags: list[bytes],
    message_format: int,
    settled: bool,
    data: st.DataObject,
) -> None:
    ids = list(range(first, first + len(tags)))
    sizes = data.draw(st.lists(st.integers(0, 1 << 20), min_size=len(tags), max_size=len(tags)))
    one_by_one = [
        framing.transfer_head(channel, handle, i, tag, message_format, settled, size)
        for i, tag, size in zip(ids, tags, sizes, strict=True)
    ]
    assert (
        framing.transfer_heads(channel, handle, ids, tags, message_format, settled, sizes)
        == one_by_one
    )
    for tag, head in zip(tags, one_by_one, strict=True):
        assert len(head) <= framing.transfer_head_room(len(tag))


class _Handler:
    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


def _link(channel: int, handle: int, first_id: int, window: int, max_frame: int) -> Link:
    conn = Connection(_Handler())
    conn.peer_max_frame_size = max_frame
    session = Session(channel, channel, t.Begin(None, 0, 5000, 5000))
    session.next_delivery_id = first_id
    session.remote_incoming_window = window
    link = Link(session, t.Attach("l", handle, True), handle)
    link.credit = 500
    link.context = conn
    return link


def _state(link: Link) -> Any:
    s = link.session
    conn = link.context
    return (
        conn.data_to_send(),
        list(s.pending),
        s.next_delivery_id,
        s.next_outgoing_id,
        s.remote_incoming_window,
        {d: other is link for d, other in s.unsettled.items()},
        link.credit,
        link.delivery_count,
    )


@settings(max_examples=200, deadline=None)
@given(
    channel=st.integers(0, 10),
    handle=st.integers(0, 2**32 - 1) | st.integers(0, 3),
    first_id=st.integers(0, 2**32 - 1) | st.integers(250, 260),
    window=st.integers(0, 12),
    max_frame=st.integers(512, 3000),
    messages=st.lists(st.tuples(TAGS, st.binary(max_size=3500)), max_size=10),
    settled=st.booleans(),
)
def test_transfers_send_what_transfer_sends_one_at_a_time(
    channel: int,
    handle: int,
    first_id: int,
    window: int,
    max_frame: int,
    messages: list[tuple[bytes, bytes]],
    settled: bool,
) -> None:
    batch = _link(channel, handle, first_id, window, max_frame)
    single = _link(channel, handle, first_id, window, max_frame)
    tags = [tag for tag, _ in messages]
    payloads = [payload for _, payload in messages]
    ids = batch.context.transfers(batch, tags, payloads, settled=settled)
    one_by_one = [
        single.context.transfer(single, tag, payload, settled=settled) for tag, payload in messages
    ]
    assert ids == one_by_one
    assert _state(batch) == _state(single)


@given(st.lists(st.uuids(), max_size=12), st.booleans())
def test_a_batch_of_lock_tags_is_each_tokens_uuid_in_dotnet_order(
    tokens: list[uuid.UUID], upper: bool
) -> None:
    texts = [str(u).upper() if upper else str(u) for u in tokens]
    assert lock_tags(texts) == [u.bytes_le for u in tokens] == [lock_tag(t) for t in texts]


def test_a_bad_lock_token_in_a_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="not a lock token: 'abcd'"):
        lock_tags([str(uuid.uuid4()), "abcd"])
