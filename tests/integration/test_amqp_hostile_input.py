"""Hostile and broken clients against a real daemon (daemon/README.md §29.11, §30.6, §21.7).

Each defect class has its own test: deep nesting, decode amplification, a null property key,
undecodable sections and ``$management`` arguments of the wrong type, 10,000 attaches at once,
oversized HTTP headers, settled completes. Then a fuzz test replays a real azure-servicebus
session (recorded at the start through a relay) with seeded mutations and the hand-built
frames of every class, while an unrelated SDK client sends and receives in a thread, and
checks: the daemon lives, every connection gets a typed error or is closed (never
``amqp:internal-error``), no traceback in ``sbctld.log``, the daemon's RSS grows by less than
``RSS_GROWTH_MIB``, the SDK client's p99 round trip stays under ``P99_S``, and every message
acknowledged is still peekable and receivable afterwards.
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import crc32c
import pytest

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.amqp_sdk import cli_json, collect_sdk_sockets, connection_string  # noqa: F401
from tests.integration.tcp_relay import Relay
from tests.unit.test_amqp_decode_bounds import nested_lists, null_arrays

sb = pytest.importorskip("azure.servicebus")
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode  # noqa: E402

RSS_GROWTH_MIB = 100  # the daemon's RSS after the whole module, over its RSS before
P99_S = 0.75  # the unrelated SDK client's send-receive-complete round trip while fuzzed
MUTANTS = 80
FUZZ_SECONDS = 10.0


# ------------------------------------------------------------------ a daemon, raw bytes


@pytest.fixture(scope="module")
def env(module_daemon: Any) -> Iterator[dict[str, Any]]:
    for queue in ("fuzz", "steady", "kept", "poison", "settled"):
        module_daemon.cli("queue", "create", queue, check=True)
    status = cli_json(module_daemon, "daemon", "status")
    info = {
        "daemon": module_daemon,
        "amqp": int(status["amqp_port"]),
        "http": int(status["http_port"]),
        "pid": int(status["pid"]),
        "conn": connection_string(module_daemon),
    }
    info["rss"] = rss_mib(info["pid"])
    yield info
    log = (module_daemon.data_dir / "sbctld.log").read_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
    assert rss_mib(info["pid"]) - info["rss"] < RSS_GROWTH_MIB


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        line = next(ln for ln in fh if ln.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def frame(channel: int, body: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">IBBH", 8 + len(body) + len(payload), 2, 0, channel) + body + payload


def answers(sock: socket.socket, timeout: float = 10.0) -> tuple[list[str], bool]:
    """The error conditions the daemon sent until it closed (close, end, detach, rejected
    dispositions), and whether it closed within ``timeout``."""
    sock.settimeout(timeout)
    buf = b""
    deadline = time.monotonic() + timeout
    closed = False
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 16)
        except TimeoutError:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
    sock.close()
    return conditions(buf), closed


def conditions(buf: bytes) -> list[str]:
    out = []
    pos = 0
    while pos + 8 <= len(buf):
        if buf[pos : pos + 4] == b"AMQP":
            pos += 8
            continue
        try:
            got = framing.parse_frame(buf, pos, 1 << 24)
        except framing.FrameError:
            break
        if got is None:
            break
        fr, pos = got
        body = fr.body
        error = getattr(body, "error", None)
        if isinstance(body, t.Disposition) and isinstance(body.state, t.Rejected):
            error = body.state.error
        if error is not None:
            out.append(str(error.condition))
    return out


def typed(found: list[str]) -> bool:
    return all(c.startswith(("amqp:", "com.microsoft:")) for c in found) and (
        "amqp:internal-error" not in found
    )


def opening(payload_open: bytes | None = None) -> bytes:
    """AMQP header and an open (``payload_open``: its encoded body, hand-built)."""
    body = payload_open or codec.encode(t.Open("hostile", "localhost", 65536, 255))
    return framing.PROTOCOL_AMQP + frame(0, body)


def open_with(field: bytes) -> bytes:
    """An open performative whose hostname is ``field`` (raw encoded)."""
    items = codec.encode("hostile") + field
    return b"\x00\x53\x10\xd0" + struct.pack(">II", len(items) + 4, 2) + items


def peek_all(daemon: Any, queue: str) -> list[Any]:
    args = ("-o", "json", "peek", queue, "--count", "250", "--from-sequence", "0")
    rows: list[Any] = daemon.cli(*args, check=True).jsonl()
    return rows


def send_raw(port: int, data: bytes) -> tuple[list[str], bool]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(data)
    return answers(sock)


# ------------------------------------------------------------------ one test per class


def test_a_deeply_nested_open_closes_with_decode_error(env: dict[str, Any]) -> None:
    found, closed = send_raw(env["amqp"], opening(open_with(nested_lists(1_000))))
    assert closed and found == ["amqp:decode-error"]


def test_an_open_of_a_million_nulls_is_refused_at_once(env: dict[str, Any]) -> None:
    before = rss_mib(env["pid"])
    started = time.monotonic()
    found, closed = send_raw(env["amqp"], opening(open_with(null_arrays(600))))
    elapsed = time.monotonic() - started
    assert closed and found == ["amqp:decode-error"]
    assert elapsed < 1.0  # (3.2 s, and +300 MiB of RSS, before the bound)
    assert rss_mib(env["pid"]) - before < 20


def message_transfer(client: RawClient, handle: int, delivery_id: int, payload: bytes) -> str:
    tag = delivery_id.to_bytes(4, "big")
    client.sock.sendall(
        framing.encode_frame(0, t.Transfer(handle, delivery_id, tag, 0, False), payload)
    )
    while True:
        fr = client.until(t.Disposition)
        if fr.body.first == delivery_id:
            state = fr.body.state
            return str(state.error.condition) if isinstance(state, t.Rejected) else "accepted"


def bad_messages() -> dict[str, bytes]:
    good = codec.encode_message(codec.Message(body=[b"fine"]))
    flipped = bytearray(good)
    flipped[2] = 0x79  # an unknown section code
    utf8 = codec.encode_message(codec.Message(application_properties={"k": "v"}, body=[b"x"]))
    utf8 = utf8.replace(b"\xa1\x01v", b"\xa1\x01\xff")
    props = codec.encode("k") + nested_lists(200)
    nested = b"\x00\x53\x74\xd1" + struct.pack(">II", len(props) + 4, 2) + props
    return {
        "null key": codec.encode_message(
            codec.Message(application_properties={None: "v"}, body=[b"x"])
        ),
        "unknown section": bytes(flipped),
        "invalid utf-8": utf8,
        "nested properties": nested + b"\x00\x53\x75\xa0\x01x",
    }


def test_undecodable_messages_are_rejected_with_decode_error_and_the_queue_stays_readable(
    env: dict[str, Any],
) -> None:
    client = RawClient(env["amqp"])
    try:
        handle = client.attach(False, "poison")
        client.until(t.Flow)
        got = {
            name: message_transfer(client, handle, i, payload)
            for i, (name, payload) in enumerate(bad_messages().items())
        }
        assert got == dict.fromkeys(bad_messages(), "amqp:decode-error"), got
        good = codec.encode_message(codec.Message(body=[b"fine"]))
        assert message_transfer(client, handle, 99, good) == "accepted"
    finally:
        client.close()
    rows = (
        env["daemon"]
        .cli("-o", "json", "peek", "poison", "--count", "10", "--from-sequence", "0", check=True)
        .jsonl()
    )
    assert [r["body"] for r in rows] == ["fine"]


@pytest.mark.parametrize(
    ("operation", "body", "field"),
    [
        ("peek-message", {"from-sequence-number": "abc", "message-count": 1}, "from-sequence"),
        ("peek-message", {"message-count": [1]}, "message-count"),
        ("renew-lock", {"lock-tokens": 5}, "lock-tokens"),
        ("receive-by-sequence-number", {"sequence-numbers": ["x"]}, "sequence-numbers"),
        ("schedule-message", {"messages": [1]}, "messages"),
        ("cancel-scheduled-message", {"sequence-numbers": [-1]}, "sequence-numbers"),
        ("set-session-state", {"session-id": 1}, "session-id"),
        ("get-message-sessions", {"skip": "none"}, "skip"),
        ("update-disposition", {"disposition-status": "completed", "lock-tokens": [1]}, "lock"),
    ],
)
def test_management_arguments_of_the_wrong_type_get_400_naming_the_field(
    env: dict[str, Any], operation: str, body: dict[str, Any], field: str
) -> None:
    client = RawClient(env["amqp"])
    try:
        tx, _rx = client.management("poison/$management")
        status, _ = client.request(tx, "poison/$management", f"com.microsoft:{operation}", body, 0)
    finally:
        client.close()
    assert status["statusCode"] == 400, status
    assert field in status["statusDescription"]
    assert status["errorCondition"] == "com.microsoft:argument-error"


def health_latencies(port: int, stop: threading.Event, out: list[float]) -> None:
    while not stop.is_set():
        started = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=30) as r:
            r.read()
        out.append(time.monotonic() - started)
        time.sleep(0.005)


def test_ten_thousand_attaches_at_once_do_not_stall_other_clients(env: dict[str, Any]) -> None:
    begin = codec.encode(t.Begin(None, 0, 5000, 5000))
    attaches = b"".join(
        frame(0, codec.encode(t.Attach(f"l{h}", h, True, 0, 0, t.Source("fuzz"), t.Target("x"))))
        for h in range(10_000)
    )
    stop = threading.Event()
    latencies: list[float] = []
    probe = threading.Thread(target=health_latencies, args=(env["http"], stop, latencies))
    probe.start()
    try:
        time.sleep(0.1)
        sock = socket.create_connection(("127.0.0.1", env["amqp"]), timeout=30)
        sock.sendall(opening() + frame(0, begin) + attaches + frame(0, codec.encode(t.Close())))
        found, closed = answers(sock, timeout=60)
    finally:
        stop.set()
        probe.join()
    assert closed and typed(found)
    assert found.count("amqp:resource-limit-exceeded") == 10_000 - 1000
    assert max(latencies) < 0.5, sorted(latencies)[-5:]  # (2.2 s in one pass before)


def http_status(port: int, header_bytes: int) -> int:
    request = (
        f"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: {'a' * header_bytes}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(request)
    head = sock.recv(64)
    sock.close()
    return int(head.split()[1])


def test_http_headers_over_64_kib_get_431(env: dict[str, Any]) -> None:
    assert http_status(env["http"], 60_000) == 200
    assert http_status(env["http"], 70_000) == 431
    assert http_status(env["http"], 100_000) == 431


def test_settled_completes_are_synced_with_no_one_waiting(env: dict[str, Any]) -> None:
    daemon = env["daemon"]
    for k in range(5):
        daemon.cli("send", "settled", "--body", f"m{k}", check=True)
    client = RawClient(env["amqp"])
    try:
        handle = client.attach(True, "settled")
        client.until(t.Attach)
        client.sock.sendall(framing.encode_frame(0, t.Flow(0, 5000, 0, 5000, handle, 0, 5)))
        ids = [client.until(t.Transfer).body.delivery_id for _ in range(5)]
        rounds = cli_json(daemon, "daemon", "status")["commit_rounds"]
        # settled=true: the peer waits for no answer (pre-settled accepts)
        done = t.Disposition(True, ids[0], ids[-1], True, t.Accepted())
        client.sock.sendall(framing.encode_frame(0, done))
        deadline = time.monotonic() + 10
        while cli_json(daemon, "daemon", "status")["commit_rounds"] == rounds:
            assert time.monotonic() < deadline, "the settled completes were never synced"
            time.sleep(0.05)
    finally:
        client.close()
    assert peek_all(daemon, "settled") == []


# ------------------------------------------------------------------ the fuzz test


def recorded_session(env: dict[str, Any]) -> list[bytes]:
    """What a real azure-servicebus client sends for a send, a receive with completes and a
    peek, through a recording relay: the protocol headers and frames of its connection."""
    with Relay(target=("127.0.0.1", env["amqp"]), record=True) as relay:
        text = env["conn"].replace(f":{env['amqp']}", f":{relay.port}")
        with ServiceBusClient.from_connection_string(text) as client:
            with client.get_queue_sender("fuzz") as sender:
                sender.send_messages([ServiceBusMessage(f"r{k}") for k in range(2)])
                sender.send_messages(ServiceBusMessage("one", application_properties={"k": 1}))
            with client.get_queue_receiver("fuzz", max_wait_time=2) as receiver:
                for m in receiver.receive_messages(max_message_count=2, max_wait_time=5):
                    receiver.complete_message(m)
                receiver.peek_messages(max_message_count=1)
        stream = bytes(max(relay.streams, key=len))
    pieces = []
    pos = 0
    while pos < len(stream):
        amqp = stream[pos : pos + 4] == b"AMQP"
        size = 8 if amqp else struct.unpack_from(">I", stream, pos)[0]
        pieces.append(stream[pos : pos + size])
        pos += size
    return pieces


def mutate(pieces: list[bytes], rng: random.Random) -> bytes:
    out = list(pieces)
    frames = [i for i, p in enumerate(out) if not p.startswith(b"AMQP") and len(p) > 8]
    i = rng.choice(frames)
    p = bytearray(out[i])
    kind = rng.randrange(8)
    if kind == 0:  # a flipped byte in the body
        p[rng.randrange(8, len(p))] ^= 1 << rng.randrange(8)
    elif kind == 1:  # a random byte
        p[rng.randrange(8, len(p))] = rng.randrange(256)
    elif kind == 2:  # the body cut short, the size kept true
        p = p[: rng.randrange(9, len(p) + 1)]
        p[0:4] = struct.pack(">I", len(p))
    elif kind == 3:  # a lying size
        p[0:4] = struct.pack(">I", rng.choice([0, 7, len(p) + 1, 70_000, 2**32 - 1]))
    elif kind == 4:  # the frame many times over (attaches, flows, transfers replayed)
        out[i : i + 1] = [bytes(p)] * rng.randrange(2, 500)
        return b"".join(out)
    elif kind == 5:  # a hostile performative in its place
        bomb = rng.choice([nested_lists(2_000), null_arrays(200), b"\x00" * 5000 + b"\x40\x40"])
        p = bytearray(frame(struct.unpack_from(">H", p, 6)[0], bomb))
    elif kind == 6:  # a transfer's payload replaced by a hostile message
        transfers = [j for j in frames if out[j][8:11] == b"\x00\x53\x14"]
        if transfers:
            i = rng.choice(transfers)
            raw = out[i]
            fr, _ = framing.parse_frame(raw, 0, 1 << 24) or (None, 0)
            assert fr is not None
            bad = rng.choice(list(bad_messages().values()))
            p = bytearray(frame(fr.channel, raw[8 : len(raw) - len(fr.payload)], bad))
    else:  # random bytes appended to the body
        p += rng.randbytes(rng.randrange(1, 64))
        p[0:4] = struct.pack(">I", len(p))
    out[i] = bytes(p)
    return b"".join(out)


def replay(port: int, data: bytes) -> tuple[list[str], bool]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        sock.sendall(data + frame(0, codec.encode(t.Close())))
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the daemon closed first: what it sent tells
    return answers(sock)


def steady_client(conn: str, stop: threading.Event, out: list[float]) -> None:
    with (
        ServiceBusClient.from_connection_string(conn) as client,
        client.get_queue_sender("steady") as sender,
        client.get_queue_receiver("steady", max_wait_time=5) as receiver,
    ):
        while not stop.is_set():
            started = time.monotonic()
            sender.send_messages(ServiceBusMessage("tick"))
            (m,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(m)
            out.append(time.monotonic() - started)


def test_fuzzed_sdk_sessions_get_typed_errors_and_lose_nothing(env: dict[str, Any]) -> None:
    daemon = env["daemon"]
    with (
        ServiceBusClient.from_connection_string(env["conn"]) as client,
        client.get_queue_sender("kept") as sender,
    ):
        sender.send_messages([ServiceBusMessage(f"kept{k}") for k in range(20)])
    pieces = recorded_session(env)
    rng = random.Random(22)
    stop = threading.Event()
    latencies: list[float] = []
    steady = threading.Thread(target=steady_client, args=(env["conn"], stop, latencies))
    steady.start()
    results: list[tuple[list[str], bool]] = []
    try:
        while not latencies and steady.is_alive():  # (the SDK client connects first)
            time.sleep(0.05)
        deadline = time.monotonic() + FUZZ_SECONDS
        with ThreadPoolExecutor(4) as pool:
            # MUTANTS at least, and while the SDK client has made fewer than 30 round trips
            while time.monotonic() < deadline and (len(results) < MUTANTS or len(latencies) < 30):
                batch = [mutate(pieces, rng) for _ in range(8)]
                results += pool.map(lambda m: replay(env["amqp"], m), batch)
    finally:
        stop.set()
        steady.join()
    assert all(closed for _, closed in results), "a fuzzed connection was left hanging"
    bad = [found for found, _ in results if not typed(found)]
    assert not bad, bad
    assert len(results) >= MUTANTS and len(latencies) >= 30
    p99 = sorted(latencies)[max(0, int(len(latencies) * 0.99) - 1)]
    assert p99 < P99_S, sorted(latencies)[-5:]
    # every acknowledged message is still there, peekable and receivable
    for queue, expected in (("kept", 20), ("fuzz", None)):
        rows = daemon.cli(
            "-o", "json", "peek", queue, "--count", "250", "--from-sequence", "0", check=True
        ).jsonl()
        if expected is not None:
            assert len(rows) == expected
        mode = ServiceBusReceiveMode.RECEIVE_AND_DELETE
        got = 0
        with (
            ServiceBusClient.from_connection_string(env["conn"]) as client,
            client.get_queue_receiver(queue, receive_mode=mode, max_wait_time=2) as receiver,
        ):
            while batch := receiver.receive_messages(max_message_count=100, max_wait_time=2):
                got += len(batch)
        assert got == len(rows), (queue, got, len(rows))


def unreadable_record(daemon: Any, queue: str) -> None:
    """Make the first stored record of ``queue`` undecodable with a valid CRC (as a record a
    buggy release stored would be): its MessagePack starts with 0xc1, a byte never used."""
    segment = next((daemon.data_dir / "namespaces").glob(f"*/queues/{queue}/p00/*.log"))
    raw = bytearray(segment.read_bytes())
    length = struct.unpack_from("<I", raw, 16)[0]
    raw[56] = 0xC1  # (32-byte batch header, 24-byte record header, then the payload)
    raw[20:24] = struct.pack("<I", crc32c.crc32c(bytes(raw[24 : 20 + length])))
    segment.write_bytes(raw)
    for checkpoint in segment.parent.glob("checkpoint*.bin"):  # (they hold each record's CRC)
        checkpoint.unlink()


def test_a_record_that_cannot_be_rendered_is_dead_lettered_and_never_blocks_the_others(
    daemon: Any,
) -> None:
    daemon.cli("queue", "create", "q", check=True)
    daemon.cli("send", "q", "--body", "damaged", check=True)
    daemon.stop()
    unreadable_record(daemon, "q")
    daemon.start()
    daemon.cli("send", "q", "--body", "fine", check=True)
    with (
        ServiceBusClient.from_connection_string(connection_string(daemon)) as client,
        client.get_queue_receiver("q", max_wait_time=3) as receiver,
    ):
        assert [str(m) for m in receiver.peek_messages(max_message_count=10)] == ["fine"]
        got = receiver.receive_messages(max_message_count=10, max_wait_time=3)
        assert [str(m) for m in got] == ["fine"]
        receiver.complete_message(got[0])
    info = cli_json(daemon, "queue", "show", "q")
    assert info["dead_letter_message_count"] == 1, info
    log = (daemon.data_dir / "sbctld.log").read_text()
    assert "Traceback" not in log and log.count("cannot be sent") == 1
