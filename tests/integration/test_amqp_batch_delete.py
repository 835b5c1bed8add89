"""``com.microsoft:batch-delete-messages`` on ``$management`` (the SDKs' preview
``delete_messages`` / ``DeleteMessagesAsync``): the oldest messages go without being
received, the answer counts them once they are on disk, and bad input is a 400."""

from __future__ import annotations

from typing import Any

from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.test_amqp_raw_protocol import amqp_port

FAR_FUTURE = t.Timestamp(253_402_300_799_000)


def bodies(daemon: Any, path: str) -> list[str]:
    got = daemon.cli("-o", "json", "peek", path, "--count", "50", check=True).jsonl()
    return [m["body"] for m in got]


def test_the_oldest_go_and_stay_gone_after_sigkill(daemon: Any) -> None:
    daemon.cli("queue", "create", "old", check=True)
    for i in range(6):
        daemon.cli("send", "old", "--body", f"m{i}", check=True)
    client = RawClient(amqp_port(daemon), mechanism="ANONYMOUS")
    try:
        node = "old/$management"
        tx, _ = client.management(node)
        op = "com.microsoft:batch-delete-messages"
        request = {"message-count": 4, "enqueued-time-utc": FAR_FUTURE}
        status, body = client.request(tx, node, op, request, 0)
        assert status["statusCode"] == 200, status
        assert body == {"message-count": 4}
        status, body = client.request(
            tx, node, op, {"message-count": 4, "enqueued-time-utc": t.Timestamp(0)}, 1
        )
        assert (status["statusCode"], body) == (200, {"message-count": 0})
        for delivery, bad in enumerate(({"message-count": 0}, {"message-count": "two"}), 2):
            status, _ = client.request(tx, node, op, bad, delivery)
            assert status["statusCode"] == 400, status
            assert "message-count" in status["statusDescription"]
    finally:
        client.close()
    daemon.kill()
    daemon.start()
    assert bodies(daemon, "old") == ["m4", "m5"]
