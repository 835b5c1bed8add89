"""``sbctl top``: a full-screen live view of namespaces and entities (:mod:`sbctl.top`).

``--once`` prints one snapshot (a table, or JSON with ``-o json``) for scripts; its rates
come from two samples ``--interval`` apart.
"""

import shutil
import sys
import time
from typing import Annotated

import typer

from sbctl.cli import options, render


def register(app: typer.Typer) -> None:
    app.command(name="top")(top)


def top(
    ctx: typer.Context,
    once: Annotated[
        bool,
        typer.Option("--once", help="Print one snapshot (table, or JSON with -o json) and exit."),
    ] = False,
    interval: Annotated[
        float,
        typer.Option(
            "--interval",
            metavar="SECONDS",
            min=0.1,
            max=1.0,
            help="Refresh period; with --once, the time between the two samples its rates "
            "come from.",
        ),
    ] = 1.0,
    sort: Annotated[
        str,
        typer.Option("--sort", metavar="COLUMN", help="Sort entities by this column first."),
    ] = "name",
    reverse: Annotated[bool, typer.Option("--reverse", help="Sort descending.")] = False,
    name_filter: Annotated[
        str,
        typer.Option("--filter", metavar="TEXT", help="Only entities whose name contains TEXT."),
    ] = "",
) -> None:
    """Watch namespaces and entities live: counts, rates, credits, faults, pairing.

    Keys: q quit, arrows select, Enter open an entity (partitions and last messages),
    Tab/n and p switch namespace, s/S sort column, r reverse, / filter, Esc clear.
    Watching costs the namespaces no credits.
    """
    from sbctl.core.errors import BadRequest
    from sbctl.top import model, view

    if sort not in model.SORT_KEYS:
        raise BadRequest(f"--sort: unknown column {sort!r}; one of {', '.join(model.SORT_KEYS)}")
    g = options.state(ctx)
    with options.connect(ctx) as client:
        if not once:
            if not (sys.stdin.isatty() and sys.stdout.isatty()):
                raise BadRequest("the live view needs a terminal; use --once in scripts")
            from sbctl.top import live

            live.run(client, g.namespace, interval, sort, reverse, name_filter)
            return
        sampler = model.Sampler(client)
        sampler.sample()
        time.sleep(interval)
        sample = sampler.sample()
        if g.namespace not in sample.overviews:
            from sbctl.core.errors import MessagingEntityNotFound

            raise MessagingEntityNotFound(f"namespace {g.namespace!r} does not exist")
        snap = model.snapshot(sample, sampler.previous, g.namespace)
        snap["entities"] = model.sort_rows(
            model.filter_rows(snap["entities"], name_filter), sort, reverse
        )
        state = view.ViewState(
            namespace=g.namespace, sort_key=sort, reverse=reverse, filter=name_filter
        )
        render.emit(
            g.output,
            snap,
            lambda s: view.main_screen(
                sample.status,
                interval,
                s["namespaces"],
                s["entities"],
                sample.overviews[g.namespace],
                state,
                live=False,
                width=shutil.get_terminal_size((80, 24)).columns,
            ),
        )
