"""The Go SDK (github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus on go-amqp, a
strict AMQP stack), unchanged, against a real daemon over AMQP, and its admin client over
HTTPS: the scenario matrix of daemon/README.md §29 ("SDKs and AMQP stacks verified"), one
test per row.

The program is ``tests/sdk/go`` (a Go module; go.sum pins every dependency). The first build
downloads the modules through the Go module proxy and compiles for minutes (``.ci/run`` does
both ahead); an up-to-date binary is not rebuilt. The program runs every step at once, each
on its own entities, and reports each step's result or error; the tests below read that
report. The Go SDK has no transactions (no coordinator link in azservicebus), so that row is
skipped with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.amqp_sdk import cli_json, connection_string, peek
from tests.integration.sdk_programs import (
    SDK_DIR,
    newest_mtime,
    require_tools,
    run_program,
    run_step,
)

GO_DIR = SDK_DIR / "go"
BINARY = GO_DIR / "sdktest"

pytestmark = [pytest.mark.sdk, pytest.mark.timeout(900)]

# Queues the program uses (name -> options); topics and rules it makes with the admin client.
QUEUES: dict[str, dict[str, Any]] = {
    **{
        q: {}
        for q in (
            "go-basic", "go-batch", "go-peek", "go-abandon", "go-dlq", "go-defer", "go-sched",
            "go-renew", "go-rad", "go-props", "go-fields", "go-limits",
        )
    },
    "go-peek-part": {"enable_partitioning": True},
    "go-maxdel": {"max_delivery_count": 2},
    "go-ttl": {"dead_lettering_on_message_expiration": True},
    "go-sess": {"requires_session": True},
    "go-sess-defer": {"requires_session": True},
    "go-lockexp": {"lock_duration": 5000},
}  # fmt: skip


@pytest.fixture(scope="module")
def go_program() -> None:
    require_tools("go")
    sources = [GO_DIR / "go.mod", GO_DIR / "go.sum", *GO_DIR.glob("*.go")]
    if BINARY.exists() and BINARY.stat().st_mtime >= newest_mtime(*sources):
        return
    cmd = ["go", "build", "-buildvcs=false", "-o", BINARY.name, "."]
    run_step(cmd, GO_DIR, timeout=600, what="building tests/sdk/go")


@pytest.fixture(scope="module")
def report(go_program: None, module_daemon: Any) -> dict[str, Any]:
    """The program's report, one run for the module: {step: result or {"error": ...}}."""
    with module_daemon.client() as client:
        for name, options in QUEUES.items():
            client.queue_create(name, **options)
    env = dict(
        module_daemon.env,
        SBCTL_CONNECTION_STRING=connection_string(module_daemon),
        SBCTL_CERT=module_daemon.cli("-o", "json", "daemon", "cert", check=True).json()[
            "certificate"
        ],
    )
    got = run_program([str(BINARY)], GO_DIR, env, timeout=120)
    assert got["sdk"].startswith("azservicebus v1.")
    steps: dict[str, Any] = got["steps"]
    return steps


def step(report: dict[str, Any], name: str) -> dict[str, Any]:
    result: dict[str, Any] = dict(report[name])
    assert "error" not in result, f"{name}: {result['error']}"
    result.pop("seconds")
    return result


def test_send_receive_complete(report: dict[str, Any]) -> None:
    assert step(report, "send_receive_complete") == {
        "body": "hello",
        "delivery_count": 1,
        "sequence_number": 1,
        "left": 0,
    }


def test_batch_of_100(report: dict[str, Any]) -> None:
    assert step(report, "batch_100") == {
        "received": 100,
        "in_order": True,
        "distinct_sequence_numbers": 100,
    }


@pytest.mark.parametrize("kind", ["plain", "partitioned"])
def test_peek_pages_see_every_message_once(report: dict[str, Any], kind: str) -> None:
    got = step(report, f"peek_{kind}")
    assert (got["distinct"], got["seen_twice"]) == (40, 0)
    assert got["pages"] == [7, 7, 7, 7, 7, 5, 0]


def test_abandon_redelivers_with_delivery_count_2(report: dict[str, Any]) -> None:
    assert step(report, "abandon") == {"delivery_counts": [1, 2]}


def test_dead_letter_with_reason_and_description(report: dict[str, Any]) -> None:
    assert step(report, "dead_letter") == {
        "body": "poison",
        "reason": "bad-order",
        "description": "total is negative",
        "source": None,
    }


def test_max_delivery_count_dead_letters(report: dict[str, Any]) -> None:
    got = step(report, "max_delivery_count")
    assert (got["body"], got["reason"], got["left_in_queue"]) == (
        "twice",
        "MaxDeliveryCountExceeded",
        0,
    )


def test_ttl_expiry_dead_letters(report: dict[str, Any]) -> None:
    got = step(report, "ttl_expiry")
    assert (got["body"], got["reason"], got["received_from_queue"]) == (
        "short-lived",
        "TTLExpiredException",
        0,
    )


def test_defer_receive_deferred_and_complete(report: dict[str, Any]) -> None:
    assert step(report, "defer") == {
        "body": "later",
        "state": 1,  # MessageStateDeferred
        "same_lock_token_as_first": False,
        "complete_error": None,
        "left": 0,
    }


def test_schedule_and_cancel(report: dict[str, Any]) -> None:
    got = step(report, "schedule_cancel")
    assert got["cancelled_state_before"] == 2  # MessageStateScheduled
    assert (got["cancelled_after_cancel"], got["peeked_after_cancel"]) == (False, 1)
    assert got["received"] == "soon" and 0 <= got["late_ms"] < 5000
    assert got["enqueued_at_scheduled_time"] is True


def test_sessions_next_named_state_and_renew(report: dict[str, Any]) -> None:
    got = step(report, "sessions")
    extended = got.pop("renew_extended_ms")
    assert got == {
        "next_session": "A",
        "next_received": ["a1", "a2"],
        "state": "checkpoint-1",
        "named_session": "B",
        "named_received": ["b1"],
    }
    assert extended >= 1000


def test_defer_and_receive_deferred_inside_a_session(report: dict[str, Any]) -> None:
    assert step(report, "session_defer") == {
        "peeked": ["in-session"],
        "deferred": "in-session",
        "session": "D",
        "complete_error": None,
        "left": 0,
    }


def test_renew_message_lock(report: dict[str, Any]) -> None:
    assert step(report, "renew_message_lock")["extended_ms"] >= 1000


def test_lock_expiry_loses_the_lock_and_redelivers(report: dict[str, Any]) -> None:
    got = step(report, "lock_expiry")
    # Locked for the queue's 5 s (less what the delivery took to reach the program).
    assert 2 < got["lock_seconds"] <= 5.1
    assert (got["complete_code"], got["delivery_count_again"]) == ("locklost", 2)


def test_receive_and_delete(report: dict[str, Any]) -> None:
    assert step(report, "receive_and_delete") == {
        "received": ["once", "twice"],
        "left": 0,
        "complete_refused": True,  # the SDK refuses to settle a deleted message
    }


def test_every_application_property_type_round_trips_exactly(report: dict[str, Any]) -> None:
    got = step(report, "property_types")
    # go-amqp itself decodes every symbol as a Go string ("symbols currently decoded as string
    # to avoid exposing symbol type in message", internal/encoding/decode.go), whatever the
    # broker sends: the daemon keeps the symbol (raw AMQP: test_amqp_property_types.py).
    assert got["differ"] == {"symbol": "sent encoding.Symbol sym, received string sym"}
    assert len(got["exact"]) == 15


def test_every_message_field_round_trips(report: dict[str, Any]) -> None:
    assert step(report, "message_fields") == {
        "MessageID": "mid-1",
        "CorrelationID": "corr-1",
        "Subject": "subject-1",
        "To": "to-1",
        "ReplyTo": "reply-queue",
        "ReplyToSessionID": "reply-session",
        "ContentType": "application/json",
        "TimeToLiveSeconds": 5400.0,
        "PartitionKey": "pk-1",
        "ScheduledEnqueueTimeKept": True,
        "EnqueuedNotBeforeSchedule": True,
        "ExpiresAtSet": True,
    }


def test_topic_and_sql_rule_through_the_admin_client(
    report: dict[str, Any], module_daemon: Any
) -> None:
    assert step(report, "topic_sql_rule_admin") == {
        "rules": ["red-only:*admin.SQLFilter"],
        "received": ["red-event"],
        "seen": ["yes"],
        "active_after": 0,
    }
    assert peek(module_daemon, "go-topic/subscriptions/red") == []


def test_message_batch_size_limits(report: dict[str, Any], module_daemon: Any) -> None:
    got = step(report, "batch_size_limits")
    # The batch limit is the link's max-message-size (the namespace's 256 KiB on Standard).
    assert got["batch_bytes"] <= 256 * 1024 and got["added"] == 25
    assert got["send_full_batch_error"] is None
    assert got["small_batch_add_10k"] == "the message is too large"
    assert got["send_2mib_error"] == "the message is too large"
    assert len(peek(module_daemon, "go-limits", "--count", "100")) == 25


def test_a_wrong_key_is_refused_saying_why(report: dict[str, Any]) -> None:
    got = step(report, "auth_failure")
    assert got["code"] == "unauthorized"
    assert (
        "status code 401 and description: InvalidSignature: the token's signature does not"
        " match the namespace key" in got["send_error"]
    )


def test_transactions() -> None:
    pytest.skip("the Go SDK (azservicebus) has no transactions: no coordinator link, no API")


def test_a_lock_is_lost_once_the_namespace_clock_moves_five_minutes(
    go_program: None, module_daemon: Any
) -> None:
    """Time travel seen by the Go SDK (daemon/README.md §31): the program receives a message
    with a 5-minute lock, moves its namespace's clock 5 minutes on (POST /$sbctl/clock), and
    its renew and complete then fail with lock lost; the message comes back. A namespace of
    its own, as moving the clock would disturb the other steps' timers."""
    module_daemon.cli("namespace", "create", "go-clock-ns", check=True)
    module_daemon.cli(
        "-n", "go-clock-ns", "queue", "create", "go-clock", "--lock-duration", "5m", check=True
    )
    cs = connection_string(module_daemon, "go-clock-ns")
    port = cs.split("sb://localhost:")[1].split(";")[0]
    token = module_daemon.cli("namespace", "sas-token", "go-clock-ns", check=True).stdout.strip()
    env = dict(
        module_daemon.env,
        SBCTL_CONNECTION_STRING=cs,
        SBCTL_CLOCK_URL=f"http://localhost:{port}/$sbctl/clock",
        SBCTL_SAS_TOKEN=token,
        GO_STEPS="clock_lock_lost",
    )
    got = run_program([str(BINARY)], GO_DIR, env, timeout=120)
    assert step(got["steps"], "clock_lock_lost") == {
        "renew_code": "locklost",
        "complete_code": "locklost",
        "delivery_count_again": 2,
    }
    shown = cli_json(module_daemon, "-n", "go-clock-ns", "clock", "show")
    assert shown["offset"] == "PT5M", shown
