"""The Python client takes what Python users write and reads like the azure-servicebus SDK:
``str`` bodies, ``timedelta`` durations, ``datetime`` times, received messages passed to
settle, and received messages exposing ``session_id``, ``dead_letter_reason``,
``enqueued_time_utc`` and the rest directly. The current forms (bytes, milliseconds,
epoch milliseconds, lock tokens, ``msg.message.…``) keep working.

Every test runs with :class:`Client` and with :class:`AsyncClient` (``make_client``), on
one daemon shared by the module (each test on its own queues).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from conftest import Daemon, MakeClient
from sbctl import Message, ReceivedMessage, ServiceBusMessage
from sbctl.core.errors import BadRequest, MessagingEntityNotFound


@pytest.fixture
def sb(module_daemon: Daemon, make_client: MakeClient) -> Any:
    return make_client(module_daemon.socket)


def fresh(prefix: str = "q") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def now() -> datetime:
    return datetime.now(UTC)


def test_str_bodies_and_single_messages(sb: Any) -> None:
    q = fresh()
    sb.queue_create(q)
    seqs = sb.send(q, "héllo")  # one str body: UTF-8
    seqs += sb.send(q, b"raw bytes")  # one bytes body
    seqs += sb.send(q, Message(body="in a Message"))  # a Message with a str body
    seqs += sb.send(q, ["a", b"b", Message(body=b"c")])  # a mixed list
    assert len(seqs) == 6
    got = sb.receive(q, count=10, mode="receive-and-delete")
    assert [m.body for m in got] == [
        "héllo".encode(),
        b"raw bytes",
        b"in a Message",
        b"a",
        b"b",
        b"c",
    ]
    assert str(got[0]) == "héllo"  # str(msg) is the body, as in the SDK
    with pytest.raises(BadRequest, match="body must be bytes or str, not int"):
        sb.send(q, [Message(body=5)])  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="not int"):
        sb.send(q, [7])


def test_received_messages_expose_the_sdk_fields(sb: Any) -> None:
    q = fresh()
    sb.queue_create(q, requires_session=True)
    before = now()
    sent = ServiceBusMessage(
        "payload",
        message_id="m-1",
        session_id="s-1",
        correlation_id="c-1",
        subject="greeting",
        content_type="text/plain",
        to="you",
        reply_to="me",
        reply_to_session_id="r-1",
        time_to_live=timedelta(minutes=5),
        application_properties={"k": "v", "n": 3},
    )
    (seq,) = sb.send(q, [sent])
    session = sb.accept_session(q, "s-1")
    (m,) = sb.receive(q, session_lock_token=session["session_lock_token"])
    assert isinstance(m, ReceivedMessage)
    assert (m.message_id, m.session_id, m.correlation_id) == ("m-1", "s-1", "c-1")
    assert (m.subject, m.content_type, m.to) == ("greeting", "text/plain", "you")
    assert (m.reply_to, m.reply_to_session_id, m.partition_key) == ("me", "r-1", None)
    assert m.application_properties == {"k": "v", "n": 3}
    assert (m.sequence_number, m.delivery_count, m.body) == (seq, 1, b"payload")
    assert m.time_to_live == timedelta(minutes=5)
    assert m.scheduled_enqueue_time_utc is None
    assert m.dead_letter_reason is None and m.dead_letter_error_description is None
    # Times are aware UTC datetimes, as the SDK gives them; milliseconds stay available.
    enqueued = m.enqueued_time_utc
    assert enqueued.tzinfo is not None and enqueued.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= enqueued <= now() + timedelta(seconds=1)
    assert m.enqueued_time_ms == round(enqueued.timestamp() * 1000)
    assert m.expires_at_utc == enqueued + timedelta(minutes=5)
    assert m.locked_until_utc is not None and m.locked_until_utc > enqueued
    assert m.locked_until_ms == round(m.locked_until_utc.timestamp() * 1000)
    # The current forms still work.
    assert m.message.session_id == "s-1" and m.message.time_to_live_ms == 300_000
    assert m.to_dict()["enqueued_time_utc"].endswith("Z")
    assert sb.complete(q, m)[0].get("ok") is True  # a received message settles directly


def test_dead_letter_fields(sb: Any) -> None:
    q = fresh()
    sb.queue_create(q)
    sb.send(q, ["one", "two"])
    got = sb.receive(q, count=2)
    results = sb.dead_letter(q, got, reason="Bad", description="could not parse")
    assert [r.get("ok") for r in results] == [True, True]
    dead = sb.receive(f"{q}/$deadletterqueue", count=5, mode="receive-and-delete")
    assert [str(m) for m in dead] == ["one", "two"]
    for m in dead:
        assert m.dead_letter_reason == "Bad"
        assert m.dead_letter_error_description == "could not parse"
        assert m.application_properties["DeadLetterReason"] == "Bad"  # as before


def test_timedelta_durations(sb: Any) -> None:
    q = fresh()
    info = sb.queue_create(
        q,
        lock_duration=timedelta(seconds=45),
        default_message_time_to_live=timedelta(hours=2),
        requires_duplicate_detection=True,
        duplicate_detection_history_time_window=timedelta(minutes=3),
    )
    assert info["lock_duration"] == "PT45S"
    assert info["default_message_time_to_live"] == "PT2H"
    assert info["duplicate_detection_history_time_window"] == "PT3M"
    assert sb.queue_update(q, lock_duration=timedelta(minutes=1))["lock_duration"] == "PT1M"
    assert sb.queue_update(q, lock_duration=20_000)["lock_duration"] == "PT20S"  # still ms
    t0 = time.monotonic()
    assert sb.receive(q, max_wait=timedelta(milliseconds=300)) == []
    assert time.monotonic() - t0 >= 0.25
    topic = fresh("t")
    sb.topic_create(topic, default_message_time_to_live=timedelta(days=1))
    sub = sb.subscription_create(topic, "s", lock_duration=timedelta(seconds=30))
    assert sub["lock_duration"] == "PT30S"
    assert sb.topic_get(topic)["default_message_time_to_live"] == "P1D"
    with pytest.raises(BadRequest, match="max_wait must be seconds or a timedelta"):
        sb.receive(q, max_wait="soon")


def test_datetime_schedules(sb: Any) -> None:
    q = fresh()
    sb.queue_create(q)
    at = (now() + timedelta(hours=1)).replace(microsecond=0)
    (s1,) = sb.schedule(q, "aware", at)
    naive = at.replace(tzinfo=None)  # naive: UTC, like the SDK's *_utc parameters
    (s2,) = sb.schedule(q, [Message(body=b"naive")], naive)
    (s3,) = sb.schedule(q, [Message(body=b"millis")], int(at.timestamp() * 1000))  # as before
    (s4,) = sb.send(q, ServiceBusMessage("built", scheduled_enqueue_time_utc=at))
    (s5,) = sb.send(q, Message(body=b"in the field", scheduled_enqueue_time_ms=at))  # type: ignore[arg-type]
    peeked = sb.peek(q, count=10, from_sequence=0)
    assert [m.sequence_number for m in peeked] == [s1, s2, s3, s4, s5]
    for m in peeked:
        assert m.state == "scheduled"
        assert m.scheduled_enqueue_time_utc == at, str(m)
    assert sb.cancel_scheduled(q, [s1, s2, s3, s4, s5])
    assert sb.queue_get(q)["scheduled_message_count"] == 0
    with pytest.raises(BadRequest, match="at_ms must be epoch milliseconds"):
        sb.schedule(q, "x", "tomorrow")


def test_session_state_takes_str(sb: Any) -> None:
    q = fresh()
    sb.queue_create(q, requires_session=True)
    sb.send(q, Message(body=b"x", session_id="s"))
    sb.set_session_state(q, "s", "stage 2")
    assert sb.get_session_state(q, "s") == b"stage 2"
    sb.set_session_state(q, "s", b"\x00bytes")
    assert sb.get_session_state(q, "s") == b"\x00bytes"
    sb.set_session_state(q, "s", None)
    assert sb.get_session_state(q, "s") is None


def test_settle_takes_messages_tokens_and_lists(sb: Any) -> None:
    q = fresh()
    sb.queue_create(q)
    sb.send(q, ["a", "b", "c", "d"])
    a, b, c, d = sb.receive(q, count=4)
    assert sb.complete(q, a)[0]["ok"] is True  # one message
    assert sb.complete(q, str(b.lock_token))[0]["ok"] is True  # one token
    assert [r["ok"] for r in sb.abandon(q, [c, str(d.lock_token)])] == [True, True]
    peeked = sb.receive(q, count=4, mode="receive-and-delete")
    assert sorted(str(m) for m in peeked) == ["c", "d"]
    with pytest.raises(BadRequest, match="has no lock token"):
        sb.complete(q, [peeked[0]])  # received and deleted: nothing to settle


def test_peek_twice_continues_after_the_last_peeked_message(sb: Any) -> None:
    q = fresh()
    sb.queue_create(q)
    seqs = sb.send(q, [f"m{i}" for i in range(5)])
    first = sb.peek(q, count=2)
    second = sb.peek(q, count=2)
    third = sb.peek(q, count=2)
    assert [m.sequence_number for m in first] == seqs[:2]
    assert [m.sequence_number for m in second] == seqs[2:4]
    assert [m.sequence_number for m in third] == seqs[4:]
    assert sb.peek(q, count=2) == []  # past the end
    # An explicit start resets the position; peeking another entity does not disturb it.
    other = fresh()
    sb.queue_create(other)
    sb.send(other, "elsewhere")
    assert [m.sequence_number for m in sb.peek(q, from_sequence=seqs[1])] == [seqs[1]]
    assert [str(m) for m in sb.peek(other)] == ["elsewhere"]
    assert [m.sequence_number for m in sb.peek(q, count=10)] == seqs[2:]
    # Peeking never locks or counts a delivery.
    assert all(m.delivery_count == 0 and m.lock_token is None for m in first + second)


def test_transactions_take_the_new_forms(sb: Any) -> None:
    q = fresh()
    sb.queue_create(q)
    sb.send(q, "old")
    (old,) = sb.receive(q)
    with sb.transaction() as tx:
        sb.send(q, "new")
        sb.complete(q, old)
    assert tx.result is not None
    got = sb.receive(q, count=5, mode="receive-and-delete")
    assert [str(m) for m in got] == ["new"]


def test_errors_name_the_entity(sb: Any) -> None:
    with pytest.raises(MessagingEntityNotFound):
        sb.send(fresh("missing"), "x")
