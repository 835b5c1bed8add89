"""Sessions, transactions and auto-forwarding end to end: a real daemon, the real ``sbctl``
CLI with ``-o json``, and the real client.

Session receivers (``receive --session-id`` / ``--next-session``, daemon/README.md §9), session
state
and ``session list|get-state|set-state|renew-lock``, ``send --transaction`` and the
client's ``with client.transaction()`` (daemon/README.md §12, §0.1.8), and a forwarding chain with
its transfer dead-letter queue (daemon/README.md §11, §4.2, §4.6). Every scenario runs on a plain
and
on a partitioned queue of one daemon, the two driven concurrently (one thread each), and is
checked again after ``daemon stop``/``daemon start``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sbctl.core.errors import InvalidOperation, MessageSizeExceeded
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message

QUEUES = {"plain": False, "parted": True}
TDLQ = "$Transfer/$DeadLetterQueue"
NON_SESSION_RECEIVER = (
    "It is not possible for an entity that requires sessions to create a non-sessionful "
    "message receiver."
)
TOO_MANY_IN_TRANSACTION = "Can't send more than 100 messages in a single transaction"


def run(daemon: Any, *args: str, input: str | None = None) -> Any:
    """``sbctl -o json ARGS`` that must succeed; returns the CliResult."""
    result = daemon.cli("-o", "json", *args, input=input)
    assert result.code == 0, f"sbctl -o json {' '.join(args)} failed: {result}"
    assert result.stderr == "", result.stderr
    return result


def obj(daemon: Any, *args: str, input: str | None = None) -> Any:
    return run(daemon, *args, input=input).json()


def lines(daemon: Any, *args: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = run(daemon, *args).jsonl()
    return out


def fails(
    daemon: Any, exit_code: int, error_code: str, *args: str, input: str | None = None
) -> dict[str, Any]:
    """A command that must exit ``exit_code`` with one JSON error line on stderr."""
    result = daemon.cli("-o", "json", *args, input=input)
    assert result.code == exit_code, f"sbctl {' '.join(args)}: expected {exit_code}: {result}"
    assert result.stdout == ""
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


def jsonl(*records: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def desc(daemon: Any, q: str) -> dict[str, Any]:
    with daemon.client() as sb:
        return sb.queue_get(q)


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [m["body"] for m in messages]


# ===================================================================== sessions


def test_session_receivers(daemon: Any) -> None:
    with daemon.client() as sb:
        for q, parted in QUEUES.items():
            sb.queue_create(q, requires_session=True, enable_partitioning=parted)
    records = [{"body": f"{s}{i}", "session_id": s} for i in range(3) for s in ("A", "B", "C")]

    def scenario(q: str) -> tuple[str, str]:
        assert obj(daemon, "send", q, "--input", "-", input=jsonl(*records))["sent"] == 9
        error = fails(daemon, 5, "InvalidOperation", "receive", q)
        assert error["message"] == NON_SESSION_RECEIVER
        fails(daemon, 5, "InvalidOperation", "send", q, "--body", "no session")
        # One session, in order, completed (the default settlement).
        got = lines(daemon, "receive", q, "--session-id", "A", "--count", "10")
        assert bodies(got) == ["A0", "A1", "A2"]
        assert [m["session_id"] for m in got] == ["A"] * 3
        if QUEUES[q]:
            assert {m["partition_id"] for m in got} == {partition_for_key("A", 16)}
        assert lines(daemon, "receive", q, "--session-id", "A", "--count", "10") == []
        # Two next-session receivers take two different sessions; the first keeps its lock.
        first = lines(daemon, "receive", q, "--next-session", "--count", "10", "--settle", "none")
        second = lines(daemon, "receive", q, "--next-session", "--count", "10")
        s1, s2 = first[0]["session_id"], second[0]["session_id"]
        assert {s1, s2} == {"B", "C"}
        assert bodies(first) == [f"{s1}{i}" for i in range(3)]
        assert bodies(second) == [f"{s2}{i}" for i in range(3)]
        assert all(m["lock_token"] for m in first)
        # None left: A and s2 are drained, s1 is held. (ServiceTimeout is transient: without
        # --no-retry the CLI would retry it for seconds; retries are tested on their own.)
        fails(daemon, 11, "ServiceTimeout", "--no-retry", "receive", q, "--next-session")
        fails(daemon, 7, "SessionCannotBeLocked", "receive", q, "--session-id", s1)
        return s1, s2

    held = each(scenario)
    restart(daemon)  # session locks do not survive a restart: s1 is free again

    def after(q: str) -> None:
        s1 = held[q][0]
        got = lines(daemon, "receive", q, "--next-session", "--count", "10")
        assert bodies(got) == [f"{s1}{i}" for i in range(3)]
        assert [m["delivery_count"] for m in got] == [2, 2, 2]
        fails(daemon, 11, "ServiceTimeout", "--no-retry", "receive", q, "--next-session")
        assert desc(daemon, q)["active_message_count"] == 0

    each(after)


def test_session_state_list_and_renew_lock(daemon: Any) -> None:
    with daemon.client() as sb:
        for q, parted in QUEUES.items():
            sb.queue_create(
                q, requires_session=True, enable_partitioning=parted, lock_duration=30_000
            )

    def scenario(q: str) -> str:
        assert obj(daemon, "session", "get-state", q, "S1") == {"session_id": "S1", "state": None}
        run(daemon, "session", "set-state", q, "S1", "--state", "step-1")
        run(daemon, "session", "set-state", q, "S3", "--state", "temporary")
        run(daemon, "session", "set-state", q, "S3", "--clear")
        run(daemon, "send", q, "--body", "m", "--session-id", "S2", "--repeat", "2")
        assert obj(daemon, "session", "get-state", q, "S1") == {
            "session_id": "S1",
            "state": "step-1",
        }
        assert obj(daemon, "session", "get-state", q, "S3")["state"] is None
        listed = {s["session_id"]: s for s in obj(daemon, "session", "list", q)}
        assert set(listed) == {"S1", "S2"}
        assert (listed["S1"]["active_message_count"], listed["S1"]["has_state"]) == (0, True)
        assert (listed["S2"]["active_message_count"], listed["S2"]["has_state"]) == (2, False)
        assert listed["S2"]["locked_until_utc"] is None
        with daemon.client() as sb:
            token: str = sb.accept_session(q, "S2")["session_lock_token"]
        renewed = obj(daemon, "session", "renew-lock", q, token)
        assert renewed["session_id"] == "S2" and renewed["locked_until_utc"]
        listed = {s["session_id"]: s for s in obj(daemon, "session", "list", q)}
        assert listed["S2"]["locked_until_utc"] == renewed["locked_until_utc"]
        fails(daemon, 7, "SessionCannotBeLocked", "receive", q, "--session-id", "S2")
        return token

    tokens = each(scenario)
    restart(daemon)

    def after(q: str) -> None:
        fails(daemon, 7, "SessionLockLost", "session", "renew-lock", q, tokens[q])
        assert obj(daemon, "session", "get-state", q, "S1")["state"] == "step-1"
        listed = {s["session_id"]: s for s in obj(daemon, "session", "list", q)}
        assert set(listed) == {"S1", "S2"}
        assert listed["S2"]["locked_until_utc"] is None
        assert listed["S2"]["active_message_count"] == 2
        run(daemon, "session", "set-state", q, "S1", "--clear")
        assert [s["session_id"] for s in obj(daemon, "session", "list", q)] == ["S2"]

    each(after)
    restart(daemon)
    for q in QUEUES:
        assert obj(daemon, "session", "get-state", q, "S1")["state"] is None


# ===================================================================== transactions


def test_send_transaction(daemon: Any) -> None:
    with daemon.client() as sb:
        for q, parted in QUEUES.items():
            sb.queue_create(q, enable_partitioning=parted)
    mixed = jsonl({"body": "1", "partition_key": "a"}, {"body": "2", "partition_key": "b"})
    one_key = jsonl(*[{"body": f"k{i}", "partition_key": "k"} for i in range(3)])
    too_many = jsonl(*[{"body": "x", "partition_key": "k"}] * 101)

    def scenario(q: str) -> list[int]:
        parted = QUEUES[q]
        if parted:
            error = fails(
                daemon,
                5,
                "InvalidOperation",
                "send",
                q,
                "--input",
                "-",
                "--transaction",
                input=mixed,
            )
            assert "partition key" in error["message"]
            assert desc(daemon, q)["total_message_count"] == 0
        else:
            sent = obj(daemon, "send", q, "--input", "-", "--transaction", input=mixed)
            assert sent["sent"] == 2
        error = fails(
            daemon, 6, "QuotaExceeded", "send", q, "--input", "-", "--transaction", input=too_many
        )
        assert error["message"] == TOO_MANY_IN_TRANSACTION
        sent = obj(daemon, "send", q, "--input", "-", "--transaction", input=one_key)
        seqs: list[int] = sent["sequence_numbers"]
        assert sent["sent"] == 3 and len(seqs) == 3
        if parted:
            assert {s >> 48 for s in seqs} == {partition_for_key("k", 16)}
        assert desc(daemon, q)["active_message_count"] == (3 if parted else 5)
        return seqs

    seqs = each(scenario)
    restart(daemon)

    def after(q: str) -> None:
        got = lines(daemon, "receive", q, "--count", "10", "--mode", "receive-and-delete")
        keyed = [m for m in got if m["partition_key"] == "k"]
        assert [m["sequence_number"] for m in keyed] == seqs[q]
        assert bodies(keyed) == ["k0", "k1", "k2"]
        assert len(got) == (3 if QUEUES[q] else 5)

    each(after)


def test_client_transaction_settles_and_sends_atomically(daemon: Any) -> None:
    with daemon.client() as sb:
        for q, parted in QUEUES.items():
            sb.queue_create(q, enable_partitioning=parted)
            sb.send(q, [Message(b"old-%d" % i, partition_key="k") for i in range(3)])

    def scenario(q: str) -> int:
        with daemon.client() as sb:
            got = sb.receive(q, count=10)
            assert sorted(m.body for m in got) == [b"old-0", b"old-1", b"old-2"]
            with sb.transaction() as tx:
                assert sb.complete(q, [m.lock_token for m in got[:2] if m.lock_token])
                assert sb.dead_letter(q, [got[2].lock_token or ""], reason="R") != []
                assert sb.send(q, [Message(b"new", partition_key="k")]) == []
                with pytest.raises(InvalidOperation):
                    sb.receive(q)  # daemon/README.md §12.1: no receive inside a transaction
            assert tx.result is not None
            assert [r.get("ok") for r in tx.result["settlements"]] == [True] * 3
            (seq,) = tx.result["sequence_numbers"]
            # A failing transaction stores and settles nothing; the lock survives it.
            (new,) = sb.receive(q)
            assert (new.sequence_number, new.body) == (seq, b"new")
            with pytest.raises(MessageSizeExceeded), sb.transaction():
                sb.complete(q, [new.lock_token or ""])
                sb.send(q, [Message(b"x" * 300_000, partition_key="k")])
            assert [m.body for m in sb.peek(q, 10)] == [b"new"]
            assert sb.abandon(q, [new.lock_token or ""])[0].get("ok") is True
            counts = sb.queue_get(q)
            assert (counts["active_message_count"], counts["dead_letter_message_count"]) == (1, 1)
            return seq

    seqs = each(scenario)
    restart(daemon)

    def after(q: str) -> None:
        (m,) = lines(daemon, "receive", q)
        assert (m["body"], m["sequence_number"], m["delivery_count"]) == ("new", seqs[q], 2)
        (dead,) = lines(daemon, "peek", f"{q}/$deadletterqueue")
        assert (dead["body"], dead["dead_letter_reason"]) == ("old-2", "R")
        assert desc(daemon, q)["active_message_count"] == 0

    each(after)


# ===================================================================== auto-forwarding


def test_forwarding_chain_and_transfer_dead_letter_queue(daemon: Any) -> None:
    def scenario(q: str) -> int:
        part = ["--enable-partitioning"] if QUEUES[q] else []
        a, b, c = f"{q}-a", f"{q}-b", f"{q}-c"
        run(daemon, "queue", "create", c, *part)
        fails(daemon, 3, "MessagingEntityNotFound", "queue", "create", b, "--forward-to", "nope")
        fails(daemon, 5, "InvalidOperation", "queue", "create", b, "--forward-to", b)
        assert obj(daemon, "queue", "create", b, "--forward-to", c)["forward_to"] == c
        run(daemon, "queue", "create", a, *part, "--forward-to", b)
        (seq,) = obj(daemon, "send", a, "--body", "hop", "--partition-key", "pk")[
            "sequence_numbers"
        ]
        (m,) = lines(daemon, "peek", c, "--count", "10")
        assert (m["body"], m["enqueued_sequence_number"]) == ("hop", seq)
        if QUEUES[q]:
            assert m["partition_id"] == partition_for_key("pk", 16)
        fails(daemon, 5, "InvalidOperation", "receive", a)
        # A disabled destination: b's forward fails, into b's transfer DLQ.
        run(daemon, "queue", "update", c, "--status", "SendDisabled")
        (stuck,) = obj(daemon, "send", a, "--body", "stuck")["sequence_numbers"]
        (dead,) = lines(daemon, "peek", f"{b}/{TDLQ}")
        assert (dead["body"], dead["enqueued_sequence_number"]) == ("stuck", stuck)
        assert dead["dead_letter_reason"] == "MessagingEntityDisabled"
        assert desc(daemon, b)["transfer_dead_letter_message_count"] == 1
        return stuck

    stuck = each(scenario)
    restart(daemon)

    def after(q: str) -> None:
        a, b, c = f"{q}-a", f"{q}-b", f"{q}-c"
        (dead,) = lines(daemon, "peek", f"{b}/{TDLQ}")
        assert (dead["body"], dead["dead_letter_reason"]) == ("stuck", "MessagingEntityDisabled")
        assert dead["enqueued_sequence_number"] == stuck[q]
        counts = desc(daemon, b)
        assert (counts["transfer_dead_letter_message_count"], counts["total_message_count"]) == (
            1,
            1,
        )
        fails(daemon, 5, "InvalidOperation", "receive", a)
        # The transfer DLQ is receivable; what it held goes nowhere else.
        (got,) = lines(daemon, "receive", f"{b}/{TDLQ}")
        assert got["body"] == "stuck"
        assert desc(daemon, b)["transfer_dead_letter_message_count"] == 0
        (m,) = lines(daemon, "receive", c, "--count", "10")
        assert m["body"] == "hop"

    each(after)


def test_resubmit_a_forwarded_message_from_the_transfer_dead_letter_queue(daemon: Any) -> None:
    run(daemon, "queue", "create", "c", "--status", "SendDisabled")
    run(daemon, "queue", "create", "b", "--forward-to", "c")
    run(daemon, "queue", "create", "a", "--forward-to", "b")
    run(daemon, "send", "a", "--body", "stuck")
    assert desc(daemon, "b")["transfer_dead_letter_message_count"] == 1
    run(daemon, "queue", "update", "c", "--status", "Active")
    moved = obj(daemon, "dlq", "resubmit", f"b/{TDLQ}", "--to", "c")
    assert (moved["resubmitted"], moved["to"]) == (1, "c")
    (m,) = lines(daemon, "receive", "c")
    assert (m["body"], m["dead_letter_reason"]) == ("stuck", None)
