"""The acceptance scenario, end to end through the real ``sbctl`` CLI with ``-o json``.

A partitioned queue, keyed and keyless sends (``--body``, ``--repeat``, ``--input -``),
placement by ``partition_for_key`` (daemon/README.md §0.1.4, §0.1.7), peek without side effects,
``queue show`` counts at every step, persistence across ``daemon stop``/``daemon start``,
settlement in a separate invocation, namespaces, and the CLI's error contract (exit status
plus one line on stderr).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sbctl.core.errors import SbctlError
from sbctl.core.message_form import encode as encode_message
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message

P = 16
LOCAL_MASK = (1 << 48) - 1
QUEUE = "orders"
# Keys that land on several partitions, unicode included (customer-7 → 2, kéy-ü → 3,
# Ωmega → 1, 🙂emoji → 14, 日本語キー → 15; "b" shares partition 3 with kéy-ü).
KEYS = ["customer-7", "kéy-ü", "日本語キー", "🙂emoji", "Ωmega", "b"]


@dataclass
class Stored:
    body: str
    key: str | None
    size: int
    delivery_count: int = 0


class Model:
    """What the queue should hold: public sequence number → message."""

    def __init__(self) -> None:
        self.live: dict[int, Stored] = {}
        self.next_local = [1] * P  # next local sequence number of each partition

    def add(self, seq: int, body: str, key: str | None) -> None:
        pid, local = seq >> 48, seq & LOCAL_MASK
        if key is not None:
            assert pid == partition_for_key(key, P), (key, seq)
        assert local == self.next_local[pid], f"gap in partition {pid}: {local}"
        self.next_local[pid] = local + 1
        size = len(encode_message(Message(body=body.encode(), partition_key=key)))
        self.live[seq] = Stored(body, key, size)

    def partition(self, pid: int) -> dict[int, Stored]:
        return {s: m for s, m in self.live.items() if s >> 48 == pid}


def run(daemon: Any, *args: str, input: str | None = None) -> Any:
    """``sbctl -o json ARGS`` that must succeed; returns the CliResult."""
    result = daemon.cli("-o", "json", *args, input=input)
    assert result.code == 0, f"sbctl -o json {' '.join(args)} failed: {result}"
    return result


def fails(daemon: Any, code: int, *args: str, output: str = "json") -> Any:
    """A command that must exit ``code`` with exactly one line on stderr (JSON with -o json)."""
    result = daemon.cli("-o", output, *args)
    assert result.code == code, f"sbctl {' '.join(args)}: expected exit {code}, got {result}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {result.stderr!r}"
    if output == "json":
        error = json.loads(lines[0])["error"]
        assert set(error) >= {"code", "message"}
        return error
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.stderr
    return lines[0]


def send(daemon: Any, *args: str, input: str | None = None) -> list[int]:
    out = run(daemon, "send", QUEUE, *args, input=input).json()
    assert out["sent"] == len(out["sequence_numbers"])
    numbers: list[int] = out["sequence_numbers"]
    return numbers


def check_show(daemon: Any, model: Model) -> dict[str, Any]:
    info: dict[str, Any] = run(daemon, "queue", "show", QUEUE).json()
    live = model.live
    assert info["name"] == QUEUE
    assert info["enable_partitioning"] is True
    assert info["partition_count"] == P
    assert info["availability_status"] == "Available"
    assert info["active_message_count"] == len(live)
    assert info["total_message_count"] == len(live)
    assert info["dead_letter_message_count"] == 0
    assert info["scheduled_message_count"] == 0
    assert info["size_in_bytes"] == sum(m.size for m in live.values())
    parts = info["partitions"]
    assert [p["partition_id"] for p in parts] == list(range(P))
    for p in parts:
        pid = p["partition_id"]
        mine = model.partition(pid)
        assert p["active_message_count"] == len(mine), f"partition {pid}"
        assert p["size_in_bytes"] == sum(m.size for m in mine.values()), f"partition {pid}"
        assert p["next_sequence_number"] == (pid << 48) | model.next_local[pid]
    assert sum(p["active_message_count"] for p in parts) == info["active_message_count"]
    return info


def check_message(m: dict[str, Any], model: Model) -> Stored:
    seq = m["sequence_number"]
    assert seq in model.live, f"unexpected message {m}"
    want = model.live[seq]
    assert m["partition_id"] == seq >> 48
    if want.key is not None:
        assert m["partition_id"] == partition_for_key(want.key, P)
    assert m["body"] == want.body
    assert m["partition_key"] == want.key
    assert m["state"] == "active"
    return want


def check_peek_all(daemon: Any, model: Model, only: int | None = None) -> None:
    """Peek the model's partitions from their start: exactly the model, delivery counts
    included. ``queue show`` (check_show) vouches for the partitions the model leaves empty."""
    used = sorted({s >> 48 for s in model.live}) if only is None else [only]
    for pid in used:
        out = run(daemon, "peek", QUEUE, "--from-sequence", str(pid << 48), "--count", "250")
        got = [m for m in out.jsonl() if m["sequence_number"] >> 48 == pid]  # walks on
        mine = model.partition(pid)
        assert [m["sequence_number"] for m in got] == sorted(mine), f"partition {pid}"
        for m in got:
            want = check_message(m, model)
            assert m["lock_token"] is None
            assert m["delivery_count"] == want.delivery_count, m


def test_partitioned_queue_session(daemon: Any) -> None:
    status = run(daemon, "daemon", "status").json()
    assert status["running"] is True
    assert status["pid"] == daemon.pid()

    created = run(daemon, "queue", "create", QUEUE, "--enable-partitioning").json()
    assert created["enable_partitioning"] is True
    assert created["partition_count"] == P
    model = Model()
    check_show(daemon, model)

    # One message per key with --body / --partition-key.
    for n, key in enumerate(KEYS[:3]):
        (seq,) = send(daemon, "--body", f"{key}#{n}", "--partition-key", key)
        model.add(seq, f"{key}#{n}", key)
    check_show(daemon, model)

    # --repeat: five copies, one partition, consecutive sequence numbers.
    seqs = send(daemon, "--body", "again", "--partition-key", "日本語キー", "--repeat", "5")
    assert len(seqs) == 5
    assert {s >> 48 for s in seqs} == {partition_for_key("日本語キー", P)}
    assert seqs == list(range(seqs[0], seqs[0] + 5))
    for s in seqs:
        model.add(s, "again", "日本語キー")
    check_show(daemon, model)

    # JSON Lines through stdin: keyed (every key, unicode too) and keyless lines mixed.
    lines = []
    for i in range(14):
        key = KEYS[i % len(KEYS)] if i not in (6, 13) else None
        obj: dict[str, Any] = {"body": f"line-{i}"}
        if key is not None:
            obj["partition_key"] = key
        lines.append((obj["body"], key, json.dumps(obj, ensure_ascii=False)))
    seqs = send(daemon, "--input", "-", input="\n".join(text for _, _, text in lines) + "\n")
    assert len(seqs) == len(lines)
    for s, (body, key, _) in zip(seqs, lines, strict=True):
        model.add(s, body, key)
    check_show(daemon, model)

    # Keyless messages spread over several partitions.
    seqs = send(daemon, "--body", "nokey", "--repeat", "4")
    keyless = {s >> 48 for s, m in model.live.items() if m.key is None} | {s >> 48 for s in seqs}
    assert len(keyless) >= 3, keyless
    for s in seqs:
        model.add(s, "nokey", None)
    check_show(daemon, model)
    for key in KEYS:
        assert sum(m.key == key for m in model.live.values()) >= 2, key

    # Every message of one key sits on partition_for_key(key), in send order.
    check_peek_all(daemon, model)
    # Peek without --from-sequence starts at the lowest sequence number and walks on across
    # partitions (daemon/README.md §0.1.7).
    some = run(daemon, "peek", QUEUE, "--count", "250").jsonl()
    assert [m["sequence_number"] for m in some] == sorted(model.live)[:250]
    for m in some:
        check_message(m, model)

    # One delivery (abandoned), then peek twice: nothing changes, counts included.
    (got,) = run(daemon, "receive", QUEUE, "--settle", "abandon").jsonl()
    want = check_message(got, model)
    assert got["delivery_count"] == 1
    assert got["lock_token"]
    want.delivery_count = 1
    check_show(daemon, model)
    check_peek_all(daemon, model, only=got["partition_id"])
    check_peek_all(daemon, model, only=got["partition_id"])
    check_show(daemon, model)

    # Everything survives a stop and a start.
    run(daemon, "daemon", "stop")
    daemon.start()
    check_show(daemon, model)
    check_peek_all(daemon, model)

    # receive --count N (settle complete by default) drains, with the placement intact.
    total = len(model.live)
    drained: list[dict[str, Any]] = []
    for _ in range(5):
        if len(drained) >= total:
            break
        drained += run(daemon, "receive", QUEUE, "--count", str(total)).jsonl()
    assert len(drained) == total
    assert len({m["sequence_number"] for m in drained}) == total
    for m in drained:
        want = check_message(m, model)
        assert m["delivery_count"] == want.delivery_count + 1
        assert m["lock_token"]
    # Per key, receive order follows sequence (send) order.
    for key in KEYS:
        order = [m["sequence_number"] for m in drained if m["partition_key"] == key]
        assert order == sorted(order), key
    model.live.clear()
    check_show(daemon, model)
    assert run(daemon, "receive", QUEUE, "--count", "5").stdout.strip() == ""

    # The completions are durable too.
    run(daemon, "daemon", "stop")
    daemon.start()
    check_show(daemon, model)
    assert run(daemon, "peek", QUEUE, "--count", "250").stdout == ""


def test_settle_in_a_separate_invocation(daemon: Any) -> None:
    run(daemon, "queue", "create", QUEUE, "--enable-partitioning")
    (seq,) = send(daemon, "--body", "settle-me", "--partition-key", "customer-7")
    (other,) = send(daemon, "--body", "keep-me", "--partition-key", "Ωmega")

    got = run(daemon, "receive", QUEUE, "--settle", "none", "--count", "2").jsonl()
    assert {m["sequence_number"] for m in got} == {seq, other}
    token = next(m["lock_token"] for m in got if m["sequence_number"] == seq)
    assert token and all(m["delivery_count"] == 1 for m in got)
    assert run(daemon, "queue", "show", QUEUE).json()["active_message_count"] == 2

    (result,) = run(daemon, "message", "complete", QUEUE, token).jsonl()
    assert result == {"lock_token": token, "ok": True}
    info = run(daemon, "queue", "show", QUEUE).json()
    assert info["active_message_count"] == 1
    assert info["total_message_count"] == 1
    assert run(daemon, "peek", QUEUE, "--from-sequence", str(seq)).stdout == ""

    # The same token again: the lock is gone.
    again = daemon.cli("-o", "json", "message", "complete", QUEUE, token)
    assert again.code == 7, again
    lines = again.stderr.splitlines()
    assert len(lines) == 1, again.stderr
    assert json.loads(lines[0])["error"]["code"] == "MessageLockLost"
    # Without -o json: one "error: " line, same exit status.
    plain = fails(daemon, 7, "message", "complete", QUEUE, token, output="table")
    assert "lock" in str(plain).lower()

    # A token that never existed is refused the same way; a non-GUID is a bad request.
    bogus = "00000000-0000-0000-0000-000000000001"
    assert fails(daemon, 7, "message", "complete", QUEUE, bogus)["code"] == "MessageLockLost"
    assert fails(daemon, 5, "message", "complete", QUEUE, "not-a-guid")["code"] == "BadRequest"
    assert run(daemon, "queue", "show", QUEUE).json()["active_message_count"] == 1


def test_namespaces_scope_queues(daemon: Any) -> None:
    ns = "other-ns1"
    created = run(daemon, "namespace", "create", ns).json()
    assert created["name"] == ns
    names = {n["name"] for n in run(daemon, "namespace", "list").json()}
    assert names == {"sbemulatorns", ns}

    run(daemon, "-n", ns, "queue", "create", "hidden")
    assert run(daemon, "-n", ns, "send", "hidden", "--body", "x").json()["sent"] == 1
    run(daemon, "queue", "create", "visible")

    # Invisible from the default namespace, in every way.
    error = fails(daemon, 3, "queue", "show", "hidden")
    assert error["code"] == "MessagingEntityNotFound"
    fails(daemon, 3, "send", "hidden", "--body", "x")
    fails(daemon, 3, "peek", "hidden")
    assert [q["name"] for q in run(daemon, "queue", "list").json()] == ["visible"]
    assert [q["name"] for q in run(daemon, "-n", ns, "queue", "list").json()] == ["hidden"]
    shown = run(daemon, "-n", ns, "queue", "show", "hidden").json()
    assert shown["active_message_count"] == 1
    assert run(daemon, "namespace", "show", ns).json()["queue_count"] == 1

    # Namespaces and their queues persist.
    run(daemon, "daemon", "stop")
    daemon.start()
    assert {n["name"] for n in run(daemon, "namespace", "list").json()} == {"sbemulatorns", ns}
    assert run(daemon, "-n", ns, "queue", "show", "hidden").json()["active_message_count"] == 1
    fails(daemon, 3, "queue", "show", "hidden")

    fails(daemon, 4, "namespace", "create", ns)
    fails(daemon, 5, "namespace", "create", "bad_name!")
    assert run(daemon, "namespace", "delete", ns).json() == {"deleted": ns}
    fails(daemon, 3, "namespace", "show", ns)
    fails(daemon, 3, "-n", ns, "queue", "list")
    assert [n["name"] for n in run(daemon, "namespace", "list").json()] == ["sbemulatorns"]
    # The default namespace kept its queue.
    assert [q["name"] for q in run(daemon, "queue", "list").json()] == ["visible"]


def test_immutable_update_and_daemon_lifecycle(daemon: Any) -> None:
    run(daemon, "queue", "create", QUEUE, "--enable-partitioning")
    # Fixed at creation: update does not offer these flags (a usage error).
    for flag in ("--no-enable-partitioning", "--enable-session", "--enable-duplicate-detection"):
        error = fails(daemon, 2, "queue", "update", QUEUE, flag)
        assert error["code"] == "UsageError" and "No such option" in error["message"]
    fails(daemon, 2, "queue", "update", QUEUE, "--enable-session", output="table")
    # The daemon still refuses them from clients that send them.
    with daemon.client() as sb:
        try:
            sb.queue_update(QUEUE, requires_session=True)
        except SbctlError as err:
            assert err.code == "InvalidOperation"
        else:
            raise AssertionError("requires_session changed after creation")
    # A mutable property still updates, and the immutable one kept its value.
    updated = run(daemon, "queue", "update", QUEUE, "--max-delivery-count", "3").json()
    assert updated["max_delivery_count"] == 3
    assert updated["enable_partitioning"] is True
    assert updated["partition_count"] == P

    # `daemon start` while it runs: exit 0, and it says so.
    pid = daemon.pid()
    again = run(daemon, "daemon", "start").json()
    assert again["already_running"] is True
    assert again["pid"] == pid
    plain = daemon.cli("daemon", "start")
    assert plain.code == 0, plain
    assert "already running" in plain.stdout
    assert daemon.pid() == pid
    status = run(daemon, "daemon", "status").json()
    assert status["running"] is True
    assert status["pid"] == pid

    run(daemon, "daemon", "stop")
    socket = str(daemon.socket)
    error = fails(daemon, 9, "queue", "show", QUEUE)
    assert error["code"] == "ServiceCommunicationProblem"
    assert socket in error["message"]
    line = fails(daemon, 9, "send", QUEUE, "--body", "x", output="table")
    assert socket in str(line)
    down = daemon.cli("-o", "json", "daemon", "status")
    assert down.code == 9
    assert down.json()["running"] is False
    # Stopping a stopped daemon is a no-op.
    assert run(daemon, "daemon", "stop").json()["was_running"] is False

    daemon.start()
    assert run(daemon, "queue", "show", QUEUE).json()["max_delivery_count"] == 3
    check_show(daemon, Model())
