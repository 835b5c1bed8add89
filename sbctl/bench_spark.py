"""``sbctl bench --spark``: `spark-load` against the best CLI send of the same file.

One JSON Lines file of ``messages`` lines (a ``size``-byte body and a MessageId each, and
with ``partitioned`` one of 1,000 partition keys; the `send --input` format) goes into three
queues (16 partitions with ``partitioned``) of a throwaway, unthrottled namespace: by
``sbctl send --input`` with batches of 100 and of 1,000, then by ``sbctl spark-load``. Each
is the real command in its own process, timed end to end (Spark's start included); the
ratio is spark-load's rate over the faster send's (target at least 3).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sbctl.client import Client
from sbctl.core import layout
from sbctl.core.errors import GeneralError, SbctlError

SEND_BATCHES = (100, 1000)
TARGET = 3.0
QUEUE_MAX_SIZE_MB = 5120  # (Standard's largest: the bench queues hold the whole file)
LIMIT_S = 3600  # each command stops by then


KEYS = 1000  # partition keys of a partitioned run


def write_lines(path: Path, messages: int, size: int, keys: int = 0) -> None:
    """``messages`` lines of `send --input` JSON: ``{"body": ..., "message_id": "m<i>"}``,
    plus ``"partition_key": "k<i % keys>"`` when ``keys``."""
    body = "x" * size

    def line(i: int) -> str:
        key = f', "partition_key": "k{i % keys}"' if keys else ""
        return f'{{"body": "{body}", "message_id": "m{i}"{key}}}\n'

    with path.open("w", encoding="utf-8") as fh:
        for start in range(0, messages, 10_000):
            fh.write("".join(line(i) for i in range(start, min(messages, start + 10_000))))


def _sbctl(args: list[str], socket: Path, namespace: str) -> float:
    """Run ``sbctl ARGS`` (in-process CLI, no CLI server): its wall time in seconds."""
    argv = [sys.executable, "-m", "sbctl.cli.app", "--socket", str(socket), "-n", namespace]
    env = {**os.environ, "SBCTL_CLI_SERVER": "0"}
    started = time.monotonic()
    done = subprocess.run(
        argv + args,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=LIMIT_S,
    )
    took = time.monotonic() - started
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise GeneralError(f"`sbctl {' '.join(args[:2])}` failed ({done.returncode}): {said}")
    return took


def spark_bench(
    socket: Path, data_dir: Path | None, *, messages: int, size: int, partitioned: bool = False
) -> dict[str, Any]:
    """Time both ways into a throwaway namespace (deleted afterwards)."""
    from sbctl.bench import namespace_name

    ns = namespace_name()
    out: dict[str, Any] = {
        "messages": messages,
        "size": size,
        "partitioned": partitioned,
        "namespace": ns,
    }
    where = data_dir if data_dir is not None and data_dir.is_dir() else None
    with Client(socket, timeout=60) as admin:
        admin.namespace_create(ns, credits_per_second=0)  # measure the paths, not credits
    try:
        with tempfile.TemporaryDirectory(prefix="sbctl-bench-spark-", dir=where) as tmp:
            source = Path(tmp) / "messages.jsonl"
            write_lines(source, messages, size, KEYS if partitioned else 0)
            out["file_mb"] = round(source.stat().st_size / 1e6, 1)
            queues = [f"send{b}" for b in SEND_BATCHES] + ["spark"]
            with Client(socket, namespace=ns, timeout=60) as admin:
                for queue in queues:
                    admin.queue_create(
                        queue,
                        enable_partitioning=partitioned,
                        max_size_in_megabytes=QUEUE_MAX_SIZE_MB,
                    )
            for batch in SEND_BATCHES:
                args = ["send", f"send{batch}", "--input", str(source), "-o", "json"]
                out[f"cli_send_b{batch}_s"] = _sbctl(
                    [*args, "--batch-size", str(batch)], socket, ns
                )
            staging = layout.staging_dir(Path(tmp))
            out["spark_load_s"] = _sbctl(
                ["spark-load", str(source), "--entity", "spark", "--staging-dir", str(staging)],
                socket,
                ns,
            )
            with Client(socket, namespace=ns, timeout=60) as admin:
                for queue in queues:
                    count = int(admin.queue_get(queue)["active_message_count"])
                    if count != messages:
                        raise GeneralError(f"queue {queue} holds {count} of {messages} messages")
    finally:
        with contextlib.suppress(SbctlError), Client(socket, timeout=60) as cleanup:
            cleanup.namespace_delete(ns)
    best = min(out[f"cli_send_b{b}_s"] for b in SEND_BATCHES)
    out["best_cli_send_msgs_per_s"] = messages / best
    out["spark_load_msgs_per_s"] = messages / out["spark_load_s"]
    out["spark_vs_best_cli_send"] = best / out["spark_load_s"]
    out["target"] = TARGET
    out["met"] = out["spark_vs_best_cli_send"] >= TARGET
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in out.items()}
