"""`sbctl spark-export`: an entity's messages as a Spark dataset, for analysis or reloading.

One Spark task per partition browses its partition with the public client's peek (daemon/README.md
§5:
no locks, no state change) and yields rows; Spark writes them in any format. Columns are
the JSON Lines field names (so `spark-load` maps them with no flags; application
properties as JSON text, keeping their types) plus the system properties of daemon/README.md §1.8.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sbctl.client import Client
from sbctl.core.errors import BadRequest
from sbctl.core.limits import MAX_PEEK
from sbctl.core.messages import json_value
from sbctl.core.names import parse_entity_path
from sbctl.core.partitioning import SEQUENCE_LOCAL_BITS
from sbctl.core.records import STRING_FIELDS
from sbctl.spark import session

SCHEMA = ", ".join(
    [
        "body BINARY",
        *(f"{name} STRING" for name in STRING_FIELDS),
        "time_to_live DOUBLE",
        "scheduled_enqueue_time_utc TIMESTAMP",
        "application_properties STRING",
        "sequence_number BIGINT",
        "enqueued_time_utc TIMESTAMP",
        "delivery_count INT",
        "expires_at_utc TIMESTAMP",
        "partition_id INT",
        "state STRING",
    ]
)


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def export_partition(
    pids: Iterator[int], socket: str, namespace: str, entity: str, partitioned: bool
) -> Iterator[tuple[Any, ...]]:
    """Spark's ``mapPartitions`` function: every message of the given partitions."""
    with Client(socket, namespace=namespace) as sb:
        for pid in pids:
            start = (pid << SEQUENCE_LOCAL_BITS) | 1 if partitioned else 1
            while True:
                page = sb.peek(entity, MAX_PEEK, start)
                mine = [m for m in page if (m.partition_id or 0) == pid]
                for m in mine:
                    msg = m.message
                    props = m.application_properties
                    yield (
                        msg.body,
                        *(getattr(msg, name) for name in STRING_FIELDS),
                        msg.time_to_live_ms / 1000 if msg.time_to_live_ms is not None else None,
                        _time(msg.scheduled_enqueue_time_ms),
                        _props_json(props) if props else None,
                        m.sequence_number,
                        _time(m.enqueued_time_ms),
                        m.delivery_count,
                        _time(m.expires_at_ms),
                        m.partition_id,
                        m.state,
                    )
                if len(mine) < len(page) or not page:
                    break
                start = page[-1].sequence_number + 1


def run_export(
    socket: str,
    namespace: str,
    entity: str,
    to: str,
    fmt: str,
    master: str,
    conf: dict[str, str],
    report: session.Progress | None = None,
    spark: Any = None,
    log: Path | None = None,
) -> dict[str, Any]:
    """Export; ``spark`` as in :func:`sbctl.spark.load.run`; ``log``: where Spark's JVM
    output goes (None: the terminal)."""
    started = time.monotonic()
    parsed = parse_entity_path(entity)
    with Client(socket, namespace=namespace) as sb:
        info = sb.queue_get(parsed.entity)
    partitions = int(info["partition_count"])
    if "://" not in to and os.path.exists(to):
        raise BadRequest(f"--to {to!r} already exists: choose a new path")
    own = spark is None
    if own:
        spark = session.start(master, conf, "sbctl spark-export", log)
    try:
        job = functools.partial(
            export_partition,
            socket=socket,
            namespace=namespace,
            entity=entity,
            partitioned=partitions > 1,
        )
        rows = spark.sparkContext.parallelize(range(partitions), partitions).mapPartitions(job)
        frame = spark.createDataFrame(rows, SCHEMA).cache()
        with session.watching(spark, report, "exporting messages"):
            count = frame.count()
            try:
                frame.write.format(fmt).save(to)
            except Exception as exc:
                raise BadRequest(
                    f"Spark could not write {fmt}: {session.first_line(exc)}"
                ) from None
        return {
            "entity": entity,
            "path": to,
            "format": fmt,
            "messages": count,
            "partitions": partitions,
            "seconds": round(time.monotonic() - started, 3),
        }
    finally:
        if own:
            session.stop(spark)


def _props_json(props: dict[str, Any]) -> str:
    """Plain values as JSON; typed ones as ``{"$type": ..., "value": ...}`` (as peek shows
    them, and as spark-load reads them back)."""
    return json.dumps({k: json_value(v) for k, v in props.items()}, ensure_ascii=False)
