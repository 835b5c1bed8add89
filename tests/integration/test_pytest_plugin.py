"""The pytest plugin as a user meets it: a user's test file, run by pytest in a subprocess
with pytest-xdist (-n 2), passes and leaves no daemon process and no namespace behind."""

from __future__ import annotations

import importlib.metadata
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from conftest import Daemon

pytest_plugins = ["pytester"]

USER_TESTS = """
import os
import pytest
from sbctl import Message
from sbctl.core.errors import ServerBusy, ServiceCommunicationProblem


def _record(sbctl_daemon, sbctl_namespace):
    out = os.environ.get("PLUGIN_RECORD")
    if out:
        with open(out, "a") as fh:
            fh.write(f"{sbctl_daemon.pid} {sbctl_namespace.name} {sbctl_daemon.owned}\\n")


@pytest.mark.parametrize("n", range(4))
def test_send_receive_complete(sbctl_daemon, sbctl_namespace, n):
    _record(sbctl_daemon, sbctl_namespace)
    sb = sbctl_namespace.client
    sb.queue_create("orders")
    sb.send("orders", [Message(body=f"order {n}".encode())])
    [got] = sb.receive("orders", max_wait=5)
    assert got.message.body == f"order {n}".encode()
    sb.complete("orders", [got.lock_token])
    assert sb.queue_get("orders")["active_message_count"] == 0


def test_each_test_has_a_fresh_namespace(sbctl_namespace):
    assert sbctl_namespace.client.queue_list() == []


@pytest.mark.sbctl_namespace(sku="premium", partitions=2)
def test_a_partition_fault_then_recovery(sbctl_namespace):
    from sbctl import Client

    sb = sbctl_namespace.client
    sb.queue_create("orders")
    no_retry = Client(sbctl_namespace.daemon.socket, namespace=sbctl_namespace.name, retry_total=0)
    with sbctl_namespace.faults.injected("orders"):
        assert len(sbctl_namespace.faults.list()) == 1
        with pytest.raises(ServiceCommunicationProblem):
            no_retry.send("orders", [Message(body=b"x")])
    assert sbctl_namespace.faults.list() == []
    sb.send("orders", [Message(body=b"after")])


def test_throttling(sbctl_namespace):
    from sbctl import Client

    sb = Client(sbctl_namespace.daemon.socket, namespace=sbctl_namespace.name, retry_total=0)
    sb.queue_create("orders")
    sbctl_namespace.credits.set(1)
    with pytest.raises(ServerBusy):
        for _ in range(50):
            sb.send("orders", [Message(body=b"x")])
    assert sbctl_namespace.credits.throttled >= 1
    sbctl_namespace.credits.set(0)
    sb.send("orders", [Message(body=b"unthrottled")])


def test_the_clock_moves_and_the_reminder_comes(sbctl_namespace):
    from datetime import timedelta
    from sbctl import ServiceBusMessage

    sb = sbctl_namespace.client
    sb.queue_create("reminders")
    tomorrow = sbctl_namespace.clock.now() + timedelta(days=1)
    sb.send("reminders", ServiceBusMessage("call back", scheduled_enqueue_time_utc=tomorrow))
    assert sb.receive("reminders", max_wait=0) == []
    sbctl_namespace.clock.advance(timedelta(days=1))
    assert [m.message.body for m in sb.receive("reminders", max_wait=0)] == [b"call back"]
    assert sbctl_namespace.clock.show()["offset"] == "P1D"


@pytest.mark.sbctl_clock("2030-01-01T00:00:00Z")
def test_the_clock_marker_starts_the_namespace_there(sbctl_namespace):
    from datetime import UTC, datetime

    now = sbctl_namespace.clock.now()
    assert datetime(2030, 1, 1, tzinfo=UTC) <= now < datetime(2030, 1, 1, 0, 1, tzinfo=UTC)


def test_connection_string_matches_the_daemon(sbctl_daemon, sbctl_namespace):
    if sbctl_daemon.amqp_port is None:
        assert sbctl_namespace.connection_string is None
    else:
        assert sbctl_namespace.connection_string.startswith("Endpoint=sb://localhost:")
"""

FAILING_TEST = """
from sbctl import Message


def test_that_fails_still_cleans_up(sbctl_namespace):
    sbctl_namespace.client.queue_create("left-behind")
    sbctl_namespace.faults.add("left-behind")
    assert False, "this user test fails on purpose"
"""


def _plugin_args() -> list[str]:
    """``-p sbctl.pytest_plugin`` when the installed metadata lacks the entry point."""
    eps = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.name == "sbctl" for ep in eps) else ["-p", "sbctl.pytest_plugin"]


def _processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info.get("cmdline") or [])
        if text in cmdline:
            found.append(proc)
    return found


@pytest.fixture
def short_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short TMPDIR for the user's pytest (sockets live under it)."""
    root = Path(tempfile.mkdtemp(prefix="spt-"))
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.delenv("SBCTL_SOCKET", raising=False)
    monkeypatch.delenv("SBCTL_DATA_DIR", raising=False)
    monkeypatch.setenv("PLUGIN_RECORD", str(root / "record.txt"))
    yield root
    for proc in _processes_mentioning(str(root)):
        proc.kill()
    shutil.rmtree(root, ignore_errors=True)


def _records(root: Path) -> list[list[str]]:
    return [line.split() for line in (root / "record.txt").read_text().splitlines()]


def test_user_tests_pass_in_parallel_with_own_daemons_and_leave_nothing(
    pytester: pytest.Pytester, short_tmp: Path
) -> None:
    pytester.makepyfile(test_user_app=USER_TESTS)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-q", "--strict-markers", *_plugin_args(), timeout=240
    )
    result.assert_outcomes(passed=10)
    records = _records(short_tmp)
    pids = {int(r[0]) for r in records}
    assert len(pids) == 2, f"each xdist worker has its own daemon: {records}"
    assert {r[2] for r in records} == {"True"}
    assert len({r[1] for r in records}) == len(records), "every test had its own namespace"
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    assert _processes_mentioning(str(short_tmp)) == []
    leftovers = [p.name for p in short_tmp.iterdir() if p.name != "record.txt"]
    assert leftovers == [], "the data dirs are removed"


def test_a_running_daemon_is_shared_and_keeps_no_namespace(
    pytester: pytest.Pytester, short_tmp: Path, daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    with daemon.client() as admin:
        before = [ns["name"] for ns in admin.namespace_list()]
    monkeypatch.setenv("SBCTL_SOCKET", str(daemon.socket))
    pytester.makepyfile(test_user_app=USER_TESTS, test_user_fails=FAILING_TEST)
    result = pytester.runpytest_subprocess("-n", "2", "-q", *_plugin_args(), timeout=240)
    result.assert_outcomes(passed=10, failed=1)
    records = _records(short_tmp)
    assert {int(r[0]) for r in records} == {daemon.pid()}
    assert {r[2] for r in records} == {"False"}
    with daemon.client() as admin:
        assert [ns["name"] for ns in admin.namespace_list()] == before
        assert admin.fault_list(all_namespaces=True) == []
        assert admin.status()["pid"] == daemon.pid(), "the shared daemon keeps running"


def test_a_dead_socket_is_one_clear_error(
    pytester: pytest.Pytester, short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SBCTL_SOCKET", str(short_tmp / "nobody.sock"))
    pytester.makepyfile(test_user_app=USER_TESTS)
    result = pytester.runpytest_subprocess("-q", "-k", "fresh", *_plugin_args(), timeout=60)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*SBCTL_SOCKET=*nobody.sock does not answer*"])


def test_loading_the_plugin_starts_nothing(pytester: pytest.Pytester, short_tmp: Path) -> None:
    pytester.makepyfile(test_plain="def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-q", *_plugin_args(), timeout=60)
    result.assert_outcomes(passed=1)
    assert list(short_tmp.iterdir()) == []
