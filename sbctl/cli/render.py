"""Everything the CLI prints: JSON for scripts, rich tables and plain lines for people.

:func:`emit` is the one place that chooses between the two, so commands never branch on
``-o``. This is the only module that uses rich, and it imports rich inside the functions
that build tables: plain lines, JSON and errors are written without it.

Values from the daemon are untrusted text: control characters, C1 codes and bidi overrides
are escaped before they reach a terminal, in tables and in JSON alike.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sbctl.cli.options import Output

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table

Renderer = Callable[[Any], Any]

BODY_PREVIEW = 60
NESTED_LIMIT = 120  # longer nested values (per-partition details) are left to -o json

# C0/C1 controls, DEL, line separators and bidi controls: a terminal may act on them.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# JSON already escapes C0; the rest is valid raw JSON but still unsafe on a terminal.
_UNSAFE_JSON = re.compile("[\x7f-\x9f\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape(text: str) -> str:
    """``text`` with unsafe characters as Python escapes (``\\n``, ``\\x1b``, ``\\u202e``)."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def to_json(data: Any) -> str:
    text = json.dumps(data, ensure_ascii=False, default=str)
    return _UNSAFE_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def emit(output: Output, data: Any, table: Renderer | None, *, lines: bool = False) -> None:
    """Print ``data``: as JSON (one JSON Lines record per item when ``lines``) with
    ``-o json``, else as ``table(data)`` (a rich renderable, a string, or None for nothing).
    """
    if output == "json":
        items = data if lines else [data]
        sys.stdout.write("".join(to_json(item) + "\n" for item in items))
        return
    shown = table(data) if table is not None else None
    if isinstance(shown, str):
        sys.stdout.write(shown + "\n")
    elif shown is not None:
        out = console()
        text = None if out.is_terminal else plain(shown, out.width)
        if text is None:
            out.print(shown)
        else:
            sys.stdout.write(text)


def error(code: str, message: str, output: Output, number: int | None = None) -> None:
    """One line on stderr: ``error: <message>`` (red on a terminal) or a JSON object
    (with Azure's ``error_number`` where the error has one, e.g. 50009)."""
    if output == "json":
        body: dict[str, Any] = {"code": code, "message": message}
        if number is not None:
            body["error_number"] = number
        line = to_json({"error": body})
    else:
        line = f"error: {escape(message)}"
        if sys.stderr.isatty() and not os.environ.get("NO_COLOR"):
            line = f"\x1b[31m{line}\x1b[0m"
    sys.stderr.write(line + "\n")


# -- table builders (rich)


def console() -> Console:
    from rich.console import Console

    # Piped tables are read with less or grep: do not squeeze them into 80 columns.
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(highlight=False, markup=False, emoji=False, width=200 if wide else None)


def plain(shown: Any, width: int) -> str | None:
    """What rich prints for ``shown`` (a table of :func:`_table`, or a Group of them and
    strings) on a console ``width`` columns wide that is not a terminal, written without
    rich's layout engine (most of a table command's time); None when rich has more to do
    than that: a table wider than ``width`` (rich folds it), text that is not one line of
    printable ASCII, or a renderable of another kind. tests/unit/test_render_plain.py checks
    that it equals rich's output wherever it answers."""
    from rich import box
    from rich.console import Group
    from rich.table import Table

    if isinstance(shown, str):
        return shown + "\n" if _printable(shown) else None
    if isinstance(shown, Group):
        parts = [plain(part, width) for part in shown.renderables]
        return None if any(part is None for part in parts) else "".join(parts)  # type: ignore[arg-type]
    if not isinstance(shown, Table) or not _simple(shown, box.SIMPLE_HEAD):
        return None
    cells = [[column.header, *column._cells] for column in shown.columns]
    if not cells or not all(_printable(c) for column in cells for c in column):
        return None
    columns = [[str(c) for c in column] for column in cells]
    widths = [max(len(c) for c in column) for column in columns]
    total = sum(widths) + 3 * (len(widths) - 1)
    if total > width:
        return None
    lines = [
        "   ".join(column[i].ljust(w) for column, w in zip(columns, widths, strict=True))
        for i in range(len(columns[0]))
    ]
    lines.insert(1, "─" * total)
    return "\n".join(lines) + "\n"


def _printable(text: object) -> bool:
    return isinstance(text, str) and text.isascii() and text.isprintable() and text == text.strip()


def _simple(table: Table, head: Any) -> bool:
    """Whether ``table`` is laid out as :func:`_table` makes them, with nothing else set."""
    return (
        table.box is head
        and table.show_header
        and not table.show_edge
        and not table.pad_edge
        and table.padding == (0, 1, 0, 1)
        and not (table.expand or table.show_lines or table.show_footer or table.leading)
        and table.title is None
        and table.caption is None
        and table.width is None
        and table.min_width is None
        and all(not row.style and not row.end_section for row in table.rows)
        and all(
            c.justify == "left" and c.width is None and c.max_width is None and c.ratio is None
            for c in table.columns
        )
    )


def _table(*headers: str, tight: tuple[str, ...] = ()) -> Table:
    """A plain table; ``tight`` columns (short numbers) never wrap, the others fold."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, header_style="bold", show_edge=False, pad_edge=False)
    for header in headers:
        if header in tight:
            table.add_column(header, no_wrap=True)
        else:
            table.add_column(header, overflow="fold", min_width=min(len(header), 10))
    return table


def _label(key: str) -> str:
    return key.removesuffix("_message_count").replace("_", " ")


def cell(key: str, value: Any) -> str:
    """One value as table text: sizes humanised, missing as ``-``, text escaped."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and key.endswith("_bytes"):
        return human_bytes(value)
    if isinstance(value, dict | list):
        text = to_json(value)
        if len(text) > NESTED_LIMIT:
            return f"({plural(len(value), 'entry', 'entries')}; -o json shows them)"
        return escape(text)
    return escape(str(value))


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``0 messages``."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"


def by_name(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A listing sorted by name, as people scan it (and as az lists)."""
    return sorted(items, key=lambda item: str(item.get("name", "")))


def record(data: dict[str, Any]) -> RenderableType:
    """One entity as a two-column property/value table; its ``partitions`` (queues and
    topics) as a table of their own below it, one row per partition."""
    table = _table("property", "value")
    parts = data.get("partitions")
    nested = isinstance(parts, list) and bool(parts) and all(isinstance(p, dict) for p in parts)
    for key, value in data.items():
        if key == "partitions" and nested:
            continue
        table.add_row(escape(key), cell(key, value))
    if not nested:
        return table
    from rich.console import Group

    assert isinstance(parts, list)
    return Group(table, "", partitions(parts))


def partitions(parts: list[dict[str, Any]]) -> RenderableType:
    """Per-partition counts: one row per partition, the keys the partitions have."""
    keys = list(dict.fromkeys(k for p in parts for k in p))
    labels = ["partition" if k == "partition_id" else _label(k) for k in keys]
    table = _table(*labels, tight=tuple(labels))
    for p in parts:
        table.add_row(*(cell(k, p.get(k)) for k in keys))
    return table


def created(kind: str, data: dict[str, Any], existed: bool = False) -> str:
    """``created queue orders (16 partitions, sessions)``: the short answer of a create;
    ``show`` prints every setting."""
    name = escape(str(data.get("name")))
    if existed:
        return f"{kind} {name} already exists; its settings were left as they are"
    notes = []
    count = data.get("partition_count")
    if data.get("enable_partitioning") and isinstance(count, int):
        notes.append(plural(count, "partition"))
    for key, note in (
        ("requires_session", "sessions"),
        ("requires_duplicate_detection", "duplicate detection"),
    ):
        if data.get(key):
            notes.append(note)
    status = data.get("status")
    if status not in (None, "Active"):
        notes.append(f"status {escape(str(status))}")
    return f"created {kind} {name}" + (f" ({', '.join(notes)})" if notes else "")


def rows(columns: Sequence[str]) -> Renderer:
    """A builder for one row per dict, with the ``columns`` the rows have, in that order
    (every scalar key of the first row when they have none of them)."""

    def build(items: list[dict[str, Any]]) -> RenderableType | str:
        if not items:
            return "(none)"
        keys = [c for c in columns if any(c in item for item in items)]
        if not keys:
            keys = [k for k, v in items[0].items() if not isinstance(v, dict | list)]
        table = _table(*(_label(k) for k in keys))
        for item in items:
            table.add_row(*(cell(k, item.get(k)) for k in keys))
        return table

    return build


def body_preview(message: dict[str, Any]) -> str:
    """At most :data:`BODY_PREVIEW` characters of a message body, escaped."""
    if "body_base64" in message:
        size = len(base64.b64decode(message["body_base64"]))
        return f"<{size} bytes, binary>"
    text = escape(str(message.get("body", "")))
    return text if len(text) <= BODY_PREVIEW else text[: BODY_PREVIEW - 1] + "…"


def messages(items: list[dict[str, Any]]) -> RenderableType | str:
    """Received or peeked messages (``ReceivedMessage.to_dict()`` shapes) as a table.

    A ``state`` column appears when a message is not active (peek shows scheduled and
    deferred ones), and a ``due`` column with the time a scheduled message is enqueued.
    """
    if not items:
        return "no messages"
    locked = any(m.get("lock_token") for m in items)
    states = any(m.get("state") not in (None, "active") for m in items)
    due = any(m.get("state") == "scheduled" for m in items)
    headers = ["seq", "part", "enqueued"]
    headers += ["state"] if states else []
    headers += ["due"] if due else []
    headers += ["dlv", "message id", "key"]
    headers += ["lock token"] if locked else []
    table = _table(*headers, "body", tight=("seq", "part", "dlv"))
    for m in items:
        row = [
            cell("sequence_number", m.get("sequence_number")),
            cell("partition_id", m.get("partition_id")),
            cell("enqueued_time_utc", m.get("enqueued_time_utc")),
        ]
        if states:
            row.append(cell("state", m.get("state")))
        if due:
            scheduled = m.get("state") == "scheduled"
            row.append(cell("due", m.get("scheduled_enqueue_time_utc") if scheduled else None))
        row += [
            cell("delivery_count", m.get("delivery_count")),
            cell("message_id", m.get("message_id")),
            cell("key", m.get("session_id") or m.get("partition_key")),
        ]
        if locked:
            row.append(cell("lock_token", m.get("lock_token")))
        table.add_row(*row, body_preview(m))
    return table


@contextmanager
def progress(output: Output, label: str) -> Iterator[Callable[[int, int, str], None] | None]:
    """A progress bar on stderr fed with ``(done, total, what)``; None (nothing shown) with
    ``-o json`` or when stderr is not a terminal."""
    if output == "json" or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    bar = Progress(
        f"{label}: " + "{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    task = bar.add_task("starting Spark", total=None)

    def report(done: int, total: int, what: str) -> None:
        bar.update(task, completed=done, total=total, description=escape(what))

    with bar:
        yield report


# -- throttling views (sbctl credits, sbctl namespace metrics)


def _kinds(counts: dict[str, int] | None) -> str:
    if not counts:
        return "-"
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def credits(data: dict[str, Any]) -> RenderableType:
    """``sbctl credits``: the namespace's budget, this period, and consumption by kind."""
    table = _table("credits", "value")
    consumed = data.get("consumed") or {}
    premium = data.get("sku") == "premium"
    budget = data.get("ops_per_second") if premium else data.get("credits_per_second")
    left = data.get("remaining")
    rows = [
        ("namespace", data.get("namespace")),
        ("tier", data.get("sku")),
    ]
    if premium:
        rows += [
            ("messaging units", data.get("capacity")),
            ("operations per unit per second", data.get("ops_per_unit")),
        ]
    rows += [
        ("per second", budget or "unlimited"),
        ("left in this period", "unlimited" if left is None else left),
        ("next period in", f"{data.get('period_ms_left', 0)} ms"),
        ("used this period", _kinds(consumed.get("this_period"))),
        ("used last period", _kinds(consumed.get("last_period"))),
        ("used since start", _kinds(consumed.get("since_start"))),
        ("throttled requests", data.get("throttled_requests")),
    ]
    for key, value in rows:
        table.add_row(key, cell(key, value))
    return table


def metrics(data: dict[str, Any]) -> RenderableType:
    """``sbctl namespace metrics``: requests throttled and served, daemon CPU and memory."""
    table = _table("metric", "value")
    cpu = data.get("cpu_percent")
    for key, value in (
        ("namespace", data.get("namespace")),
        ("tier", data.get("sku")),
        ("messaging units", data.get("capacity")),
        ("throttled requests", data.get("throttled_requests")),
        ("requests served", data.get("requests_served")),
        ("daemon cpu", None if cpu is None else f"{cpu:.1f} %"),
        ("daemon memory_bytes", data.get("rss_bytes")),
    ):
        table.add_row(key.removesuffix("_bytes"), cell(key, value))
    return table


# -- paired namespaces (sbctl namespace pair-status)

PAIR_COUNTERS = (
    "diverted",
    "moved",
    "pending",
    "dead_lettered",
    "pings_sent",
    "pings_failed",
    "failovers",
    "rotation_removals",
)


def pair_status(data: dict[str, Any]) -> RenderableType:
    """``sbctl namespace pair-status``: the pairing, its failing entities, its backlog
    queues."""
    from rich.console import Group

    summary = _table("pairing", "value")
    keys = (
        "primary",
        "secondary",
        "state",
        "fault_reason",
        "failover_interval",
        "ping_primary_interval",
        "enable_syphon",
        *PAIR_COUNTERS,
        "last_error",
        "last_error_at_utc",
    )
    for key in keys:
        if key == "fault_reason" and data.get(key) is None:
            continue
        summary.add_row(key.replace("_", " "), cell(key, data.get(key)))
    parts: list[RenderableType] = [summary]
    entities = data.get("entities") or []
    if entities:
        table = _table("entity", "state", "since", "next ping", "diverted", "last error")
        for e in entities:
            table.add_row(
                cell("entity", e.get("entity")),
                cell("state", e.get("state")),
                cell("since", e.get("failed_over_at_utc") or e.get("failing_since_utc")),
                cell("next ping", e.get("next_ping_utc")),
                cell("diverted", e.get("diverted")),
                cell("last error", e.get("last_error")),
            )
        parts.append(table)
    queues = data.get("backlog_queues") or []
    if queues:
        table = _table("backlog queue", "status", "in rotation", "pending")
        for q in queues:
            table.add_row(
                cell("name", q.get("name")),
                cell("status", q.get("status")),
                cell("in_rotation", q.get("in_rotation")),
                cell("pending", q.get("pending")),
            )
        parts.append(table)
    return Group(*parts)
