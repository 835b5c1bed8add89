"""``$management`` requests that carry a txn-id (AMQP transactional-state on the request
transfer, as the Java SDK sends them and the .NET SDK sends every request inside a
TransactionScope): dispositions, cancelling a scheduled message and session state are held
until the discharge; reads, receives and lock renewals are served at once; scheduling is
refused with the reason (daemon/README.md §29.7). Nothing runs outside its transaction."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.test_amqp_raw_protocol import amqp_port

NODE = "txq/$management"


class Txn:
    """A coordinator link on a raw client: declare and discharge."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        client.handles += 1
        self.handle = client.handles
        self.n = 0
        attach = t.Attach(
            "coord", self.handle, False, 0, 0, t.Source("c"),
            t.Coordinator(["amqp:local-transactions"]), None, None, 0,
        )  # fmt: skip
        client.sock.sendall(framing.encode_frame(0, attach))
        client.until(t.Attach)

    def control(self, body: Any) -> Any:
        self.n += 1
        msg = codec.encode_message(codec.Message(body=body, body_kind="value"))
        transfer = t.Transfer(self.handle, 10_000 + self.n, self.n.to_bytes(4, "big"), 0, False)
        self.client.sock.sendall(framing.encode_frame(0, transfer, msg))
        return self.client.until(t.Disposition).body.state

    def declare(self) -> bytes:
        txn_id: bytes = self.control(t.Declare()).txn_id
        return txn_id


def bodies(daemon: Any) -> list[str]:
    return [r["body"] for r in peek_rows(daemon)]


def test_management_requests_inside_a_transaction(daemon: Any) -> None:
    daemon.cli("queue", "create", "txq", check=True)
    daemon.cli("send", "txq", "--body", "a", check=True)
    client = RawClient(amqp_port(daemon))
    try:
        txn = Txn(client)
        tx, _rx = client.management(NODE)
        ids = iter(range(1000))

        def request(op: str, body: Any, txn_id: Any) -> tuple[dict[Any, Any], Any]:
            return client.request(tx, NODE, f"com.microsoft:{op}", body, next(ids), txn=txn_id)

        # Scheduling is refused with the reason; nothing is scheduled.
        at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        msg = codec.Message(
            message_annotations={t.Symbol("x-opt-scheduled-enqueue-time"): t.Timestamp(
                int(at.timestamp() * 1000))},
            body=[b"later"],
        )  # fmt: skip
        scheduled = {"messages": [{"message-id": "s1", "message": codec.encode_message(msg)}]}
        t1 = txn.declare()
        status, _ = request("schedule-message", scheduled, t1)
        assert status["statusCode"] == 400 and status["errorCondition"] == "amqp:not-allowed"
        assert (
            "com.microsoft:schedule-message cannot be part of a transaction"
            in (status["statusDescription"])
        )
        assert "ScheduledEnqueueTime" in status["statusDescription"]
        assert bodies(daemon) == ["a"]
        # A read is served; an unknown transaction is refused.
        status, _ = request("peek-message", {"from-sequence-number": 0, "message-count": 5}, t1)
        assert status["statusCode"] == 200
        status, _ = request("peek-message", {"message-count": 1}, b"nope")
        assert status["errorCondition"] == "amqp:transaction:unknown-id"

        # update-disposition: held until the commit; dropped by a rollback.
        rx = client.attach(True, "txq")
        client.until(t.Attach)
        client.sock.sendall(framing.encode_frame(0, t.Flow(0, 5000, 0, 5000, rx, 0, 1)))
        token = uuid.UUID(bytes_le=bytes(client.until(t.Transfer).body.delivery_tag))
        status, body = request("renew-lock", {"lock-tokens": [token]}, t1)  # served at once
        assert status["statusCode"] == 200 and len(body["expirations"]) == 1
        complete = {"disposition-status": "completed", "lock-tokens": [token]}
        status, _ = request("update-disposition", complete, t1)
        assert status["statusCode"] == 200
        assert isinstance(txn.control(t.Discharge(t1, True)), t.Accepted)  # rollback
        assert bodies(daemon) == ["a"]
        t2 = txn.declare()
        status, _ = request("update-disposition", complete, t2)
        assert status["statusCode"] == 200
        assert bodies(daemon) == ["a"]  # not before the commit
        assert isinstance(txn.control(t.Discharge(t2, False)), t.Accepted)
        assert bodies(daemon) == []
    finally:
        client.close()


def test_cancelling_and_session_state_inside_a_transaction_wait_for_the_commit(
    daemon: Any,
) -> None:
    daemon.cli("queue", "create", "txq", "--enable-session", check=True)
    daemon.cli(
        "send", "txq", "--body", "later", "--session-id", "S",
        "--scheduled-enqueue-time", "+1h", check=True,
    )  # fmt: skip
    (seq,) = [m["sequence_number"] for m in peek_rows(daemon)]
    client = RawClient(amqp_port(daemon))
    try:
        txn = Txn(client)
        tx, _rx = client.management(NODE)
        ids = iter(range(1000))

        def request(op: str, body: Any, txn_id: Any) -> int:
            status, _ = client.request(tx, NODE, f"com.microsoft:{op}", body, next(ids), txn=txn_id)
            code: int = status["statusCode"]
            return code

        def state() -> Any:
            return daemon.cli(
                "-o", "json", "session", "get-state", "txq", "S", check=True
            ).json()["state"]  # fmt: skip

        for commit in (False, True):
            t1 = txn.declare()
            assert request("cancel-scheduled-message", {"sequence-numbers": [seq]}, t1) == 200
            body = {"session-id": "S", "session-state": b"step-2"}
            assert request("set-session-state", body, t1) == 200
            assert len(peek_rows(daemon)) == 1 and state() is None  # not before the commit
            assert isinstance(txn.control(t.Discharge(t1, not commit)), t.Accepted)
            assert len(peek_rows(daemon)) == (0 if commit else 1)
            assert (state() is not None) == commit
    finally:
        client.close()


def peek_rows(daemon: Any) -> list[Any]:
    rows: list[Any] = daemon.cli("-o", "json", "peek", "txq", "--count", "10", check=True).jsonl()
    return rows
