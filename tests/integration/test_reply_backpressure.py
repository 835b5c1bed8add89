"""A client that pipelines large peeks and never reads its replies cannot grow the daemon
beyond its reply buffer bound, and other clients keep being served promptly."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from typing import Any

import psutil

from sbctl.core.protocol import LENGTH, Peek, decode_reply, encode_request
from sbctl.core.records import Message

BOUND_MB = 8
BODY = 200 * 1024  # under the 256 KB standard-tier message limit
PEEK_COUNT = 40  # one peek reply: about 8 MB
REQUESTS = 100  # about 800 MB of replies asked for, never read (until the end)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < n:
        got = sock.recv(min(n - len(chunks), 4 * 1024 * 1024))
        if not got:
            raise AssertionError("the daemon closed the connection")
        chunks += got
    return bytes(chunks)


def test_a_client_that_never_reads_cannot_grow_the_daemon(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    d.env["SBCTL_REPLY_BUFFER_MB"] = str(BOUND_MB)
    d.start()
    proc = psutil.Process(d.pid())
    with d.client() as c:
        c.queue_create("big")
        c.queue_create("small")
        for k in range(PEEK_COUNT):
            c.send("big", [Message(body=bytes([k]) * BODY)])
        assert len(c.peek("big", count=PEEK_COUNT, from_sequence=1)) == PEEK_COUNT
    rss_before = proc.memory_info().rss

    hog = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hog.connect(str(d.socket))
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    frames = b"".join(
        encode_request(k + 1, "peek", Peek("sbemulatorns", "big", PEEK_COUNT, 1))
        for k in range(REQUESTS)
    )
    hog.settimeout(30)
    hog.sendall(frames)  # small requests: they all fit in the socket buffer at once

    # Meanwhile another client sends and receives single messages; the hog reads nothing.
    peak = rss_before
    latencies: list[float] = []
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, proc.memory_info().rss)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with d.client() as c:
            for k in range(200):
                t0 = time.perf_counter()
                c.send("small", [Message(body=b"x%d" % k)])
                got = c.receive("small", count=1, mode="receive-and-delete")
                latencies.append(time.perf_counter() - t0)
                assert [m.body for m in got] == [b"x%d" % k]
        time.sleep(0.5)
    finally:
        stop.set()
        watcher.join()
    growth_mb = (peak - rss_before) / 2**20
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(
        f"\nreply bound {BOUND_MB} MB; {REQUESTS} unread peeks of "
        f"~{PEEK_COUNT * BODY // 2**20} MB: "
        f"daemon RSS {rss_before / 2**20:.0f} MB -> peak {peak / 2**20:.0f} MB "
        f"(+{growth_mb:.0f} MB); other client send+receive: median "
        f"{statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms"
    )
    # Without the bound the daemon would buffer all ~800 MB of replies.
    assert growth_mb < 150, f"daemon RSS grew by {growth_mb:.0f} MB"
    assert p99 < 2.0, f"another client's p99 was {p99 * 1000:.0f} ms"

    # The hog finally reads: every reply arrives, whole and in order (none was dropped).
    for k in range(REQUESTS):
        (n,) = LENGTH.unpack(recv_exact(hog, 4))
        reply = decode_reply(recv_exact(hog, n))
        assert reply.id == k + 1 and reply.ok
    hog.close()
    with d.client() as c:
        assert c.ping()["pid"] == proc.pid
