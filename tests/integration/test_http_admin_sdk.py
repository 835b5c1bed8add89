"""The Python SDK's ServiceBusAdministrationClient against a real daemon, over HTTPS on the
connection string's (AMQP) port with the generated certificate."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
)
from azure.servicebus.management import (
    CorrelationRuleFilter,
    FalseRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

from sbctl.core.records import Message
from tests.integration.amqp_sdk import cli_json, connection_string


def admin(daemon: Any, conn_str: str | None = None) -> ServiceBusAdministrationClient:
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    return ServiceBusAdministrationClient.from_connection_string(
        conn_str or connection_string(daemon), connection_verify=cert, retry_total=0
    )


def test_certificate_is_made_once_with_an_owner_only_key(daemon: Any) -> None:
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    key = os.path.join(os.path.dirname(cert), "key.pem")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    before = Path(cert).read_text()
    daemon.stop()
    daemon.start()
    assert Path(cert).read_text() == before
    assert cli_json(daemon, "daemon", "status")["https_certificate"] == cert


def test_queues_create_get_update_list_delete(daemon: Any) -> None:
    with admin(daemon) as c:
        q = c.create_queue(
            "orders",
            max_delivery_count=7,
            lock_duration=datetime.timedelta(seconds=30),
            requires_session=True,
            default_message_time_to_live="PT1H",
            user_metadata="hello",
        )
        assert (q.name, q.max_delivery_count, q.requires_session) == ("orders", 7, True)
        assert q.lock_duration == datetime.timedelta(seconds=30)
        q.max_delivery_count = 3
        q.dead_lettering_on_message_expiration = True
        c.update_queue(q)
        got = c.get_queue("orders")
        assert got.max_delivery_count == 3 and got.dead_lettering_on_message_expiration
        assert got.default_message_time_to_live == datetime.timedelta(hours=1)
        c.update_queue(got, max_delivery_count=4)
        # The CLI sees what the SDK made: one code path.
        shown = cli_json(daemon, "queue", "show", "orders")
        assert shown["max_delivery_count"] == 4 and shown["user_metadata"] == "hello"
        c.create_queue("target")
        c.create_queue("fwd", forward_to="target")
        assert c.get_queue("fwd").forward_to.endswith("/target")
        assert sorted(x.name for x in c.list_queues()) == ["fwd", "orders", "target"]
        with pytest.raises(ResourceExistsError, match="already exists"):
            c.create_queue("orders")
        with pytest.raises(HttpResponseError, match="lock_duration"):
            c.create_queue("bad", lock_duration="PT10M")
        with pytest.raises(HttpResponseError, match="requires_session cannot be changed"):
            c.update_queue(got, requires_session=False)
        c.delete_queue("fwd")
        with pytest.raises(ResourceNotFoundError):
            c.get_queue("fwd")
        with pytest.raises(ResourceNotFoundError):
            c.delete_queue("fwd")


def test_list_pages_past_one_hundred(daemon: Any) -> None:
    with daemon.client() as client:
        for i in range(105):
            client.queue_create(f"q{i:03d}")
    with admin(daemon) as c:
        names = [q.name for q in c.list_queues()]
        runtime = list(c.list_queues_runtime_properties())
    assert names == [f"q{i:03d}" for i in range(105)]
    assert len(runtime) == 105


def test_runtime_properties_count_messages(daemon: Any) -> None:
    with admin(daemon) as c:
        c.create_queue("rq")
        with daemon.client() as client:
            client.send("rq", [Message(body=b"a"), Message(body=b"b")])
        rt = c.get_queue_runtime_properties("rq")
        assert (rt.active_message_count, rt.total_message_count) == (2, 2)
        c.create_topic("rt")
        c.create_subscription("rt", "s")
        with daemon.client() as client:
            client.send("rt", [Message(body=b"x")])
        srt = c.get_subscription_runtime_properties("rt", "s")
        assert srt.active_message_count == 1
        trt = c.get_topic_runtime_properties("rt")
        assert trt.subscription_count == 1
        ns = c.get_namespace_properties()
        assert ns.name == "sbemulatorns" and ns.messaging_sku == "Standard"


def test_topics_subscriptions_and_every_rule_type(daemon: Any) -> None:
    with admin(daemon) as c:
        t = c.create_topic("events", default_message_time_to_live="PT2H")
        assert t.default_message_time_to_live == datetime.timedelta(hours=2)
        c.update_topic(t, max_size_in_megabytes=2048)
        assert c.get_topic("events").max_size_in_megabytes == 2048
        s = c.create_subscription("events", "all", max_delivery_count=5)
        assert s.max_delivery_count == 5
        c.update_subscription("events", s, lock_duration="PT45S")
        assert c.get_subscription("events", "all").lock_duration.total_seconds() == 45
        c.create_subscription("events", "other")
        assert [x.name for x in c.list_subscriptions("events")] == ["all", "other"]
        assert [x.name for x in c.list_topics()] == ["events"]

        c.create_rule("events", "all", "sql", filter=SqlRuleFilter("color = 'red'"))
        c.create_rule(
            "events",
            "all",
            "param",
            filter=SqlRuleFilter("a = @p1 AND b = @p2", parameters={"@p1": "v", "@p2": 2}),
        )
        c.create_rule(
            "events",
            "all",
            "corr",
            filter=CorrelationRuleFilter(correlation_id="c1", label="L", properties={"k": 1}),
            action=SqlRuleAction("SET sys.label = 'seen'"),
        )
        c.create_rule("events", "all", "yes", filter=TrueRuleFilter())
        c.create_rule("events", "all", "no", filter=FalseRuleFilter())
        rules = {r.name: r for r in c.list_rules("events", "all")}
        assert list(rules) == ["$Default", "sql", "param", "corr", "yes", "no"]
        assert isinstance(rules["sql"].filter, SqlRuleFilter)
        assert rules["sql"].filter.sql_expression == "color = 'red'"
        # Read back as written: the expression with its parameters.
        assert rules["param"].filter.sql_expression == "a = @p1 AND b = @p2"
        assert rules["param"].filter.parameters == {"@p1": "v", "@p2": 2}
        assert cli_json(daemon, "rule", "show", "events", "all", "param")["filter"] == {
            "type": "sql",
            "sql_expression": "a = @p1 AND b = @p2",
            "parameters": {"@p1": "v", "@p2": 2},
        }
        corr = rules["corr"].filter
        assert isinstance(corr, CorrelationRuleFilter)
        assert (corr.correlation_id, corr.label, corr.properties) == ("c1", "L", {"k": 1})
        assert rules["corr"].action.sql_expression == "SET sys.label = 'seen'"
        assert isinstance(rules["yes"].filter, TrueRuleFilter)
        assert isinstance(rules["no"].filter, FalseRuleFilter)

        rule = c.get_rule("events", "all", "sql")
        rule.filter = SqlRuleFilter("color = 'blue'")
        c.update_rule("events", "all", rule)
        assert c.get_rule("events", "all", "sql").filter.sql_expression == "color = 'blue'"
        with pytest.raises(HttpResponseError, match="sql"):
            rule.filter = SqlRuleFilter("color = = 'x'")
            c.update_rule("events", "all", rule)
        assert c.get_rule("events", "all", "sql").filter.sql_expression == "color = 'blue'"
        with pytest.raises(ResourceExistsError):
            c.create_rule("events", "all", "sql")
        c.delete_rule("events", "all", "sql")
        with pytest.raises(ResourceNotFoundError):
            c.get_rule("events", "all", "sql")
        shown = cli_json(daemon, "rule", "list", "events", "all")
        names = [r["name"] for r in (shown if isinstance(shown, list) else shown["rules"])]
        assert "corr" in names and "sql" not in names

        c.delete_subscription("events", "other")
        with pytest.raises(ResourceNotFoundError):
            c.get_subscription("events", "other")
        c.delete_topic("events")
        with pytest.raises(ResourceNotFoundError):
            c.get_topic("events")


def test_sdk_sample_flows(daemon: Any) -> None:
    """The flows of the SDK's mgmt_queue/topic/subscription/rule samples, in order."""
    with admin(daemon) as c:
        c.create_queue("sb_mgmt_queue")
        for props in c.list_queues():
            assert props.name
        props = c.get_queue("sb_mgmt_queue")
        props.max_delivery_count = 5
        c.update_queue(props)
        props = c.get_queue("sb_mgmt_queue")
        c.update_queue(props, max_delivery_count=3)
        c.get_queue_runtime_properties("sb_mgmt_queue")
        c.delete_queue("sb_mgmt_queue")

        c.create_topic("sb_mgmt_topic")
        props_t = c.get_topic("sb_mgmt_topic")
        props_t.default_message_time_to_live = datetime.timedelta(minutes=10)
        c.update_topic(props_t)
        c.update_topic(c.get_topic("sb_mgmt_topic"), default_message_time_to_live="PT20M")
        c.get_topic_runtime_properties("sb_mgmt_topic")
        c.create_subscription("sb_mgmt_topic", "sb_mgmt_sub")
        sub = c.get_subscription("sb_mgmt_topic", "sb_mgmt_sub")
        sub.max_delivery_count = 5
        c.update_subscription("sb_mgmt_topic", sub)
        c.update_subscription(
            "sb_mgmt_topic",
            c.get_subscription("sb_mgmt_topic", "sb_mgmt_sub"),
            max_delivery_count=3,
        )
        c.get_subscription_runtime_properties("sb_mgmt_topic", "sb_mgmt_sub")

        c.create_rule("sb_mgmt_topic", "sb_mgmt_sub", "sb_rule")
        c.create_rule(
            "sb_mgmt_topic",
            "sb_mgmt_sub",
            "sb_sql_rule",
            filter=SqlRuleFilter(
                "property1 = @param1 AND property2 = @param2",
                parameters={"@param1": "value", "@param2": 1},
            ),
        )
        assert len(list(c.list_rules("sb_mgmt_topic", "sb_mgmt_sub"))) == 3
        rule = c.get_rule("sb_mgmt_topic", "sb_mgmt_sub", "sb_sql_rule")
        rule.filter = SqlRuleFilter(
            "property1 = @param1 AND property2 = @param2",
            parameters={"@param1": "value2", "@param2": 2},
        )
        c.update_rule("sb_mgmt_topic", "sb_mgmt_sub", rule)
        c.update_rule(
            "sb_mgmt_topic",
            "sb_mgmt_sub",
            c.get_rule("sb_mgmt_topic", "sb_mgmt_sub", "sb_sql_rule"),
            filter=SqlRuleFilter(
                "property1 = @param1 AND property2 = @param2",
                parameters={"@param1": "value3", "@param2": 3},
            ),
        )
        got = c.get_rule("sb_mgmt_topic", "sb_mgmt_sub", "sb_sql_rule").filter
        # The SDK sends the rule's old parameters with update_rule(..., filter=...), as it
        # does against Azure.
        assert got.sql_expression == "property1 = @param1 AND property2 = @param2"
        assert got.parameters == {"@param1": "value2", "@param2": 2}
        c.delete_rule("sb_mgmt_topic", "sb_mgmt_sub", "sb_rule")
        c.delete_subscription("sb_mgmt_topic", "sb_mgmt_sub")
        c.delete_topic("sb_mgmt_topic")
        assert list(c.list_topics()) == [] and list(c.list_queues()) == []


def test_a_wrong_key_is_refused(daemon: Any) -> None:
    bad = connection_string(daemon).replace("SAS_KEY_VALUE", "wrong")
    with admin(daemon, bad) as c, pytest.raises(ClientAuthenticationError, match="signature"):
        c.get_namespace_properties()


def test_the_http_port_serves_https_too(daemon: Any) -> None:
    port = cli_json(daemon, "daemon", "status")["http_port"]
    conn = connection_string(daemon)
    amqp_port = conn.split("localhost:", 1)[1].split(";", 1)[0]
    with admin(daemon, conn.replace(f"localhost:{amqp_port}", f"localhost:{port}")) as c:
        c.create_queue("via5300")
    assert cli_json(daemon, "queue", "show", "via5300")["name"] == "via5300"
