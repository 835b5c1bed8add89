"""Time travel figure against a running daemon (daemon/README.md §31.6): how long one
``clock advance`` takes over a namespace holding N scheduled messages spread over a year
(each at its own millisecond, so the advance runs one step per message), and how long
sending them took.

    sbctl daemon start --default-credits-per-second 0
    python tests/clock_bench.py "$(sbctl -o json daemon status | jq -r .socket)" 100000 [same]

With ``same`` every message is scheduled for one instant (one batch for all of them).

Bounded: N at most 1,000,000; it creates the namespace ``clock-bench`` (deleting an old one
first) and deletes it at the end. Prints one JSON object.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from sbctl.client import Client
from sbctl.core.errors import MessagingEntityNotFound
from sbctl.core.records import Message

NS = "clock-bench"
YEAR_MS = 365 * 24 * 3600 * 1000
BATCH = 1000


def main() -> None:
    sock, n = Path(sys.argv[1]), int(sys.argv[2])
    same = sys.argv[3:] == ["same"]
    if not 1 <= n <= 1_000_000:
        raise SystemExit("N must be 1 to 1,000,000")
    with Client(sock) as admin:
        try:
            admin.namespace_delete(NS)
        except MessagingEntityNotFound:
            pass
        admin.namespace_create(NS, credits_per_second=0)
    with Client(sock, namespace=NS) as sb:
        sb.queue_create("q")
        start_ms = time.time_ns() // 1_000_000 + 60_000
        step = 0 if same else (YEAR_MS - 120_000) // n
        t0 = time.perf_counter()
        for first in range(0, n, BATCH):
            batch = [
                Message(body=b"x" * 64, scheduled_enqueue_time_ms=start_ms + i * step)
                for i in range(first, min(n, first + BATCH))
            ]
            sb.send("q", batch)
        sent_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        moved = sb.clock_advance("365d")
        advance_s = time.perf_counter() - t1
        active = sb.queue_get("q")["active_message_count"]
    with Client(sock) as admin:
        admin.namespace_delete(NS)
    print(
        json.dumps(
            {
                "scheduled_messages": n,
                "instants": 1 if same else n,
                "send_s": round(sent_s, 2),
                "advance_365d_s": round(advance_s, 2),
                "activated": moved["activated"],
                "active_after": active,
                "messages_per_s": round(n / advance_s),
            }
        )
    )


if __name__ == "__main__":
    main()
