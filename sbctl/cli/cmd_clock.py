"""``sbctl clock show|advance|set``: time travel for tests (daemon/README.md §31, beyond Azure).

A namespace's time is the daemon's clock plus an offset that only grows. Moving it forward
runs, before the command returns, everything that waits: scheduled messages come due, TTLs,
locks and session locks run out, duplicate-detection windows slide, idle entities are
deleted, credits refill. The offset is kept across restarts.
"""

from typing import Annotated

import typer

from sbctl.cli import options, render

group = options.new_app("Move a namespace's time forward: everything that waits follows (tests).")


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="clock")


@group.command()
def show(ctx: typer.Context) -> None:
    """Show the namespace's time and how far it is ahead of the daemon's clock.

    Example: `sbctl clock show -n orders-test`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.clock_show()
    render.emit(g.output, result, render.record)


@group.command()
def advance(
    ctx: typer.Context,
    duration: Annotated[
        str,
        typer.Argument(
            metavar="DURATION",
            show_default=False,
            help="How far: 90s, 5m, 2h, 1d, 1h30m or ISO 8601 (PT1H, P1D); positive.",
        ),
    ],
) -> None:
    """Move the namespace's time forward by DURATION; every timer up to then runs at once,
    in the order of its time.

    Scheduled messages come due (each enqueued at its own time), TTLs, locks and session
    locks run out, duplicate-detection windows slide, idle entities are deleted. The offset
    is kept across restarts.

    Example: `sbctl clock advance 1d`
    """
    by_ms = options.duration_ms(duration, "DURATION")
    if not by_ms:
        raise typer.BadParameter(
            "must be positive: the clock only moves forward", param_hint="'DURATION'"
        )
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.clock_advance(by_ms)
    render.emit(g.output, result, render.record)


@group.command("set")
def set_(
    ctx: typer.Context,
    instant: Annotated[
        str,
        typer.Argument(
            metavar="INSTANT",
            show_default=False,
            help="ISO 8601, like 2030-01-01T00:00:00Z (UTC without an offset); not before "
            "the namespace's time now.",
        ),
    ],
) -> None:
    """Move the namespace's time forward to INSTANT; every timer up to then runs at once.

    Example: `sbctl clock set 2030-01-01T00:00:00Z`
    """
    from sbctl.core.durations import format_instant, parse_absolute_instant_ms
    from sbctl.core.errors import BadRequest

    try:
        at_ms = parse_absolute_instant_ms(instant)
    except BadRequest as err:
        raise typer.BadParameter(err.message, param_hint="'INSTANT'") from None
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        now = sb.clock_show()["now_utc"]
        if format_instant(at_ms) < now:  # the daemon refuses it too (exit 5 over the API)
            raise typer.BadParameter(
                f"{instant} is before the namespace's time {now}: the clock only moves forward",
                param_hint="'INSTANT'",
            )
        result = sb.clock_set(at_ms)
    render.emit(g.output, result, render.record)
