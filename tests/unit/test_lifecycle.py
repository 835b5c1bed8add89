"""Message lifecycle on the broker with a fake clock (nothing sleeps).

Deferral and receive-by-number (daemon/README.md §3.4, §3.9), dead-lettering (§4), lock renewal
(§3.6),
MaxDeliveryCount (§3.8), TTL (§1.6, §6), scheduled messages (§7, §2.4), duplicate detection
(§8), purge and DLQ resubmit (emulator chores), entity status (§17) and runtime counts
(§18, §0.4.1). Every scenario runs on a plain and on a partitioned queue (§0.1) and is
checked again after a restart.
"""

from __future__ import annotations

from typing import Any

import pytest

import presenting
from conftest import Reopen
from sbctl.core.delivered import Delivered
from sbctl.core.durations import format_instant
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessageNotFound,
    MessagingEntityDisabled,
    MessagingEntityNotFound,
)
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.messages import ReceivedMessage
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker
reopen = presenting.reopen

NS = DEFAULT_NAMESPACE
DLQ = "q/$deadletterqueue"
LOCAL = (1 << 48) - 1
ACTIVE, DEFERRED, SCHEDULED, DEADLETTERED = 1, 2, 3, 4  # Delivered.state (storage State)
WINDOW = 60_000  # duplicate detection window used below
COUNT_KEYS = (
    "active_message_count",
    "deferred_message_count",
    "scheduled_message_count",
    "dead_letter_message_count",
    "total_message_count",
    "size_in_bytes",
)


# ===================================================================== fixtures and helpers


def make(b: Broker, partitioned: bool, name: str = "q", **options: Any) -> dict[str, Any]:
    return b.management.queue_create(NS, name, {"enable_partitioning": partitioned, **options})


def send(b: Broker, *messages: Message, path: str = "q") -> list[int]:
    return b.messaging.send(NS, path, list(messages))


def recv(b: Broker, path: str = "q", count: int = 50, mode: str = "peek-lock") -> list[Delivered]:
    return b.messaging.receive(NS, path, count, mode)


def codes(results: list[dict[str, Any]]) -> list[str]:
    return [r["error"]["code"] if "error" in r else "ok" for r in results]


def settle(b: Broker, op: str, *ds: Delivered | str, path: str = "q", **kw: Any) -> list[str]:
    tokens = [d if isinstance(d, str) else d.lock_token for d in ds]
    return codes(b.messaging.settle(NS, path, op, tokens, **kw))  # type: ignore[arg-type]


def body(d: Delivered) -> bytes:
    return decode_message(d.payload).body


def by_body(ds: list[Delivered]) -> dict[bytes, Delivered]:
    out = {body(d): d for d in ds}
    assert len(out) == len(ds)
    return out


def props(d: Delivered) -> dict[str, Any]:
    """Application properties as a client sees them (payload + later changes)."""
    return ReceivedMessage.from_wire(d).application_properties


def peek_all(b: Broker, path: str = "q") -> list[Delivered]:
    """Every peekable message of every partition, by sequence number."""
    out: list[Delivered] = []
    while page := b.messaging.peek(NS, path, 250, out[-1].sequence_number + 1 if out else 0):
        out += page  # daemon/README.md §0.1.7: pages walk on across partitions
    return out


def states(b: Broker, path: str = "q") -> dict[int, int]:
    return {d.sequence_number: d.state for d in peek_all(b, path)}


def size_of(*messages: Message) -> int:
    return sum(len(encode_message(m)) for m in messages)


def counts(b: Broker, name: str = "q") -> dict[str, int]:
    q = b.management.queue_get(NS, name)
    return {k: q[k] for k in COUNT_KEYS}


def expect(
    b: Broker,
    *,
    active: int = 0,
    deferred: int = 0,
    scheduled: int = 0,
    dead: int = 0,
    size: int | None = None,
    name: str = "q",
) -> None:
    """``active`` is the reported ActiveMessageCount, deferred included (daemon/README.md
    §0.4.1)."""
    got = counts(b, name)
    want = {
        "active_message_count": active,
        "deferred_message_count": deferred,
        "scheduled_message_count": scheduled,
        "dead_letter_message_count": dead,
        "total_message_count": active + scheduled + dead,
        "size_in_bytes": got["size_in_bytes"] if size is None else size,
    }
    assert got == want


def next_numbers(b: Broker, name: str = "q") -> list[int]:
    return [p["next_sequence_number"] for p in b.management.queue_get(NS, name)["partitions"]]


def check_number(seq: int, partitioned: bool) -> None:
    if partitioned:
        assert 0 <= seq >> 48 < 16 and seq & LOCAL >= 1
    else:
        assert seq >> 48 == 0 and seq >= 1


# ===================================================================== deferral


def test_deferred_messages_are_received_only_by_number(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    msgs = [Message(b"a"), Message(b"b"), Message(b"c")]
    seqs = send(broker, *msgs)
    got = by_body(recv(broker))
    assert set(got) == {b"a", b"b", b"c"}
    assert settle(broker, "defer", got[b"a"], got[b"b"]) == ["ok", "ok"]
    assert settle(broker, "defer", got[b"a"]) == ["MessageLockLost"]  # the lock is gone
    expect(broker, active=3, deferred=2, size=size_of(*msgs))
    assert settle(broker, "complete", got[b"c"]) == ["ok"]
    expect(broker, active=2, deferred=2, size=size_of(*msgs[:2]))
    a, b_ = got[b"a"].sequence_number, got[b"b"].sequence_number
    assert {a, b_} <= set(seqs)
    c = got[b"c"].sequence_number
    b = broker
    for restart in (False, True):
        if restart:
            b = reopen()
        assert recv(b) == []  # normal receives never return deferred messages
        assert states(b) == {a: DEFERRED, b_: DEFERRED}
        expect(b, active=2, deferred=2, size=size_of(*msgs[:2]))
        # Unknown, completed or malformed numbers: MessageNotFound, and nothing is taken.
        missing = (3 << 48) | 999 if partitioned else 999
        for bad in ([missing], [a, missing], [a, c], [c, b_], [0], [a, -1]):
            with pytest.raises(MessageNotFound):
                b.messaging.receive_deferred(NS, "q", bad, "peek-lock")
        if partitioned:
            with pytest.raises(MessageNotFound):
                b.messaging.receive_deferred(NS, "q", [(16 << 48) | 1], "peek-lock")
        expect(b, active=2, deferred=2)
        assert states(b) == {a: DEFERRED, b_: DEFERRED}
    with pytest.raises(InvalidOperation):
        b.messaging.receive_deferred(NS, DLQ, [a], "peek-lock")
    (da,) = b.messaging.receive_deferred(NS, "q", [a], "peek-lock")
    assert (da.sequence_number, body(da), da.delivery_count) == (a, b"a", 2)
    assert da.lock_token is not None and da.state == DEFERRED
    # A deferred message locked by a receive-by-number cannot be taken twice.
    with pytest.raises(MessageNotFound):
        b.messaging.receive_deferred(NS, "q", [b_, a], "peek-lock")
    (db,) = b.messaging.receive_deferred(NS, "q", [b_], "receive-and-delete")
    assert (body(db), db.lock_token) == (b"b", None)
    expect(b, active=1, deferred=1, size=size_of(msgs[0]))
    assert settle(b, "complete", da) == ["ok"]
    expect(b, size=0)
    b = reopen(crash=True)
    expect(b, size=0)
    assert recv(b) == [] and peek_all(b) == []


@pytest.mark.parametrize("op", ["abandon", "complete", "dead-letter", "defer", "expire"])
def test_settling_a_received_deferred_message(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool, op: str
) -> None:
    make(broker, partitioned, lock_duration=5_000)
    m = Message(b"d", application_properties={"n": 1})
    (seq,) = send(broker, m, Message(b"other", partition_key="x"))[:1]
    (d,) = [x for x in recv(broker) if body(x) == b"d"]
    assert settle(broker, "defer", d, properties={"n": 2}) == ["ok"]
    (got,) = broker.messaging.receive_deferred(NS, "q", [seq], "peek-lock")
    assert props(got) == {"n": 2}  # the change made while deferring
    expect(broker, active=2, deferred=1)
    if op == "expire":
        clock.advance(5_000)
        broker.housekeeping.tick()
        assert settle(broker, "complete", got) == ["MessageLockLost"]
    elif op == "dead-letter":
        assert settle(broker, op, got, reason="why", description="because") == ["ok"]
    else:
        assert settle(broker, op, got) == ["ok"]
    b = broker
    for restart in (False, True):
        if restart:
            b = reopen()
        others = [x for x in peek_all(b) if x.sequence_number != seq]
        assert [body(x) for x in others] == [b"other"]
        if op == "complete":
            expect(b, active=1)
            assert seq not in states(b)
        elif op == "dead-letter":
            expect(b, active=1, dead=1)
            (dead,) = peek_all(b, DLQ)
            assert dead.sequence_number == seq
            assert props(dead) == {
                "n": 2,
                "DeadLetterReason": "why",
                "DeadLetterErrorDescription": "because",
            }
        else:  # abandon, defer, lock expiry: still deferred, only receivable by number
            expect(b, active=2, deferred=1)
            assert states(b)[seq] == DEFERRED
    if op in ("abandon", "defer", "expire"):
        assert [body(x) for x in recv(b)] == [b"other"]
        (again,) = b.messaging.receive_deferred(NS, "q", [seq], "peek-lock")
        assert again.delivery_count == 3
        assert settle(b, "complete", again) == ["ok"]
        expect(b, active=1)


def test_renew_lock_on_a_received_deferred_message(broker: Broker, clock: FakeClock) -> None:
    make(broker, False, lock_duration=5_000)
    (seq,) = send(broker, Message(b"d"))
    settle(broker, "defer", *recv(broker))
    (got,) = broker.messaging.receive_deferred(NS, "q", [seq], "peek-lock")
    clock.advance(2_000)
    (result,) = broker.messaging.settle(NS, "q", "renew-lock", [got.lock_token])  # type: ignore[list-item]
    assert result["locked_until_utc"] == format_instant(clock.now + 5_000)


# ===================================================================== dead-lettering


def test_dead_letter_with_reason_description_and_properties(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    m = Message(b"bad", message_id="m1", application_properties={"keep": 1, "change": "old"})
    (seq,) = send(broker, m)
    check_number(seq, partitioned)
    (d,) = recv(broker)
    changes = {"change": "new", "added": True}
    results = broker.messaging.settle(
        NS, "q", "dead-letter", [d.lock_token], changes, "Poison", "could not parse"
    )  # type: ignore[list-item]
    assert codes(results) == ["ok"]
    b = broker
    for restart in (False, True):
        if restart:
            b = reopen()
        expect(b, active=0, dead=1, size=size_of(m))
        assert recv(b) == [] and peek_all(b) == []
        (peeked,) = peek_all(b, DLQ)
        assert peeked.state == DEADLETTERED
        assert peeked.sequence_number == seq  # daemon/README.md §0.4.1
        assert props(peeked) == {
            "keep": 1,
            "change": "new",
            "added": True,
            "DeadLetterReason": "Poison",
            "DeadLetterErrorDescription": "could not parse",
        }
        msg = decode_message(peeked.payload)
        assert (msg.body, msg.message_id) == (b"bad", "m1")
    (dead,) = recv(b, "Q/$DeadLetterQueue")
    assert dead.sequence_number == seq
    assert settle(b, "complete", dead, path=DLQ) == ["ok"]
    expect(b, size=0)


def test_dead_lettering_a_dlq_message_is_invalid(broker: Broker, partitioned: bool) -> None:
    make(broker, partitioned)
    send(broker, Message(b"1"), Message(b"2"))
    first = recv(broker)
    assert settle(broker, "dead-letter", *first, reason="r") == ["ok", "ok"]
    t1, t2 = recv(broker, DLQ)
    with pytest.raises(BadRequest):
        broker.messaging.settle(NS, DLQ, "complete", [t1.lock_token], {"k": 1})  # type: ignore[list-item]
    with pytest.raises(BadRequest):
        broker.messaging.settle(NS, "q", "abandon", [t1.lock_token], reason="r")  # type: ignore[list-item]
    # Per token (daemon/README.md §4.3); a stale token is still MessageLockLost.
    assert settle(broker, "dead-letter", t1, t2, first[0], path=DLQ, reason="again") == [
        "InvalidOperation",
        "InvalidOperation",
        "MessageLockLost",
    ]
    assert settle(broker, "defer", t1, path=DLQ) == ["InvalidOperation"]
    # The refused tokens keep their locks.
    assert recv(broker, DLQ) == []
    assert settle(broker, "complete", t1, path=DLQ) == ["ok"]
    assert settle(broker, "abandon", t2, path=DLQ) == ["ok"]
    (again,) = recv(broker, DLQ)
    assert again.sequence_number == t2.sequence_number
    assert props(again)["DeadLetterReason"] == "r"
    expect(broker, dead=1)


def test_dead_letter_queue_path_spellings(broker: Broker, partitioned: bool) -> None:
    make(broker, partitioned, max_delivery_count=1)
    seqs = send(broker, Message(b"x"), Message(b"y"))
    assert settle(broker, "abandon", *recv(broker)) == ["ok", "ok"]
    for path in (DLQ, "q/$DeadLetterQueue", "Q/$DEADLETTERQUEUE"):
        assert sorted(d.sequence_number for d in peek_all(broker, path)) == sorted(seqs)
    got = recv(broker, "q/$DeadLetterQueue", mode="receive-and-delete")
    assert sorted(d.sequence_number for d in got) == sorted(seqs)
    expect(broker, size=0)


# ===================================================================== lock renewal


def test_renew_lock_extends_from_now(broker: Broker, clock: FakeClock, partitioned: bool) -> None:
    make(broker, partitioned, lock_duration=10_000)
    send(broker, Message(b"x"))
    t0 = clock.now
    (d,) = recv(broker)
    assert d.locked_until_ms == t0 + 10_000
    clock.advance(4_000)
    (result,) = broker.messaging.settle(NS, "q", "renew-lock", [d.lock_token])  # type: ignore[list-item]
    assert result == {
        "lock_token": d.lock_token,
        "ok": True,
        "locked_until_utc": format_instant(t0 + 14_000),
    }
    clock.advance(3_000)
    (result,) = broker.messaging.settle(NS, "q", "renew-lock", [d.lock_token])  # type: ignore[list-item]
    assert result["locked_until_utc"] == format_instant(t0 + 17_000)
    with pytest.raises(BadRequest):
        broker.messaging.settle(NS, "q", "renew-lock", [d.lock_token], {"k": 1})  # type: ignore[list-item]


@pytest.mark.parametrize("tick", [False, True])
def test_renewed_lock_outlives_the_original_expiry(
    broker: Broker, clock: FakeClock, partitioned: bool, tick: bool
) -> None:
    """Regression: the original deadline's lock-heap entry (same nonce) once freed a renewed
    lock at the original expiry, through tick() or the expiry check of every receive."""
    make(broker, partitioned, lock_duration=5_000)
    send(broker, Message(b"x"))
    (d,) = recv(broker)
    clock.advance(3_000)
    assert settle(broker, "renew-lock", d) == ["ok"]  # now locked until t0 + 8 s
    clock.advance(3_000)  # t0 + 6 s: past the original expiry
    if tick:
        assert broker.housekeeping.tick() == []
    assert recv(broker) == []  # still locked
    expect(broker, active=1)
    assert settle(broker, "renew-lock", d) == ["ok"]  # until t0 + 11 s
    clock.advance(4_999)
    broker.housekeeping.tick()
    assert recv(broker) == []
    assert settle(broker, "complete", d) == ["ok"]
    expect(broker, size=0)


def test_renewed_lock_expires_at_the_new_time(
    broker: Broker, clock: FakeClock, partitioned: bool
) -> None:
    make(broker, partitioned, lock_duration=5_000)
    send(broker, Message(b"x"))
    (d,) = recv(broker)
    clock.advance(3_000)
    assert settle(broker, "renew-lock", d) == ["ok"]
    clock.advance(5_000)  # t0 + 8 s: the renewed lock ran out
    broker.housekeeping.tick()
    assert settle(broker, "renew-lock", d) == ["MessageLockLost"]
    (again,) = recv(broker)
    assert again.delivery_count == 2


@pytest.mark.parametrize("tick", [False, True])
def test_renew_after_expiry_is_lock_lost(
    broker: Broker, clock: FakeClock, partitioned: bool, tick: bool
) -> None:
    make(broker, partitioned, lock_duration=5_000)
    send(broker, Message(b"x"), Message(b"y"))
    a, b = recv(broker)
    assert settle(broker, "complete", b) == ["ok"]
    assert settle(broker, "renew-lock", b) == ["MessageLockLost"]  # settled
    clock.advance(5_000)
    if tick:
        broker.housekeeping.tick()
    assert settle(broker, "renew-lock", a) == ["MessageLockLost"]
    (again,) = recv(broker)
    assert (again.sequence_number, again.delivery_count) == (a.sequence_number, 2)
    assert settle(broker, "renew-lock", a) == ["MessageLockLost"]  # the old token
    assert settle(broker, "renew-lock", again) == ["ok"]


def test_renew_lock_does_not_survive_a_restart(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    send(broker, Message(b"x"))
    (d,) = recv(broker)
    b = reopen()
    assert settle(b, "renew-lock", d) == ["MessageLockLost"]


# ===================================================================== max delivery count


@pytest.mark.parametrize("max_count", [1, 2, 3])
def test_max_delivery_count_dead_letters_after_exactly_n(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool, max_count: int
) -> None:
    """Odd deliveries end in abandon, even ones in a lock expiry; both count (daemon/README.md
    §3.5)."""
    make(broker, partitioned, max_delivery_count=max_count, lock_duration=5_000)
    (seq,) = send(broker, Message(b"poison"))
    b = broker
    for attempt in range(1, max_count + 1):
        expect(b, active=1)
        (d,) = recv(b)
        assert (d.sequence_number, d.delivery_count) == (seq, attempt)
        if attempt % 2:
            assert settle(b, "abandon", d) == ["ok"]
        else:
            clock.advance(5_000)
            b.housekeeping.tick()
        if attempt == 1 and max_count > 1:
            b = reopen()  # delivery counts are durable
    assert recv(b) == []
    for restart in (False, True):
        if restart:
            b = reopen(crash=True)
        expect(b, dead=1, size=size_of(Message(b"poison")))
        (dead,) = peek_all(b, DLQ)
        assert (dead.sequence_number, dead.delivery_count) == (seq, max_count)
        assert props(dead)["DeadLetterReason"] == "MaxDeliveryCountExceeded"
        assert isinstance(props(dead)["DeadLetterErrorDescription"], str)
        assert recv(b) == []


# ===================================================================== TTL


def test_ttl_is_capped_by_the_queue_default(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned, default_message_time_to_live=10_000)
    t0 = clock.now
    send(
        broker,
        Message(b"default", partition_key="k"),
        Message(b"longer", time_to_live_ms=60_000, partition_key="k"),
        Message(b"shorter", time_to_live_ms=2_000, partition_key="k"),
    )
    want = [t0 + 10_000, t0 + 10_000, t0 + 2_000]
    assert [d.expires_at_ms for d in peek_all(broker)] == want
    b = reopen()
    assert [d.expires_at_ms for d in peek_all(b)] == want
    clock.advance(2_000)
    assert sorted(body(d) for d in recv(b, mode="receive-and-delete")) == [b"default", b"longer"]
    expect(b, size=0)


@pytest.mark.parametrize("dead_letter", [False, True])
def test_expired_messages_are_dropped_or_dead_lettered(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool, dead_letter: bool
) -> None:
    make(broker, partitioned, dead_lettering_on_message_expiration=dead_letter)
    short = [Message(b"s1", time_to_live_ms=2_000), Message(b"s2", time_to_live_ms=2_000)]
    long = Message(b"long", time_to_live_ms=60_000)
    seqs = send(broker, *short, long)
    clock.advance(1_999)
    b = reopen()
    expect(b, active=3)
    clock.advance(1)
    got = recv(b)
    assert [body(d) for d in got] == [b"long"]
    assert settle(b, "complete", *got) == ["ok"]
    for restart in (False, True):
        if restart:
            b = reopen(crash=True)
        if dead_letter:
            expect(b, dead=2, size=size_of(*short))
            dead = peek_all(b, DLQ)
            assert [d.sequence_number for d in dead] == sorted(seqs[:2])
            for d in dead:
                assert props(d)["DeadLetterReason"] == "TTLExpiredException"
        else:
            expect(b, size=0)
            assert peek_all(b, DLQ) == []
        assert recv(b) == []
    # TTL does not apply inside the DLQ (daemon/README.md §4.3).
    clock.advance(10 * 86_400_000)
    assert len(recv(b, DLQ, mode="receive-and-delete")) == (2 if dead_letter else 0)


@pytest.mark.parametrize("dead_letter", [False, True])
def test_deferred_messages_expire_only_when_received_by_number(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool, dead_letter: bool
) -> None:
    """daemon/README.md §3.9: no expiry on its own; checked when received by sequence number."""
    make(broker, partitioned, dead_lettering_on_message_expiration=dead_letter)
    m = Message(b"d", time_to_live_ms=5_000)
    (seq,) = send(broker, m)
    assert settle(broker, "defer", *recv(broker)) == ["ok"]
    clock.advance(10_000)
    broker.housekeeping.tick()
    assert recv(broker) == []
    expect(broker, active=1, deferred=1, size=size_of(m))
    b = reopen()
    b.housekeeping.tick()
    assert recv(b) == []
    expect(b, active=1, deferred=1, size=size_of(m))
    assert states(b) == {seq: DEFERRED}
    assert b.messaging.receive_deferred(NS, "q", [seq], "peek-lock") == []  # expired now
    for restart in (False, True):
        if restart:
            b = reopen()
        if dead_letter:
            expect(b, dead=1, size=size_of(m))
            (dead,) = peek_all(b, DLQ)
            assert dead.sequence_number == seq
            assert props(dead)["DeadLetterReason"] == "TTLExpiredException"
        else:
            expect(b, size=0)
        with pytest.raises(MessageNotFound):
            b.messaging.receive_deferred(NS, "q", [seq], "peek-lock")


# ===================================================================== scheduled messages


def test_scheduled_message_lifecycle(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    later = Message(b"later", scheduled_enqueue_time_ms=clock.now + 60_000)
    now_ = Message(b"now")
    (s,) = send(broker, later)
    (n,) = send(broker, now_)
    check_number(s, partitioned)
    expect(broker, active=1, scheduled=1, size=size_of(later, now_))
    got = recv(broker)
    assert [d.sequence_number for d in got] == [n]
    assert settle(broker, "complete", *got) == ["ok"]
    (peeked,) = peek_all(broker)
    assert (peeked.sequence_number, peeked.state) == (s, SCHEDULED)
    clock.advance(59_999)
    assert broker.housekeeping.tick() == []
    assert recv(broker) == []
    expect(broker, scheduled=1, size=size_of(later))
    clock.advance(1)
    assert broker.housekeeping.tick() == [(NS, "q")]
    expect(broker, active=1, size=size_of(later))  # same bytes, now active
    (active,) = peek_all(broker)
    new = active.sequence_number
    assert new != s and active.state == ACTIVE  # daemon/README.md §2.4: a new number
    assert new >> 48 == s >> 48 and new & LOCAL > s & LOCAL  # appended to its partition
    assert active.enqueued_time_ms == clock.now
    with pytest.raises(MessageNotFound):
        broker.messaging.cancel_scheduled(NS, "q", [s])
    b = reopen()
    (d,) = recv(b)
    assert (d.sequence_number, body(d), d.delivery_count) == (new, b"later", 1)


def test_cancel_scheduled_is_all_or_nothing(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    at = clock.now + 30_000
    s1, s2 = send(
        broker,
        Message(b"s1", scheduled_enqueue_time_ms=at),
        Message(b"s2", scheduled_enqueue_time_ms=at),
    )
    (a,) = send(broker, Message(b"a"))
    (d,) = send(broker, Message(b"d"))
    dl = next(x for x in recv(broker) if body(x) == b"d")
    assert settle(broker, "defer", dl) == ["ok"]
    missing = (5 << 48) | 77 if partitioned else 77
    for bad in ([s1, a], [s1, d], [missing, s2], [s1, 0]):
        with pytest.raises(MessageNotFound):
            broker.messaging.cancel_scheduled(NS, "q", bad)
    with pytest.raises(InvalidOperation):
        broker.messaging.cancel_scheduled(NS, DLQ, [s1])
    expect(broker, active=2, deferred=1, scheduled=2)
    b = reopen()
    expect(b, active=2, deferred=1, scheduled=2)
    assert b.messaging.cancel_scheduled(NS, "q", [s1, s2]) == 2
    expect(b, active=2, deferred=1, size=size_of(Message(b"a"), Message(b"d")))
    with pytest.raises(MessageNotFound):
        b.messaging.cancel_scheduled(NS, "q", [s1])
    clock.advance(30_000)
    b.housekeeping.tick()
    b = reopen(crash=True)
    b.housekeeping.tick()
    assert [body(x) for x in recv(b)] == [b"a"]
    expect(b, active=2, deferred=1)


@pytest.mark.parametrize("crash", [False, True])
def test_scheduled_message_survives_a_restart(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool, crash: bool
) -> None:
    make(broker, partitioned)
    (s,) = send(broker, Message(b"later", scheduled_enqueue_time_ms=clock.now + 60_000))
    clock.advance(30_000)
    b = reopen(crash=crash)
    expect(b, scheduled=1)
    assert [(d.sequence_number, d.state) for d in peek_all(b)] == [(s, SCHEDULED)]
    assert b.housekeeping.tick() == [] and recv(b) == []
    clock.advance(30_000)
    assert b.housekeeping.tick() == [(NS, "q")]
    expect(b, active=1)
    (d,) = recv(b)
    assert body(d) == b"later" and d.sequence_number != s


def test_scheduled_message_due_during_downtime_activates_after_restart(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    (s,) = send(broker, Message(b"later", scheduled_enqueue_time_ms=clock.now + 10_000))
    clock.advance(20_000)
    b = reopen()
    b.housekeeping.tick()
    expect(b, active=1)
    (d,) = recv(b)
    assert body(d) == b"later" and d.sequence_number != s


# ===================================================================== duplicate detection


def dedup_queue(b: Broker, partitioned: bool, name: str = "q") -> None:
    make(
        b,
        partitioned,
        name,
        requires_duplicate_detection=True,
        duplicate_detection_history_time_window=WINDOW,
    )


def test_duplicates_within_the_window_are_accepted_and_dropped(
    broker: Broker, clock: FakeClock, partitioned: bool
) -> None:
    dedup_queue(broker, partitioned)
    first = Message(b"first", message_id="a")
    (s,) = send(broker, first)
    expect(broker, active=1, size=size_of(first))
    assert send(broker, Message(b"second", message_id="a")) == [s]
    expect(broker, active=1, size=size_of(first))
    # Still a duplicate after the original was consumed.
    got = recv(broker)
    assert [body(d) for d in got] == [b"first"]
    settle(broker, "complete", *got)
    clock.advance(WINDOW - 1)
    assert send(broker, Message(b"third", message_id="a")) == [s]
    expect(broker, size=0)
    # No MessageId: never a duplicate.
    assert len(set(send(broker, Message(b"x"), Message(b"x")))) == 2
    expect(broker, active=2)


def test_after_the_window_a_message_id_is_stored_again(
    broker: Broker, clock: FakeClock, partitioned: bool
) -> None:
    dedup_queue(broker, partitioned)
    (s,) = send(broker, Message(b"1", message_id="b"))
    clock.advance(WINDOW + 1)
    (s2,) = send(broker, Message(b"2", message_id="b"))
    assert s2 != s
    expect(broker, active=2)
    assert send(broker, Message(b"3", message_id="b")) == [s2]  # the new copy starts a window
    expect(broker, active=2)


@pytest.mark.parametrize("crash", [None, False, True], ids=["open", "reopened", "crashed"])
def test_the_window_edge_is_inside(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool, crash: bool | None
) -> None:
    """A repeat exactly one window after the original is still a duplicate ("within" the
    window includes its end; Azure's documentation does not say which side the edge is on);
    one millisecond later it is stored. Pruning the history (each send prunes first, and a
    restart reloads it) keeps the entry that sits exactly on the edge."""
    dedup_queue(broker, partitioned)
    (s,) = send(broker, Message(b"1", message_id="e"))
    clock.advance(WINDOW)
    b = broker if crash is None else reopen(crash=crash)
    send(b, Message(b"other", message_id="other"))  # a send that prunes at the edge
    assert send(b, Message(b"2", message_id="e")) == [s]
    expect(b, active=2)
    clock.advance(1)
    (s2,) = send(b, Message(b"3", message_id="e"))
    assert s2 != s
    expect(b, active=3)


def test_duplicates_within_one_batch(broker: Broker, partitioned: bool) -> None:
    dedup_queue(broker, partitioned)
    seqs = send(
        broker,
        Message(b"1", message_id="a"),
        Message(b"2", message_id="a"),
        Message(b"3", message_id="b"),
        Message(b"4", message_id="a"),
    )
    assert seqs[0] == seqs[1] == seqs[3] != seqs[2]
    expect(broker, active=2)
    assert sorted(body(d) for d in recv(broker)) == [b"1", b"3"]


def test_scheduled_and_plain_messages_share_the_history(
    broker: Broker, clock: FakeClock, partitioned: bool
) -> None:
    """daemon/README.md §8.4: whichever comes second is dropped."""
    dedup_queue(broker, partitioned)
    at = clock.now + 30_000
    (sx,) = send(broker, Message(b"sched", message_id="x", scheduled_enqueue_time_ms=at))
    assert send(broker, Message(b"plain", message_id="x")) == [sx]
    expect(broker, scheduled=1)
    (py,) = send(broker, Message(b"plain", message_id="y"))
    assert send(broker, Message(b"sched", message_id="y", scheduled_enqueue_time_ms=at)) == [py]
    expect(broker, active=1, scheduled=1)
    clock.advance(30_000)
    broker.housekeeping.tick()
    expect(broker, active=2)
    assert sorted(body(d) for d in recv(broker)) == [b"plain", b"sched"]


def test_partitioned_duplicate_key_includes_the_partition_key(
    broker: Broker, partitioned: bool
) -> None:
    """daemon/README.md §8.3: MessageId alone on a plain queue; MessageId + PartitionKey when
    partitioned."""
    dedup_queue(broker, partitioned)
    (s1,) = send(broker, Message(b"1", message_id="m", partition_key="p1"))
    (s2,) = send(broker, Message(b"2", message_id="m", partition_key="p2"))
    if partitioned:
        assert s2 != s1
        expect(broker, active=2)
    else:
        assert s2 == s1
        expect(broker, active=1)
    assert send(broker, Message(b"3", message_id="m", partition_key="p1")) == [s1]
    assert send(broker, Message(b"4", message_id="m", partition_key="p2")) == [s2]
    expect(broker, active=2 if partitioned else 1)


@pytest.mark.parametrize("crash", [False, True])
def test_duplicate_history_survives_a_restart(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool, crash: bool
) -> None:
    dedup_queue(broker, partitioned)
    (a,) = send(broker, Message(b"a", message_id="a"))
    (s,) = send(broker, Message(b"s", message_id="s", scheduled_enqueue_time_ms=clock.now + 1))
    settle(broker, "complete", *recv(broker))
    clock.advance(WINDOW // 2)
    (b_,) = send(broker, Message(b"b", message_id="b", partition_key="pk"))
    b = reopen(crash=crash)
    assert send(b, Message(b"a2", message_id="a")) == [a]
    assert send(b, Message(b"s2", message_id="s")) == [s]
    assert send(b, Message(b"b2", message_id="b", partition_key="pk")) == [b_]
    expect(b, active=1, scheduled=1)
    b = reopen(crash=crash)
    assert send(b, Message(b"a3", message_id="a")) == [a]
    # The window still counts from the original sends.
    clock.advance(WINDOW // 2 + 1)
    (a2,) = send(b, Message(b"a4", message_id="a"))
    assert a2 != a
    assert send(b, Message(b"b3", message_id="b", partition_key="pk")) == [b_]
    expect(b, active=2, scheduled=1)


def test_without_duplicate_detection_ids_repeat(broker: Broker, partitioned: bool) -> None:
    make(broker, partitioned)
    s = send(broker, Message(b"1", message_id="a"), Message(b"2", message_id="a"))
    assert s[0] != s[1]
    expect(broker, active=2)


# ===================================================================== purge


def test_purge_queue_and_dlq(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    seqs = send(broker, Message(b"locked"), Message(b"deferred"), Message(b"dead"))
    send(broker, Message(b"idle"))
    send(broker, Message(b"sched", scheduled_enqueue_time_ms=clock.now + 10_000))
    got = by_body([d for d in recv(broker) if body(d) != b"idle"])
    settle(broker, "defer", got[b"deferred"])
    settle(broker, "dead-letter", got[b"dead"])
    expect(broker, active=3, deferred=1, scheduled=1, dead=1)
    before = next_numbers(broker)
    assert broker.messaging.purge(NS, "q") == 4  # locked, deferred, idle and scheduled
    expect(broker, dead=1, size=size_of(Message(b"dead")))
    assert settle(broker, "complete", got[b"locked"]) == ["MessageLockLost"]
    with pytest.raises(MessageNotFound):
        broker.messaging.receive_deferred(NS, "q", [got[b"deferred"].sequence_number], "peek-lock")
    clock.advance(10_000)
    broker.housekeeping.tick()
    assert recv(broker) == [] and peek_all(broker) == []
    b = reopen()
    expect(b, dead=1)
    (dead,) = recv(b, DLQ)  # locked DLQ messages are purged too
    assert b.messaging.purge(NS, "Q/$DeadLetterQueue") == 1
    assert settle(b, "complete", dead, path=DLQ) == ["MessageLockLost"]
    expect(b, size=0)
    assert b.messaging.purge(NS, "q") == 0 and b.messaging.purge(NS, DLQ) == 0
    b = reopen(crash=True)
    expect(b, size=0)
    assert peek_all(b) == [] and peek_all(b, DLQ) == []
    # Sequence numbers go on; purged numbers are not reused.
    assert next_numbers(b) == before
    assert not set(send(b, *[Message(b"new")] * 16)) & set(seqs)


def test_purge_dlq_leaves_the_queue(broker: Broker, partitioned: bool) -> None:
    make(broker, partitioned)
    send(broker, Message(b"keep"), Message(b"dead"))
    got = by_body(recv(broker))
    settle(broker, "dead-letter", got[b"dead"])
    assert broker.messaging.purge(NS, DLQ) == 1
    expect(broker, active=1, size=size_of(Message(b"keep")))
    assert settle(broker, "complete", got[b"keep"]) == ["ok"]


# ===================================================================== DLQ resubmit


def dead_letter_all(b: Broker, *messages: Message, path: str = "q") -> list[int]:
    seqs = send(b, *messages, path=path)
    got = recv(b, path)
    assert len(got) == len(messages)
    assert set(settle(b, "dead-letter", *got, path=path, reason="R", description="D")) == {"ok"}
    return seqs


def test_resubmit_to_the_same_queue(broker: Broker, reopen: Reopen, partitioned: bool) -> None:
    make(broker, partitioned)
    msgs = [
        Message(b"%d" % k, message_id=f"m{k}", application_properties={"k": k}) for k in range(3)
    ]
    old = dead_letter_all(broker, *msgs)
    expect(broker, dead=3)
    result = broker.messaging.dlq_resubmit(NS, "q", 2, None)
    assert (result["resubmitted"], result["to"]) == (2, "q")
    new = result["sequence_numbers"]
    assert len(new) == 2 and not set(new) & set(old)
    for seq in new:
        check_number(seq, partitioned)
    expect(broker, active=2, dead=1)
    b = reopen()
    expect(b, active=2, dead=1)
    got = recv(b)
    assert sorted(d.sequence_number for d in got) == sorted(new)
    for d in got:
        m = decode_message(d.payload)
        k = int(m.body)
        assert m.message_id == f"m{k}"
        assert props(d) == {"k": k}  # the dead-letter properties are stripped
        assert d.delivery_count == 1
    settle(b, "complete", *got)
    # The DLQ path works as the entity too; the rest goes back.
    result = b.messaging.dlq_resubmit(NS, "q/$DeadLetterQueue", None, None)
    assert (result["resubmitted"], result["to"]) == (1, "q")
    expect(b, active=1)
    assert b.messaging.dlq_resubmit(NS, "q", None, None)["resubmitted"] == 0


def test_resubmit_to_another_queue(broker: Broker, reopen: Reopen, partitioned: bool) -> None:
    make(broker, partitioned)
    make(broker, not partitioned, "other")
    msg = Message(b"x", application_properties={"a": "b"})
    (old,) = dead_letter_all(broker, msg)
    # Changes made when dead-lettering are kept; only the dead-letter ones go.
    (extra,) = send(broker, Message(b"y"))
    (d,) = recv(broker)
    settle(broker, "dead-letter", d, properties={"c": 1}, reason="R2")
    for bad, error in (
        ("other/$deadletterqueue", InvalidOperation),
        ("missing", MessagingEntityNotFound),
    ):
        with pytest.raises(error):
            broker.messaging.dlq_resubmit(NS, "q", None, bad)
    with pytest.raises(BadRequest):
        broker.messaging.dlq_resubmit(NS, "q", 0, "other")
    expect(broker, dead=2)
    result = broker.messaging.dlq_resubmit(NS, "q", None, "other")
    assert (result["resubmitted"], result["to"]) == (2, "other")
    expect(broker, size=0)
    expect(broker, active=2, name="other")
    for restart in (False, True):
        b = reopen() if restart else broker
        got = by_body(peek_all(b, "other"))
        assert sorted(d.sequence_number for d in got.values()) == sorted(result["sequence_numbers"])
        assert props(got[b"x"]) == {"a": "b"}
        assert props(got[b"y"]) == {"c": 1}
        expect(b, active=2, name="other")
        expect(b, size=0)
    assert old != extra


def test_resubmit_skips_locked_dlq_messages(broker: Broker, partitioned: bool) -> None:
    make(broker, partitioned)
    dead_letter_all(broker, Message(b"1"), Message(b"2"))
    (locked,) = recv(broker, DLQ, count=1)
    result = broker.messaging.dlq_resubmit(NS, "q", None, None)
    assert result["resubmitted"] == 1
    expect(broker, active=1, dead=1)
    assert settle(broker, "complete", locked, path=DLQ) == ["ok"]
    expect(broker, active=1)


def test_resubmit_ignores_duplicate_detection(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    dedup_queue(broker, partitioned)
    (old,) = dead_letter_all(broker, Message(b"x", message_id="dup"))
    result = broker.messaging.dlq_resubmit(NS, "q", None, None)
    assert result["resubmitted"] == 1
    (new,) = result["sequence_numbers"]
    assert new != old
    expect(broker, active=1)
    b = reopen()
    (d,) = recv(b)
    assert (d.sequence_number, decode_message(d.payload).message_id) == (new, "dup")


# ===================================================================== status


@pytest.mark.parametrize(
    ("status", "send_ok", "receive_ok"),
    [
        ("Active", True, True),
        ("Disabled", False, False),
        ("SendDisabled", False, True),
        ("ReceiveDisabled", True, False),
    ],
)
def test_status_on_each_operation(
    broker: Broker,
    clock: FakeClock,
    reopen: Reopen,
    partitioned: bool,
    status: str,
    send_ok: bool,
    receive_ok: bool,
) -> None:
    make(broker, partitioned)
    send(broker, Message(b"idle"), Message(b"deferred"), Message(b"dead"))
    (sched,) = send(broker, Message(b"sched", scheduled_enqueue_time_ms=clock.now + 60_000))
    got = by_body(recv(broker))
    settle(broker, "abandon", got[b"idle"])
    settle(broker, "defer", got[b"deferred"])
    settle(broker, "dead-letter", got[b"dead"])
    deferred = got[b"deferred"].sequence_number
    broker.management.queue_update(NS, "q", {"status": status})
    b = broker
    sent = 0
    for restart in (False, True):
        if restart:
            b = reopen()
        assert b.management.queue_get(NS, "q")["status"] == status
        expect(b, active=2 + sent, deferred=1, scheduled=1 + sent, dead=1)
        later = Message(b"s2", scheduled_enqueue_time_ms=clock.now + 60_000)
        if send_ok:
            send(b, Message(b"new"))
            send(b, later)
            sent += 1
        else:
            for m in (Message(b"new"), later):
                with pytest.raises(MessagingEntityDisabled):
                    send(b, m)
        if receive_ok:
            main = recv(b)
            assert b"idle" in {body(d) for d in main}
            assert set(settle(b, "abandon", *main)) == {"ok"}
            (dd,) = recv(b, DLQ)
            assert settle(b, "abandon", dd, path=DLQ) == ["ok"]
            (df,) = b.messaging.receive_deferred(NS, "q", [deferred], "peek-lock")
            assert settle(b, "abandon", df) == ["ok"]
            assert len(peek_all(b)) == 3 + 2 * sent
            assert len(peek_all(b, DLQ)) == 1
        else:
            with pytest.raises(MessagingEntityDisabled):
                recv(b)
            with pytest.raises(MessagingEntityDisabled):
                b.messaging.receive_deferred(NS, "q", [deferred], "peek-lock")
            with pytest.raises(MessagingEntityDisabled):
                b.messaging.peek(NS, "q", 10, None)
        expect(b, active=2 + sent, deferred=1, scheduled=1 + sent, dead=1)
    # Suspended entities keep their messages (daemon/README.md §17.3): all there once Active again.
    b.management.queue_update(NS, "q", {"status": "Active"})
    assert b.messaging.cancel_scheduled(NS, "q", [sched]) == 1
    (df,) = b.messaging.receive_deferred(NS, "q", [deferred], "receive-and-delete")
    assert body(df) == b"deferred"
    assert b"idle" in {body(d) for d in recv(b, mode="receive-and-delete")}
    assert [body(d) for d in recv(b, DLQ, mode="receive-and-delete")] == [b"dead"]


@pytest.mark.parametrize(
    ("status", "cancel_ok"),
    [("Disabled", False), ("SendDisabled", False), ("ReceiveDisabled", True)],
)
def test_cancel_scheduled_follows_the_send_direction(
    broker: Broker,
    clock: FakeClock,
    reopen: Reopen,
    partitioned: bool,
    status: str,
    cancel_ok: bool,
) -> None:
    """Cancelling is a sender's operation (daemon/README.md §7.1, §17): blocked with sends."""
    make(broker, partitioned)
    (s,) = send(broker, Message(b"s", scheduled_enqueue_time_ms=clock.now + 60_000))
    broker.management.queue_update(NS, "q", {"status": status})
    b = broker
    if not cancel_ok:
        for restart in (False, True):
            if restart:
                b = reopen()
            with pytest.raises(MessagingEntityDisabled):
                b.messaging.cancel_scheduled(NS, "q", [s])
            expect(b, scheduled=1)
        return
    b = reopen()
    assert b.messaging.cancel_scheduled(NS, "q", [s]) == 1
    expect(b, size=0)
    b = reopen()
    expect(b, size=0)
    with pytest.raises(MessageNotFound):
        b.messaging.cancel_scheduled(NS, "q", [s])


# ===================================================================== counts


def test_counts_at_each_step(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned, lock_duration=5_000)
    a, b_, c = Message(b"a" * 10), Message(b"b" * 20), Message(b"c" * 30)
    later = Message(b"s" * 40, scheduled_enqueue_time_ms=clock.now + 60_000)
    expect(broker, size=0)
    send(broker, a, b_, c)
    expect(broker, active=3, size=size_of(a, b_, c))
    (s,) = send(broker, later)
    expect(broker, active=3, scheduled=1, size=size_of(a, b_, c, later))
    got = by_body(recv(broker))
    assert set(got) == {a.body, b_.body, c.body}
    expect(broker, active=3, scheduled=1, size=size_of(a, b_, c, later))  # locked: active
    settle(broker, "defer", got[a.body])
    expect(broker, active=3, deferred=1, scheduled=1, size=size_of(a, b_, c, later))
    settle(broker, "dead-letter", got[b_.body])
    expect(broker, active=2, deferred=1, scheduled=1, dead=1, size=size_of(a, b_, c, later))
    settle(broker, "complete", got[c.body])
    expect(broker, active=1, deferred=1, scheduled=1, dead=1, size=size_of(a, b_, later))
    bb = reopen()
    expect(bb, active=1, deferred=1, scheduled=1, dead=1, size=size_of(a, b_, later))
    clock.advance(60_000)
    bb.housekeeping.tick()
    expect(bb, active=2, deferred=1, dead=1, size=size_of(a, b_, later))
    (d,) = bb.messaging.receive_deferred(NS, "q", [got[a.body].sequence_number], "peek-lock")
    expect(bb, active=2, deferred=1, dead=1, size=size_of(a, b_, later))
    settle(bb, "complete", d)
    expect(bb, active=1, dead=1, size=size_of(b_, later))
    bb.messaging.dlq_resubmit(NS, "q", None, None)
    expect(bb, active=2, size=size_of(b_, later))
    bb = reopen(crash=True)
    expect(bb, active=2, size=size_of(b_, later))
    (x,) = [d for d in recv(bb) if body(d) == b"s" * 40]
    assert x.sequence_number != s
    assert bb.messaging.purge(NS, "q") == 2
    expect(bb, size=0)
    bb = reopen()
    expect(bb, size=0)
