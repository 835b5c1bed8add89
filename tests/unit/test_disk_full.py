"""A full (or failing) disk: sends fail whole with QuotaExceeded naming the disk, nothing of
them is stored or indexed, settling keeps working from the reserve, and the daemon recovers
by itself once space is free. The disk is simulated by wrapping the write functions the
storage uses (partial write, then ENOSPC / EIO)."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import presenting
from conftest import crash
from sbctl.core import layout
from sbctl.core.errors import QuotaExceeded
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.storage import files, journal, log

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker
open_broker = presenting.open_broker

NS = DEFAULT_NAMESPACE


class Disk:
    """Decides which writes fail: ``fail(path) -> errno or 0``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rule: Callable[[str], int] = lambda _path: 0
        real = files.write_all

        def write_all(fd: int, data: bytes) -> None:
            path = os.readlink(f"/proc/self/fd/{fd}")
            code = self.rule(path)
            if code:
                os.write(fd, data[: len(data) // 2])  # a partial write, then the error
                raise OSError(code, os.strerror(code))
            real(fd, data)

        monkeypatch.setattr(log, "write_all", write_all)
        monkeypatch.setattr(journal, "write_all", write_all)

    def full(
        self, *, segments: bool = True, journals: bool = False, code: int = errno.ENOSPC
    ) -> None:
        def rule(path: str) -> int:
            if segments and path.endswith(".log"):
                return code
            if journals and path.endswith(".jnl"):
                return code
            return 0

        self.rule = rule

    def free(self) -> None:
        self.rule = lambda _path: 0


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    return Disk(monkeypatch)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def M(text: str, **kw: Any) -> Message:
    return Message(text.encode(), **kw)


def bodies(b: Broker, path: str) -> list[str]:
    """Every live message of the entity, read (CRC-checked) from its stores."""
    entity, _dlq = b.resolve(NS, path)
    out = []
    for p in entity.partitions:
        log = p.log
        for seq in range(log.head, log.next_seq):
            if log.state_of(seq) in (1, 2, 3):
                out.append(decode_message(log.read_payload(seq)).body.decode())
    return sorted(out)


def sizes(b: Broker, path: str) -> list[int]:
    entity, _dlq = b.resolve(NS, path)
    return [
        sum(os.path.getsize(s.path) for s in p.log.segments)  # type: ignore[union-attr,misc]
        for p in entity.partitions
    ]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EDQUOT])
@pytest.mark.parametrize("partitioned", [False, True])
def test_a_send_the_disk_refuses_fails_whole_and_nothing_is_kept(
    disk: Disk, open_broker: Callable[[], Broker], code: int, partitioned: bool
) -> None:
    b = open_broker()
    b.management.queue_create(NS, "q", {"enable_partitioning": partitioned})
    acked = [f"ok{k}" for k in range(20)]
    b.messaging.send(NS, "q", [M(t) for t in acked])
    before = sizes(b, "q")
    disk.full(code=code)
    with pytest.raises(QuotaExceeded) as err:
        b.messaging.send(NS, "q", [M(f"refused{k}") for k in range(20)])
    assert "the data dir's disk" in err.value.message and ".log" in err.value.message
    assert os.strerror(code) in err.value.message
    assert sizes(b, "q") == before  # rolled back to the last good end, every partition
    assert bodies(b, "q") == sorted(acked)  # reads keep working
    disk.free()
    b.messaging.send(NS, "q", [M("after")])  # recovers by itself
    assert bodies(b, "q") == sorted([*acked, "after"])
    crash(b)
    b = open_broker()
    assert bodies(b, "q") == sorted([*acked, "after"])


def test_only_the_second_partition_failing_takes_back_the_first(
    disk: Disk, open_broker: Callable[[], Broker]
) -> None:
    b = open_broker()
    b.management.queue_create(NS, "q", {"enable_partitioning": True})
    q = b.queue(NS, "q")
    paths = [str(p.log.directory) for p in q.partitions]
    calls: list[str] = []

    def rule(path: str) -> int:
        if not path.endswith(".log"):
            return 0
        calls.append(path)
        return errno.ENOSPC if len(calls) == 2 else 0  # the batch's second partition

    disk.rule = rule
    with pytest.raises(QuotaExceeded):
        b.messaging.send(NS, "q", [M(f"m{k}", partition_key=f"k{k}") for k in range(16)])
    assert len({os.path.dirname(c) for c in calls}) == 2 and all(
        os.path.dirname(c) in paths for c in calls
    )
    assert sizes(b, "q") == [0] * len(paths)
    assert b.management.queue_get(NS, "q")["total_message_count"] == 0
    disk.free()
    crash(b)
    b = open_broker()
    assert bodies(b, "q") == []  # 0 stored-but-refused


@pytest.mark.parametrize("where", ["segment", "journal"])
def test_a_topic_send_is_refused_whole(
    disk: Disk, open_broker: Callable[[], Broker], where: str
) -> None:
    b = open_broker()
    b.management.topic_create(NS, "t", {"enable_partitioning": True})
    for name in ("a", "b"):
        b.management.subscription_create(NS, "t", name, {})
    b.messaging.send(NS, "t", [M("kept", partition_key="x")])
    disk.full(segments=where == "segment", journals=where == "journal")
    with pytest.raises(QuotaExceeded):
        b.messaging.send(NS, "t", [M(f"m{k}", partition_key=f"k{k}") for k in range(16)])
    assert bodies(b, "t/subscriptions/a") == bodies(b, "t/subscriptions/b") == ["kept"]
    disk.free()
    crash(b)
    b = open_broker()
    assert bodies(b, "t/subscriptions/a") == bodies(b, "t/subscriptions/b") == ["kept"]
    b.messaging.send(NS, "t", [M("later", partition_key="x")])
    assert bodies(b, "t/subscriptions/a") == ["kept", "later"]


def test_settling_and_purging_work_on_a_full_disk_from_the_reserve(
    disk: Disk, open_broker: Callable[[], Broker], data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = open_broker()
    reserve = layout.reserve_file(data_dir)
    assert reserve.stat().st_size > 0
    b.management.queue_create(NS, "q", {})
    b.messaging.send(NS, "q", [M(f"m{k}") for k in range(10)])

    # The disk is full until the reserve is given back: journal writes fail while it holds
    # its blocks, segment writes always.
    def rule(path: str) -> int:
        if path.endswith(".log"):
            return errno.ENOSPC
        return errno.ENOSPC if reserve.stat().st_size > 0 else 0

    disk.rule = rule
    real_fallocate = os.posix_fallocate

    def no_space(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    got = b.messaging.receive(NS, "q", 3, "peek-lock")
    results = b.messaging.settle(NS, "q", "complete", [d.lock_token for d in got if d.lock_token])
    assert all(r.get("ok") for r in results)
    assert reserve.stat().st_size == 0 and b.syncer.reserve.full
    with pytest.raises(QuotaExceeded, match="disk is full"):
        b.messaging.send(NS, "q", [M("refused")])
    assert b.messaging.purge(NS, "q") == 7
    # Space comes back: the next send allocates the reserve again and is accepted.
    disk.free()
    monkeypatch.setattr(os, "posix_fallocate", real_fallocate)
    b.messaging.send(NS, "q", [M("after")])
    assert not b.syncer.reserve.full and reserve.stat().st_size > 0
    crash(b)
    b = open_broker()
    assert bodies(b, "q") == ["after"]  # completed and purged ones never come back


def test_a_receive_the_journal_refuses_leaves_nothing_locked(
    disk: Disk, open_broker: Callable[[], Broker], data_dir: Path
) -> None:
    b = open_broker()
    b.management.queue_create(NS, "q", {})
    b.messaging.send(NS, "q", [M(f"m{k}") for k in range(3)])
    (layout.reserve_file(data_dir)).unlink()  # no reserve left to release
    disk.full(segments=True, journals=True)
    with pytest.raises(QuotaExceeded):
        b.messaging.receive(NS, "q", 3, "peek-lock")
    disk.free()
    got = b.messaging.receive(NS, "q", 3, "peek-lock")
    assert sorted(decode_message(d.payload).body for d in got) == [b"m0", b"m1", b"m2"]
