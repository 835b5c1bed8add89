"""The official Azure Service Bus emulator's ``Config.json``, read and written by sbctl.

``sbctl import-config`` and ``sbctl export-config`` (README, "Moving from the official
emulator") are thin wrappers over the three steps here:

- :func:`load_config` / :func:`parse_config` check a document against the emulator's schema
  (``UserConfig.Namespaces[].Queues[]`` and ``.Topics[].Subscriptions[].Rules[]``, each with
  its ``Properties``; ``UserConfig.Logging`` is accepted and ignored) plus sbctl's extras
  (:data:`QUEUE_PROPS` and friends mark them), and return a typed :class:`ConfigPlan`.
  Every refusal is a :class:`~sbctl.errors.BadRequest` that starts with the JSON path of the
  offending value: ``UserConfig.Namespaces[0].Queues[1].Properties.LockDuration: ...``.
- :func:`apply_config` makes the daemon hold what a plan describes, idempotently: it
  creates what is missing, updates the properties that differ and leaves equal ones alone.
  It reads everything first and refuses, before it changes anything (and in a dry run),
  whatever the daemon would: a property fixed at creation that differs, a value out of
  range or not for the tier, a forward target that exists nowhere, SQL that does not
  compile (with the daemon's own ``sbctld.config`` and ``sbctld.filters`` checks).
- :func:`export_config` writes namespaces back in the same schema; its output parses, and
  imports into a fresh data directory give the same export again.

Sources: the installer's ``ServiceBus-Emulator/Schema/Config-schema.json`` and
``Config/Config.json`` (github.com/Azure/azure-service-bus-emulator-installer) and the
config in learn.microsoft.com's "Test locally by using the Azure Service Bus emulator".
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from sbctl.durations import MAX_TIMESPAN_MS, format_duration_iso, parse_duration_ms
from sbctl.errors import BadRequest, InvalidOperation, MessagingEntityNotFound, SbctlError
from sbctl.names import (
    DEFAULT_RULE_NAME,
    validate_entity_name,
    validate_namespace_name,
    validate_rule_name,
    validate_subscription_name,
)

if TYPE_CHECKING:
    from sbctl.client import Client

Kind = Literal["bool", "count", "duration", "entity", "text", "status", "sku"]


@dataclass(frozen=True)
class Prop:
    """One ``Properties`` key: the client option it sets and how its value is read.

    ``extra``: an sbctl extra, not in the emulator's schema; export writes an extra only
    when its value differs from ``default`` (Azure's default), so exports of entities that
    use none stay within the official schema.
    """

    key: str
    kind: Kind
    extra: bool = False
    default: Any = None


def _extra(key: str, kind: Kind, default: Any) -> Prop:
    return Prop(key, kind, extra=True, default=default)


_SIZE_EXTRAS: Final = {
    "MaxSizeInMegabytes": _extra("max_size_in_megabytes", "count", 1024),
    "EnablePartitioning": _extra("enable_partitioning", "bool", False),
}
_COMMON_EXTRAS: Final = {
    "AutoDeleteOnIdle": _extra("auto_delete_on_idle", "duration", MAX_TIMESPAN_MS),
    "Status": _extra("status", "status", "Active"),
    "EnableBatchedOperations": _extra("enable_batched_operations", "bool", True),
    "UserMetadata": _extra("user_metadata", "text", None),
}
# Official keys first, in the order of the installer's Config.json (export keeps it).
QUEUE_PROPS: Final = {
    "DeadLetteringOnMessageExpiration": Prop("dead_lettering_on_message_expiration", "bool"),
    "DefaultMessageTimeToLive": Prop("default_message_time_to_live", "duration"),
    "DuplicateDetectionHistoryTimeWindow": Prop(
        "duplicate_detection_history_time_window", "duration"
    ),
    "ForwardDeadLetteredMessagesTo": Prop("forward_dead_lettered_messages_to", "entity"),
    "ForwardTo": Prop("forward_to", "entity"),
    "LockDuration": Prop("lock_duration", "duration"),
    "MaxDeliveryCount": Prop("max_delivery_count", "count"),
    "RequiresDuplicateDetection": Prop("requires_duplicate_detection", "bool"),
    "RequiresSession": Prop("requires_session", "bool"),
    **_SIZE_EXTRAS,
    **_COMMON_EXTRAS,
}
TOPIC_PROPS: Final = {
    "DefaultMessageTimeToLive": Prop("default_message_time_to_live", "duration"),
    "DuplicateDetectionHistoryTimeWindow": Prop(
        "duplicate_detection_history_time_window", "duration"
    ),
    "RequiresDuplicateDetection": Prop("requires_duplicate_detection", "bool"),
    **_SIZE_EXTRAS,
    "SupportOrdering": _extra("support_ordering", "bool", True),  # the daemon's default
    **_COMMON_EXTRAS,
}
SUBSCRIPTION_PROPS: Final = {
    "DeadLetteringOnMessageExpiration": Prop("dead_lettering_on_message_expiration", "bool"),
    "DefaultMessageTimeToLive": Prop("default_message_time_to_live", "duration"),
    "LockDuration": Prop("lock_duration", "duration"),
    "MaxDeliveryCount": Prop("max_delivery_count", "count"),
    "ForwardDeadLetteredMessagesTo": Prop("forward_dead_lettered_messages_to", "entity"),
    "ForwardTo": Prop("forward_to", "entity"),
    "RequiresSession": Prop("requires_session", "bool"),
    "DeadLetteringOnFilterEvaluationExceptions": _extra(
        "dead_lettering_on_filter_evaluation_exceptions", "bool", True
    ),
    **_COMMON_EXTRAS,
}
# The emulator's namespace has no Properties; sbctl's tiers (daemon/README.md §15) need them.
NAMESPACE_PROPS: Final = {
    "Sku": _extra("sku", "sku", "standard"),
    "PremiumMessagingPartitions": _extra("premium_messaging_partitions", "count", 1),
    "Capacity": _extra("capacity", "count", 1),
}
# daemon/README.md §14.10 (and §15 for a namespace's tier): fixed at creation.
IMMUTABLE: Final = {
    "namespace": ("sku", "premium_messaging_partitions"),
    "queue": ("enable_partitioning", "requires_session", "requires_duplicate_detection"),
    "topic": ("enable_partitioning", "requires_duplicate_detection"),
    "subscription": ("requires_session",),
}
FORWARD_KEYS: Final = ("forward_to", "forward_dead_lettered_messages_to")
# daemon/README.md §15.1: the Basic tier refuses these even at their (fixed) Basic values, so an
# export of a Basic namespace leaves them out.
NOT_ON_BASIC: Final = (
    *FORWARD_KEYS,
    "requires_duplicate_detection",
    "requires_session",
    "auto_delete_on_idle",
    "default_message_time_to_live",
    "duplicate_detection_history_time_window",
)
STATUSES: Final = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")
SKUS: Final = ("basic", "standard", "premium")
FILTER_TYPES: Final = ("Sql", "Correlation")
# CorrelationFilter keys → the client's filter keys (the emulator says Label for Subject).
CORRELATION_KEYS: Final = {
    "ContentType": "content_type",
    "CorrelationId": "correlation_id",
    "Label": "subject",
    "MessageId": "message_id",
    "ReplyTo": "reply_to",
    "ReplyToSessionId": "reply_to_session_id",
    "SessionId": "session_id",
    "To": "to",
}
_HINTS: Final = {"Subject": "Label"}  # names users bring from the SDKs
# .NET XmlConvert.ToTimeSpan, which the emulator's schema pattern allows: Y = 365 days,
# M (before T) = 30 days; sbctl's own parser refuses both (no fixed length).
_CALENDAR_RE: Final = re.compile(r"P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?(T.*)?", re.IGNORECASE)
_IDENTIFIER_RE: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
LOGGING_DEFAULT: Final = {"Type": "File"}
INT64_MAX: Final = 2**63 - 1


# -- the typed plan


@dataclass(frozen=True)
class RulePlan:
    path: str
    name: str
    filter: dict[str, Any]  # as the client's rule_create takes it
    action: str | None


@dataclass(frozen=True)
class EntityPlan:
    """A queue (or the base of the others): ``options`` holds only what the config sets,
    as client option keys with durations in milliseconds; the rest keeps its value (its
    default on creation)."""

    path: str
    name: str
    options: dict[str, Any]


@dataclass(frozen=True)
class SubscriptionPlan(EntityPlan):
    rules: tuple[RulePlan, ...] | None  # None: the config lists none ($Default stays)


@dataclass(frozen=True)
class TopicPlan(EntityPlan):
    subscriptions: tuple[SubscriptionPlan, ...]


@dataclass(frozen=True)
class NamespacePlan(EntityPlan):
    queues: tuple[EntityPlan, ...]
    topics: tuple[TopicPlan, ...]


@dataclass(frozen=True)
class ConfigPlan:
    namespaces: tuple[NamespacePlan, ...]
    warnings: tuple[str, ...] = ()


# -- parsing


class _Object(dict[str, Any]):
    """A JSON object that remembers keys given twice (json keeps only the last)."""

    duplicates: list[str]


def _object_pairs(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object()
    obj.duplicates = []
    for key, value in pairs:
        if key in obj:
            obj.duplicates.append(key)
        obj[key] = value
    return obj


def load_config(text: str, source: str = "config") -> ConfigPlan:
    """Decode JSON text (a leading BOM is allowed) and :func:`parse_config` it."""
    try:
        data = json.loads(text.removeprefix("\ufeff"), object_pairs_hook=_object_pairs)
    except json.JSONDecodeError as err:
        raise BadRequest(
            f"{source}: not valid JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None
    return parse_config(data)


def parse_config(data: Any) -> ConfigPlan:
    """Check a decoded Config.json document and return its plan (see the module doc)."""
    return _Parser().document(data)


def _join(path: str, key: str) -> str:
    shown = key if _IDENTIFIER_RE.fullmatch(key) else f"[{json.dumps(key)}]"
    if not path:
        return shown
    return f"{path}{shown}" if shown.startswith("[") else f"{path}.{shown}"


def _fail(path: str, message: str) -> BadRequest:
    return BadRequest(f"{path or '(document)'}: {message}")


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return f"boolean {json.dumps(value)}"
    if value is None:
        return "null"
    if isinstance(value, str):
        text = json.dumps(value)
        return f"string {text}" if len(text) <= 60 else f'string {text[:56]}..."'

    if isinstance(value, int | float):
        return f"number {value}"
    return "an array" if isinstance(value, list) else "an object"


def _unknown(key: str, known: Collection[str]) -> str:
    guess = _HINTS.get(key) or next(iter(difflib.get_close_matches(key, known, 1, 0.7)), None)
    guess = guess or next((k for k in known if k.lower() == key.lower()), None)
    if guess:
        return f'unknown property; did you mean "{guess}"?'
    return f"unknown property; expected one of {', '.join(sorted(known))}"


class _Parser:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    # generic shapes

    def obj(
        self, value: Any, path: str, known: Collection[str], required: Sequence[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _fail(path, f"expected an object, got {_shown(value)}")
        duplicates = getattr(value, "duplicates", ())
        if duplicates:
            raise _fail(_join(path, duplicates[0]), "given twice")
        for key in value:
            if key not in known:
                raise _fail(_join(path, key), _unknown(key, known))
        for key in required:
            if key not in value:
                raise _fail(_join(path, key), "required property is missing")
        return value

    def array(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise _fail(path, f"expected an array, got {_shown(value)}")
        return value

    def string(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise _fail(path, f"expected a string, got {_shown(value)}")
        return value

    def name(self, value: Any, path: str, check: Callable[[str], str]) -> str:
        try:
            return check(self.string(value, path))
        except BadRequest as err:
            raise _fail(path, err.message) from None

    def unique(self, seen: dict[str, str], name: str, path: str, what: str) -> None:
        first = seen.setdefault(name.lower(), path)
        if first != path:
            raise _fail(path, f"{what} {json.dumps(name)} is already defined at {first}")

    def value(self, prop: Prop, raw: Any, path: str) -> Any:
        if prop.kind == "bool":
            if not isinstance(raw, bool):
                raise _fail(path, f"expected true or false, got {_shown(raw)}")
            return raw
        if prop.kind == "count":
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                raise _fail(path, f"expected a positive integer, got {_shown(raw)}")
            if raw > INT64_MAX:  # the wire (and every count the daemon keeps) is an Int64
                raise _fail(path, f"{raw} is out of range: expected at most {INT64_MAX}")
            return raw
        text = self.string(raw, path)
        if prop.kind == "duration":
            return _duration_ms(text, path)
        if prop.kind == "entity":  # "" is how the emulator's configs say "not set"
            if not text:
                return None
            return self.name(text, path, lambda n: validate_entity_name(n, "entity"))
        if prop.kind == "status":
            if text not in STATUSES:
                raise _fail(path, f"expected one of {', '.join(STATUSES)}, got {_shown(text)}")
            return text
        if prop.kind == "sku":
            if text.lower() not in SKUS:
                raise _fail(path, f"expected Basic, Standard or Premium, got {_shown(text)}")
            return text.lower()
        return text or None  # text: "" is not set

    def properties(self, value: Any, path: str, table: dict[str, Prop]) -> dict[str, Any]:
        props = self.obj(value, path, table)
        return {
            table[key].key: self.value(table[key], raw, _join(path, key))
            for key, raw in props.items()
        }

    # the document, top down

    def document(self, data: Any) -> ConfigPlan:
        root = self.obj(data, "", ("UserConfig", "$schema"), required=("UserConfig",))
        user = self.obj(
            root["UserConfig"], "UserConfig", ("Namespaces", "Logging"), required=("Namespaces",)
        )
        if "Logging" in user:  # the emulator's log target: nothing to do here
            self.obj(user["Logging"], "UserConfig.Logging", user["Logging"] or ())
        path = "UserConfig.Namespaces"
        items = self.array(user["Namespaces"], path)
        if not items:
            raise _fail(path, "expected at least one namespace")
        seen: dict[str, str] = {}
        namespaces = tuple(
            self.namespace(item, f"{path}[{i}]", seen) for i, item in enumerate(items)
        )
        return ConfigPlan(namespaces, tuple(self.warnings))

    def namespace(self, value: Any, path: str, seen: dict[str, str]) -> NamespacePlan:
        ns = self.obj(value, path, ("Name", "Properties", "Queues", "Topics"), required=("Name",))
        name = self.name(ns["Name"], _join(path, "Name"), validate_namespace_name)
        self.unique(seen, name, _join(path, "Name"), "namespace")
        options = self.properties(
            ns.get("Properties", {}), _join(path, "Properties"), NAMESPACE_PROPS
        )
        # queues and topics share one name space (daemon/README.md §14.9)
        entities: dict[str, str] = {}
        queues = tuple(
            self.queue(item, f"{path}.Queues[{i}]", entities)
            for i, item in enumerate(self.array(ns.get("Queues", []), _join(path, "Queues")))
        )
        topics = tuple(
            self.topic(item, f"{path}.Topics[{i}]", entities)
            for i, item in enumerate(self.array(ns.get("Topics", []), _join(path, "Topics")))
        )
        return NamespacePlan(path, name, options, queues, topics)

    def queue(self, value: Any, path: str, seen: dict[str, str]) -> EntityPlan:
        item = self.obj(value, path, ("Name", "Properties"), required=("Name",))
        name = self.name(item["Name"], _join(path, "Name"), validate_entity_name)
        self.unique(seen, name, _join(path, "Name"), "an entity named")
        options = self.properties(
            item.get("Properties", {}), _join(path, "Properties"), QUEUE_PROPS
        )
        return EntityPlan(path, name, options)

    def topic(self, value: Any, path: str, seen: dict[str, str]) -> TopicPlan:
        item = self.obj(value, path, ("Name", "Properties", "Subscriptions"), required=("Name",))
        name = self.name(
            item["Name"], _join(path, "Name"), lambda n: validate_entity_name(n, "topic")
        )
        self.unique(seen, name, _join(path, "Name"), "an entity named")
        options = self.properties(
            item.get("Properties", {}), _join(path, "Properties"), TOPIC_PROPS
        )
        subs: dict[str, str] = {}
        items = self.array(item.get("Subscriptions", []), _join(path, "Subscriptions"))
        subscriptions = tuple(
            self.subscription(sub, f"{path}.Subscriptions[{i}]", subs)
            for i, sub in enumerate(items)
        )
        return TopicPlan(path, name, options, subscriptions)

    def subscription(self, value: Any, path: str, seen: dict[str, str]) -> SubscriptionPlan:
        item = self.obj(value, path, ("Name", "Properties", "Rules"), required=("Name",))
        name = self.name(item["Name"], _join(path, "Name"), validate_subscription_name)
        self.unique(seen, name, _join(path, "Name"), "subscription")
        options = self.properties(
            item.get("Properties", {}), _join(path, "Properties"), SUBSCRIPTION_PROPS
        )
        rules: tuple[RulePlan, ...] | None = None
        listed = self.array(item.get("Rules", []), _join(path, "Rules"))
        if listed:  # [] is what generators write for "no rules": $Default stays
            names: dict[str, str] = {}
            rules = tuple(self.rule(r, f"{path}.Rules[{i}]", names) for i, r in enumerate(listed))
        return SubscriptionPlan(path, name, options, rules)

    def rule(self, value: Any, path: str, seen: dict[str, str]) -> RulePlan:
        item = self.obj(value, path, ("Name", "Properties"), required=("Name", "Properties"))
        name = self.name(item["Name"], _join(path, "Name"), validate_rule_name)
        self.unique(seen, name, _join(path, "Name"), "rule")
        path = _join(path, "Properties")
        props = self.obj(
            item["Properties"],
            path,
            ("FilterType", "SqlFilter", "CorrelationFilter", "Action"),
            required=("FilterType",),
        )
        kind = props["FilterType"]
        if kind not in FILTER_TYPES:
            raise _fail(
                _join(path, "FilterType"),
                f'expected "Sql" or "Correlation", got {json.dumps(kind)}',
            )
        chosen = f"{kind}Filter"
        if chosen not in props:
            raise _fail(_join(path, chosen), f'required when FilterType is "{kind}"')
        other = "CorrelationFilter" if kind == "Sql" else "SqlFilter"
        if other in props:  # the schema's oneOf allows it; the emulator reads only `chosen`
            self.warnings.append(f'{_join(path, other)}: ignored, because FilterType is "{kind}"')
        if kind == "Sql":
            sql = self.obj(
                props[chosen], _join(path, chosen), ("SqlExpression",), ("SqlExpression",)
            )
            where = _join(_join(path, chosen), "SqlExpression")
            expression = self.string(sql["SqlExpression"], where)
            if not expression.strip():
                raise _fail(where, "must not be empty")
            rule_filter: dict[str, Any] = {"type": "sql", "sql_expression": expression}
        else:
            rule_filter = self.correlation(props[chosen], _join(path, chosen))
        action = None
        if "Action" in props:
            act = self.obj(props["Action"], _join(path, "Action"), ("SqlExpression",))
            where = _join(_join(path, "Action"), "SqlExpression")
            text = self.string(act.get("SqlExpression", ""), where)
            action = text if text.strip() else None
        return RulePlan(path.removesuffix(".Properties"), name, rule_filter, action)

    def correlation(self, value: Any, path: str) -> dict[str, Any]:
        given = self.obj(value, path, (*CORRELATION_KEYS, "Properties"))
        out: dict[str, Any] = {"type": "correlation"}
        for key, option in CORRELATION_KEYS.items():
            if key in given:
                text = self.string(given[key], _join(path, key))
                if text:  # "" is not set, as for ForwardTo
                    out[option] = text
        if "Properties" in given:
            user = self.obj(given["Properties"], _join(path, "Properties"), given["Properties"])
            if not user:
                raise _fail(_join(path, "Properties"), "expected at least one property")
            for key, raw in user.items():
                if isinstance(raw, dict | list):
                    raise _fail(
                        _join(_join(path, "Properties"), key),
                        f"expected a string, number, boolean or null, got {_shown(raw)}",
                    )
            out["properties"] = dict(user)
        if len(out) == 1:
            raise _fail(path, "expected at least one condition")
        return out


def _duration_ms(text: str, path: str) -> int:
    calendar = _CALENDAR_RE.fullmatch(text.strip())
    if calendar and (calendar.group(1) or calendar.group(2)):
        years, months, days = (int(g or 0) for g in calendar.group(1, 2, 3))
        text = f"P{years * 365 + months * 30 + days}D{calendar.group(4) or ''}"
    try:
        return parse_duration_ms(text)
    except BadRequest as err:
        raise _fail(path, err.message) from None


# -- applying


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
    from sbctld import config as daemon

    classes: dict[str, type[daemon.QueueConfig]] = {
        "queue": daemon.QueueConfig,
        "topic": daemon.TopicConfig,
        "subscription": daemon.SubscriptionConfig,
    }
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
        # Every check is of one value against its range and the tier, so the defaults
        # stand in for the values an update keeps.
        cfg = daemon.merge_options(classes[kind](name=plan.name), sending, creating=True)
        daemon.check_queue(cfg, target.sku, set(sending))
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
    from sbctld.filters import compile_action, compile_filter

    try:
        compile_filter(rule.filter)
        compile_action(rule.action)
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


# -- exporting


def export_config(client: Client, namespaces: Sequence[str] | None = None) -> dict[str, Any]:
    """The namespaces (default: all) in the emulator's schema; lists sorted by name."""
    if namespaces:
        infos = [client.namespace_get(name) for name in namespaces]
    else:
        infos = sorted(client.namespace_list(), key=lambda n: str(n["name"]).lower())
    out = []
    for info in infos:
        with client.using(str(info["name"])) as sb:
            out.append(_export_namespace(sb, info))
    return {"UserConfig": {"Namespaces": out, "Logging": dict(LOGGING_DEFAULT)}}


def _sorted(items: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=lambda item: str(item["name"]).lower())


def _export_namespace(sb: Client, info: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"Name": info["name"]}
    props = _export_props(info, NAMESPACE_PROPS)
    if props:
        out["Properties"] = props
    skip = NOT_ON_BASIC if _current(NAMESPACE_PROPS["Sku"], info.get("sku")) == "basic" else ()
    out["Queues"] = [
        {"Name": q["name"], "Properties": _export_props(q, QUEUE_PROPS, skip)}
        for q in _sorted(sb.queue_list())
    ]
    topics = []
    for topic in _sorted(sb.topic_list()):
        subscriptions = []
        for sub in _sorted(sb.subscription_list(topic["name"])):
            item = {"Name": sub["name"], "Properties": _export_props(sub, SUBSCRIPTION_PROPS)}
            rules = _export_rules(_sorted(sb.rule_list(topic["name"], sub["name"])))
            if rules is not None:
                item["Rules"] = rules
            subscriptions.append(item)
        topics.append(
            {
                "Name": topic["name"],
                "Properties": _export_props(topic, TOPIC_PROPS),
                "Subscriptions": subscriptions,
            }
        )
    out["Topics"] = topics
    return out


def _export_props(
    described: dict[str, Any], table: dict[str, Prop], skip: Collection[str] = ()
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, prop in table.items():
        if prop.key not in described or prop.key in skip:
            continue
        value = _current(prop, described[prop.key])
        if prop.extra and (value is None or value == prop.default):
            continue
        if prop.kind == "duration":
            value = format_duration_iso(value)
        elif prop.kind == "entity" and value is None:
            value = ""  # the emulator's configs write "" for "not set"
        elif prop.kind == "sku":
            value = str(value).capitalize()
        out[name] = value
    return out


def _export_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """None (no Rules key) for the lone default rule, as the emulator's configs do.

    A subscription without rules receives nothing; "Rules": [] would import as "keep
    $Default", so it is written as a FalseFilter ``$Default``, which receives nothing too.
    """
    if not rules:
        return [_export_rule({"name": DEFAULT_RULE_NAME, "filter": {"type": "false"}})]
    if (
        len(rules) == 1
        and rules[0]["name"] == DEFAULT_RULE_NAME
        and _canonical_filter(rules[0].get("filter")) == ("true",)
        and _action(rules[0].get("action")) is None
    ):
        return None
    return [_export_rule(rule) for rule in rules]


def _export_rule(rule: dict[str, Any]) -> dict[str, Any]:
    rule_filter = rule.get("filter")
    canonical = _canonical_filter(rule_filter)
    props: dict[str, Any]
    if canonical[0] == "correlation":
        props = {
            "FilterType": "Correlation",
            "CorrelationFilter": _export_correlation(rule_filter or {}),
        }
    else:
        expression = {"true": "1=1", "false": "1=0"}.get(canonical[0])
        if expression is None:
            expression = str((rule_filter or {}).get("sql_expression", ""))
        props = {"FilterType": "Sql", "SqlFilter": {"SqlExpression": expression}}
    action = _action(rule.get("action"))
    if action is not None:
        props["Action"] = {"SqlExpression": action}
    return {"Name": rule["name"], "Properties": props}


def _export_correlation(rule_filter: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: rule_filter[key]
        for name, key in CORRELATION_KEYS.items()
        if rule_filter.get(key) not in (None, "")
    }
    if rule_filter.get("properties"):
        out["Properties"] = dict(rule_filter["properties"])
    return out
