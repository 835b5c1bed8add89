"""Message lifecycle end to end: a real daemon, the real ``sbctl`` CLI with ``-o json``.

Deferral and ``receive-deferred`` (daemon/README.md §3.4), dead-lettering and the DLQ path in any
case
(§4.2), ``message renew-lock`` (§3.6), ``schedule``/``cancel-scheduled`` (§7), ``dlq
resubmit`` and ``purge`` (emulator chores), duplicate detection (§8), and the two timed
behaviours (a scheduled message becoming receivable, a lock running out), each on a plain
and on a partitioned queue (§0.1) and across ``daemon stop``/``daemon start``.

Both queues of a scenario live in one daemon and are driven concurrently (one thread
each), so the restart is shared and the file stays fast. The client (``daemon.client()``)
only prepares state and reads counts; the behaviour under test goes through the CLI.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sbctl.core.records import Message

QUEUES = {"plain": False, "parted": True}
LOCAL_MASK = (1 << 48) - 1
COUNT_KEYS = (
    "active_message_count",
    "deferred_message_count",
    "scheduled_message_count",
    "dead_letter_message_count",
    "total_message_count",
)


def run(daemon: Any, *args: str) -> Any:
    """``sbctl -o json ARGS`` that must succeed; returns the CliResult."""
    result = daemon.cli("-o", "json", *args)
    assert result.code == 0, f"sbctl -o json {' '.join(args)} failed: {result}"
    assert result.stderr == "", result.stderr
    return result


def lines(daemon: Any, *args: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = run(daemon, *args).jsonl()
    return out


def fails(daemon: Any, exit_code: int, error_code: str, *args: str) -> dict[str, Any]:
    """A command that must exit ``exit_code`` with one JSON error line on stderr."""
    result = daemon.cli("-o", "json", *args)
    assert result.code == exit_code, f"sbctl {' '.join(args)}: expected {exit_code}: {result}"
    (line,) = result.stderr.splitlines()
    error: dict[str, Any] = json.loads(line)["error"]
    assert error["code"] == error_code, error
    return error


def each(fn: Callable[[str], Any]) -> dict[str, Any]:
    """Run ``fn(queue)`` for the plain and the partitioned queue at once."""
    with ThreadPoolExecutor(len(QUEUES)) as pool:
        futures = {q: pool.submit(fn, q) for q in QUEUES}
        return {q: f.result() for q, f in futures.items()}


def restart(daemon: Any) -> None:
    daemon.stop()
    daemon.start()


def create(daemon: Any, **options: Any) -> None:
    with daemon.client() as sb:
        for q, partitioned in QUEUES.items():
            sb.queue_create(q, enable_partitioning=partitioned, **options)


def counts(daemon: Any, q: str) -> dict[str, int]:
    with daemon.client() as sb:
        desc = sb.queue_get(q)
    return {k: desc[k] for k in COUNT_KEYS}


def expect(
    daemon: Any, q: str, *, active: int = 0, deferred: int = 0, scheduled: int = 0, dead: int = 0
) -> None:
    """``active`` is the reported ActiveMessageCount, deferred included (daemon/README.md
    §0.4.1)."""
    assert counts(daemon, q) == {
        "active_message_count": active,
        "deferred_message_count": deferred,
        "scheduled_message_count": scheduled,
        "dead_letter_message_count": dead,
        "total_message_count": active + scheduled + dead,
    }


def check_placement(q: str, m: dict[str, Any]) -> None:
    seq = m["sequence_number"]
    if QUEUES[q]:
        assert m["partition_id"] == seq >> 48
        assert seq & LOCAL_MASK >= 1
    else:
        assert m["partition_id"] in (0, None)
        assert seq >> 48 == 0


def send(daemon: Any, q: str, *messages: Message) -> list[int]:
    with daemon.client() as sb:
        return sb.send(q, list(messages))


# ===================================================================== deferral


def test_receive_settle_defer_then_receive_deferred(daemon: Any) -> None:
    create(daemon)
    seqs = {q: send(daemon, q, Message(b"a"), Message(b"b")) for q in QUEUES}

    def defer(q: str) -> None:
        got = lines(daemon, "receive", q, "--count", "2", "--settle", "defer")
        assert sorted(m["sequence_number"] for m in got) == sorted(seqs[q])
        assert sorted(m["body"] for m in got) == ["a", "b"]
        for m in got:
            check_placement(q, m)
            assert (m["state"], m["delivery_count"]) == ("active", 1)
        expect(daemon, q, active=2, deferred=2)
        assert lines(daemon, "receive", q) == []  # only receivable by number now

    each(defer)
    restart(daemon)

    def by_number(q: str) -> None:
        expect(daemon, q, active=2, deferred=2)
        assert lines(daemon, "receive", q) == []
        s1, s2 = seqs[q]
        missing = str(max(s1, s2) + 100)
        # A bad number fails the whole request: nothing is taken.
        fails(daemon, 7, "MessageNotFound", "receive-deferred", q, str(s1), missing)
        expect(daemon, q, active=2, deferred=2)
        got = lines(daemon, "receive-deferred", q, str(s1), str(s2))
        assert [m["sequence_number"] for m in got] == [s1, s2]
        for m in got:
            assert (m["state"], m["delivery_count"]) == ("deferred", 2)
            assert m["lock_token"] is not None
        expect(daemon, q)  # completed by default
        fails(daemon, 7, "MessageNotFound", "receive-deferred", q, str(s1))

    each(by_number)


# ===================================================================== dead-lettering and locks


def test_dead_letter_and_renew_lock(daemon: Any) -> None:
    create(daemon)
    state: dict[str, dict[str, Any]] = {q: {} for q in QUEUES}

    def before(q: str) -> None:
        s = state[q]
        (s["auto"],) = send(daemon, q, Message(b"auto"))
        (got,) = lines(daemon, "receive", q, "--settle", "dead-letter")
        assert got["sequence_number"] == s["auto"]
        expect(daemon, q, dead=1)
        (s["manual"],) = send(daemon, q, Message(b"manual", application_properties={"n": 1}))
        (got,) = lines(daemon, "receive", q, "--settle", "none")
        assert (got["sequence_number"], got["body"]) == (s["manual"], "manual")
        token = got["lock_token"]
        (renewed,) = lines(daemon, "message", "renew-lock", q, token)
        assert renewed["ok"] is True and renewed["lock_token"] == token
        assert renewed["locked_until_utc"] > got["locked_until_utc"]  # from now, not before
        (done,) = lines(
            daemon,
            "message",
            "dead-letter",
            q,
            token,
            "--reason",
            "Bad input",
            "--description",
            "field x is missing",
            "-p",
            "k=v",
        )
        assert done == {"lock_token": token, "ok": True}
        fails(daemon, 7, "MessageLockLost", "message", "renew-lock", q, token)
        fails(daemon, 7, "MessageLockLost", "message", "dead-letter", q, token)
        expect(daemon, q, dead=2)
        # A lock held across the restart is lost with it (daemon/README.md §3.7).
        (s["held"],) = send(daemon, q, Message(b"held"))
        with daemon.client() as sb:
            (held,) = sb.receive(q)
        s["held_token"] = held.lock_token
        expect(daemon, q, active=1, dead=2)

    each(before)
    restart(daemon)

    def after(q: str) -> None:
        s = state[q]
        expect(daemon, q, active=1, dead=2)
        fails(daemon, 7, "MessageLockLost", "message", "renew-lock", q, s["held_token"])
        suffix = "$DeadLetterQueue" if q == "plain" else "$DEADLETTERQUEUE"
        (peeked,) = lines(daemon, "peek", f"{q}/{suffix}", "--from-sequence", str(s["manual"]))
        assert peeked["sequence_number"] == s["manual"]  # daemon/README.md §0.4.1: number kept
        assert peeked["state"] == "deadlettered"
        assert peeked["dead_letter_reason"] == "Bad input"
        assert peeked["dead_letter_error_description"] == "field x is missing"
        assert peeked["application_properties"] == {
            "n": 1,
            "k": "v",
            "DeadLetterReason": "Bad input",
            "DeadLetterErrorDescription": "field x is missing",
        }
        got = lines(daemon, "receive", f"{q}/$deadletterqueue", "--count", "10")
        assert sorted(m["sequence_number"] for m in got) == sorted([s["auto"], s["manual"]])
        for m in got:
            check_placement(q, m)
        expect(daemon, q, active=1)  # both completed out of the DLQ
        assert lines(daemon, "peek", f"{q}/$deadletterqueue", "--count", "10") == []

    each(after)


# ===================================================================== scheduled messages


def test_schedule_peek_and_cancel(daemon: Any) -> None:
    create(daemon)
    seq: dict[str, int] = {}
    active: dict[str, int] = {}

    def schedule(q: str) -> None:
        (out,) = lines(daemon, "schedule", q, "--at", "+1h", "--body", "x")
        assert out["sent"] == 1
        (seq[q],) = out["sequence_numbers"]
        assert lines(daemon, "receive", q) == []
        (peeked,) = lines(daemon, "peek", q, "--count", "10")
        assert (peeked["sequence_number"], peeked["state"]) == (seq[q], "scheduled")
        assert peeked["scheduled_enqueue_time_utc"] is not None
        check_placement(q, peeked)
        expect(daemon, q, scheduled=1)
        (active[q],) = send(daemon, q, Message(b"now"))

    each(schedule)
    restart(daemon)

    def cancel(q: str) -> None:
        expect(daemon, q, active=1, scheduled=1)
        (peeked,) = lines(daemon, "peek", q, "--from-sequence", str(seq[q]))
        assert (peeked["sequence_number"], peeked["state"]) == (seq[q], "scheduled")
        # All or nothing: an active message's number fails the whole request.
        fails(daemon, 7, "MessageNotFound", "cancel-scheduled", q, str(seq[q]), str(active[q]))
        expect(daemon, q, active=1, scheduled=1)
        assert lines(daemon, "cancel-scheduled", q, str(seq[q])) == [{"cancelled": 1}]
        expect(daemon, q, active=1)
        fails(daemon, 7, "MessageNotFound", "cancel-scheduled", q, str(seq[q]))

    each(cancel)


# ===================================================================== chores: resubmit, purge


def test_dlq_resubmit_and_purge(daemon: Any) -> None:
    create(daemon)
    with daemon.client() as sb:
        sb.queue_create("elsewhere")
    seqs: dict[str, list[int]] = {}

    def chores(q: str) -> None:
        seqs[q] = send(
            daemon,
            q,
            *[Message(b"m%d" % k, application_properties={"k": k}) for k in range(3)],
        )
        with daemon.client() as sb:
            got = sb.receive(q, 10)
            assert len(got) == 3
            sb.dead_letter(q, [m.lock_token for m in got], "R", "D")  # type: ignore[misc]
        expect(daemon, q, dead=3)
        (out,) = lines(daemon, "dlq", "resubmit", q, "--count", "2")
        assert (out["resubmitted"], out["to"]) == (2, q)
        assert len(out["sequence_numbers"]) == 2
        assert not set(out["sequence_numbers"]) & set(seqs[q])  # new numbers
        expect(daemon, q, active=2, dead=1)
        (out,) = lines(daemon, "dlq", "resubmit", q, "--to", "elsewhere")
        assert (out["resubmitted"], out["to"]) == (1, "elsewhere")
        expect(daemon, q, active=2)
        with daemon.client() as sb:
            back = sb.receive(q, 10)
            assert len(back) == 2
            for m in back:  # the dead-letter properties are stripped
                assert m.application_properties == {"k": int(m.body[1:])}
            # One resubmitted message stays locked, the other is deferred; add a scheduled
            # one and a dead-lettered one: purge takes them all, locked ones included.
            sb.defer(q, [back[0].lock_token])  # type: ignore[list-item]
            sb.schedule(q, [Message(b"later")], int(time.time() * 1000) + 3_600_000)
        (dead,) = send(daemon, q, Message(b"dead"))
        with daemon.client() as sb:
            (d,) = sb.receive(q, 10)
            assert d.sequence_number == dead
            sb.dead_letter(q, [d.lock_token])  # type: ignore[list-item]
        expect(daemon, q, active=2, deferred=1, scheduled=1, dead=1)
        assert lines(daemon, "purge", q) == [{"purged": 3}]
        expect(daemon, q, dead=1)
        assert lines(daemon, "purge", q, "--dlq") == [{"purged": 1}]
        expect(daemon, q)
        fails(daemon, 7, "MessageLockLost", "message", "complete", q, str(back[1].lock_token))

    each(chores)
    restart(daemon)
    for q in QUEUES:
        expect(daemon, q)
    expect(daemon, "elsewhere", active=2)
    with daemon.client() as sb:
        moved = sb.receive("elsewhere", 10, mode="receive-and-delete")
    assert len(moved) == 2
    for m in moved:
        assert m.application_properties == {"k": int(m.body[1:])}


# ===================================================================== duplicate detection


def test_duplicate_detection_drops_repeated_message_ids(daemon: Any) -> None:
    seq: dict[str, int] = {}

    def first(q: str) -> None:
        name = f"dd-{q}"
        flags = ["--enable-partitioning"] if QUEUES[q] else []
        run(daemon, "queue", "create", name, "--enable-duplicate-detection", *flags)
        (out,) = lines(daemon, "send", name, "--body", "a", "--message-id", "m1")
        (seq[q],) = out["sequence_numbers"]
        (out,) = lines(daemon, "send", name, "--body", "b", "--message-id", "m1")
        assert out["sent"] == 1 and out["diverted_to"] is None  # accepted, then dropped
        assert out["sequence_numbers"] == [seq[q]]
        expect(daemon, name, active=1)

    each(first)
    restart(daemon)

    def second(q: str) -> None:
        name = f"dd-{q}"
        (out,) = lines(daemon, "send", name, "--body", "c", "--message-id", "m1")
        assert out["sequence_numbers"] == [seq[q]]
        expect(daemon, name, active=1)
        # daemon/README.md §8.3: partitioned entities key on MessageId + PartitionKey.
        (out,) = lines(
            daemon, "send", name, "--body", "d", "--message-id", "m1", "--partition-key", "p2"
        )
        if QUEUES[q]:
            assert out["sequence_numbers"] != [seq[q]]
            expect(daemon, name, active=2)
        else:
            assert out["sequence_numbers"] == [seq[q]]
            expect(daemon, name, active=1)
        with daemon.client() as sb:
            got = sb.receive(name, 10, mode="receive-and-delete")
        assert sorted(m.body for m in got) == ([b"a", b"d"] if QUEUES[q] else [b"a"])

    each(second)


# ===================================================================== timed behaviour


@pytest.mark.slow
def test_scheduled_enqueue_time_becomes_receivable(daemon: Any) -> None:
    create(daemon)
    seq: dict[str, int] = {}
    sent_at: dict[str, float] = {}

    def schedule(q: str) -> None:
        sent_at[q] = time.monotonic()
        (out,) = lines(daemon, "send", q, "--body", "later", "--scheduled-enqueue-time", "+2s")
        (seq[q],) = out["sequence_numbers"]
        assert lines(daemon, "receive", q) == []
        expect(daemon, q, scheduled=1)

    each(schedule)
    restart(daemon)  # still scheduled while the daemon is down and back

    def receive(q: str) -> None:
        (got,) = lines(daemon, "receive", q, "--max-wait", "10s")
        assert time.monotonic() - sent_at[q] >= 1.5
        assert got["body"] == "later" and got["state"] == "active"
        assert got["sequence_number"] != seq[q]  # daemon/README.md §2.4: a new number once active
        check_placement(q, got)
        expect(daemon, q)

    each(receive)


@pytest.mark.slow
def test_lock_runs_out_and_renewal_extends_it(daemon: Any) -> None:
    """With ``--lock-duration 5s``: an unsettled message comes back with delivery count 2
    after about 5.5 s, while one whose lock was renewed at 2.5 s is still held at 5.5 s
    (regression: the daemon's tick once freed renewed locks at their original expiry)."""
    state: dict[str, dict[str, Any]] = {q: {} for q in QUEUES}

    def hold(q: str) -> None:
        s = state[q]
        name = f"lk-{q}"
        flags = ["--enable-partitioning"] if QUEUES[q] else []
        run(daemon, "queue", "create", name, "--lock-duration", "5s", *flags)
        seqs = send(daemon, name, Message(b"lapse"), Message(b"renewed"))
        got = {
            m["body"]: m for m in lines(daemon, "receive", name, "--count", "2", "--settle", "none")
        }
        s["at"] = time.monotonic()
        assert sorted(m["sequence_number"] for m in got.values()) == sorted(seqs)
        assert {m["delivery_count"] for m in got.values()} == {1}
        s["lapse"], s["renewed"] = got["lapse"]["lock_token"], got["renewed"]["lock_token"]
        s["until"] = got["renewed"]["locked_until_utc"]
        assert lines(daemon, "receive", name) == []  # both locked

    each(hold)

    def later(q: str) -> None:
        s = state[q]
        name = f"lk-{q}"
        time.sleep(max(0.0, s["at"] + 2.5 - time.monotonic()))
        (renewed,) = lines(daemon, "message", "renew-lock", name, s["renewed"])
        assert renewed["ok"] is True and renewed["locked_until_utc"] > s["until"]
        time.sleep(max(0.0, s["at"] + 5.5 - time.monotonic()))
        (got,) = lines(daemon, "receive", name, "--count", "2", "--max-wait", "5s")
        assert (got["body"], got["delivery_count"]) == ("lapse", 2)  # completed now
        fails(daemon, 7, "MessageLockLost", "message", "complete", name, s["lapse"])
        assert lines(daemon, "message", "complete", name, s["renewed"]) == [
            {"lock_token": s["renewed"], "ok": True}
        ]
        expect(daemon, name)

    each(later)
