"""Start, stop and inspect the daemon (``sbctl daemon ...``).

``start`` forks the daemon from the CLI process itself (no second interpreter start-up),
detaches it (double fork, new session, stdio on /dev/null; it logs to ``<data>/sbctld.log``)
and returns once the daemon reports through a pipe that its socket accepts requests.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

from sbctl import layout, paths
from sbctl.client import Client
from sbctl.errors import GeneralError, SbctlError, ServiceCommunicationProblem, ServiceTimeout

READY_TIMEOUT = 120.0  # recovery of a large data dir may take a while


def _ping(socket_path: Path) -> dict[str, Any] | None:
    try:
        with Client(socket_path, timeout=5) as client:
            return client.ping()
    except SbctlError:
        return None


def _status(socket_path: Path) -> dict[str, Any] | None:
    try:
        with Client(socket_path, timeout=5) as client:
            return client.status()
    except SbctlError:
        return None


def _pidfile_owner(data_dir: Path) -> int | None:
    """The pid holding the data dir's lock, or None when nobody holds it."""
    from sbctld.ownership import lock_owner

    return lock_owner(data_dir)


def start(
    data_dir: Path,
    socket_path: Path,
    *,
    foreground: bool = False,
    durability: str = "fsync",
    default_credits_per_second: int | None = None,
    reply_buffer_bytes: int | None = None,
    amqp: tuple[bool, str, int] = (True, "127.0.0.1", 5672),
    http: tuple[bool, str, int] = (True, "127.0.0.1", 5300),
) -> dict[str, Any]:
    """``default_credits_per_second``: what namespaces created without their own figure
    get (None: 1000; 0: unlimited). ``reply_buffer_bytes``: unsent replies a connection may
    have before the daemon stops reading its requests (None: 64 MB). ``amqp``: (on, host,
    port) of the AMQP listener (port 0: any free port); ``http``: the same for the HTTP
    listener.

    The result's ``warnings`` are what the daemon said while starting (e.g. permissions it
    tightened); a refused start raises with the daemon's reason."""
    t0 = time.perf_counter()
    paths.check_socket_path(socket_path)
    base = {"data_dir": str(data_dir), "socket": str(socket_path)}
    log_file = str(layout.log_file(data_dir))
    running = _status(socket_path)
    if running is not None:
        theirs = running.get("data_dir")
        if theirs is not None and Path(theirs) != data_dir:
            raise GeneralError(
                f"socket {socket_path} is in use by the sbctl daemon of another data dir "
                f"({theirs}, pid {running.get('pid')}); choose another --socket for {data_dir}"
            )
        return {**base, "already_running": True, "pid": running.get("pid"), "log_file": log_file}
    owner = _pidfile_owner(data_dir)
    if owner is not None and owner > 0 and not _alive(owner):
        # A daemon that just died (SIGKILL, crash): its last threads still hold the lock
        # for a moment after its main thread is gone.
        with contextlib.suppress(ServiceTimeout):
            _wait_gone(owner, data_dir, 5.0, "")
        owner = _pidfile_owner(data_dir)
    if owner is not None:
        raise GeneralError(
            f"data dir {data_dir} is held by pid {owner} (see {layout.pid_file(data_dir)}), "
            f"which does not answer on {socket_path}; is it using another --socket? "
            f"stop it with `kill {owner}`"
        )
    if foreground:
        from sbctld.main import DaemonSettings, run
        from sbctld.ownership import claim

        settings = DaemonSettings.from_flags(
            data_dir,
            socket_path,
            durability,
            default_credits_per_second=default_credits_per_second,
            reply_buffer_bytes=reply_buffer_bytes,
            amqp=amqp,
            http=http,
        )
        # A refusal is the command's error line; warnings go to the log, on stderr here.
        claimed = claim(data_dir, socket_path)
        code = run(settings, foreground=True, claimed=claimed)
        if code:
            raise GeneralError(f"the daemon exited with status {code}; see {log_file}")
        return {**base, "already_running": False, "pid": os.getpid(), "log_file": log_file}
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read_fd)
        _daemonize(
            data_dir,
            socket_path,
            durability,
            write_fd,
            default_credits_per_second,
            reply_buffer_bytes,
            amqp,
            http,
        )
    os.close(write_fd)
    warnings, line = _read_ready(read_fd)
    os.waitpid(pid, 0)
    if line.startswith("ok "):
        return {
            **base,
            "already_running": False,
            "pid": int(line.split()[1]),
            "seconds": round(time.perf_counter() - t0, 3),
            "log_file": log_file,
            "warnings": warnings,
        }
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    raise GeneralError(line.removeprefix("error ").strip() or f"the daemon failed; see {log_file}")


def _daemonize(
    data_dir: Path,
    socket_path: Path,
    durability: str,
    ready_fd: int,
    default_credits_per_second: int | None,
    reply_buffer_bytes: int | None,
    amqp: tuple[bool, str, int] = (True, "127.0.0.1", 5672),
    http: tuple[bool, str, int] = (True, "127.0.0.1", 5300),
) -> None:
    """Second half of the double fork; never returns."""
    code = 1
    try:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        os.chdir("/")
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        from sbctld.main import DaemonSettings, run

        settings = DaemonSettings.from_flags(
            data_dir,
            socket_path,
            durability,
            default_credits_per_second=default_credits_per_second,
            reply_buffer_bytes=reply_buffer_bytes,
            amqp=amqp,
            http=http,
        )
        code = run(settings, ready_fd=ready_fd)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(ready_fd, f"error {exc}\n".encode())
    finally:
        sys.stdout.flush()
        os._exit(code)


def _read_ready(fd: int) -> tuple[list[str], str]:
    """The daemon's ``warn ...`` lines, then its final ``ok <pid>`` / ``error ...`` line."""
    deadline = time.monotonic() + READY_TIMEOUT
    chunks = b""
    warnings: list[str] = []
    try:
        while True:
            while b"\n" in chunks:
                raw, chunks = chunks.split(b"\n", 1)
                line = raw.decode(errors="replace").strip()
                if not line.startswith("warn "):
                    return warnings, line
                warnings.append(line.removeprefix("warn "))
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServiceTimeout(f"the daemon did not become ready in {READY_TIMEOUT:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            data = os.read(fd, 4096)
            if not data:
                return warnings, chunks.decode(errors="replace").strip()
            chunks += data
    finally:
        os.close(fd)


def stop(data_dir: Path, socket_path: Path, timeout: float = 30.0) -> dict[str, Any]:
    pid: int | None = None
    info = _ping(socket_path)
    if info is not None:
        pid = int(info["pid"])
        with contextlib.suppress(SbctlError), Client(socket_path, timeout=5) as client:
            client.shutdown()
    else:
        owner = _pidfile_owner(data_dir)
        if owner is None or owner <= 0:
            return {"was_running": False, "pid": None}
        pid = owner
        os.kill(pid, signal.SIGTERM)
    _wait_gone(
        pid, data_dir, timeout, f"the daemon (pid {pid}) did not stop within {timeout:.0f} s"
    )
    return {"was_running": True, "pid": pid}


def kill(pid: int, data_dir: Path, timeout: float = 10.0) -> None:
    """SIGKILL the daemon ``pid`` of ``data_dir`` and return once it is gone and the kernel
    released the data dir's lock (its socket stops answering, and its main thread turns
    zombie, before its other threads have closed their files)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_gone(pid, data_dir, timeout, f"pid {pid} survived SIGKILL for {timeout:.0f} s")


def _wait_gone(pid: int, data_dir: Path, timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid) or _pidfile_owner(data_dir) == pid:
        if time.monotonic() > deadline:
            raise ServiceTimeout(why)
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Is ``pid`` running? A zombie (exited, not yet reaped by init) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state not in (b"Z", b"X")


def status(data_dir: Path, socket_path: Path) -> dict[str, Any]:
    base: dict[str, Any] = {"data_dir": str(data_dir), "socket": str(socket_path)}
    try:
        with Client(socket_path, timeout=5) as client:
            info = client.status()
    except ServiceCommunicationProblem as exc:
        return {**base, "running": False, "pid": _pidfile_owner(data_dir), "error": exc.message}
    return {**base, **info, "running": True}
