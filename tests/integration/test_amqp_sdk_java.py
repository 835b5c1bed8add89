"""The Java SDK (com.azure:azure-messaging-servicebus on proton-j), unchanged, against a real
daemon over AMQP: send, batch, scheduled send and cancel, peek, receive and complete,
abandon, dead-letter, a session with state, and transactions through the coordinator link
(a send and a completion committed together, both rolled back, and a cross-entity
transaction), the rule manager, topics, deferral, lock renewal, receive-and-delete, the
processor client, failure reasons, the administration client over HTTPS; what the CLI sees
of it and what it sent.

The program is ``tests/sdk/java`` (a Maven project). The first build downloads the SDK and
Maven's plugins from Maven Central into the local Maven repository (about 50 MB, under a
minute here); later builds run offline, and an up-to-date build is not repeated."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from tests.integration.amqp_sdk import connection_string, peek
from tests.integration.sdk_programs import (
    MATRIX_FIELDS,
    SDK_DIR,
    check_common_matrix_rows,
    newest_mtime,
    program_env,
    require_tools,
    run_program,
    run_step,
)

JAVA_DIR = SDK_DIR / "java"
MAIN_CLASS = JAVA_DIR / "target" / "classes" / "dev" / "sbctl" / "SdkTest.class"

pytestmark = [pytest.mark.sdk, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def java_program() -> None:
    require_tools("java", "javac", "mvn")
    lib = JAVA_DIR / "target" / "lib"
    built = MAIN_CLASS.exists() and any(lib.glob("azure-messaging-servicebus-*.jar"))
    if built and MAIN_CLASS.stat().st_mtime >= newest_mtime(JAVA_DIR / "pom.xml", JAVA_DIR / "src"):
        return
    if not _offline_build_ok():  # first build on this machine: fetch from Maven Central
        run_step(
            ["mvn", "-q", "-B", "package"], JAVA_DIR, timeout=600, what="building tests/sdk/java"
        )


def _offline_build_ok() -> bool:
    """``mvn -o package``: works when the local Maven repository has everything already."""
    cmd = ["mvn", "-q", "-B", "-o", "package"]
    try:
        proc = subprocess.run(cmd, cwd=JAVA_DIR, capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


@pytest.fixture(scope="module")
def java_run(java_program: None, module_daemon: Any) -> tuple[dict[str, Any], Any]:
    """The program, run once against one daemon: (its steps, the daemon)."""
    daemon = module_daemon
    env = program_env(
        daemon,
        connection_string(daemon),
        SBCTL_TX_QUEUE="ledger",
        SBCTL_XTX_SOURCE="inbox",
        SBCTL_XTX_DEST="archive",
    )
    env["SBCTL_CERT"] = daemon.cli("-o", "json", "daemon", "cert", check=True).json()["certificate"]
    classpath = os.pathsep.join(["target/classes", "target/lib/*"])
    report = run_program(["java", "-cp", classpath, "dev.sbctl.SdkTest"], JAVA_DIR, env, 240)
    return report["steps"], daemon


def test_java_sdk_messaging_sessions_transactions_and_what_the_cli_sees(
    java_run: tuple[dict[str, Any], Any],
) -> None:
    steps, daemon = java_run

    assert steps["batch"]["count"] == 3
    assert [(p["body"], p["sequence_number"], p["state"]) for p in steps["peek"]] == [
        ("single", 1, "ACTIVE"),
        ("b1", 2, "ACTIVE"),
        ("b2", 3, "ACTIVE"),
        ("b3", 4, "ACTIVE"),
        ("scheduled", 5, "SCHEDULED"),
    ]
    assert steps["schedule"] == {"sequence_number": 5, "cancelled": 6}
    rc = steps["receive_complete"]
    assert (rc["message_id"], rc["subject"]) == ("java-1", "greeting")
    assert rc["application_properties"] == {
        "n": 7,
        "big": 5_000_000_000,
        "f": 2.5,
        "ok": True,
        "s": "text",
    }
    assert steps["abandon"] == {"delivery_count_after": 1}
    assert steps["dead_letter"] == {"reason": "bad-order", "description": "total is negative"}
    assert 0 <= steps["scheduled_receive"]["enqueued_late_by_ms"] < 3000
    session = steps["session"]
    assert (session["state"], session["received"]) == ("checkpoint-1", ["a1", "a2"])
    assert session["named_session"] == "B"
    tx = steps["transaction"]
    assert tx["during"] == ["in-1", "in-2"]  # nothing applied before the commit
    assert tx["after_commit"] == ["in-2", "out-committed"]  # both applied at once
    assert tx["after_rollback"] == ["in-2", "out-committed"]  # neither applied
    # Cross-entity (one AMQP session for all links): receive from inbox, send to archive.
    assert steps["cross_entity_transaction"] == {"source_after": [], "dest_after": ["moved"]}
    # The rule manager (AMQP rule operations): $Default replaced by a SQL filter.
    assert steps["topic_rules"] == {"rules": ["red-only"], "received": ["red-event"]}
    assert steps["defer_renew"] == {"deferred": "w1", "renewed": True}
    assert steps["receive_and_delete"] == {"body": "w3"}
    assert steps["processor"] == {"received": ["p1", "p2", "p3", "p4", "p5"]}
    assert steps["from_cli"] == {
        "body": "from-cli",
        "subject": "s",
        "application_properties": {"count": 3},
    }
    # A 200 KB message split over frames, then a full batch on the same link; the session
    # processor over two sessions.
    volume = steps["volume"]
    assert volume["large_bytes"] == 200 * 1024 and volume["batch"] > 200
    assert volume["received"] == volume["batch"]
    assert volume["session_processor"] == ["P:p1", "P:p2", "Q:q1"]
    assert steps["errors"] == {
        "not_found": "MESSAGING_ENTITY_NOT_FOUND",
        "session_taken": "SESSION_CANNOT_BE_LOCKED",
    }
    # ServiceBusAdministrationClient over HTTPS, as the SDK's samples use it: update a queue
    # (read back), disable it (a send is refused as disabled), replace $Default with a SQL rule
    # with an action and a correlation rule (the SDK's createRule(topic, rule, subscription)),
    # runtime counts, delete.
    assert steps["admin"] == {
        "updated": [60, 10, 60, 10],
        "disabled": ["Disabled", "MESSAGING_ENTITY_DISABLED"],
        "rules": ["BlueSqlRule:SqlRuleFilter", "ImportantCorrelationRule:CorrelationRuleFilter"],
        "subscription": {"active_before": 2, "received": ["Red/Red", "Blue/BlueProcessed"]},
        "topic_subscriptions": 1,
        "exist_after_delete": [False, False],
    }

    # What the CLI sees, field for field and with the property types kept.
    (left,) = peek(daemon, "orders", "--count", "10")
    assert (left["body"], left["message_id"], left["subject"]) == (
        "left-for-cli",
        "java-left",
        "cross",
    )
    assert left["application_properties"] == {
        "count": 3,
        "name": "x",
        "ratio": 2.5,
        "flag": True,
        "big": 5_000_000_000,
    }
    assert peek(daemon, "orders/$deadletterqueue", "--count", "10") == []
    assert peek(daemon, "chat", "--count", "10") == []
    ledger = peek(daemon, "ledger", "--count", "10")
    # in-2's completion was rolled back: it is still there, delivered once; the rolled-back
    # send never became a message.
    assert [(m["body"], m["delivery_count"]) for m in ledger] == [("in-2", 1), ("out-committed", 0)]
    assert peek(daemon, "inbox", "--count", "10") == []
    assert [m["body"] for m in peek(daemon, "archive", "--count", "10")] == ["moved"]
    for entity in ("work", "from-cli", "bulk", "chat", "events/subscriptions/audit"):
        assert peek(daemon, entity, "--count", "10") == [], entity
    rules = daemon.cli("-o", "json", "rule", "list", "events", "audit", check=True).json()
    assert [r["name"] for r in rules] == ["red-only"]


def test_java_sdk_scenario_matrix(java_run: tuple[dict[str, Any], Any]) -> None:
    """The matrix rows the steps above leave out (tests/sdk/java MatrixSteps)."""
    matrix = java_run[0]["matrix"]
    print("matrix steps took", java_run[0]["matrix_ms"], "ms")  # (shown with pytest -s)
    assert java_run[0]["matrix_ms"] < 60_000
    fields = matrix["fields"]
    assert fields.pop("scheduled_enqueue_time") > 0
    assert fields == {**MATRIX_FIELDS, "time_to_live_s": 90, "enqueued_not_before_due": True}
    check_common_matrix_rows(matrix)
    assert matrix["lock_expiry"] == {
        "complete_after_expiry": "MESSAGE_LOCK_LOST",
        "body": "lock-me",
        "delivery_count": 1,
    }
    limit = matrix["batch_limit"]
    assert limit["max_size_in_bytes"] == 256 * 1024
    assert limit["oversized_added"] == "MESSAGE_SIZE_EXCEEDED"  # tryAddMessage throws
    assert limit["oversized_send"] == "MESSAGE_SIZE_EXCEEDED"
    # scheduleMessage(msg, at, tx) is refused with the reason (never run outside the
    # transaction); a send with ScheduledEnqueueTime in a transaction is scheduled at the
    # commit, dropped by a rollback; deferred messages settle through $management inside one.
    tx = matrix["transaction_schedule"]
    assert "cannot be part of a transaction" in tx["schedule_refused"]
    assert tx["deferred_complete_during"] == [
        "sched-committed:SCHEDULED",
        "d1:DEFERRED",
        "d2:DEFERRED",
    ]
    assert tx["after"] == ["sched-committed:SCHEDULED", "d2:DEFERRED"]


def test_java_application_property_types_round_trip_exactly(
    java_run: tuple[dict[str, Any], Any],
) -> None:
    assert java_run[0]["matrix"]["property_types"] == {
        "int": ["Integer", "7"],
        "long": ["Long", "42"],
        "short": ["Short", "12"],
        "byte": ["Byte", "5"],
        "float": ["Float", "1.5"],
        "double": ["Double", "2.5"],
        "bool": ["Boolean", "true"],
        "string": ["String", "text"],
        "char": ["Character", "c"],
        "uuid": ["UUID", "0f8fad5b-d9cb-469f-a165-70867728950e"],
        "date": ["Date", "1772600767891"],
        "ubyte": ["UnsignedByte", "200"],
        "ushort": ["UnsignedShort", "60000"],
        "uint": ["UnsignedInteger", "4000000000"],
        "ulong": ["UnsignedLong", str(2**63 - 1)],
    }
