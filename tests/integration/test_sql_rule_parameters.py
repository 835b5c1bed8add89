"""SQL filter and action parameters through a real daemon: made with the Python admin SDK
(HTTP) or a raw AMQP add-rule, read back as sent by each front-end and `sbctl rule show`,
and routing messages; a data dir whose HTTP side file held them (an older release) is
upgraded at the daemon's start."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sbctl.core import layout
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.amqp_sdk import cli_json, peek

SENT = "color = @color AND n > @min"
FILTER_PARAMS = {"@color": "red", "@min": 5}
ACTION_PARAMS = {"@by": "param-rule"}


def admin(daemon: Any) -> Any:
    management = pytest.importorskip("azure.servicebus.management")
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    conn = cli_json(daemon, "namespace", "connection-string")["connection_string"]
    return management.ServiceBusAdministrationClient.from_connection_string(
        conn, connection_verify=cert, retry_total=0
    )


def routed(daemon: Any, topic: str, sub: str) -> list[Any]:
    """Send three messages; what the subscription got (body, the action's property)."""
    for color, n in (("red", 9), ("red", 1), ("blue", 9)):
        daemon.cli(
            "send", topic, "--body", f"{color}-{n}",
            "--property", f"color={color}", "--property", f"n={n}", check=True,
        )  # fmt: skip
    rows = peek(daemon, f"{topic}/subscriptions/{sub}", "--count", "10")
    return [(r["body"], r["application_properties"].get("by")) for r in rows]


def test_the_admin_sdk_makes_and_reads_a_rule_with_parameters(module_daemon: Any) -> None:
    from azure.servicebus.management import SqlRuleAction, SqlRuleFilter

    daemon = module_daemon
    daemon.cli("topic", "create", "http-events", check=True)
    daemon.cli("subscription", "create", "http-events", "big", check=True)
    daemon.cli("rule", "delete", "http-events", "big", "$Default", check=True)
    with admin(daemon) as c:
        c.create_rule(
            "http-events", "big", "p",
            filter=SqlRuleFilter("color = @color AND n > @min", parameters=FILTER_PARAMS),
            action=SqlRuleAction("SET by = @by", parameters=ACTION_PARAMS),
        )  # fmt: skip
        rule = c.get_rule("http-events", "big", "p")
        assert rule.filter.sql_expression == "color = @color AND n > @min"
        assert rule.filter.parameters == FILTER_PARAMS
        assert rule.action.sql_expression == "SET by = @by"
        assert rule.action.parameters == ACTION_PARAMS
    shown = cli_json(daemon, "rule", "show", "http-events", "big", "p")
    assert shown["filter"]["parameters"] == FILTER_PARAMS
    assert shown["action_parameters"] == ACTION_PARAMS
    assert routed(daemon, "http-events", "big") == [("red-9", "param-rule")]


def test_an_amqp_add_rule_with_parameters_is_enumerated_and_routes(module_daemon: Any) -> None:
    daemon = module_daemon
    daemon.cli("topic", "create", "amqp-events", check=True)
    daemon.cli("subscription", "create", "amqp-events", "big", check=True)
    node = "amqp-events/Subscriptions/big/$management"
    port: int = cli_json(daemon, "daemon", "status")["amqp_port"]
    client = RawClient(port)
    try:
        tx, _ = client.management(node)
        client.request(tx, node, "com.microsoft:remove-rule", {"rule-name": "$Default"}, 0)
        description = {
            "sql-filter": {
                "expression": "color = @color AND n > @min",
                "parameters": {"@color": "red", "@min": t.Int(5)},
            },
            "sql-rule-action": {"expression": "SET by = @by", "parameters": ACTION_PARAMS},
        }
        request = {"rule-name": "p", "rule-description": description}
        status, _ = client.request(tx, node, "com.microsoft:add-rule", request, 1)
        assert status["statusCode"] == 200, status
        status, body = client.request(tx, node, "com.microsoft:enumerate-rules", {"top": 5}, 2)
        (entry,) = body["rules"]
        filt, action, name = entry["rule-description"].value[:3]
        assert name == "p"
        assert filt.value == ["color = @color AND n > @min", 20, FILTER_PARAMS]
        assert action.value == ["SET by = @by", 20, ACTION_PARAMS]
        bad = {"rule-name": "q", "rule-description": {"sql-filter": {"expression": "a = @x"}}}
        status, _ = client.request(tx, node, "com.microsoft:add-rule", bad, 3)
        assert (
            status["statusCode"] == 400 and "no value given for @x" in status["statusDescription"]
        )
    finally:
        client.close()
    assert routed(daemon, "amqp-events", "big") == [("red-9", "param-rule")]


def test_an_old_data_dirs_side_file_moves_into_its_rules(daemon_factory: Any) -> None:
    """The data dir an older release left: the rule stored with its parameters replaced,
    the expression as sent in http/sql_parameters.json."""
    daemon = daemon_factory(start=False)
    from sbctld.broker import DEFAULT_NAMESPACE, Broker
    from sbctld.clock import SystemClock
    from sbctld.storage.sync import Syncer

    b = Broker(daemon.data_dir, SystemClock(), Syncer("fsync"), default_credits_per_second=0)
    try:
        b.management.topic_create(DEFAULT_NAMESPACE, "old", {})
        b.management.subscription_create(DEFAULT_NAMESPACE, "old", "big", {})
        b.management.rule_delete(DEFAULT_NAMESPACE, "old", "big", "$Default")
        spec = {"type": "sql", "sql_expression": "color = 'red' AND n > 5"}
        b.management.rule_create(
            DEFAULT_NAMESPACE, "old", "big", "p", spec, "SET by = 'param-rule'"
        )
    finally:
        b.housekeeping.close()
    side = layout.sql_parameters_file(daemon.data_dir)
    side.parent.mkdir(parents=True, exist_ok=True)
    side.write_text(
        json.dumps(
            {
                f"{DEFAULT_NAMESPACE}/old/big/p": {
                    "filter": [
                        "color = @color AND n > @min",
                        FILTER_PARAMS,
                        spec["sql_expression"],
                    ],
                    "action": ["SET by = @by", ACTION_PARAMS, "SET by = 'param-rule'"],
                }
            }
        )
    )
    daemon.start()
    assert not side.exists()
    shown = cli_json(daemon, "rule", "show", "old", "big", "p")
    assert shown["filter"] == {
        "type": "sql",
        "sql_expression": SENT,
        "parameters": FILTER_PARAMS,
    }
    assert (shown["action"], shown["action_parameters"]) == ("SET by = @by", ACTION_PARAMS)
    with admin(daemon) as c:
        assert c.get_rule("old", "big", "p").filter.parameters == FILTER_PARAMS
    assert routed(daemon, "old", "big") == [("red-9", "param-rule")]
