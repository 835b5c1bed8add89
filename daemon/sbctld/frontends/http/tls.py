"""TLS for the HTTP endpoint and the AMQP ports: a self-signed certificate for localhost,
a sans-IO layer and a transport over it.

The certificate (``<data dir>/http/cert.pem``, key ``key.pem`` mode 0600) is made on first
use (the first HTTPS connection, or ``sbctl daemon cert``) with the ``cryptography``
library and kept across restarts, so a client trusts it once (``connection_verify``,
``NODE_EXTRA_CA_CERTS``, ``SSL_CERT_FILE``). It is its own CA (basic constraints CA, key
usage for both) with the names ``localhost``, ``127.0.0.1`` and ``::1``.

:class:`TlsLayer` runs the server side of a TLS session over memory buffers
(``ssl.MemoryBIO`` + ``SSLObject``): the sniffer feeds it the bytes it already read while
telling TLS from AMQP and HTTP (daemon/README.md §30), then everything after.
:class:`TlsTransport` puts an asyncio transport's face on it, for the protocol that reads
the plaintext and writes through it (AMQP over TLS, or HTTPS, on any port).
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

from sbctl.core.certs import cert_paths, ensure_certificate

__all__ = [
    "TlsError",
    "TlsLayer",
    "TlsTransport",
    "cert_paths",
    "ensure_certificate",
    "server_context",
]


def server_context(data_dir: Path) -> ssl.SSLContext:
    cert_path, key_path = ensure_certificate(data_dir)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_path, key_path)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class TlsError(Exception):
    """The peer's TLS failed (bad handshake, bad record): close the connection."""


class TlsLayer:
    """Server-side TLS over memory: ``receive`` ciphertext → plaintext, ``send`` the other way.

    ``data_to_send`` drains the ciphertext to write to the socket (handshake records too).
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._obj = context.wrap_bio(self._in, self._out, server_side=True)
        self.handshaken = False
        self._pending: list[bytes] = []  # plaintext written before the handshake ended

    def receive(self, data: bytes) -> bytes:
        """Feed ciphertext; returns the plaintext now readable (maybe b"")."""
        self._in.write(data)
        try:
            if not self.handshaken:
                try:
                    self._obj.do_handshake()
                except ssl.SSLWantReadError:
                    return b""
                self.handshaken = True
                for chunk in self._pending:
                    self._obj.write(chunk)
                self._pending.clear()
            chunks = []
            while True:
                try:
                    chunk = self._obj.read(65536)
                except ssl.SSLWantReadError:
                    break
                except ssl.SSLZeroReturnError:
                    break
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks)
        except ssl.SSLError as exc:
            raise TlsError(exc.reason or str(exc)) from None

    def send(self, plaintext: bytes) -> None:
        if not self.handshaken:
            self._pending.append(plaintext)
            return
        try:
            self._obj.write(plaintext)
        except ssl.SSLError as exc:
            raise TlsError(exc.reason or str(exc)) from None

    def close(self) -> None:
        """Queue a close_notify (best effort)."""
        if self.handshaken:
            try:
                self._obj.unwrap()
            except (ssl.SSLWantReadError, ssl.SSLError):
                pass

    def data_to_send(self) -> bytes:
        return self._out.read()

    @property
    def ssl_object(self) -> ssl.SSLObject:
        return self._obj


class TlsTransport(asyncio.Transport):
    """The plaintext side of a TLS session over the socket's transport ``outer``."""

    def __init__(self, outer: asyncio.Transport, layer: TlsLayer) -> None:
        super().__init__()
        self._outer = outer
        self._layer = layer
        self._closing = False

    def flush(self) -> None:
        """Write the ciphertext the session has to send (records, handshake, alerts)."""
        out = self._layer.data_to_send()
        if out and not self._outer.is_closing():
            self._outer.write(out)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.is_closing():
            return
        try:
            self._layer.send(bytes(data))
        except TlsError:
            self.abort()
            return
        self.flush()

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        self._layer.close()
        self.flush()
        self._outer.close()

    def abort(self) -> None:
        self._closing = True
        self._outer.abort()

    def is_closing(self) -> bool:
        return self._closing or self._outer.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._layer.ssl_object
        return self._outer.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._outer.pause_reading()

    def resume_reading(self) -> None:
        self._outer.resume_reading()

    def is_reading(self) -> bool:
        return self._outer.is_reading()

    def get_write_buffer_size(self) -> int:
        return self._outer.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._outer.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._outer.set_write_buffer_limits(high, low)
