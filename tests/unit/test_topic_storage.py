"""A topic's storage (sbctld.storage.topic): every message written once per topic, each
subscription's state in the topic partition's journal and checkpoint.

Bytes on disk for 1 and 10 subscriptions, references held per subscription, segment
deletion once every subscription settled, subscription deletion and late creation, ids
never reused, and recovery from torn journal and segment tails (files are cut and damaged
on purpose, as tests/unit/test_storage.py does for queues).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import presenting
from sbctl.core.delivered import Delivered
from sbctl.core.layout import CHECKPOINT_FILE as CHECKPOINT
from sbctl.core.layout import JOURNAL_SUFFIX, MIRROR_SUFFIX, SEGMENT_SUFFIX, segment_name
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.records import BATCH_OVERHEAD, RECORD_OVERHEAD, Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.storage.log import DEFAULT_SEGMENT_BYTES
from sbctld.storage.sync import Syncer
from sbctld.storage.topic import TopicLog
from sbctld.topic import Topic

NS = DEFAULT_NAMESPACE
ACTIVE, DEFERRED, DEADLETTERED = 1, 2, 4


class Brokers:
    """Brokers on one data dir. ``restart(b, crash=True, between=...)`` leaves ``b`` as a
    crash would (written and synced, nothing checkpointed or closed), runs ``between`` (to
    damage files), then opens a new broker; crashed brokers' descriptors close at the end."""

    def __init__(self, data_dir: Path, clock: FakeClock) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.live: list[Broker] = []
        self.crashed: list[Broker] = []

    def open(self, segment_bytes: int = DEFAULT_SEGMENT_BYTES) -> Broker:
        b = presenting.Presented(
            Broker(
                self.data_dir,
                self.clock,
                Syncer("os"),
                segment_bytes=segment_bytes,
                default_credits_per_second=0,
            )
        )
        self.live.append(b)
        return b

    def restart(
        self, b: Broker, *, crash: bool = False, between: Callable[[], None] | None = None
    ) -> Broker:
        self.live.remove(b)
        if crash:
            b.syncer.sync_now()
            self.crashed.append(b)
        else:
            b.housekeeping.close()
        if between is not None:
            between()
        return self.open(b.segment_bytes)

    def close_all(self) -> None:
        for b in self.live:
            b.housekeeping.close()
        for b in self.crashed:  # only their file descriptors: nothing more is written
            for ns in b.namespaces.values():
                for entity in [*ns.queues.values(), *ns.topics.values()]:
                    entity.close()
            b.syncer.sync_now()


@pytest.fixture
def brokers(tmp_path: Path, clock: FakeClock) -> Iterator[Brokers]:
    made = Brokers(tmp_path / "data", clock)
    yield made
    made.close_all()


# ===================================================================== helpers


def make_topic(b: Broker, partitioned: bool = False, name: str = "t", **options: Any) -> Topic:
    b.management.topic_create(NS, name, {"enable_partitioning": partitioned, **options})
    return b.topic(NS, name)


def sub(b: Broker, name: str, topic_name: str = "t", **options: Any) -> None:
    b.management.subscription_create(NS, topic_name, name, options)


def S(name: str, topic_name: str = "t") -> str:
    return f"{topic_name}/subscriptions/{name}"


def DL(name: str) -> str:
    return f"{S(name)}/$deadletterqueue"


def M(text: str, **kw: Any) -> Message:
    props = kw.pop("props", None)
    return Message(text.encode(), application_properties=props, **kw)


def recv(b: Broker, path: str, mode: str = "peek-lock") -> list[Delivered]:
    out: list[Delivered] = []
    while got := b.messaging.receive(NS, path, 100, mode):
        out += got
        if mode == "peek-lock":
            break
    return out


def settle(b: Broker, op: str, path: str, ds: list[Delivered], **kw: Any) -> None:
    results = b.messaging.settle(NS, path, op, [d.lock_token or "" for d in ds], **kw)
    assert [r.get("ok") for r in results] == [True] * len(ds), results


def body(d: Delivered) -> str:
    return decode_message(d.payload).body.decode()


def peek(b: Broker, path: str) -> dict[str, int]:
    """Body -> state of every peekable message (every partition)."""
    out: dict[str, int] = {}
    start = 0
    while page := b.messaging.peek(NS, path, 250, start):  # walks on across partitions (§0.1.7)
        for d in page:
            assert body(d) not in out
            out[body(d)] = d.state
        start = page[-1].sequence_number + 1
    return out


def logs(t: Topic) -> list[TopicLog]:
    """The topic's stores (a test may look inside them; the daemon goes through Partition)."""
    out = []
    for p in t.partitions:
        assert isinstance(p.log, TopicLog)
        out.append(p.log)
    return out


def files_of(t: Topic, suffix: str) -> list[Path]:
    return sorted(f for log in logs(t) for f in log.directory.glob(f"*{suffix}"))


def disk_bytes(t: Topic, suffix: str) -> int:
    return sum(f.stat().st_size for f in files_of(t, suffix))


def record_bytes(*messages: Message) -> int:
    """Segment bytes of these messages sent one per batch."""
    return sum(BATCH_OVERHEAD + RECORD_OVERHEAD + len(encode_message(m)) for m in messages)


def segments(t: Topic, pid: int = 0) -> list[str]:
    return sorted(p.name for p in logs(t)[pid].directory.glob(f"*{SEGMENT_SUFFIX}"))


def journal(t: Topic, pid: int = 0) -> Path:
    (path,) = logs(t)[pid].directory.glob(f"*{JOURNAL_SUFFIX}")
    return path


def mirror(path: Path) -> Path:
    return path.with_suffix(MIRROR_SUFFIX)


def size(b: Broker, topic_name: str = "t") -> int:
    got: int = b.topic(NS, topic_name).describe().size_in_bytes
    return got


# ===================================================================== written once


def test_a_message_body_is_written_once(brokers: Brokers, partitioned: bool) -> None:
    b = brokers.open()
    one = make_topic(b, partitioned, "one")
    ten = make_topic(b, partitioned, "ten")
    sub(b, "s", "one")
    for k in range(10):
        sub(b, f"s{k}", "ten")
    msgs = [M(chr(97 + k) * (2_000 + 100 * k), partition_key=f"k{k}") for k in range(12)]
    for m in msgs:
        b.messaging.send(NS, "one", [m])
        b.messaging.send(NS, "ten", [m])
    want = record_bytes(*msgs)
    assert disk_bytes(one, SEGMENT_SUFFIX) == want
    assert disk_bytes(ten, SEGMENT_SUFFIX) == want  # not 10 copies
    # Routing ten subscriptions costs journal bytes, a few per message (each journal batch
    # is written twice, sbctld.storage.journal), never a body.
    payload = sum(len(m.body) for m in msgs)
    assert disk_bytes(ten, JOURNAL_SUFFIX) < payload // 5
    assert size(b, "one") == size(b, "ten") == sum(len(encode_message(m)) for m in msgs)
    for k in range(10):
        assert len(peek(b, S(f"s{k}", "ten"))) == 12
    b = brokers.restart(b)
    ten = b.topic(NS, "ten")
    assert disk_bytes(ten, SEGMENT_SUFFIX) == want
    assert size(b, "ten") == sum(len(encode_message(m)) for m in msgs)


def test_a_completion_in_one_subscription_keeps_the_message_for_the_others(
    brokers: Brokers, partitioned: bool
) -> None:
    b = brokers.open()
    make_topic(b, partitioned)
    for name in ("a", "b", "c"):
        sub(b, name)
    msgs = [M("x"), M("y")]
    b.messaging.send(NS, "t", msgs)
    settle(b, "complete", S("a"), recv(b, S("a")))
    assert len(recv(b, S("b"), "receive-and-delete")) == 2
    full = sum(len(encode_message(m)) for m in msgs)
    for crash in (True, False):
        b = brokers.restart(b, crash=crash)
        assert peek(b, S("a")) == {} and peek(b, S("b")) == {}
        assert peek(b, S("c")) == {"x": ACTIVE, "y": ACTIVE}
        assert size(b) == full
    b.housekeeping.checkpoint()
    b = brokers.restart(b, crash=True)
    assert peek(b, S("c")) == {"x": ACTIVE, "y": ACTIVE}
    assert sorted(body(d) for d in recv(b, S("c"), "receive-and-delete")) == ["x", "y"]
    assert size(b) == 0
    b = brokers.restart(b, crash=True)
    assert size(b) == 0 and peek(b, S("c")) == {}


# ===================================================================== segments and checkpoints


def one_per_segment(brokers: Brokers, n: int, subs: tuple[str, ...] = ("a", "b")) -> Broker:
    """A plain topic whose segments hold one message each: m0 … m<n-1>."""
    one = record_bytes(M("m0"))
    b = brokers.open(segment_bytes=one + one // 2)
    t = make_topic(b)
    for name in subs:
        sub(b, name)
    for k in range(n):
        b.messaging.send(NS, "t", [M(f"m{k}")])
    assert segments(t) == [segment_name(k) for k in range(1, n + 1)]
    return b


def take(b: Broker, path: str, *names: str) -> list[Delivered]:
    got = {body(d): d for d in recv(b, path)}
    out = [got.pop(n) for n in names]
    settle(b, "abandon", path, list(got.values()))
    return out


def test_checkpoint_drops_segments_once_every_subscription_settled(brokers: Brokers) -> None:
    b = one_per_segment(brokers, 5)
    t = b.topic(NS, "t")
    settle(b, "complete", S("a"), recv(b, S("a")))
    b.housekeeping.checkpoint()
    b.housekeeping.checkpoint()  # settled segments go one checkpoint later (generations)
    assert segments(t) == [segment_name(k) for k in range(1, 6)]  # "b" holds them all
    settle(b, "complete", S("b"), take(b, S("b"), "m0", "m1"))
    settle(b, "defer", S("b"), take(b, S("b"), "m2"))
    settle(b, "dead-letter", S("b"), take(b, S("b"), "m3"))
    b.housekeeping.checkpoint()
    b.housekeeping.checkpoint()  # settled segments go one checkpoint later (generations)
    # m0, m1 settled everywhere; m2 deferred and m3 dead-lettered in "b" still count.
    assert segments(t) == [segment_name(k) for k in (3, 4, 5)]
    assert CHECKPOINT in os.listdir(logs(t)[0].directory)
    for crash in (True, False):
        b = brokers.restart(b, crash=crash)
        t = b.topic(NS, "t")
        assert peek(b, S("b")) == {"m2": DEFERRED, "m4": ACTIVE}
        assert peek(b, DL("b")) == {"m3": DEADLETTERED}
        assert peek(b, S("a")) == {}
    (m3,) = recv(b, DL("b"))
    settle(b, "complete", DL("b"), [m3])
    (m4,) = recv(b, S("b"))
    settle(b, "complete", S("b"), [m4])
    b.housekeeping.checkpoint()
    b.housekeeping.checkpoint()  # settled segments go one checkpoint later (generations)
    assert segments(t) == [segment_name(3), segment_name(5)]  # the last one takes appends
    (m2,) = b.messaging.receive_deferred(NS, S("b"), [3], "receive-and-delete")
    assert body(m2) == "m2"
    b.housekeeping.checkpoint()
    b.housekeeping.checkpoint()  # settled segments go one checkpoint later (generations)
    assert segments(t) == [segment_name(5)]
    assert size(b) == 0
    b = brokers.restart(b, crash=True)
    t = b.topic(NS, "t")
    assert size(b) == 0 and peek(b, S("a")) == {} and peek(b, S("b")) == {}
    assert b.messaging.send(NS, "t", [M("m5")]) == [6]
    assert peek(b, S("a")) == peek(b, S("b")) == {"m5": ACTIVE}


@pytest.mark.parametrize("crash", [False, True])
def test_deleting_a_subscription_releases_its_references(brokers: Brokers, crash: bool) -> None:
    b = one_per_segment(brokers, 3, ("a", "b", "c"))
    t = b.topic(NS, "t")
    settle(b, "complete", S("a"), recv(b, S("a")))
    settle(b, "dead-letter", S("c"), take(b, S("c"), "m0"))
    settle(b, "complete", S("c"), take(b, S("c"), "m1", "m2"))
    b.management.subscription_delete(NS, "t", "c")  # held m0 in its DLQ
    assert size(b) == len(encode_message(M("m0"))) * 3  # "b" still holds all three
    b = brokers.restart(b, crash=crash)
    t = b.topic(NS, "t")
    assert size(b) == len(encode_message(M("m0"))) * 3
    b.management.subscription_delete(NS, "t", "b")
    assert size(b) == 0
    b = brokers.restart(b, crash=crash)
    t = b.topic(NS, "t")
    assert size(b) == 0
    assert b.management.topic_get(NS, "t")["subscription_count"] == 1
    b.messaging.send(NS, "t", [M("m3")])
    settle(b, "complete", S("a"), recv(b, S("a")))
    b.housekeeping.checkpoint()
    b.housekeeping.checkpoint()  # settled segments go one checkpoint later (generations)
    assert segments(t) == [segment_name(4)]
    sub(b, "b")  # the same name again: nothing of the old one
    assert peek(b, S("b")) == {} and peek(b, DL("b")) == {}


def test_a_checkpoint_after_deleting_the_last_holder_drops_its_segments(
    brokers: Brokers,
) -> None:
    b = one_per_segment(brokers, 3)
    t = b.topic(NS, "t")
    settle(b, "complete", S("a"), recv(b, S("a")))
    b.housekeeping.checkpoint()
    b.housekeeping.checkpoint()  # settled segments go one checkpoint later (generations)
    assert len(segments(t)) == 3  # "b" holds every message
    b.management.subscription_delete(NS, "t", "b")
    assert size(b) == 0
    b.housekeeping.checkpoint()
    b.housekeeping.checkpoint()  # settled segments go one checkpoint later (generations)
    assert segments(t) == [segment_name(3)]


@pytest.mark.parametrize("crash", [False, True])
def test_a_subscription_created_later_sees_no_earlier_message(
    brokers: Brokers, partitioned: bool, crash: bool
) -> None:
    b = brokers.open()
    make_topic(b, partitioned)
    sub(b, "early")
    b.messaging.send(NS, "t", [M("before", partition_key="k")])
    b.housekeeping.checkpoint()
    b.messaging.send(NS, "t", [M("before-too", partition_key="k")])
    sub(b, "late")
    b.messaging.send(NS, "t", [M("after", partition_key="k")])
    for _ in range(2):
        b = brokers.restart(b, crash=crash)
        assert peek(b, S("late")) == {"after": ACTIVE}
        assert peek(b, S("early")) == {"before": ACTIVE, "before-too": ACTIVE, "after": ACTIVE}


@pytest.mark.parametrize("checkpoint", [False, True])
@pytest.mark.parametrize("crash", [False, True])
def test_subscription_ids_are_never_reused(brokers: Brokers, crash: bool, checkpoint: bool) -> None:
    """Journal entries (and checkpointed state) of a deleted subscription must not apply
    to a new one of the same name (sbctld.storage.topic: ids are never reused)."""
    b = brokers.open()
    make_topic(b)
    sub(b, "a")
    sub(b, "keep")
    b.messaging.send(NS, "t", [M("m1"), M("m2"), M("m3")])
    settle(b, "defer", S("a"), take(b, S("a"), "m1"))
    settle(b, "dead-letter", S("a"), take(b, S("a"), "m2"))
    if checkpoint:
        b.housekeeping.checkpoint()
    old_id = b.topic(NS, "t").subscriptions["a"].id
    b.management.subscription_delete(NS, "t", "a")
    sub(b, "a")
    new_id = b.topic(NS, "t").subscriptions["a"].id
    assert new_id > old_id
    assert peek(b, S("a")) == {} and peek(b, DL("a")) == {}
    b.messaging.send(NS, "t", [M("m4")])
    for _ in range(2):
        b = brokers.restart(b, crash=crash)
        assert peek(b, S("a")) == {"m4": ACTIVE}
        assert peek(b, DL("a")) == {}
        assert b.management.subscription_get(NS, "t", "a")["total_message_count"] == 1
        assert peek(b, S("keep")) == dict.fromkeys(("m1", "m2", "m3", "m4"), ACTIVE)
    sub(b, "other")
    assert b.topic(NS, "t").subscriptions["other"].id > new_id
    assert recv(b, S("keep"), "receive-and-delete")
    assert recv(b, S("a"), "receive-and-delete")
    assert size(b) == 0
    b = brokers.restart(b, crash=True)
    assert size(b) == 0


def test_checkpointed_subscription_state_is_restored(brokers: Brokers, clock: FakeClock) -> None:
    b = brokers.open()
    make_topic(b)
    sub(b, "a", lock_duration=5_000)
    sub(b, "b")
    b.messaging.send(NS, "t", [M("m1"), M("m2"), M("m3"), M("m4")])
    settle(b, "defer", S("a"), take(b, S("a"), "m1"), properties={"d": 1})
    settle(b, "dead-letter", S("a"), take(b, S("a"), "m2"), reason="R", description="D")
    take(b, S("a"), "m3")  # and keep it locked
    clock.advance(5_000)
    b.housekeeping.tick()  # m3's lock ran out
    b.housekeeping.checkpoint()
    settle(b, "complete", S("b"), take(b, S("b"), "m4"))  # after the checkpoint: journal
    b = brokers.restart(b, crash=True)
    assert peek(b, S("a")) == {"m1": DEFERRED, "m3": ACTIVE, "m4": ACTIVE}
    got = {body(d): d for d in b.messaging.peek(NS, S("a"), 10, None)}
    assert got["m3"].delivery_count == 3 and got["m4"].delivery_count == 3
    assert got["m1"].changes == {"d": 1}
    (dead,) = b.messaging.peek(NS, DL("a"), 10, None)
    assert dead.changes == {"DeadLetterReason": "R", "DeadLetterErrorDescription": "D"}
    assert peek(b, S("b")) == dict.fromkeys(("m1", "m2", "m3"), ACTIVE)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_subscription_ttl_cap_is_rebuilt_on_recovery(
    brokers: Brokers, clock: FakeClock, checkpoint: bool
) -> None:
    """A subscription's lower default TTL caps its copies (daemon/README.md §6.1), before and after
    a
    checkpoint, across crashes."""
    b = brokers.open()
    make_topic(b, default_message_time_to_live=60_000)
    sub(b, "short", default_message_time_to_live=5_000)
    sub(b, "plain")
    t0 = clock.now
    b.messaging.send(NS, "t", [M("m1")])
    if checkpoint:
        b.housekeeping.checkpoint()
    clock.advance(1_000)
    b.messaging.send(NS, "t", [M("m2"), M("m3", time_to_live_ms=2_000)])
    want = {
        "short": {"m1": t0 + 5_000, "m2": t0 + 6_000, "m3": t0 + 3_000},
        "plain": {"m1": t0 + 60_000, "m2": t0 + 61_000, "m3": t0 + 3_000},
    }
    for _ in range(2):
        b = brokers.restart(b, crash=True)
        for name, expiries in want.items():
            got = {body(d): d.expires_at_ms for d in b.messaging.peek(NS, S(name), 10, None)}
            assert got == expiries, name
    clock.advance(4_000)  # t0 + 5 s
    assert sorted(body(d) for d in recv(b, S("short"), "receive-and-delete")) == ["m2"]
    assert sorted(body(d) for d in recv(b, S("plain"), "receive-and-delete")) == ["m1", "m2"]


@pytest.mark.parametrize("checkpoint", [False, True])
def test_a_scheduled_topic_message_activates_once_across_crashes(
    brokers: Brokers, clock: FakeClock, partitioned: bool, checkpoint: bool
) -> None:
    b = brokers.open()
    make_topic(b, partitioned)
    sub(b, "a")
    sub(b, "b")
    (seq,) = b.messaging.send(NS, "t", [M("later", scheduled_enqueue_time_ms=clock.now + 10_000)])
    if checkpoint:
        b.housekeeping.checkpoint()
    b = brokers.restart(b, crash=True)
    assert b.management.topic_get(NS, "t")["scheduled_message_count"] == 1
    clock.advance(10_000)
    b.housekeeping.tick()
    if checkpoint:
        b.housekeeping.checkpoint()
    for _ in range(2):
        b = brokers.restart(b, crash=True)
        b.housekeeping.tick()
        assert b.management.topic_get(NS, "t")["scheduled_message_count"] == 0
        for name in ("a", "b"):
            (d,) = b.messaging.peek(NS, S(name), 10, None)
            assert body(d) == "later" and d.sequence_number != seq
    assert [body(d) for d in recv(b, S("a"), "receive-and-delete")] == ["later"]
    assert [body(d) for d in recv(b, S("b"), "receive-and-delete")] == ["later"]
    assert size(b) == 0


# ===================================================================== torn tails


def journal_batches(b: Broker) -> list[int]:
    """Two subscriptions and a journal history; returns the journal size after each step:
    0 the batch routed, 1 "a" completes m1, 2 "b" dead-letters m2, 3 "a" defers m3."""
    t = make_topic(b)
    sub(b, "a")
    sub(b, "b")
    b.messaging.send(NS, "t", [M("m1"), M("m2"), M("m3")])
    sizes = [journal(t).stat().st_size]
    got = {body(d): d for d in recv(b, S("a"))}
    settle(b, "abandon", S("a"), [got["m2"], got["m3"]])
    settle(b, "complete", S("a"), [got["m1"]])
    sizes.append(journal(t).stat().st_size)
    got = {body(d): d for d in recv(b, S("b"))}
    settle(b, "abandon", S("b"), [got["m1"], got["m3"]])
    settle(b, "dead-letter", S("b"), [got["m2"]])
    sizes.append(journal(t).stat().st_size)
    settle(b, "defer", S("a"), take(b, S("a"), "m3"))
    sizes.append(journal(t).stat().st_size)
    return sizes


@pytest.mark.parametrize("damage", ["cut-1", "cut-5", "flip-last", "garbage"])
def test_torn_journal_tail_keeps_the_other_subscriptions_state(
    brokers: Brokers, damage: str
) -> None:
    b = brokers.open()
    sizes = journal_batches(b)
    path = journal(b.topic(NS, "t"))

    def tear() -> None:
        data = bytearray(path.read_bytes())
        assert len(data) == sizes[3]
        if damage.startswith("cut-"):
            data = data[: len(data) - int(damage[4:])]
        elif damage == "flip-last":
            data[-2] ^= 0x20
        else:
            data += b"\x07\x00\x00\x00junk"
        path.write_bytes(bytes(data))

    b = brokers.restart(b, crash=True, between=tear)
    assert any("0 lost" in note for note in logs(b.topic(NS, "t"))[0].notes)
    # Garbage after the journal is cut away; the other damage hits the journal's copy of
    # the last batch only ("a" defers m3): the mirror's copy applies.
    want_a = {"m2": ACTIVE, "m3": DEFERRED}
    assert peek(b, S("a")) == want_a
    assert peek(b, S("b")) == {"m1": ACTIVE, "m3": ACTIVE}
    assert peek(b, DL("b")) == {"m2": DEADLETTERED}
    b.messaging.send(NS, "t", [M("m4")])
    b = brokers.restart(b, crash=True)
    assert peek(b, S("a")) == {**want_a, "m4": ACTIVE}
    assert peek(b, S("b")) == {"m1": ACTIVE, "m3": ACTIVE, "m4": ACTIVE}
    assert peek(b, DL("b")) == {"m2": DEADLETTERED}


def test_journal_torn_before_a_batch_was_routed(brokers: Brokers) -> None:
    """A batch whose routing entries were lost reached nobody: dropped, and nothing else
    changes."""
    b = brokers.open()
    t = make_topic(b)
    sub(b, "a")
    sub(b, "b")
    b.messaging.send(NS, "t", [M("kept")])
    settle(b, "complete", S("a"), recv(b, S("a")))
    before = journal(t).stat().st_size
    b.messaging.send(NS, "t", [M("lost")])

    def tear() -> None:
        os.truncate(journal(t), before)
        os.truncate(mirror(journal(t)), before)

    b = brokers.restart(b, crash=True, between=tear)
    assert peek(b, S("a")) == {}
    assert peek(b, S("b")) == {"kept": ACTIVE}
    assert size(b) == len(encode_message(M("kept")))
    assert b.messaging.send(NS, "t", [M("next")]) == [3]
    b = brokers.restart(b, crash=True)
    assert peek(b, S("b")) == {"kept": ACTIVE, "next": ACTIVE}


@pytest.mark.parametrize("with_checkpoint", [False, True])
@pytest.mark.parametrize("cut", [1, BATCH_OVERHEAD, -1])
def test_torn_segment_tail(brokers: Brokers, with_checkpoint: bool, cut: int) -> None:
    """The last batch is torn: its message is lost, acknowledged state of the earlier ones
    is kept in every subscription, and the lost message's journal entries never apply to
    the message that reuses its sequence number."""
    b = brokers.open()
    t = make_topic(b)
    sub(b, "a")
    sub(b, "b")
    b.management.rule_delete(NS, "t", "b", "$Default")
    b.management.rule_create(NS, "t", "b", "two", {"type": "sql", "sql_expression": "n <> 3"}, None)
    b.messaging.send(NS, "t", [M("m1", props={"n": 1})])
    settle(b, "complete", S("a"), recv(b, S("a")))
    if with_checkpoint:
        b.housekeeping.checkpoint()
    seg = logs(t)[0].segments[-1].path
    end_of_first = seg.stat().st_size
    b.messaging.send(NS, "t", [M("m2", props={"n": 2})])  # to "a" and "b"
    settle(b, "dead-letter", S("b"), take(b, S("b"), "m2"))  # about the torn message
    end = seg.stat().st_size

    def tear() -> None:
        keep = end_of_first + cut if cut > 0 else end + cut
        os.truncate(seg, keep)

    b = brokers.restart(b, crash=True, between=tear)
    t = b.topic(NS, "t")
    notes = logs(t)[0].notes
    assert any("torn bytes" in note for note in notes), notes
    assert any("journal entries name messages lost" in note for note in notes), notes
    assert peek(b, S("a")) == {}
    assert peek(b, S("b")) == {"m1": ACTIVE}
    assert peek(b, DL("b")) == {}
    # m3 takes sequence number 2 and reaches "a" only; m2's entries must not touch it.
    assert b.messaging.send(NS, "t", [M("m3", props={"n": 3})]) == [2]
    for crash in (True, True, False):
        b = brokers.restart(b, crash=crash)
        assert peek(b, S("a")) == {"m3": ACTIVE}
        assert peek(b, S("b")) == {"m1": ACTIVE}
        assert peek(b, DL("b")) == {}
        got = b.messaging.peek(NS, S("a"), 10, None)
        assert [(d.sequence_number, d.delivery_count) for d in got] == [(2, 0)]
