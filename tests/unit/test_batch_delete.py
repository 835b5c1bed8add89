"""Deleting the oldest messages without receiving them (``batch-delete-messages``,
daemon/README.md §29.6): oldest first across partitions, only before the cut-off, never a
locked or scheduled message, the dead-letter queue on its own, a session's messages only when
one is named, at most 4,000 per request, and kept across a restart."""

from __future__ import annotations

from typing import Any

import pytest

import presenting
from sbctl.core.errors import BadRequest, InvalidOperation, MessagingEntityDisabled
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE
from sbctld.clock import FakeClock

broker = presenting.broker
reopen = presenting.reopen

NS = DEFAULT_NAMESPACE
DLQ = "q/$deadletterqueue"


def bodies(b: Any, path: str = "q") -> list[bytes]:
    """Every peekable message's body, oldest first (all partitions)."""
    out: list[Any] = []
    while page := b.messaging.peek(NS, path, 250, out[-1].sequence_number + 1 if out else 0):
        out += page  # daemon/README.md §0.1.7: pages walk on across partitions
    out.sort(key=lambda d: (d.enqueued_time_ms, d.sequence_number))
    return [decode_message(d.payload).body for d in out]


def fill(b: Any, clock: FakeClock, *names: str, **kw: Any) -> None:
    """One message per name, each a second after the one before; keyed messages spread over
    a partitioned queue's partitions."""
    for name in names:
        b.messaging.send(NS, "q", [Message(name.encode(), partition_key=name, **kw)])
        clock.advance(1_000)


def test_oldest_first_across_partitions_and_before_the_cutoff(
    broker: Any, clock: FakeClock, reopen: Any, partitioned: bool
) -> None:
    broker.management.queue_create(NS, "q", {"enable_partitioning": partitioned})
    start = clock.now
    fill(broker, clock, *(f"m{i}" for i in range(10)))
    assert broker.messaging.delete_messages(NS, "q", 3, None, None) == 3
    assert bodies(broker) == [f"m{i}".encode() for i in range(3, 10)]
    # only what was enqueued before the cut-off (m3, m4: enqueued at +3 s, +4 s)
    assert broker.messaging.delete_messages(NS, "q", 100, start + 5_000, None) == 2
    assert bodies(broker) == [f"m{i}".encode() for i in range(5, 10)]
    assert broker.messaging.delete_messages(NS, "q", 100, start, None) == 0
    b = reopen(crash=True)
    assert bodies(b) == [f"m{i}".encode() for i in range(5, 10)]
    assert b.management.queue_get(NS, "q")["active_message_count"] == 5
    assert b.messaging.delete_messages(NS, "q", 4000, None, None) == 5
    assert bodies(b) == []
    assert b.management.queue_get(NS, "q")["size_in_bytes"] == 0


def test_locked_and_scheduled_messages_stay_deferred_ones_go(
    broker: Any, clock: FakeClock, partitioned: bool
) -> None:
    broker.management.queue_create(NS, "q", {"enable_partitioning": partitioned})
    fill(broker, clock, "locked", "deferred", "idle")
    broker.messaging.send(
        NS, "q", [Message(b"sched", scheduled_enqueue_time_ms=clock.now + 60_000)]
    )
    got = {
        decode_message(d.payload).body: d for d in broker.messaging.receive(NS, "q", 3, "peek-lock")
    }
    assert set(got) == {b"locked", b"deferred", b"idle"}
    broker.messaging.settle(NS, "q", "defer", [got[b"deferred"].lock_token])
    broker.messaging.settle(NS, "q", "abandon", [got[b"idle"].lock_token])
    clock.advance(1_000)
    assert broker.messaging.delete_messages(NS, "q", 10, None, None) == 2  # deferred, idle
    q = broker.management.queue_get(NS, "q")
    assert (q["active_message_count"], q["scheduled_message_count"]) == (1, 1)
    # the lock holder still settles its message
    (done,) = broker.messaging.settle(NS, "q", "complete", [got[b"locked"].lock_token])
    assert done["ok"] is True


def test_the_dead_letter_queue_is_its_own_entity(broker: Any, clock: FakeClock) -> None:
    broker.management.queue_create(NS, "q", {})
    fill(broker, clock, "dead1", "dead2", "alive")
    got = broker.messaging.receive(NS, "q", 2, "peek-lock")
    broker.messaging.settle(NS, "q", "dead-letter", [d.lock_token for d in got])
    assert broker.messaging.delete_messages(NS, DLQ, 1, None, None) == 1
    assert bodies(broker, DLQ) == [b"dead2"]
    assert bodies(broker) == [b"alive"]
    assert broker.messaging.delete_messages(NS, DLQ, 10, None, None) == 1
    assert broker.management.queue_get(NS, "q")["dead_letter_message_count"] == 0


def test_a_session_id_limits_it_to_that_session(broker: Any, clock: FakeClock) -> None:
    broker.management.queue_create(NS, "q", {"requires_session": True})
    for i in range(4):
        broker.messaging.send(NS, "q", [Message(f"a{i}".encode(), session_id="a")])
        broker.messaging.send(NS, "q", [Message(f"b{i}".encode(), session_id="b")])
        clock.advance(1_000)
    assert broker.messaging.delete_messages(NS, "q", 3, None, "a") == 3
    assert bodies(broker) == [b"b0", b"b1", b"b2", b"a3", b"b3"]
    assert broker.messaging.delete_messages(NS, "q", 10, None, "nobody") == 0


def test_subscriptions_and_bad_requests(broker: Any, clock: FakeClock) -> None:
    broker.management.topic_create(NS, "t", {})
    broker.management.subscription_create(NS, "t", "s", {})
    broker.messaging.send(NS, "t", [Message(b"one"), Message(b"two")])
    clock.advance(1_000)
    assert broker.messaging.delete_messages(NS, "t/subscriptions/s", 1, None, None) == 1
    assert [
        decode_message(d.payload).body
        for d in broker.messaging.peek(NS, "t/subscriptions/s", 10, 0)
    ] == [b"two"]
    for count in (0, -1, 4001):
        with pytest.raises(BadRequest, match="message-count must be 1 to 4000"):
            broker.messaging.delete_messages(NS, "t/subscriptions/s", count, None, None)
    with pytest.raises(InvalidOperation, match="is a topic"):
        broker.messaging.delete_messages(NS, "t", 1, None, None)
    broker.management.queue_create(NS, "off", {"status": "Disabled"})
    with pytest.raises(MessagingEntityDisabled):
        broker.messaging.delete_messages(NS, "off", 1, None, None)
