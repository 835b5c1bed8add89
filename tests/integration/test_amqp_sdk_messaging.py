"""The azure-servicebus SDK, unchanged, against a real daemon over AMQP: sends, receives
in both modes, settlement, peek, lock renewal, deferral, scheduling, topics, the DLQ,
and what the CLI sees of it (and the other way round)."""

from __future__ import annotations

import base64
import datetime
import uuid
from typing import Any

import pytest

from tests.integration.amqp_sdk import cli_json, collect_sdk_sockets, connection_string, peek  # noqa: F401

sb = pytest.importorskip("azure.servicebus")
from azure.servicebus import (  # noqa: E402
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)


@pytest.fixture
def amqp(daemon: Any) -> tuple[Any, ServiceBusClient]:
    daemon.cli("queue", "create", "orders", check=True)
    client = ServiceBusClient.from_connection_string(connection_string(daemon))
    with client:
        yield daemon, client


def test_send_single_list_and_batch_each_message_its_own_sequence_number(amqp: Any) -> None:
    daemon, client = amqp
    with client.get_queue_sender("orders") as sender:
        sender.send_messages(ServiceBusMessage("one"))
        sender.send_messages([ServiceBusMessage("two"), ServiceBusMessage("three")])
        batch = sender.create_message_batch()
        for body in ("four", "five", "six"):
            batch.add_message(ServiceBusMessage(body))
        sender.send_messages(batch)
    peeked = peek(daemon, "orders", "--count", "10")
    assert [m["body"] for m in peeked] == ["one", "two", "three", "four", "five", "six"]
    assert len({m["sequence_number"] for m in peeked}) == 6
    with client.get_queue_receiver("orders", max_wait_time=5) as receiver:
        got = receiver.receive_messages(max_message_count=6, max_wait_time=5)
        assert [str(m) for m in got] == ["one", "two", "three", "four", "five", "six"]
        assert [m.sequence_number for m in got] == [m["sequence_number"] for m in peeked]
        assert all(m.delivery_count == 0 and m.locked_until_utc is not None for m in got)
        for m in got:
            receiver.complete_message(m)
    assert peek(daemon, "orders", "--count", "10") == []


def test_what_the_sdk_sends_the_cli_shows_field_for_field(amqp: Any) -> None:
    daemon, client = amqp
    msg = ServiceBusMessage(
        b"\xff\xfebinary",
        # (the SDK itself refuses Python ints beyond Int32 in application properties)
        application_properties={"n": 5, "f": 2.5, "ok": True, "s": "text"},
        message_id="mid-1",
        correlation_id="cid",
        subject="subj",
        content_type="application/octet-stream",
        to="somewhere",
        reply_to="replies",
        time_to_live=datetime.timedelta(seconds=90),
    )
    with client.get_queue_sender("orders") as sender:
        sender.send_messages(msg)
    (shown,) = peek(daemon, "orders")
    assert shown["body_base64"] == base64.b64encode(b"\xff\xfebinary").decode()
    assert shown["application_properties"] == {
        "n": 5,
        "f": 2.5,
        "ok": True,
        "s": "text",
    }
    for key, value in {
        "message_id": "mid-1",
        "correlation_id": "cid",
        "subject": "subj",
        "content_type": "application/octet-stream",
        "to": "somewhere",
        "reply_to": "replies",
        "time_to_live": 90.0,
    }.items():
        assert shown[key] == value, key


def test_what_the_cli_sends_the_sdk_receives(amqp: Any) -> None:
    daemon, client = amqp
    daemon.cli(
        "send", "orders", "--body", "from-cli", "--subject", "s", "--message-id", "m1",
        "--property", "count=3", "--property", "name=x", check=True,
    )  # fmt: skip
    with client.get_queue_receiver("orders", max_wait_time=5) as receiver:
        (m,) = receiver.receive_messages(max_wait_time=5)
        assert str(m) == "from-cli" and m.subject == "s" and m.message_id == "m1"
        assert m.application_properties == {b"count": 3, b"name": b"x"}
        receiver.complete_message(m)


def test_receive_and_delete_removes_on_delivery(amqp: Any) -> None:
    daemon, client = amqp
    daemon.cli("send", "orders", "--body", "a", check=True)
    mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
    with client.get_queue_receiver("orders", receive_mode=mode, max_wait_time=5) as receiver:
        got = receiver.receive_messages(max_message_count=5, max_wait_time=3)
        assert [str(m) for m in got] == ["a"]
    assert peek(daemon, "orders") == []


def test_abandon_defer_dead_letter_renew_and_receive_deferred(amqp: Any) -> None:
    daemon, client = amqp
    with client.get_queue_sender("orders") as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
    with client.get_queue_receiver("orders", max_wait_time=5) as receiver:
        m0, m1, m2 = receiver.receive_messages(max_message_count=3, max_wait_time=5)
        before = m0.locked_until_utc
        assert receiver.renew_message_lock(m0) >= before
        receiver.abandon_message(m0)
        receiver.defer_message(m1)
        receiver.dead_letter_message(m2, reason="bad", error_description="very bad")
        (again,) = receiver.receive_messages(max_wait_time=5)
        assert str(again) == "m0" and again.delivery_count == 1
        receiver.complete_message(again)
        (deferred,) = receiver.receive_deferred_messages([m1.sequence_number])
        assert str(deferred) == "m1"
        receiver.complete_message(deferred)
    dlq = ServiceBusSubQueue.DEAD_LETTER
    with client.get_queue_receiver("orders", sub_queue=dlq, max_wait_time=5) as receiver:
        (dead,) = receiver.receive_messages(max_wait_time=5)
        assert (str(dead), dead.dead_letter_reason, dead.dead_letter_error_description) == (
            "m2",
            "bad",
            "very bad",
        )
        receiver.complete_message(dead)
    assert daemon.cli("-o", "json", "queue", "show", "orders").json()["total_message_count"] == 0


def test_peek_from_a_sequence_number_and_schedule_then_cancel(amqp: Any) -> None:
    daemon, client = amqp
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=10)
    with client.get_queue_sender("orders") as sender:
        sender.send_messages([ServiceBusMessage(f"p{i}") for i in range(4)])
        (seq,) = sender.schedule_messages(ServiceBusMessage("later"), later)
        (seq2,) = sender.schedule_messages(ServiceBusMessage("kept"), later)
        sender.cancel_scheduled_messages(seq)
    with client.get_queue_receiver("orders") as receiver:
        peeked = receiver.peek_messages(max_message_count=10)
        assert [str(m) for m in peeked] == ["p0", "p1", "p2", "p3", "kept"]
        assert peeked[-1].sequence_number == seq2
        start = peeked[2].sequence_number
        assert [str(m) for m in receiver.peek_messages(2, sequence_number=start)] == ["p2", "p3"]
    shown = cli_json(daemon, "queue", "show", "orders")
    assert shown["scheduled_message_count"] == 1 and shown["active_message_count"] == 4


def test_topics_subscriptions_and_their_dead_letter_queue(amqp: Any) -> None:
    daemon, client = amqp
    daemon.cli("topic", "create", "events", check=True)
    daemon.cli("subscription", "create", "events", "audit", check=True)
    daemon.cli("subscription", "create", "events", "billing", check=True)
    with client.get_topic_sender("events") as sender:
        sender.send_messages(ServiceBusMessage("e1"))
    for name in ("audit", "billing"):
        with client.get_subscription_receiver("events", name, max_wait_time=5) as receiver:
            (m,) = receiver.receive_messages(max_wait_time=5)
            assert str(m) == "e1"
            receiver.dead_letter_message(m, reason="r")
    dlq = ServiceBusSubQueue.DEAD_LETTER
    with client.get_subscription_receiver(
        "events", "audit", sub_queue=dlq, max_wait_time=5
    ) as receiver:
        (m,) = receiver.receive_messages(max_wait_time=5)
        assert m.dead_letter_reason == "r"
        receiver.complete_message(m)


def test_a_send_wakes_a_receiver_waiting_on_the_other_protocol(amqp: Any) -> None:
    import subprocess
    import sys

    daemon, client = amqp
    waiting = subprocess.Popen(
        [sys.executable, "-m", "sbctl.cli.app", "-o", "json", "receive", "orders",
         "--max-wait", "30s"],
        env=daemon.env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        import time

        time.sleep(1.0)  # let the CLI park its receive
        t0 = time.monotonic()
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("wake-up"))
        out, _ = waiting.communicate(timeout=30)
        assert time.monotonic() - t0 < 10
        assert "wake-up" in out
    finally:
        waiting.kill()
        waiting.wait()


def test_another_namespace_on_its_own_port(daemon: Any) -> None:
    daemon.cli("namespace", "create", "second-ns", check=True)
    daemon.cli("-n", "second-ns", "queue", "create", "jobs", check=True)
    cs = connection_string(daemon, "second-ns")
    assert cs != connection_string(daemon)
    with (
        ServiceBusClient.from_connection_string(cs) as client,
        client.get_queue_sender("jobs") as sender,
    ):
        sender.send_messages(ServiceBusMessage(str(uuid.uuid4())))
    assert len(daemon.cli("-n", "second-ns", "-o", "json", "peek", "jobs", check=True).jsonl()) == 1


def test_a_cli_send_wakes_a_waiting_sdk_receiver(amqp: Any) -> None:
    import threading
    import time

    daemon, client = amqp
    timer = threading.Timer(1.5, lambda: daemon.cli("send", "orders", "--body", "ping", check=True))
    with client.get_queue_receiver("orders", max_wait_time=30) as receiver:
        t0 = time.monotonic()
        timer.start()
        try:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=30)
        finally:
            timer.join()
        assert [str(m) for m in got] == ["ping"]
        assert time.monotonic() - t0 < 15  # woken by the send, not by the time-out
        receiver.complete_message(got[0])
