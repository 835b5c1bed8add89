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


def queue_on_both(twins: tuple[Broker, Broker], options: dict[str, Any]) -> str:
    """A new queue of ``options`` on each broker; its name."""
    queue = f"q{next(NAMES)}"
    for b in twins:
        b.management.queue_create(NS, queue, dict(options))
    return queue


TWINS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(TWINS, max_examples=40)
@given(OPTIONS, st.lists(BODIES, min_size=1, max_size=5))
def test_bodies_alone_are_sent_as_messages_with_their_fields_read(
    twins: tuple[Broker, Broker], options: dict[str, Any], batches: list[list[bytes]]
) -> None:
    queue = queue_on_both(twins, options)
    bare, fields = twins
    for bodies in batches:
        as_bare = [encode(Message(body)) for body in bodies]  # bytes: the bare form
        as_fields = [Message(body) for body in bodies]
        assert outcome(bare, queue, as_bare) == outcome(fields, queue, as_fields)
    if options.get("status", "Active") != "ReceiveDisabled":
        assert stored(bare, queue) == stored(fields, queue)


def _amqp(body: bytes, message_id: str | None, extra: str) -> bytes:
    """A message as an AMQP client sends it: a durable header (or one with a time to live),
    maybe a message id, maybe application properties or a footer, a data body."""
    from sbctl.core.amqp import codec
    from sbctl.core.amqp import types as t

    return codec.encode_message(
        codec.Message(
            header=t.Header(True, None, t.UInt(5000) if extra == "ttl" else None),
            properties=None if message_id is None else t.Properties(message_id),
            application_properties={"k": "v"} if extra == "props" else None,
            footer={t.Symbol("x-f"): "y" * 70_000} if extra == "footer" else None,
            body=[body],
        )
    )


SENT = st.lists(
    st.tuples(
        st.binary(max_size=300) | st.sampled_from([b"x" * 300_000, b"y" * 200_000]),
        st.sampled_from([None, "id-1", "id-1", "d" * 128, "e" * 129]),  # (id-1: a duplicate)
        st.sampled_from(["", "", "", "", "ttl", "props", "footer"]),
    ),
    max_size=4,
)


@settings(TWINS, max_examples=80)
@given(OPTIONS, st.lists(SENT, min_size=1, max_size=4))
def test_messages_taken_in_with_an_id_alone_are_sent_as_the_general_path_sends_them(
    twins: tuple[Broker, Broker], options: dict[str, Any], batches: list[list[Any]]
) -> None:
    """What the AMQP endpoint stores (each message taken in, given an id when it has none):
    a batch of bodies with ids alone takes the short path, with the general path's outcome
    and stored messages; any other message, the general path."""
    from unittest.mock import patch

    from sbctl.core.message_form import intake_transfer
    from sbctld import queue as queue_module

    queue = queue_on_both(twins, options)
    short, general = twins
    for batch in batches:
        sent = [intake_transfer(_amqp(*one), 0)[0] for one in batch]
        expected = outcome(short, queue, sent)
        with patch.object(queue_module, "sent_bare", lambda _items: None):  # the general path
            assert outcome(general, queue, sent) == expected
    if options.get("status", "Active") != "ReceiveDisabled":
        assert stored(short, queue) == stored(general, queue)


def test_an_entity_that_detects_duplicates_detects_them_among_messages_taken_in(
    twins: tuple[Broker, Broker],
) -> None:
    from sbctl.core.message_form import intake_transfer

    b = twins[0]
    b.management.queue_create(NS, "dedup", {"requires_duplicate_detection": True})
    sent = [intake_transfer(_amqp(body, "same", ""), 0)[0] for body in (b"a", b"b")]
    assert outcome(b, "dedup", sent) == [1, 1]  # the second: a duplicate of the first
    assert outcome(b, "dedup", sent[1:]) == [1]
    assert [m[3] for m in stored(b, "dedup")] == [b"a"]
