"""``sbctl top`` in a real terminal (a tmux pane), used as a person would: what the CLI does
to the broker shows within 2 s; keys sort, filter, switch namespace and open an entity; a
resize redraws; Ctrl-C exits with status 0 and the terminal's modes restored."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sbctl import Client, Message
from sbctl.core.errors import ServerBusy
from sbctl.pytest_plugin import SbctlNamespace

SHOWS_WITHIN_S = 2.0

pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (apt-get install -y tmux)"
)


class Pane:
    """One tmux pane on a private tmux server (``-L``), killed at the end."""

    def __init__(self, tmp: Path) -> None:
        self.server = f"sbctl-top-{uuid.uuid4().hex[:8]}"
        self.tmp = tmp

    def tmux(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.server, *args], capture_output=True, text=True, timeout=10
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    def start(self, command: str, env: dict[str, str]) -> None:
        exports = " ".join(f"{k}={v!s}" for k, v in env.items())
        self.tmux(
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "160",
            "-y",
            "50",
            f"env -u COLUMNS -u LINES {exports} {command}",
        )

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "top", *keys)

    def wait(self, what: str, check: Callable[[str], bool], timeout: float) -> float:
        """Seconds until ``check(screen)`` holds; fails with the screen after ``timeout``."""
        t0 = time.monotonic()
        while True:
            screen = self.screen()
            if check(screen):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise AssertionError(f"{what}: not shown within {timeout} s:\n{screen}")
            time.sleep(0.05)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.server, "kill-server"], capture_output=True, timeout=10)


@pytest.fixture
def pane(tmp_path: Path) -> Iterator[Pane]:
    p = Pane(tmp_path)
    try:
        yield p
    finally:
        p.kill()


def row(screen: str, name: str) -> list[str]:
    for line in screen.splitlines():
        cells = line.split()
        if cells and cells[0] == name:
            return cells
    return []


def cli(ns: SbctlNamespace, *args: str) -> None:
    env = {**os.environ, **ns.env}
    out = subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.sbctl_namespace(credits_per_second=0)
def test_top_in_a_terminal(
    pane: Pane, sbctl_namespace: SbctlNamespace, sbctl_daemon: object, tmp_path: Path
) -> None:
    ns = sbctl_namespace
    after = tmp_path / "after.txt"
    env = {
        **ns.env,
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "TERM": "xterm-256color",
    }
    pane.start(
        f"{sys.executable} -m sbctl.cli.app top --interval 0.5; echo exit=$? > {after}; "
        f"stty -a >> {after}; sleep 60",
        env,
    )
    pane.wait("the live view", lambda s: f"entities of {ns.name}" in s, 30)

    # A queue filling up.
    cli(ns, "queue", "create", "orders", "--enable-partitioning")
    cli(ns, "queue", "create", "audit")
    for i in range(3):
        cli(ns, "send", "orders", "--body", f"order number {i}")
    pane.wait("3 active", lambda s: row(s, "orders")[2:4] == ["3", "0"], SHOWS_WITHIN_S)

    # A message dead-lettered.
    cli(ns, "receive", "orders", "--settle", "dead-letter")
    pane.wait("1 dead-lettered", lambda s: row(s, "orders")[2:4] == ["2", "1"], SHOWS_WITHIN_S)

    # The namespace throttled.
    cli(ns, "namespace", "update", ns.name, "--credits-per-second", "5")
    with Client(ns.daemon.socket, namespace=ns.name, retry_total=0) as sb:
        with pytest.raises(ServerBusy):
            for _ in range(50):
                sb.send("audit", [Message(body=b"x")])
        throttled = ns.credits.throttled
    assert throttled >= 1
    pane.wait(
        "throttled requests",
        lambda s: row(s, "▶")[8:9] == [str(throttled)],
        SHOWS_WITHIN_S,
    )
    ns.credits.set(0)

    # A partition faulted.
    cli(ns, "fault", "add", "--entity", "orders", "--partition", "3")
    pane.wait(
        "the faulted partition",
        lambda s: "15/16" in row(s, "orders") and "Limited" in row(s, "orders"),
        SHOWS_WITHIN_S,
    )
    assert "active faults" in pane.screen()
    cli(ns, "fault", "clear")
    pane.wait("partitions back", lambda s: "16/16" in row(s, "orders"), SHOWS_WITHIN_S)

    # Sort: s moves the sort column (NAME* -> KIND* -> ACTIVE*), r reverses.
    pane.keys("s", "s")
    pane.wait("sorted by active", lambda s: "ACTIVE*" in s and "sort active ↑" in s, 2)
    pane.keys("r")
    pane.wait("descending", lambda s: "sort active ↓" in s, 2)

    # Filter by name.
    pane.keys("/", "o", "r", "d", "Enter")
    pane.wait(
        "filtered",
        lambda s: "filter /ord" in s and row(s, "orders") and not row(s, "audit"),
        2,
    )
    pane.keys("Escape")
    pane.wait("filter cleared", lambda s: row(s, "audit") != [], 2)

    # Switch namespace and back.
    pane.keys("Tab")
    pane.wait("another namespace", lambda s: f"entities of {ns.name}" not in s, 2)
    pane.keys("p")
    pane.wait("back", lambda s: f"entities of {ns.name}" in s, 2)

    # Open an entity: its partitions and its last messages.
    pane.keys("/", "o", "r", "d", "Enter", "Enter")
    pane.wait(
        "the entity",
        lambda s: (
            f"queue orders in {ns.name}" in s
            and "partitions" in s
            and "order number 2" in s
            and "dead-lettered" in s
        ),
        3,
    )
    pane.keys("Escape")
    pane.wait("the list again", lambda s: f"entities of {ns.name}" in s, 2)

    # Resize to the standard 80×24: the view redraws narrow, every number whole.
    pane.tmux("resize-window", "-t", "top", "-x", "80", "-y", "24")
    pane.wait(
        "narrower",
        lambda s: (
            f"entities of {ns.name}" in s
            and max(len(line.rstrip()) for line in s.splitlines()) <= 80
            and row(s, "orders")[1:4] == ["q", "2", "1"]
            and "16/16" in row(s, "orders")
            and "…" not in " ".join(row(s, "▶")[2:])
        ),
        3,
    )

    # Ctrl-C: exit status 0 and the terminal back in cooked mode with echo.
    pane.keys("C-c")
    deadline = time.monotonic() + 10
    while not (after.exists() and "icanon" in after.read_text()):
        assert time.monotonic() < deadline, pane.screen()
        time.sleep(0.05)
    text = after.read_text()
    assert text.startswith("exit=0"), text
    modes = text.split()
    assert "echo" in modes and "icanon" in modes and "isig" in modes, text
    assert "-echo" not in modes and "-icanon" not in modes


def test_sigterm_restores_the_terminal(
    pane: Pane, sbctl_namespace: SbctlNamespace, tmp_path: Path
) -> None:
    import psutil

    after = tmp_path / "after.txt"
    env = {**sbctl_namespace.env, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    pane.start(
        f"{sys.executable} -m sbctl.cli.app top; echo exit=$? > {after}; stty -a >> {after}; "
        "sleep 60",
        {**env, "TERM": "xterm-256color"},
    )
    pane.wait("the live view", lambda s: "entities of" in s, 30)
    shell = psutil.Process(int(pane.tmux("display", "-p", "-t", "top", "#{pane_pid}")))
    [top] = [p for p in shell.children(recursive=True) if "top" in p.cmdline()]
    top.terminate()
    deadline = time.monotonic() + 10
    while not (after.exists() and "icanon" in after.read_text()):
        assert time.monotonic() < deadline, pane.screen()
        time.sleep(0.05)
    modes = after.read_text().split()
    assert modes[0] == "exit=0"
    assert "echo" in modes and "icanon" in modes and "-echo" not in modes
