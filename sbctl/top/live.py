"""``sbctl top``'s live loop: the keyboard, the screen and the refresh.

The terminal goes into cbreak mode (no echo, no line editing; Ctrl-C still raises
SIGINT) and onto the alternate screen; both are undone in ``finally``, which SIGINT,
SIGTERM, SIGHUP, an error and ``q`` all reach. A resize (SIGWINCH) redraws at once.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import termios
import time
import tty
from collections.abc import Iterator
from types import FrameType
from typing import Any

from sbctl.core.errors import SbctlError
from sbctl.top import model, view

PEEK_COUNT = 10
KEYS = {
    b"\x1b[A": "up",
    b"\x1bOA": "up",
    b"\x1b[B": "down",
    b"\x1bOB": "down",
    b"\x1b[Z": "backtab",
    b"\x1b[5~": "pageup",
    b"\x1b[6~": "pagedown",
    b"\x1b[D": "left",
    b"\x1b[C": "right",
}


def parse_keys(data: bytes) -> Iterator[str]:
    """Key names from what the terminal sent: escape sequences, then single bytes."""
    i = 0
    while i < len(data):
        for seq, name in KEYS.items():
            if data.startswith(seq, i):
                yield name
                i += len(seq)
                break
        else:
            b = data[i : i + 1]
            i += 1
            if b == b"\x1b":
                yield "esc"
            elif b in (b"\r", b"\n"):
                yield "enter"
            elif b in (b"\x7f", b"\x08"):
                yield "backspace"
            elif b == b"\t":
                yield "tab"
            elif b == b"\x03":
                yield "ctrl-c"
            else:
                yield b.decode("latin-1")


def _message_row(m: Any) -> dict[str, Any]:
    from sbctl.cli.render import BODY_PREVIEW

    body = m.message.body
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = f"<{len(body)} bytes>"
    return {
        "seq": m.sequence_number,
        "enqueued": time.strftime("%H:%M:%S", time.gmtime(m.enqueued_time_ms / 1000)),
        "partition": "-" if m.partition_id is None else m.partition_id,
        "deliveries": m.delivery_count,
        "state": m.state,
        "message_id": m.message.message_id or "",
        "body": text[:BODY_PREVIEW],
    }


def peek_detail(client: Any, namespace: str, entity: dict[str, Any]) -> dict[str, Any]:
    """The newest messages of ``entity`` (per partition, from its next sequence number)
    and its oldest dead-lettered ones. Peeks cost the namespace data credits, like any."""
    if entity["kind"] == "topic":
        return {}
    sb = client.using(namespace)
    out: dict[str, Any] = {}
    try:
        got: dict[int, Any] = {}
        parts = [p for p in entity.get("partitions") or [] if "next_sequence_number" in p]
        if parts:
            for p in parts:
                nxt = int(p["next_sequence_number"])
                first = (nxt & ~model.SEQ_MASK) | 1
                with contextlib.suppress(SbctlError):
                    for m in sb.peek(entity["name"], PEEK_COUNT, max(first, nxt - PEEK_COUNT)):
                        got[m.sequence_number] = m
        else:
            got = {m.sequence_number: m for m in sb.peek(entity["name"], PEEK_COUNT, 0)}
        newest = sorted(got.values(), key=lambda m: (m.enqueued_time_ms, m.sequence_number))
        out["messages"] = [_message_row(m) for m in newest[-PEEK_COUNT:]]
        if entity.get("dead_letter_message_count"):
            dlq = sb.peek(f"{entity['name']}/$deadletterqueue", PEEK_COUNT, 0)
            out["dead_lettered"] = [_message_row(m) for m in dlq]
    except SbctlError as exc:
        out["error"] = exc.message
    finally:
        sb.close()
    return out


class Top:
    """The state machine behind the keys."""

    def __init__(self, client: Any, interval: float, state: view.ViewState) -> None:
        self.client = client
        self.interval = interval
        self.state = state
        self.sampler = model.Sampler(client)
        self._peeked_at: tuple[Any, ...] | None = None

    # -- data
    def namespaces(self) -> list[str]:
        cur = self.sampler.current
        return sorted(cur.overviews) if cur else []

    def rows(self) -> list[dict[str, Any]]:
        cur = self.sampler.current
        if cur is None:
            return []
        rows = model.entity_rows(cur, self.sampler.previous, self.state.namespace)
        rows = model.filter_rows(rows, self.state.filter)
        return model.sort_rows(rows, self.state.sort_key, self.state.reverse)

    def entity(self, name: str) -> dict[str, Any] | None:
        cur = self.sampler.current
        ov = cur.overviews.get(self.state.namespace) if cur else None
        for e in (ov or {}).get("entities", []):
            if e["name"] == name:
                return dict(e)
        return None

    def refresh(self) -> None:
        try:
            self.sampler.sample()
        except SbctlError as exc:
            self.state.message = f"daemon: {exc.message} (retrying)"
            return
        if self.state.message.startswith("daemon:"):
            self.state.message = ""
        names = self.namespaces()
        if names and self.state.namespace not in names:
            self.state.namespace = names[0]
        if self.state.detail is not None:
            self.refresh_detail()

    def refresh_detail(self) -> None:
        entity = self.entity(self.state.detail or "")
        if entity is None:
            return
        seqs = [p.get("next_sequence_number") for p in entity.get("partitions") or []]
        mark = (*seqs, entity.get("total_message_count"), entity.get("dead_letter_message_count"))
        if mark != self._peeked_at:  # peek again only when something changed
            self._peeked_at = mark
            self.state.detail_data = peek_detail(self.client, self.state.namespace, entity)

    def screen(self, height: int, width: int | None = None) -> Any:
        cur = self.sampler.current
        if cur is None:
            return view.t("waiting for the daemon…")
        if self.state.detail is not None:
            return view.detail_screen(self.entity(self.state.detail), self.state)
        rows = self.rows()
        self.state.selected = max(0, min(self.state.selected, len(rows) - 1))
        return view.main_screen(
            cur.status,
            self.interval,
            model.namespace_rows(cur, self.sampler.previous),
            rows,
            cur.overviews.get(self.state.namespace),
            self.state,
            height,
            width=width,
        )

    # -- keys
    def key(self, key: str) -> bool:
        """Handle one key; False to quit."""
        st = self.state
        if key == "ctrl-c":
            return False
        if st.editing_filter:
            if key == "enter":
                st.editing_filter = False
            elif key == "esc":
                st.editing_filter, st.filter = False, ""
            elif key == "backspace":
                st.filter = st.filter[:-1]
            elif len(key) == 1 and key.isprintable():
                st.filter += key
            st.selected = 0
            return True
        if key == "q":
            return False
        if st.detail is not None:
            if key in ("esc", "backspace", "left", "enter"):
                st.detail, st.detail_data, self._peeked_at = None, {}, None
            return True
        self._main_key(key)
        return True

    def _main_key(self, key: str) -> None:
        st = self.state
        names = self.namespaces()
        if key in ("tab", "n", "backtab", "p") and names:
            step = 1 if key in ("tab", "n") else -1
            i = names.index(st.namespace) if st.namespace in names else 0
            st.namespace = names[(i + step) % len(names)]
            st.selected, st.message = 0, ""
        elif key in ("s", "S", ">", "<"):
            step = 1 if key in ("s", ">") else -1
            i = model.SORT_KEYS.index(st.sort_key)
            st.sort_key = model.SORT_KEYS[(i + step) % len(model.SORT_KEYS)]
        elif key == "r":
            st.reverse = not st.reverse
        elif key == "/":
            st.editing_filter = True
        elif key == "esc":
            st.filter = ""
        elif key in ("up", "k"):
            st.selected = max(0, st.selected - 1)
        elif key in ("down", "j"):
            st.selected += 1
        elif key == "pageup":
            st.selected = max(0, st.selected - 10)
        elif key == "pagedown":
            st.selected += 10
        elif key in ("enter", "right"):
            rows = self.rows()
            if rows:
                st.detail = str(rows[min(st.selected, len(rows) - 1)]["name"])
                self.refresh_detail()


class _Stop(Exception):
    pass


def run(
    client: Any,
    namespace: str,
    interval: float,
    sort: str = "name",
    reverse: bool = False,
    name_filter: str = "",
) -> None:
    """Run the live view until q, Ctrl-C, SIGTERM or SIGHUP; the terminal is restored."""
    from rich.console import Console
    from rich.live import Live

    state = view.ViewState(namespace=namespace, sort_key=sort, reverse=reverse, filter=name_filter)
    top = Top(client, interval, state)
    top.sampler.sample()  # an unreachable daemon is one error line, before the screen
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)

    def on_winch(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):
            os.write(wake_w, b"w")

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise _Stop

    old = {
        signal.SIGWINCH: signal.signal(signal.SIGWINCH, on_winch),
        signal.SIGTERM: signal.signal(signal.SIGTERM, on_term),
        signal.SIGHUP: signal.signal(signal.SIGHUP, on_term),
        # A shell starts background jobs with SIGINT ignored; Ctrl-C must still quit.
        signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
    }
    console = Console()
    try:
        tty.setcbreak(fd, termios.TCSANOW)
        with Live(console=console, screen=True, auto_refresh=False) as live:
            top.refresh()
            due = time.monotonic() + interval
            while True:
                live.update(top.screen(console.size.height, console.size.width), refresh=True)
                ready, _, _ = select.select([fd, wake_r], [], [], max(0, due - time.monotonic()))
                if wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 512)
                if fd in ready:
                    data = os.read(fd, 1024)
                    if not data or not all(top.key(k) for k in parse_keys(data)):
                        return
                if time.monotonic() >= due:
                    top.refresh()
                    due = max(due + interval, time.monotonic())
    except (KeyboardInterrupt, _Stop):
        return
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)
