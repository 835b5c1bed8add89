"""Entity descriptions as the Service Bus management API's Atom XML (daemon/README.md §30).

In: the ``<entry><content><QueueDescription>…`` an SDK PUTs → the option names the broker
takes (the CLI's), durations as milliseconds. Elements the broker computes or ignores
(counts, times, ``AuthorizationRules``) are skipped; an element of no description is a
one-line error. Documents with a DTD or entities are refused before parsing.

Out: the broker's typed descriptions (sbctld.results) → ``<entry>`` and ``<feed>``
documents shaped as the service answers them, which the SDKs' deserializers read; durations
are written as ``xs:duration`` and instants as ``xs:dateTime`` here.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, NamedTuple
from xml.sax.saxutils import escape, quoteattr

from sbctl.core.durations import format_duration_iso, format_instant, parse_duration_ms
from sbctl.core.errors import BadRequest
from sbctld.results import NamespaceInfo, QueueInfo, RuleInfo, SubscriptionInfo, TopicInfo

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
SB11 = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"

# XML element → (broker option, kind). Kinds: int, bool, duration, str, status, entity.
QUEUE_FIELDS: dict[str, tuple[str, str]] = {
    "LockDuration": ("lock_duration", "duration"),
    "MaxSizeInMegabytes": ("max_size_in_megabytes", "int"),
    "RequiresDuplicateDetection": ("requires_duplicate_detection", "bool"),
    "RequiresSession": ("requires_session", "bool"),
    "DefaultMessageTimeToLive": ("default_message_time_to_live", "duration"),
    "DeadLetteringOnMessageExpiration": ("dead_lettering_on_message_expiration", "bool"),
    "DuplicateDetectionHistoryTimeWindow": ("duplicate_detection_history_time_window", "duration"),
    "MaxDeliveryCount": ("max_delivery_count", "int"),
    "EnableBatchedOperations": ("enable_batched_operations", "bool"),
    "Status": ("status", "str"),
    "AutoDeleteOnIdle": ("auto_delete_on_idle", "duration"),
    "EnablePartitioning": ("enable_partitioning", "bool"),
    "ForwardTo": ("forward_to", "entity"),
    "UserMetadata": ("user_metadata", "str"),
    "ForwardDeadLetteredMessagesTo": ("forward_dead_lettered_messages_to", "entity"),
}
TOPIC_FIELDS = {
    k: QUEUE_FIELDS[k]
    for k in (
        "DefaultMessageTimeToLive",
        "MaxSizeInMegabytes",
        "RequiresDuplicateDetection",
        "DuplicateDetectionHistoryTimeWindow",
        "EnableBatchedOperations",
        "Status",
        "AutoDeleteOnIdle",
        "EnablePartitioning",
        "UserMetadata",
    )
} | {"SupportOrdering": ("support_ordering", "bool")}
SUBSCRIPTION_FIELDS = {
    k: QUEUE_FIELDS[k]
    for k in (
        "LockDuration",
        "RequiresSession",
        "DefaultMessageTimeToLive",
        "DeadLetteringOnMessageExpiration",
        "MaxDeliveryCount",
        "EnableBatchedOperations",
        "Status",
        "ForwardTo",
        "AutoDeleteOnIdle",
        "UserMetadata",
        "ForwardDeadLetteredMessagesTo",
    )
} | {
    "DeadLetteringOnFilterEvaluationExceptions": (
        "dead_lettering_on_filter_evaluation_exceptions",
        "bool",
    )
}
# Read-only or not modelled: accepted and ignored (the SDKs send some of them back).
IGNORED = frozenset(
    {
        "AuthorizationRules",
        "IsAnonymousAccessible",
        "EntityAvailabilityStatus",
        "CreatedAt",
        "UpdatedAt",
        "AccessedAt",
        "SizeInBytes",
        "MessageCount",
        "CountDetails",
        "MessageCountDetails",
        "SubscriptionCount",
        "FilteringMessagesBeforePublishing",
        "EnableSubscriptionPartitioning",
        "MaxMessageSizeInKilobytes",
        "SupportOrdering",  # on a queue
        "EnableExpress",  # checked separately: true is refused
        "SqlFilterCount",
        "CorrelationFilterCount",
    }
)
KINDS = {
    "QueueDescription": QUEUE_FIELDS,
    "TopicDescription": TOPIC_FIELDS,
    "SubscriptionDescription": SUBSCRIPTION_FIELDS,
}
CORRELATION_FIELDS = {
    "CorrelationId": "correlation_id",
    "MessageId": "message_id",
    "To": "to",
    "ReplyTo": "reply_to",
    "Label": "subject",
    "SessionId": "session_id",
    "ReplyToSessionId": "reply_to_session_id",
    "ContentType": "content_type",
}
_DTD = re.compile(rb"<!(DOCTYPE|ENTITY)", re.IGNORECASE)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse(body: bytes) -> ET.Element:
    """Parse a request body; refuses DTDs and entity declarations."""
    if _DTD.search(body):
        raise BadRequest("the XML body has a DTD or entity declaration, which is not allowed")
    try:
        return ET.fromstring(body)
    except ET.ParseError as exc:
        raise BadRequest(f"the body is not well-formed XML: {exc}") from None


def description_of(root: ET.Element) -> ET.Element:
    """``<entry><content><XDescription>`` → the description element."""
    if _local(root.tag) != "entry":
        raise BadRequest(f"the body must be an Atom entry, not '{_local(root.tag)}'")
    content = next((c for c in root if _local(c.tag) == "content"), None)
    if content is None:
        raise BadRequest("the Atom entry has no content element")
    described = [c for c in content if isinstance(c.tag, str)]
    if len(described) != 1:
        raise BadRequest("the Atom content must hold exactly one description element")
    return described[0]


def _value(elem: ET.Element, option: str, kind: str) -> Any:
    text = (elem.text or "").strip()
    if kind == "int":
        try:
            return int(text)
        except ValueError:
            raise BadRequest(f"{_local(elem.tag)} must be an integer, not {text!r}") from None
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise BadRequest(f"{_local(elem.tag)} must be true or false, not {text!r}")
        return text.lower() == "true"
    if kind == "duration":
        return parse_duration_ms(text)
    if kind == "entity":
        return entity_name(text) or None
    return text if text or option != "user_metadata" else None


def entity_name(text: str) -> str:
    """``sb://host/queue`` (how the SDKs send ForwardTo) or ``queue`` → ``queue``."""
    text = text.strip()
    if "://" in text:
        rest = text.split("://", 1)[1]
        text = rest.split("/", 1)[1] if "/" in rest else ""
    return text.strip("/")


def options_from(desc: ET.Element, kind: str) -> dict[str, Any]:
    """A Queue/Topic/SubscriptionDescription element → broker options."""
    name = _local(desc.tag)
    if name != kind:
        raise BadRequest(f"expected a '{kind}' in the entry, not '{name}'")
    fields = KINDS[kind]
    options: dict[str, Any] = {}
    for child in desc:
        if not isinstance(child.tag, str):
            continue
        tag = _local(child.tag)
        if tag in fields:
            option, what = fields[tag]
            options[option] = _value(child, option, what)
        elif tag == "EnableExpress":
            if (child.text or "").strip().lower() == "true":
                raise BadRequest("express entities are not supported (EnableExpress)")
        elif tag in IGNORED or (tag == "DefaultRuleDescription" and kind.startswith("Sub")):
            continue
        else:
            raise BadRequest(f"unknown element '{tag}' in {kind}")
    return options


def default_rule_of(desc: ET.Element) -> ET.Element | None:
    return next((c for c in desc if _local(str(c.tag)) == "DefaultRuleDescription"), None)


# ------------------------------------------------------------ rules


def _typed_value(elem: ET.Element) -> Any:
    """A ``<Value i:type="d6p1:int">2</Value>`` → 2."""
    kind = ""
    for attr, value in elem.attrib.items():
        if _local(attr) == "type":
            kind = value.rsplit(":", 1)[-1]
    text = elem.text or ""
    try:
        if kind in ("int", "long", "short", "byte", "unsignedInt", "unsignedLong"):
            return int(text)
        if kind in ("double", "float", "decimal"):
            return float(text)
    except ValueError:
        raise BadRequest(f"the {kind} value {text!r} is not a number") from None
    if kind == "boolean":
        return text.strip().lower() == "true"
    if kind in ("string", "", "dateTime", "duration", "guid"):
        return text
    raise BadRequest(f"values of type {kind!r} are not supported in rules")


def key_values(parent: ET.Element | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if parent is None:
        return out
    for kv in parent:
        key = next((c for c in kv if _local(c.tag) == "Key"), None)
        value = next((c for c in kv if _local(c.tag) == "Value"), None)
        if key is None or value is None:
            raise BadRequest(f"'{_local(kv.tag)}' needs a Key and a Value")
        out[key.text or ""] = _typed_value(value)
    return out


def _child(elem: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in elem if _local(str(c.tag)) == name), None)


def _xsi_type(elem: ET.Element) -> str:
    for attr, value in elem.attrib.items():
        if _local(attr) == "type":
            return value.rsplit(":", 1)[-1]
    return ""


class RuleSpec(NamedTuple):
    """A RuleDescription as the broker takes it."""

    filter: dict[str, Any]  # a filter spec; a SQL one with its "parameters", if any
    action: str | None
    name: str | None
    action_parameters: dict[str, Any]


def rule_from(desc: ET.Element) -> RuleSpec:
    """A RuleDescription → the rule; SQL ``Parameters`` are kept beside their expressions
    (the broker evaluates them), so the rule reads back as it was sent."""
    tag = _local(desc.tag)
    # A subscription's entry carries its first rule as DefaultRuleDescription (the
    # JavaScript SDK's createSubscription(..., {defaultRuleOptions})), of the same type.
    if tag not in ("RuleDescription", "DefaultRuleDescription"):
        raise BadRequest(f"expected a RuleDescription in the entry, not '{tag}'")
    for child in desc:
        if _local(str(child.tag)) not in ("Filter", "Action", "Name", "CreatedAt"):
            raise BadRequest(f"unknown element '{_local(str(child.tag))}' in {tag}")
    filt = _child(desc, "Filter")
    spec = {"type": "true"} if filt is None else _filter_spec(filt)
    action, action_parameters = _action(_child(desc, "Action"))
    name = _child(desc, "Name")
    return RuleSpec(spec, action, name.text if name is not None else None, action_parameters)


def _sql(elem: ET.Element) -> tuple[str, dict[str, Any]]:
    """A SqlFilter's or SqlRuleAction's expression and parameters."""
    expr = _child(elem, "SqlExpression")
    text = (expr.text or "") if expr is not None else ""
    return text, key_values(_child(elem, "Parameters"))


def _filter_spec(filt: ET.Element) -> dict[str, Any]:
    kind = _xsi_type(filt)
    if kind == "TrueFilter":
        return {"type": "true"}
    if kind == "FalseFilter":
        return {"type": "false"}
    if kind == "SqlFilter":
        text, params = _sql(filt)
        spec = {"type": "sql", "sql_expression": text}
        return spec | {"parameters": params} if params else spec
    if kind == "CorrelationFilter":
        return _correlation(filt)
    raise BadRequest(f"unknown filter type {kind!r}")


def _correlation(filt: ET.Element) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "correlation"}
    for child in filt:
        tag = _local(str(child.tag))
        if tag in CORRELATION_FIELDS:
            if child.text:
                spec[CORRELATION_FIELDS[tag]] = child.text
        elif tag == "Properties":
            props = key_values(child)
            if props:
                spec["properties"] = props
        else:
            raise BadRequest(f"unknown element '{tag}' in CorrelationFilter")
    return spec


def _action(act: ET.Element | None) -> tuple[str | None, dict[str, Any]]:
    if act is None or _xsi_type(act) in ("EmptyRuleAction", ""):
        return None, {}
    if _xsi_type(act) != "SqlRuleAction":
        raise BadRequest(f"unknown action type {_xsi_type(act)!r}")
    text, params = _sql(act)
    return text or None, params


# ------------------------------------------------------------ out

Out = dict[str, Any]
Description = QueueInfo | TopicInfo | SubscriptionInfo
INSTANTS = frozenset({"created_at_ms", "updated_at_ms", "accessed_at_ms"})
# XML element → the description's field (None: a constant); fields ending in _ms are
# durations (xs:duration) or, in INSTANTS, instants (xs:dateTime).
DESCRIPTION_ORDER: dict[str, list[tuple[str, str | None]]] = {
    "QueueDescription": [
        ("LockDuration", "lock_duration_ms"),
        ("MaxSizeInMegabytes", "max_size_in_megabytes"),
        ("RequiresDuplicateDetection", "requires_duplicate_detection"),
        ("RequiresSession", "requires_session"),
        ("DefaultMessageTimeToLive", "default_message_time_to_live_ms"),
        ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration"),
        ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_history_time_window_ms"),
        ("MaxDeliveryCount", "max_delivery_count"),
        ("EnableBatchedOperations", "enable_batched_operations"),
        ("SizeInBytes", "size_in_bytes"),
        ("MessageCount", "total_message_count"),
        ("IsAnonymousAccessible", None),
        ("Status", "status"),
        ("ForwardTo", "forward_to"),
        ("UserMetadata", "user_metadata"),
        ("CreatedAt", "created_at_ms"),
        ("UpdatedAt", "updated_at_ms"),
        ("AccessedAt", "accessed_at_ms"),
        ("SupportOrdering", None),
        ("CountDetails", "counts"),
        ("AutoDeleteOnIdle", "auto_delete_on_idle_ms"),
        ("EnablePartitioning", "enable_partitioning"),
        ("EntityAvailabilityStatus", "availability_status"),
        ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to"),
        ("EnableExpress", "enable_express"),
        ("MaxMessageSizeInKilobytes", "max_message_size_in_kilobytes"),
    ],
    "TopicDescription": [
        ("DefaultMessageTimeToLive", "default_message_time_to_live_ms"),
        ("MaxSizeInMegabytes", "max_size_in_megabytes"),
        ("RequiresDuplicateDetection", "requires_duplicate_detection"),
        ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_history_time_window_ms"),
        ("EnableBatchedOperations", "enable_batched_operations"),
        ("SizeInBytes", "size_in_bytes"),
        ("FilteringMessagesBeforePublishing", None),
        ("IsAnonymousAccessible", None),
        ("Status", "status"),
        ("UserMetadata", "user_metadata"),
        ("CreatedAt", "created_at_ms"),
        ("UpdatedAt", "updated_at_ms"),
        ("AccessedAt", "accessed_at_ms"),
        ("SupportOrdering", "support_ordering"),
        ("CountDetails", "counts"),
        ("SubscriptionCount", "subscription_count"),
        ("AutoDeleteOnIdle", "auto_delete_on_idle_ms"),
        ("EnablePartitioning", "enable_partitioning"),
        ("EntityAvailabilityStatus", "availability_status"),
        ("EnableSubscriptionPartitioning", None),
        ("EnableExpress", "enable_express"),
        ("MaxMessageSizeInKilobytes", "max_message_size_in_kilobytes"),
    ],
    "SubscriptionDescription": [
        ("LockDuration", "lock_duration_ms"),
        ("RequiresSession", "requires_session"),
        ("DefaultMessageTimeToLive", "default_message_time_to_live_ms"),
        ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration"),
        (
            "DeadLetteringOnFilterEvaluationExceptions",
            "dead_lettering_on_filter_evaluation_exceptions",
        ),
        ("MessageCount", "total_message_count"),
        ("MaxDeliveryCount", "max_delivery_count"),
        ("EnableBatchedOperations", "enable_batched_operations"),
        ("Status", "status"),
        ("ForwardTo", "forward_to"),
        ("UserMetadata", "user_metadata"),
        ("CreatedAt", "created_at_ms"),
        ("UpdatedAt", "updated_at_ms"),
        ("AccessedAt", "accessed_at_ms"),
        ("CountDetails", "counts"),
        ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to"),
        ("AutoDeleteOnIdle", "auto_delete_on_idle_ms"),
        ("EntityAvailabilityStatus", "availability_status"),
    ],
}
COUNTS = [
    ("ActiveMessageCount", "active_message_count"),
    ("DeadLetterMessageCount", "dead_letter_message_count"),
    ("ScheduledMessageCount", "scheduled_message_count"),
    ("TransferMessageCount", "transfer_message_count"),
    ("TransferDeadLetterMessageCount", "transfer_dead_letter_message_count"),
]


def _text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if key in INSTANTS:
        return format_instant(value)
    if key.endswith("_ms"):
        return format_duration_iso(value)
    return escape(str(value))


def _counts(desc: Description) -> str:
    parts = [f'<CountDetails xmlns:d2p1="{SB11}">']
    for tag, key in COUNTS:
        parts.append(f"<d2p1:{tag}>{int(getattr(desc, key, 0) or 0)}</d2p1:{tag}>")
    parts.append("</CountDetails>")
    return "".join(parts)


def description_xml(kind: str, desc: Description, forward_base: str) -> str:
    """A broker description → ``<QueueDescription …>…</QueueDescription>`` (etc.)."""
    parts = [f'<{kind} xmlns="{SB}" xmlns:i="{XSI}">']
    for tag, key in DESCRIPTION_ORDER[kind]:
        value = None if key is None else getattr(desc, key, None)
        if key is None:
            parts.append(f"<{tag}>{'true' if tag == 'SupportOrdering' else 'false'}</{tag}>")
        elif key == "counts":
            parts.append(_counts(desc))
        elif key in ("forward_to", "forward_dead_lettered_messages_to"):
            if value:
                parts.append(f"<{tag}>{escape(forward_base + value)}</{tag}>")
        elif key == "size_in_bytes" and value is None:
            parts.append(f"<{tag}>0</{tag}>")
        elif value is not None:
            parts.append(f"<{tag}>{_text(key, value)}</{tag}>")
    parts.append(f"</{kind}>")
    return "".join(parts)


def _kv(tag: str, values: dict[str, Any] | None) -> str:
    parts = [f"<{tag}>"]
    for key, value in (values or {}).items():
        if value is None:
            parts.append(
                f"<KeyValueOfstringanyType><Key>{escape(key)}</Key>"
                '<Value i:nil="true"/></KeyValueOfstringanyType>'
            )
            continue
        if isinstance(value, bool):
            kind, text = "boolean", "true" if value else "false"
        elif isinstance(value, int):
            kind, text = ("int" if -(2**31) <= value < 2**31 else "long"), str(value)
        elif isinstance(value, float):
            kind, text = "double", repr(value)
        else:
            kind, text = "string", str(value)
        parts.append(
            f"<KeyValueOfstringanyType><Key>{escape(key)}</Key>"
            f'<Value xmlns:d6p1="{XSD}" i:type="d6p1:{kind}">{escape(text)}</Value>'
            "</KeyValueOfstringanyType>"
        )
    parts.append(f"</{tag}>")
    return "".join(parts)


def rule_xml(rule: RuleInfo) -> str:
    spec = rule.filter
    kind = spec["type"]
    if kind in ("sql", "true", "false"):
        xsi = {"sql": "SqlFilter", "true": "TrueFilter", "false": "FalseFilter"}[kind]
        expr = spec.get("sql_expression") or ("1=1" if kind == "true" else "1=0")
        params = spec.get("parameters")
        kv = _kv("Parameters", params) if params else ""
        filt = (
            f'<Filter i:type="{xsi}"><SqlExpression>{escape(expr)}</SqlExpression>{kv}'
            "<CompatibilityLevel>20</CompatibilityLevel></Filter>"
        )
    else:
        inner = "".join(
            f"<{tag}>{escape(str(spec[key]))}</{tag}>"
            for tag, key in CORRELATION_FIELDS.items()
            if spec.get(key) is not None
        )
        filt = (
            f'<Filter i:type="CorrelationFilter">{inner}'
            f"{_kv('Properties', spec.get('properties'))}</Filter>"
        )
    return (
        f'<RuleDescription xmlns="{SB}" xmlns:i="{XSI}">{filt}{_action_xml(rule)}'
        f"<CreatedAt>{format_instant(rule.created_at_ms)}</CreatedAt>"
        f"<Name>{escape(rule.name)}</Name></RuleDescription>"
    )


def _action_xml(rule: RuleInfo) -> str:
    if not rule.action:
        return '<Action i:type="EmptyRuleAction"/>'
    params = rule.action_params
    kv = _kv("Parameters", params) if params else ""
    return (
        f'<Action i:type="SqlRuleAction"><SqlExpression>{escape(rule.action)}'
        f"</SqlExpression>{kv}<CompatibilityLevel>20</CompatibilityLevel></Action>"
    )


def namespace_xml(ns: NamespaceInfo) -> str:
    sku = ns.sku.capitalize()
    units = ns.capacity or 0
    created = format_instant(ns.created_at_ms)
    return (
        f'<NamespaceInfo xmlns="{SB}" xmlns:i="{XSI}"><CreatedTime>{created}</CreatedTime>'
        f"<MessagingSKU>{sku}</MessagingSKU><MessagingUnits>{int(units)}</MessagingUnits>"
        f"<ModifiedTime>{created}</ModifiedTime><Name>{escape(ns.name)}</Name>"
        "<NamespaceType>Messaging</NamespaceType></NamespaceInfo>"
    )


def entry(url: str, title: str, updated: str, content: str, author: str = "") -> str:
    return (
        f'<entry xmlns="{ATOM}"><id>{escape(url)}</id>'
        f'<title type="text">{escape(title)}</title>'
        f"<published>{escape(updated)}</published><updated>{escape(updated)}</updated>"
        f"<author><name>{escape(author)}</name></author>"
        f'<link rel="self" href={quoteattr(url)}/>'
        f'<content type="application/xml">{content}</content></entry>'
    )


def feed(url: str, title: str, updated: str, entries: list[str], next_url: str | None) -> str:
    links = f'<link rel="self" href={quoteattr(url)}/>'
    if next_url is not None:
        links += f'<link rel="next" href={quoteattr(next_url)}/>'
    return (
        f'<feed xmlns="{ATOM}"><title type="text">{escape(title)}</title>'
        f"<id>{escape(url)}</id><updated>{escape(updated)}</updated>{links}"
        + "".join(entries)
        + "</feed>"
    )


def error_xml(status: int, detail: str) -> str:
    return f"<Error><Code>{status}</Code><Detail>{escape(detail)}</Detail></Error>"


def document(xml: str) -> bytes:
    return b'<?xml version="1.0" encoding="utf-8"?>' + xml.encode()
