"""``sbctl bench``: durable throughput and latency of the running daemon, next to this
machine's raw ceilings measured in the same run.

- :func:`run_bench` creates a throwaway namespace (``bench-<hex>``) and queue on the running
  daemon, sends ``messages`` messages from ``clients`` concurrent connections (one request of
  ``batch`` messages in flight per connection), then receives and completes them all in
  peek-lock mode with as many connections, and deletes the namespace again, also when it
  fails or is interrupted.
- :func:`raw_fsync_rate` is the disk's ceiling: append 1 KiB records with ``os.write`` and
  ``os.fdatasync`` every ``records_per_sync`` records, in the daemon's file system.
- :func:`raw_socket_rtt_rate` is the IPC ceiling: length-prefixed small frames echoed over a
  Unix socket pair by a second process, one in flight.
- :func:`daemon_start_ms` times ``daemonctl.start`` on a fresh, empty data dir.

With more than one client, the clients run in up to :data:`MAX_WORKERS` forked worker
processes, so that one client interpreter is not the bottleneck. Each worker connects and
builds its messages first; the clock starts when every worker is ready. Each phase also
reports the clients' CPU per message (their processes' CPU time over the phase) beside the
daemon's: what a target leaves for the two together is in :mod:`sbctl.bench_targets`.

This module is a library (no typer, no rich); :mod:`sbctl.cli.cmd_bench` prints its result.
Every phase is bounded by ``timeout`` seconds.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import math
import multiprocessing
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from sbctl.client import DEFAULT_NAMESPACE, AsyncClient, Client
from sbctl.core import layout
from sbctl.core.errors import BadRequest, GeneralError, SbctlError, ServiceTimeout
from sbctl.core.records import Message
from sbctl.core.wire_errors import error_from_wire, error_to_wire

RAW_RECORD_BYTES = 1024
RAW_SECONDS = 1.0
RAW_BATCH = 100
SOCKET_FRAME_BYTES = 64
START_RUNS = 3
MAX_WORKERS = 2
PHASE_TIMEOUT = 600.0
QUEUE_MAX_SIZE_MB = 5120  # the largest Standard size, so big runs do not hit the quota
LOCK_DURATION_MS = 300_000  # the longest allowed: a slow machine must not lose locks

_LEN = struct.Struct("<I")


# ---------------------------------------------------------------- the raw ceilings


def _scratch_dir(data_dir: Path) -> Path:
    """A writable directory on the same file system as ``data_dir``, outside it when
    possible (only the daemon writes the data dir, daemon/README.md §27)."""
    probe = data_dir if data_dir.exists() else data_dir.parent
    while not probe.exists():
        probe = probe.parent
    dev = probe.stat().st_dev
    for candidate in (data_dir.parent, Path(tempfile.gettempdir()), data_dir):
        with contextlib.suppress(OSError):
            if candidate.stat().st_dev == dev and os.access(candidate, os.W_OK | os.X_OK):
                return candidate
    return probe


def raw_fsync_rate(
    directory: Path,
    records_per_sync: int = 1,
    seconds: float = RAW_SECONDS,
    record_bytes: int = RAW_RECORD_BYTES,
) -> float:
    """Records per second appended with ``os.write`` + ``os.fdatasync`` every
    ``records_per_sync`` records, to a temporary file in ``directory``'s file system."""
    if records_per_sync < 1:
        raise BadRequest("records_per_sync must be at least 1")
    record = os.urandom(record_bytes)
    chunk = record * records_per_sync
    fd, name = tempfile.mkstemp(prefix=".sbctl-bench-", suffix=".tmp", dir=_scratch_dir(directory))
    try:
        os.write(fd, chunk)  # warm up: create the first block and the inode's extent
        os.fdatasync(fd)
        syncs = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            os.write(fd, chunk)
            os.fdatasync(fd)
            syncs += 1
            now = time.perf_counter()
            if now >= deadline:
                break
        return syncs * records_per_sync / (now - t0)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _echo(sock: socket.socket) -> None:
    with contextlib.suppress(EOFError, OSError):
        while True:
            head = _recv_exact(sock, 4)
            (n,) = _LEN.unpack(head)
            sock.sendall(head + _recv_exact(sock, n))


def raw_socket_rtt_rate(
    seconds: float = RAW_SECONDS, frame_bytes: int = SOCKET_FRAME_BYTES
) -> float:
    """Round trips per second of ``frame_bytes`` length-prefixed frames echoed by another
    process over a Unix stream socket pair, one frame in flight."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 0
        try:
            ours.close()
            _echo(theirs)
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    theirs.close()
    try:
        ours.settimeout(max(10.0, seconds * 10))
        frame = _LEN.pack(frame_bytes) + os.urandom(frame_bytes)
        want = len(frame)
        for _ in range(100):  # warm up
            ours.sendall(frame)
            _recv_exact(ours, want)
        trips = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            ours.sendall(frame)
            _recv_exact(ours, want)
            trips += 1
            now = time.perf_counter()
            if now >= deadline:
                break
        return trips / (now - t0)
    except (OSError, EOFError) as exc:
        raise GeneralError(f"raw socket measurement failed: {exc}") from None
    finally:
        ours.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


# Private daemons the bench starts serve AMQP and HTTP on free ports, never the default 5672
# and 5300: the user's own daemon may hold them.
PRIVATE_AMQP = (True, "127.0.0.1", 0)
PRIVATE_HTTP = (True, "127.0.0.1", 0)


def _median_start_ms(
    start: Callable[[Path, Path], object], tmpdir: Path | None, runs: int
) -> float:
    """Median milliseconds of ``start(data_dir, socket)`` on fresh, empty data dirs; each
    daemon is stopped again."""
    from sbctl import daemonctl

    times: list[float] = []
    for _ in range(max(1, runs)):
        root = Path(tempfile.mkdtemp(prefix="sbb-", dir=tmpdir))
        data_dir, sock = root / "data", root / "s.sock"
        try:
            t0 = time.perf_counter()
            start(data_dir, sock)
            times.append((time.perf_counter() - t0) * 1000)
        finally:
            with contextlib.suppress(SbctlError, OSError):
                daemonctl.stop(data_dir, sock)
            shutil.rmtree(root, ignore_errors=True)
    times.sort()
    return times[len(times) // 2]


def daemon_start_ms(tmpdir: Path | None = None, runs: int = START_RUNS) -> float:
    """``daemonctl.start`` to a ready daemon: fork, recovery, socket accepting."""
    from sbctl import daemonctl

    return _median_start_ms(
        lambda data_dir, sock: daemonctl.start(
            data_dir, sock, amqp=PRIVATE_AMQP, http=PRIVATE_HTTP
        ),
        tmpdir,
        runs,
    )


def cli_start_ms(tmpdir: Path | None = None, runs: int = START_RUNS) -> float:
    """The whole ``sbctl daemon start`` command in a new process (interpreter and CLI
    start-up included)."""

    def start(data_dir: Path, sock: Path) -> None:
        cmd = [sys.executable, "-m", "sbctl.cli.app", "--data-dir", str(data_dir)]
        subprocess.run(
            [
                *cmd,
                "--socket",
                str(sock),
                "daemon",
                "start",
                "--amqp-port",
                "0",
                "--http-port",
                "0",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )

    return _median_start_ms(start, tmpdir, runs)


def stored_bench(
    messages: int, size: int, tmpdir: Path | None = None, *, restarts: bool = True
) -> dict[str, Any]:
    """Memory and restart time of a private daemon holding ``messages`` stored messages:
    RSS above idle (and per message), then (``restarts``) restart after a clean stop (from
    the checkpoint), and restart after SIGKILL with no checkpoint at all (every segment
    scanned and CRC-checked)."""
    import psutil

    from sbctl import daemonctl

    root = Path(tempfile.mkdtemp(prefix="sbs-", dir=tmpdir))
    data_dir, sock = root / "data", root / "s.sock"
    out: dict[str, Any] = {"stored_messages": messages, "size": size}
    try:
        daemonctl.start(
            data_dir, sock, default_credits_per_second=0, amqp=PRIVATE_AMQP, http=PRIVATE_HTTP
        )  # (unthrottled: the fill measures the daemon, not the credits)
        with Client(sock) as client:
            proc = psutil.Process(int(client.ping()["pid"]))
            idle = proc.memory_info().rss
            client.queue_create("stored", max_size_in_megabytes=QUEUE_MAX_SIZE_MB)
            batch = [Message(body=os.urandom(size))] * max(1, min(200, 200_000 // max(size, 1)))
            t0 = time.perf_counter()
            left = messages
            while left > 0:
                client.send("stored", batch[: min(left, len(batch))])
                left -= min(left, len(batch))
            out["fill_msgs_per_s"] = round(messages / (time.perf_counter() - t0))
            out["idle_rss_mb"] = round(idle / 2**20, 1)
            above = proc.memory_info().rss - idle
            out["stored_rss_above_idle_mb"] = round(above / 2**20, 1)
            out["stored_bytes_per_msg"] = round(above / messages, 1)
        daemonctl.stop(data_dir, sock)
        if not restarts:
            return out
        t0 = time.perf_counter()
        pid = int(daemonctl.start(data_dir, sock, amqp=PRIVATE_AMQP, http=PRIVATE_HTTP)["pid"])
        out["restart_s"] = round(time.perf_counter() - t0, 3)
        daemonctl.kill(pid, data_dir)
        queues = f"*/{layout.QUEUES_DIR}/*/p*/{layout.CHECKPOINT_FILE}"
        for ckpt in layout.namespaces_dir(data_dir).glob(queues):
            ckpt.unlink()
        t0 = time.perf_counter()
        daemonctl.start(data_dir, sock, amqp=PRIVATE_AMQP, http=PRIVATE_HTTP)
        out["restart_full_scan_s"] = round(time.perf_counter() - t0, 3)
        with Client(sock) as client:
            out["recovered_messages"] = client.queue_get("stored")["active_message_count"]
    finally:
        with contextlib.suppress(SbctlError, OSError):
            daemonctl.stop(data_dir, sock)
        shutil.rmtree(root, ignore_errors=True)
    return out


# ---------------------------------------------------------------- the workload


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of already sorted values; 0 when empty."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def split(total: int, parts: int) -> list[int]:
    """``total`` spread over ``parts`` as evenly as possible (the first get one more)."""
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def _bodies(count: int, size: int, fanout: int = 0) -> list[Message]:
    """``count`` messages with ``size`` random-ish bytes each (windows of one random block);
    with ``fanout`` subscriptions, the properties :func:`fanout_filter` reads."""
    block = os.urandom(size + 4093)
    if fanout:
        return [
            Message(
                body=block[(i * 131) % 4093 :][:size],
                application_properties={"region": f"r{i % fanout}", "amount": i},
            )
            for i in range(count)
        ]
    return [Message(body=block[(i * 131) % 4093 :][:size]) for i in range(count)]


def fanout_filter(i: int) -> str:
    """Subscription ``i``'s SQL filter in ``--topic`` mode: each one different, together
    matching about half of the subscriptions per message (a real fan-out)."""
    return f"user.region = 'r{i}' OR amount % 2 = {i % 2}"


def fanout_copies(shares: Sequence[int], subscriptions: int) -> int:
    """How many subscription copies :func:`fanout_filter` yields for these shares."""
    total = 0
    for share in shares:
        for k in range(share):
            total += sum(
                1 for i in range(subscriptions) if i == k % subscriptions or k % 2 == i % 2
            )
    return total


async def _send_loop(
    client: AsyncClient,
    entity: str,
    batches: list[list[Message]],
    lat: array.array,
    deadline: float,
) -> int:
    sent = 0
    clock = time.perf_counter
    for msgs in batches:
        t = clock()
        await client.send(entity, msgs)
        now = clock()
        lat.append(now - t)
        sent += len(msgs)
        if now > deadline:
            raise ServiceTimeout("the bench send phase ran out of time")
    return sent


async def _ping_loop(client: AsyncClient, count: int, lat: array.array, deadline: float) -> int:
    """``count`` round trips that do no work: what a request costs before its operation."""
    clock = time.perf_counter
    for _ in range(count):
        t = clock()
        await client.ping()
        now = clock()
        lat.append(now - t)
        if now > deadline:
            raise ServiceTimeout("the bench ping phase ran out of time")
    return count


async def _receive_loop(
    client: AsyncClient, entity: str, batch: int, lat: array.array, deadline: float
) -> int:
    done = 0
    clock = time.perf_counter
    while True:
        t = clock()
        got = await client.receive(entity, count=batch, mode="peek-lock")
        if not got:
            return done
        results = await client.complete(entity, [m.lock_token for m in got if m.lock_token])
        now = clock()
        lat.append(now - t)
        failed = [r for r in results if not (isinstance(r, dict) and r.get("ok") is True)]
        if failed:
            raise GeneralError(f"the bench could not complete {len(failed)} messages: {failed[0]}")
        done += len(got)
        if now > deadline:
            raise ServiceTimeout("the bench receive phase ran out of time")


async def _phase(
    ready: Callable[[], None],
    socket_path: str,
    namespace: str,
    entity: str,
    phase: str,
    shares: list[int],
    size: int,
    batch: int,
    timeout: float,
    fanout: int = 0,
) -> tuple[int, float, float, array.array, float]:
    """Run one phase with ``len(shares)`` clients; returns (count, start, end, latencies,
    this process's CPU seconds over the phase).

    ``ready`` is called once every client is connected and its messages are built; it may
    block until the caller says go (the other workers are ready too).
    """
    clients = [AsyncClient(socket_path, namespace=namespace) for _ in shares]
    try:
        await asyncio.gather(*(c.ping() for c in clients))
        work: list[list[list[Message]]] = []
        if phase == "send":
            for share in shares:
                msgs = _bodies(share, size, fanout)
                work.append([msgs[i : i + batch] for i in range(0, share, batch)])
        ready()
        lat: array.array = array.array("d")
        t0 = time.perf_counter()
        cpu0 = time.process_time()
        deadline = t0 + timeout
        if phase == "send":
            jobs = [
                _send_loop(c, entity, w, lat, deadline) for c, w in zip(clients, work, strict=True)
            ]
        elif phase == "ping":
            jobs = [_ping_loop(c, n, lat, deadline) for c, n in zip(clients, shares, strict=True)]
        else:
            jobs = [_receive_loop(c, entity, batch, lat, deadline) for c in clients]
        try:
            counts = await asyncio.wait_for(asyncio.gather(*jobs), timeout)
        except TimeoutError:
            raise ServiceTimeout(
                f"the bench {phase} phase took more than {timeout:.0f} s"
            ) from None
        return sum(counts), t0, time.perf_counter(), lat, time.process_time() - cpu0
    finally:
        for c in clients:
            with contextlib.suppress(Exception):
                await c.aclose()


def _run(coro: Any, loop: str) -> Any:
    """Run ``coro`` on uvloop when ``loop`` is ``auto`` and uvloop is installed, else on
    asyncio's own loop. uvloop keeps the client from dominating what is measured: on a
    2-core VM an AsyncClient ping loop ran 27-37k round trips/s on it, 14-21k without."""
    factory = None
    if loop == "auto":
        with contextlib.suppress(ImportError):
            import uvloop

            factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def _worker(conn: Connection, args: tuple[Any, ...], loop: str) -> None:  # pragma: no cover - child
    """A forked client process: connect, report ready, wait for go, run, report."""
    try:

        def ready() -> None:
            conn.send(("ready",))
            if conn.recv() != "go":
                raise GeneralError("the bench was cancelled")

        count, _t0, t1, lat, cpu = _run(_phase(ready, *args), loop)
        conn.send(("done", count, t1, lat.tobytes(), cpu))
    except SbctlError as exc:
        conn.send(("error", error_to_wire(exc)))
    except BaseException as exc:
        conn.send(("error", {"code": "GeneralError", "message": f"bench worker: {exc!r}"}))
    finally:
        conn.close()


def _run_in_workers(
    workers: int, args: tuple[Any, ...], timeout: float, loop: str
) -> tuple[int, float, array.array, float]:
    """The phase spread over ``workers`` forked processes; returns (count, seconds, lat,
    the workers' CPU seconds)."""
    socket_path, namespace, entity, phase, shares, size, batch, _timeout, fanout = args
    ctx = multiprocessing.get_context("fork")
    procs: list[tuple[Any, Connection]] = []
    try:
        for part in range(workers):
            mine = shares[part::workers]
            parent, child = ctx.Pipe()
            wargs = (socket_path, namespace, entity, phase, mine, size, batch, timeout, fanout)
            proc = ctx.Process(target=_worker, args=(child, wargs, loop), daemon=True)
            proc.start()
            child.close()
            procs.append((proc, parent))
        limit = time.monotonic() + timeout
        for _proc, conn in procs:
            msg = _from_worker(conn, limit)
            if msg[0] != "ready":
                raise error_from_wire(msg[1])
        t0 = time.perf_counter()
        for _proc, conn in procs:
            conn.send("go")
        count, end, cpu = 0, t0, 0.0
        lat: array.array = array.array("d")
        for _proc, conn in procs:
            msg = _from_worker(conn, limit + timeout)
            if msg[0] != "done":
                raise error_from_wire(msg[1])
            count += msg[1]
            end = max(end, msg[2])
            lat.frombytes(msg[3])
            cpu += msg[4]
        return count, end - t0, lat, cpu
    finally:
        for proc, conn in procs:
            with contextlib.suppress(OSError):
                conn.close()
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)


def _from_worker(conn: Connection, limit: float) -> Any:
    left = limit - time.monotonic()
    if left <= 0 or not conn.poll(left):
        raise ServiceTimeout("a bench worker did not answer in time")
    try:
        return conn.recv()
    except EOFError:
        raise GeneralError("a bench worker exited unexpectedly") from None


def run_phase(
    socket_path: str,
    namespace: str,
    entity: str,
    phase: str,
    *,
    messages: int,
    size: int,
    batch: int,
    clients: int,
    workers: int,
    timeout: float = PHASE_TIMEOUT,
    loop: str = "auto",
    fanout: int = 0,
) -> tuple[int, float, list[float], float]:
    """One phase (``send``, ``receive``, or ``ping``: ``messages`` round trips that do no
    work); returns (messages, seconds, sorted latencies ms, the clients' CPU seconds)."""
    shares = split(messages, clients)
    args = (socket_path, namespace, entity, phase, shares, size, batch, timeout, fanout)
    if workers <= 1:
        count, t0, t1, lat, cpu = _run(_phase(lambda: None, *args), loop)
        seconds = t1 - t0
    else:
        count, seconds, lat, cpu = _run_in_workers(workers, args, timeout, loop)
    return count, seconds, sorted(x * 1000 for x in lat), cpu


def _create_fanout_topic(admin: Client, name: str, partitioned: bool, subscriptions: int) -> None:
    admin.topic_create(
        name, enable_partitioning=partitioned, max_size_in_megabytes=QUEUE_MAX_SIZE_MB
    )
    for i in range(subscriptions):
        admin.subscription_create(name, f"s{i}", lock_duration=LOCK_DURATION_MS)
        admin.rule_delete(name, f"s{i}", "$Default")
        admin.rule_create(
            name, f"s{i}", "fanout", {"type": "sql", "sql_expression": fanout_filter(i)}
        )


def _daemon_counters(sock: str) -> dict[str, Any]:
    with Client(sock, timeout=30) as c:
        info = c.status()
    return {
        k: info[k] for k in ("cpu_seconds", "commit_rounds") if isinstance(info.get(k), int | float)
    }


def default_workers(clients: int) -> int:
    """Client processes for ``clients`` connections: one, or two when there are several
    clients and at least two CPUs."""
    return max(1, min(MAX_WORKERS, clients, os.cpu_count() or 1))


def namespace_name() -> str:
    """A throwaway namespace name: ``bench-`` and 12 hex digits (valid per daemon/README.md
    §14.8)."""
    return f"bench-{secrets.token_hex(6)}"


def _check_bench_options(
    messages: int, size: int, batch: int, clients: int, topic: bool, subscriptions: int
) -> None:
    if messages < 1:
        raise BadRequest("--messages must be at least 1")
    if size < 0:
        raise BadRequest("--size must not be negative")
    if batch < 1:
        raise BadRequest("--batch must be at least 1")
    if clients < 1:
        raise BadRequest("--clients must be at least 1")
    if topic and not 1 <= subscriptions <= 2000:
        raise BadRequest("--subscriptions must be between 1 and 2000")


def _record_phase(
    out: dict[str, Any],
    phase: str,
    count: int,
    secs: float,
    lat: list[float],
    client_cpu: float,
    before: dict[str, Any],
    after: dict[str, Any],
) -> None:
    """A phase's figures into ``out``: rate, time, latency percentiles, the clients' and the
    daemon's CPU per message."""
    out[f"{phase}_msgs_per_s"] = count / secs
    out[f"{phase}_client_cpu_us_per_msg"] = client_cpu / count * 1e6
    out[f"{phase}_seconds"] = secs
    out[f"{phase}_p50_ms"] = percentile(lat, 50)
    out[f"{phase}_p99_ms"] = percentile(lat, 99)
    # Where the daemon's time goes: its CPU per message and how many requests
    # shared one group-commit fdatasync round.
    if "cpu_seconds" in before and "cpu_seconds" in after:
        cpu = after["cpu_seconds"] - before["cpu_seconds"]
        out[f"{phase}_daemon_cpu_us_per_msg"] = cpu / count * 1e6
    rounds = after.get("commit_rounds", 0) - before.get("commit_rounds", 0)
    if rounds > 0:
        out[f"{phase}_msgs_per_commit"] = count / rounds


def _check_fanout(
    out: dict[str, Any],
    sock: str | None,
    ns: str,
    entity: str,
    messages: int,
    clients: int,
    subscriptions: int,
) -> None:
    """The copies the subscriptions hold are what their filters predict."""
    with Client(sock, namespace=ns, timeout=60) as admin:
        held = sum(
            admin.subscription_get(entity, f"s{i}")["active_message_count"]
            for i in range(subscriptions)
        )
    expected = fanout_copies(split(messages, clients), subscriptions)
    if held != expected:
        raise GeneralError(
            f"the subscriptions hold {held} copies; their filters predict {expected}"
        )
    out["fanout_copies"] = held
    out["fanout_copies_per_s"] = held / out["send_seconds"]


def ping_bench(socket_path: Path | None, *, pings: int, clients: int) -> dict[str, Any]:
    """``pings`` round trips that do no work from ``clients`` concurrent connections, as the
    send phase runs them: their rate and the clients' and the daemon's CPU per round trip
    (``ping_msgs_per_s``, ``ping_client_cpu_us_per_msg``, ``ping_daemon_cpu_us_per_msg``)."""
    with Client(str(socket_path) if socket_path else None, timeout=30) as admin:
        sock = admin.socket_path
    out: dict[str, Any] = {}
    before = _daemon_counters(sock)
    count, secs, lat, client_cpu = run_phase(
        sock,
        DEFAULT_NAMESPACE,
        "",
        "ping",
        messages=pings,
        size=0,
        batch=1,
        clients=clients,
        workers=default_workers(clients),
    )
    _record_phase(out, "ping", count, secs, lat, client_cpu, before, _daemon_counters(sock))
    out.pop("ping_msgs_per_commit", None)  # (a ping commits nothing)
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}


def run_bench(
    socket_path: Path | None,
    *,
    messages: int = 20_000,
    size: int = 1024,
    batch: int = 1,
    clients: int = 1,
    entity: str = "bench",
    partitioned: bool = False,
    data_dir_for_raw: Path | None = None,
    skip_raw: bool = False,
    skip_start: bool = False,
    workers: int | None = None,
    timeout: float = PHASE_TIMEOUT,
    loop: str = "auto",
    topic: bool = False,
    subscriptions: int = 10,
    receive: bool = True,
) -> dict[str, Any]:
    """Benchmark the running daemon at ``socket_path``; see the module docstring.

    With ``topic``, the entity is a topic with ``subscriptions`` subscriptions, each with its
    own SQL filter (:func:`fanout_filter`): the send phase measures topic sends with fan-out
    and the copies each subscription holds are checked against what the filters predict.
    """
    _check_bench_options(messages, size, batch, clients, topic, subscriptions)
    workers = default_workers(clients) if workers is None else max(1, min(workers, clients))
    sock = str(socket_path) if socket_path is not None else None
    with Client(sock, timeout=30) as admin:
        info = admin.status()  # ServiceCommunicationProblem when the daemon is not running
        sock = admin.socket_path
    out: dict[str, Any] = {
        "messages": messages,
        "size": size,
        "batch": batch,
        "clients": clients,
        "partitioned": partitioned,
        "workers": workers,
    }
    if topic:
        out["topic_subscriptions"] = subscriptions
    # The ceilings first, with the daemon idle and no connection open (the measurements
    # fork, and a child must not hold a copy of a daemon connection).
    raw_dir = Path(info.get("data_dir") or data_dir_for_raw or tempfile.gettempdir())
    if not skip_raw:
        out["raw_fsync_per_s"] = raw_fsync_rate(raw_dir, 1)
        out["raw_fsync_batch100_records_per_s"] = raw_fsync_rate(raw_dir, RAW_BATCH)
        out["raw_socket_rtt_per_s"] = raw_socket_rtt_rate()
    if not skip_start:
        out["daemon_start_ms"] = daemon_start_ms()
        out["cli_daemon_start_ms"] = cli_start_ms()
    ns = namespace_name()
    with Client(sock, timeout=60) as admin:
        admin.namespace_create(ns, credits_per_second=0)  # measure the daemon, not credits
    out["namespace"] = ns
    try:
        with Client(sock, namespace=ns, timeout=60) as admin:
            if topic:
                _create_fanout_topic(admin, entity, partitioned, subscriptions)
            else:
                admin.queue_create(
                    entity,
                    enable_partitioning=partitioned,
                    max_size_in_megabytes=QUEUE_MAX_SIZE_MB,
                    lock_duration=LOCK_DURATION_MS,
                )
        for phase in ("send",) if topic or not receive else ("send", "receive"):
            before = _daemon_counters(sock)
            count, secs, lat, client_cpu = run_phase(
                sock,
                ns,
                entity,
                phase,
                messages=messages,
                size=size,
                batch=batch,
                clients=clients,
                workers=workers,
                timeout=timeout,
                loop=loop,
                fanout=subscriptions if topic else 0,
            )
            after = _daemon_counters(sock)
            if count != messages:
                raise GeneralError(f"the bench {phase} phase moved {count} of {messages} messages")
            _record_phase(out, phase, count, secs, lat, client_cpu, before, after)
        if topic:
            _check_fanout(out, sock, ns, entity, messages, clients, subscriptions)
    finally:
        with contextlib.suppress(SbctlError), Client(sock, timeout=60) as cleanup:
            cleanup.namespace_delete(ns)
    if "raw_fsync_per_s" in out:
        out["send_vs_raw_fsync"] = out["send_msgs_per_s"] / out["raw_fsync_per_s"]
        out["send_vs_raw_batch100"] = (
            out["send_msgs_per_s"] / out["raw_fsync_batch100_records_per_s"]
        )
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}
