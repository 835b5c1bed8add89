"""``sbctl daemon start --wait``: wait until the daemon serves every endpoint.

Ready means: the Unix socket answers a ``status`` request, and every TCP endpoint that
``status`` reports (``amqp_port``, and each port of ``amqp_ports`` when the daemon serves
AMQP) accepts a connection. ``daemon start`` already returns only once the daemon said so
through its start-up pipe; ``--wait`` checks it from the outside, also when the daemon was
started by another process (a CI step racing another), with a bounded time-out.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sbctl.core.errors import SbctlError, ServiceTimeout

POLL_S = 0.02


def tcp_ports(info: dict[str, Any]) -> list[int]:
    """The TCP ports ``status`` reports (``amqp_port`` and any ``amqp_ports``), sorted."""
    found: set[int] = set()

    def walk(value: Any) -> Iterator[int]:
        if isinstance(value, bool):
            return
        if isinstance(value, int):
            yield value
        elif isinstance(value, dict):
            for v in value.values():
                yield from walk(v)
        elif isinstance(value, list | tuple):
            for v in value:
                yield from walk(v)

    for key in ("amqp_port", "amqp_ports"):
        found.update(p for p in walk(info.get(key)) if 0 < p < 65536)
    return sorted(found)


def _accepts(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=max(timeout, 0.05)):
            return True
    except OSError:
        return False


def wait_ready(socket_path: Path, timeout: float) -> dict[str, Any]:
    """The daemon's ``status`` once every endpoint accepts connections; raises
    :class:`ServiceTimeout` (one line: what was not ready) after ``timeout`` seconds."""
    from sbctl.client import Client

    t0 = time.monotonic()
    deadline = t0 + timeout
    why = f"the socket {socket_path} does not answer"
    while True:
        left = deadline - time.monotonic()
        info: dict[str, Any] | None = None
        try:
            with Client(socket_path, timeout=max(min(left, 5.0), 0.05), retry_total=0) as c:
                info = c.status()
        except SbctlError as exc:
            why = f"the socket {socket_path} does not answer ({exc.message})"
        if info is not None:
            host = str(info.get("amqp_host") or "127.0.0.1")
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
            closed = [p for p in tcp_ports(info) if not _accepts(host, p, left)]
            if not closed:
                return {**info, "ready_seconds": round(time.monotonic() - t0, 3)}
            why = "AMQP port(s) " + ", ".join(map(str, closed)) + f" on {host} refuse connections"
        if time.monotonic() >= deadline:
            raise ServiceTimeout(f"the sbctl daemon was not ready within {timeout:g} s: {why}")
        time.sleep(POLL_S)
