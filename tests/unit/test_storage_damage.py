"""Damaged data dirs: a flipped byte, a damaged journal batch, a lost checkpoint. What was
acknowledged is still there, what was completed does not come back, nothing corrupt is
served, and the rest keeps working (daemon/README.md §0.4)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import presenting
from conftest import crash
from sbctl.core.layout import CHECKPOINT_FILE as CHECKPOINT
from sbctl.core.layout import JOURNAL_SUFFIX, numbered
from sbctl.core.layout import PREVIOUS_CHECKPOINT_FILE as PREVIOUS
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.storage.sync import Syncer

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker
open_broker = presenting.open_broker

NS = DEFAULT_NAMESPACE


def peek_all(b: Broker, path: str) -> list[bytes]:
    return [decode_message(d.payload).body for d in b.messaging.peek(NS, path, 250, None)]


def store(b: Broker, path: str) -> Path:
    entity, _ = b.resolve(NS, path)
    return entity.partitions[0].log.directory


def test_a_flipped_byte_is_never_served_and_the_rest_works(
    open_broker: Callable[[], Broker],
) -> None:
    b = open_broker()
    b.management.queue_create(NS, "q", {})
    b.messaging.send(NS, "q", [Message(f"message-{k:03d}".encode()) for k in range(10)])
    b.housekeeping.checkpoint()  # the damage is in bytes a checkpoint covers: found on read
    log = b.queue(NS, "q").partitions[0].log
    seg = log.segments[0].path  # type: ignore[union-attr]
    data = bytearray(seg.read_bytes())
    at = data.find(b"message-004")
    data[at + 9] ^= 0x01
    seg.write_bytes(bytes(data))
    got = peek_all(b, "q")
    assert b"message-004" not in got and len(got) == 9
    assert b.management.queue_get(NS, "q")["corrupt_message_count"] == 1
    received = b.messaging.receive(NS, "q", 20, "peek-lock")
    assert len(received) == 9  # the reply never fails as a whole; nothing corrupt locked
    assert all(d.lock_token for d in received)
    b.messaging.settle(NS, "q", "complete", [d.lock_token for d in received if d.lock_token])
    crash(b)
    b = open_broker()
    assert peek_all(b, "q") == []
    assert b.management.queue_get(NS, "q")["corrupt_message_count"] == 1


def test_one_damaged_journal_batch_loses_nothing(
    open_broker: Callable[[], Broker],
) -> None:
    b = open_broker()
    b.management.queue_create(NS, "q", {})
    b.messaging.send(NS, "q", [Message(f"m{k}".encode()) for k in range(100)])
    b.housekeeping.checkpoint()
    for d in b.messaging.receive(NS, "q", 100, "peek-lock"):
        assert d.lock_token
        b.messaging.settle(NS, "q", "complete", [d.lock_token])  # one journal batch each
    crash(b)
    ((_g, jpath),) = [
        (g, p) for g, p in numbered(store(b, "q"), JOURNAL_SUFFIX) if p.stat().st_size
    ]
    data = bytearray(jpath.read_bytes())
    data[len(data) // 2] ^= 0x40
    jpath.write_bytes(bytes(data))
    b = open_broker()
    left = peek_all(b, "q")
    assert left == []  # each journal batch is also in the mirror: that copy applies


@pytest.mark.parametrize("damage", ["delete", "flip"])
def test_a_lost_checkpoint_falls_back_to_the_previous_generation(
    open_broker: Callable[[], Broker], damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    b = open_broker()
    b.management.queue_create(NS, "q", {})
    b.management.topic_create(NS, "t", {})
    b.management.subscription_create(NS, "t", "s", {})
    b.messaging.send(NS, "q", [Message(f"q{k}".encode()) for k in range(100)])
    b.messaging.send(NS, "t", [Message(f"t{k}".encode()) for k in range(100)])
    b.housekeeping.checkpoint()
    got = b.messaging.receive(NS, "q", 100, "peek-lock")
    b.messaging.settle(NS, "q", "complete", [d.lock_token for d in got if d.lock_token])
    b.housekeeping.checkpoint()
    b.messaging.send(NS, "q", [Message(b"after")])
    crash(b)
    for path in ("q", "t"):
        ckpt = store(b, path) / CHECKPOINT
        # The queue has two generations; the topic one (its logs are rebuilt whole).
        assert (store(b, path) / PREVIOUS).exists() == (path == "q")
        if damage == "delete":
            ckpt.unlink()
        else:
            data = bytearray(ckpt.read_bytes())
            data[len(data) // 2] ^= 0x01
            ckpt.write_bytes(bytes(data))
    notes: list[str] = []
    b = presenting.Presented(Broker(b.data_dir, b.clock, Syncer("os"), report=notes.append))
    try:
        assert peek_all(b, "q") == [b"after"]  # completed messages never come back
        assert len(peek_all(b, "t/subscriptions/s")) == 100  # nor do subscriptions lose any
        assert any("previous generation" in n for n in notes), notes
    finally:
        b.housekeeping.close()


def test_recovery_checkpoints_so_the_next_restart_replays_nothing(
    open_broker: Callable[[], Broker],
) -> None:
    b = open_broker()
    b.management.queue_create(NS, "q", {})
    b.messaging.send(NS, "q", [Message(b"x")] * 50)
    got = b.messaging.receive(NS, "q", 20, "peek-lock")
    b.messaging.settle(NS, "q", "complete", [d.lock_token for d in got if d.lock_token])
    crash(b)
    b = open_broker()
    log = b.queue(NS, "q").partitions[0].log
    assert log.changes_since_checkpoint == 0
    assert (log.directory / CHECKPOINT).exists()
    gen = log.journal.generation  # type: ignore[union-attr]
    crash(b)
    b = open_broker()
    log = b.queue(NS, "q").partitions[0].log
    assert log.journal.generation == gen  # type: ignore[union-attr]  # nothing to replay, nothing rewritten
    assert len(peek_all(b, "q")) == 30
    assert os.path.getsize(log.directory / CHECKPOINT) > 0


def test_a_flipped_byte_in_a_topic_is_counted_in_every_subscription_holding_it(
    open_broker: Callable[[], Broker],
) -> None:
    b = open_broker()
    b.management.topic_create(NS, "t", {})
    for name in ("a", "b"):
        b.management.subscription_create(NS, "t", name, {})
    b.messaging.send(NS, "t", [Message(f"message-{k:03d}".encode()) for k in range(10)])
    b.housekeeping.checkpoint()
    seg = b.topic(NS, "t").partitions[0].log.segments[0].path  # type: ignore[union-attr]
    data = bytearray(seg.read_bytes())
    data[data.find(b"message-007") + 10] ^= 0x01
    seg.write_bytes(bytes(data))
    assert len(peek_all(b, "t/subscriptions/a")) == 9
    assert len(b.messaging.receive(NS, "t/subscriptions/b", 20, "peek-lock")) == 9
    for name in ("a", "b"):
        assert b.management.subscription_get(NS, "t", name)["corrupt_message_count"] == 1
    assert b.management.topic_get(NS, "t")["corrupt_message_count"] == 1
    crash(b)
    b = open_broker()
    assert b.management.subscription_get(NS, "t", "b")["corrupt_message_count"] == 1
    assert len(peek_all(b, "t/subscriptions/b")) == 9
