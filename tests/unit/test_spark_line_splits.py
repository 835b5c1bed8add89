"""spark-load's own reading of `send --input` JSON Lines files (sbctl.spark.stage.stage_lines):
every line staged once, in order, as `send --input` would send it; refused lines whole in
the rejects with the reason; partitions as the daemon places keys."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core import message_form
from sbctl.core.messages import message_from_json
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import iter_records, scan_batches
from sbctl.spark import load
from sbctl.spark.stage import Rules, Target, _lines, stage_lines

DAY_MS = 86_400_000


def rules(partitions: int = 1, **kw: Any) -> Rules:
    base: dict[str, Any] = {
        "requires_session": False,
        "duplicate_detection": False,
        "default_ttl_ms": 14 * DAY_MS,
        "max_message_bytes": 256 * 1024,
        "now_ms": 1_700_000_000_000,
    }
    return Rules(partitions=partitions, **{**base, **kw})


def cut(size: int, points: list[int]) -> list[tuple[int, int]]:
    edges = sorted({0, size, *(p % (size + 1) for p in points)})
    return list(itertools.pairwise(edges))


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=25),
    points=st.lists(st.integers(min_value=0, max_value=10_000), max_size=6),
    last_newline=st.booleans(),
)
def test_splits_read_every_line_once_in_order(
    tmp_path: Path, lines: list[bytes], points: list[int], last_newline: bool
) -> None:
    data = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    path = tmp_path / "f.jsonl"
    path.write_bytes(data)
    read = [line for a, b in cut(len(data), points) for line in _lines(str(path), a, b)]
    assert b"".join(read) == data
    assert [r.rstrip(b"\n") for r in read] == (
        data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n") if data else []
    )


def staged(
    tmp_path: Path, text: str, r: Rules, tasks: int = 3
) -> tuple[dict[int, list[bytes]], list[Any], Path]:
    path = tmp_path / "in.jsonl"
    path.write_text(text, encoding="utf-8")
    work = tmp_path / "work"
    target = Target(str(work), r)
    size = path.stat().st_size
    step = max(1, -(-size // tasks))
    out: list[Any] = []
    for task, start in enumerate(range(0, size, step)):
        out += list(stage_lines(task, [(str(path), start, min(size, start + step))], target))
    by_pid: dict[int, list[bytes]] = {}
    for row in sorted((r for r in out if r[0] == "file"), key=lambda r: (r[1], r[2])):
        data = Path(row[2]).read_bytes()
        batches, end, problem = scan_batches(data)
        assert end == len(data) and not problem
        for batch in batches:
            by_pid.setdefault(row[1], []).extend(
                data[r.payload_offset : r.payload_offset + r.payload_length]
                for r in iter_records(data, batch)
            )
    return by_pid, [r for r in out if r[0] == "task"], work


def test_lines_stage_as_send_input_sends_them(tmp_path: Path) -> None:
    objs = [
        {"body": "plain", "message_id": "a"},
        {"body": {"k": [1, 2.5, None]}, "subject": "s", "application_properties": {"n": 5}},
        {"body_base64": "AAEC", "time_to_live": 30, "content_type": "application/octet-stream"},
        {"body": "x" * 300, "correlation_id": "c", "to": "t", "reply_to": "r"},
    ]
    text = "".join(json.dumps(o) + "\n" + ("\n" if i == 1 else "") for i, o in enumerate(objs))
    by_pid, tasks, _ = staged(tmp_path, text, rules())
    r = rules()
    assert by_pid == {0: [message_form.encode(message_from_json(o, r.now_ms)) for o in objs]}
    assert sum(t[1] for t in tasks) == len(objs)  # the blank line is no row
    assert sum(t[2] for t in tasks) == len(objs)


def test_keys_go_where_the_daemon_puts_them(tmp_path: Path) -> None:
    objs = [{"body": str(i), "session_id": f"s{i % 7}"} for i in range(40)]
    objs += [{"body": "k", "partition_key": "pk-1"}]
    text = "".join(json.dumps(o) + "\n" for o in objs)
    r = rules(partitions=4)
    by_pid, _, _ = staged(tmp_path, text, r)
    for o in objs:
        key = o.get("session_id") or o["partition_key"]
        payload = message_form.encode(message_from_json(o, r.now_ms))
        assert payload in by_pid[partition_for_key(key, 4)]
    assert sum(len(v) for v in by_pid.values()) == len(objs)


def test_refused_lines_go_whole_with_the_reason_in_input_order(tmp_path: Path) -> None:
    lines = [
        '{"body": "ok"}',
        "{not json",
        '{"body": "a", "color": "red"}',
        '{"body": "b", "message_id": 5}',
        '{"body": "fine"}',
        '{"body": "x", "session_id": "s", "partition_key": "p"}',
    ]
    by_pid, tasks, work = staged(tmp_path, "\n".join(lines) + "\n", rules(), tasks=4)
    assert len(by_pid[0]) == 2
    assert sum(t[3] for t in tasks) == 4
    out = tmp_path / "rejects.jsonl"
    load._join_rejects(work / "rejects", out)
    rejected = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["row"] for r in rejected] == [
        "{not json",
        {"body": "a", "color": "red"},
        {"body": "b", "message_id": 5},
        {"body": "x", "session_id": "s", "partition_key": "p"},
    ]
    reasons = [r["reason"] for r in rejected]
    assert reasons[1] == "unknown message field 'color'"
    assert reasons[2] == "message_id must be a string"
    assert "PartitionKey" in reasons[3]


def test_session_queues_refuse_lines_without_a_session(tmp_path: Path) -> None:
    by_pid, tasks, _ = staged(
        tmp_path, '{"body": "a"}\n{"body": "b", "session_id": "s"}\n', rules(requires_session=True)
    )
    assert sum(len(v) for v in by_pid.values()) == 1 and sum(t[3] for t in tasks) == 1


def test_which_sources_python_reads_itself(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text('{"body": "a"}\n' * 100)
    req = load.LoadRequest(sources=[str(path)], entity="q")
    sizes = load.line_sources(req, "json", rules())
    assert sizes == [(str(path), path.stat().st_size)]
    assert load.line_splits(sizes, 2) == [(str(path), 0, path.stat().st_size)]  # (>= 1 MB)
    assert load.line_sources(req, "json", rules(duplicate_detection=True)) is None
    other = tmp_path / "m.csv"
    other.write_text("body\na\n")
    both = load.LoadRequest([str(path), str(other)], "q")
    assert load.line_sources(both, "json", rules()) is None
    mapped = load.LoadRequest([str(path)], "q", options={"multiLine": "true"})
    assert load.line_sources(mapped, "json", rules()) is None
    big = tmp_path / "big.jsonl"
    big.write_bytes((b'{"body": "' + b"y" * 1000 + b'"}\n') * 5000)
    big_sizes = load.line_sources(load.LoadRequest([str(big)], "q"), "json", rules())
    assert big_sizes is not None
    ranges = load.line_splits(big_sizes, 4)
    assert len(ranges) == 4
    assert ranges[0][1] == 0 and ranges[-1][2] == big.stat().st_size
    assert all(a[2] == b[1] for a, b in itertools.pairwise(ranges))
