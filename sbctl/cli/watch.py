"""``--watch``: refresh a view until Ctrl-C or SIGTERM.

Three ways to show the refreshes:

- stdout is a terminal, table output: a live view (rich ``Live``) whose last line says when
  it was refreshed and how to quit;
- ``-o json``: one JSON object per refresh (JSON Lines), flushed at once;
- stdout is a pipe or a file, table output: one snapshot per refresh, each a
  ``refreshed at <UTC time>`` line, the table and a blank line, flushed at once.

Stopping: SIGINT (Ctrl-C) and SIGTERM both end the view with status 0, as soon as they
arrive, except that a snapshot being written is finished first (a pipe never receives half
a JSON line). A shell starts the background jobs of a script with SIGINT ignored, and
Python then leaves it ignored: a view would never stop on Ctrl-C or ``kill -INT``. A view
exists to be stopped, so it handles SIGINT itself whatever it inherited.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING, Any

from sbctl.cli import render
from sbctl.cli.options import Output

if TYPE_CHECKING:
    from rich.console import RenderableType

DEFAULT_INTERVAL = 0.5
QUIT_HINT = "Ctrl-C to quit"


class Stopped(BaseException):
    """Raised by the signal handler: not an Exception, so that no ``except Exception``
    (the client's error handling included) can swallow it."""


class _Stopper:
    """SIGINT/SIGTERM handling for one view: stop at once, or after the current write."""

    def __init__(self) -> None:
        self.requested = False
        self.writing = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        if not self.writing:
            raise Stopped

    @contextmanager
    def write(self) -> Iterator[None]:
        """A write that a signal must not cut in half; the stop follows it."""
        self.writing = True
        try:
            yield
        finally:
            self.writing = False
        if self.requested:
            raise Stopped

    @contextmanager
    def installed(self) -> Iterator[None]:
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, self.handle)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def stamp(now: float | None = None) -> str:
    """The refresh time as people read it: ``2026-11-25T18:40:54Z``."""
    moment = datetime.fromtimestamp(time.time() if now is None else now, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def run(
    output: Output,
    fetch: Callable[[], Any],
    build: Callable[[Any], RenderableType],
    interval: float = DEFAULT_INTERVAL,
    *,
    tty: bool | None = None,
) -> None:
    """Show ``build(fetch())`` (or ``fetch()`` as JSON) every ``interval`` seconds until
    SIGINT or SIGTERM; returns normally then."""
    stopper = _Stopper()
    live = (sys.stdout.isatty() if tty is None else tty) and output != "json"
    try:
        with stopper.installed():
            if live:
                _live(stopper, fetch, build, interval)
            else:
                _snapshots(stopper, output, fetch, build, interval)
    except Stopped:
        pass
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        pass


def _snapshots(
    stopper: _Stopper,
    output: Output,
    fetch: Callable[[], Any],
    build: Callable[[Any], RenderableType],
    interval: float,
) -> None:
    while True:
        data = fetch()
        with stopper.write():
            if output == "json":
                sys.stdout.write(render.to_json(data) + "\n")
            else:
                sys.stdout.write(f"refreshed at {stamp()}\n")
                sys.stdout.flush()
                render.console().print(build(data))
                sys.stdout.write("\n")
            sys.stdout.flush()
        time.sleep(interval)


def _live(
    stopper: _Stopper,
    fetch: Callable[[], Any],
    build: Callable[[Any], RenderableType],
    interval: float,
) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    def frame() -> RenderableType:
        shown = build(fetch())
        return Group(shown, Text(f"refreshed at {stamp()}; {QUIT_HINT}", style="dim"))

    view = Live(frame(), console=render.console(), auto_refresh=False)
    try:
        with stopper.write():
            view.start(refresh=True)
        while True:
            time.sleep(interval)
            shown = frame()
            with stopper.write():
                view.update(shown, refresh=True)
    finally:
        stopper.writing = True  # a second signal must not cut the view's last frame
        view.stop()
