"""``sbctl spark-load`` and ``sbctl spark-export``: bulk data through PySpark (:mod:`sbctl.spark`).

PySpark is imported only when one of these commands runs (never by ``sbctl --help``), and
a missing pyspark is one line telling how to install the ``spark`` extra.
"""

import sys
from typing import Annotated, Any

import typer

from sbctl.cli import options, render
from sbctl.core import layout

MASTER_HELP = "Spark master URL (local[*]: every core of this machine)."


def register(app: typer.Typer) -> None:
    app.command("spark-load")(spark_load)
    app.command("spark-export")(spark_export)


def _column(flag: str, what: str) -> Any:
    return typer.Option(flag, metavar="COL", show_default=False, help=f"Column holding {what}.")


def _pairs(flag: str, help: str) -> Any:
    return typer.Option(flag, metavar="K=V", show_default=False, help=help)


def spark_load(
    ctx: typer.Context,
    sources: Annotated[
        list[str],
        typer.Argument(
            metavar="SOURCE...",
            show_default=False,
            help="Files, folders or globs Spark reads (local paths or any Hadoop URL).",
        ),
    ],
    entity: Annotated[
        str, typer.Option("--entity", metavar="QUEUE", show_default=False, help="Target queue.")
    ],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="FMT",
            show_default=False,
            help="Any format Spark reads: json, csv, parquet, orc, text, ... (default: from "
            "the file name).",
        ),
    ] = None,
    option: Annotated[
        list[str] | None, _pairs("--option", "Reader option (repeatable), e.g. header=true.")
    ] = None,
    body_column: Annotated[str | None, _column("--body-column", "the body")] = None,
    message_id_column: Annotated[str | None, _column("--message-id-column", "MessageId")] = None,
    session_id_column: Annotated[str | None, _column("--session-id-column", "SessionId")] = None,
    partition_key_column: Annotated[
        str | None, _column("--partition-key-column", "PartitionKey")
    ] = None,
    correlation_id_column: Annotated[
        str | None, _column("--correlation-id-column", "CorrelationId")
    ] = None,
    subject_column: Annotated[str | None, _column("--subject-column", "Subject")] = None,
    content_type_column: Annotated[
        str | None, _column("--content-type-column", "ContentType")
    ] = None,
    ttl_column: Annotated[
        str | None, _column("--ttl-column", "TimeToLive (seconds, or text like PT1M)")
    ] = None,
    scheduled_column: Annotated[
        str | None,
        _column("--scheduled-enqueue-time-column", "ScheduledEnqueueTimeUtc"),
    ] = None,
    property_columns: Annotated[
        str | None,
        typer.Option(
            "--property-columns",
            metavar="A,B,C",
            show_default=False,
            help="Columns that become application properties.",
        ),
    ] = None,
    all_other_columns: Annotated[
        bool,
        typer.Option(
            "--all-other-columns-as-properties",
            help="Every column not mapped to a message field becomes a property.",
        ),
    ] = False,
    body_format: Annotated[
        str | None,
        typer.Option(
            "--body-format",
            metavar="json|text|binary",
            show_default=False,
            help="How to read the body: json (a struct serialised as JSON), text (UTF-8) or "
            "binary (bytes, or base64 text); default: from the column type.",
        ),
    ] = None,
    master: Annotated[str, typer.Option("--master", metavar="URL", help=MASTER_HELP)] = "local[*]",
    spark_conf: Annotated[
        list[str] | None, _pairs("--spark-conf", "Spark setting (repeatable).")
    ] = None,
    staging_dir: Annotated[
        str | None,
        typer.Option(
            "--staging-dir",
            metavar="DIR",
            show_default=False,
            help="Where Spark writes staged batches for the daemon to adopt; the daemon "
            "must be able to read it (default: staging/ in the data directory).",
        ),
    ] = None,
    load_id: Annotated[
        str | None,
        typer.Option(
            "--load-id",
            metavar="ID",
            show_default=False,
            help="Name the load: a load id already adopted loads nothing (exactly once).",
        ),
    ] = None,
    max_rejects: Annotated[
        int | None,
        typer.Option(
            "--max-rejects",
            metavar="N",
            min=0,
            show_default=False,
            help="Load nothing when more than N rows are rejected.",
        ),
    ] = None,
    rejects_file: Annotated[
        str | None,
        typer.Option(
            "--rejects-file",
            metavar="FILE",
            show_default=False,
            help="Where rejected rows and reasons go (default: rejects-<load id>.jsonl in "
            "the staging dir).",
        ),
    ] = None,
) -> None:
    """Bulk-load messages with Spark: partition-aligned, all or nothing, exactly once.

    Rows are validated, placed with Spark SQL's pmod(xxhash64(key), P) as a send would
    place them, deduplicated by MessageId when the queue detects duplicates (the earliest
    row wins), and staged as record batches that the daemon adopts atomically. Bulk loads
    are charged no throttling credits.
    """
    from sbctl.spark import require_pyspark

    require_pyspark()
    from sbctl.spark.columns import Mapping
    from sbctl.spark.load import LoadRequest, run
    from sbctl.spark.session import parse_pairs

    g = options.state(ctx)
    data_dir, _ = options.daemon_paths(g)
    mapping = Mapping(
        columns={
            "body": body_column,
            "message_id": message_id_column,
            "session_id": session_id_column,
            "partition_key": partition_key_column,
            "correlation_id": correlation_id_column,
            "subject": subject_column,
            "content_type": content_type_column,
            "time_to_live": ttl_column,
            "scheduled_enqueue_time": scheduled_column,
        },
        property_columns=tuple(c.strip() for c in (property_columns or "").split(",") if c),
        all_other_columns_as_properties=all_other_columns,
        body_format=body_format,
    )
    request = LoadRequest(
        sources=list(sources),
        entity=entity,
        format=fmt,
        options=parse_pairs(option or [], "--option"),
        mapping=mapping,
        master=master,
        spark_conf=parse_pairs(spark_conf or [], "--spark-conf"),
        staging_dir=staging_dir or str(layout.staging_dir(data_dir)),
        load_id=load_id,
        max_rejects=max_rejects,
        rejects_file=rejects_file,
        log_file=str(layout.spark_log(data_dir)),
    )
    with options.connect(ctx) as sb, render.progress(g.output, "spark-load") as report:
        summary = run(sb, request, report)
    render.emit(g.output, summary, render.record)
    rejected = summary.get("rejected") or 0
    if rejected:  # on stderr even when the load succeeded: rows were left out
        rows = "1 row was" if rejected == 1 else f"{rejected} rows were"
        sys.stderr.write(
            f"warning: {rows} rejected and not loaded; rows and reasons in "
            f"{render.escape(str(summary.get('rejects_file')))}\n"
        )


def spark_export(
    ctx: typer.Context,
    entity: options.EntityArgument,
    to: Annotated[
        str, typer.Option("--to", metavar="PATH", show_default=False, help="Output path.")
    ],
    fmt: Annotated[
        str, typer.Option("--format", metavar="FMT", help="Any format Spark writes.")
    ] = "parquet",
    master: Annotated[str, typer.Option("--master", metavar="URL", help=MASTER_HELP)] = "local[*]",
    spark_conf: Annotated[
        list[str] | None, _pairs("--spark-conf", "Spark setting (repeatable).")
    ] = None,
) -> None:
    """Write an entity's messages (with system properties) as a Spark dataset.

    spark-load reads such a dataset back with no column flags.
    """
    from sbctl.spark import require_pyspark

    require_pyspark()
    from sbctl.spark.export import run_export
    from sbctl.spark.session import parse_pairs

    g = options.state(ctx)
    data_dir, socket = options.daemon_paths(g)
    with render.progress(g.output, "spark-export") as report:
        summary = run_export(
            str(socket),
            g.namespace,
            entity,
            to,
            fmt,
            master,
            parse_pairs(spark_conf or [], "--spark-conf"),
            report,
            log=layout.spark_log(data_dir),
        )
    render.emit(g.output, summary, render.record)
