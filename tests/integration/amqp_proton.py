"""Apache Qpid Proton (the C engine behind ``python-qpid-proton``) as a strict, independent
AMQP 1.0 peer for the tests: the engine without its reactor, pumped over a blocking socket
here, with every frame traced (Proton's ``PN_TRACE_FRM``, through the transport's tracer).

Proton checks what it receives (frame sizes, channel and handle numbers against the
negotiated maxima, session windows, idle time-out) and reports a violation as a transport
error (``amqp:connection:framing-error``, ``amqp:session:window-violation``,
``amqp:resource-limit-exceeded`` ...) in its log and on the transport's condition;
:meth:`ProtonPeer.problems` collects them so a test can assert there are none.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

from proton import (
    SASL,
    Collector,
    Connection,
    Delivery,
    Endpoint,
    Link,
    Message,
    Session,
    Transport,
)

# What in Proton's log means the broker broke the protocol (or Proton gave up on it).
BAD = ("error", "framing", "violation", "expired", "invalid", "illegal", "warning")


class Received(NamedTuple):
    delivery: Delivery
    message: Message
    size: int  # the encoded message's bytes, as they arrived


class ProtonPeer:
    """One Proton connection to a daemon's AMQP port, pumped by :meth:`run_until`."""

    def __init__(
        self,
        port: int,
        *,
        max_frame_size: int = 512,
        channel_max: int | None = None,
        idle_timeout_s: float | None = None,
        mechanism: str = "ANONYMOUS",
        user: str | None = None,
    ) -> None:
        self.trace: list[str] = []
        self.events: list[str] = []
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.settimeout(0.05)
        self.transport = Transport()
        self.transport.max_frame_size = max_frame_size
        if channel_max is not None:
            self.transport.channel_max = channel_max
        if idle_timeout_s is not None:
            self.transport.idle_timeout = idle_timeout_s
        self.transport.trace(Transport.TRACE_FRM)
        self.transport.tracer = lambda _t, message: self.trace.append(message)
        sasl = self.transport.sasl()
        sasl.allowed_mechs(mechanism)
        if user is not None:
            self.transport.user = user
            self.transport.password = "secret"
        self.connection = Connection()
        self.connection.container = "proton-strict"
        self.connection.hostname = "localhost"
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.eof = False
        _ = SASL  # (imported for its side effect on the binding's SASL support)

    # ------------------------------------------------------------ pumping

    def _pump_out(self) -> None:
        while True:
            pending = self.transport.pending()
            if pending <= 0:
                return
            data = self.transport.peek(pending)
            self.sock.sendall(data)
            self.transport.pop(len(data))

    def _pump_in(self) -> None:
        capacity = self.transport.capacity()
        if capacity <= 0 or self.eof:
            return
        try:
            data = self.sock.recv(capacity)
        except (TimeoutError, BlockingIOError):
            return
        except OSError:
            data = b""
        if not data:
            self.eof = True
            self.transport.close_tail()
            return
        self.transport.push(data)

    def _drain_events(self) -> None:
        while True:
            event = self.collector.peek()
            if event is None:
                return
            self.events.append(str(event.type))
            self.collector.pop()

    def step(self) -> None:
        self.transport.tick(time.monotonic())
        self._pump_out()
        self._pump_in()
        self._drain_events()
        self._pump_out()

    def run_until(self, done: Callable[[], Any], timeout: float = 10.0) -> None:
        """Pump until ``done()`` is true; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; last frames:\n{self.tail()}")
            if self.eof and self.transport.pending() <= 0:
                raise AssertionError(f"connection closed; last frames:\n{self.tail()}")
            self.step()

    def run_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.eof:
            self.step()

    # ------------------------------------------------------------ endpoints

    def session(self, *, window_bytes: int | None = None) -> Session:
        """A begun session; ``window_bytes`` sets Proton's incoming capacity, i.e. an
        incoming-window of ``window_bytes // max_frame_size`` frames."""
        if not self.connection.state & Endpoint.LOCAL_ACTIVE:
            self.connection.open()
        session = self.connection.session()
        if window_bytes is not None:
            session.incoming_capacity = window_bytes
        session.open()
        return session

    def attach(self, link: Link, address: str, *, snd: int | None = None, rcv: int | None = None):
        """Open ``link`` on ``address`` with the settle modes asked and wait for the answer."""
        if link.is_receiver:
            link.source.address = address
        else:
            link.target.address = address
        if snd is not None:
            link.snd_settle_mode = snd
        if rcv is not None:
            link.rcv_settle_mode = rcv
        link.open()
        self.run_until(lambda: link.state & Endpoint.REMOTE_ACTIVE or link.remote_condition)
        return link

    def send(self, sender: Link, body: Any, **fields: Any) -> Delivery:
        """Send one message (unsettled unless the link is settled) once credit allows."""
        self.run_until(lambda: sender.credit > 0)
        delivery = sender.delivery(str(uuid.uuid4()).encode())
        sender.send(Message(body=body, **fields).encode())
        sender.advance()
        if sender.snd_settle_mode == Link.SND_SETTLED:
            delivery.settle()
        return delivery

    def receive(self, receiver: Link, count: int, timeout: float = 10.0) -> list[Received]:
        """Pump until ``count`` whole messages arrived on ``receiver`` (credit is the
        caller's); returns them, not yet settled."""
        got: list[Received] = []
        data = bytearray()

        def take() -> bool:
            # Read as frames arrive, so that Proton re-opens its session window (its
            # incoming capacity is taken by what the application has not read yet).
            delivery = receiver.current
            while delivery is not None and delivery.readable:
                data.extend(receiver.recv(delivery.pending) or b"")
                if delivery.partial:
                    break
                message = Message()
                message.decode(bytes(data))
                got.append(Received(delivery, message, len(data)))
                data.clear()
                receiver.advance()
                delivery = receiver.current
            return len(got) >= count

        self.run_until(take, timeout)
        return got

    # ------------------------------------------------------------ looking at it

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.trace[-n:])

    def frames_in(self, name: str) -> list[str]:
        """The traced frames the broker sent whose performative is ``name`` (e.g. ``flow``)."""
        return [line for line in self.trace if "<- " in line and f"@{name}(" in line]

    def heartbeats_in(self) -> int:
        return sum(1 for line in self.trace if "<- (EMPTY FRAME)" in line)

    def problems(self) -> list[str]:
        """Everything Proton rejected or warned about: log lines that are not frames, and
        the transport's error condition."""
        out = [
            line
            for line in self.trace
            if "<- " not in line and "-> " not in line and any(word in line.lower() for word in BAD)
        ]
        condition = self.transport.condition
        if condition is not None:
            out.append(f"transport condition {condition.name}: {condition.description}")
        return out

    def close(self) -> None:
        """Close the connection and wait for the broker's close (the close handshake)."""
        try:
            self.connection.close()
            self.run_until(lambda: self.connection.state & self.connection.REMOTE_CLOSED, 5)
            self._pump_out()
        finally:
            self.sock.close()
