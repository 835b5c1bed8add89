"""What every command shares: the typer app factory, the global options, the client.

Imports here stay cheap (typer and the standard library): the client, the path rules and
the duration parser are imported inside the helpers that need them, so ``sbctl --help``
loads none of them (DESIGN §6, STYLE 6).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from typer.core import TyperGroup

from sbctl.errors import BadRequest

if TYPE_CHECKING:
    from sbctl.client import Client
    from sbctl.codec import PropertyValue

Output = Literal["table", "json"]

# The client's default (sbctl.client.DEFAULT_NAMESPACE), repeated so that help can show it
# without importing the client; tests/unit/test_cli_parsing.py keeps the two equal.
DEFAULT_NAMESPACE = "sbemulatorns"

DataDirOption = Annotated[
    str | None,
    typer.Option(
        "--data-dir",
        envvar="SBCTL_DATA_DIR",
        metavar="DIR",
        show_default=False,
        help="Daemon data directory (default: $XDG_DATA_HOME/sbctl); also locates the "
        "default socket.",
    ),
]
SocketOption = Annotated[
    str | None,
    typer.Option(
        "--socket",
        envvar="SBCTL_SOCKET",
        metavar="PATH",
        show_default=False,
        help="Daemon Unix socket (default: sbctld.sock in the data directory).",
    ),
]
# A command's own --data-dir/--socket (daemon start|stop|status): no environment variables
# here, so that an explicit global option is never overridden by the environment.
CommandDataDirOption = Annotated[
    str | None,
    typer.Option(
        "--data-dir",
        metavar="DIR",
        show_default=False,
        help="Daemon data directory (overrides the global --data-dir and SBCTL_DATA_DIR).",
    ),
]
CommandSocketOption = Annotated[
    str | None,
    typer.Option(
        "--socket",
        metavar="PATH",
        show_default=False,
        help="Daemon Unix socket (overrides the global --socket and SBCTL_SOCKET).",
    ),
]
EntityArgument = Annotated[
    str,
    typer.Argument(
        metavar="ENTITY",
        show_default=False,
        help="Entity path: a queue (orders), a subscription (events/subscriptions/audit) "
        "or a dead-letter queue (orders/$deadletterqueue).",
    ),
]
PropertyOption = Annotated[
    list[str] | None,
    typer.Option(
        "-p",
        "--property",
        metavar="KEY=VALUE",
        show_default=False,
        help="Application property (repeatable); JSON scalars keep their type (n=5, "
        'ok=true, s="5"), anything else is a string.',
    ),
]


@dataclass(frozen=True)
class Globals:
    """The global options, given before the command (``sbctl -o json -n NS queue list``)."""

    namespace: str = DEFAULT_NAMESPACE
    output: Output = "table"
    socket: str | None = None
    data_dir: str | None = None
    retry_total: int = 3  # the client's retries of throttled (transient) requests


def new_app(help: str | None = None, *, cls: type[TyperGroup] | None = None) -> typer.Typer:
    """A typer app or command group with sbctl's settings.

    Plain help (no rich), no typer completion installer (``completions/`` holds generated
    scripts), no pretty tracebacks (:mod:`sbctl.cli.app` reports every error in one line).
    A group run without a command prints its help.
    """
    settings: dict[str, Any] = {"help": help} if help is not None else {}
    group = typer.Typer(
        cls=cls,
        invoke_without_command=True,
        add_completion=False,
        rich_markup_mode=None,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
        **settings,
    )
    if help is not None:
        group.callback()(show_help_without_command)
    return group


def show_help_without_command(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)


def state(ctx: typer.Context) -> Globals:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Globals) else Globals()


def daemon_paths(
    g: Globals, data_dir: str | None = None, socket: str | None = None
) -> tuple[Path, Path]:
    """The data directory and socket: a command's own flags win over the global ones."""
    from sbctl import paths

    where = paths.resolve_data_dir(data_dir or g.data_dir)
    return where, paths.resolve_socket(socket or g.socket, where)


def connect(ctx: typer.Context) -> Client:
    """A client for the global namespace and socket (connects on first use)."""
    from sbctl.client import Client

    g = state(ctx)
    _, socket = daemon_paths(g)
    return Client(socket, namespace=g.namespace, retry_total=g.retry_total)


def duration_ms(value: str | None, flag: str) -> int | None:
    """A duration flag (``PT1M``, ``30s``) in milliseconds; the error names the flag."""
    if value is None:
        return None
    from sbctl.durations import parse_duration_ms

    try:
        return parse_duration_ms(value)
    except BadRequest as err:
        raise BadRequest(f"{flag}: {err.message}") from None


def instant_ms(value: str | None, flag: str, now_ms: int) -> int | None:
    """A time flag (``2026-11-21T10:00:00Z``, ``+5m``, ``now``) in ms since the epoch."""
    if value is None:
        return None
    from sbctl.durations import parse_instant_ms

    try:
        return parse_instant_ms(value, now_ms)
    except BadRequest as err:
        raise BadRequest(f"{flag}: {err.message}") from None


def properties(items: list[str] | None) -> dict[str, PropertyValue]:
    """``-p k=v`` flags as a dict; a later flag for the same key wins."""
    from sbctl.messages import parse_property

    return dict(parse_property(item) for item in items or ())
