"""The azure-servicebus SDK's own published samples, unchanged except for their client
constructor, against a real daemon.

The samples ship in the SDK's source package (``samples/sync_samples``), which this test
fetches once with ``pip download`` into ``~/.cache/sbctl-tests/`` for the installed SDK
version. Each sample's ``ServiceBusClient(FULLY_QUALIFIED_NAMESPACE, credential)`` becomes
``ServiceBusClient.from_connection_string(<sbctl namespace connection-string>)`` (and the
administration client also gets ``connection_verify=<sbctl daemon cert>``); nothing else
changes. A sample passes when it exits 0.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tests.integration.amqp_sdk import cli_json, connection_string

pytestmark = [pytest.mark.sdk, pytest.mark.timeout(600)]

QUICK = (
    "send_queue",
    "receive_queue",
    "receive_peek",
    "send_topic",
    "receive_subscription",
    "schedule_messages_and_cancellation",
    "receive_deferred_message_queue",
    "session_send_receive",
    "list_sessions",
    "topic_subscription_with_rule_operations",
    "mgmt_queue",
    "mgmt_rule",
)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sbctl-tests"


def samples_dir() -> Path:
    release = version("azure-servicebus")
    target = CACHE / f"azure_servicebus-{release}"
    if not (target / "samples" / "sync_samples").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        got = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
             "-d", str(CACHE), f"azure-servicebus=={release}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if got.returncode != 0:
            reason = f"cannot fetch the azure-servicebus {release} source package: {got.stderr}"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(reason)
            pytest.skip(reason)
        with tarfile.open(CACHE / f"azure_servicebus-{release}.tar.gz") as tar:
            tar.extractall(CACHE, filter="data")
    return target / "samples" / "sync_samples"


def patched(code: str, cert: str) -> str:
    """The sample with its client constructed from the connection string."""
    conn = "os.environ['SERVICEBUS_CONNECTION_STR']"
    code = code.replace(
        "from azure.identity import DefaultAzureCredential",
        "import contextlib\nDefaultAzureCredential = contextlib.nullcontext",
    )
    code = re.sub(
        r"ServiceBusClient\(\s*(?:fully_qualified_namespace\s*=\s*)?"
        r"(?:FULLY_QUALIFIED_NAMESPACE|fully_qualified_namespace)\s*,\s*"
        r"(?:credential\s*=\s*)?credential",
        f"ServiceBusClient.from_connection_string({conn}",
        code,
    )
    code = re.sub(
        r"ServiceBusAdministrationClient\(\s*FULLY_QUALIFIED_NAMESPACE\s*,\s*credential",
        f"ServiceBusAdministrationClient.from_connection_string({conn}, connection_verify={cert!r}",
        code,
    )
    return "import os\n" + code


def test_the_sdk_samples_run_unchanged_but_for_the_constructor(daemon: Any, tmp_path: Path) -> None:
    source = samples_dir()
    for args in (
        ("queue", "create", "q1"),
        ("queue", "create", "sq1", "--enable-session"),
        ("topic", "create", "t1"),
        ("subscription", "create", "t1", "s1"),
        ("subscription", "create", "t1", "ss1", "--enable-session"),
    ):
        daemon.cli(*args, check=True)
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    env = dict(
        daemon.env,
        SERVICEBUS_CONNECTION_STR=connection_string(daemon),
        SERVICEBUS_FULLY_QUALIFIED_NAMESPACE="localhost",
        SERVICEBUS_QUEUE_NAME="q1",
        SERVICEBUS_SESSION_QUEUE_NAME="sq1",
        SERVICEBUS_TOPIC_NAME="t1",
        SERVICEBUS_SUBSCRIPTION_NAME="s1",
        SERVICEBUS_SESSION_ID="session1",
    )
    failed = []
    for name in QUICK:
        script = tmp_path / f"{name}.py"
        script.write_text(patched((source / f"{name}.py").read_text(), cert))
        run_env = dict(env, SERVICEBUS_SUBSCRIPTION_NAME="ss1") if name == "list_sessions" else env
        done = subprocess.run(
            [sys.executable, str(script)], env=run_env, capture_output=True, text=True, timeout=180
        )
        if done.returncode != 0:
            failed.append(f"{name}: exit {done.returncode}\n{(done.stdout + done.stderr)[-1500:]}")
    assert not failed, "\n\n".join(failed)
