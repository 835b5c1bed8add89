"""``sbctl daemon start --wait``: it returns once the daemon answers, and says so."""

from __future__ import annotations

from typing import Any

from sbctl import Client


def test_start_wait_returns_a_ready_daemon(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    started = d.cli("-o", "json", "daemon", "start", "--wait", "--wait-timeout", "30")
    assert started.code == 0, started.stderr
    info = started.json()
    assert info["ready_seconds"] >= 0 and info["pid"] == d.pid()
    with Client(d.socket, retry_total=0) as c:  # no retry: it must answer at once
        assert c.status()["pid"] == info["pid"]
    again = d.cli("-o", "json", "daemon", "start", "--wait")
    assert again.code == 0 and again.json()["already_running"] is True


def test_wait_with_foreground_is_a_usage_error(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    out = d.cli("daemon", "start", "--wait", "--foreground")
    assert out.code == 2
    assert out.stderr.strip().splitlines() == [
        "error: Invalid value for '--wait': cannot be used with --foreground "
        "(see 'sbctl daemon start --help')"
    ]
