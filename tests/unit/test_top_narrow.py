"""`sbctl top` fits a standard 80×24 terminal: below 120 columns it shows fewer columns
(the detail view has the rest), abbreviated headings and short numbers, and cuts long names
with an ellipsis, never a number."""

from __future__ import annotations

from io import StringIO
from typing import Any

from rich.console import Console

from sbctl.top.view import ViewState, main_screen, short

STATUS = {"pid": 4242, "version": "0.1.0", "uptime_s": 117, "cpu_percent": 1.5, "rss_bytes": 3e7}


def namespace(name: str, **values: Any) -> dict[str, Any]:
    row = {
        "name": name,
        "sku": "standard",
        "entities": 3,
        "active": 0,
        "dead_lettered": 0,
        "incoming_per_s": 0,
        "credits_used": 0,
        "credits_per_second": 1000,
        "throttled_requests": 0,
        "throttled_per_s": 0,
        "pairing_state": None,
        "pairing_secondary": None,
        "pairing_pending": None,
        "faults": 0,
    }
    return {**row, **values}


def entity(name: str, kind: str = "queue", **values: Any) -> dict[str, Any]:
    row = {
        "name": name,
        "kind": kind,
        "active": 0,
        "dead_lettered": 0,
        "scheduled": 0,
        "deferred": 0,
        "incoming_per_s": 0.0,
        "outgoing_per_s": None,
        "size_bytes": 0,
        "partitions": 16,
        "partitions_available": 16,
        "availability": "Available",
        "status": "Active",
    }
    return {**row, **values}


def render(width: int, height: int, sort: str = "name") -> list[str]:
    namespaces = [
        namespace("sbemulatorns", active=123_456_789, dead_lettered=57_321, incoming_per_s=98_765),
        namespace("a-namespace-with-a-very-long-name-indeed", credits_used=987, faults=1),
        namespace("paired", pairing_state="FailedOver", pairing_secondary="backup"),
    ]
    rows = [
        entity("orders-from-the-web-shop-in-europe-west", active=123_456_789, size_bytes=9e11),
        entity("events/subscriptions/billing-and-invoicing", "subscription", dead_lettered=57_321),
        entity("audit", "topic", incoming_per_s=98_765.5, partitions_available=15),
    ]
    overview = {"faults": [{"id": "f1", "entity": "audit", "partitions": [3], "kind": "slow"}]}
    state = ViewState(namespace="sbemulatorns", sort_key=sort)
    out = StringIO()
    console = Console(file=out, width=width, height=height, color_system=None)
    console.print(main_screen(STATUS, 1.0, namespaces, rows, overview, state, height, width=width))
    return out.getvalue().splitlines()


def test_short_numbers() -> None:
    assert [short(n) for n in (None, 0, 7, 9999, 12_345, 999_499, 1_234_567, 2.5)] == [
        "-", "0", "7", "9999", "12k", "999k", "1.2M", "2.5",
    ]  # fmt: skip


def test_an_80_by_24_terminal_shows_every_number_whole() -> None:
    for sort in ("name", "active", "outgoing_per_s", "partitions"):
        lines = render(80, 24, sort)
        assert len(lines) <= 24, "\n".join(lines)
        assert max(len(line.rstrip()) for line in lines) <= 80, "\n".join(lines)
        text = "\n".join(lines)
        for shown in ("123M", "57k", "99k", "838.2 GB", "15/16", "Failed", "987/1000"):
            assert shown in text, (shown, text)
        cut = [c for line in lines for c in line.split() if c.endswith("…")]
        assert all(c[0].isalpha() for c in cut), cut  # only names are cut
        assert "q quit" in lines[-1] and "Esc" not in lines[-1]


def test_a_wide_terminal_keeps_every_column() -> None:
    text = "\n".join(render(200, 50))
    for heading in ("AVAILABILITY", "SCHED", "DEFER", "CREDITS USED", "PAIRING", "SINCE"):
        assert heading in text
    assert "123456789" in text and "…" not in text.replace("orders-from", "")
