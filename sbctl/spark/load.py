"""`sbctl spark-load`: read any Spark source, stage record batches, adopt them atomically.

The work happens in Spark (daemon/README.md §0.4.6 makes it an administrative path, charged no
credits):

1. Spark reads the source and maps columns to message fields (:mod:`.columns`).
2. Spark SQL places each row: ``pmod(xxhash64(key), P)`` with the key of daemon/README.md §0.1.4
   (SessionId, else PartitionKey, else MessageId with duplicate detection), exactly the
   daemon's function (daemon/README.md §22); keyless rows go round-robin. With duplicate detection
   a window over the MessageId (plus the partition key on partitioned entities, daemon/README.md
   §8.3)
   marks every copy after the earliest row of the input as a duplicate.
3. Each Spark task validates its rows with the daemon's send rules and writes staged batch
   files per target partition with the shared codec (:mod:`.stage`); rejected rows go to
   the rejects file with the reason.
4. One client call asks the daemon to adopt the files: all of them become visible at once,
   or none (sbctld.loads); the same ``--load-id`` again is a no-op.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sbctl.client import Client
from sbctl.core import layout
from sbctl.core.durations import parse_duration_ms
from sbctl.core.errors import BadRequest, InvalidOperation, QuotaExceeded
from sbctl.core.messages import INPUT_FIELDS
from sbctl.core.names import parse_entity_path
from sbctl.spark import columns, session
from sbctl.spark.stage import Rules, Target, stage_lines, stage_rows

FORMATS_BY_SUFFIX = {
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
    ".orc": "orc",
    ".avro": "avro",
    ".txt": "text",
    ".text": "text",
}
DEFAULT_OPTIONS = {"csv": {"header": "true"}}
LINES_SUFFIXES = tuple(k for k, v in FORMATS_BY_SUFFIX.items() if v == "json")
SPLIT_BYTES = 128 * 1024 * 1024  # a task reads at most this much of a JSON Lines file
# The `send --input` JSON Lines fields, all read as text: an object body or
# application_properties arrives as its JSON text (property types survive), a number TTL as
# its digits (seconds, as parse_duration_ms reads them).
MESSAGE_SCHEMA = ", ".join(f"`{name}` STRING" for name in sorted(INPUT_FIELDS))


@dataclass
class LoadRequest:
    sources: list[str]
    entity: str
    format: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    mapping: columns.Mapping = field(default_factory=columns.Mapping)
    master: str = "local[*]"
    spark_conf: dict[str, str] = field(default_factory=dict)
    staging_dir: str = ""
    load_id: str | None = None
    max_rejects: int | None = None
    rejects_file: str | None = None
    log_file: str | None = None  # where Spark's JVM output goes (None: the terminal)


def _local(path: str) -> str | None:
    """The local path of ``path`` (plain or ``file:``), or None for other schemes."""
    if path.startswith("file:"):
        return urlparse(path).path
    return None if "://" in path else path


def guess_format(sources: list[str]) -> str:
    """The Spark format from the first source's name (or the files in a folder)."""
    first = sources[0]
    local = _local(first)
    name = first
    if local is not None and os.path.isdir(local):
        inside = sorted(n for n in os.listdir(local) if not n.startswith(("_", ".")))
        name = inside[0] if inside else ""
    for suffix, fmt in FORMATS_BY_SUFFIX.items():
        if name.endswith(suffix):
            return fmt
    raise BadRequest(f"cannot tell the format of {first!r} from its name: give --format")


def check_sources(sources: list[str]) -> None:
    for source in sources:
        local = _local(source)
        if local is not None and not any(ch in local for ch in "*?[") and not os.path.exists(local):
            raise BadRequest(f"source {source!r} does not exist")


def rules_for(client: Client, entity: str, now_ms: int) -> Rules:
    """The target entity's rules (daemon/README.md §1, §9.3, §13.1, §14) from its description."""
    parsed = parse_entity_path(entity)
    if parsed.subqueue or parsed.subscription is not None:
        raise InvalidOperation(f"{entity!r}: spark-load loads queues, not sub-queues")
    info = client.queue_get(parsed.entity)
    return Rules(
        partitions=int(info["partition_count"]),
        requires_session=bool(info["requires_session"]),
        duplicate_detection=bool(info["requires_duplicate_detection"]),
        default_ttl_ms=parse_duration_ms(info["default_message_time_to_live"]),
        max_message_bytes=int(info["max_message_size_in_kilobytes"]) * 1024,
        now_ms=now_ms,
    )


def message_lines(req: LoadRequest, fmt: str, sample: int = 1000) -> bool:
    """Whether the source is JSON Lines in the `send --input` format, mapped by name.

    Such a source is read with :data:`MESSAGE_SCHEMA` instead of Spark's schema inference,
    which would read all of it twice. The first ``sample`` lines of the first file decide:
    every object there uses message field names only.
    """
    default = not any(req.mapping.columns.values()) and not req.mapping.property_columns
    if fmt != "json" or req.options or not default or req.mapping.all_other_columns_as_properties:
        return False
    first = _local(req.sources[0])
    if first is None or not os.path.isfile(first):
        return False
    with open(first, "rb") as fh:
        for _, line in zip(range(sample), fh, strict=False):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                return False
            if not isinstance(obj, dict) or not set(obj) <= INPUT_FIELDS:
                return False
    return True


def line_sources(req: LoadRequest, fmt: str, rules: Rules) -> list[tuple[str, int]] | None:
    """The files and sizes Python tasks read themselves (:func:`line_splits`) when every
    source is a local JSON Lines file in the `send --input` format and the queue does not
    detect duplicates (which needs the whole input ordered by MessageId: Spark's window);
    None: Spark reads the sources."""
    if rules.duplicate_detection or not message_lines(req, fmt):
        return None
    sizes: list[tuple[str, int]] = []
    for source in req.sources:
        path = _local(source)
        if path is None or not path.endswith(LINES_SUFFIXES) or not os.path.isfile(path):
            return None
        sizes.append((path, os.path.getsize(path)))
    return sizes


def line_splits(sizes: list[tuple[str, int]], parallelism: int) -> list[tuple[str, int, int]]:
    """The byte ranges ``(path, start, end)`` of the files the tasks read
    (:func:`sbctl.spark.stage.stage_lines`): at least ``parallelism`` ranges overall, at
    most 128 MB each (and at least 1 MB)."""
    total = sum(size for _, size in sizes)
    step = max(1024 * 1024, min(SPLIT_BYTES, -(-total // max(1, parallelism))))
    return [
        (path, start, min(size, start + step))
        for path, size in sizes
        for start in range(0, size, step)
    ]


def _read(spark: Any, req: LoadRequest, fmt: str) -> Any:
    options = {**DEFAULT_OPTIONS.get(fmt, {}), **req.options}
    if fmt == "csv" and any(s.endswith(".tsv") for s in req.sources):
        options.setdefault("sep", "\t")
    try:
        reader = spark.read.format(fmt).options(**options)
        if message_lines(req, fmt):
            reader = reader.schema(MESSAGE_SCHEMA)
        return reader.load(req.sources)
    except Exception as exc:
        text = str(exc)
        if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text:
            raise BadRequest(f"--format {fmt!r} is not a format Spark can read") from None
        if "PATH_NOT_FOUND" in text:
            raise BadRequest(f"a source does not exist: {session.first_line(exc)}") from None
        raise BadRequest(f"Spark could not read the source: {session.first_line(exc)}") from None


def plan(source: Any, req: LoadRequest, rules: Rules) -> Any:
    """The DataFrame of :class:`~sbctl.spark.stage.Row` s, one per source row, in order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    cols, keys = columns.transport(source, req.mapping)
    none = F.lit(None).cast("string")
    sid, pk, mid = (keys.get(k, none) for k in ("session_id", "partition_key", "message_id"))
    # daemon/README.md §0.1.4: SessionId, else PartitionKey, else MessageId with duplicate
    # detection.
    key = F.coalesce(sid, pk, mid) if rules.duplicate_detection else F.coalesce(sid, pk)
    ordinal = F.col("_ord")
    if rules.partitions == 1:
        pid = F.lit(0)
    else:
        pid = F.when(key.isNotNull(), F.pmod(F.xxhash64(key), F.lit(rules.partitions)))
        pid = pid.otherwise(F.pmod(ordinal, F.lit(rules.partitions)))  # round-robin
    rows = source.withColumn("_ord", F.monotonically_increasing_id())
    staged = rows.select(ordinal.alias("o"), pid.cast("int").alias("p"), *cols)
    if not rules.duplicate_detection or "message_id" not in keys:
        return staged
    # daemon/README.md §8.3: the earliest copy in the input wins, as the first send would; on
    # partitioned
    # entities the key is MessageId plus the partition key.
    by = [mid] + ([F.coalesce(sid, pk)] if rules.partitions > 1 else [])
    window = Window.partitionBy(*by).orderBy(ordinal)
    later = (
        rows.where(mid.isNotNull())
        .select(ordinal.alias("_dup"), F.row_number().over(window).alias("_n"))
        .where("_n > 1")
        .select("_dup")
    )
    # A broadcast join streams the big side in its order, so the input order survives.
    marked = staged.join(F.broadcast(later), staged.o == later._dup, "left")
    return marked.select(*[c for c in staged.columns], F.col("_dup").isNotNull().alias("d"))


def run(
    client: Client,
    req: LoadRequest,
    report: session.Progress | None = None,
    spark: Any = None,
) -> dict[str, Any]:
    """Load ``req``; returns the summary (``rows_read``, ``messages_loaded``, ...).

    ``spark``: an existing SparkSession to use (and leave running); by default one is
    started for this load and stopped after it.
    """
    started = time.monotonic()
    check_sources(req.sources)
    fmt = req.format or guess_format(req.sources)
    entity = parse_entity_path(req.entity).entity
    now_ms = time.time_ns() // 1_000_000
    rules = rules_for(client, req.entity, now_ms)
    load_id = req.load_id or uuid.uuid4().hex
    if req.load_id is not None:
        done = client.load_status(entity, load_id)
        if done.get("state") == "committed":
            return _summary(load_id, started, rules, 0, 0, 0, 0, None, already=True)
    staging = _local(req.staging_dir)
    if staging is None:
        raise BadRequest(
            f"--staging-dir {req.staging_dir!r}: the daemon reads staged files from a local "
            "(or mounted) path; give a plain path or file:/..."
        )
    work = layout.load_work_dir(staging, uuid.uuid4().hex[:12])
    work.mkdir(parents=True, mode=0o700)
    sizes = line_sources(req, fmt, rules)
    own = spark is None
    if own:
        log = Path(req.log_file) if req.log_file else None
        # Python reads the files itself (line_splits): the JVM only schedules the tasks.
        light = sizes is not None
        spark = session.start(req.master, req.spark_conf, "sbctl spark-load", log, light=light)
    try:
        target = Target(str(work), rules)
        sc = spark.sparkContext
        splits = None if sizes is None else line_splits(sizes, sc.defaultParallelism)
        if splits is not None:
            job = sc.parallelize(splits, len(splits)).mapPartitionsWithIndex(
                functools.partial(stage_lines, target=target)
            )
        else:
            source = _read(spark, req, fmt)
            staged = plan(source, req, rules)
            with warnings.catch_warnings():
                # PySpark 4 warns that toJSON will return a DataFrame some day; the RDD of
                # JSON text is the fastest way to hand rows to Python tasks.
                warnings.simplefilter("ignore", UserWarning)
                lines = staged.toJSON()
            # The tasks import only sbctl.spark.stage (and the codec): what executors need.
            job = lines.mapPartitionsWithIndex(functools.partial(stage_rows, target=target))
        with session.watching(spark, report, "staging record batches"):
            out = job.collect()
        files = sorted((r[1], r[2]) for r in out if r[0] == "file")
        tasks = [r for r in out if r[0] == "task"]
        rows = sum(t[1] for t in tasks)
        rejected = sum(t[3] for t in tasks)
        duplicates = sum(t[4] for t in tasks)
        rejects_path = None
        if rejected:
            rejects_path = Path(req.rejects_file or layout.rejects_file(staging, load_id))
            folder = layout.task_rejects_dir(work)
            if splits is not None:
                _join_rejects(folder, rejects_path)
            else:
                with session.watching(spark, None, "writing the rejects file"):
                    _write_rejects(spark, source, folder, rejects_path)
        if req.max_rejects is not None and rejected > req.max_rejects:
            raise QuotaExceeded(
                f"{rejected} rows were rejected, more than --max-rejects {req.max_rejects}: "
                f"nothing was loaded (reasons in {rejects_path})"
            )
        result = client.load_adopt(entity, load_id, files) if files else {"messages": 0}
        return _summary(
            load_id,
            started,
            rules,
            rows,
            int(result.get("messages", 0)),
            duplicates,
            rejected,
            rejects_path,
            already=result.get("adopted") is False,
        )
    finally:
        if own:
            session.stop(spark)
        shutil.rmtree(work, ignore_errors=True)


def _join_rejects(folder: Path, path: Path) -> None:
    """The tasks' rejects files (whole lines with reasons), in task order: input order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as out:
        for part in sorted(folder.iterdir()):
            with part.open("rb") as fh:
                shutil.copyfileobj(fh, out)


def _write_rejects(spark: Any, source: Any, folder: Path, path: Path) -> None:
    """Every rejected row as ``{"row": <the source row>, "reason": ...}``, in input order."""
    from pyspark.sql import functions as F

    reasons = spark.read.schema("o BIGINT, reason STRING").json(str(folder))
    rows = source.withColumn("_ord", F.monotonically_increasing_id())
    original = F.to_json(F.struct(*[F.col(columns._q(c)) for c in source.columns]))
    joined = (
        rows.join(F.broadcast(reasons), rows._ord == reasons.o)
        .select("o", original.alias("row"), "reason")
        .orderBy("o")
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for r in joined.toLocalIterator():
            fh.write(
                f'{{"row": {r["row"]}, "reason": {json.dumps(r["reason"], ensure_ascii=False)}}}\n'
            )


def _summary(
    load_id: str,
    started: float,
    rules: Rules,
    rows: int,
    loaded: int,
    duplicates: int,
    rejected: int,
    rejects: Path | None,
    *,
    already: bool,
) -> dict[str, Any]:
    return {
        "load_id": load_id,
        "rows_read": rows,
        "messages_loaded": 0 if already else loaded,
        "duplicates_dropped": duplicates,
        "rejected": rejected,
        "partitions": rules.partitions,
        "seconds": round(time.monotonic() - started, 3),
        "already_loaded": already,
        "rejects_file": str(rejects) if rejects else None,
    }
