"""Protocol paths the Python SDK does not take, through a minimal client on the wire:
.NET-style SASL, pipelining, small frames, rule operations, listing sessions, AMQP over
TLS on the AMQP port."""

from __future__ import annotations

import socket
import ssl
from typing import Any

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient


def amqp_port(daemon: Any) -> int:
    port: int = daemon.cli("-o", "json", "daemon", "status", check=True).json()["amqp_port"]
    return port


def test_rules_are_added_enumerated_and_removed_over_management(daemon: Any) -> None:
    daemon.cli("topic", "create", "events", check=True)
    daemon.cli("subscription", "create", "events", "big", check=True)
    node = "events/Subscriptions/big/$management"
    client = RawClient(amqp_port(daemon))
    try:
        tx, _rx = client.management(node)
        status, _ = client.request(
            tx, node, "com.microsoft:remove-rule", {"rule-name": "$Default"}, 0
        )
        assert status["statusCode"] == 200
        status, _ = client.request(
            tx,
            node,
            "com.microsoft:add-rule",
            {
                "rule-name": "large",
                "rule-description": {
                    "sql-filter": {"expression": "size > 10"},
                    "sql-rule-action": {"expression": "SET tagged = 'yes'"},
                },
            },
            1,
        )
        assert status["statusCode"] == 200, status
        status, body = client.request(
            tx, node, "com.microsoft:enumerate-rules", {"top": 10, "skip": 0}, 2
        )
        assert status["statusCode"] == 200
        (entry,) = body["rules"]
        rule = entry["rule-description"]
        assert rule.descriptor == 0x0000013700000004
        filt, action, name = rule.value[:3]
        # filters' codes are 0x137_0000_000n, one zero fewer than the rule's (as SDKs decode)
        assert (filt.descriptor, filt.value[0]) == (0x0000001370000006, "size > 10")
        assert action.descriptor == 0x0000013700000006
        assert action.value[0] == "SET tagged = 'yes'" and name == "large"
        status, _ = client.request(tx, node, "com.microsoft:remove-rule", {"rule-name": "nope"}, 3)
        assert status["statusCode"] == 404 and status["errorCondition"] == "amqp:not-found"
    finally:
        client.close()
    shown = daemon.cli("-o", "json", "rule", "list", "events", "big", check=True).json()
    assert [r["name"] for r in shown] == ["large"]
    daemon.cli("send", "events", "--body", "s", "--property", "size=5", check=True)
    daemon.cli("send", "events", "--body", "L", "--property", "size=50", check=True)
    (got,) = daemon.cli(
        "-o", "json", "peek", "events/subscriptions/big", "--count", "5", check=True
    ).jsonl()
    assert got["body"] == "L" and got["application_properties"]["tagged"] == "yes"


def test_amqp_over_tls_and_correlation_rules_with_typed_properties(daemon: Any) -> None:
    """The AMQP port ends TLS itself and speaks AMQP inside (what the JavaScript SDK does
    without UseDevelopmentEmulator=true); a correlation rule's properties may be any AMQP
    integer type (the JavaScript SDK sends 2 as a uint) or a timestamp (a Date: kept as its
    ISO 8601 text, as the HTTP management API carries it)."""
    port = amqp_port(daemon)
    cert = daemon.cli("-o", "json", "daemon", "cert", check=True).json()["certificate"]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\x00\x05hello")  # a TLS record that is no handshake
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
    daemon.cli("topic", "create", "events", check=True)
    daemon.cli("subscription", "create", "events", "typed", check=True)
    node = "events/Subscriptions/typed/$management"
    client = RawClient(port, tls=ssl.create_default_context(cafile=cert))
    try:
        tx, _rx = client.management(node)
        client.request(tx, node, "com.microsoft:remove-rule", {"rule-name": "$Default"}, 0)
        rules = {"num": {"n": t.UInt(2)}, "dated": {"when": t.Timestamp(946_684_800_000)}}
        for i, (name, props) in enumerate(rules.items(), start=1):
            description = {"correlation-filter": {"properties": props}}
            request = {"rule-name": name, "rule-description": description}
            status, _ = client.request(tx, node, "com.microsoft:add-rule", request, i)
            assert status["statusCode"] == 200, status
        status, body = client.request(tx, node, "com.microsoft:enumerate-rules", {"top": 9}, 3)
        assert status["statusCode"] == 200
        seen = {
            e["rule-description"].value[2]: e["rule-description"].value[0] for e in body["rules"]
        }
        assert seen["num"].value[-1] == {"n": 2}
        assert seen["dated"].value[-1] == {"when": "2000-01-01T00:00:00.000Z"}
    finally:
        client.close()
    daemon.cli("send", "events", "--body", "two", "--property", "n=2", check=True)
    daemon.cli("send", "events", "--body", "three", "--property", "n=3", check=True)
    got = daemon.cli("-o", "json", "peek", "events/subscriptions/typed", check=True).jsonl()
    assert [m["body"] for m in got] == ["two"]


def test_sessions_are_listed_over_management(daemon: Any) -> None:
    daemon.cli("queue", "create", "chat", "--enable-session", check=True)
    for sid in ("a", "b"):
        daemon.cli("send", "chat", "--body", "x", "--session-id", sid, check=True)
    client = RawClient(amqp_port(daemon), mechanism="ANONYMOUS")
    try:
        node = "chat/$management"
        tx, _ = client.management(node)
        request = {"last-updated-time": t.Timestamp(253_402_300_800_000), "skip": 0, "top": 100}
        status, body = client.request(tx, node, "com.microsoft:get-message-sessions", request, 0)
        assert status["statusCode"] == 200
        assert sorted(body["sessions-ids"]) == ["a", "b"]
    finally:
        client.close()


def test_large_messages_are_split_at_the_clients_small_frame_size(daemon: Any) -> None:
    daemon.cli("queue", "create", "big", check=True)
    body = "x" * 5000
    daemon.cli("send", "big", "--body", body, check=True)
    client = RawClient(amqp_port(daemon), max_frame_size=512)
    try:
        assert client.open.max_frame_size >= 512
        rx = client.attach(True, "big")
        client.sock.sendall(framing.encode_frame(0, t.Flow(0, 5000, 0, 5000, rx, 0, 1)))
        parts = []
        while True:
            frame = client.until(t.Transfer)
            parts.append(frame)
            if not frame.body.more:
                break
        assert len(parts) > 5
        msg = codec.decode_message(b"".join(p.payload for p in parts))
        assert b"".join(msg.body) == body.encode()
        assert msg.message_annotations["x-opt-sequence-number"] >= 1
    finally:
        client.close()


def test_transactions_commit_roll_back_and_hold_settlements(daemon: Any) -> None:
    daemon.cli("queue", "create", "txq", check=True)

    def bodies() -> list[str]:
        rows = daemon.cli("-o", "json", "peek", "txq", "--count", "10", check=True).jsonl()
        return [r["body"] for r in rows]

    client = RawClient(amqp_port(daemon))
    send = client.sock.sendall
    ids = iter(range(1000))
    try:
        client.handles += 1
        coord = client.handles
        send(
            framing.encode_frame(
                0,
                t.Attach(
                    "coord", coord, False, 0, 0, t.Source("c"),
                    t.Coordinator(["amqp:local-transactions"]), None, None, 0,
                ),
            )
        )  # fmt: skip
        assert isinstance(client.until(t.Attach).body.target, t.Coordinator)

        def control(body: Any) -> Any:
            n = next(ids)
            msg = codec.encode_message(codec.Message(body=body, body_kind="value"))
            send(framing.encode_frame(0, t.Transfer(coord, n, n.to_bytes(4, "big"), 0, False), msg))
            return client.until(t.Disposition).body.state

        tx = client.attach(False, "txq")
        client.until(t.Attach)

        def send_in(txn: bytes, text: str) -> Any:
            n = next(ids)
            payload = codec.encode_message(codec.Message(body=[text.encode()]))
            transfer = t.Transfer(
                tx, n, n.to_bytes(4, "big"), 0, False, False, None, t.TransactionalState(txn)
            )
            send(framing.encode_frame(0, transfer, payload))
            return client.until(t.Disposition).body.state

        declared = control(t.Declare())
        assert isinstance(declared, t.Declared)
        txn = declared.txn_id
        state = send_in(txn, "committed")
        assert isinstance(state, t.TransactionalState) and isinstance(state.outcome, t.Accepted)
        assert bodies() == []  # held until the discharge
        assert isinstance(control(t.Discharge(txn, False)), t.Accepted)
        assert bodies() == ["committed"]

        txn2 = control(t.Declare()).txn_id
        send_in(txn2, "rolled-back")
        assert isinstance(control(t.Discharge(txn2, True)), t.Accepted)
        assert bodies() == ["committed"]

        # A settlement inside a transaction takes effect at the commit only.
        rx = client.attach(True, "txq")
        client.until(t.Attach)
        send(framing.encode_frame(0, t.Flow(0, 5000, 0, 5000, rx, 0, 1)))
        delivery = client.until(t.Transfer).body
        txn3 = control(t.Declare()).txn_id
        send(
            framing.encode_frame(
                0,
                t.Disposition(
                    True, delivery.delivery_id, None, False,
                    t.TransactionalState(txn3, t.Accepted()),
                ),
            )
        )  # fmt: skip
        assert isinstance(client.until(t.Disposition).body.state, t.TransactionalState)
        assert bodies() == ["committed"]
        assert isinstance(control(t.Discharge(txn3, False)), t.Accepted)
        assert bodies() == []
        unknown = control(t.Discharge(b"nope", False))
        assert isinstance(unknown, t.Rejected)
        assert unknown.error.condition == "amqp:transaction:unknown-id"
    finally:
        client.close()


def test_heartbeats_come_within_half_the_clients_idle_timeout(daemon: Any) -> None:
    import time

    client = RawClient(amqp_port(daemon), idle_ms=4000)
    try:
        t0 = time.monotonic()
        gaps = []
        for _ in range(3):
            assert client.heartbeat() == framing.HEARTBEAT
            now = time.monotonic()
            gaps.append(now - t0)
            t0 = now
        assert max(gaps) < 3.0, gaps  # every silence under 2 s, plus scheduling slack
    finally:
        client.close()
