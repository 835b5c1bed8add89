"""A TCP relay for tests: what stands between an SDK and the daemon in front of a custom
endpoint address (a gateway forwarding bytes) or an HTTP proxy.

``Relay(target=(host, port))`` forwards every connection to ``target`` unchanged;
``Relay(proxy=True, auth=(user, password))`` is an HTTP proxy: ``CONNECT host:port`` opens a
tunnel, an absolute-form request (``GET http://host:port/...``) is forwarded to its host as
sent, and ``Proxy-Authorization`` must carry the basic credentials. Either way ``first``
records the first bytes each connection sent after the proxy's own request line, so a test
sees what went through; ``record=True`` also keeps everything each connection sent, in
``streams`` (one bytearray per connection, in the order they came). It listens on a free port
of 127.0.0.1, in threads; ``close()`` stops it.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import threading
from urllib.parse import urlsplit


class Relay:
    def __init__(
        self,
        target: tuple[str, int] | None = None,
        proxy: bool = False,
        auth: tuple[str, str] | None = None,
        record: bool = False,
    ) -> None:
        self.target = target
        self.record = record
        self.streams: list[bytearray] = []
        self.proxy = proxy
        self.auth = auth
        self.first: list[bytes] = []
        self.refused: list[str] = []  # proxy requests answered with an error
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()
        with self.lock:
            for s in self.sockets:
                with contextlib.suppress(OSError):
                    s.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.sockets.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            head = b""
            if self.proxy:
                head, upstream = self._open_by_request(client)
                if upstream is None:
                    return
            else:
                assert self.target is not None
                upstream = socket.create_connection(self.target)
            with self.lock:
                self.sockets.append(upstream)
            first = head or client.recv(65536)
            self.first.append(first)
            stream = bytearray(first) if self.record else None
            if stream is not None:
                with self.lock:
                    self.streams.append(stream)
            upstream.sendall(first)
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()
            self._pump(client, upstream, stream)
        except OSError:
            with contextlib.suppress(OSError):
                client.close()

    def _open_by_request(self, client: socket.socket) -> tuple[bytes, socket.socket | None]:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                return b"", None
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, target, _version = lines[0].split(" ", 2)
        headers = {
            k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])
        }
        if self.auth is not None:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            if headers.get("proxy-authorization") != f"Basic {token}":
                self.refused.append(lines[0])
                client.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
                client.close()
                return b"", None
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host, int(port)))
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            return rest, upstream
        url = urlsplit(target)
        upstream = socket.create_connection((url.hostname or "localhost", url.port or 80))
        return data, upstream

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, stream: bytearray | None = None) -> None:
        try:
            while chunk := src.recv(65536):
                if stream is not None:
                    stream += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
