"""Time travel (daemon/README.md §31): a namespace's clock moves forward and every timer
follows, on the broker with the fake clock (nothing sleeps)."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec import UNSET

from conftest import Reopen
from sbctl.core import layout
from sbctl.core.delivered import Delivered
from sbctl.core.errors import (
    BadRequest,
    MessagingEntityNotFound,
    ServerBusy,
    ServiceCommunicationProblem,
    SessionLockLost,
)
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.overview import overview
from sbctld.results import SettleFailed

NS = DEFAULT_NAMESPACE
MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR


def recv(b: Broker, path: str = "q", count: int = 10, mode: str = "peek-lock") -> list[Delivered]:
    return b.messaging.receive(NS, path, count, mode)


def bodies(ds: list[Delivered]) -> list[bytes]:
    return [decode_message(d.payload).body for d in ds]


def counts(b: Broker, name: str = "q") -> dict[str, Any]:
    return b.queue(NS, name).counts()


def test_the_clock_starts_at_the_daemons_time_and_only_moves_forward(
    broker: Broker, clock: FakeClock
) -> None:
    shown = broker.time_travel.clock_show(NS)
    assert (shown.now_ms, shown.offset_ms) == (clock.now, 0)
    assert broker.management.namespace_get(NS).clock_offset_ms is UNSET  # shown once it moved
    moved = broker.time_travel.clock_advance(NS, HOUR)
    assert (moved.now_ms, moved.offset_ms) == (clock.now + HOUR, HOUR)
    clock.advance(1000)  # real time goes on under the offset
    assert broker.time_travel.clock_show(NS).now_ms == clock.now + HOUR
    assert broker.time_travel.clock_set(NS, clock.now + 2 * HOUR).offset_ms == 2 * HOUR
    assert broker.management.namespace_get(NS).clock_offset_ms == 2 * HOUR


@pytest.mark.parametrize(
    ("move", "error"),
    [
        (lambda b, now: b.time_travel.clock_advance(NS, -1000), "only moves forward"),
        (lambda b, now: b.time_travel.clock_advance(NS, 0), "positive duration, not PT0S"),
        (lambda b, now: b.time_travel.clock_set(NS, now - 1), "is before the time of namespace"),
        (lambda b, now: b.time_travel.clock_set(NS, 10**15), "cannot go past 9999-12-31"),
    ],
)
def test_a_backwards_move_is_refused_and_changes_nothing(
    broker: Broker, clock: FakeClock, move: Any, error: str
) -> None:
    broker.time_travel.clock_advance(NS, MIN)
    before = broker.time_travel.clock_show(NS)
    with pytest.raises(BadRequest, match=error):
        move(broker, before.now_ms)
    assert broker.time_travel.clock_show(NS) == before


def test_an_unknown_namespace_is_not_found(broker: Broker) -> None:
    with pytest.raises(MessagingEntityNotFound, match="namespace 'nope' does not exist"):
        broker.time_travel.clock_advance("nope", MIN)


def test_other_namespaces_keep_their_time(broker: Broker, clock: FakeClock) -> None:
    broker.management.namespace_create("other-ns", "standard")
    broker.time_travel.clock_advance(NS, DAY)
    assert broker.time_travel.clock_show("other-ns").now_ms == clock.now


def test_a_message_scheduled_for_tomorrow_is_enqueued_at_its_time(
    broker: Broker, clock: FakeClock
) -> None:
    broker.management.queue_create(NS, "q", {})
    when = clock.now + DAY
    broker.messaging.send(NS, "q", [Message(body=b"later", scheduled_enqueue_time_ms=when)])
    assert recv(broker) == []
    result = broker.time_travel.clock_advance(NS, DAY)
    assert result.activated == 1
    (got,) = recv(broker)
    assert (got.enqueued_time_ms, bodies([got])) == (when, [b"later"])
    assert got.locked_until_ms == clock.now + DAY + MIN  # the namespace's time, not the clock's


def test_timers_run_in_the_order_of_their_times(broker: Broker, clock: FakeClock) -> None:
    """Scheduled for +1 h with a TTL of 30 min: enqueued at +1 h, expired at +1 h 30 min."""
    broker.management.queue_create(NS, "q", {"dead_lettering_on_message_expiration": True})
    when = clock.now + HOUR
    message = Message(body=b"m", scheduled_enqueue_time_ms=when, time_to_live_ms=30 * MIN)
    broker.messaging.send(NS, "q", [message])
    assert broker.time_travel.clock_advance(NS, DAY).expired == 1
    (dead,) = recv(broker, "q/$deadletterqueue")
    assert (dead.enqueued_time_ms, dead.expires_at_ms) == (when, when + 30 * MIN)


def test_a_ttl_of_an_hour_dead_letters_after_an_hour(broker: Broker) -> None:
    broker.management.queue_create(NS, "q", {"dead_lettering_on_message_expiration": True})
    broker.messaging.send(NS, "q", [Message(body=b"short-lived", time_to_live_ms=HOUR)])
    broker.time_travel.clock_advance(NS, HOUR - 1)
    assert counts(broker)["dead_letter_message_count"] == 0
    broker.time_travel.clock_advance(NS, 1)
    assert counts(broker)["dead_letter_message_count"] == 1  # without a receive
    assert bodies(recv(broker, "q/$deadletterqueue")) == [b"short-lived"]


def test_a_lock_runs_out_and_the_message_comes_back_counted(broker: Broker) -> None:
    broker.management.queue_create(NS, "q", {"lock_duration": 5 * MIN, "max_delivery_count": 2})
    broker.messaging.send(NS, "q", [Message(body=b"m")])
    (first,) = recv(broker)
    broker.time_travel.clock_advance(NS, 5 * MIN)
    (failed,) = broker.messaging.settle(NS, "q", "complete", [first.lock_token or ""])
    assert isinstance(failed, SettleFailed) and failed.error.code == "MessageLockLost"
    (renewed,) = broker.messaging.settle(NS, "q", "renew-lock", [first.lock_token or ""])
    assert isinstance(renewed, SettleFailed)
    (second,) = recv(broker)
    assert second.delivery_count == 2
    # the second lock runs out: max delivery count reached
    broker.time_travel.clock_advance(NS, 5 * MIN)
    assert counts(broker)["dead_letter_message_count"] == 1


def test_a_session_lock_runs_out(broker: Broker) -> None:
    broker.management.queue_create(NS, "q", {"requires_session": True})
    broker.messaging.send(NS, "q", [Message(body=b"m", session_id="s")])
    held = broker.messaging.session_accept(NS, "q", "s")
    broker.time_travel.clock_advance(NS, 2 * MIN)
    with pytest.raises(SessionLockLost):
        broker.messaging.session_renew(NS, "q", held.session_lock_token)


def test_deferred_messages_stay(broker: Broker) -> None:
    broker.management.queue_create(NS, "q", {})
    broker.messaging.send(NS, "q", [Message(body=b"d", time_to_live_ms=10 * DAY)])
    (got,) = recv(broker)
    broker.messaging.settle(NS, "q", "defer", [got.lock_token or ""])
    broker.time_travel.clock_advance(NS, DAY)
    assert counts(broker)["deferred_message_count"] == 1
    (again,) = broker.messaging.receive_deferred(
        NS, "q", [got.sequence_number], "receive-and-delete"
    )
    assert bodies([again]) == [b"d"]


def test_the_duplicate_window_slides(broker: Broker) -> None:
    broker.management.queue_create(NS, "q", {"requires_duplicate_detection": True})
    send = [Message(body=b"once", message_id="id-1")]
    broker.messaging.send(NS, "q", send)
    broker.time_travel.clock_advance(NS, 9 * MIN)
    broker.messaging.send(NS, "q", send)  # within the 10-minute window: dropped
    assert counts(broker)["active_message_count"] == 1
    broker.time_travel.clock_advance(NS, 11 * MIN)
    broker.messaging.send(NS, "q", send)
    assert counts(broker)["active_message_count"] == 2


def test_an_idle_queue_is_deleted(broker: Broker) -> None:
    broker.management.queue_create(NS, "idle", {"auto_delete_on_idle": 5 * MIN})
    broker.management.queue_create(NS, "kept", {})
    assert broker.time_travel.clock_advance(NS, 6 * MIN).deleted_entities == 1
    assert [q.name for q in broker.management.queue_list(NS)] == ["kept"]


def test_throttling_credits_refill(broker: Broker) -> None:
    broker.management.namespace_create("slow-ns", "standard", credits_per_second=1000)
    broker.management.queue_create("slow-ns", "q", {})
    broker.management.namespace_update("slow-ns", credits_per_second=2)
    broker.time_travel.clock_advance("slow-ns", 1000)  # the create's 10 credits were this period's
    broker.messaging.send("slow-ns", "q", [Message(body=b"1"), Message(body=b"2")])
    with pytest.raises(ServerBusy):
        broker.messaging.send("slow-ns", "q", [Message(body=b"3")])
    broker.time_travel.clock_advance("slow-ns", 1000)
    broker.messaging.send("slow-ns", "q", [Message(body=b"3")])


def test_the_offset_survives_a_restart(broker: Broker, clock: FakeClock, reopen: Reopen) -> None:
    broker.management.queue_create(NS, "q", {})
    saved = layout.namespace_file(broker.namespace(NS).directory)
    assert "clock_offset_ms" not in saved.read_text()  # the release before reads it
    broker.time_travel.clock_advance(NS, DAY)
    assert "clock_offset_ms = 86400000" in saved.read_text()
    again = reopen()
    assert again.time_travel.clock_show(NS).offset_ms == DAY
    again = reopen(crash=True)
    assert again.time_travel.clock_show(NS).now_ms == clock.now + DAY


def test_the_ticker_runs_on_the_namespaces_time(broker: Broker, clock: FakeClock) -> None:
    """A lock taken before an advance runs out when the namespace's time reaches it."""
    broker.management.queue_create(NS, "q", {"lock_duration": 5 * MIN})
    broker.messaging.send(NS, "q", [Message(body=b"m")])
    recv(broker)
    broker.time_travel.clock_advance(NS, 4 * MIN)
    clock.advance(MIN - 1)
    assert broker.housekeeping.tick() == []
    clock.advance(1)
    assert broker.housekeeping.tick() == [(NS, "q")]
    assert counts(broker)["active_message_count"] == 1


def test_a_pairing_fails_over_and_pings_on_its_primarys_time(broker: Broker) -> None:
    primary, secondary = "primary-ns", "second-ns"
    broker.management.namespace_create(primary)
    broker.management.namespace_create(secondary)
    broker.management.queue_create(primary, "orders", {})
    broker.pairings.pair(primary, secondary, 1, 1000, 2000, False)
    broker.housekeeping.fault_add(primary)
    with pytest.raises(ServiceCommunicationProblem):
        broker.messaging.send(primary, "orders", [Message(body=b"first")])
    broker.time_travel.clock_advance(primary, 1000)  # the failover interval passed: diverted
    broker.messaging.send(primary, "orders", [Message(body=b"diverted")])
    assert broker.pairings.status(primary).state == "FailedOver"
    broker.housekeeping.fault_clear(primary)
    broker.time_travel.clock_advance(primary, 2000)  # the ping interval passed: pinged, back
    st = broker.pairings.status(primary)
    assert (st.pings_sent, st.state) == (1, "Active")


def test_topics_route_scheduled_messages_at_their_time_and_expire_in_subscriptions(
    broker: Broker, clock: FakeClock
) -> None:
    broker.management.topic_create(NS, "t", {})
    broker.management.subscription_create(
        NS, "t", "s", {"dead_lettering_on_message_expiration": True}
    )
    when = clock.now + HOUR
    broker.messaging.send(NS, "t", [Message(body=b"later", scheduled_enqueue_time_ms=when)])
    broker.messaging.send(NS, "t", [Message(body=b"brief", time_to_live_ms=MIN)])
    assert broker.time_travel.clock_advance(NS, HOUR).expired == 1
    (got,) = recv(broker, "t/subscriptions/s")
    assert (bodies([got]), got.enqueued_time_ms) == ([b"later"], when)
    assert bodies(recv(broker, "t/subscriptions/s/$deadletterqueue")) == [b"brief"]


def test_reading_the_overview_leaves_the_throttling_period_alone(broker: Broker) -> None:
    """``sbctl top`` reads the credits at the namespace's time, not at the clock's (which
    would start another period and refill them)."""
    broker.management.namespace_create("slow-ns", "standard", credits_per_second=1000)
    broker.management.queue_create("slow-ns", "q", {})
    broker.management.namespace_update("slow-ns", credits_per_second=2)
    broker.time_travel.clock_advance("slow-ns", DAY)
    broker.messaging.send("slow-ns", "q", [Message(body=b"1"), Message(body=b"2")])
    overview(broker, "slow-ns")
    with pytest.raises(ServerBusy):
        broker.messaging.send("slow-ns", "q", [Message(body=b"3")])
