"""More of the message lifecycle on the broker, with a fake clock (nothing sleeps).

Sessions (daemon/README.md §9), transactions (§12, §0.1.8), auto-forwarding and the transfer
dead-letter queue (§11, §0.1.9, §4.2, §4.6, §4.7), auto-delete-on-idle (§6.5), tiers
(§15.1), entity status (§17) and runtime counts (§18). Scenarios run on a plain and on a
partitioned queue (§0.1) wherever that applies, and are checked again after a restart.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

import presenting
from conftest import Reopen
from sbctl.core.delivered import Delivered
from sbctl.core.durations import format_instant
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessageLockLost,
    MessageSizeExceeded,
    MessagingEntityDisabled,
    MessagingEntityNotFound,
    QuotaExceeded,
    SbctlError,
    ServiceTimeout,
    SessionCannotBeLocked,
    SessionLockLost,
)
from sbctl.core.locks import lock_token_for
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.messages import ReceivedMessage
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker
reopen = presenting.reopen

NS = DEFAULT_NAMESPACE
LOCK = 10_000  # lock duration of the queues below
MINUTE = 60_000
IDLE = 5 * MINUTE  # the smallest auto_delete_on_idle (daemon/README.md §6.5)
TDLQ = "$Transfer/$DeadLetterQueue"

# The service's own texts (daemon/README.md §9.3, §9.5, §12.2), spelled out so a change shows.
SESSION_REQUIRED = (
    "The SessionId was not set on a message, and it cannot be sent to the entity. Entities "
    "that have session support enabled can only receive messages that have the SessionId set "
    "to a valid value."
)
NON_SESSION_RECEIVER = (
    "It is not possible for an entity that requires sessions to create a non-sessionful "
    "message receiver."
)
SESSION_RECEIVER_ON_PLAIN = (
    "A sessionful message receiver cannot be created on an entity that does not require sessions."
)
TOO_MANY_IN_TRANSACTION = "Can't send more than 100 messages in a single transaction"

Settlement = tuple[str, str, dict[str, Any] | None, str | None, str | None]


# ===================================================================== fixtures and helpers


def make(b: Broker, partitioned: bool, name: str = "q", **options: Any) -> dict[str, Any]:
    return b.management.queue_create(NS, name, {"enable_partitioning": partitioned, **options})


def smake(b: Broker, partitioned: bool, name: str = "s", **options: Any) -> dict[str, Any]:
    """A session-enabled queue with a short lock."""
    return make(b, partitioned, name, requires_session=True, lock_duration=LOCK, **options)


def send(b: Broker, *messages: Message, path: str = "q") -> list[int]:
    return b.messaging.send(NS, path, list(messages))


def recv(b: Broker, path: str = "q", count: int = 50, mode: str = "peek-lock") -> list[Delivered]:
    return b.messaging.receive(NS, path, count, mode)


def accept(b: Broker, session_id: str | None = None, path: str = "s") -> str:
    token: str = b.messaging.session_accept(NS, path, session_id)["session_lock_token"]
    return token


def srecv(
    b: Broker, token: str, path: str = "s", count: int = 50, mode: str = "peek-lock"
) -> list[Delivered]:
    return b.messaging.receive(NS, path, count, mode, token)


def codes(results: list[dict[str, Any]]) -> list[str]:
    return [r["error"]["code"] if "error" in r else "ok" for r in results]


def settle(b: Broker, op: str, *ds: Delivered | str, path: str = "q", **kw: Any) -> list[str]:
    tokens = [d if isinstance(d, str) else d.lock_token for d in ds]
    return codes(b.messaging.settle(NS, path, op, tokens, **kw))  # type: ignore[arg-type]


def tx(op: str, d: Delivered | str, **kw: Any) -> Settlement:
    token = d if isinstance(d, str) else d.lock_token
    assert token is not None
    return (op, token, kw.get("properties"), kw.get("reason"), kw.get("description"))


def body(d: Delivered) -> bytes:
    return decode_message(d.payload).body


def bodies(ds: list[Delivered]) -> list[bytes]:
    return [body(d) for d in ds]


def message(d: Delivered) -> Message:
    return decode_message(d.payload)


def props(d: Delivered) -> dict[str, Any]:
    """Application properties as a client sees them (payload + later changes)."""
    return ReceivedMessage.from_wire(d).application_properties


def peek_all(b: Broker, path: str = "q") -> list[Delivered]:
    """Every peekable message of every partition, by sequence number."""
    out: list[Delivered] = []
    while page := b.messaging.peek(NS, path, 250, out[-1].sequence_number + 1 if out else 0):
        out += page  # daemon/README.md §0.1.7: pages walk on across partitions
    return out


def count(b: Broker, key: str, name: str = "q") -> int:
    value: int = b.management.queue_get(NS, name)[key]
    return value


def counts(b: Broker, name: str = "q") -> dict[str, int]:
    q = b.management.queue_get(NS, name)
    keys = (
        "active_message_count",
        "deferred_message_count",
        "scheduled_message_count",
        "dead_letter_message_count",
        "transfer_dead_letter_message_count",
        "total_message_count",
    )
    return {k.removesuffix("_message_count"): q[k] for k in keys}


def expect(
    b: Broker,
    name: str = "q",
    *,
    active: int = 0,
    deferred: int = 0,
    scheduled: int = 0,
    dead: int = 0,
    transfer_dead: int = 0,
) -> None:
    assert counts(b, name) == {
        "active": active,
        "deferred": deferred,
        "scheduled": scheduled,
        "dead_letter": dead,
        "transfer_dead_letter": transfer_dead,
        "total": active + scheduled + dead + transfer_dead,
    }


def partition_of(seq: int) -> int:
    return seq >> 48


def error_of(fn: Callable[[], Any]) -> SbctlError:
    """The SbctlError ``fn`` raises (any subclass)."""
    with pytest.raises(SbctlError) as info:
        fn()
    return info.value


def exists(b: Broker, name: str) -> bool:
    try:
        b.management.queue_get(NS, name)
    except MessagingEntityNotFound:
        return False
    return True


def two_keys_on_different_partitions() -> tuple[str, str]:
    a = "key-a"
    for k in range(100):
        other = f"key-{k}"
        if partition_for_key(other, 16) != partition_for_key(a, 16):
            return a, other
    raise AssertionError("unreachable")


# ===================================================================== sessions: the rules


def test_send_without_session_id_is_refused_with_the_service_text(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    smake(broker, partitioned)
    b = broker
    for restart in (False, True):
        if restart:
            b = reopen()
        for bad in (
            [Message(b"none")],
            [Message(b"empty", session_id="")],
            [Message(b"keyed", partition_key="k")],
            [Message(b"later", scheduled_enqueue_time_ms=b.clock.now_ms() + 60_000)],
            [Message(b"ok", session_id="S"), Message(b"none")],  # one bad line: nothing stored
        ):
            err = error_of(lambda bad=bad, b=b: send(b, *bad, path="s"))  # type: ignore[misc]
            assert (type(err), err.message) == (InvalidOperation, SESSION_REQUIRED)
        expect(b, "s")
        assert b.messaging.session_list(NS, "s") == []


def test_receiver_kind_must_match_the_queue(broker: Broker, partitioned: bool) -> None:
    smake(broker, partitioned)
    make(broker, partitioned)
    send(broker, Message(b"x", session_id="S"), path="s")
    send(broker, Message(b"y"))
    for fn in (lambda: recv(broker, "s"), lambda: recv(broker, "S", mode="receive-and-delete")):
        err = error_of(fn)
        assert (type(err), err.message) == (InvalidOperation, NON_SESSION_RECEIVER)
    refused: list[Callable[[], Any]] = [
        lambda: broker.messaging.session_accept(NS, "q", "S"),
        lambda: broker.messaging.session_accept(NS, "q", None),
        lambda: srecv(broker, str(uuid.uuid4()), path="q"),
    ]
    for fn in refused:
        err = error_of(fn)
        assert (type(err), err.message) == (InvalidOperation, SESSION_RECEIVER_ON_PLAIN)
    # Nothing was taken by the refused receivers; the DLQ of a session queue has no sessions.
    expect(broker, "s", active=1)
    expect(broker, active=1)
    assert recv(broker, "s/$deadletterqueue") == []
    with pytest.raises(InvalidOperation):
        broker.messaging.session_accept(NS, "s/$deadletterqueue", "S")


def test_a_held_session_cannot_be_accepted_again(
    broker: Broker, clock: FakeClock, partitioned: bool
) -> None:
    smake(broker, partitioned)
    send(broker, Message(b"1", session_id="S1"), Message(b"2", session_id="S2"), path="s")
    got = broker.messaging.session_accept(NS, "s", "S1")
    assert got["session_id"] == "S1"
    assert got["locked_until_utc"] == format_instant(clock.now + LOCK)
    for _ in range(2):
        with pytest.raises(SessionCannotBeLocked):
            accept(broker, "S1")
    # Another session, even one without messages, can be accepted by name (daemon/README.md §9.6).
    accept(broker, "S2")
    accept(broker, "no-messages-yet")
    assert broker.messaging.session_close(NS, "s", got["session_lock_token"]) == {
        "session_id": "S1",
        "closed": True,
    }
    with pytest.raises(SessionLockLost):
        broker.messaging.session_close(NS, "s", got["session_lock_token"])
    again = accept(broker, "S1")
    assert again != got["session_lock_token"]
    assert bodies(srecv(broker, again)) == [b"1"]
    with pytest.raises(BadRequest):
        accept(broker, "x" * 129)


def test_fifo_within_each_session_across_interleaved_sessions(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    smake(broker, partitioned)
    for i in range(6):
        batch = [Message(b"%s%d" % (s.encode(), i), session_id=s) for s in ("A", "B", "C")]
        if i % 2:
            send(broker, *batch, path="s")
        else:
            for m in batch:
                send(broker, m, path="s")
    want = {s: [b"%s%d" % (s.encode(), i) for i in range(6)] for s in ("A", "B", "C")}
    ta = accept(broker, "A")
    first = srecv(broker, ta, count=4)
    assert bodies(first) == want["A"][:4]
    assert bodies(srecv(broker, ta)) == want["A"][4:]
    seqs = [d.sequence_number for d in first]
    assert seqs == sorted(seqs)
    assert srecv(broker, ta) == []
    tb = accept(broker, "B")
    got: list[bytes] = []
    for _ in range(3):
        got += bodies(srecv(broker, tb, count=2, mode="receive-and-delete"))
    assert got == want["B"]
    assert set(settle(broker, "complete", *first, path="s")) == {"ok"}
    b = reopen()
    # A: two left (their locks died with the broker); B drained; C untouched.
    assert bodies(srecv(b, accept(b, "A", "s"))) == want["A"][4:]
    assert srecv(b, accept(b, "B")) == []
    tc = accept(b, "C")
    assert [bodies(srecv(b, tc, count=1)) for _ in range(6)] == [[x] for x in want["C"]]


def test_abandon_returns_a_message_to_the_front_of_its_session(
    broker: Broker, partitioned: bool
) -> None:
    smake(broker, partitioned)
    send(broker, *[Message(b"%d" % i, session_id="S") for i in range(3)], path="s")
    send(broker, Message(b"other", session_id="T"), path="s")
    token = accept(broker, "S")
    m0, m1 = srecv(broker, token, count=2)
    assert settle(broker, "abandon", m0, path="s", properties={"tries": 1}) == ["ok"]
    again = srecv(broker, token, count=1)
    assert bodies(again) == [b"0"] and again[0].delivery_count == 2
    assert props(again[0]) == {"tries": 1}
    assert settle(broker, "abandon", m1, *again, path="s") == ["ok", "ok"]
    got = srecv(broker, token)
    assert bodies(got) == [b"0", b"1", b"2"]
    assert [d.delivery_count for d in got] == [3, 2, 1]


def test_next_session_picks_an_unlocked_session_with_messages(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    smake(broker, partitioned)
    with pytest.raises(ServiceTimeout):
        broker.messaging.session_accept(NS, "s", None)
    send(broker, Message(b"held", session_id="HELD"), path="s")
    send(broker, Message(b"done", session_id="DONE"), path="s")
    send(broker, Message(b"d", session_id="DEFERRED"), path="s")
    send(
        broker,
        Message(b"later", session_id="LATER", scheduled_enqueue_time_ms=clock.now + 3 * LOCK),
        path="s",
    )
    broker.messaging.session_set_state(NS, "s", "STATE-ONLY", b"state")
    accept(broker, "HELD")
    for name, op in (("DONE", "complete"), ("DEFERRED", "defer")):
        token = accept(broker, name)
        assert settle(broker, op, *srecv(broker, token), path="s") == ["ok"]
        broker.messaging.session_close(NS, "s", token)
    with pytest.raises(ServiceTimeout):
        broker.messaging.session_accept(NS, "s", None)
    send(broker, Message(b"ready", session_id="READY"), path="s")
    got = broker.messaging.session_accept(NS, "s", None)
    assert got["session_id"] == "READY"
    assert got["locked_until_utc"] == format_instant(clock.now + LOCK)
    assert bodies(srecv(broker, got["session_lock_token"])) == [b"ready"]
    with pytest.raises(ServiceTimeout):
        broker.messaging.session_accept(NS, "s", None)
    # The scheduled message makes its session available once it is enqueued; the locks of
    # HELD and READY have expired by then.
    clock.advance(3 * LOCK)
    broker.housekeeping.tick()
    taken = {broker.messaging.session_accept(NS, "s", None)["session_id"] for _ in range(3)}
    assert taken == {"HELD", "READY", "LATER"}
    with pytest.raises(ServiceTimeout):
        broker.messaging.session_accept(NS, "s", None)
    b = reopen()  # session locks are not persistent
    taken = {b.messaging.session_accept(NS, "s", None)["session_id"] for _ in range(3)}
    assert taken == {"HELD", "READY", "LATER"}
    with pytest.raises(ServiceTimeout):
        b.messaging.session_accept(NS, "s", None)


def test_an_expired_session_lock_frees_the_session(
    broker: Broker, clock: FakeClock, partitioned: bool
) -> None:
    smake(broker, partitioned)
    send(broker, Message(b"0", session_id="S"), Message(b"1", session_id="S"), path="s")
    old = accept(broker, "S")
    (first,) = srecv(broker, old, count=1)
    clock.advance(LOCK - 1)
    with pytest.raises(SessionCannotBeLocked):
        accept(broker, "S")
    clock.advance(1)
    broker.housekeeping.tick()
    new = accept(broker, "S")
    for fn in (
        lambda: srecv(broker, old),
        lambda: broker.messaging.session_renew(NS, "s", old),
        lambda: broker.messaging.session_close(NS, "s", old),
        lambda: broker.messaging.session_renew(NS, "s", str(uuid.uuid4())),
    ):
        with pytest.raises(SessionLockLost):
            fn()
    got = srecv(broker, new)
    assert bodies(got) == [b"0", b"1"]
    # daemon/README.md §9.9: accepted, then the lock expired: the delivery counts.
    assert [d.delivery_count for d in got] == [2, 1]
    assert got[0].sequence_number == first.sequence_number
    assert settle(broker, "complete", *got, path="s") == ["ok", "ok"]
    expect(broker, "s")


def test_renewing_a_session_lock_extends_it_from_now(
    broker: Broker, clock: FakeClock, partitioned: bool
) -> None:
    smake(broker, partitioned)
    send(broker, Message(b"0", session_id="S"), Message(b"1", session_id="S"), path="s")
    token = accept(broker, "S")
    clock.advance(4_000)
    renewed = broker.messaging.session_renew(NS, "s", token)
    assert renewed == {
        "session_id": "S",
        "session_lock_token": token,
        "locked_until_utc": format_instant(clock.now + LOCK),
    }
    clock.advance(LOCK - 1)  # past the first lock's end
    with pytest.raises(SessionCannotBeLocked):
        accept(broker, "S")
    (listed,) = broker.messaging.session_list(NS, "s")
    assert listed["locked_until_utc"] == format_instant(clock.now + 1)
    assert bodies(srecv(broker, token, count=1)) == [b"0"]
    clock.advance(1)
    with pytest.raises(SessionLockLost):
        broker.messaging.session_renew(NS, "s", token)
    assert broker.messaging.session_list(NS, "s")[0]["locked_until_utc"] is None
    accept(broker, "S")


@pytest.mark.parametrize("op", ["complete", "abandon", "defer", "dead-letter", "renew-lock"])
def test_settling_after_the_session_lock_expired_is_session_lock_lost(
    broker: Broker, clock: FakeClock, partitioned: bool, op: str
) -> None:
    smake(broker, partitioned)
    send(broker, *[Message(b"%d" % i, session_id="S") for i in range(3)], path="s")
    token = accept(broker, "S")
    clock.advance(1_000)
    got = srecv(broker, token, count=2)  # held by the session lock (daemon/README.md §9.7)
    clock.advance(LOCK - 1_000)
    assert settle(broker, op, *got, path="s") == ["SessionLockLost", "SessionLockLost"]
    expect(broker, "s", active=3)
    # Once the message locks ran out too, a new receiver gets everything back, in order.
    clock.advance(1_000)
    broker.housekeeping.tick()
    again = srecv(broker, accept(broker, "S"))
    assert bodies(again) == [b"0", b"1", b"2"]
    assert [d.delivery_count for d in again] == [2, 2, 1]


def test_renewing_the_session_lock_keeps_its_messages_settleable(
    broker: Broker, clock: FakeClock
) -> None:
    smake(broker, False)
    send(broker, Message(b"0", session_id="S"), path="s")
    token = accept(broker, "S")
    clock.advance(1_000)
    (d,) = srecv(broker, token)
    clock.advance(LOCK - 2_000)
    broker.messaging.session_renew(NS, "s", token)
    clock.advance(3_000)  # the message's own lock would have ended; the session's has not
    broker.housekeeping.tick()
    assert settle(broker, "complete", d, path="s") == ["ok"]


def test_a_lost_session_lock_cannot_settle_under_the_new_holder(
    broker: Broker, clock: FakeClock
) -> None:
    smake(broker, False)
    send(broker, Message(b"0", session_id="S"), path="s")
    old = accept(broker, "S")
    clock.advance(1_000)
    (d,) = srecv(broker, old)
    clock.advance(LOCK - 1_000)
    accept(broker, "S")  # another receiver now holds S
    assert settle(broker, "complete", d, path="s") == ["SessionLockLost"]


def test_closing_a_session_hands_its_unsettled_messages_to_the_next_receiver(
    broker: Broker,
) -> None:
    smake(broker, False)
    send(broker, Message(b"0", session_id="S"), path="s")
    token = accept(broker, "S")
    srecv(broker, token)
    broker.messaging.session_close(NS, "s", token)
    got = broker.messaging.session_accept(NS, "s", None)
    assert got["session_id"] == "S"
    (d,) = srecv(broker, got["session_lock_token"])
    assert (body(d), d.delivery_count) == (b"0", 1)


def test_an_expired_session_lock_releases_every_message_received_under_it(
    broker: Broker, clock: FakeClock
) -> None:
    smake(broker, False)
    send(broker, Message(b"0", session_id="S"), path="s")
    old = accept(broker, "S")
    clock.advance(1_000)
    srecv(broker, old)
    clock.advance(LOCK - 1_000)
    broker.housekeeping.tick()
    got = srecv(broker, accept(broker, "S"))
    assert [(body(d), d.delivery_count) for d in got] == [(b"0", 2)]


def test_list_sessions_counts(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    smake(broker, partitioned)
    send(broker, *[Message(b"a", session_id="A")] * 3, Message(b"b", session_id="B"), path="s")
    broker.messaging.session_set_state(NS, "s", "C", b"c")

    def listed(b: Broker) -> dict[str, tuple[int, str | None, bool]]:
        return {
            s["session_id"]: (s["active_message_count"], s["locked_until_utc"], s["has_state"])
            for s in b.messaging.session_list(NS, "s")
        }

    assert listed(broker) == {"A": (3, None, False), "B": (1, None, False), "C": (0, None, True)}
    token = accept(broker, "A")
    until = format_instant(clock.now + LOCK)
    settle(broker, "complete", *srecv(broker, token, count=1), path="s")
    srecv(broker, accept(broker, "B"), mode="receive-and-delete")
    # B has no messages and no state left: it no longer exists (daemon/README.md §9.2).
    assert listed(broker) == {"A": (2, until, False), "C": (0, None, True)}
    b = reopen()
    assert listed(b) == {"A": (2, None, False), "C": (0, None, True)}
    b.messaging.session_set_state(NS, "s", "C", None)
    assert listed(b) == {"A": (2, None, False)}


def test_session_state_get_set_clear_and_restart(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    smake(broker, partitioned)
    # never set: null (daemon/README.md §9.8)
    assert broker.messaging.session_get_state(NS, "s", "S") is None
    broker.messaging.session_set_state(NS, "s", "S", b"\x00state\xff")
    broker.messaging.session_set_state(NS, "s", "EMPTY", b"")
    big = b"x" * (256 * 1024)  # one Standard message size
    broker.messaging.session_set_state(NS, "s", "BIG", big)
    with pytest.raises(MessageSizeExceeded):
        broker.messaging.session_set_state(NS, "s", "BIG", big + b"x")
    with pytest.raises(MessageSizeExceeded):
        broker.messaging.session_set_state(NS, "s", "NEW", big + b"x")
    with pytest.raises(BadRequest):
        broker.messaging.session_set_state(NS, "s", "x" * 129, b"x")
    broker.messaging.session_set_state(NS, "s", "GONE", b"soon")
    broker.messaging.session_set_state(NS, "s", "GONE", None)
    want = {"S": b"\x00state\xff", "EMPTY": b"", "BIG": big, "NEW": None, "GONE": None}
    b = broker
    for restart in ("none", "clean", "crash"):
        if restart != "none":
            b = reopen(crash=restart == "crash")
        assert {k: b.messaging.session_get_state(NS, "s", k) for k in want} == want
    # State does not need the session lock, and outlives the session's messages.
    send(b, Message(b"m", session_id="S"), path="s")
    srecv(b, accept(b, "S"), mode="receive-and-delete")
    b.messaging.session_set_state(NS, "s", "S", b"v2")
    b = reopen()
    assert b.messaging.session_get_state(NS, "s", "S") == b"v2"


def test_session_state_counts_toward_the_entity_size(broker: Broker) -> None:
    smake(broker, False)
    before = count(broker, "size_in_bytes", "s")
    broker.messaging.session_set_state(NS, "s", "S", b"x" * 10_000)
    assert count(broker, "size_in_bytes", "s") >= before + 10_000


def test_session_messages_of_a_partitioned_queue_share_one_partition(
    broker: Broker, reopen: Reopen
) -> None:
    smake(broker, True)
    sessions = [f"session-{k}" for k in range(10)]
    batch = [Message(b"%d" % i, session_id=s) for i in range(3) for s in sessions]
    seqs = send(broker, *batch, path="s")
    for m, seq in zip(batch, seqs, strict=True):
        assert partition_of(seq) == partition_for_key(m.session_id or "", 16)
    assert len({partition_of(s) for s in seqs}) > 1
    send(broker, Message(b"3", session_id="session-0", partition_key="session-0"), path="s")
    with pytest.raises(InvalidOperation):
        send(broker, Message(b"x", session_id="session-0", partition_key="other"), path="s")
    b = reopen()
    for s in sessions:
        got = srecv(b, accept(b, s))
        assert {d.partition_id for d in got} == {partition_for_key(s, 16)}
        assert bodies(got) == [b"0", b"1", b"2", b"3"][: len(got)]
        assert len(got) == (4 if s == "session-0" else 3)


def test_a_scheduled_session_message_joins_its_session_when_enqueued(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    smake(broker, partitioned)
    at = clock.now + 3 * LOCK
    (sched,) = send(
        broker, Message(b"later", session_id="S", scheduled_enqueue_time_ms=at), path="s"
    )
    send(broker, Message(b"now", session_id="S"), path="s")
    expect(broker, "s", active=1, scheduled=1)
    token = accept(broker, "S")
    (now,) = srecv(broker, token)
    assert body(now) == b"now"
    settle(broker, "complete", now, path="s")
    assert srecv(broker, token) == []
    broker.messaging.session_close(NS, "s", token)
    with pytest.raises(ServiceTimeout):
        broker.messaging.session_accept(NS, "s", None)
    b = reopen()
    clock.advance(3 * LOCK)
    b.housekeeping.tick()
    expect(b, "s", active=1)
    got = b.messaging.session_accept(NS, "s", None)
    assert got["session_id"] == "S"
    (later,) = srecv(b, got["session_lock_token"])
    assert body(later) == b"later" and later.sequence_number != sched
    assert partition_of(later.sequence_number) == (partition_for_key("S", 16) if partitioned else 0)


@pytest.mark.parametrize("crash", [False, True])
def test_restart_rebuilds_the_session_index(
    broker: Broker, reopen: Reopen, partitioned: bool, crash: bool
) -> None:
    smake(broker, partitioned)
    for i in range(4):
        send(
            broker,
            Message(b"A%d" % i, session_id="A"),
            Message(b"B%d" % i, session_id="B"),
            path="s",
        )
    ta = accept(broker, "A")
    a0, a1 = srecv(broker, ta, count=2)
    settle(broker, "complete", a0, path="s")
    settle(broker, "abandon", a1, path="s")
    srecv(broker, accept(broker, "B"), count=1, mode="receive-and-delete")
    b = reopen(crash=crash)
    assert {
        s["session_id"]: s["active_message_count"] for s in b.messaging.session_list(NS, "s")
    } == {
        "A": 3,
        "B": 3,
    }
    assert bodies(srecv(b, accept(b, "B"))) == [b"B1", b"B2", b"B3"]
    got = b.messaging.session_accept(NS, "s", None)
    assert got["session_id"] == "A"
    a = srecv(b, got["session_lock_token"])
    assert bodies(a) == [b"A1", b"A2", b"A3"]
    assert a[0].delivery_count == 2
    with pytest.raises(ServiceTimeout):
        b.messaging.session_accept(NS, "s", None)


def test_session_queue_status(broker: Broker, partitioned: bool) -> None:
    """daemon/README.md §17 on a session queue: a blocked direction refuses session receivers
    too."""
    smake(broker, partitioned)
    send(broker, Message(b"x", session_id="S"), path="s")
    token = accept(broker, "S")
    broker.management.queue_update(NS, "s", {"status": "ReceiveDisabled"})
    for fn in (lambda: accept(broker, "T"), lambda: srecv(broker, token)):
        with pytest.raises(MessagingEntityDisabled):
            fn()
    send(broker, Message(b"y", session_id="S"), path="s")
    broker.management.queue_update(NS, "s", {"status": "SendDisabled"})
    with pytest.raises(MessagingEntityDisabled):
        send(broker, Message(b"z", session_id="S"), path="s")
    assert bodies(srecv(broker, token)) == [b"x", b"y"]


# ===================================================================== transactions


def keyed(partitioned: bool, key: str = "k") -> dict[str, Any]:
    """Message fields that keep a transaction on a partitioned queue on one partition."""
    return {"partition_key": key} if partitioned else {}


def test_a_failing_transaction_stores_and_settles_nothing(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    k = keyed(partitioned)
    send(broker, Message(b"a", **k), Message(b"b", **k))
    da, db = recv(broker)
    # A valid-looking token whose lock does not exist, on the same partition.
    stale = lock_token_for(da.sequence_number, 12345)
    new = Message(b"new", **k)
    huge = Message(b"x" * (256 * 1024), **k)
    cases: list[tuple[list[Message], list[Settlement], type[SbctlError]]] = [
        ([new], [tx("complete", da), tx("complete", stale)], MessageLockLost),
        ([new], [tx("complete", da), tx("complete", "not-a-guid")], BadRequest),
        ([new, huge], [tx("complete", da)], MessageSizeExceeded),
        ([new], [tx("complete", da), tx("renew-lock", db)], BadRequest),
        ([new], [tx("complete", da), tx("receive", db)], BadRequest),
    ]
    for messages, settlements, error in cases:
        with pytest.raises(error):
            broker.messaging.transact(NS, "q", messages, settlements)
        expect(broker, active=2)
        assert bodies(peek_all(broker)) == [b"a", b"b"]
    with pytest.raises(InvalidOperation):
        broker.messaging.transact(NS, "q/$deadletterqueue", [new], [])
    # The tokens kept their locks: the same work, valid this time, goes through whole.
    result = broker.messaging.transact(
        NS, "q", [new], [tx("complete", da), tx("dead-letter", db, reason="R")]
    )
    assert codes(result["settlements"]) == ["ok", "ok"]
    (seq,) = result["sequence_numbers"]
    for restart in (False, True):
        b = reopen() if restart else broker
        expect(b, active=1, dead=1)
        assert [(d.sequence_number, body(d)) for d in peek_all(b)] == [(seq, b"new")]
        assert [props(d)["DeadLetterReason"] for d in peek_all(b, "q/$deadletterqueue")] == ["R"]


def _tx_setup(b: Broker, case: str) -> tuple[Delivered, list[Settlement]]:
    make(b, False)
    send(b, Message(b"a"))
    (d,) = recv(b)
    if case == "repeated-token":
        return d, [tx("complete", d), tx("complete", d)]
    if case == "complete-with-properties":
        return d, [tx("complete", d, properties={"p": 1})]
    if case == "abandon-with-reason":
        return d, [tx("abandon", d, reason="why")]
    b.management.queue_update(NS, "q", {"status": "ReceiveDisabled"})  # settling is refused
    return d, [tx("complete", d)]


@pytest.mark.parametrize(
    "case",
    ["repeated-token", "complete-with-properties", "abandon-with-reason", "receive-disabled"],
)
def test_an_invalid_settlement_in_a_transaction_applies_nothing(
    broker: Broker, reopen: Reopen, case: str
) -> None:
    d, settlements = _tx_setup(broker, case)
    with pytest.raises(SbctlError):
        broker.messaging.transact(NS, "q", [Message(b"new")], settlements)
    broker.management.queue_update(NS, "q", {"status": "Active"})
    assert bodies(peek_all(broker)) == [b"a"]
    assert settle(broker, "complete", d) == ["ok"]  # its lock is intact
    b = reopen()
    expect(b)


def test_a_transaction_holds_at_most_100_operations(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    k = keyed(partitioned)
    for messages, n_settle in ((101, 0), (99, 2)):
        if n_settle:
            send(broker, *[Message(b"r", **k)] * n_settle)
        got = recv(broker)
        err = error_of(
            lambda m=messages, g=got: broker.messaging.transact(  # type: ignore[misc]
                NS, "q", [Message(b"m", **k)] * m, [tx("complete", d) for d in g]
            )
        )
        assert (type(err), err.message) == (QuotaExceeded, TOO_MANY_IN_TRANSACTION)
        expect(broker, active=n_settle)
        settle(broker, "complete", *got)
    send(broker, Message(b"r", **k), Message(b"r", **k))
    got = recv(broker)
    result = broker.messaging.transact(
        NS, "q", [Message(b"m", **k)] * 98, [tx("complete", d) for d in got]
    )
    assert len(result["sequence_numbers"]) == 98
    assert broker.messaging.transact(NS, "q", [Message(b"m", **k)] * 100, [])["sequence_numbers"]
    b = reopen()
    expect(b, active=198)


@pytest.mark.parametrize(
    ("messages", "rule"),
    [
        ([Message(b"1", partition_key="k"), Message(b"2")], "needs a partition key"),
        ([Message(b"1", partition_key="a"), Message(b"2", partition_key="b")], "one partition key"),
        ([Message(b"1", session_id="s1"), Message(b"2", session_id="s2")], "several sessions"),
    ],
    ids=["missing-key", "two-keys", "two-sessions"],
)
def test_partitioned_transaction_rules(
    broker: Broker, reopen: Reopen, messages: list[Message], rule: str
) -> None:
    sessions = any(m.session_id for m in messages)
    make(broker, True, requires_session=sessions)
    err = error_of(lambda: broker.messaging.transact(NS, "q", messages, []))
    assert type(err) is InvalidOperation
    assert rule in err.message
    expect(broker)
    b = reopen()
    expect(b)
    # A plain queue has no such rule.
    if not sessions:
        make(b, False, "plain")
        assert len(b.messaging.transact(NS, "plain", messages, [])["sequence_numbers"]) == 2
        expect(b, "plain", active=2)


@pytest.mark.parametrize("key", ["partition_key", "session_id"])
def test_a_keyed_partitioned_transaction_is_stored_whole_on_one_partition(
    broker: Broker, reopen: Reopen, key: str
) -> None:
    make(broker, True, requires_session=key == "session_id")
    messages = [Message(b"%d" % i, **{key: "K"}) for i in range(5)]  # type: ignore[arg-type]
    seqs = broker.messaging.transact(NS, "q", messages, [])["sequence_numbers"]
    pid = partition_for_key("K", 16)
    assert {partition_of(s) for s in seqs} == {pid}
    locals_ = [s & ((1 << 48) - 1) for s in seqs]
    assert locals_ == list(range(locals_[0], locals_[0] + 5))
    b = reopen()
    got = b.messaging.peek(NS, "q", 250, pid << 48)
    assert [d.sequence_number for d in got] == seqs
    assert bodies(got) == [b"0", b"1", b"2", b"3", b"4"]


def test_a_message_id_keyed_transaction_stays_on_its_partition(broker: Broker) -> None:
    make(broker, True)
    seqs = broker.messaging.transact(NS, "q", [Message(b"1", message_id="m")] * 3, [])[
        "sequence_numbers"
    ]
    assert {partition_of(s) for s in seqs} == {partition_for_key("m", 16)}


def test_settlements_and_sends_in_one_transaction(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned)
    k = keyed(partitioned)
    send(broker, *[Message(b"%d" % i, **k) for i in range(4)])
    d0, d1, d2, d3 = recv(broker)
    result = broker.messaging.transact(
        NS,
        "q",
        [Message(b"n1", **k), Message(b"n2", **k)],
        [
            tx("complete", d0),
            tx("abandon", d1, properties={"a": 1}),
            tx("defer", d2),
            tx("dead-letter", d3, reason="R", description="D"),
        ],
    )
    assert codes(result["settlements"]) == ["ok"] * 4
    new = result["sequence_numbers"]
    for restart in (False, True):
        b = reopen() if restart else broker
        expect(b, active=4, deferred=1, dead=1)
        peeked = {body(d): d for d in peek_all(b)}
        assert set(peeked) == {b"1", b"2", b"n1", b"n2"}
        assert [peeked[b"n1"].sequence_number, peeked[b"n2"].sequence_number] == new
        assert props(peeked[b"1"]) == {"a": 1}
        (dead,) = peek_all(b, "q/$deadletterqueue")
        assert props(dead) == {"DeadLetterReason": "R", "DeadLetterErrorDescription": "D"}
    assert settle(b, "complete", d0) == ["MessageLockLost"]


def test_a_transaction_may_not_span_partitions(broker: Broker, reopen: Reopen) -> None:
    make(broker, True)
    a, other = two_keys_on_different_partitions()
    send(broker, Message(b"a", partition_key=a), Message(b"o", partition_key=other))
    got = {body(d): d for d in recv(broker)}
    for messages, settlements in (
        ([Message(b"n", partition_key=other)], [tx("complete", got[b"a"])]),
        ([], [tx("complete", got[b"a"]), tx("complete", got[b"o"])]),
    ):
        err = error_of(lambda m=messages, s=settlements: broker.messaging.transact(NS, "q", m, s))  # type: ignore[misc]
        assert type(err) is InvalidOperation and "one partition" in err.message
        expect(broker, active=2)
    # The same key as the settled message is fine.
    result = broker.messaging.transact(
        NS, "q", [Message(b"n", partition_key=a)], [tx("complete", got[b"a"])]
    )
    assert codes(result["settlements"]) == ["ok"]
    b = reopen()
    assert sorted(bodies(peek_all(b))) == [b"n", b"o"]


def test_basic_namespace_refuses_transactions_sessions_and_forwarding(
    broker: Broker, reopen: Reopen
) -> None:
    broker.management.namespace_create("basicns", "basic")
    broker.management.queue_create("basicns", "q", {})
    broker.management.queue_create("basicns", "target", {})
    broker.messaging.send("basicns", "q", [Message(b"x")])
    (d,) = broker.messaging.receive("basicns", "q", 5, "peek-lock")
    err = error_of(
        lambda: broker.messaging.transact("basicns", "q", [Message(b"y")], [tx("complete", d)])
    )
    assert type(err) is InvalidOperation and "Basic" in err.message
    for option, value in (
        ("requires_session", True),
        ("forward_to", "target"),
        ("forward_dead_lettered_messages_to", "target"),
    ):
        with pytest.raises(InvalidOperation):
            broker.management.queue_create("basicns", "other", {option: value})
        with pytest.raises(InvalidOperation):
            broker.management.queue_update("basicns", "q", {option: value})
    b = reopen()
    assert not [q for q in b.management.queue_list("basicns") if q["name"] == "other"]
    assert b.management.queue_get("basicns", "q")["forward_to"] is None
    assert b.management.queue_get("basicns", "q")["active_message_count"] == 1


# ===================================================================== auto-forwarding


def chain(b: Broker, names: list[str], partitioned: bool | list[bool], **options: Any) -> None:
    """Create ``names[0] → names[1] → ...`` (the last one forwards nowhere)."""
    flags = partitioned if isinstance(partitioned, list) else [partitioned] * len(names)
    for i in reversed(range(len(names))):
        fwd = {"forward_to": names[i + 1]} if i + 1 < len(names) else {}
        make(b, flags[i], names[i], **fwd, **options)


def test_a_forwarding_chain_delivers_at_the_end(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    # The middle queue is the other kind: forwarding works from, to and between both.
    chain(broker, ["a", "b", "c"], [partitioned, not partitioned, partitioned])
    sent = [
        Message(b"keyed", partition_key="pk", application_properties={"p": 1}),
        Message(b"session-less", message_id="m1"),
    ]
    seqs = send(broker, *sent, path="a")
    for restart in (False, True):
        b = reopen() if restart else broker
        expect(b, "a")
        expect(b, "b")
        expect(b, "c", active=2)
        got = {body(d): d for d in peek_all(b, "c")}
        assert [message(got[m.body]).enqueued_sequence_number for m in sent] == seqs
        assert props(got[b"keyed"]) == {"p": 1}
        assert message(got[b"session-less"]).message_id == "m1"
        if partitioned:
            # daemon/README.md §0.1.9: the partition key carries over; a direct send would land here
            # too.
            assert got[b"keyed"].partition_id == partition_for_key("pk", 16)
    (direct,) = send(b, Message(b"direct", partition_key="pk"), path="c")
    assert partition_of(direct) == partition_of(got[b"keyed"].sequence_number)
    (mine,) = [d for d in peek_all(b, "c") if d.sequence_number == direct]
    assert message(mine).enqueued_sequence_number is None


def test_a_forwarded_session_message_keeps_its_session_and_partition(
    broker: Broker, partitioned: bool
) -> None:
    smake(broker, partitioned, "dest")
    make(broker, partitioned, "src", forward_to="dest")
    send(broker, Message(b"1", session_id="S"), Message(b"2", session_id="S"), path="src")
    got = srecv(broker, accept(broker, "S", "dest"), path="dest")
    assert bodies(got) == [b"1", b"2"]
    if partitioned:
        assert {d.partition_id for d in got} == {partition_for_key("S", 16)}


def test_receiving_from_a_forwarding_source_is_refused(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    chain(broker, ["a", "b"], partitioned)
    send(broker, Message(b"x"), path="a")
    b = broker
    for restart in (False, True):
        if restart:
            b = reopen()
        for mode in ("peek-lock", "receive-and-delete"):
            err = error_of(lambda m=mode, b=b: recv(b, "a", mode=m))  # type: ignore[misc]
            assert type(err) is InvalidOperation and "'b'" in err.message
        # Its dead-letter queues still work, and anyone can send to the destination.
        assert recv(b, "a/$deadletterqueue") == []
        assert recv(b, f"a/{TDLQ}") == []
        send(b, Message(b"direct"), path="b")
    assert sorted(bodies(recv(b, "b"))) == [b"direct", b"direct", b"x"]


def test_the_fifth_hop_goes_to_the_transfer_dead_letter_queue(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    names = ["q0", "q1", "q2", "q3", "q4", "q5"]
    chain(broker, names, partitioned)
    (s1,) = send(broker, Message(b"four hops"), path="q1")  # q1 → q5: 4 hops, delivered
    (s0,) = send(broker, Message(b"five hops", application_properties={"k": "v"}), path="q0")
    for restart in (False, True):
        b = reopen() if restart else broker
        for name in names[:4]:
            expect(b, name)
        expect(b, "q4", transfer_dead=1)
        expect(b, "q5", active=1)
        (delivered,) = peek_all(b, "q5")
        assert (body(delivered), message(delivered).enqueued_sequence_number) == (b"four hops", s1)
        (dead,) = peek_all(b, f"q4/{TDLQ}")
        assert body(dead) == b"five hops"
        assert message(dead).enqueued_sequence_number == s0
        assert props(dead)["k"] == "v"
        assert props(dead)["DeadLetterReason"] == "MaxTransferHopCountExceeded"
        assert props(dead)["DeadLetterErrorDescription"]
        assert peek_all(b, "q4/$deadletterqueue") == []
    # The transfer DLQ is receivable like any DLQ (case does not matter).
    (got,) = recv(b, "Q4/$transfer/$deadletterqueue")
    assert settle(b, "complete", got, path=f"q4/{TDLQ}") == ["ok"]
    expect(b, "q4")


def test_a_forwarding_cycle_ends_in_a_transfer_dead_letter_queue(
    broker: Broker, partitioned: bool
) -> None:
    make(broker, partitioned, "b")
    make(broker, partitioned, "a", forward_to="b")
    broker.management.queue_update(NS, "b", {"forward_to": "a"})
    send(broker, Message(b"loop"), path="a")
    # a→b, b→a, a→b, b→a: four hops; the fifth (a→b) fails at a.
    expect(broker, "a", transfer_dead=1)
    expect(broker, "b")
    (dead,) = peek_all(broker, f"a/{TDLQ}")
    assert props(dead)["DeadLetterReason"] == "MaxTransferHopCountExceeded"


@pytest.mark.parametrize(
    ("problem", "reason"),
    [
        ("SendDisabled", "MessagingEntityDisabled"),
        ("Disabled", "MessagingEntityDisabled"),
        ("deleted", "MessagingEntityNotFound"),
        ("full", "QuotaExceeded"),
        ("needs-session", "InvalidOperation"),
    ],
)
def test_an_unusable_destination_sends_to_the_transfer_dead_letter_queue(
    broker: Broker,
    reopen: Reopen,
    monkeypatch: pytest.MonkeyPatch,
    partitioned: bool,
    problem: str,
    reason: str,
) -> None:
    make(broker, partitioned, "b", requires_session=problem == "needs-session")
    make(broker, partitioned, "a", forward_to="b")
    if problem in ("SendDisabled", "Disabled"):
        broker.management.queue_update(NS, "b", {"status": problem})
    elif problem == "deleted":
        broker.management.queue_delete(NS, "b")
    elif problem == "full":
        monkeypatch.setattr("sbctld.queue.MB", 1)  # max_size 1024 "MB" is now 1024 bytes
        n = 900  # the record grows with its format version: find the body that fills it
        while len(encode_message(Message(b"f" * n, partition_key="pk"))) < 1020:
            n += 1
        send(broker, Message(b"f" * n, partition_key="pk"), path="b")  # 4 bytes left
    (seq,) = send(broker, Message(b"x", partition_key="pk"), path="a")
    for restart in (False, True):
        b = reopen() if restart else broker
        expect(b, "a", transfer_dead=1)
        (dead,) = peek_all(b, f"a/{TDLQ}")
        assert (dead.sequence_number, body(dead)) == (seq, b"x")
        assert props(dead)["DeadLetterReason"] == reason
        assert props(dead)["DeadLetterErrorDescription"]
        if problem != "deleted":
            expect(b, "b", active=1 if problem == "full" else 0)
    # A ReceiveDisabled destination still takes forwarded messages (sends are allowed).
    make(b, partitioned, "c")
    b.management.queue_update(NS, "c", {"status": "ReceiveDisabled"})
    make(b, partitioned, "d", forward_to="c")
    send(b, Message(b"ok"), path="d")
    expect(b, "c", active=1)
    expect(b, "d")


def test_setting_forward_to_forwards_what_the_queue_holds(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned, "b")
    make(broker, partitioned, "a", lock_duration=LOCK)
    send(broker, Message(b"1"), Message(b"2"), Message(b"locked"), path="a")
    send(broker, Message(b"sched", scheduled_enqueue_time_ms=clock.now + 2 * LOCK), path="a")
    got = recv(broker, "a")
    assert sorted(bodies(got)) == [b"1", b"2", b"locked"]
    assert settle(broker, "abandon", *[d for d in got if body(d) != b"locked"], path="a") == [
        "ok",
        "ok",
    ]
    broker.management.queue_update(NS, "a", {"forward_to": "b"})
    assert sorted(bodies(peek_all(broker, "b"))) == [b"1", b"2"]
    expect(broker, "a", active=1, scheduled=1)
    clock.advance(LOCK)
    broker.housekeeping.tick()
    assert sorted(bodies(peek_all(broker, "b"))) == [b"1", b"2", b"locked"]
    b = reopen()
    clock.advance(LOCK)
    b.housekeeping.tick()
    expect(b, "a")
    assert sorted(bodies(peek_all(b, "b"))) == [b"1", b"2", b"locked", b"sched"]


@pytest.mark.parametrize("how", ["settle", "max-delivery", "lock-expiry", "ttl"])
def test_forwarding_dead_lettered_messages(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool, how: str
) -> None:
    make(broker, partitioned, "t")
    make(
        broker,
        partitioned,
        "q",
        forward_dead_lettered_messages_to="t",
        lock_duration=LOCK,
        max_delivery_count=1 if how in ("max-delivery", "lock-expiry") else 10,
        dead_lettering_on_message_expiration=True,
    )
    ttl = 5_000 if how == "ttl" else None
    (seq,) = send(broker, Message(b"x", application_properties={"a": 1}, time_to_live_ms=ttl))
    want_reason = {
        "settle": "R",
        "max-delivery": "MaxDeliveryCountExceeded",
        "lock-expiry": "MaxDeliveryCountExceeded",
        "ttl": "TTLExpiredException",
    }[how]
    if how == "ttl":
        clock.advance(ttl or 0)
        assert recv(broker) == []  # expiry is lazy: the receive finds it
    else:
        (d,) = recv(broker)
        if how == "settle":
            settle(broker, "dead-letter", d, reason="R", description="D", properties={"c": 2})
        elif how == "max-delivery":
            settle(broker, "abandon", d)
        else:
            clock.advance(LOCK)
            broker.housekeeping.tick()
    for restart in (False, True):
        b = reopen() if restart else broker
        expect(b)
        expect(b, "t", active=1)
        (got,) = peek_all(b, "t")
        m = message(got)
        assert (m.body, m.dead_letter_source, m.enqueued_sequence_number) == (b"x", "q", seq)
        assert props(got)["a"] == 1
        assert props(got)["DeadLetterReason"] == want_reason
        if how == "settle":
            assert props(got)["c"] == 2
            assert props(got)["DeadLetterErrorDescription"] == "D"
        # daemon/README.md §4.7: nobody receives from a DLQ that forwards.
        err = error_of(lambda b=b: recv(b, "q/$deadletterqueue"))  # type: ignore[misc]
        assert type(err) is InvalidOperation
    (d,) = recv(b, "t")
    assert ReceivedMessage.from_wire(d).to_dict()["dead_letter_source"] == "q"


def test_forwarding_destinations_must_exist_and_not_be_the_queue(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned, "other")
    for option in ("forward_to", "forward_dead_lettered_messages_to"):
        with pytest.raises(MessagingEntityNotFound):
            make(broker, partitioned, "a", **{option: "missing"})
        for itself in ("a", "A"):
            err = error_of(lambda o=option, t=itself: make(broker, partitioned, "a", **{o: t}))  # type: ignore[misc]
            assert type(err) is InvalidOperation
        assert not exists(broker, "a")
    make(broker, partitioned, "a", forward_to="other")
    for option in ("forward_to", "forward_dead_lettered_messages_to"):
        with pytest.raises(MessagingEntityNotFound):
            broker.management.queue_update(NS, "a", {option: "missing"})
        with pytest.raises(InvalidOperation):
            broker.management.queue_update(NS, "a", {option: "A"})
    b = reopen()
    desc = b.management.queue_get(NS, "a")
    assert (desc["forward_to"], desc["forward_dead_lettered_messages_to"]) == ("other", None)


def test_resubmitting_from_the_transfer_dead_letter_queue(
    broker: Broker, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned, "b")
    make(broker, partitioned, "a", forward_to="b")
    broker.management.queue_update(NS, "b", {"status": "SendDisabled"})
    send(broker, Message(b"1", application_properties={"k": 1}), Message(b"2"), path="a")
    expect(broker, "a", transfer_dead=2)
    broker.management.queue_update(NS, "b", {"status": "Active"})
    b = reopen()
    expect(b, "a", transfer_dead=2)
    result = b.messaging.dlq_resubmit(NS, f"a/{TDLQ}", 1, "b")
    assert (result["resubmitted"], result["to"]) == (1, "b")
    expect(b, "a", transfer_dead=1)
    result = b.messaging.dlq_resubmit(NS, f"A/{TDLQ.upper()}", None, "b")
    assert result["resubmitted"] == 1
    b = reopen()
    expect(b, "a")
    got = {body(d): d for d in peek_all(b, "b")}
    assert set(got) == {b"1", b"2"}
    assert props(got[b"1"]) == {"k": 1}  # the dead-letter properties are gone
    assert props(got[b"2"]) == {}


@pytest.mark.parametrize("hops", [1, 5])
def test_resubmitting_a_forwarded_message_from_the_transfer_dlq(broker: Broker, hops: int) -> None:
    """hops=1: a→b→c with c SendDisabled lands in b's transfer DLQ; hops=5: the hop limit."""
    names = ["q0", "q1", "q2", "q3", "q4", "q5"] if hops == 5 else ["a", "b", "c"]
    chain(broker, names, False)
    if hops == 1:
        broker.management.queue_update(NS, "c", {"status": "SendDisabled"})
    send(broker, Message(b"x"), path=names[0])
    source, dest = names[-2], names[-1]
    expect(broker, source, transfer_dead=1)
    broker.management.queue_update(NS, dest, {"status": "Active"})
    assert broker.messaging.dlq_resubmit(NS, f"{source}/{TDLQ}", None, dest)["resubmitted"] == 1
    expect(broker, dest, active=1)
    expect(broker, source)


def test_resubmitting_into_a_forwarding_source_forwards_it(
    broker: Broker, clock: FakeClock
) -> None:
    make(broker, False, "b")
    make(broker, False, "a", forward_to="b")
    broker.management.queue_update(NS, "b", {"status": "SendDisabled"})
    send(broker, Message(b"x"), path="a")
    broker.management.queue_update(NS, "b", {"status": "Active"})
    assert broker.messaging.dlq_resubmit(NS, f"a/{TDLQ}", None, None)["resubmitted"] == 1
    clock.advance(LOCK)
    broker.housekeeping.tick()
    expect(broker, "b", active=1)
    expect(broker, "a")


# ===================================================================== auto-delete-on-idle


def test_auto_delete_on_idle_is_at_least_five_minutes(broker: Broker, reopen: Reopen) -> None:
    with pytest.raises(BadRequest):
        broker.management.queue_create(NS, "q", {"auto_delete_on_idle": IDLE - 1})
    assert not exists(broker, "q")
    assert broker.management.queue_create(NS, "q", {"auto_delete_on_idle": IDLE})[
        "auto_delete_on_idle"
    ] == ("PT5M")
    with pytest.raises(BadRequest):
        broker.management.queue_update(NS, "q", {"auto_delete_on_idle": 1_000})
    b = reopen()
    assert b.management.queue_get(NS, "q")["auto_delete_on_idle"] == "PT5M"


def test_an_idle_queue_is_deleted(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned, auto_delete_on_idle=IDLE)
    make(broker, partitioned, "forever")
    send(broker, Message(b"kept?"))
    clock.advance(IDLE - 2_000)
    broker.housekeeping.tick()
    assert exists(broker, "q")
    clock.advance(2_000)
    broker.housekeeping.tick()
    assert not exists(broker, "q")  # messages and all
    assert exists(broker, "forever")
    b = reopen()
    assert not exists(b, "q") and exists(b, "forever")
    assert [q["name"] for q in b.management.queue_list(NS)] == ["forever"]


def test_the_idle_clock_restarts_with_the_broker(
    broker: Broker, clock: FakeClock, reopen: Reopen
) -> None:
    make(broker, False, auto_delete_on_idle=IDLE)
    clock.advance(IDLE - MINUTE)
    b = reopen()
    clock.advance(IDLE - MINUTE)
    b.housekeeping.tick()
    assert exists(b, "q")
    clock.advance(MINUTE + 1_000)
    b.housekeeping.tick()
    assert not exists(b, "q")


@pytest.mark.parametrize(
    "activity", ["send", "receive", "peek", "settle", "update", "session-receive"]
)
def test_activity_keeps_a_queue_alive(
    broker: Broker, clock: FakeClock, partitioned: bool, activity: str
) -> None:
    if activity == "session-receive":
        smake(broker, partitioned, "q", auto_delete_on_idle=IDLE)
        send(broker, Message(b"x", session_id="S"))
    else:
        make(broker, partitioned, auto_delete_on_idle=IDLE, lock_duration=IDLE)
        send(broker, Message(b"x"))
    held = recv(broker) if activity == "settle" else []
    clock.advance(IDLE - MINUTE)
    broker.housekeeping.tick()
    if activity == "send":
        send(broker, Message(b"y", session_id="S"))
    elif activity == "receive":
        recv(broker)
    elif activity == "peek":
        broker.messaging.peek(NS, "q", 1, None)
    elif activity == "settle":
        assert settle(broker, "renew-lock", *held) == ["ok"]
    elif activity == "update":
        broker.management.queue_update(NS, "q", {"max_delivery_count": 3})
    else:
        srecv(broker, accept(broker, "S", "q"), path="q")
    clock.advance(IDLE - MINUTE)
    broker.housekeeping.tick()
    assert exists(broker, "q")
    clock.advance(MINUTE + 1_000)
    broker.housekeeping.tick()
    assert not exists(broker, "q")


def test_scheduled_messages_and_forwarding_keep_a_queue_alive(
    broker: Broker, clock: FakeClock, reopen: Reopen, partitioned: bool
) -> None:
    make(broker, partitioned, "target")
    make(broker, partitioned, "sched", auto_delete_on_idle=IDLE)
    make(broker, partitioned, "fwd", auto_delete_on_idle=IDLE, forward_to="target")
    make(broker, partitioned, "plain", auto_delete_on_idle=IDLE)
    at = clock.now + 60 * MINUTE
    send(broker, Message(b"s", scheduled_enqueue_time_ms=at), path="sched")
    clock.advance(30 * MINUTE)
    broker.housekeeping.tick()
    assert not exists(broker, "plain")
    b = reopen()
    clock.advance(20 * MINUTE)  # idle 20 minutes since the restart
    b.housekeeping.tick()
    assert exists(b, "sched") and exists(b, "fwd") and exists(b, "target")
    b = reopen()
    assert exists(b, "sched") and exists(b, "fwd")


def test_a_queue_whose_scheduled_messages_were_cancelled_can_be_idle(
    broker: Broker, clock: FakeClock
) -> None:
    make(broker, False, auto_delete_on_idle=IDLE)
    (s,) = send(broker, Message(b"s", scheduled_enqueue_time_ms=clock.now + 60 * MINUTE))
    assert broker.messaging.cancel_scheduled(NS, "q", [s]) == 1
    clock.advance(IDLE + 1_000)
    broker.housekeeping.tick()
    assert not exists(broker, "q")
