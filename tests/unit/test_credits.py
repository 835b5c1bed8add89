"""Throttling (issue 5; daemon/README.md §0.2, §0.4.4, §20): the credit meter and the broker's
charges,
driven by the fake clock (nothing sleeps), and the client's retry policy."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import presenting
from sbctl.core.errors import (
    InvalidOperation,
    MessageLockLost,
    QuotaExceeded,
    ServerBusy,
    ServiceTimeout,
)
from sbctl.core.records import Message
from sbctl.core.wire_errors import error_to_wire
from sbctl.retry import RetryPolicy
from sbctld.broker import Broker
from sbctld.clock import FakeClock
from sbctld.credits import THROTTLED_TEXT, CreditMeter
from sbctld.frontends.unix.present import present
from sbctld.storage.sync import Syncer

EXACT = (
    "The request was terminated because the entity is being throttled. Error code: 50009. "
    "Please wait 2 seconds and try again."
)
T0 = 1_767_225_600_000  # FakeClock's start: a period boundary


def test_text_is_spec_verbatim() -> None:
    assert THROTTLED_TEXT == EXACT


def test_meter_periods_and_whole_or_nothing() -> None:
    m = CreditMeter(1000)
    m.charge("data", 990, T0)
    with pytest.raises(ServerBusy) as info:
        m.charge("data", 11, T0 + 250)  # more than the 10 left: refused whole
    err = info.value
    assert err.message == EXACT
    assert err.error_number == 50009
    assert error_to_wire(err)["error_number"] == 50009
    assert err.retry_after == pytest.approx(0.75)
    assert m.remaining(T0 + 250) == 10  # nothing of it was charged
    m.charge("data", 10, T0 + 999)
    assert m.remaining(T0 + 999) == 0
    assert m.remaining(T0 + 1000) == 1000  # a new period
    snap = m.snapshot(T0 + 1000)
    assert snap["consumed"]["last_period"]["data"] == 1000
    assert snap["consumed"]["since_start"]["data"] == 1000
    assert snap["throttled_requests"] == 1
    assert snap["period_ms_left"] == 1000
    assert m.snapshot(T0 + 3500)["consumed"]["last_period"]["data"] == 0  # idle period


def test_meter_quota_exceeded_and_unlimited() -> None:
    m = CreditMeter(1000)
    with pytest.raises(QuotaExceeded):
        m.charge("data", 1001, T0)
    assert m.snapshot(T0)["throttled_requests"] == 0
    free = CreditMeter(0)
    free.charge("data", 1_000_000, T0)
    assert free.remaining(T0) is None
    assert free.snapshot(T0)["consumed"]["since_start"]["data"] == 1_000_000


def test_admit_count_caps_and_refuses() -> None:
    m = CreditMeter(10)
    assert m.admit_count(25, T0) == 10
    m.record("data", 10, T0)
    with pytest.raises(ServerBusy):
        m.admit_count(1, T0)
    assert m.admit_count(3, T0 + 1000) == 3


def standard(tmp_path: Path, clock: FakeClock, credits: int = 1000) -> Broker:
    b = presenting.Presented(
        Broker(tmp_path / "d", clock, Syncer("os"), default_credits_per_second=0)
    )
    b.management.namespace_create("throttled", "standard", credits_per_second=credits)
    return b


def test_throttled_send_applies_nothing(tmp_path: Path, clock: FakeClock) -> None:
    b = standard(tmp_path, clock)
    try:
        b.management.queue_create("throttled", "q", {})  # 10 credits
        sent = 0
        refused = []
        for i in range(1500):
            try:
                b.messaging.send("throttled", "q", [Message(body=b"%d" % i)])
                sent += 1
            except ServerBusy as exc:
                refused.append(exc)
        assert sent == 990
        assert len(refused) == 510
        assert {e.message for e in refused} == {EXACT}
        assert (
            present(b.queue("throttled", "q").describe())["active_message_count"] == sent
        )  # counts unchanged
        with pytest.raises(ServerBusy):
            b.messaging.send("throttled", "q", [Message(body=b"x")] * 5)  # a batch: refused whole
        assert present(b.queue("throttled", "q").describe())["active_message_count"] == sent
        clock.advance(1000)
        b.messaging.send("throttled", "q", [Message(body=b"x")] * 1000)  # a batch of N costs N
        with pytest.raises(QuotaExceeded):
            b.messaging.send("throttled", "q", [Message(body=b"x")] * 1001)
        credits = b.management.namespace_credits("throttled")
        assert credits["remaining"] == 0
        assert credits["throttled_requests"] == 511
        assert credits["consumed"]["since_start"] == {
            "data": 1990,
            "management": 10,
            "filter": 0,
        }
    finally:
        b.housekeeping.close()


def test_management_costs_ten_and_receive_charges_what_it_returns(
    tmp_path: Path, clock: FakeClock
) -> None:
    b = standard(tmp_path, clock, credits=100)
    try:
        b.management.queue_create("throttled", "q", {})
        b.management.queue_get("throttled", "q")
        b.management.queue_list("throttled")
        assert b.management.namespace_credits("throttled")["remaining"] == 70
        b.messaging.send("throttled", "q", [Message(body=b"x")] * 20)
        # costs 20, not 100
        assert len(b.messaging.receive("throttled", "q", 100, "peek-lock")) == 20
        assert b.management.namespace_credits("throttled")["remaining"] == 30
        clock.advance(1000)
        b.messaging.send("throttled", "q", [Message(body=b"y")] * 90)
        got = b.messaging.peek("throttled", "q", 50, None)
        assert len(got) == 10  # capped at what the period has left
        with pytest.raises(ServerBusy):
            b.messaging.receive("throttled", "q", 1, "peek-lock")  # none left: refused
        clock.advance(1000)
        b.management.namespace_get("throttled")  # namespace-level operations are free
        assert b.management.namespace_credits("throttled")["remaining"] == 100
    finally:
        b.housekeeping.close()


def test_namespaces_are_independent(tmp_path: Path, clock: FakeClock) -> None:
    b = standard(tmp_path, clock, credits=50)
    try:
        b.management.namespace_create("calmspace", "standard", credits_per_second=50)
        b.management.queue_create("throttled", "q", {})
        b.management.queue_create("calmspace", "q", {})
        b.messaging.send("throttled", "q", [Message(body=b"x")] * 40)
        with pytest.raises(ServerBusy):
            b.messaging.send("throttled", "q", [Message(body=b"x")])
        b.messaging.send("calmspace", "q", [Message(body=b"x")] * 40)  # unaffected
        assert b.management.namespace_credits("calmspace")["throttled_requests"] == 0
    finally:
        b.housekeeping.close()


def test_premium_units_scale_at_runtime(tmp_path: Path, clock: FakeClock) -> None:
    b = presenting.Presented(
        Broker(tmp_path / "d", clock, Syncer("os"), default_credits_per_second=0)
    )
    try:
        b.management.namespace_create("premiumns", "premium", capacity=1, ops_per_unit=100)
        b.management.queue_create("premiumns", "q", {})
        clock.advance(1000)
        load = [Message(body=b"x")] * 50

        def burst() -> int:
            """Eight batches of 50 (400 ops) in one second; how many were throttled."""
            refused = 0
            for _ in range(8):
                try:
                    b.messaging.send("premiumns", "q", load)
                except ServerBusy:
                    refused += 1
            clock.advance(1000)
            return refused

        assert burst() == 6  # one unit carries 100 ops/s
        with pytest.raises(InvalidOperation):
            b.management.namespace_update("premiumns", credits_per_second=10)
        b.management.namespace_update("premiumns", capacity=4)  # 400 ops/s
        assert burst() == 0
        metrics = b.management.namespace_credits("premiumns")
        assert metrics["ops_per_second"] == 400
        assert metrics["throttled_requests"] == 6
        assert b.management.namespace_get("premiumns")["capacity"] == 4
    finally:
        b.housekeeping.close()


def test_settings_persist(tmp_path: Path, clock: FakeClock) -> None:
    b = standard(tmp_path, clock, credits=7)
    b.management.namespace_update("throttled", credits_per_second=25)
    b.housekeeping.close()
    again = presenting.Presented(Broker(tmp_path / "d", clock, Syncer("os")))
    try:
        assert again.management.namespace_credits("throttled")["credits_per_second"] == 25
        assert again.management.namespace_credits("sbemulatorns")["credits_per_second"] == 0
    finally:
        again.housekeeping.close()


def test_retry_policy() -> None:
    policy = RetryPolicy(rng=random.Random(1))
    busy = ServerBusy(EXACT, retry_after=0.3)
    waits = [policy.delay(busy, n) for n in range(4)]
    assert waits[3] is None  # 3 retries, then the error
    assert 0.64 <= waits[0] <= 0.96  # 0.8 s +- 20 %
    assert 1.28 <= waits[1] <= 1.92
    long = ServerBusy(EXACT, retry_after=5.0)
    assert policy.delay(long, 0) == 5.0  # at least what the error names
    assert policy.delay(ServiceTimeout("slow"), 0) is not None
    assert policy.delay(MessageLockLost("gone"), 0) is None  # not transient
    assert RetryPolicy(total=0).delay(busy, 0) is None
    capped = RetryPolicy(total=20, max_backoff=60.0, rng=random.Random(2))
    assert capped.delay(busy, 15) == 60.0
