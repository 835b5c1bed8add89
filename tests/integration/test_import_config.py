"""``sbctl import-config`` / ``export-config`` end to end: a real daemon, the real CLI.

The configs under tests/data/emulator_config/ follow the official emulator's Config.json
schema (see the README.txt there); they must import as they are, re-import as a no-op,
route topic messages the way their rules say, and survive export → import into a fresh
data directory unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sbctl.cli.exit_codes import exit_status
from sbctl.core.errors import BadRequest, InvalidOperation

DATA = Path(__file__).parent.parent / "data" / "emulator_config"
FULL = DATA / "full_config.json"
SQL_ACTION = DATA / "sql_action_config.json"
QUEUES_ONLY = DATA / "queues_only_config.json"
PARTIAL = DATA / "partial_config.json"
NS = "sbemulatorns"


def run(daemon: Any, *args: str, input: str | None = None) -> Any:
    result = daemon.cli("-o", "json", *args, input=input)
    assert result.code == 0, f"sbctl -o json {' '.join(args)} failed: {result}"
    return result


def import_rows(daemon: Any, path: Path | str, *extra: str) -> list[dict[str, Any]]:
    report = run(daemon, "import-config", str(path), *extra).json()
    rows: list[dict[str, Any]] = report["results"]
    return rows


def by_entity(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {f"{r['kind']}:{r['entity']}": r["action"] for r in rows}


def exported(daemon: Any, *namespaces: str) -> dict[str, Any]:
    result = daemon.cli("export-config", *namespaces)
    assert result.code == 0, result
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def error_line(result: Any) -> str:
    (line,) = result.stderr.splitlines()
    return str(line)


# -- queues


def test_queues_only_config_imports_then_reimport_is_a_no_op(daemon: Any) -> None:
    rows = import_rows(daemon, QUEUES_ONLY)
    assert by_entity(rows) == {
        f"namespace:{NS}": "unchanged",  # the daemon's default namespace already exists
        "queue:thumbnail-jobs": "created",
        "queue:email-outbox": "created",
        "queue:ledger-sync": "created",
    }
    assert rows[3]["path"] == "UserConfig.Namespaces[0].Queues[2]"
    with daemon.client(NS) as sb:
        ledger = sb.queue_get("ledger-sync")
        plain = sb.queue_get("thumbnail-jobs")
    assert ledger["dead_lettering_on_message_expiration"] is True
    assert plain["dead_lettering_on_message_expiration"] is False
    for queue in (ledger, plain):
        assert queue["lock_duration"] == "PT2M"
        assert queue["default_message_time_to_live"] == "PT12H"
        assert queue["duplicate_detection_history_time_window"] == "PT30S"
        assert queue["max_delivery_count"] == 4
        assert queue["forward_to"] is None
        assert queue["requires_session"] is False
    again = import_rows(daemon, QUEUES_ONLY)
    assert set(by_entity(again).values()) == {"unchanged"}


def test_table_output_and_stdin(daemon: Any) -> None:
    result = daemon.cli("import-config", "-", input=QUEUES_ONLY.read_text())
    assert result.code == 0, result
    header, *_ = [line for line in result.stdout.splitlines() if line.strip()]
    assert header.split() == ["path", "kind", "entity", "action", "changes"]
    assert "UserConfig.Namespaces[0].Queues[0]" in result.stdout
    assert result.stdout.count("created") == 3


def test_dry_run_changes_nothing(daemon: Any) -> None:
    report = run(daemon, "import-config", "--dry-run", str(QUEUES_ONLY)).json()
    assert report["dry_run"] is True
    assert [r["action"] for r in report["results"]] == ["unchanged", "create", "create", "create"]
    assert run(daemon, "queue", "list").json() == []
    table = daemon.cli("import-config", "--dry-run", str(QUEUES_ONLY))
    assert table.code == 0 and table.stderr == "dry run: nothing was changed\n"


def test_update_and_immutable_refusal(daemon: Any, tmp_path: Path) -> None:
    import_rows(daemon, QUEUES_ONLY)
    doc = json.loads(QUEUES_ONLY.read_text())
    queues = doc["UserConfig"]["Namespaces"][0]["Queues"]
    queues[0]["Properties"]["LockDuration"] = "PT30S"
    queues[0]["Properties"]["MaxSizeInMegabytes"] = 2048  # an sbctl extra
    rows = import_rows(daemon, write(tmp_path, "changed.json", doc))
    (row,) = [r for r in rows if r["action"] != "unchanged"]
    assert (row["entity"], row["action"]) == ("thumbnail-jobs", "updated")
    assert row["changes"] == ["LockDuration: PT2M -> PT30S", "MaxSizeInMegabytes: 1024 -> 2048"]
    with daemon.client(NS) as sb:
        assert sb.queue_get("thumbnail-jobs")["lock_duration"] == "PT30S"

    queues[1]["Properties"]["LockDuration"] = "PT45S"
    queues[2]["Properties"]["RequiresSession"] = True
    result = daemon.cli("import-config", str(write(tmp_path, "immutable.json", doc)))
    assert result.code == exit_status(InvalidOperation)
    assert error_line(result).startswith(
        "error: UserConfig.Namespaces[0].Queues[2].Properties.RequiresSession: "
        "requires_session cannot be changed after the queue is created"
    )
    with daemon.client(NS) as sb:  # refused before anything changed
        assert sb.queue_get("email-outbox")["lock_duration"] == "PT2M"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda q: q["Properties"].update(LockDuraton="PT1M"),
            "error: UserConfig.Namespaces[0].Queues[1].Properties.LockDuraton: unknown "
            'property; did you mean "LockDuration"?',
        ),
        (
            lambda q: q["Properties"].update(MaxDeliveryCount="3"),
            "error: UserConfig.Namespaces[0].Queues[1].Properties.MaxDeliveryCount: expected a "
            'positive integer, got string "3"',
        ),
        (
            lambda q: q["Properties"].update(DefaultMessageTimeToLive="one hour"),
            "error: UserConfig.Namespaces[0].Queues[1].Properties.DefaultMessageTimeToLive: "
            "invalid duration 'one hour'",
        ),
        (  # a range only the daemon checks: its message, behind the path
            lambda q: q["Properties"].update(LockDuration="PT10M"),
            "error: UserConfig.Namespaces[0].Queues[1].Properties.LockDuration: lock_duration "
            "PT10M is out of range",
        ),
    ],
    ids=["unknown", "type", "duration", "daemon-range"],
)
def test_malformed_configs_name_the_path(
    daemon: Any, tmp_path: Path, change: Any, message: str
) -> None:
    doc = json.loads(QUEUES_ONLY.read_text())
    change(doc["UserConfig"]["Namespaces"][0]["Queues"][1])
    result = daemon.cli("import-config", str(write(tmp_path, "bad.json", doc)))
    assert result.code == exit_status(BadRequest), result
    assert error_line(result).startswith(message)
    as_json = daemon.cli("-o", "json", "import-config", str(tmp_path / "bad.json"))
    assert json.loads(error_line(as_json))["error"]["code"] == "BadRequest"


def test_invalid_json_and_missing_file(daemon: Any, tmp_path: Path) -> None:
    bad = tmp_path / "Config.json"
    bad.write_text('{"UserConfig": {"Namespaces": [}}')
    result = daemon.cli("import-config", str(bad))
    assert result.code == exit_status(BadRequest)
    assert error_line(result).startswith(f"error: {bad}: not valid JSON at line 1 column 32")
    missing = daemon.cli("import-config", str(tmp_path / "nope.json"))
    assert missing.code == exit_status(BadRequest)
    assert "cannot read" in error_line(missing)


def test_queue_round_trip_with_extras_and_forwarding(daemon_factory: Any, tmp_path: Path) -> None:
    first = daemon_factory()
    import_rows(first, QUEUES_ONLY)
    run(
        first,
        "namespace",
        "create",
        "premiumns1",
        "--sku",
        "premium",
        "--premium-messaging-partitions",
        "2",
        "--capacity",
        "2",
    )
    run(first, "-n", "premiumns1", "queue", "create", "jobs", "--max-size", "2048")
    run(first, "namespace", "create", "basicns1", "--sku", "basic")
    run(first, "-n", "basicns1", "queue", "create", "tasks", "--max-delivery-count", "4")
    run(
        first,
        "queue",
        "create",
        "archive",
        "--status",
        "SendDisabled",
        "--auto-delete-on-idle",
        "P7D",
    )
    run(
        first,
        "queue",
        "create",
        "inbox",
        "--forward-to",
        "archive",
        "--forward-dead-lettered-messages-to",
        "archive",
        "--lock-duration",
        "PT5S",
    )
    out = tmp_path / "export.json"
    result = run(first, "export-config", "--file", str(out))
    assert result.json() == {"file": str(out), "namespaces": ["basicns1", "premiumns1", NS]}
    config = json.loads(out.read_text())
    basic, premium, standard = config["UserConfig"]["Namespaces"]
    assert basic["Properties"] == {"Sku": "Basic"}
    # what Basic refuses to be given is left out (daemon/README.md §15.1)
    assert basic["Queues"] == [
        {
            "Name": "tasks",
            "Properties": {
                "DeadLetteringOnMessageExpiration": False,
                "LockDuration": "PT1M",
                "MaxDeliveryCount": 4,
            },
        }
    ]
    assert premium["Properties"] == {
        "Sku": "Premium",
        "PremiumMessagingPartitions": 2,
        "Capacity": 2,
    }
    assert premium["Queues"][0]["Properties"]["EnablePartitioning"] is True
    queues = {q["Name"]: q["Properties"] for q in standard["Queues"]}
    assert queues["inbox"]["ForwardTo"] == "archive"
    assert queues["archive"]["Status"] == "SendDisabled"
    assert queues["archive"]["AutoDeleteOnIdle"] == "P7D"
    assert queues["ledger-sync"]["ForwardTo"] == ""
    assert "Status" not in queues["ledger-sync"]  # extras only where they differ

    second = daemon_factory()
    rows = import_rows(second, out)
    assert by_entity(rows)["namespace:premiumns1"] == "created"
    assert exported(second) == config
    assert set(by_entity(import_rows(second, out)).values()) == {"unchanged"}
    assert exported(second, NS) == {
        "UserConfig": {"Namespaces": [standard], "Logging": {"Type": "File"}}
    }


# -- topics, subscriptions and rules


def receive_all(daemon: Any, entity: str) -> list[dict[str, Any]]:
    result = run(daemon, "receive", entity, "--count", "50", "--mode", "receive-and-delete")
    messages: list[dict[str, Any]] = result.jsonl()
    return messages


def test_sql_action_config_imports_with_filters_and_actions(daemon: Any) -> None:
    rows = import_rows(daemon, SQL_ACTION)
    actions = by_entity(rows)
    topic = "order-events"
    subs = f"{topic}/subscriptions"
    assert actions[f"topic:{topic}"] == "created"
    assert actions[f"rule:{subs}/by-headers/rules/match-headers"] == "created"
    assert actions[f"rule:{subs}/by-headers/rules/$Default"] == "deleted"
    assert f"rule:{subs}/everything/rules/$Default" not in actions  # no Rules: $Default stays

    with daemon.client(NS) as sb:
        assert sb.topic_get(topic)["default_message_time_to_live"] == "PT3H"
        headers = sb.subscription_get(topic, "by-headers")
        assert (headers["lock_duration"], headers["max_delivery_count"]) == ("PT20S", 8)
        assert [r["name"] for r in sb.rule_list(topic, "by-headers")] == ["match-headers"]
        correlation = sb.rule_get(topic, "by-headers", "match-headers")["filter"]
        assert {k: v for k, v in correlation.items() if v not in (None, {})} == {
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
        (user,) = sb.rule_list(topic, "by-app-props")
        assert user["filter"]["properties"] == {"region": "emea", "tier": "gold"}
        assert [r["name"] for r in sb.rule_list(topic, "everything")] == ["$Default"]
        sql = sb.rule_get(topic, "refunds", "refund-routing")
        assert sql["filter"]["sql_expression"] == (
            "sys.Label = 'refund.requested' AND channel LIKE 'web%'"
        )
        assert sql["action"] == "SET sys.To = 'refund-desk'"

    run(
        daemon,
        "send",
        topic,
        "--body",
        "all-system",
        "--content-type",
        "application/json",
        "--correlation-id",
        "order-7731",
        "--subject",
        "order.placed",
        "--message-id",
        "msg-7731-a",
        "--reply-to",
        "order-replies",
        "--reply-to-session-id",
        "replies-s1",
        "--session-id",
        "cart-42",
        "--to",
        "fulfilment",
    )
    run(daemon, "send", topic, "--body", "user-prop", "-p", "region=emea", "-p", "tier=gold")
    run(
        daemon,
        "send",
        topic,
        "--body",
        "sql",
        "--subject",
        "refund.requested",
        "-p",
        "channel=web-eu",
    )
    run(
        daemon,
        "send",
        topic,
        "--body",
        "nobody-else",
        "-p",
        "region=emea",
        "-p",
        "tier=silver",
    )
    names = ("by-headers", "by-app-props", "everything", "refunds")
    got = {n: [m["body"] for m in receive_all(daemon, f"{subs}/{n}")] for n in names}
    assert got == {
        "by-headers": ["all-system"],
        "by-app-props": ["user-prop"],
        "everything": ["all-system", "user-prop", "sql", "nobody-else"],
        "refunds": ["sql"],
    }
    run(
        daemon,
        "send",
        topic,
        "--body",
        "again",
        "--subject",
        "refund.requested",
        "-p",
        "channel=web-eu",
    )
    (copy,) = receive_all(daemon, f"{subs}/refunds")
    assert copy["to"] == "refund-desk"  # the rule's action, on this subscription's copy only
    (plain,) = receive_all(daemon, f"{subs}/everything")
    assert plain["to"] is None

    again = import_rows(daemon, SQL_ACTION)
    assert set(by_entity(again).values()) == {"unchanged"}


def test_full_and_partial_configs_import(daemon: Any) -> None:
    import_rows(daemon, FULL)
    rows = import_rows(daemon, SQL_ACTION)  # the same entities, plus refunds; tier silver → gold
    changed = {k: v for k, v in by_entity(rows).items() if v != "unchanged"}
    subs = "order-events/subscriptions"
    assert changed == {
        f"subscription:{subs}/refunds": "created",
        f"rule:{subs}/refunds/rules/refund-routing": "created",
        f"rule:{subs}/refunds/rules/$Default": "deleted",
        f"rule:{subs}/by-app-props/rules/match-app-props": "recreated",
    }
    import_rows(daemon, PARTIAL)
    with daemon.client(NS) as sb:
        dedup = sb.queue_get("payments-dedup")
        assert dedup["requires_duplicate_detection"] is True
        assert dedup["duplicate_detection_history_time_window"] == "PT5M"
        assert dedup["max_delivery_count"] == 2
        audit = sb.topic_get("audit-trail")
        assert audit["requires_duplicate_detection"] is True
        assert audit["duplicate_detection_history_time_window"] == "PT10M"
        sub = sb.subscription_get("audit-trail", "audit-archive")
        assert sub["dead_lettering_on_message_expiration"] is True
        assert [r["name"] for r in sb.rule_list("audit-trail", "audit-archive")] == ["$Default"]


def test_topic_round_trip(daemon_factory: Any, tmp_path: Path) -> None:
    first = daemon_factory()
    import_rows(first, SQL_ACTION)
    import_rows(first, PARTIAL)
    run(first, "subscription", "create", "order-events", "catch-none")
    with first.client(NS) as sb:
        sb.rule_delete("order-events", "catch-none", "$Default")  # receives nothing now
        sb.subscription_create("order-events", "tagged", forward_to="orders")
        sb.rule_create(
            "order-events",
            "tagged",
            "typed",
            filter={
                "type": "correlation",
                "properties": {"n": 5, "f": 1.5, "ok": True, "s": "5"},
            },
            action="SET tagged = 'yes'",
        )
    config = exported(first)
    (ns,) = config["UserConfig"]["Namespaces"]
    topic = {t["Name"]: t for t in ns["Topics"]}["order-events"]
    subs = {s["Name"]: s for s in topic["Subscriptions"]}
    assert subs["catch-none"]["Rules"] == [
        {
            "Name": "$Default",
            "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=0"}},
        }
    ]
    assert subs["tagged"]["Properties"]["ForwardTo"] == "orders"
    tagged = {r["Name"]: r["Properties"] for r in subs["tagged"]["Rules"]}
    assert tagged["$Default"] == {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}
    assert tagged["typed"]["Action"] == {"SqlExpression": "SET tagged = 'yes'"}
    assert tagged["typed"]["CorrelationFilter"]["Properties"] == {
        "n": 5,
        "f": 1.5,
        "ok": True,
        "s": "5",
    }
    path = write(tmp_path, "export.json", config)
    second = daemon_factory()
    import_rows(second, path)
    assert exported(second) == config
    assert set(by_entity(import_rows(second, path)).values()) == {"unchanged"}
