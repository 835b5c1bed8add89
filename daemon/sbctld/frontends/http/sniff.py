"""Tell AMQP, TLS and plain HTTP apart by a connection's first byte.

``AMQP`` (the protocol header) → the AMQP connection; ``0x16`` (a TLS handshake record) →
TLS; the first letter of an HTTP method → HTTP. The AMQP listeners wrap their protocol
factory with :func:`sniffing`, so the connection string's one port serves the SDKs'
messaging clients (AMQP) and their administration clients (HTTP or HTTPS).

On an AMQP port, TLS may carry either protocol: the SDKs' messaging clients use AMQP over
TLS (port 5671 on Azure) when the connection string lacks ``UseDevelopmentEmulator=true`` or
when they are given a host name and a credential (``AzureNamedKeyCredential``); their
administration clients use HTTPS. :class:`TlsSniffer` ends every TLS session (the generated
certificate) and decides by the first plaintext byte: ``A`` → AMQP (on an AMQP port),
anything else → HTTP, which so never sees TLS itself.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Protocol

from sbctld.frontends.http.tls import TlsError, TlsLayer, TlsTransport

log = logging.getLogger("sbctld")
TLS_HANDSHAKE = 0x16
AMQP_FIRST = ord("A")  # b"AMQP": the protocol header (plain, or SASL's)
HTTP_FIRST = frozenset(b"GPDHOTC")  # GET PUT POST PATCH DELETE HEAD OPTIONS TRACE CONNECT
# Set by the daemon when HTTP is on; the AMQP listeners consult it for every connection.
FRONTEND: HttpListener | None = None


class HttpListener(Protocol):
    """The HTTP front-end as the sniffer needs it (sbctld.frontends.http.server.HttpFrontend):
    a new HTTP connection, plain or TLS, for ``namespace``."""

    def connection(self, namespace: str) -> asyncio.Protocol: ...

    def tls_context(self) -> ssl.SSLContext: ...


class Forwarder(asyncio.Protocol):
    """Passes the transport's events on to ``target`` once it is chosen."""

    target: asyncio.Protocol | None = None

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


class Sniffer(Forwarder):
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
            return TlsSniffer(self.other, self.frontend, self.namespace)
        if first in HTTP_FIRST or self.other is None:
            return self.frontend.connection(self.namespace)
        return self.other()


class TlsSniffer(Forwarder):
    """Ends TLS, then hands the plaintext to AMQP (``amqp``, on an AMQP port) or HTTP by its
    first byte."""

    def __init__(
        self, amqp: Callable[[], asyncio.Protocol] | None, frontend: HttpListener, namespace: str
    ) -> None:
        self.amqp = amqp
        self.frontend = frontend
        self.namespace = namespace
        self.layer = TlsLayer(frontend.tls_context())
        self.outer: asyncio.Transport | None = None
        self.transport: TlsTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.outer = transport  # type: ignore[assignment]
        self.transport = TlsTransport(self.outer, self.layer)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None and self.outer is not None
        try:
            plain = self.layer.receive(data)
        except TlsError as exc:
            log.info("TLS failed: %s", exc)
            self.transport.flush()
            self.outer.close()
            return
        self.transport.flush()
        if not plain:
            return
        if self.target is None:
            if self.amqp is not None and plain[0] == AMQP_FIRST:
                self.target = self.amqp()
            else:
                self.target = self.frontend.connection(self.namespace)
            self.target.connection_made(self.transport)
        self.target.data_received(plain)


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
