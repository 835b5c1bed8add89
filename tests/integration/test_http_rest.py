"""The REST data plane and the HTTP endpoint's errors, driven with httpx against a real
daemon (plain HTTP on the connection string's port, as curl and emulator-mode SDKs do)."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from typing import Any

import httpx
import pytest
from azure.servicebus import ServiceBusClient

from sbctld.frontends.http.auth import make_token
from tests.integration.amqp_sdk import cli_json, connection_string, peek

KEY_NAME, KEY = "RootManageSharedAccessKey", "SAS_KEY_VALUE"
ATOM_QUEUE = (
    '<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">'
    '<QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/'
    'connect">{}</QueueDescription></content></entry>'
)


def amqp_port(daemon: Any) -> int:
    port: int = cli_json(daemon, "daemon", "status")["amqp_port"]
    return port


def rest(daemon: Any, port: int | None = None) -> httpx.Client:
    port = port or amqp_port(daemon)
    token = make_token(f"http://localhost:{port}", KEY_NAME, KEY, int(time.time()) + 3600)
    return httpx.Client(
        base_url=f"http://localhost:{port}", headers={"Authorization": token}, timeout=30
    )


def test_send_peek_lock_renew_unlock_complete_and_delete(daemon: Any) -> None:
    daemon.cli("queue", "create", "orders", check=True)
    with rest(daemon) as c:
        r = c.post(
            "/orders/messages",
            content=b"hello",
            headers={
                "BrokerProperties": json.dumps(
                    {"MessageId": "m1", "Label": "L", "CorrelationId": "c", "TimeToLive": 60}
                ),
                "Content-Type": "text/plain",
                "Priority": '"High"',
                "Count": "3",
                "Flag": "true",
            },
        )
        assert r.status_code == 201, r.text
        batch = [
            {"Body": "b1", "BrokerProperties": {"Label": "x"}, "UserProperties": {"k": 1}},
            {"Body": "b2"},
        ]
        r = c.post(
            "/orders/messages",
            content=json.dumps(batch),
            headers={"Content-Type": "application/vnd.microsoft.servicebus.json"},
        )
        assert r.status_code == 201, r.text
        # What it sends is what `sbctl peek` shows.
        first, second, third = peek(daemon, "orders", "--count", "5")
        assert first["body"] == "hello" and first["message_id"] == "m1"
        assert (first["subject"], first["correlation_id"], first["content_type"]) == (
            "L",
            "c",
            "text/plain",
        )
        assert first["time_to_live"] == 60
        assert first["application_properties"] == {"Priority": "High", "Count": 3, "Flag": True}
        assert (second["body"], second["subject"], second["application_properties"]) == (
            "b1",
            "x",
            {"k": 1},
        )
        assert third["body"] == "b2"

        r = c.post("/orders/messages/head", params={"timeout": "5"})
        assert r.status_code == 201 and r.content == b"hello"
        props = json.loads(r.headers["BrokerProperties"])
        assert props["SequenceNumber"] == 1 and props["MessageId"] == "m1"
        assert props["DeliveryCount"] == 1 and props["LockToken"]
        assert r.headers["Priority"] == '"High"' and r.headers["Count"] == "3"
        location = r.headers["Location"]
        assert location.endswith(f"/orders/messages/1/{props['LockToken']}")
        renewed = c.post(location)
        assert (
            renewed.status_code == 200 and "LockedUntilUtc" in renewed.headers["BrokerProperties"]
        )
        assert c.put(location).status_code == 200  # unlock
        again = c.post("/orders/messages/head", params={"timeout": "5"})
        assert json.loads(again.headers["BrokerProperties"])["DeliveryCount"] == 2
        assert c.delete(again.headers["Location"]).status_code == 200  # complete
        gone = c.delete(again.headers["Location"])
        assert gone.status_code == 410 and "lock" in gone.text.lower()

        r = c.delete("/orders/messages/head", params={"timeout": "5"})
        assert r.status_code == 200 and r.content == b"b1"
        assert "LockToken" not in json.loads(r.headers["BrokerProperties"])
        assert c.delete("/orders/messages/head", params={"timeout": "5"}).content == b"b2"
        t0 = time.monotonic()
        empty = c.delete("/orders/messages/head", params={"timeout": "1"})
        assert empty.status_code == 204 and 0.9 < time.monotonic() - t0 < 10
    assert peek(daemon, "orders", "--count", "5") == []


def test_a_waiting_receive_gets_a_message_sent_later_by_the_cli(daemon: Any) -> None:
    daemon.cli("queue", "create", "later", check=True)
    sender = threading.Timer(1.0, daemon.cli, ("send", "later", "--body", "late"))
    sender.start()
    try:
        with rest(daemon) as c:
            t0 = time.monotonic()
            r = c.delete("/later/messages/head", params={"timeout": "20"})
            assert r.status_code == 200 and r.content == b"late"
            assert time.monotonic() - t0 < 15
    finally:
        sender.join()


def test_rest_sends_reach_amqp_clients_and_subscriptions(daemon: Any) -> None:
    daemon.cli("topic", "create", "events", check=True)
    daemon.cli("subscription", "create", "events", "all", check=True)
    with rest(daemon) as c:
        r = c.post(
            "/events/messages",
            content=b"evt",
            headers={"BrokerProperties": '{"MessageId":"e1","Label":"L"}', "Region": '"eu"'},
        )
        assert r.status_code == 201
    with (
        ServiceBusClient.from_connection_string(connection_string(daemon)) as sb,
        sb.get_subscription_receiver("events", "all", max_wait_time=10) as receiver,
    ):
        (msg,) = receiver.receive_messages(max_message_count=1, max_wait_time=10)
        assert b"".join(msg.body) == b"evt"
        assert (msg.message_id, msg.subject) == ("e1", "L")
        assert msg.application_properties == {b"Region": b"eu"}
        receiver.complete_message(msg)
    with rest(daemon) as c:
        r = c.post("/events/subscriptions/all/messages/head", params={"timeout": "0"})
        assert r.status_code == 204


def test_an_acknowledged_rest_send_survives_sigkill(daemon: Any) -> None:
    daemon.cli("queue", "create", "durable", check=True)
    with rest(daemon) as c:
        assert c.post("/durable/messages", content=b"kept").status_code == 201
    daemon.kill()
    daemon.start()
    assert [m["body"] for m in peek(daemon, "durable")] == ["kept"]


def test_errors_are_clear_http_errors_and_the_daemon_keeps_serving(daemon: Any) -> None:
    with rest(daemon) as c:
        health = c.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "healthy"
        bad = c.put("/q1?api-version=2021-05", content=b"<entry><content>")
        assert bad.status_code == 400 and "not well-formed XML" in bad.text
        unknown = c.put("/q1?api-version=2021-05", content=ATOM_QUEUE.format("<Colour>1</Colour>"))
        assert unknown.status_code == 400 and "unknown element 'Colour'" in unknown.text
        bomb = c.put("/q1", content=b'<!DOCTYPE x [<!ENTITY a "aaaa">]><entry>&a;</entry>')
        assert bomb.status_code == 400 and "DTD" in bomb.text
        version = c.get("/$namespaceinfo?api-version=1999-01")
        assert version.status_code == 400 and "api-version" in version.text
        assert c.get("/$namespaceinfo?api-version=2024-05").status_code == 200
        missing = c.post("/nowhere/messages", content=b"x")
        assert missing.status_code == 404 and "nowhere" in missing.text
        big = c.post("/q1/messages", content=b"x" * (10 * 1024 * 1024))
        assert big.status_code == 413 and "larger than" in big.text
        unauthorized = httpx.get(f"{c.base_url}/$namespaceinfo")
        assert unauthorized.status_code == 401 and "Authorization" in unauthorized.text
        created = c.put("/q1?api-version=2021-05", content=ATOM_QUEUE.format(""))
        assert created.status_code == 201 and "<QueueDescription" in created.text
        exists = c.put("/q1?api-version=2021-05", content=ATOM_QUEUE.format(""))
        assert exists.status_code == 409
        ttl = c.post(
            "/q1/messages", content=b"x", headers={"BrokerProperties": '{"TimeToLive":"x"}'}
        )
        assert ttl.status_code == 400 and "TimeToLive" in ttl.text
        field = c.post("/q1/messages", content=b"x", headers={"BrokerProperties": '{"Nope":1}'})
        assert field.status_code == 400 and "Nope" in field.text
        huge = c.post(
            "/q1/messages", content=b"x", headers={"BrokerProperties": '{"TimeToLive":1e400}'}
        )
        assert huge.status_code == 400 and "TimeToLive" in huge.text
        method = c.get("/q1/messages")
        assert method.status_code == 405 and "GET is not allowed" in method.text
        token = c.delete("/q1/messages/1/not-a-uuid")
        assert token.status_code == 400 and "lock token" in token.text
    port = amqp_port(daemon)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GARBAGE / HTTP/1.1\r\n\r\n")  # 'G' says HTTP; the rest is not
        assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    assert cli_json(daemon, "queue", "show", "q1")["name"] == "q1"


def test_a_slow_client_is_timed_out(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    d.env["SBCTLD_HTTP_REQUEST_TIMEOUT_S"] = "1"
    d.start()
    port = amqp_port(d)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /q/messages HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nab"
        )
        t0 = time.monotonic()
        answer = sock.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive in time" in answer
        assert time.monotonic() - t0 < 8
        assert sock.recv(4096) == b""  # closed
    with rest(d, port) as c:
        assert c.get("/health").status_code == 200


def test_http_port_flags_status_and_conflicts(daemon_factory: Any) -> None:
    d = daemon_factory()
    port = cli_json(d, "daemon", "status")["http_port"]
    assert isinstance(port, int) and port > 0
    with rest(d, port) as c:
        assert c.get("/health").status_code == 200
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        e = daemon_factory(start=False)
        result = e.cli("daemon", "start", "--http-port", str(busy))
    assert result.code != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(busy) in lines[0]
    assert "--http-port" in lines[0] and "--no-http" in lines[0]
    f = daemon_factory(start=False)
    f.cli("daemon", "start", "--no-http", check=True)
    assert cli_json(f, "daemon", "status")["http_port"] is None
    with socket.create_connection(("127.0.0.1", amqp_port(f)), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert not sock.recv(4096).startswith(b"HTTP")  # AMQP answers, not HTTP
    warned = daemon_factory(start=False).cli("daemon", "start", "--http-host", "0.0.0.0")
    assert warned.code == 0 and "HTTP endpoint on 0.0.0.0" in warned.stderr


@pytest.mark.parametrize("scheme", ["https"])
def test_rest_over_https_with_the_certificate(daemon: Any, scheme: str) -> None:
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    port = amqp_port(daemon)
    daemon.cli("queue", "create", "tls", check=True)
    token = make_token(f"{scheme}://localhost:{port}/tls", KEY_NAME, KEY, int(time.time()) + 60)
    trusted = ssl.create_default_context(cafile=cert)
    with httpx.Client(verify=trusted, headers={"Authorization": token}) as c:
        base = f"{scheme}://localhost:{port}/tls/messages"
        assert c.post(base, content=b"secret").status_code == 201
        r = c.delete(f"{base}/head", params={"timeout": "5"})
        assert r.status_code == 200 and r.content == b"secret"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"https://localhost:{port}/health")  # not trusted without the certificate


def test_garbage_never_takes_the_endpoint_down(daemon: Any) -> None:
    import random

    rng = random.Random(16)
    http_port = cli_json(daemon, "daemon", "status")["http_port"]
    samples = [
        b"\x16\x03\x01\x00\x05hello",  # a TLS record that is no handshake
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"POST /q/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n",
        b"PUT /q HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 5000 + b"\r\n",
    ] + [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))) for _ in range(20)]
    for data in samples:
        with socket.create_connection(("127.0.0.1", http_port), timeout=10) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):
                    pass
            except OSError:
                pass  # the daemon may close first
    with rest(daemon, http_port) as c:
        assert c.get("/health").status_code == 200
        assert c.get("/$namespaceinfo").status_code == 200
    log = (daemon.data_dir / "sbctld.log").read_text()
    assert "Traceback" not in log


def test_curl_with_the_cli_token_sends_peek_locks_completes_and_deletes(daemon: Any) -> None:
    import shutil
    import subprocess

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    daemon.cli("queue", "create", "cq", check=True)
    token = daemon.cli("namespace", "sas-token", check=True).stdout.strip()
    base = f"http://127.0.0.1:{amqp_port(daemon)}/cq/messages"

    def curl(*args: str) -> tuple[int, dict[str, str], str]:
        done = subprocess.run(
            ["curl", "-s", "-i", "-H", f"Authorization: {token}", *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        head, _, body = done.stdout.replace("\r\n", "\n").partition("\n\n")
        lines = head.splitlines()
        headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
        return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body

    status, _, _ = curl("-X", "POST", base, "-H", 'BrokerProperties: {"Label":"c"}', "-d", "one")
    assert status == 201
    assert curl("-X", "POST", base, "-d", "two")[0] == 201
    assert [m["body"] for m in peek(daemon, "cq", "--count", "5")] == ["one", "two"]
    status, headers, body = curl("-X", "POST", f"{base}/head?timeout=5")
    assert status == 201 and body == "one"
    assert curl("-X", "DELETE", headers["location"])[0] == 200
    status, _, body = curl("-X", "DELETE", f"{base}/head?timeout=5")
    assert status == 200 and body == "two"
    assert peek(daemon, "cq", "--count", "5") == []
    scoped = daemon.cli("namespace", "sas-token", "--path", "other", check=True).stdout.strip()
    token = scoped
    assert curl("-X", "POST", base, "-d", "x")[0] == 401


def test_rest_sends_meet_the_same_faults_and_throttling(daemon: Any) -> None:
    daemon.cli("queue", "create", "fq", check=True)
    with rest(daemon) as c:
        daemon.cli("fault", "add", "--entity", "fq", check=True)
        down = c.post("/fq/messages", content=b"x")
        assert down.status_code == 503 and "unavailable" in down.text.lower()
        daemon.cli("fault", "clear", check=True)
        daemon.cli(
            "fault", "add", "--entity", "fq", "--kind", "slow", "--latency", "1s", check=True
        )
        t0 = time.monotonic()
        assert c.post("/fq/messages", content=b"slow").status_code == 201
        assert time.monotonic() - t0 >= 0.9
        daemon.cli("fault", "clear", check=True)
    daemon.cli("namespace", "create", "thinns", "--credits-per-second", "20", check=True)
    daemon.cli("-n", "thinns", "queue", "create", "tq", check=True)
    port = int(connection_string(daemon, "thinns").split("localhost:", 1)[1].split(";")[0])
    # Batches of 15 at 20 credits/s: the second batch in a period is refused, however
    # slow the machine.
    batch = json.dumps([{"Body": "m"}] * 15)
    kind = {"Content-Type": "application/vnd.microsoft.servicebus.json"}
    with rest(daemon, port) as c:
        answers = [c.post("/tq/messages", content=batch, headers=kind) for _ in range(10)]
    busy = [r for r in answers if r.status_code == 503]
    assert busy, [r.status_code for r in answers]
    assert "50009" in busy[0].text or "busy" in busy[0].text.lower()
    assert int(busy[0].headers["Retry-After"]) >= 1
    sent = 15 * len([r for r in answers if r.status_code == 201])
    time.sleep(1.2)  # a fresh period: peek and show are throttled too
    shown = cli_json(daemon, "-n", "thinns", "queue", "show", "tq")
    assert shown["active_message_count"] == sent
