"""``sbctl session list|get-state|set-state|renew-lock``."""

from typing import Annotated, Any

import typer

from sbctl.cli import options, render
from sbctl.cli.options import SessionEntityArgument

group = options.new_app("Sessions of a session-enabled queue or subscription.")

SessionArgument = Annotated[str, typer.Argument(metavar="SESSION", help="Session id.")]


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="session")


@group.command("list")
def list_(ctx: typer.Context, entity: SessionEntityArgument) -> None:
    """Sessions with messages or state, with their counts and locks."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        sessions = sorted(sb.list_sessions(entity), key=lambda s: str(s.get("session_id")))
    columns = ("session_id", "active_message_count", "locked_until_utc", "has_state")
    render.emit(g.output, sessions, render.rows(columns))


@group.command("get-state")
def get_state(ctx: typer.Context, entity: SessionEntityArgument, session: SessionArgument) -> None:
    """Print a session's state (`session S has no state` when unset; `"state": null` in
    JSON)."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        state = sb.get_session_state(entity, session)
    text = None if state is None else state.decode(errors="replace")
    render.emit(g.output, {"session_id": session, "state": text}, _state_text)


@group.command("set-state")
def set_state(
    ctx: typer.Context,
    entity: SessionEntityArgument,
    session: SessionArgument,
    state: Annotated[
        str | None, typer.Option("--state", show_default=False, help="The state, as text.")
    ] = None,
    file: Annotated[
        str | None,
        typer.Option("--file", metavar="FILE", show_default=False, help="Read the state here."),
    ] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="Clear the state (set it to null).")
    ] = False,
) -> None:
    """Set a session's state (an opaque blob that survives restarts) or clear it."""
    if sum((state is not None, file is not None, clear)) != 1:
        ctx.fail("give exactly one of --state, --file or --clear")
    from sbctl.cli.cmd_messages import read_input

    data = None if clear else state.encode() if state is not None else read_input(str(file))
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.set_session_state(entity, session, data)
    render.emit(g.output, result, _said("cleared" if clear else "set"))


@group.command("renew-lock")
def renew_lock(
    ctx: typer.Context,
    entity: SessionEntityArgument,
    token: Annotated[
        str,
        typer.Argument(
            metavar="SESSION_LOCK_TOKEN", help="The session lock token a session receive gave."
        ),
    ],
) -> None:
    """Extend a session lock by the queue's lock duration, counted from now."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.renew_session_lock(entity, token)
    render.emit(g.output, result, lambda r: f"locked until {r['locked_until_utc']}")


def _said(verb: str) -> Any:
    return lambda r: f"{verb} the state of session {render.escape(str(r['session_id']))}"


def _state_text(r: dict[str, Any]) -> str:
    if r["state"] is None:
        return f"session {render.escape(str(r['session_id']))} has no state"
    return render.escape(r["state"])
