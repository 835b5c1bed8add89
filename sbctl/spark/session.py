"""The Spark session spark-load and spark-export run in, and its job progress."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sbctl.errors import BadRequest

# (done tasks, total tasks, what runs) -> None
Progress = Callable[[int, int, str], None]

_LOG4J = f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}"
QUIET = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "16",
    "spark.driver.extraJavaOptions": _LOG4J,
    "spark.executor.extraJavaOptions": _LOG4J,
}


def parse_pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    """``k=v`` flags as a dict; the error names the flag."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadRequest(f"{flag}: {item!r} is not key=value")
        out[key] = value
    return out


def start(master: str, conf: dict[str, str], app: str) -> Any:
    """A SparkSession (one per command); ``conf`` wins over sbctl's quiet defaults."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app)
    for key, value in {**QUIET, **conf}.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # the JVM did not start: no java, bad master URL
        raise BadRequest(f"Spark did not start (--master {master}): {first_line(exc)}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@contextmanager
def watching(spark: Any, report: Progress | None, what: str) -> Iterator[None]:
    """Feed ``report`` with the running job's task counts while the block runs."""
    if report is None:
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    group = f"sbctl-{id(stop)}"
    spark.sparkContext.setJobGroup(group, what)

    def poll() -> None:
        while not stop.wait(0.2):
            done = total = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info else ():
                    s = tracker.getStageInfo(stage)
                    if s is not None:
                        done += s.numCompletedTasks
                        total += s.numTasks
            if total:
                report(done, total, what)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
