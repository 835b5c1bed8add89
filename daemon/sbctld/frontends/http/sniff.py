"""Tell AMQP, TLS and plain HTTP apart by a connection's first byte.

``AMQP`` (the protocol header) → the AMQP connection; ``0x16`` (a TLS handshake record) →
HTTPS; the first letter of an HTTP method → HTTP. The AMQP listeners wrap their protocol
factory with :func:`sniffing`, so the connection string's one port serves the SDKs'
messaging clients (AMQP) and their administration clients (HTTP or HTTPS).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

TLS_HANDSHAKE = 0x16
HTTP_FIRST = frozenset(b"GPDHOTC")  # GET PUT POST PATCH DELETE HEAD OPTIONS TRACE CONNECT
# Set by the daemon when HTTP is on; the AMQP listeners consult it for every connection.
FRONTEND: HttpListener | None = None


class HttpListener(Protocol):
    """The HTTP front-end as the sniffer needs it (sbctld.frontends.http.server.HttpFrontend):
    a new HTTP connection, plain or TLS, for ``namespace``."""

    def connection(self, namespace: str, tls: bool) -> asyncio.Protocol: ...


class Sniffer(asyncio.Protocol):
    """Buffers nothing: decides on the first chunk, then forwards everything."""

    def __init__(
        self,
        other: Callable[[], asyncio.Protocol] | None,
        frontend: HttpListener,
        namespace: str,
    ) -> None:
        self.other = other
        self.frontend = frontend
        self.namespace = namespace
        self.transport: asyncio.BaseTransport | None = None
        self.target: asyncio.Protocol | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.target is None:
            if not data:
                return
            self.target = self._choose(data[0])
            self.target.connection_made(self.transport)  # type: ignore[arg-type]
        self.target.data_received(data)

    def _choose(self, first: int) -> asyncio.Protocol:
        if first == TLS_HANDSHAKE:
            return self.frontend.connection(self.namespace, tls=True)
        if first in HTTP_FIRST or self.other is None:
            return self.frontend.connection(self.namespace, tls=False)
        return self.other()

    def eof_received(self) -> bool | None:
        if self.target is not None:
            return self.target.eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.target is not None:
            self.target.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.target is not None:
            self.target.pause_writing()

    def resume_writing(self) -> None:
        if self.target is not None:
            self.target.resume_writing()


def sniffing(
    other: Callable[[], asyncio.Protocol] | None,
    frontend: HttpListener | None = None,
    namespace: str = "",
) -> Callable[[], asyncio.Protocol]:
    """A protocol factory: ``other`` (AMQP) unless the first byte says HTTP or TLS.

    Without an HTTP front-end (``--no-http``) it is ``other`` itself.
    """
    http = frontend or FRONTEND
    if http is None:
        assert other is not None
        return other
    if other is None:
        return lambda: Sniffer(None, http, namespace)
    return lambda: Sniffer(other, http, namespace)
