"""``sbctl daemon start|stop|status``: the daemon's life cycle (:mod:`sbctl.daemonctl`).

Each command takes its own ``--data-dir`` and ``--socket``, which win over the global ones,
so that ``sbctl daemon start --data-dir X`` and ``sbctl daemon stop --data-dir X`` pair up.
"""

import sys
from typing import Annotated, Any, Literal

import typer

from sbctl.cli import options, render
from sbctl.cli.options import CommandDataDirOption, CommandSocketOption

group = options.new_app("Start, stop and inspect the sbctl daemon.")


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="daemon")


@group.command()
def start(
    ctx: typer.Context,
    data_dir: CommandDataDirOption = None,
    socket: CommandSocketOption = None,
    foreground: Annotated[
        bool,
        typer.Option("--foreground", help="Run in this process, logging to stderr, until stopped."),
    ] = False,
    durability: Annotated[
        Literal["fsync", "os"],
        typer.Option(
            "--durability",
            help="fsync: acknowledge a send once it is on disk; os: once the OS has it "
            "(faster, for throwaway CI data).",
        ),
    ] = "fsync",
    default_credits_per_second: Annotated[
        int | None,
        typer.Option(
            "--default-credits-per-second",
            envvar="SBCTL_DEFAULT_CREDITS_PER_SECOND",
            metavar="N",
            min=0,
            show_default=False,
            help="Credits per second of namespaces created without --credits-per-second "
            "(default 1000, as Azure; 0: unlimited).",
        ),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Return only once the daemon is ready: its socket answers a status request "
            "and every endpoint it reports accepts connections; exit 11 with one line "
            "after --wait-timeout.",
        ),
    ] = False,
    wait_timeout: Annotated[
        float,
        typer.Option("--wait-timeout", metavar="SECONDS", min=0.1, help="Bound of --wait."),
    ] = 60.0,
    reply_buffer_mb: Annotated[
        int | None,
        typer.Option(
            "--reply-buffer-mb",
            envvar="SBCTL_REPLY_BUFFER_MB",
            metavar="MB",
            min=1,
            show_default=False,
            help="Memory a connection's unread replies may take: past half of it the daemon "
            "stops reading that connection's requests until the client reads (default 64).",
        ),
    ] = None,
    amqp_port: Annotated[
        int,
        typer.Option(
            "--amqp-port",
            envvar="SBCTL_AMQP_PORT",
            metavar="N",
            min=0,
            max=65535,
            help="TCP port of the AMQP 1.0 endpoint the Azure SDKs connect to "
            "(0: any free port; `daemon status` shows it).",
        ),
    ] = 5672,
    amqp_host: Annotated[
        str,
        typer.Option(
            "--amqp-host",
            metavar="HOST",
            help="Address the AMQP endpoint listens on. Anything but loopback exposes "
            "it to the network without TLS.",
        ),
    ] = "127.0.0.1",
    no_amqp: Annotated[
        bool, typer.Option("--no-amqp", help="Serve no AMQP endpoint (Unix socket only).")
    ] = False,
    http_port: Annotated[
        int,
        typer.Option(
            "--http-port",
            envvar="SBCTL_HTTP_PORT",
            metavar="N",
            min=0,
            max=65535,
            help="TCP port of the HTTP and HTTPS endpoint (management API, REST messages, "
            "/health); the AMQP ports answer HTTP and HTTPS too (0: any free port).",
        ),
    ] = 5300,
    http_host: Annotated[
        str,
        typer.Option(
            "--http-host",
            metavar="HOST",
            help="Address the HTTP endpoint listens on. Anything but loopback exposes it "
            "to the network.",
        ),
    ] = "127.0.0.1",
    no_http: Annotated[
        bool,
        typer.Option("--no-http", help="Serve no HTTP endpoint, on its port or the AMQP ports."),
    ] = False,
) -> None:
    """Start the daemon (in the background unless --foreground); a no-op if it runs."""

    from sbctl import daemonctl

    g = options.state(ctx)
    where, socket_path = options.daemon_paths(g, data_dir, socket)
    if wait and foreground:
        raise typer.BadParameter("cannot be used with --foreground", param_hint="'--wait'")
    if not no_amqp and amqp_host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: the AMQP endpoint on {amqp_host} is reachable from other machines "
            "and has no TLS; anyone who can reach it and knows the key can use it",
            file=sys.stderr,
        )
    if not no_http and http_host not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: the HTTP endpoint on {http_host} is reachable from other machines; "
            "anyone who can reach it and knows the key can use it",
            file=sys.stderr,
        )
    result = daemonctl.start(
        where,
        socket_path,
        foreground=foreground,
        durability=durability,
        default_credits_per_second=default_credits_per_second,
        reply_buffer_bytes=None if reply_buffer_mb is None else reply_buffer_mb * 1024 * 1024,
        amqp=(not no_amqp, amqp_host, amqp_port),
        http=(not no_http, http_host, http_port),
        explicit=_explicit(ctx),
    )
    if wait:
        from sbctl.ready import wait_ready

        info = wait_ready(socket_path, wait_timeout)
        result["ready_seconds"] = info["ready_seconds"]
        result["pid"] = info.get("pid", result.get("pid"))
    for warning in result.get("warnings") or ():
        print(f"warning: {warning}", file=sys.stderr)
    render.emit(g.output, result, lambda r: _started(r, foreground))


def _explicit(ctx: typer.Context) -> frozenset[str]:
    """The listener options given on the command line or in the environment, not defaults:
    a running daemon must match those."""
    names = ("amqp_port", "amqp_host", "no_amqp", "http_port", "http_host", "no_http")
    given = {"COMMANDLINE", "ENVIRONMENT"}
    return frozenset(
        n for n in names if getattr(ctx.get_parameter_source(n), "name", None) in given
    )


def _started(result: dict[str, Any], foreground: bool) -> str:
    pid = result.get("pid")
    if result.get("already_running"):
        return f"sbctl daemon already running (pid {pid})"
    if foreground:
        return f"sbctl daemon (pid {pid}) stopped"
    return (
        f"sbctl daemon started (pid {pid}) in {result.get('seconds', 0):.2f} s; "
        f"data in {result['data_dir']}; socket {result['socket']}"
    )


@group.command()
def stop(
    ctx: typer.Context, data_dir: CommandDataDirOption = None, socket: CommandSocketOption = None
) -> None:
    """Stop the daemon and wait until it has exited; a no-op if it is not running."""
    from sbctl import daemonctl

    g = options.state(ctx)
    result = daemonctl.stop(*options.daemon_paths(g, data_dir, socket))
    render.emit(g.output, result, _stopped)


def _stopped(result: dict[str, Any]) -> str:
    if result.get("was_running"):
        return f"sbctl daemon stopped (pid {result.get('pid')})"
    return "sbctl daemon was not running"


@group.command()
def status(
    ctx: typer.Context, data_dir: CommandDataDirOption = None, socket: CommandSocketOption = None
) -> None:
    """Show the daemon's status; exits 9 when it is not running."""
    from sbctl import daemonctl
    from sbctl.core.errors import ServiceCommunicationProblem

    g = options.state(ctx)
    where, socket_path = options.daemon_paths(g, data_dir, socket)
    info = daemonctl.status(where, socket_path)
    running = bool(info.get("running"))
    # -o json prints the status either way, so that scripts read {"running": false}.
    render.emit(g.output, info, render.record if running else None)
    if not running:
        raise ServiceCommunicationProblem(
            str(info.get("error") or f"the sbctl daemon is not running (socket {socket_path})")
        )


@group.command()
def cert(
    ctx: typer.Context, data_dir: CommandDataDirOption = None, socket: CommandSocketOption = None
) -> None:
    """Print the path of the HTTPS certificate of the daemon on the socket (made on first
    use); trust it as connection_verify=PATH (Python), NODE_EXTRA_CA_CERTS=PATH (Node),
    REQUESTS_CA_BUNDLE or SSL_CERT_FILE."""
    from sbctl import daemonctl

    g = options.state(ctx)
    cert_path = daemonctl.certificate(*options.daemon_paths(g, data_dir, socket))
    render.emit(g.output, {"certificate": str(cert_path)}, lambda r: r["certificate"])
