"""``$management`` requests that carry a txn-id (AMQP transactional-state on the request
transfer, as the Java and .NET SDKs send them): a disposition is held until the discharge,
reads are served, scheduling and the other writes are refused with the reason
(daemon/README.md §29.7); never run outside the transaction."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from sbctl.amqp import codec, framing
from sbctl.amqp import types as t
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
    rows = daemon.cli("-o", "json", "peek", "txq", "--count", "10", check=True).jsonl()
    return [r["body"] for r in rows]


def test_management_requests_inside_a_transaction(daemon: Any) -> None:
    daemon.cli("queue", "create", "txq", check=True)
    daemon.cli("send", "txq", "--body", "a", check=True)
    client = RawClient(amqp_port(daemon))
    try:
        txn = Txn(client)
        tx, _rx = client.management(NODE)
        ids = iter(range(1000))

        def request(op: str, body: Any, txn_id: Any) -> tuple[dict[Any, Any], Any]:
            return client.request(tx, NODE, f"com.microsoft:{op}", body, next(ids), txn_id)

        # Scheduling and cancelling are refused with the reason; nothing is scheduled.
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
        status, _ = request("cancel-scheduled-message", {"sequence-numbers": [1]}, t1)
        assert status["statusCode"] == 400
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
