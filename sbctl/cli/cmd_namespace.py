"""``sbctl namespace create|list|show|update|delete|metrics`` (SPEC §14.8 names, §15 tiers,
§20 throttling) and ``sbctl credits``."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from sbctl.cli import options, render

group = options.new_app("Create, list, show, update and delete namespaces.")

NameArgument = Annotated[
    str,
    typer.Argument(
        metavar="NAME",
        show_default=False,
        help="Namespace name: 6-50 letters, digits and '-', starting with a letter.",
    ),
]
LIST_COLUMNS = (
    "name",
    "sku",
    "premium_messaging_partitions",
    "capacity",
    "credits_per_second",
    "status",
)
CreditsOption = Annotated[
    int | None,
    typer.Option(
        "--credits-per-second",
        metavar="N",
        min=0,
        show_default=False,
        help="Basic/Standard credits per one-second period (Azure: 1000; 0: unlimited, for "
        "load tests). Default: the daemon's --default-credits-per-second.",
    ),
]
OpsPerUnitOption = Annotated[
    int | None,
    typer.Option(
        "--ops-per-unit",
        metavar="N",
        min=1,
        show_default=False,
        help="Premium: operations per second one messaging unit carries before it "
        "throttles (emulated; default 2000).",
    ),
]
WatchOption = Annotated[
    bool, typer.Option("--watch", "-w", help="Keep the view live until Ctrl-C.")
]


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="namespace")
    app.command("credits")(credits)


def credits(
    ctx: typer.Context,
    name: Annotated[
        str | None,
        typer.Argument(
            metavar="[NS]", show_default=False, help="Namespace (default: the global -n)."
        ),
    ] = None,
    watch: WatchOption = False,
) -> None:
    """Show a namespace's throttling credits: per second, left in this period, time to
    the next period, consumption by kind, throttled requests."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        ns = name or g.namespace
        if watch:
            render.watch(g.output, lambda: sb.namespace_credits(ns), render.credits)
            return
        result = sb.namespace_credits(ns)
    render.emit(g.output, result, render.credits)


@group.command()
def create(
    ctx: typer.Context,
    name: NameArgument,
    sku: Annotated[
        Literal["basic", "standard", "premium"], typer.Option("--sku", help="Pricing tier.")
    ] = "standard",
    premium_messaging_partitions: Annotated[
        Literal[1, 2, 4],
        typer.Option("--premium-messaging-partitions", help="Partitions of a premium namespace."),
    ] = 1,
    capacity: Annotated[
        Literal[1, 2, 4, 8, 16],
        typer.Option("--capacity", help="Messaging units of a premium namespace."),
    ] = 1,
    credits_per_second: CreditsOption = None,
    ops_per_unit: OpsPerUnitOption = None,
) -> None:
    """Create a namespace."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_create(
            name, sku, premium_messaging_partitions, capacity, credits_per_second, ops_per_unit
        )
    render.emit(g.output, result, render.record)


@group.command()
def update(
    ctx: typer.Context,
    name: NameArgument,
    capacity: Annotated[
        Literal[1, 2, 4, 8, 16] | None,
        typer.Option(
            "--capacity", show_default=False, help="Scale a premium namespace's messaging units."
        ),
    ] = None,
    credits_per_second: CreditsOption = None,
    ops_per_unit: OpsPerUnitOption = None,
) -> None:
    """Change a namespace's throttling at runtime."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_update(name, credits_per_second, capacity, ops_per_unit)
    render.emit(g.output, result, render.record)


@group.command()
def metrics(ctx: typer.Context, name: NameArgument, watch: WatchOption = False) -> None:
    """Show throttled and served requests and the daemon's CPU and memory."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        if watch:
            render.watch(g.output, lambda: sb.namespace_metrics(name), render.metrics)
            return
        result = sb.namespace_metrics(name)
    render.emit(g.output, result, render.metrics)


@group.command("list")
def list_(ctx: typer.Context) -> None:
    """List the namespaces."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_list()
    render.emit(g.output, result, render.rows(LIST_COLUMNS))


@group.command()
def show(ctx: typer.Context, name: NameArgument) -> None:
    """Show a namespace's properties."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_get(name)
    render.emit(g.output, result, render.record)


@group.command()
def delete(ctx: typer.Context, name: NameArgument) -> None:
    """Delete a namespace with all its entities and messages."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_delete(name)
    render.emit(g.output, result, lambda _: f"deleted namespace {render.escape(name)}")
