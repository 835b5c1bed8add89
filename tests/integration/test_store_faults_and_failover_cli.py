"""Store faults and paired-namespace failover end to end through the CLI (cases first
written by an independent tester).

Partition faults on a 16-partition queue, a paired primary whose whole namespace is down
(failover, pings, the syphon, exactly once), fault propagation from the secondary, the
backlog queues' properties, persistence, throttling, the size limit, slow stores, and odd
inputs. Everything goes through the real ``sbctl`` CLI against a real daemon (the
``daemon`` fixture of tests/conftest.py); the Python client is used only to time replies.

The last section pins bugs found while testing: each asserts what the README promises and
failed before its fix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import CliResult, Daemon
from sbctl.core.message_form import encode as encode_message
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import Message

P = "accept-prim"
S = "accept-sec"
PING = "application/vnd.ms-servicebus-ping"
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_EXISTS = 4
EXIT_BAD_REQUEST = 5
EXIT_SIZE = 6
EXIT_BUSY = 8
EXIT_COMMUNICATION = 9


# ---------------------------------------------------------------- helpers


def until(what: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s")
        time.sleep(0.1)


def key_on(pid: int, n: int = 16, prefix: str = "key") -> str:
    """A partition key (or SessionId / MessageId) that lands on partition ``pid``."""
    i = 0
    while partition_for_key(f"{prefix}{i}", n) != pid:
        i += 1
    return f"{prefix}{i}"


def jsonl(bodies: list[str], **extra: Any) -> str:
    return "".join(json.dumps({"body": b, **extra}) + "\n" for b in bodies)


def one_line_error(r: CliResult) -> None:
    """A clear failure: one ``error:`` line, no traceback, nothing internal."""
    assert r.code != 0, r
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r
    assert lines[0].startswith("error: "), r
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r


def alive(d: Daemon) -> None:
    assert d.cli("daemon", "status", check=True).code == 0


def pair_status(d: Daemon, primary: str = P, cli: bool = False) -> dict[str, Any]:
    """``sbctl -o json namespace pair-status`` (``cli=True``), or the same dict from the
    client (to poll without a process per look)."""
    if cli:
        result: dict[str, Any] = d.cli(
            "-o", "json", "namespace", "pair-status", primary, check=True
        ).json()
        return result
    with d.client() as sb:
        return sb.namespace_pair_status(primary)


def pair(d: Daemon, *args: str, primary: str = P, secondary: str = S) -> dict[str, Any]:
    result: dict[str, Any] = d.cli(
        "-o", "json", "namespace", "pair", primary, "--secondary", secondary, *args, check=True
    ).json()
    return result


def setup_pair_namespaces(d: Daemon, *queues: tuple[str, dict[str, Any]]) -> None:
    """The primary P (with ``queues``) and the secondary S, made through the client: the
    setup is not what these tests check."""
    with d.client() as sb:
        sb.namespace_create(P)
        sb.namespace_create(S)
    with d.client(P) as sb:
        for name, options in queues:
            sb.queue_create(name, **options)


def drain(d: Daemon, ns: str, entity: str, *extra: str, empties: int = 2) -> list[dict[str, Any]]:
    """Receive-and-delete until the entity answers nothing ``empties`` times in a row (a
    partitioned entity may need several calls, daemon/README.md §0.1.6)."""
    got: list[dict[str, Any]] = []
    empty = 0
    while empty < empties:
        batch = d.cli(
            "-o", "json", "-n", ns, "receive", entity, "--count", "250", "--mode",
            "receive-and-delete", *extra, check=True,
        ).jsonl()  # fmt: skip
        got += batch
        empty = 0 if batch else empty + 1
    return got


# ---------------------------------------------------------------- partition faults


def test_sixteen_partitions_keyless_keyed_and_nothing_lost(daemon: Daemon) -> None:
    d = daemon
    d.cli("queue", "create", "parts", "--enable-partitioning", check=True)
    d.cli("queue", "create", "parts-s", "--enable-partitioning", "--enable-session", check=True)
    d.cli(
        "queue", "create", "parts-d", "--enable-partitioning", "--enable-duplicate-detection",
        check=True,
    )  # fmt: skip
    for q in ("parts", "parts-s", "parts-d"):
        d.cli("fault", "add", "--entity", q, "--partition", "6", check=True)

    # One partition down: keyless sends (single and batched) all succeed, none on 6.
    sent = d.cli(
        "-o", "json", "send", "parts", "--input", "-", "--batch-size", "9",
        input=jsonl([f"a{i}" for i in range(90)]),
    )  # fmt: skip
    assert sent.code == 0, sent
    seqs = sent.json()["sequence_numbers"]
    assert len(seqs) == 90 and 6 not in {s >> 48 for s in seqs}
    # A MessageId on an entity without duplicate detection is no key.
    assert (
        d.cli("--no-retry", "send", "parts", "--body", "mid", "--message-id", key_on(6)).code == 0
    )

    # Keyed sends to partition 6 fail with ServiceCommunicationProblem naming it ...
    keyed = [
        ("parts", "--partition-key", key_on(6)),
        ("parts-s", "--session-id", key_on(6)),
        ("parts-d", "--message-id", key_on(6)),
    ]
    for entity, flag, key in keyed:
        r = d.cli("--no-retry", "send", entity, "--body", "k", flag, key)
        assert r.code == EXIT_COMMUNICATION, r
        one_line_error(r)
        assert f"partition 6 of queue '{entity}' is unavailable" in r.stderr
    # ... while keys of live partitions are fine, and a mixed batch is refused whole.
    ok = d.cli("--no-retry", "send", "parts-s", "--body", "s", "--session-id", key_on(7))
    assert ok.code == 0, ok
    mixed = jsonl(["x1"], partition_key=key_on(2)) + jsonl(["x2"], partition_key=key_on(6))
    r = d.cli("--no-retry", "send", "parts", "--input", "-", "--batch-size", "2", input=mixed)
    assert r.code == EXIT_COMMUNICATION, r

    # Eight partitions down: keyless sends still all succeed, on the other eight.
    down = [0, 1, 4, 6, 9, 10, 12, 15]
    more = [arg for pid in down if pid != 6 for arg in ("--partition", str(pid))]
    d.cli("fault", "add", "--entity", "parts", *more, check=True)
    sent = d.cli(
        "-o", "json", "send", "parts", "--input", "-", input=jsonl([f"b{i}" for i in range(80)])
    )
    assert sent.code == 0, sent
    assert not {s >> 48 for s in sent.json()["sequence_numbers"]} & set(down)
    assert d.cli("-o", "json", "send", "parts", "--body", "rep", "--repeat", "16").code == 0

    show = d.cli("-o", "json", "queue", "show", "parts", check=True).json()
    assert show["availability_status"] == "Limited"
    unavailable = sorted(
        p["partition_id"]
        for p in show["partitions"]
        if p.get("availability_status") == "Unavailable"
    )
    assert unavailable == down
    assert "Limited" in d.cli("queue", "show", "parts", check=True).stdout

    # Receive serves the available partitions while the faults last.
    early = drain(d, "sbemulatorns", "parts")
    assert early and not {m["partition_id"] for m in early} & set(down)

    d.cli("fault", "clear", check=True)
    late = drain(d, "sbemulatorns", "parts")
    bodies = [m["body"] for m in early + late]
    expected = [f"a{i}" for i in range(90)] + [f"b{i}" for i in range(80)] + ["mid"]
    expected += ["rep"] * 16
    assert sorted(bodies) == sorted(expected)  # nothing lost, nothing twice, x1 never stored
    assert d.cli("-o", "json", "queue", "show", "parts").json()["availability_status"] == (
        "Available"
    )
    log = (d.data_dir / "sbctld.log").read_text()
    assert "partition 6 of queue sbemulatorns/parts unavailable" in log
    assert "cleared (was:" in log


def test_unavailable_store_retries_management_and_slow(daemon: Daemon) -> None:
    d = daemon
    d.cli("queue", "create", "plain", check=True)
    d.cli("topic", "create", "tp", "--enable-partitioning", check=True)
    d.cli("subscription", "create", "tp", "sub", check=True)
    d.cli("send", "plain", "--body", "kept", check=True)
    d.cli("send", "tp", "--body", "t", "--repeat", "5", check=True)
    d.cli("fault", "add", "--entity", "plain", check=True)
    d.cli("fault", "add", "--entity", "tp", "--partition", "11", check=True)

    r = d.cli("--retry-total", "1", "send", "plain", "--body", "x")
    assert r.code == EXIT_COMMUNICATION
    one_line_error(r)
    assert "the store of queue 'plain' is unavailable" in r.stderr
    assert "(gave up after 1 retry)" in r.stderr
    r = d.cli("-o", "json", "--no-retry", "peek", "plain")
    err = json.loads(r.stderr)["error"]
    assert err["code"] == "ServiceCommunicationProblem" and "'plain'" in err["message"]
    show = d.cli("-o", "json", "queue", "show", "plain", check=True).json()
    assert show["availability_status"] == "Unknown"

    # Management of an entity with a down partition fails (daemon/README.md §0.1.10).
    refused = [
        ("queue", "update", "plain", "--max-delivery-count", "3"),
        ("queue", "delete", "plain"),
        ("purge", "plain"),
        ("topic", "update", "tp", "--max-size", "2048"),
        ("topic", "delete", "tp"),
        ("subscription", "create", "tp", "sub2"),
        ("subscription", "update", "tp", "sub", "--max-delivery-count", "3"),
        ("subscription", "delete", "tp", "sub"),
        ("rule", "create", "tp", "sub", "r1", "--filter-sql-expression", "a = 1"),
    ]
    for args in refused:
        r = d.cli("--no-retry", *args)
        assert r.code == EXIT_COMMUNICATION, (args, r)
        one_line_error(r)
    d.cli("fault", "add", "-n", "sbemulatorns", check=True)  # and creating, namespace-wide
    r = d.cli("--no-retry", "queue", "create", "newq")
    assert r.code == EXIT_COMMUNICATION and "namespace" in r.stderr
    assert d.cli("fault", "list", check=True).code == 0  # metadata is unaffected
    d.cli("fault", "clear", check=True)

    # The subscription (in the topic's stores) answers from the available partitions.
    sub_show = d.cli("-o", "json", "subscription", "show", "tp", "sub", check=True).json()
    assert sub_show["active_message_count"] == 5
    got = drain(d, "sbemulatorns", "plain", empties=1)
    assert [m["body"] for m in got] == ["kept"]  # the data came back
    assert d.cli("-o", "json", "queue", "show", "plain").json()["max_delivery_count"] == 10

    # --kind slow --latency 300ms adds latency to what touches the store.
    d.cli("queue", "create", "fast", check=True)
    d.cli("queue", "create", "slow", check=True)
    added = d.cli(
        "-o", "json", "fault", "add", "--entity", "slow", "--kind", "slow", "--latency", "300ms",
        check=True,
    ).json()  # fmt: skip
    assert (added["kind"], added["latency"]) == ("slow", "PT0.3S")
    with d.client() as sb:

        def timed(entity: str) -> float:
            t0 = time.monotonic()
            sb.send(entity, [Message(body=b"t")])
            return time.monotonic() - t0

        slow = min(timed("slow") for _ in range(2))
        fast = min(timed("fast") for _ in range(2))
    assert slow >= 0.3 and slow - fast >= 0.25, (slow, fast)
    entry = d.cli("-o", "json", "queue", "show", "slow", check=True).json()["partitions"][0]
    assert entry["availability_status"] == "Slow" and entry["latency"] == "PT0.3S"
    assert "slow (PT0.3S)" in (d.data_dir / "sbctld.log").read_text()


# ---------------------------------------------------------------- paired namespaces


def test_failover_pings_and_syphon_restore_everything_once(daemon: Daemon) -> None:
    d = daemon
    setup_pair_namespaces(
        d, ("orders", {"enable_partitioning": True}), ("sess", {"requires_session": True})
    )
    with d.client(P) as sb:
        sb.topic_create("events")
        sb.subscription_create("events", "all")
    st = pair(
        d, "--backlog-queue-count", "2", "--failover-interval", "1s",
        "--ping-primary-interval", "1s", "--enable-syphon",
    )  # fmt: skip
    assert st["state"] == "Active" and st["ping_primary_interval"] == "PT1S"

    d.cli("-n", P, "fault", "add", check=True)  # the whole primary namespace is down
    n = 40
    r = d.cli("-n", P, "send", "orders", "--input", "-", input=jsonl([f"o{i}" for i in range(n)]))
    assert r.code == 0, r  # the client's retries outlast FailoverInterval
    sends = [
        ("orders", "--body", "keyed", "--partition-key", "pk-1", "--time-to-live", "PT5M"),
        ("orders", "--body", "later", "--scheduled-enqueue-time", "+1h"),
        ("sess", "--body", "s1", "--session-id", "S-1", "--time-to-live", "PT7M"),
        ("sess", "--body", "s2", "--session-id", "S-2"),
        ("events", "--body", "ev", "--property", "color=red"),
    ]
    for args in sends:
        r = d.cli("-n", P, "send", *args)
        assert r.code == 0, (args, r)

    st = pair_status(d, cli=True)
    assert st["state"] == "FailedOver"
    assert {e["entity"] for e in st["entities"]} == {"orders", "sess", "events"}
    assert st["diverted"] == n + 5 and st["pending"] == n + 5 and st["failovers"] == 3
    assert sum(q["pending"] for q in st["backlog_queues"]) == n + 5
    assert st["last_error"] and "unavailable" in st["last_error"]

    # What the backlog queues hold: SessionId/TTL/schedule moved into x-ms-* properties.
    held = []
    for q in st["backlog_queues"]:
        held += d.cli("-o", "json", "-n", S, "peek", q["name"], "--count", "100").jsonl()
    by_body = {m["body"]: m for m in held}
    s1 = by_body["s1"]
    assert s1["session_id"] is None and s1["time_to_live"] is None
    assert s1["application_properties"] == {
        "x-ms-sessionid": "S-1", "x-ms-timetolive": 420000, "x-ms-path": "sess",
    }  # fmt: skip
    assert "x-ms-scheduledenqueuetimeutc" in by_body["later"]["application_properties"]
    assert by_body["later"]["scheduled_enqueue_time_utc"] is None
    assert by_body["ev"]["application_properties"]["x-ms-path"] == "events"

    until(lambda: pair_status(d)["pings_sent"] >= 2)  # pings while failed over
    st = pair_status(d)
    assert st["pings_failed"] == st["pings_sent"]

    d.cli("-n", P, "fault", "clear", check=True)
    until(lambda: pair_status(d)["moved"] == n + 5, timeout=15)
    st = pair_status(d, cli=True)
    assert st["state"] == "Active" and st["pending"] == 0 and st["entities"] == []
    assert st["pings_sent"] > st["pings_failed"]

    orders = drain(d, P, "orders")
    assert sorted(m["body"] for m in orders) == sorted([f"o{i}" for i in range(n)] + ["keyed"])
    keyed = next(m for m in orders if m["body"] == "keyed")
    assert (keyed["partition_key"], keyed["time_to_live"]) == ("pk-1", 300.0)
    peeked = d.cli("-o", "json", "-n", P, "peek", "orders", "--count", "10").jsonl()
    peeked += d.cli("-o", "json", "-n", P, "peek", "orders", "--count", "10").jsonl()
    later = [m for m in peeked if m["body"] == "later"]
    assert later and later[0]["state"] == "scheduled"
    assert (
        d.cli("-o", "json", "-n", P, "queue", "show", "orders").json()["scheduled_message_count"]
        == 1
    )
    for sid, body, ttl in (("S-1", "s1", 420.0), ("S-2", "s2", None)):
        got = drain(d, P, "sess", "--session-id", sid, empties=1)
        assert [(m["body"], m["session_id"], m["time_to_live"]) for m in got] == [(body, sid, ttl)]
    [ev] = drain(d, P, "events/subscriptions/all", empties=1)
    assert ev["application_properties"] == {"color": "red"}
    for m in [*orders, ev]:
        assert m["content_type"] != PING
        assert not any(k.startswith("x-ms-") for k in m["application_properties"])
    assert st["dead_lettered"] == 0
    for q in d.cli("-o", "json", "-n", S, "queue", "list", check=True).json():
        assert q["total_message_count"] == 0, q  # nothing left behind, nothing dead-lettered


def test_secondary_delete_and_fault_propagate_within_five_seconds(daemon: Daemon) -> None:
    d = daemon
    for ns in (P, S, "accept-sec2"):
        d.cli("namespace", "create", ns, check=True)
    d.cli("-n", P, "queue", "create", "q", check=True)
    pair(d, "--backlog-queue-count", "1", "--failover-interval", "0s")
    d.cli("-n", P, "fault", "add", check=True)
    assert d.cli("-n", P, "send", "q", "--body", "parked").code == 0  # diverted

    t0 = time.monotonic()
    d.cli("namespace", "delete", S, check=True)
    st = until(lambda: (s := pair_status(d))["state"] == "Faulted" and s, timeout=5)
    assert time.monotonic() - t0 < 5
    assert "deleted" in st["fault_reason"] and st["faulted_at_utc"]
    d.cli("-n", P, "fault", "clear", check=True)
    r = d.cli("-n", P, "--no-retry", "send", "q", "--body", "x")
    assert r.code == EXIT_COMMUNICATION and "faulted" in r.stderr
    one_line_error(r)
    assert "faulted" in (d.data_dir / "sbctld.log").read_text()
    alive(d)

    # A namespace-wide unavailable fault on the secondary faults it the same way.
    d.cli("namespace", "unpair", P, check=True)
    assert d.cli("-n", P, "send", "q", "--body", "direct").code == 0
    pair(d, "--backlog-queue-count", "1", secondary="accept-sec2")
    t0 = time.monotonic()
    d.cli("-n", "accept-sec2", "fault", "add", check=True)
    st = until(lambda: (s := pair_status(d))["state"] == "Faulted" and s, timeout=5)
    assert time.monotonic() - t0 < 5 and "accept-sec2" in st["fault_reason"]
    d.cli("-n", "accept-sec2", "fault", "clear", check=True)
    assert pair_status(d)["state"] == "Faulted"  # terminal until unpaired


def test_backlog_queue_properties_defaults_and_existing_queues(daemon: Daemon) -> None:
    d = daemon
    for ns in (P, S, "dflt-prim"):
        d.cli("namespace", "create", ns, check=True)
    # An existing backlog queue with its own settings, and an extra one beyond the count.
    d.cli(
        "-n", S, "queue", "create", f"{P}/x-servicebus-transfer/0", "--lock-duration", "30s",
        "--max-delivery-count", "5", "--max-size", "1024", check=True,
    )  # fmt: skip
    d.cli("-n", S, "queue", "create", f"{P}/x-servicebus-transfer/7", check=True)
    d.cli("-n", S, "send", f"{P}/x-servicebus-transfer/7", "--body", "not mine", check=True)
    st = pair(d, "--backlog-queue-count", "3")
    assert [q["name"] for q in st["backlog_queues"]] == [
        f"{P}/x-servicebus-transfer/{i}" for i in range(3)
    ]

    def show(i: int) -> dict[str, Any]:
        name = f"{P}/x-servicebus-transfer/{i}"
        result: dict[str, Any] = d.cli(
            "-o", "json", "-n", S, "queue", "show", name, check=True
        ).json()
        return result

    for i in (1, 2):  # daemon/README.md §0.3.1
        q = show(i)
        assert q["max_size_in_megabytes"] == 5120
        assert q["max_delivery_count"] == 2**31 - 1
        assert q["default_message_time_to_live"] == "P10675199DT2H48M5.4775807S"
        assert q["auto_delete_on_idle"] == "P10675199DT2H48M5.4775807S"
        assert q["lock_duration"] == "PT1M"
        assert q["dead_lettering_on_message_expiration"] is True
        assert q["enable_batched_operations"] is True
    q0 = show(0)  # used as it is
    assert (q0["lock_duration"], q0["max_delivery_count"], q0["max_size_in_megabytes"]) == (
        "PT30S", 5, 1024,
    )  # fmt: skip
    assert q0["dead_lettering_on_message_expiration"] is False
    q7 = show(7)  # left alone
    assert (q7["lock_duration"], q7["active_message_count"]) == ("PT1M", 1)
    assert len(d.cli("-o", "json", "-n", S, "queue", "list", check=True).json()) == 4

    # daemon/README.md §0.3.7 defaults.
    st = pair(d, primary="dflt-prim")
    assert st["backlog_queue_count"] == 10 and len(st["backlog_queues"]) == 10
    assert (st["failover_interval"], st["ping_primary_interval"]) == ("PT1M", "PT1M")
    assert st["enable_syphon"] is False
    for field in ("diverted", "moved", "pending", "pings_sent", "pings_failed", "failovers"):
        assert st[field] == 0, field
    assert st["last_error"] is None
    assert all(q["pending"] == 0 and q["in_rotation"] for q in st["backlog_queues"])


def test_pairing_and_backlog_survive_a_restart_then_syphon(daemon: Daemon) -> None:
    d = daemon
    setup_pair_namespaces(d, ("q", {}))
    pair(d, "--backlog-queue-count", "2", "--failover-interval", "0s",
         "--ping-primary-interval", "30m", "--enable-syphon")  # fmt: skip
    d.cli("-n", P, "fault", "add", "--entity", "q", check=True)
    d.cli(
        "-n", P, "send", "q", "--input", "-", input=jsonl([f"r{i}" for i in range(7)]), check=True
    )
    before = pair_status(d)
    assert (before["state"], before["diverted"], before["pending"]) == ("FailedOver", 7, 7)

    d.stop()
    d.start()  # faults are gone; the pairing, its options and counters are not
    st = until(lambda: (s := pair_status(d))["moved"] == 7 and s)
    assert (st["secondary"], st["backlog_queue_count"], st["failover_interval"]) == (S, 2, "PT0S")
    assert (st["ping_primary_interval"], st["enable_syphon"]) == ("PT30M", True)
    assert (st["diverted"], st["failovers"], st["pending"]) == (7, 1, 0)
    assert st["last_error"] == before["last_error"]
    got = drain(d, P, "q", empties=1)
    assert sorted(m["body"] for m in got) == sorted(f"r{i}" for i in range(7))


def test_throttling_does_not_start_failover(daemon: Daemon) -> None:
    d = daemon
    d.cli("namespace", "create", P, "--credits-per-second", "20", check=True)
    d.cli("namespace", "create", S, check=True)
    d.cli("-n", P, "queue", "create", "q", check=True)
    pair(d, "--backlog-queue-count", "1", "--failover-interval", "0s")
    codes = []
    for _ in range(4):
        codes.append(
            d.cli("-n", P, "--no-retry", "send", "q", "--body", "b", "--repeat", "15").code
        )
    assert EXIT_BUSY in codes  # throttled ...
    st = pair_status(d)
    assert (st["diverted"], st["failovers"], st["entities"]) == (0, 0, [])  # ... not failed over
    assert st["state"] == "Active"


def test_failover_properties_push_a_near_limit_message_over(daemon: Daemon, tmp_path: Path) -> None:
    d = daemon
    setup_pair_namespaces(d, ("big", {}))
    pair(d, "--backlog-queue-count", "1", "--failover-interval", "0s")
    limit = 256 * 1024
    n = limit - len(encode_message(Message(body=b"")))
    while len(encode_message(Message(body=b"x" * n))) > limit:
        n -= 1
    assert len(encode_message(Message(body=b"x" * n))) == limit
    full = tmp_path / "full.txt"
    full.write_text("x" * n)
    small = tmp_path / "small.txt"
    small.write_text("x" * (n - 200))
    # It fits the healthy primary exactly.
    assert d.cli("-n", P, "send", "big", "--body-file", str(full)).code == 0
    d.cli("-n", P, "fault", "add", check=True)
    r = d.cli("-n", P, "send", "big", "--body-file", str(full))
    assert r.code == EXIT_SIZE, r
    one_line_error(r)
    assert "x-ms-path" in r.stderr and "failover" in r.stderr
    assert d.cli("-n", P, "send", "big", "--body-file", str(small)).code == 0  # diverted
    st = pair_status(d)
    assert (st["diverted"], st["rotation_removals"]) == (1, 0)


def test_odd_inputs_fail_with_one_clear_line(daemon: Daemon) -> None:
    d = daemon
    d.cli("namespace", "create", P, check=True)
    d.cli("namespace", "create", S, check=True)
    d.cli("queue", "create", "pq", "--enable-partitioning", check=True)
    d.cli("queue", "create", "one", check=True)
    cases: list[tuple[tuple[str, ...], int, str]] = [
        (("fault", "add", "--entity", "pq", "--kind", "slow", "--latency", "soon"), 2, "invalid"),
        (("fault", "add", "--entity", "pq", "--kind", "slow", "--latency", "0s"), 5, "above 0"),
        (("fault", "add", "--entity", "pq", "--kind", "slow", "--latency", "2h"), 5, "1 hour"),
        (("fault", "add", "--entity", "pq", "--kind", "slow"), 2, "--latency"),
        (("fault", "add", "--entity", "pq", "--latency", "1s"), 2, "--kind slow"),
        (("fault", "add", "--entity", "pq", "--partition", "16"), 5, "partition 16"),
        (("fault", "add", "--entity", "one", "--partition", "1"), 5, "partition 1"),
        (("fault", "add", "--entity", "pq", "--partition", "-1"), 2, "--partition"),
        (("fault", "add", "--partition", "3"), 2, "--entity"),
        (("fault", "add", "--entity", "ghost"), 3, "ghost"),
        (("-n", "ghost-ns", "fault", "add"), 3, "ghost-ns"),
        (("fault", "add", "--entity", "pq/$deadletterqueue"), 5, "'pq'"),
        (("fault", "clear", "f77"), 3, "f77"),
        (("namespace", "pair", P, "--secondary", P), 5, "itself"),
        (("namespace", "pair", P, "--secondary", "ghost-ns"), 3, "ghost-ns"),
        (("namespace", "pair", "ghost-ns", "--secondary", S), 3, "ghost-ns"),
        (("namespace", "pair", P, "--secondary", S, "--failover-interval", "61m"), 5, "60"),
        (("namespace", "pair", P, "--secondary", S, "--failover-interval", "later"), 2, "invalid"),
        (("namespace", "pair", P, "--secondary", S, "--ping-primary-interval", "0.5s"), 5, "1 s"),
        (("namespace", "pair", P, "--secondary", S, "--backlog-queue-count", "0"), 2, "backlog"),
        (("namespace", "unpair", P), 3, "not paired"),
        (("namespace", "unpair", "ghost-ns"), 3, "ghost-ns"),
        (("namespace", "pair-status", P), 3, "not paired"),
    ]  # fmt: skip
    for args, code, needle in cases:
        r = d.cli(*args)
        assert r.code == code, (args, r)
        one_line_error(r)
        assert needle in r.stderr, (args, r)
    assert d.cli("fault", "list", "--all", check=True).stdout.strip() == "(none)"
    pair(d, "--backlog-queue-count", "1")
    twice = d.cli("namespace", "pair", P, "--secondary", S)
    assert twice.code == EXIT_EXISTS and "already paired" in twice.stderr
    one_line_error(twice)
    reverse = d.cli("namespace", "pair", S.upper(), "--secondary", S)
    assert reverse.code == EXIT_BAD_REQUEST and "itself" in reverse.stderr
    alive(d)


# ---------------------------------------------------------------- regressions: bugs found


def test_a_huge_partition_number_is_a_clear_error(daemon: Daemon) -> None:
    daemon.cli("queue", "create", "pq", "--enable-partitioning", check=True)
    r = daemon.cli("fault", "add", "--entity", "pq", "--partition", "99999999999999999999")
    alive(daemon)
    assert r.code in (EXIT_USAGE, EXIT_BAD_REQUEST), r
    one_line_error(r)


def test_pair_status_of_an_unknown_namespace_says_so(daemon: Daemon) -> None:
    unpair = daemon.cli("namespace", "unpair", "ghost-ns")
    assert "namespace 'ghost-ns' does not exist" in unpair.stderr  # unpair says so
    status = daemon.cli("namespace", "pair-status", "ghost-ns")
    assert status.code == EXIT_NOT_FOUND
    assert "namespace 'ghost-ns' does not exist" in status.stderr, status


def test_a_diverted_schedule_number_never_cancels_another_message(daemon: Daemon) -> None:
    d = daemon
    setup_pair_namespaces(d, ("q", {}))
    old = d.cli("-o", "json", "-n", P, "schedule", "q", "--body", "old", "--at", "+2h", check=True)
    pair(d, "--backlog-queue-count", "1", "--failover-interval", "0s",
         "--ping-primary-interval", "1s", "--enable-syphon")  # fmt: skip
    d.cli("-n", P, "fault", "add", "--entity", "q", check=True)
    new = d.cli("-o", "json", "-n", P, "schedule", "q", "--body", "new", "--at", "+1h")
    d.cli("-n", P, "fault", "clear", check=True)
    assert new.code == 0, new  # the schedule was diverted, not refused
    until(lambda: pair_status(d)["moved"] == 1)
    [number] = new.json()["sequence_numbers"]
    # `schedule` prints "the sequence numbers, which cancel-scheduled accepts" (README):
    # cancelling "new" by its number must never cancel "old".
    d.cli("-n", P, "cancel-scheduled", "q", str(number))
    left = d.cli("-o", "json", "-n", P, "peek", "q", "--count", "10", check=True).jsonl()
    assert "old" in [m["body"] for m in left], (old.stdout, new.stdout, left)


def test_credit_quota_exceeded_does_not_start_failover(daemon: Daemon) -> None:
    d = daemon
    d.cli("namespace", "create", P, "--credits-per-second", "20", check=True)
    d.cli("namespace", "create", S, check=True)
    d.cli("-n", P, "queue", "create", "q", check=True)
    pair(d, "--backlog-queue-count", "1", "--failover-interval", "0s")
    # 25 messages cost 25 credits, more than a 20-credit period: a throttling limit on a
    # healthy primary (daemon/README.md §0.4.4), not "a full entity"; the primary is healthy.
    r = d.cli("-n", P, "--no-retry", "send", "q", "--body", "b", "--repeat", "25")
    st = pair_status(d)
    assert (st["diverted"], st["failovers"]) == (0, 0), st
    assert r.code == EXIT_SIZE and "credits" in r.stderr, r


def test_pending_of_an_unavailable_backlog_queue_is_unknown(daemon: Daemon) -> None:
    d = daemon
    setup_pair_namespaces(d, ("q", {}))
    pair(d, "--backlog-queue-count", "1", "--failover-interval", "0s")
    d.cli("-n", P, "fault", "add", check=True)
    d.cli("-n", P, "send", "q", "--body", "w", "--repeat", "4", check=True)
    assert pair_status(d)["pending"] == 4
    d.cli("-n", S, "fault", "add", "--entity", f"{P}/x-servicebus-transfer/0", check=True)
    st = pair_status(d)
    # Four messages still wait there, but the daemon cannot count them: unknown (null), never
    # "0 pending", which tells the user it is safe to unpair.
    assert st["backlog_queues"][0]["pending"] is None, st["backlog_queues"]
    assert st["pending"] is None, st
    d.cli("-n", S, "fault", "clear", check=True)
    st = pair_status(d)
    assert st["backlog_queues"][0]["pending"] == 4, st["backlog_queues"]
    assert st["pending"] == 4, st


def test_a_pair_costing_more_than_a_period_is_refused_whole(daemon: Daemon) -> None:
    d = daemon
    d.cli("namespace", "create", P, check=True)
    d.cli("namespace", "create", S, "--credits-per-second", "25", check=True)
    # Three backlog queues cost 30 credits: more than a whole period (daemon/README.md §0.4.4).
    r = d.cli("-o", "json", "--no-retry", "namespace", "pair", P, "--secondary", S,
              "--backlog-queue-count", "3")  # fmt: skip
    created = d.cli("-o", "json", "-n", S, "queue", "list", check=True).json()
    assert r.code != 0
    assert json.loads(r.stderr)["error"]["code"] == "QuotaExceeded", r.stderr
    assert created == []  # daemon/README.md §0.2.2: nothing of a refused request is applied
