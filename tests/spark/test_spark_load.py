"""spark-load and spark-export against a real daemon and real Spark (issue 7's acceptance).

One SparkSession (local[2]) serves the in-process loads of this module; the crash test runs
the real CLI in a subprocess, as a user would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbctl.core.errors import QuotaExceeded
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
NS = "sbemulatorns"


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from sbctl.spark import session

    s = session.start(
        "local[2]",
        {"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
        "sbctl-tests",
    )
    try:
        yield s
    finally:
        session.stop(s)


def load(daemon: Any, spark: Any, source: Path | str, entity: str, **kw: Any) -> dict[str, Any]:
    from sbctl.spark.load import LoadRequest, run

    req = LoadRequest(
        sources=[str(source)],
        entity=entity,
        staging_dir=str(daemon.data_dir / "staging"),
        **kw,
    )
    with daemon.client() as sb:
        return run(sb, req, spark=spark)


def every_message(daemon: Any, entity: str) -> list[Any]:
    """Every message of the entity, paging peek from the first: a peek walks on across
    partitions in sequence-number order (daemon/README.md §0.1.7)."""
    out = []
    with daemon.client() as sb:
        start = 1
        while page := sb.peek(entity, 250, start):
            out += page
            start = page[-1].sequence_number + 1
    return out


# A dataset nobody wrote for the code: keys, sessions, duplicates and bad rows.
ROWS: list[dict[str, Any]] = [
    {"body": "r0", "message_id": "a", "partition_key": "alice"},
    {"body": "r1", "message_id": "b", "session_id": "s-1"},
    {"body": "r2", "message_id": "c"},  # keyed by MessageId: duplicate detection is on
    {"body": "r3 copy", "message_id": "a", "partition_key": "alice"},  # duplicate of r0
    {"body": "r4", "message_id": "d", "session_id": "s-1", "partition_key": "other"},
    {"body": "r5", "message_id": "x" * 129},
    {"body": "r6", "message_id": "e", "application_properties": {"n": 1, "ok": True, "s": "t"}},
    {"body": "r7", "message_id": "f", "application_properties": {"bad": [1, 2]}},
    {"body": "r8", "message_id": "g", "time_to_live": "not a duration"},
    {"body_base64": "AAEC", "message_id": "h", "partition_key": "bob"},
    {"body": {"order": 9}, "message_id": "i", "session_id": "s-2", "partition_key": "s-2"},
    {"body": "r11", "message_id": "j", "session_id": "é" * 129},
    {"body": "r12", "message_id": "a", "partition_key": "carol"},  # same id, other key: kept
    {"body": "r13", "message_id": "k", "partition_key": "alice", "time_to_live": 30},
]
REASONS = {
    "r4": "differs from SessionId",
    "r5": "message_id must be 1-128 characters",
    "r7": "application property 'bad' is a list",
    "r8": "invalid duration",
    "r11": "session_id must be at most 128 characters",
}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_hand_made_dataset_loads_exactly(daemon: Any, spark: Any, tmp_path: Path) -> None:
    with daemon.client() as sb:
        sb.queue_create("q", enable_partitioning=True, requires_duplicate_detection=True)
    source = write_jsonl(tmp_path / "in.jsonl", ROWS)
    summary = load(daemon, spark, source, "q", load_id="first")
    assert summary["rows_read"] == len(ROWS)
    assert summary["duplicates_dropped"] == 1
    assert summary["rejected"] == len(REASONS)
    assert summary["messages_loaded"] == len(ROWS) - 1 - len(REASONS)
    assert summary["partitions"] == 16 and summary["load_id"] == "first"
    assert set(summary) >= {"rows_read", "messages_loaded", "duplicates_dropped", "rejected"}
    assert set(summary) >= {"partitions", "seconds", "load_id"}

    messages = every_message(daemon, "q")
    bodies = sorted(m.body for m in messages)
    assert bodies == sorted(
        [b"r0", b"r1", b"r2", b"r6", b"\x00\x01\x02", b'{"order": 9}', b"r12", b"r13"]
    )
    for m in messages:  # the partition a send would choose (daemon/README.md §0.1.4)
        msg = m.message
        key = msg.session_id or msg.partition_key or msg.message_id
        assert m.partition_id == partition_for_key(key, 16), msg
    alice = [m.body for m in messages if m.message.partition_key == "alice"]
    assert alice == [b"r0", b"r13"], "input order kept within a partition; earliest copy won"
    r6 = next(m for m in messages if m.body == b"r6")
    assert r6.application_properties == {"n": 1, "ok": True, "s": "t"}
    r13 = next(m for m in messages if m.body == b"r13")
    assert r13.message.time_to_live_ms == 30_000

    rejects = [json.loads(line) for line in Path(summary["rejects_file"]).read_text().splitlines()]
    assert len(rejects) == len(REASONS)
    for entry in rejects:
        body = entry["row"]["body"]
        assert REASONS[body] in entry["reason"], entry

    # Exactly once: the same load id again adds nothing (and needs no Spark job).
    again = load(daemon, spark, source, "q", load_id="first")
    assert again["already_loaded"] is True and again["messages_loaded"] == 0
    with daemon.client() as sb:
        assert sb.queue_get("q")["active_message_count"] == len(messages)


def test_session_queue_rejects_rows_without_session(
    daemon: Any, spark: Any, tmp_path: Path
) -> None:
    with daemon.client() as sb:
        sb.queue_create("sq", requires_session=True)
    rows = [{"body": "x", "session_id": "s"}, {"body": "y"}, {"body": "z", "session_id": ""}]
    summary = load(daemon, spark, write_jsonl(tmp_path / "s.jsonl", rows), "sq")
    assert summary["messages_loaded"] == 1 and summary["rejected"] == 2
    text = Path(summary["rejects_file"]).read_text()
    assert text.count("The SessionId was not set on a message") == 2


def test_max_rejects_aborts_with_nothing_adopted(daemon: Any, spark: Any, tmp_path: Path) -> None:
    with daemon.client() as sb:
        sb.queue_create("mq", enable_partitioning=True)
    source = write_jsonl(tmp_path / "in.jsonl", ROWS)
    with pytest.raises(QuotaExceeded, match="more than --max-rejects 2: nothing was loaded"):
        load(daemon, spark, source, "mq", max_rejects=2, load_id="capped")
    with daemon.client() as sb:
        assert sb.queue_get("mq")["total_message_count"] == 0
        assert sb.load_status("mq", "capped")["state"] == "unknown"
    staging = daemon.data_dir / "staging"
    assert not [p for p in staging.iterdir() if p.name.startswith("load-")], "staging kept"


def test_csv_with_column_flags_and_properties(daemon: Any, spark: Any, tmp_path: Path) -> None:
    from sbctl.spark.columns import Mapping

    with daemon.client() as sb:
        sb.queue_create("cq", enable_partitioning=True)
    source = tmp_path / "in.csv"
    source.write_text("id,customer,text,region,extra\n1,c-1,hello,eu,x\n2,c-2,world,us,y\n")
    mapping = Mapping(
        columns={"message_id": "id", "partition_key": "customer", "body": "text"},
        all_other_columns_as_properties=True,
    )
    summary = load(daemon, spark, source, "cq", mapping=mapping)
    assert summary["messages_loaded"] == 2
    got = {m.body: m for m in every_message(daemon, "cq")}
    assert got[b"hello"].application_properties == {"region": "eu", "extra": "x"}
    assert got[b"world"].partition_id == partition_for_key("c-2", 16)

    from sbctl.core.errors import BadRequest

    bad = Mapping(columns={"body": "nope"})
    with pytest.raises(BadRequest, match="unknown column 'nope'"):
        load(daemon, spark, source, "cq", mapping=bad)
    with pytest.raises(BadRequest, match="does not exist"):
        load(daemon, spark, tmp_path / "missing.csv", "cq")


def test_a_failing_task_is_one_line_naming_its_python_cause(
    spark: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sbctl.core.errors import GeneralError
    from sbctl.spark import session

    def job() -> Any:  # a lambda is shipped by value: the worker needs no test module
        return spark.sparkContext.parallelize([7], 1).map(lambda x: int(f"bad {x}")).collect()

    monkeypatch.delenv("SBCTL_DEBUG", raising=False)
    with pytest.raises(GeneralError) as failed, session.watching(spark, None, "a test job"):
        job()
    message = str(failed.value)
    assert message.startswith(
        "the Spark job failed: ValueError: invalid literal for int() with base 10: 'bad 7' ("
    ), message
    assert "\n" not in message and "org.apache" not in message and "Traceback" not in message
    assert "SBCTL_DEBUG=1 shows the Spark trace" in message
    assert capsys.readouterr().err == ""

    monkeypatch.setenv("SBCTL_DEBUG", "1")  # the rest: the worker's traceback
    with pytest.raises(GeneralError), session.watching(spark, None, "a test job"):
        job()
    shown = capsys.readouterr().err
    assert "Traceback (most recent call last)" in shown
    assert "ValueError: invalid literal for int() with base 10: 'bad 7'" in shown


def test_export_then_load_round_trips(daemon: Any, spark: Any, tmp_path: Path) -> None:
    from sbctl.spark.export import run_export

    with daemon.client() as sb:
        sb.queue_create("src", enable_partitioning=True)
        sb.queue_create("dst", enable_partitioning=True)
        sent = [
            Message(
                body=bytes([i, 255, 0]) + f"m{i}".encode(),
                message_id=f"id-{i}",
                partition_key=f"k{i % 3}",
                subject="s",
                application_properties={"i": i, "f": i / 2, "b": i % 2 == 0, "t": f"x{i}"},
            )
            for i in range(20)
        ]
        sb.send("src", sent)
    out = tmp_path / "export"
    summary = run_export(str(daemon.socket), NS, "src", str(out), "parquet", "", {}, spark=spark)
    assert summary["messages"] == 20
    loaded = load(daemon, spark, out, "dst")  # no column flags: an export is recognised
    assert loaded["messages_loaded"] == 20 and loaded["rejected"] == 0
    before = {m.message.message_id: m for m in every_message(daemon, "src")}
    after = {m.message.message_id: m for m in every_message(daemon, "dst")}
    assert set(before) == set(after)
    for mid, m in before.items():
        assert after[mid].body == m.body
        assert after[mid].application_properties == m.application_properties
        assert after[mid].message.subject == "s"
        assert after[mid].partition_id == m.partition_id


@pytest.mark.timeout(420)  # two Spark runs; on a loaded 2-core CI machine each can take minutes
def test_sigkill_during_adoption_leaves_nothing_then_all(
    daemon_factory: Any, tmp_path: Path
) -> None:
    d = daemon_factory(start=False)
    d.env["SBCTLD_TEST_ADOPTION_PAUSE"] = "60"
    d.start()
    d.cli("queue", "create", "kq", "--enable-partitioning", check=True)
    source = ROOT / "data" / "sample_messages.jsonl"
    cmd = [sys.executable, "-m", "sbctl.cli.app", "-o", "json", "spark-load", str(source)]
    cmd += ["--entity", "kq", "--load-id", "crashy", "--master", "local[2]"]
    proc = subprocess.Popen(cmd, env=d.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        manifests = next((d.data_dir / "namespaces").glob("*/queues/*")) / "loads"
        deadline = time.monotonic() + 90
        while not (manifests.exists() and any(manifests.glob("*.load"))):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the adoption never started"
            time.sleep(0.1)
        time.sleep(0.3)  # the first partition's segments are linked, the rest are not
        d.kill()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0, err
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    d.env.pop("SBCTLD_TEST_ADOPTION_PAUSE")
    d.start()
    shown = d.cli("-o", "json", "queue", "show", "kq", check=True).json()
    assert shown["total_message_count"] == 0, "a crash mid-adoption left part of the load"

    again = d.cli(*cmd[3:], check=True).json()
    assert again["messages_loaded"] == 49 and again["load_id"] == "crashy"
    shown = d.cli("-o", "json", "queue", "show", "kq", check=True).json()
    assert shown["active_message_count"] == 49  # no duplicate detection: order-5 twice
    repeat = d.cli(*cmd[3:], check=True).json()
    assert repeat["already_loaded"] is True and repeat["messages_loaded"] == 0
