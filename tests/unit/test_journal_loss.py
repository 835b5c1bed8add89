"""A settlement journal file deleted, truncated or damaged, or its mirror: after a crash,
no completed message comes back, every acknowledged message that was not completed is
still there (in every subscription that held it), nothing corrupt is served, and the
store keeps working (daemon/README.md §0.4)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import presenting
from conftest import crash
from sbctl.core.layout import JOURNAL_SUFFIX, MIRROR_SUFFIX, numbered
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker
open_broker = presenting.open_broker

NS = DEFAULT_NAMESPACE
DAMAGE = [
    "delete",
    "truncate-half",
    "truncate-zero",
    "truncate-last-byte",
    "flip-middle",
    "flip-first",
    "flip-last",
]
WHICH = [JOURNAL_SUFFIX, MIRROR_SUFFIX]


def bodies(b: Broker, path: str) -> list[str]:
    got = b.messaging.peek(NS, path, 250, None)
    return sorted(decode_message(d.payload).body.decode() for d in got)


def complete(b: Broker, path: str, count: int, per_request: int) -> list[str]:
    """Receive ``count`` messages and complete them, ``per_request`` a request."""
    done: list[str] = []
    got = b.messaging.receive(NS, path, count, "peek-lock")
    for k in range(0, len(got), per_request):
        part = got[k : k + per_request]
        b.messaging.settle(NS, path, "complete", [d.lock_token for d in part if d.lock_token])
        done += [decode_message(d.payload).body.decode() for d in part]
    return done


def store(b: Broker, path: str) -> Path:
    entity, _ = b.resolve(NS, path)
    return entity.partitions[0].log.directory


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    assert data, path
    if how == "delete":
        path.unlink()
        return
    if how.startswith("truncate-"):
        size = {"half": len(data) // 2, "zero": 0, "last-byte": len(data) - 1}[how[9:]]
        os.truncate(path, size)
        return
    at = {"flip-middle": len(data) // 2, "flip-first": 5, "flip-last": len(data) - 2}[how]
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def newest(directory: Path, suffix: str) -> Path:
    files = [p for _g, p in numbered(directory, suffix) if p.stat().st_size]
    assert files, f"no {suffix} file with data in {directory}"
    return files[-1]


def names(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{k:03d}" for k in range(n)]


@pytest.mark.parametrize("which", WHICH)
@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_queue_journal_brings_no_completed_message_back(
    open_broker: Callable[[], Broker], how: str, which: str
) -> None:
    b = open_broker()
    b.management.queue_create(NS, "q", {})
    b.messaging.send(NS, "q", [Message(m.encode()) for m in names("a", 60)])
    b.housekeeping.checkpoint()  # what follows is only in the journal and the segment
    b.messaging.send(NS, "q", [Message(m.encode()) for m in names("b", 40)])
    done = complete(b, "q", 45, 3)  # 15 journal batches, plus the receive's
    b.messaging.receive(NS, "q", 10, "peek-lock")  # delivered, not completed: stays
    left = sorted(set(names("a", 60) + names("b", 40)) - set(done))
    assert len(left) == 55
    crash(b)
    damage(newest(store(b, "q"), which), how)
    b = open_broker()
    assert bodies(b, "q") == left
    assert b.management.queue_get(NS, "q")["corrupt_message_count"] == 0
    # It keeps working, and a second crash brings nothing back either.
    more = complete(b, "q", 5, 1)
    crash(b)
    b = open_broker()
    assert bodies(b, "q") == sorted(set(left) - set(more))


@pytest.mark.parametrize("which", WHICH)
@pytest.mark.parametrize("how", DAMAGE)
def test_a_damaged_topic_journal_keeps_routing_and_settlements(
    open_broker: Callable[[], Broker], how: str, which: str
) -> None:
    b = open_broker()
    b.management.topic_create(NS, "t", {})
    for sub in ("s1", "s2"):
        b.management.subscription_create(NS, "t", sub, {})
    b.messaging.send(NS, "t", [Message(m.encode()) for m in names("a", 20)])
    b.housekeeping.checkpoint()
    for k in range(5):  # routing of the newest messages is only in the journal
        b.messaging.send(NS, "t", [Message(m.encode()) for m in names(f"b{k}", 10)])
    everything = sorted(names("a", 20) + [m for k in range(5) for m in names(f"b{k}", 10)])
    done = complete(b, "t/subscriptions/s1", 30, 2)
    crash(b)
    damage(newest(store(b, "t"), which), how)
    b = open_broker()
    assert bodies(b, "t/subscriptions/s1") == sorted(set(everything) - set(done))
    assert bodies(b, "t/subscriptions/s2") == everything
    b.messaging.send(NS, "t", [Message(b"after")])
    crash(b)
    b = open_broker()
    assert bodies(b, "t/subscriptions/s1") == sorted({*everything, "after"} - set(done))
    assert bodies(b, "t/subscriptions/s2") == sorted([*everything, "after"])
