"""Shared fixtures.

- ``clock`` / ``broker``: the pure broker on a temporary data dir with a fake clock
  (unit tests; nothing sleeps).
- ``daemon``: a real daemon process on a temporary data dir, driven through the real
  ``sbctl`` CLI (a subprocess) and the real client (integration tests).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sbctl import Client
from sbctld.broker import Broker
from sbctld.clock import FakeClock
from sbctld.storage.sync import Syncer


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    # Credits off (issue 5, point 6): tests about throttling make their own namespaces.
    b = Broker(tmp_path / "data", clock, Syncer("fsync"), default_credits_per_second=0)
    yield b
    b.close()


Reopen = Callable[..., Broker]


@pytest.fixture
def reopen(broker: Broker, clock: FakeClock) -> Iterator[Reopen]:
    """``reopen()`` closes the current broker and opens a new one on the same data dir;
    ``reopen(crash=True)`` skips the final checkpoint (logs synced and closed, as after a
    crash that lost nothing acknowledged)."""
    current = [broker]
    opened: list[Broker] = []

    def do(*, crash: bool = False) -> Broker:
        old = current[0]
        if crash:
            for ns in old.namespaces.values():
                for q in ns.queues.values():
                    q.close()
            old.syncer.sync_now()
            old.namespaces.clear()  # so the fixture's close() writes nothing
        else:
            old.close()
        new = Broker(old.data_dir, clock, Syncer("fsync"))
        opened.append(new)
        current[0] = new
        return new

    yield do
    for b in opened:
        b.close()


@pytest.fixture(params=[False, True], ids=["plain", "partitioned"])
def partitioned(request: pytest.FixtureRequest) -> bool:
    """Run a test on a plain queue and on a partitioned one."""
    return bool(request.param)


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def jsonl(self) -> list[Any]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.strip()]


@dataclass
class Daemon:
    """A real sbctld process. ``cli(...)`` runs the real CLI against it."""

    data_dir: Path
    socket: Path
    env: dict[str, str] = field(default_factory=dict)

    def cli(self, *args: str, input: str | None = None, check: bool = False) -> CliResult:
        proc = subprocess.run(
            [sys.executable, "-m", "sbctl.cli.app", *args],
            input=input,
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
        )
        result = CliResult(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(f"sbctl {' '.join(args)} failed: {result}")
        return result

    def client(self, namespace: str | None = None) -> Client:
        return Client(self.socket, namespace=namespace)

    def start(self) -> CliResult:
        return self.cli("daemon", "start", check=True)

    def stop(self) -> CliResult:
        return self.cli("daemon", "stop", check=True)

    def pid(self) -> int:
        return int((self.data_dir / "sbctld.pid").read_text().strip())

    def kill(self) -> None:
        """SIGKILL, then wait until the kernel released the data dir."""
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    if fh.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                        return
            except (FileNotFoundError, ProcessLookupError):
                return
            time.sleep(0.01)
        raise AssertionError(f"pid {pid} survived SIGKILL")


@pytest.fixture
def daemon_factory() -> Iterator[Any]:
    """Make daemons on fresh data dirs (short paths, so sockets fit); stop them after."""
    made: list[Daemon] = []

    def make(start: bool = True) -> Daemon:
        root = Path(tempfile.mkdtemp(prefix="sbt-"))
        data_dir = root / "data"
        socket_path = root / "s.sock"
        env = dict(os.environ)
        env.update(
            SBCTL_DATA_DIR=str(data_dir),
            SBCTL_SOCKET=str(socket_path),
            NO_COLOR="1",
            COLUMNS="200",
            # Namespaces without their own --credits-per-second are unthrottled in tests.
            SBCTL_DEFAULT_CREDITS_PER_SECOND="0",
            # Never the shared default AMQP port 5672: any free port.
            SBCTL_AMQP_PORT="0",
            # Nor the default HTTP port 5300.
            SBCTL_HTTP_PORT="0",
        )
        env.pop("SBCTL_NAMESPACE", None)
        d = Daemon(data_dir, socket_path, env)
        made.append(d)
        if start:
            d.start()
        return d

    yield make
    for d in made:
        stopped = subprocess.run(
            [sys.executable, "-m", "sbctl.cli.app", "daemon", "stop"],
            env=d.env,
            capture_output=True,
            timeout=60,
        )
        if stopped.returncode != 0 and (d.data_dir / "sbctld.pid").exists():
            try:  # never leak a daemon past the test
                d.kill()
            except (ValueError, ProcessLookupError, AssertionError):
                pass
        shutil.rmtree(d.data_dir.parent, ignore_errors=True)


@pytest.fixture
def daemon(daemon_factory: Any) -> Daemon:
    d: Daemon = daemon_factory()
    return d
