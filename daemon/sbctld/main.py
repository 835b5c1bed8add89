"""The daemon process: own the data dir, recover, serve until SIGTERM.

Ownership (:mod:`sbctld.ownership`) is an exclusive ``flock`` on ``<data>/sbctld.lock`` held
for the daemon's life: the kernel drops it when the process dies, even by SIGKILL, so a lock
that is free means no daemon runs there; ``sbctld.pid`` is information only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import os
import resource
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sbctl.core import layout, paths
from sbctl.core.errors import SbctlError
from sbctld.broker import Broker
from sbctld.clock import SystemClock
from sbctld.credits import DEFAULT_CREDITS_PER_SECOND
from sbctld.frontends.http import sqlparams
from sbctld.frontends.unix.server import UnixFrontend
from sbctld.ownership import Claim, claim
from sbctld.service import Service
from sbctld.settings import (
    DEFAULT_REPLY_BUFFER_BYTES,
    DaemonSettings,
    HttpListener,
)
from sbctld.storage.sync import Syncer

log = logging.getLogger("sbctld")
MB = 1024 * 1024
__all__ = ["DaemonSettings", "main", "run"]


def setup_logging(data_dir: Path, foreground: bool) -> None:
    handler: logging.Handler = logging.FileHandler(layout.log_file(data_dir))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("sbctld")
    root.handlers[:] = [handler]
    if foreground:
        root.addHandler(logging.StreamHandler(sys.stderr))
    root.setLevel(logging.INFO)


def raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# glibc's mallopt parameter for the size from which a block is its own mapping.
M_MMAP_THRESHOLD = -3
# The index arrays of a partition log grow by realloc; from this size on they are mappings
# that mremap grows in place, instead of heap blocks whose old copies stay resident.
MMAP_THRESHOLD_BYTES = 1 << 20


def map_large_blocks() -> None:
    """Keep blocks of :data:`MMAP_THRESHOLD_BYTES` and more out of the heap (glibc only).

    glibc raises its mmap threshold (up to 32 MiB) each time it frees a mapped block, after
    which a growing index array is copied within the heap on each realloc, and the freed
    copies stay resident: a daemon holding a million messages then took 34 to 82 bytes per
    message from one run to the next. A fixed threshold keeps them at the 34 bytes the
    arrays use (sbctl/guides/performance.md). ``MALLOC_MMAP_THRESHOLD_`` in the environment
    wins, as glibc documents."""
    if sys.platform != "linux" or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def run(
    settings: DaemonSettings,
    *,
    ready_fd: int | None = None,
    foreground: bool = False,
    claimed: Claim | None = None,
) -> int:
    """Run the daemon until stopped.

    ``ready_fd`` gets ``warn <message>`` lines, then ``ok <pid>`` or ``error <message>``;
    without it, a refused start and the warnings are printed on stderr. ``claimed``: the
    data dir and socket already taken by the caller (:func:`sbctld.ownership.claim`).
    """

    def say(line: str) -> None:
        if ready_fd is not None:
            with contextlib.suppress(OSError):
                os.write(ready_fd, (line + "\n").encode())
        elif line.startswith("error ") or (line.startswith("warn ") and not foreground):
            # In the foreground the log (on stderr too) carries the warnings.
            kind, _, text = line.partition(" ")
            print(f"sbctld: {'warning' if kind == 'warn' else 'error'}: {text}", file=sys.stderr)

    def tell(line: str) -> None:
        say(line)
        if ready_fd is not None:
            with contextlib.suppress(OSError):
                os.close(ready_fd)

    t0 = time.perf_counter()
    data_dir = settings.data_dir
    if claimed is None:
        try:
            claimed = claim(data_dir, settings.unix.socket_path)
        except SbctlError as exc:
            tell(f"error {exc.message}")
            return 1
        for note in claimed.notes:
            say(f"warn {note}")
    setup_logging(data_dir, foreground)
    for note in claimed.notes:
        log.warning(note)
    raise_fd_limit()
    map_large_blocks()
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        return asyncio.run(_serve(settings, tell, t0))
    except Exception as exc:
        log.exception("daemon failed")
        tell(f"error {exc}")
        return 1
    finally:
        claimed.release()


async def _serve(settings: DaemonSettings, tell: Callable[[str], None], t0: float) -> int:
    data_dir = settings.data_dir
    syncer = Syncer(settings.durability)
    credits = DEFAULT_CREDITS_PER_SECOND
    if settings.default_credits_per_second is not None:
        credits = settings.default_credits_per_second
    broker = Broker(
        data_dir, SystemClock(), syncer, report=log.warning, default_credits_per_second=credits
    )
    # A data dir from before SQL parameters were part of a rule: its side file, once.
    sqlparams.migrate(
        data_dir, broker.management.rule_get, broker.management.rule_restore, log.warning
    )
    service = Service(broker, syncer)
    service.key_store(data_dir)  # one set of SAS keys for AMQP and HTTP
    unix = UnixFrontend(
        service, settings.unix.socket_path, reply_buffer_bytes=settings.reply_buffer_bytes
    )
    await unix.start()
    service.start()
    stops: list[Callable[[], Awaitable[None]]] = [unix.stop]

    async def stop_all() -> None:
        for stop in reversed(stops):
            await stop()
        await service.stop()

    # --- HTTP front-end (sbctld.frontends.http); before AMQP, whose ports answer HTTP too ---
    http_frontend = await _start_http(service, data_dir, settings.http, tell)
    if http_frontend is False:
        await stop_all()
        return 1
    if http_frontend:
        stops.append(http_frontend.stop)
    # --- end HTTP ---
    # --- AMQP front-end (sbctld.frontends.amqp) ---
    service.info["amqp_port"] = None
    amqp = settings.amqp
    if amqp is not None:
        from sbctld.frontends.amqp.server import AmqpFrontend
        from sbctld.frontends.http.sniff import sniffing

        # HTTP and HTTPS on the AMQP ports too: the first byte of a connection decides
        frontend = AmqpFrontend(
            service,
            data_dir,
            amqp.host,
            amqp.port,
            wrap=lambda factory, namespace: sniffing(factory, namespace=namespace),
        )
        stops.append(frontend.stop)
        if http_frontend:
            # AMQP over WebSocket: an HTTP connection upgraded to it becomes an AMQP one
            http_frontend.amqp = frontend.connection
        try:
            await frontend.start()
        except OSError as exc:
            why = "is already in use" if exc.errno == errno.EADDRINUSE else f"failed: {exc}"
            tell(
                f"error AMQP port {amqp.port} on {amqp.host} {why}; choose another with "
                "--amqp-port N (0: any free port) or turn AMQP off with --no-amqp"
            )
            await stop_all()
            return 1
        service.info["amqp_port"] = frontend.port
        service.info["amqp_host"] = amqp.host
        service.info["amqp_ports"] = frontend.ports
    # --- end AMQP ---
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.stopping.set)
    log.info(
        "sbctld %s serving %s on %s (durability %s, reply buffer %d MB) after %.3f s; %s",
        os.getpid(),
        data_dir,
        settings.unix.socket_path,
        settings.durability,
        settings.reply_buffer_bytes // MB,
        time.perf_counter() - t0,
        broker.housekeeping.stats(),
    )
    tell(f"ok {os.getpid()}")
    await service.stopping.wait()
    log.info("stopping")
    await stop_all()
    log.info("stopped cleanly")
    return 0


async def _start_http(
    service: Service, data_dir: Path, http: HttpListener | None, tell: Callable[[str], None]
) -> Any:
    """The started HTTP front-end, None when HTTP is off, False when its port is taken."""
    from sbctl.core.certs import cert_paths
    from sbctld.frontends.http import sniff
    from sbctld.frontends.http.server import HttpFrontend

    service.info["http_port"] = None
    sniff.FRONTEND = None  # a foreground run in a process that ran one before
    if http is None:
        return None
    frontend = HttpFrontend(service, data_dir, http.host, http.port)
    try:
        await frontend.start()
    except OSError as exc:
        why = "is already in use" if exc.errno == errno.EADDRINUSE else f"failed: {exc}"
        tell(
            f"error HTTP port {http.port} on {http.host} {why}; choose another with "
            "--http-port N (0: any free port) or turn HTTP off with --no-http"
        )
        await frontend.stop()
        return False
    sniff.FRONTEND = frontend
    service.info["http_port"] = frontend.port
    service.info["http_host"] = http.host
    service.info["https_certificate"] = str(cert_paths(data_dir)[0])
    return frontend


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sbctld", description="the sbctl daemon")
    parser.add_argument("--data-dir")
    parser.add_argument("--socket")
    parser.add_argument("--durability", choices=("fsync", "os"), default="fsync")
    parser.add_argument("--ready-fd", type=int)
    parser.add_argument("--default-credits-per-second", type=int)
    parser.add_argument(
        "--reply-buffer-mb",
        type=int,
        default=reply_buffer_mb_from_env(),
        help="memory a connection's unread replies may take: past half of it the daemon "
        "stops reading that connection's requests until it reads (default 64; env "
        "SBCTL_REPLY_BUFFER_MB)",
    )
    parser.add_argument("--amqp-host", default="127.0.0.1")
    parser.add_argument(
        "--amqp-port", type=int, default=int(os.environ.get("SBCTL_AMQP_PORT") or 5672)
    )
    parser.add_argument("--no-amqp", action="store_true")
    parser.add_argument("--http-host", default="127.0.0.1")
    parser.add_argument(
        "--http-port", type=int, default=int(os.environ.get("SBCTL_HTTP_PORT") or 5300)
    )
    parser.add_argument("--no-http", action="store_true")
    args = parser.parse_args(argv)
    if args.reply_buffer_mb < 1:
        parser.error("--reply-buffer-mb must be at least 1")
    data_dir = paths.resolve_data_dir(args.data_dir)
    socket_path = Path(args.socket).absolute() if args.socket else paths.default_socket(data_dir)
    settings = DaemonSettings.from_flags(
        data_dir,
        socket_path,
        args.durability,
        default_credits_per_second=args.default_credits_per_second,
        reply_buffer_bytes=args.reply_buffer_mb * MB,
        amqp=(not args.no_amqp, args.amqp_host, args.amqp_port),
        http=(not args.no_http, args.http_host, args.http_port),
    )
    return run(settings, ready_fd=args.ready_fd, foreground=True)


def reply_buffer_mb_from_env() -> int:
    """``$SBCTL_REPLY_BUFFER_MB``, else the default (64)."""
    value = os.environ.get("SBCTL_REPLY_BUFFER_MB", "").strip()
    if not value:
        return DEFAULT_REPLY_BUFFER_BYTES // MB
    if not value.isdigit() or int(value) < 1:
        raise SystemExit(
            f"sbctld: error: SBCTL_REPLY_BUFFER_MB must be a whole number >= 1, not {value!r}"
        )
    return int(value)
