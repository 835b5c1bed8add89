"""Daemon CPU per message over AMQP (azure-servicebus) and over the Unix socket
(sbctl.client), against a running daemon; a stand-in until `sbctl bench --amqp`.

    sbctl daemon start --amqp-port 0 --default-credits-per-second 0
    sbctl queue create uq && sbctl queue create aq
    python tests/amqp_cpu_per_message.py "$(sbctl -o json daemon status | jq -r .socket)" \\
        "$(sbctl namespace connection-string)" 5000

Prints the daemon's CPU µs per message (from `daemon status` cpu_seconds) for batch-100
sends and for receive + complete on each protocol, and the SDK's msg/s.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from azure.servicebus import ServiceBusClient, ServiceBusMessage

from sbctl.client import Client
from sbctl.codec import Message


def main() -> None:
    sock, conn_str, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    unix = Client(Path(sock))

    def cpu() -> float:
        return float(unix.status()["cpu_seconds"])

    body = b"x" * 1024
    out: dict[str, float] = {}
    c0 = cpu()
    for _ in range(n // 100):
        unix.send("uq", [Message(body=body) for _ in range(100)])
    out["unix_send_us"] = (cpu() - c0) / n * 1e6
    c0, got = cpu(), 0
    while got < n:
        received = unix.receive("uq", 100)
        unix.complete("uq", [str(m.lock_token) for m in received])
        got += len(received)
    out["unix_receive_complete_us"] = (cpu() - c0) / n * 1e6
    with ServiceBusClient.from_connection_string(conn_str) as client:
        with client.get_queue_sender("aq") as sender:
            c0, t0 = cpu(), time.time()
            for _ in range(n // 100):
                batch = sender.create_message_batch()
                for _ in range(100):
                    batch.add_message(ServiceBusMessage(body))
                sender.send_messages(batch)
            out["amqp_send_us"] = (cpu() - c0) / n * 1e6
            out["amqp_send_msgs_per_s"] = n / (time.time() - t0)
        with client.get_queue_receiver("aq", prefetch_count=100) as receiver:
            c0, t0, got = cpu(), time.time(), 0
            while got < n:
                messages = receiver.receive_messages(max_message_count=100, max_wait_time=5)
                for m in messages:
                    receiver.complete_message(m)
                got += len(messages)
            out["amqp_receive_complete_us"] = (cpu() - c0) / n * 1e6
            out["amqp_receive_complete_msgs_per_s"] = n / (time.time() - t0)
    print(json.dumps({k: round(v, 1) for k, v in out.items()}))


if __name__ == "__main__":
    main()
