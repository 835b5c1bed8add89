"""Setting a namespace's SAS key with `sbctl namespace set-key`: at once for new tokens over
AMQP (the azure-servicebus SDK) and HTTP, durable (0600) and kept across a restart."""

from __future__ import annotations

import base64
import stat
import time
from typing import Any

import httpx
import pytest

from sbctl.core import layout
from sbctl.core.sas import make_token
from tests.integration.amqp_sdk import cli_json, collect_sdk_sockets, connection_string  # noqa: F401

pytest.importorskip("azure.servicebus")
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthenticationError


def send_one(cs: str, body: str) -> None:
    with (
        ServiceBusClient.from_connection_string(cs, retry_total=0) as client,
        client.get_queue_sender("q") as sender,
    ):
        sender.send_messages(ServiceBusMessage(body))


def refused(cs: str) -> None:
    with pytest.raises(ServiceBusAuthenticationError):
        send_one(cs, "never")


def http_status(cs: str, key_name: str, key: str) -> int:
    port = int(cs.split("localhost:", 1)[1].split(";", 1)[0])
    token = make_token(f"http://localhost:{port}", key_name, key, int(time.time()) + 600)
    r = httpx.get(
        f"http://localhost:{port}/$namespaceinfo",
        headers={"Authorization": token},
        params={"api-version": "2024-05"},
        timeout=30,
    )
    return r.status_code


def test_a_new_key_works_at_once_the_old_one_is_refused_and_a_restart_keeps_it(
    daemon: Any,
) -> None:
    daemon.cli("queue", "create", "q", check=True)
    old_cs = connection_string(daemon)
    send_one(old_cs, "before")
    assert http_status(old_cs, "RootManageSharedAccessKey", "SAS_KEY_VALUE") == 200

    got = cli_json(daemon, "namespace", "set-key", "--key-name", "Rotated", "--generate")
    key = got["key"]
    assert got["namespace"] == "sbemulatorns" and got["key_name"] == "Rotated"
    assert len(base64.b64decode(key, validate=True)) == 32
    new_cs = connection_string(daemon)
    assert f"SharedAccessKeyName=Rotated;SharedAccessKey={key};" in new_cs

    refused(old_cs)  # signed with the old key and name: 401
    refused(new_cs.replace(key, "SAS_KEY_VALUE"))  # the new name with the old key
    send_one(new_cs, "after")
    assert http_status(new_cs, "RootManageSharedAccessKey", "SAS_KEY_VALUE") == 401
    assert http_status(new_cs, "Rotated", key) == 200

    keys_file = layout.amqp_keys_file(daemon.data_dir)
    assert stat.S_IMODE(keys_file.stat().st_mode) == 0o600
    for sealed in keys_file.parent.glob("keys.json*"):
        assert stat.S_IMODE(sealed.stat().st_mode) == 0o600, sealed

    daemon.stop()
    daemon.start()
    restarted_cs = connection_string(daemon)
    assert f"SharedAccessKeyName=Rotated;SharedAccessKey={key};" in restarted_cs
    refused(restarted_cs.replace(key, "SAS_KEY_VALUE"))
    send_one(restarted_cs, "after restart")
    assert cli_json(daemon, "queue", "show", "q")["active_message_count"] == 3


def test_set_key_refuses_bad_input_with_one_line(daemon: Any) -> None:
    daemon.cli("namespace", "create", "othername", check=True)
    cases = [
        (["othername", "--key", "k1", "--generate"], "exactly one of --key or --generate"),
        (["othername"], "exactly one of --key or --generate"),
        (["othername", "--key-name", "bad name", "--key", "k"], "key name 'bad name'"),
        (["othername", "--key-name", "x" * 257, "--key", "k"], "1 to 256"),
        (["othername", "--key", ""], "the key is empty"),
        (["othername", "--key", "a;b"], "';'"),
        (["nosuchnamespace", "--key", "k"], "namespace 'nosuchnamespace' does not exist"),
    ]
    for args, words in cases:
        r = daemon.cli("namespace", "set-key", *args)
        assert r.code != 0 and words in r.stderr, (args, r)
        if "--generate" not in words:  # the daemon's refusals: one line
            assert len(r.stderr.strip().splitlines()) == 1, (args, r)
    assert "nosuchnamespace" not in {ns["name"] for ns in cli_json(daemon, "namespace", "list")}
    # Nothing was changed by the refusals; a good key for one namespace leaves the other's.
    assert "SharedAccessKey=SAS_KEY_VALUE;" in connection_string(daemon, "othername")
    cli_json(daemon, "namespace", "set-key", "othername", "--key", "k2")
    assert "SharedAccessKey=k2;" in connection_string(daemon, "othername")
    assert "SharedAccessKey=SAS_KEY_VALUE;" in connection_string(daemon)
    # A namespace deleted and created again has the default key, like a new one.
    daemon.cli("namespace", "delete", "othername", check=True)
    daemon.cli("namespace", "create", "othername", check=True)
    assert "SharedAccessKey=SAS_KEY_VALUE;" in connection_string(daemon, "othername")
