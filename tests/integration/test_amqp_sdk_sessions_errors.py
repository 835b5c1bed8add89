"""Sessions and error mapping through the azure-servicebus SDK over AMQP."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from tests.integration.amqp_sdk import cli_json, collect_sdk_sockets, connection_string  # noqa: F401

pytest.importorskip("azure.servicebus")
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
)
from azure.servicebus.exceptions import (
    MessageNotFoundError,
    MessageSizeExceededError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusAuthenticationError,
    SessionCannotBeLockedError,
)


@pytest.fixture
def amqp(daemon: Any) -> Any:
    daemon.cli("queue", "create", "chat", "--enable-session", check=True)
    daemon.cli("queue", "create", "plain", check=True)
    # No SDK retries: each error surfaces at once (the mapping is what is under test).
    cs = connection_string(daemon)
    with ServiceBusClient.from_connection_string(cs, retry_total=0) as client:
        yield daemon, client


def send_a1_b1_a2(client: Any) -> None:
    """a1 and a2 in session A, b1 in session B between them."""
    with client.get_queue_sender("chat") as sender:
        sender.send_messages(
            [ServiceBusMessage("a1", session_id="A"), ServiceBusMessage("b1", session_id="B"),
             ServiceBusMessage("a2", session_id="A")]
        )  # fmt: skip


def test_next_and_named_sessions_state_and_renewal(amqp: Any) -> None:
    daemon, client = amqp
    send_a1_b1_a2(client)
    with client.get_queue_receiver(
        "chat", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=5
    ) as receiver:
        session = receiver.session
        assert session.session_id == "A" and session.locked_until_utc is not None
        session.set_state(b"checkpoint")
        assert session.get_state() == b"checkpoint"
        assert session.renew_lock() >= session.locked_until_utc.replace(microsecond=0)
        got = receiver.receive_messages(max_message_count=5, max_wait_time=3)
        assert [(str(m), m.session_id) for m in got] == [("a1", "A"), ("a2", "A")]
        for m in got:
            receiver.complete_message(m)
    assert cli_json(daemon, "session", "get-state", "chat", "A")["state"] is not None
    with client.get_queue_receiver("chat", session_id="B", max_wait_time=5) as receiver:
        (m,) = receiver.receive_messages(max_wait_time=3)
        assert str(m) == "b1"
        receiver.complete_message(m)


def test_a_session_receiver_receives_its_deferred_messages(amqp: Any) -> None:
    daemon, client = amqp
    send_a1_b1_a2(client)
    with client.get_queue_receiver("chat", session_id="A", max_wait_time=3) as receiver:
        got = receiver.receive_messages(max_message_count=5, max_wait_time=3)
        assert [str(m) for m in got] == ["a1", "a2"]
        for m in got:
            receiver.defer_message(m)
        seqs = [m.sequence_number for m in got]
        # Another session's message is not this receiver's to take.
        with client.get_queue_receiver("chat", session_id="B") as other:
            (b1,) = other.receive_messages(max_wait_time=3)
            other.defer_message(b1)
        with pytest.raises(MessageNotFoundError):
            receiver.receive_deferred_messages([seqs[0], b1.sequence_number])
        deferred = receiver.receive_deferred_messages(seqs)
        assert [(str(m), m.session_id) for m in deferred] == [("a1", "A"), ("a2", "A")]
        assert deferred[0].lock_token is not None
        receiver.complete_message(deferred[0])
    # The session closed with a2 unsettled: it stays deferred, and can be received again.
    with client.get_queue_receiver("chat", session_id="A") as receiver:
        (again,) = receiver.receive_deferred_messages([seqs[1]])
        assert str(again) == "a2"
        receiver.complete_message(again)
    assert cli_json(daemon, "queue", "show", "chat")["deferred_message_count"] == 1  # B's


def test_a_session_receiver_peeks_only_its_session(amqp: Any) -> None:
    _daemon, client = amqp
    with client.get_queue_sender("chat") as sender:
        sender.send_messages([ServiceBusMessage(f"b{i}", session_id="B") for i in range(300)])
        sender.send_messages([ServiceBusMessage(f"a{i}", session_id="A") for i in range(3)])
    with client.get_queue_receiver("chat", session_id="A") as receiver:
        peeked = receiver.peek_messages(max_message_count=2)
        assert [(str(m), m.session_id) for m in peeked] == [("a0", "A"), ("a1", "A")]
        rest = receiver.peek_messages(max_message_count=10)
        assert [str(m) for m in rest] == ["a2"]


def test_a_held_session_cannot_be_locked_twice(amqp: Any) -> None:
    _daemon, client = amqp
    with client.get_queue_sender("chat") as sender:
        sender.send_messages(ServiceBusMessage("x", session_id="S"))
    with client.get_queue_receiver("chat", session_id="S", max_wait_time=5):
        other = client.get_queue_receiver("chat", session_id="S", max_wait_time=5)
        with pytest.raises(SessionCannotBeLockedError), other:
            pass


def test_next_session_times_out_then_waits_for_one_to_arrive(amqp: Any) -> None:
    daemon, client = amqp
    t0 = time.monotonic()
    with (
        pytest.raises(OperationTimeoutError),
        client.get_queue_receiver("chat", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2),
    ):
        pass
    assert time.monotonic() - t0 < 30
    timer = threading.Timer(1.0, lambda: daemon.cli("send", "chat", "--body", "late",
                                                     "--session-id", "L", check=True))  # fmt: skip
    timer.start()
    try:
        with client.get_queue_receiver(
            "chat", session_id=NEXT_AVAILABLE_SESSION, max_wait_time=20
        ) as receiver:
            assert receiver.session.session_id == "L"
    finally:
        timer.join()


def test_errors_map_to_the_sdk_exceptions(amqp: Any) -> None:
    daemon, client = amqp
    with pytest.raises(MessagingEntityNotFoundError), client.get_queue_sender("missing") as s:
        s.send_messages(ServiceBusMessage("x"))
    with client.get_queue_sender("plain") as sender:
        with pytest.raises(MessageSizeExceededError):
            sender.send_messages(ServiceBusMessage(b"x" * 300_000))
        daemon.cli("queue", "update", "plain", "--status", "SendDisabled", check=True)
        with pytest.raises(MessagingEntityDisabledError):
            sender.send_messages(ServiceBusMessage("x"))
    assert daemon.cli("-o", "json", "queue", "show", "plain").json()["total_message_count"] == 0


def test_a_wrong_key_is_refused_saying_why(daemon: Any) -> None:
    daemon.cli("queue", "create", "q", check=True)
    bad = connection_string(daemon).replace("SAS_KEY_VALUE", "not-the-key")
    with (
        ServiceBusClient.from_connection_string(bad, retry_total=0) as client,
        pytest.raises(ServiceBusAuthenticationError) as refused,
        client.get_queue_sender("q") as s,
    ):
        s.send_messages(ServiceBusMessage("x"))
    # The put-token answer is 401 with the reason worded as Service Bus words it. The
    # Python SDK's own message names only amqp:client-error (it drops the CBS description,
    # against Azure too); the reason is in the error it wraps (inner_exception, exc_msg).
    reason = "InvalidSignature: the token's signature does not match the namespace key"
    assert reason in str(refused.value.inner_exception)
    assert reason in refused.value.exc_msg


def test_settling_after_the_lock_expired_raises_lock_lost(amqp: Any) -> None:
    from azure.servicebus.exceptions import MessageLockLostError

    daemon, client = amqp
    daemon.cli("queue", "create", "short", "--lock-duration", "PT5S", check=True)
    daemon.cli("send", "short", "--body", "x", check=True)
    with client.get_queue_receiver("short", max_wait_time=5) as receiver:
        (m,) = receiver.receive_messages(max_wait_time=5)
        time.sleep(5.5)
        with pytest.raises(MessageLockLostError):
            receiver.complete_message(m)
        (again,) = receiver.receive_messages(max_wait_time=5)
        assert str(again) == "x" and again.delivery_count == 1
        receiver.complete_message(again)


def test_the_transfer_dead_letter_queue_path_is_served(amqp: Any) -> None:
    from azure.servicebus import ServiceBusSubQueue

    _daemon, client = amqp
    sub = ServiceBusSubQueue.TRANSFER_DEAD_LETTER
    with client.get_queue_receiver("plain", sub_queue=sub, max_wait_time=1) as receiver:
        assert receiver.receive_messages(max_wait_time=1) == []
