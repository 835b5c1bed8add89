"""``sbctl bench --amqp`` through the real CLI against a real daemon: the AMQP and Unix
socket figures side by side, and the held-connections memory figure.

Small runs only, no timing assertions (performance is printed, not asserted): the figures
exist and are positive, and the throwaway namespace is gone afterwards.
"""

from __future__ import annotations

import math
from typing import Any

PHASES = ("unix_send", "unix_receive", "amqp_send", "amqp_receive")


def _positive(data: dict[str, Any], keys: list[str]) -> None:
    for key in keys:
        value = data.get(key)
        assert isinstance(value, int | float) and not isinstance(value, bool), (key, value)
        assert math.isfinite(value) and value > 0, (key, value)


def _namespaces(daemon: Any) -> list[str]:
    return [ns["name"] for ns in daemon.cli("-o", "json", "namespace", "list", check=True).json()]


def test_bench_amqp_reports_both_protocols_and_cleans_up(daemon: Any) -> None:
    before = _namespaces(daemon)
    result = daemon.cli(
        "-o", "json", "bench", "--amqp", "--messages", "1050", "--batch", "100", "--size", "300",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    data = result.json()
    _positive(data, [f"{p}_msgs_per_s" for p in PHASES])
    # cpu_seconds is read from the process CPU clock (exact, not 10 ms ticks): even a
    # small phase costs the daemon a measurable time.
    _positive(data, [f"{p}_daemon_cpu_us_per_msg" for p in PHASES])
    assert (data["messages"], data["batch"], data["size"]) == (1050, 100, 300)
    assert data["rounds"] == 3  # each figure the median of three interleaved rounds
    assert "amqp_connections" not in data
    assert data["namespace"].startswith("bench-")
    assert _namespaces(daemon) == before


def test_bench_amqp_holds_connections_and_reports_memory(daemon: Any) -> None:
    result = daemon.cli(
        "-o", "json", "bench", "--amqp", "--messages", "200", "--batch", "50",
        "--connections", "50",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["amqp_connections"] == 50
    _positive(data, ["amqp_connections_setup_s"])
    growth = data["amqp_connections_rss_growth_mb"]
    assert isinstance(growth, float) and math.isfinite(growth)


def test_bench_amqp_table_output(daemon: Any) -> None:
    result = daemon.cli("bench", "--amqp", "--messages", "100", "--batch", "10")
    assert result.code == 0, result.stderr
    assert "AMQP: daemon CPU per sent message" in result.stdout
    assert "Unix socket: receive + complete" in result.stdout
