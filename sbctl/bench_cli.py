"""``sbctl bench --cli``: how long ``sbctl``'s own commands take, each in a fresh process.

:func:`cli_bench` creates a throwaway namespace (``bench-<hex>``) with a queue and a topic on
the running daemon, then runs each command of :data:`COMMANDS` ``runs`` times as a new
process running what the console script runs (:mod:`sbctl.cli.launch`), two ways: in its
own process (``SBCTL_CLI_SERVER=0``: import, build, run) and handed to a warm CLI server
(:mod:`sbctl.cli.preload`; the bench starts its own, in a private runtime directory, and
stops it). Runs go round-robin, so that a busy machine slows every command alike; per
command and way it reports the median and fastest wall time and the median CPU time (user +
system) of the process, and the served median against :data:`TARGET_MS`. The first row is
the interpreter alone (``python -c pass``): the floor no command can go below. Each command
must exit with its expected status (errors are measured too). The namespace is deleted
afterwards, also on failure.

The figures only mean something on the machine that printed them: they are printed, never
asserted (tests/unit/test_cli_startup.py checks the mechanism instead: what a command
imports). Python reads each module's compiled bytecode when it may write it
(``PYTHONDONTWRITEBYTECODE`` unset, or after ``python -m compileall``); without it every run
compiles every module it imports, and ``bytecode_cached`` says which case was measured.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sbctl.core.errors import GeneralError, SbctlError

TARGET_MS = 100.0
RUNS = 15
QUEUE = "q"
TOPIC = "t"

# (label, the command's arguments for run i, expected exit status). The entity names are
# those :func:`cli_bench` creates; "missing" does not exist.
Args = Callable[[int], list[str]]
COMMANDS: tuple[tuple[str, Args, int], ...] = (
    ("sbctl --version", lambda i: ["--version"], 0),
    ("sbctl --help", lambda i: ["--help"], 0),
    ("sbctl queue --help", lambda i: ["queue", "--help"], 0),
    ("sbctl queue create", lambda i: ["queue", "create", f"c{i}"], 0),
    ("sbctl queue list", lambda i: ["queue", "list"], 0),
    ("sbctl queue list -o json", lambda i: ["-o", "json", "queue", "list"], 0),
    ("sbctl queue show", lambda i: ["queue", "show", QUEUE], 0),
    ("sbctl send --body", lambda i: ["send", QUEUE, "--body", f"m{i}"], 0),
    ("sbctl send --body -o json", lambda i: ["-o", "json", "send", QUEUE, "--body", f"j{i}"], 0),
    ("sbctl peek", lambda i: ["peek", QUEUE], 0),
    ("sbctl peek -o json", lambda i: ["-o", "json", "peek", QUEUE], 0),
    ("sbctl receive", lambda i: ["receive", QUEUE], 0),
    ("sbctl receive -o json", lambda i: ["-o", "json", "receive", QUEUE], 0),
    ("sbctl topic list", lambda i: ["topic", "list"], 0),
    ("sbctl namespace list", lambda i: ["namespace", "list"], 0),
    ("sbctl daemon status", lambda i: ["daemon", "status"], 0),
    ("sbctl daemon status -o json", lambda i: ["-o", "json", "daemon", "status"], 0),
    ("error: no such queue", lambda i: ["queue", "show", "missing"], 3),
    (
        "error: no daemon",
        lambda i: ["--socket", "/nonexistent/sbctl-bench.sock", "queue", "list"],
        9,
    ),
)


def _timed(argv: list[str], env: dict[str, str]) -> tuple[int, float, float, str]:
    """Run ``argv``: (exit status, wall ms, CPU ms of the process, its stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    wall = (time.perf_counter() - t0) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return proc.returncode, wall, cpu, proc.stderr


def bytecode_cached() -> bool:
    """Whether the CLI's entry module has compiled bytecode next to it (see the module
    docstring)."""
    spec = importlib.util.find_spec("sbctl.cli.app")
    origin = spec.origin if spec is not None else None
    return origin is not None and Path(importlib.util.cache_from_source(origin)).exists()


# How a command runs: what the console script runs (sbctl.cli.launch), in its own process
# (SBCTL_CLI_SERVER=0) and handed to a warm CLI server (sbctl.cli.preload).
LAUNCH = "from sbctl.cli.launch import main; main()"
MODES = ("own", "served")


def measure(
    env: dict[str, str], runs: int = RUNS, commands: tuple[tuple[str, Args, int], ...] = COMMANDS
) -> list[dict[str, Any]]:
    """One row per command (the interpreter alone first), each run ``runs`` times per mode,
    round-robin after one untimed warm-up run (which also starts the bench's own CLI server,
    in a private runtime directory, stopped at the end)."""
    with tempfile.TemporaryDirectory(prefix="sbctl-bench-cli-") as runtime:
        envs = {
            "own": {**env, "SBCTL_CLI_SERVER": "0"},
            "served": {**env, "SBCTL_CLI_SERVER": "1", "XDG_RUNTIME_DIR": runtime},
        }
        try:
            samples = _sample(envs, runs, commands, runtime)
        finally:
            _stop_servers(runtime)
    rows = []
    for label, by_mode in samples.items():
        row: dict[str, Any] = {"command": label}
        for mode in MODES:
            walls = [wall for wall, _cpu in by_mode[mode]]
            row[f"{mode}_median_ms"] = round(statistics.median(walls), 1)
            row[f"{mode}_min_ms"] = round(min(walls), 1)
            row[f"{mode}_cpu_ms"] = round(statistics.median(cpu for _w, cpu in by_mode[mode]), 1)
        row["vs_target"] = round(row["served_median_ms"] / TARGET_MS, 2)
        rows.append(row)
    return rows


def _sample(
    envs: dict[str, dict[str, str]],
    runs: int,
    commands: tuple[tuple[str, Args, int], ...],
    runtime: str,
) -> dict[str, dict[str, list[tuple[float, float]]]]:
    floor = "python -c pass (the floor)"
    table: list[tuple[str, Args, int]] = [(floor, lambda i: [], 0), *commands]
    samples: dict[str, dict[str, list[tuple[float, float]]]] = {
        label: {mode: [] for mode in MODES} for label, _a, _e in table
    }
    for i in range(-1, runs):  # run -1 warms up (and writes bytecode where Python may)
        for label, args, expected in table:
            for k, mode in enumerate(MODES):
                head = [sys.executable, "-c", "pass" if label == floor else LAUNCH]
                run = i * len(MODES) + k  # (each run creates its own names)
                code, wall, cpu, err = _timed([*head, *args(run)], envs[mode])
                if code != expected:
                    last = (err.strip().splitlines() or [""])[-1]
                    raise GeneralError(f"{label!r} exited {code}, not {expected}: {last}")
                if i >= 0:
                    samples[label][mode].append((wall, cpu))
        if i == -1:
            _await_server(runtime)
    return samples


def _await_server(runtime: str, timeout: float = 30.0) -> None:
    """Wait for the CLI server the warm-up started to listen (it imports for a moment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(p.suffix == ".sock" for p in Path(runtime).glob("sbctl-cli-*/*")):
            return
        time.sleep(0.05)
    raise GeneralError("the CLI server did not start within 30 s")


def _stop_servers(runtime: str) -> None:
    """End the CLI servers listening under ``runtime`` (the bench's own)."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "sbctl.cli.preload" in cmdline and any(runtime in arg for arg in cmdline):
            with contextlib.suppress(psutil.Error):
                proc.terminate()


def cli_bench(socket_path: Path, runs: int = RUNS) -> dict[str, Any]:
    """Time the CLI against the daemon at ``socket_path`` in a throwaway namespace."""
    from sbctl.client import Client

    namespace = f"bench-{secrets.token_hex(4)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    env.update(SBCTL_SOCKET=str(socket_path), SBCTL_NAMESPACE=namespace)
    with Client(socket_path) as admin:
        admin.namespace_create(namespace)
        try:
            with Client(socket_path, namespace=namespace) as client:
                client.queue_create(QUEUE)
                client.topic_create(TOPIC)
            rows = measure(env, runs)
        finally:
            with contextlib.suppress(SbctlError, OSError):
                admin.namespace_delete(namespace)
    return {
        "runs": runs,
        "target_ms": TARGET_MS,
        "bytecode_cached": bytecode_cached(),
        "over_target": sum(1 for row in rows[1:] if row["served_median_ms"] > TARGET_MS),
        "commands": rows,
    }
