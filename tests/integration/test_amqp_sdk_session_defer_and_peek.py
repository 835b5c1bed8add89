"""A session receiver (azure-servicebus over AMQP) receives the deferred messages of its
session, and peeks only its session's messages."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.amqp_sdk import cli_json, collect_sdk_sockets, connection_string  # noqa: F401

pytest.importorskip("azure.servicebus")
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessageNotFoundError


@pytest.fixture
def amqp(daemon: Any) -> Any:
    daemon.cli("queue", "create", "chat", "--enable-session", check=True)
    cs = connection_string(daemon)
    with ServiceBusClient.from_connection_string(cs, retry_total=0) as client:
        yield daemon, client


def test_a_session_receiver_receives_its_deferred_messages(amqp: Any) -> None:
    daemon, client = amqp
    with client.get_queue_sender("chat") as sender:
        sender.send_messages(
            [ServiceBusMessage("a1", session_id="A"), ServiceBusMessage("b1", session_id="B"),
             ServiceBusMessage("a2", session_id="A")]
        )  # fmt: skip
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
