"""Injected store faults through the real ``sbctl`` CLI against a real daemon.

The acceptance scenario (daemon/README.md §0.1.5, §0.1.10): on a 16-partition queue, keyless sends
all
succeed with one and then eight partitions down, keyed sends to a down partition fail, the
queue shows Limited, and once the faults are cleared every message comes back exactly once.
Also: the client's retries and its final message (daemon/README.md §16.2), the slow kind, the daemon
log, usage errors, and a parked receive woken when the stores come back.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from sbctl import Client
from sbctl.core.errors import ServiceCommunicationProblem
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message

EXIT_COMMUNICATION = 9  # ServiceCommunicationProblem (sbctl.core.errors)


def key_for(pid: int, n: int = 16) -> str:
    i = 0
    while partition_for_key(f"k{i}", n) != pid:
        i += 1
    return f"k{i}"


def lines(first: int, count: int) -> str:
    return "".join(
        json.dumps({"body": f"m{i}", "message_id": f"m{i}"}) + "\n"
        for i in range(first, first + count)
    )


def test_acceptance_sixteen_partitions(daemon: Any) -> None:
    daemon.cli("queue", "create", "orders", "--enable-partitioning", check=True)
    add = daemon.cli(
        "-o", "json", "fault", "add", "--entity", "orders", "--partition", "3", check=True
    )
    one = add.json()
    assert one["partitions"] == [3] and one["kind"] == "unavailable"

    sent = daemon.cli(
        "-o", "json", "send", "orders", "--input", "-", "--batch-size", "7", input=lines(0, 200)
    )
    assert sent.code == 0, sent
    seqs = sent.json()["sequence_numbers"]
    assert len(seqs) == 200 and 3 not in {s >> 48 for s in seqs}

    eight = ["--partition", "3"]
    for pid in (5, 7, 9, 11, 13, 15, 0):
        eight += ["--partition", str(pid)]
    daemon.cli("fault", "add", "--entity", "orders", *eight, check=True)
    sent = daemon.cli("-o", "json", "send", "orders", "--input", "-", input=lines(200, 300))
    assert sent.code == 0, sent
    assert not {s >> 48 for s in sent.json()["sequence_numbers"]} & {0, 3, 5, 7, 9, 11, 13, 15}

    keyed = daemon.cli("--no-retry", "send", "orders", "--body", "k", "--partition-key", key_for(9))
    assert keyed.code == EXIT_COMMUNICATION, keyed
    assert "partition 9 of queue 'orders' is unavailable" in keyed.stderr

    show = daemon.cli("-o", "json", "queue", "show", "orders", check=True).json()
    assert show["availability_status"] == "Limited"
    down = [p for p in show["partitions"] if p.get("availability_status") == "Unavailable"]
    assert sorted(p["partition_id"] for p in down) == [0, 3, 5, 7, 9, 11, 13, 15]
    table = daemon.cli("queue", "show", "orders", check=True).stdout
    assert "Limited" in table

    listed = daemon.cli("-o", "json", "fault", "list", check=True).json()
    assert [f["id"] for f in listed] == ["f1", "f2"]
    assert "f2" in daemon.cli("fault", "list", check=True).stdout

    cleared = daemon.cli("fault", "clear", check=True)
    assert cleared.stdout.strip() == "cleared 2 faults: f1, f2"
    assert daemon.cli("-o", "json", "queue", "show", "orders").json()["availability_status"] == (
        "Available"
    )

    got: list[str] = []
    while True:
        batch = daemon.cli(
            "-o", "json", "receive", "orders", "--count", "1000", "--mode", "receive-and-delete"
        )
        assert batch.code == 0, batch
        messages = batch.jsonl()
        if not messages:
            break
        got += [m["message_id"] for m in messages]
    assert len(got) == 500
    assert set(got) == {f"m{i}" for i in range(500)}


def test_the_client_retries_then_gives_up_clearly(daemon: Any) -> None:
    daemon.cli("queue", "create", "plain", check=True)
    daemon.cli("fault", "add", "--entity", "plain", check=True)
    t0 = time.monotonic()
    result = daemon.cli("--retry-total", "1", "send", "plain", "--body", "x")
    assert time.monotonic() - t0 >= 0.5  # one back-off of about 0.8 s
    assert result.code == EXIT_COMMUNICATION, result
    assert result.stderr.strip() == (
        "error: the store of queue 'plain' is unavailable (injected fault f1) "
        "(gave up after 1 retry)"
    )
    as_json = daemon.cli("--no-retry", "-o", "json", "peek", "plain")
    assert json.loads(as_json.stderr)["error"]["code"] == "ServiceCommunicationProblem"
    daemon.cli("fault", "clear", "f1", check=True)
    daemon.cli("send", "plain", "--body", "x", check=True)


def test_slow_stores_answer_late(daemon: Any) -> None:
    daemon.cli("queue", "create", "q", "--enable-partitioning", check=True)
    daemon.cli(
        "fault", "add", "--entity", "q", "--partition", "4", "--kind", "slow",
        "--latency", "700ms", check=True,
    )  # fmt: skip
    with daemon.client() as sb:
        t0 = time.monotonic()
        sb.send("q", [Message(b"slow", partition_key=key_for(4))])
        slow = time.monotonic() - t0
        t0 = time.monotonic()
        sb.send("q", [Message(b"fast", partition_key=key_for(5))])
        fast = time.monotonic() - t0
        assert slow >= 0.6, slow
        assert fast < slow, (fast, slow)
        show = sb.queue_get("q")
        assert show["availability_status"] == "Available"
        assert show["partitions"][4]["latency"] == "PT0.7S"
        sb.fault_clear()
        t0 = time.monotonic()
        sb.send("q", [Message(b"again", partition_key=key_for(4))])
        assert time.monotonic() - t0 < slow


def test_the_daemon_log_tells_about_faults(daemon: Any) -> None:
    daemon.cli("queue", "create", "q", check=True)
    daemon.cli("fault", "add", "--entity", "q", check=True)
    daemon.cli("fault", "clear", "--all", check=True)
    log = (daemon.data_dir / "sbctld.log").read_text()
    assert "fault f1 added: every partition of queue sbemulatorns/q unavailable" in log
    assert "fault f1 cleared (was: every partition of queue sbemulatorns/q unavailable)" in log


def test_usage_and_validation_errors(daemon: Any) -> None:
    daemon.cli("queue", "create", "q", "--enable-partitioning", check=True)
    no_entity = daemon.cli("fault", "add", "--partition", "3")
    assert no_entity.code == 2 and "--partition needs --entity" in no_entity.stderr
    assert daemon.cli("fault", "add", "--entity", "q", "--latency", "1s").code == 2
    assert daemon.cli("fault", "add", "--entity", "q", "--kind", "slow").code == 2
    assert daemon.cli("fault", "clear", "f1", "--all").code == 2
    bad_latency = daemon.cli("fault", "add", "--entity", "q", "--kind", "slow", "--latency", "x")
    assert bad_latency.code == 2 and "'--latency'" in bad_latency.stderr  # a usage error
    out_of_range = daemon.cli("fault", "add", "--entity", "q", "--partition", "16")
    assert out_of_range.code == 5 and "partition 16" in out_of_range.stderr
    assert daemon.cli("fault", "add", "--entity", "nosuch").code == 3
    assert daemon.cli("-n", "nosuchns", "fault", "add").code == 3
    assert daemon.cli("fault", "clear", "f42").code == 3
    assert daemon.cli("fault", "list").stdout.strip() == "(none)"
    assert daemon.cli("fault", "clear").stdout.strip() == "no faults to clear"


def test_a_namespace_wide_fault_from_the_cli(daemon: Any) -> None:
    daemon.cli("namespace", "create", "faultyns", check=True)
    daemon.cli("-n", "faultyns", "queue", "create", "q", check=True)
    daemon.cli("fault", "add", "--namespace", "faultyns", check=True)  # -n, after the command
    refused = daemon.cli("--no-retry", "-n", "faultyns", "queue", "create", "other")
    assert refused.code == EXIT_COMMUNICATION and "namespace 'faultyns'" in refused.stderr
    show = daemon.cli("-n", "faultyns", "-o", "json", "queue", "show", "q", check=True).json()
    assert show["availability_status"] == "Unknown"
    assert daemon.cli("fault", "list").stdout.strip() == "(none)"  # another namespace's
    assert "faultyns" in daemon.cli("fault", "list", "--all", check=True).stdout
    daemon.cli("-n", "faultyns", "fault", "clear", check=True)
    daemon.cli("-n", "faultyns", "queue", "create", "other", check=True)


def test_a_parked_receive_gets_the_messages_when_the_store_is_back(daemon: Any) -> None:
    daemon.cli("queue", "create", "q", "--enable-partitioning", check=True)
    with daemon.client() as sb:
        sb.send("q", [Message(b"held", partition_key=key_for(2))])
        sb.fault_add("q", [2])
        got: list[Any] = []

        def wait() -> None:
            with daemon.client() as receiver:
                got.extend(receiver.receive("q", count=1, max_wait=20, mode="receive-and-delete"))

        thread = threading.Thread(target=wait)
        thread.start()
        daemon.wait_parked()
        assert (
            daemon.cli("-o", "json", "daemon", "status", check=True).json()["parked_receives"] == 1
        )
        assert not got
        sb.fault_clear()
        thread.join(timeout=20)
    assert [m.body for m in got] == [b"held"]


def test_a_parked_receive_fails_when_its_only_store_goes_down(daemon: Any) -> None:
    daemon.cli("queue", "create", "q", check=True)
    errors: list[Exception] = []

    def wait() -> None:
        with Client(daemon.socket, retry_total=0) as receiver:
            try:
                receiver.receive("q", count=1, max_wait=20)
            except ServiceCommunicationProblem as exc:
                errors.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    daemon.wait_parked()
    with daemon.client() as sb:
        sb.fault_add("q")
    thread.join(timeout=20)
    assert len(errors) == 1 and "the store of queue 'q'" in str(errors[0])
