"""The broker on a temporary data dir with a fake clock (nothing sleeps).

daemon/README.md §0.1 (partitioning), §1-3 (messages, sequence numbers, locks), §4 (DLQ), §5 (peek),
§6 (TTL), §13-15 (sizes, quotas, tiers), §17 (status), §18 (counts).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import presenting
from conftest import Reopen
from sbctl.core.delivered import Delivered
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessageSizeExceeded,
    MessagingEntityAlreadyExists,
    MessagingEntityDisabled,
    MessagingEntityNotFound,
    QuotaExceeded,
)
from sbctl.core.locks import lock_token_for
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message
from sbctld import queue as queue_module
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.broker import management as broker_management
from sbctld.broker import namespace as broker_namespace
from sbctld.clock import FakeClock

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker
reopen = presenting.reopen

NS = DEFAULT_NAMESPACE
LOCAL = (1 << 48) - 1
KB = 1024
SESSION_TEXT = (  # daemon/README.md §9.3, verbatim
    "The SessionId was not set on a message, and it cannot be sent to the entity. Entities "
    "that have session support enabled can only receive messages that have the SessionId set "
    "to a valid value."
)


def make(b: Broker, name: str = "q", ns: str = NS, **options: Any) -> dict[str, Any]:
    return b.management.queue_create(ns, name, options)


def send(b: Broker, *messages: Message, path: str = "q", ns: str = NS) -> list[int]:
    return b.messaging.send(ns, path, list(messages))


def recv(
    b: Broker, path: str = "q", count: int = 1, mode: str = "peek-lock", ns: str = NS
) -> list[Delivered]:
    return b.messaging.receive(ns, path, count, mode)


def bodies(ds: list[Delivered]) -> list[bytes]:
    return [decode_message(d.payload).body for d in ds]


def codes(results: list[dict[str, Any]]) -> list[str]:
    return [r["error"]["code"] if "error" in r else "ok" for r in results]


def settle(b: Broker, op: str, *ds: Delivered | str, path: str = "q", **kw: Any) -> list[str]:
    tokens = [d if isinstance(d, str) else d.lock_token for d in ds]
    return codes(b.messaging.settle(NS, path, op, tokens, **kw))  # type: ignore[arg-type]


def parts(seqs: list[int]) -> list[int]:
    return [s >> 48 for s in seqs]


def locals_(seqs: list[int]) -> list[int]:
    return [s & LOCAL for s in seqs]


def new_dirs(root: Path, before: set[Path]) -> set[Path]:
    return {p for p in root.rglob("*")} - before


# ===================================================================== namespaces


def test_default_namespace_exists_on_first_start(broker: Broker) -> None:
    assert [n["name"] for n in broker.management.namespace_list()] == [DEFAULT_NAMESPACE]
    ns = broker.management.namespace_get(DEFAULT_NAMESPACE)
    assert ns["sku"] == "standard"
    assert ns["queue_count"] == 0
    assert ns["max_message_size_in_kilobytes"] == 256


def test_default_namespace_not_recreated_after_deletion(broker: Broker, reopen: Reopen) -> None:
    broker.management.namespace_delete(DEFAULT_NAMESPACE)
    b = reopen()
    assert b.management.namespace_list() == []
    b = reopen(crash=True)
    assert b.management.namespace_list() == []


def test_namespace_lifecycle(broker: Broker, reopen: Reopen, clock: FakeClock) -> None:
    created = broker.management.namespace_create("Orders-Prod", "Standard")
    assert created["name"] == "Orders-Prod"
    assert created["sku"] == "standard"
    assert created["premium_messaging_partitions"] == 1
    assert created["created_at_utc"].startswith("2026-01-01T00:00:00")
    with pytest.raises(MessagingEntityAlreadyExists):
        broker.management.namespace_create("orders-prod")
    assert broker.management.namespace_get("ORDERS-PROD")["name"] == "Orders-Prod"
    assert sorted(n["name"] for n in broker.management.namespace_list()) == ["Orders-Prod", NS]
    b = reopen()
    assert b.management.namespace_get("orders-prod") == created
    make(b, "q", ns="orders-prod")
    assert b.management.namespace_get("orders-prod")["queue_count"] == 1
    directory = b.namespaces["orders-prod"].directory
    assert directory.exists()
    assert b.management.namespace_delete("Orders-Prod") == {"deleted": "Orders-Prod"}
    assert not directory.exists()
    for op in (b.management.namespace_get, b.management.namespace_delete, b.management.queue_list):
        with pytest.raises(MessagingEntityNotFound):
            op("orders-prod")
    b = reopen()
    assert [n["name"] for n in b.management.namespace_list()] == [NS]
    # The name is free again, and the new namespace starts empty.
    b.management.namespace_create("orders-prod")
    assert b.management.queue_list("orders-prod") == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"name": "abc"}, BadRequest),
        ({"name": "1orders"}, BadRequest),
        ({"name": "orders-sb"}, BadRequest),
        ({"name": "orders_x"}, BadRequest),
        ({"name": "orders", "sku": "gold"}, BadRequest),
        ({"name": "orders", "sku": "premium", "partitions": 3}, BadRequest),
        ({"name": "orders", "sku": "standard", "partitions": 2}, InvalidOperation),
        ({"name": "orders", "sku": "premium", "capacity": 3}, BadRequest),
    ],
)
def test_namespace_validation(broker: Broker, kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        broker.management.namespace_create(**kwargs)
    assert [n["name"] for n in broker.management.namespace_list()] == [NS]


@pytest.mark.parametrize(
    "name", ["../../evil", "..", "a/../../b", "/tmp/evilns", "evil\x00ns", "evil ns", "évilns"]
)
def test_hostile_namespace_names(broker: Broker, tmp_path: Path, name: str) -> None:
    before = set(tmp_path.rglob("*"))
    with pytest.raises(BadRequest):
        broker.management.namespace_create(name)
    with pytest.raises((BadRequest, MessagingEntityNotFound)):
        broker.management.queue_create(name, "q", {})
    assert new_dirs(tmp_path, before) == set()


# ===================================================================== queue management


def test_queue_defaults(broker: Broker) -> None:
    q = make(broker)
    expected = {
        "name": "q",
        "max_size_in_megabytes": 1024,
        "max_message_size_in_kilobytes": 256,
        "lock_duration": "PT1M",
        "max_delivery_count": 10,
        "requires_duplicate_detection": False,
        "duplicate_detection_history_time_window": "PT10M",
        "requires_session": False,
        "enable_partitioning": False,
        "forward_to": None,
        "dead_lettering_on_message_expiration": False,
        "status": "Active",
        "active_message_count": 0,
        "dead_letter_message_count": 0,
        "scheduled_message_count": 0,
        "total_message_count": 0,
        "size_in_bytes": 0,
        "partition_count": 1,
    }
    assert {k: q[k] for k in expected} == expected
    assert q["partitions"] == [
        {
            "partition_id": 0,
            "active_message_count": 0,
            "dead_letter_message_count": 0,
            "size_in_bytes": 0,
            "next_sequence_number": 1,
        }
    ]


def test_queue_create_update_get_list(broker: Broker, clock: FakeClock, reopen: Reopen) -> None:
    make(broker, "target")
    q = make(
        broker,
        "Orders",
        lock_duration=30_000,
        max_delivery_count=3,
        max_size_in_megabytes=2048,
        default_message_time_to_live=3_600_000,
        dead_lettering_on_message_expiration=True,
        forward_dead_lettered_messages_to="target",
        user_metadata="meta",
    )
    assert (q["lock_duration"], q["max_delivery_count"], q["max_size_in_megabytes"]) == (
        "PT30S",
        3,
        2048,
    )
    assert q["default_message_time_to_live"] == "PT1H"
    assert q["forward_dead_lettered_messages_to"] == "target"
    clock.advance(5_000)
    u = broker.management.queue_update(
        NS, "orders", {"max_delivery_count": 7, "status": "SendDisabled"}
    )
    assert (u["max_delivery_count"], u["status"], u["lock_duration"]) == (
        7,
        "SendDisabled",
        "PT30S",
    )
    assert u["updated_at_utc"] > u["created_at_utc"]
    assert broker.management.queue_get(NS, "ORDERS")["max_delivery_count"] == 7
    listed = broker.management.queue_list(NS)
    assert sorted(x["name"] for x in listed) == ["Orders", "target"]
    assert all("partitions" not in x for x in listed)
    b = reopen()
    again = b.management.queue_get(NS, "orders")
    assert {k: v for k, v in again.items() if k != "accessed_at_utc"} == {
        k: v for k, v in u.items() if k != "accessed_at_utc"
    }


def test_queue_names_are_case_insensitive(broker: Broker) -> None:
    make(broker, "Orders")
    with pytest.raises(MessagingEntityAlreadyExists):
        make(broker, "ORDERS")
    assert broker.management.queue_get(NS, "orders")["name"] == "Orders"
    send(broker, Message(b"x"), path="oRdErS")
    assert bodies(recv(broker, "ORDERS")) == [b"x"]


def test_queue_delete(broker: Broker, reopen: Reopen) -> None:
    make(broker)
    send(broker, Message(b"1"), Message(b"2"))
    directory = broker.namespaces[NS].queues["q"].directory
    assert broker.management.queue_delete(NS, "Q") == {"deleted": "q"}
    assert not directory.exists()
    for call in (
        lambda: broker.management.queue_get(NS, "q"),
        lambda: broker.management.queue_delete(NS, "q"),
        lambda: send(broker, Message(b"x")),
        lambda: recv(broker),
    ):
        with pytest.raises(MessagingEntityNotFound):
            call()
    # A new queue of the same name starts over at sequence number 1.
    make(broker)
    assert send(broker, Message(b"new")) == [1]
    b = reopen()
    assert bodies(recv(b)) == [b"new"]


def test_unknown_namespace_or_queue(broker: Broker) -> None:
    with pytest.raises(MessagingEntityNotFound):
        broker.management.queue_create("nosuchns", "q", {})
    with pytest.raises(MessagingEntityNotFound):
        broker.management.queue_get(NS, "nosuch")
    with pytest.raises(MessagingEntityNotFound):
        broker.management.queue_update(NS, "nosuch", {})


@pytest.mark.parametrize("option", ["bogus", "name", "created_at_ms", "enable_express"])
def test_unknown_option(broker: Broker, option: str) -> None:
    with pytest.raises(BadRequest, match=f"unknown queue property '{option}'"):
        broker.management.queue_create(NS, "q", {option: 1})
    make(broker)
    with pytest.raises(BadRequest, match=f"unknown queue property '{option}'"):
        broker.management.queue_update(NS, "q", {option: 1})


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("lock_duration", "PT1M"),
        ("lock_duration", 30_000.5),
        ("max_delivery_count", True),
        ("requires_session", 1),
        ("status", 3),
        ("forward_to", 5),
    ],
)
def test_option_types(broker: Broker, option: str, value: Any) -> None:
    with pytest.raises(BadRequest):
        make(broker, **{option: value})
    assert broker.management.queue_list(NS) == []


@pytest.mark.parametrize(
    "option", ["requires_session", "enable_partitioning", "requires_duplicate_detection"]
)
def test_immutable_options(broker: Broker, option: str) -> None:
    make(broker)
    with pytest.raises(InvalidOperation) as info:
        broker.management.queue_update(NS, "q", {option: True})
    assert type(info.value) is InvalidOperation
    assert broker.management.queue_get(NS, "q")[option] is False
    broker.management.queue_update(NS, "q", {option: False})  # unchanged: allowed


@pytest.mark.parametrize(
    ("ms", "ok"), [(4_999, False), (5_000, True), (300_000, True), (300_001, False), (0, False)]
)
def test_lock_duration_bounds(broker: Broker, ms: int, ok: bool) -> None:
    make(broker, "base")
    if ok:
        assert make(broker, lock_duration=ms)["partition_count"] == 1
        broker.management.queue_update(NS, "base", {"lock_duration": ms})
    else:
        with pytest.raises(BadRequest, match="between 5 seconds and 5 minutes"):
            make(broker, lock_duration=ms)
        with pytest.raises(BadRequest, match="between 5 seconds and 5 minutes"):
            broker.management.queue_update(NS, "base", {"lock_duration": ms})
        assert broker.management.queue_get(NS, "base")["lock_duration"] == "PT1M"


@pytest.mark.parametrize(
    ("size", "ok"),
    [(size, True) for size in (1024, 2048, 3072, 4096, 5120)]
    + [(size, False) for size in (0, 512, 1000, 1025, 6144, 10240)],
)
def test_standard_max_sizes(broker: Broker, size: int, ok: bool) -> None:
    if ok:
        assert make(broker, max_size_in_megabytes=size)["max_size_in_megabytes"] == size
    else:
        with pytest.raises(BadRequest, match="max_size_in_megabytes"):
            make(broker, max_size_in_megabytes=size)


@pytest.mark.parametrize(
    "options",
    [
        {"requires_session": True},
        {"requires_duplicate_detection": True},
        {"forward_to": "target"},
        {"forward_dead_lettered_messages_to": "target"},
        {"auto_delete_on_idle": 600_000},
    ],
)
def test_basic_tier_refusals(broker: Broker, options: dict[str, Any]) -> None:
    broker.management.namespace_create("basicns", "basic")
    make(broker, "target", ns="basicns")
    with pytest.raises(InvalidOperation, match="not supported on the Basic tier"):
        make(broker, ns="basicns", **options)
    make(broker, ns="basicns")
    with pytest.raises(InvalidOperation):  # immutable ones fail as such first
        broker.management.queue_update("basicns", "q", options)
    assert broker.management.queue_get("basicns", "q")["forward_to"] is None


def test_basic_tier_defaults(broker: Broker) -> None:
    broker.management.namespace_create("basicns", "basic")
    q = make(broker, ns="basicns", requires_session=False, enable_partitioning=True)
    assert q["default_message_time_to_live"] == "P14D"  # daemon/README.md §6.1, §15.1
    assert q["partition_count"] == 16


def test_forwarding_targets(broker: Broker) -> None:
    with pytest.raises(MessagingEntityNotFound, match="'missing'"):
        make(broker, forward_to="missing")
    with pytest.raises(MessagingEntityNotFound):
        make(broker, forward_dead_lettered_messages_to="missing")
    with pytest.raises(InvalidOperation, match="itself"):
        make(broker, "self", forward_to="SELF")
    with pytest.raises(BadRequest):
        make(broker, forward_to="../etc")
    assert broker.management.queue_list(NS) == []
    make(broker, "target")
    assert make(broker, forward_to="Target")["forward_to"] == "Target"
    with pytest.raises(MessagingEntityNotFound):
        broker.management.queue_update(NS, "q", {"forward_to": "gone"})
    assert broker.management.queue_get(NS, "q")["forward_to"] == "Target"


@pytest.mark.parametrize(
    "name",
    [
        "../evil",
        "..",
        ".",
        "a/../../evil",
        "/abs",
        "a\\..\\evil",
        "a\x00b",
        "q/$deadletterqueue",
        "$evil",
        "a b",
        "a//b",
        "x" * 261,
        "",
        "évil",
        "a/subscriptions/b",
    ],
)
def test_hostile_queue_names(broker: Broker, tmp_path: Path, name: str) -> None:
    before = set(tmp_path.rglob("*"))
    with pytest.raises(BadRequest):
        make(broker, name)
    with pytest.raises(BadRequest):
        broker.management.queue_get(NS, name)
    with pytest.raises((BadRequest, InvalidOperation, MessagingEntityNotFound)):
        send(broker, Message(b"x"), path=name)
    assert new_dirs(tmp_path, before) == set()


def test_nested_queue_names_stay_inside_the_data_dir(broker: Broker, tmp_path: Path) -> None:
    make(broker, "a/b/c")
    queues = broker.namespaces[NS].directory / "queues"
    assert [p.name for p in queues.iterdir()] == ["a%2Fb%2Fc"]
    send(broker, Message(b"x"), path="A/B/C")
    assert bodies(recv(broker, "a/b/c")) == [b"x"]


# ===================================================================== premium and quotas


def test_premium_namespaces_partition_everything(broker: Broker) -> None:
    ns = broker.management.namespace_create("premiumns", "premium", 4, 4)
    assert (ns["sku"], ns["premium_messaging_partitions"], ns["capacity"]) == ("premium", 4, 4)
    assert ns["max_message_size_in_kilobytes"] == 1024
    q = make(broker, ns="premiumns", max_size_in_megabytes=81920)
    assert (q["partition_count"], q["enable_partitioning"]) == (4, True)
    assert q["max_message_size_in_kilobytes"] == 1024
    assert [p["next_sequence_number"] for p in q["partitions"]] == [(p << 48) | 1 for p in range(4)]
    seqs = send(broker, *[Message(b"m")] * 8, ns="premiumns")
    assert sorted(seqs) == sorted((p << 48) | n for p in range(4) for n in (1, 2))
    key_seq = send(broker, Message(b"k", partition_key="key"), ns="premiumns")
    assert parts(key_seq) == [partition_for_key("key", 4)]


def test_premium_without_namespace_partitions(broker: Broker) -> None:
    broker.management.namespace_create("premiumns", "premium")
    with pytest.raises(InvalidOperation, match="premium"):
        make(broker, ns="premiumns", enable_partitioning=True)
    assert make(broker, ns="premiumns")["partition_count"] == 1


def test_100_partitioned_queues_per_standard_namespace(broker: Broker) -> None:
    for k in range(100):
        make(broker, f"p{k}", enable_partitioning=True)
    with pytest.raises(QuotaExceeded, match="100 partitioned"):
        make(broker, "p100", enable_partitioning=True)
    assert broker.management.namespace_get(NS)["partitioned_entity_count"] == 100
    make(broker, "plain")  # unpartitioned entities are not limited by it
    broker.management.namespace_create("otherns")
    make(broker, "p100", ns="otherns", enable_partitioning=True)  # the quota is per namespace
    broker.management.queue_delete(NS, "p0")
    make(broker, "p100", enable_partitioning=True)


def test_premium_partitioned_entities_do_not_count(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker_management, "MAX_PARTITIONED", 2)
    broker.management.namespace_create("premiumns", "premium", 2, 2)
    for k in range(3):
        make(broker, f"q{k}", ns="premiumns")
    make(broker, "s1", enable_partitioning=True)
    make(broker, "s2", enable_partitioning=True)
    with pytest.raises(QuotaExceeded):
        make(broker, "s3", enable_partitioning=True)


def test_entity_quota(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(broker_namespace, "MAX_ENTITIES", 3)
    for k in range(3):
        make(broker, f"q{k}")
    with pytest.raises(QuotaExceeded):
        make(broker, "q3")


# ===================================================================== partitioning


def test_partitioned_queue_has_16_partitions(broker: Broker) -> None:
    q = make(broker, enable_partitioning=True)
    assert (q["partition_count"], q["enable_partitioning"]) == (16, True)
    assert [p["partition_id"] for p in q["partitions"]] == list(range(16))
    assert [p["next_sequence_number"] for p in q["partitions"]] == [
        (p << 48) | 1 for p in range(16)
    ]
    assert len(list((broker.namespaces[NS].queues["q"].directory).glob("p*"))) == 16


def test_keyless_messages_round_robin_over_all_partitions(broker: Broker) -> None:
    make(broker, enable_partitioning=True)
    seqs = send(broker, *[Message(b"m")] * 16)
    assert sorted(parts(seqs)) == list(range(16))
    assert locals_(seqs) == [1] * 16
    more = [send(broker, Message(b"m"))[0] for _ in range(16)]
    assert sorted(parts(more)) == list(range(16))
    assert locals_(more) == [2] * 16
    q = broker.management.queue_get(NS, "q")
    assert [p["active_message_count"] for p in q["partitions"]] == [2] * 16


def test_message_id_ignored_for_placement_without_duplicate_detection(broker: Broker) -> None:
    make(broker, enable_partitioning=True)
    seqs = send(broker, *[Message(b"m", message_id="same")] * 16)
    assert sorted(parts(seqs)) == list(range(16))


@pytest.mark.parametrize(
    ("message", "key"),
    [
        (Message(b"m", message_id="mid-1"), "mid-1"),
        (Message(b"m", message_id="mid-1", partition_key="pk-9"), "pk-9"),
        (Message(b"m", partition_key="pk-9"), "pk-9"),
        (Message(b"m", session_id="sess", message_id="mid-1"), "sess"),
        (Message(b"m", session_id="sess", partition_key="sess", message_id="x"), "sess"),
        (Message(b"m", message_id="ünï-日本"), "ünï-日本"),
    ],
)
def test_key_precedence(broker: Broker, message: Message, key: str) -> None:
    """daemon/README.md §0.1.4: SessionId, else PartitionKey, else MessageId with duplicate
    detection."""
    make(broker, enable_partitioning=True, requires_duplicate_detection=True)
    seqs = send(broker, *[message] * 5)
    expected = partition_for_key(key, 16)
    assert parts(seqs) == [expected] * 5
    # daemon/README.md §8.3: with a MessageId the four copies are duplicates, accepted and dropped.
    stored = 1 if message.message_id is not None else 5
    assert locals_(seqs) == ([1] * 5 if stored == 1 else [1, 2, 3, 4, 5])
    q = broker.management.queue_get(NS, "q")
    assert q["partitions"][expected]["active_message_count"] == stored


def test_session_id_places_messages_on_a_session_queue(broker: Broker) -> None:
    make(broker, enable_partitioning=True, requires_session=True)
    for sid in ("a", "b", "order-17", "Ω"):
        seqs = send(broker, Message(b"1", session_id=sid), Message(b"2", session_id=sid))
        assert parts(seqs) == [partition_for_key(sid, 16)] * 2


def test_session_id_and_partition_key_must_agree(broker: Broker) -> None:
    make(broker, enable_partitioning=True)
    make(broker, "plain")
    bad = Message(b"bad", session_id="s1", partition_key="s2")
    for path in ("q", "plain"):
        with pytest.raises(InvalidOperation) as info:
            send(broker, Message(b"good"), bad, path=path)
        assert type(info.value) is InvalidOperation
        assert "'s2'" in str(info.value) and "'s1'" in str(info.value)
        # nothing of the batch
        assert broker.management.queue_get(NS, path)["total_message_count"] == 0


def test_public_sequence_numbers(broker: Broker) -> None:
    make(broker, "plain")
    assert send(broker, Message(b"a"), Message(b"b"), path="plain") == [1, 2]
    assert send(broker, Message(b"c"), path="plain") == [3]
    make(broker, enable_partitioning=True)
    pid = partition_for_key("k", 16)
    seqs = send(broker, *[Message(b"x", partition_key="k")] * 3)
    assert seqs == [(pid << 48) | 1, (pid << 48) | 2, (pid << 48) | 3]
    got = recv(broker, count=3)
    assert [d.sequence_number for d in got] == seqs
    assert {d.partition_id for d in got} == {pid}


def test_receive_asks_every_partition(broker: Broker) -> None:
    make(broker, enable_partitioning=True)
    seqs = send(broker, *[Message(bytes([k])) for k in range(16)])
    got = recv(broker, count=100)
    assert sorted(d.sequence_number for d in got) == sorted(seqs)
    # Small receives also find every message eventually (daemon/README.md §0.1.6).
    send(broker, *[Message(b"again")] * 16)
    found = [d.sequence_number for _ in range(16) for d in recv(broker)]
    assert len(set(found)) == 16


# ===================================================================== sizes


def body_for(limit: int) -> bytes:
    """A body whose encoded message is exactly ``limit`` bytes."""
    overhead = len(encode_message(Message(b"x" * 70_000))) - 70_000
    return b"x" * (limit - overhead)


@pytest.mark.parametrize("premium", [False, True])
def test_message_size_limits(broker: Broker, premium: bool) -> None:
    ns = NS
    limit = 256 * KB
    if premium:
        ns = broker.management.namespace_create("premiumns", "premium", 2, 2)["name"]
        limit = 1024 * KB
    make(broker, ns=ns)
    exact = body_for(limit)
    assert len(encode_message(Message(exact))) == limit
    send(broker, Message(exact), ns=ns)
    with pytest.raises(MessageSizeExceeded):
        send(broker, Message(exact + b"x"), ns=ns)
    half = body_for(limit // 2 + 1)
    with pytest.raises(MessageSizeExceeded, match="batch"):
        send(broker, Message(half), Message(half), ns=ns)
    with pytest.raises(MessageSizeExceeded):
        send(broker, Message(b"small"), Message(exact + b"x"), ns=ns)
    assert broker.management.queue_get(ns, "q")["total_message_count"] == 1
    small = body_for(limit // 2)
    assert len(send(broker, Message(small), Message(small), ns=ns)) == 2


def test_standard_refuses_what_premium_accepts(broker: Broker) -> None:
    make(broker)
    with pytest.raises(MessageSizeExceeded):
        send(broker, Message(b"x" * 300 * KB))


def test_per_partition_max_size(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_module, "MB", 1)  # 1024 MB now means 1024 bytes per partition
    make(broker, enable_partitioning=True)
    msg = Message(b"x" * 300, partition_key="a")
    size = len(encode_message(msg))
    fits = 1024 // size
    for _ in range(fits):
        send(broker, msg)
    with pytest.raises(QuotaExceeded, match="per partition"):
        send(broker, msg)
    full = partition_for_key("a", 16)
    other = next(k for k in map(str, range(100)) if partition_for_key(k, 16) != full)
    send(broker, Message(b"x" * 300, partition_key=other))  # another partition has room
    assert broker.management.queue_get(NS, "q")["total_message_count"] == fits + 1
    # Completing a message of the full partition makes room again.
    got = recv(broker, count=100)
    first = next(d for d in got if d.partition_id == full)
    assert settle(broker, "complete", first) == ["ok"]
    send(broker, msg)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (Message(b"x", message_id=""), BadRequest),
        (Message(b"x", message_id="m" * 129), BadRequest),
        (Message(b"x", session_id="s" * 129), BadRequest),
        (Message(b"x", partition_key="p" * 129), BadRequest),
        (Message(b"x", reply_to_session_id="r" * 129), BadRequest),
        (Message(b"x", application_properties={"big": "v" * (32 * KB + 1)}), MessageSizeExceeded),
        (
            Message(b"x", application_properties={f"k{n}": "v" * 30_000 for n in range(3)}),
            MessageSizeExceeded,
        ),
    ],
)
def test_per_message_limits(broker: Broker, message: Message, error: type) -> None:
    make(broker)
    with pytest.raises(error):
        send(broker, Message(b"fine"), message)
    assert broker.management.queue_get(NS, "q")["total_message_count"] == 0
    ok = Message(b"x", message_id="m" * 128, session_id="s" * 128, partition_key="s" * 128)
    assert send(broker, ok) == [1]


def test_empty_send_is_refused(broker: Broker) -> None:
    make(broker)
    with pytest.raises(BadRequest):
        broker.messaging.send(NS, "q", [])


def test_system_properties_count_toward_the_header_limit(broker: Broker) -> None:
    make(broker)
    with pytest.raises(MessageSizeExceeded):
        send(broker, Message(b"x", subject="s" * (40 * KB)))


def test_schedule_in_the_past_is_active_at_once(broker: Broker, clock: FakeClock) -> None:
    make(broker)
    send(
        broker,
        Message(b"past", scheduled_enqueue_time_ms=clock.now - 1),
        Message(b"now", scheduled_enqueue_time_ms=clock.now),
        Message(b"future", scheduled_enqueue_time_ms=clock.now + 1),
    )
    assert bodies(recv(broker, count=5)) == [b"past", b"now"]
    assert broker.management.queue_get(NS, "q")["scheduled_message_count"] == 1


# ===================================================================== sessions


@pytest.mark.parametrize("session_id", [None, ""])
def test_session_queue_refuses_messages_without_session_id(
    broker: Broker, session_id: str | None
) -> None:
    make(broker, requires_session=True)
    with pytest.raises(InvalidOperation) as info:
        send(broker, Message(b"x", session_id="ok"), Message(b"y", session_id=session_id))
    assert str(info.value) == SESSION_TEXT
    assert type(info.value) is InvalidOperation
    assert broker.management.queue_get(NS, "q")["total_message_count"] == 0


# ===================================================================== peek


def peek(b: Broker, path: str = "q", count: int = 250, start: int | None = None) -> list[Any]:
    return [
        (d.sequence_number, d.state, d.delivery_count, d.lock_token, bytes(d.payload))
        for d in b.messaging.peek(NS, path, count, start)
    ]


def test_peek_never_changes_state(broker: Broker, clock: FakeClock) -> None:
    make(broker)
    send(broker, Message(b"1"), Message(b"2"), Message(b"3"))
    before = broker.management.queue_get(NS, "q")
    first = peek(broker)
    assert [p[0] for p in first] == [1, 2, 3]
    assert all(p[3] is None for p in first)
    assert peek(broker) == first
    assert broker.management.queue_get(NS, "q") == before
    got = recv(broker)
    assert (got[0].sequence_number, got[0].delivery_count) == (1, 1)
    # A locked message is still peekable; peek shows no lock.
    assert [p[0] for p in peek(broker)] == [1, 2, 3]
    assert all(p[3] is None for p in peek(broker))


def test_peek_count_bounds(broker: Broker) -> None:
    make(broker)
    send(broker, *[Message(b"m")] * 260)
    for bad in (0, -1, 251):
        with pytest.raises(BadRequest, match="between 1 and 250"):
            broker.messaging.peek(NS, "q", bad, None)
    assert len(peek(broker, count=250)) == 250
    assert len(peek(broker, count=1)) == 1
    with pytest.raises(BadRequest):
        broker.messaging.peek(NS, "q", 1, -5)


def test_peek_from_sequence(broker: Broker) -> None:
    make(broker)
    send(broker, *[Message(bytes([48 + k])) for k in range(6)])
    assert [p[0] for p in peek(broker, start=3)] == [3, 4, 5, 6]
    assert [p[0] for p in peek(broker, count=2, start=3)] == [3, 4]
    assert peek(broker, start=7) == []


def test_paging_peek_walks_every_partition_in_sequence_number_order(broker: Broker) -> None:
    """daemon/README.md §0.1.7: each page continues after the last number it returned, into
    the next partitions, so paging sees every message once (Java's peekMessages(10) over
    40 messages used to stop after the first partition: [10, 0])."""
    make(broker, enable_partitioning=True)
    keys = [k for k in map(str, range(400)) if partition_for_key(k, 16) in (0, 4, 5, 8, 15)]
    seqs = send(broker, *[Message(b"m", partition_key=keys[i % 25]) for i in range(40)])
    assert {s >> 48 for s in seqs} == {0, 4, 5, 8, 15}
    for first in (0, 1, None):  # Python and Java start at 0, JS at 1, the CLI at none
        pages: list[list[int]] = []
        start = first
        while page := [d.sequence_number for d in broker.messaging.peek(NS, "q", 10, start)]:
            pages.append(page)
            start = page[-1] + 1
        assert [len(p) for p in pages] == [10, 10, 10, 10]
        assert [s for p in pages for s in p] == sorted(seqs)
    # From the middle of a partition: the rest of it, then the next ones.
    mid = sorted(seqs)[12]
    assert [d.sequence_number for d in broker.messaging.peek(NS, "q", 250, mid)] == sorted(seqs)[
        12:
    ]
    assert broker.messaging.peek(NS, "q", 250, (15 << 48) | 1000) == []
    with pytest.raises(BadRequest, match="names no partition"):
        broker.messaging.peek(NS, "q", 1, 16 << 48)


def test_peek_shows_scheduled_and_not_dead_lettered(broker: Broker, clock: FakeClock) -> None:
    make(broker, max_delivery_count=1)
    send(
        broker,
        Message(b"dead"),
        Message(b"later", scheduled_enqueue_time_ms=clock.now + 60_000),
        Message(b"now"),
    )
    assert settle(broker, "abandon", *recv(broker)) == ["ok"]  # → DLQ
    main = peek(broker)
    assert [(p[0], p[1]) for p in main] == [(2, 3), (3, 1)]  # scheduled, active
    dlq = peek(broker, "q/$deadletterqueue")
    assert [(p[0], p[1]) for p in dlq] == [(1, 4)]


# ===================================================================== receive and locks


def test_peek_lock_locks_and_second_receive_skips(broker: Broker, clock: FakeClock) -> None:
    make(broker, lock_duration=30_000)
    send(broker, Message(b"1"), Message(b"2"))
    (a,) = recv(broker)
    assert (a.sequence_number, a.delivery_count) == (1, 1)
    assert a.lock_token is not None
    assert a.locked_until_ms == clock.now + 30_000
    (b,) = recv(broker)
    assert b.sequence_number == 2
    assert b.lock_token != a.lock_token
    assert recv(broker) == []


def test_lock_expiry_makes_messages_available_again(broker: Broker, clock: FakeClock) -> None:
    make(broker, lock_duration=5_000)
    send(broker, Message(b"1"), Message(b"2"))
    (a,) = recv(broker)
    clock.advance(4_999)
    assert broker.housekeeping.tick() == []
    (b,) = recv(broker)
    assert b.sequence_number == 2
    assert recv(broker) == []
    clock.advance(1)
    assert broker.housekeeping.tick() == [(NS, "q")]
    (again,) = recv(broker)
    assert (again.sequence_number, again.delivery_count) == (1, 2)
    assert again.lock_token != a.lock_token
    assert settle(broker, "complete", a) == ["MessageLockLost"]
    assert settle(broker, "complete", again) == ["ok"]


def test_receive_expires_locks_itself(broker: Broker, clock: FakeClock) -> None:
    make(broker, lock_duration=5_000)
    send(broker, Message(b"1"))
    recv(broker)
    clock.advance(5_000)
    (again,) = recv(broker)  # no tick in between
    assert again.delivery_count == 2


def test_complete_removes(broker: Broker, reopen: Reopen) -> None:
    make(broker)
    send(broker, Message(b"1"), Message(b"2"))
    a, b_ = recv(broker, count=2)
    assert settle(broker, "complete", a) == ["ok"]
    assert settle(broker, "complete", a) == ["MessageLockLost"]
    q = broker.management.queue_get(NS, "q")
    assert (q["active_message_count"], q["total_message_count"]) == (1, 1)
    assert [p[0] for p in peek(broker)] == [2]
    b = reopen()
    assert [p[0] for p in peek(b)] == [2]
    assert settle(b, "complete", b_) == ["MessageLockLost"]  # locks die with the broker


def test_complete_after_lock_expiry(broker: Broker, clock: FakeClock) -> None:
    make(broker, lock_duration=5_000)
    send(broker, Message(b"1"), Message(b"2"))
    a, b = recv(broker, count=2)
    clock.advance(5_000)
    assert settle(broker, "complete", a) == ["MessageLockLost"]  # before the tick
    broker.housekeeping.tick()
    assert settle(broker, "complete", b) == ["MessageLockLost"]  # after it
    assert broker.management.queue_get(NS, "q")["active_message_count"] == 2


def test_settle_results_per_token(broker: Broker) -> None:
    make(broker)
    send(broker, Message(b"1"), Message(b"2"))
    a, b = recv(broker, count=2)
    forged = lock_token_for(1, 12345)
    results = settle(broker, "complete", a, forged, "not-a-guid", a, b)
    assert results == ["ok", "MessageLockLost", "BadRequest", "MessageLockLost", "ok"]
    assert broker.management.queue_get(NS, "q")["total_message_count"] == 0
    with pytest.raises(BadRequest):
        broker.messaging.settle(NS, "q", "defenestrate", [])


def test_abandon_redelivers_first_with_property_changes(broker: Broker, reopen: Reopen) -> None:
    make(broker)
    send(broker, Message(b"1"), Message(b"2"), Message(b"3", application_properties={"k": 0}))
    recv(broker)
    (two,) = recv(broker)
    assert settle(broker, "abandon", two, properties={"k": "v", "n": 2}) == ["ok"]
    assert settle(broker, "abandon", two) == ["MessageLockLost"]
    (again,) = recv(broker)
    assert (again.sequence_number, again.delivery_count) == (2, 2)
    assert again.changes == {"k": "v", "n": 2}
    (three,) = recv(broker)
    assert three.sequence_number == 3
    assert three.changes is None
    b = reopen()
    d = next(x for x in b.messaging.peek(NS, "q", 10, None) if x.sequence_number == 2)
    assert d.changes == {"k": "v", "n": 2}
    assert d.delivery_count == 2


@pytest.mark.parametrize("path", ["q/$deadletterqueue", "q/$DeadLetterQueue", "Q/$DEADLETTERQUEUE"])
def test_max_delivery_count_dead_letters(broker: Broker, path: str) -> None:
    make(broker, max_delivery_count=3)
    send(broker, Message(b"poison"), Message(b"fine"))
    for attempt in (1, 2, 3):
        (d,) = recv(broker)
        assert (d.sequence_number, d.delivery_count) == (1, attempt)
        assert settle(broker, "abandon", d) == ["ok"]
    (fine,) = recv(broker)
    assert fine.sequence_number == 2
    assert recv(broker) == []
    q = broker.management.queue_get(NS, "q")
    assert (q["active_message_count"], q["dead_letter_message_count"]) == (1, 1)
    (dead,) = recv(broker, path)
    assert dead.sequence_number == 1  # daemon/README.md §0.4.1: keeps its sequence number
    assert bodies([dead]) == [b"poison"]
    assert dead.changes is not None
    assert dead.changes["DeadLetterReason"] == "MaxDeliveryCountExceeded"
    assert settle(broker, "complete", dead, path=path) == ["ok"]
    assert broker.management.queue_get(NS, "q")["dead_letter_message_count"] == 0


def test_lock_expiry_counts_toward_max_delivery(broker: Broker, clock: FakeClock) -> None:
    make(broker, max_delivery_count=2, lock_duration=5_000)
    send(broker, Message(b"slow"))
    for _ in range(2):
        assert len(recv(broker)) == 1
        clock.advance(5_000)
        broker.housekeeping.tick()
    assert recv(broker) == []
    (dead,) = broker.messaging.peek(NS, "q/$deadletterqueue", 1, None)
    assert dead.changes is not None
    assert dead.changes["DeadLetterReason"] == "MaxDeliveryCountExceeded"


def test_dead_lettered_messages_stay_in_the_dlq(broker: Broker) -> None:
    make(broker, max_delivery_count=1, enable_partitioning=True)
    assert recv(broker, "q/$deadletterqueue") == []  # a DLQ consumer polled before
    seqs = send(broker, Message(b"poison", partition_key="k"))
    settle(broker, "abandon", *recv(broker))
    (dead,) = recv(broker, "q/$deadletterqueue")
    assert dead.sequence_number == seqs[0]
    assert dead.partition_id == partition_for_key("k", 16)
    assert settle(broker, "abandon", dead, path="q/$deadletterqueue") == ["ok"]
    (again,) = recv(broker, "q/$deadletterqueue")  # abandoned in the DLQ: still there
    assert again.sequence_number == seqs[0]
    assert recv(broker) == []
    assert broker.management.queue_get(NS, "q")["dead_letter_message_count"] == 1
    settle(broker, "abandon", again, path="q/$deadletterqueue")
    got = recv(broker, "q/$deadletterqueue", mode="receive-and-delete")
    assert [d.sequence_number for d in got] == seqs
    assert broker.management.queue_get(NS, "q")["total_message_count"] == 0


def test_a_locked_dlq_message_is_not_delivered_twice(broker: Broker) -> None:
    make(broker, max_delivery_count=1)
    send(broker, Message(b"poison"))
    settle(broker, "abandon", *recv(broker))
    (dead,) = recv(broker, "q/$deadletterqueue")
    assert dead.sequence_number == 1
    assert recv(broker, "q/$deadletterqueue") == []


@pytest.mark.parametrize("mode", ["peek-lock", "receive-and-delete"])
def test_one_dlq_receive_never_returns_a_message_twice(broker: Broker, mode: str) -> None:
    make(broker, max_delivery_count=1)
    send(broker, Message(b"a"), Message(b"b"))
    assert settle(broker, "abandon", *recv(broker, count=2)) == ["ok", "ok"]
    got = recv(broker, "q/$deadletterqueue", count=10, mode=mode)
    assert [d.sequence_number for d in got] == [1, 2]


def test_dead_letter_queue_rules(broker: Broker) -> None:
    make(broker)
    with pytest.raises(InvalidOperation):
        send(broker, Message(b"x"), path="q/$deadletterqueue")
    with pytest.raises(InvalidOperation):
        send(broker, Message(b"x"), path="q/$Transfer/$DeadLetterQueue")
    assert recv(broker, "q/$Transfer/$DeadLetterQueue") == []  # daemon/README.md §4.2: it exists
    with pytest.raises(MessagingEntityNotFound):
        recv(broker, "nosuch/$deadletterqueue")
    assert recv(broker, "q/$deadletterqueue") == []


def test_receive_and_delete(broker: Broker, reopen: Reopen) -> None:
    make(broker)
    send(broker, Message(b"1"), Message(b"2"), Message(b"3"))
    got = recv(broker, count=2, mode="receive-and-delete")
    assert [d.sequence_number for d in got] == [1, 2]
    assert all(d.lock_token is None and d.locked_until_ms is None for d in got)
    assert [d.delivery_count for d in got] == [1, 1]
    assert broker.management.queue_get(NS, "q")["total_message_count"] == 1
    b = reopen(crash=True)
    assert [d.sequence_number for d in recv(b, count=5, mode="receive-and-delete")] == [3]
    assert recv(b, count=5) == []


def test_receive_arguments(broker: Broker) -> None:
    make(broker)
    for count in (0, 5001):
        with pytest.raises(BadRequest):
            recv(broker, count=count)
    with pytest.raises(BadRequest, match="receive mode"):
        recv(broker, mode="peek")


def test_plain_receiver_on_a_session_queue(broker: Broker) -> None:
    make(broker, requires_session=True)
    send(broker, Message(b"x", session_id="s"))
    with pytest.raises(InvalidOperation, match="non-sessionful"):
        recv(broker)


# ===================================================================== TTL


def test_ttl_is_capped_by_the_queue_default(broker: Broker, clock: FakeClock) -> None:
    make(broker, default_message_time_to_live=10_000)
    send(
        broker,
        Message(b"default"),
        Message(b"longer", time_to_live_ms=60_000),
        Message(b"shorter", time_to_live_ms=2_000),
    )
    exp = [d.expires_at_ms for d in broker.messaging.peek(NS, "q", 3, None)]
    assert exp == [clock.now + 10_000, clock.now + 10_000, clock.now + 2_000]
    with pytest.raises(BadRequest, match="positive"):
        send(broker, Message(b"x", time_to_live_ms=0))


def test_expired_messages_are_not_received(broker: Broker, clock: FakeClock) -> None:
    make(broker)
    send(broker, Message(b"short", time_to_live_ms=2_000), Message(b"long", time_to_live_ms=9_000))
    clock.advance(2_000)
    got = recv(broker, count=10)
    assert bodies(got) == [b"long"]
    q = broker.management.queue_get(NS, "q")
    assert (q["total_message_count"], q["dead_letter_message_count"]) == (1, 0)
    assert recv(broker, "q/$deadletterqueue") == []


def test_expired_messages_are_dead_lettered_when_enabled(
    broker: Broker, clock: FakeClock, reopen: Reopen
) -> None:
    make(broker, dead_lettering_on_message_expiration=True)
    seqs = send(broker, Message(b"short", time_to_live_ms=2_000))
    clock.advance(2_001)
    assert recv(broker) == []
    q = broker.management.queue_get(NS, "q")
    assert (q["active_message_count"], q["dead_letter_message_count"]) == (0, 1)
    (dead,) = recv(broker, "q/$deadletterqueue")
    assert dead.sequence_number == seqs[0]
    assert dead.changes is not None
    assert dead.changes["DeadLetterReason"] == "TTLExpiredException"
    # TTL does not apply inside the DLQ (daemon/README.md §4.3); locks do not survive a restart.
    clock.advance(86_400_000)
    b = reopen()
    (again,) = recv(b, "q/$deadletterqueue")
    assert again.sequence_number == seqs[0]


def test_expired_message_reaches_an_already_polled_dlq(broker: Broker, clock: FakeClock) -> None:
    make(broker, dead_lettering_on_message_expiration=True)
    send(broker, Message(b"short", time_to_live_ms=2_000))
    assert recv(broker, "q/$deadletterqueue") == []  # the DLQ consumer polls: empty
    clock.advance(2_000)
    assert recv(broker) == []  # expires → dead-lettered
    assert broker.management.queue_get(NS, "q")["dead_letter_message_count"] == 1
    assert len(recv(broker, "q/$deadletterqueue")) == 1


def test_locked_message_expiring_is_handled_on_release(broker: Broker, clock: FakeClock) -> None:
    """daemon/README.md §6.3: once its lock lapses, an expired message is not delivered again."""
    make(broker, lock_duration=5_000)
    send(broker, Message(b"x", time_to_live_ms=3_000))
    assert len(recv(broker)) == 1
    clock.advance(5_000)
    broker.housekeeping.tick()
    assert recv(broker) == []
    assert broker.management.queue_get(NS, "q")["total_message_count"] == 0


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
def test_status_blocks_one_direction(
    broker: Broker, reopen: Reopen, status: str, send_ok: bool, receive_ok: bool
) -> None:
    make(broker)
    send(broker, Message(b"before"), Message(b"before"))
    broker.management.queue_update(NS, "q", {"status": status})
    b = broker
    for restart in (False, True):
        if restart:
            b = reopen()
        assert b.management.queue_get(NS, "q")["status"] == status
        if send_ok:
            send(b, Message(b"x"))
        else:
            with pytest.raises(MessagingEntityDisabled):
                send(b, Message(b"x"))
        if receive_ok:
            assert len(recv(b, mode="receive-and-delete")) == 1
        else:
            with pytest.raises(MessagingEntityDisabled):
                recv(b)


def test_unknown_status(broker: Broker) -> None:
    with pytest.raises(BadRequest, match="status"):
        make(broker, status="Paused")


# ===================================================================== counts and durability


def test_queue_get_counts(broker: Broker, clock: FakeClock, reopen: Reopen) -> None:
    make(broker, enable_partitioning=True, max_delivery_count=1)
    msgs = [Message(bytes([k]) * (k + 1), partition_key=f"k{k}") for k in range(6)]
    send(broker, *msgs)
    send(broker, Message(b"later", scheduled_enqueue_time_ms=clock.now + 60_000))
    got = recv(broker, count=10)
    assert len(got) == 6
    dead = next(d for d in got if bodies([d]) == [b"\x02" * 3])
    done = next(d for d in got if bodies([d]) == [b"\x05" * 6])
    assert settle(broker, "abandon", dead) == ["ok"]
    assert settle(broker, "complete", done) == ["ok"]
    q = broker.management.queue_get(NS, "q")
    assert q["active_message_count"] == 4
    assert q["dead_letter_message_count"] == 1
    assert q["scheduled_message_count"] == 1
    assert q["total_message_count"] == 6
    live = [m for k, m in enumerate(msgs) if k != 5] + [
        Message(b"later", scheduled_enqueue_time_ms=clock.now + 60_000)
    ]
    assert q["size_in_bytes"] == sum(len(encode_message(m)) for m in live)
    per = q["partitions"]
    assert len(per) == 16
    assert sum(p["active_message_count"] for p in per) == 4
    assert sum(p["dead_letter_message_count"] for p in per) == 1
    assert sum(p["size_in_bytes"] for p in per) == q["size_in_bytes"]
    dead_pid = dead.sequence_number >> 48
    assert per[dead_pid]["dead_letter_message_count"] == 1
    for crash in (False, True):
        b = reopen(crash=crash)
        again = b.management.queue_get(NS, "q")
        assert {k: v for k, v in again.items() if k != "accessed_at_utc"} == {
            k: v for k, v in q.items() if k != "accessed_at_utc"
        }


def everything(b: Broker) -> dict[str, Any]:
    """All durable state visible through the API."""
    out: dict[str, Any] = {
        "namespaces": sorted(b.management.namespace_list(), key=lambda n: n["name"])
    }
    for ns in b.management.namespace_list():
        name = ns["name"]
        for q in b.management.queue_list(name):
            desc = b.management.queue_get(name, q["name"])
            desc.pop("accessed_at_utc")
            out[f"{name}/{q['name']}"] = desc
            if desc["status"] in ("Disabled", "ReceiveDisabled"):
                continue  # peeking is receiving: refused on these (daemon/README.md §17)
            for sub in ("", "/$deadletterqueue"):
                msgs = []
                for p in range(desc["partition_count"]):
                    start = (p << 48) if desc["partition_count"] > 1 else 0
                    for d in b.messaging.peek(name, q["name"] + sub, 250, start):
                        msgs.append(
                            (
                                d.sequence_number,
                                d.enqueued_time_ms,
                                d.delivery_count,
                                d.expires_at_ms,
                                d.partition_id,
                                d.state,
                                bytes(d.payload),
                                d.changes,
                            )
                        )
                out[f"{name}/{q['name']}{sub}"] = msgs
    return out


@pytest.mark.parametrize("crash", [False, True])
def test_everything_survives_a_restart(
    broker: Broker, clock: FakeClock, reopen: Reopen, crash: bool
) -> None:
    broker.management.namespace_create("premiumns", "premium", 2, 2)
    broker.management.namespace_create("basicns", "basic")
    make(broker, "plain", max_delivery_count=2, lock_duration=5_000, user_metadata="u")
    make(broker, "parted", enable_partitioning=True, requires_duplicate_detection=True)
    make(broker, "sessions", requires_session=True, status="SendDisabled")
    make(broker, "prem", ns="premiumns", dead_lettering_on_message_expiration=True)
    make(broker, "b", ns="basicns")
    broker.management.queue_update(NS, "sessions", {"status": "ReceiveDisabled"})
    send(broker, Message(b"s", session_id="s1"), path="sessions")
    send(broker, *[Message(bytes([k]), message_id=f"m{k}") for k in range(20)], path="parted")
    send(
        broker,
        *[Message(b"p%d" % k, time_to_live_ms=1_000 * (k + 1)) for k in range(4)],
        path="plain",
    )
    send(broker, Message(b"sched", scheduled_enqueue_time_ms=clock.now + 99_000), path="plain")
    send(broker, *[Message(b"x")] * 5, ns="premiumns", path="prem")
    send(broker, Message(b"basic"), ns="basicns", path="b")
    # Settlements of every kind.
    got = recv(broker, "parted", count=6)
    settle(broker, "complete", *got[:3], path="parted")
    settle(broker, "abandon", got[3], path="parted", properties={"retry": True})
    first = recv(broker, "plain")
    settle(broker, "abandon", *first, path="plain")
    again = recv(broker, "plain")
    settle(broker, "abandon", *again, path="plain")  # → DLQ (max delivery 2)
    clock.advance(2_500)
    recv(broker, "prem", ns="premiumns", count=2, mode="receive-and-delete")
    recv(broker, "plain", count=1)  # expires p1, locks p2
    before = everything(broker)
    assert before[f"{NS}/plain/$deadletterqueue"]
    b = reopen(crash=crash)
    assert everything(b) == before
    # Sequence numbers continue where they stopped.
    assert send(b, Message(b"next"), path="plain") == [6]
    b = reopen(crash=crash)
    assert peek(b, "plain", start=6)[0][0] == 6


@pytest.mark.parametrize("crash", [False, True])
def test_locks_do_not_survive_a_restart(broker: Broker, reopen: Reopen, crash: bool) -> None:
    make(broker, enable_partitioning=True)
    seqs = send(broker, Message(b"x", partition_key="k"))
    (d,) = recv(broker)
    assert recv(broker) == []
    b = reopen(crash=crash)
    (again,) = recv(b)
    assert (again.sequence_number, again.delivery_count) == (seqs[0], 2)
    assert settle(b, "complete", d) == ["MessageLockLost"]
    assert settle(b, "complete", again) == ["ok"]


def test_completions_survive_a_crash(broker: Broker, reopen: Reopen) -> None:
    """Regression: journal replay without a checkpoint crashed with KeyError."""
    make(broker)
    send(broker, *[Message(bytes([k])) for k in range(5)])
    got = recv(broker, count=3)
    settle(broker, "complete", *got)
    b = reopen(crash=True)
    assert [p[0] for p in peek(b)] == [4, 5]
    assert b.management.queue_get(NS, "q")["active_message_count"] == 2


# ===================================================================== known bugs


@pytest.mark.parametrize("kind", ["queue", "namespace"])
def test_interrupted_delete_stays_deleted(
    broker: Broker, reopen: Reopen, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    broker.management.namespace_create("otherns")
    make(broker, ns="otherns")
    # The crash: the atomic rename happened, the recursive delete did not.
    with monkeypatch.context() as m:
        m.setattr(shutil, "rmtree", lambda *a, **k: None)
        if kind == "queue":
            broker.management.queue_delete("otherns", "q")
        else:
            broker.management.namespace_delete("otherns")
    b = reopen()
    if kind == "queue":
        assert b.management.queue_list("otherns") == []
    else:
        assert [n["name"] for n in b.management.namespace_list()] == [NS]


def test_out_of_range_schedule_is_a_bad_request(broker: Broker) -> None:
    make(broker)
    with pytest.raises(BadRequest):
        send(broker, Message(b"x", scheduled_enqueue_time_ms=2**63))


def test_scheduled_message_becomes_receivable(broker: Broker, clock: FakeClock) -> None:
    make(broker)
    send(broker, Message(b"later", scheduled_enqueue_time_ms=clock.now + 10_000))
    assert recv(broker) == []
    clock.advance(10_000)
    broker.housekeeping.tick()
    assert bodies(recv(broker)) == [b"later"]
