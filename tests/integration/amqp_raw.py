"""A minimal blocking AMQP 1.0 client on sbctl's own codec, for what the Python SDK
does not exercise (the .NET-style SASL mechanism, small frames, rule operations)."""

from __future__ import annotations

import socket
import ssl
import uuid
from typing import Any

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t


class RawClient:
    def __init__(
        self,
        port: int,
        *,
        max_frame_size: int = 65536,
        mechanism: str = "MSSBCBS",
        idle_ms: int = 60_000,
        tls: ssl.SSLContext | None = None,
    ):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if tls is not None:  # AMQP over TLS, as the SDKs speak it outside emulator mode
            self.sock = tls.wrap_socket(self.sock, server_hostname="localhost")
        self.buf = b""
        self.handles = 0
        self.sock.sendall(framing.PROTOCOL_SASL)
        assert self._exact(8) == framing.PROTOCOL_SASL
        mechanisms = self.frame().body
        assert mechanism in mechanisms.sasl_server_mechanisms
        self.sock.sendall(framing.encode_frame(0, t.SaslInit(mechanism, b"", "localhost"), kind=1))
        assert self.frame().body.code == 0
        # Pipelined, as the SDKs do: header, open and begin before any answer.
        self.sock.sendall(
            framing.PROTOCOL_AMQP
            + framing.encode_frame(0, t.Open("raw", "localhost", max_frame_size, 255, idle_ms))
            + framing.encode_frame(0, t.Begin(None, 0, 5000, 5000, 1000))
        )
        assert self._exact(8) == framing.PROTOCOL_AMQP
        self.open = self.frame().body
        assert isinstance(self.open, t.Open)
        assert isinstance(self.frame().body, t.Begin)

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def frame(self) -> framing.Frame:
        while True:
            got = framing.parse_frame(self.buf, 0, 1 << 24)
            if got is not None:
                frame, end = got
                self.buf = self.buf[end:]
                if frame.body is None:
                    continue  # heartbeat
                return frame
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk

    def heartbeat(self) -> bytes:
        """The next frame as raw bytes (to see an empty heartbeat frame)."""
        while len(self.buf) < 8:
            self.buf += self.sock.recv(65536)
        size = int.from_bytes(self.buf[:4], "big")
        raw = self._exact(size)
        return raw

    def until(self, kind: type) -> framing.Frame:
        while True:
            frame = self.frame()
            if isinstance(frame.body, kind):
                return frame

    def attach(
        self, role: bool, address: str, *, settle_modes: tuple[int, int] = (0, 0), **kw: Any
    ) -> int:
        """Attach a link (``role`` True: receiver) with (snd, rcv) ``settle_modes``; ``kw``
        goes to a receiver's source (e.g. ``filter``)."""
        self.handles += 1
        handle = self.handles
        source = t.Source(address, **kw) if role else t.Source(f"src-{handle}")
        target = t.Target(f"tgt-{handle}") if role else t.Target(address)
        snd, rcv = settle_modes
        attach = t.Attach(f"link-{handle}", handle, role, snd, rcv, source, target, None, None, 0)
        self.sock.sendall(framing.encode_frame(0, attach))
        return handle

    def management(self, node: str) -> tuple[int, int]:
        rx = self.attach(True, node)
        tx = self.attach(False, node)
        self.sock.sendall(framing.encode_frame(0, t.Flow(0, 5000, 0, 5000, rx, 0, 100)))
        return tx, rx

    def request(
        self,
        tx: int,
        node: str,
        operation: str,
        body: Any,
        delivery_id: int,
        app: dict[str, Any] | None = None,
        *,
        txn: Any = None,
    ) -> tuple[dict[Any, Any], Any]:
        """One ``$management`` request (``app``: more application properties), inside
        transaction ``txn`` when given, and its answer."""
        msg = codec.Message(
            properties=t.Properties(uuid.uuid4(), None, None, None, node),
            application_properties={"operation": operation, "type": "entity-mgmt", **(app or {})},
            body=body,
            body_kind="value",
        )
        tag = delivery_id.to_bytes(4, "big")
        state = None if txn is None else t.TransactionalState(txn)
        transfer = t.Transfer(tx, delivery_id, tag, 0, txn is None, False, None, state)
        self.sock.sendall(framing.encode_frame(0, transfer, codec.encode_message(msg)))
        payload = b""
        while True:
            frame = self.until(t.Transfer)
            payload += frame.payload
            if not frame.body.more:
                break
        reply = codec.decode_message(payload)
        return reply.application_properties or {}, reply.body

    def close(self) -> None:
        self.sock.sendall(framing.encode_frame(0, t.Close()))
        self.sock.close()
