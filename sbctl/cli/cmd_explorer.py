"""``sbctl explorer``: the URL of the daemon's web page, opened in a browser when there is one.

The page is served by the daemon itself (daemon/README.md §33). The URL carries the daemon's
explorer token in its fragment (``#token=...``): browsers never send a fragment to a server,
and the page passes the token on each of its API calls.
"""

import os
import sys
import webbrowser
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from sbctl.cli import options, render
from sbctl.core import layout
from sbctl.core.errors import InvalidOperation


def register(app: typer.Typer) -> None:
    app.command(name="explorer")(explorer)


def explorer(
    ctx: typer.Context,
    no_open: Annotated[
        bool,
        typer.Option("--no-open", help="Only print the URL; do not start a browser."),
    ] = False,
) -> None:
    """Print the URL of the Service Bus Explorer page the daemon serves, and open it in a
    browser when there is a display (the URL carries the page's token: keep it private)."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        status = sb.status()
    url = explorer_url(status, g.namespace)
    opened = False
    if not no_open and has_display():
        opened = webbrowser.open(url)
    render.emit(g.output, {"url": url, "opened": opened}, lambda d: d["url"])


def explorer_url(status: dict[str, Any], namespace: str) -> str:
    """The page's URL on the daemon's HTTP port (or its first AMQP port, which answers
    HTTP too), with the token read from the daemon's data dir."""
    host, port = status.get("http_host"), status.get("http_port")
    if port is None:
        host, port = status.get("amqp_host"), status.get("amqp_port")
    if port is None:
        raise InvalidOperation("the daemon runs without HTTP and AMQP ports: no page to open")
    if host in (None, "", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in str(host):
        host = f"[{host}]"
    token_file = layout.explorer_token_file(Path(status["data_dir"]))
    try:
        token = token_file.read_text().strip()
    except OSError as exc:
        raise InvalidOperation(f"cannot read the explorer token {token_file}: {exc}") from None
    return f"http://{host}:{port}/explorer?namespace={quote(namespace)}#token={token}"


def has_display() -> bool:
    """Whether a browser could show a window: always on macOS and Windows; on other
    systems only with an X11 or Wayland display."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
