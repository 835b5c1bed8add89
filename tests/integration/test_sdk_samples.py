"""The azure-servicebus SDK's own published samples, unchanged except for their client
constructor, against a real daemon.

The samples ship in the SDK's source package (``samples/sync_samples`` and
``samples/async_samples``), which this test fetches once with ``pip download`` into
``~/.cache/sbctl-tests/`` for the installed SDK version. Each sample's
``ServiceBusClient(FULLY_QUALIFIED_NAMESPACE, credential)`` becomes
``ServiceBusClient.from_connection_string(<sbctl namespace connection-string>)`` (the
administration client also gets ``connection_verify=<sbctl daemon cert>``), and
``DefaultAzureCredential`` an inert stand-in; nothing else changes, but for the samples
that authenticate with a SAS key or token (:data:`CREDENTIAL`: they keep it) and the two
edits of :data:`EDITED`. A sample passes when it exits 0; the samples that iterate a
receiver forever (:data:`ENDLESS`) pass when every message they were to take is settled,
and are stopped then. Each sample has entities of its own, so they run side by side.

Not run here: :data:`NOT_RUN` says why for each.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

from tests.integration.amqp_sdk import cli_json, connection_string
from tests.integration.tcp_relay import Relay

pytestmark = [pytest.mark.sdk, pytest.mark.timeout(600)]

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sbctl-tests"
NOT_RUN = {
    "auto_lock_renew": "sleeps 100 + 100 + 80 s by design (passes by hand in 326 s)",
    "auto_lock_renew_async": "sleeps 4 x 100 + 80 s by design (passes by hand in 491 s)",
    "client_identity_authentication": "azure.identity EnvironmentCredential: Microsoft Entra ID",
    "client_identity_authentication_async": "azure.identity EnvironmentCredential",
    "proxy_async": "the SDK hands aiohttp a proxy URL without a scheme (InvalidURL)",
}
# Samples iterating a receiver with no max_wait_time: they never end, on Azure either.
# name → (messages put on its queue first, how many messages it must have settled)
ENDLESS = {
    "receive_iterator_queue": (3, 3),
    "receive_iterator_queue_async": (3, 3),
    "failure_and_recovery": (0, 10),
}
# Samples that keep their credential (a SAS key or token): the constructor only gains
# use_tls=False, and SERVICEBUS_FULLY_QUALIFIED_NAMESPACE is localhost:<AMQP port>.
CREDENTIAL = (
    "authenticate_using_azure_named_key_credential",
    "authenticate_using_azure_sas_credential",
    "generate_sas_token_and_authenticate_client",
)
EDITED = {
    "connection_to_custom_endpoint_address": "its placeholders: a relay's address, the cert",
    "proxy": "its proxy's port, and the constructor's custom_endpoint_address (the SDK's "
    "WebSocket transport dials port 443 otherwise)",
}
# Slowest first, so the pool does not end on a long one (seconds measured on 2 cores).
SLOW = (
    "session_pool_receive",
    "sample_code_servicebus",
    "deadletter_messages_and_correct",
    "send_and_receive_amqp_annotated_message",
    "topic_subscription_with_rule_operations",
)
WORKERS = 8  # the samples mostly wait (max_wait_time): side by side they take little CPU

CREDENTIAL_STUB = '''"""Stands in for azure.identity's DefaultAzureCredential (the client is
built from the connection string, so it is never asked for a token)."""


class DefaultAzureCredential:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return None

    def close(self):
        return None
'''


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
    return target / "samples"


def patched(code: str, cert: str, keep_credential: bool = False) -> str:
    """The sample with its client constructed from the connection string."""
    conn = "os.environ['SERVICEBUS_CONNECTION_STR']"
    code = re.sub(
        r"(?m)^(\s*)from azure\.identity(?:\.aio)? import DefaultAzureCredential$",
        r"\1from _sbctl_credential import DefaultAzureCredential",
        code,
    )
    if keep_credential:
        return re.sub(
            r"ServiceBusClient\(FULLY_QUALIFIED_NAMESPACE, credential\)",
            "ServiceBusClient(FULLY_QUALIFIED_NAMESPACE, credential, use_tls=False)",
            code,
        )
    code = re.sub(
        r"ServiceBusClient\(\s*(?:fully_qualified_namespace\s*=\s*)?"
        r"(?:FULLY_QUALIFIED_NAMESPACE|fully_qualified_namespace)\s*,\s*"
        r"(?:credential\s*=\s*)?(?:credential|DefaultAzureCredential\(\))",
        f"ServiceBusClient.from_connection_string({conn}",
        code,
    )
    code = re.sub(
        r"ServiceBusAdministrationClient\(\s*FULLY_QUALIFIED_NAMESPACE\s*,\s*credential",
        f"ServiceBusAdministrationClient.from_connection_string({conn}, connection_verify={cert!r}",
        code,
    )
    return "import os\n" + code


def edited(name: str, code: str, amqp_port: int, gateway: int, proxy: int, cert: str) -> str:
    """The edits of :data:`EDITED` (after :func:`patched`)."""
    if name.startswith("connection_to_custom_endpoint_address"):
        code = code.replace(
            "<custom_endpoint_hostname>:<custom_endpoint_port>", f"localhost:{gateway}"
        )
        code = code.replace("<your_custom_ca_bundle_file_path>", cert)
    elif name == "proxy":
        code = code.replace('"proxy_port": 8899,', f'"proxy_port": {proxy},')
        code = code.replace(
            "http_proxy=HTTP_PROXY",
            f"http_proxy=HTTP_PROXY, custom_endpoint_address='sb://localhost:{amqp_port}'",
        )
    return code


def entities(client: Any, name: str, code: str) -> dict[str, str]:
    """Make the entities the sample names (its own, prefixed with its name); their env."""
    base = name.replace("_", "-")
    env = {}
    if "SERVICEBUS_QUEUE_NAME" in code:
        client.queue_create(env.setdefault("SERVICEBUS_QUEUE_NAME", f"{base}-q"))
    if "SERVICEBUS_SESSION_QUEUE_NAME" in code:
        queue = env.setdefault("SERVICEBUS_SESSION_QUEUE_NAME", f"{base}-sq")
        client.queue_create(queue, requires_session=True)
    if "SERVICEBUS_TOPIC_NAME" in code:
        topic = env.setdefault("SERVICEBUS_TOPIC_NAME", f"{base}-t")
        client.topic_create(topic)
        client.subscription_create(topic, "s1")
        client.subscription_create(topic, "ss1", requires_session=True)
        # list_sessions lists a subscription's sessions: it needs the sessionful one
        env["SERVICEBUS_SUBSCRIPTION_NAME"] = "ss1" if name.startswith("list_sessions") else "s1"
    return env


def run_endless(
    script: Path, env: dict[str, str], settled: Callable[[], bool], timeout: float
) -> tuple[int | None, str]:
    """Run until ``settled()``, then stop it; (None, output) when it got there."""
    out = script.with_suffix(".out")
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, str(script)], env=env, stdout=sink, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                if settled():
                    return None, out.read_text()
                time.sleep(0.2)
            return proc.returncode if proc.returncode is not None else -1, out.read_text()
        finally:
            proc.kill()
            proc.wait()


# The async samples mirror the sync ones against the same daemon code; a run of the suite
# takes these (the async administration client, WebSocket, SAS credential, settlement and
# scheduling paths), and all of them with SBCTL_THOROUGH=1.
ASYNC_EVERY_RUN = {
    "authenticate_using_azure_sas_credential_async",
    "connection_to_custom_endpoint_address_async",
    "deadletter_messages_and_correct_async",
    "mgmt_queue_async",
    "mgmt_rule_async",
    "receive_queue_async",
    "schedule_messages_and_cancellation_async",
}


def run_all(daemon: Any, tmp_path: Path, kind: str, only: set[str] | None = None) -> list[str]:
    """Run every sample of ``kind`` (sync_samples, async_samples) but :data:`NOT_RUN`
    (of ``only``, if given); the failures, each with its output's tail."""
    source = samples_dir() / kind
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    conn = connection_string(daemon)
    amqp_port = int(re.search(r"localhost:(\d+)", conn).group(1))  # type: ignore[union-attr]
    (tmp_path / "_sbctl_credential.py").write_text(CREDENTIAL_STUB)
    base_env = dict(
        daemon.env,
        SERVICEBUS_CONNECTION_STR=conn,
        SERVICEBUS_FULLY_QUALIFIED_NAMESPACE="localhost",
        SERVICEBUS_SESSION_ID="session1",
        SERVICEBUS_SAS_POLICY="RootManageSharedAccessKey",
        SERVICEBUS_SAS_KEY="SAS_KEY_VALUE",
    )
    names = sorted(
        (
            p.stem
            for p in source.glob("*.py")
            if p.stem not in NOT_RUN and (only is None or p.stem in only)
        ),
        key=lambda n: (n.removesuffix("_async") not in SLOW, n),
    )
    gateway = Relay(target=("127.0.0.1", amqp_port))
    proxy = Relay(proxy=True, auth=("admin", "123456"))

    def run(name: str) -> str | None:
        code = (source / f"{name}.py").read_text()
        keep = name.removesuffix("_async") in CREDENTIAL
        text = edited(name, patched(code, cert, keep), amqp_port, gateway.port, proxy.port, cert)
        script = tmp_path / f"{name}.py"
        script.write_text(text)
        with daemon.client() as c:
            env = dict(base_env, **entities(c, name, code))
        if keep:
            env["SERVICEBUS_FULLY_QUALIFIED_NAMESPACE"] = f"localhost:{amqp_port}"
        if name in ENDLESS:
            first, total = ENDLESS[name]
            queue = env["SERVICEBUS_QUEUE_NAME"]
            if first:
                with daemon.client() as c:
                    c.send(queue, [f"message {i}" for i in range(first)])

            def settled() -> bool:
                with daemon.client() as c:
                    got = c.queue_get(queue)
                sent = got["partitions"][0]["next_sequence_number"] - 1
                return sent >= total and got["total_message_count"] == 0

            code_, output = run_endless(script, env, settled, timeout=120)
            return None if code_ is None else f"{name}: exit {code_}\n{output[-1500:]}"
        try:
            done = subprocess.run(
                [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=150
            )
        except subprocess.TimeoutExpired:
            return f"{name}: still running after 150 s"
        if done.returncode != 0:
            return f"{name}: exit {done.returncode}\n{(done.stdout + done.stderr)[-1500:]}"
        return None

    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            results = list(pool.map(run, names))
    finally:
        gateway.close()
        proxy.close()
    # the package still ships its samples
    assert len(names) >= 24 if only is None else sorted(names) == sorted(only), names
    return [r for r in results if r is not None]


def test_the_sync_samples_run_unchanged_but_for_the_constructor(
    daemon: Any, tmp_path: Path
) -> None:
    failed = run_all(daemon, tmp_path, "sync_samples")
    assert not failed, "\n\n".join(failed)


def test_the_async_samples_run_unchanged_but_for_the_constructor(
    daemon: Any, tmp_path: Path
) -> None:
    only = None if os.environ.get("SBCTL_THOROUGH") == "1" else ASYNC_EVERY_RUN
    failed = run_all(daemon, tmp_path, "async_samples", only)
    assert not failed, "\n\n".join(failed)
