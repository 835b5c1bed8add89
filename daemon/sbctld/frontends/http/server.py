"""The HTTP endpoint: connections (h11 over plain TCP, or over the plaintext side of the TLS
that sbctld.frontends.http.sniff ended) and the listener.

An :class:`HttpConnection` parses requests with h11 (one at a time per connection, kept
alive), caps bodies at :data:`MAX_BODY`, times out a request that does not arrive whole
within :data:`REQUEST_TIMEOUT_S` (408), checks the SharedAccessSignature and hands the
request to the management API, the REST data plane or the health check. The connection's
namespace is the one of the port it came in on (the HTTP port serves the default one).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
import traceback
from collections.abc import Callable
from http import HTTPStatus
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h11

from sbctl.core import __version__
from sbctld.frontends.http import auth, clock, sniff, websocket
from sbctld.frontends.http.dataplane import DataPlane
from sbctld.frontends.http.explorer import Explorer, wants_page
from sbctld.frontends.http.management import Management, error
from sbctld.frontends.http.request import API_VERSIONS, Request, Respond
from sbctld.frontends.http.tls import server_context
from sbctld.service import DelayedOperation

if TYPE_CHECKING:
    from sbctld.service import Service

log = logging.getLogger("sbctld")
DEFAULT_NAMESPACE = "sbemulatorns"
MAX_BODY = 4 * 1024 * 1024
MAX_HEADERS = 64 * 1024  # the request line and headers (daemon/README.md §30.1)
# A request must arrive whole this long after its first byte (or after the last answer).
REQUEST_TIMEOUT_S = float(os.environ.get("SBCTLD_HTTP_REQUEST_TIMEOUT_S", "30"))
IDLE_TIMEOUT_S = 120.0


class HttpConnection(asyncio.Protocol):
    def __init__(self, frontend: HttpFrontend, namespace: str) -> None:
        self.frontend = frontend
        self.namespace = namespace
        self.sender = frontend.service.new_sender()  # a paired primary's backlog key
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADERS)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.secure = False  # over TLS (ended by the sniffer's TlsTransport)
        self.busy = False  # a request is being answered
        self.request: h11.Request | None = None
        self.body: list[bytes] = []
        self.size = 0
        self.started = False  # bytes of the current request have arrived
        self._timer: asyncio.TimerHandle | None = None
        self.upgraded: websocket.AmqpOverWebSocket | None = None  # AMQP over WebSocket

    # ------------------------------------------------------------ transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.secure = transport.get_extra_info("ssl_object") is not None
        self.frontend.connections.add(self)
        self._arm(IDLE_TIMEOUT_S)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.frontend.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self.upgraded is not None:
            self.upgraded.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self.upgraded is not None:
            self.upgraded.data_received(data)
            return
        if not self.started and not self.busy:
            self.started = True
            self._arm(REQUEST_TIMEOUT_S)
        self.h11.receive_data(data)
        self._process()

    def eof_received(self) -> bool | None:
        """The client half-closed: answer what it sent, then close (h11 says when)."""
        if self.upgraded is not None:
            return None  # the AMQP peer is done: close
        self.h11.receive_data(b"")
        self._process()
        return not self.closed

    def _write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.write(data)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._timed_out)

    def _timed_out(self) -> None:
        self._timer = None
        if self.busy or self.closed:
            return
        if self.started:
            self._send_error(408, "the request did not arrive in time; closing the connection")
        self.close()

    # ------------------------------------------------------------ requests

    def _process(self) -> None:
        while not self.busy and not self.closed:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint or 400
                self._send_error(status, f"malformed HTTP request: {exc}")
                self.close()
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                if not self._begin(event):
                    return
            elif isinstance(event, h11.Data):
                self.size += len(event.data)
                if self.size > MAX_BODY:
                    self._too_large()
                    return
                self.body.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                self._dispatch()
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return

    def _begin(self, event: h11.Request) -> bool:
        # h11 bounds only a request still arriving: one that came whole is measured here.
        size = len(event.method) + len(event.target) + 12
        size += sum(len(n) + len(v) + 4 for n, v in event.headers.raw_items())
        if size > MAX_HEADERS:
            self._send_error(431, f"the request's headers are larger than {MAX_HEADERS} bytes")
            self.close()
            return False
        self.request = event
        self.body = []
        self.size = 0
        length = dict(event.headers).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY:
            self._too_large()
            return False
        if self.h11.they_are_waiting_for_100_continue:
            self._write(self.h11.send(h11.InformationalResponse(status_code=100, headers=[])))
        return True

    def _too_large(self) -> None:
        self._send_error(413, f"the request body is larger than {MAX_BODY} bytes")
        self.close()

    def _send_error(self, status: int, detail: str) -> None:
        if self.h11.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        from sbctld.frontends.http import atom

        body = atom.document(atom.error_xml(status, detail))
        headers = [("Content-Type", "application/xml; charset=utf-8"), ("Connection", "close")]
        try:
            self._respond_now(status, headers, body)
        except h11.LocalProtocolError:
            pass

    def _dispatch(self) -> None:
        event = self.request
        assert event is not None
        self.busy = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        raw = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in event.headers.raw_items()]
        req = Request(
            method=event.method.decode("ascii", "replace").upper(),
            target=event.target.decode("latin-1"),
            headers={n.lower(): v for n, v in raw},
            raw_headers=raw,
            body=b"".join(self.body),
            scheme="https" if self.secure else "http",
            namespace=self.namespace,
            sender=self.sender,
        )
        self.body = []
        answered = False

        def respond(status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            nonlocal answered
            if answered:
                return
            answered = True
            self._finish(status, headers, body)

        if websocket.requested(req.method, req.path, req.headers):
            self._upgrade(req, respond)
            return
        try:
            self.frontend.handle(req, respond, lambda: not self.closed)
        except Exception:
            log.error("HTTP %s %s failed:\n%s", req.method, req.path, traceback.format_exc())
            error(respond, 500, "internal error")

    def _upgrade(self, req: Request, respond: Respond) -> None:
        """Answer ``101`` and hand the connection to AMQP (AMQP over WebSocket)."""
        amqp = self.frontend.amqp
        if amqp is None:
            error(respond, 400, "AMQP over WebSocket needs the AMQP endpoint, which is off")
            return
        why = websocket.handshake_error(req.headers)
        if why is not None:
            error(respond, 400, why)
            return
        answer = h11.InformationalResponse(
            status_code=101,
            headers=websocket.accept_headers(req.headers),
            reason=b"Switching Protocols",
        )
        self._write(self.h11.send(answer))
        pending = bytes(self.h11.trailing_data[0])
        self.upgraded = websocket.AmqpOverWebSocket(
            amqp(self.namespace), self._write, self.close, self.transport
        )
        if pending:
            self.upgraded.data_received(pending)

    def _respond_now(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        out = [
            *headers,
            ("Content-Length", str(len(body))),
            ("Server", "sbctld"),
        ]
        try:
            reason = HTTPStatus(status).phrase.encode()
        except ValueError:
            reason = b""
        data = self.h11.send(h11.Response(status_code=status, headers=out, reason=reason))
        head = self.request is not None and self.request.method == b"HEAD"
        data += self.h11.send(h11.Data(data=body)) if body and not head else b""
        data += self.h11.send(h11.EndOfMessage())
        self._write(data)

    def _finish(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        if self.closed:
            return
        try:
            self._respond_now(status, headers, body)
        except h11.LocalProtocolError as exc:
            log.warning("HTTP: could not answer: %s", exc)
            self.close()
            return
        self.busy = False
        self.started = False
        if self.h11.our_state is h11.MUST_CLOSE or self.h11.their_state is not h11.DONE:
            self.close()
            return
        self.h11.start_next_cycle()
        self._arm(IDLE_TIMEOUT_S)
        self._process()


class HttpFrontend:
    """The HTTP port, the HTTP side of the AMQP ports, and receivers waiting for messages."""

    def __init__(self, service: Service, data_dir: Path, host: str, port: int | None) -> None:
        self.service = service
        self.data_dir = data_dir
        self.host = host
        self.port = port  # None: no HTTP port of its own (only the AMQP ports)
        self.keys = service.key_store(data_dir)
        self.connections: set[HttpConnection] = set()
        self.listener: asyncio.AbstractServer | None = None
        self.management = Management(self)
        self.dataplane = DataPlane(self)
        # the web page (daemon/README.md §33)
        self.explorer = Explorer(service, data_dir, host, self.keys)
        self.waiting: set[DelayedOperation] = set()  # its receives parked in the service
        self._tls: ssl.SSLContext | None = None
        # A new AMQP connection of a namespace, for AMQP over WebSocket (set by the daemon
        # when AMQP is on).
        self.amqp: Callable[[str], asyncio.Protocol] | None = None

    def tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = server_context(self.data_dir)
        return self._tls

    def loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    def connection(self, namespace: str) -> HttpConnection:
        """A new HTTP connection (sbctld.frontends.http.sniff hands it the socket, or the
        plaintext side of the TLS it ended)."""
        return HttpConnection(self, namespace)

    async def start(self) -> None:
        if self.port is not None:
            self.listener = await self.loop().create_server(
                sniff.sniffing(None, self, DEFAULT_NAMESPACE), self.host, self.port, backlog=1024
            )
            self.port = self.listener.sockets[0].getsockname()[1]
            log.info("HTTP: %s:%s", self.host, self.port)

    async def stop(self) -> None:
        if sniff.FRONTEND is self:
            sniff.FRONTEND = None
        if self.listener is not None:
            self.listener.close()
        for conn in list(self.connections):
            conn.close()
        self.service.cancel(self.waiting)

    # ------------------------------------------------------------ requests

    def handle(self, req: Request, respond: Any, alive: Callable[[], bool]) -> None:
        parts = req.segments()
        if parts == ["health"] and req.method in ("GET", "HEAD"):
            status = {"status": "healthy", "version": __version__, "pid": os.getpid()}
            body = json.dumps(status).encode()
            respond(200, [("Content-Type", "application/json")], body)
            return
        if wants_page(req):
            self.explorer.handle(req, respond, alive)
            return
        version = req.query.get("api-version")
        if version is not None and version not in API_VERSIONS:
            error(
                respond,
                400,
                f"api-version {version!r} is not supported; use one of {', '.join(API_VERSIONS)}",
            )
            return
        key_name, key = self.keys.get(req.namespace)
        why = auth.check_request(
            req.headers.get("authorization"), req.host, req.path, key_name, key, time.time()
        )
        if why is not None:
            error(respond, 401, f"unauthorized: {why}")
            return
        if parts and parts[0].lower() == "$sbctl" and parts[1:] == ["clock"]:
            clock.handle(self.service, req, respond)  # time travel (daemon/README.md §31.5)
            return
        if "messages" in parts[1:]:
            i = len(parts) - 1 - parts[::-1].index("messages")
            entity = "/".join(parts[:i])
            self.dataplane.handle(req, entity, parts[i + 1 :], respond, alive)
            return
        self.management.handle(req, respond)
