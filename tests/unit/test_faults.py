"""Injected store faults on the broker, with a fake clock (nothing sleeps).

daemon/README.md §0.1.1 (one store down does not take the entity down), §0.1.5 (keyless sends go
elsewhere, keyed ones fail), §0.1.6-7 (receive and peek serve the available partitions),
§0.1.10 (management needs every partition; show aggregates and reads Limited) and §16.2
(ServiceCommunicationProblem is transient), on a 16-partition queue, a partitioned topic,
plain entities and whole namespaces. Data held by a store that was down is untouched and
comes back when the fault is cleared.
"""

from __future__ import annotations

from typing import Any

import pytest

import presenting
from conftest import Reopen
from sbctl.core.delivered import Delivered
from sbctl.core.errors import (
    BadRequest,
    MessagingEntityNotFound,
    ServiceCommunicationProblem,
)
from sbctl.core.message_form import decode as decode_message
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker
reopen = presenting.reopen

NS = DEFAULT_NAMESPACE
P = 16
LOCK_MS = 60_000


def key_for(pid: int, n: int = P, prefix: str = "k") -> str:
    """A partition key that lands on partition ``pid`` (daemon/README.md §0.4.3)."""
    i = 0
    while partition_for_key(f"{prefix}{i}", n) != pid:
        i += 1
    return f"{prefix}{i}"


def queue(b: Broker, name: str = "q", partitioned: bool = True, **options: Any) -> None:
    b.management.queue_create(NS, name, {"enable_partitioning": partitioned, **options})


def send(b: Broker, *messages: Message, path: str = "q", ns: str = NS) -> list[int]:
    return b.messaging.send(ns, path, list(messages))


def receive_all(b: Broker, path: str = "q", ns: str = NS) -> list[Delivered]:
    """Receive and delete until an empty answer."""
    out: list[Delivered] = []
    while got := b.messaging.receive(ns, path, 1000, "receive-and-delete"):
        out += got
    return out


def ids(ds: list[Delivered]) -> list[str | None]:
    return [decode_message(d.payload).message_id for d in ds]


def down(b: Broker, entity: str | None = "q", *partitions: int, ns: str = NS) -> str:
    fault: dict[str, Any] = b.housekeeping.fault_add(ns, entity, list(partitions))
    return str(fault["id"])


# ===================================================================== sending (daemon/README.md
# §0.1.5)


def test_keyless_sends_skip_unavailable_partitions(broker: Broker) -> None:
    queue(broker)
    down(broker, "q", 3)
    seqs = [s for i in range(48) for s in send(broker, Message(f"m{i}".encode()))]
    assert len(seqs) == 48 and 3 not in {s >> 48 for s in seqs}
    eight = [0, 2, 4, 6, 8, 10, 12, 14]
    down(broker, "q", *eight)
    batch = send(broker, *(Message(b"b") for _ in range(100)))  # one request, many partitions
    assert len(batch) == 100
    assert not {s >> 48 for s in batch} & {3, *eight}


def test_acceptance_no_message_lost_or_duplicated(broker: Broker) -> None:
    """Keyless sends with one, then eight partitions down all succeed; once the faults
    clear, exactly the messages sent come back, once each."""
    queue(broker)
    sent = 0
    down(broker, "q", 7)
    for i in range(300):
        send(broker, Message(b"x", message_id=f"m{sent + i}"))
    sent += 300
    down(broker, "q", 0, 1, 2, 3, 4, 5, 6)
    for i in range(0, 500, 50):
        send(broker, *(Message(b"y", message_id=f"m{sent + i + k}") for k in range(50)))
    sent += 500
    cleared = broker.housekeeping.fault_clear(NS)["cleared"]
    assert len(cleared) == 2
    got = ids(receive_all(broker))
    assert len(got) == sent
    assert set(got) == {f"m{i}" for i in range(sent)}


def test_keyed_send_to_an_unavailable_partition_fails(broker: Broker) -> None:
    queue(broker, requires_duplicate_detection=True)
    fid = down(broker, "q", 5)
    for message in (
        Message(b"pk", partition_key=key_for(5)),
        Message(b"mid", message_id=key_for(5)),  # MessageId is the key with dedup (§0.1.4)
    ):
        with pytest.raises(ServiceCommunicationProblem) as err:
            send(broker, message)
        assert err.value.transient
        assert "partition 5 of queue 'q'" in err.value.message and fid in err.value.message
    # The whole batch is refused when one message cannot be stored: nothing of it is.
    with pytest.raises(ServiceCommunicationProblem):
        send(
            broker,
            Message(b"ok", partition_key=key_for(1)),
            Message(b"no", partition_key=key_for(5)),
        )
    assert broker.management.queue_get(NS, "q")["active_message_count"] == 0
    assert send(broker, Message(b"ok", partition_key=key_for(1)))[0] >> 48 == 1


def test_session_send_to_an_unavailable_partition_fails(broker: Broker) -> None:
    queue(broker, requires_session=True)
    down(broker, "q", 9)
    with pytest.raises(ServiceCommunicationProblem):
        send(broker, Message(b"s", session_id=key_for(9)))
    send(broker, Message(b"s", session_id=key_for(8)))


def test_every_partition_down_fails_every_send(broker: Broker) -> None:
    queue(broker)
    fid = down(broker, "q")
    with pytest.raises(ServiceCommunicationProblem, match="every partition of queue 'q'") as err:
        send(broker, Message(b"x"))
    assert fid in err.value.message


def test_a_transaction_on_an_unavailable_partition_fails_whole(broker: Broker) -> None:
    queue(broker)
    send(broker, Message(b"held", partition_key=key_for(4)))
    (held,) = broker.messaging.receive(NS, "q", 1, "peek-lock")
    down(broker, "q", 4)
    assert held.lock_token is not None
    with pytest.raises(ServiceCommunicationProblem):
        broker.messaging.transact(
            NS,
            "q",
            [Message(b"t", partition_key=key_for(4))],
            [("complete", held.lock_token, None, None, None)],
        )
    broker.housekeeping.fault_clear(NS)
    # still locked, not settled
    assert broker.management.queue_get(NS, "q")["active_message_count"] == 1


# ===================================================================== receiving (daemon/README.md
# §0.1.6-7)


def test_receive_and_peek_serve_the_available_partitions(broker: Broker) -> None:
    queue(broker)
    a = send(broker, Message(b"a", partition_key=key_for(0)))[0]
    b = send(broker, Message(b"b", partition_key=key_for(5)))[0]
    down(broker, "q", 5)
    peeked = broker.messaging.peek(NS, "q", 10, None)
    assert [d.sequence_number for d in peeked] == [a]
    with pytest.raises(ServiceCommunicationProblem):
        broker.messaging.peek(NS, "q", 1, b)  # from a sequence number of the down partition
    assert [
        d.sequence_number for d in broker.messaging.receive(NS, "q", 10, "receive-and-delete")
    ] == [a]
    assert broker.messaging.receive(NS, "q", 10, "receive-and-delete") == []
    broker.housekeeping.fault_clear(NS)  # partition 5 is back, with what it held
    assert [
        d.sequence_number for d in broker.messaging.receive(NS, "q", 10, "receive-and-delete")
    ] == [b]


def test_settling_on_an_unavailable_partition_fails_all_or_nothing(broker: Broker) -> None:
    queue(broker)
    send(broker, Message(b"a", partition_key=key_for(0)), Message(b"b", partition_key=key_for(5)))
    got = broker.messaging.receive(NS, "q", 10, "peek-lock")
    by_pid = {d.sequence_number >> 48: d.lock_token for d in got}
    assert set(by_pid) == {0, 5}
    down(broker, "q", 5)
    with pytest.raises(ServiceCommunicationProblem, match="partition 5"):
        broker.messaging.settle(NS, "q", "complete", [by_pid[0], by_pid[5]])  # type: ignore[list-item]
    for op in ("abandon", "defer", "dead-letter", "renew-lock"):
        with pytest.raises(ServiceCommunicationProblem):
            broker.messaging.settle(NS, "q", op, [by_pid[5]])  # type: ignore[list-item]
    # Nothing was settled: partition 0's lock still works, alone.
    assert broker.messaging.settle(NS, "q", "complete", [by_pid[0]])[0]["ok"]  # type: ignore[list-item]
    broker.housekeeping.fault_clear(NS)
    assert broker.messaging.settle(NS, "q", "complete", [by_pid[5]])[0]["ok"]  # type: ignore[list-item]
    assert broker.management.queue_get(NS, "q")["total_message_count"] == 0


def test_deferred_and_scheduled_by_sequence_number(broker: Broker, clock: FakeClock) -> None:
    queue(broker)
    send(broker, Message(b"d", partition_key=key_for(2)))
    (d,) = broker.messaging.receive(NS, "q", 1, "peek-lock")
    broker.messaging.settle(NS, "q", "defer", [d.lock_token])  # type: ignore[list-item]
    later = clock.now + 3_600_000
    (s,) = send(broker, Message(b"s", partition_key=key_for(2), scheduled_enqueue_time_ms=later))
    down(broker, "q", 2)
    with pytest.raises(ServiceCommunicationProblem):
        broker.messaging.receive_deferred(NS, "q", [d.sequence_number], "peek-lock")
    with pytest.raises(ServiceCommunicationProblem):
        broker.messaging.cancel_scheduled(NS, "q", [s])
    broker.housekeeping.fault_clear(NS)
    assert broker.messaging.cancel_scheduled(NS, "q", [s]) == 1
    assert (
        len(broker.messaging.receive_deferred(NS, "q", [d.sequence_number], "receive-and-delete"))
        == 1
    )


def test_timers_wait_for_the_store(broker: Broker, clock: FakeClock) -> None:
    """Lock expiry and scheduled enqueue do not write to a store that is down; they run
    once it is back."""
    queue(broker, lock_duration=5_000)
    send(broker, Message(b"locked", partition_key=key_for(6)))
    broker.messaging.receive(NS, "q", 1, "peek-lock")
    send(
        broker,
        Message(b"later", partition_key=key_for(6), scheduled_enqueue_time_ms=clock.now + 1000),
    )
    down(broker, "q", 6)
    clock.advance(10_000)
    broker.housekeeping.tick()
    assert broker.messaging.receive(NS, "q", 10, "receive-and-delete") == []
    broker.housekeeping.fault_clear(NS)
    broker.housekeeping.tick()
    got = broker.messaging.receive(NS, "q", 10, "receive-and-delete")
    assert sorted(decode_message(d.payload).body for d in got) == [b"later", b"locked"]


def test_sessions_on_an_unavailable_partition(broker: Broker) -> None:
    queue(broker, requires_session=True)
    s_up, s_down = key_for(1, prefix="s"), key_for(11, prefix="s")
    send(broker, Message(b"1", session_id=s_up), Message(b"2", session_id=s_down))
    held = broker.messaging.session_accept(NS, "q", s_down)
    down(broker, "q", 11)
    with pytest.raises(ServiceCommunicationProblem):
        broker.messaging.session_accept(NS, "q", s_down)
    for call in (
        lambda: broker.messaging.receive(NS, "q", 1, "peek-lock", held["session_lock_token"]),
        lambda: broker.messaging.session_renew(NS, "q", held["session_lock_token"]),
        lambda: broker.messaging.session_get_state(NS, "q", s_down),
        lambda: broker.messaging.session_set_state(NS, "q", s_down, b"x"),
    ):
        with pytest.raises(ServiceCommunicationProblem):
            call()
    # the next one skips 11
    assert broker.messaging.session_accept(NS, "q", None)["session_id"] == s_up
    assert [s["session_id"] for s in broker.messaging.session_list(NS, "q")] == [s_up]
    broker.housekeeping.fault_clear(NS)
    assert {s["session_id"] for s in broker.messaging.session_list(NS, "q")} == {s_up, s_down}


# ===================================================================== management (daemon/README.md
# §0.1.10)


def test_show_aggregates_the_available_partitions_and_reads_limited(broker: Broker) -> None:
    queue(broker)
    for pid in range(P):
        send(broker, Message(b"x", partition_key=key_for(pid)))
    assert broker.management.queue_get(NS, "q")["availability_status"] == "Available"
    fid = down(broker, "q", 3, 4)
    info = broker.management.queue_get(NS, "q")
    assert info["availability_status"] == "Limited"
    assert info["active_message_count"] == P - 2
    parts = {p["partition_id"]: p for p in info["partitions"]}
    assert parts[3] == {"partition_id": 3, "availability_status": "Unavailable", "faults": [fid]}
    assert parts[5]["active_message_count"] == 1 and "availability_status" not in parts[5]
    (listed,) = broker.management.queue_list(NS)
    assert listed["availability_status"] == "Limited" and listed["active_message_count"] == P - 2
    down(broker, "q")
    info = broker.management.queue_get(NS, "q")
    assert info["availability_status"] == "Unknown"  # Azure's value when nothing answers
    assert info["active_message_count"] == 0
    broker.housekeeping.fault_clear(NS)
    info = broker.management.queue_get(NS, "q")
    assert info["availability_status"] == "Available" and info["active_message_count"] == P


def test_update_and_delete_need_every_partition(broker: Broker) -> None:
    queue(broker)
    queue(broker, "other")
    down(broker, "q", 15)
    with pytest.raises(ServiceCommunicationProblem, match="partition 15 of queue 'q'"):
        broker.management.queue_update(NS, "q", {"max_delivery_count": 3})
    with pytest.raises(ServiceCommunicationProblem):
        broker.management.queue_delete(NS, "q")
    with pytest.raises(ServiceCommunicationProblem):
        broker.management.namespace_delete(NS)
    # other entities are fine
    broker.management.queue_update(NS, "other", {"max_delivery_count": 3})
    queue(broker, "third")
    broker.housekeeping.fault_clear(NS)
    broker.management.queue_update(NS, "q", {"max_delivery_count": 3})
    broker.management.queue_delete(NS, "q")


def test_idle_deletion_waits_for_the_store(broker: Broker, clock: FakeClock) -> None:
    queue(broker, auto_delete_on_idle=300_000)
    down(broker, "q", 0)
    clock.advance(600_000)
    broker.housekeeping.tick()
    assert broker.management.queue_get(NS, "q")["availability_status"] == "Limited"
    broker.housekeeping.fault_clear(NS)
    clock.advance(1_000)
    broker.housekeeping.tick()
    with pytest.raises(MessagingEntityNotFound):
        broker.management.queue_get(NS, "q")


# ===================================================================== plain entities, namespaces


def test_a_plain_queue_with_its_store_down(broker: Broker) -> None:
    queue(broker, partitioned=False)
    send(broker, Message(b"kept"))
    fid = down(broker, "q", 0)
    for call in (
        lambda: send(broker, Message(b"x")),
        lambda: broker.messaging.receive(NS, "q", 1, "peek-lock"),
        lambda: broker.messaging.peek(NS, "q", 1, None),
        lambda: broker.management.queue_update(NS, "q", {"max_delivery_count": 3}),
        lambda: broker.messaging.purge(NS, "q"),
    ):
        with pytest.raises(
            ServiceCommunicationProblem, match=f"the store of queue 'q' is unavailable .*{fid}"
        ):
            call()
    info = broker.management.queue_get(NS, "q")
    assert info["availability_status"] == "Unknown" and info["active_message_count"] == 0
    broker.housekeeping.fault_clear(NS, [fid])
    assert [decode_message(d.payload).body for d in receive_all(broker)] == [b"kept"]


def test_a_namespace_wide_fault(broker: Broker) -> None:
    broker.management.namespace_create("otherns")
    broker.management.queue_create("otherns", "q", {})
    queue(broker)
    queue(broker, "plain", partitioned=False)
    fid = down(broker, None)
    for path in ("q", "plain"):
        with pytest.raises(ServiceCommunicationProblem):
            send(broker, Message(b"x"), path=path)
        assert broker.management.queue_get(NS, path)["availability_status"] == "Unknown"
    with pytest.raises(ServiceCommunicationProblem, match=f"namespace 'sbemulatorns'.*{fid}"):
        queue(broker, "new")
    with pytest.raises(ServiceCommunicationProblem):
        broker.management.topic_create(NS, "t", {})
    send(broker, Message(b"x"), path="q", ns="otherns")  # other namespaces are fine
    assert [f["id"] for f in broker.housekeeping.fault_list(NS)] == [fid]
    assert broker.housekeeping.fault_list("otherns") == []
    broker.housekeeping.fault_clear(None, all_namespaces=True)
    queue(broker, "new")
    send(broker, Message(b"x"), path="new")


def test_a_namespace_wide_slow_fault_covers_new_entities(broker: Broker) -> None:
    broker.housekeeping.fault_add(NS, None, [], "slow", 1500)
    queue(broker, "new")
    assert broker.faults.take_delay() == 1500  # creating touched the slow stores
    send(broker, Message(b"x"), path="new")
    assert broker.faults.take_delay() == 1500
    broker.housekeeping.fault_clear(NS)
    send(broker, Message(b"x"), path="new")
    assert broker.faults.take_delay() == 0


def test_slow_partitions_delay_what_touches_them(broker: Broker) -> None:
    queue(broker)
    fault = broker.housekeeping.fault_add(NS, "q", [2], "slow", 250)
    assert fault["kind"] == "slow" and fault["latency"] == "PT0.25S"
    send(broker, Message(b"fast", partition_key=key_for(3)))
    assert broker.faults.take_delay() == 0
    send(broker, Message(b"slow", partition_key=key_for(2)))
    assert broker.faults.take_delay() == 250
    broker.housekeeping.fault_add(NS, "q", [2], "slow", 900)  # the slowest fault wins
    send(broker, Message(b"slow", partition_key=key_for(2)))
    assert broker.faults.take_delay() == 900
    info = broker.management.queue_get(NS, "q")
    assert info["availability_status"] == "Available"  # slow is not unavailable
    assert info["partitions"][2]["availability_status"] == "Slow"
    assert info["partitions"][2]["latency"] == "PT0.9S"
    assert len(receive_all(broker)) == 3
    down(broker, "q", 2)  # unavailable wins over slow
    with pytest.raises(ServiceCommunicationProblem):
        send(broker, Message(b"x", partition_key=key_for(2)))


# ===================================================================== topics


def test_a_partitioned_topic_and_its_subscriptions(broker: Broker) -> None:
    broker.management.topic_create(NS, "t", {"enable_partitioning": True})
    broker.management.subscription_create(NS, "t", "s", {})
    send(broker, Message(b"held", partition_key=key_for(9)), path="t")
    fid = down(broker, "t", 9)
    # Keyless sends go elsewhere; keyed ones to partition 9 fail.
    seqs = [x for _ in range(40) for x in send(broker, Message(b"k"), path="t")]
    assert 9 not in {s >> 48 for s in seqs}
    with pytest.raises(ServiceCommunicationProblem, match="partition 9 of topic 't'"):
        send(broker, Message(b"x", partition_key=key_for(9)), path="t")
    # The subscription lives in the topic's stores: it serves the available partitions.
    sub = broker.management.subscription_get(NS, "t", "s")
    assert sub["availability_status"] == "Limited" and sub["active_message_count"] == 40
    assert broker.management.topic_get(NS, "t")["availability_status"] == "Limited"
    assert len(receive_all(broker, "t/subscriptions/s")) == 40
    # Management needs every partition of the topic.
    for call in (
        lambda: broker.management.subscription_create(NS, "t", "s2", {}),
        lambda: broker.management.subscription_update(NS, "t", "s", {"max_delivery_count": 3}),
        lambda: broker.management.subscription_delete(NS, "t", "s"),
        lambda: broker.management.rule_create(
            NS, "t", "s", "r", {"type": "sql", "sql_expression": "1=1"}, None
        ),
        lambda: broker.management.rule_delete(NS, "t", "s", "$Default"),
        lambda: broker.management.topic_update(NS, "t", {"max_size_in_megabytes": 2048}),
        lambda: broker.management.topic_delete(NS, "t"),
    ):
        with pytest.raises(ServiceCommunicationProblem, match=fid):
            call()
    assert broker.management.rule_list(NS, "t", "s")[0]["name"] == "$Default"  # reads still work
    broker.housekeeping.fault_clear(NS)
    assert ids(receive_all(broker, "t/subscriptions/s")) == [None]  # the held message
    broker.management.subscription_create(NS, "t", "s2", {})


def test_a_subscription_created_under_a_slow_fault_shares_it(broker: Broker) -> None:
    broker.management.topic_create(NS, "t", {"enable_partitioning": True})
    broker.housekeeping.fault_add(NS, "t", [1], "slow", 300)
    broker.management.subscription_create(NS, "t", "s", {})
    send(broker, Message(b"x", partition_key=key_for(1)), path="t")
    broker.faults.take_delay()
    assert len(broker.messaging.receive(NS, "t/subscriptions/s", 1, "receive-and-delete")) == 1
    assert broker.faults.take_delay() == 300


# ===================================================================== forwarding


def test_forwarding_to_an_unavailable_store_waits(broker: Broker) -> None:
    queue(broker, "target", partitioned=False)
    queue(broker, "source", partitioned=False, forward_to="target")
    down(broker, "target")
    send(broker, Message(b"f"), path="source")
    # not dead-lettered
    assert broker.management.queue_get(NS, "source")["active_message_count"] == 1
    assert broker.management.queue_get(NS, "source")["transfer_dead_letter_message_count"] == 0
    broker.housekeeping.fault_clear(NS)
    broker.housekeeping.tick()
    assert [decode_message(d.payload).body for d in receive_all(broker, "target")] == [b"f"]


# ===================================================================== the registry


def test_fault_validation(broker: Broker) -> None:
    queue(broker)
    queue(broker, "plain", partitioned=False)
    broker.management.topic_create(NS, "t", {})
    broker.management.subscription_create(NS, "t", "s", {})
    with pytest.raises(MessagingEntityNotFound):
        broker.housekeeping.fault_add("nosuchns", None)
    with pytest.raises(MessagingEntityNotFound):
        broker.housekeeping.fault_add(NS, "nosuch")
    with pytest.raises(BadRequest, match="partition 16 is not a partition of queue 'q'"):
        broker.housekeeping.fault_add(NS, "q", [16])
    with pytest.raises(BadRequest, match="partition 1 is not a partition of queue 'plain'"):
        broker.housekeeping.fault_add(NS, "plain", [1])
    with pytest.raises(BadRequest, match="need an entity"):
        broker.housekeeping.fault_add(NS, None, [0])
    with pytest.raises(BadRequest, match="stores of 't'"):
        broker.housekeeping.fault_add(NS, "t/subscriptions/s")
    with pytest.raises(BadRequest):
        broker.housekeeping.fault_add(NS, "q/$deadletterqueue")
    with pytest.raises(BadRequest, match="latency"):
        broker.housekeeping.fault_add(NS, "q", [], "slow")
    with pytest.raises(BadRequest, match="latency"):
        broker.housekeeping.fault_add(NS, "q", [], "unavailable", 100)
    with pytest.raises(BadRequest, match="latency"):
        broker.housekeeping.fault_add(NS, "q", [], "slow", 0)
    with pytest.raises(BadRequest, match="kind"):
        broker.housekeeping.fault_add(NS, "q", [], "flaky")
    with pytest.raises(MessagingEntityNotFound, match="f99"):
        broker.housekeeping.fault_clear(None, ["f99"])
    with pytest.raises(BadRequest):
        broker.housekeeping.fault_clear(None)
    assert broker.housekeeping.fault_list(None) == []


def test_list_clear_and_the_daemon_log(tmp_path: Any, clock: FakeClock) -> None:
    from sbctld.storage.sync import Syncer

    log: list[str] = []
    b = presenting.Presented(Broker(tmp_path / "d", clock, Syncer("os"), report=log.append))
    try:
        b.management.namespace_create("otherns")
        queue(b)
        b.management.queue_create("otherns", "q", {})
        f1 = b.housekeeping.fault_add(NS, "q", [3, 1, 3])
        f2 = b.housekeeping.fault_add("otherns", None, [], "slow", 2000)
        assert f1["partitions"] == [1, 3] and f1["entity_kind"] == "queue"
        assert f2["entity"] is None and f2["partitions"] is None
        assert [f["id"] for f in b.housekeeping.fault_list(None)] == [f1["id"], f2["id"]]
        assert any(
            "fault f1 added: partitions 1, 3 of queue sbemulatorns/q unavailable" in m for m in log
        )
        assert any("fault f2 added: every store of namespace otherns slow (PT2S)" in m for m in log)
        # any case
        assert [f["id"] for f in b.housekeeping.fault_clear(None, ["F2"])["cleared"]] == ["f2"]
        assert any(m.startswith("fault f2 cleared") for m in log)
        assert b.housekeeping.fault_clear("otherns")["cleared"] == []
        b.management.queue_delete("otherns", "q")
        f3 = b.housekeeping.fault_add("otherns", None, [], "slow", 10)
        b.management.namespace_delete("otherns")  # slow stores can be deleted; their faults go too
        assert any(
            m.startswith(f"fault {f3['id']} dropped, its namespace was deleted") for m in log
        )
        assert [f["id"] for f in b.housekeeping.fault_list(None)] == ["f1"]
    finally:
        b.housekeeping.close()


def test_deleting_an_entity_drops_its_slow_faults(broker: Broker) -> None:
    queue(broker)
    broker.housekeeping.fault_add(NS, "q", [1], "slow", 100)
    broker.management.queue_delete(NS, "q")
    queue(broker)
    assert broker.housekeeping.fault_list(NS) == []
    broker.faults.take_delay()  # the delete itself touched the slow store
    send(broker, Message(b"x", partition_key=key_for(1)))
    assert broker.faults.take_delay() == 0


def test_faults_do_not_survive_a_restart(broker: Broker, reopen: Reopen) -> None:
    queue(broker)
    send(broker, Message(b"x", partition_key=key_for(3)))
    down(broker, "q", 3)
    b = reopen()
    assert b.housekeeping.fault_list(None) == []
    assert b.management.queue_get(NS, "q")["availability_status"] == "Available"
    assert len(receive_all(b)) == 1


def test_dlq_resubmit_moves_what_the_available_partitions_hold(broker: Broker) -> None:
    queue(broker)
    queue(broker, "plain", partitioned=False)
    send(broker, Message(b"a", partition_key=key_for(1)), Message(b"b", partition_key=key_for(7)))
    got = broker.messaging.receive(NS, "q", 10, "peek-lock")
    broker.messaging.settle(NS, "q", "dead-letter", [d.lock_token for d in got])  # type: ignore[misc]
    down(broker, "q", 7)
    down(broker, "plain")
    assert broker.messaging.dlq_resubmit(NS, "q/$deadletterqueue", None, None)["resubmitted"] == 1
    with pytest.raises(ServiceCommunicationProblem):
        broker.messaging.dlq_resubmit(NS, "plain/$deadletterqueue", None, None)
    broker.housekeeping.fault_clear(NS)
    assert broker.messaging.dlq_resubmit(NS, "q/$deadletterqueue", None, None)["resubmitted"] == 1
    assert len(receive_all(broker)) == 2
