"""The Unix-socket front-end: the daemon's own protocol (sbctl.core.protocol), for the CLI and
the Python client.

A thin layer over the service (sbctld.service): decode a request, :meth:`Service.run` it,
encode the reply. What the operation does, whether its reply waits for durability and what
it wakes are the service's and the declaration's (sbctl.core.operations). Errors are
answered in the Unix wire form (``sbctl.core.wire_errors.error_to_wire``); an unexpected
exception is logged and answered as an internal error, never kills the daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import traceback
from pathlib import Path
from typing import Any

from sbctl.core.errors import GeneralError, SbctlError
from sbctl.core.operations import decode_args
from sbctl.core.protocol import decode_envelope
from sbctld.frontends.unix.connection import Connection
from sbctld.service import Service

log = logging.getLogger("sbctld")
DEFAULT_REPLY_BUFFER_BYTES = 64 * 1024 * 1024


class UnixFrontend:
    def __init__(
        self,
        service: Service,
        socket_path: Path,
        *,
        reply_buffer_bytes: int = DEFAULT_REPLY_BUFFER_BYTES,
    ) -> None:
        self.service = service
        self.socket_path = socket_path
        self.reply_buffer_bytes = reply_buffer_bytes
        self._server: asyncio.AbstractServer | None = None
        # `sbctl daemon status`: the socket after the data dir, the reply buffer (this
        # front-end's setting) after the durability
        service.info_where["socket"] = str(socket_path)
        service.info_settings["reply_buffer_bytes"] = reply_buffer_bytes

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
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    # ------------------------------------------------------------ dispatch

    def dispatch(self, conn: Connection, body: bytes) -> None:
        req_id = 0
        try:
            envelope = decode_envelope(body)
            req_id = envelope.id
            args = decode_args(envelope)  # refuses an unknown op
        except SbctlError as err:
            conn.reply_error(req_id, err)
            return

        def reply(result: Any) -> None:
            if isinstance(result, SbctlError):
                conn.reply_error(req_id, result)
            else:
                conn.reply(req_id, result)

        try:
            self.service.run(
                envelope.op,
                args,
                reply,
                sender=conn.sender,
                alive=conn.is_open,
                parked=conn.parked,
            )
        except Exception as exc:
            log.error("request %s failed:\n%s", req_id, traceback.format_exc())
            conn.reply_error(req_id, GeneralError(f"internal error: {exc}"))

    def forget(self, conn: Connection) -> None:
        """A dropped connection drops its parked receives."""
        self.service.cancel(conn.parked)
