"""The AMQP 1.0 connection as a sans-IO state machine: bytes in, bytes out.

``receive_data(bytes)`` parses what the peer sent and calls the :class:`Handler` for
everything the application decides (a link attaches, a message arrives, credit is
granted, a delivery is settled, a link goes away); ``data_to_send()`` returns the bytes
to write. Nothing here touches a socket or a clock: ``tick(now)`` sends heartbeats.

Rules this module keeps (AMQP 1.0 parts 2 and 5; daemon/README.md §29):

- protocol headers: SASL first (mechanisms MSSBCBS, PLAIN, ANONYMOUS, every one accepted:
  authorization happens at ``$cbs``), then AMQP; a client may also skip SASL;
- open, begin and attach may arrive pipelined, before our own open;
- a heartbeat (empty frame) goes out whenever nothing else did for half the peer's
  idle time-out; the peer's silence is never held against it;
- outgoing frames never exceed the peer's max frame size (transfers are split); incoming
  multi-frame transfers are joined;
- session windows: ours is re-opened whenever half is used; the peer's is respected
  (frames wait until it re-opens);
- link credit: incoming links are topped up to their target; outgoing links track the
  peer's credit and drain.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from sbctl.core.amqp import framing
from sbctl.core.amqp.types import (
    Accepted,
    Attach,
    Begin,
    Close,
    Composite,
    Detach,
    Disposition,
    End,
    Error,
    Flow,
    Open,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    Symbol,
    Transfer,
)


class AcceptedRange(NamedTuple):
    """A settled accept of deliveries ``first..last`` queued at ``_out[start:end]``."""

    start: int
    end: int
    channel: int
    role: bool
    first: int
    last: int


SENDER = False  # the role field of attach / disposition
RECEIVER = True
MIXED = 2  # snd-settle-mode mixed, the default
MECHANISMS = ("MSSBCBS", "PLAIN", "ANONYMOUS")
MAX_FRAME_SIZE = 1_048_576
IDLE_TIMEOUT_MS = 240_000
SESSION_WINDOW = 5000
LINK_CREDIT = 1000
UINT_MAX = 2**32 - 1
# The highest channel and link handle a peer may use (what Service Bus advertises: channel-max
# 4999, handle-max 262,143, Microsoft.Azure.Amqp's default); past them: framing-error (§2.7.1,
# §2.7.2 of the specification; daemon/README.md §29).
CHANNEL_MAX = 4999
HANDLE_MAX = 262_143
MAX_DELIVERY_BYTES = 128 * 1024 * 1024  # a multi-frame delivery larger than this closes
# Bounds on what one peer may make the daemon hold or do (daemon/README.md §29.11): sessions on
# a connection, links on a session and on the connection (past them: refused with
# amqp:resource-limit-exceeded), and frames read in one turn of the event loop (then the
# front-end lets the other connections run before reading on).
MAX_SESSIONS = 1000
MAX_LINKS_PER_SESSION = 1000
MAX_LINKS = 1000
FRAMES_PER_TURN = 64


class Delivery:
    """A complete incoming message transfer."""

    __slots__ = ("id", "message_format", "payload", "settled", "state", "tag")

    def __init__(
        self, id: int, tag: bytes, message_format: int, settled: bool, state: Any, payload: bytes
    ) -> None:
        self.id = id
        self.tag = tag
        self.message_format = message_format
        self.settled = settled
        self.state = state
        self.payload = payload


class Link:
    """One attached link. ``role`` is OUR role: SENDER when we send messages on it."""

    def __init__(self, session: Session, attach: Composite, handle: int) -> None:
        self.session = session
        self.attach = attach
        self.name: str = attach.name
        self.remote_handle: int = attach.handle
        self.handle = handle
        self.role = not attach.role
        self.source: Any = attach.source
        self.target: Any = attach.target
        self.properties: dict[Any, Any] = attach.properties or {}
        # Absent modes are the specification's defaults: mixed and first (§2.7.3).
        snd, rcv = attach.snd_settle_mode, attach.rcv_settle_mode
        self.snd_settle_mode = MIXED if snd is None else int(snd)
        self.rcv_settle_mode = 0 if rcv is None else int(rcv)
        self.delivery_count = int(attach.initial_delivery_count or 0)
        self.credit = 0  # for our sender links: what the peer granted and we did not use
        self.credit_target = 0  # for our receiver links: what we keep granted
        self.drain = False
        self.attached = False  # our attach went out
        self.detached = False  # our detach went out
        self.incoming: framing.Reassembly | None = None
        self.context: Any = None  # the handler's own state for the link

    @property
    def address(self) -> str | None:
        """The node the peer addresses: our source when we send, our target when we receive."""
        terminus = self.source if self.role == SENDER else self.target
        return getattr(terminus, "address", None)


class Session:
    def __init__(self, channel: int, remote_channel: int, begin: Composite) -> None:
        self.channel = channel
        self.remote_channel = remote_channel
        self.next_outgoing_id = 0  # transfer-id: counts transfer *frames* (session window)
        self.next_delivery_id = 0  # delivery-id: counts *deliveries*, whatever their frames
        self.next_incoming_id = int(begin.next_outgoing_id or 0)
        self.incoming_window = SESSION_WINDOW
        self.remote_incoming_window = int(begin.incoming_window or 0)
        self.remote_outgoing_window = int(begin.outgoing_window or 0)
        handle_max = begin.handle_max
        self.remote_handle_max = UINT_MAX if handle_max is None else int(handle_max)
        self.links: dict[int, Link] = {}  # by the peer's handle
        self.local: dict[int, Link] = {}  # by our handle
        self.unsettled: dict[int, Link] = {}  # our deliveries not yet settled, by id
        self.pending: deque[bytes] = deque()  # frames waiting for the peer's window
        self.ended = False


class Handler(Protocol):
    def on_attach(self, link: Link) -> None: ...
    def on_transfer(self, link: Link, delivery: Delivery) -> None: ...
    def on_flow(self, link: Link) -> None: ...
    def on_disposition(self, link: Link, delivery_id: int, settled: bool, state: Any) -> None: ...
    def on_detach(self, link: Link, error: Any) -> None: ...


class ProtocolError(Exception):
    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class Connection:
    def __init__(
        self,
        handler: Handler,
        *,
        container_id: str = "sbctl",
        max_frame_size: int = MAX_FRAME_SIZE,
        idle_timeout_ms: int | None = IDLE_TIMEOUT_MS,
        trace: Any = None,
    ) -> None:
        self.handler = handler
        self.trace = trace  # called with ("<-" or "->", channel, performative) when set
        self.container_id = container_id
        self.max_frame_size = max_frame_size
        self.idle_timeout_ms = idle_timeout_ms
        self.peer_max_frame_size = framing.MIN_MAX_FRAME_SIZE
        self.peer_idle_timeout_ms: int | None = None
        self.peer_channel_max = 65_535
        self.peer_open: Composite | None = None
        self.sasl_hostname: str | None = None
        self.mechanism: str | None = None
        self.sessions: dict[int, Session] = {}  # by the peer's channel
        self._ended: set[int] = set()  # the peer's channels whose session ended
        self._buf = bytearray()
        self._out = bytearray()
        self._accepted: AcceptedRange | None = None  # the last frame queued, if an accept
        self._state = "header"  # header, sasl, amqp-header, open, closed
        self._sent_amqp_header = False
        self._opened = False
        self.closed = False
        self.more_input = False  # frames are left in the buffer for the next turn
        self.link_count = 0
        self.last_sent = 0.0
        self.failure: Exception | None = None  # why receive_data closed the connection

    # ------------------------------------------------------------ I/O surface

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        self._accepted = None
        return out

    @property
    def heartbeat_interval(self) -> float | None:
        """Seconds between heartbeats: half the peer's idle time-out (None: not needed)."""
        if not self.peer_idle_timeout_ms:
            return None
        return self.peer_idle_timeout_ms / 2000

    def tick(self, now: float) -> None:
        """Send a heartbeat if nothing went out for half the heartbeat interval. Called at
        least every half interval, this keeps every silence shorter than the interval,
        i.e. under half the peer's idle time-out."""
        interval = self.heartbeat_interval
        if interval is None or self.closed or self._state != "open":
            return
        if self._out:
            self.last_sent = now
        elif now - self.last_sent >= interval / 2:
            self._out += framing.HEARTBEAT
            self.last_sent = now

    def receive_data(self, data: bytes) -> None:
        self.more_input = False
        if self.closed:
            return
        self._buf += data
        try:
            self._parse()
        except framing.FrameError as exc:
            self.close(Error(Symbol(exc.condition), str(exc)))
        except ProtocolError as exc:
            self.close(Error(Symbol(exc.condition), exc.description))
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as exc:
            # A field of the wrong type (a string where a uint belongs, a list where a
            # terminus belongs): the peer broke the protocol; close, keep the cause.
            self.failure = exc
            self.close(Error(Symbol("amqp:invalid-field"), f"invalid frame: {exc}"))

    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        budget = FRAMES_PER_TURN
        while not self.closed:
            if budget == 0:
                self.more_input = len(buf) > pos
                break
            budget -= 1
            if self._state in ("header", "amqp-header"):
                if len(buf) - pos < 8:
                    break
                header = bytes(buf[pos : pos + 8])
                pos += 8
                self._on_header(header)
                continue
            limit = self.max_frame_size if self._state == "open" else 65_536
            parsed = framing.parse_frame(buf, pos, limit)
            if parsed is None:
                break
            frame, pos = parsed
            if self._state == "sasl":
                self._on_sasl(frame)
            else:
                self._on_frame(frame)
        del buf[:pos]

    def _on_header(self, header: bytes) -> None:
        if header == framing.PROTOCOL_SASL and self._state == "header":
            self._out += framing.PROTOCOL_SASL
            self._out += framing.encode_frame(
                0, SaslMechanisms(list(MECHANISMS)), kind=framing.SASL_FRAME
            )
            self._state = "sasl"
        elif header == framing.PROTOCOL_AMQP:
            if not self._sent_amqp_header:
                self._out += framing.PROTOCOL_AMQP
                self._sent_amqp_header = True
            self._state = "open"
        else:
            self._out += framing.PROTOCOL_SASL if self._state == "header" else framing.PROTOCOL_AMQP
            self.closed = True

    def _on_sasl(self, frame: framing.Frame) -> None:
        body = frame.body
        if isinstance(body, SaslInit):
            self.mechanism = str(body.mechanism)
            self.sasl_hostname = body.hostname
            if self.mechanism not in MECHANISMS:
                self._out += framing.encode_frame(0, SaslOutcome(1), kind=framing.SASL_FRAME)
                self.closed = True
                return
            self._out += framing.encode_frame(0, SaslOutcome(0), kind=framing.SASL_FRAME)
            self._state = "amqp-header"
        elif body is not None:
            raise ProtocolError("amqp:not-allowed", f"unexpected SASL frame {body.NAME}")

    # ------------------------------------------------------------ frames in

    def _on_frame(self, frame: framing.Frame) -> None:
        body = frame.body
        if self.trace is not None and body is not None:
            self.trace("<-", frame.channel, body)
        if body is None:
            return  # heartbeat
        if frame.type != framing.AMQP_FRAME:
            raise ProtocolError("amqp:not-allowed", "SASL frame after SASL finished")
        if isinstance(body, Open):
            self._on_open(body)
            return
        if not self._opened:
            raise ProtocolError("amqp:not-allowed", f"{body.NAME} before open")
        if isinstance(body, Close):
            self._on_close(body)
            return
        if isinstance(body, Begin):
            self._on_begin(frame.channel, body)
            return
        session = self.sessions.get(frame.channel)
        if session is None:
            if frame.channel in self._ended:
                return  # a straggler after end (pyamqp detaches after ending): ignore it
            raise ProtocolError("amqp:not-found", f"no session on channel {frame.channel}")
        if isinstance(body, Transfer):
            self._on_transfer(session, body, frame.payload)
        elif isinstance(body, Disposition):
            self._on_disposition(session, body)
        elif isinstance(body, Flow):
            self._on_flow(session, body)
        elif isinstance(body, Attach):
            self._on_attach(session, body)
        elif isinstance(body, Detach):
            self._on_detach(session, body)
        elif isinstance(body, End):
            self._on_end(frame.channel, session)
        else:
            raise ProtocolError("amqp:not-allowed", f"unexpected frame {body.NAME}")

    def _on_open(self, body: Composite) -> None:
        if self._opened:
            raise ProtocolError("amqp:not-allowed", "a second open")
        self.peer_open = body
        self._opened = True
        size = body.max_frame_size
        self.peer_max_frame_size = UINT_MAX if size is None else int(size)
        if self.peer_max_frame_size < framing.MIN_MAX_FRAME_SIZE:
            raise ProtocolError("amqp:invalid-field", "max-frame-size below 512")
        self.peer_idle_timeout_ms = int(body.idle_time_out) if body.idle_time_out else None
        self.peer_channel_max = 65_535 if body.channel_max is None else int(body.channel_max)
        self._emit(
            0,
            Open(self.container_id, None, self.max_frame_size, CHANNEL_MAX, self.idle_timeout_ms),
        )

    def _on_close(self, body: Composite) -> None:
        self._drop_all(body.error)
        if not self.closed:
            self._emit(0, Close())
            self.closed = True

    def _on_begin(self, channel: int, body: Composite) -> None:
        if channel in self.sessions:
            raise ProtocolError("amqp:not-allowed", f"channel {channel} already has a session")
        if channel > CHANNEL_MAX:
            raise framing.FrameError(f"channel {channel} is above our channel-max {CHANNEL_MAX}")
        if len(self.sessions) >= MAX_SESSIONS:
            raise ProtocolError(
                "amqp:resource-limit-exceeded", f"more than {MAX_SESSIONS} sessions on a connection"
            )
        used = {s.channel for s in self.sessions.values()}
        local = next(c for c in range(len(used) + 1) if c not in used)
        if local > self.peer_channel_max:
            raise framing.FrameError(
                f"a session more than the peer's channel-max {self.peer_channel_max} allows"
            )
        self._ended.discard(channel)
        session = Session(local, channel, body)
        self.sessions[channel] = session
        self._emit(
            local,
            Begin(channel, 0, session.incoming_window, SESSION_WINDOW, HANDLE_MAX),
        )

    def _on_end(self, channel: int, session: Session) -> None:
        for link in list(session.links.values()):
            self._drop(link, None)
        del self.sessions[channel]
        self._ended.add(channel)
        if not session.ended:
            self._emit(session.channel, End())
            session.ended = True

    def _on_attach(self, session: Session, body: Composite) -> None:
        if body.handle in session.links:
            raise ProtocolError("amqp:session:handle-in-use", f"handle {body.handle} is in use")
        if body.handle > HANDLE_MAX:
            raise framing.FrameError(f"handle {body.handle} is above our handle-max {HANDLE_MAX}")
        handle = next(h for h in range(len(session.local) + 1) if h not in session.local)
        if handle > session.remote_handle_max:
            raise framing.FrameError(
                f"a link more than the peer's handle-max {session.remote_handle_max} allows"
            )
        link = Link(session, body, handle)
        if len(session.links) >= MAX_LINKS_PER_SESSION or self.link_count >= MAX_LINKS:
            many = f"{MAX_LINKS_PER_SESSION} on a session, {MAX_LINKS} on a connection"
            self.refuse(link, "amqp:resource-limit-exceeded", f"too many links (at most {many})")
            return
        session.links[link.remote_handle] = link
        session.local[handle] = link
        self.link_count += 1
        self.handler.on_attach(link)

    def _on_detach(self, session: Session, body: Composite) -> None:
        link = session.links.get(body.handle)
        if link is None:
            return
        self._drop(link, body.error)
        if not link.detached:
            # The answer's closed flag is the peer's (§2.6.6: a close is answered with a
            # close, a detach that only suspends the link with a detach): either way the
            # daemon keeps nothing of the link (it resumes no link, as Service Bus).
            link.detached = True
            self._emit(session.channel, Detach(link.handle, bool(body.closed)))

    def _drop(self, link: Link, error: Any) -> None:
        session = link.session
        if session.links.pop(link.remote_handle, None) is not None:
            self.link_count -= 1
        session.local.pop(link.handle, None)
        for delivery_id in [d for d, owner in session.unsettled.items() if owner is link]:
            del session.unsettled[delivery_id]
        self.handler.on_detach(link, error)

    def _drop_all(self, error: Any) -> None:
        for session in list(self.sessions.values()):
            for link in list(session.links.values()):
                self._drop(link, error)
        self.sessions.clear()

    def _on_flow(self, session: Session, body: Composite) -> None:
        next_incoming = int(body.next_incoming_id or 0)
        session.remote_incoming_window = (
            next_incoming + int(body.incoming_window or 0) - session.next_outgoing_id
        )
        self._flush_pending(session)
        if body.handle is None:
            if body.echo:
                self._emit_session_flow(session)
            return
        link = session.links.get(body.handle)
        if link is None:
            return
        if link.role == SENDER:
            peer_count = link.delivery_count if body.delivery_count is None else body.delivery_count
            link.credit = max(0, int(peer_count) + int(body.link_credit or 0) - link.delivery_count)
            link.drain = bool(body.drain)
            self.handler.on_flow(link)
        if body.echo:
            self.flow(link)

    def _on_transfer(self, session: Session, body: Composite, payload: bytes) -> None:
        session.next_incoming_id += 1
        session.incoming_window -= 1
        link = session.links.get(body.handle)
        if link is None or link.role != RECEIVER:
            raise ProtocolError("amqp:session:unattached-handle", f"no link {body.handle}")
        if session.incoming_window < SESSION_WINDOW // 2:
            session.incoming_window = SESSION_WINDOW
            self._emit_session_flow(session)
        if body.aborted:
            link.incoming = None
            return
        incoming = link.incoming
        if incoming is None:
            if not body.more:
                link.credit -= 1
                link.delivery_count += 1
                self._deliver(link, body, payload, body)
                return
            incoming = link.incoming = framing.Reassembly(body)
        incoming.add(payload, MAX_DELIVERY_BYTES)
        if body.more:
            return
        link.incoming = None
        link.credit -= 1
        link.delivery_count += 1
        self._deliver(link, incoming.first, incoming.payload(), body)

    def _deliver(self, link: Link, first: Composite, payload: bytes, last: Composite) -> None:
        settled = bool(first.settled) or bool(last.settled)
        delivery = Delivery(
            int(first.delivery_id or 0),
            first.delivery_tag or b"",
            int(first.message_format or 0),
            settled,
            last.state if last.state is not None else first.state,
            payload,
        )
        if link.credit_target and link.credit < link.credit_target // 2:
            self.grant(link, link.credit_target)
        self.handler.on_transfer(link, delivery)

    def _on_disposition(self, session: Session, body: Composite) -> None:
        if body.role != RECEIVER:
            return  # the peer settling its own sends: nothing for us to do
        first = int(body.first)
        last = first if body.last is None else int(body.last)
        if last - first > 100_000:
            raise ProtocolError("amqp:invalid-field", "disposition range too large")
        settled = bool(body.settled)
        find = session.unsettled.pop if settled else session.unsettled.get
        owners = [find(delivery_id, None) for delivery_id in range(first, last + 1)]
        by_link: dict[Link, list[int]] = {}
        if owners and owners[0] is not None and owners.count(owners[0]) == len(owners):
            by_link[owners[0]] = list(range(first, last + 1))  # (the usual: one link's range)
        else:
            for delivery_id, link in enumerate(owners, first):
                if link is not None:
                    by_link.setdefault(link, []).append(delivery_id)
        many = getattr(self.handler, "on_dispositions", None)
        for link, ids in by_link.items():
            if many is not None:
                many(link, ids, settled, body.state)  # the range at once (one broker call)
            else:
                for delivery_id in ids:
                    self.handler.on_disposition(link, delivery_id, settled, body.state)

    # ------------------------------------------------------------ frames out

    def _emit(self, channel: int, performative: Composite, payload: bytes = b"") -> None:
        if self.trace is not None:
            self.trace("->", channel, performative)
        self._out += framing.encode_frame(channel, performative, payload)

    def _emit_session_flow(self, session: Session) -> None:
        self._emit(
            session.channel,
            Flow(
                session.next_incoming_id,
                session.incoming_window,
                session.next_outgoing_id,
                SESSION_WINDOW,
            ),
        )

    def _flush_pending(self, session: Session) -> None:
        while session.pending and session.remote_incoming_window > 0:
            self._out += session.pending.popleft()
            session.remote_incoming_window -= 1
            session.next_outgoing_id += 1

    def _put(self, session: Session, frame: bytes) -> None:
        """A transfer frame: out now if the peer's window has room, else it waits. Its
        transfer-id is taken when it goes out (next-outgoing-id counts frames *sent*: the
        peer's flow is computed against it, §2.5.6 of the specification)."""
        if session.remote_incoming_window > 0 and not session.pending:
            session.remote_incoming_window -= 1
            session.next_outgoing_id += 1
            self._out += frame
        else:
            session.pending.append(frame)

    def attach(
        self,
        link: Link,
        *,
        source: Any,
        target: Any,
        properties: dict[Any, Any] | None = None,
        max_message_size: int | None = None,
        snd_settle_mode: int | None = None,
        rcv_settle_mode: int | None = None,
    ) -> None:
        """Answer the peer's attach (``source``/``target`` None refuses, see :meth:`refuse`)."""
        link.attached = True
        link.source, link.target = source, target
        self._emit(
            link.session.channel,
            Attach(
                link.name,
                link.handle,
                link.role,
                link.snd_settle_mode if snd_settle_mode is None else snd_settle_mode,
                link.rcv_settle_mode if rcv_settle_mode is None else rcv_settle_mode,
                source,
                target,
                None,
                None,
                link.delivery_count if link.role == SENDER else None,
                max_message_size,
                None,
                None,
                properties,
            ),
        )

    def refuse(self, link: Link, condition: str, description: str) -> None:
        """Refuse an attach: our terminus null, then a closing detach with the error."""
        if not link.attached:
            if link.role == RECEIVER:
                self.attach(link, source=link.source, target=None)
            else:
                self.attach(link, source=None, target=link.target)
        self.detach(link, condition, description)

    def detach(self, link: Link, condition: str | None = None, description: str = "") -> None:
        if link.detached:
            return
        link.detached = True
        error = Error(Symbol(condition), description) if condition else None
        self._emit(link.session.channel, Detach(link.handle, True, error))

    def grant(self, link: Link, credit: int) -> None:
        """Keep ``credit`` granted on a link the peer sends on."""
        link.credit_target = credit
        link.credit = credit
        self.flow(link)

    def flow(self, link: Link, *, drain: bool = False) -> None:
        session = link.session
        self._emit(
            session.channel,
            Flow(
                session.next_incoming_id,
                session.incoming_window,
                session.next_outgoing_id,
                SESSION_WINDOW,
                link.handle,
                link.delivery_count,
                max(0, link.credit),
                0 if link.role == SENDER else None,
                drain or (link.drain if link.role == SENDER else False),
            ),
        )

    def drained(self, link: Link) -> None:
        """Nothing more to send on a draining link: use up its credit and say so."""
        link.delivery_count += link.credit
        link.credit = 0
        self.flow(link, drain=True)
        link.drain = False

    def transfer(
        self,
        link: Link,
        tag: bytes,
        payload: bytes,
        *,
        settled: bool,
        message_format: int = 0,
        state: Any = None,
    ) -> int:
        """Send one message on a link we send on; returns its delivery id."""
        session = link.session
        # One id per delivery (a message split over several frames keeps one id and the next
        # message takes the next id): proton-j (the Java SDK) fails the session when ids skip.
        delivery_id = session.next_delivery_id
        session.next_delivery_id = (delivery_id + 1) % 2**32
        link.credit -= 1
        link.delivery_count += 1
        if not settled:
            session.unsettled[delivery_id] = link
        if state is None and self.trace is None:  # (the hot path: one frame, no objects)
            head = framing.transfer_head(
                session.channel,
                link.handle,
                delivery_id,
                tag,
                message_format,
                settled,
                len(payload),
            )
            if len(head) + len(payload) <= self.peer_max_frame_size:
                if session.remote_incoming_window > 0 and not session.pending:
                    session.remote_incoming_window -= 1
                    session.next_outgoing_id += 1
                    self._out += head
                    self._out += payload
                else:
                    session.pending.append(head + payload)
                return delivery_id
        transfer = Transfer(
            link.handle, delivery_id, tag, message_format, settled, False, None, state
        )
        if self.trace is not None:
            self.trace("->", session.channel, transfer)
        for frame in framing.transfer_frames(
            session.channel, transfer, payload, self.peer_max_frame_size
        ):
            self._put(session, frame)
        return delivery_id

    def transfers(
        self, link: Link, tags: list[bytes], payloads: list[bytes], *, settled: bool
    ) -> list[int]:
        """Send several messages on a link we send on, each as :meth:`transfer` sends one
        (format 0, no state), with their frame heads made at once; returns their ids."""
        session = link.session
        first, count = session.next_delivery_id, len(payloads)
        sizes = [len(p) for p in payloads]
        room = self.peer_max_frame_size - framing.transfer_head_room(max(map(len, tags), default=0))
        if self.trace is not None or first + count >= 2**32 or max(sizes, default=0) > room:
            return [
                self.transfer(link, t, p, settled=settled)
                for t, p in zip(tags, payloads, strict=True)
            ]
        ids = list(range(first, first + count))
        heads = framing.transfer_heads(session.channel, link.handle, ids, tags, 0, settled, sizes)
        session.next_delivery_id = first + count
        link.credit -= count
        link.delivery_count += count
        if not settled:
            session.unsettled.update(dict.fromkeys(ids, link))
        now = 0 if session.pending else max(0, min(count, session.remote_incoming_window))
        if now:  # what the peer's window takes goes out, the rest waits for it
            session.remote_incoming_window -= now
            session.next_outgoing_id += now
            frames = heads[:now] * 2  # (then every other one is a payload)
            frames[1::2] = payloads[:now]
            frames[::2] = heads[:now]
            self._out += b"".join(frames)
        session.pending.extend(h + p for h, p in zip(heads[now:], payloads[now:], strict=True))
        return ids

    def disposition(
        self, link: Link, first: int, state: Any, *, settled: bool = True, last: int | None = None
    ) -> None:
        """Settle deliveries ``first..last`` of ``link``'s session. A settled accept of the
        delivery right after the range the last queued frame accepted extends that frame
        instead (a commit round accepts many transfers at once: one frame for them all, as
        a peer batches its own; delivery ids count per session)."""
        channel = link.session.channel
        accepted = settled and type(state) is Accepted
        held = self._accepted
        if (
            accepted
            and held is not None
            and held.end == len(self._out)
            and (held.channel, held.role, held.last + 1) == (channel, link.role, first)
        ):
            del self._out[held.start :]
            first, last = held.first, first if last is None else last
        start = len(self._out)
        if accepted and self.trace is None:
            self._out += framing.accepted_disposition(channel, link.role, first, last)
        else:
            self._emit(channel, Disposition(link.role, first, last, settled, state))
        self._accepted = None
        if accepted:
            end = first if last is None else last
            self._accepted = AcceptedRange(start, len(self._out), channel, link.role, first, end)

    def settle_all(self, transfers: Sequence[tuple[Link, Delivery]], state: Any) -> None:
        """:meth:`disposition` of each transfer with ``state``, in order, leaving out one
        already settled or on a detached link; consecutive ids of one session accepted in
        one call (a stored run of transfers, daemon/README.md §29.14): the same frames."""
        live = [(link, d.id) for link, d in transfers if not (link.detached or d.settled)]
        ranged = type(state) is Accepted
        i = 0
        while i < len(live):
            link, first = live[i]
            last, i = first, i + 1
            while ranged and i < len(live) and live[i][1] == last + 1:
                nxt = live[i][0]
                if nxt.session is not link.session or nxt.role != link.role:
                    break
                last, i = last + 1, i + 1
            self.disposition(link, first, state, last=None if last == first else last)

    def close(self, error: Composite | None = None) -> None:
        if self.closed:
            return
        if not self._opened and self._state == "open":
            self._emit(0, Open(self.container_id, None, self.max_frame_size))
            self._opened = True
        if self._state == "open":
            self._emit(0, Close(error))
        self._drop_all(error)
        self.closed = True
