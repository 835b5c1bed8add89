"""The Celery guide's app (sbctl/guides/celery.md) runs on sbctl: kombu's azureservicebus
transport, the Python SDK over AMQP, queues created over HTTPS.

One scenario, bounded: 200 tasks and a task that retries once are sent; a Celery worker
(threads, acks_late) starts on them and is killed with SIGKILL while it holds tasks; a second
worker finishes. Every task must have run (each leaves a file; a task may run twice, never
zero times), the retried task must have run twice, and the queue must end empty.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import Daemon, dispose, new_daemon

pytest.importorskip("celery")
pytest.importorskip("kombu.transport.azureservicebus")

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "sbctl" / "guides" / "celery.md"
TASKS = 200


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    d = new_daemon()
    try:
        yield d
    finally:
        dispose(d)


def _app(tmp: Path) -> Path:
    [code] = re.findall(r"^```python\n(.*?)^```", GUIDE.read_text("utf-8"), flags=re.M | re.S)
    (tmp / "tasks.py").write_text(code)
    (tmp / "done").mkdir()
    return tmp / "done"


def _env(daemon: Daemon, tmp: Path) -> dict[str, str]:
    conn = daemon.cli("namespace", "connection-string", check=True).stdout.strip()
    cert = daemon.cli("daemon", "cert", check=True).stdout.strip()
    paths = [str(tmp), str(ROOT), str(ROOT / "daemon"), os.environ.get("PYTHONPATH", "")]
    return dict(
        daemon.env,
        SERVICEBUS_CONNECTION_STRING=conn,
        REQUESTS_CA_BUNDLE=cert,
        TASKS_DONE_DIR=str(tmp / "done"),
        PYTHONPATH=os.pathsep.join(p for p in paths if p),
    )


def _worker(env: dict[str, str], tmp: Path, log: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "threads"]
    argv += ["--concurrency", "4", "--without-gossip", "--without-mingle"]
    argv += ["--without-heartbeat", "--loglevel", "WARNING"]
    with (tmp / log).open("wb") as out:
        return subprocess.Popen(argv, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)


def _until(what: str, done: object, timeout: float, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        if time.monotonic() > deadline:
            tails = "".join(p.read_text()[-2000:] for p in logs.glob("*.log"))
            pytest.fail(f"not within {timeout:.0f} s: {what}\n{tails}")
        time.sleep(0.1)


def _ran(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.mark.timeout(300)
def test_celery_tasks_survive_a_killed_worker(daemon: Daemon, tmp_path: Path) -> None:
    done = _app(tmp_path)
    env = _env(daemon, tmp_path)
    send = f"from tasks import record, flaky; [record.delay(i) for i in range({TASKS})]; "
    send += "flaky.delay(0)"
    subprocess.run([sys.executable, "-c", send], cwd=tmp_path, env=env, check=True, timeout=120)
    assert daemon.cli("-o", "json", "queue", "show", "celery").json()["active_message_count"] > 0

    first = _worker(env, tmp_path, "worker1.log")
    try:
        _until("the first worker ran 40 tasks", lambda: len(_ran(done)) >= 40, 120, tmp_path)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    killed_at = len(_ran(done))
    assert killed_at < TASKS + 3, "the worker finished before it was killed: kill it sooner"

    second = _worker(env, tmp_path, "worker2.log")
    try:
        everything = {str(i) for i in range(TASKS)} | {"flaky-0", "flaky-0.tried"}
        _until("every task ran", lambda: everything <= _ran(done), 180, tmp_path)

        def drained() -> bool:
            shown = daemon.cli("-o", "json", "queue", "show", "celery").json()
            return shown["active_message_count"] == 0 and shown["dead_letter_message_count"] == 0

        _until("the queue is empty", drained, 30, tmp_path)
    finally:
        second.terminate()
        try:
            second.wait(timeout=30)
        except subprocess.TimeoutExpired:
            second.kill()
            second.wait()
