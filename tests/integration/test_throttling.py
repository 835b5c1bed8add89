"""Throttling through the real daemon, client and CLI (issue 5 acceptance).

The daemon's clock is real here, so these tests assert what holds whatever the timing:
totals, the exact text, counts equal to what was accepted. No timed asserts.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sbctl.client import AsyncClient
from sbctl.core.errors import SbctlError, ServerBusy
from sbctl.core.records import Message

EXACT = (
    "The request was terminated because the entity is being throttled. Error code: 50009. "
    "Please wait 2 seconds and try again."
)
N = 1500


def _at_period_start() -> None:
    """Sleep to just after a wall-clock second boundary (the daemon's credit period)."""
    time.sleep(1.0 - time.time() % 1.0 + 0.005)


async def _burst(daemon: Any, namespace: str, retry_total: int) -> list[Any]:
    """N sends of one message each, pipelined on one connection."""
    async with AsyncClient(daemon.socket, namespace=namespace, retry_total=retry_total) as sb:
        _at_period_start()
        sends = [sb.send("q", [Message(body=b"m%d" % i)]) for i in range(N)]
        return await asyncio.gather(*sends, return_exceptions=True)


def _standard(daemon: Any, name: str, credits_per_second: int = 1000) -> None:
    with daemon.client() as admin:
        admin.namespace_create(name, credits_per_second=credits_per_second)  # Azure's: 1000
    with daemon.client(name) as sb:
        sb.queue_create("q")


def test_burst_without_retries_is_throttled_whole(daemon: Any) -> None:
    # 200 credits a second: the burst is over them whatever the machine's speed (at 1,000, a
    # busy machine once spread the 1,500 sends over two credit periods and none was refused).
    _standard(daemon, "burstns", credits_per_second=200)
    results = asyncio.run(_burst(daemon, "burstns", retry_total=0))
    accepted = [r for r in results if isinstance(r, list)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(accepted) + len(refused) == N
    assert refused, "1,500 requests sent at once must exhaust 200 credits a second"
    assert all(isinstance(e, ServerBusy) for e in refused), refused[:3]
    assert {e.message for e in refused if isinstance(e, SbctlError)} == {EXACT}
    with daemon.client("burstns") as sb:
        assert sb.queue_get("q")["active_message_count"] == len(accepted)
    credits = daemon.cli("credits", "burstns", "-o", "json", check=True).json()
    # >=: the queue_get above may itself have been throttled once (and retried).
    assert credits["throttled_requests"] >= len(refused)
    assert credits["consumed"]["since_start"]["data"] == len(accepted)


def test_burst_with_default_retries_all_arrive(daemon: Any) -> None:
    _standard(daemon, "retryns")
    results = asyncio.run(_burst(daemon, "retryns", retry_total=3))
    assert all(isinstance(r, list) for r in results), [
        r for r in results if not isinstance(r, list)
    ][:3]
    with daemon.client("retryns") as sb:
        assert sb.queue_get("q")["active_message_count"] == N


def test_credits_json_shows_management_cost(daemon: Any) -> None:
    daemon.cli("namespace", "create", "mgmtns", "--credits-per-second", "1000", check=True)
    before = daemon.cli("credits", "mgmtns", "-o", "json", check=True).json()
    assert before["credits_per_second"] == 1000
    assert {"remaining", "period_ms_left", "consumed", "throttled_requests"} <= set(before)
    assert before["consumed"]["since_start"]["management"] == 0
    daemon.cli("-n", "mgmtns", "queue", "create", "q", check=True)
    after = daemon.cli("-n", "mgmtns", "credits", "-o", "json", check=True).json()
    assert after["consumed"]["since_start"]["management"] == 10


def test_cli_no_retry_exits_throttled(daemon: Any) -> None:
    """A saturating load keeps every period's credits spent; the CLI's send then fails
    with exit 8 and the broker's message (its JSON error carries 50009)."""
    _standard(daemon, "busyns")
    stop = threading.Event()

    def hammer() -> None:
        async def run() -> None:
            async with AsyncClient(daemon.socket, namespace="busyns", retry_total=0) as sb:
                batch = [Message(body=b"x")] * 100
                while not stop.is_set():
                    await asyncio.gather(
                        *(sb.send("q", batch) for _ in range(20)), return_exceptions=True
                    )

        asyncio.run(run())

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    try:
        # The load leaves a few ms per period: once the daemon reports the hammer throttled,
        # try until a send lands in a spent period (polled, not a fixed number of tries, so a
        # slow or a fast machine both get there).
        deadline = time.monotonic() + 60
        with daemon.client("busyns") as sb:
            while not sb.namespace_credits("busyns")["throttled_requests"]:
                assert time.monotonic() < deadline, "the hammer was never throttled"
                time.sleep(0.01)
        while True:
            result = daemon.cli(
                "--no-retry", "-n", "busyns", "-o", "json", "send", "q", "--body", "b"
            )
            if result.code != 0 or time.monotonic() > deadline:
                break
    finally:
        stop.set()
        thread.join(timeout=30)
    assert result.code == 8, result
    error = json.loads(result.stderr)["error"]
    assert error == {"code": "ServerBusy", "message": EXACT, "error_number": 50009}


def _watch(daemon: Any, *args: str) -> tuple[int, str]:
    """Run a ``--watch`` command until its first frame, then Ctrl-C it (killed and reaped
    if it does not stop)."""
    here = str(Path(__file__).parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    from test_watch_cli import watched

    code, out, err = watched(daemon, signal.SIGINT, *args, "--watch")
    assert not err, err
    return code, out


def test_watch_views_stop_on_ctrl_c(daemon: Any) -> None:
    code, out = _watch(daemon, "credits")
    assert code == 0
    assert "left in this period" in out and "unlimited" in out
    code, out = _watch(daemon, "-o", "json", "credits")
    assert code == 0
    assert json.loads(out.splitlines()[0])["namespace"] == "sbemulatorns"


def test_premium_metrics_and_scaling_cli(daemon: Any) -> None:
    daemon.cli(
        "namespace", "create", "premns", "--sku", "premium", "--ops-per-unit", "500", check=True
    )
    metrics = daemon.cli("-o", "json", "namespace", "metrics", "premns", check=True).json()
    assert {"throttled_requests", "requests_served", "cpu_percent", "rss_bytes"} <= set(metrics)
    table = daemon.cli("namespace", "metrics", "premns", check=True).stdout
    assert "throttled requests" in table and "daemon memory" in table
    code, out = _watch(daemon, "namespace", "metrics", "premns")
    assert code == 0 and "requests served" in out
    shown = daemon.cli(
        "-o", "json", "namespace", "update", "premns", "--capacity", "4", check=True
    ).json()
    assert shown["capacity"] == 4
    credits = daemon.cli("-o", "json", "credits", "premns", check=True).json()
    assert credits["ops_per_second"] == 2000
    refused = daemon.cli("namespace", "update", "premns", "--credits-per-second", "5")
    assert refused.code == 5
