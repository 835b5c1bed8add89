"""spark-load adoption (sbctld.loads, PartitionLog adoption): all or nothing, exactly once.

No Spark here: staged files are written with the shared codec as a Spark task would, and a
crash is faked by stopping the adoption between its steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sbctl.core.errors import BadRequest
from sbctl.core.message_form import encode as encode_message
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import NOT_SCHEDULED, Message, StagedRecord, encode_batch
from sbctld import loads, staged
from sbctld.broker import Broker
from sbctld.clock import FakeClock
from sbctld.storage.adoption import (
    AdoptionError,
    commit_adoption,
    link_adoption,
    rollback_adoption,
)
from sbctld.storage.log import PartitionLog, State
from sbctld.storage.sync import Syncer


def stage(path: Path, bodies: list[bytes], per_batch: int = 2, ttl: int = -1) -> Path:
    """A staged file of batches numbered from 0, as :mod:`sbctl.spark.stage` writes them."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for k in range(0, len(bodies), per_batch):
            records = [
                StagedRecord(encode_message(Message(body=b)), ttl, NOT_SCHEDULED)
                for b in bodies[k : k + per_batch]
            ]
            fh.write(encode_batch(0, 0, records)[0])
    return path


def prepare(log: PartitionLog, files: list[Path], now_ms: int, max_payload: int) -> list[Any]:
    """Check and number staged files as the daemon does before linking them."""
    checked = [staged.check_now(f, max_payload) for f in files]
    return staged.number_now(checked, log.next_seq, now_ms)[0]


def bodies_of(log: PartitionLog) -> list[bytes]:
    from sbctl.core.message_form import decode as decode_message

    return [decode_message(log.read_payload(s)).body for s in log.seqs_in(State.ACTIVE)]


def test_partition_log_adoption_appends_after_existing_messages(tmp_path: Path) -> None:
    syncer = Syncer("fsync")
    log = PartitionLog.open(tmp_path / "p00", syncer)
    log.append([StagedRecord(encode_message(Message(body=b"sent")), -1, NOT_SCHEDULED)], 5)
    files = [
        stage(tmp_path / "stage" / "t0.sbb", [b"a", b"b", b"c"]),
        stage(tmp_path / "stage" / "t1.sbb", [b"d"]),
    ]
    prepared = prepare(log, files, 10, 1024)
    assert [st.base for st in prepared] == [2, 5]
    link_adoption(log, prepared)
    assert bodies_of(log) == [b"sent"], "linked but not committed: invisible"
    commit_adoption(log, prepared, 10)
    assert bodies_of(log) == [b"sent", b"a", b"b", b"c", b"d"]
    assert log.next_seq == 6
    log.append([StagedRecord(encode_message(Message(body=b"after")), -1, NOT_SCHEDULED)], 11)
    log.close()
    syncer.sync_now()
    again = PartitionLog.open(tmp_path / "p00", syncer)
    assert bodies_of(again) == [b"sent", b"a", b"b", b"c", b"d", b"after"]
    assert again.enq[1] == 10
    again.close()


def test_fake_crash_after_linking_rolls_back_to_before(tmp_path: Path) -> None:
    syncer = Syncer("fsync")
    log = PartitionLog.open(tmp_path / "p00", syncer)
    log.append([StagedRecord(encode_message(Message(body=b"sent")), -1, NOT_SCHEDULED)], 5)
    before = log.next_seq
    prepared = prepare(log, [stage(tmp_path / "s" / "t0.sbb", [b"x", b"y"])], 9, 1024)
    link_adoption(log, prepared)
    log.close()  # the crash: never committed
    syncer.sync_now()
    assert rollback_adoption(tmp_path / "p00", before) == 1
    again = PartitionLog.open(tmp_path / "p00", syncer)
    assert bodies_of(again) == [b"sent"]
    assert again.next_seq == before
    again.close()


def test_a_corrupt_staged_file_is_refused(tmp_path: Path) -> None:
    syncer = Syncer("fsync")
    log = PartitionLog.open(tmp_path / "p00", syncer)
    path = stage(tmp_path / "s" / "t0.sbb", [b"hello", b"world"])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(Exception, match="CRC mismatch"):
        prepare(log, [path], 1, 1024)
    assert log.next_seq == 1 and not list(log.seqs_in(State.ACTIVE))
    log.close()


@pytest.fixture
def partitioned(broker: Broker) -> Any:
    broker.management.queue_create("sbemulatorns", "q", {"enable_partitioning": True})
    return broker.queue("sbemulatorns", "q")


def staged_load(tmp_path: Path, name: str) -> list[tuple[int, str]]:
    return [
        (pid, str(stage(tmp_path / name / f"p{pid:02d}" / "t0.sbb", [f"{name}-{pid}".encode()])))
        for pid in (3, 7, 11)
    ]


def test_adopt_is_exactly_once_per_load_id(
    broker: Broker, partitioned: Any, tmp_path: Path
) -> None:
    first = broker.housekeeping.load_adopt("sbemulatorns", "q", "L1", staged_load(tmp_path, "a"))
    assert first["adopted"] is True and first["messages"] == 3
    again = broker.housekeeping.load_adopt("sbemulatorns", "q", "L1", staged_load(tmp_path, "b"))
    assert again["adopted"] is False and again["messages"] == 3
    assert partitioned.counts()["active_message_count"] == 3
    assert broker.housekeeping.load_status("sbemulatorns", "q", "L1")["state"] == "committed"
    assert broker.housekeeping.load_status("sbemulatorns", "q", "L2")["state"] == "unknown"


def test_crash_mid_adoption_leaves_nothing_after_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    broker = Broker(data, FakeClock(), Syncer("fsync"))
    broker.management.queue_create("sbemulatorns", "q", {"enable_partitioning": True})
    queue = broker.queue("sbemulatorns", "q")
    broker.messaging.send("sbemulatorns", "q", [Message(body=b"before", partition_key="k")])

    # The crash strikes after the manifest says "adopting" and every file is linked.
    original = loads._write
    writes: list[str] = []

    def write(path: Path, manifest: loads.Manifest) -> None:
        writes.append(manifest.state)
        if manifest.state == "committed":
            raise SystemExit("fake crash before the commit")
        original(path, manifest)

    monkeypatch.setattr(loads, "_write", write)
    with pytest.raises(SystemExit):
        broker.housekeeping.load_adopt("sbemulatorns", "q", "L1", staged_load(tmp_path, "a"))
    assert writes == ["adopting", "committed"]
    assert len(list((queue.directory / "p03").glob("*.log"))) == 1  # linked, uncommitted
    for p in queue.partitions:
        p.log.close()
    broker.syncer.sync_now()
    monkeypatch.setattr(loads, "_write", original)

    notes: list[str] = []
    restarted = Broker(data, FakeClock(), Syncer("fsync"), report=notes.append)
    q = restarted.queue("sbemulatorns", "q")
    assert q.counts()["active_message_count"] == 1
    assert any("rolled back" in n for n in notes)
    assert restarted.housekeeping.load_status("sbemulatorns", "q", "L1")["state"] == "unknown"
    # The same load id can run again, and then it is all there.
    result = restarted.housekeeping.load_adopt(
        "sbemulatorns", "q", "L1", staged_load(tmp_path, "b")
    )
    assert result["adopted"] is True
    assert q.counts()["active_message_count"] == 4
    pid = partition_for_key("k", 16)
    assert q.partitions[pid].log.counts[State.ACTIVE] == 1
    restarted.housekeeping.close()


def test_bad_input_refuses_the_whole_load(broker: Broker, partitioned: Any, tmp_path: Path) -> None:
    files = staged_load(tmp_path, "a")
    with pytest.raises(BadRequest, match="not a partition"):
        broker.housekeeping.load_adopt("sbemulatorns", "q", "L1", [*files, (16, files[0][1])])
    with pytest.raises(BadRequest, match="not a file"):
        broker.housekeeping.load_adopt(
            "sbemulatorns", "q", "L1", [(0, str(tmp_path / "missing.sbb"))]
        )
    with pytest.raises(BadRequest, match="load id"):
        broker.housekeeping.load_adopt("sbemulatorns", "q", "", files)
    assert partitioned.counts()["active_message_count"] == 0


def test_a_partition_that_took_sends_during_the_check_is_renumbered(
    broker: Broker, tmp_path: Path
) -> None:
    """The daemon checks a load off its loop while sends go on: the commit numbers the load
    after them, and a restart reads back the same messages in the same order."""
    import asyncio

    broker.management.queue_create("sbemulatorns", "q", {})
    queue = broker.queue("sbemulatorns", "q")
    broker.messaging.send("sbemulatorns", "q", [Message(body=b"first")])
    files = [(0, str(stage(tmp_path / "s" / "t0.sbb", [b"a", b"b", b"c"], per_batch=2)))]
    prepared = asyncio.run(loads.check(queue, "L1", files, broker.clock.now_ms))
    assert isinstance(prepared, loads.Prepared)
    broker.messaging.send("sbemulatorns", "q", [Message(body=b"during")])  # next_seq moved on
    result = loads.commit(queue, "L1", prepared)
    assert result["messages"] == 3
    log = queue.partitions[0].log
    assert bodies_of(log) == [b"first", b"during", b"a", b"b", b"c"]
    data_dir = broker.data_dir
    broker.housekeeping.close()
    again = Broker(data_dir, FakeClock(), Syncer("fsync"))
    assert bodies_of(again.queue("sbemulatorns", "q").partitions[0].log) == [
        b"first",
        b"during",
        b"a",
        b"b",
        b"c",
    ]
    again.housekeeping.close()


def test_the_streamed_check_matches_the_plain_one_and_refuses_damage(tmp_path: Path) -> None:
    import asyncio

    path = stage(tmp_path / "t0.sbb", [bytes([k % 256]) * 3000 for k in range(5000)], per_batch=700)
    plain = staged.check_now(path, 4096)
    streamed = asyncio.run(staged.check(path, 4096))
    assert plain == streamed and len(plain.offsets) == 5000
    assert plain.payload_bytes == sum(plain.lengths) and plain.one_ttl == -1
    whole = path.read_bytes()
    data = bytearray(whole)
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(AdoptionError, match="CRC mismatch"):
        asyncio.run(staged.check(path, 4096))
    path.write_bytes(whole[:-10])
    with pytest.raises(AdoptionError, match="bad length"):
        asyncio.run(staged.check(path, 4096))
