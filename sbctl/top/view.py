"""``sbctl top``'s screens as rich renderables (no terminal I/O here).

Every value from the daemon goes into a :class:`rich.text.Text`, never into markup, and
through :func:`sbctl.cli.render.escape`, so that a name or a message body cannot style or
drive the terminal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from sbctl.cli.render import escape
from sbctl.top.model import COLUMNS

KEYS_HELP = (
    "q quit · ↑↓ select · Enter open · Tab/n p namespace · s/S sort column · r reverse · "
    "/ filter · Esc clear"
)
KEYS_HELP_NARROW = "q quit · ↑↓ select · Enter open · Tab/p namespace · s sort · r rev · / filter"
# Below this many columns the view is narrow: abbreviated headings and numbers, fewer
# columns (the detail view, Enter, has the rest), so that it fits an 80×24 terminal.
WIDE = 120
NARROW_COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "NAME"),
    ("kind", "K"),
    ("active", "ACTIVE"),
    ("dead_lettered", "DLQ"),
    ("incoming_per_s", "IN/s"),
    ("outgoing_per_s", "OUT/s"),
    ("size_bytes", "SIZE"),
    ("partitions", "PARTS"),
)
KIND_SHORT = {"queue": "q", "topic": "t", "subscription": "s"}
SKU_SHORT = {"basic": "bas", "standard": "std", "premium": "prem"}
PAIRING_SHORT = {"FailedOver": "Failed", "Faulted": "Fault"}
DETAIL_HELP = "Esc/Backspace back · q quit"
NUMERIC = {"active", "dead_lettered", "scheduled", "deferred", "incoming_per_s"}
NUMERIC |= {"outgoing_per_s", "size_bytes"}


@dataclass
class ViewState:
    """What the person chose: namespace, sort, filter, selection, open entity."""

    namespace: str = ""
    sort_key: str = "name"
    reverse: bool = False
    filter: str = ""
    editing_filter: bool = False
    selected: int = 0
    detail: str | None = None  # the open entity's name
    detail_data: dict[str, Any] = field(default_factory=dict)
    message: str = ""  # one line of feedback (an error, "namespace gone")


def t(value: Any, style: str = "") -> Text:
    return Text(escape("" if value is None else str(value)), style=style)


def size(n: Any) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def short(n: Any) -> str:
    """A count or rate in at most 4 characters: 9999, 12k, 1.2M, 123M, 4.5G."""
    if n is None:
        return "-"
    value = float(n)
    for scale, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= 10_000 and abs(value) >= scale:
            shown = value / scale
            return f"{shown:.1f}{unit}" if abs(shown) < 10 else f"{shown:.0f}{unit}"
    return f"{value:g}" if value != int(value) else str(int(value))


def narrow_table(**options: Any) -> Table:
    """A table for the narrow view: no edges, one space of padding and one separator
    between columns, so that it costs 2 columns per gap."""
    return Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0), **options)


def narrow_cell(row: dict[str, Any], key: str) -> Text:
    """:func:`cell` for the narrow view: short numbers and kinds."""
    v = row.get(key)
    if key == "kind":
        return t(KIND_SHORT.get(str(v), v))
    if key in NUMERIC and key != "size_bytes":
        return t(short(v), "bold yellow" if key == "dead_lettered" and v else "")
    return cell(row, key)


def cell(row: dict[str, Any], key: str) -> Text:
    v = row.get(key)
    if key == "size_bytes":
        return t(size(v))
    if key == "partitions":
        avail, total = row["partitions_available"], row["partitions"]
        return t(f"{avail}/{total}", "bold red" if avail < total else "")
    if key == "dead_lettered" and v:
        return t(v, "bold yellow")
    if key == "availability" and v not in (None, "Available"):
        return t(v, "bold red")
    if key in ("incoming_per_s", "outgoing_per_s"):
        return t("-" if v is None else f"{v:g}")
    return t("-" if v is None else v)


def header(status: dict[str, Any], interval: float, namespaces: int, narrow: bool = False) -> Text:
    rss = status.get("rss_bytes")
    if narrow:
        parts = [
            f"sbctl top · pid {status.get('pid')}",
            f"up {status.get('uptime_s', 0):.0f} s",
            f"cpu {status.get('cpu_percent', 0)}%",
            f"rss {size(rss)}",
            time.strftime("%H:%M:%S"),
        ]
        return Text(" · ".join(parts), style="bold")
    parts = [
        f"sbctl top · daemon pid {status.get('pid')} v{status.get('version')}",
        f"up {status.get('uptime_s', 0):.0f} s",
        f"{namespaces} namespace(s)",
        f"daemon cpu {status.get('cpu_percent', 0)}%",
        f"rss {size(rss)}",
        f"refresh {interval:g} s",
        time.strftime("%H:%M:%S"),
    ]
    if status.get("amqp_port"):
        parts.insert(3, f"amqp :{status['amqp_port']}")
    return Text(" · ".join(parts), style="bold")


def narrow_namespaces_table(rows: list[dict[str, Any]], current: str, width: int) -> Table:
    """The namespaces in ``width`` columns: short SKU and numbers, pairing state only."""
    table = narrow_table()
    paired = any(r["pairing_state"] for r in rows)
    headings = ["", "NAMESPACE", "SKU", "ENT", "ACTIVE", "DLQ", "IN/s", "CREDITS", "THR"]
    headings += ["PAIR"] if paired else []
    headings += ["FLT"]
    # the other columns at their widest: mark 1, SKU 4, ENT/DLQ/IN/s/THR 4, ACTIVE 6,
    # CREDITS 9 (999k/1.2M), PAIR 6, FLT 3; 2 per gap and 1 after the last
    widest = 1 + 4 + 4 * 4 + 6 + 9 + (6 if paired else 0) + 3
    for heading in headings:
        table.add_column(heading, justify="left" if heading in ("", "NAMESPACE") else "right")
    for column in table.columns:
        column.no_wrap = True
    table.columns[1].overflow = "ellipsis"
    table.columns[1].max_width = max(8, width - widest - 2 * (len(headings) - 1) - 1)
    for r in rows:
        mark = "▶" if r["name"] == current else ""
        budget = r["credits_per_second"]
        cells = [
            t(mark, "bold"),
            t(r["name"], "bold" if mark else ""),
            t(SKU_SHORT.get(str(r["sku"]), r["sku"])),
            t(short(r["entities"])),
            t(short(r["active"])),
            t(short(r["dead_lettered"]), "bold yellow" if r["dead_lettered"] else ""),
            t(short(r["incoming_per_s"])),
            t(
                f"{short(r['credits_used'])}/{short(budget) if budget else '∞'}",
                "bold red" if budget and r["credits_used"] >= budget else "",
            ),
            t(short(r["throttled_requests"]), "bold red" if r["throttled_per_s"] else ""),
        ]
        if paired:
            state = PAIRING_SHORT.get(r["pairing_state"], r["pairing_state"] or "-")
            cells.append(t(state, "" if state in ("-", "Active") else "bold red"))
        cells.append(t(r["faults"], "bold red" if r["faults"] else ""))
        table.add_row(*cells)
    return table


def namespaces_table(rows: list[dict[str, Any]], current: str) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, expand=False, title_justify="left")
    for heading in ("", "NAMESPACE", "SKU", "ENTITIES", "ACTIVE", "DLQ", "IN/s"):
        table.add_column(heading, justify="left" if heading in ("", "NAMESPACE") else "right")
    for heading in ("CREDITS USED", "THROTTLED", "PAIRING", "FAULTS", "CLOCK"):
        table.add_column(heading, justify="right")
    longest = max((len(str(r["name"])) for r in rows), default=4)
    table.columns[1].min_width = min(longest, 40)
    for column in table.columns:
        column.no_wrap = True
    for r in rows:
        mark = "▶" if r["name"] == current else ""
        budget = r["credits_per_second"]
        used = f"{r['credits_used']}/{budget if budget else '∞'}"
        throttled = f"{r['throttled_requests']}"
        if r["throttled_per_s"]:
            throttled += f" (+{r['throttled_per_s']:g}/s)"
        pairing = "-"
        if r["pairing_state"]:
            pairing = f"{r['pairing_state']} → {r['pairing_secondary']}, {r['pairing_pending']}"
            pairing += " pending"
        table.add_row(
            t(mark, "bold"),
            t(r["name"], "bold" if mark else ""),
            t(r["sku"]),
            t(r["entities"]),
            t(r["active"]),
            cell(r, "dead_lettered"),
            t(f"{r['incoming_per_s']:g}"),
            t(used, "bold red" if budget and r["credits_used"] >= budget else ""),
            t(throttled, "bold red" if r["throttled_per_s"] else ""),
            t(pairing, "" if r["pairing_state"] in (None, "Active") else "bold red"),
            t(r["faults"], "bold red" if r["faults"] else ""),
            t(_offset(r.get("clock_offset", "PT0S")), "bold"),
        )
    return table


def _offset(iso: str) -> str:
    """A namespace's clock offset (time travel, daemon/README.md §31): ``-`` when none."""
    return "-" if iso == "PT0S" else f"+{iso}"


def entities_table(
    rows: list[dict[str, Any]],
    state: ViewState,
    height: int | None = None,
    width: int | None = None,
) -> Table:
    title = f"entities of {state.namespace} · sort {state.sort_key}"
    title += " ↓" if state.reverse else " ↑"
    if state.filter or state.editing_filter:
        title += f" · filter /{state.filter}" + ("▏" if state.editing_filter else "")
    narrow = width is not None and width < WIDE
    caption = t(title, "bold")
    if narrow:
        table = narrow_table(title=caption, title_justify="left")
    else:
        table = Table(title=caption, box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    longest = max((len(str(r["name"])) for r in rows), default=4)
    columns, show = (NARROW_COLUMNS, narrow_cell) if narrow else (COLUMNS, cell)
    # the narrow view's other columns at their widest, a sort mark * included: K* 2,
    # ACTIVE* 7, DLQ* 4, IN/s* 5, OUT/s* 6, SIZE 9, PARTS* 6; 2 per gap, 1 after the last
    name_width = max(8, (width or 0) - (2 + 7 + 4 + 5 + 6 + 9 + 6) - 2 * 7 - 1)
    for key, heading in columns:
        shown = heading + ("*" if key == state.sort_key else "")
        table.add_column(
            shown,
            justify="right" if key in NUMERIC else "left",
            no_wrap=True,
            min_width=min(longest, 40) if key == "name" and not narrow else None,
            max_width=name_width if key == "name" and narrow else None,
            overflow="ellipsis",
        )
    start = 0
    if height is not None and len(rows) > height > 0:
        start = min(max(0, state.selected - height + 1), len(rows) - height)
        rows = rows[start : start + height]
    for i, r in enumerate(rows, start):
        style = "reverse" if i == state.selected else ""
        table.add_row(*(show(r, key) for key, _ in columns), style=style)
    if not rows:
        table.add_row(t("(no entities)" if not state.filter else "(nothing matches)", "dim"))
    return table


def faults_table(faults: list[dict[str, Any]], narrow: bool = False) -> Table | None:
    if not faults:
        return None
    table = Table(title=t("active faults", "bold red"), box=box.SIMPLE_HEAD, title_justify="left")
    for heading in ("ID", "ENTITY", "PARTITIONS", "KIND", "LATENCY", "SINCE"):
        table.add_column(heading, no_wrap=True, overflow="ellipsis", max_width=30)
    if narrow:
        table.columns.pop()  # SINCE
    for f in faults:
        parts = f.get("partitions") or []
        table.add_row(
            t(f.get("id")),
            t(f.get("entity") or "(whole namespace)"),
            t(",".join(map(str, parts)) if parts else "all"),
            t(f.get("kind"), "bold red"),
            t(f.get("latency") or "-"),
            *([] if narrow else [t(f.get("created_at_utc"))]),
        )
    return table


def pairing_line(pairing: dict[str, Any] | None) -> Text | None:
    if not pairing:
        return None
    text = (
        f"pairing {pairing.get('state')} → {pairing.get('secondary')} · "
        f"pending backlog {pairing.get('pending')} · moved {pairing.get('moved')} · "
        f"failovers {pairing.get('failovers')}"
    )
    if pairing.get("fault_reason"):
        text += f" · {pairing['fault_reason']}"
    return t(text, "" if pairing.get("state") == "Active" else "bold red")


def main_screen(
    status: dict[str, Any],
    interval: float,
    ns_rows: list[dict[str, Any]],
    rows: list[dict[str, Any]],
    overview: dict[str, Any] | None,
    state: ViewState,
    height: int | None = None,
    live: bool = True,
    width: int | None = None,
) -> RenderableType:
    narrow = width is not None and width < WIDE
    names = (
        narrow_namespaces_table(ns_rows, state.namespace, width or WIDE)
        if narrow
        else namespaces_table(ns_rows, state.namespace)
    )
    parts: list[RenderableType] = [header(status, interval, len(ns_rows), narrow), names]
    ov = overview or {}
    extra: list[RenderableType] = []
    line = pairing_line(ov.get("pairing"))
    if line is not None:
        extra.append(line)
    faults = faults_table(ov.get("faults") or [], narrow)
    if faults is not None:
        extra.append(faults)
    rows_height = None
    if height is not None:
        # header 1, namespaces 3 + n, title/heading/rule 4, faults 4 + n, footer 2; the
        # narrow view's tables have no blank edge lines (2 fewer each)
        used = 1 + 3 + len(ns_rows) + 4 + 2 + len(extra) - (3 if narrow else 0)
        used += (4 + len(ov.get("faults") or [])) if faults is not None else 0
        rows_height = max(3, height - used)
    parts.append(entities_table(rows, state, rows_height, width))
    parts += extra
    if live:
        keys = KEYS_HELP_NARROW if narrow else KEYS_HELP
        parts.append(t(state.message or keys, "bold yellow" if state.message else "dim"))
    return Group(*parts)


def detail_screen(entity: dict[str, Any] | None, state: ViewState) -> RenderableType:
    if entity is None:
        return Group(t(f"{state.detail} is gone", "bold red"), t(DETAIL_HELP, "dim"))
    parts: list[RenderableType] = []
    summary = (
        f"{entity['kind']} {entity['name']} in {state.namespace} · status {entity.get('status')}"
        f" · {entity.get('availability_status')} · active {entity.get('active_message_count')}"
        f" · dlq {entity.get('dead_letter_message_count')}"
        f" · scheduled {entity.get('scheduled_message_count', '-')}"
        f" · deferred {entity.get('deferred_message_count', '-')}"
        f" · size {size(entity.get('size_in_bytes'))}"
    )
    parts.append(t(summary, "bold"))
    partitions = entity.get("partitions") or []
    if partitions:
        table = Table(title=t("partitions", "bold"), box=box.SIMPLE_HEAD, title_justify="left")
        for heading in ("ID", "AVAILABILITY", "ACTIVE", "DLQ", "SIZE", "NEXT SEQ", "FAULTS"):
            table.add_column(heading)
        for p in partitions:
            avail = p.get("availability_status", "Available")
            table.add_row(
                t(p.get("partition_id")),
                t(avail, "" if avail == "Available" else "bold red"),
                t(p.get("active_message_count", "-")),
                t(p.get("dead_letter_message_count", "-")),
                t(size(p.get("size_in_bytes")) if "size_in_bytes" in p else "-"),
                t(p.get("next_sequence_number", "-")),
                t(",".join(p.get("faults") or []) or "-"),
            )
        parts.append(table)
    for title, key in (("last messages", "messages"), ("dead-lettered", "dead_lettered")):
        msgs = state.detail_data.get(key)
        if msgs is None:
            continue
        table = Table(title=t(title, "bold"), box=box.SIMPLE_HEAD, title_justify="left")
        for heading in ("SEQ", "ENQUEUED", "PART", "DELIVERIES", "STATE", "ID", "BODY"):
            table.add_column(heading, overflow="ellipsis", no_wrap=heading != "BODY")
        for m in msgs:
            table.add_row(
                *(t(m[k]) for k in ("seq", "enqueued", "partition", "deliveries")),
                *(t(m[k]) for k in ("state", "message_id", "body")),
            )
        if not msgs:
            table.add_row(t("(none)", "dim"))
        parts.append(table)
    if state.detail_data.get("error"):
        parts.append(t(state.detail_data["error"], "bold red"))
    parts.append(t(DETAIL_HELP, "dim"))
    return Group(*parts)
