"""``sbctl topic|subscription|rule`` without a daemon: flag → option mapping, rule filters
built from flags, usage errors, and the tables and JSON printed.

Commands run in-process through :func:`sbctl.cli.app.main`, with
:func:`sbctl.cli.options.connect` replaced by :class:`FakeClient`, which records the
calls (as tests/unit/test_cli_parsing.py does for queues and messages).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sbctl.cli import app, cmd_queue, cmd_topic, options
from sbctl.core.errors import MessagingEntityAlreadyExists


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("SBCTL_NAMESPACE", "SBCTL_SOCKET", "SBCTL_DATA_DIR", "SBCTL_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture
def sbctl(capsys: pytest.CaptureFixture[str]) -> Any:
    def run(*argv: str) -> Result:
        with pytest.raises(SystemExit) as exit_info:
            app.main(list(argv))
        captured = capsys.readouterr()
        code = exit_info.value.code
        return Result(code if isinstance(code, int) else 0, captured.out, captured.err)

    return run


SQL_RULE = {
    "name": "big",
    "filter": {"type": "sql", "sql_expression": "amount > 100"},
    "action": "SET sys.Label = 'big'",
    "created_at_utc": "2026-11-21T12:00:00.000Z",
}
CORRELATION_RULE = {
    "name": "eu",
    "filter": {
        "type": "correlation",
        "subject": "order",
        "correlation_id": "c-1",
        "properties": {"n": 5, "s": "5", "region": "eu"},
    },
    "action": None,
    "created_at_utc": "2026-11-21T12:00:00.000Z",
}
DEFAULT_RULE = {
    "name": "$Default",
    "filter": {"type": "true"},
    "action": None,
    "created_at_utc": "2026-11-21T12:00:00.000Z",
}


class FakeClient:
    """Stands in for sbctl.client.Client; records (method, args) in ``calls``.

    ``exists`` makes the create calls raise MessagingEntityAlreadyExists; ``rules`` is what
    rule_get/rule_list return.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.exists = False
        self.rules: list[dict[str, Any]] = [DEFAULT_RULE, SQL_RULE, CORRELATION_RULE]

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def _create(self, name: str, *args: Any) -> dict[str, Any]:
        self.calls.append((name, args))
        if self.exists:
            raise MessagingEntityAlreadyExists("it exists")
        return {"name": args[-2], **args[-1]}

    def topic_create(self, name: str, **settings: Any) -> dict[str, Any]:
        return self._create("topic_create", name, settings)

    def topic_update(self, name: str, **settings: Any) -> dict[str, Any]:
        self.calls.append(("topic_update", (name, settings)))
        return {"name": name, **settings}

    def topic_get(self, name: str) -> dict[str, Any]:
        self.calls.append(("topic_get", (name,)))
        return {"name": name, "status": "Active", "subscription_count": 2}

    def topic_list(self) -> list[dict[str, Any]]:
        self.calls.append(("topic_list", ()))
        return [
            {"name": "events", "status": "Active", "subscription_count": 2, "size_in_bytes": 2048}
        ]

    def topic_delete(self, name: str) -> dict[str, Any]:
        self.calls.append(("topic_delete", (name,)))
        return {"deleted": name}

    def subscription_create(self, topic: str, name: str, **settings: Any) -> dict[str, Any]:
        return self._create("subscription_create", topic, name, settings)

    def subscription_update(self, topic: str, name: str, **settings: Any) -> dict[str, Any]:
        self.calls.append(("subscription_update", (topic, name, settings)))
        return {"name": name, **settings}

    def subscription_get(self, topic: str, name: str) -> dict[str, Any]:
        self.calls.append(("subscription_get", (topic, name)))
        return {"name": name, "topic_name": topic, "rule_count": 1}

    def subscription_list(self, topic: str) -> list[dict[str, Any]]:
        self.calls.append(("subscription_list", (topic,)))
        return [{"name": "audit", "status": "Active", "rule_count": 1, "active_message_count": 4}]

    def subscription_delete(self, topic: str, name: str) -> dict[str, Any]:
        self.calls.append(("subscription_delete", (topic, name)))
        return {"deleted": name}

    def rule_create(
        self,
        topic: str,
        subscription: str,
        name: str,
        filter: dict[str, Any] | None = None,
        action: str | None = None,
    ) -> dict[str, Any]:
        self.calls.append(("rule_create", (topic, subscription, name, filter, action)))
        return {"name": name, "filter": filter or {"type": "true"}, "action": action}

    def rule_get(self, topic: str, subscription: str, name: str) -> dict[str, Any]:
        self.calls.append(("rule_get", (topic, subscription, name)))
        return next(r for r in self.rules if r["name"] == name)

    def rule_list(self, topic: str, subscription: str) -> list[dict[str, Any]]:
        self.calls.append(("rule_list", (topic, subscription)))
        return self.rules

    def rule_delete(self, topic: str, subscription: str, name: str) -> dict[str, Any]:
        self.calls.append(("rule_delete", (topic, subscription, name)))
        return {"deleted": name}

    def send(self, entity: str, messages: list[Any]) -> list[int]:
        self.calls.append(("send", (entity, list(messages))))
        return list(range(1, len(messages) + 1))

    def send_report(self, entity: str, messages: list[Any]) -> dict[str, Any]:
        return {"sequence_numbers": self.send(entity, messages), "diverted_to": None}


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeClient]:
    fake = FakeClient()
    monkeypatch.setattr(options, "connect", lambda ctx: fake)
    yield fake


def one_error_line(result: Result) -> str:
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    return lines[0]


# -- the three groups


@pytest.mark.parametrize("group", ["topic", "subscription", "rule"])
def test_groups_print_their_help(sbctl: Any, group: str) -> None:
    result = sbctl(group)
    assert result.code == 0 and f"Usage: sbctl {group}" in result.out
    assert all(command in result.out for command in ("create", "list", "show", "delete"))
    assert ("update" in result.out) == (group != "rule")


def test_shared_flags_map_to_the_queue_option_keys() -> None:
    for keys in (cmd_topic.TOPIC_KEYS, cmd_topic.SUBSCRIPTION_KEYS):
        for param, key in keys.items():
            if param in cmd_queue.FLAG_KEYS:
                assert cmd_queue.FLAG_KEYS[param] == key


# -- topics


def test_topic_create_maps_flags_to_option_keys(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl(
        "topic", "create", "events", "--enable-partitioning", "--max-size", "2048",
        "--default-message-time-to-live", "PT1H", "--enable-duplicate-detection",
        "--duplicate-detection-history-time-window", "10m", "--auto-delete-on-idle", "P1D",
        "--support-ordering", "--no-enable-batched-operations", "--user-metadata", "team a",
        "--status", "SendDisabled",
    )  # fmt: skip
    assert result.code == 0, result
    assert fake.calls == [
        (
            "topic_create",
            (
                "events",
                {
                    "enable_partitioning": True,
                    "max_size_in_megabytes": 2048,
                    "default_message_time_to_live": 3_600_000,
                    "requires_duplicate_detection": True,
                    "duplicate_detection_history_time_window": 600_000,
                    "auto_delete_on_idle": 86_400_000,
                    "support_ordering": True,
                    "enable_batched_operations": False,
                    "user_metadata": "team a",
                    "status": "SendDisabled",
                },
            ),
        )
    ]
    assert result.out == "created topic events (duplicate detection, status SendDisabled)\n"


def test_topic_create_without_flags_sends_no_options(sbctl: Any, fake: FakeClient) -> None:
    assert sbctl("topic", "create", "events").code == 0
    assert fake.calls == [("topic_create", ("events", {}))]


def test_topic_update_sends_only_the_options_given(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("-o", "json", "topic", "update", "events", "--status", "Disabled")
    assert result.code == 0, result
    assert fake.calls == [("topic_update", ("events", {"status": "Disabled"}))]
    assert json.loads(result.out) == {"name": "events", "status": "Disabled"}


def test_topic_create_if_not_exists_shows_the_existing_topic(sbctl: Any, fake: FakeClient) -> None:
    fake.exists = True
    result = sbctl("-o", "json", "topic", "create", "events", "--if-not-exists")
    assert result.code == 0, result
    assert fake.names() == ["topic_create", "topic_get"]
    assert json.loads(result.out)["subscription_count"] == 2
    again = sbctl("topic", "create", "events")
    assert again.code == 4 and "it exists" in one_error_line(again)


def test_topic_list_show_delete(sbctl: Any, fake: FakeClient) -> None:
    table = sbctl("topic", "list")
    assert table.code == 0
    assert "events" in table.out and "subscription count" in table.out
    assert "2.0 KiB" in table.out
    as_json = sbctl("-o", "json", "topic", "list")
    assert json.loads(as_json.out)[0]["size_in_bytes"] == 2048
    shown = sbctl("topic", "show", "events", "-o", "json")
    assert json.loads(shown.out)["name"] == "events"
    deleted = sbctl("topic", "delete", "events")
    assert deleted.out == "deleted topic events\n"
    assert fake.names() == ["topic_list", "topic_list", "topic_get", "topic_delete"]


# -- subscriptions


def test_subscription_create_maps_flags_to_option_keys(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl(
        "subscription", "create", "events", "audit", "--lock-duration", "30s",
        "--max-delivery-count", "3", "--enable-session", "--forward-to", "archive",
        "--forward-dead-lettered-messages-to", "dead",
        "--enable-dead-lettering-on-message-expiration",
        "--no-dead-letter-on-filter-exceptions", "--default-message-time-to-live", "P2D",
        "--auto-delete-on-idle", "PT10M", "--enable-batched-operations", "--user-metadata", "m",
        "--status", "ReceiveDisabled",
    )  # fmt: skip
    assert result.code == 0, result
    assert fake.calls == [
        (
            "subscription_create",
            (
                "events",
                "audit",
                {
                    "lock_duration": 30_000,
                    "max_delivery_count": 3,
                    "requires_session": True,
                    "forward_to": "archive",
                    "forward_dead_lettered_messages_to": "dead",
                    "dead_lettering_on_message_expiration": True,
                    "dead_lettering_on_filter_evaluation_exceptions": False,
                    "default_message_time_to_live": 2 * 86_400_000,
                    "auto_delete_on_idle": 600_000,
                    "enable_batched_operations": True,
                    "user_metadata": "m",
                    "status": "ReceiveDisabled",
                },
            ),
        )
    ]


def test_subscription_update_sends_only_the_options_given(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl(
        "subscription", "update", "events", "audit", "--dead-letter-on-filter-exceptions"
    )
    assert result.code == 0, result
    assert fake.calls == [
        (
            "subscription_update",
            ("events", "audit", {"dead_lettering_on_filter_evaluation_exceptions": True}),
        )
    ]


def test_subscription_create_if_not_exists(sbctl: Any, fake: FakeClient) -> None:
    fake.exists = True
    result = sbctl("-o", "json", "subscription", "create", "events", "audit", "--if-not-exists")
    assert result.code == 0, result
    assert fake.names() == ["subscription_create", "subscription_get"]
    assert json.loads(result.out)["topic_name"] == "events"


def test_subscription_list_show_delete(sbctl: Any, fake: FakeClient) -> None:
    table = sbctl("subscription", "list", "events")
    assert table.code == 0
    assert "audit" in table.out and "rule count" in table.out and "active" in table.out
    assert json.loads(sbctl("-o", "json", "subscription", "list", "events").out)[0]["name"] == (
        "audit"
    )
    shown = sbctl("-o", "json", "subscription", "show", "events", "audit")
    assert json.loads(shown.out)["rule_count"] == 1
    deleted = sbctl("subscription", "delete", "events", "audit")
    assert deleted.out == "deleted subscription events/subscriptions/audit\n"
    assert fake.calls[-1] == ("subscription_delete", ("events", "audit"))


# -- rules: the filter the flags describe


def test_rule_create_sql_filter_and_action(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl(
        "rule", "create", "events", "audit", "big",
        "--filter-sql-expression", "amount > 100", "--action-sql-expression", "SET x = 1",
    )  # fmt: skip
    assert result.code == 0, result
    assert fake.calls == [
        (
            "rule_create",
            (
                "events",
                "audit",
                "big",
                {"type": "sql", "sql_expression": "amount > 100"},
                "SET x = 1",
            ),
        )
    ]
    assert "amount > 100" in result.out and "SET x = 1" in result.out


def test_rule_create_without_filter_flags_is_the_true_filter(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("rule", "create", "events", "audit", "all", "--action-sql-expression", "SET x=1")
    assert result.code == 0, result
    assert fake.calls == [("rule_create", ("events", "audit", "all", None, "SET x=1"))]
    assert "TrueFilter" in result.out


def test_rule_create_correlation_flags(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl(
        "rule", "create", "events", "audit", "eu",
        "--correlation-id", "c", "--message-id", "m", "--to", "t", "--reply-to", "r",
        "--label", "order", "--session-id", "s", "--reply-to-session-id", "rs",
        "--content-type", "application/json",
        "--correlation-filter-property", "n=5", "--correlation-filter-property", 's="5"',
        "--correlation-filter-property", "ok=true", "--correlation-filter-property", "f=2.5",
        "--correlation-filter-property", "region=eu",
    )  # fmt: skip
    assert result.code == 0, result
    [(_, (topic, subscription, name, rule_filter, action))] = fake.calls
    assert (topic, subscription, name, action) == ("events", "audit", "eu", None)
    assert rule_filter == {
        "type": "correlation",
        "correlation_id": "c",
        "message_id": "m",
        "to": "t",
        "reply_to": "r",
        "subject": "order",
        "session_id": "s",
        "reply_to_session_id": "rs",
        "content_type": "application/json",
        "properties": {"n": 5, "s": "5", "ok": True, "f": 2.5, "region": "eu"},
    }
    assert type(rule_filter["properties"]["n"]) is int


def test_rule_subject_alias_and_property_only_filter(sbctl: Any, fake: FakeClient) -> None:
    assert sbctl("rule", "create", "t", "s", "r1", "--subject", "x").code == 0
    assert sbctl("rule", "create", "t", "s", "r2", "--correlation-filter-property", "k=v").code == 0
    assert [call[1][3] for call in fake.calls] == [
        {"type": "correlation", "subject": "x"},
        {"type": "correlation", "properties": {"k": "v"}},
    ]


@pytest.mark.parametrize("value", ["5", '"5"', "true", "2.5", "null", "text", "[1]", "-3"])
def test_correlation_property_types_match_send(sbctl: Any, fake: FakeClient, value: str) -> None:
    """A filter on a property matches what `send -p` sends: both type the value alike."""
    assert sbctl("send", "events", "--body", "x", "-p", f"k={value}").code == 0
    item = f"k={value}"
    assert (
        sbctl("rule", "create", "events", "a", "r", "--correlation-filter-property", item).code == 0
    )
    [(_, (_, [message])), (_, (_, _, _, rule_filter, _))] = fake.calls
    sent = message.application_properties["k"]
    assert rule_filter["properties"]["k"] == sent
    assert type(rule_filter["properties"]["k"]) is type(sent)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--correlation-id", "c"], "--correlation-id"),
        (["--label", "order"], "--label"),
        (["--subject", "order"], "--subject"),
        (["--content-type", "text/plain"], "--content-type"),
        (["--correlation-filter-property", "n=5"], "--correlation-filter-property"),
    ],
)
def test_sql_and_correlation_flags_together_are_a_usage_error(
    sbctl: Any, fake: FakeClient, flags: list[str], named: str
) -> None:
    result = sbctl(
        "rule", "create", "events", "audit", "r", "--filter-sql-expression", "1=1", *flags
    )
    assert result.code == 2, result
    line = one_error_line(result)
    assert "--filter-sql-expression" in line and named in line and "--help" in line
    assert "--label/--subject" not in line  # only the alias typed
    assert result.out == "" and fake.calls == []


@pytest.mark.parametrize(
    "argv",
    [
        ["topic", "update", "events"],
        ["subscription", "update", "events", "audit"],
        ["topic", "create", "events", "--status", "ReceiveDisabled"],
        ["subscription", "create", "events", "audit", "--status", "SendDisabled"],
        ["subscription", "create", "events", "audit", "--max-delivery-count", "0"],
        ["topic", "create", "events", "--max-size", "big"],
        ["topic", "create", "events", "--lock-duration", "PT1M"],
        ["subscription", "create", "events", "audit", "--enable-partitioning"],
        ["subscription", "create", "events"],
        ["subscription", "list"],
        ["rule", "create", "events", "audit"],
        ["rule", "list", "events"],
        ["rule", "update", "events", "audit", "r"],
    ],
)
def test_bad_command_line_is_one_line_and_exit_2(
    sbctl: Any, fake: FakeClient, argv: list[str]
) -> None:
    result = sbctl(*argv)
    assert result.code == 2, result
    line = one_error_line(result)
    assert line.startswith("error: ") and "--help" in line
    assert result.out == "" and fake.calls == []


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["topic", "create", "t", "--default-message-time-to-live", "soon"], "--default-message"),
        (["topic", "update", "t", "--duplicate-detection-history-time-window", "x"], "--duplicate"),
        (["subscription", "create", "t", "s", "--lock-duration", "abc"], "--lock-duration"),
        (["subscription", "update", "t", "s", "--auto-delete-on-idle", "P1Y"], "--auto-delete"),
        (
            ["rule", "create", "t", "s", "r", "--correlation-filter-property", "novalue"],
            "'--correlation-filter-property': invalid property",
        ),
        (
            ["rule", "create", "t", "s", "r", "--correlation-filter-property", "=1"],
            "'--correlation-filter-property': invalid property",
        ),
    ],
)
def test_bad_value_is_a_usage_error(
    sbctl: Any, fake: FakeClient, argv: list[str], needle: str
) -> None:
    result = sbctl(*argv)
    assert result.code == 2, result
    assert needle in one_error_line(result)
    assert fake.calls == []


def test_bad_value_as_json(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl(
        "-o", "json", "rule", "create", "t", "s", "r", "--correlation-filter-property", "x"
    )
    assert result.code == 2
    error = json.loads(one_error_line(result))["error"]
    assert error["code"] == "UsageError" and "--correlation-filter-property" in error["message"]


# -- rules: what is printed


def test_rule_show_sql_filter_and_action(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("rule", "show", "events", "audit", "big")
    assert result.code == 0, result
    assert fake.calls == [("rule_get", ("events", "audit", "big"))]
    rows = {line.split(None, 1)[0]: line.split(None, 1)[1].strip() for line in _rows(result.out)}
    assert rows["filter"] == "SQL"
    assert rows["sql_expression"] == "amount > 100"
    assert rows["action"] == "SET sys.Label = 'big'"


def test_rule_show_correlation_fields_with_typed_properties(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("rule", "show", "events", "audit", "eu")
    assert result.code == 0, result
    rows = dict(line.rsplit(None, 1) for line in _rows(result.out))
    assert rows["filter"] == "correlation"
    assert rows["subject"] == "order" and rows["correlation_id"] == "c-1"
    assert rows["property n"] == "5" and rows["property s"] == '"5"'
    assert rows["property region"] == '"eu"' and rows["action"] == "-"


def test_rule_show_default_rule(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("rule", "show", "events", "audit", "$Default")
    assert result.code == 0, result
    assert "$Default" in result.out and "TrueFilter (1=1)" in result.out


def test_rule_show_json_is_the_daemon_shape(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("-o", "json", "rule", "show", "events", "audit", "eu")
    assert json.loads(result.out) == CORRELATION_RULE


def test_rule_list_summarises_filters(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("rule", "list", "events", "audit")
    assert result.code == 0, result
    out = result.out
    assert "TrueFilter (1=1)" in out
    assert "SQL: amount > 100" in out and "SET sys.Label = 'big'" in out
    assert 'correlation: correlation_id=c-1, subject=order, n=5, s="5", region="eu"' in out
    as_json = sbctl("-o", "json", "rule", "list", "events", "audit")
    assert json.loads(as_json.out) == fake.rules


def test_rule_list_empty(sbctl: Any, fake: FakeClient) -> None:
    fake.rules = []
    assert sbctl("rule", "list", "events", "audit").out == "(none)\n"
    assert json.loads(sbctl("-o", "json", "rule", "list", "events", "audit").out) == []


def test_rule_delete(sbctl: Any, fake: FakeClient) -> None:
    result = sbctl("rule", "delete", "events", "audit", "$Default")
    assert result.code == 0, result
    assert result.out == "deleted rule $Default of events/subscriptions/audit\n"
    assert fake.calls == [("rule_delete", ("events", "audit", "$Default"))]


def test_rule_tables_escape_control_characters(sbctl: Any, fake: FakeClient) -> None:
    fake.rules = [
        {
            "name": "r\x1b[2J",
            "filter": {"type": "correlation", "properties": {"k\x1b": "v\u202e"}},
            "action": None,
        }
    ]
    for argv in (["rule", "list", "t", "s"], ["rule", "show", "t", "s", "r\x1b[2J"]):
        result = sbctl(*argv)
        assert result.code == 0, result
        assert "\x1b" not in result.out and "\u202e" not in result.out


def test_filter_summary_of_unknown_and_missing_filters() -> None:
    assert cmd_topic.filter_summary(None) == "TrueFilter (1=1)"
    assert cmd_topic.filter_summary({"type": "false"}) == "FalseFilter (1=0)"
    assert cmd_topic.filter_summary({"type": "other"}) == "other"


def _rows(table: str) -> list[str]:
    """The body lines of a two-column property/value table."""
    lines = [line.strip() for line in table.splitlines()]
    return [line for line in lines[2:] if line]
