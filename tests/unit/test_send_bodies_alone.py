"""A batch of bodies alone (what the Unix client sends for a message without fields) is
stored as the same messages sent with their fields read one by one: the same sequence
numbers, expiry, refusals (a message over the tier's size, a batch over it, sends disabled,
an empty batch, an entity that needs sessions) and stored messages (daemon/README.md §1, §13)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core.message_form import decode, encode
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE as NS
from sbctld.broker import Broker

NAMES = itertools.count()
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "default_message_time_to_live": st.sampled_from([1000, 60_000]),
        "requires_duplicate_detection": st.booleans(),
        "requires_session": st.booleans(),
        "status": st.sampled_from(["Active", "SendDisabled", "ReceiveDisabled"]),
    },
)
BODIES = st.lists(
    st.one_of(st.binary(max_size=300), st.sampled_from([b"", b"x" * 300_000, b"y" * 200_000])),
    max_size=8,
)


def outcome(b: Broker, queue: str, items: list[Any]) -> object:
    try:
        return b.messaging.send(NS, queue, items)
    except Exception as exc:  # the refusal, compared by kind and text
        return (type(exc).__name__, str(exc))


def stored(b: Broker, queue: str) -> list[tuple[object, ...]]:
    out = []
    for d in b.messaging.peek(NS, queue, 250, None):
        m = decode(d.payload)
        out.append((d.sequence_number, d.enqueued_time_ms, d.expires_at_ms, m.body, m.message_id))
    return out


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(OPTIONS, st.lists(BODIES, min_size=1, max_size=5))
def test_bodies_alone_are_sent_as_messages_with_their_fields_read(
    twins: tuple[Broker, Broker], options: dict[str, Any], batches: list[list[bytes]]
) -> None:
    queue = f"q{next(NAMES)}"
    bare, fields = twins
    for b in twins:
        b.management.queue_create(NS, queue, dict(options))
    for bodies in batches:
        as_bare = [encode(Message(body)) for body in bodies]  # bytes: the bare form
        as_fields = [Message(body) for body in bodies]
        assert outcome(bare, queue, as_bare) == outcome(fields, queue, as_fields)
    if options.get("status", "Active") != "ReceiveDisabled":
        assert stored(bare, queue) == stored(fields, queue)
