"""Typed values, message annotations and AMQP body kinds round-trip through a real daemon:
the azure-servicebus SDK sends them, the CLI shows them typed, the SDK receives them as sent
(and the CLI's typed JSON reaches the SDK as typed AMQP values)."""

from __future__ import annotations

import base64
import datetime
import json
import uuid
from typing import Any

import pytest

from tests.integration.amqp_sdk import (  # noqa: F401
    collect_sdk_sockets,
    connection_string,
    peek,
    receive_exactly,
)

sb = pytest.importorskip("azure.servicebus")
from azure.servicebus import ServiceBusClient, ServiceBusMessage  # noqa: E402
from azure.servicebus.amqp import AmqpAnnotatedMessage  # noqa: E402

AT = datetime.datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=datetime.UTC)
ID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")
BLOB = b"\x00\x01\xfe\xff"


@pytest.fixture
def amqp(daemon: Any) -> Any:
    daemon.cli("queue", "create", "typed", check=True)
    client = ServiceBusClient.from_connection_string(connection_string(daemon))
    with client:
        yield daemon, client


def _received_value(value: Any) -> Any:
    """The SDK hands back AMQP timestamps as datetimes or epoch ms depending on its version."""
    if isinstance(value, int) and not isinstance(value, bool):
        return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
    return value


def test_sdk_typed_properties_and_annotations_round_trip(amqp: Any) -> None:
    daemon, client = amqp
    # (the SDK turns a bytes application property into a string before sending it, so
    # binary values are covered by the CLI-to-SDK test below)
    msg = ServiceBusMessage("typed", application_properties={"at": AT, "id": ID, "n": 5, "s": "x"})
    msg.raw_amqp_message.annotations = {"x-opt-custom": "mine", "x-opt-when": AT}
    with client.get_queue_sender("typed") as sender:
        sender.send_messages(msg)

    (shown,) = peek(daemon, "typed")
    assert shown["application_properties"] == {
        "at": {"$type": "timestamp", "value": "2026-03-04T05:06:07.891Z"},
        "id": {"$type": "uuid", "value": str(ID)},
        "n": 5,
        "s": "x",
    }
    assert shown["message_annotations"] == {
        "x-opt-custom": "mine",
        "x-opt-when": {"$type": "timestamp", "value": "2026-03-04T05:06:07.891Z"},
    }

    with client.get_queue_receiver("typed", max_wait_time=5) as receiver:
        (got,) = receiver.receive_messages(max_wait_time=5)
        props = {
            (k.decode() if isinstance(k, bytes) else k): v
            for k, v in got.application_properties.items()
        }
        assert _received_value(props["at"]) == AT
        assert props["id"] == ID
        assert props["n"] == 5
        ann = {
            (k.decode() if isinstance(k, bytes) else k): v
            for k, v in got.raw_amqp_message.annotations.items()
        }
        assert ann["x-opt-custom"] in ("mine", b"mine")
        assert _received_value(ann["x-opt-when"]) == AT
        assert ann["x-opt-sequence-number"] == got.sequence_number  # the broker's still there
        receiver.complete_message(got)


def test_cli_typed_json_reaches_the_sdk_typed(amqp: Any) -> None:
    daemon, client = amqp
    line = {
        "body": "from-cli",
        "application_properties": {
            "at": {"$type": "timestamp", "value": "2026-03-04T05:06:07.891Z"},
            "id": {"$type": "uuid", "value": str(ID)},
            "blob": {"$type": "binary", "value": base64.b64encode(BLOB).decode()},
        },
    }
    daemon.cli("send", "typed", "--input", "-", input=json.dumps(line) + "\n", check=True)
    with client.get_queue_receiver("typed", max_wait_time=5) as receiver:
        (got,) = receiver.receive_messages(max_wait_time=5)
        props = {k.decode(): v for k, v in got.application_properties.items()}
        assert _received_value(props["at"]) == AT
        assert (props["id"], props["blob"]) == (ID, BLOB)
        receiver.complete_message(got)


def test_value_and_sequence_bodies_come_back_as_sent(amqp: Any) -> None:
    daemon, client = amqp
    with client.get_queue_sender("typed") as sender:
        sender.send_messages(AmqpAnnotatedMessage(value_body={"k": 1, "l": [1, 2]}))
        sender.send_messages(AmqpAnnotatedMessage(sequence_body=[[1, "a"], [2, "b"]]))
        sender.send_messages(AmqpAnnotatedMessage(value_body="plain text"))
    shown = peek(daemon, "typed", "--count", "3")
    assert [m["body_kind"] for m in shown] == ["value", "sequence", "value"]
    assert shown[2]["body"] == "plain text"
    assert json.loads(shown[0]["body"]) == {"k": 1, "l": [1, 2]}
    with client.get_queue_receiver("typed", max_wait_time=5) as receiver:
        got = receive_exactly(receiver, 3)
        kinds = [str(m.body_type).rpartition(".")[2] for m in got]
        assert kinds == ["VALUE", "SEQUENCE", "VALUE"]

        def norm(v: Any) -> Any:
            if isinstance(v, bytes):
                return v.decode()
            if isinstance(v, dict):
                return {norm(k): norm(x) for k, x in v.items()}
            if isinstance(v, list):
                return [norm(x) for x in v]
            return v

        assert norm(got[0].body) == {"k": 1, "l": [1, 2]}
        assert norm(list(got[1].body)) == [[1, "a"], [2, "b"]]
        assert norm(got[2].body) == "plain text"
        for m in got:
            receiver.complete_message(m)


def test_the_rest_api_receives_typed_properties_as_quoted_headers(amqp: Any) -> None:
    from tests.integration.test_http_rest import rest

    daemon, client = amqp
    msg = ServiceBusMessage("typed", application_properties={"at": AT, "id": ID, "n": 5})
    with client.get_queue_sender("typed") as sender:
        sender.send_messages(msg)
    with rest(daemon) as c:
        r = c.delete("/typed/messages/head", params={"timeout": 5})
        assert r.status_code == 200, r.text
        assert r.headers["at"] == '"Wed, 04 Mar 2026 05:06:07 GMT"'
        assert r.headers["id"] == f'"{ID}"'
        assert r.headers["n"] == "5"


def test_the_python_client_sends_typed_values_an_sdk_and_peek_read_typed(amqp: Any) -> None:
    from sbctl import Message

    daemon, client = amqp
    with daemon.client() as c:
        c.send("typed", Message(b"py", application_properties={"at": AT, "id": ID, "b": BLOB}))
        (peeked,) = c.peek("typed")
        assert peeked.application_properties == {"at": AT, "id": ID, "b": BLOB}
    with client.get_queue_receiver("typed", max_wait_time=5) as receiver:
        (got,) = receiver.receive_messages(max_wait_time=5)
        props = {k.decode(): v for k, v in got.application_properties.items()}
        assert (_received_value(props["at"]), props["id"], props["b"]) == (AT, ID, BLOB)
        receiver.complete_message(got)
