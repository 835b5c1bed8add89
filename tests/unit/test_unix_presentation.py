"""The domain answers typed results (durations and instants as milliseconds, no display
strings); the Unix front-end's one presentation step turns them into exactly the dicts the
client and the CLI have always read, key order included."""

from __future__ import annotations

import importlib.util
import json
import re
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from sbctl.core.errors import MessageLockLost
from sbctl.core.protocol import decode_reply, decode_result, encode_reply
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.frontends.unix.present import _struct, present
from sbctld.overview import overview
from sbctld.results import (
    Credits,
    FaultInfo,
    LockRenewed,
    PairingStatus,
    QueueInfo,
    QueuePartition,
    Result,
    RuleInfo,
    SessionEntry,
    SessionLock,
    Settled,
    SettleFailed,
    SubscriptionInfo,
    TopicInfo,
    Transacted,
    UnavailablePartition,
)

NS = DEFAULT_NAMESPACE
DATA = Path(__file__).resolve().parent.parent / "data"
ISO = re.compile(r"^P|^\d{4}-\d\d-\d\dT")  # an ISO 8601 duration or instant


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_unix_results", DATA / "make_unix_results.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _strings(value: Any) -> list[str]:
    """Every string in a typed result, its fields' values all the way down."""
    if isinstance(value, Result):
        return [s for f in value.__struct_fields__ for s in _strings(getattr(value, f))]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def test_the_domain_answers_durations_and_instants_as_milliseconds(broker: Broker) -> None:
    clock: FakeClock = broker.clock  # type: ignore[assignment]
    t0 = clock.now
    q = broker.management.queue_create(
        NS, "q", {"lock_duration": 30_000, "enable_partitioning": True}
    )
    assert isinstance(q, QueueInfo)
    assert (q.lock_duration_ms, q.duplicate_detection_history_time_window_ms) == (30_000, 600_000)
    assert (q.created_at_ms, q.updated_at_ms, q.accessed_at_ms) == (t0, t0, t0)
    broker.housekeeping.fault_add(NS, "q", [1])
    slow = broker.housekeeping.fault_add(NS, "q", [2], "slow", 1_250)
    assert isinstance(slow, FaultInfo) and slow.latency_ms == 1_250
    assert slow.created_at_ms == t0
    parts = broker.management.queue_get(NS, "q").partitions
    assert isinstance(parts, list)
    assert isinstance(parts[1], UnavailablePartition)
    assert isinstance(parts[2], QueuePartition) and parts[2].latency_ms == 1_250
    assert parts[0].latency_ms is msgspec.UNSET  # a healthy partition has none
    topic = broker.management.topic_create(NS, "t", {"auto_delete_on_idle": 3_600_000})
    assert isinstance(topic, TopicInfo) and topic.auto_delete_on_idle_ms == 3_600_000
    sub = broker.management.subscription_create(NS, "t", "s", {"lock_duration": 5_000})
    assert isinstance(sub, SubscriptionInfo) and sub.lock_duration_ms == 5_000
    (rule,) = broker.management.rule_list(NS, "t", "s")
    assert isinstance(rule, RuleInfo) and rule.created_at_ms == t0
    broker.management.queue_create(NS, "sq", {"requires_session": True})
    broker.messaging.send(NS, "sq", [Message(body=b"x", session_id="s1")])
    lock = broker.messaging.session_accept(NS, "sq", "s1")
    assert isinstance(lock, SessionLock) and lock.locked_until_ms == t0 + 60_000
    (listed,) = broker.messaging.session_list(NS, "sq")
    assert isinstance(listed, SessionEntry) and listed.locked_until_ms == t0 + 60_000
    broker.management.queue_create(NS, "plain", {})
    broker.messaging.send(NS, "plain", [Message(body=b"y")])
    (got,) = broker.messaging.receive(NS, "plain", 1, "peek-lock")
    clock.advance(7)
    (renewed,) = broker.messaging.settle(NS, "plain", "renew-lock", [got.lock_token or ""])
    assert isinstance(renewed, LockRenewed) and renewed.locked_until_ms == t0 + 7 + 60_000
    credits = broker.management.namespace_credits(NS)
    assert isinstance(credits, Credits) and credits.capacity is msgspec.UNSET
    broker.management.namespace_create("secondary1")
    status = broker.pairings.pair(NS, "secondary1", 1, 60_000, 5_000, False)
    assert isinstance(status, PairingStatus)
    assert (status.failover_interval_ms, status.ping_primary_interval_ms) == (60_000, 5_000)
    assert status.paired_at_ms == clock.now and status.faulted_at_ms is None
    # No display string anywhere in what the domain answers.
    everything = [q, topic, sub, rule, lock, renewed, credits, status, overview(broker, NS)]
    assert not [s for s in _strings(everything) if ISO.match(s)]


def test_a_failed_settlement_carries_the_error_itself_and_the_unix_form_its_wire_map(
    broker: Broker,
) -> None:
    # The AMQP and HTTP front-ends map the error to their own forms: nothing parses back a
    # map the domain made.
    broker.management.queue_create(NS, "q", {})
    broker.messaging.send(NS, "q", [Message(body=b"a"), Message(body=b"b")])
    one, two = broker.messaging.receive(NS, "q", 2, "peek-lock")
    assert one.lock_token and two.lock_token
    unknown = str(uuid.uuid4())
    done, lost = broker.messaging.settle(NS, "q", "complete", [one.lock_token, unknown])
    assert done == Settled(lock_token=one.lock_token)
    assert isinstance(lost, SettleFailed) and isinstance(lost.error, MessageLockLost)
    assert present([done, done]) == [_struct(done), _struct(done)]  # (the all-Settled path)
    assert list(present([done])[0]) == ["lock_token", "ok"]
    shown = present([done, lost])
    assert shown[0] == {"lock_token": one.lock_token, "ok": True}
    assert list(shown[1]) == ["lock_token", "error"] and shown[1]["lock_token"] == unknown
    assert shown[1]["error"]["code"] == "MessageLockLost"
    assert shown[1]["error"]["message"] == lost.error.message
    result = broker.messaging.transact(
        NS, "q", [Message(body=b"c")], [("defer", two.lock_token, None, None, None)]
    )
    assert isinstance(result, Transacted) and result.settlements == [
        Settled(lock_token=two.lock_token)
    ]
    wire = present(result)
    assert wire == {
        "sequence_numbers": result.sequence_numbers,
        "settlements": [{"lock_token": two.lock_token, "ok": True}],
    }
    assert list(wire) == ["sequence_numbers", "settlements"]


def test_the_unix_presentation_is_the_wire_form_of_the_release_before(
    broker: Broker,
) -> None:
    expected = json.loads((DATA / "unix_results_v1.json").read_text())
    clock: FakeClock = broker.clock  # type: ignore[assignment]
    got = _sizes(json.loads(json.dumps(_generator().scenario(broker, clock, present))))
    expected = _sizes(expected)
    assert list(got) == list(expected)
    for name, value in expected.items():
        # json.dumps keeps key order: the CLI prints the keys in this order
        assert json.dumps(got[name]) == json.dumps(value), name


def _sizes(value: Any) -> Any:
    """``value`` with each ``size_in_bytes`` a placeholder (checked to be a count): sizes
    count the stored form of the messages, which record version 4 changed (the AMQP
    message as sent, sbctl.core.message_form), not how a result is presented."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "size_in_bytes":
                assert type(v) is int and v >= 0, v
                out[k] = "<size>"
            else:
                out[k] = _sizes(v)
        return out
    if isinstance(value, list):
        return [_sizes(v) for v in value]
    return value


def test_what_is_not_a_result_passes_untouched() -> None:
    seqs = [1, 2, 3]
    assert present(seqs) is seqs
    assert present(None) is None and present(b"raw") == b"raw"
    report = {"sequence_numbers": seqs, "diverted_to": None}
    assert present(report) == report


def test_a_presented_result_encodes_as_the_wire_reply() -> None:
    info = UnavailablePartition(partition_id=3, faults=["f1"])
    frame = encode_reply(7, True, present(info))
    reply = decode_reply(frame[4:])
    assert reply.id == 7 and reply.ok is True
    wire = decode_result(reply.result)
    assert wire == {"partition_id": 3, "availability_status": "Unavailable", "faults": ["f1"]}
    assert list(wire) == ["partition_id", "availability_status", "faults"]
