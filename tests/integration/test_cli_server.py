"""The console script hands commands to a warm CLI server (sbctl.cli.launch, sbctl.cli.preload):
the first command runs in its own process and starts the server; later ones run in a child
the server forks, with the caller's arguments, environment, working directory, stdin, stdout
and stderr, exit status and signals, exactly as in their own process.

Each test has its own runtime directory, so its own server, ended at the end of the test.
(The rest of the suite sets SBCTL_CLI_SERVER=0, see conftest.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from conftest import Daemon

LAUNCH = [sys.executable, "-c", "from sbctl.cli.launch import main; main()"]


class Runner:
    def __init__(self, daemon: Daemon, runtime: Path) -> None:
        self.runtime = runtime
        self.env = {**daemon.env, "SBCTL_CLI_SERVER": "1", "XDG_RUNTIME_DIR": str(runtime)}

    def run(self, *args: str, own: bool = False, **kwargs: Any) -> subprocess.CompletedProcess:
        env = {**self.env, **kwargs.pop("env", {})}
        if own:
            env["SBCTL_CLI_SERVER"] = "0"
        return subprocess.run(
            [*LAUNCH, *args], env=env, capture_output=True, text=True, timeout=60, **kwargs
        )

    def servers(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter(["cmdline"]):
            cmdline = proc.info.get("cmdline") or []
            if "sbctl.cli.preload" in cmdline and any(str(self.runtime) in a for a in cmdline):
                found.append(proc)
        return [p for p in found if not _is_child_of_any(p, found)]

    def socket(self) -> Path | None:
        found = sorted(self.runtime.glob("sbctl-cli-*/*.sock"))
        return found[0] if found else None

    def await_server(self) -> psutil.Process:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            servers = self.servers()
            if servers and self.socket() is not None:
                return servers[0]
            time.sleep(0.05)
        raise AssertionError("no CLI server started")


def _is_child_of_any(proc: psutil.Process, others: list[psutil.Process]) -> bool:
    try:
        return proc.ppid() in {o.pid for o in others}
    except psutil.Error:
        return False


@pytest.fixture
def cli(daemon: Daemon, tmp_path: Path) -> Iterator[Runner]:
    runtime = Path(os.environ.get("TMPDIR", "/tmp")) / f"sbrt-{os.getpid()}-{time.time_ns()}"
    runtime.mkdir()
    runner = Runner(daemon, runtime)
    yield runner
    for proc in runner.servers():
        proc.terminate()
        proc.wait(30)
    subprocess.run(["rm", "-rf", str(runtime)], check=False)


def served(runner: Runner) -> psutil.Process:
    """Start the server (the first command runs on its own and starts it); return it."""
    first = runner.run("--version")
    assert first.returncode == 0, first.stderr
    return runner.await_server()


def waiting_receive(cli: Runner, server: psutil.Process, queue: str) -> subprocess.Popen:
    """``sbctl receive QUEUE --max-wait 60s`` on the server, once its child runs."""
    assert cli.run("queue", "create", queue).returncode == 0
    proc = subprocess.Popen(
        [*LAUNCH, "receive", queue, "--max-wait", "60s"],
        env=cli.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    until(lambda: bool(server.children()))
    return proc


def until(done: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_served_command_behaves_as_one_in_its_own_process(cli: Runner, tmp_path: Path) -> None:
    server = served(cli)
    body = tmp_path / "body.txt"
    body.write_text("from a file, relative to the caller's directory")
    lines = [
        ("queue", "create", "orders"),
        ("queue", "list"),
        ("-o", "json", "queue", "show", "orders"),
        ("queue", "show", "missing"),  # exit 3, one line on stderr
        ("send", "orders", "--body-file", "body.txt"),
        ("-o", "json", "peek", "orders"),
        ("bogus-command",),  # exit 2
    ]
    for line in lines:
        if line[0] in ("queue", "send") and line[1] in ("create", "orders"):
            got = cli.run(*line, cwd=tmp_path)  # done once: it changes what it answers
            assert got.returncode == 0, got.stderr
            continue
        own = cli.run(*line, own=True, cwd=tmp_path)
        got = cli.run(*line, cwd=tmp_path)
        assert (got.returncode, got.stdout, got.stderr) == (
            own.returncode,
            own.stdout,
            own.stderr,
        ), line
    peeked = cli.run("-o", "json", "peek", "orders")
    assert "relative to the caller's directory" in peeked.stdout
    assert server.is_running()
    assert cli.run("queue", "show", "missing").returncode == 3


def test_the_command_runs_in_a_child_of_the_server(cli: Runner) -> None:
    server = served(cli)
    proc = waiting_receive(cli, server, "waits")
    try:
        assert len(server.children()) == 1
    finally:
        proc.kill()
        proc.wait()


def test_stdin_and_the_environment_are_the_callers(cli: Runner) -> None:
    served(cli)
    assert cli.run("queue", "create", "piped").returncode == 0
    sent = cli.run("send", "piped", "--body-file", "-", input="from stdin")
    assert sent.returncode == 0, sent.stderr
    got = cli.run("-o", "json", "receive", "piped")
    assert '"body": "from stdin"' in got.stdout
    # The namespace comes from this command's environment, not the server's.
    other = cli.run("queue", "list", env={"SBCTL_NAMESPACE": "nosuchns"})
    assert other.returncode == 3
    assert "nosuchns" in other.stderr


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, -15)])
def test_a_signal_to_the_command_reaches_the_child(cli: Runner, sig: int, status: int) -> None:
    server = served(cli)
    proc = waiting_receive(cli, server, "sig")
    proc.send_signal(sig)
    assert proc.wait(30) == status
    until(lambda: not server.children())
    assert server.children() == []


def test_a_killed_command_takes_its_child_with_it(cli: Runner) -> None:
    server = served(cli)
    proc = waiting_receive(cli, server, "killed")
    assert server.children()
    proc.kill()
    proc.wait()
    until(lambda: not server.children())
    assert server.children() == []
    assert server.is_running()


def test_the_switch_keeps_every_command_in_its_own_process(cli: Runner) -> None:
    for _ in range(2):
        assert cli.run("--version", own=True).returncode == 0
    time.sleep(0.5)
    assert cli.servers() == []
    assert cli.socket() is None


def test_an_idle_server_ends_and_removes_its_socket(cli: Runner) -> None:
    cli.env["SBCTL_CLI_SERVER_IDLE"] = "1"
    server = served(cli)
    server.wait(60)
    assert cli.socket() is None


def test_a_removed_socket_ends_the_server(cli: Runner) -> None:
    cli.env["SBCTL_CLI_SERVER_IDLE"] = "20"  # it checks every 5 s, and would idle out at 20
    server = served(cli)
    sock = cli.socket()
    assert sock is not None
    sock.unlink()
    server.wait(15)  # psutil.TimeoutExpired if it waited for the idle time


def test_a_runtime_directory_open_to_others_is_not_used(cli: Runner) -> None:
    directory = cli.runtime / f"sbctl-cli-{os.getuid()}"
    directory.mkdir(mode=0o700)
    directory.chmod(0o777)
    assert cli.run("--version").returncode == 0
    time.sleep(0.5)
    assert cli.servers() == []
    assert list(directory.iterdir()) == []


def test_the_server_watches_the_files_it_loaded(cli: Runner) -> None:
    from sbctl.cli import preload

    # The check itself, on a stand-in file (the real ones belong to the checkout):
    stand_in = cli.runtime / "module.py"
    stand_in.write_text("x = 1\n")
    watched = {str(stand_in): stand_in.stat().st_mtime_ns}
    assert not preload._changed(watched)
    os.utime(stand_in, ns=(0, stand_in.stat().st_mtime_ns + 1))
    assert preload._changed(watched)
    stand_in.unlink()
    assert preload._changed({str(stand_in): 0})
    # The server watches what it loaded: sbctl's own modules and the command index.
    loaded = preload._loaded_files()
    assert any(f.endswith(os.path.join("sbctl", "cli", "app.py")) for f in loaded)
    assert any(f.endswith("commands.json") for f in loaded)
