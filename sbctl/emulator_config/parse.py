"""Config.json text → :class:`~sbctl.emulator_config.schema.ConfigPlan`: every refusal a
BadRequest starting with the JSON path of the offending value.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from sbctl.core.durations import parse_duration_ms
from sbctl.core.errors import BadRequest
from sbctl.core.names import (
    validate_entity_name,
    validate_namespace_name,
    validate_rule_name,
    validate_subscription_name,
)

if TYPE_CHECKING:
    pass
from sbctl.emulator_config.schema import (
    _CALENDAR_RE,
    _HINTS,
    _IDENTIFIER_RE,
    CORRELATION_KEYS,
    FILTER_TYPES,
    INT64_MAX,
    NAMESPACE_PROPS,
    QUEUE_PROPS,
    SKUS,
    STATUSES,
    SUBSCRIPTION_PROPS,
    TOPIC_PROPS,
    ConfigPlan,
    EntityPlan,
    NamespacePlan,
    Prop,
    RulePlan,
    SubscriptionPlan,
    TopicPlan,
)


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
