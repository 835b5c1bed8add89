"""``sbctl topic|subscription ...`` (create, update, list, show, delete) and ``sbctl rule ...``
(create, list, show, delete).

Flag names follow ``az servicebus topic|topic subscription|topic subscription rule``. A flag that
queues have too is :mod:`sbctl.cli.cmd_queue`'s definition, and
maps to the same option key; each maps to the azure-servicebus SDK's TopicProperties or
SubscriptionProperties key (:data:`TOPIC_KEYS`, :data:`SUBSCRIPTION_KEYS`). Only the flags
given are sent, so ``create`` leaves the rest to the daemon's defaults and ``update``
changes only those. Durations are sent in milliseconds.

A rule is one filter and an optional action: ``--filter-sql-expression``, or
correlation flags, or neither for the TrueFilter (``1=1``). Correlation property values are
typed as ``sbctl send --property`` types them, so ``n=5`` matches what ``send -p n=5`` sent.
"""

from typing import Annotated, Any, Literal

import typer

from sbctl.cli import options, render
from sbctl.cli.cmd_queue import (
    FLAG_KEYS,
    DeadLetterOnExpiration,
    DefaultTtl,
    DuplicateWindow,
    EnableDuplicateDetection,
    EnableSession,
    ForwardDeadLetteredTo,
    ForwardTo,
    LockDuration,
    MaxDeliveryCount,
    MaxSize,
    entity_options,
    flag_option,
    value_option,
)

topic_group = options.new_app("Create, update, list, show and delete topics.")
subscription_group = options.new_app(
    "Create, update, list, show and delete the subscriptions of a topic."
)
rule_group = options.new_app(
    "Create, list, show and delete the rules (filter and action) of a subscription."
)


def register(app: typer.Typer) -> None:
    app.add_typer(topic_group, name="topic")
    app.add_typer(subscription_group, name="subscription")
    app.add_typer(rule_group, name="rule")


# CLI parameter → option key; durations are cmd_queue.DURATION_FLAGS.
TOPIC_KEYS = {
    **{
        param: FLAG_KEYS[param]
        for param in (
            "enable_partitioning",
            "max_size",
            "default_message_time_to_live",
            "enable_duplicate_detection",
            "duplicate_detection_history_time_window",
            "auto_delete_on_idle",
            "status",
        )
    },
    "support_ordering": "support_ordering",
    "enable_batched_operations": "enable_batched_operations",
    "user_metadata": "user_metadata",
}
SUBSCRIPTION_KEYS = {
    **{
        param: FLAG_KEYS[param]
        for param in (
            "lock_duration",
            "max_delivery_count",
            "enable_session",
            "forward_to",
            "forward_dead_lettered_messages_to",
            "enable_dead_lettering_on_message_expiration",
            "default_message_time_to_live",
            "auto_delete_on_idle",
            "status",
        )
    },
    "dead_letter_on_filter_exceptions": "dead_lettering_on_filter_evaluation_exceptions",
    "enable_batched_operations": "enable_batched_operations",
    "user_metadata": "user_metadata",
}
# Rule correlation flags (CLI parameter) → correlation filter key, in help order.
CORRELATION_KEYS = {
    "correlation_id": "correlation_id",
    "message_id": "message_id",
    "to": "to",
    "reply_to": "reply_to",
    "label": "subject",
    "session_id": "session_id",
    "reply_to_session_id": "reply_to_session_id",
    "content_type": "content_type",
}
TOPIC_COLUMNS = (
    "name",
    "status",
    "subscription_count",
    "scheduled_message_count",
    "size_in_bytes",
)
SUBSCRIPTION_COLUMNS = (
    "name",
    "status",
    "rule_count",
    "active_message_count",
    "dead_letter_message_count",
    "transfer_message_count",
    "transfer_dead_letter_message_count",
)
RULE_COLUMNS = ("name", "filter", "action")


def _argument(metavar: str, help: str) -> Any:
    return typer.Argument(metavar=metavar, show_default=False, help=help)


TopicName = Annotated[str, _argument("NAME", "Topic name, e.g. events.")]
TopicOf = Annotated[str, _argument("TOPIC", "Topic name, e.g. events.")]
SubscriptionName = Annotated[str, _argument("NAME", "Subscription name, e.g. audit.")]
SubscriptionOf = Annotated[str, _argument("SUBSCRIPTION", "Subscription name, e.g. audit.")]
RuleName = Annotated[
    str, _argument("NAME", "Rule name, e.g. big-orders ('$Default': a new subscription's rule).")
]

# Flags whose queue definitions say "queue", or whose values differ (daemon/README.md §17.2).
TopicEnablePartitioning = Annotated[
    bool | None,
    flag_option(
        "--enable-partitioning/--no-enable-partitioning",
        "Spread the topic over 16 partitions (fixed at creation).",
    ),
]
TopicAutoDeleteOnIdle = Annotated[
    str | None,
    value_option("--auto-delete-on-idle", "DUR", "Delete the topic after this idle time."),
]
SubscriptionAutoDeleteOnIdle = Annotated[
    str | None,
    value_option("--auto-delete-on-idle", "DUR", "Delete the subscription after this idle time."),
]
TopicStatus = Annotated[
    Literal["Active", "Disabled", "SendDisabled"] | None,
    typer.Option("--status", show_default=False, help="Entity status."),
]
SubscriptionStatus = Annotated[
    Literal["Active", "Disabled", "ReceiveDisabled"] | None,
    typer.Option("--status", show_default=False, help="Entity status."),
]
SupportOrdering = Annotated[
    bool | None,
    flag_option(
        "--support-ordering/--no-support-ordering",
        "Deliver messages in the order they were sent.",
    ),
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
DeadLetterOnFilterExceptions = Annotated[
    bool | None,
    flag_option(
        "--dead-letter-on-filter-exceptions/--no-dead-letter-on-filter-exceptions",
        "Dead-letter messages whose filter fails to evaluate, instead of dropping them "
        "(default: on).",
    ),
]


def _if_not_exists(kind: str) -> Any:
    return typer.Option(
        "--if-not-exists",
        help=f"Succeed and show the existing {kind} when it already exists (its settings "
        "are left as they are).",
    )


def _text(decls: list[str], help: str) -> Any:
    return typer.Option(*decls, metavar="TEXT", show_default=False, help=help)


def _updates(ctx: typer.Context, keys: dict[str, str]) -> dict[str, Any]:
    settings = entity_options(ctx.params, keys)
    if not settings:
        ctx.fail("nothing to update: give at least one option")
    return settings


# ================================================================================= topics


@topic_group.command("create")
def topic_create(
    ctx: typer.Context,
    name: TopicName,
    enable_partitioning: TopicEnablePartitioning = None,
    max_size: MaxSize = None,
    default_message_time_to_live: DefaultTtl = None,
    enable_duplicate_detection: EnableDuplicateDetection = None,
    duplicate_detection_history_time_window: DuplicateWindow = None,
    auto_delete_on_idle: TopicAutoDeleteOnIdle = None,
    support_ordering: SupportOrdering = None,
    enable_batched_operations: EnableBatchedOperations = None,
    user_metadata: UserMetadata = None,
    status: TopicStatus = None,
    if_not_exists: Annotated[bool, _if_not_exists("topic")] = False,
) -> None:
    """Create a topic; options not given take the daemon's defaults.

    Example: `sbctl topic create events --enable-duplicate-detection`
    """
    from sbctl.core.errors import MessagingEntityAlreadyExists

    g = options.state(ctx)
    settings = entity_options(ctx.params, TOPIC_KEYS)
    existed = False
    with options.connect(ctx) as sb, options.naming_flags(ctx, TOPIC_KEYS):
        try:
            result = sb.topic_create(name, **settings)
        except MessagingEntityAlreadyExists:
            if not if_not_exists:
                raise
            existed = True
            result = sb.topic_get(name)
    render.emit(g.output, result, lambda r: render.created("topic", r, existed))


@topic_group.command("update")
def topic_update(
    ctx: typer.Context,
    name: TopicName,
    max_size: MaxSize = None,
    default_message_time_to_live: DefaultTtl = None,
    duplicate_detection_history_time_window: DuplicateWindow = None,
    auto_delete_on_idle: TopicAutoDeleteOnIdle = None,
    support_ordering: SupportOrdering = None,
    enable_batched_operations: EnableBatchedOperations = None,
    user_metadata: UserMetadata = None,
    status: TopicStatus = None,
) -> None:
    """Change a topic's settings; only the options given are changed.

    Partitioning and duplicate detection are fixed when the topic is created.

    Example: `sbctl topic update events --status SendDisabled`
    """
    g = options.state(ctx)
    settings = _updates(ctx, TOPIC_KEYS)
    with options.connect(ctx) as sb, options.naming_flags(ctx, TOPIC_KEYS):
        result = sb.topic_update(name, **settings)
    render.emit(g.output, result, render.record)


@topic_group.command("list")
def topic_list(ctx: typer.Context) -> None:
    """List the namespace's topics with their subscription counts and sizes.

    Example: `sbctl topic list -o json`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = render.by_name(sb.topic_list())
    render.emit(g.output, result, render.rows(TOPIC_COLUMNS))


@topic_group.command("show")
def topic_show(ctx: typer.Context, name: TopicName) -> None:
    """Show a topic's settings, subscription count and size.

    Example: `sbctl topic show events`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.topic_get(name)
    render.emit(g.output, result, render.record)


@topic_group.command("delete")
def topic_delete(ctx: typer.Context, name: TopicName) -> None:
    """Delete a topic with its subscriptions, rules and messages.

    Example: `sbctl topic delete events`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.topic_delete(name)
    render.emit(g.output, result, lambda _: f"deleted topic {render.escape(name)}")


# ========================================================================== subscriptions


@subscription_group.command("create")
def subscription_create(
    ctx: typer.Context,
    topic: TopicOf,
    name: SubscriptionName,
    lock_duration: LockDuration = None,
    max_delivery_count: MaxDeliveryCount = None,
    enable_session: EnableSession = None,
    forward_to: ForwardTo = None,
    forward_dead_lettered_messages_to: ForwardDeadLetteredTo = None,
    enable_dead_lettering_on_message_expiration: DeadLetterOnExpiration = None,
    dead_letter_on_filter_exceptions: DeadLetterOnFilterExceptions = None,
    default_message_time_to_live: DefaultTtl = None,
    auto_delete_on_idle: SubscriptionAutoDeleteOnIdle = None,
    enable_batched_operations: EnableBatchedOperations = None,
    user_metadata: UserMetadata = None,
    status: SubscriptionStatus = None,
    if_not_exists: Annotated[bool, _if_not_exists("subscription")] = False,
) -> None:
    """Create a subscription; it starts with the rule $Default, which matches every message.

    Example: `sbctl subscription create events audit --max-delivery-count 5`
    """
    from sbctl.core.errors import MessagingEntityAlreadyExists

    g = options.state(ctx)
    settings = entity_options(ctx.params, SUBSCRIPTION_KEYS)
    existed = False
    with options.connect(ctx) as sb, options.naming_flags(ctx, SUBSCRIPTION_KEYS):
        try:
            result = sb.subscription_create(topic, name, **settings)
        except MessagingEntityAlreadyExists:
            if not if_not_exists:
                raise
            existed = True
            result = sb.subscription_get(topic, name)
    path = {**result, "name": f"{topic}/subscriptions/{name}"}
    render.emit(g.output, result, lambda _: render.created("subscription", path, existed))


@subscription_group.command("update")
def subscription_update(
    ctx: typer.Context,
    topic: TopicOf,
    name: SubscriptionName,
    lock_duration: LockDuration = None,
    max_delivery_count: MaxDeliveryCount = None,
    forward_to: ForwardTo = None,
    forward_dead_lettered_messages_to: ForwardDeadLetteredTo = None,
    enable_dead_lettering_on_message_expiration: DeadLetterOnExpiration = None,
    dead_letter_on_filter_exceptions: DeadLetterOnFilterExceptions = None,
    default_message_time_to_live: DefaultTtl = None,
    auto_delete_on_idle: SubscriptionAutoDeleteOnIdle = None,
    enable_batched_operations: EnableBatchedOperations = None,
    user_metadata: UserMetadata = None,
    status: SubscriptionStatus = None,
) -> None:
    """Change a subscription's settings; only the options given are changed.

    Sessions are fixed when the subscription is created.

    Example: `sbctl subscription update events audit --lock-duration 30s`
    """
    g = options.state(ctx)
    settings = _updates(ctx, SUBSCRIPTION_KEYS)
    with options.connect(ctx) as sb, options.naming_flags(ctx, SUBSCRIPTION_KEYS):
        result = sb.subscription_update(topic, name, **settings)
    render.emit(g.output, result, render.record)


@subscription_group.command("list")
def subscription_list(ctx: typer.Context, topic: TopicOf) -> None:
    """List a topic's subscriptions with their rule and message counts.

    Example: `sbctl subscription list events`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = render.by_name(sb.subscription_list(topic))
    render.emit(g.output, result, render.rows(SUBSCRIPTION_COLUMNS))


@subscription_group.command("show")
def subscription_show(ctx: typer.Context, topic: TopicOf, name: SubscriptionName) -> None:
    """Show a subscription's settings, rule count and message counts.

    Example: `sbctl subscription show events audit`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.subscription_get(topic, name)
    render.emit(g.output, result, render.record)


@subscription_group.command("delete")
def subscription_delete(ctx: typer.Context, topic: TopicOf, name: SubscriptionName) -> None:
    """Delete a subscription with its rules and messages.

    Example: `sbctl subscription delete events audit`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.subscription_delete(topic, name)
    path = render.escape(f"{topic}/subscriptions/{name}")
    render.emit(g.output, result, lambda _: f"deleted subscription {path}")


# ================================================================================== rules


@rule_group.command("create")
def rule_create(
    ctx: typer.Context,
    topic: TopicOf,
    subscription: SubscriptionOf,
    name: RuleName,
    filter_sql_expression: Annotated[
        str | None,
        value_option(
            "--filter-sql-expression",
            "SQL",
            "SQL filter, e.g. \"color = 'red' AND quantity > 10\".",
        ),
    ] = None,
    action_sql_expression: Annotated[
        str | None,
        value_option(
            "--action-sql-expression",
            "SQL",
            "SQL action on each matching copy, e.g. \"SET sys.Label = 'big'; REMOVE tmp\".",
        ),
    ] = None,
    correlation_id: Annotated[
        str | None, _text(["--correlation-id"], "Correlation filter: CorrelationId.")
    ] = None,
    message_id: Annotated[
        str | None, _text(["--message-id"], "Correlation filter: MessageId.")
    ] = None,
    to: Annotated[str | None, _text(["--to"], "Correlation filter: To.")] = None,
    reply_to: Annotated[str | None, _text(["--reply-to"], "Correlation filter: ReplyTo.")] = None,
    label: Annotated[
        str | None, _text(["--label", "--subject"], "Correlation filter: Subject (label).")
    ] = None,
    session_id: Annotated[
        str | None, _text(["--session-id"], "Correlation filter: SessionId.")
    ] = None,
    reply_to_session_id: Annotated[
        str | None,
        _text(["--reply-to-session-id"], "Correlation filter: ReplyToSessionId."),
    ] = None,
    content_type: Annotated[
        str | None, _text(["--content-type"], "Correlation filter: ContentType.")
    ] = None,
    correlation_filter_property: Annotated[
        list[str] | None,
        typer.Option(
            "--correlation-filter-property",
            metavar="KEY=VALUE",
            show_default=False,
            help="Correlation filter: an application property (repeatable), typed as "
            'send --property types it (n=5 is a number, s="5" a string).',
        ),
    ] = None,
) -> None:
    """Add a rule: a SQL filter, a correlation filter (exact matches, ANDed) or, with
    neither, the TrueFilter; and an optional action.

    Each matching rule with an action gives the subscription its own copy, carrying the
    property RuleName.

    Example: `sbctl rule create events audit big --filter-sql-expression "n>9"`
    """
    g = options.state(ctx)
    rule_filter = filter_from_flags(ctx)
    with options.connect(ctx) as sb:
        result = sb.rule_create(topic, subscription, name, rule_filter, action_sql_expression)
    render.emit(g.output, result, _rule_table)


@rule_group.command("list")
def rule_list(ctx: typer.Context, topic: TopicOf, subscription: SubscriptionOf) -> None:
    """List a subscription's rules with their filters and actions.

    Example: `sbctl rule list events audit`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = render.by_name(sb.rule_list(topic, subscription))
    render.emit(g.output, result, _rules_table)


@rule_group.command("show")
def rule_show(
    ctx: typer.Context, topic: TopicOf, subscription: SubscriptionOf, name: RuleName
) -> None:
    """Show a rule: its filter (SQL text or correlation fields) and action.

    Example: `sbctl rule show events audit '$Default'`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.rule_get(topic, subscription, name)
    render.emit(g.output, result, _rule_table)


@rule_group.command("delete")
def rule_delete(
    ctx: typer.Context, topic: TopicOf, subscription: SubscriptionOf, name: RuleName
) -> None:
    """Delete a rule; a subscription without rules receives nothing.

    Example: `sbctl rule delete events audit '$Default'`
    """
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        result = sb.rule_delete(topic, subscription, name)
    where = render.escape(f"{name} of {topic}/subscriptions/{subscription}")
    render.emit(g.output, result, lambda _: f"deleted rule {where}")


def filter_from_flags(ctx: typer.Context) -> dict[str, Any] | None:
    """The rule filter the flags describe: SQL, correlation, or None (the TrueFilter).

    SQL and correlation flags together are a usage error naming both flags.
    """
    params = ctx.params
    sql = params.get("filter_sql_expression")
    fields = {key: params[p] for p, key in CORRELATION_KEYS.items() if params.get(p) is not None}
    items = params.get("correlation_filter_property") or []
    if sql is not None and (fields or items):
        first = next(p for p in (*CORRELATION_KEYS, "correlation_filter_property") if params.get(p))
        ctx.fail(
            f"--filter-sql-expression and {options.typed_flag(ctx, first)} cannot be combined: "
            "a rule has one filter, SQL or correlation"
        )
    if sql is not None:
        return {"type": "sql", "sql_expression": sql}
    if not fields and not items:
        return None
    props = options.properties(items, "--correlation-filter-property")
    out: dict[str, Any] = {"type": "correlation", **fields}
    if props:
        out["properties"] = props
    return out


# -- rule tables


FILTER_NAMES = {
    "sql": "SQL",
    "correlation": "correlation",
    "true": "TrueFilter (1=1)",
    "false": "FalseFilter (1=0)",
}


def filter_summary(rule_filter: dict[str, Any] | None) -> str:
    """A filter in one line: ``SQL: ...``, ``correlation: subject=a, n=5`` (property values
    as JSON, so that 5 and "5" differ), ``TrueFilter (1=1)``."""
    kind = str((rule_filter or {}).get("type", "true"))
    if rule_filter and kind == "sql":
        return f"SQL: {rule_filter.get('sql_expression')}"
    if rule_filter and kind == "correlation":
        parts = [
            f"{key}={rule_filter[key]}"
            for key in CORRELATION_KEYS.values()
            if rule_filter.get(key) is not None
        ]
        props = rule_filter.get("properties") or {}
        parts += [f"{k}={render.to_json(v)}" for k, v in props.items()]
        return "correlation: " + ", ".join(parts)
    return FILTER_NAMES.get(kind, kind)


def rule_record(rule: dict[str, Any]) -> dict[str, Any]:
    """A rule as property/value rows: the filter kind, then its SQL text and parameters or
    each correlation field and property (values as JSON), then the action and its
    parameters."""
    rule_filter = rule.get("filter") or {"type": "true"}
    kind = str(rule_filter.get("type"))
    out: dict[str, Any] = {"name": rule.get("name"), "filter": FILTER_NAMES.get(kind, kind)}
    if kind == "sql":
        out["sql_expression"] = rule_filter.get("sql_expression")
        for key, value in (rule_filter.get("parameters") or {}).items():
            out[f"parameter {key}"] = render.to_json(value)
    elif kind == "correlation":
        for key in CORRELATION_KEYS.values():
            if rule_filter.get(key) is not None:
                out[key] = rule_filter[key]
        for key, value in (rule_filter.get("properties") or {}).items():
            out[f"property {key}"] = render.to_json(value)
    out["action"] = rule.get("action")
    for key, value in (rule.get("action_parameters") or {}).items():
        out[f"action parameter {key}"] = render.to_json(value)
    for key, value in rule.items():
        if key not in ("name", "filter", "action", "action_parameters"):
            out.setdefault(key, value)
    return out


def _rule_table(rule: dict[str, Any]) -> Any:
    return render.record(rule_record(rule))


def _rules_table(rules: list[dict[str, Any]]) -> Any:
    summary = [
        {
            "name": r.get("name"),
            "filter": filter_summary(r.get("filter")),
            "action": r.get("action"),
        }
        for r in rules
    ]
    return render.rows(RULE_COLUMNS)(summary)
