"""Time travel through a real daemon (daemon/README.md §31): the CLI, the Python client, the
Azure SDK over AMQP and the HTTP route; each test has its own namespace (the clock is per
namespace), and the last one restarts the daemon."""

from __future__ import annotations

import datetime
import email.utils
import http.client
import json
import threading
import time
from typing import Any

import pytest

from conftest import Daemon
from sbctl.core.errors import BadRequest, MessagingEntityNotFound
from sbctl.core.records import Message
from tests.integration.amqp_sdk import collect_sdk_sockets, connection_string  # noqa: F401

UTC = datetime.UTC
EXIT_USAGE, EXIT_INVALID, EXIT_NOT_FOUND = 2, 5, 3


@pytest.fixture(scope="module")
def d(module_daemon: Daemon) -> Daemon:
    return module_daemon


def fresh(d: Daemon, name: str, *queue: str) -> None:
    d.cli("namespace", "create", name, check=True)
    for args in queue:
        d.cli("-n", name, "queue", "create", *args.split(), check=True)


def cli_json(d: Daemon, *args: str) -> Any:
    return d.cli("-o", "json", *args, check=True).json()


def test_cli_scheduled_for_tomorrow_is_received_right_after_advancing_a_day(d: Daemon) -> None:
    fresh(d, "tt-cli", "q", "short --enable-dead-lettering-on-message-expiration")
    tomorrow = ("--body", "tomorrow", "--scheduled-enqueue-time", "+1d")
    d.cli("-n", "tt-cli", "send", "q", *tomorrow, check=True)
    d.cli("-n", "tt-cli", "send", "short", "--body", "brief", "--time-to-live", "1h", check=True)
    before = cli_json(d, "-n", "tt-cli", "clock", "show")
    moved = cli_json(d, "-n", "tt-cli", "clock", "advance", "1d")
    assert moved["offset"] == "P1D" and moved["activated"] == 1 and moved["expired"] == 1
    ahead = _instant(moved["now_utc"]) - _instant(before["now_utc"])
    assert datetime.timedelta(days=1) <= ahead < datetime.timedelta(days=1, minutes=1)
    got = d.cli("-o", "json", "-n", "tt-cli", "receive", "q", "--max-wait", "0", check=True)
    (message,) = got.jsonl()
    assert message["body"] == "tomorrow"
    assert message["enqueued_time_utc"] == message["scheduled_enqueue_time_utc"]
    dead = d.cli("-o", "json", "-n", "tt-cli", "peek", "short/$deadletterqueue", check=True)
    assert [m["body"] for m in dead.jsonl()] == ["brief"]
    # +1h counts from the namespace's time, a day ahead of the clock
    d.cli(
        "-n",
        "tt-cli",
        "send",
        "q",
        "--body",
        "in an hour",
        "--scheduled-enqueue-time",
        "+1h",
        check=True,
    )
    assert cli_json(d, "-n", "tt-cli", "clock", "advance", "59m")["activated"] == 0
    assert cli_json(d, "-n", "tt-cli", "clock", "advance", "1m")["activated"] == 1
    cli_json(d, "-n", "tt-cli", "clock", "advance", "23h")  # a whole day more: P2D
    shown = cli_json(d, "namespace", "show", "tt-cli")
    assert shown["clock_offset"] == "P2D"
    assert cli_json(d, "daemon", "status")["clock_offsets"]["tt-cli"] == "P2D"
    top = cli_json(d, "-n", "tt-cli", "top", "--once", "--interval", "0.1")
    assert {r["name"]: r["clock_offset"] for r in top["namespaces"]}["tt-cli"] == "P2D"


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (("clock", "advance", "--", "-1h"), EXIT_USAGE, "invalid duration '-1h'"),
        (("clock", "advance", "0s"), EXIT_USAGE, "must be positive"),
        (("clock", "advance", "soon"), EXIT_USAGE, "invalid duration 'soon'"),
        (("clock", "set", "2001-01-01T00:00:00Z"), EXIT_USAGE, "is before the namespace's time"),
        (("clock", "set", "+1h"), EXIT_USAGE, "invalid time '+1h'"),
        (("-n", "tt-nosuch", "clock", "advance", "1h"), EXIT_NOT_FOUND, "'tt-nosuch' does not"),
    ],
)
def test_cli_bad_input_is_one_line_and_changes_nothing(
    d: Daemon, args: tuple[str, ...], code: int, error: str
) -> None:
    with d.client() as admin:
        if "tt-bad" not in [n["name"] for n in admin.namespace_list()]:
            fresh(d, "tt-bad")
    before = cli_json(d, "-n", "tt-bad", "clock", "show")["offset"]
    result = d.cli(*args) if "-n" in args else d.cli("-n", "tt-bad", *args)
    assert (result.code, result.stdout) == (code, ""), result
    assert error in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert cli_json(d, "-n", "tt-bad", "clock", "show")["offset"] == before


def test_client_lock_expiry_and_duplicate_window(d: Daemon) -> None:
    fresh(
        d,
        "tt-client",
        "locked --lock-duration 5m",
        "dedup --enable-duplicate-detection",
        "ttl --enable-dead-lettering-on-message-expiration",
    )
    with d.client("tt-client") as sb:
        sb.send("ttl", [Message(body=b"an hour", time_to_live_ms=3_600_000)])
        sb.clock_advance("59m")
        assert sb.queue_get("ttl")["dead_letter_message_count"] == 0
        sb.clock_advance("1m")
        assert sb.queue_get("ttl")["dead_letter_message_count"] == 1
        sb.send("locked", [Message(body=b"held")])
        (got,) = sb.receive("locked", max_wait=5)
        sb.clock_advance(datetime.timedelta(minutes=5))
        (result,) = sb.complete("locked", [got.lock_token])
        assert result["error"]["code"] == "MessageLockLost"
        (again,) = sb.receive("locked", max_wait=0)
        assert again.delivery_count == 2
        sb.send("dedup", [Message(body=b"one", message_id="same")])
        sb.clock_advance("11m")  # past the 10-minute window
        sb.send("dedup", [Message(body=b"two", message_id="same")])
        assert sb.queue_get("dedup")["active_message_count"] == 2
        with pytest.raises(BadRequest, match="only moves forward"):
            sb.clock_advance(datetime.timedelta(seconds=-1))
        with pytest.raises(BadRequest, match="before the time of namespace"):
            sb.clock_set(datetime.datetime(2001, 1, 1))
        with pytest.raises(MessagingEntityNotFound):
            sb.clock_show("tt-nowhere")
        assert sb.clock_show()["offset"] == "PT1H16M"


def test_both_clients_show_advance_and_set(d: Daemon, make_client: Any, client_kind: str) -> None:
    name = f"tt-both-{client_kind.lower()}"
    fresh(d, name)
    sb = make_client(d.socket, namespace=name)
    assert sb.clock_show()["offset"] == "PT0S"
    assert sb.clock_advance(90_000)["offset"] == "PT1M30S"  # milliseconds
    assert sb.clock_advance("PT1H")["offset"] == "PT1H1M30S"
    moved = sb.clock_set(datetime.datetime(2040, 1, 1, tzinfo=UTC))
    assert moved["now_utc"].startswith("2040-01-01T00:00:0")
    assert sb.clock_show(name)["now_utc"] >= "2040-01-01T00:00:00.000Z"
    with pytest.raises(BadRequest, match="invalid time 'now'"):
        sb.clock_set("now")


def test_a_waiting_receive_gets_the_message_the_advance_enqueues(d: Daemon) -> None:
    fresh(d, "tt-wait", "q")
    got: list[Any] = []
    with d.client("tt-wait") as sb:
        sb.send("q", [Message(body=b"later", scheduled_enqueue_time_ms=_ms_in(days=1))])
        waiter = threading.Thread(target=lambda: got.extend(_receive(d, "tt-wait", 30)))
        waiter.start()
        d.wait_parked(1)
        started = time.monotonic()
        sb.clock_advance("1d")
        waiter.join(30)
    assert [m.message.body for m in got] == [b"later"]
    assert time.monotonic() - started < 10, "woken by the advance, not by its time-out"


def _receive(d: Daemon, namespace: str, wait_s: float) -> list[Any]:
    with d.client(namespace) as sb:
        return sb.receive("q", max_wait=wait_s)


def test_sdk_scheduled_ttl_and_lock_lost(d: Daemon) -> None:
    sdk = pytest.importorskip("azure.servicebus")
    from azure.servicebus.exceptions import MessageLockLostError, SessionLockLostError

    fresh(d, "tt-sdk", "q --lock-duration 5m --enable-dead-lettering-on-message-expiration")
    d.cli("-n", "tt-sdk", "queue", "create", "s", "--enable-session", check=True)
    client = sdk.ServiceBusClient.from_connection_string(connection_string(d, "tt-sdk"))
    with d.client("tt-sdk") as sb, client:
        start = sb.clock_show()["now_utc"]
        with client.get_queue_sender("q") as sender:
            when = datetime.datetime.now(UTC) + datetime.timedelta(days=1)
            sender.schedule_messages(sdk.ServiceBusMessage("tomorrow"), when)
            sender.send_messages(
                sdk.ServiceBusMessage("brief", time_to_live=datetime.timedelta(hours=1))
            )
        sb.clock_advance("1d")
        with client.get_queue_receiver("q", max_wait_time=2) as receiver:
            (got,) = receiver.receive_messages(max_wait_time=2)
            assert str(got) == "tomorrow"
            assert got.enqueued_time_utc.isoformat()[:19] == when.isoformat()[:19]
            assert got.locked_until_utc > datetime.datetime.now(UTC) + datetime.timedelta(days=1)
            sb.clock_advance("5m")
            with pytest.raises(MessageLockLostError):
                receiver.renew_message_lock(got)
            with pytest.raises(MessageLockLostError):
                receiver.complete_message(got)
        dlq = sdk.ServiceBusSubQueue.DEAD_LETTER
        with client.get_queue_receiver("q", sub_queue=dlq, max_wait_time=2) as receiver:
            (dead,) = receiver.receive_messages(max_wait_time=2)
            assert (str(dead), dead.dead_letter_reason) == ("brief", "TTLExpiredException")
        with client.get_queue_sender("s") as sender:
            sender.send_messages(sdk.ServiceBusMessage("x", session_id="a"))
        with client.get_queue_receiver("s", session_id="a", max_wait_time=2) as receiver:
            sb.clock_advance("2m")
            with pytest.raises(SessionLockLostError):
                receiver.session.renew_lock()
        assert sb.clock_show()["now_utc"] > start


def test_http_route_shows_and_moves_the_clock(d: Daemon) -> None:
    fresh(d, "tt-http", "q")
    with d.client("tt-http") as sb:
        port = sb.amqp_endpoint("tt-http")["port"]
        sb.send("q", [Message(body=b"later", scheduled_enqueue_time_ms=_ms_in(days=1))])
    token = d.cli("namespace", "sas-token", "tt-http", check=True).stdout.strip()

    def call(method: str, body: str | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request(method, "/$sbctl/clock", body, {"Authorization": token})
        reply = conn.getresponse()
        out = (reply.status, json.loads(reply.read()))
        conn.close()
        return out

    status, shown = call("GET")
    assert (status, shown["offset"]) == (200, "PT0S")
    status, moved = call("POST", '{"advance": "P1D"}')
    assert (status, moved["offset"], moved["activated"]) == (200, "P1D", 1)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", "/q/messages/head?timeout=1", None, {"Authorization": token})
    reply = conn.getresponse()
    props = json.loads(reply.getheader("BrokerProperties") or "{}")
    reply.read()
    conn.close()
    locked = email.utils.parsedate_to_datetime(props["LockedUntilUtc"])
    assert locked > datetime.datetime.now(UTC) + datetime.timedelta(days=1)  # its time
    status, refused = call("POST", '{"set": "2001-01-01T00:00:00Z"}')
    assert (status, refused["error"]["code"]) == (400, "BadRequest")
    status, refused = call("POST", '{"advance": "-1h"}')
    assert status == 400 and "invalid duration" in refused["error"]["message"]
    status, refused = call("POST", "not json")
    assert status == 400
    assert call("GET")[1]["offset"] == "P1D"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/$sbctl/clock")
    assert conn.getresponse().status == 401
    conn.close()


def test_a_restart_keeps_the_offset(d: Daemon) -> None:
    fresh(d, "tt-restart", "q")
    d.cli("-n", "tt-restart", "clock", "advance", "2h", check=True)
    d.stop()
    d.start()
    assert cli_json(d, "-n", "tt-restart", "clock", "show")["offset"] == "PT2H"
    assert cli_json(d, "-n", "tt-cli", "clock", "show")["offset"] == "P2D"


def _instant(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _ms_in(days: int) -> int:
    moment = datetime.datetime.now(UTC) + datetime.timedelta(days=days)
    return int(moment.timestamp() * 1000)
