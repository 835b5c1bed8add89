"""The JavaScript SDK (@azure/service-bus on rhea), unchanged, against a real daemon over
AMQP: send, batch, scheduled send and cancel, peek, receive and complete, abandon,
dead-letter, sessions with state, topics, deferral, lock renewal, receive-and-delete, the
streaming subscribe() API, error codes; what the CLI sees of it and what it sent.

The program is ``tests/sdk/js/sdk_test.js``; ``npm ci`` installs its locked dependencies
into ``tests/sdk/js/node_modules`` the first time (git-ignored)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from tests.integration.amqp_sdk import amqp_type, cli_json, connection_string, peek
from tests.integration.sdk_programs import (
    MATRIX_FIELDS,
    SDK_DIR,
    check_common_matrix_rows,
    program_env,
    require_tools,
    run_program,
    run_step,
)

JS_DIR = SDK_DIR / "js"

pytestmark = [pytest.mark.sdk, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def js_program() -> None:
    require_tools("node", "npm")
    if not (JS_DIR / "node_modules" / "@azure" / "service-bus").is_dir():
        cmd = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        run_step(cmd, JS_DIR, timeout=300, what="installing @azure/service-bus")


@pytest.fixture(scope="module")
def js_run(js_program: None, module_daemon: Any) -> tuple[dict[str, Any], Any]:
    """The program, run once against one daemon: (its steps, the daemon)."""
    env = program_env(module_daemon, connection_string(module_daemon))
    report = run_program(["node", "sdk_test.js"], JS_DIR, env, timeout=180)
    return report["steps"], module_daemon


def test_js_sdk_messaging_sessions_and_what_the_cli_sees(
    js_run: tuple[dict[str, Any], Any],
) -> None:
    steps, daemon = js_run

    assert steps["batch"]["count"] == 3
    # Every message its own sequence number; the scheduled one is peeked with its state,
    # the cancelled one is gone.
    assert [(p["body"], p["sequence_number"], p["state"]) for p in steps["peek"]] == [
        ("single", 1, "active"),
        ("b1", 2, "active"),
        ("b2", 3, "active"),
        ("b3", 4, "active"),
        ("scheduled", 5, "scheduled"),
    ]
    assert steps["schedule"] == {"sequence_number": 5, "cancelled": 6}
    rc = steps["receive_complete"]
    assert rc["message_id"] == "js-1" and rc["correlation_id"] == "corr-1"
    assert rc["application_properties"] == {"n": 7, "f": 2.5, "ok": True, "s": "text"}
    assert steps["abandon"] == {"delivery_count_after": 1}
    assert steps["dead_letter"] == {"reason": "bad-order", "description": "total is negative"}
    assert 0 <= steps["scheduled_receive"]["enqueued_late_by_ms"] < 3000
    session = steps["session"]
    assert (session["state"], session["received"]) == ("checkpoint-1", ["a1", "a2"])
    assert session["renewed_until"] >= session["locked_until"]
    assert session["named_session"] == "B"
    assert steps["topic"] == {"body": "event-1"}
    assert steps["defer_renew"] == {"deferred": "w1", "renewed": True}
    assert steps["receive_and_delete"] == {"body": "w3"}
    assert steps["subscribe"] == {"received": ["s1", "s2", "s3", "s4", "s5"]}
    # What `sbctl send` sent (no message id), the SDK receives and settles.
    assert steps["from_cli"] == {
        "body": "from-cli",
        "subject": "s",
        "application_properties": {"count": 3},
        "has_message_id": True,
    }
    # A 200 KB message split over frames, then a full batch on the same link.
    volume = steps["volume"]
    assert volume["large_bytes"] == 200 * 1024 and volume["batch"] > 200
    assert volume["received"] == volume["batch"]
    assert steps["errors"] == {
        "not_found": "MessagingEntityNotFound",
        "session_taken": "SessionCannotBeLocked",
    }

    # What the CLI sees: the one message left, field for field (the JS SDK JSON-encodes a
    # string body into a data section, so the bytes are the JSON text, as on Azure).
    (left,) = peek(daemon, "orders", "--count", "10")
    assert left["body"] == '"left-for-cli"'
    assert (left["message_id"], left["subject"]) == ("js-left", "cross")
    # (rhea sends a whole JavaScript number that fits as an AMQP uint: kept, and shown typed)
    assert left["application_properties"] == {
        "count": {"$type": "uint", "value": 3},
        "name": "x",
        "ratio": 2.5,
        "flag": True,
    }
    assert peek(daemon, "orders/$deadletterqueue", "--count", "10") == []
    for entity in ("chat", "work", "from-cli", "bulk", "events/subscriptions/audit"):
        assert peek(daemon, entity, "--count", "10") == [], entity
    state = daemon.cli("-o", "json", "session", "get-state", "chat", "A", check=True).json()
    assert state["state"] is not None


def test_ci_never_skips_a_missing_toolchain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must have it"):
        require_tools("node")
    monkeypatch.setenv("CI", "")
    with pytest.raises(pytest.skip.Exception, match="node not on PATH"):
        require_tools("node")


def test_the_javascript_admin_client_creates_lists_updates_and_deletes(
    js_program: None, daemon: Any
) -> None:
    """The SDK's ServiceBusAdministrationClient over HTTPS on the connection string's port,
    trusting the generated certificate (NODE_EXTRA_CA_CERTS); tests/sdk/js/sb_admin.mjs.
    A subscription created with its first rule (defaultRuleOptions) has that rule only; the
    messaging client without UseDevelopmentEmulator=true speaks AMQP over TLS on the same
    port, and a correlation rule's number, Date and boolean properties are taken."""
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    run = subprocess.run(
        ["node", "sb_admin.mjs", connection_string(daemon)],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": cert},
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {
        "created": ["js-orders", 4, "PT30S"],
        "updated": 6,
        "exists": [True, False],
        "queues": ["js-orders"],
        "topics": ["js-events"],
        "subscriptions": ["js-all", "js-blue"],
        "rules": ["$Default", "js-sql", "js-corr"],
        "sqlRule": "n > 1",
        "runtime": 0,
        "namespace": "sbemulatorns",
        "conflict": "MessageEntityAlreadyExistsError",
        "defaultRule": {
            "rules": ["BlueRule"],
            "filter": ["Color = @color", {"@color": "Blue"}],
            "action": "SET Color = 'BlueProcessed'",
        },
        # A Date in a correlation filter is kept as its ISO 8601 text (as over HTTP).
        "overTls": {
            "props": {"n": 2, "ok": True, "when": "2000-01-01T00:00:00.000Z"},
            "received": ["hit"],
            "left": 0,
        },
        # A subscription made with only a SQL rule gets only what matches it.
        "sqlRouting": {"received": ["red"], "left": 0},
        "after": [],
    }
    assert cli_json(daemon, "queue", "list") == []


def test_js_sdk_scenario_matrix(js_run: tuple[dict[str, Any], Any]) -> None:
    """The matrix rows the steps above leave out (tests/sdk/js/matrix.js)."""
    matrix = js_run[0]["matrix"]
    print("matrix steps took", js_run[0]["matrix_ms"], "ms")  # (shown with pytest -s)
    assert js_run[0]["matrix_ms"] < 60_000
    assert matrix["fields"] == {
        **MATRIX_FIELDS,
        "time_to_live_ms": 90000,
        "scheduled_enqueue_time": matrix["fields_due"],
        "enqueued_not_before_due": True,
    }
    check_common_matrix_rows(matrix)
    assert matrix["lock_expiry"] == {
        "complete_after_expiry": "MessageLockLost",
        "body": "lock-me",
        "delivery_count": 1,
    }
    assert matrix["batch_limit"] == {
        "max_size_in_bytes": 256 * 1024,
        "oversized_added": False,
        "oversized_send": "MessageSizeExceeded",
    }
    # What the SDK hands back: JavaScript numbers whatever the AMQP integer or float type; a
    # timestamp as epoch ms and binary/uuid as a plain object of bytes (its
    # convertDatesToNumbers, as against Azure).
    assert matrix["property_types"] == JS_RECEIVED


JS_RECEIVED = {
    "int": ["number", -7],
    "long": ["number", 42],
    "short": ["number", 12],
    "byte": ["number", 5],
    "ubyte": ["number", 200],
    "ushort": ["number", 60000],
    "uint": ["number", 4000000000],
    "ulong": ["number", 9007199254740991],
    "float": ["number", 1.5],
    "double": ["number", 2.5],
    "bool": ["boolean", True],
    "string": ["string", "text"],
    "symbol": ["string", "sym"],
    "timestamp": ["number", 1772600767891],
    "uuid": ["object", "0f8fad5bd9cb469fa16570867728950e"],
    "binary": ["object", "0001feff"],
}


def test_js_typed_application_properties_are_kept_exactly(
    js_run: tuple[dict[str, Any], Any],
) -> None:
    """rhea's typed values, as `sbctl peek -o json` shows them (the copy left in m-types)."""
    (left,) = peek(js_run[1], "m-types", "--count", "10")
    shown = {k: amqp_type(v) for k, v in left["application_properties"].items()}
    assert shown == {
        "int": "int",
        "long": "long",
        "short": "short",
        "byte": "byte",
        "ubyte": "ubyte",
        "ushort": "ushort",
        "uint": "uint",
        "ulong": "ulong",
        "float": "float",
        "double": "double",
        "bool": "boolean",
        "string": "string",
        "symbol": "symbol",
        "timestamp": "timestamp",
        "uuid": "uuid",
        "binary": "binary",
    }
