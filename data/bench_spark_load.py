"""Benchmark `sbctl spark-load` against `sbctl send --input` on the same JSON Lines file.

    python data/bench_spark_load.py --rows 1000000 --size 1024

Starts a private daemon on a temporary data dir, writes the dataset with data/generate.py,
then times, as whole commands (process start, and Spark start, included):
`sbctl send --input FILE --batch-size B` for each ``--batch-sizes`` value, and
`sbctl spark-load FILE`, each into a fresh 16-partition queue. Prints every figure and the
speed-up over the best send; ``--json`` prints them as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sbctl(env: dict[str, str], *args: str) -> float:
    """Run one sbctl command; returns its wall time in seconds."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", *args], env=env, capture_output=True, text=True
    )
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"sbctl {' '.join(args)} failed: {proc.stderr.strip()}")
    return took


def count(env: dict[str, str], queue: str) -> int:
    proc = subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", "-o", "json", "queue", "show", queue],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return int(json.loads(proc.stdout)["active_message_count"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch-sizes", default="100,200", help="send --batch-size values")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="sbbench-"))
    env = dict(os.environ)
    env.update(SBCTL_DATA_DIR=str(root / "data"), SBCTL_SOCKET=str(root / "s.sock"))
    env.pop("SBCTL_NAMESPACE", None)
    source = root / "messages.jsonl"
    sys.path.insert(0, str(HERE))
    from generate import write  # data/generate.py

    result: dict[str, object] = {"rows": args.rows, "size": args.size}
    try:
        write(source, args.rows, args.size, keys=1000, sessions=0, seed=7)
        result["file_bytes"] = source.stat().st_size
        sbctl(env, "daemon", "start")
        sends = {}
        for b in (int(x) for x in args.batch_sizes.split(",")):
            queue = f"send-{b}"
            sbctl(env, "queue", "create", queue, "--enable-partitioning")
            sends[b] = round(
                sbctl(env, "send", queue, "--input", str(source), "--batch-size", str(b)), 2
            )
            assert count(env, queue) == args.rows
            sbctl(env, "queue", "delete", queue)
        result["send_input_s"] = sends
        best = min(sends.values())
        result["send_input_best_s"] = best
        sbctl(env, "queue", "create", "spark", "--enable-partitioning")
        spark_s = sbctl(
            env, "spark-load", str(source), "--entity", "spark", "--master", args.master
        )
        assert count(env, "spark") == args.rows
        result["spark_load_s"] = round(spark_s, 2)
        result["speedup_over_best_send"] = round(best / spark_s, 2)
    finally:
        subprocess.run(
            [sys.executable, "-m", "sbctl.cli.app", "daemon", "stop"], env=env, capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{args.rows:,} messages of {args.size} B, 16-partition queue")
    for b, s in sends.items():
        print(f"  sbctl send --input --batch-size {b}: {s:.2f} s ({args.rows / s:,.0f} msg/s)")
    print(
        f"  sbctl spark-load:                   {spark_s:.2f} s ({args.rows / spark_s:,.0f} msg/s)"
    )
    print(f"  spark-load vs best send: {best / spark_s:.2f}x")


if __name__ == "__main__":
    main()
