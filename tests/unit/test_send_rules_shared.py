"""The send rules have one copy (sbctl.core.send_rules), and the daemon's sends and the Spark
loader's staging apply it alike: for any message, a queue's send and the staging of the same
fields as a source row accept it together, or refuse it with the same reason (the daemon's
error message is the loader's reject reason).

The daemon side is a real broker on a temporary data dir (fake clock); the loader side is
:func:`sbctl.spark.stage.build` and :func:`~sbctl.spark.stage.check_size`, which Spark's
Python workers run, without Spark.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core import send_rules
from sbctl.core.durations import MAX_TIMESPAN_MS
from sbctl.core.errors import BadRequest, InvalidOperation, MessageSizeExceeded, SbctlError
from sbctl.core.limits import MAX_TIME_MS, SESSION_REQUIRED, STANDARD_MESSAGE_BYTES
from sbctl.core.message_form import encode as encode_message
from sbctl.core.records import Message
from sbctl.spark.stage import Rejected, Row, Rules, build, check_size
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.storage.sync import Syncer

NS = DEFAULT_NAMESPACE
NAMES = itertools.count()


def mostly(good: list[Any], bad: list[Any]) -> st.SearchStrategy[Any]:
    """A field's values: usually good ones (so later rules get their turn), sometimes bad."""
    return st.sampled_from(good * 4 + bad)


# Values around every limit: ids of 0, 1, 128 and 129 characters; TTLs and times at and past
# their bounds; bodies and properties around the size limits.
FIELDS = st.fixed_dictionaries(
    {
        "body_size": st.sampled_from([0, 5, 200_000, 262_000, 262_144, 300_000]),
        "message_id": mostly([None, "m", "m" * 128], ["", "m" * 129]),
        "session_id": mostly([None, "s", "t", "s" * 128], ["", "s" * 129]),
        "partition_key": mostly([None, "s", "p"], ["", "p" * 129]),
        "reply_to_session_id": mostly([None, "r"], ["r" * 129]),
        "subject": mostly([None, "x"], ["x" * 40_000]),
        "time_to_live_ms": mostly([None, 1, 60_000, MAX_TIMESPAN_MS], [-1, 0, MAX_TIMESPAN_MS + 1]),
        "scheduled_enqueue_time_ms": mostly(
            [None, 0, 1_000, 10**12, MAX_TIME_MS], [-1, MAX_TIME_MS + 1]
        ),
        "properties": st.lists(st.sampled_from([1, 1, 20_000, 33_000]), max_size=4),
    }
)


def message_of(f: dict[str, Any]) -> Message:
    props = {f"p{i}": "v" * n for i, n in enumerate(f["properties"])} or None
    return Message(
        body=b"b" * f["body_size"],
        message_id=f["message_id"],
        session_id=f["session_id"],
        partition_key=f["partition_key"],
        reply_to_session_id=f["reply_to_session_id"],
        subject=f["subject"],
        time_to_live_ms=f["time_to_live_ms"],
        scheduled_enqueue_time_ms=f["scheduled_enqueue_time_ms"],
        application_properties=props,
    )


def row_of(f: dict[str, Any]) -> Row:
    """The same message as a source row, as Spark hands it to a task."""
    props = {f"p{i}": "v" * n for i, n in enumerate(f["properties"])} or None
    ttl = f["time_to_live_ms"]
    return Row(
        o=0,
        b64=base64.b64encode(b"b" * f["body_size"]).decode(),
        message_id=f["message_id"],
        session_id=f["session_id"],
        partition_key=f["partition_key"],
        reply_to_session_id=f["reply_to_session_id"],
        subject=f["subject"],
        ttl_ms=None if ttl is None else float(ttl),
        at_ms=f["scheduled_enqueue_time_ms"],
        pr=props,
    )


def daemon_says(broker: Broker, name: str, message: Message) -> str | None:
    try:
        broker.messaging.send(NS, name, [message])
    except SbctlError as exc:
        return exc.message
    return None


def loader_says(broker: Broker, name: str, row: Row, now_ms: int) -> str | None:
    queue = broker.namespaces[NS].queues[name]
    cfg = queue.config
    rules = Rules(
        partitions=len(queue.partitions),
        requires_session=cfg.requires_session,
        duplicate_detection=cfg.requires_duplicate_detection,
        default_ttl_ms=cfg.default_message_time_to_live,
        max_message_bytes=queue.max_message_bytes,
        now_ms=now_ms,
    )
    try:
        message, _ttl, _sched = build(row, rules)
        check_size(message, encode_message(message), rules)
    except Rejected as exc:
        return str(exc)
    return None


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker for every example (a queue of its own each): made once, it keeps the
    property test quick."""
    b = Broker(
        tmp_path_factory.mktemp("rules") / "data",
        FakeClock(),
        Syncer("os"),
        default_credits_per_second=0,
    )
    yield b
    b.housekeeping.close()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=FIELDS, session=st.booleans(), dedup=st.booleans(), partitioned=st.booleans())
def test_the_daemon_and_the_loader_accept_and_refuse_alike(
    shared_broker: Broker, fields: dict[str, Any], session: bool, dedup: bool, partitioned: bool
) -> None:
    broker = shared_broker
    name = f"q{next(NAMES)}"
    options = {
        "requires_session": session,
        "requires_duplicate_detection": dedup,
        "enable_partitioning": partitioned,
    }
    broker.management.queue_create(NS, name, options)
    try:
        loader = loader_says(broker, name, row_of(fields), broker.clock.now_ms())
        daemon = daemon_says(broker, name, message_of(fields))
        assert loader == daemon, fields
    finally:
        broker.management.queue_delete(NS, name)


# -- the rules themselves, one by one, with the error each raises ------------------------------


@pytest.mark.parametrize(
    ("fields", "error", "text"),
    [
        ({"message_id": ""}, BadRequest, "message_id must be 1-128 characters"),
        ({"message_id": "m" * 129}, BadRequest, "message_id must be 1-128 characters"),
        ({"session_id": "s" * 129}, BadRequest, "session_id must be at most 128 characters"),
        ({"partition_key": "p" * 129}, BadRequest, "partition_key must be at most 128"),
        ({"reply_to_session_id": "r" * 129}, BadRequest, "reply_to_session_id must be at most"),
        ({"time_to_live_ms": 0}, BadRequest, "time_to_live must be positive"),
        ({"time_to_live_ms": MAX_TIMESPAN_MS + 1}, BadRequest, "time_to_live must be positive"),
        ({"scheduled_enqueue_time_ms": -1}, BadRequest, "between 1970 and 9999"),
        ({"scheduled_enqueue_time_ms": MAX_TIME_MS + 1}, BadRequest, "between 1970 and 9999"),
        ({"subject": "s" * 70_000}, MessageSizeExceeded, "exceeds the 64 KB limit"),
        ({"subject": "s" * 33_000}, MessageSizeExceeded, "property 'subject' exceeds the 32 KB"),
        ({"session_id": "a", "partition_key": "b"}, InvalidOperation, "PartitionKey 'b' differs"),
    ],
)
def test_each_rule_refuses_with_its_error(
    fields: dict[str, Any], error: type[SbctlError], text: str
) -> None:
    m = Message(body=b"x", **fields)
    with pytest.raises(error, match=text.replace("(", r"\(")):
        send_rules.check_message(
            m, len(encode_message(m)), requires_session=False, duplicate_detection=False
        )


def test_a_session_entity_requires_a_session_id_and_the_key_follows_the_rules() -> None:
    m = Message(body=b"x")
    size = len(encode_message(m))
    with pytest.raises(InvalidOperation) as info:
        send_rules.check_message(m, size, requires_session=True, duplicate_detection=False)
    assert info.value.message == SESSION_REQUIRED
    keyed = Message(body=b"x", message_id="m")
    assert (
        send_rules.check_message(keyed, size, requires_session=False, duplicate_detection=True)
        == "m"
    )
    assert (
        send_rules.check_message(keyed, size, requires_session=False, duplicate_detection=False)
        is None
    )


def test_the_size_limit_and_the_stored_ttl() -> None:
    send_rules.check_size(STANDARD_MESSAGE_BYTES, STANDARD_MESSAGE_BYTES)
    with pytest.raises(MessageSizeExceeded, match="262145 bytes is larger than the 256 KB"):
        send_rules.check_size(STANDARD_MESSAGE_BYTES + 1, STANDARD_MESSAGE_BYTES)
    assert send_rules.stored_time_to_live(None, 500) == 500
    assert send_rules.stored_time_to_live(900, 500) == 500
    assert send_rules.stored_time_to_live(100, 500) == 100
