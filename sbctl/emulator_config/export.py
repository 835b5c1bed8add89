"""Namespaces written back as Config.json (its output parses and re-imports the same)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sbctl.core.durations import format_duration_iso
from sbctl.core.names import (
    DEFAULT_RULE_NAME,
)

if TYPE_CHECKING:
    from sbctl.client import Client
from sbctl.emulator_config.apply import (
    _action,
    _canonical_filter,
    _current,
    _export_correlation,
)
from sbctl.emulator_config.schema import (
    LOGGING_DEFAULT,
    NAMESPACE_PROPS,
    NOT_ON_BASIC,
    QUEUE_PROPS,
    SUBSCRIPTION_PROPS,
    TOPIC_PROPS,
    Prop,
)


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
