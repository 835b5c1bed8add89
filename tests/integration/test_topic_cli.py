"""Topics, subscriptions and rules end to end: a real daemon, the real ``sbctl`` CLI.

``topic``, ``subscription`` and ``rule`` create/list/show/update/delete and their ``-o
json`` shapes; messages sent to a topic and received from its subscriptions (daemon/README.md
§10.2);
the ``$Default`` rule of a new subscription and a subscription without rules (§10.1); a
correlation filter on a typed property (§10.4); a SQL filter with an action, whose copy
carries ``RuleName`` (§10.3); filter exceptions dead-lettered or dropped as the
subscription's flag says (§10.7); the error contract (exit status plus one line on stderr)
for bad SQL and unknown entities. Everything goes through the CLI, the client is not used.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOPIC = "events"
EXIT_NOT_FOUND = 3
EXIT_ALREADY_EXISTS = 4
EXIT_BAD_REQUEST = 5
EXIT_USAGE = 2
COUNT_KEYS = (
    "active_message_count",
    "dead_letter_message_count",
    "transfer_message_count",
    "transfer_dead_letter_message_count",
    "total_message_count",
)


def run(daemon: Any, *args: str) -> Any:
    """``sbctl -o json ARGS`` that must succeed; returns the CliResult."""
    result = daemon.cli("-o", "json", *args)
    assert result.code == 0, f"sbctl -o json {' '.join(args)} failed: {result}"
    assert result.stderr == "", result.stderr
    return result


def js(daemon: Any, *args: str) -> Any:
    return run(daemon, *args).json()


def lines(daemon: Any, *args: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = run(daemon, *args).jsonl()
    return out


def fails(daemon: Any, exit_code: int, error_code: str, *args: str) -> dict[str, Any]:
    """A command that must exit ``exit_code`` with one JSON error line on stderr."""
    result = daemon.cli("-o", "json", *args)
    assert result.code == exit_code, f"sbctl {' '.join(args)}: expected {exit_code}: {result}"
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    error: dict[str, Any] = json.loads(line)["error"]
    assert error["code"] == error_code, error
    return error


def sub_path(sub: str) -> str:
    return f"{TOPIC}/subscriptions/{sub}"


def send(daemon: Any, body: str, *flags: str) -> int:
    """Send one message to the topic through the CLI; its sequence number."""
    result = js(daemon, "send", TOPIC, "--body", body, *flags)
    assert result["sent"] == 1
    number: int = result["sequence_numbers"][0]
    return number


def receive_all(daemon: Any, sub: str) -> list[dict[str, Any]]:
    """Receive (and complete) everything the subscription holds: a send returns once its
    copies are stored, so there is nothing to wait for."""
    return lines(daemon, "receive", sub_path(sub), "--count", "100")


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return sorted(m["body"] for m in messages)


def only_rule(daemon: Any, sub: str, name: str, *flags: str) -> None:
    """Give the subscription one rule: ``name`` with ``flags``, $Default gone."""
    run(daemon, "rule", "create", TOPIC, sub, name, *flags)
    run(daemon, "rule", "delete", TOPIC, sub, "$Default")


# ============================================================================= topics


def test_topic_create_list_show_update_delete(daemon: Any) -> None:
    created = js(
        daemon, "topic", "create", TOPIC, "--max-size", "2048",
        "--default-message-time-to-live", "1h", "--enable-duplicate-detection",
        "--duplicate-detection-history-time-window", "PT10M", "--user-metadata", "team a",
    )  # fmt: skip
    assert created["name"] == TOPIC
    assert created["max_size_in_megabytes"] == 2048
    assert created["default_message_time_to_live"] == "PT1H"
    assert created["requires_duplicate_detection"] is True
    assert created["duplicate_detection_history_time_window"] == "PT10M"
    assert created["user_metadata"] == "team a"
    assert created["status"] == "Active"
    assert created["subscription_count"] == 0
    assert created["size_in_bytes"] == 0 and created["scheduled_message_count"] == 0

    fails(daemon, EXIT_ALREADY_EXISTS, "MessagingEntityAlreadyExists", "topic", "create", TOPIC)
    again = js(daemon, "topic", "create", TOPIC, "--if-not-exists", "--max-size", "1024")
    assert again["max_size_in_megabytes"] == 2048  # left as it was

    run(daemon, "topic", "create", "other")
    listed = js(daemon, "topic", "list")
    assert isinstance(listed, list)
    assert sorted(t["name"] for t in listed) == ["events", "other"]
    table = daemon.cli("topic", "list")
    assert table.code == 0 and "events" in table.stdout and "subscription count" in table.stdout

    updated = js(daemon, "topic", "update", TOPIC, "--status", "Disabled", "--max-size", "1024")
    assert (updated["status"], updated["max_size_in_megabytes"]) == ("Disabled", 1024)
    shown = js(daemon, "topic", "show", TOPIC)
    assert (shown["status"], shown["max_size_in_megabytes"]) == ("Disabled", 1024)
    assert shown["requires_duplicate_detection"] is True

    # Fixed at creation: update does not offer the flag (a usage error, nothing changed).
    result = daemon.cli("topic", "update", TOPIC, "--no-enable-duplicate-detection")
    assert result.code == 2 and len(result.stderr.splitlines()) == 1

    deleted = daemon.cli("topic", "delete", TOPIC)
    assert deleted.code == 0 and deleted.stdout == f"deleted topic {TOPIC}\n"
    assert [t["name"] for t in js(daemon, "topic", "list")] == ["other"]
    fails(daemon, EXIT_NOT_FOUND, "MessagingEntityNotFound", "topic", "show", TOPIC)


def test_topic_show_table(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC, "--enable-partitioning")
    result = daemon.cli("topic", "show", TOPIC)
    assert result.code == 0, result
    assert "enable_partitioning" in result.stdout and "subscription_count" in result.stdout


# ====================================================================== subscriptions


def test_subscription_create_list_show_update_delete(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "queue", "create", "archive")
    created = js(
        daemon, "subscription", "create", TOPIC, "audit", "--lock-duration", "30s",
        "--max-delivery-count", "3", "--enable-dead-lettering-on-message-expiration",
        "--default-message-time-to-live", "P2D", "--forward-dead-lettered-messages-to", "archive",
    )  # fmt: skip
    assert created["name"] == "audit" and created["topic_name"] == TOPIC
    assert created["lock_duration"] == "PT30S"
    assert created["max_delivery_count"] == 3
    assert created["dead_lettering_on_message_expiration"] is True
    assert created["dead_lettering_on_filter_evaluation_exceptions"] is True  # the default
    assert created["default_message_time_to_live"] == "P2D"
    assert created["forward_dead_lettered_messages_to"] == "archive"
    assert created["requires_session"] is False
    assert created["rule_count"] == 1
    assert {k: created[k] for k in COUNT_KEYS} == dict.fromkeys(COUNT_KEYS, 0)

    fails(
        daemon, EXIT_ALREADY_EXISTS, "MessagingEntityAlreadyExists",
        "subscription", "create", TOPIC, "audit",
    )  # fmt: skip
    again = js(daemon, "subscription", "create", TOPIC, "audit", "--if-not-exists")
    assert again["lock_duration"] == "PT30S"

    run(daemon, "subscription", "create", TOPIC, "sessions", "--enable-session")
    listed = js(daemon, "subscription", "list", TOPIC)
    assert sorted(s["name"] for s in listed) == ["audit", "sessions"]
    assert js(daemon, "topic", "show", TOPIC)["subscription_count"] == 2
    table = daemon.cli("subscription", "list", TOPIC)
    assert table.code == 0 and "audit" in table.stdout and "rule count" in table.stdout

    updated = js(
        daemon, "subscription", "update", TOPIC, "audit",
        "--no-dead-letter-on-filter-exceptions", "--max-delivery-count", "7",
        "--status", "ReceiveDisabled",
    )  # fmt: skip
    assert updated["dead_lettering_on_filter_evaluation_exceptions"] is False
    assert updated["max_delivery_count"] == 7 and updated["status"] == "ReceiveDisabled"
    shown = js(daemon, "subscription", "show", TOPIC, "audit")
    assert shown["dead_lettering_on_filter_evaluation_exceptions"] is False
    assert shown["lock_duration"] == "PT30S"  # untouched by the update
    assert js(daemon, "subscription", "show", TOPIC, "sessions")["requires_session"] is True

    deleted = daemon.cli("subscription", "delete", TOPIC, "audit")
    assert deleted.code == 0
    assert deleted.stdout == f"deleted subscription {TOPIC}/subscriptions/audit\n"
    assert [s["name"] for s in js(daemon, "subscription", "list", TOPIC)] == ["sessions"]
    fails(daemon, EXIT_NOT_FOUND, "MessagingEntityNotFound", "subscription", "show", TOPIC, "audit")


def test_deleting_a_topic_deletes_its_subscriptions(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")
    send(daemon, "kept?")
    run(daemon, "topic", "delete", TOPIC)
    run(daemon, "topic", "create", TOPIC)
    assert js(daemon, "subscription", "list", TOPIC) == []
    fails(daemon, EXIT_NOT_FOUND, "MessagingEntityNotFound", "receive", sub_path("audit"))


# ============================================================================== rules


def test_new_subscription_has_the_default_rule(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")
    rules = js(daemon, "rule", "list", TOPIC, "audit")
    assert [r["name"] for r in rules] == ["$Default"]
    default = js(daemon, "rule", "show", TOPIC, "audit", "$Default")
    assert set(default) == {"name", "filter", "action", "created_at_utc"}
    assert default["filter"] == {"type": "true"}
    assert default["action"] is None
    table = daemon.cli("rule", "show", TOPIC, "audit", "$Default")
    assert table.code == 0 and "TrueFilter (1=1)" in table.stdout


def test_rule_create_list_show_delete(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")
    created = js(
        daemon, "rule", "create", TOPIC, "audit", "big",
        "--filter-sql-expression", "amount > 100", "--action-sql-expression", "SET tier = 'gold'",
    )  # fmt: skip
    assert created["name"] == "big"
    assert created["filter"]["type"] == "sql"
    assert "amount" in created["filter"]["sql_expression"]
    assert "tier" in created["action"]
    run(
        daemon, "rule", "create", TOPIC, "audit", "eu", "--label", "order",
        "--correlation-id", "c-1", "--correlation-filter-property", "region=eu",
        "--correlation-filter-property", "n=5",
    )  # fmt: skip
    eu = js(daemon, "rule", "show", TOPIC, "audit", "eu")
    assert eu["filter"] == {
        "type": "correlation",
        "subject": "order",
        "correlation_id": "c-1",
        "properties": {"region": "eu", "n": 5},
    }
    assert eu["action"] is None

    names = [r["name"] for r in js(daemon, "rule", "list", TOPIC, "audit")]
    assert sorted(names) == ["$Default", "big", "eu"]
    assert js(daemon, "subscription", "show", TOPIC, "audit")["rule_count"] == 3
    table = daemon.cli("rule", "list", TOPIC, "audit")
    assert table.code == 0
    assert "amount > 100" in table.stdout and "tier = 'gold'" in table.stdout
    assert "subject=order" in table.stdout and "n=5" in table.stdout
    shown = daemon.cli("rule", "show", TOPIC, "audit", "big")
    assert "sql_expression" in shown.stdout and "amount > 100" in shown.stdout

    fails(
        daemon, EXIT_ALREADY_EXISTS, "MessagingEntityAlreadyExists",
        "rule", "create", TOPIC, "audit", "big",
    )  # fmt: skip
    deleted = daemon.cli("rule", "delete", TOPIC, "audit", "big")
    assert deleted.code == 0
    assert deleted.stdout == f"deleted rule big of {TOPIC}/subscriptions/audit\n"
    fails(daemon, EXIT_NOT_FOUND, "MessagingEntityNotFound", "rule", "show", TOPIC, "audit", "big")
    fails(
        daemon, EXIT_NOT_FOUND, "MessagingEntityNotFound", "rule", "delete", TOPIC, "audit", "big"
    )


# ==================================================================== send and receive


def test_each_matching_subscription_gets_a_copy(daemon: Any, partitioned: bool) -> None:
    flags = ["--enable-partitioning"] if partitioned else []
    run(daemon, "topic", "create", TOPIC, *flags)
    for sub in ("all", "big", "none"):
        run(daemon, "subscription", "create", TOPIC, sub)
    only_rule(daemon, "big", "big", "--filter-sql-expression", "amount > 100")
    only_rule(daemon, "none", "never", "--filter-sql-expression", "1 = 0")

    send(daemon, "small", "-p", "amount=50")
    send(daemon, "large", "-p", "amount=500", "--partition-key", "k")
    send(daemon, "no amount")

    counts = {
        s["name"]: s["active_message_count"] for s in js(daemon, "subscription", "list", TOPIC)
    }
    assert counts == {"all": 3, "big": 1, "none": 0}
    assert bodies(receive_all(daemon, "all")) == ["large", "no amount", "small"]
    [large] = receive_all(daemon, "big")
    assert large["body"] == "large" and large["application_properties"] == {"amount": 500}
    assert receive_all(daemon, "none") == []
    # Peek, receive and the counts see each subscription's own copy only.
    assert js(daemon, "subscription", "show", TOPIC, "all")["active_message_count"] == 0


def test_send_when_no_subscription_matches_succeeds(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    send(daemon, "nobody listens")  # no subscriptions at all
    run(daemon, "subscription", "create", TOPIC, "audit")
    only_rule(daemon, "audit", "never", "--filter-sql-expression", "1 = 0")
    send(daemon, "dropped")
    assert receive_all(daemon, "audit") == []


def test_correlation_rule_with_a_typed_property(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "eu")
    only_rule(
        daemon, "eu", "eu-orders", "--label", "order",
        "--correlation-filter-property", "n=5", "--correlation-filter-property", "region=eu",
    )  # fmt: skip
    send(daemon, "match", "--subject", "order", "-p", "n=5", "-p", "region=eu")
    send(daemon, "string five", "--subject", "order", "-p", 'n="5"', "-p", "region=eu")
    send(daemon, "other subject", "--subject", "Order", "-p", "n=5", "-p", "region=eu")
    send(daemon, "missing property", "--subject", "order", "-p", "n=5")
    send(daemon, "six", "--subject", "order", "-p", "n=6", "-p", "region=eu")
    assert bodies(receive_all(daemon, "eu")) == ["match"]


def test_correlation_rule_on_system_properties(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "replies")
    only_rule(
        daemon, "replies", "r", "--correlation-id", "c-1", "--to", "svc",
        "--content-type", "application/json",
    )  # fmt: skip
    base = ["--correlation-id", "c-1", "--to", "svc", "--content-type", "application/json"]
    send(daemon, "match", *base)
    send(daemon, "wrong to", *base[:2], "--to", "other", *base[4:])
    send(daemon, "no content type", *base[:4])
    assert bodies(receive_all(daemon, "replies")) == ["match"]


def test_sql_rule_with_an_action_gives_its_own_copy_with_rule_name(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")  # keeps $Default (no action)
    run(
        daemon, "rule", "create", TOPIC, "audit", "gold",
        "--filter-sql-expression", "amount > 100", "--action-sql-expression", "SET tier = 'gold'",
    )  # fmt: skip
    send(daemon, "large", "-p", "amount=500")
    send(daemon, "small", "-p", "amount=5")

    got = receive_all(daemon, "audit")
    assert bodies(got) == ["large", "large", "small"]
    props = sorted(
        (m["body"], json.dumps(m["application_properties"], sort_keys=True)) for m in got
    )
    assert props == [
        ("large", json.dumps({"RuleName": "gold", "amount": 500, "tier": "gold"}, sort_keys=True)),
        ("large", json.dumps({"amount": 500}, sort_keys=True)),
        ("small", json.dumps({"amount": 5}, sort_keys=True)),
    ]


def test_deleting_every_rule_means_nothing_is_delivered(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")
    run(daemon, "subscription", "create", TOPIC, "all")
    run(daemon, "rule", "delete", TOPIC, "audit", "$Default")
    assert js(daemon, "rule", "list", TOPIC, "audit") == []
    assert daemon.cli("rule", "list", TOPIC, "audit").stdout == "(none)\n"
    send(daemon, "one")
    send(daemon, "two", "-p", "amount=1")
    assert js(daemon, "subscription", "show", TOPIC, "audit")["active_message_count"] == 0
    assert receive_all(daemon, "audit") == []
    assert bodies(receive_all(daemon, "all")) == ["one", "two"]

    # A TrueFilter rule (no filter flags) brings delivery back for later messages.
    run(daemon, "rule", "create", TOPIC, "audit", "everything")
    assert js(daemon, "rule", "show", TOPIC, "audit", "everything")["filter"] == {"type": "true"}
    send(daemon, "three")
    assert bodies(receive_all(daemon, "audit")) == ["three"]


def test_filter_exceptions_dead_letter_unless_turned_off(daemon: Any) -> None:
    """daemon/README.md §10.7: a filter naming a system property that does not exist fails; the
    message is dead-lettered (the default) or, with the flag off, dropped."""
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "keeps")
    run(daemon, "subscription", "create", TOPIC, "drops", "--no-dead-letter-on-filter-exceptions")
    for sub in ("keeps", "drops"):
        only_rule(daemon, sub, "broken", "--filter-sql-expression", "sys.NoSuchProperty = 1")
    send(daemon, "poison")
    assert receive_all(daemon, "keeps") == receive_all(daemon, "drops") == []
    [dead] = lines(daemon, "receive", sub_path("keeps") + "/$deadletterqueue", "--count", "10")
    assert dead["body"] == "poison" and dead["dead_letter_reason"] == "FilterException"
    assert lines(daemon, "receive", sub_path("drops") + "/$deadletterqueue", "--count", "10") == []

    run(daemon, "subscription", "update", TOPIC, "drops", "--dead-letter-on-filter-exceptions")
    send(daemon, "poison again")
    [dead] = lines(daemon, "receive", sub_path("drops") + "/$deadletterqueue", "--count", "10")
    assert dead["body"] == "poison again"


def test_topic_and_subscription_survive_a_restart(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "big")
    only_rule(daemon, "big", "big", "--filter-sql-expression", "amount > 100")
    send(daemon, "large", "-p", "amount=500")
    daemon.stop()
    daemon.start()
    assert [r["name"] for r in js(daemon, "rule", "list", TOPIC, "big")] == ["big"]
    send(daemon, "small", "-p", "amount=5")
    send(daemon, "larger", "-p", "amount=900")
    assert bodies(receive_all(daemon, "big")) == ["large", "larger"]


# ============================================================================= errors


def test_bad_sql_is_one_line_with_the_position(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")
    error = fails(
        daemon, EXIT_BAD_REQUEST, "BadRequest",
        "rule", "create", TOPIC, "audit", "bad", "--filter-sql-expression", "amount >",
    )  # fmt: skip
    assert re.search(r"\b(position|column|offset|char\w*)\s*\d+", error["message"], re.I), error
    action_error = fails(
        daemon, EXIT_BAD_REQUEST, "BadRequest",
        "rule", "create", TOPIC, "audit", "bad", "--action-sql-expression", "SET = 1",
    )  # fmt: skip
    assert re.search(r"\d", action_error["message"]), action_error
    table = daemon.cli("rule", "create", TOPIC, "audit", "bad", "--filter-sql-expression", "(a")
    assert table.code == EXIT_BAD_REQUEST
    (line,) = table.stderr.splitlines()
    assert line.startswith("error: ") and "Traceback" not in table.stderr
    assert [r["name"] for r in js(daemon, "rule", "list", TOPIC, "audit")] == ["$Default"]


def test_sql_and_correlation_flags_together_are_refused_before_the_daemon(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")
    error = fails(
        daemon, EXIT_USAGE, "UsageError",
        "rule", "create", TOPIC, "audit", "r", "--filter-sql-expression", "1=1", "--to", "x",
    )  # fmt: skip
    assert "--filter-sql-expression" in error["message"] and "--to" in error["message"]
    assert [r["name"] for r in js(daemon, "rule", "list", TOPIC, "audit")] == ["$Default"]


NOT_FOUND = [
    ["topic", "show", "nope"],
    ["topic", "update", "nope", "--status", "Disabled"],
    ["topic", "delete", "nope"],
    ["subscription", "create", "nope", "audit"],
    ["subscription", "list", "nope"],
    ["subscription", "show", "nope", "audit"],
    ["subscription", "show", TOPIC, "nope"],
    ["subscription", "update", TOPIC, "nope", "--max-delivery-count", "2"],
    ["subscription", "delete", TOPIC, "nope"],
    ["rule", "list", "nope", "audit"],
    ["rule", "list", TOPIC, "nope"],
    ["rule", "create", TOPIC, "nope", "r"],
    ["rule", "show", TOPIC, "audit", "nope"],
    ["rule", "delete", TOPIC, "audit", "nope"],
    ["send", "nope", "--body", "x"],
    ["receive", "nope/subscriptions/audit"],
    ["receive", f"{TOPIC}/subscriptions/nope"],
]


def test_unknown_entities_are_not_found(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")
    for args in NOT_FOUND:
        error = fails(daemon, EXIT_NOT_FOUND, "MessagingEntityNotFound", *args)
        assert "nope" in error["message"], (args, error)
        table = daemon.cli(*args)
        assert table.code == EXIT_NOT_FOUND, (args, table)
        (line,) = table.stderr.splitlines()
        assert line.startswith("error: ") and "nope" in line, (args, line)


def test_json_shapes(daemon: Any) -> None:
    run(daemon, "topic", "create", TOPIC)
    run(daemon, "subscription", "create", TOPIC, "audit")
    topic = js(daemon, "topic", "show", TOPIC)
    for key in (
        "name", "status", "max_size_in_megabytes", "default_message_time_to_live",
        "requires_duplicate_detection", "duplicate_detection_history_time_window",
        "enable_partitioning", "auto_delete_on_idle", "enable_batched_operations",
        "support_ordering", "user_metadata", "subscription_count", "size_in_bytes",
        "scheduled_message_count", "created_at_utc",
    ):  # fmt: skip
        assert key in topic, key
    sub = js(daemon, "subscription", "show", TOPIC, "audit")
    for key in (
        "name", "topic_name", "status", "lock_duration", "requires_session",
        "default_message_time_to_live", "dead_lettering_on_message_expiration",
        "dead_lettering_on_filter_evaluation_exceptions", "max_delivery_count",
        "enable_batched_operations", "forward_to", "forward_dead_lettered_messages_to",
        "auto_delete_on_idle", "user_metadata", "rule_count", *COUNT_KEYS,
    ):  # fmt: skip
        assert key in sub, key
    assert re.fullmatch(r"P.*", sub["lock_duration"]) and sub["lock_duration"] == "PT1M"
    # Lists are one JSON array (as `queue list`), not JSON Lines.
    for args in (
        ["topic", "list"],
        ["subscription", "list", TOPIC],
        ["rule", "list", TOPIC, "audit"],
    ):
        out = run(daemon, *args).stdout
        assert out.count("\n") == 1 and isinstance(json.loads(out), list)
    [rule] = js(daemon, "rule", "list", TOPIC, "audit")
    assert set(rule) == {"name", "filter", "action", "created_at_utc"}
