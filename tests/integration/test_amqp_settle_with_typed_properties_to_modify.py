"""Abandoning or deferring over an AMQP link with properties to modify of AMQP's typed
kinds (the JavaScript SDK sends a number as an unsigned int, a Date as a timestamp): the
properties are stored; a value sbctl cannot store rejects that settlement, not the
connection."""

from __future__ import annotations

from typing import Any

from sbctl.core.amqp import framing
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.amqp_sdk import cli_json, peek


def receive_one(client: RawClient, rx: int, delivered: int) -> Any:
    client.sock.sendall(framing.encode_frame(0, t.Flow(None, 5000, 0, 5000, rx, delivered, 1)))
    return client.until(t.Transfer).body


def settle(client: RawClient, delivery_id: int, outcome: Any) -> Any:
    disposition = t.Disposition(True, delivery_id, None, False, outcome)
    client.sock.sendall(framing.encode_frame(0, disposition))
    return client.until(t.Disposition).body.state


def test_typed_properties_to_modify_are_stored_and_bad_ones_rejected(daemon: Any) -> None:
    daemon.cli("queue", "create", "mod", check=True)
    daemon.cli("send", "mod", "--body", "x", check=True)
    port: int = cli_json(daemon, "daemon", "status")["amqp_port"]
    client = RawClient(port)
    try:
        rx = client.attach(True, "mod")
        client.until(t.Attach)
        first = receive_one(client, rx, 0)
        props = {"n": t.UInt(5), "when": t.Timestamp(0), "why": "retry"}
        state = settle(client, first.delivery_id, t.Modified(True, False, props))
        assert isinstance(state, t.Modified)
        (row,) = peek(daemon, "mod")
        assert row["delivery_count"] == 1
        assert row["application_properties"]["n"] == 5
        assert row["application_properties"]["why"] == "retry"
        assert row["application_properties"]["when"] == {
            "$type": "timestamp",
            "value": "1970-01-01T00:00:00.000Z",
        }

        again = receive_one(client, rx, 1)
        state = settle(client, again.delivery_id, t.Modified(True, False, {"bad": [1, 2]}))
        assert isinstance(state, t.Rejected)
        assert "property to modify" in state.error.description
        # The connection serves on: the next request is answered.
        tx, _rx = client.management("mod/$management")
        client.until(t.Attach)
        status, _body = client.request(
            tx, "mod/$management", "com.microsoft:peek-message",
            {"from-sequence-number": 1, "message-count": 1}, 0,
        )  # fmt: skip
        assert status["statusCode"] == 200
    finally:
        client.close()
    (row,) = peek(daemon, "mod")
    assert "bad" not in row["application_properties"]
