"""SIGKILL durability (daemon/README.md §21, §7): no acknowledged message is lost, none reappears
after its completion was acknowledged; torn segment tails are truncated on recovery.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sbctl import Client
from sbctl.core.errors import SbctlError
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message

SENDERS = 3
RECEIVERS = 2
# Kill once this much was acknowledged (polled, not a fixed sleep); at most this long.
MIN_ACKED_SENDS = 300
MIN_ACKED_COMPLETIONS = 50
WORKLOAD_DEADLINE_SECONDS = 60
NS = "sbemulatorns"


class Workload:
    """Concurrent senders and peek-lock receivers, each thread with its own Client.

    Only what the daemon acknowledged is recorded: a send once ``send`` returned, a
    completion once ``complete`` returned ``ok`` for that token.
    """

    def __init__(self, socket: Path, queue: str) -> None:
        self.socket = socket
        self.queue = queue
        self.stop = threading.Event()
        self.killed = threading.Event()  # set just before the SIGKILL
        self.lock = threading.Lock()
        self.attempted: set[str] = set()
        self.acked_sends: set[str] = set()
        self.acked_completed: set[str] = set()
        # Completions sent but never answered: the kill may or may not have beaten them.
        self.completing: set[str] = set()
        self.unexpected: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._guard, args=(self._sender, i), daemon=True)
            for i in range(SENDERS)
        ] + [
            threading.Thread(target=self._guard, args=(self._receiver, i), daemon=True)
            for i in range(RECEIVERS)
        ]

    def _guard(self, body: Any, i: int) -> None:
        client = Client(self.socket, timeout=30)
        try:
            body(client, i)
        except SbctlError as exc:
            if not self.killed.is_set():  # before the kill every error is a failure
                with self.lock:
                    self.unexpected.append(exc)
            # after it, the daemon died under us: expected
        except BaseException as exc:  # recorded, never raised in a thread
            with self.lock:
                self.unexpected.append(exc)
        finally:
            client.close()

    def _sender(self, client: Client, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            size = 1 + n % 4
            ids = [f"s{i}-{n + k}" for k in range(size)]
            n += size
            batch = [
                Message(body=f"payload {mid}".encode(), message_id=mid, partition_key=mid)
                for mid in ids
            ]
            with self.lock:
                self.attempted.update(ids)
            seqs = client.send(self.queue, batch)
            assert len(seqs) == size
            with self.lock:
                self.acked_sends.update(ids)

    def _receiver(self, client: Client, i: int) -> None:
        while not self.stop.is_set():
            got = client.receive(self.queue, count=8, max_wait=0.2)
            if not got:
                continue
            ids = {m.lock_token: str(m.message.message_id) for m in got}
            with self.lock:
                self.completing.update(ids.values())
            results = client.complete(self.queue, list(ids))
            done = {ids[r["lock_token"]] for r in results if r.get("ok")}
            with self.lock:
                self.acked_completed.update(done)
                self.completing.difference_update(ids.values())

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def wait_for_progress(self) -> None:
        deadline = time.monotonic() + WORKLOAD_DEADLINE_SECONDS
        while time.monotonic() < deadline and not self.unexpected:
            with self.lock:
                sends, completions = len(self.acked_sends), len(self.acked_completed)
            if sends >= MIN_ACKED_SENDS and completions >= MIN_ACKED_COMPLETIONS:
                return
            time.sleep(0.02)

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
            assert not t.is_alive(), "a workload thread hung"


def drain(client: Client, queue: str) -> list[str]:
    """Receive-and-delete until the queue is empty; message ids in receive order."""
    out: list[str] = []
    empty = 0
    while empty < 2:
        got = client.receive(queue, count=500, mode="receive-and-delete")
        if not got:
            empty += 1
            continue
        empty = 0
        out += [str(m.message.message_id) for m in got]
    return out


@pytest.mark.parametrize("partitioned", [False, True], ids=["plain", "partitioned"])
def test_sigkill_mid_workload_loses_nothing_acknowledged(daemon: Any, partitioned: bool) -> None:
    queue = "crashq"
    with daemon.client() as c:
        c.queue_create(queue, enable_partitioning=partitioned)
    old_pid = daemon.pid()

    work = Workload(daemon.socket, queue)
    work.start()
    work.wait_for_progress()
    work.killed.set()
    daemon.kill()  # mid-workload: the threads are still sending and completing
    work.join()
    assert not work.unexpected, work.unexpected
    assert len(work.acked_sends) >= MIN_ACKED_SENDS, "too few sends acknowledged before the kill"
    assert work.acked_completed, "no completion was acknowledged before the kill"

    daemon.start()
    assert daemon.pid() != old_pid
    with daemon.client() as c:
        info = c.queue_get(queue)
        assert info["partition_count"] == (16 if partitioned else 1)
        drained = drain(c, queue)
        after = c.queue_get(queue)
    assert after["active_message_count"] == 0

    counts = Counter(drained)
    present = set(counts)
    duplicates = sorted(m for m, k in counts.items() if k > 1)
    assert not duplicates, f"delivered twice after restart: {duplicates[:10]}"
    assert present <= work.attempted, f"never sent: {sorted(present - work.attempted)[:10]}"
    # A completion in flight at the kill may have been applied without its answer.
    assert len(work.completing) <= RECEIVERS * 8
    lost = work.acked_sends - present - work.acked_completed - work.completing
    assert not lost, f"{len(lost)} acknowledged sends lost: {sorted(lost)[:10]}"
    resurrected = work.acked_completed & present
    assert not resurrected, f"{len(resurrected)} completed messages came back"
    assert info["active_message_count"] == len(drained)

    log = (daemon.data_dir / "sbctld.log").read_text()
    assert "stale pidfile" in log
    assert f"pid {old_pid} is not running" in log


def keys_for(partitions: list[int], n: int = 16) -> dict[int, str]:
    """A partition key for each wanted partition (of ``n``)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < len(partitions):
        key = f"key-{i}"
        pid = partition_for_key(key, n)
        if pid in partitions and pid not in found:
            found[pid] = key
        i += 1
    return found


def fill(daemon: Any, queue: str) -> tuple[dict[int, str], dict[int, list[list[int]]]]:
    """Three batches (sends) of three messages into partitions 0 and 5."""
    keys = keys_for([0, 5])
    batches: dict[int, list[list[int]]] = {0: [], 5: []}
    with daemon.client() as c:
        c.queue_create(queue, enable_partitioning=True)
        for b in range(3):
            for pid, key in keys.items():
                msgs = [
                    Message(body=f"p{pid}-b{b}-m{k}".encode(), partition_key=key) for k in range(3)
                ]
                batches[pid].append(c.send(queue, msgs))
    return keys, batches


def segment(daemon: Any, queue: str, pid: int) -> Path:
    seg = sorted(
        (daemon.data_dir / "namespaces" / NS / "queues" / queue / f"p{pid:02d}").glob("*.log")
    )
    assert seg, f"no segment for partition {pid}"
    return seg[-1]


def peek_partition(c: Client, queue: str, pid: int) -> list[str]:
    got = c.peek(queue, count=250, from_sequence=pid << 48)  # walks on to later partitions
    return [m.body.decode() for m in got if m.sequence_number >> 48 == pid]


def check_torn_tail_recovery(daemon: Any, queue: str, batches: dict[int, list[list[int]]]) -> None:
    """Partition 0 had garbage appended, partition 5 lost the end of its last batch."""
    seg0, seg5 = segment(daemon, queue, 0), segment(daemon, queue, 5)
    with seg0.open("ab") as fh:
        fh.write(b"\x13\x37 this is not a record batch \xff" * 3)
    size = seg5.stat().st_size
    with seg5.open("r+b") as fh:
        fh.truncate(size - 11)  # inside the last batch

    daemon.start()
    want0 = [f"p0-b{b}-m{k}" for b in range(3) for k in range(3)]
    want5 = [f"p5-b{b}-m{k}" for b in range(2) for k in range(3)]
    with daemon.client() as c:
        assert peek_partition(c, queue, 0) == want0
        assert peek_partition(c, queue, 5) == want5
        info = c.queue_get(queue)
        assert info["active_message_count"] == len(want0) + len(want5)
        parts = {p["partition_id"]: p for p in info["partitions"]}
        assert parts[0]["active_message_count"] == 9
        assert parts[5]["active_message_count"] == 6
        # New sends work on both partitions, right after the surviving batches.
        keys = keys_for([0, 5])
        s0 = c.send(queue, [Message(body=b"new-0", partition_key=keys[0])])
        s5 = c.send(queue, [Message(body=b"new-5", partition_key=keys[5])])
        assert s0[0] == batches[0][-1][-1] + 1
        assert s5[0] >> 48 == 5
        # After the surviving batches; numbers a checkpoint had indexed are never reused.
        assert s5[0] > batches[5][1][-1]
        assert peek_partition(c, queue, 0) == [*want0, "new-0"]
        assert peek_partition(c, queue, 5) == [*want5, "new-5"]
        got = c.receive(queue, count=100, mode="receive-and-delete")
        assert sorted(m.body.decode() for m in got) == sorted([*want0, *want5, "new-0", "new-5"])

    log = (daemon.data_dir / "sbctld.log").read_text()
    torn = [line for line in log.splitlines() if "truncated" in line]
    assert any(seg0.name in line and "p00" in line for line in torn), log
    assert any(seg5.name in line and "p05" in line for line in torn), log

    # And the repaired partitions survive another restart.
    daemon.stop()
    daemon.start()
    with daemon.client() as c:
        assert c.queue_get(queue)["active_message_count"] == 0


def test_torn_tail_after_crash(daemon: Any) -> None:
    """SIGKILL (no checkpoint is written), then damage the segment tails."""
    queue = "torn"
    _keys, batches = fill(daemon, queue)
    daemon.kill()
    check_torn_tail_recovery(daemon, queue, batches)


def test_torn_tail_after_clean_stop(daemon: Any) -> None:
    """``daemon stop`` (a checkpoint covers every batch), then damage the segment tails."""
    queue = "torn"
    _keys, batches = fill(daemon, queue)
    daemon.stop()
    check_torn_tail_recovery(daemon, queue, batches)
