"""One Unix-socket client connection: framing, pipelining, bursts and back-pressure.

Rules kept here: requests on one connection may be pipelined and are answered by request id;
a bad length prefix is answered and closes the connection (the stream cannot be
resynchronised); a connection is from this user or root only (daemon/README.md §23).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from typing import Any, Protocol, cast

from sbctl.core.errors import BadRequest, SbctlError
from sbctl.core.protocol import LENGTH, MAX_REQUEST_BYTES, encode_reply
from sbctl.core.wire_errors import error_to_wire
from sbctld.frontends.unix.present import present
from sbctld.service import DelayedOperation, Service

log = logging.getLogger("sbctld")
# One connection's pipelined requests are handled in bursts of at most this many requests or
# reply bytes; then the loop serves everyone else before the next burst.
BURST_REQUESTS = 256
BURST_BYTES = 1024 * 1024


class Dispatcher(Protocol):
    """What a connection needs of its front-end (sbctld.frontends.unix.server)."""

    reply_buffer_bytes: int
    service: Service

    def dispatch(self, conn: Connection, body: bytes) -> None: ...

    def forget(self, conn: Connection) -> None: ...


def peer_allowed(sock: socket.socket) -> bool:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return True
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid in (os.getuid(), 0)


class Connection(asyncio.Protocol):
    """One client connection; requests may be pipelined.

    Back-pressure: ``reply_buffer_bytes`` bounds what a connection's unread replies may
    cost the daemon. When they exceed half of it, the transport calls
    :meth:`pause_writing`; the connection then stops reading and dispatching its requests
    (those already read wait in ``buf``) until the client has read them down to an eighth.
    The other half covers the reply that crossed the mark and the buffers made while
    encoding it, so a client that never reads grows the daemon by about the bound at most
    (unless one reply alone is larger).
    Requests already read are handled in bursts (``BURST_REQUESTS``, ``BURST_BYTES``) so
    that one pipelining client cannot hold the loop while others wait.
    """

    def __init__(self, server: Dispatcher) -> None:
        self.server = server
        self.sender = server.service.new_sender()  # a paired primary's backlog key
        self.parked: set[DelayedOperation] = set()  # its receives waiting for messages
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.closed = False
        self.paused = False  # by back-pressure: resumed by resume_writing
        self.yielding = False  # after a burst: resumed by the next loop iteration
        self.burst_bytes = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        bound = self.server.reply_buffer_bytes
        self.transport.set_write_buffer_limits(high=bound // 2, low=bound // 8)
        sock = transport.get_extra_info("socket")
        if sock is not None and not peer_allowed(sock):
            log.warning("refused a connection from another user")
            transport.close()

    def is_open(self) -> bool:
        """Whether the client still waits for its answers."""
        return not self.closed

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.buf = bytearray()
        self.server.forget(self)

    def pause_writing(self) -> None:
        self.paused = True
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if self.transport is None or self.closed:
            return
        self.transport.resume_reading()
        self._dispatch_buffered()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.paused and not self.yielding:
            self._dispatch_buffered()

    def _yield_burst(self) -> None:
        assert self.transport is not None
        self.yielding = True
        self.transport.pause_reading()
        asyncio.get_running_loop().call_soon(self._after_burst)

    def _after_burst(self) -> None:
        self.yielding = False
        if self.closed or self.paused or self.transport is None:
            return  # resume_writing carries on
        self.transport.resume_reading()
        self._dispatch_buffered()

    def _dispatch_buffered(self) -> None:
        buf = self.buf
        pos = 0
        end = len(buf)
        handled = 0
        self.burst_bytes = 0
        while end - pos >= 4 and not self.paused and not self.closed:
            if handled >= BURST_REQUESTS or self.burst_bytes >= BURST_BYTES:
                self._yield_burst()
                break
            handled += 1
            (n,) = LENGTH.unpack_from(buf, pos)
            if n > MAX_REQUEST_BYTES:
                # The stream cannot be resynchronised after a bad length: answer, then close.
                self.reply_error(
                    0,
                    BadRequest(
                        f"request frame of {n} bytes exceeds the {MAX_REQUEST_BYTES} byte limit"
                    ),
                )
                self.buf = bytearray()
                assert self.transport is not None
                self.transport.close()
                return
            if end - pos - 4 < n:
                break
            body = bytes(buf[pos + 4 : pos + 4 + n])
            pos += 4 + n
            self.server.dispatch(self, body)
        if pos and buf is self.buf:
            del buf[:pos]

    def send(self, frame: bytes | bytearray) -> None:
        if not self.closed and self.transport is not None:
            self.burst_bytes += len(frame)
            self.transport.write(frame)

    def reply(self, req_id: int, result: Any) -> None:
        """Answer a request: its result in the wire form the client reads (present)."""
        self.send(encode_reply(req_id, True, present(result)))

    def reply_error(self, req_id: int, err: SbctlError) -> None:
        self.send(encode_reply(req_id, False, error_to_wire(err)))
