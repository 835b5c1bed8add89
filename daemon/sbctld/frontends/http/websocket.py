"""AMQP over WebSocket: the SDKs' ``AmqpOverWebsocket`` transport (daemon/README.md §29).

An SDK given a custom endpoint address or an HTTP proxy (or ``transport_type=
AmqpOverWebsocket``) opens ``GET /$servicebus/websocket`` with ``Upgrade: websocket`` and the
subprotocol ``AMQPWSB10``, over TLS or plain TCP as its ``use_tls`` says, then speaks AMQP
1.0 inside binary WebSocket messages. The HTTP connection that sees such a request on an
AMQP port (sbctld.frontends.http.server) answers ``101 Switching Protocols`` and from then
on feeds the frames' payloads to a new AMQP connection of the port's namespace, which
writes back through :class:`WebSocketTransport`. AMQP is a byte stream, so a message's
frames are delivered as they come; ping is answered with pong, close with close.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
from collections.abc import Callable
from typing import Any

PATH = "/$servicebus/websocket"
SUBPROTOCOL = "AMQPWSB10"
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455
MAX_FRAME = 64 * 1024 * 1024  # one frame's payload; AMQP frames are far smaller

CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
PROTOCOL_ERROR, TOO_BIG = 1002, 1009


def requested(method: str, path: str, headers: dict[str, str]) -> bool:
    """Whether a request asks for AMQP over WebSocket (headers keyed in lower case)."""
    return (
        method == "GET"
        and path.rstrip("/").lower() == PATH.lower()
        and "websocket" in headers.get("upgrade", "").lower()
    )


def handshake_error(headers: dict[str, str]) -> str | None:
    """Why the upgrade request cannot be accepted, or None."""
    if headers.get("sec-websocket-version", "").strip() != "13":
        return "the WebSocket upgrade needs Sec-WebSocket-Version: 13"
    if not headers.get("sec-websocket-key", "").strip():
        return "the WebSocket upgrade has no Sec-WebSocket-Key"
    offered = [p.strip() for p in headers.get("sec-websocket-protocol", "").split(",")]
    if offered != [""] and SUBPROTOCOL.lower() not in (p.lower() for p in offered):
        return f"the WebSocket upgrade must offer the subprotocol {SUBPROTOCOL}"
    return None


def accept_headers(headers: dict[str, str]) -> list[tuple[str, str]]:
    """The headers of the ``101`` answer to an accepted upgrade request."""
    key = headers["sec-websocket-key"].strip().encode("latin-1")
    accept = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode("ascii")
    out = [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", accept)]
    if headers.get("sec-websocket-protocol", "").strip():
        out.append(("Sec-WebSocket-Protocol", SUBPROTOCOL))
    return out


def frame(opcode: int, payload: bytes = b"") -> bytes:
    """One unmasked, final frame (a server's frames are never masked)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
    return head + payload


def _unmask(payload: bytes, mask: bytes) -> bytes:
    n = len(payload)
    if not n:
        return b""
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


class FrameError(Exception):
    """The peer broke the WebSocket framing; ``code`` is the close status to send."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code


class FrameReader:
    """Sans-IO reader of a client's frames: ``feed(bytes)`` → complete ``(opcode, payload)``."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self.buf += data
        out = []
        while (got := self._one()) is not None:
            out.append(got)
        return out

    def _one(self) -> tuple[int, bytes] | None:
        buf = self.buf
        if len(buf) < 2:
            return None
        first, second = buf[0], buf[1]
        opcode, length, at = first & 0x0F, second & 0x7F, 2
        if first & 0x70:
            raise FrameError(PROTOCOL_ERROR, "a WebSocket frame used reserved bits")
        if not second & 0x80:
            raise FrameError(PROTOCOL_ERROR, "a client's WebSocket frame must be masked")
        if opcode >= CLOSE and (length > 125 or not first & 0x80):
            raise FrameError(PROTOCOL_ERROR, "a WebSocket control frame was fragmented or long")
        if length == 126:
            if len(buf) < 4:
                return None
            (length,) = struct.unpack_from("!H", buf, 2)
            at = 4
        elif length == 127:
            if len(buf) < 10:
                return None
            (length,) = struct.unpack_from("!Q", buf, 2)
            at = 10
        if length > MAX_FRAME:
            raise FrameError(TOO_BIG, f"a WebSocket frame is larger than {MAX_FRAME} bytes")
        if len(buf) < at + 4 + length:
            return None
        mask = bytes(buf[at : at + 4])
        payload = _unmask(bytes(buf[at + 4 : at + 4 + length]), mask)
        del buf[: at + 4 + length]
        return opcode, payload


class WebSocketTransport(asyncio.Transport):
    """What the AMQP connection writes to: each write one binary frame on the HTTP
    connection's socket (through its TLS when there is one)."""

    def __init__(self, send: Callable[[bytes], None], close: Callable[[], None], raw: Any) -> None:
        super().__init__()
        self._send = send
        self._close = close
        self._raw = raw  # the socket's transport, for get_extra_info
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self.closing:
            self._send(frame(BINARY, bytes(data)))

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            self._send(frame(CLOSE, struct.pack("!H", 1000)))
            self._close()

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._raw.get_extra_info(name, default) if self._raw is not None else default


class AmqpOverWebSocket:
    """The upgraded side of an HTTP connection: frames in → AMQP, AMQP out → frames."""

    def __init__(
        self,
        amqp: asyncio.Protocol,
        send: Callable[[bytes], None],
        close: Callable[[], None],
        raw: Any,
    ) -> None:
        self.amqp = amqp
        self.reader = FrameReader()
        self.transport = WebSocketTransport(send, close, raw)
        self._send = send
        amqp.connection_made(self.transport)

    def data_received(self, data: bytes) -> None:
        if self.transport.closing:
            return
        try:
            frames = self.reader.feed(data)
        except FrameError as exc:
            self._end(exc.code, str(exc))
            return
        for opcode, payload in frames:
            if opcode in (BINARY, CONTINUATION, TEXT):
                if payload:
                    self.amqp.data_received(payload)
            elif opcode == PING:
                self._send(frame(PONG, payload))
            elif opcode == CLOSE:
                self._end(1000, "")
            elif opcode != PONG:
                self._end(PROTOCOL_ERROR, f"unknown WebSocket opcode {opcode}")
            if self.transport.closing:
                return

    def _end(self, code: int, reason: str) -> None:
        """Close both the WebSocket (with ``code``) and the connection under it."""
        if not self.transport.closing:
            self.transport.closing = True
            self._send(frame(CLOSE, struct.pack("!H", code) + reason.encode()[:120]))
            self.transport._close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport.closing = True
        self.amqp.connection_lost(exc)
