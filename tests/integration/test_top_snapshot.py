"""``sbctl top --once``: one snapshot for scripts, through a real daemon.

These tests use the project's own pytest plugin (``sbctl_namespace``): each gets a fresh
namespace on the session's daemon.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from sbctl import Client, Message
from sbctl.core.errors import ServerBusy
from sbctl.pytest_plugin import SbctlNamespace


def top(ns: SbctlNamespace, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **ns.env, "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", "top", "--once", "--interval", "0.2", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def snapshot(ns: SbctlNamespace, *args: str) -> dict[str, Any]:
    out = top(ns, "-o", "json", *args)
    assert out.returncode == 0, out.stderr
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def by_name(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in rows}


def fill(ns: SbctlNamespace) -> None:
    sb = ns.client
    sb.queue_create("orders")
    sb.queue_create("empty")
    sb.send("orders", [Message(body=f"order {i}".encode()) for i in range(5)])
    sb.schedule("orders", [Message(body=b"later")], at_ms=4_102_444_800_000)
    [first, second] = sb.receive("orders", 2)
    sb.dead_letter("orders", [first.lock_token], reason="bad")
    sb.defer("orders", [second.lock_token])
    sb.topic_create("events")
    sb.subscription_create("events", "audit")
    sb.send("events", [Message(body=b"e")])


@pytest.mark.sbctl_namespace(sku="premium", partitions=2)
def test_json_snapshot_has_counts_partitions_faults_and_pairing_state(
    sbctl_namespace: SbctlNamespace,
) -> None:
    ns = sbctl_namespace
    fill(ns)
    ns.faults.add("orders", [1])
    snap = snapshot(ns)
    assert snap["namespace"] == ns.name
    rows = by_name(snap["entities"])
    assert set(rows) == {"orders", "empty", "events", "events/subscriptions/audit"}
    orders = rows["orders"]
    # Partition 1 is faulted: counts are those of the reachable partition 0 (Azure's rule).
    assert orders["partitions"] == 2 and orders["partitions_available"] == 1
    assert orders["availability"] == "Limited"
    assert rows["empty"]["partitions_available"] == 2
    assert rows["events/subscriptions/audit"]["kind"] == "subscription"
    ns_row = by_name(snap["namespaces"])[ns.name]
    assert ns_row["faults"] == 1 and ns_row["pairing_state"] is None
    assert [f["entity"] for f in snap["faults"]] == ["orders"]
    ns.faults.clear()
    rows = by_name(snapshot(ns)["entities"])
    assert rows["orders"]["partitions_available"] == 2
    assert (rows["orders"]["active"], rows["orders"]["dead_lettered"]) == (4, 1)
    assert (rows["orders"]["scheduled"], rows["orders"]["deferred"]) == (1, 1)
    assert rows["events/subscriptions/audit"]["active"] == 1


def test_table_snapshot_shows_the_namespace_and_its_entities(
    sbctl_namespace: SbctlNamespace,
) -> None:
    fill(sbctl_namespace)
    out = top(sbctl_namespace)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    orders = next(line for line in lines if line.lstrip().startswith("orders "))
    assert orders.split()[:6] == ["orders", "queue", "4", "1", "1", "1"]
    assert any(line.lstrip().startswith("▶") and sbctl_namespace.name in line for line in lines)
    assert f"entities of {sbctl_namespace.name}" in out.stdout
    assert "q quit" not in out.stdout, "no key help in a one-off snapshot"


def test_rates_come_from_two_samples(sbctl_namespace: SbctlNamespace) -> None:
    ns = sbctl_namespace
    ns.client.queue_create("busy")
    env = {**os.environ, **ns.env}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sbctl.cli.app", "-o", "json", "top", "--once", "--interval=1"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        with Client(ns.daemon.socket, namespace=ns.name) as sender:
            for _ in range(40):  # 2 s of sends, around the 1 s between the two samples
                sender.send("busy", [Message(body=b"x")] * 5)
                assert sender.receive("busy", 2, mode="receive-and-delete")
                time.sleep(0.05)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    busy = by_name(json.loads(out)["entities"])["busy"]
    assert busy["incoming_per_s"] > 10
    assert 0 < busy["outgoing_per_s"] < busy["incoming_per_s"]


def test_watching_costs_the_namespace_no_credits(sbctl_namespace: SbctlNamespace) -> None:
    ns = sbctl_namespace
    ns.client.queue_create("orders")
    before = ns.credits.get()["consumed"]["since_start"]
    snapshot(ns)
    snapshot(ns)
    assert ns.credits.get()["consumed"]["since_start"] == before


def test_throttled_requests_show_in_the_namespace_row(sbctl_namespace: SbctlNamespace) -> None:
    ns = sbctl_namespace
    ns.client.queue_create("orders")
    ns.credits.set(5)
    with (
        Client(ns.daemon.socket, namespace=ns.name, retry_total=0) as sb,
        pytest.raises(ServerBusy),
    ):
        for _ in range(100):
            sb.send("orders", [Message(body=b"x")])
    row = by_name(snapshot(ns)["namespaces"])[ns.name]
    assert row["throttled_requests"] >= 1
    assert row["credits_per_second"] == 5


def test_bad_input_is_one_line(sbctl_namespace: SbctlNamespace) -> None:
    out = top(sbctl_namespace, "--sort", "colour")
    assert out.returncode == 5
    assert out.stderr.strip().splitlines() == [
        "error: --sort: unknown column 'colour'; one of name, kind, active, dead_lettered, "
        "scheduled, deferred, incoming_per_s, outgoing_per_s, size_bytes, partitions, "
        "availability"
    ]
    out = top(sbctl_namespace, "-n", "nosuchnamespace")
    assert out.returncode == 3
    assert out.stderr.strip() == "error: namespace 'nosuchnamespace' does not exist"
    env = {**os.environ, **sbctl_namespace.env}
    live = subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", "top"],
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=30,
    )
    assert live.returncode == 5
    assert "needs a terminal; use --once" in live.stderr
