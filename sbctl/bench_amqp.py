"""``sbctl bench --amqp``: the same durable workloads through the daemon's AMQP endpoint and
through its Unix socket in one run, with the daemon's CPU per message for each.

- Unix socket: batches of ``batch`` messages sent with :class:`sbctl.client.Client`, one
  request in flight; then received ``batch`` at a time in peek-lock and completed with one
  settle request per batch.
- AMQP: the same with :class:`sbctl.amqp_client.AmqpClient`, the way the SDKs batch: one
  batch transfer (message format 0x80013700) of ``batch`` messages in flight, unsettled
  until the daemon accepts it after its group commit; then ``batch`` credit on a peek-lock
  receiver link and one ``first..last`` accepted disposition per batch, answered after the
  group commit.
- The daemon's CPU per message comes from ``daemon status`` (``cpu_seconds``) before and
  after each phase.
- The four phases run in :data:`ROUNDS` rounds, interleaved (Unix send, Unix receive, AMQP
  send, AMQP receive, then again), and each figure is the median of its rounds, so that a
  burst of other work on the machine, or a first round's warm-up, moves no figure alone.
- With ``connections``: that many AMQP connections opened at once, each doing SASL, open,
  begin, a ``$cbs`` put-token and a sender attach, held together while the daemon's RSS is
  read; the growth over the RSS before is reported.

Everything happens in a throwaway namespace (``bench-<hex>``), deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sbctl.amqp_client import AmqpClient, AmqpClientError, batch_payload
from sbctl.bench import LOCK_DURATION_MS, QUEUE_MAX_SIZE_MB, namespace_name
from sbctl.client import Client
from sbctl.core.errors import BadRequest, GeneralError, SbctlError
from sbctl.core.records import Message

# Table rows for ``sbctl bench --amqp`` (key, label, unit), as :data:`sbctl.cli.cmd_bench.ROWS`.
AMQP_ROWS = (
    ("unix_send_msgs_per_s", "Unix socket: send", "msgs/s"),
    ("amqp_send_msgs_per_s", "AMQP: send (batch transfers)", "msgs/s"),
    ("unix_receive_msgs_per_s", "Unix socket: receive + complete", "msgs/s"),
    ("amqp_receive_msgs_per_s", "AMQP: receive + complete", "msgs/s"),
    ("unix_send_daemon_cpu_us_per_msg", "Unix socket: daemon CPU per sent message", "us"),
    ("amqp_send_daemon_cpu_us_per_msg", "AMQP: daemon CPU per sent message", "us"),
    ("send_cpu_amqp_vs_unix", "send: AMQP / Unix daemon CPU", "x"),
    ("unix_receive_daemon_cpu_us_per_msg", "Unix socket: daemon CPU per received message", "us"),
    ("amqp_receive_daemon_cpu_us_per_msg", "AMQP: daemon CPU per received message", "us"),
    ("receive_cpu_amqp_vs_unix", "receive + complete: AMQP / Unix daemon CPU", "x"),
    ("amqp_connections", "AMQP connections held at once", "n"),
    ("amqp_connections_setup_s", "time to set them all up", "s"),
    ("amqp_connections_rss_growth_mb", "daemon RSS growth with them held", "MB"),
    ("amqp_connections_daemon_fds_added", "daemon file descriptors added with them held", "n"),
)
SETUP_CONCURRENCY = 100  # connections being set up at once (all of them are held at the end)
PHASE_TIMEOUT = 600.0


def _cpu(client: Client) -> float:
    return float(client.status()["cpu_seconds"])


def _rss(client: Client) -> int:
    info = client.status()
    rss = info.get("rss_bytes")
    if isinstance(rss, int):
        return rss
    import psutil

    return int(psutil.Process(int(info["pid"])).memory_info().rss)


def _fds(client: Client) -> int:
    """The daemon's open file descriptors (-1 when psutil cannot tell)."""
    import psutil

    try:
        return int(psutil.Process(int(client.status()["pid"])).num_fds())
    except (psutil.Error, OSError, KeyError, ValueError):
        return -1


ROUNDS = 3


def _measure(
    admin: Client, runs: dict[str, list[float]], name: str, count: int, work: Callable[[], None]
) -> None:
    c0, t0 = _cpu(admin), time.perf_counter()
    work()
    secs = time.perf_counter() - t0
    runs.setdefault(f"{name}_msgs_per_s", []).append(count / secs)
    runs.setdefault(f"{name}_daemon_cpu_us_per_msg", []).append((_cpu(admin) - c0) / count * 1e6)


def _unix_send(client: Client, entity: str, batches: list[int], body: bytes) -> None:
    for n in batches:
        client.send(entity, [Message(body=body) for _ in range(n)])


def _unix_receive(client: Client, entity: str, messages: int, batch: int) -> None:
    got = 0
    deadline = time.monotonic() + PHASE_TIMEOUT
    while got < messages:
        if time.monotonic() > deadline:
            raise GeneralError(f"the Unix receive phase got {got} of {messages} messages")
        received = client.receive(entity, min(batch, messages - got), max_wait=5)
        if received:
            client.complete(entity, [str(m.lock_token) for m in received])
        got += len(received)


async def _amqp_send(
    port: int, ep: dict[str, Any], entity: str, batches: list[int], body: bytes
) -> None:
    client = await AmqpClient.connect("127.0.0.1", port)
    try:
        await client.put_token(f"sb://localhost:{port}/{entity}", ep["key_name"], ep["key"])
        handle = await client.attach(False, entity)
        payloads = {n: batch_payload([body] * n) for n in set(batches)}
        for n in batches:
            await client.send_batch(handle, payloads[n])
    finally:
        client.close()


async def _amqp_receive(
    port: int, ep: dict[str, Any], entity: str, messages: int, batch: int
) -> None:
    client = await AmqpClient.connect("127.0.0.1", port)
    try:
        await client.put_token(f"sb://localhost:{port}/{entity}", ep["key_name"], ep["key"])
        handle = await client.attach(True, entity)
        got = 0
        while got < messages:
            deliveries = await client.receive(handle, min(batch, messages - got))
            ids = [d for d, _ in deliveries]
            await client.complete(min(ids), max(ids))
            got += len(deliveries)
    finally:
        client.close()


async def _hold(
    port: int, ep: dict[str, Any], entity: str, n: int, measure: Callable[[], int]
) -> tuple[float, int]:
    gate = asyncio.Semaphore(SETUP_CONCURRENCY)
    clients: list[AmqpClient] = []

    async def one() -> None:
        async with gate:
            client = await AmqpClient.connect("127.0.0.1", port)
            clients.append(client)
            await client.put_token(f"sb://localhost:{port}/{entity}", ep["key_name"], ep["key"])
            await client.attach(False, entity)

    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(asyncio.gather(*(one() for _ in range(n))), PHASE_TIMEOUT)
        secs = time.perf_counter() - t0
        return secs, await asyncio.to_thread(measure)
    finally:
        for client in clients:
            client.close()
        await asyncio.sleep(0.1)


def _room_for(connections: int) -> None:
    """Raise this process's open-file limit to fit ``connections`` sockets, or say why not."""
    import resource

    need = connections + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise BadRequest(
            f"--connections {connections} needs {need} open files; the hard limit is {hard} "
            "(raise it with ulimit -n)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))


def _run(coro: Any) -> Any:
    """Run an AMQP phase; a failure is one clear error, not a traceback."""
    try:
        return asyncio.run(coro)
    except (AmqpClientError, OSError, TimeoutError) as exc:
        raise GeneralError(f"the AMQP bench failed: {exc or type(exc).__name__}") from None


def _rounds(
    admin: Client,
    runs: dict[str, list[float]],
    port: int,
    ep: dict[str, Any],
    messages: int,
    batch: int,
    batches: list[int],
    body: bytes,
) -> None:
    """One round of the four phases, each figure appended to ``runs``."""
    _measure(admin, runs, "unix_send", messages, lambda: _unix_send(admin, "unix", batches, body))
    _measure(
        admin, runs, "unix_receive", messages, lambda: _unix_receive(admin, "unix", messages, batch)
    )
    _measure(
        admin,
        runs,
        "amqp_send",
        messages,
        lambda: _run(_amqp_send(port, ep, "amqp", batches, body)),
    )
    _measure(
        admin,
        runs,
        "amqp_receive",
        messages,
        lambda: _run(_amqp_receive(port, ep, "amqp", messages, batch)),
    )


def _split(messages: int, batch: int) -> list[int]:
    return [batch] * (messages // batch) + ([messages % batch] if messages % batch else [])


def amqp_bench(
    socket_path: Path | None,
    *,
    messages: int = 20_000,
    size: int = 1024,
    batch: int = 100,
    connections: int = 0,
) -> dict[str, Any]:
    """Run the workloads above against the running daemon; see the module docstring."""
    if messages < 1 or batch < 1 or size < 0 or connections < 0:
        raise BadRequest(
            "--messages and --batch must be at least 1, --size and --connections not negative"
        )
    if connections:
        _room_for(connections)
    sock = str(socket_path) if socket_path is not None else None
    out: dict[str, Any] = {"messages": messages, "size": size, "batch": batch}
    ns = namespace_name()
    with Client(sock, timeout=60) as admin:
        sock = admin.socket_path
        admin.namespace_create(ns, credits_per_second=0)  # measure the daemon, not credits
    out["namespace"] = ns
    body = b"x" * size
    batches = _split(messages, batch)
    try:
        with Client(sock, namespace=ns, timeout=60) as admin:
            ep = admin.amqp_endpoint(ns)
            port = int(ep["port"])
            for q in ("unix", "amqp"):
                admin.queue_create(
                    q, max_size_in_megabytes=QUEUE_MAX_SIZE_MB, lock_duration=LOCK_DURATION_MS
                )
            runs: dict[str, list[float]] = {}
            for _ in range(ROUNDS):
                _rounds(admin, runs, port, ep, messages, batch, batches, body)
            out["rounds"] = ROUNDS
            out.update({key: statistics.median(values) for key, values in runs.items()})
            for phase in ("send", "receive"):
                unix = out[f"unix_{phase}_daemon_cpu_us_per_msg"]
                if unix > 0:
                    out[f"{phase}_cpu_amqp_vs_unix"] = (
                        out[f"amqp_{phase}_daemon_cpu_us_per_msg"] / unix
                    )
            if connections:
                before = _rss(admin)

                fds_before = _fds(admin)
                seen: dict[str, int] = {}

                def measure() -> int:
                    with Client(sock, timeout=60) as c:
                        seen["fds"] = _fds(c)
                        return _rss(c)

                secs, held = _run(_hold(port, ep, "amqp", connections, measure))
                out["amqp_connections"] = connections
                out["amqp_connections_setup_s"] = secs
                out["amqp_connections_rss_growth_mb"] = (held - before) / 2**20
                if fds_before >= 0 and seen.get("fds", -1) >= 0:
                    # Evidence they were all open at once: the daemon's extra sockets.
                    out["amqp_connections_daemon_fds_added"] = seen["fds"] - fds_before
    finally:
        with contextlib.suppress(SbctlError), Client(sock, timeout=60) as cleanup:
            cleanup.namespace_delete(ns)
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}
