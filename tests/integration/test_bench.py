"""``sbctl bench`` through the real CLI against a real daemon.

Small runs only, and no timing assertions (daemon/README.md §26: performance is printed, not
asserted):
the figures exist and are positive, and the throwaway namespace is gone afterwards.
"""

from __future__ import annotations

import contextlib
import math
import socket
from typing import Any

from sbctl.bench import namespace_name, percentile, split
from sbctl.bench_targets import cpu_budget
from sbctl.core.names import validate_namespace_name

RATES = ("send_msgs_per_s", "receive_msgs_per_s")
LATENCIES = ("send_p50_ms", "send_p99_ms", "receive_p50_ms", "receive_p99_ms")
RAW = ("raw_fsync_per_s", "raw_fsync_batch100_records_per_s", "raw_socket_rtt_per_s")
RATIOS = ("send_vs_raw_fsync", "send_vs_raw_batch100")
CPU = ("send_client_cpu_us_per_msg", "receive_client_cpu_us_per_msg")


def _positive(data: dict[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        value = data.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool), (key, value)
        assert math.isfinite(value) and value > 0, (key, value)


def _namespaces(daemon: Any) -> list[str]:
    return [ns["name"] for ns in daemon.cli("-o", "json", "namespace", "list", check=True).json()]


def test_bench_reports_figures_and_cleans_up(daemon: Any) -> None:
    before = _namespaces(daemon)
    result = daemon.cli(
        "-o", "json", "bench",
        "--messages", "500", "--batch", "10", "--clients", "2", "--skip-start",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    data = result.json()
    _positive(data, RATES + LATENCIES + RAW + RATIOS + CPU)
    assert "daemon_start_ms" not in data
    assert data["messages"] == 500
    assert data["size"] == 1024
    assert data["batch"] == 10
    assert data["clients"] == 2
    assert data["partitioned"] is False
    assert data["send_p50_ms"] <= data["send_p99_ms"]
    assert data["namespace"].startswith("bench-")
    assert _namespaces(daemon) == before


def test_bench_partitioned_without_ceilings(daemon: Any) -> None:
    result = daemon.cli(
        "-o", "json", "bench",
        "--messages", "203", "--batch", "7", "--clients", "3", "--size", "100",
        "--partitioned", "--skip-raw", "--skip-start",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    data = result.json()
    _positive(data, RATES + LATENCIES)
    assert data["partitioned"] is True
    for key in RAW + RATIOS + ("daemon_start_ms",):
        assert key not in data
    assert data["namespace"] not in _namespaces(daemon)


def test_bench_table_output(daemon: Any) -> None:
    result = daemon.cli("bench", "--messages", "50", "--batch", "5", "--skip-raw", "--skip-start")
    assert result.code == 0, result.stderr
    assert "msgs/s" in result.stdout


def test_bench_measures_daemon_start(daemon: Any) -> None:
    """The private daemons it starts take free ports: a daemon of the user's own holding the
    default AMQP and HTTP ports (5672, 5300; held here by plain sockets) is no obstacle."""
    with contextlib.ExitStack() as held:
        for port in (5672, 5300):
            sock = held.enter_context(socket.socket())
            with contextlib.suppress(OSError):  # already taken: the case under test anyway
                sock.bind(("127.0.0.1", port))
                sock.listen()
        result = daemon.cli("-o", "json", "bench", "--messages", "20", "--skip-raw")
        assert result.code == 0, result.stderr
        _positive(result.json(), ("daemon_start_ms",))
        res = daemon.cli("-o", "json", "bench", "--stored", "300", "--size", "10")
        assert res.code == 0, res.stderr


def test_bench_without_daemon_is_one_clear_error(daemon_factory: Any) -> None:
    idle = daemon_factory(start=False)
    result = idle.cli("bench", "--messages", "10", "--skip-raw", "--skip-start")
    assert result.code == 9  # ServiceCommunicationProblem
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "not running" in lines[0], result.stderr


def test_helpers() -> None:
    for _ in range(20):
        assert validate_namespace_name(namespace_name())
    assert split(10, 3) == [4, 3, 3]
    assert split(2, 4) == [1, 1, 0, 0]
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([], 50) == 0.0


def test_bench_stored_mode_reports_memory_and_restarts(daemon: Any) -> None:
    """``--stored`` fills a private daemon (not the running one) and restarts it twice."""
    res = daemon.cli("-o", "json", "bench", "--stored", "3000", "--size", "100")
    assert res.code == 0, res.stderr
    out = res.json()
    assert out["recovered_messages"] == 3000  # nothing lost through SIGKILL + full scan
    for key in ("fill_msgs_per_s", "restart_s", "restart_full_scan_s", "idle_rss_mb"):
        assert out[key] > 0, key
    assert "stored_rss_above_idle_mb" in out
    listed = daemon.cli("-o", "json", "namespace", "list").json()
    assert [n["name"] for n in listed] == ["sbemulatorns"]  # the running daemon was untouched


def test_bench_targets_prints_each_figure_with_its_ceiling_ratio_and_target(daemon: Any) -> None:
    res = daemon.cli("-o", "json", "bench", "--targets", "--messages", "400", "--stored", "3000")
    assert res.code == 0, res.stderr
    rows = {row["figure"]: row for row in res.json()["targets"]}
    assert list(rows) == [
        "send, batches of 100",
        "send, 32 concurrent single senders",
        "receive + complete, batches of 100",
        "daemon memory per stored message",
    ]
    for row in rows.values():
        assert row["value"] > 0 or row["unit"] == "B", row  # (RSS can shrink on a small fill)
        if row["ceiling"] is not None:
            assert row["ceiling_value"] > 0
            assert math.isclose(row["ratio"], row["value"] / row["ceiling_value"], rel_tol=0.01)
        measured = row["value"] if row["ratio"] is None else row["ratio"]
        assert row["met"] == (
            measured >= row["target"] if row["at_least"] else measured <= row["target"]
        )
    assert rows["send, batches of 100"]["target"] == 0.5
    assert rows["send, 32 concurrent single senders"]["target"] == 5.0
    for label in list(rows)[:3]:  # each throughput figure with its CPU and what it leaves
        _positive(rows[label], ("client_cpu_us", "daemon_cpu_us"))
        assert rows[label]["cpu_budget_us"] >= 0  # (0 when the syncs alone miss the target)
    assert "cpu_budget_us" not in rows["daemon memory per stored message"]
    # beside the 32 senders: a round trip that does no work, from as many connections
    senders = rows["send, 32 concurrent single senders"]
    _positive(senders, ("round_trip_client_cpu_us", "round_trip_daemon_cpu_us"))
    assert [k for k in rows["send, batches of 100"] if k.startswith("round_trip")] == []
    assert _namespaces(daemon) == ["sbemulatorns"]  # the throwaway namespaces are gone
    table = daemon.cli("bench", "--targets", "--messages", "200", "--stored", "2000")
    assert table.code == 0, table.stderr
    assert "ceiling" in table.stdout and "32 concurrent single senders" in table.stdout
    assert "clients + daemon" in table.stdout and "a bare round trip" in table.stdout


def test_cpu_budgets_follow_from_the_ceilings() -> None:
    figures = {"fsync100": 150_000.0, "fsync1": 4_000.0}
    # batches of 100 at 0.5x: the sync takes half the time, the CPUs the other half
    assert math.isclose(cpu_budget("batch100", 0.5, figures, 2), 1e6 / 150_000)
    assert math.isclose(cpu_budget("batch100", 0.25, figures, 2), 3 * 1e6 / 150_000)
    # 32 senders at 5x the single-sync rate on 2 CPUs: 2 s of CPU for 20,000 messages
    assert math.isclose(cpu_budget("senders32", 5.0, figures, 2), 100.0)
    # 60,000/s with one request in flight, less each batch's sync (2.5 us a message)
    assert math.isclose(cpu_budget("receive100", 60_000.0, figures, 2), 1e6 / 60_000 - 2.5)
    assert cpu_budget("stored_bytes", 40.0, figures, 2) is None
    # a disk of 500 syncs/s: 20 us of sync a message, over the 16.7 that 60,000/s allows
    assert cpu_budget("receive100", 60_000.0, {**figures, "fsync1": 500.0}, 2) == 0.0
