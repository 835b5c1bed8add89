"""Shared fixtures.

- ``clock`` / ``broker``: the pure broker on a temporary data dir with a fake clock
  (unit tests; nothing sleeps).
- ``daemon``: a real daemon process on a temporary data dir, driven through the real
  ``sbctl`` CLI (a subprocess) and the real client (integration tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# The console script hands commands to a CLI server it starts in the background
# (sbctl.cli.launch); the suite's CLI calls fork from its own zygote (forkcli.py) and leave
# nothing running: only tests/integration/test_cli_server.py turns the server on.
os.environ.setdefault("SBCTL_CLI_SERVER", "0")

import forkcli
from sbctl import AsyncClient, Client, daemonctl
from sbctl.core.errors import SbctlError
from sbctld.broker import Broker
from sbctld.clock import FakeClock
from sbctld.storage.sync import Syncer

# The longest modules start first, so that the other worker (xdist --dist loadscope) takes
# the many short ones meanwhile instead of waiting for one long module at the end.
LONG_FIRST = (
    "integration/test_docs_blocks.py",
    "spark/test_spark_workers_python.py",
    "spark/test_spark_load.py",
    "spark/test_partition_agreement.py",
    "integration/test_sdk_samples.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.path.as_posix()
        return next(
            (i for i, tail in enumerate(LONG_FIRST) if path.endswith(tail)), len(LONG_FIRST)
        )

    items.sort(key=rank)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores. Much of the suite waits (on fdatasync, on
    daemons and SDK programs in other processes), so a spare worker keeps the cores busy: on
    a 2-core machine 3 workers ran the suite in 272 s where 2 took 307 s."""
    return (os.cpu_count() or 1) + 1


def pytest_configure(config: pytest.Config) -> None:
    # The sbctl pytest plugin (sbctl_daemon, sbctl_namespace) loads through the package's
    # pytest11 entry point; an environment installed before the entry point existed (or a
    # checkout on PYTHONPATH) loads it here.
    if not config.pluginmanager.has_plugin("sbctl"):
        import sbctl.pytest_plugin

        config.pluginmanager.register(sbctl.pytest_plugin, "sbctl")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


@functools.cache
def spark_missing() -> str | None:
    """Why the Spark tests (tests/spark) cannot run here (None: they can)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime: Spark needs java on PATH or JAVA_HOME"
    return None


@pytest.fixture(autouse=True, scope="module")
def spark_prerequisites(request: pytest.FixtureRequest) -> None:
    """The Spark tests need pyspark and Java: skipped without them on a developer's
    machine, but FAILED in CI (``CI=true``), where a missing prerequisite must not pass."""
    if request.node.path.parent.name != "spark":
        return
    reason = spark_missing()
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"CI=true and the Spark tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    # Credits off (issue 5, point 6): tests about throttling make their own namespaces.
    b = Broker(tmp_path / "data", clock, Syncer("fsync"), default_credits_per_second=0)
    yield b
    b.housekeeping.close()


@pytest.fixture
def twins(tmp_path: Path) -> Iterator[tuple[Broker, Broker]]:
    """Two brokers on their own data dirs and clocks (os durability, credits off): a test
    does the same to both in two ways and compares."""
    made = [
        Broker(tmp_path / name, FakeClock(), Syncer("os"), default_credits_per_second=0)
        for name in ("one", "other")
    ]
    yield made[0], made[1]
    for b in made:
        b.housekeeping.close()


def crash(b: Broker) -> None:
    """What SIGKILL after the last acknowledgement leaves: everything written is synced,
    every store closed, nothing checkpointed."""
    b.syncer.sync_now()
    for ns in b.namespaces.values():
        for entity in [*ns.queues.values(), *ns.topics.values()]:
            for p in entity.partitions:
                p.log.close()
    b.syncer.sync_now()


@pytest.fixture
def open_broker(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[[], Broker]]:
    """``open_broker()`` opens a broker on ``tmp_path / "data"`` (unthrottled, page-cache
    durability); every broker opened is closed at the end, whatever state it was left in."""
    made: list[Broker] = []

    def opener() -> Broker:
        b = Broker(tmp_path / "data", clock, Syncer("os"), default_credits_per_second=0)
        made.append(b)
        return b

    yield opener
    for b in made:
        with contextlib.suppress(Exception):
            b.housekeeping.close()


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
            old.housekeeping.close()
        new = Broker(old.data_dir, clock, Syncer("fsync"))
        opened.append(new)
        current[0] = new
        return new

    yield do
    for b in opened:
        b.housekeeping.close()


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


FRESH_CLI = os.environ.get("SBCTL_TEST_FRESH_CLI", "") not in ("", "0")


def run_cli(args: list[str], env: dict[str, str], input: str | None = None) -> CliResult:
    if FRESH_CLI:
        proc = subprocess.run(
            [sys.executable, "-m", "sbctl.cli.app", *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)
    return CliResult(*forkcli.run(args, env, input, timeout=120))


@dataclass
class Daemon:
    """A real sbctld process. ``cli(...)`` runs the real CLI against it."""

    data_dir: Path
    socket: Path
    env: dict[str, str] = field(default_factory=dict)

    def cli(self, *args: str, input: str | None = None, check: bool = False) -> CliResult:
        """``python -m sbctl.cli.app ARGS`` in a new process with this daemon's environment
        (forked from a process that imported the CLI once, see forkcli.py; a fresh
        interpreter per call with ``SBCTL_TEST_FRESH_CLI=1``)."""
        result = run_cli(list(args), self.env, input)
        if check and result.code != 0:
            raise AssertionError(f"sbctl {' '.join(args)} failed: {result}")
        return result

    def client(self, namespace: str | None = None) -> Client:
        return Client(self.socket, namespace=namespace)

    def start(self) -> CliResult:
        return self.cli("daemon", "start", check=True)

    def parked_receives(self) -> int:
        return parked_receives(self.socket)

    def wait_parked(self, n: int = 1, timeout: float = 30.0) -> None:
        wait_parked(self.socket, n, timeout)

    def stop(self) -> CliResult:
        return self.cli("daemon", "stop", check=True)

    def pid(self) -> int:
        return int((self.data_dir / "sbctld.pid").read_text().strip())

    def kill(self) -> None:
        """SIGKILL, then wait until the kernel released the data dir."""
        daemonctl.kill(self.pid(), self.data_dir)


def parked_receives(socket_path: Path) -> int:
    """How many receives the daemon holds waiting for a message (``daemon status``)."""
    with Client(socket_path) as c:
        return int(c.status()["parked_receives"])


def wait_parked(socket_path: Path, n: int = 1, timeout: float = 30.0) -> None:
    """Poll the daemon until at least ``n`` receives are parked (never a fixed sleep: on a
    slow machine a sleep lets a test pass without the receive having waited at all)."""
    deadline = time.monotonic() + timeout
    while (parked := parked_receives(socket_path)) < n:
        if time.monotonic() > deadline:
            raise AssertionError(f"{parked} receives parked after {timeout} s, wanted {n}")
        time.sleep(0.01)


def new_daemon(start: bool = True) -> Daemon:
    """A daemon on a fresh data dir (short paths, so sockets fit); see :func:`dispose`."""
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
    if start:
        d.start()  # `sbctl daemon start`: ~0.1 s through forkcli, which has sbctld imported
    return d


def dispose(d: Daemon) -> None:
    """Stop a daemon made by :func:`new_daemon`, however the test left it (running, stopped,
    killed, restarted by the CLI); SIGKILL if it will not stop; remove its directory."""
    try:
        daemonctl.stop(d.data_dir, d.socket, timeout=60)
    except (SbctlError, OSError, ValueError):
        if (d.data_dir / "sbctld.pid").exists():
            try:  # never leak a daemon past the test
                d.kill()
            except (ValueError, ProcessLookupError, AssertionError):
                pass
    shutil.rmtree(d.data_dir.parent, ignore_errors=True)


@pytest.fixture
def daemon_factory() -> Iterator[Any]:
    """Make daemons on fresh data dirs (short paths, so sockets fit); stop them after."""
    made: list[Daemon] = []

    def make(start: bool = True) -> Daemon:
        d = new_daemon(start=False)
        made.append(d)
        if start:
            d.start()
        return d

    yield make
    for d in made:
        dispose(d)


@pytest.fixture(scope="module")
def module_daemon() -> Iterator[Daemon]:
    """One daemon shared by a module's tests (they use their own entity names, or
    namespaces, so they stay independent): saves a daemon start and stop per test.
    Tests that stop, kill or fault the daemon as a whole use ``daemon`` instead."""
    d = new_daemon()
    try:
        yield d
    finally:
        dispose(d)


class BlockingAsyncClient:
    """An :class:`AsyncClient` behind blocking calls: every coroutine method runs to
    completion on this object's own event loop, so one test body checks both clients
    (``make_client`` fixture). ``transaction()`` and ``using()`` are wrapped too."""

    def __init__(
        self, inner: AsyncClient, runner: asyncio.Runner | None = None, owns: bool = True
    ) -> None:
        self.inner = inner
        self.runner = runner or asyncio.Runner()
        self.owns = owns
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if inspect.iscoroutinefunction(attr):
            return lambda *args, **kwargs: self.runner.run(attr(*args, **kwargs))
        return attr

    def using(self, namespace: str) -> BlockingAsyncClient:
        return BlockingAsyncClient(self.inner.using(namespace), self.runner, owns=False)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[Any]:
        manager = self.inner.transaction()
        tx = self.runner.run(manager.__aenter__())
        try:
            yield tx
        except BaseException as exc:
            if not self.runner.run(manager.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            self.runner.run(manager.__aexit__(None, None, None))

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.runner.run(self.inner.aclose())
        if self.owns:
            self.runner.close()

    def __enter__(self) -> BlockingAsyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


MakeClient = Callable[..., Any]


@pytest.fixture(params=["Client", "AsyncClient"])
def client_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_client(client_kind: str) -> Iterator[MakeClient]:
    """``make_client(socket, namespace=..., retry_total=...)``: a :class:`Client`, or an
    :class:`AsyncClient` behind :class:`BlockingAsyncClient`; each test runs with both.
    Clients left open are closed after the test."""
    made: list[Any] = []

    def make(socket_path: Any, **kwargs: Any) -> Any:
        if client_kind == "Client":
            c: Any = Client(socket_path, **kwargs)
        else:
            kwargs.pop("timeout", None)  # AsyncClient has no socket timeout
            c = BlockingAsyncClient(AsyncClient(socket_path, **kwargs))
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def daemon(daemon_factory: Any) -> Daemon:
    d: Daemon = daemon_factory()
    return d
