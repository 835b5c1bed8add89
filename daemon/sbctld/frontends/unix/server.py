"""The Unix-socket front-end: the daemon's own protocol (sbctl.core.protocol), for the CLI and
the Python client.

A thin layer over the service (sbctld.service): decode a request, call its handler
(sbctld.frontends.unix.ops), encode the reply. Whether the reply waits for durability and
what it wakes is the operation's declaration (sbctl.core.operations); the durable
acknowledgement, the slow-store delay and the wake-ups themselves are the service's. Errors
are answered in the Unix wire form (``sbctl.core.wire_errors.error_to_wire``); an unexpected
exception is logged and answered as an internal error, never kills the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from sbctl.core.errors import GeneralError, SbctlError
from sbctl.core.operations import OPERATIONS, decode_args
from sbctl.core.protocol import decode_envelope
from sbctld.frontends.unix.connection import Connection
from sbctld.frontends.unix.ops import LATER, Operations
from sbctld.service import OperationCall, Service

log = logging.getLogger("sbctld")
DEFAULT_REPLY_BUFFER_BYTES = 64 * 1024 * 1024


class UnixFrontend(Operations):
    def __init__(
        self,
        service: Service,
        socket_path: Path,
        *,
        reply_buffer_bytes: int = DEFAULT_REPLY_BUFFER_BYTES,
    ) -> None:
        self.service = service
        self.broker = service.broker
        self.socket_path = socket_path
        self.reply_buffer_bytes = reply_buffer_bytes
        self._server: asyncio.AbstractServer | None = None
        self._adoptions: set[asyncio.Task[None]] = set()  # loads being checked (sbctld.loads)
        self._load_locks: dict[tuple[Any, str], tuple[asyncio.Lock, int]] = {}  # (lock, users)
        self._handlers: dict[str, Callable[[Connection, int, Any], Any]] = handlers(self)
        # The operations, for the other front-ends (the explorer page: sbctld.frontends.http)
        service.providers["operation"] = self.serve_operation

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        path = str(self.socket_path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # socket file mode 0600 (daemon/README.md §23)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(
            lambda: Connection(self), sock=sock, backlog=1024
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._adoptions):  # nothing of a load is stored before its commit
            task.cancel()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    # ------------------------------------------------------------ dispatch

    def dispatch(self, conn: Connection, body: bytes) -> None:
        req_id = 0
        req = None
        try:
            with self.service.request() as req:
                envelope = decode_envelope(body)
                req_id = envelope.id
                args = decode_args(envelope)  # refuses an unknown op
                result = self._handlers[envelope.op](conn, req_id, args)
        except SbctlError as err:
            # answered after the request's slow-store delay, like a success
            assert req is not None
            self.service.later(req, conn.reply_error, req_id, err)
            return
        except Exception as exc:
            log.error("request %s failed:\n%s", req_id, traceback.format_exc())
            conn.reply_error(req_id, GeneralError(f"internal error: {exc}"))
            return
        if result is not LATER:
            self.answer(conn, req_id, req, OPERATIONS[envelope.op], args, result)

    def serve_operation(self, call: OperationCall, reply: Callable[[Any], None]) -> None:
        """Run an operation another front-end decoded: as :meth:`dispatch` does (durable
        answer, slow-store delay, wake-ups, parked receives), ``reply`` getting the result or
        the SbctlError. Any other exception is the caller's."""
        conn = cast(Connection, Proxied(call, reply))
        req = None
        try:
            with self.service.request() as req:
                result = self._handlers[call.name](conn, 0, call.args)
        except SbctlError as err:
            if req is None:
                reply(err)
            else:
                self.service.later(req, reply, err)
            return
        if result is not LATER:
            self.answer(conn, 0, req, OPERATIONS[call.name], call.args, result)

    def forget(self, conn: Connection) -> None:
        """A dropped connection drops its parked receives."""
        for op in list(conn.parked):
            self.service.purgatory.cancel(op)
        conn.parked.clear()


class Proxied:
    """What a handler needs of its connection, for an operation another front-end asked for:
    its sender, whether the asker still waits, replies (to ``reply``) and parked receives."""

    def __init__(self, call: OperationCall, reply: Callable[[Any], None]) -> None:
        self.sender = call.sender
        self._alive = call.alive
        self._reply = reply
        self.parked: set[Any] = set()

    @property
    def closed(self) -> bool:
        return not self._alive()

    def reply(self, req_id: int, result: Any) -> None:
        self._reply(result)

    def reply_error(self, req_id: int, err: SbctlError) -> None:
        self._reply(err)


def handlers(ops: Operations) -> dict[str, Callable[[Connection, int, Any], Any]]:
    """``op_<name>`` for every declared operation (sbctl.core.operations); a declared operation
    without a handler, or a handler without a declaration, is refused at start."""
    found = {name[3:] for name in dir(ops) if name.startswith("op_")}
    if found != set(OPERATIONS):
        missing = ", ".join(sorted(set(OPERATIONS) - found)) or "none"
        undeclared = ", ".join(sorted(found - set(OPERATIONS))) or "none"
        raise RuntimeError(f"handlers without declaration: {undeclared}; missing: {missing}")
    return {name: getattr(ops, f"op_{name}") for name in OPERATIONS}
