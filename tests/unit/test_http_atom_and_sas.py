"""The HTTP endpoint's Atom XML in and out, and its SharedAccessSignature checks, on bytes."""

from __future__ import annotations

import time
from typing import Any

import pytest
from azure.servicebus.management._generated.models import (
    NamespacePropertiesEntry,
    QueueDescriptionEntry,
    QueueDescriptionFeed,
    RuleDescriptionEntry,
    SubscriptionDescriptionEntry,
    TopicDescriptionEntry,
)

from sbctl.core.durations import MAX_TIMESPAN_MS
from sbctl.core.errors import BadRequest
from sbctld.frontends.http import atom
from sbctld.frontends.http.auth import check_request, covers, make_token
from sbctld.results import NamespaceInfo, QueueInfo, RuleInfo, SubscriptionInfo, TopicInfo

KEY_NAME, KEY = "RootManageSharedAccessKey", "SAS_KEY_VALUE"


def body(inner: str) -> bytes:
    return (
        f'<entry xmlns="{atom.ATOM}"><content type="application/xml">{inner}</content></entry>'
    ).encode()


def test_queue_description_becomes_broker_options() -> None:
    desc = atom.description_of(
        atom.parse(
            body(
                f'<QueueDescription xmlns="{atom.SB}"><LockDuration>PT30S</LockDuration>'
                "<MaxDeliveryCount>7</MaxDeliveryCount><RequiresSession>true</RequiresSession>"
                "<ForwardTo>sb://localhost:5672/target</ForwardTo><SizeInBytes>9</SizeInBytes>"
                "<UserMetadata>hi</UserMetadata></QueueDescription>"
            )
        )
    )
    assert atom.options_from(desc, "QueueDescription") == {
        "lock_duration": 30_000,
        "max_delivery_count": 7,
        "requires_session": True,
        "forward_to": "target",
        "user_metadata": "hi",
    }


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        (b"<entry><content>", "not well-formed"),
        (b'<!DOCTYPE x [<!ENTITY a "b">]><entry/>', "DTD"),
        (
            body(f'<QueueDescription xmlns="{atom.SB}"><Colour>red</Colour></QueueDescription>'),
            "unknown element 'Colour'",
        ),
        (
            body(
                f'<QueueDescription xmlns="{atom.SB}"><MaxDeliveryCount>x</MaxDeliveryCount>'
                "</QueueDescription>"
            ),
            "must be an integer",
        ),
        (
            body(
                f'<QueueDescription xmlns="{atom.SB}"><RequiresSession>yes</RequiresSession>'
                "</QueueDescription>"
            ),
            "true or false",
        ),
        (b"<feed/>", "must be an Atom entry"),
    ],
)
def test_bad_descriptions_are_refused_with_the_reason(xml: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        atom.options_from(atom.description_of(atom.parse(xml)), "QueueDescription")


def test_sql_parameters_are_kept_in_the_rule_and_written_back() -> None:
    kv = (
        "<Parameters><KeyValueOfstringanyType><Key>@p1</Key>"
        f'<Value xmlns:d6p1="{atom.XSD}" i:type="d6p1:string">it\'s</Value>'
        "</KeyValueOfstringanyType><KeyValueOfstringanyType><Key>@p2</Key>"
        f'<Value xmlns:d6p1="{atom.XSD}" i:type="d6p1:int">2</Value>'
        "</KeyValueOfstringanyType></Parameters>"
    )
    desc = atom.description_of(
        atom.parse(
            body(
                f'<RuleDescription xmlns="{atom.SB}" xmlns:i="{atom.XSI}">'
                '<Filter i:type="SqlFilter"><SqlExpression>a = @p1 AND b = @p2</SqlExpression>'
                f"{kv}</Filter>"
                '<Action i:type="SqlRuleAction"><SqlExpression>SET x = @p2</SqlExpression>'
                f"{kv}</Action></RuleDescription>"
            )
        )
    )
    spec = atom.rule_from(desc)
    params = {"@p1": "it's", "@p2": 2}
    assert spec.filter == {
        "type": "sql",
        "sql_expression": "a = @p1 AND b = @p2",
        "parameters": params,
    }
    assert (spec.action, spec.action_parameters) == ("SET x = @p2", params)
    info = RuleInfo(
        name="r", filter=spec.filter, action=spec.action, created_at_ms=0,
        action_parameters=spec.action_parameters,
    )  # fmt: skip
    again = atom.rule_from(atom.parse(atom.rule_xml(info).encode()))
    assert again._replace(name=None) == spec


def test_rule_description_correlation_properties_and_action() -> None:
    desc = atom.description_of(
        atom.parse(
            body(
                f'<RuleDescription xmlns="{atom.SB}" xmlns:i="{atom.XSI}">'
                '<Filter i:type="CorrelationFilter"><CorrelationId>c</CorrelationId>'
                "<Label>L</Label><Properties><KeyValueOfstringanyType><Key>n</Key>"
                f'<Value xmlns:d6p1="{atom.XSD}" i:type="d6p1:int">5</Value>'
                "</KeyValueOfstringanyType></Properties></Filter>"
                '<Action i:type="SqlRuleAction"><SqlExpression>SET x = @v</SqlExpression>'
                "<Parameters><KeyValueOfstringanyType><Key>@v</Key>"
                f'<Value xmlns:d6p1="{atom.XSD}" i:type="d6p1:string">s</Value>'
                "</KeyValueOfstringanyType></Parameters></Action><Name>r</Name>"
                "</RuleDescription>"
            )
        )
    )
    spec, action, name, action_params = atom.rule_from(desc)
    assert spec == {
        "type": "correlation",
        "correlation_id": "c",
        "subject": "L",
        "properties": {"n": 5},
    }
    assert (action, action_params) == ("SET x = @v", {"@v": "s"})
    assert name == "r"


def test_a_subscriptions_default_rule_description_is_read_as_a_rule() -> None:
    """The JavaScript SDK's createSubscription(..., {defaultRuleOptions}) sends the first
    rule inside the SubscriptionDescription as a DefaultRuleDescription."""
    sub = atom.description_of(
        atom.parse(
            body(
                f'<SubscriptionDescription xmlns="{atom.SB}" xmlns:i="{atom.XSI}">'
                "<LockDuration>PT1M</LockDuration><DefaultRuleDescription>"
                '<Filter i:type="SqlFilter"><SqlExpression>Color = @c</SqlExpression>'
                "<Parameters><KeyValueOfstringanyType><Key>@c</Key>"
                f'<Value xmlns:d6p1="{atom.XSD}" i:type="d6p1:string">Blue</Value>'
                "</KeyValueOfstringanyType></Parameters></Filter>"
                '<Action i:type="SqlRuleAction"><SqlExpression>SET Color = 1</SqlExpression>'
                "</Action><Name>BlueRule</Name></DefaultRuleDescription>"
                "</SubscriptionDescription>"
            )
        )
    )
    assert atom.options_from(sub, "SubscriptionDescription") == {"lock_duration": 60_000}
    rule = atom.default_rule_of(sub)
    assert rule is not None
    spec, action, name, _ = atom.rule_from(rule)
    assert spec == {"type": "sql", "sql_expression": "Color = @c", "parameters": {"@c": "Blue"}}
    assert (action, name) == ("SET Color = 1", "BlueRule")
    with pytest.raises(BadRequest, match="expected a RuleDescription in the entry, not 'Sub"):
        atom.rule_from(sub)


JAN_1 = 1_767_225_600_000  # 2026-01-01T00:00:00.000Z
# What the broker describes (sbctld.results), typed: durations and instants in ms.
FIELDS: dict[str, Any] = {
    "name": "q1",
    "max_size_in_megabytes": 1024,
    "max_message_size_in_kilobytes": 256,
    "lock_duration_ms": 60_000,
    "max_delivery_count": 10,
    "default_message_time_to_live_ms": MAX_TIMESPAN_MS,
    "requires_duplicate_detection": False,
    "duplicate_detection_history_time_window_ms": 600_000,
    "requires_session": False,
    "enable_partitioning": False,
    "forward_to": "other",
    "forward_dead_lettered_messages_to": None,
    "dead_lettering_on_message_expiration": False,
    "auto_delete_on_idle_ms": MAX_TIMESPAN_MS,
    "enable_batched_operations": True,
    "enable_express": False,
    "status": "Active",
    "user_metadata": "a<b",
    "created_at_ms": JAN_1,
    "updated_at_ms": JAN_1,
    "accessed_at_ms": JAN_1,
    "active_message_count": 3,
    "deferred_message_count": 0,
    "dead_letter_message_count": 1,
    "scheduled_message_count": 2,
    "transfer_message_count": 0,
    "transfer_dead_letter_message_count": 0,
    "total_message_count": 6,
    "size_in_bytes": 99,
    "corrupt_message_count": 0,
    "partition_count": 1,
    "availability_status": "Available",
    "topic_name": "t",
    "rule_count": 1,
    "support_ordering": False,
    "subscription_count": 0,
    "dead_lettering_on_filter_evaluation_exceptions": False,
}


def described(cls: type[Any], **changes: Any) -> Any:
    return cls(**{k: v for k, v in (FIELDS | changes).items() if k in cls.__struct_fields__})


QUEUE = described(QueueInfo)


def test_the_sdk_reads_what_atom_writes() -> None:
    import xml.etree.ElementTree as ET

    xml = atom.entry(
        "https://h/q1",
        "q1",
        "2026-01-01T00:00:00Z",
        atom.description_xml("QueueDescription", QUEUE, "sb://h/"),
    )
    entry = QueueDescriptionEntry.deserialize(ET.fromstring(atom.document(xml)))
    q = entry.content.queue_description
    assert entry.title == "q1"
    assert q.max_delivery_count == 10 and q.lock_duration.total_seconds() == 60
    assert q.forward_to == "sb://h/other" and q.user_metadata == "a<b"
    assert q.message_count_details.active_message_count == 3
    assert q.message_count_details.scheduled_message_count == 2
    feed = QueueDescriptionFeed.deserialize(
        ET.fromstring(
            atom.document(
                atom.feed(
                    "https://h/x",
                    "Queues",
                    "2026-01-01T00:00:00Z",
                    [xml, xml],
                    "https://h/x?$skip=2&$top=2",
                )
            )
        )
    )
    assert len(feed.entry) == 2 and feed.link[1].href.endswith("$skip=2&$top=2")
    topic = described(TopicInfo, support_ordering=True, subscription_count=4)
    t = TopicDescriptionEntry.deserialize(
        ET.fromstring(
            atom.document(
                atom.entry(
                    "u",
                    "t",
                    "2026-01-01T00:00:00Z",
                    atom.description_xml("TopicDescription", topic, ""),
                )
            )
        )
    )
    assert t.content.topic_description.subscription_count == 4
    sub = described(SubscriptionInfo, dead_lettering_on_filter_evaluation_exceptions=True)
    s = SubscriptionDescriptionEntry.deserialize(
        ET.fromstring(
            atom.document(
                atom.entry(
                    "u",
                    "s",
                    "2026-01-01T00:00:00Z",
                    atom.description_xml("SubscriptionDescription", sub, ""),
                )
            )
        )
    )
    assert s.content.subscription_description.dead_lettering_on_filter_evaluation_exceptions
    rule = RuleInfo(
        name="r",
        filter={"type": "sql", "sql_expression": "a > 1"},
        action="SET a = 1",
        created_at_ms=JAN_1,
    )
    r = RuleDescriptionEntry.deserialize(
        ET.fromstring(
            atom.document(atom.entry("u", "r", "2026-01-01T00:00:00Z", atom.rule_xml(rule)))
        )
    )
    assert r.content.rule_description.filter.sql_expression == "a > 1"
    assert r.content.rule_description.action.sql_expression == "SET a = 1"
    ns = NamespaceInfo(
        name="ns",
        sku="premium",
        premium_messaging_partitions=1,
        capacity=2,
        credits_per_second=None,
        ops_per_unit=2000,
        created_at_ms=JAN_1,
        queue_count=0,
        topic_count=0,
        partitioned_entity_count=0,
        max_message_size_in_kilobytes=102_400,
    )
    n = NamespacePropertiesEntry.deserialize(
        ET.fromstring(
            atom.document(atom.entry("u", "ns", "2026-01-01T00:00:00Z", atom.namespace_xml(ns)))
        )
    )
    assert n.content.namespace_properties.messaging_sku == "Premium"
    assert n.content.namespace_properties.messaging_units == 2


# ------------------------------------------------------------ SAS


def token(audience: str, *, key: str = KEY, expiry: int | None = None, name: str = KEY_NAME) -> str:
    return make_token(audience, name, key, expiry or int(time.time()) + 600)


@pytest.mark.parametrize(
    "audience",
    [
        "https://localhost:5672",
        "https://localhost:5672/",
        "http://localhost/q1",
        "sb://LOCALHOST:5672/q1/messages/head",
        "https://localhost:5672/q1/messages/head?timeout=5",
        "localhost:5300",
    ],
)
def test_a_token_covers_the_namespace_the_entity_or_the_full_url(audience: str) -> None:
    assert (
        check_request(
            token(audience), "localhost:5672", "/q1/messages/head", KEY_NAME, KEY, time.time()
        )
        is None
    )


@pytest.mark.parametrize(
    ("header", "why"),
    [
        (None, "no Authorization header"),
        ("Bearer x", "not a SharedAccessSignature"),
        (token("https://localhost/q1", key="other"), "signature does not match"),
        (token("https://localhost/q1", expiry=1000), "expired"),
        (token("https://localhost/q1", name="Other"), "unknown key name"),
        (token("https://localhost/q2"), "does not cover"),
        (token("https://localhost/q"), "does not cover"),
        (token("https://otherhost/q1"), "does not cover"),
    ],
)
def test_bad_tokens_are_refused_with_the_reason(header: str | None, why: str) -> None:
    result = check_request(header, "localhost:5672", "/q1/messages", KEY_NAME, KEY, time.time())
    assert result is not None and why in result


def test_the_signature_is_over_the_sr_as_sent() -> None:
    good = token("https://localhost/q1")
    tampered = good.replace("q1", "q2")  # the audience changed after signing
    assert "signature" in str(check_request(tampered, "localhost", "/q2", KEY_NAME, KEY, 0))
    assert covers("https://[::1]:5300/", "[::1]:5300", "/x")
