"""``$management`` rule operations on a subscription (add, remove, enumerate), as the
.NET and Java SDKs send them (daemon/README.md §29). The Python SDK manages rules
over HTTP instead.

Request maps use the Service Bus names: ``rule-description`` holds ``sql-filter``
``{expression, parameters}`` or ``correlation-filter`` ``{correlation-id, message-id, to,
reply-to, label, session-id, reply-to-session-id, content-type, properties}`` and optionally
``sql-rule-action`` ``{expression, parameters}`` (``parameters``, a map of ``@name`` to value,
is sbctl's: the SDKs send none). ``enumerate-rules`` answers described lists.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sbctl.core import typed
from sbctl.core.amqp.types import Described, Timestamp, ULong
from sbctl.core.errors import BadRequest
from sbctl.core.names import parse_entity_path
from sbctl.core.protocol import RuleCreate, RuleRef, SubscriptionRef
from sbctl.core.typed import plain
from sbctld.frontends.amqp.arguments import Args
from sbctld.frontends.amqp.arguments import text_of as _text
from sbctld.frontends.amqp.host import Host, Respond, run
from sbctld.results import RuleInfo

RULE_DESCRIPTION = ULong(0x0000013700000004)
EMPTY_ACTION = ULong(0x0000013700000005)
SQL_ACTION = ULong(0x0000013700000006)
# The filters' codes have one zero fewer than the rule description's and the actions'
# (0x137_0000_0006, not 0x137_0000_0000_0006): so the request/response guide lists them, and
# so the .NET (AmqpSqlFilterCodec) and Java (ServiceBusConstants) SDKs decode them; Java
# refuses a rule whose filter has any other code.
SQL_FILTER = ULong(0x0000001370000006)
TRUE_FILTER = ULong(0x0000001370000007)
FALSE_FILTER = ULong(0x0000001370000008)
CORRELATION_FILTER = ULong(0x0000001370000009)
# AMQP correlation-filter keys → sbctl's correlation filter fields.
CORRELATION_KEYS = {
    "correlation-id": "correlation_id",
    "message-id": "message_id",
    "to": "to",
    "reply-to": "reply_to",
    "label": "subject",
    "session-id": "session_id",
    "reply-to-session-id": "reply_to_session_id",
    "content-type": "content_type",
}


def _map(value: Any) -> Args:
    return Args(value.value if isinstance(value, Described) else value)


def _subscription(path: str) -> tuple[str, str]:
    parsed = parse_entity_path(path)
    if parsed.subscription is None or parsed.subqueue:
        raise BadRequest(f"{path!r} is not a subscription: rules belong to subscriptions")
    return parsed.entity, parsed.subscription


def _correlation_value(value: Any) -> Any:
    """A correlation filter property value as the filter keeps it: every AMQP integer type
    (the JavaScript SDK sends 2 as a uint) an int, a float a float; a timestamp (a
    JavaScript Date) its ISO 8601 UTC text, as the HTTP management API carries a dateTime,
    and a UUID or binary value its text."""
    if isinstance(value, bytes):
        return _text(value)
    kept = plain(typed.property_value(value, "correlation filter property"))
    if isinstance(kept, datetime):
        return kept.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(kept, uuid.UUID):
        return str(kept)
    return kept


def _parameters(section: dict[str, Any]) -> dict[str, Any]:
    """The ``parameters`` map of a sql-filter or sql-rule-action (an sbctl extension: the
    SDKs send expressions only), values as a correlation filter keeps them."""
    params = _map(section.get("parameters"))
    return {name: _correlation_value(value) for name, value in params.items()}


def filter_spec(
    description: dict[str, Any],
) -> tuple[dict[str, Any], str | None, dict[str, Any]]:
    """An AMQP rule-description → (sbctl filter spec, SQL action or None, its parameters)."""
    action_section = _map(description.get("sql-rule-action"))
    action = action_section.get("expression")
    if "sql-filter" in description:
        section = _map(description["sql-filter"])
        expression = section.get("expression")
        spec: dict[str, Any] = {"type": "sql", "sql_expression": _text(expression or "")}
        params = _parameters(section)
        if params:
            spec["parameters"] = params
    elif "correlation-filter" in description:
        spec = _correlation_spec(_map(description["correlation-filter"]))
    else:
        spec = {"type": "true"}
    return spec, _text(action) if action is not None else None, _parameters(action_section)


def _correlation_spec(fields: Args) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "correlation"}
    for key, name in CORRELATION_KEYS.items():
        if fields.get(key) is not None:
            spec[name] = _text(fields[key])
    props = fields.map("properties")
    if props:
        spec["properties"] = {_text(k): _correlation_value(v) for k, v in props.items()}
    return spec


def described_rule(rule: RuleInfo) -> Described:
    """The broker's rule description → the described rule enumerate-rules answers. A SQL
    filter or action with parameters carries them as a third field, after the expression
    and the compatibility level (the SDKs read the first two)."""
    spec = rule.filter
    kind = spec["type"]
    if kind == "sql":
        filt = Described(SQL_FILTER, _sql_fields(spec["sql_expression"], spec.get("parameters")))
    elif kind == "true":
        filt = Described(TRUE_FILTER, ["1=1", 20])
    elif kind == "false":
        filt = Described(FALSE_FILTER, ["1=0", 20])
    else:
        names = list(CORRELATION_KEYS.values())
        filt = Described(
            CORRELATION_FILTER, [spec.get(n) for n in names] + [spec.get("properties") or {}]
        )
    action = (
        Described(SQL_ACTION, _sql_fields(rule.action, rule.action_params))
        if rule.action
        else Described(EMPTY_ACTION, [])
    )
    created = Timestamp(rule.created_at_ms)
    return Described(RULE_DESCRIPTION, [filt, action, rule.name, created])


def _sql_fields(expression: str, parameters: dict[str, Any] | None) -> list[Any]:
    return [expression, 20, parameters] if parameters else [expression, 20]


def add_rule(conn: Host, path: str, args: Args, respond: Respond) -> None:
    topic, sub = _subscription(path)
    name = args.text("rule-name") or ""
    spec, action, params = filter_spec(_map(args.map("rule-description")))
    rule = RuleCreate(conn.namespace, topic, sub, name, spec, action, params)
    run(conn, "rule_create", rule, respond, lambda _rule: respond(200, "OK", None, None))


def remove_rule(conn: Host, path: str, args: Args, respond: Respond) -> None:
    topic, sub = _subscription(path)
    ref = RuleRef(conn.namespace, topic, sub, args.text("rule-name") or "")
    run(conn, "rule_delete", ref, respond, lambda _result: respond(200, "OK", None, None))


def enumerate_rules(conn: Host, path: str, args: Args, respond: Respond) -> None:
    topic, sub = _subscription(path)
    skip = args.integer("skip", 0, high=2**31 - 1)
    top = args.integer("top", 100, high=2**31 - 1) or 100

    def listed(found: list[RuleInfo]) -> None:
        rules = found[skip : skip + top]
        if not rules:
            respond(204, "No Content", None, None)
            return
        body = {"rules": [{"rule-description": described_rule(r)} for r in rules]}
        respond(200, "OK", body, None)

    run(conn, "rule_list", SubscriptionRef(conn.namespace, topic, sub), respond, listed)
