"""sbctl.emulator_config: the official emulator's Config.json read, applied and written
back, against an in-memory stand-in for the client (no daemon)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from sbctl.core.durations import MAX_TIMESPAN_MS, format_duration_iso, parse_duration_ms
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessagingEntityAlreadyExists,
    MessagingEntityNotFound,
)
from sbctl.emulator_config import (
    NAMESPACE_PROPS,
    QUEUE_PROPS,
    SUBSCRIPTION_PROPS,
    TOPIC_PROPS,
    ConfigPlan,
    apply_config,
    export_config,
    load_config,
    parse_config,
)

DATA = Path(__file__).parent.parent / "data" / "emulator_config"
OFFICIAL_FILES = sorted(p.name for p in DATA.glob("*.json"))

# The property names of ServiceBus-Emulator/Schema/Config-schema.json
# (github.com/Azure/azure-service-bus-emulator-installer), level by level.
OFFICIAL_SCHEMA: dict[str, dict[str, Any]] = {
    "queue": {
        "DeadLetteringOnMessageExpiration": False,
        "DefaultMessageTimeToLive": "PT1H",
        "DuplicateDetectionHistoryTimeWindow": "PT20S",
        "ForwardDeadLetteredMessagesTo": "",
        "ForwardTo": "",
        "LockDuration": "PT1M",
        "MaxDeliveryCount": 3,
        "RequiresDuplicateDetection": False,
        "RequiresSession": False,
    },
    "topic": {
        "DefaultMessageTimeToLive": "PT1H",
        "DuplicateDetectionHistoryTimeWindow": "PT20S",
        "RequiresDuplicateDetection": False,
    },
    "subscription": {
        "DeadLetteringOnMessageExpiration": False,
        "DefaultMessageTimeToLive": "PT1H",
        "LockDuration": "PT1M",
        "MaxDeliveryCount": 3,
        "ForwardDeadLetteredMessagesTo": "",
        "ForwardTo": "",
        "RequiresSession": False,
    },
    "correlation": {
        "ContentType": "application/text",
        "CorrelationId": "id1",
        "Label": "subject1",
        "MessageId": "msgid1",
        "ReplyTo": "someQueue",
        "ReplyToSessionId": "sessionId",
        "SessionId": "session1",
        "To": "xyz",
        "Properties": {"prop1": "value1"},
    },
}


def base() -> dict[str, Any]:
    """A small config in the official shape, for the error-path tests to break."""
    return {
        "UserConfig": {
            "Namespaces": [
                {
                    "Name": "sbemulatorns",
                    "Queues": [{"Name": "q1", "Properties": {"LockDuration": "PT1M"}}],
                    "Topics": [
                        {
                            "Name": "t1",
                            "Properties": {"DefaultMessageTimeToLive": "PT1H"},
                            "Subscriptions": [
                                {
                                    "Name": "s1",
                                    "Properties": {"MaxDeliveryCount": 3},
                                    "Rules": [
                                        {
                                            "Name": "r1",
                                            "Properties": {
                                                "FilterType": "Sql",
                                                "SqlFilter": {"SqlExpression": "a = 1"},
                                            },
                                        }
                                    ],
                                }
                            ],
                        }
                    ],
                }
            ],
            "Logging": {"Type": "File"},
        }
    }


def error_of(doc: Any) -> str:
    with pytest.raises(BadRequest) as info:
        parse_config(doc)
    return info.value.message


# -- the official configs


@pytest.mark.parametrize("name", OFFICIAL_FILES)
def test_official_configs_parse(name: str) -> None:
    plan = load_config((DATA / name).read_text(encoding="utf-8"), name)
    assert [ns.name for ns in plan.namespaces] == ["sbemulatorns"]
    assert plan.warnings == ()


def test_sql_action_config_in_detail() -> None:
    plan = load_config((DATA / "sql_action_config.json").read_text())
    (ns,) = plan.namespaces
    (queue,) = ns.queues
    assert queue.path == "UserConfig.Namespaces[0].Queues[0]"
    assert queue.options == {
        "dead_lettering_on_message_expiration": True,
        "default_message_time_to_live": 2 * 3_600_000,
        "duplicate_detection_history_time_window": 45_000,
        "forward_dead_lettered_messages_to": None,
        "forward_to": None,
        "lock_duration": 40_000,
        "max_delivery_count": 6,
        "requires_duplicate_detection": False,
        "requires_session": False,
    }
    (topic,) = ns.topics
    subs = {s.name: s for s in topic.subscriptions}
    assert list(subs) == ["by-headers", "by-app-props", "everything", "refunds"]
    (rule,) = subs["by-headers"].rules or ()
    assert rule.path == "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0]"
    assert rule.filter == {
        "type": "correlation",
        "content_type": "application/json",
        "correlation_id": "order-7731",
        "subject": "order.placed",
        "message_id": "msg-7731-a",
        "reply_to": "order-replies",
        "reply_to_session_id": "replies-s1",
        "session_id": "cart-42",
        "to": "fulfilment",
    }
    assert rule.action is None
    (user,) = subs["by-app-props"].rules or ()
    assert user.filter == {"type": "correlation", "properties": {"region": "emea", "tier": "gold"}}
    assert subs["everything"].rules is None  # no Rules: $Default stays
    (sql,) = subs["refunds"].rules or ()
    assert sql.filter == {
        "type": "sql",
        "sql_expression": "sys.Label = 'refund.requested' AND channel LIKE 'web%'",
    }
    assert sql.action == "SET sys.To = 'refund-desk'"


def test_queues_only_config_has_no_topics_key() -> None:
    text = (DATA / "queues_only_config.json").read_text()
    assert "Topics" not in json.loads(text)["UserConfig"]["Namespaces"][0]
    plan = load_config(text)
    (ns,) = plan.namespaces
    assert [q.name for q in ns.queues] == ["thumbnail-jobs", "email-outbox", "ledger-sync"]
    assert ns.topics == ()
    assert ns.queues[2].options["dead_lettering_on_message_expiration"] is True


def test_partial_properties_set_only_what_they_name() -> None:
    plan = load_config((DATA / "partial_config.json").read_text())
    (ns,) = plan.namespaces
    assert ns.queues[0].options == {
        "lock_duration": 30_000,
        "max_delivery_count": 7,
        "default_message_time_to_live": 86_400_000,
        "dead_lettering_on_message_expiration": True,
    }
    assert ns.queues[1].options == {
        "requires_duplicate_detection": True,
        "duplicate_detection_history_time_window": 5 * 60_000,
        "max_delivery_count": 2,
    }
    assert ns.topics[0].options == {
        "requires_duplicate_detection": True,
        "duplicate_detection_history_time_window": 10 * 60_000,
    }
    assert ns.topics[0].subscriptions[0].options == {
        "lock_duration": 30_000,
        "max_delivery_count": 7,
        "dead_lettering_on_message_expiration": True,
    }
    assert ns.topics[0].subscriptions[1].options == {}  # no Properties at all


def test_every_official_schema_property_is_accepted_and_not_an_extra() -> None:
    doc = base()
    ns = doc["UserConfig"]["Namespaces"][0]
    ns["Queues"][0]["Properties"] = dict(OFFICIAL_SCHEMA["queue"])
    ns["Topics"][0]["Properties"] = dict(OFFICIAL_SCHEMA["topic"])
    sub = ns["Topics"][0]["Subscriptions"][0]
    sub["Properties"] = dict(OFFICIAL_SCHEMA["subscription"])
    sub["Rules"].append(
        {
            "Name": "r2",
            "Properties": {
                "FilterType": "Correlation",
                "CorrelationFilter": OFFICIAL_SCHEMA["correlation"],
                "Action": {"SqlExpression": "SET x = 1"},
            },
        }
    )
    doc["UserConfig"]["Logging"] = {"Type": "File,Console"}
    plan = parse_config(doc)
    assert len(plan.namespaces[0].queues[0].options) == len(OFFICIAL_SCHEMA["queue"])
    for level, table in (
        ("queue", QUEUE_PROPS),
        ("topic", TOPIC_PROPS),
        ("subscription", SUBSCRIPTION_PROPS),
    ):
        official = {name for name, prop in table.items() if not prop.extra}
        assert official == set(OFFICIAL_SCHEMA[level]), level
    assert all(prop.extra for prop in NAMESPACE_PROPS.values())


def test_extras() -> None:
    doc = base()
    ns = doc["UserConfig"]["Namespaces"][0]
    ns["Properties"] = {"Sku": "Premium", "PremiumMessagingPartitions": 2, "Capacity": 4}
    ns["Queues"][0]["Properties"] = {
        "MaxSizeInMegabytes": 2048,
        "EnablePartitioning": True,
        "AutoDeleteOnIdle": "P7D",
        "Status": "SendDisabled",
        "EnableBatchedOperations": False,
        "UserMetadata": "owner: billing",
    }
    ns["Topics"][0]["Properties"] = {"SupportOrdering": False, "Status": "Disabled"}
    sub = ns["Topics"][0]["Subscriptions"][0]
    sub["Properties"] = {"DeadLetteringOnFilterEvaluationExceptions": False, "UserMetadata": ""}
    plan = parse_config(doc).namespaces[0]
    assert plan.options == {"sku": "premium", "premium_messaging_partitions": 2, "capacity": 4}
    assert plan.queues[0].options == {
        "max_size_in_megabytes": 2048,
        "enable_partitioning": True,
        "auto_delete_on_idle": 7 * 86_400_000,
        "status": "SendDisabled",
        "enable_batched_operations": False,
        "user_metadata": "owner: billing",
    }
    assert plan.topics[0].options == {"support_ordering": False, "status": "Disabled"}
    assert plan.topics[0].subscriptions[0].options == {
        "dead_lettering_on_filter_evaluation_exceptions": False,
        "user_metadata": None,
    }


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1M", 60_000),
        ("PT20S", 20_000),
        ("PT0.5S", 500),
        ("P1DT2H", 26 * 3_600_000),
        ("P2W", 14 * 86_400_000),
        ("P1Y", 365 * 86_400_000),  # .NET XmlConvert.ToTimeSpan: a year is 365 days
        ("P1M", 30 * 86_400_000),  # and a month 30; PT1M is a minute
        ("P1Y2M3DT4H", (365 + 60 + 3) * 86_400_000 + 4 * 3_600_000),
        ("P10675199DT2H48M5.4775807S", MAX_TIMESPAN_MS),
        ("30s", 30_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    doc = base()
    doc["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"]["LockDuration"] = text
    assert parse_config(doc).namespaces[0].queues[0].options["lock_duration"] == ms


def test_empty_rules_keep_default_and_forward_empty_is_unset() -> None:
    doc = base()
    sub = doc["UserConfig"]["Namespaces"][0]["Topics"][0]["Subscriptions"][0]
    sub["Rules"] = []
    sub["Properties"] = {"ForwardTo": "", "ForwardDeadLetteredMessagesTo": "q1"}
    plan = parse_config(doc).namespaces[0].topics[0].subscriptions[0]
    assert plan.rules is None
    assert plan.options == {"forward_to": None, "forward_dead_lettered_messages_to": "q1"}


def test_both_filters_warn_and_the_chosen_one_wins() -> None:
    doc = base()
    rule = doc["UserConfig"]["Namespaces"][0]["Topics"][0]["Subscriptions"][0]["Rules"][0]
    rule["Properties"]["CorrelationFilter"] = {"To": "x"}
    plan = parse_config(doc)
    assert plan.warnings == (
        "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules[0].Properties"
        '.CorrelationFilter: ignored, because FilterType is "Sql"',
    )
    rules = plan.namespaces[0].topics[0].subscriptions[0].rules or ()
    assert rules[0].filter == {"type": "sql", "sql_expression": "a = 1"}


def test_schema_key_and_bom_are_accepted() -> None:
    doc = base()
    doc["$schema"] = "https://example.invalid/Config-schema.json"
    plan = load_config("\ufeff" + json.dumps(doc))
    assert plan.namespaces[0].name == "sbemulatorns"


# -- every refusal names its JSON path

NS0 = "UserConfig.Namespaces[0]"
Q0 = f"{NS0}.Queues[0]"
SUB0 = f"{NS0}.Topics[0].Subscriptions[0]"
RULE0 = f"{SUB0}.Rules[0]"


def _queue_props(doc: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = doc["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"]
    return props


def _sub(doc: dict[str, Any]) -> dict[str, Any]:
    sub: dict[str, Any] = doc["UserConfig"]["Namespaces"][0]["Topics"][0]["Subscriptions"][0]
    return sub


def _rule_props(doc: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = _sub(doc)["Rules"][0]["Properties"]
    return props


CASES: list[tuple[str, Any, str]] = [
    (
        "unknown queue property, with a suggestion",
        lambda d: _queue_props(d).update(LockDuraton="PT1M"),
        f'{Q0}.Properties.LockDuraton: unknown property; did you mean "LockDuration"?',
    ),
    (
        "keys are case-sensitive, with a suggestion",
        lambda d: _queue_props(d).update(maxdeliverycount=3),
        f'{Q0}.Properties.maxdeliverycount: unknown property; did you mean "MaxDeliveryCount"?',
    ),
    (
        "unknown top-level key",
        lambda d: d.update(Custom=42),
        "Custom: unknown property; expected one of $schema, UserConfig",
    ),
    (
        "unknown namespace key",
        lambda d: d["UserConfig"]["Namespaces"][0].update(Queue=[]),
        f'{NS0}.Queue: unknown property; did you mean "Queues"?',
    ),
    (
        "FilterType",
        lambda d: _rule_props(d).update(FilterType="Foo"),
        f'{RULE0}.Properties.FilterType: expected "Sql" or "Correlation", got "Foo"',
    ),
    (
        "FilterType is case-sensitive",
        lambda d: _rule_props(d).update(FilterType="sql"),
        f'{RULE0}.Properties.FilterType: expected "Sql" or "Correlation", got "sql"',
    ),
    (
        "FilterType missing",
        lambda d: _rule_props(d).pop("FilterType"),
        f"{RULE0}.Properties.FilterType: required property is missing",
    ),
    (
        "Sql without SqlFilter",
        lambda d: _rule_props(d).pop("SqlFilter"),
        f'{RULE0}.Properties.SqlFilter: required when FilterType is "Sql"',
    ),
    (
        "Correlation without CorrelationFilter",
        lambda d: _rule_props(d).update(FilterType="Correlation"),
        f'{RULE0}.Properties.CorrelationFilter: required when FilterType is "Correlation"',
    ),
    (
        "empty SqlExpression",
        lambda d: _rule_props(d).update(SqlFilter={"SqlExpression": "  "}),
        f"{RULE0}.Properties.SqlFilter.SqlExpression: must not be empty",
    ),
    (
        "SqlExpression not a string",
        lambda d: _rule_props(d).update(SqlFilter={"SqlExpression": 1}),
        f"{RULE0}.Properties.SqlFilter.SqlExpression: expected a string, got number 1",
    ),
    (
        "Action key",
        lambda d: _rule_props(d).update(Action={"Sql": "SET a = 1"}),
        f"{RULE0}.Properties.Action.Sql: unknown property; expected one of SqlExpression",
    ),
    (
        "empty correlation filter",
        lambda d: _rule_props(d).update(FilterType="Correlation", CorrelationFilter={}),
        f"{RULE0}.Properties.CorrelationFilter: expected at least one condition",
    ),
    (
        "Subject is Label here",
        lambda d: _rule_props(d).update(
            FilterType="Correlation", CorrelationFilter={"Subject": "x"}
        ),
        f'{RULE0}.Properties.CorrelationFilter.Subject: unknown property; did you mean "Label"?',
    ),
    (
        "nested user property",
        lambda d: _rule_props(d).update(
            FilterType="Correlation", CorrelationFilter={"Properties": {"my key": {"a": 1}}}
        ),
        f'{RULE0}.Properties.CorrelationFilter.Properties["my key"]: expected a string, number, '
        "boolean or null, got an object",
    ),
    (
        "empty user properties",
        lambda d: _rule_props(d).update(
            FilterType="Correlation", CorrelationFilter={"To": "x", "Properties": {}}
        ),
        f"{RULE0}.Properties.CorrelationFilter.Properties: expected at least one property",
    ),
    (
        "wrong type: integer",
        lambda d: _queue_props(d).update(MaxDeliveryCount="3"),
        f'{Q0}.Properties.MaxDeliveryCount: expected a positive integer, got string "3"',
    ),
    (
        "wrong type: integer, not boolean",
        lambda d: _queue_props(d).update(MaxDeliveryCount=True),
        f"{Q0}.Properties.MaxDeliveryCount: expected a positive integer, got boolean true",
    ),
    (
        "wrong type: boolean",
        lambda d: _queue_props(d).update(RequiresSession="false"),
        f'{Q0}.Properties.RequiresSession: expected true or false, got string "false"',
    ),
    (
        "wrong type: string",
        lambda d: _queue_props(d).update(LockDuration=60),
        f"{Q0}.Properties.LockDuration: expected a string, got number 60",
    ),
    (
        "bad duration",
        lambda d: _queue_props(d).update(LockDuration="PT1X"),
        f"{Q0}.Properties.LockDuration: invalid duration 'PT1X': use ISO 8601 like PT1M",
    ),
    (
        "bad ForwardTo",
        lambda d: _queue_props(d).update(ForwardTo="a b"),
        f"{Q0}.Properties.ForwardTo: invalid entity name 'a b': must not contain whitespace",
    ),
    (
        "Status",
        lambda d: _queue_props(d).update(Status="Paused"),
        f"{Q0}.Properties.Status: expected one of Active, Disabled, SendDisabled, "
        'ReceiveDisabled, got string "Paused"',
    ),
    (
        "Sku",
        lambda d: d["UserConfig"]["Namespaces"][0].update(Properties={"Sku": "Gold"}),
        f'{NS0}.Properties.Sku: expected Basic, Standard or Premium, got string "Gold"',
    ),
    (
        "missing queue Name",
        lambda d: d["UserConfig"]["Namespaces"][0]["Queues"][0].pop("Name"),
        f"{Q0}.Name: required property is missing",
    ),
    (
        "missing rule Properties",
        lambda d: _sub(d)["Rules"][0].pop("Properties"),
        f"{RULE0}.Properties: required property is missing",
    ),
    (
        "bad queue name",
        lambda d: d["UserConfig"]["Namespaces"][0]["Queues"][0].update(Name="a*b"),
        f"{Q0}.Name: invalid queue name 'a*b'",
    ),
    (
        "bad namespace name",
        lambda d: d["UserConfig"]["Namespaces"][0].update(Name="ns"),
        f"{NS0}.Name: invalid namespace name 'ns': must be 6-50 characters",
    ),
    (
        "bad subscription name",
        lambda d: _sub(d).update(Name="-s"),
        f"{SUB0}.Name: invalid subscription name '-s'",
    ),
    (
        "duplicate queue, case-insensitively",
        lambda d: d["UserConfig"]["Namespaces"][0]["Queues"].append({"Name": "Q1"}),
        f'{NS0}.Queues[1].Name: an entity named "Q1" is already defined at {Q0}.Name',
    ),
    (
        "a topic named like a queue",
        lambda d: d["UserConfig"]["Namespaces"][0]["Topics"][0].update(Name="q1"),
        f'{NS0}.Topics[0].Name: an entity named "q1" is already defined at {Q0}.Name',
    ),
    (
        "duplicate rule",
        lambda d: _sub(d)["Rules"].append(copy.deepcopy(_sub(d)["Rules"][0])),
        f'{SUB0}.Rules[1].Name: rule "r1" is already defined at {RULE0}.Name',
    ),
    (
        "queues not an array",
        lambda d: d["UserConfig"]["Namespaces"][0].update(Queues={"Name": "q"}),
        f"{NS0}.Queues: expected an array, got an object",
    ),
    (
        "queue not an object",
        lambda d: d["UserConfig"]["Namespaces"][0].update(Queues=["q1"]),
        f'{Q0}: expected an object, got string "q1"',
    ),
    (
        "no namespaces",
        lambda d: d["UserConfig"].update(Namespaces=[]),
        "UserConfig.Namespaces: expected at least one namespace",
    ),
    (
        "no UserConfig",
        lambda d: d.pop("UserConfig"),
        "UserConfig: required property is missing",
    ),
    (
        "Logging not an object",
        lambda d: d["UserConfig"].update(Logging="File"),
        'UserConfig.Logging: expected an object, got string "File"',
    ),
]


@pytest.mark.parametrize(("why", "change", "expected"), CASES, ids=[c[0] for c in CASES])
def test_errors_name_the_path(why: str, change: Any, expected: str) -> None:
    doc = base()
    change(doc)
    assert error_of(doc).startswith(expected), why


def test_root_must_be_an_object() -> None:
    assert error_of([1]) == "(document): expected an object, got an array"


def test_duplicate_json_key() -> None:
    text = json.dumps(base()).replace(
        '"LockDuration": "PT1M"', '"LockDuration": "PT1M", "LockDuration": "PT2M"'
    )
    with pytest.raises(BadRequest, match=r"Queues\[0\]\.Properties\.LockDuration: given twice"):
        load_config(text)


def test_invalid_json_names_line_and_column() -> None:
    with pytest.raises(BadRequest) as info:
        load_config('{\n  "UserConfig": {,\n}', "Config.json")
    assert info.value.message == (
        "Config.json: not valid JSON at line 2 column 18: Expecting property name enclosed "
        "in double quotes"
    )


# -- apply and export against an in-memory stand-in for the client

QUEUE_DEFAULTS: dict[str, Any] = {
    "max_size_in_megabytes": 1024,
    "lock_duration": "PT1M",
    "max_delivery_count": 10,
    "default_message_time_to_live": format_duration_iso(MAX_TIMESPAN_MS),
    "requires_duplicate_detection": False,
    "duplicate_detection_history_time_window": "PT10M",
    "requires_session": False,
    "enable_partitioning": False,
    "forward_to": None,
    "forward_dead_lettered_messages_to": None,
    "dead_lettering_on_message_expiration": False,
    "auto_delete_on_idle": format_duration_iso(MAX_TIMESPAN_MS),
    "status": "Active",
    "enable_batched_operations": True,
    "user_metadata": None,
}
TOPIC_KEYS = (
    "max_size_in_megabytes",
    "default_message_time_to_live",
    "requires_duplicate_detection",
    "duplicate_detection_history_time_window",
    "enable_batched_operations",
    "status",
    "auto_delete_on_idle",
    "enable_partitioning",
    "user_metadata",
)
SUBSCRIPTION_KEYS = (
    "lock_duration",
    "requires_session",
    "default_message_time_to_live",
    "dead_lettering_on_message_expiration",
    "max_delivery_count",
    "enable_batched_operations",
    "status",
    "forward_to",
    "forward_dead_lettered_messages_to",
    "auto_delete_on_idle",
    "user_metadata",
)
IMMUTABLE = ("enable_partitioning", "requires_session", "requires_duplicate_detection")


def _stored(options: dict[str, Any]) -> dict[str, Any]:
    return {
        k: format_duration_iso(v)
        if isinstance(v, int)
        and not isinstance(v, bool)
        and (k.endswith(("duration", "live", "window", "idle")))
        else v
        for k, v in options.items()
    }


class FakeClient:
    """The client calls emulator_config makes, over dicts shaped like the daemon's."""

    def __init__(self, state: dict[str, Any] | None = None, namespace: str = "sbemulatorns"):
        self.state = (
            state
            if state is not None
            else {"sbemulatorns": {"info": {"sku": "standard"}, "queues": {}, "topics": {}}}
        )
        self.namespace = namespace
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[str, Exception] = {}

    def using(self, namespace: str) -> FakeClient:
        other = FakeClient(self.state, namespace)
        other.calls, other.fail = self.calls, self.fail
        return other

    def close(self) -> None:
        pass

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _log(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] in self.fail:
            raise self.fail[call[0]]

    @property
    def ns(self) -> dict[str, Any]:
        return dict(self.state[self.namespace])

    # namespaces
    def namespace_get(self, name: str) -> dict[str, Any]:
        if name not in self.state:
            raise MessagingEntityNotFound(f"namespace {name!r} does not exist")
        info = self.state[name]["info"]
        return {"name": name, "premium_messaging_partitions": 1, "capacity": None, **info}

    def namespace_list(self) -> list[dict[str, Any]]:
        return [self.namespace_get(n) for n in self.state]

    def namespace_create(self, name: str, **options: Any) -> dict[str, Any]:
        self._log("namespace_create", name, options)
        self.state[name] = {"info": {"sku": "standard", **options}, "queues": {}, "topics": {}}
        return self.namespace_get(name)

    def namespace_update(self, name: str, **options: Any) -> dict[str, Any]:
        self._log("namespace_update", name, options)
        self.state[name]["info"].update(options)
        return self.namespace_get(name)

    # queues and topics
    def _create(self, kind: str, name: str, options: dict[str, Any], keys: Any) -> None:
        table = self.state[self.namespace][kind]
        if name.lower() in table:
            raise MessagingEntityAlreadyExists(name)
        entity = {k: QUEUE_DEFAULTS[k] for k in keys}
        entity.update(name=name, **_stored(options))
        if kind == "topics":
            entity["subscriptions"] = {}
        table[name.lower()] = entity

    def _update(self, kind: str, name: str, options: dict[str, Any]) -> None:
        entity = self.state[self.namespace][kind][name.lower()]
        for key in IMMUTABLE:
            if key in options and options[key] != entity.get(key):
                raise InvalidOperation(f"{key} cannot be changed")
        entity.update(_stored(options))

    @staticmethod
    def _public(entity: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in entity.items() if k not in ("subscriptions", "rules")}

    def queue_create(self, name: str, **options: Any) -> dict[str, Any]:
        self._log("queue_create", name, options)
        self._create("queues", name, options, QUEUE_DEFAULTS)
        return {}

    def queue_update(self, name: str, **options: Any) -> dict[str, Any]:
        self._log("queue_update", name, options)
        self._update("queues", name, options)
        return {}

    def queue_list(self) -> list[dict[str, Any]]:
        return [self._public(q) for q in self.ns["queues"].values()]

    def topic_create(self, name: str, **options: Any) -> dict[str, Any]:
        self._log("topic_create", name, options)
        self._create("topics", name, options, TOPIC_KEYS)
        return {}

    def topic_update(self, name: str, **options: Any) -> dict[str, Any]:
        self._log("topic_update", name, options)
        self._update("topics", name, options)
        return {}

    def topic_list(self) -> list[dict[str, Any]]:
        return [self._public(t) for t in self.ns["topics"].values()]

    # subscriptions and rules
    def _subs(self, topic: str) -> dict[str, Any]:
        subs: dict[str, Any] = self.ns["topics"][topic.lower()]["subscriptions"]
        return subs

    def subscription_create(self, topic: str, name: str, **options: Any) -> dict[str, Any]:
        self._log("subscription_create", topic, name, options)
        entity = {k: QUEUE_DEFAULTS[k] for k in SUBSCRIPTION_KEYS}
        entity["dead_lettering_on_filter_evaluation_exceptions"] = True
        entity.update(name=name, **_stored(options))
        entity["rules"] = {
            "$default": {"name": "$Default", "filter": {"type": "true"}, "action": None}
        }
        self._subs(topic)[name.lower()] = entity
        return {}

    def subscription_update(self, topic: str, name: str, **options: Any) -> dict[str, Any]:
        self._log("subscription_update", topic, name, options)
        entity = self._subs(topic)[name.lower()]
        if (
            "requires_session" in options
            and options["requires_session"] != entity["requires_session"]
        ):
            raise InvalidOperation("requires_session cannot be changed")
        entity.update(_stored(options))
        return {}

    def subscription_list(self, topic: str) -> list[dict[str, Any]]:
        return [self._public(s) for s in self._subs(topic).values()]

    def rule_create(
        self, topic: str, sub: str, name: str, filter: Any = None, action: Any = None
    ) -> dict[str, Any]:
        self._log("rule_create", topic, sub, name, filter, action)
        rules = self._subs(topic)[sub.lower()]["rules"]
        if name.lower() in rules:
            raise MessagingEntityAlreadyExists(name)
        rules[name.lower()] = {"name": name, "filter": filter or {"type": "true"}, "action": action}
        return {}

    def rule_delete(self, topic: str, sub: str, name: str) -> dict[str, Any]:
        self._log("rule_delete", topic, sub, name)
        del self._subs(topic)[sub.lower()]["rules"][name.lower()]
        return {}

    def rule_list(self, topic: str, sub: str) -> list[dict[str, Any]]:
        return list(self._subs(topic)[sub.lower()]["rules"].values())


def official(name: str = "sql_action_config.json") -> ConfigPlan:
    return load_config((DATA / name).read_text())


def apply(sb: FakeClient, plan: ConfigPlan, **kw: Any) -> list[dict[str, Any]]:
    return apply_config(sb, plan, **kw)  # type: ignore[arg-type]


def actions(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(r["kind"], r["entity"], r["action"]) for r in rows]


def test_apply_creates_then_is_idempotent() -> None:
    sb = FakeClient()
    rows = apply(sb, official())
    subs_of = "order-events/subscriptions"
    assert actions(rows) == [
        ("namespace", "sbemulatorns", "unchanged"),
        ("queue", "orders", "created"),
        ("topic", "order-events", "created"),
        ("subscription", f"{subs_of}/by-headers", "created"),
        ("rule", f"{subs_of}/by-headers/rules/match-headers", "created"),
        ("rule", f"{subs_of}/by-headers/rules/$Default", "deleted"),
        ("subscription", f"{subs_of}/by-app-props", "created"),
        ("rule", f"{subs_of}/by-app-props/rules/match-app-props", "created"),
        ("rule", f"{subs_of}/by-app-props/rules/$Default", "deleted"),
        ("subscription", f"{subs_of}/everything", "created"),
        ("subscription", f"{subs_of}/refunds", "created"),
        ("rule", f"{subs_of}/refunds/rules/refund-routing", "created"),
        ("rule", f"{subs_of}/refunds/rules/$Default", "deleted"),
    ]
    assert rows[1]["path"] == "UserConfig.Namespaces[0].Queues[0]"
    assert rows[5]["path"] == "UserConfig.Namespaces[0].Topics[0].Subscriptions[0].Rules"
    queue = sb.state["sbemulatorns"]["queues"]["orders"]
    assert queue["lock_duration"] == "PT40S" and queue["max_delivery_count"] == 6
    subs = sb.state["sbemulatorns"]["topics"]["order-events"]["subscriptions"]
    assert list(subs["everything"]["rules"]) == ["$default"]
    assert subs["refunds"]["rules"]["refund-routing"]["action"] == "SET sys.To = 'refund-desk'"
    sb.calls.clear()
    again = apply(sb, official())
    assert {r["action"] for r in again} == {"unchanged"}
    assert sb.calls == []


def test_dry_run_changes_nothing() -> None:
    sb = FakeClient()
    rows = apply(sb, official(), dry_run=True)
    assert sb.calls == []
    assert sb.state["sbemulatorns"]["queues"] == {}
    assert [r["action"] for r in rows][:3] == ["unchanged", "create", "create"]
    assert rows[5]["action"] == "delete"


def test_update_reports_what_changed() -> None:
    sb = FakeClient()
    apply(sb, official())
    doc = json.loads((DATA / "sql_action_config.json").read_text())
    doc["UserConfig"]["Namespaces"][0]["Queues"][0]["Properties"]["LockDuration"] = "PT30S"
    sb.calls.clear()
    rows = apply(sb, parse_config(doc))
    (row,) = [r for r in rows if r["action"] != "unchanged"]
    assert row["entity"] == "orders" and row["action"] == "updated"
    assert row["changes"] == ["LockDuration: PT40S -> PT30S"]
    assert sb.calls == [("queue_update", "orders", {"lock_duration": 30_000})]


def test_immutable_difference_is_refused_before_any_change() -> None:
    sb = FakeClient()
    apply(sb, official())
    doc = json.loads((DATA / "sql_action_config.json").read_text())
    ns = doc["UserConfig"]["Namespaces"][0]
    ns["Queues"][0]["Properties"]["LockDuration"] = "PT30S"  # would be applied first
    ns["Topics"][0]["Subscriptions"][1]["Properties"]["RequiresSession"] = True
    sb.calls.clear()
    with pytest.raises(InvalidOperation) as info:
        apply(sb, parse_config(doc))
    assert info.value.message.startswith(
        "UserConfig.Namespaces[0].Topics[0].Subscriptions[1].Properties.RequiresSession: "
        "requires_session cannot be changed after the subscription is created (it is false, "
        "the config says true)"
    )
    assert sb.calls == []


def test_rules_are_made_exactly_as_listed() -> None:
    sb = FakeClient()
    apply(sb, official())
    subs = sb.state["sbemulatorns"]["topics"]["order-events"]["subscriptions"]
    rules = subs["refunds"]["rules"]
    rules["extra"] = {"name": "extra", "filter": {"type": "false"}, "action": None}
    rules["refund-routing"]["action"] = "SET sys.To = 'Other'"
    sb.calls.clear()
    rows = apply(sb, official())
    changed = [
        (r["entity"].rsplit("/", 1)[1], r["action"], r["changes"])
        for r in rows
        if r["action"] != "unchanged"
    ]
    assert changed == [
        (
            "refund-routing",
            "recreated",
            [
                "sys.Label = 'refund.requested' AND channel LIKE 'web%' / "
                "SET sys.To = 'Other' -> "
                "sys.Label = 'refund.requested' AND channel LIKE 'web%' / "
                "SET sys.To = 'refund-desk'"
            ],
        ),
        ("extra", "deleted", ["not listed (1=0)"]),
    ]
    assert [c[0] for c in sb.calls] == ["rule_delete", "rule_create", "rule_delete"]
    assert set(rules) == {"refund-routing"}


def test_listed_default_rule_is_kept_or_replaced() -> None:
    doc = base()
    _sub(doc)["Rules"] = [
        {
            "Name": "$Default",
            "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1 = 1"}},
        }
    ]
    sb = FakeClient()
    rows = apply(sb, parse_config(doc))
    assert actions(rows)[-1] == ("rule", "t1/subscriptions/s1/rules/$Default", "unchanged")
    _sub(doc)["Rules"][0]["Properties"]["SqlFilter"]["SqlExpression"] = "[data-topic] IS NOT NULL"
    rows = apply(sb, parse_config(doc))
    assert actions(rows)[-1] == ("rule", "t1/subscriptions/s1/rules/$Default", "recreated")


def test_forwarding_is_set_after_every_entity_exists() -> None:
    doc = base()
    ns = doc["UserConfig"]["Namespaces"][0]
    ns["Queues"][0]["Properties"]["ForwardTo"] = "q2"
    ns["Queues"].append({"Name": "q2", "Properties": {"ForwardDeadLetteredMessagesTo": "q1"}})
    sb = FakeClient()
    apply(sb, parse_config(doc))
    assert [c[:2] for c in sb.calls if c[0].startswith("queue")] == [
        ("queue_create", "q1"),
        ("queue_create", "q2"),
        ("queue_update", "q1"),
        ("queue_update", "q2"),
    ]
    assert sb.calls[0] == ("queue_create", "q1", {"lock_duration": 60_000})
    assert sb.state["sbemulatorns"]["queues"]["q1"]["forward_to"] == "q2"
    sb.calls.clear()
    assert {r["action"] for r in apply(sb, parse_config(doc))} == {"unchanged"}


def test_daemon_errors_are_prefixed_with_the_path() -> None:
    sb = FakeClient()
    sb.fail["queue_create"] = BadRequest(
        "lock_duration PT10M is out of range: it must be between 5 seconds and 5 minutes"
    )
    with pytest.raises(BadRequest) as info:
        apply(sb, parse_config(base()))
    assert info.value.message == (
        f"{Q0}.Properties.LockDuration: lock_duration PT10M is out of range: it must be "
        "between 5 seconds and 5 minutes"
    )
    sb.fail.clear()
    sb.fail["topic_create"] = MessagingEntityNotFound("something is missing")
    with pytest.raises(
        MessagingEntityNotFound, match=r"^UserConfig\.Namespaces\[0\]\.Topics\[0\]: something"
    ):
        apply(sb, parse_config(base()))


def test_missing_namespace_is_created_with_its_sku() -> None:
    doc = base()
    doc["UserConfig"]["Namespaces"][0]["Name"] = "premiumns"
    doc["UserConfig"]["Namespaces"][0]["Properties"] = {"Sku": "Premium"}
    sb = FakeClient()
    rows = apply(sb, parse_config(doc))
    assert rows[0]["action"] == "created"
    assert sb.calls[0] == ("namespace_create", "premiumns", {"sku": "premium"})
    doc["UserConfig"]["Namespaces"][0]["Properties"] = {"Sku": "Standard"}
    with pytest.raises(
        InvalidOperation, match=r"^UserConfig\.Namespaces\[0\]\.Properties\.Sku: sku"
    ):
        apply(sb, parse_config(doc))


def test_export_shape() -> None:
    sb = FakeClient()
    apply(sb, official())
    subs = sb.state["sbemulatorns"]["topics"]["order-events"]["subscriptions"]
    subs["by-app-props"]["rules"].clear()
    sb.state["sbemulatorns"]["queues"]["orders"].update(
        status="Disabled", max_size_in_megabytes=2048
    )
    out = export_config(sb)  # type: ignore[arg-type]
    (ns,) = out["UserConfig"]["Namespaces"]
    assert out["UserConfig"]["Logging"] == {"Type": "File"}
    assert ns["Name"] == "sbemulatorns" and "Properties" not in ns  # standard: no extras
    source = json.loads((DATA / "sql_action_config.json").read_text())
    (source_ns,) = source["UserConfig"]["Namespaces"]
    (source_topic,) = source_ns["Topics"]
    assert ns["Queues"] == [
        {
            "Name": "orders",
            "Properties": {
                **source_ns["Queues"][0]["Properties"],
                "MaxSizeInMegabytes": 2048,
                "Status": "Disabled",
            },
        }
    ]
    assert set(ns["Queues"][0]["Properties"]) - {"MaxSizeInMegabytes", "Status"} == set(
        OFFICIAL_SCHEMA["queue"]
    )
    (topic,) = ns["Topics"]
    assert topic["Properties"] == source_topic["Properties"]
    assert set(topic["Properties"]) == set(OFFICIAL_SCHEMA["topic"])
    subs_out = {s["Name"]: s for s in topic["Subscriptions"]}
    by_headers = source_topic["Subscriptions"][0]
    assert subs_out["by-headers"]["Properties"] == by_headers["Properties"]
    assert set(subs_out["by-headers"]["Properties"]) == set(OFFICIAL_SCHEMA["subscription"])
    assert subs_out["by-headers"]["Rules"] == [
        {
            "Name": "match-headers",
            "Properties": {
                "FilterType": "Correlation",
                "CorrelationFilter": {
                    "ContentType": "application/json",
                    "CorrelationId": "order-7731",
                    "Label": "order.placed",
                    "MessageId": "msg-7731-a",
                    "ReplyTo": "order-replies",
                    "ReplyToSessionId": "replies-s1",
                    "SessionId": "cart-42",
                    "To": "fulfilment",
                },
            },
        }
    ]
    assert by_headers["Rules"] == subs_out["by-headers"]["Rules"]
    # no rules at all: receives nothing, written so that it imports the same way
    assert subs_out["by-app-props"]["Rules"] == [
        {
            "Name": "$Default",
            "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=0"}},
        }
    ]
    assert "Rules" not in subs_out["everything"]  # the lone $Default
    assert subs_out["refunds"]["Rules"][0]["Properties"]["Action"] == {
        "SqlExpression": "SET sys.To = 'refund-desk'"
    }


def test_export_then_import_round_trips() -> None:
    sb = FakeClient()
    apply(sb, official())
    sb.state["sbemulatorns"]["queues"]["orders"].update(
        user_metadata="m", auto_delete_on_idle="PT1H", enable_partitioning=True
    )
    first = export_config(sb)  # type: ignore[arg-type]
    fresh = FakeClient()
    apply(fresh, parse_config(json.loads(json.dumps(first))))
    assert export_config(fresh) == first  # type: ignore[arg-type]
    assert {r["action"] for r in apply(fresh, parse_config(first))} == {"unchanged"}


def test_export_durations_parse_back() -> None:
    for ms in (1, 500, 60_000, 86_400_000 + 1, MAX_TIMESPAN_MS):
        assert parse_duration_ms(format_duration_iso(ms)) == ms


def test_null_correlation_property_is_kept() -> None:
    doc = base()
    _rule_props(doc).update(FilterType="Correlation", CorrelationFilter={"Properties": {"k": None}})
    rules = parse_config(doc).namespaces[0].topics[0].subscriptions[0].rules or ()
    assert rules[0].filter == {"type": "correlation", "properties": {"k": None}}
