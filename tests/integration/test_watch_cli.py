"""``--watch`` views through the real daemon and CLI: snapshots in pipes, a live view on a
terminal, and stopping on SIGINT or SIGTERM whenever the signal comes.

Every test waits for the first frame (never a fixed sleep) and kills and reaps its process
when something goes wrong, so a stuck view cannot outlive its test.
"""

from __future__ import annotations

import json
import os
import pty
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import pytest

STOP_WITHIN = 30.0  # seconds a view may take to stop on a busy machine


def start(daemon: Any, *args: str, ignore_sigint: bool = False) -> subprocess.Popen[str]:
    def child_setup() -> None:  # as a shell starts a script's background job
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    return subprocess.Popen(
        [sys.executable, "-m", "sbctl.cli.app", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=daemon.env,
        preexec_fn=child_setup if ignore_sigint else None,
    )


def read_lines(stream: IO[str], until: Callable[[list[str]], bool]) -> list[str]:
    """Lines of ``stream`` until ``until(lines)``; fails after :data:`STOP_WITHIN` (a
    thread reads, so that a view that writes nothing cannot block the test)."""
    got: queue.Queue[str] = queue.Queue()

    def pump() -> None:  # stops after the first frame: communicate() reads the rest
        seen: list[str] = []
        while line := stream.readline():
            got.put(line)
            seen.append(line)
            if until(seen):
                return
        got.put("")

    threading.Thread(target=pump, daemon=True).start()
    lines: list[str] = []
    deadline = time.monotonic() + STOP_WITHIN
    while not until(lines):
        try:
            line = got.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no first frame in {STOP_WITHIN} s: {lines}")
        assert line, f"the view ended early: {lines}"
        lines.append(line)
    return lines


def stop(proc: subprocess.Popen[str], sig: int) -> tuple[int, str, str]:
    """Send ``sig``; the status and the rest of stdout and stderr. Kills and reaps the
    process if it does not stop in time."""
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=STOP_WITHIN)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"still running {STOP_WITHIN} s after signal {sig}")
    return proc.returncode, out, err


def first_frame(lines: list[str]) -> bool:
    """A whole first snapshot: a JSON line, or a table ended by a blank line."""
    if lines and lines[0].startswith("{"):
        return True
    return len(lines) >= 2 and lines[-1] == "\n"


def watched(daemon: Any, sig: int, *args: str, ignore_sigint: bool = False) -> Any:
    """Start a view, wait for its first frame, send ``sig``: status, stdout, stderr."""
    proc = start(daemon, *args, ignore_sigint=ignore_sigint)
    try:
        assert proc.stdout is not None
        first = read_lines(proc.stdout, first_frame)
        code, rest, err = stop(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return code, "".join(first) + rest, err


def test_pipe_gets_one_json_line_per_refresh_and_sigterm_ends_cleanly(daemon: Any) -> None:
    proc = start(daemon, "-o", "json", "credits", "--watch")
    try:
        assert proc.stdout is not None
        lines = read_lines(proc.stdout, lambda ls: len(ls) >= 2)
        code, rest, err = stop(proc, signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert code == 0 and not err
    records = [json.loads(line) for line in lines + rest.splitlines()]
    assert len(records) >= 2
    assert all(r["namespace"] == "sbemulatorns" for r in records)


def test_pipe_gets_plain_snapshots_with_their_time(daemon: Any) -> None:
    code, out, err = watched(daemon, signal.SIGTERM, "credits", "--watch")
    assert code == 0 and not err
    assert out.startswith("refreshed at ")
    stamp = out.splitlines()[0].removeprefix("refreshed at ")
    assert len(stamp) == 20 and stamp.endswith("Z") and stamp[10] == "T"
    assert "left in this period" in out
    assert "\x1b[" not in out  # no cursor movement in a file


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_view_stops_even_when_sigint_was_ignored_by_its_parent(daemon: Any, sig: int) -> None:
    code, out, err = watched(
        daemon, sig, "namespace", "metrics", "sbemulatorns", "--watch", ignore_sigint=True
    )
    assert code == 0 and not err
    assert "requests served" in out


def test_terminal_view_says_when_it_refreshed_and_how_to_quit(daemon: Any) -> None:
    main, sub = pty.openpty()
    env = {**daemon.env, "COLUMNS": "120", "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sbctl.cli.app", "credits", "--watch"],
        stdin=subprocess.DEVNULL,
        stdout=sub,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(sub)
    seen = b""
    try:
        deadline = time.monotonic() + STOP_WITHIN
        while b"Ctrl-C to quit" not in seen:
            assert time.monotonic() < deadline, f"no live frame: {seen!r}"
            ready, _, _ = select.select([main], [], [], 1.0)
            if ready:
                try:
                    seen += os.read(main, 65536)
                except OSError:
                    break
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=STOP_WITHIN)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.stderr.close()
        os.close(main)
    assert proc.returncode == 0, err
    assert b"refreshed at " in seen and b"Ctrl-C to quit" in seen
    assert b"left in this period" in seen
