"""``sbctl schedule``, ``cancel-scheduled``, ``purge`` and ``dlq resubmit``.

``schedule`` takes every flag of ``send`` (its signature is derived from send's, so the
two never drift apart) plus the required ``--at``.
"""

import inspect
from typing import Annotated, Any

import typer

from sbctl.cli import cmd_messages, options, render
from sbctl.cli.cmd_messages import SequenceNumbersArgument
from sbctl.cli.options import DeadLetterSourceArgument, EntityArgument, SendEntityArgument

dlq_group = options.new_app("Chores on dead-letter queues (beyond Azure).")


def register(app: typer.Typer) -> None:
    app.command()(schedule)
    app.command("cancel-scheduled")(cancel_scheduled)
    app.command()(purge)
    app.add_typer(dlq_group, name="dlq")


def schedule(ctx: typer.Context, at: str, **send_options: Any) -> None:
    """Schedule messages to be enqueued at --at; takes every flag of send and prints the
    sequence numbers, which cancel-scheduled accepts."""
    import time

    options.instant_ms(at, "--at", time.time_ns() // 1_000_000)  # errors name --at
    ctx.params["scheduled_enqueue_time"] = at
    cmd_messages.send(ctx, scheduled_enqueue_time=at, **send_options)


def _schedule_signature() -> inspect.Signature:
    send = inspect.signature(cmd_messages.send, eval_str=True)
    at = inspect.Parameter(
        "at",
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        annotation=Annotated[
            str,
            typer.Option(
                "--at",
                metavar="TIME",
                help="When to enqueue (2026-11-21T10:00:00Z, +5m, +PT1H).",
            ),
        ],
    )
    params = list(send.parameters.values())
    params = [p for p in params if p.name != "scheduled_enqueue_time"]
    params.insert(2, at)  # after ctx and the entity
    return send.replace(parameters=params)


schedule.__signature__ = _schedule_signature()  # type: ignore[attr-defined]


def cancel_scheduled(
    ctx: typer.Context, entity: SendEntityArgument, sequence_numbers: SequenceNumbersArgument
) -> None:
    """Cancel scheduled messages by sequence number; all or nothing."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.cancel_scheduled(entity, sequence_numbers)
    render.emit(
        g.output,
        result,
        lambda r: f"cancelled {render.plural(r['cancelled'], 'scheduled message')}",
    )


def purge(
    ctx: typer.Context,
    entity: EntityArgument,
    dlq: Annotated[
        bool, typer.Option("--dlq", help="Purge ENTITY's dead-letter queue instead.")
    ] = False,
) -> None:
    """Delete every message of ENTITY (or of its dead-letter queue), locked ones included."""
    g = options.state(ctx)
    path = f"{entity}/$deadletterqueue" if dlq else entity
    with options.connect(ctx) as sb:
        result = sb.purge(path)
    render.emit(
        g.output, result, lambda r: f"purged {render.plural(r['purged'], 'message')} from {path}"
    )


@dlq_group.command()
def resubmit(
    ctx: typer.Context,
    entity: DeadLetterSourceArgument,
    count: Annotated[
        int | None,
        typer.Option("--count", metavar="N", min=1, show_default=False, help="At most N."),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to", metavar="QUEUE", show_default=False, help="Send them here instead of ENTITY."
        ),
    ] = None,
) -> None:
    """Move dead-lettered messages back to ENTITY (or --to), without their dead-letter
    properties; each gets a new sequence number."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.dlq_resubmit(entity, count, to)
    render.emit(
        g.output,
        result,
        lambda r: f"resubmitted {render.plural(r['resubmitted'], 'message')} to {r['to']}",
    )
