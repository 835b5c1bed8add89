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

from sbctl.client import Client
from sbctl.core import layout, paths
from sbctl.core.errors import GeneralError, SbctlError, ServiceCommunicationProblem, ServiceTimeout

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
    explicit: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """``default_credits_per_second``: what namespaces created without their own figure
    get (None: 1000; 0: unlimited). ``reply_buffer_bytes``: unsent replies a connection may
    have before the daemon stops reading its requests (None: 64 MB). ``amqp``: (on, host,
    port) of the AMQP listener (port 0: any free port); ``http``: the same for the HTTP
    listener.

    The result's ``warnings`` are what the daemon said while starting (e.g. permissions it
    tightened); a refused start raises with the daemon's reason. A daemon already running
    is fine unless it runs with other settings than the ``explicit`` ones asked for
    (``amqp_port``, ``amqp_host``, ``no_amqp`` and the same for http); ports that are taken
    are all named in one error before anything starts."""
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
        differ = other_settings(running, {"amqp": amqp, "http": http}, explicit)
        if differ:
            raise GeneralError(
                f"the sbctl daemon (pid {running.get('pid')}) is already running with other "
                f"settings: {'; '.join(differ)}; stop it with `sbctl daemon stop` to start it "
                "with these"
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
        raise GeneralError(held_elsewhere(data_dir, socket_path, owner))
    clashes = port_clashes({"amqp": amqp, "http": http})
    if clashes:
        raise GeneralError(
            f"{'ports' if len(clashes) > 1 else 'port'} in use: {', '.join(clashes)}; choose "
            "others (0: any free port; env SBCTL_AMQP_PORT, SBCTL_HTTP_PORT) or turn them off "
            "with --no-amqp / --no-http"
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


def other_settings(
    running: dict[str, Any],
    asked: dict[str, tuple[bool, str, int]],
    explicit: frozenset[str],
) -> list[str]:
    """How the running daemon's listeners differ from what was explicitly asked for (a port
    of 0 asks for any port, so it matches every port; daemon/README.md §25.6)."""
    found: list[str] = []
    for name, (on, host, port) in asked.items():
        live_port, live_host, label = (
            running.get(f"{name}_port"),
            running.get(f"{name}_host"),
            name.upper(),
        )
        if f"no_{name}" in explicit and not on and live_port is not None:
            found.append(f"{label} on port {live_port} (asked: --no-{name})")
        elif on and f"{name}_port" in explicit and live_port is None:
            found.append(f"no {label} (asked: --{name}-port {port})")
        elif on and f"{name}_port" in explicit and port and live_port != port:
            found.append(f"{label} port {live_port} (asked: --{name}-port {port})")
        if on and f"{name}_host" in explicit and live_port is not None and live_host != host:
            found.append(f"{label} host {live_host} (asked: --{name}-host {host})")
    return found


def port_clashes(asked: dict[str, tuple[bool, str, int]]) -> list[str]:
    """Every asked-for port (not 0) that another process already listens on, as
    ``AMQP port 5672 on 127.0.0.1 (--amqp-port N)``, so that all are reported at once."""
    import errno
    import socket

    found = []
    for name, (on, host, port) in asked.items():
        if not on or not port:
            continue
        try:
            socket.create_server((host, port)).close()  # SO_REUSEADDR, as the daemon binds
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                found.append(f"{name.upper()} port {port} on {host} (--{name}-port N)")
    return found


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
    """The status of the daemon on ``socket_path``; when none answers, ``running`` false,
    the pid holding ``data_dir`` (if any) and an ``error`` line that names both."""
    base: dict[str, Any] = {"data_dir": str(data_dir), "socket": str(socket_path)}
    try:
        with Client(socket_path, timeout=5) as client:
            info = client.status()
    except ServiceCommunicationProblem as exc:
        owner = _pidfile_owner(data_dir)
        error = exc.message if owner is None else held_elsewhere(data_dir, socket_path, owner)
        return {**base, "running": False, "pid": owner, "error": error}
    return {**base, **info, "running": True}


def held_elsewhere(data_dir: Path, socket_path: Path, owner: int) -> str:
    """Why nothing answers on ``socket_path`` although pid ``owner`` holds ``data_dir``: the
    socket asked for, the daemon holding the dir, and the socket it listens on when known."""
    asked = f"no sbctl daemon answers on socket {socket_path}, but data dir {data_dir} is held"
    listening = [p for p in unix_listeners(owner) if p != str(socket_path)] if owner > 0 else []
    if listening:
        return (
            f"{asked} by pid {owner}, which listens on {listening[0]}: give that socket "
            f"(--socket {listening[0]} or SBCTL_SOCKET), or stop it with `kill {owner}`"
        )
    return (
        f"{asked} by pid {owner} (see {layout.pid_file(data_dir)}): is it using another "
        f"--socket (or SBCTL_SOCKET)? stop it with `kill {owner}`"
    )


def unix_listeners(pid: int) -> list[str]:
    """The paths of the Unix sockets ``pid`` listens on (Linux ``/proc``; [] elsewhere or
    when they cannot be read)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in fds}
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as table:
            rows = [line.split() for line in table.readlines()[1:]]
    except OSError:
        return []
    inodes = {link[8:-1] for link in links if link.startswith("socket:[")}
    listening = 0x10000  # __SO_ACCEPTCON in the Flags column
    return [
        row[7] for row in rows if len(row) >= 8 and row[6] in inodes and int(row[3], 16) & listening
    ]


def certificate(data_dir: Path, socket_path: Path) -> Path:
    """The HTTPS certificate (made on first use) of the daemon answering on
    ``socket_path``, kept in its own data dir; with none answering, ``data_dir``'s."""
    from sbctl.core.certs import ensure_certificate
    from sbctld.ownership import prepare_data_dir

    running = _status(socket_path)
    where = Path(running["data_dir"]) if running and running.get("data_dir") else data_dir
    prepare_data_dir(where)
    return ensure_certificate(where)[0]


def check_entity_options(kind: str, name: str, options: dict[str, Any], sku: str) -> None:
    """Refuse what the daemon's create of a ``kind`` entity (queue, topic or subscription)
    would refuse in ``options`` on a ``sku`` namespace: its own range and tier checks."""
    from sbctld import config

    classes: dict[str, type[config.QueueConfig]] = {
        "queue": config.QueueConfig,
        "topic": config.TopicConfig,
        "subscription": config.SubscriptionConfig,
    }
    # Every check is of one value against its range and the tier, so the defaults stand in
    # for the values an update keeps.
    cfg = config.merge_options(classes[kind](name=name), options, creating=True)
    config.check_queue(cfg, sku, set(options))


def check_rule(filter: Any, action: Any) -> None:
    """Compile a rule's filter and action with the daemon's own functions."""
    from sbctld.filters import compile_action, compile_filter

    compile_filter(filter)
    compile_action(action)
