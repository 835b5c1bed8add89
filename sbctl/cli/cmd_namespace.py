"""``sbctl namespace create|list|show|delete`` (SPEC §14.8 names, §15 tiers)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from sbctl.cli import options, render

group = options.new_app("Create, list, show and delete namespaces.")

NameArgument = Annotated[
    str,
    typer.Argument(
        metavar="NAME",
        show_default=False,
        help="Namespace name: 6-50 letters, digits and '-', starting with a letter.",
    ),
]
LIST_COLUMNS = ("name", "sku", "premium_messaging_partitions", "capacity", "status")


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="namespace")


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
) -> None:
    """Create a namespace."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_create(name, sku, premium_messaging_partitions, capacity)
    render.emit(g.output, result, render.record)


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
