"""What the Python client accepts, turned into wire values (sbctl.convert), and received
messages read like the SDK's (sbctl.core.messages.ReceivedMessage). No daemon here; the
integration tests in test_client_forms.py send all of it through a real one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from sbctl import Message, ReceivedMessage, ServiceBusMessage, convert
from sbctl.core.errors import BadRequest

T0 = datetime(2030, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
T0_MS = 1_893_553_445_678


def test_bodies() -> None:
    assert convert.body_bytes("héllo") == "héllo".encode()
    assert convert.body_bytes(b"\x00") == b"\x00"
    assert convert.body_bytes(bytearray(b"ab")) == b"ab"
    assert convert.body_bytes(memoryview(b"cd")) == b"cd"
    for bad in (5, None, ["a"], 1.5):
        with pytest.raises(BadRequest, match="body must be bytes or str"):
            convert.body_bytes(bad)


def test_messages_from_every_form() -> None:
    assert convert.messages("a") == [Message(body=b"a")]
    assert convert.messages(b"b") == [Message(body=b"b")]
    assert convert.messages(Message(body=b"c", message_id="m")) == [
        Message(body=b"c", message_id="m")
    ]
    assert convert.messages(["x", b"y", Message(body="z")]) == [  # type: ignore[arg-type]
        Message(body=b"x"),
        Message(body=b"y"),
        Message(body=b"z"),
    ]
    assert convert.messages([]) == []
    same = Message(body=b"unchanged", time_to_live_ms=5)
    assert convert.message(same) is same  # nothing to convert: no copy
    odd = Message(
        body="t",  # type: ignore[arg-type]
        time_to_live_ms=timedelta(seconds=2),  # type: ignore[arg-type]
        scheduled_enqueue_time_ms=T0,  # type: ignore[arg-type]
    )
    assert convert.message(odd) == Message(
        body=b"t", time_to_live_ms=2000, scheduled_enqueue_time_ms=T0_MS
    )


def test_durations_waits_and_instants() -> None:
    assert convert.duration_ms(timedelta(minutes=1, milliseconds=5)) == 60_005
    assert convert.duration_ms(30_000) == 30_000  # ints are milliseconds, as before
    assert convert.wait_seconds(timedelta(milliseconds=250)) == 0.25
    assert convert.wait_seconds(2) == 2.0 and convert.wait_seconds(0.5) == 0.5
    assert convert.instant_ms(T0) == T0_MS
    assert convert.instant_ms(T0.replace(tzinfo=None)) == T0_MS  # naive means UTC
    assert convert.instant_ms(T0.astimezone(timezone(timedelta(hours=5)))) == T0_MS
    assert convert.instant_ms(T0_MS) == T0_MS
    for bad, call in (
        (True, convert.duration_ms),
        ("PT1M", convert.duration_ms),
        (1.5, convert.duration_ms),
        (False, convert.wait_seconds),
        ("5s", convert.wait_seconds),
        (True, convert.instant_ms),
        ("2030-01-01", convert.instant_ms),
    ):
        with pytest.raises(BadRequest):
            call(bad)


def test_options_and_state() -> None:
    assert convert.options({"lock_duration": timedelta(seconds=30), "max_delivery_count": 3}) == {
        "lock_duration": 30_000,
        "max_delivery_count": 3,
    }
    assert convert.state_bytes("s") == b"s" and convert.state_bytes(None) is None


def received(**changes: object) -> ReceivedMessage:
    fields: dict[str, object] = {
        "sequence_number": 7,
        "enqueued_time_utc": T0_MS,
        "delivery_count": 1,
        "lock_token": "00000000-0000-0007-0000-000000000001",
        "locked_until_utc": T0_MS + 60_000,
        "expires_at_utc": T0_MS + 3_600_000,
        "partition_id": None,
        "state": "active",
        "message": Message(body=b"hi", message_id="m", time_to_live_ms=3_600_000),
    }
    fields.update(changes)
    return ReceivedMessage(**fields)  # type: ignore[arg-type]


def test_lock_tokens_from_messages_and_tokens() -> None:
    m = received()
    token = str(m.lock_token)
    assert convert.lock_tokens(m) == [token]
    assert convert.lock_tokens(token) == [token]
    assert convert.lock_tokens([m, "other"]) == [token, "other"]
    with pytest.raises(BadRequest, match="has no lock token"):
        convert.lock_tokens([received(lock_token=None)])
    with pytest.raises(BadRequest, match="has no lock token"):
        convert.lock_tokens([5])


def test_received_message_reads_like_the_sdk() -> None:
    m = received()
    assert m.enqueued_time_utc == T0 and m.enqueued_time_ms == T0_MS
    assert m.locked_until_utc == T0 + timedelta(minutes=1)
    assert m.expires_at_utc == T0 + timedelta(hours=1)
    assert m.time_to_live == timedelta(hours=1)
    assert (m.message_id, m.session_id, m.body, str(m)) == ("m", None, b"hi", "hi")
    # The keyword names the constructor had keep working, with ints or datetimes.
    assert received(enqueued_time_utc=T0) == m
    assert received(locked_until_utc=None).locked_until_utc is None
    dead = received(
        application_properties={"DeadLetterReason": "R", "DeadLetterErrorDescription": 5}
    )
    assert (dead.dead_letter_reason, dead.dead_letter_error_description) == ("R", "5")
    assert str(received(message=Message(body=b"\xff"))) == "\ufffd"
    assert m.to_dict()["enqueued_time_utc"] == "2030-01-02T03:04:05.678Z"


def test_service_bus_message_takes_the_sdk_keywords() -> None:
    m = ServiceBusMessage(
        "body",
        session_id="s",
        time_to_live=timedelta(seconds=90),
        scheduled_enqueue_time_utc=T0,
        application_properties={"k": 1},
        subject="sub",
    )
    assert m == Message(
        body=b"body",
        session_id="s",
        time_to_live_ms=90_000,
        scheduled_enqueue_time_ms=T0_MS,
        application_properties={"k": 1},
        subject="sub",
    )
    assert ServiceBusMessage() == Message()
