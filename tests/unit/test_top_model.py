"""``sbctl top``'s data side: the daemon's uncharged overview, rates from two samples,
sorting, filtering, keys and the key-driven state; and ``daemon start --wait``'s check."""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import presenting
from sbctl.core.errors import ServiceTimeout
from sbctl.core.records import Message
from sbctl.ready import tcp_ports, wait_ready
from sbctl.top import model
from sbctl.top.live import Top, parse_keys
from sbctl.top.view import ViewState
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.frontends.unix.present import present
from sbctld.overview import overview as domain_overview

# Results as the CLI and the client see them (tests/presenting.py).
broker = presenting.broker


def overview(b: presenting.Presented, namespace: str) -> Any:
    """The overview as `sbctl top` reads it."""
    return present(domain_overview(b.raw, namespace))


NS = DEFAULT_NAMESPACE


def test_overview_lists_every_entity_and_costs_no_credits(broker: Broker) -> None:
    broker.management.namespace_create("metered", credits_per_second=100)
    broker.management.queue_create("metered", "orders", {"enable_partitioning": True})
    broker.management.topic_create("metered", "events", {})
    broker.management.subscription_create("metered", "events", "audit", {})
    broker.messaging.send("metered", "orders", [Message(body=b"x")] * 3)
    before = broker.management.namespace_credits("metered")["consumed"]["since_start"]
    for _ in range(50):  # 50 entity reads would cost 500 of the 100 credits per second
        ov = overview(broker, "metered")
    assert broker.management.namespace_credits("metered")["consumed"]["since_start"] == before
    kinds = {(e["kind"], e["name"]) for e in ov["entities"]}
    assert kinds == {
        ("queue", "orders"),
        ("topic", "events"),
        ("subscription", "events/subscriptions/audit"),
    }
    orders = next(e for e in ov["entities"] if e["name"] == "orders")
    assert sum(model.enqueued({**orders, "kind": "queue"}).values()) == 3
    assert ov["pairing"] is None and ov["faults"] == []


def test_overview_shows_faults_and_pairing(broker: Broker) -> None:
    broker.management.namespace_create("primary1", sku="premium", partitions=2)
    broker.management.namespace_create("secondary1", sku="premium", partitions=2)
    broker.management.queue_create("primary1", "orders", {})
    broker.pairings.pair("primary1", "secondary1", 2, 60_000, 60_000, False)
    broker.housekeeping.fault_add("primary1", "orders", [1])
    ov = overview(broker, "primary1")
    assert [f["partitions"] for f in ov["faults"]] == [[1]]
    assert ov["pairing"]["state"] == "Active" and ov["pairing"]["secondary"] == "secondary1"
    assert overview(broker, "secondary1")["pairing"] is None
    rows = model.entity_rows(model.Sample(0.0, {}, {"primary1": ov}), None, "primary1")
    assert (rows[0]["partitions"], rows[0]["partitions_available"]) == (2, 1)


def entity(name: str, seqs: list[int | None], total: int, kind: str = "queue") -> dict[str, Any]:
    parts = []
    for pid, seq in enumerate(seqs):
        p: dict[str, Any] = {"partition_id": pid}
        if seq is not None:
            p["next_sequence_number"] = (pid << 48 if len(seqs) > 1 else 0) | seq
        parts.append(p)
    return {
        "kind": kind,
        "name": name,
        "partitions": parts,
        "partition_count": len(seqs),
        "total_message_count": total,
        "active_message_count": total,
    }


def sample(at: float, *entities: dict[str, Any], faults: Any = ()) -> model.Sample:
    ov = {
        "namespace": {"sku": "standard"},
        "credits": {
            "credits_per_second": 1000,
            "consumed": {"last_period": {"data": 7, "management": 10, "filter": 0}},
            "throttled_requests": int(at * 3),
        },
        "entities": list(entities),
        "faults": list(faults),
        "pairing": None,
    }
    return model.Sample(at, {"pid": 1}, {"ns": ov})


def test_rates_from_sequence_numbers_and_totals() -> None:
    before = sample(10.0, entity("q", [1, 11], total=10))
    # 2 s later: 20 more enqueued over the two partitions, the total grew by 6 -> 14 left.
    after = sample(12.0, entity("q", [11, 21], total=16))
    [row] = model.entity_rows(after, before, "ns")
    assert row["incoming_per_s"] == 10.0
    assert row["outgoing_per_s"] == 7.0
    [ns_row] = model.namespace_rows(after, before)
    assert ns_row["incoming_per_s"] == 10.0
    assert (ns_row["credits_used"], ns_row["credits_per_second"]) == (17, 1000)
    assert ns_row["throttled_per_s"] == 3.0


def test_a_faulted_partition_counts_out_of_rates_and_availability() -> None:
    before = sample(0.0, entity("q", [1, 1], total=0))
    after = sample(
        1.0,
        entity("q", [6, None], total=5),
        faults=[{"kind": "unavailable", "entity": "q", "partitions": [1]}],
    )
    [row] = model.entity_rows(after, before, "ns")
    assert row["incoming_per_s"] == 5.0  # the reachable partition only
    assert row["outgoing_per_s"] is None  # counts of a faulted entity are partial
    assert (row["partitions"], row["partitions_available"]) == (2, 1)


def test_slow_faults_and_other_entities_do_not_take_partitions_away() -> None:
    s = sample(
        0.0,
        entity("q", [1, 1], total=0),
        faults=[
            {"kind": "slow", "entity": "q", "partitions": []},
            {"kind": "unavailable", "entity": "other", "partitions": []},
        ],
    )
    [row] = model.entity_rows(s, None, "ns")
    assert row["partitions_available"] == 2
    assert row["incoming_per_s"] is None  # one sample: no rate yet


def test_sort_filter_and_empty_cells_last() -> None:
    rows = [
        {"name": "b", "active": 3, "partitions": 2, "partitions_available": 2},
        {"name": "A", "active": None, "partitions": 2, "partitions_available": 1},
        {"name": "c", "active": 7, "partitions": 1, "partitions_available": 1},
    ]
    names = [r["name"] for r in model.sort_rows(rows, "active", reverse=True)]
    assert names == ["c", "b", "A"]
    assert [r["name"] for r in model.sort_rows(rows, "active", False)] == ["b", "c", "A"]
    assert model.sort_rows(rows, "partitions", False)[0]["name"] == "A"
    assert [r["name"] for r in model.filter_rows(rows, "a")] == ["A"]


def test_keys_from_terminal_bytes() -> None:
    keys = list(parse_keys(b"\x1b[A\x1b[Bx\r\x7f\t\x1b[Z\x1b/q\x03"))
    assert keys == [
        "up",
        "down",
        "x",
        "enter",
        "backspace",
        "tab",
        "backtab",
        "esc",
        "/",
        "q",
        "ctrl-c",
    ]


def top_with(*names: str) -> Top:
    t = Top(client=None, interval=1.0, state=ViewState(namespace="ns"))
    ovs = {}
    for n in ("ns", "other"):
        s = sample(0.0, *(entity(x, [1], total=0) for x in names))
        ovs[n] = s.overviews["ns"]
    t.sampler.current = model.Sample(0.0, {"pid": 1}, ovs)
    return t


def test_keys_drive_sort_filter_namespace_and_quit() -> None:
    t = top_with("orders", "audit", "billing")
    st = t.state
    assert [r["name"] for r in t.rows()] == ["audit", "billing", "orders"]
    for k in ("s", "s", "r"):
        assert t.key(k)
    assert (st.sort_key, st.reverse) == ("active", True)
    for k in "/BIL":
        t.key(k)
    t.key("enter")
    assert [r["name"] for r in t.rows()] == ["billing"] and not st.editing_filter
    t.key("esc")
    assert st.filter == ""
    t.key("tab")
    assert st.namespace == "other"
    t.key("p")
    assert st.namespace == "ns"
    assert t.key("q") is False and t.key("ctrl-c") is False


def test_ready_ports_from_status() -> None:
    assert tcp_ports({"amqp_port": 5673, "amqp_ports": {"a": 5674, "b": 5673}}) == [5673, 5674]
    assert tcp_ports({"amqp_ports": [0, True, 70000, 6000]}) == [6000]
    assert tcp_ports({}) == []


@pytest.fixture
def silent_socket() -> Iterator[Path]:
    """A Unix socket that accepts connections and never answers."""
    root = Path(tempfile.mkdtemp(prefix="sbw-"))
    path = root / "s.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(16)
    yield path
    srv.close()
    path.unlink()
    root.rmdir()


def test_wait_gives_up_after_its_timeout_with_one_line(silent_socket: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(ServiceTimeout) as err:
        wait_ready(silent_socket, 0.5)
    assert time.monotonic() - t0 < 3
    assert "\n" not in err.value.message
    assert err.value.message.startswith("the sbctl daemon was not ready within 0.5 s:")
    with pytest.raises(ServiceTimeout, match="does not answer"):
        wait_ready(silent_socket.parent / "nobody.sock", 0.2)


def test_message_bodies_cannot_drive_the_terminal() -> None:
    from io import StringIO

    from rich.console import Console

    from sbctl.top.view import detail_screen

    state = ViewState(namespace="ns", detail="q")
    body = "\x1b[31mred\x1b[0m [bold]markup[/bold] \u202eevil"
    state.detail_data = {
        "messages": [
            {
                "seq": 1,
                "enqueued": "12:00:00",
                "partition": 0,
                "deliveries": 0,
                "state": "active",
                "message_id": "[blink]id",
                "body": body,
            }
        ]
    }
    entity = {"kind": "queue", "name": "q", "partitions": []}
    out = StringIO()
    Console(file=out, width=200, color_system=None).print(detail_screen(entity, state))
    text = out.getvalue()
    assert "\x1b" not in text and "\u202e" not in text
    assert "\\x1b[31mred" in text and "[bold]markup[/bold]" in text and "[blink]id" in text
