"""``sbctl receive-deferred --session-id``: a message deferred inside a session is taken
back by the holder of that session's lock, and only by it."""

from __future__ import annotations

from typing import Any

from tests.integration.amqp_sdk import cli_json


def test_receive_deferred_takes_a_sessions_deferred_messages(daemon: Any) -> None:
    daemon.cli("queue", "create", "sq", "--enable-session", check=True)
    for body, session in (("a1", "A"), ("b1", "B")):
        daemon.cli("send", "sq", "--body", body, "--session-id", session, check=True)
    deferred = {}
    for session in ("A", "B"):
        got = daemon.cli(
            "-o", "json", "receive", "sq", "--session-id", session, "--settle", "defer",
            check=True,
        ).jsonl()  # fmt: skip
        deferred[session] = str(got[0]["sequence_number"])

    plain = daemon.cli("receive-deferred", "sq", deferred["A"])
    assert plain.code != 0 and "session" in plain.stderr
    other = daemon.cli("receive-deferred", "sq", deferred["A"], "--session-id", "B")
    assert other.code != 0 and "no deferred message" in other.stderr

    got = daemon.cli(
        "-o", "json", "receive-deferred", "sq", deferred["A"], "--session-id", "A", check=True
    ).jsonl()  # fmt: skip
    assert [(m["body"], m["session_id"]) for m in got] == [("a1", "A")]
    counts = cli_json(daemon, "queue", "show", "sq")
    assert counts["deferred_message_count"] == 1  # B's, still deferred
    assert counts["total_message_count"] == 1
    # The session was released at the end of the command.
    daemon.cli("receive", "sq", "--session-id", "A", check=True)
