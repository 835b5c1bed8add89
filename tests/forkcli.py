"""Run ``python -m sbctl.cli.app ARGS`` without paying Python's start-up and sbctl's imports
on every call: the test suite's single biggest cost (each of the suite's thousand-odd CLI
calls took ~0.3 s of CPU, nearly all of it importing).

A *zygote* process imports the CLI once (and builds typer's click command tree once);
each call forks a fresh child of it that runs the CLI's ``main`` as the console script
does, with ``sys.argv``, the caller's environment, working directory and
stdin/stdout/stderr files, and exits normally (atexit handlers run; the exit status or
signal is reported back). The child is a real separate process with the same code and
environment; only start-up work is shared.

Protocol, per call, on the zygote's Unix socket: the caller sends one JSON line (args, env,
cwd) with three file descriptors (stdin, stdout, stderr) attached; the zygote forks a
handler (so that the zygote itself never has threads or children to wait for), the handler
forks the CLI child, answers ``{"pid": ...}``, waits, then answers ``{"status": ...}``.

``SBCTL_TEST_FRESH_CLI=1`` makes the tests start a fresh interpreter per call instead.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import Any

MODULE = "sbctl.cli.app"


# ----------------------------------------------------------------------------- zygote side


def _prepare() -> Any:  # pragma: no cover - runs in the zygote
    """Import what any command imports, and build the click command tree once (typer
    rebuilds it from the function signatures on every ``main()``; the CLI loads each command
    only when it runs). Returns the CLI's ``main``."""
    import gc
    import importlib

    import typer.main

    import sbctl.cli.app as app

    for name in (
        "sbctl.client",
        "sbctl.daemonctl",
        "sbctl.core.messages",
        "sbctl.core.durations",
        "sbctl.emulator_config",
        "sbctl.cli.cmd_messages",
        "sbctld.main",  # what `daemon start` runs in the daemon it forks
    ):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    build = typer.main.get_command
    built: dict[int, Any] = {}

    def get_command(typer_instance: Any) -> Any:
        key = id(typer_instance)
        if key not in built:
            built[key] = (typer_instance, build(typer_instance))
        return built[key][1]

    typer.main.get_command = get_command
    root = app.command_tree()  # the root, cached above; then every command it loads lazily
    for name in list(root.commands):
        root.load(name)
    gc.freeze()  # children never collect what the zygote built: less to copy and scan
    return app.main


def serve(path: str) -> None:  # pragma: no cover - runs in the zygote
    main = _prepare()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped automatically
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(128)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        conn, _ = server.accept()
        if os.fork() != 0:
            conn.close()
            continue
        # handler
        server.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
        request = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            conn.close()
            _become_cli(request, fds)
            _run_and_exit(main)
        for fd in fds:
            os.close(fd)
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
        _, status = os.waitpid(pid, 0)
        conn.sendall(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        conn.close()
        os._exit(0)


def _run_and_exit(main: Any) -> None:  # pragma: no cover - runs in a CLI child
    """Run ``main`` and exit as the interpreter would (status from SystemExit, traceback and
    1 for an uncaught exception, non-daemon threads joined, atexit handlers run, output
    flushed), minus tearing down every module one by one, which takes longer than the
    command."""
    code = 0
    try:
        main()
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # joins non-daemon threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # what Python exits with when the final flush fails
    os._exit(code & 0xFF)


def _become_cli(request: dict[str, Any], fds: list[int]) -> None:  # pragma: no cover
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [sys.modules[MODULE].__file__ or MODULE, *request["args"]]


# ----------------------------------------------------------------------------- caller side


class _Zygote:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir: str | None = None
        self.path = ""

    def ensure(self) -> str:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.dir = tempfile.mkdtemp(prefix="sbz-")
                self.path = os.path.join(self.dir, "z.sock")
                env = dict(os.environ)
                here = str(Path(__file__).parent)
                env["PYTHONPATH"] = os.pathsep.join(
                    [here, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
                )
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", f"import forkcli; forkcli.serve({self.path!r})"],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    start_new_session=True,
                )
                assert self.proc.stdout is not None
                line = self.proc.stdout.readline()
                self.proc.stdout.close()
                if line.strip() != b"ready":
                    raise RuntimeError("the CLI zygote did not start")
                atexit.register(self.stop)
            return self.path

    def stop(self) -> None:
        with self.lock:
            proc, self.proc = self.proc, None
            if proc is not None:
                proc.kill()
                proc.wait()
            if self.dir is not None:
                for name in os.listdir(self.dir):
                    os.unlink(os.path.join(self.dir, name))
                os.rmdir(self.dir)
                self.dir = None


_zygote = _Zygote()


def _startup_env(env: Any) -> dict[str, str]:
    return {
        k: v for k, v in env.items() if k.startswith(("PYTHON", "LC_")) or k in ("LANG", "LANGUAGE")
    }


def run(
    args: list[str], env: dict[str, str], input: str | None, timeout: float
) -> tuple[int, str, str]:
    """Like ``subprocess.run([python, -m, sbctl.cli.app, *args], env=env, input=input,
    capture_output=True, text=True, timeout=timeout)``: (status, stdout, stderr).
    An environment that changes what Python reads only at start-up (``PYTHON*``,
    ``LANG``, ``LC_*``) gets a fresh interpreter, as it would not reach a forked child."""
    if _startup_env(env) != _startup_env(os.environ):
        proc = subprocess.run(
            [sys.executable, "-m", MODULE, *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
        return proc.returncode, proc.stdout, proc.stderr
    path = _zygote.ensure()
    with (
        tempfile.TemporaryFile() as stdin,
        tempfile.TemporaryFile() as stdout,
        tempfile.TemporaryFile() as stderr,
    ):
        if input is not None:
            stdin.write(input.encode())
            stdin.seek(0)
        request = {"args": list(args), "env": env, "cwd": os.getcwd()}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            fds = [stdin.fileno(), stdout.fileno(), stderr.fileno()]
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            reader = conn.makefile("rb")
            try:
                pid = json.loads(reader.readline())["pid"]
                try:
                    status = json.loads(reader.readline())["status"]
                except TimeoutError:
                    os.kill(pid, signal.SIGKILL)
                    raise subprocess.TimeoutExpired([MODULE, *args], timeout) from None
            finally:
                reader.close()
        stdout.seek(0)
        stderr.seek(0)
        return status, stdout.read().decode(), stderr.read().decode()
