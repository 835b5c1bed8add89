"""A receive hands out its batch in one pass and still hands each message out once: a
message handed back twice is delivered once, and when the disk refuses an expired
message's entry the other candidates are handed back, received by the next receive
(daemon/README.md §3.4, §6.2)."""

from __future__ import annotations

import pytest

from sbctl.core.message_form import decode
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE as NS
from sbctld.broker import Broker
from sbctld.clock import FakeClock
from sbctld.storage.space import StorageError


def bodies(got: list) -> list[bytes]:
    return [decode(d.payload).body for d in got]


def test_a_message_handed_back_twice_is_delivered_once(broker: Broker) -> None:
    broker.management.queue_create(NS, "q", {})
    broker.messaging.send(NS, "q", [Message(b"%d" % i) for i in range(4)])
    first = broker.messaging.receive(NS, "q", 4, "peek-lock")
    assert bodies(first) == [b"0", b"1", b"2", b"3"]
    broker.messaging.settle(NS, "q", "abandon", [first[0].lock_token, first[2].lock_token])
    p = broker.queue(NS, "q").state.partitions[0]
    p.main.returned.extend([p.main.returned[0]])  # the same message on the heap twice
    again = broker.messaging.receive(NS, "q", 4, "peek-lock")
    assert bodies(again) == [b"0", b"2"]
    assert len({d.lock_token for d in again}) == 2
    assert [d.delivery_count for d in again] == [2, 2]


def test_a_refused_expiry_hands_the_other_candidates_back(
    broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.management.queue_create(NS, "q", {})
    broker.messaging.send(NS, "q", [Message(b"old", time_to_live_ms=1000)])
    clock.advance(500)
    broker.messaging.send(NS, "q", [Message(b"%d" % i) for i in range(4)])
    clock.advance(600)  # the first expired, the others live
    timers = broker.queue(NS, "q").timers
    real = timers.expire
    refusals = [StorageError("the disk is full")]

    def expire(p: object, seq: int) -> None:
        if refusals:
            raise refusals.pop()
        real(p, seq)  # type: ignore[arg-type]

    monkeypatch.setattr(timers, "expire", expire)
    with pytest.raises(StorageError):
        broker.messaging.receive(NS, "q", 5, "peek-lock")
    got = broker.messaging.receive(NS, "q", 5, "peek-lock")
    assert bodies(got) == [b"0", b"1", b"2", b"3"]
    assert [d.delivery_count for d in got] == [1, 1, 1, 1]
