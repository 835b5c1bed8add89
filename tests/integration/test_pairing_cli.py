"""Paired namespaces through the real daemon and the real CLI (daemon/README.md §0.3; the issue's
acceptance): a faulted primary's sends fail over to backlog queues, pings show, the syphon
brings every message back exactly once with its properties, a deleted secondary faults
the pairing, and the pairing survives a restart.

The daemon's clock is real: intervals are short (failover 1 s, ping 1 s) and every wait
polls ``pair-status`` with a deadline; nothing asserts a duration.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

from conftest import Daemon
from sbctl.client import AsyncClient

P = "primary-ns"
S = "second-ns"
N = 12  # plain messages sent while the primary is down


def until(what: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Poll ``what`` until it returns something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s: {what}")
        time.sleep(0.1)


def status(d: Daemon) -> dict[str, Any]:
    result: dict[str, Any] = d.cli("-o", "json", "namespace", "pair-status", P, check=True).json()
    return result


def setup(d: Daemon, syphon: bool = True) -> dict[str, Any]:
    d.cli("namespace", "create", P, check=True)
    d.cli("namespace", "create", S, check=True)
    d.cli("-n", P, "queue", "create", "orders", check=True)
    d.cli("-n", P, "queue", "create", "sessions", "--enable-session", check=True)
    args = ["--backlog-queue-count", "3", "--failover-interval", "1s"]
    args += ["--ping-primary-interval", "1s"] + (["--enable-syphon"] if syphon else [])
    result: dict[str, Any] = d.cli(
        "-o", "json", "namespace", "pair", P, "--secondary", S, *args, check=True
    ).json()
    return result


def test_failover_pings_syphon_and_propagation(daemon: Daemon) -> None:
    paired = setup(daemon)
    assert paired["state"] == "Active"
    assert paired["failover_interval"] == "PT1S" and paired["enable_syphon"] is True
    queues = daemon.cli("-o", "json", "-n", S, "queue", "list", check=True).json()
    backlog = sorted(q["name"] for q in queues)
    assert backlog == [f"{P}/x-servicebus-transfer/{i}" for i in range(3)]

    daemon.cli("-n", P, "fault", "add", check=True)  # the whole primary is down
    # The client's retries outlast FailoverInterval: the first send succeeds, diverted.
    lines = "\n".join(json.dumps({"body": f"m{k}", "message_id": f"m{k}"}) for k in range(N))
    daemon.cli("-n", P, "send", "orders", "--input", "-", input=lines + "\n", check=True)
    daemon.cli(
        "-n", P, "send", "sessions", "--body", "s", "--session-id", "s-1",
        "--time-to-live", "PT10M", check=True,
    )  # fmt: skip
    daemon.cli(
        "-n", P, "send", "orders", "--body", "later", "--scheduled-enqueue-time", "+1h",
        check=True,
    )  # fmt: skip
    st = status(daemon)
    assert st["state"] == "FailedOver"
    assert {e["entity"] for e in st["entities"]} == {"orders", "sessions"}
    assert st["diverted"] == N + 2 and st["pending"] == N + 2
    until(lambda: status(daemon)["pings_sent"] >= 2)  # pings while failed over
    assert status(daemon)["pings_failed"] >= 2

    daemon.cli("-n", P, "fault", "clear", check=True)
    st = until(lambda: (s := status(daemon))["moved"] == N + 2 and s)
    assert st["state"] == "Active" and st["pending"] == 0
    assert st["pings_sent"] > st["pings_failed"]

    # Every message once, in its original queue, its properties restored; no ping.
    got = daemon.cli(
        "-o", "json", "-n", P, "receive", "orders", "--count", "100", "--mode",
        "receive-and-delete", check=True,
    ).jsonl()  # fmt: skip
    assert sorted(m["body"] for m in got) == sorted(f"m{k}" for k in range(N))
    for m in got:
        assert m["content_type"] != "application/vnd.ms-servicebus-ping"
        assert not any(k.startswith("x-ms-") for k in m["application_properties"])
    peeked = daemon.cli("-o", "json", "-n", P, "peek", "orders", "--count", "10").jsonl()
    assert [(m["body"], m["state"]) for m in peeked] == [("later", "scheduled")]
    assert peeked[0]["scheduled_enqueue_time_utc"] is not None
    [s] = daemon.cli(
        "-o", "json", "-n", P, "receive", "sessions", "--session-id", "s-1", "--count", "5",
        check=True,
    ).jsonl()  # fmt: skip
    assert (s["body"], s["session_id"], s["time_to_live"]) == ("s", "s-1", 600.0)
    for name in backlog:
        assert daemon.cli("-o", "json", "-n", S, "peek", name, check=True).jsonl() == []

    # daemon/README.md §0.3.6: deleting the secondary faults the pairing within 5 s.
    daemon.cli("namespace", "delete", S, check=True)
    st = until(lambda: (s := status(daemon))["state"] == "Faulted" and s, timeout=5)
    assert "deleted" in st["fault_reason"]
    refused = daemon.cli("-n", P, "--retry-total", "0", "send", "orders", "--body", "x")
    assert refused.code == 9 and "faulted" in refused.stderr
    table = daemon.cli("namespace", "pair-status", P, check=True).stdout
    assert "Faulted" in table and "deleted" in table


def test_pairing_survives_a_restart(daemon: Daemon) -> None:
    setup(daemon, syphon=False)
    daemon.cli("-n", P, "fault", "add", "--entity", "orders", check=True)
    daemon.cli("-n", P, "send", "orders", "--body", "x", check=True)
    assert status(daemon)["diverted"] == 1
    daemon.stop()
    daemon.start()
    st = status(daemon)
    assert (st["secondary"], st["failover_interval"], st["diverted"]) == (S, "PT1S", 1)
    assert st["state"] == "Active" and st["pending"] == 1  # faults went with the restart

    async def read() -> dict[str, Any]:
        async with AsyncClient(daemon.socket) as sb:
            return await sb.namespace_pair_status(P)

    assert asyncio.run(read())["diverted"] == 1
    unpaired = daemon.cli("-o", "json", "namespace", "unpair", P, check=True).json()
    assert unpaired == {"unpaired": P, "secondary": S, "pending": 1}
    missing = daemon.cli("namespace", "pair-status", P)
    assert missing.code == 3 and "not paired" in missing.stderr
