"""A receive hands out its batch in one pass and still hands each message out once: a
message handed back twice is delivered once, and when the disk refuses an expired
message's entry the other candidates are handed back, received by the next receive
(daemon/README.md §3.4, §6.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from sbctl.core.message_form import decode
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE as NS
from sbctld.broker import Broker
from sbctld.clock import FakeClock
from sbctld.storage.space import StorageError


def bodies(got: list) -> list[bytes]:
    return [decode(d.payload).body for d in got]


def refuse_expiries(monkeypatch: pytest.MonkeyPatch, timers: Any, which: set[int]) -> None:
    """The disk refuses the expiries ``timers`` journals, for the calls numbered ``which``
    (1: the first)."""
    real = timers.expire
    calls: list[int] = []

    def expire(p: object, seq: int) -> None:
        calls.append(seq)
        if len(calls) in which:
            raise StorageError("the disk is full")
        real(p, seq)

    monkeypatch.setattr(timers, "expire", expire)


def refuse_journal(monkeypatch: pytest.MonkeyPatch, log: Any) -> Callable[[], None]:
    """The disk refuses ``log``'s journal writes until the returned call."""
    real = log.record

    def record(journal: list) -> None:
        raise StorageError("the disk is full")

    monkeypatch.setattr(log, "record", record)
    return lambda: monkeypatch.setattr(log, "record", real)


def a_and_b_apart(
    broker: Broker, bodies: bytes = b"ab", ttls: dict[bytes, int] | None = None
) -> tuple[Any, ...]:
    """A partitioned queue "q" holding one message a partition, bodies ``a``, ``b``, ...
    (with ``ttls`` in ms for some): the queue and each partition's id."""
    broker.management.queue_create(NS, "q", {"enable_partitioning": True})
    queue = broker.queue(NS, "q")
    keys: dict[int, str] = {}
    for i in range(400):
        keys.setdefault(partition_for_key(f"k{i}", len(queue.state.partitions)), f"k{i}")
    placed = list(keys.items())[: len(bodies)]
    for body, (_pid, key) in zip(bodies, placed, strict=True):
        one = bytes((body,))
        ttl = (ttls or {}).get(one)
        broker.messaging.send(NS, "q", [Message(one, partition_key=key, time_to_live_ms=ttl)])
    return (queue, *(pid for pid, _key in placed))


def deferred(broker: Broker) -> dict[bytes, int]:
    """Defer every message of "q"; their sequence numbers by body."""
    got = broker.messaging.receive(NS, "q", 10, "peek-lock")
    broker.messaging.settle(NS, "q", "defer", [d.lock_token for d in got])
    return {decode(d.payload).body: d.sequence_number for d in got}


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
    refuse_expiries(monkeypatch, broker.queue(NS, "q").timers, {1})
    with pytest.raises(StorageError):
        broker.messaging.receive(NS, "q", 5, "peek-lock")
    got = broker.messaging.receive(NS, "q", 5, "peek-lock")
    assert bodies(got) == [b"0", b"1", b"2", b"3"]
    assert [d.delivery_count for d in got] == [1, 1, 1, 1]


def test_a_refusal_in_a_later_pass_hands_back_what_earlier_passes_locked(
    broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.management.queue_create(NS, "q", {})
    send = broker.messaging.send
    send(NS, "q", [Message(b"old1", time_to_live_ms=1000)])
    send(NS, "q", [Message(b"live0")])
    send(NS, "q", [Message(b"old2", time_to_live_ms=1000)])
    send(NS, "q", [Message(b"live1")])
    clock.advance(1_500)  # the two old ones expired, the live ones not
    # The second expiry is the second pass's: live0 is locked by then.
    refuse_expiries(monkeypatch, broker.queue(NS, "q").timers, {2})
    with pytest.raises(StorageError):
        broker.messaging.receive(NS, "q", 2, "peek-lock")
    got = broker.messaging.receive(NS, "q", 5, "peek-lock")
    assert bodies(got) == [b"live0", b"live1"]
    assert [d.delivery_count for d in got] == [1, 1]


@pytest.mark.parametrize("mode", ["receive-and-delete", "peek-lock"])
def test_a_partition_refusing_its_journal_leaves_the_others_answer(
    broker: Broker, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, p1, p2 = a_and_b_apart(broker)
    allow = refuse_journal(monkeypatch, queue.state.partitions[p2].log)
    queue.state.rr_receive = p1  # the receive asks p1 first, then p2 (the one refusing)
    got = broker.messaging.receive(NS, "q", 10, mode)
    assert bodies(got) == [b"a"]
    allow()
    queue.state.rr_receive = p2
    again = broker.messaging.receive(NS, "q", 10, mode)
    assert bodies(again) == [b"b"]
    assert again[0].delivery_count == 1
    if mode == "receive-and-delete":
        assert broker.messaging.peek(NS, "q", 10, None) == []


def test_a_session_receive_refused_keeps_its_messages_in_the_session(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.management.queue_create(NS, "q", {"requires_session": True})
    broker.messaging.send(NS, "q", [Message(b"s%d" % i, session_id="s") for i in range(2)])
    lock = broker.messaging.session_accept(NS, "q", "s")
    allow = refuse_journal(monkeypatch, broker.queue(NS, "q").state.partitions[0].log)
    for mode in ("receive-and-delete", "peek-lock"):
        with pytest.raises(StorageError):
            broker.messaging.receive(NS, "q", 2, mode, lock.session_lock_token)
    allow()
    got = broker.messaging.receive(NS, "q", 2, "receive-and-delete", lock.session_lock_token)
    assert bodies(got) == [b"s0", b"s1"]


@pytest.mark.parametrize("mode", ["receive-and-delete", "peek-lock"])
def test_a_deferred_receive_keeps_what_was_journaled_before_a_refusal(
    broker: Broker, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, _p1, p2 = a_and_b_apart(broker)
    seqs = deferred(broker)
    allow = refuse_journal(monkeypatch, queue.state.partitions[p2].log)
    first = broker.messaging.receive_deferred(NS, "q", [seqs[b"a"], seqs[b"b"]], mode)
    assert bodies(first) == [b"a"]
    with pytest.raises(StorageError):  # (none journaled: the error itself)
        broker.messaging.receive_deferred(NS, "q", [seqs[b"b"]], mode)
    allow()
    again = broker.messaging.receive_deferred(NS, "q", [seqs[b"b"]], mode)
    assert bodies(again) == [b"b"]
    if mode == "receive-and-delete":
        assert broker.messaging.peek(NS, "q", 10, None) == []


def test_a_refused_expiry_in_a_session_is_tried_again(
    broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One expired message expires its whole session (daemon/README.md §6.4): when the disk
    refuses that, the next receive meets the expired message again, not the one after it."""
    broker.management.queue_create(NS, "q", {"requires_session": True})
    broker.messaging.send(NS, "q", [Message(b"old", session_id="s", time_to_live_ms=1000)])
    broker.messaging.send(NS, "q", [Message(b"new", session_id="s")])
    clock.advance(1_500)
    lock = broker.messaging.session_accept(NS, "q", "s")
    refuse_expiries(monkeypatch, broker.queue(NS, "q").timers, {1})
    with pytest.raises(StorageError):
        broker.messaging.receive(NS, "q", 2, "peek-lock", lock.session_lock_token)
    assert broker.messaging.receive(NS, "q", 2, "peek-lock", lock.session_lock_token) == []


def test_the_partitions_after_a_refusing_one_hand_theirs_back(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, _pa, pb, _pc = a_and_b_apart(broker, b"abc")
    seqs = deferred(broker)
    allow = refuse_journal(monkeypatch, queue.state.partitions[pb].log)
    got = broker.messaging.receive_deferred(
        NS, "q", [seqs[b"a"], seqs[b"b"], seqs[b"c"]], "peek-lock"
    )
    assert bodies(got) == [b"a"]
    allow()
    assert bodies(
        broker.messaging.receive_deferred(NS, "q", [seqs[b"c"], seqs[b"b"]], "peek-lock")
    ) == [b"c", b"b"]


def test_a_refused_expiry_in_a_deferred_receive_hands_back_every_delivery(
    broker: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, *_ = a_and_b_apart(broker, b"ab", {b"b": 1000})
    seqs = deferred(broker)
    clock.advance(1_500)  # b expired, a not
    refuse_expiries(monkeypatch, queue.timers, {1})
    with pytest.raises(StorageError):
        broker.messaging.receive_deferred(NS, "q", [seqs[b"a"], seqs[b"b"]], "peek-lock")
    assert bodies(broker.messaging.receive_deferred(NS, "q", [seqs[b"a"]], "peek-lock")) == [b"a"]
