"""Make the daemon hold what a plan describes: read everything, refuse what the daemon would
(with its own ``sbctld.config`` and ``sbctld.filters`` checks), then create and update.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from sbctl.core.durations import format_duration_iso, parse_duration_ms
from sbctl.core.errors import BadRequest, InvalidOperation, MessagingEntityNotFound, SbctlError
from sbctl.core.names import (
    DEFAULT_RULE_NAME,
)

if TYPE_CHECKING:
    from sbctl.client import Client
from sbctl.emulator_config.schema import (
    CORRELATION_KEYS,
    FORWARD_KEYS,
    IMMUTABLE,
    NAMESPACE_PROPS,
    QUEUE_PROPS,
    SUBSCRIPTION_PROPS,
    TOPIC_PROPS,
    ConfigPlan,
    EntityPlan,
    NamespacePlan,
    Prop,
    RulePlan,
    SubscriptionPlan,
)


@dataclass
class _Step:
    """One entity's row of the report, and the calls that bring it about."""

    path: str
    kind: str
    namespace: str
    entity: str
    action: str  # create | update | unchanged | delete | recreate
    changes: list[str] = field(default_factory=list)
    run: list[Callable[[], Any]] = field(default_factory=list)
    late: list[Callable[[], Any]] = field(default_factory=list)  # after every entity exists
    last: list[Callable[[], Any]] = field(default_factory=list)  # rule deletes: at the end
    props: dict[str, str] = field(default_factory=dict)  # option key → JSON name

    def row(self, done: bool) -> dict[str, Any]:
        action = _PAST.get(self.action, self.action) if done else self.action
        return {
            "path": self.path,
            "kind": self.kind,
            "namespace": self.namespace,
            "entity": self.entity,
            "action": action,
            "changes": self.changes,
        }


_PAST: Final = {
    "create": "created",
    "update": "updated",
    "delete": "deleted",
    "recreate": "recreated",
}


def apply_config(
    client: Client, plan: ConfigPlan, *, dry_run: bool = False
) -> list[dict[str, Any]]:
    """Make the daemon hold what ``plan`` describes; return one report row per entity
    (``path``, ``kind``, ``namespace``, ``entity``, ``action``, ``changes``).

    Everything is read and checked first, with the daemon's own checks (:func:`_check_entity`,
    :func:`_check_rule`), so a config the daemon would refuse is refused before anything
    changes, and ``dry_run`` refuses it too; with ``dry_run`` nothing more happens and the
    actions are the planned ones (``create``), else they are what was done (``created``).
    Forwarding (ForwardTo, ForwardDeadLetteredMessagesTo) is set once every entity of the
    config exists, so entities may forward to each other in any order; rules are deleted
    (and changed rules re-created) after that, so that anything the daemon still refuses
    (a quota, a concurrent change) stops the import before a rule is gone. A daemon error
    is re-raised, same class, prefixed with the path of the item being applied.
    """
    clients: list[Client] = []
    try:
        steps: list[_Step] = []
        for ns in plan.namespaces:
            sb = client.using(ns.name)
            clients.append(sb)
            steps += _plan_namespace(client, sb, ns)
        if not dry_run:
            for step in steps:
                for call in step.run:
                    _guarded(step, call)
            for step in steps:
                for call in step.late:
                    _guarded(step, call)
            for step in steps:
                for call in step.last:
                    _guarded(step, call)
        return [step.row(done=not dry_run) for step in steps]
    finally:
        for sb in clients:
            sb.close()


def _guarded(step: _Step, call: Callable[[], Any]) -> None:
    try:
        call()
    except SbctlError as err:
        raise _at(step, err) from None


def _at(step: _Step, err: SbctlError) -> SbctlError:
    """``err``, same class, behind the path of the property its message names (else of
    the item)."""
    named = [key for key in step.props if re.search(rf"\b{key}\b", err.message)]
    path = f"{step.path}.Properties.{step.props[named[0]]}" if len(named) == 1 else step.path
    return type(err)(f"{path}: {err.message}", retry_after=err.retry_after)


@dataclass
class _Target:
    """One namespace as the checks before any change see it: its tier and the queues and
    topics forwarding may point at (the config's, then the daemon's, read once if needed)."""

    sb: Client
    name: str
    sku: str
    partitions: int
    exists: bool
    planned: set[str]  # the config's queue and topic names, lower-case
    queues: dict[str, dict[str, Any]] | None = None
    topics: dict[str, dict[str, Any]] | None = None

    def has(self, entity: str) -> bool:
        key = entity.lower()
        if key in self.planned:
            return True
        if not self.exists:
            return False
        if self.queues is None:
            self.queues = _by_name(self.sb.queue_list())
        if self.topics is None:
            self.topics = _by_name(self.sb.topic_list())
        return key in self.queues or key in self.topics


def _check_entity(
    kind: str,
    step: _Step,
    plan: EntityPlan,
    target: _Target,
    sending: dict[str, Any],
    current: dict[str, Any] | None,
) -> None:
    """Refuse, before any change, what the daemon's create or update would refuse: its
    own range and tier checks (``sbctld.config``) on the options sent, and forwarding to a
    queue or topic that is neither in the config nor in the namespace."""
    from sbctl import daemonctl

    try:
        if current is None and kind == "topic" and target.sku == "basic":
            raise InvalidOperation("topics are not supported on the Basic tier")
        if (
            current is None
            and target.sku == "premium"
            and sending.get("enable_partitioning")
            and target.partitions == 1
        ):
            raise InvalidOperation(
                "enable_partitioning: premium namespaces do not partition entities one by one; "
                "create the namespace with PremiumMessagingPartitions 2 or 4"
            )
        daemonctl.check_entity_options(kind, plan.name, sending, target.sku)
        forwards = {
            k: _current(QUEUE_PROPS["ForwardTo"], (current or {}).get(k)) for k in FORWARD_KEYS
        }
        forwards.update((k, v) for k, v in sending.items() if k in FORWARD_KEYS)
        for key, entity in forwards.items():
            if entity is None:
                continue
            if kind == "queue" and str(entity).lower() == plan.name.lower():
                raise InvalidOperation(f"{key} cannot point an entity at itself")
            if not target.has(str(entity)):
                raise MessagingEntityNotFound(
                    f"{key} destination {str(entity)!r} is not a queue or topic of the "
                    f"config, nor of namespace {target.name!r}"
                )
    except SbctlError as err:
        raise _at(step, err) from None


def _check_rule(rule: RulePlan) -> None:
    """Compile a rule's filter and action as the daemon will (its own functions), so a
    rule it would refuse is refused before any change."""
    from sbctl import daemonctl

    try:
        daemonctl.check_rule(rule.filter, rule.action)
    except SbctlError as err:
        raise type(err)(f"{rule.path}: {err.message}", retry_after=err.retry_after) from None


def _check_namespace(step: _Step, sku: str, options: dict[str, Any], creating: bool) -> None:
    """The daemon's namespace checks (sbctld.broker namespace_create, namespace_update)."""
    try:
        partitions = options.get("premium_messaging_partitions")
        if partitions is not None and partitions not in (1, 2, 4):
            raise BadRequest("premium_messaging_partitions must be 1, 2 or 4")
        if creating and sku != "premium" and partitions not in (None, 1):
            raise InvalidOperation("premium_messaging_partitions needs the premium sku")
        capacity = options.get("capacity")
        if capacity is not None and capacity not in (1, 2, 4, 8, 16):
            raise BadRequest("capacity must be 1, 2, 4, 8 or 16 messaging units")
        if not creating and capacity is not None and sku != "premium":
            raise InvalidOperation("capacity (messaging units) needs the premium sku")
    except SbctlError as err:
        raise _at(step, err) from None


def _by_name(items: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(item["name"]).lower(): item for item in items}


def _json_names(table: dict[str, Prop]) -> dict[str, str]:
    return {prop.key: name for name, prop in table.items()}


def _current(prop: Prop, value: Any) -> Any:
    """A value as the daemon describes it, in the plan's terms (durations in ms)."""
    if prop.kind == "duration" and isinstance(value, str):
        return parse_duration_ms(value)
    if prop.kind == "sku" and isinstance(value, str):
        return value.lower()
    if prop.kind in ("entity", "text") and value == "":
        return None
    return value


def _same(prop: Prop, current: Any, desired: Any) -> bool:
    if prop.kind == "entity" and current is not None and desired is not None:
        return str(current).lower() == str(desired).lower()  # names are case-insensitive
    return bool(current == desired and type(current) is type(desired))


def _shown_value(prop: Prop, value: Any) -> str:
    if value is None:
        return "(not set)"
    if prop.kind == "duration" and isinstance(value, int):
        return format_duration_iso(value)
    return json.dumps(value)


def _diff(
    kind: str, step: _Step, table: dict[str, Prop], desired: dict[str, Any], current: dict[str, Any]
) -> dict[str, Any]:
    """The desired options that differ from ``current``; fills ``step.changes`` and refuses
    a difference in a property fixed at creation."""
    by_key = {prop.key: (name, prop) for name, prop in table.items()}
    changed: dict[str, Any] = {}
    for key, want in desired.items():
        name, prop = by_key[key]
        have = _current(prop, current.get(key))
        if key in current and _same(prop, have, want):
            continue
        before, after = _shown_value(prop, have), _shown_value(prop, want)
        if key in IMMUTABLE[kind]:
            raise InvalidOperation(
                f"{step.path}.Properties.{name}: {key} cannot be changed after the {kind} is "
                f"created (it is {before}, the config says {after}); delete the {kind} first"
            )
        changed[key] = want
        step.changes.append(f"{name}: {before} -> {after}")
    return changed


def _entity_step(
    kind: str,
    plan: EntityPlan,
    target: _Target,
    entity: str,
    table: dict[str, Prop],
    current: dict[str, Any] | None,
    create: Callable[..., Any],
    update: Callable[..., Any],
) -> _Step:
    step = _Step(plan.path, kind, target.name, entity, "create", props=_json_names(table))
    if current is None:
        _check_entity(kind, step, plan, target, plan.options, None)
        first = {k: v for k, v in plan.options.items() if k not in FORWARD_KEYS}
        later = {k: v for k, v in plan.options.items() if k in FORWARD_KEYS and v is not None}
    else:
        changed = _diff(kind, step, table, plan.options, current)
        step.action = "update" if changed else "unchanged"
        if changed:
            _check_entity(kind, step, plan, target, changed, current)
        first = {k: v for k, v in changed.items() if k not in FORWARD_KEYS}
        later = {k: v for k, v in changed.items() if k in FORWARD_KEYS}
    if current is None:
        step.run.append(lambda: create(plan.name, **first))
    elif first:
        step.run.append(lambda: update(plan.name, **first))
    if later:
        step.late.append(lambda: update(plan.name, **later))
    return step


def _get_namespace(client: Client, name: str) -> dict[str, Any] | None:
    try:
        return client.namespace_get(name)
    except MessagingEntityNotFound:
        return None


def _plan_namespace(client: Client, sb: Client, ns: NamespacePlan) -> list[_Step]:
    current = _get_namespace(client, ns.name)
    step = _Step(
        ns.path, "namespace", ns.name, ns.name, "create", props=_json_names(NAMESPACE_PROPS)
    )
    planned = {e.name.lower() for e in (*ns.queues, *ns.topics)}
    if current is None:
        sku = str(ns.options.get("sku", "standard"))
        _check_namespace(step, sku, ns.options, creating=True)
        step.run.append(lambda: client.namespace_create(ns.name, **ns.options))
        partitions = int(ns.options.get("premium_messaging_partitions", 1))
        target = _Target(sb, ns.name, sku, partitions, False, planned)
        queues: dict[str, dict[str, Any]] = {}
        topics: dict[str, dict[str, Any]] = {}
    else:
        changed = _diff("namespace", step, NAMESPACE_PROPS, ns.options, current)
        step.action = "update" if changed else "unchanged"
        sku = str(_current(NAMESPACE_PROPS["Sku"], current.get("sku")) or "standard")
        _check_namespace(step, sku, changed, creating=False)
        if changed:
            step.run.append(lambda: client.namespace_update(ns.name, **changed))
        # Only what the config names is read: fewer management credits (daemon/README.md §0.2.1).
        queues = _by_name(sb.queue_list()) if ns.queues else {}
        topics = _by_name(sb.topic_list()) if ns.topics else {}
        partitions = int(current.get("premium_messaging_partitions") or 1)
        target = _Target(sb, ns.name, sku, partitions, True, planned)
        target.queues = queues if ns.queues else None
        target.topics = topics if ns.topics else None
    steps = [step]
    for queue in ns.queues:
        steps.append(
            _entity_step(
                "queue",
                queue,
                target,
                queue.name,
                QUEUE_PROPS,
                queues.get(queue.name.lower()),
                sb.queue_create,
                sb.queue_update,
            )
        )
    for topic in ns.topics:
        existing = topics.get(topic.name.lower())
        steps.append(
            _entity_step(
                "topic",
                topic,
                target,
                topic.name,
                TOPIC_PROPS,
                existing,
                sb.topic_create,
                sb.topic_update,
            )
        )
        subs = _by_name(sb.subscription_list(topic.name)) if existing is not None else {}
        for sub in topic.subscriptions:
            steps += _plan_subscription(sb, target, topic.name, sub, subs.get(sub.name.lower()))
    return steps


def _plan_subscription(
    sb: Client, target: _Target, topic: str, sub: SubscriptionPlan, current: dict[str, Any] | None
) -> list[_Step]:
    entity = f"{topic}/subscriptions/{sub.name}"

    def create(name: str, **options: Any) -> Any:
        return sb.subscription_create(topic, name, **options)

    def update(name: str, **options: Any) -> Any:
        return sb.subscription_update(topic, name, **options)

    ns = target.name
    steps = [
        _entity_step(
            "subscription", sub, target, entity, SUBSCRIPTION_PROPS, current, create, update
        )
    ]
    if sub.rules is None:
        return steps
    if current is None:  # a new subscription starts with $Default (daemon/README.md §10.1)
        rules = {DEFAULT_RULE_NAME.lower(): {"name": DEFAULT_RULE_NAME, "filter": None}}
    else:
        rules = _by_name(sb.rule_list(topic, sub.name))
    for rule in sub.rules:
        have = rules.pop(rule.name.lower(), None)
        step = _Step(rule.path, "rule", ns, f"{entity}/rules/{rule.name}", "create")
        if have is not None and _same_rule(have, rule):
            step.action = "unchanged"
        else:
            _check_rule(rule)  # so the create below cannot be refused for its text
            if have is not None:  # rules have no update: delete, then create (at the end)
                step.action = "recreate"
                step.changes.append(f"{_rule_text(have)} -> {_rule_text(rule)}")
                step.last.append(_rule_delete(sb, topic, sub.name, str(have["name"])))
                step.last.append(_rule_create(sb, topic, sub.name, rule))
            else:
                step.run.append(_rule_create(sb, topic, sub.name, rule))
        steps.append(step)
    for have in rules.values():  # the subscription filters by exactly the listed rules
        name = str(have["name"])
        step = _Step(f"{sub.path}.Rules", "rule", ns, f"{entity}/rules/{name}", "delete")
        step.changes.append(f"not listed ({_rule_text(have)})")
        step.last.append(_rule_delete(sb, topic, sub.name, name))
        steps.append(step)
    return steps


def _rule_create(sb: Client, topic: str, sub: str, rule: RulePlan) -> Callable[[], Any]:
    return lambda: sb.rule_create(topic, sub, rule.name, filter=rule.filter, action=rule.action)


def _rule_delete(sb: Client, topic: str, sub: str, name: str) -> Callable[[], Any]:
    return lambda: sb.rule_delete(topic, sub, name)


def _canonical_filter(rule_filter: dict[str, Any] | None) -> tuple[Any, ...]:
    """A filter in a comparable form: TrueFilter is SQL ``1=1`` and FalseFilter ``1=0``
    (daemon/README.md §10.4); property values keep their type (1, 1.0 and true differ)."""
    if rule_filter is None:
        return ("true",)
    kind = str(rule_filter.get("type", "")).lower()
    if kind == "sql":
        expression = str(rule_filter.get("sql_expression") or "").strip()
        squeezed = re.sub(r"\s+", "", expression)
        if squeezed in ("1=1", "1=0"):
            return ("true",) if squeezed == "1=1" else ("false",)
        return ("sql", expression)
    if kind == "correlation":
        system = tuple(
            (key, rule_filter[key])
            for key in sorted(CORRELATION_KEYS.values())
            if rule_filter.get(key) not in (None, "")
        )
        user = rule_filter.get("properties") or {}
        typed = tuple(sorted((k, type(v).__name__, v) for k, v in user.items()))
        return ("correlation", system, typed) if system or typed else ("true",)
    return (kind,)


def _action(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text or None


def _same_rule(have: dict[str, Any], want: RulePlan) -> bool:
    return _canonical_filter(have.get("filter")) == _canonical_filter(want.filter) and _action(
        have.get("action")
    ) == _action(want.action)


def _rule_text(rule: dict[str, Any] | RulePlan) -> str:
    rule_filter: dict[str, Any] | None
    if isinstance(rule, RulePlan):
        rule_filter, action = rule.filter, rule.action
    else:
        rule_filter, action = rule.get("filter"), rule.get("action")
    canonical = _canonical_filter(rule_filter)
    if canonical[0] in ("true", "false"):
        text = "1=1" if canonical[0] == "true" else "1=0"
    elif canonical[0] == "sql":
        text = str(canonical[1])
    else:
        text = "correlation " + json.dumps(_export_correlation(rule_filter or {}), sort_keys=True)
    action = _action(action)
    return f"{text} / {action}" if action else text


# -- a correlation filter as Config.json writes it (used by export too)


def _export_correlation(rule_filter: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: rule_filter[key]
        for name, key in CORRELATION_KEYS.items()
        if rule_filter.get(key) not in (None, "")
    }
    if rule_filter.get("properties"):
        out["Properties"] = dict(rule_filter["properties"])
    return out
