"""The daemon keeps serving other clients while it adopts a large spark-load.

Staged files are written here as Spark tasks write them (whole record batches, numbered from
0), so the test needs no Spark. A second client sends single messages during the adoption
and its latency is printed. ``SBCTL_ADOPT_MESSAGES`` scales the load (default 100,000 x 1 KiB;
the figures in the README come from 1,000,000)."""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path
from typing import Any

from sbctl.core.message_form import encode as encode_message
from sbctl.core.records import NOT_SCHEDULED, Message, StagedRecord, encode_batch

MESSAGES = int(os.environ.get("SBCTL_ADOPT_MESSAGES", "100000"))
BODY = 1024
FILES = 4  # as four Spark tasks
PER_BATCH = 1000  # about 1 MiB per batch, as sbctl.spark.stage cuts them


def stage_files(folder: Path, messages: int) -> list[tuple[int, str]]:
    folder.mkdir(parents=True)
    record = StagedRecord(encode_message(Message(body=b"x" * BODY)), -1, NOT_SCHEDULED)
    batch = encode_batch(0, 0, [record] * PER_BATCH)[0]
    files = []
    per_file = messages // FILES
    for k in range(FILES):
        path = folder / f"task-{k}.sbb"
        with path.open("wb") as fh:
            left = per_file + (messages % FILES if k == FILES - 1 else 0)
            while left >= PER_BATCH:
                fh.write(batch)
                left -= PER_BATCH
            if left:
                fh.write(encode_batch(0, 0, [record] * left)[0])
        files.append((0, str(path)))
    return files


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    return ordered[max(0, math.ceil(len(ordered) * q) - 1)]


def test_other_clients_are_served_during_a_large_adoption(daemon: Any) -> None:
    with daemon.client() as c:
        c.queue_create("bulk", max_size_in_megabytes=5120)
        c.queue_create("probe")
    files = stage_files(daemon.data_dir.parent / "stage", MESSAGES)
    samples: list[tuple[float, float]] = []  # (start, latency)
    stop = threading.Event()
    errors: list[BaseException] = []

    def sender() -> None:
        try:
            with daemon.client() as c:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    c.send("probe", [Message(body=b"p")])
                    samples.append((t0, time.perf_counter() - t0))
                    time.sleep(0.002)
        except BaseException as exc:  # reported below, not swallowed
            errors.append(exc)

    pings: list[tuple[float, float]] = []  # the same for a request that writes nothing

    def pinger() -> None:
        try:
            with daemon.client() as c:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    c.ping()
                    pings.append((t0, time.perf_counter() - t0))
                    time.sleep(0.002)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=sender)
    thread.start()
    ping_thread = threading.Thread(target=pinger)
    ping_thread.start()
    try:
        time.sleep(0.3)
        with daemon.client() as c:
            t_start = time.perf_counter()
            result = c.load_adopt("bulk", "big-load", files)
            t_end = time.perf_counter()
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join(timeout=60)
        ping_thread.join(timeout=60)
    assert not errors, errors
    assert result["messages"] == MESSAGES

    def overlapping(got: list[tuple[float, float]]) -> list[float]:
        return sorted(lat for t0, lat in got if t_start <= t0 + lat and t0 <= t_end)

    during = overlapping(samples)
    assert during, "no send overlapped the adoption"
    p99 = percentile(during, 0.99)
    ping_during = overlapping(pings)
    print(
        f"\nadoption of {MESSAGES:,} x {BODY} B in {FILES} files: {t_end - t_start:.2f} s; "
        f"{len(during)} single-message sends during it: p50 {percentile(during, 0.5) * 1000:.1f}"
        f" ms, p99 {p99 * 1000:.1f} ms, max {during[-1] * 1000:.1f} ms; {len(ping_during)} "
        f"pings: p50 {percentile(ping_during, 0.5) * 1000:.1f} ms, p99 "
        f"{percentile(ping_during, 0.99) * 1000:.1f} ms, max {ping_during[-1] * 1000:.1f} ms"
    )
    logged = [
        ln for ln in (daemon.data_dir / "sbctld.log").read_text().splitlines() if "big-load" in ln
    ]
    print("\n".join(logged))
    with daemon.client() as c:
        info = c.queue_get("bulk")
        assert info["active_message_count"] == MESSAGES
        last = c.peek("bulk", count=1, from_sequence=MESSAGES)
        assert last[0].sequence_number == MESSAGES and last[0].body == b"x" * BODY
    assert p99 < 2.0, f"p99 {p99 * 1000:.0f} ms during the adoption"


def test_the_same_load_sent_twice_at_once_is_adopted_once(daemon: Any) -> None:
    with daemon.client() as c:
        c.queue_create("bulk", max_size_in_megabytes=5120)
    files = stage_files(daemon.data_dir.parent / "stage", 100_000)
    results: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def adopt() -> None:
        try:
            with daemon.client() as c:
                results.append(c.load_adopt("bulk", "twice", files))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=adopt) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert sorted(r["adopted"] for r in results) == [False, False, True]
    assert {r["messages"] for r in results} == {100_000}
    with daemon.client() as c:
        assert c.queue_get("bulk")["active_message_count"] == 100_000
