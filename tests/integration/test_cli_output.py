"""What the CLI prints and accepts, through the real daemon: diverted sends say where they
went, partitioned sends summarise per partition, creates confirm in one line, peek shows
scheduled and deferred state, lists come sorted, errors stay on stderr and name the flag
the user typed, global options and enum values are accepted as az accepts them.
"""

from __future__ import annotations

import json
from typing import Any

from conftest import Daemon


def test_a_diverted_send_names_its_backlog_queue(daemon: Daemon) -> None:
    for ns in ("primary-ns", "second-ns"):
        daemon.cli("namespace", "create", ns, check=True)
    daemon.cli("-n", "primary-ns", "queue", "create", "orders", check=True)
    daemon.cli(
        "namespace", "pair", "primary-ns", "--secondary", "second-ns",
        "--backlog-queue-count", "2", "--failover-interval", "0", check=True,
    )  # fmt: skip
    daemon.cli("-n", "primary-ns", "fault", "add", check=True)
    table = daemon.cli("-n", "primary-ns", "send", "orders", "--body", "a", check=True).stdout
    assert table.startswith("diverted 1 message to backlog queue primary-ns/x-servicebus-transfer/")
    assert "of namespace second-ns" in table and "\n0\n" not in f"\n{table}"
    sent = daemon.cli(
        "-n", "primary-ns", "-o", "json", "send", "orders", "--body", "b", "--repeat", "2",
        check=True,
    ).json()  # fmt: skip
    assert sent["diverted"] == 2 and sent["diverted_namespace"] == "second-ns"
    assert sent["diverted_to"].startswith("primary-ns/x-servicebus-transfer/")
    backlog = daemon.cli("-n", "second-ns", "-o", "json", "queue", "show", sent["diverted_to"])
    assert backlog.json()["active_message_count"] >= 2


def test_partitioned_send_summary_and_create_confirmation(daemon: Daemon) -> None:
    created = daemon.cli("queue", "create", "parts", "--enable-partitioning", check=True)
    assert created.stdout == "created queue parts (16 partitions)\n"
    out = daemon.cli("send", "parts", "--body", "x", "--repeat", "200", check=True).stdout
    lines = out.splitlines()
    assert lines[0].startswith("sent 200 messages to ") and lines[0].endswith(" partitions:")
    assert all(line.startswith("  partition ") and ", seq " in line for line in lines[1:])
    counts = [int(line.split(": ")[1].split(" message")[0]) for line in lines[1:]]
    assert sum(counts) == 200
    one = daemon.cli("send", "parts", "--body", "x", "--partition-key", "k", check=True).stdout
    assert one.startswith("sent 1 message: sequence number ") and one.split()[-1].isdigit()
    shown = daemon.cli("topic", "create", "events", "--enable-partitioning", check=True)
    assert shown.stdout == "created topic events (16 partitions)\n"
    topic = daemon.cli("topic", "show", "events", check=True).stdout
    queue = daemon.cli("queue", "show", "parts", check=True).stdout
    for text in (topic, queue):
        rows = [line.split() for line in text.splitlines()]
        assert ["partition_count", "16"] in rows
        assert any(row[:1] == ["partition"] for row in rows)  # the partitions table's header
        assert any(row[:1] == ["15"] for row in rows) and "entries" not in text


def test_peek_shows_scheduled_and_deferred_messages(daemon: Daemon) -> None:
    daemon.cli("queue", "create", "q", check=True)
    daemon.cli(
        "schedule", "q", "--body", "later", "--at", "2099-01-01T00:00:00Z", check=True
    )  # fmt: skip
    daemon.cli("send", "q", "--body", "now", check=True)
    got = daemon.cli("-o", "json", "receive", "q", "--settle", "none", check=True).jsonl()
    daemon.cli("message", "defer", "q", got[0]["lock_token"], check=True)
    table = daemon.cli("peek", "q", "--from-sequence", "0", "--count", "5", check=True).stdout
    header = table.splitlines()[0].split()
    assert "state" in header and "due" in header
    assert "scheduled" in table and "deferred" in table
    assert "2099-01-01T00:00:00.000Z" in table


def test_no_session_state_says_so_and_lists_are_sorted(daemon: Daemon) -> None:
    daemon.cli("queue", "create", "sq", "--enable-session", check=True)
    out = daemon.cli("session", "get-state", "sq", "S1", check=True).stdout
    assert out == "session S1 has no state\n"
    for name in ("zulu", "alpha", "mike"):
        daemon.cli("queue", "create", name, check=True)
    names = [q["name"] for q in daemon.cli("-o", "json", "queue", "list", check=True).json()]
    assert names == sorted(names)
    table = daemon.cli("queue", "list", check=True).stdout
    listed = [line.split()[0] for line in table.splitlines()[2:] if line.strip()]
    assert listed == sorted(listed)
    purged = daemon.cli("send", "alpha", "--body", "x", check=True)
    assert purged.code == 0
    assert daemon.cli("purge", "alpha", check=True).stdout == "purged 1 message from alpha\n"


def test_settle_errors_go_to_stderr_only(daemon: Daemon) -> None:
    daemon.cli("queue", "create", "q", check=True)
    result = daemon.cli("message", "complete", "q", "not-a-token")
    assert result.code != 0 and result.stdout == ""
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1


def test_global_options_after_the_command_and_enums_in_any_case(daemon: Daemon) -> None:
    created = daemon.cli(
        "namespace", "create", "casens", "--sku", "Standard", "-o", "json", "--no-retry",
        "--retry-total", "1", "--socket", str(daemon.socket), "--data-dir", str(daemon.data_dir),
        check=True,
    ).json()  # fmt: skip
    assert created["sku"] == "standard"
    daemon.cli("queue", "create", "q", "-n", "casens", "--status", "senddisabled", check=True)
    shown = daemon.cli("queue", "show", "q", "-n", "casens", "-o", "JSON")
    assert shown.code == 0, shown
    assert shown.json()["status"] == "SendDisabled"
    received = daemon.cli("receive", "q", "-n", "casens", "--mode", "Receive-And-Delete")
    assert received.code == 0, received


def test_errors_name_the_flag_typed(daemon: Daemon) -> None:
    daemon.cli("queue", "create", "q", check=True)
    for args, flag in (
        (["queue", "create", "q2", "--lock-duration", "10m"], "--lock-duration"),
        (["queue", "update", "q", "--max-size", "7"], "--max-size"),
        (["queue", "create", "q3", "--auto-delete-on-idle", "1s"], "--auto-delete-on-idle"),
        (["topic", "create", "t", "--max-size", "9"], "--max-size"),
    ):
        result = daemon.cli(*args)
        assert result.code == 5, result
        line = result.stderr.strip()
        assert flag in line and "_" not in line.split(" is ")[0], line
    bad = daemon.cli("queue", "create", "q4", "--lock-duration", "10x")
    assert bad.code == 2 and "'--lock-duration'" in bad.stderr
    late = daemon.cli("send", "q", "--body", "x", "--scheduled-enqueue-time", "soon")
    assert late.code == 2 and "'--scheduled-enqueue-time'" in late.stderr
    at = daemon.cli("schedule", "q", "--body", "x", "--at", "soon")
    assert at.code == 2 and "'--at'" in at.stderr and "scheduled-enqueue" not in at.stderr


def test_queue_create_takes_the_flags_topics_have(daemon: Daemon) -> None:
    daemon.cli(
        "queue", "create", "q", "--no-enable-batched-operations", "--user-metadata", "team a",
        check=True,
    )  # fmt: skip
    shown: dict[str, Any] = daemon.cli("-o", "json", "queue", "show", "q", check=True).json()
    assert shown["enable_batched_operations"] is False and shown["user_metadata"] == "team a"
    updated = daemon.cli(
        "-o", "json", "queue", "update", "q", "--user-metadata", "team b", check=True
    ).json()
    assert updated["user_metadata"] == "team b"
    for command, flag in (
        (["queue", "update", "q"], "--enable-session"),
        (["queue", "update", "q"], "--enable-partitioning"),
        (["topic", "update", "t"], "--enable-duplicate-detection"),
        (["subscription", "update", "t", "s"], "--enable-session"),
    ):
        refused = daemon.cli(*command, flag)
        assert refused.code == 2 and "No such option" in refused.stderr, refused
    assert json.loads(daemon.cli("-o", "json", "queue", "show", "q").stdout)["name"] == "q"


def test_send_labels_the_sequence_numbers_it_prints(daemon: Daemon) -> None:
    daemon.cli("queue", "create", "labelled", check=True)
    one = daemon.cli("send", "labelled", "--body", "a", check=True).stdout
    assert one == "sent 1 message: sequence number 1\n"
    three = daemon.cli("send", "labelled", "--body", "b", "--repeat", "3", check=True).stdout
    assert three == "sent 3 messages: sequence numbers 2, 3, 4\n"


def test_receive_shows_lock_tokens_only_when_it_leaves_them_to_settle(daemon: Daemon) -> None:
    daemon.cli("queue", "create", "tokens", check=True)
    daemon.cli("send", "tokens", "--body", "a", "--repeat", "2", check=True)
    completed = daemon.cli("receive", "tokens", check=True).stdout
    assert "lock token" not in completed and "dlv" in completed
    left = daemon.cli("receive", "tokens", "--settle", "none", check=True).stdout
    assert "lock token" in left


def test_a_time_to_live_of_zero_is_a_usage_error_naming_the_flag(daemon: Daemon) -> None:
    daemon.cli("queue", "create", "ttl", check=True)
    for command in (
        ["send", "ttl", "--body", "x"],
        ["schedule", "ttl", "--body", "x", "--at", "+1m"],
    ):
        for ttl in ("0", "0s", "PT0S"):
            result = daemon.cli(*command, "--time-to-live", ttl)
            assert result.code == 2, result
            assert "'--time-to-live'" in result.stderr and "positive" in result.stderr
            assert "time_to_live" not in result.stderr and "TimeSpan" not in result.stderr
    assert daemon.cli("-o", "json", "queue", "show", "ttl").json()["active_message_count"] == 0


def test_the_usual_slips_get_a_hint(daemon: Daemon) -> None:
    daemon.cli("topic", "create", "slips", check=True)
    daemon.cli("subscription", "create", "slips", "all", check=True)
    daemon.cli("queue", "create", "slipq", check=True)
    no_subscriptions = daemon.cli("receive", "slips/all")
    assert no_subscriptions.code == 3
    assert "'slips/subscriptions/all'" in no_subscriptions.stderr, no_subscriptions
    assert "'slips/subscriptions/nope'" not in daemon.cli("receive", "slips/nope").stderr
    eaten = daemon.cli("peek", "slipq/")  # what the shell leaves of slipq/$deadletterqueue
    assert eaten.code == 5 and "'slipq/$deadletterqueue' in single quotes" in eaten.stderr
    extra = daemon.cli("send", "slipq", "hello")
    assert extra.code == 2 and "the body is an option: sbctl send ENTITY --body" in extra.stderr
    for result in (no_subscriptions, eaten, extra):
        assert len(result.stderr.splitlines()) == 1, result
