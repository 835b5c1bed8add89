"""``sbctl fault add|list|clear``: injected partition-store faults (test tooling, beyond Azure).

A fault makes stores of the global namespace (``-n/--namespace``) unavailable, or slow:
every store of the namespace, every store of one queue or topic (``--entity``), or some of
its partitions (``--partition``, repeatable). The entities then behave as says a
partitioned entity does during a partial outage (README "Fault injection and partition
availability"). Faults live in the daemon's memory: a daemon restart clears them.
"""

from typing import Annotated, Any, Literal

import typer

from sbctl.cli import options, render

group = options.new_app(
    "Make partition stores unavailable or slow, list and clear those faults (test tooling)."
)

LIST_COLUMNS = ("id", "namespace", "entity", "partitions", "kind", "latency", "created_at_utc")

AllOption = Annotated[
    bool, typer.Option("--all", help="Every namespace's faults, not only those of -n.")
]


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="fault")


@group.command()
def add(
    ctx: typer.Context,
    entity: Annotated[
        str | None,
        typer.Option(
            "--entity",
            metavar="NAME",
            show_default=False,
            help="A queue or topic (its subscriptions live in its stores). Default: every "
            "store of the namespace, including entities created later.",
        ),
    ] = None,
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition",
            metavar="P",
            min=0,
            show_default=False,
            help="Only this partition of --entity (repeatable; 0-15 on a partitioned entity).",
        ),
    ] = None,
    kind: Annotated[
        Literal["unavailable", "slow"],
        typer.Option(
            "--kind",
            help="unavailable: operations on the store fail with ServiceCommunicationProblem; "
            "slow: they are answered --latency late.",
        ),
    ] = "unavailable",
    latency: Annotated[
        str | None,
        typer.Option(
            "--latency",
            metavar="DUR",
            show_default=False,
            help="How late a slow store answers (500ms, 2s, PT1M; at most 1h). --kind slow only.",
        ),
    ] = None,
) -> None:
    """Make partition stores unavailable or slow until `sbctl fault clear`; prints the
    fault and its id."""
    if partition and entity is None:
        ctx.fail("--partition needs --entity (without it the fault covers the whole namespace)")
    if kind == "slow" and latency is None:
        ctx.fail("--kind slow needs --latency")
    if kind != "slow" and latency is not None:
        ctx.fail("--latency goes with --kind slow")
    g = options.state(ctx)
    latency_ms = options.duration_ms(latency, "--latency")
    with options.connect(ctx) as sb:
        result = sb.fault_add(entity, partition or (), kind=kind, latency_ms=latency_ms)
    render.emit(g.output, result, render.record)


@group.command("list")
def list_(ctx: typer.Context, all_: AllOption = False) -> None:
    """List the faults of the namespace (of every namespace with --all), oldest first."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.fault_list(all_namespaces=all_)
    render.emit(g.output, result, lambda items: render.rows(LIST_COLUMNS)(_rows(items)))


@group.command()
def clear(
    ctx: typer.Context,
    ids: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[ID]...",
            show_default=False,
            help="Faults to clear, by id (f1). Default: every fault of the namespace.",
        ),
    ] = None,
    all_: AllOption = False,
) -> None:
    """Clear faults: the stores answer again, with everything they held."""
    if ids and all_:
        ctx.fail("give fault ids or --all, not both")
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.fault_clear(ids or (), all_namespaces=all_)
    render.emit(g.output, result, _cleared)


def _rows(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Table rows: a fault without an entity or partitions covers all of them."""
    return [
        {
            **item,
            "entity": item["entity"] or "(every entity)",
            "partitions": ", ".join(map(str, item["partitions"] or [])) or "all",
        }
        for item in items
    ]


def _cleared(result: dict[str, Any]) -> str:
    ids = [f["id"] for f in result["cleared"]]
    if not ids:
        return "no faults to clear"
    return f"cleared {len(ids)} fault{'s' if len(ids) != 1 else ''}: {', '.join(ids)}"
