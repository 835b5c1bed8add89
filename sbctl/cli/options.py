"""What every command shares: the typer app factory, the global options, the client.

Imports here stay cheap (typer and the standard library): the client, the path rules and
the duration parser are imported inside the helpers that need them, so ``sbctl --help``
loads none of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from typer.core import TyperGroup

from sbctl.core import layout
from sbctl.core.errors import BadRequest

if TYPE_CHECKING:
    from sbctl.client import Client
    from sbctl.core.records import PropertyValue

Output = Literal["table", "json"]

# The command line as typed (set by sbctl.cli.app.main): errors name the alias the user
# typed (--subject, not --label).
ARGV: list[str] = []

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
        help=f"Daemon Unix socket (default: {layout.SOCKET_NAME} in the data directory).",
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
        help="A queue (orders), a subscription (events/subscriptions/audit) or a "
        "dead-letter queue (orders/$deadletterqueue); not a topic.",
    ),
]
SendEntityArgument = Annotated[
    str,
    typer.Argument(
        metavar="ENTITY",
        show_default=False,
        help="Where to send: a queue (orders) or a topic (events).",
    ),
]
SessionEntityArgument = Annotated[
    str,
    typer.Argument(
        metavar="ENTITY",
        show_default=False,
        help="A session-enabled queue (orders) or subscription (events/subscriptions/audit).",
    ),
]
DeadLetterSourceArgument = Annotated[
    str,
    typer.Argument(
        metavar="ENTITY",
        show_default=False,
        help="The queue (orders) or subscription (events/subscriptions/audit) whose "
        "dead-letter queue to resubmit.",
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
    from sbctl.core import paths

    where = paths.resolve_data_dir(data_dir or g.data_dir)
    return where, paths.resolve_socket(socket or g.socket, where)


def connect(ctx: typer.Context) -> Client:
    """A client for the global namespace and socket (connects on first use)."""
    from sbctl.client import Client

    g = state(ctx)
    _, socket = daemon_paths(g)
    return Client(socket, namespace=g.namespace, retry_total=g.retry_total)


def duration_ms(value: str | None, flag: str) -> int | None:
    """A duration flag (``PT1M``, ``30s``) in milliseconds; a malformed one is a usage
    error (exit 2) naming the flag."""
    if value is None:
        return None
    from sbctl.core.durations import parse_duration_ms

    try:
        return parse_duration_ms(value)
    except BadRequest as err:
        raise typer.BadParameter(err.message, param_hint=f"'{flag}'") from None


def instant_ms(value: str | None, flag: str, now_ms: int) -> int | None:
    """A time flag (``2026-11-21T10:00:00Z``, ``+5m``, ``now``) in ms since the epoch; a
    malformed one is a usage error (exit 2) naming the flag."""
    if value is None:
        return None
    from sbctl.core.durations import parse_instant_ms

    try:
        return parse_instant_ms(value, now_ms)
    except BadRequest as err:
        raise typer.BadParameter(err.message, param_hint=f"'{flag}'") from None


def typed_flag(ctx: typer.Context, param: str) -> str:
    """The option ``param`` as the user spelled it (``--subject`` for ``--label/--subject``,
    ``--no-enable-session``), else its first long name."""
    for p in ctx.command.params:
        if p.name != param:
            continue
        names = [*p.opts, *getattr(p, "secondary_opts", ())]
        typed = {arg.partition("=")[0] for arg in ARGV}
        for name in names:
            if name in typed:
                return name
        return next((n for n in names if n.startswith("--")), names[0])
    return "--" + param.replace("_", "-")


@contextmanager
def naming_flags(ctx: typer.Context, flag_keys: Mapping[str, str]) -> Iterator[None]:
    """Errors from the daemon name an option key (``lock_duration``,
    ``requires_session``); say the flag the user typed instead (``--lock-duration``,
    ``--enable-session``). Only the flags given are named: never one the user did not type.
    """
    from sbctl.core.errors import SbctlError

    try:
        yield
    except SbctlError as err:
        message = err.message
        for param, key in flag_keys.items():
            if ctx.params.get(param) is None or key == "status":
                continue
            flag = typed_flag(ctx, param)
            message = re.sub(rf"(?<![\w-]){re.escape(key)}(?![\w-])", flag, message)
        if message == err.message:
            raise
        raise type(err)(message, retry_after=err.retry_after) from None


def properties(items: list[str] | None, flag: str | None = None) -> dict[str, PropertyValue]:
    """``-p k=v`` flags as a dict; a later flag for the same key wins. A malformed one is
    a usage error (exit 2) naming the flag (``flag``, else ``-p`` or ``--property`` as
    typed)."""
    from sbctl.core.messages import parse_property

    try:
        return dict(parse_property(item) for item in items or ())
    except BadRequest as err:
        if flag is None:
            typed = {arg.partition("=")[0] for arg in ARGV}
            flag = "--property" if "--property" in typed and "-p" not in typed else "-p"
        raise typer.BadParameter(err.message, param_hint=f"'{flag}'") from None


# -- the click command tree, as sbctl shows and parses it

VALUE_METAVARS = {"integer": "N", "integer range": "N", "float": "X", "float range": "X"}


def polish(command: Any) -> Any:
    """Adjust the click command tree typer built, once, before it parses or shows help.

    - Choices accept any case (``--sku Standard``), as az does; help lists them as written.
    - Options without a metavar show ``TEXT`` or ``N``, not ``<str>`` or ``<int range>``.
    - Usage lines show arguments as ``ENTITY``, ``[NS]`` and ``TOKEN...``, not ``{ENTITY}``.
    """
    for param in getattr(command, "params", ()):
        kind = param.type
        if hasattr(kind, "case_sensitive") and hasattr(kind, "choices"):
            kind.case_sensitive = False
            if param.param_type_name == "option" and param.metavar is None:
                param.metavar = "<" + "|".join(str(c) for c in kind.choices) + ">"
        if param.param_type_name == "option":
            takes_value = not (param.is_flag or getattr(param, "count", False))
            if takes_value and param.metavar is None:
                param.metavar = VALUE_METAVARS.get(getattr(kind, "name", ""), "TEXT")
        else:
            param.make_metavar = _argument_metavar(param)
    for child in (getattr(command, "commands", None) or {}).values():
        polish(child)
    return command


def _argument_metavar(param: Any) -> Any:
    def make_metavar(ctx: Any = None, *, usage: bool = False) -> str:
        name = param.metavar or (param.name or "").upper()
        if name.startswith("["):
            return name
        if param.nargs != 1 and not name.endswith("..."):
            name += "..."
        return name if param.required or not usage else f"[{name}]"

    return make_metavar
