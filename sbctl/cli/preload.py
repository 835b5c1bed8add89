"""The CLI server: sbctl's command tree imported and built once, one forked child per command.

``python -m sbctl.cli.preload SOCKET`` (started by :mod:`sbctl.cli.launch`, never by hand):
imports every command module, builds every click command, runs a few commands that fail
fast (no daemon at a path that does not exist) so that what they import on first use is
imported too, then listens on ``SOCKET``. For each connection from its own user it forks; the
child takes the caller's stdin, stdout and stderr, working directory, environment and
arguments, runs :func:`sbctl.cli.app.main` on the built tree and reports its exit status. A
child whose caller disappears (killed) stops too.

The server exits after :data:`IDLE_SECONDS` without a command (``SBCTL_CLI_SERVER_IDLE``
in the environment of the command that started it: seconds), when its socket is removed,
and as soon as one of the files it loaded from sbctl changes (an upgrade, or an edit in a
checkout): the command that notices runs in its own process and starts a fresh server.
"""

from __future__ import annotations

import contextlib
import gc
import io
import marshal
import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from sbctl.cli import app
from sbctl.cli.launch import HEADER_BYTES

IDLE_SECONDS = 600.0  # (env SBCTL_CLI_SERVER_IDLE: seconds)
# How often (at most; a quarter of the idle time when shorter) an idle server checks that
# its socket is still there (a deleted runtime directory ends it).
CHECK_SECONDS = 10.0
MAX_REQUEST = 1 << 20


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m sbctl.cli.preload SOCKET", file=sys.stderr)
        return 2
    path = argv[0]
    tree = warm()
    os.chdir("/")  # hold no directory of the command that started it
    watched = _loaded_files()
    listener = _listen(path)
    if listener is None:
        return 0  # another server has it
    inode = os.stat(path).st_ino
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # (the finally removes the socket)
    gc.collect()
    gc.freeze()  # what is loaded now is never scanned again, in the server or a child
    idle = _idle_seconds()
    listener.settimeout(min(idle / 4, CHECK_SECONDS))
    last = time.monotonic()
    try:
        while True:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if time.monotonic() - last >= idle or not _still_ours(path, inode):
                    return 0
                continue
            last = time.monotonic()
            if not _same_user(conn):
                conn.close()
                continue
            if _changed(watched):
                # Gone before the caller hears so: it runs the command itself and starts
                # a new server on the same path.
                _unlink_if_ours(path, inode, listener)
                conn.close()
                return 0
            if os.fork() == 0:
                listener.close()
                _child(conn, tree)  # never returns
            conn.close()
    finally:
        _unlink_if_ours(path, inode, listener)


def warm() -> Any:
    """The whole command tree, built, with what its commands import on first use loaded."""
    tree = app.command_tree()
    for name in list(tree.commands):
        tree.load(name)
    with tempfile.TemporaryDirectory() as scratch:
        nowhere = os.path.join(scratch, "none.sock")
        quiet = io.StringIO()
        lines = (
            ["--version"],
            ["--help"],
            ["queue", "--help"],
            ["--socket", nowhere, "queue", "list"],
            ["--socket", nowhere, "-o", "json", "queue", "show", "q"],
            ["--socket", nowhere, "send", "q", "--body", "x"],
            ["--socket", nowhere, "peek", "q"],
            ["--socket", nowhere, "receive", "q"],
            ["--socket", nowhere, "daemon", "status"],
        )
        for line in lines:
            with (
                contextlib.redirect_stdout(quiet),
                contextlib.redirect_stderr(quiet),
                contextlib.suppress(SystemExit, Exception),
            ):
                app.main(line, tree=tree)
        from rich.console import Console

        from sbctl.cli import render

        table = render._table("name", "count", tight=("count",))
        table.add_row("warm", "1")
        Console(file=quiet, width=80).print(table)
    return tree


def _listen(path: str) -> socket.socket | None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(path)
    except OSError:
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
            return None  # alive
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(path)  # left by a server that was killed
        finally:
            probe.close()
        try:
            listener.bind(path)
        except OSError:
            listener.close()
            return None
    os.chmod(path, 0o600)
    listener.listen(64)
    return listener


def _idle_seconds() -> float:
    try:
        return max(0.1, float(os.environ.get("SBCTL_CLI_SERVER_IDLE", IDLE_SECONDS)))
    except ValueError:
        return IDLE_SECONDS


def _still_ours(path: str, inode: int) -> bool:
    """Whether ``path`` is still the socket file this server bound (its inode)."""
    try:
        return os.stat(path).st_ino == inode
    except OSError:
        return False


def _unlink_if_ours(path: str, inode: int, listener: socket.socket) -> None:
    if _still_ours(path, inode):
        with contextlib.suppress(OSError):
            os.unlink(path)
    listener.close()


def _same_user(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    return int.from_bytes(creds[4:8], sys.byteorder) == os.getuid()


def _loaded_files() -> dict[str, int]:
    """The files of sbctl's (and the daemon's) modules loaded now, with their mtimes."""
    out: dict[str, int] = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and name.partition(".")[0] in ("sbctl", "sbctld"):
            with contextlib.suppress(OSError):
                out[file] = os.stat(file).st_mtime_ns
    index = str(Path(app.__file__).with_name("commands.json"))
    out[index] = os.stat(index).st_mtime_ns
    return out


def _changed(watched: dict[str, int]) -> bool:
    for file, mtime in watched.items():
        try:
            if os.stat(file).st_mtime_ns != mtime:
                return True
        except OSError:
            return True
    return False


# ---------------------------------------------------------------- the child


def _child(conn: socket.socket, tree: Any) -> None:
    """Run one command for the caller on ``conn``; exits the process."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        gc.disable()  # a short life: collecting costs more than it frees
        request = _receive(conn)
        _become_caller(request)
        conn.sendall(f"pid {os.getpid()}\n".encode())
        threading.Thread(target=_stop_with_caller, args=(conn,), daemon=True).start()
        status = _run(request["argv"], tree)
    except KeyboardInterrupt:  # Ctrl-C before the command ran: as the command answers it
        status = 130
    except BaseException:  # whatever happens, the caller gets a status
        status = 1
    finally:
        with contextlib.suppress(OSError):
            conn.sendall(f"exit {status}\n".encode())
        os._exit(status)


def _receive(conn: socket.socket) -> dict[str, Any]:
    data, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 3)
    if len(fds) != 3:
        raise ValueError("a request carries stdin, stdout and stderr")
    size = int.from_bytes(data[:HEADER_BYTES], "big")
    while len(data) < HEADER_BYTES + size:
        more = conn.recv(MAX_REQUEST)
        if not more:
            raise ValueError("the request was cut short")
        data += more
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    request: dict[str, Any] = marshal.loads(data[HEADER_BYTES : HEADER_BYTES + size])
    return request


def _become_caller(request: dict[str, Any]) -> None:
    """Take the caller's working directory, environment and standard streams."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read TMPDIR again
    streams = []
    for fd, (encoding, errors, line_buffering) in enumerate(request["streams"]):
        mode = "r" if fd == 0 else "w"
        streams.append(
            open(  # noqa: SIM115 - the process's own stream, closed at its exit
                fd,
                mode,
                encoding=encoding,
                errors=errors,
                closefd=False,
                buffering=-1,
            )
        )
        if line_buffering and isinstance(streams[-1], io.TextIOWrapper):
            streams[-1].reconfigure(line_buffering=True)
    sys.stdin, sys.stdout, sys.stderr = streams


def _run(argv: list[str], tree: Any) -> int:
    sys.argv = ["sbctl", *argv]
    try:
        app.main(argv, tree=tree)
        status: Any = 0
    except SystemExit as exc:
        status = exc.code
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
    if status is None:
        return 0
    if isinstance(status, int):
        return status
    sys.stderr.write(f"{status}\n")
    sys.stderr.flush()
    return 1


def _stop_with_caller(conn: socket.socket) -> None:
    """The caller sends nothing more: end of file means it is gone, and so is its command."""
    with contextlib.suppress(OSError):
        while conn.recv(1):
            pass
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
