"""``sbctl bench --cli``: how long ``sbctl``'s own commands take, each in a fresh process.

:func:`cli_bench` creates a throwaway namespace (``bench-<hex>``) with a queue and a topic on
the running daemon, then runs each command of :data:`COMMANDS` ``runs`` times as a new
``python -m sbctl.cli.app`` process (what the console script runs), round-robin so that a
busy machine slows every command alike, and reports per command the median and fastest wall
time, the median CPU time (user + system) and the median against :data:`TARGET_MS`. The
first row is the interpreter alone (``python -c pass``): the floor no command can go below.
Each command must exit with its expected status (errors are measured too). The namespace is
deleted afterwards, also on failure.

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
    ("error: no daemon", lambda i: ["--socket", "/nonexistent/sbctld.sock", "queue", "list"], 9),
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


def measure(
    env: dict[str, str], runs: int = RUNS, commands: tuple[tuple[str, Args, int], ...] = COMMANDS
) -> list[dict[str, Any]]:
    """One row per command (the interpreter alone first), each run ``runs`` times
    round-robin after one untimed warm-up run."""
    cli = [sys.executable, "-m", "sbctl.cli.app"]
    table = [("python -c pass (the floor)", [sys.executable, "-c", "pass"], 0)]
    table += [(label, cli, expected) for label, _args, expected in commands]
    argv: dict[str, Callable[[int], list[str]]] = {table[0][0]: lambda i: []}
    argv.update({label: args for label, args, _expected in commands})
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in table}
    for i in range(-1, runs):  # run -1 warms up (and writes bytecode where Python may)
        for label, head, expected in table:
            code, wall, cpu, err = _timed([*head, *argv[label](i)], env)
            if code != expected:
                last = (err.strip().splitlines() or [""])[-1]
                raise GeneralError(f"{label!r} exited {code}, not {expected}: {last}")
            if i >= 0:
                samples[label].append((wall, cpu))
    rows = []
    for label, _head, _expected in table:
        walls = [wall for wall, _cpu in samples[label]]
        median = round(statistics.median(walls), 1)
        rows.append(
            {
                "command": label,
                "median_ms": median,
                "min_ms": round(min(walls), 1),
                "cpu_ms": round(statistics.median(cpu for _wall, cpu in samples[label]), 1),
                "vs_target": round(median / TARGET_MS, 2),
            }
        )
    return rows


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
        "over_target": sum(1 for row in rows[1:] if row["median_ms"] > TARGET_MS),
        "commands": rows,
    }
