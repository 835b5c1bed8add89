"""The ``sbctl`` command tree and its one error boundary (console script ``sbctl``).

Every failure ends the same way: one line on stderr (``error: ...``, or a JSON object with
``-o json``) and an exit status. :class:`~sbctl.core.errors.SbctlError` exits with its
status (the table in :mod:`sbctl.cli.exit_codes`); a bad command line exits 2, as click does;
Ctrl-C exits 130. Tracebacks are shown only with ``SBCTL_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
import typer.main
from typer.core import TyperGroup

from sbctl.cli import options
from sbctl.cli.exit_codes import ExitStatus, exit_status
from sbctl.cli.options import DataDirOption, Globals, Output, SocketOption
from sbctl.core.errors import SbctlError

# The command modules, in help order; each has ``register(app)``.
COMMAND_MODULES = (
    "daemon",
    "namespace",
    "queue",
    "topic",
    "config",
    "fault",
    "clock",
    "messages",
    "lifecycle",
    "session",
    "spark",
    "bench",
    "top",
    "explorer",
    "help",
)

EXIT_INTERRUPTED = ExitStatus.INTERRUPTED


class SbctlGroup(TyperGroup):
    """The root group: errors raised below it are reported here, where ``-o`` is known."""

    def invoke(self, ctx: Any) -> Any:  # a click Context (typer vendors click)
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise  # `sbctl ... | head`: typer exits quietly
        except (SbctlError, typer.TyperException, OSError, ValueError) as exc:
            raise typer.Exit(report(exc, options.state(ctx).output)) from None


def report(exc: Exception, output: Output = "table") -> int:
    """Print ``exc`` as one line on stderr and return the exit status it maps to."""
    number = None
    status: int
    if isinstance(exc, SbctlError):
        code, message, status = exc.code, exc.message, exit_status(exc)
        number = exc.error_number
    elif isinstance(exc, typer.TyperException):  # click's usage errors
        # typer validates values with pydantic, whose messages start "Value error, ".
        message = exc.format_message().replace("Value error, ", "")
        code, status = "UsageError", exc.exit_code
        ctx = getattr(exc, "ctx", None)
        if status == ExitStatus.USAGE and ctx is not None:
            message = f"{message}{_usage_hint(ctx, message)} (see '{ctx.command_path} --help')"
    else:
        code, message, status = "GeneralError", str(exc), ExitStatus.ERROR
    from sbctl.cli import render

    render.error(code, " ".join(message.split()), output, number)
    return status


def _usage_hint(ctx: Any, message: str) -> str:
    """A hint for the usual slip behind a usage error: `sbctl send orders hello`."""
    name = getattr(ctx.command, "name", "")
    if "unexpected extra argument" in message and name in ("send", "schedule"):
        return f"; the body is an option: {ctx.command_path} ENTITY --body TEXT"
    return ""


app = options.new_app(cls=SbctlGroup)


@app.callback()
def root(
    ctx: typer.Context,
    namespace: Annotated[
        str,
        typer.Option(
            "-n",
            "--namespace",
            envvar="SBCTL_NAMESPACE",
            metavar="NAME",
            help="Namespace for queue and message commands.",
        ),
    ] = options.DEFAULT_NAMESPACE,
    output: Annotated[
        Output,
        typer.Option("-o", "--output", help="Output: tables for people, JSON (Lines) for scripts."),
    ] = "table",
    socket: SocketOption = None,
    data_dir: DataDirOption = None,
    retry_total: Annotated[
        int,
        typer.Option(
            "--retry-total",
            envvar="SBCTL_RETRY_TOTAL",
            metavar="N",
            min=0,
            max=100,
            help="Retries of transient failures (ServerBusy, timeouts, unavailable stores), "
            "with exponential back-off (SDK default 3).",
        ),
    ] = 3,
    no_retry: Annotated[
        bool, typer.Option("--no-retry", help="Do not retry: same as --retry-total 0.")
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """sbctl: a local, durable emulator of Azure Service Bus.

    Start the daemon with `sbctl daemon start`, then create queues and send and receive
    messages. Global options go before or after the command: `sbctl -o json queue list
    -n NS` is `sbctl queue list -n NS -o json`.
    """
    if version:
        from sbctl.core import __version__

        typer.echo(f"sbctl {__version__}")
        raise typer.Exit(0)
    if not namespace.strip():
        # An empty $NS in a script must not silently mean the default namespace.
        raise typer.BadParameter("must not be empty", param_hint="'-n' / '--namespace'")
    ctx.obj = Globals(namespace, output, socket, data_dir, 0 if no_retry else retry_total)
    options.show_help_without_command(ctx)


for _name in COMMAND_MODULES:
    importlib.import_module(f"sbctl.cli.cmd_{_name}").register(app)


# Global options that may also follow the command (`sbctl queue show q -o json`): they are
# moved in front of it, unless the command has an option of the same name (`daemon start
# --data-dir`). Option → (its canonical name, whether it takes a value).
MOVABLE = {
    "-o": ("--output", True),
    "--output": ("--output", True),
    "-n": ("--namespace", True),
    "--namespace": ("--namespace", True),
    "--socket": ("--socket", True),
    "--data-dir": ("--data-dir", True),
    "--retry-total": ("--retry-total", True),
    "--no-retry": ("--no-retry", False),
}


def _own_options(root: Any, args: list[str]) -> set[str]:
    """The option names of the command ``args`` invoke (its words are the leading
    non-option arguments that name subcommands)."""
    command = root
    for arg in args:
        if arg.startswith("-"):
            continue
        children = getattr(command, "commands", None) or {}
        if arg not in children:
            if command is not root:
                break
            continue  # a global option's value, like the NS of `-n NS`
        command = children[arg]
    if command is root:
        return set()
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts)}


def hoist_globals(args: list[str], root: Any = None) -> list[str]:
    """Move the :data:`MOVABLE` global options given after the command to the front."""
    own = _own_options(root, args) if root is not None else set()
    front: list[str] = []
    rest: list[str] = []
    i = 0
    seen_command = False
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        name, eq, value = arg.partition("=")
        if seen_command and name in MOVABLE and name not in own:
            canonical, takes_value = MOVABLE[name]
            if not takes_value and not eq:
                front.append(canonical)
                i += 1
                continue
            if takes_value and eq:
                front += [canonical, value]
                i += 1
                continue
            if takes_value and i + 1 < len(args):
                front += [canonical, args[i + 1]]
                i += 2
                continue
        if not arg.startswith("-"):
            seen_command = True
        rest.append(arg)
        i += 1
    return front + rest


def command_tree() -> Any:
    """The click command for :data:`app`, as sbctl parses and shows it."""
    return options.polish(typer.main.get_command(app))


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: run the command line ``argv`` and exit with its status."""
    command = command_tree()
    args = list(sys.argv[1:] if argv is None else argv)
    options.ARGV[:] = args
    try:
        status = command.main(
            args=hoist_globals(args, command),
            prog_name="sbctl",
            standalone_mode=False,
        )
    except (KeyboardInterrupt, typer.Abort):
        status = EXIT_INTERRUPTED
    except (SbctlError, typer.TyperException, OSError, ValueError) as exc:
        status = report(exc)  # before the root callback ran: `-o` is not known yet
    except Exception as exc:
        if os.environ.get("SBCTL_DEBUG"):
            raise
        status = report(
            Exception(f"internal error: {type(exc).__name__}: {exc} (SBCTL_DEBUG=1 shows more)")
        )
    sys.exit(status if isinstance(status, int) else 0)


if __name__ == "__main__":
    main()
