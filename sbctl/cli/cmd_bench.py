"""``sbctl bench``: durable throughput and latency of the running daemon (:mod:`sbctl.bench`),
beside this machine's raw fdatasync and Unix-socket rates measured in the same run."""

from typing import Annotated, Any

import typer

from sbctl.cli import options, render

# Table rows, in order: (key, label, unit). -o json prints every key as is.
ROWS = (
    ("send_msgs_per_s", "send", "msgs/s"),
    ("fanout_copies", "subscription copies (as the filters predict)", "n"),
    ("fanout_copies_per_s", "subscription copies stored", "copies/s"),
    ("send_p50_ms", "send p50", "ms"),
    ("send_p99_ms", "send p99", "ms"),
    ("receive_msgs_per_s", "receive + complete", "msgs/s"),
    ("receive_p50_ms", "receive + complete p50", "ms"),
    ("receive_p99_ms", "receive + complete p99", "ms"),
    ("send_daemon_cpu_us_per_msg", "daemon CPU per sent message", "us"),
    ("send_client_cpu_us_per_msg", "clients' CPU per sent message", "us"),
    ("send_msgs_per_commit", "sent messages per group commit", "n"),
    ("receive_daemon_cpu_us_per_msg", "daemon CPU per received message", "us"),
    ("receive_client_cpu_us_per_msg", "clients' CPU per received message", "us"),
    ("receive_msgs_per_commit", "completed messages per group commit", "n"),
    ("raw_fsync_per_s", "raw append + fdatasync, 1 record/sync", "syncs/s"),
    ("raw_fsync_batch100_records_per_s", "raw append + fdatasync, 100 records/sync", "records/s"),
    ("raw_socket_rtt_per_s", "raw Unix socket round trips", "/s"),
    ("send_vs_raw_fsync", "send / raw fsync", "x"),
    ("send_vs_raw_batch100", "send / raw 100-per-sync", "x"),
    ("daemon_start_ms", "daemon start on an empty data dir", "ms"),
    ("cli_daemon_start_ms", "`sbctl daemon start` command, end to end", "ms"),
    ("fill_msgs_per_s", "fill rate (batches of 200)", "msgs/s"),
    ("idle_rss_mb", "daemon RSS when idle", "MB"),
    ("stored_rss_above_idle_mb", "daemon RSS above idle with the messages stored", "MB"),
    ("stored_bytes_per_msg", "daemon RSS above idle per stored message", "B"),
    ("file_mb", "JSON Lines file", "MB"),
    ("cli_send_b100_s", "sbctl send --input, batches of 100", "s"),
    ("cli_send_b1000_s", "sbctl send --input, batches of 1,000", "s"),
    ("spark_load_s", "sbctl spark-load (Spark's start included)", "s"),
    ("best_cli_send_msgs_per_s", "best CLI send", "msgs/s"),
    ("spark_load_msgs_per_s", "spark-load", "msgs/s"),
    ("spark_vs_best_cli_send", "spark-load / best CLI send (target >= 3 x)", "x"),
    ("restart_s", "restart after a clean stop", "s"),
    ("restart_full_scan_s", "restart after SIGKILL, no checkpoint", "s"),
    ("recovered_messages", "messages after that restart", "n"),
)
_TARGET_COLUMNS = [
    "figure",
    "value",
    "ceiling",
    "ratio",
    "target",
    "met",
    "clients + daemon CPU per msg (budget)",
]
STORED_FOR_TARGETS = 1_000_000  # enough that the daemon's fixed memory is noise per message
PARAMS = (
    "messages",
    "size",
    "batch",
    "clients",
    "partitioned",
    "topic_subscriptions",
    "workers",
    "rounds",
    "namespace",
)


def register(app: typer.Typer) -> None:
    app.command()(bench)


def bench(
    ctx: typer.Context,
    messages: Annotated[
        int, typer.Option("--messages", min=1, help="Messages to send, then receive.")
    ] = 20_000,
    size: Annotated[int, typer.Option("--size", min=0, help="Body size in bytes.")] = 1024,
    batch: Annotated[
        int, typer.Option("--batch", min=1, help="Messages per send and per receive request.")
    ] = 1,
    clients: Annotated[
        int,
        typer.Option(
            "--clients", min=1, help="Concurrent connections, each with one request in flight."
        ),
    ] = 1,
    entity: Annotated[
        str, typer.Option("--entity", help="Queue name in the throwaway namespace.")
    ] = "bench",
    partitioned: Annotated[
        bool, typer.Option("--partitioned", help="Partition the queue (16 partitions).")
    ] = False,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            min=1,
            show_default=False,
            help="Client processes the connections are spread over (default: 2 when there "
            "are several clients and CPUs, else 1).",
        ),
    ] = None,
    skip_raw: Annotated[
        bool, typer.Option("--skip-raw", help="Skip the raw fdatasync and socket ceilings.")
    ] = False,
    skip_start: Annotated[
        bool, typer.Option("--skip-start", help="Skip timing a daemon start.")
    ] = False,
    topic: Annotated[
        bool,
        typer.Option(
            "--topic",
            help="Send to a topic with --subscriptions subscriptions, each with its own SQL "
            "filter (fan-out), instead of a queue; no receive phase.",
        ),
    ] = False,
    subscriptions: Annotated[
        int, typer.Option("--subscriptions", min=1, max=2000, help="Subscriptions with --topic.")
    ] = 10,
    stored: Annotated[
        int | None,
        typer.Option(
            "--stored",
            min=1,
            show_default=False,
            help="Instead: fill a private daemon with this many messages of --size bytes and "
            "report its memory above idle and its restart times (clean, and after SIGKILL "
            "with no checkpoint).",
        ),
    ] = None,
    amqp: Annotated[
        bool,
        typer.Option(
            "--amqp",
            help="Instead: the same send and receive + complete through the AMQP endpoint "
            "and through the Unix socket, batches of --batch, with the daemon's CPU per "
            "message for each (each figure the median of 3 interleaved rounds).",
        ),
    ] = False,
    connections: Annotated[
        int,
        typer.Option(
            "--connections",
            min=0,
            help="With --amqp: also hold this many AMQP connections at once (each with a "
            "token and a link) and report the daemon's memory growth.",
        ),
    ] = 0,
    cli: Annotated[
        bool,
        typer.Option(
            "--cli",
            help="Instead: time sbctl's own commands, each run --runs times in a fresh "
            "process against the running daemon; the median wall time per command beside "
            "the 100 ms target.",
        ),
    ] = False,
    runs: Annotated[int, typer.Option("--runs", min=1, help="With --cli: runs per command.")] = 15,
    spark: Annotated[
        bool,
        typer.Option(
            "--spark",
            help="Instead: sbctl spark-load against the best sbctl send --input (batches of "
            "100 or 1,000) of one JSON Lines file of --messages lines with --size-byte "
            "bodies (--partitioned: into 16-partition queues, 1,000 partition keys), each "
            "command timed end to end; the ratio beside the 3 x target. "
            "Spark's start (~6 s) is part of the figure: use --messages 500000 or more.",
        ),
    ] = False,
    targets: Annotated[
        bool,
        typer.Option(
            "--targets",
            help="Instead: the Unix-socket performance targets (batches of 100 against the "
            "disk's 100-per-sync ceiling, 32 concurrent senders against its single-sync "
            "rate, receive + complete in batches, memory per stored message), each with its "
            "ceiling, ratio and target, and the CPU per message the clients and the daemon "
            "spent beside what the target leaves them; --messages per workload, --stored "
            "messages (default 1,000,000: 1 GB of disk for a minute) for the memory.",
        ),
    ] = False,
) -> None:
    """Benchmark the running daemon: durable send and receive-and-complete throughput and
    latency in a throwaway namespace (deleted afterwards), beside this machine's raw
    append+fdatasync and Unix-socket round-trip rates."""
    from sbctl.bench import run_bench, stored_bench

    g = options.state(ctx)
    if stored is not None and not targets:
        render.emit(g.output, stored_bench(stored, size), _table)
        return
    data_dir, socket_path = options.daemon_paths(g)
    if cli:
        from sbctl.bench_cli import cli_bench

        render.emit(g.output, cli_bench(socket_path, runs), _cli_table)
        return
    if spark:
        from sbctl.bench_spark import spark_bench

        render.emit(
            g.output,
            spark_bench(
                socket_path, data_dir, messages=messages, size=size, partitioned=partitioned
            ),
            _table,
        )
        return
    if targets:
        from sbctl.bench_targets import targets_bench, targets_table

        result = targets_bench(
            socket_path, data_dir, messages=messages, stored=stored or STORED_FOR_TARGETS
        )
        render.emit(g.output, result, lambda r: render.rows(_TARGET_COLUMNS)(targets_table(r)))
        return
    if amqp:
        from sbctl.bench_amqp import AMQP_ROWS, amqp_bench

        result = amqp_bench(
            socket_path, messages=messages, size=size, batch=batch, connections=connections
        )
        render.emit(g.output, result, lambda r: _table(r, AMQP_ROWS))
        return
    result = run_bench(
        socket_path,
        messages=messages,
        size=size,
        batch=batch,
        clients=clients,
        entity=entity,
        partitioned=partitioned,
        data_dir_for_raw=data_dir,
        skip_raw=skip_raw,
        skip_start=skip_start,
        workers=workers,
        topic=topic,
        subscriptions=subscriptions,
    )
    render.emit(g.output, result, _table)


def _number(value: Any, unit: str) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return str(value)
    if unit == "x":
        return f"{value:.2f} x"
    if unit == "ms":
        return f"{value:.3f} ms"
    if unit in ("s", "MB"):
        return f"{value:,.3f} {unit}" if unit == "s" else f"{value:,.1f} {unit}"
    if unit == "n" and isinstance(value, int):
        return f"{value:,}"
    if unit in ("us", "n", "B"):
        return f"{value:.1f}" + {"us": " µs", "B": " B"}.get(unit, "")
    return f"{value:,.0f} {unit}"


def _table(result: dict[str, Any], rows: tuple[tuple[str, str, str], ...] = ROWS) -> Any:
    shown: dict[str, Any] = {key: result[key] for key in PARAMS if key in result}
    for key, label, unit in rows:
        if key in result:
            shown[label] = _number(result[key], unit)
    return render.record(shown)


def _cli_table(result: dict[str, Any]) -> Any:
    """``bench --cli``: one row per command, then how many are over the target."""
    from rich.console import Group

    rows = [
        {
            "command": row["command"],
            "own process ms": f"{row['own_median_ms']:.1f}",
            "served ms": f"{row['served_median_ms']:.1f}",
            "served fastest": f"{row['served_min_ms']:.1f}",
            "served cpu ms": f"{row['served_cpu_ms']:.1f}",
            f"/ {result['target_ms']:.0f} ms": f"{row['vs_target']:.2f} x",
        }
        for row in result["commands"]
    ]
    cached = "cached" if result["bytecode_cached"] else "not cached: every run compiles"
    summary = (
        f"{result['over_target']} of {len(rows) - 1} commands served over "
        f"{result['target_ms']:.0f} ms (median of {result['runs']} runs each way; "
        f"bytecode {cached}; own process: SBCTL_CLI_SERVER=0)"
    )
    return Group(render.rows(list(rows[0]))(rows), "", summary)
