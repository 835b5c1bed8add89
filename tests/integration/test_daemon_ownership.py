"""One daemon per data dir and per socket, owner-only files, and a reason for every refused
start, from `sbctl daemon start` and from `python -m sbctld` alike."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sbctl import daemonctl
from sbctl.core.records import Message


def sbctld(d: Any, data_dir: Path, socket_path: Path) -> subprocess.CompletedProcess[str]:
    """``python -m sbctld`` in the foreground; a refused start exits at once."""
    return subprocess.run(
        [sys.executable, "-m", "sbctld", "--data-dir", str(data_dir), "--socket", str(socket_path)],
        capture_output=True,
        text=True,
        env=d.env,
        timeout=60,
    )


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


def test_deleting_the_pid_file_does_not_free_the_data_dir(daemon: Any) -> None:
    pid = daemon.pid()
    with daemon.client() as c:
        c.queue_create("q")
    other_socket = daemon.socket.with_name("other.sock")
    (daemon.data_dir / "sbctld.pid").unlink()

    started = daemon.cli("daemon", "start", "--socket", str(other_socket))
    assert started.code != 0
    line = one_line_error(started.stderr)
    assert f"pid {pid}" in line and str(daemon.data_dir) in line

    refused = sbctld(daemon, daemon.data_dir, other_socket)
    assert refused.returncode == 1
    line = one_line_error(refused.stderr)
    assert "is in use by another sbctl daemon" in line and f"pid {pid}" in line

    # Not even with the lock file deleted too: the data dir itself is locked.
    (daemon.data_dir / "sbctld.lock").unlink()
    refused = sbctld(daemon, daemon.data_dir, other_socket)
    assert refused.returncode == 1
    assert "is in use by another sbctl daemon" in one_line_error(refused.stderr)
    assert not other_socket.exists()

    with daemon.client() as c:  # the first daemon still owns and serves everything
        assert c.ping()["pid"] == pid
        c.send("q", [Message(body=b"one")])
        assert c.queue_get("q")["active_message_count"] == 1


def test_a_live_daemons_socket_is_never_taken_over(daemon: Any, tmp_path: Path) -> None:
    pid = daemon.pid()
    other_data = tmp_path / "other"

    refused = sbctld(daemon, other_data, daemon.socket)
    assert refused.returncode == 1
    line = one_line_error(refused.stderr)
    assert f"socket {daemon.socket} is in use by another live sbctl daemon" in line
    assert f"pid {pid}" in line and str(daemon.data_dir) in line

    started = daemon.cli("daemon", "start", "--data-dir", str(other_data))
    assert started.code != 0
    line = one_line_error(started.stderr)
    assert str(daemon.socket) in line and str(daemon.data_dir) in line

    with daemon.client() as c:
        status = c.status()
    assert status["pid"] == pid and status["data_dir"] == str(daemon.data_dir)


def test_a_dead_daemons_socket_is_replaced(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    d.data_dir.parent.mkdir(exist_ok=True)
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(d.socket))  # bound, never listening: what a SIGKILLed daemon leaves
    leftover.close()
    assert stat.S_ISSOCK(os.lstat(d.socket).st_mode)
    d.start()
    with d.client() as c:
        assert c.ping()["pid"] == d.pid()


def test_a_refused_start_prints_why(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    d.data_dir.parent.mkdir(exist_ok=True)
    d.data_dir.write_text("not a directory")
    refused = sbctld(d, d.data_dir, d.socket)
    assert refused.returncode == 1
    assert "is not a directory" in one_line_error(refused.stderr)
    started = d.cli("daemon", "start")
    assert started.code != 0
    assert "is not a directory" in one_line_error(started.stderr)


def modes(root: Path) -> dict[str, tuple[str, int]]:
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            st = os.lstat(path)
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            found[str(path.relative_to(root))] = (kind, stat.S_IMODE(st.st_mode))
    return found


def test_everything_the_daemon_creates_is_owner_only(daemon_factory: Any) -> None:
    # An existing data dir others can read (e.g. made by hand, or by an older sbctl).
    d = daemon_factory(start=False)
    d.data_dir.mkdir(parents=True, mode=0o755)
    os.chmod(d.data_dir, 0o755)
    (d.data_dir / "sbctld.log").write_text("")
    os.chmod(d.data_dir / "sbctld.log", 0o644)
    old_umask = os.umask(0o022)  # what the daemon must not inherit
    try:
        started = d.cli("daemon", "start", check=True)
    finally:
        os.umask(old_umask)
    assert "permissions tightened to owner-only" in started.stderr
    assert "(., sbctld.log)" in started.stderr
    assert "permissions tightened to owner-only" in (d.data_dir / "sbctld.log").read_text()

    with d.client() as c:
        c.queue_create("plain")
        c.queue_create("parted", enable_partitioning=True, requires_duplicate_detection=True)
        c.topic_create("t")
        c.subscription_create("t", "s")
        c.rule_create("t", "s", "r")
        c.send("plain", [Message(body=b"a")])
        c.send("parted", [Message(body=b"b", message_id="m1")])
        c.send("t", [Message(body=b"c")])
        got = c.receive("plain", count=1)
        c.complete("plain", [m.lock_token for m in got])
    d.stop()  # a clean stop writes checkpoints

    found = modes(d.data_dir)
    assert any(name.endswith(".log") and "namespaces" in name for name in found)
    assert any(name.endswith("rules.json") for name in found)
    assert any(name.endswith("checkpoint.bin") for name in found)
    loose = {
        name: oct(mode)
        for name, (kind, mode) in found.items()
        if mode != (0o700 if kind == "dir" else 0o600)
    }
    assert not loose, f"not owner-only: {loose}"
    assert stat.S_IMODE(os.stat(d.data_dir).st_mode) == 0o700


def test_a_fresh_data_dir_starts_without_warnings(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    started = d.cli("daemon", "start", check=True)
    assert "warning" not in started.stderr
    assert stat.S_IMODE(os.stat(d.data_dir).st_mode) == 0o700


def test_a_start_right_after_sigkill_waits_for_the_lock_to_be_released(daemon: Any) -> None:
    """A killed daemon's main thread turns zombie before its other threads closed their files;
    a start in that moment waits for the kernel to drop the lock instead of refusing."""
    with daemon.client() as c:
        c.queue_create("q")
        c.send("q", [Message(body=b"kept")])
    for _ in range(5):
        pid = daemon.pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while daemonctl._alive(pid) and time.monotonic() < deadline:
            time.sleep(0.001)
        # In this process: a CLI's start-up would outlast the moment.
        daemonctl.start(
            daemon.data_dir,
            daemon.socket,
            default_credits_per_second=0,
            amqp=(True, "127.0.0.1", 0),
            http=(True, "127.0.0.1", 0),
        )
    with daemon.client() as c:
        assert [m.body for m in c.peek("q", 5)] == [b"kept"]
