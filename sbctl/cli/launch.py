"""The ``sbctl`` console script: hand the command line to a warm CLI process, else run it here.

Python starts in tens of milliseconds, but importing typer, the client and rich and building
the command costs more than that again on every command. A *CLI server*
(:mod:`sbctl.cli.preload`) pays it once: it imports and builds everything, then forks one
child per command. This module is all a command imports before it is handed over: it
connects to the server's Unix socket, passes the command line, the working directory, the
environment and its own stdin, stdout and stderr (the descriptors themselves, so the child
writes straight to the terminal or pipe and reads stdin as if it were this process), forwards
the signals it gets to the child and exits with the child's status. Nothing else changes:
the same ``main`` runs the same command with the same environment.

When there is no server (the first command, after a reboot, after ten idle minutes, or after
sbctl's files changed) the command runs in this process as before and a server is started in
the background for the next one. Commands that take over the terminal or start long-lived
processes always run here (:data:`IN_PROCESS`); so does everything when ``SBCTL_CLI_SERVER=0``.
The server's socket is in a directory only its user may enter, and it serves only its user.
"""

from __future__ import annotations

import _socket  # (not socket: what it adds costs more start-up than this module's rest)
import marshal
import os
import signal
import sys
import zlib
from collections.abc import Sequence

# Words that send a command line to this process: the commands that draw on the terminal,
# start processes that outlive the command, or run for minutes (`daemon start`, `top`,
# `explorer`, `help`'s pager, benchmarks, Spark). A queue named "top" only costs speed.
IN_PROCESS = frozenset(
    {
        "start",
        "top",
        "explorer",
        "help",
        "bench",
        "spark-load",
        "spark-export",
        "--install-completion",
        "--show-completion",
    }
)
ENV_SWITCH = "SBCTL_CLI_SERVER"
# A request: 4-byte big-endian length, then that many bytes of marshal data (both ends are
# the same interpreter, and only the server's own user may connect); stdin, stdout and
# stderr ride along as SCM_RIGHTS. The answers are lines: "pid N", then "exit S".
HEADER_BYTES = 4
STD_FDS = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2))
# (SIGWINCH: a resized terminal reaches a live view, `--watch`)
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGWINCH)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if (
        sys.platform == "linux"  # (SO_PEERCRED, posix_spawn's setsid)
        and os.environ.get(ENV_SWITCH, "1") != "0"
        and not IN_PROCESS.intersection(args)
    ):
        path = socket_path()
        if path is not None:
            status = _via_server(path, args)
            if status is not None:
                # The child wrote the output; this process has nothing to clean up, and
                # the interpreter's shutdown alone would cost 10-30 ms.
                sys.stderr.flush()
                os._exit(status)
    from sbctl.cli.app import main as run_here

    run_here(args)


def socket_path() -> str | None:
    """The server's socket for this interpreter and this copy of sbctl, in a private
    directory; None when that directory cannot be made private."""
    base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    uid = os.getuid()
    directory = os.path.join(base, f"sbctl-cli-{uid}")
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(directory)
    except OSError:
        return None
    if st.st_uid != uid or st.st_mode & 0o077 or not os.path.isdir(directory):
        return None  # someone else's, or open to others: do not trust it
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    key = "\0".join((sys.executable, here, os.environ.get("PYTHONPATH", ""), sys.version))
    return os.path.join(directory, f"{zlib.crc32(key.encode()):08x}.sock")


def _via_server(path: str, args: list[str]) -> int | None:
    """The command's exit status, run by the server; None when no server took it (then
    one is started and the caller runs the command itself)."""
    conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        try:
            conn.connect(path)
        except OSError:
            start_server(path)
            return None
        signals = _Signals()  # from now on a signal is kept for the child, not lost
        request = marshal.dumps(
            {
                "argv": args,
                "cwd": os.getcwd(),
                "env": dict(os.environ),
                "streams": [_stream(sys.stdin), _stream(sys.stdout), _stream(sys.stderr)],
            }
        )
        data = len(request).to_bytes(HEADER_BYTES, "big") + request
        try:
            sent = conn.sendmsg([data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, STD_FDS)])
            if sent < len(data):
                conn.sendall(data[sent:])
        except OSError:
            sent = -1  # a standard stream is closed: run here
        status = _follow(conn, signals) if sent >= 0 else None
        if status is None:
            signals.restore()
            fatal = signals.fatal()
            if fatal is not None:  # stopped before anything ran
                return 128 + fatal
    finally:
        conn.close()
    if status is None and sent >= 0:
        start_server(path)  # the server declined: its files changed
    return status


class _Signals:
    """The signals this process gets while a child runs its command: kept until the child
    is known, then passed on to it."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self.child = 0
        self.before = {signum: signal.signal(signum, self.forward) for signum in FORWARDED}

    def forward(self, signum: int, _frame: object = None) -> None:
        self.received.append(signum)
        if self.child:
            try:
                os.kill(self.child, signum)
            except ProcessLookupError:
                pass

    def started(self, child: int) -> None:
        self.child = child
        for signum in self.received:
            os.kill(child, signum)

    def fatal(self) -> int | None:
        """The last signal received that ends a process (not SIGWINCH)."""
        fatal = [signum for signum in self.received if signum != signal.SIGWINCH]
        return fatal[-1] if fatal else None

    def restore(self) -> None:
        for signum, handler in self.before.items():
            signal.signal(signum, handler)


def _stream(stream: object) -> list[object]:
    """How a standard stream of this process encodes, so the child's behaves the same."""
    return [
        getattr(stream, "encoding", None),
        getattr(stream, "errors", None),
        bool(getattr(stream, "line_buffering", False)),
    ]


def _follow(conn: _socket.socket, signals: _Signals) -> int | None:
    """Read the child's pid, pass signals on to it, and return its exit status."""
    lines = _Lines(conn)
    first = lines.next()
    if not first.startswith(b"pid "):
        return None  # the server declined (its files changed): nothing ran
    signals.started(int(first[4:]))
    line = lines.next()
    if line.startswith(b"exit "):
        return int(line[5:])
    fatal = signals.fatal()
    if fatal is not None:  # the child died of the signal this process was sent: so does this one
        signal.signal(fatal, signal.SIG_DFL)
        os.kill(os.getpid(), fatal)
    sys.stderr.write("error: the sbctl command process ended without an exit status\n")
    return 1


class _Lines:
    """Lines off a socket (b"" at its end or on an error)."""

    def __init__(self, conn: _socket.socket) -> None:
        self.conn = conn
        self.buffer = b""

    def next(self) -> bytes:
        while b"\n" not in self.buffer:
            try:
                more = self.conn.recv(256)
            except OSError:
                more = b""
            if not more:
                return b""
            self.buffer += more
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line


def start_server(path: str) -> None:
    """Start a CLI server on ``path`` in the background (its own session, no terminal)."""
    devnull = os.devnull
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, devnull, os.O_WRONLY, 0),
        (os.POSIX_SPAWN_OPEN, 2, devnull, os.O_WRONLY, 0),
    ]
    try:
        os.posix_spawn(
            sys.executable,
            [sys.executable, "-m", "sbctl.cli.preload", path],
            dict(os.environ),
            file_actions=actions,
            setsid=True,
        )
    except OSError:
        pass  # no server: every command runs in its own process, as it can


if __name__ == "__main__":
    main()
