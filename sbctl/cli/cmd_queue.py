"""``sbctl queue create|update|list|show|delete``.

Flag names follow ``az servicebus queue``; each maps to the option key of the
azure-servicebus SDK's QueueProperties (:data:`FLAG_KEYS`). Only the flags given are sent,
so ``create`` leaves the rest to the daemon's defaults and ``update`` changes only those.
Durations are sent in milliseconds.
"""

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import typer

from sbctl.cli import options, render

group = options.new_app("Create, update, list, show and delete queues.")

# CLI parameter → queue option key. Durations are listed in DURATION_FLAGS too.
FLAG_KEYS = {
    "enable_partitioning": "enable_partitioning",
    "max_size": "max_size_in_megabytes",
    "lock_duration": "lock_duration",
    "max_delivery_count": "max_delivery_count",
    "default_message_time_to_live": "default_message_time_to_live",
    "enable_duplicate_detection": "requires_duplicate_detection",
    "duplicate_detection_history_time_window": "duplicate_detection_history_time_window",
    "enable_session": "requires_session",
    "forward_to": "forward_to",
    "forward_dead_lettered_messages_to": "forward_dead_lettered_messages_to",
    "enable_dead_lettering_on_message_expiration": "dead_lettering_on_message_expiration",
    "auto_delete_on_idle": "auto_delete_on_idle",
    "enable_batched_operations": "enable_batched_operations",
    "user_metadata": "user_metadata",
    "status": "status",
}
# Settings fixed when the entity is created: `update` does not offer them.
CREATE_ONLY = ("enable_partitioning", "enable_duplicate_detection", "enable_session")
DURATION_FLAGS = (
    "lock_duration",
    "default_message_time_to_live",
    "duplicate_detection_history_time_window",
    "auto_delete_on_idle",
)
LIST_COLUMNS = (
    "name",
    "status",
    "active_message_count",
    "dead_letter_message_count",
    "scheduled_message_count",
    "transfer_message_count",
    "transfer_dead_letter_message_count",
    "size_in_bytes",
)

QueueName = Annotated[
    str, typer.Argument(metavar="NAME", show_default=False, help="Queue name, e.g. orders.")
]


def flag_option(decls: str, help: str) -> Any:
    return typer.Option(decls, show_default=False, help=help)


def value_option(decl: str, metavar: str, help: str) -> Any:
    return typer.Option(decl, metavar=metavar, show_default=False, help=help)


EnablePartitioning = Annotated[
    bool | None,
    flag_option(
        "--enable-partitioning/--no-enable-partitioning",
        "Spread the queue over 16 partitions (fixed at creation).",
    ),
]
MaxSize = Annotated[
    int | None,
    value_option("--max-size", "MB", "Maximum size in megabytes (1024-5120 on Standard)."),
]
LockDuration = Annotated[
    str | None, value_option("--lock-duration", "DUR", "Peek-lock duration, 5s-5m (PT1M, 30s).")
]
MaxDeliveryCount = Annotated[
    int | None,
    typer.Option(
        "--max-delivery-count",
        metavar="N",
        min=1,
        show_default=False,
        help="Deliveries before a message is dead-lettered.",
    ),
]
DefaultTtl = Annotated[
    str | None,
    value_option(
        "--default-message-time-to-live", "DUR", "Time to live of messages that set none."
    ),
]
EnableDuplicateDetection = Annotated[
    bool | None,
    flag_option(
        "--enable-duplicate-detection/--no-enable-duplicate-detection",
        "Drop messages whose MessageId was seen within the window (fixed at creation).",
    ),
]
DuplicateWindow = Annotated[
    str | None,
    value_option("--duplicate-detection-history-time-window", "DUR", "Duplicate detection window."),
]
EnableSession = Annotated[
    bool | None,
    flag_option("--enable-session/--no-enable-session", "Require sessions (fixed at creation)."),
]
ForwardTo = Annotated[
    str | None, value_option("--forward-to", "QUEUE", "Forward every message to this entity.")
]
ForwardDeadLetteredTo = Annotated[
    str | None,
    value_option(
        "--forward-dead-lettered-messages-to",
        "QUEUE",
        "Forward dead-lettered messages to this entity.",
    ),
]
DeadLetterOnExpiration = Annotated[
    bool | None,
    flag_option(
        "--enable-dead-lettering-on-message-expiration/"
        "--no-enable-dead-lettering-on-message-expiration",
        "Dead-letter expired messages instead of dropping them.",
    ),
]
AutoDeleteOnIdle = Annotated[
    str | None,
    value_option("--auto-delete-on-idle", "DUR", "Delete the queue after this idle time."),
]
EnableBatchedOperations = Annotated[
    bool | None,
    flag_option(
        "--enable-batched-operations/--no-enable-batched-operations",
        "Allow server-side batched operations.",
    ),
]
UserMetadata = Annotated[
    str | None, value_option("--user-metadata", "TEXT", "Free text kept with the entity.")
]
Status = Annotated[
    Literal["Active", "Disabled", "SendDisabled", "ReceiveDisabled"] | None,
    typer.Option("--status", show_default=False, help="Entity status."),
]


def queue_options(params: dict[str, Any]) -> dict[str, Any]:
    """The queue flags the user gave, as option keys; durations in milliseconds."""
    return entity_options(params, FLAG_KEYS)


def entity_options(params: dict[str, Any], flag_keys: Mapping[str, str]) -> dict[str, Any]:
    """The flags of ``flag_keys`` (CLI parameter → option key) the user gave, as option
    keys; the :data:`DURATION_FLAGS` among them in milliseconds."""
    out: dict[str, Any] = {}
    for param, key in flag_keys.items():
        value = params.get(param)
        if value is None:
            continue
        if param in DURATION_FLAGS:
            value = options.duration_ms(value, "--" + param.replace("_", "-"))
        out[key] = value
    return out


def register(app: typer.Typer) -> None:
    app.add_typer(group, name="queue")


@group.command()
def create(
    ctx: typer.Context,
    name: QueueName,
    enable_partitioning: EnablePartitioning = None,
    max_size: MaxSize = None,
    lock_duration: LockDuration = None,
    max_delivery_count: MaxDeliveryCount = None,
    default_message_time_to_live: DefaultTtl = None,
    enable_duplicate_detection: EnableDuplicateDetection = None,
    duplicate_detection_history_time_window: DuplicateWindow = None,
    enable_session: EnableSession = None,
    forward_to: ForwardTo = None,
    forward_dead_lettered_messages_to: ForwardDeadLetteredTo = None,
    enable_dead_lettering_on_message_expiration: DeadLetterOnExpiration = None,
    auto_delete_on_idle: AutoDeleteOnIdle = None,
    enable_batched_operations: EnableBatchedOperations = None,
    user_metadata: UserMetadata = None,
    status: Status = None,
    if_not_exists: Annotated[
        bool,
        typer.Option(
            "--if-not-exists",
            help="Succeed and show the existing queue when it already exists (its settings "
            "are left as they are).",
        ),
    ] = False,
) -> None:
    """Create a queue; options not given take the daemon's defaults.

    Prints a one-line confirmation; `sbctl queue show NAME` shows every setting (-o json
    prints them all).
    """
    from sbctl.core.errors import MessagingEntityAlreadyExists

    g = options.state(ctx)
    settings = queue_options(ctx.params)
    existed = False
    with options.connect(ctx) as sb, options.naming_flags(ctx, FLAG_KEYS):
        try:
            result = sb.queue_create(name, **settings)
        except MessagingEntityAlreadyExists:
            if not if_not_exists:
                raise
            existed = True
            result = sb.queue_get(name)
    render.emit(g.output, result, lambda r: render.created("queue", r, existed))


@group.command()
def update(
    ctx: typer.Context,
    name: QueueName,
    max_size: MaxSize = None,
    lock_duration: LockDuration = None,
    max_delivery_count: MaxDeliveryCount = None,
    default_message_time_to_live: DefaultTtl = None,
    duplicate_detection_history_time_window: DuplicateWindow = None,
    forward_to: ForwardTo = None,
    forward_dead_lettered_messages_to: ForwardDeadLetteredTo = None,
    enable_dead_lettering_on_message_expiration: DeadLetterOnExpiration = None,
    auto_delete_on_idle: AutoDeleteOnIdle = None,
    enable_batched_operations: EnableBatchedOperations = None,
    user_metadata: UserMetadata = None,
    status: Status = None,
) -> None:
    """Change a queue's settings; only the options given are changed.

    Partitioning, sessions and duplicate detection are fixed when the queue is created.
    """
    g = options.state(ctx)
    settings = queue_options(ctx.params)
    if not settings:
        ctx.fail("nothing to update: give at least one option")
    with options.connect(ctx) as sb, options.naming_flags(ctx, FLAG_KEYS):
        result = sb.queue_update(name, **settings)
    render.emit(g.output, result, render.record)


@group.command("list")
def list_(ctx: typer.Context) -> None:
    """List the namespace's queues with their message counts."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = render.by_name(sb.queue_list())
    render.emit(g.output, result, render.rows(LIST_COLUMNS))


@group.command()
def show(ctx: typer.Context, name: QueueName) -> None:
    """Show a queue's settings and message counts."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.queue_get(name)
    render.emit(g.output, result, render.record)


@group.command()
def delete(ctx: typer.Context, name: QueueName) -> None:
    """Delete a queue and its messages."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.queue_delete(name)
    render.emit(g.output, result, lambda _: f"deleted queue {render.escape(name)}")
