"""Transfers that arrive in one read are stored together, each still answered on its own
(daemon/README.md §29.14): pipelined sends keep their order, and a transfer the entity
refuses is rejected alone while its neighbours are stored. Settlements that arrive in one
read are made together the same way, each delivery keeping its own outcome and answer."""

from __future__ import annotations

from typing import Any

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.test_amqp_raw_protocol import amqp_port


def pipelined(client: RawClient, tx: int, messages: list[codec.Message]) -> dict[int, Any]:
    """Send ``messages`` unsettled in one write; the outcome of each delivery id."""
    frames = b"".join(
        framing.encode_frame(
            0, t.Transfer(tx, i, i.to_bytes(4, "big"), 0, False), codec.encode_message(m)
        )
        for i, m in enumerate(messages)
    )
    client.sock.sendall(frames)
    outcomes: dict[int, Any] = {}
    while len(outcomes) < len(messages):
        body = client.until(t.Disposition).body
        last = body.first if body.last is None else body.last
        for i in range(int(body.first), int(last) + 1):
            outcomes[i] = body.state
    return outcomes


def message(body: str, session: str | None = None) -> codec.Message:
    return codec.Message(
        properties=t.Properties(message_id=body, group_id=session),
        body=[body.encode()],
        body_kind="data",
    )


def received_bodies(daemon: Any, entity: str, count: int, *args: str) -> list[str]:
    got = daemon.cli("-o", "json", "peek", entity, "--count", str(count), *args, check=True).jsonl()
    return [m["body"] for m in got]


def test_pipelined_transfers_are_stored_in_order(daemon: Any) -> None:
    daemon.cli("queue", "create", "inorder", check=True)
    client = RawClient(amqp_port(daemon))
    try:
        tx = client.attach(False, "inorder")
        client.until(t.Flow)  # the daemon's credit
        bodies = [f"m{i:03d}" for i in range(150)]  # more than one coalesced request
        outcomes = pipelined(client, tx, [message(b) for b in bodies])
    finally:
        client.close()
    assert all(isinstance(state, t.Accepted) for state in outcomes.values())
    assert received_bodies(daemon, "inorder", 200) == bodies


def test_a_refused_transfer_is_rejected_alone(daemon: Any) -> None:
    daemon.cli("queue", "create", "sessions", "--enable-session", check=True)
    client = RawClient(amqp_port(daemon))
    try:
        tx = client.attach(False, "sessions")
        client.until(t.Flow)
        sent = [message("a1", "a"), message("a2", "a"), message("none"), message("a3", "a")]
        outcomes = pipelined(client, tx, sent)
    finally:
        client.close()
    assert [type(outcomes[i]).__name__ for i in range(4)] == [
        "Accepted",
        "Accepted",
        "Rejected",
        "Accepted",
    ]
    assert "session" in str(outcomes[2].error.description).lower()
    assert received_bodies(daemon, "sessions", 10) == ["a1", "a2", "a3"]


def test_a_request_in_the_same_read_sees_the_transfers_before_it(daemon: Any) -> None:
    daemon.cli("queue", "create", "seen", check=True)
    client = RawClient(amqp_port(daemon))
    try:
        tx = client.attach(False, "seen")
        client.until(t.Flow)
        node = "seen/$management"
        mtx, _mrx = client.management(node)
        client.until(t.Attach)
        transfers = b"".join(
            framing.encode_frame(
                0,
                t.Transfer(tx, i, i.to_bytes(4, "big"), 0, False),
                codec.encode_message(message(f"s{i}")),
            )
            for i in range(5)
        )
        peek = codec.Message(
            properties=t.Properties(message_id="p", reply_to=node),
            application_properties={"operation": "com.microsoft:peek-message"},
            body={"from-sequence-number": t.Long(0), "message-count": t.Int(10)},
            body_kind="value",
        )
        request = framing.encode_frame(
            0, t.Transfer(mtx, 5, b"peek", 0, True), codec.encode_message(peek)
        )
        client.sock.sendall(transfers + request)  # one write: most likely one read
        while True:
            frame = client.until(t.Transfer)
            if frame.body.handle is not None and not frame.body.more:
                reply = codec.decode_message(frame.payload)
                if (reply.application_properties or {}).get("statusCode") is not None:
                    break
    finally:
        client.close()
    assert reply.application_properties["statusCode"] == 200
    assert len(reply.body["messages"]) == 5


def test_settlements_in_one_read_each_keep_their_outcome_and_answer(daemon: Any) -> None:
    daemon.cli("queue", "create", "settles", check=True)
    for i in range(7):
        daemon.cli("send", "settles", "--body", f"s{i}", check=True)
    client = RawClient(amqp_port(daemon))
    try:
        rx = client.attach(True, "settles", settle_modes=(0, 1))  # peek-lock, answers awaited
        client.until(t.Attach)
        client.sock.sendall(framing.encode_frame(0, t.Flow(0, 5000, 0, 5000, rx, 0, 7)))
        ids = {}
        while len(ids) < 7:
            frame = client.until(t.Transfer)
            body = codec.decode_message(frame.payload).body
            ids[b"".join(body).decode()] = int(frame.body.delivery_id)

        def settle(first: str, state: Any, *, settled: bool = False, last: str = "") -> bytes:
            end = t.UInt(ids[last]) if last else None
            return framing.encode_frame(
                0, t.Disposition(True, t.UInt(ids[first]), end, settled, state)
            )

        client.sock.sendall(  # one write: most likely one read
            settle("s0", t.Accepted())  # with s2: one settle request, two answers
            + settle("s2", t.Accepted())
            + settle("s1", t.Modified(True))  # abandon, after them
            + settle("s3", t.Accepted(), last="s4")  # a range, then s6 with it
            + settle("s6", t.Accepted())
            + settle("s5", t.Accepted(), settled=True)  # not waited for: no answer
        )
        answers: dict[int, Any] = {}
        awaited = {ids[b] for b in ("s0", "s1", "s2", "s3", "s4", "s6")}
        while set(answers) < awaited:
            body = client.until(t.Disposition).body
            last = body.first if body.last is None else body.last
            for i in range(int(body.first), int(last) + 1):
                answers[i] = body.state
    finally:
        client.close()
    assert ids["s5"] not in answers
    assert {b: type(answers[ids[b]]).__name__ for b in ("s0", "s1", "s2", "s3", "s4", "s6")} == {
        "s0": "Accepted",
        "s1": "Modified",
        "s2": "Accepted",
        "s3": "Accepted",
        "s4": "Accepted",
        "s6": "Accepted",
    }
    left = daemon.cli("-o", "json", "peek", "settles", "--count", "10", check=True).jsonl()
    assert [(m["body"], m["delivery_count"]) for m in left] == [("s1", 1)]


def test_a_malformed_outcome_closes_the_connection_after_the_settlements_before_it(
    daemon: Any,
) -> None:
    daemon.cli("queue", "create", "badsettle", check=True)
    for i in range(3):
        daemon.cli("send", "badsettle", "--body", f"b{i}", check=True)
    client = RawClient(amqp_port(daemon))
    try:
        rx = client.attach(True, "badsettle", settle_modes=(0, 1))
        client.until(t.Attach)
        client.sock.sendall(framing.encode_frame(0, t.Flow(0, 5000, 0, 5000, rx, 0, 3)))
        ids = [int(client.until(t.Transfer).body.delivery_id) for _ in range(3)]
        bad = t.Rejected(t.UInt(5))  # an error that is no error composite
        client.sock.sendall(
            framing.encode_frame(0, t.Disposition(True, t.UInt(ids[0]), None, True, t.Accepted()))
            + framing.encode_frame(0, t.Disposition(True, t.UInt(ids[1]), None, True, bad))
        )
        close = client.until(t.Close).body
    finally:
        client.sock.close()
    assert str(close.error.condition) == "amqp:invalid-field"
    left = daemon.cli("-o", "json", "peek", "badsettle", "--count", "10", check=True).jsonl()
    assert [m["body"] for m in left] == ["b1", "b2"]  # the accept before it was made
