"""Bad input never kills the daemon and always gets a clear error.

Hostile names and oversize or inconsistent messages through the CLI and the client, and
raw abuse of the Unix socket (daemon/README.md §23: length checked before the body is read; a
malformed request becomes a BadRequest, never a traceback).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from conftest import parked_receives, run_cli, wait_parked
from sbctl import Client
from sbctl.client import AsyncClient
from sbctl.core.errors import BadRequest, InvalidOperation, MessageSizeExceeded
from sbctl.core.protocol import (
    LENGTH,
    Empty,
    Receive,
    Reply,
    decode_reply,
    decode_result,
    encode_frame,
    encode_request,
)
from sbctl.core.records import Message

NS = "sbemulatorns"
ESCAPE = f"sbctl-escape-{uuid.uuid4().hex[:8]}"
HOSTILE_NAMES = [
    "..",
    ".",
    "a/../../b",
    "/etc/passwd",
    "a\nb",
    "a" * 261,
    "../../../../../" + ESCAPE,
    "a/./b",
    "a//b",
    "a\\..\\b",
    "q$x",
]
CLI_NAMES = ["..", "a/../../b", "/etc/passwd", "a\nb", "a" * 261, "../../../../../" + ESCAPE]


class SharedDaemon:
    """One daemon for the whole module: every abuse below lands on the same process, which
    must survive all of it (and it keeps the module fast). Same interface as the
    ``daemon`` fixture's Daemon, as far as these tests use it."""

    def __init__(self, root: Path) -> None:
        self.data_dir = root / "data"
        self.socket = root / "s.sock"
        self.env = dict(os.environ)
        self.env.update(
            SBCTL_DATA_DIR=str(self.data_dir),
            SBCTL_SOCKET=str(self.socket),
            NO_COLOR="1",
            SBCTL_AMQP_PORT="0",  # never the shared 5672
            SBCTL_HTTP_PORT="0",  # nor 5300
        )
        self.env.pop("SBCTL_NAMESPACE", None)

    def cli(self, *args: str, input: str | None = None, check: bool = False) -> Any:
        result = run_cli(list(args), self.env, input)
        proc = subprocess.CompletedProcess(
            ["sbctl", *args], result.code, result.stdout, result.stderr
        )
        if check:
            assert proc.returncode == 0, proc
        return proc

    def client(self) -> Client:
        return Client(self.socket)

    def pid(self) -> int:
        return int((self.data_dir / "sbctld.pid").read_text().strip())

    def parked_receives(self) -> int:
        return parked_receives(self.socket)

    def wait_parked(self, n: int = 1, timeout: float = 30.0) -> None:
        wait_parked(self.socket, n, timeout)


@pytest.fixture(scope="module")
def daemon() -> Iterator[SharedDaemon]:
    """Overrides conftest's per-test ``daemon`` for this module only."""
    root = Path(tempfile.mkdtemp(prefix="sbr-"))
    d = SharedDaemon(root)
    d.cli("daemon", "start", check=True)
    try:
        yield d
    finally:
        d.cli("daemon", "stop")
        shutil.rmtree(root, ignore_errors=True)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def healthy(daemon: Any, pid: int) -> None:
    """The same daemon process answers ping, and a send/receive round trip works."""
    assert daemon.pid() == pid
    with daemon.client() as c:
        assert c.ping()["pid"] == pid
        if not any(q["name"] == "health" for q in c.queue_list()):
            c.queue_create("health")
        body = uuid.uuid4().hex.encode()
        c.send("health", [Message(body=body)])
        got = c.receive("health", count=10, max_wait=5, mode="receive-and-delete")
        assert [m.body for m in got] == [body]


def ensure_queue(c: Client, name: str, **options: Any) -> None:
    if name not in {q["name"] for q in c.queue_list()}:
        c.queue_create(name, **options)


def json_error(result: Any, code: int) -> dict[str, Any]:
    assert result.returncode == code, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    error: dict[str, Any] = json.loads(lines[0])["error"]
    return error


# --------------------------------------------------------------------------- names


def test_hostile_queue_names_via_cli(daemon: Any) -> None:
    pid = daemon.pid()
    root = daemon.data_dir.parent
    before = tree(root)
    escape = Path(tempfile.gettempdir()) / ESCAPE
    commands = [("queue", "create", name) for name in CLI_NAMES]
    commands += [("send", name, "--body", "x") for name in ("a/../../b", "/etc/passwd")]
    commands += [("namespace", "create", "../../evil")]
    for args in commands:
        error = json_error(daemon.cli("-o", "json", *args), 5)
        assert error["code"] == "BadRequest", (args, error)
        assert "\n" not in error["message"]
    assert tree(root) == before
    assert not escape.exists()
    healthy(daemon, pid)


def test_hostile_names_via_client(daemon: Any) -> None:
    pid = daemon.pid()
    root = daemon.data_dir.parent
    with daemon.client() as c:
        ensure_queue(c, "real")
        queues = c.queue_list()
        before = tree(root)
        for name in [*HOSTILE_NAMES, "a\x00b", "\x00", "real\x00/../../x"]:
            with pytest.raises(BadRequest):
                c.queue_create(name)
            with pytest.raises(BadRequest):
                c.send(name, [Message(body=b"x")])
            with pytest.raises(BadRequest):
                c.peek(name)
            with pytest.raises(BadRequest):
                c.receive(name)
            with pytest.raises(BadRequest):
                c.queue_delete(name)
        for ns in ("a\x00bcdef", "../../evil", "x" * 51):
            with pytest.raises(BadRequest):
                c.namespace_create(ns)
        assert c.queue_list() == queues
    assert tree(root) == before
    healthy(daemon, pid)


# --------------------------------------------------------------------------- messages


def test_bad_messages_via_cli(daemon: Any, tmp_path: Path) -> None:
    pid = daemon.pid()
    daemon.cli("queue", "create", "inbox-cli", check=True)

    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * 300 * 1024)
    error = json_error(daemon.cli("-o", "json", "send", "inbox-cli", "--body-file", str(big)), 6)
    assert error["code"] == "MessageSizeExceeded"

    args = ("send", "inbox-cli", "--body", "x", "--session-id", "s-1", "--partition-key", "p-2")
    error = json_error(daemon.cli("-o", "json", *args), 5)
    assert error["code"] == "InvalidOperation"

    jsonl = '{"body": "ok 1"}\n{"body": "ok 2"}\n{"body": oops}\n{"body": "ok 4"}\n'
    result = daemon.cli("-o", "json", "send", "inbox-cli", "--input", "-", input=jsonl)
    error = json_error(result, 5)
    assert error["message"].startswith("line 3:"), error
    plain = daemon.cli("send", "inbox-cli", "--input", "-", input='{"body": "a"}\n{"bogus": 1}\n')
    assert plain.returncode == 5
    assert plain.stderr.splitlines() == [plain.stderr.strip()]
    assert plain.stderr.startswith("error: line 2:"), plain.stderr

    info = json.loads(daemon.cli("-o", "json", "queue", "show", "inbox-cli", check=True).stdout)
    assert info["active_message_count"] == 0
    assert info["total_message_count"] == 0
    assert info["size_in_bytes"] == 0
    healthy(daemon, pid)


def test_bad_messages_via_client(daemon: Any) -> None:
    pid = daemon.pid()
    with daemon.client() as c:
        c.queue_create("inbox-api", enable_partitioning=True)
        with pytest.raises(MessageSizeExceeded):
            c.send("inbox-api", [Message(body=b"x" * 300 * 1024)])
        with pytest.raises(InvalidOperation) as info:
            c.send("inbox-api", [Message(body=b"x", session_id="a", partition_key="b")])
        assert type(info.value) is InvalidOperation
        # A bad message anywhere in a batch refuses the whole batch.
        with pytest.raises(BadRequest):
            c.send("inbox-api", [Message(body=b"fine"), Message(body=b"x", message_id="")])
        with pytest.raises(BadRequest):
            c.send("inbox-api", [Message(body=b"x", time_to_live_ms=-5)])
        with pytest.raises(BadRequest):
            c.send("inbox-api", [])
        assert c.queue_get("inbox-api")["total_message_count"] == 0
    healthy(daemon, pid)


# --------------------------------------------------------------------------- raw socket


def connect(daemon: Any) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    sock.connect(str(daemon.socket))
    return sock


def read_reply(sock: socket.socket) -> Reply | None:
    """One reply frame, or None when the daemon closed the connection."""
    head = sock.recv(4, socket.MSG_WAITALL)
    if not head:
        return None
    assert len(head) == 4
    (n,) = LENGTH.unpack(head)
    body = sock.recv(n, socket.MSG_WAITALL)
    assert len(body) == n
    return decode_reply(body)


def error_of(reply: Reply | None) -> dict[str, Any]:
    assert reply is not None, "the daemon closed the connection without an error frame"
    assert reply.ok is False
    err: dict[str, Any] = decode_result(reply.result)
    assert isinstance(err, dict) and set(err) >= {"code", "message"}, err
    return err


def ping_on(sock: socket.socket, req_id: int) -> None:
    sock.sendall(encode_request(req_id, "ping", Empty()))
    reply = read_reply(sock)
    assert reply is not None and reply.id == req_id and reply.ok, reply


def test_random_bytes(daemon: Any) -> None:
    pid = daemon.pid()
    rng = random.Random(20240521)
    for size in (1, 3, 4, 7, 64, 4096, 70_000):
        with connect(daemon) as sock:
            sock.sendall(rng.randbytes(size))
            sock.settimeout(0.1)
            try:
                while sock.recv(65536):
                    pass
            except TimeoutError:
                pass
    # Random bodies behind a valid length: each gets an error frame, and the stream goes on.
    with connect(daemon) as sock:
        for k in range(20):
            body = rng.randbytes(rng.randint(1, 300))
            sock.sendall(LENGTH.pack(len(body)) + body)
            assert error_of(read_reply(sock))["code"] == "BadRequest"
            ping_on(sock, 1000 + k)
    healthy(daemon, pid)


def test_huge_length_prefix(daemon: Any) -> None:
    pid = daemon.pid()
    with connect(daemon) as sock:
        sock.sendall(b"\xff\xff\xff\x7f")
        err = error_of(read_reply(sock))
        assert err["code"] == "BadRequest"
        assert "limit" in err["message"]
        assert read_reply(sock) is None  # the stream cannot resynchronise: closed
    with connect(daemon) as sock:  # a length just above 16 MiB, with some body behind it
        sock.sendall(LENGTH.pack(16 * 1024 * 1024 + 1) + b"\x00" * 1024)
        assert error_of(read_reply(sock))["code"] == "BadRequest"
    healthy(daemon, pid)


def test_garbage_msgpack_gets_an_error_frame(daemon: Any) -> None:
    pid = daemon.pid()
    garbage = [
        b"\xc1\xc1\xc1 not msgpack",  # 0xc1 is never used in MessagePack
        b"\xdc\xff\xff",  # an array header promising 65535 items, then nothing
        msgspec.msgpack.encode({"v": 1, "id": 1, "op": "ping"}),  # a map, not an array
        msgspec.msgpack.encode([1]),  # too short
        msgspec.msgpack.encode(["1", "2", "ping", {}]),  # wrong types
        msgspec.msgpack.encode([1, 2, "ping", {}, "extra"]),
    ]
    with connect(daemon) as sock:
        for k, body in enumerate(garbage):
            # Pipelined: the bad frame and a ping in one write; both get their answer.
            sock.sendall(LENGTH.pack(len(body)) + body + encode_request(50 + k, "ping", Empty()))
            err = error_of(read_reply(sock))
            assert err["code"] == "BadRequest", (body, err)
            reply = read_reply(sock)
            assert reply is not None and reply.id == 50 + k and reply.ok
    healthy(daemon, pid)


BAD_REQUESTS = {
    "unknown-op": (1, 7, "frobnicate", {}),
    "bad-version": (99, 7, "ping", {}),
    "bad-arg-type": (1, 7, "peek", {"namespace": NS, "entity": "q", "count": "5"}),
    "missing-arg": (1, 7, "send", {"namespace": NS}),
    "unknown-arg": (1, 7, "ping", {"surprise": True}),
}
# Refused by the handler (the queue exists, a message in the batch does not decode).
BAD_MESSAGE = (1, 7, "send", {"namespace": NS, "entity": "q", "messages": [[b"x", 5]]})


@pytest.mark.parametrize(
    "request_", [*BAD_REQUESTS.values(), BAD_MESSAGE], ids=[*BAD_REQUESTS, "bad-message"]
)
def test_bad_request_gets_bad_request(daemon: Any, request_: tuple[Any, ...]) -> None:
    pid = daemon.pid()
    with daemon.client() as c:
        ensure_queue(c, "q")
    with connect(daemon) as sock:
        sock.sendall(encode_frame(request_))
        err = error_of(read_reply(sock))
        assert err["code"] == "BadRequest", err
        ping_on(sock, 8)
    healthy(daemon, pid)


@pytest.mark.parametrize("request_", list(BAD_REQUESTS.values()), ids=list(BAD_REQUESTS))
def test_bad_request_reply_carries_the_request_id(daemon: Any, request_: tuple[Any, ...]) -> None:
    with connect(daemon) as sock:
        sock.sendall(encode_frame(request_))
        reply = read_reply(sock)
        assert reply is not None
        assert reply.id == 7


def test_client_sees_bad_request_for_refused_arguments(daemon: Any) -> None:
    with daemon.client() as c:
        ensure_queue(c, "q")
        with pytest.raises(BadRequest):
            c.peek("q", count="5")  # type: ignore[arg-type]

    async def run() -> None:
        async with AsyncClient(daemon.socket) as ac:
            with pytest.raises(BadRequest):
                await asyncio.wait_for(ac.peek("q", count="5"), 5)  # type: ignore[arg-type]

    asyncio.run(run())


def deep_request(depth: int) -> bytes:
    """A ping whose args nest ``depth`` one-element arrays (a decoder recursion bomb)."""
    return b"\x94\x01\x09\xa4ping" + b"\x91" * depth + b"\xc0"


def test_deeply_nested_msgpack_does_not_kill_the_daemon(daemon: Any) -> None:
    pid = daemon.pid()
    with connect(daemon) as sock:
        body = deep_request(1_000_000)
        sock.sendall(LENGTH.pack(len(body)) + body)
        error_of(read_reply(sock))
        ping_on(sock, 10)
    healthy(daemon, pid)


def test_deeply_nested_msgpack_is_a_bad_request(daemon: Any) -> None:
    with connect(daemon) as sock:
        body = deep_request(1_000_000)
        sock.sendall(LENGTH.pack(len(body)) + body)
        assert error_of(read_reply(sock))["code"] == "BadRequest"


def test_truncated_frames_then_close(daemon: Any) -> None:
    pid = daemon.pid()
    request = encode_request(3, "ping", Empty())
    for cut in (1, 3, 4, 5, len(request) - 1):
        with connect(daemon) as sock:
            sock.sendall(request[:cut])
    with connect(daemon) as sock:
        sock.sendall(LENGTH.pack(100) + b"x" * 10)
        sock.shutdown(socket.SHUT_WR)  # half-close: the daemon sees EOF mid-frame
        sock.settimeout(2)
        try:
            assert read_reply(sock) is None
        except TimeoutError:
            pass  # waiting for the rest is fine too, as long as the daemon lives
    healthy(daemon, pid)


@pytest.mark.parametrize("mode", ["peek-lock", "receive-and-delete"])
def test_disconnect_during_long_poll(daemon: Any, mode: str) -> None:
    pid = daemon.pid()
    with daemon.client() as c:
        queue = f"lp-{mode}"
        c.queue_create(queue)
    for _ in range(3):
        sock = connect(daemon)
        sock.sendall(encode_request(1, "receive", Receive(NS, queue, 1, 30_000, mode)))
        daemon.wait_parked(1)  # parked in the daemon (the earlier ones were dropped)
        sock.close()
        deadline = time.monotonic() + 30
        while daemon.parked_receives():  # the daemon noticed the hang-up
            assert time.monotonic() < deadline, "a hung-up receive stayed parked"
            time.sleep(0.01)
    with daemon.client() as c:
        c.ping()
        c.send(queue, [Message(body=b"for the living")])
        # The message went to nobody: a fresh receiver gets it, delivered for the first time.
        got = c.receive(queue, count=10, max_wait=10)
        assert [m.body for m in got] == [b"for the living"]
        assert got[0].delivery_count == 1
        assert c.complete(queue, [str(got[0].lock_token)])[0].get("ok") is True
    healthy(daemon, pid)


def test_many_abusive_connections_at_once(daemon: Any) -> None:
    pid = daemon.pid()
    socks = [connect(daemon) for _ in range(50)]
    for k, sock in enumerate(socks):
        if k % 3 == 0:
            sock.sendall(LENGTH.pack(1000))  # a frame that never completes
        elif k % 3 == 1:
            sock.sendall(encode_request(k, "receive", Receive(NS, "nope", 1, 30_000, "peek-lock")))
    healthy(daemon, pid)
    for sock in socks:
        sock.close()
    healthy(daemon, pid)
    assert os.path.exists(daemon.socket)
