"""Helpers for the end-to-end tests that drive a real daemon through the JavaScript and Java
Service Bus SDKs: small programs under ``tests/sdk/`` that print one JSON line.

A missing toolchain (node/npm, java/mvn) skips the test locally with the reason, and fails it
under ``CI=true``: CI machines have them, so a skip there would hide a broken install step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

SDK_DIR = Path(__file__).resolve().parent.parent / "sdk"


def require_tools(*names: str) -> None:
    missing = [n for n in names if shutil.which(n) is None]
    if not missing:
        return
    reason = f"{', '.join(missing)} not on PATH (needed for this SDK end-to-end test)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI must have it")
    pytest.skip(reason)


def run_step(cmd: list[str], cwd: Path, timeout: float, what: str) -> None:
    """Run an install/build command; fail with its output (tail) when it fails or hangs."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{what}: `{' '.join(cmd)}` did not finish in {timeout:.0f} s")
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        pytest.fail(f"{what}: `{' '.join(cmd)}` exited {proc.returncode}:\n{tail}")


def run_program(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run an SDK test program; return its JSON report. Its exit code must agree with the
    report's ``ok``; on failure the assertion shows the report and the program's stderr."""
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        pytest.fail(f"`{' '.join(cmd)}` did not finish in {timeout:.0f} s; stderr:\n{err}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no JSON report (exit {proc.returncode}); stderr:\n{proc.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(lines[-1])
    assert proc.returncode == 0 and report["ok"], (
        f"exit {proc.returncode}, error {report.get('error')!r}\n"
        f"steps: {json.dumps(report.get('steps'))}\nstderr:\n{proc.stderr[-4000:]}"
    )
    return report


def newest_mtime(*paths: Path) -> float:
    """The newest modification time of these files and of every file under these folders."""
    newest = 0.0
    for p in paths:
        files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
        for f in files:
            newest = max(newest, f.stat().st_mtime)
    return newest


# The text fields every SDK's matrix step sends (with a TTL of 90 s and a ScheduledEnqueueTime)
# and must get back as sent.
MATRIX_FIELDS = {
    "message_id": "mid-1",
    "correlation_id": "cid-1",
    "subject": "subj",
    "to": "to-1",
    "reply_to": "reply-1",
    "reply_to_session_id": "rs-1",
    "content_type": "text/plain",
    "partition_key": "pk-1",
}

# The queues of the scenario-matrix steps (tests/sdk/java MatrixSteps, tests/sdk/js matrix.js).
MATRIX_QUEUES: dict[str, dict[str, Any]] = {
    "m-parted": {"enable_partitioning": True},
    "m-retries": {"max_delivery_count": 3},
    "m-expiring": {"dead_lettering_on_message_expiration": True},
    "m-short": {"lock_duration": 5_000},
    "m-fields": {},
    "m-types": {},
    "m-tx": {},
}


def program_env(daemon: Any, connection_string: str, **extra_queues: str) -> dict[str, str]:
    """Create what every SDK program uses (queues ``orders``, session queue ``chat``,
    ``work``, ``from-cli`` holding one CLI-sent message, ``bulk``, topic ``events`` with
    subscription ``audit``, the MATRIX_QUEUES, plus ``extra_queues``: env name -> queue) and
    return the program's environment naming them."""
    with daemon.client() as c:
        for name, options in MATRIX_QUEUES.items():
            c.queue_create(name, **options)
    daemon.cli("queue", "create", "chat", "--enable-session", check=True)
    queues = ("orders", "work", "from-cli", "bulk", *extra_queues.values())
    for name in queues:
        daemon.cli("queue", "create", name, check=True)
    daemon.cli("topic", "create", "events", check=True)
    daemon.cli("subscription", "create", "events", "audit", check=True)
    daemon.cli(
        "send", "from-cli", "--body", "from-cli", "--subject", "s", "--property", "count=3",
        check=True,
    )  # fmt: skip
    return dict(
        daemon.env,
        SBCTL_CONNECTION_STRING=connection_string,
        SBCTL_QUEUE="orders",
        SBCTL_SESSION_QUEUE="chat",
        SBCTL_WORK_QUEUE="work",
        SBCTL_TOPIC="events",
        SBCTL_SUBSCRIPTION="audit",
        SBCTL_CLI_QUEUE="from-cli",
        SBCTL_BULK_QUEUE="bulk",
        **extra_queues,
    )


def check_common_matrix_rows(matrix: dict[str, Any]) -> None:
    """The matrix rows the Java and JavaScript programs report alike: peekMessages(10) paged
    over 40 messages on several partitions sees every one, once, in sequence-number order
    (daemon/README.md §0.1.7); max delivery count; TTL expiry to the DLQ."""
    parted = matrix["partitioned_peek"]
    assert parted.pop("partitions") > 1
    assert parted == {"pages": [10, 10, 10, 10], "seen": 40, "ascending": True}
    assert matrix["retries"] == {
        "delivery_counts": [0, 1, 2],
        "main_empty": True,
        "dead_letter_reason": "MaxDeliveryCountExceeded",
        "body": "retry-me",
    }
    assert matrix["ttl_expiry"] == {
        "received_after_expiry": 0,
        "body": "short-lived",
        "dead_letter_reason": "TTLExpiredException",
    }
