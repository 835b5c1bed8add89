"""``sbctl namespace create|list|show|update|delete|metrics|set-key`` ( names, §15 tiers,
§20 throttling), ``sbctl namespace pair|unpair|pair-status`` ( paired namespaces)
and ``sbctl credits``."""

from typing import Annotated, Literal

import typer

from sbctl.cli import options, render
from sbctl.cli import watch as live

group = options.new_app("Create, list, show, update and delete namespaces.")

NameArgument = Annotated[
    str,
    typer.Argument(
        metavar="NAME",
        show_default=False,
        help="Namespace name: 6-50 letters, digits and '-', starting with a letter.",
    ),
]
NsArgument = Annotated[
    str | None,
    typer.Argument(metavar="[NS]", show_default=False, help="Namespace (default: the global -n)."),
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
    name: NsArgument = None,
    watch: WatchOption = False,
) -> None:
    """Show a namespace's throttling credits: per second, left in this period, time to
    the next period, consumption by kind, throttled requests."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        ns = name or g.namespace
        if watch:
            live.run(g.output, lambda: sb.namespace_credits(ns), render.credits)
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
            live.run(g.output, lambda: sb.namespace_metrics(name), render.metrics)
            return
        result = sb.namespace_metrics(name)
    render.emit(g.output, result, render.metrics)


@group.command("list")
def list_(ctx: typer.Context) -> None:
    """List the namespaces."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = render.by_name(sb.namespace_list())
    render.emit(g.output, result, render.rows(LIST_COLUMNS))


@group.command()
def show(ctx: typer.Context, name: NameArgument) -> None:
    """Show a namespace's properties."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_get(name)
    render.emit(g.output, result, render.record)


@group.command("connection-string")
def connection_string(
    ctx: typer.Context,
    name: NsArgument = None,
) -> None:
    """Print the connection string an Azure SDK uses, unchanged, to reach a namespace
    over AMQP (each namespace has its own port)."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        info = sb.amqp_endpoint(name or g.namespace)
    text = (
        f"Endpoint=sb://localhost:{info['port']};"
        f"SharedAccessKeyName={info['key_name']};SharedAccessKey={info['key']};"
        "UseDevelopmentEmulator=true;"
    )
    render.emit(g.output, {"connection_string": text}, lambda r: r["connection_string"])


@group.command("set-key")
def set_key(
    ctx: typer.Context,
    name: NsArgument = None,
    key_name: Annotated[
        str,
        typer.Option(
            "--key-name",
            metavar="NAME",
            help="The key's name: 1-256 letters, digits, periods, hyphens or underscores.",
        ),
    ] = "RootManageSharedAccessKey",
    key: Annotated[
        str | None,
        typer.Option("--key", metavar="KEY", show_default=False, help="The new key."),
    ] = None,
    generate: Annotated[
        bool,
        typer.Option("--generate", help="Generate a random key (32 bytes, base64), like Azure."),
    ] = False,
) -> None:
    """Set the SAS key a namespace's tokens are signed with (AMQP and HTTP), at once and
    across restarts: tokens signed with the old key are refused from now on."""
    if (key is None) == (not generate):
        ctx.fail("give exactly one of --key or --generate")
    if generate:
        import base64
        import secrets

        key = base64.b64encode(secrets.token_bytes(32)).decode()
    assert key is not None
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_set_key(name or g.namespace, key_name, key)
    render.emit(g.output, result, render.record)


@group.command("sas-token")
def sas_token(
    ctx: typer.Context,
    name: NsArgument = None,
    path: Annotated[
        str,
        typer.Option(
            "--path", metavar="PATH", help="Scope the token to this entity path (default: all)."
        ),
    ] = "",
    ttl: Annotated[
        str, typer.Option("--ttl", metavar="DURATION", help="How long it is valid (1h, PT10M).")
    ] = "1h",
) -> None:
    """Print a SharedAccessSignature for the HTTP endpoint's Authorization header, e.g.
    `curl -H "Authorization: $(sbctl namespace sas-token)" http://localhost:5300/q/messages`."""
    import time

    from sbctl.core.durations import parse_duration_ms
    from sbctl.core.sas import make_token

    g = options.state(ctx)
    with options.connect(ctx) as sb:
        info = sb.amqp_endpoint(name or g.namespace)
    expiry = int(time.time() + parse_duration_ms(ttl) / 1000)
    audience = f"http://localhost:{info['port']}/{path.strip('/')}".rstrip("/")
    token = make_token(audience, info["key_name"], info["key"], expiry)
    render.emit(g.output, {"token": token, "expires_at_s": expiry}, lambda r: r["token"])


@group.command()
def delete(ctx: typer.Context, name: NameArgument) -> None:
    """Delete a namespace with all its entities and messages."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_delete(name)
    render.emit(g.output, result, lambda _: f"deleted namespace {render.escape(name)}")


# -- paired namespaces (daemon/README.md §0.3, §19; README "Paired namespaces")


@group.command()
def pair(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            metavar="PRIMARY",
            show_default=False,
            help="The namespace whose sends fail over to the secondary.",
        ),
    ],
    secondary: Annotated[
        str,
        typer.Option(
            "--secondary",
            metavar="NS",
            show_default=False,
            help="The namespace holding the backlog queues (<PRIMARY>/x-servicebus-transfer/<i>).",
        ),
    ],
    backlog_queue_count: Annotated[
        int,
        typer.Option(
            "--backlog-queue-count",
            metavar="N",
            min=1,
            max=100,
            help="Backlog queues in the secondary, created when missing.",
        ),
    ] = 10,
    failover_interval: Annotated[
        str,
        typer.Option(
            "--failover-interval",
            metavar="DUR",
            help="How long an entity's sends keep failing before they go to the backlog "
            "queues, 0-60m (0: on the first failure).",
        ),
    ] = "PT1M",
    ping_primary_interval: Annotated[
        str,
        typer.Option(
            "--ping-primary-interval",
            metavar="DUR",
            help="How often a failed-over entity is pinged on the primary, 1s-30m.",
        ),
    ] = "PT1M",
    enable_syphon: Annotated[
        bool,
        typer.Option(
            "--enable-syphon",
            help="Move backlog messages back to their entities once the primary answers.",
        ),
    ] = False,
) -> None:
    """Pair a primary namespace with a secondary for send availability."""
    g = options.state(ctx)
    failover_ms = options.duration_ms(failover_interval, "--failover-interval")
    ping_ms = options.duration_ms(ping_primary_interval, "--ping-primary-interval")
    assert failover_ms is not None and ping_ms is not None
    keys = {
        "backlog_queue_count": "backlog_queue_count",
        "failover_interval": "failover_interval",
        "ping_primary_interval": "ping_primary_interval",
    }
    with options.connect(ctx) as sb, options.naming_flags(ctx, keys):
        result = sb.namespace_pair(
            name,
            secondary,
            backlog_queue_count=backlog_queue_count,
            failover_interval_ms=failover_ms,
            ping_primary_interval_ms=ping_ms,
            enable_syphon=enable_syphon,
        )
    render.emit(g.output, result, render.pair_status)


@group.command()
def unpair(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="PRIMARY", show_default=False, help="A paired primary.")
    ],
) -> None:
    """Unpair a primary: its sends no longer fail over. The backlog queues stay."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.namespace_unpair(name)
    render.emit(
        g.output,
        result,
        lambda r: (
            f"unpaired namespace {render.escape(r['unpaired'])} from "
            f"{render.escape(r['secondary'])} ({_pending(r.get('pending'))})"
        ),
    )


@group.command("pair-status")
def pair_status(
    ctx: typer.Context,
    name: Annotated[
        str, typer.Argument(metavar="PRIMARY", show_default=False, help="A paired primary.")
    ],
    watch: WatchOption = False,
) -> None:
    """Show a pairing: state (Active, FailedOver, Faulted and why), failing entities,
    backlog queues, messages diverted and moved, pings, failovers, the last error."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        if watch:
            live.run(g.output, lambda: sb.namespace_pair_status(name), render.pair_status)
            return
        result = sb.namespace_pair_status(name)
    render.emit(g.output, result, render.pair_status)


def _pending(pending: int | None) -> str:
    if pending is None:
        return "messages left in its backlog queues: unknown"
    return f"{render.plural(pending, 'message')} left in its backlog queues"
