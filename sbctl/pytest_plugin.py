"""The sbctl pytest plugin: a real broker for your application's tests.

Installed with the package (entry point ``pytest11``: ``sbctl``), so pytest loads it by
itself; without the entry point (a source checkout on PYTHONPATH), load it with
``-p sbctl.pytest_plugin``. Loading it starts nothing: a daemon starts only when a test
first uses one of its fixtures.

- ``sbctl_daemon`` (session): the daemon. With ``SBCTL_SOCKET`` set, the one listening
  there (left running); otherwise a daemon of its own on a temporary data dir (durability
  ``os``, AMQP on a free port when the daemon serves AMQP), stopped and removed at the end.
  Under pytest-xdist each worker is its own session, hence its own daemon and data dir.
- ``sbctl_namespace`` (function): a fresh, uniquely named namespace, deleted afterwards
  with its faults; ``.name``, ``.client`` (an :class:`sbctl.Client` bound to it),
  ``.connection_string`` (for the Azure SDKs; None when the daemon serves no AMQP),
  ``.faults`` and ``.credits``. ``@pytest.mark.sbctl_namespace(sku="premium",
  partitions=2, credits_per_second=0)`` chooses how it is created.
- ``sbctl_namespace.clock``: time travel (daemon/README.md §31): ``.advance(timedelta(hours=1))``,
  ``.set(datetime(2030, 1, 1, tzinfo=UTC))``, ``.now()``, ``.show()``; every timer of the
  namespace up to the new time runs before ``advance`` and ``set`` return.
  ``@pytest.mark.sbctl_clock("2030-01-01T00:00:00Z")`` starts the test's namespace at that
  instant (it must not be in the past).

Fixture names all start with ``sbctl_`` so they cannot clash with a project's own.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sbctl.client import Client

START_TIMEOUT_S = 60.0
MARKER = "sbctl_namespace"
CLOCK_MARKER = "sbctl_clock"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(sku='standard', partitions=1, credits_per_second=None): how the "
        "sbctl_namespace fixture creates the test's namespace",
    )
    config.addinivalue_line(
        "markers",
        f"{CLOCK_MARKER}(instant): the sbctl_namespace fixture's namespace starts at this "
        "instant (ISO 8601 text or a datetime; not in the past)",
    )


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", "-o", "json", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S + 10,
    )


class SbctlDaemon:
    """The daemon the tests use: ``socket``, ``data_dir`` (None when not ours), ``pid``,
    ``owned`` (started by this fixture), ``status()``, ``client()`` and ``env`` (the
    environment variables that point ``sbctl`` and :class:`sbctl.Client` at it)."""

    def __init__(self, socket: Path, data_dir: Path | None, owned: bool) -> None:
        self.socket = socket
        self.data_dir = data_dir
        self.owned = owned
        info = self.status()
        self.pid: int = int(info["pid"])
        self.amqp_port: int | None = info.get("amqp_port")

    @property
    def env(self) -> dict[str, str]:
        out = {"SBCTL_SOCKET": str(self.socket)}
        if self.data_dir is not None:
            out["SBCTL_DATA_DIR"] = str(self.data_dir)
        return out

    def client(self, namespace: str | None = None) -> Client:
        from sbctl.client import Client

        return Client(self.socket, namespace=namespace)

    def status(self) -> dict[str, Any]:
        with self.client() as c:
            return c.status()


class Faults:
    """Fault injection on one namespace (the ``sbctl fault`` commands)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def add(
        self,
        entity: str | None = None,
        partitions: Sequence[int] = (),
        *,
        kind: str = "unavailable",
        latency_ms: int | None = None,
    ) -> dict[str, Any]:
        """Make the namespace's stores (or ``entity``'s, or only its ``partitions``)
        unavailable, or slow with ``kind="slow"``; returns the fault with its ``id``."""
        return self._client.fault_add(entity, partitions, kind=kind, latency_ms=latency_ms)

    @contextlib.contextmanager
    def injected(
        self,
        entity: str | None = None,
        partitions: Sequence[int] = (),
        *,
        kind: str = "unavailable",
        latency_ms: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """``with ns.faults.injected("orders"):`` the fault holds inside the block only."""
        fault = self.add(entity, partitions, kind=kind, latency_ms=latency_ms)
        try:
            yield fault
        finally:
            self.clear([fault["id"]])

    def list(self) -> builtins.list[dict[str, Any]]:
        return self._client.fault_list()

    def clear(self, ids: Sequence[str] = ()) -> builtins.list[str]:
        """Clear the faults ``ids``, or all of this namespace's; returns the ids cleared."""
        return list(self._client.fault_clear(ids).get("cleared", []))


class Credits:
    """Throttling of one namespace: its credits per second and what it consumed."""

    def __init__(self, client: Client, namespace: str) -> None:
        self._client = client
        self._namespace = namespace

    def set(self, per_second: int | None = None, *, capacity: int | None = None) -> None:
        """Credits per second of a standard namespace (0: unlimited), or a premium
        namespace's ``capacity`` (messaging units)."""
        self._client.namespace_update(
            self._namespace, credits_per_second=per_second, capacity=capacity
        )

    def get(self) -> dict[str, Any]:
        """``remaining``, ``consumed`` by kind, ``throttled_requests``, ``requests_served``."""
        return self._client.namespace_credits(self._namespace)

    @property
    def throttled(self) -> int:
        """Requests refused with ServerBusy so far."""
        return int(self.get()["throttled_requests"])


class Clock:
    """Time travel on one namespace (``sbctl clock``, daemon/README.md §31): its time is
    the daemon's clock plus an offset that only grows."""

    def __init__(self, client: Client, namespace: str) -> None:
        self._client = client
        self._namespace = namespace

    def show(self) -> dict[str, Any]:
        """``now_utc`` (the namespace's time) and ``offset`` (ISO 8601)."""
        return self._client.clock_show(self._namespace)

    def now(self) -> datetime:
        """The namespace's time, an aware UTC datetime."""
        text = self.show()["now_utc"]
        return datetime.fromisoformat(text.replace("Z", "+00:00"))

    def advance(self, by: timedelta | int | str) -> dict[str, Any]:
        """Move the namespace's time forward by ``by`` (a timedelta, milliseconds, or text
        like ``"1d"``); everything that waits until then happens before it returns."""
        return self._client.clock_advance(by, self._namespace)

    def set(self, at: datetime | int | str) -> dict[str, Any]:
        """Move the namespace's time forward to ``at`` (a datetime, naive meaning UTC;
        epoch milliseconds; or ISO 8601 text); refused if that is in its past."""
        return self._client.clock_set(at, self._namespace)


class SbctlNamespace:
    """One test's namespace: ``name``, ``client``, ``connection_string``, ``faults``,
    ``credits``, ``clock`` and ``daemon``."""

    def __init__(self, daemon: SbctlDaemon, name: str) -> None:
        self.daemon = daemon
        self.name = name
        self.client = daemon.client(name)
        self.faults = Faults(self.client)
        self.credits = Credits(self.client, name)
        self.clock = Clock(self.client, name)
        self.connection_string = self._connection_string()

    def _connection_string(self) -> str | None:
        endpoint = getattr(self.client, "amqp_endpoint", None)
        if self.daemon.amqp_port is None or endpoint is None:
            return None
        info = endpoint(self.name)
        return (
            f"Endpoint=sb://localhost:{info['port']};SharedAccessKeyName={info['key_name']};"
            f"SharedAccessKey={info['key']};UseDevelopmentEmulator=true;"
        )

    @property
    def env(self) -> dict[str, str]:
        """Environment variables pointing ``sbctl`` (a subprocess) at this namespace."""
        return {**self.daemon.env, "SBCTL_NAMESPACE": self.name}


def _start_own_daemon(root: Path) -> SbctlDaemon:
    data_dir, socket = root / "data", root / "s.sock"
    env = dict(os.environ)
    env.pop("SBCTL_SOCKET", None)
    env["SBCTL_AMQP_PORT"] = "0"  # xdist workers must not fight over 5672
    env["SBCTL_HTTP_PORT"] = "0"  # nor over 5300
    started = _cli(
        env,
        "daemon",
        "start",
        "--wait",
        f"--wait-timeout={START_TIMEOUT_S:g}",
        "--durability=os",
        f"--data-dir={data_dir}",
        f"--socket={socket}",
    )
    if started.returncode != 0:
        raise pytest.UsageError(
            "sbctl_daemon: `sbctl daemon start` failed: "
            + (started.stderr.strip() or started.stdout.strip())
        )
    return SbctlDaemon(socket, data_dir, owned=True)


def _stop_own_daemon(daemon: SbctlDaemon) -> None:
    assert daemon.data_dir is not None
    stopped = _cli(
        dict(os.environ),
        "daemon",
        "stop",
        f"--data-dir={daemon.data_dir}",
        f"--socket={daemon.socket}",
    )
    if stopped.returncode == 0:
        return
    with contextlib.suppress(ProcessLookupError):  # never leak a daemon past the session
        os.kill(daemon.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{daemon.pid}").exists():
        time.sleep(0.02)


@pytest.fixture(scope="session")
def sbctl_daemon() -> Iterator[SbctlDaemon]:
    """The sbctl daemon of this session (of this xdist worker): the one at
    ``$SBCTL_SOCKET`` if set, else one started on a temporary data dir and stopped after."""
    external = os.environ.get("SBCTL_SOCKET")
    if external:
        from sbctl.core.errors import SbctlError

        try:
            shared = SbctlDaemon(Path(external), None, owned=False)
        except SbctlError as exc:
            raise pytest.UsageError(
                f"sbctl_daemon: SBCTL_SOCKET={external} does not answer: {exc}"
            ) from None
        yield shared
        return
    # A short path: Unix socket paths are limited to 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="sbctl-pytest-"))
    try:
        daemon = _start_own_daemon(root)
        try:
            yield daemon
        finally:
            _stop_own_daemon(daemon)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _unique_name() -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return f"test-{worker}{'-' if worker else ''}{uuid.uuid4().hex[:12]}"


@pytest.fixture
def sbctl_namespace(
    sbctl_daemon: SbctlDaemon, request: pytest.FixtureRequest
) -> Iterator[SbctlNamespace]:
    """A fresh namespace for this test, deleted (with its faults) afterwards."""
    marker = request.node.get_closest_marker(MARKER)
    opts: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    sku = str(opts.pop("sku", "standard"))
    partitions = int(opts.pop("partitions", 1))
    cps = opts.pop("credits_per_second", None)
    if opts:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: unknown argument(s) {sorted(opts)}")
    name = _unique_name()
    with sbctl_daemon.client() as admin:
        admin.namespace_create(
            name, sku=sku, premium_messaging_partitions=partitions, credits_per_second=cps
        )
        ns = SbctlNamespace(sbctl_daemon, name)
        try:
            _start_clock(request, ns)
            yield ns
        finally:
            ns.client.close()
            with contextlib.suppress(Exception), admin.using(name) as scoped:
                scoped.fault_clear()
            admin.namespace_delete(name)


def _start_clock(request: pytest.FixtureRequest, ns: SbctlNamespace) -> None:
    """``@pytest.mark.sbctl_clock(instant)``: the namespace's time starts there."""
    marker = request.node.get_closest_marker(CLOCK_MARKER)
    if marker is None:
        return
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(f"@pytest.mark.{CLOCK_MARKER} takes one instant")
    from sbctl.core.errors import SbctlError

    try:
        ns.clock.set(marker.args[0])
    except SbctlError as exc:
        raise pytest.UsageError(f"@pytest.mark.{CLOCK_MARKER}: {exc.message}") from None


__all__ = ["Clock", "Credits", "Faults", "SbctlDaemon", "SbctlNamespace"]
