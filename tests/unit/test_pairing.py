"""Paired namespaces on the broker with a fake clock (daemon/README.md §0.3, §19; sbctld.pairing,
sbctld.paired): backlog queues, the failover sender, pings, the syphon, fault propagation."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

import presenting
from conftest import Reopen
from sbctl.core.durations import MAX_TIMESPAN_MS
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessageSizeExceeded,
    MessagingEntityAlreadyExists,
    MessagingEntityDisabled,
    MessagingEntityNotFound,
    ServerBusy,
    ServiceCommunicationProblem,
)
from sbctl.core.limits import STANDARD_MESSAGE_BYTES
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import Message
from sbctld import paired as paired_module
from sbctld.broker import Broker
from sbctld.broker.messaging import Messaging
from sbctld.clock import FakeClock
from sbctld.pairing import (
    PATH_PROPERTY,
    SCHEDULED_PROPERTY,
    SESSION_ID_PROPERTY,
    TIME_TO_LIVE_PROPERTY,
    Pairing,
    divert_message,
    restore_message,
)

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker
reopen = presenting.reopen

P = "primary-ns"
S = "second-ns"


def backlog(i: int, primary: str = P) -> str:
    return f"{primary}/x-servicebus-transfer/{i}"


@pytest.fixture
def b(broker: Broker) -> Broker:
    """A primary with queue ``orders`` (and a session queue ``sessions``), a secondary."""
    broker.management.namespace_create(P)
    broker.management.namespace_create(S)
    broker.management.queue_create(P, "orders", {})
    broker.management.queue_create(P, "sessions", {"requires_session": True})
    broker.pairings.rng.seed(7)
    return broker


def pair(b: Broker, count: int = 3, failover: int = 1000, ping: int = 1000, syphon: bool = True):
    return b.pairings.pair(P, S, count, failover, ping, syphon)


def pairing(b: Broker) -> Pairing:
    return b.paired[P]


def status(b: Broker) -> dict[str, Any]:
    return b.pairings.status(P)


def pending(b: Broker) -> list[int | None]:
    return [q["pending"] for q in status(b)["backlog_queues"]]


def peek_all(b: Broker, ns: str, path: str) -> list[Message]:
    return [decode_message(d.payload) for d in b.messaging.peek(ns, path, 250, None)]


def backlog_messages(b: Broker, count: int = 3) -> list[Message]:
    return [m for i in range(count) for m in peek_all(b, S, backlog(i))]


def fail_over(b: Broker, clock: FakeClock, path: str = "orders", **message: Any) -> list[int]:
    """Fault the whole primary and send until ``path`` failed over (FailoverInterval 1 s)."""
    if not b.faults.namespace_down(P):
        b.housekeeping.fault_add(P)
    with pytest.raises(ServiceCommunicationProblem):
        b.messaging.send(P, path, [Message(b"first", **message)])
    clock.advance(1000)
    return b.messaging.send(P, path, [Message(b"diverted", **message)])


# ------------------------------------------------------------ pairing and backlog queues


def test_pair_creates_backlog_queues_with_spec_properties(b: Broker) -> None:
    result = pair(b, count=4)
    assert result["state"] == "Active"
    assert [q["name"] for q in result["backlog_queues"]] == [backlog(i) for i in range(4)]
    for i in range(4):
        q = b.management.queue_get(S, backlog(i))
        # daemon/README.md §0.3.1
        assert q["max_size_in_megabytes"] == 5120
        assert q["max_delivery_count"] == 2**31 - 1
        assert (
            q["default_message_time_to_live"]
            == b.management.queue_get(S, backlog(0))["default_message_time_to_live"]
        )
        assert b.queue(S, backlog(i)).config.default_message_time_to_live == MAX_TIMESPAN_MS
        assert b.queue(S, backlog(i)).config.auto_delete_on_idle == MAX_TIMESPAN_MS
        assert q["lock_duration"] == "PT1M"
        assert q["dead_lettering_on_message_expiration"] is True
        assert q["enable_batched_operations"] is True
        assert q["enable_partitioning"] is False
        assert q["requires_session"] is False


def test_existing_backlog_queues_are_used_as_they_are_and_extras_left_alone(b: Broker) -> None:
    b.management.queue_create(S, backlog(1), {"lock_duration": 30_000, "max_delivery_count": 3})
    b.management.queue_create(S, backlog(7), {})
    pair(b, count=3)
    assert b.management.queue_get(S, backlog(1))["lock_duration"] == "PT30S"
    assert b.management.queue_get(S, backlog(1))["max_delivery_count"] == 3
    assert b.management.queue_get(S, backlog(7))["name"] == backlog(7)
    assert [q["name"] for q in status(b)["backlog_queues"]] == [backlog(i) for i in range(3)]


def test_pair_checks_its_options(b: Broker) -> None:
    with pytest.raises(BadRequest, match="itself"):
        b.pairings.pair(P, P.upper(), 1, 0, 1000, False)
    with pytest.raises(BadRequest, match="backlog_queue_count"):
        b.pairings.pair(P, S, 0, 0, 1000, False)
    with pytest.raises(BadRequest, match="failover_interval"):
        b.pairings.pair(P, S, 1, 60 * 60_000 + 1, 1000, False)
    with pytest.raises(BadRequest, match="ping_primary_interval"):
        b.pairings.pair(P, S, 1, 0, 999, False)
    with pytest.raises(MessagingEntityNotFound):
        b.pairings.pair(P, "nowhere-ns", 1, 0, 1000, False)
    assert not b.paired
    pair(b)
    with pytest.raises(MessagingEntityAlreadyExists, match="unpair it first"):
        pair(b)
    with pytest.raises(MessagingEntityNotFound, match="not paired"):
        b.pairings.status(S)


def test_a_faulted_secondary_cannot_be_paired(b: Broker) -> None:
    b.housekeeping.fault_add(S)
    with pytest.raises(ServiceCommunicationProblem, match="secondary"):
        pair(b)
    assert not b.paired
    b.housekeeping.fault_clear(S)
    b.housekeeping.fault_add(P)  # a faulted primary is what pairing is for
    assert pair(b)["state"] == "Active"


def test_pairing_persists_across_restarts(b: Broker, clock: FakeClock, reopen: Reopen) -> None:
    pair(b, count=2, failover=0, ping=5000, syphon=False)
    b.housekeeping.fault_add(P)
    b.messaging.send(P, "orders", [Message(b"x")])
    before = status(b)
    b2 = reopen()
    after = b2.pairings.status(P)
    assert after["failover_interval"] == "PT0S"
    assert after["ping_primary_interval"] == "PT5S"
    assert after["enable_syphon"] is False
    assert after["backlog_queue_count"] == 2
    for counter in ("diverted", "failovers", "last_error"):
        assert after[counter] == before[counter]
    # Failover state is per messaging factory: a restarted daemon starts on the primary.
    assert after["state"] == "Active" and after["entities"] == []
    assert b2.messaging.send(P, "orders", [Message(b"x")])  # faults are gone with the restart


# ------------------------------------------------------------ the failover sender


def test_failover_waits_for_failover_interval(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=1000)
    b.housekeeping.fault_add(P)
    with pytest.raises(ServiceCommunicationProblem):
        b.messaging.send(P, "orders", [Message(b"1")])
    clock.advance(999)
    with pytest.raises(ServiceCommunicationProblem):  # daemon/README.md §0.3.2: not yet
        b.messaging.send(P, "orders", [Message(b"2")])
    assert status(b)["entities"][0]["state"] == "Failing"
    clock.advance(1)
    b.messaging.send(P, "orders", [Message(b"3")])
    assert status(b)["state"] == "FailedOver"
    assert status(b)["failovers"] == 1
    assert [m.body for m in backlog_messages(b)] == [b"3"]
    b.messaging.send(P, "orders", [Message(b"4")])  # no new attempt on the primary
    assert [m.body for m in backlog_messages(b)] == [b"3", b"4"]
    assert status(b)["diverted"] == 2


def test_a_successful_send_resets_the_timer(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=1000)
    b.management.queue_update(P, "orders", {"status": "SendDisabled"})  # counted, like a fault
    with pytest.raises(MessagingEntityDisabled):
        b.messaging.send(P, "orders", [Message(b"1")])
    clock.advance(600)
    b.management.queue_update(P, "orders", {"status": "Active"})
    b.messaging.send(P, "orders", [Message(b"2")])
    assert status(b)["entities"] == []
    b.management.queue_update(P, "orders", {"status": "SendDisabled"})
    clock.advance(600)
    with pytest.raises(MessagingEntityDisabled):  # the timer started again at this failure
        b.messaging.send(P, "orders", [Message(b"3")])
    clock.advance(600)
    with pytest.raises(MessagingEntityDisabled):
        b.messaging.send(P, "orders", [Message(b"4")])
    clock.advance(400)
    b.messaging.send(P, "orders", [Message(b"5")])
    assert status(b)["state"] == "FailedOver"


def test_failover_interval_zero_fails_over_on_the_first_failure(
    b: Broker, clock: FakeClock
) -> None:
    pair(b, failover=0)
    b.housekeeping.fault_add(P, "orders")
    b.messaging.send(P, "orders", [Message(b"x")])
    assert status(b)["state"] == "FailedOver"
    assert [m.body for m in backlog_messages(b)] == [b"x"]


def test_throttling_never_starts_failover(broker: Broker, clock: FakeClock) -> None:
    broker.management.namespace_create(P)
    broker.management.namespace_create(S)
    broker.management.queue_create(P, "orders", {})
    broker.pairings.pair(P, S, 1, 0, 1000, False)
    broker.management.namespace_update(P, credits_per_second=2)
    clock.advance(1000)  # a fresh credit period
    broker.messaging.send(P, "orders", [Message(b"1"), Message(b"2")])
    with pytest.raises(ServerBusy):
        broker.messaging.send(P, "orders", [Message(b"3")])
    assert broker.pairings.status(P)["entities"] == []
    assert broker.pairings.status(P)["diverted"] == 0


@pytest.mark.parametrize(
    ("path", "message", "error"),
    [
        ("nosuchqueue", Message(b"x"), MessagingEntityNotFound),
        ("orders", Message(b"x", time_to_live_ms=-5), BadRequest),
        ("orders/$deadletterqueue", Message(b"x"), InvalidOperation),
        ("sessions", Message(b"x"), InvalidOperation),
        ("orders", Message(b"x" * STANDARD_MESSAGE_BYTES), MessageSizeExceeded),
    ],
)
def test_the_callers_mistakes_do_not_count(
    b: Broker, path: str, message: Message, error: type[Exception]
) -> None:
    pair(b, failover=0)
    with pytest.raises(error):
        b.messaging.send(P, path, [message])
    assert status(b)["entities"] == []
    assert status(b)["diverted"] == 0


def test_the_callers_mistakes_fail_while_failed_over_too(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=0)
    b.housekeeping.fault_add(P)
    b.messaging.send(P, "orders", [Message(b"x")])
    b.messaging.send(P, "sessions", [Message(b"x", session_id="s")])
    with pytest.raises(InvalidOperation):  # daemon/README.md §9.3: the destination needs a session
        b.messaging.send(P, "sessions", [Message(b"y")])
    with pytest.raises(BadRequest):
        b.messaging.send(P, "orders", [Message(b"y", time_to_live_ms=0)])
    with pytest.raises(InvalidOperation):
        b.messaging.send(P, "orders/$deadletterqueue", [Message(b"y")])
    assert status(b)["diverted"] == 2


def test_diverted_messages_carry_their_properties_renamed(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=0)
    b.housekeeping.fault_add(P)
    when = clock.now + 3_600_000
    b.messaging.send(
        P,
        "sessions",
        [
            Message(
                b"body",
                message_id="m-1",
                session_id="s-1",
                time_to_live_ms=60_000,
                scheduled_enqueue_time_ms=when,
                application_properties={"k": 1, PATH_PROPERTY: "spoofed"},
            )
        ],
    )
    [m] = backlog_messages(b)
    assert m.session_id is None and m.time_to_live_ms is None
    assert m.scheduled_enqueue_time_ms is None  # active in the backlog queue at once
    assert m.message_id == "m-1" and m.body == b"body"
    assert m.application_properties == {
        "k": 1,
        SESSION_ID_PROPERTY: "s-1",
        TIME_TO_LIVE_PROPERTY: 60_000,
        SCHEDULED_PROPERTY: when,
        PATH_PROPERTY: "sessions",
    }


def test_divert_and_restore_are_inverse() -> None:
    original = Message(
        b"b",
        session_id="s",
        partition_key="s",
        time_to_live_ms=5,
        scheduled_enqueue_time_ms=9,
        application_properties={"a": "b"},
    )
    path, restored = restore_message(divert_message(original, "q"))
    assert (path, restored) == ("q", original)
    plain = Message(b"b")
    assert restore_message(divert_message(plain, "t")) == ("t", plain)
    with pytest.raises(ValueError, match="x-ms-path"):
        restore_message(plain)


def test_each_sender_keeps_its_random_backlog_queue(b: Broker, clock: FakeClock) -> None:
    pair(b, count=10, failover=0)
    b.housekeeping.fault_add(P)
    for _round in range(3):
        for sender in range(6):
            b.messaging.send(P, "orders", [Message(str(sender).encode())], sender=sender)
    where: dict[bytes, set[int]] = {}
    for i in range(10):
        for m in peek_all(b, S, backlog(i)):
            where.setdefault(m.body, set()).add(i)
    assert all(len(queues) == 1 for queues in where.values())  # one queue per sender
    assert len({q for queues in where.values() for q in queues}) > 1  # chosen at random


@pytest.mark.parametrize("how", ["disabled", "faulted", "deleted"])
def test_a_failing_backlog_queue_leaves_the_rotation(b: Broker, clock: FakeClock, how: str) -> None:
    pair(b, count=3, failover=0)
    b.housekeeping.fault_add(P)
    b.messaging.send(P, "orders", [Message(b"1")], sender="a")
    [first] = [i for i in range(3) if pending(b)[i]]
    if how == "disabled":
        b.management.queue_update(S, backlog(first), {"status": "Disabled"})
    elif how == "faulted":
        b.housekeeping.fault_add(S, backlog(first))
    else:
        b.management.queue_delete(S, backlog(first))
    b.messaging.send(P, "orders", [Message(b"2")], sender="a")
    b.messaging.send(P, "orders", [Message(b"3")], sender="b")
    st = status(b)
    assert [q["in_rotation"] for q in st["backlog_queues"]] == [i != first for i in range(3)]
    assert st["rotation_removals"] == 1
    others = [m.body for i in range(3) if i != first for m in peek_all(b, S, backlog(i))]
    assert sorted(others) == [b"2", b"3"]  # for every sender
    assert backlog(first) in st["last_error"]


def test_when_every_backlog_queue_fails_the_send_fails(b: Broker, clock: FakeClock) -> None:
    pair(b, count=2, failover=0)
    b.housekeeping.fault_add(P)
    b.housekeeping.fault_add(S, backlog(0))
    b.housekeeping.fault_add(S, backlog(1))
    with pytest.raises(ServiceCommunicationProblem, match="no backlog queue"):
        b.messaging.send(P, "orders", [Message(b"x")])
    # The rotation starts over for the next send, which succeeds once a queue is back.
    b.housekeeping.fault_clear(S)
    b.messaging.send(P, "orders", [Message(b"y")])
    assert [m.body for m in backlog_messages(b, 2)] == [b"y"]


def test_added_properties_can_push_a_message_over_the_size_limit(
    b: Broker, clock: FakeClock
) -> None:
    pair(b, failover=0)
    body = b"x" * (STANDARD_MESSAGE_BYTES - 200)
    b.messaging.send(P, "orders", [Message(body, session_id=None)])  # fits on the primary
    b.housekeeping.fault_add(P)
    path = "orders"
    with pytest.raises(MessageSizeExceeded, match="x-ms-path"):
        b.messaging.send(P, path, [Message(body + b"y" * 150, time_to_live_ms=60_000)])
    assert status(b)["rotation_removals"] == 0  # the message's fault, not the queue's
    b.messaging.send(P, path, [Message(b"small")])


def test_transactions_are_not_diverted(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=0)
    b.housekeeping.fault_add(P)
    with pytest.raises(ServiceCommunicationProblem):
        b.messaging.transact(P, "orders", [Message(b"t", message_id="m")], [])
    assert status(b)["entities"] == []


# ------------------------------------------------------------ pings (daemon/README.md §0.3.4)


def test_pings_every_interval_until_one_succeeds(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=1000, ping=2000, syphon=False)
    fail_over(b, clock)
    meter = b.namespace(P).meter
    used = meter.total["data"]
    clock.advance(1999)
    b.housekeeping.tick()
    assert status(b)["pings_sent"] == 0
    clock.advance(1)
    b.housekeeping.tick()
    assert status(b)["pings_sent"] == 1 and status(b)["pings_failed"] == 1
    assert meter.total["data"] == used + 1  # daemon/README.md §0.3.4: a ping costs like a send
    b.housekeeping.tick()
    assert status(b)["pings_sent"] == 1
    clock.advance(2000)
    b.housekeeping.tick()
    assert status(b)["pings_sent"] == 2
    b.housekeeping.fault_clear(P)
    clock.advance(2000)
    b.housekeeping.tick()
    st = status(b)
    assert (st["pings_sent"], st["pings_failed"], st["state"]) == (3, 2, "Active")
    assert meter.total["data"] == used + 3
    b.messaging.send(P, "orders", [Message(b"back")])  # to the primary again
    assert [m.body for m in peek_all(b, P, "orders")] == [b"back"]


def test_pings_are_never_received_nor_peeked(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=0, ping=1000, syphon=False)
    b.management.queue_update(P, "orders", {"status": "SendDisabled"})
    b.messaging.send(P, "orders", [Message(b"x")])
    for _ in range(3):
        clock.advance(1000)
        b.housekeeping.tick()
    b.management.queue_update(P, "orders", {"status": "Active"})
    clock.advance(1000)
    b.housekeeping.tick()
    assert status(b)["pings_sent"] == 4 and status(b)["state"] == "Active"
    assert b.messaging.peek(P, "orders", 10, None) == []
    assert b.messaging.receive(P, "orders", 10, "peek-lock") == []
    assert b.management.queue_get(P, "orders")["total_message_count"] == 0


def test_a_ping_to_an_unavailable_partition_fails(broker: Broker, clock: FakeClock) -> None:
    broker.management.namespace_create(P)
    broker.management.namespace_create(S)
    broker.management.queue_create(P, "orders", {"enable_partitioning": True})
    broker.pairings.pair(P, S, 1, 0, 1000, False)
    broker.housekeeping.fault_add(P, "orders")  # every partition
    broker.messaging.send(P, "orders", [Message(b"x")])
    broker.housekeeping.fault_clear(P)
    broker.housekeeping.fault_add(P, "orders", list(range(16)))
    clock.advance(1000)
    broker.housekeeping.tick()
    assert broker.pairings.status(P)["pings_failed"] == 1
    broker.housekeeping.fault_clear(P)
    broker.housekeeping.fault_add(P, "orders", [3])  # a random SessionId almost surely avoids it
    for _ in range(5):
        clock.advance(1000)
        broker.housekeeping.tick()
    assert broker.pairings.status(P)["state"] == "Active"


def test_a_deleted_entity_stops_failing_over(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=0, syphon=False)
    b.housekeeping.fault_add(P, "orders")
    b.messaging.send(P, "orders", [Message(b"x")])
    b.housekeeping.fault_clear(P)
    b.management.queue_delete(P, "orders")
    clock.advance(1000)
    b.housekeeping.tick()
    assert status(b)["entities"] == []
    with pytest.raises(MessagingEntityNotFound):
        b.messaging.send(P, "orders", [Message(b"y")])


# ------------------------------------------------------------ the syphon (daemon/README.md §0.3.5)


def test_syphon_restores_every_message_exactly_once(b: Broker, clock: FakeClock) -> None:
    b.management.queue_create(P, "other", {})
    pair(b, count=3, failover=1000, ping=1000)
    when = clock.now + 3_600_000
    b.housekeeping.fault_add(P)
    with pytest.raises(ServiceCommunicationProblem):
        b.messaging.send(P, "orders", [Message(b"o0")])
    with pytest.raises(ServiceCommunicationProblem):  # failover is per entity
        b.messaging.send(P, "sessions", [Message(b"s0", session_id="s-1")])
    clock.advance(1000)
    for k in range(20):
        b.messaging.send(P, "orders", [Message(f"o{k}".encode(), message_id=f"o{k}")], sender=k % 4)
    b.messaging.send(P, "sessions", [Message(b"s", session_id="s-1", time_to_live_ms=90_000)])
    b.messaging.send(P, "orders", [Message(b"later", scheduled_enqueue_time_ms=when)])
    assert sum(n or 0 for n in pending(b)) == 22
    b.housekeeping.tick()  # failed over: the syphon waits for the primary
    assert status(b)["moved"] == 0
    b.housekeeping.fault_clear(P)
    clock.advance(1000)
    b.housekeeping.tick()  # the ping succeeds, then the syphon moves
    st = status(b)
    assert st["state"] == "Active" and st["moved"] == 22 and st["pending"] == 0
    got = peek_all(b, P, "orders")
    assert sorted(m.body for m in got if m.message_id) == sorted(
        f"o{k}".encode() for k in range(20)
    )
    assert all(not set(m.application_properties or {}) & {PATH_PROPERTY} for m in got)
    assert b.management.queue_get(P, "orders")["scheduled_message_count"] == 1
    [later] = [m for m in got if m.body == b"later"]
    assert later.scheduled_enqueue_time_ms == when and later.application_properties is None
    [token] = [b.messaging.session_accept(P, "sessions", "s-1")["session_lock_token"]]
    [d] = b.messaging.receive(P, "sessions", 10, "peek-lock", token)
    restored = decode_message(d.payload)
    assert restored.session_id == "s-1" and restored.time_to_live_ms == 90_000
    assert d.expires_at_ms == d.enqueued_time_ms + 90_000
    for _ in range(5):  # nothing moves twice
        clock.advance(1000)
        b.housekeeping.tick()
    assert status(b)["moved"] == 22
    assert b.management.queue_get(P, "orders")["total_message_count"] == 21


def test_syphon_is_off_unless_enabled(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=0, syphon=False)
    b.housekeeping.fault_add(P)
    b.messaging.send(P, "orders", [Message(b"x")])
    b.housekeeping.fault_clear(P)
    for _ in range(3):
        clock.advance(1000)
        b.housekeeping.tick()
    assert status(b)["state"] == "Active"
    assert status(b)["moved"] == 0 and status(b)["pending"] == 1


def test_syphon_charges_two_of_the_four_operations(broker: Broker, clock: FakeClock) -> None:
    """daemon/README.md §0.3.5: send to backlog (the diverted send, secondary), receive from backlog
    (syphon, secondary), send to primary (syphon, primary), receive from primary (the
    application's receive, primary): each charged once, where it happens."""
    broker.management.namespace_create(P, credits_per_second=1000)
    broker.management.namespace_create(S, credits_per_second=1000)
    broker.management.queue_create(P, "orders", {})
    broker.pairings.pair(P, S, 1, 0, 1000, True)
    clock.advance(60_000)
    broker.housekeeping.tick()  # the syphon's idle long-poll receive, charged once per 15 minutes
    p_meter, s_meter = broker.namespace(P).meter, broker.namespace(S).meter
    s_used = s_meter.total["data"]
    broker.housekeeping.fault_add(P)
    broker.messaging.send(P, "orders", [Message(b"a"), Message(b"b")])
    assert s_meter.total["data"] == s_used + 2  # sent to the backlog queue
    p_used = p_meter.total["data"]  # (the attempt on the primary was charged, as unpaired)
    broker.housekeeping.fault_clear(P)
    clock.advance(1000)
    broker.housekeeping.tick()  # ping (1 on the primary), then the syphon
    assert broker.pairings.status(P)["moved"] == 2
    assert s_meter.total["data"] == s_used + 4  # ...received from it
    assert p_meter.total["data"] == p_used + 1 + 2  # the ping, and the sends to the primary
    broker.messaging.receive(P, "orders", 10, "receive-and-delete")
    assert p_meter.total["data"] == p_used + 1 + 4


def test_syphon_leaves_failed_over_entities_and_moves_the_others(
    b: Broker, clock: FakeClock
) -> None:
    b.management.queue_create(P, "other", {})
    pair(b, count=1, failover=0, ping=60_000)
    b.housekeeping.fault_add(P, "orders")
    b.housekeeping.fault_add(P, "other")
    b.messaging.send(P, "orders", [Message(b"o")])
    b.messaging.send(P, "other", [Message(b"x")])
    b.housekeeping.fault_clear(P)
    b.housekeeping.fault_add(P, "orders")
    b.paired[P].back_to_primary("other", clock.now)  # as if its ping had succeeded
    clock.advance(50)
    b.housekeeping.tick()
    assert [m.body for m in peek_all(b, P, "other")] == [b"x"]
    assert [m.body for m in backlog_messages(b, 1)] == [b"o"]


def test_syphon_waits_while_the_destination_fails(b: Broker, clock: FakeClock) -> None:
    pair(b, count=1, failover=0, ping=60_000)
    b.housekeeping.fault_add(P, "orders")
    b.messaging.send(P, "orders", [Message(b"o")])
    b.paired[P].back_to_primary("orders", clock.now)  # not reachable yet, all the same
    clock.advance(50)
    b.housekeeping.tick()
    st = status(b)
    assert st["moved"] == 0 and st["pending"] == 1 and "syphon to orders" in st["last_error"]
    b.housekeeping.fault_clear(P)
    clock.advance(1000)
    b.housekeeping.tick()
    assert status(b)["moved"] == 1


def test_syphon_dead_letters_what_can_never_arrive(b: Broker, clock: FakeClock) -> None:
    b.management.queue_create(P, "doomed", {})
    pair(b, count=1, failover=0, ping=1000)
    b.housekeeping.fault_add(P)
    b.messaging.send(P, "doomed", [Message(b"d")])
    # no x-ms-path: no failover sender wrote it
    b.messaging.send(S, backlog(0), [Message(b"stray")])
    b.housekeeping.fault_clear(P)
    b.management.queue_delete(P, "doomed")
    clock.advance(1000)
    b.housekeeping.tick()
    st = status(b)
    assert st["dead_lettered"] == 2 and st["pending"] == 0
    dlq = b.messaging.peek(S, backlog(0) + "/$deadletterqueue", 10, None)
    reasons = sorted(d.changes["DeadLetterReason"] for d in dlq if d.changes)
    assert reasons == ["InvalidBacklogMessage", "MessagingEntityNotFound"]


def test_syphon_moves_to_topics(b: Broker, clock: FakeClock) -> None:
    b.management.topic_create(P, "events", {})
    b.management.subscription_create(P, "events", "audit", {})
    pair(b, count=1, failover=0, ping=1000)
    b.housekeeping.fault_add(P, "events")
    b.messaging.send(P, "events", [Message(b"e", subject="s")])
    assert status(b)["entities"][0]["entity"] == "events"
    b.housekeeping.fault_clear(P)
    clock.advance(1000)
    b.housekeeping.tick()
    [d] = b.messaging.receive(P, "events/subscriptions/audit", 10, "receive-and-delete")
    m = decode_message(d.payload)
    assert (m.body, m.subject, m.application_properties) == (b"e", "s", None)


def test_syphon_work_per_tick_is_bounded(
    b: Broker, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(paired_module, "SYPHON_BATCH", 7)
    pair(b, count=2, failover=0, ping=1000)
    b.housekeeping.fault_add(P)
    for k in range(20):
        b.messaging.send(P, "orders", [Message(str(k).encode())], sender=k)
    b.housekeeping.fault_clear(P)
    clock.advance(1000)
    moved = []
    for _ in range(4):
        b.housekeeping.tick()
        moved.append(status(b)["moved"])
        clock.advance(50)
    assert moved == [7, 14, 20, 20]


@pytest.mark.parametrize("crash_after_send", [True, False])
def test_syphon_is_exactly_once_across_a_crash(
    b: Broker,
    clock: FakeClock,
    reopen: Reopen,
    monkeypatch: pytest.MonkeyPatch,
    crash_after_send: bool,
) -> None:
    """The daemon dies between the two writes of a move (or before the first): after the
    restart the message is in the primary exactly once and gone from the backlog."""
    pair(b, count=1, failover=0, ping=1000)
    b.housekeeping.fault_add(P)
    b.messaging.send(P, "orders", [Message(b"one")])
    b.messaging.send(P, "orders", [Message(b"two")])
    b.housekeeping.fault_clear(P)

    class Crash(Exception):
        pass

    real_send = Messaging.send
    calls = []

    def dying_send(self: Messaging, namespace: str, *args: Any, **kw: Any) -> list[int]:
        if namespace == P and kw.get("direct"):
            calls.append(1)
            if len(calls) == 2:  # the second move
                if crash_after_send:
                    real_send(self, namespace, *args, **kw)
                raise Crash
        return real_send(self, namespace, *args, **kw)

    monkeypatch.setattr(Messaging, "send", dying_send)
    clock.advance(1000)
    with pytest.raises(Crash):
        b.housekeeping.tick()
    monkeypatch.setattr(Messaging, "send", real_send)
    b2 = reopen(crash=True)
    clock.advance(1000)
    b2.housekeeping.tick()
    st = b2.pairings.status(P)
    assert st["pending"] == 0 and st["moved"] >= 1
    bodies = sorted(
        decode_message(d.payload).body for d in b2.messaging.peek(P, "orders", 10, None)
    )
    assert bodies == [b"one", b"two"]


# ------------------------------------------------------------ close/fault (daemon/README.md §0.3.6)


def test_deleting_the_secondary_faults_the_pairing(b: Broker, clock: FakeClock) -> None:
    pair(b)
    b.management.namespace_delete(S)
    st = status(b)
    assert st["state"] == "Faulted"
    assert "secondary namespace 'second-ns' was deleted" in st["fault_reason"]
    with pytest.raises(ServiceCommunicationProblem, match="faulted"):
        b.messaging.send(P, "orders", [Message(b"x")])
    assert [q["status"] for q in st["backlog_queues"]] == ["Missing"] * 3
    b.pairings.unpair(P)
    b.messaging.send(P, "orders", [Message(b"x")])


def test_a_faulted_secondary_faults_the_pairing_within_a_tick(
    b: Broker, clock: FakeClock, reopen: Reopen
) -> None:
    pair(b)
    b.housekeeping.fault_add(S)
    clock.advance(50)
    b.housekeeping.tick()
    st = status(b)
    assert st["state"] == "Faulted" and "injected fault" in st["fault_reason"]
    b.housekeeping.fault_clear(S)  # a faulted messaging factory stays faulted
    b.housekeeping.tick()
    assert status(b)["state"] == "Faulted"
    assert reopen().pairings.status(P)["state"] == "Faulted"


def test_a_faulted_primary_keeps_the_pairing(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=0)
    b.housekeeping.fault_add(P)
    b.messaging.send(P, "orders", [Message(b"x")])
    for _ in range(3):
        clock.advance(1000)
        b.housekeeping.tick()
    assert status(b)["state"] == "FailedOver"


def test_deleting_the_primary_deletes_its_pairing(b: Broker) -> None:
    pair(b)
    b.management.namespace_delete(P)
    assert not b.paired
    b.management.namespace_create(P)
    b.management.queue_create(P, "orders", {})
    b.messaging.send(P, "orders", [Message(b"x")])


def test_unpair_keeps_the_backlog(b: Broker, clock: FakeClock) -> None:
    pair(b, failover=0, syphon=False)
    b.housekeeping.fault_add(P)
    b.messaging.send(P, "orders", [Message(b"x")])
    result = b.pairings.unpair(P)
    assert result == {"unpaired": P, "secondary": S, "pending": 1}
    assert not b.paired
    with pytest.raises(ServiceCommunicationProblem):
        b.messaging.send(P, "orders", [Message(b"y")])
    with pytest.raises(MessagingEntityNotFound):
        b.pairings.status(P)
    assert len(backlog_messages(b)) == 1
    b.housekeeping.fault_clear(P)
    pair(b, failover=0, syphon=True)  # pairing again with the syphon brings it back
    clock.advance(1000)
    b.housekeeping.tick()
    assert [m.body for m in peek_all(b, P, "orders")] == [b"x"]


def test_unpaired_namespaces_never_reach_the_pairing(
    b: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    pair(b)

    def boom(*_args: Any, **_kw: Any) -> None:
        raise AssertionError("paired send for an unpaired namespace")

    monkeypatch.setattr(b.raw.pairings, "send", boom)
    b.management.queue_create(S, "plain", {})
    b.messaging.send(S, "plain", [Message(b"x")])


def test_status_record_is_plain_data(b: Broker) -> None:
    pair(b)
    msgspec.json.encode(status(b))


def test_pairing_charges_the_secondary_one_management_operation_per_queue(
    b: Broker,
) -> None:
    b.management.queue_create(S, backlog(0), {})
    meter = b.namespace(S).meter
    used = meter.total["management"]
    pair(b, count=3)  # one read, two creates
    assert meter.total["management"] == used + 30
    assert b.namespace(P).meter.total["management"] == 20  # its own two queue creates
