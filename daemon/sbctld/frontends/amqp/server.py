"""The asyncio transport of the AMQP front-end and its adapter to the service.

One :class:`AmqpFrontend` owns the TCP listeners: the main port serves the default
namespace, every other namespace gets a port of its own (kept in ``<data dir>/amqp/
ports.json`` so connection strings stay valid across restarts). Each TCP connection is an
:class:`AmqpConnection`: it feeds bytes to the sans-IO :class:`Connection` and answers its
callbacks by running the service's declared operations (sbctld.service: a transfer is a
``send``, a flow with credit a ``receive``, a disposition a ``settle``), with the durable
acknowledgement every front-end gets (a transfer is accepted only once the group commit
that holds it is on disk) and the same wake-ups (a send here completes a Unix-socket long
poll or an HTTP receive; a send there feeds an AMQP receiver waiting with credit).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbctl.core import layout
from sbctl.core.amqp import codec
from sbctl.core.amqp.types import (
    Accepted,
    Error,
    Int,
    Properties,
    Rejected,
    Source,
    Symbol,
    TransactionalState,
)
from sbctl.core.amqp.types import Coordinator as CoordinatorTarget
from sbctl.core.errors import SbctlError
from sbctl.core.limits import MAX_RECEIVE
from sbctl.core.message_form import UNDECODABLE, intake_transfer
from sbctl.core.names import entity_key
from sbctl.core.operations import deletes_on_receive
from sbctl.core.protocol import Receive, SessionAccept, SessionToken, Settle, TxSettle
from sbctl.core.splice import splice_all
from sbctld.frontends.amqp import management
from sbctld.frontends.amqp.cbs import token_problem
from sbctld.frontends.amqp.connection import (
    RECEIVER,
    SENDER,
    Connection,
    Delivery,
    Link,
)
from sbctld.frontends.amqp.errors import condition_of
from sbctld.frontends.amqp.incoming import Arrivals
from sbctld.frontends.amqp.replies import Replies
from sbctld.frontends.amqp.session_filter import SESSION_FILTER, echoed, requested_session
from sbctld.frontends.amqp.settlement import Settlement, lock_tags, settle_range
from sbctld.frontends.amqp.transactions import Coordinator as Transactions
from sbctld.frontends.amqp.waiting import LinkWatch
from sbctld.results import SessionLock
from sbctld.service import DelayedOperation

if TYPE_CHECKING:
    from sbctld.service import Service

log = logging.getLogger("sbctld")
ACCEPTED = Accepted()  # (a transfer's outcome: encoded, never changed)
DEFAULT_NAMESPACE = "sbemulatorns"
# The max-message-size of a link we send messages on: the largest message a namespace takes
# (1 MiB, Premium) plus room for what the broker adds on delivery (annotations, lock) and for
# the AMQP encoding of what was stored; .NET fails the link when a delivery exceeds it.
MAX_MESSAGE_SIZE = 1_048_576 + 131_072
TIMEOUT = Symbol("com.microsoft:timeout")
SESSION_WAIT_S = 60.0  # a next-available session receiver without its own time-out
LOCKED_UNTIL = Symbol("com.microsoft:locked-until-utc")
TICKS_AT_EPOCH = 621_355_968_000_000_000
# SBCTLD_AMQP_TRACE=1 logs every performative in and out (debugging a client).
TRACE = os.environ.get("SBCTLD_AMQP_TRACE") == "1"


def _trace(direction: str, channel: int, performative: Any) -> None:
    log.info("AMQP %s ch%d %r", direction, channel, performative)


def entity_path(address: str | None) -> str:
    """``amqps://host/queue``, ``/queue`` or ``queue`` → ``queue``."""
    path = address or ""
    if "://" in path:
        path = path.split("://", 1)[1]
        path = path.split("/", 1)[1] if "/" in path else ""
    return path.strip("/")


def _is_node(context: Any) -> bool:
    """Whether a link's context is a request/response node: ``$cbs`` or ``$management``."""
    return context == "cbs" or (isinstance(context, tuple) and context[0] == "mgmt")


class ReceiveState:
    """What an AMQP link we send messages on needs: entity, mode, session and deliveries."""

    def __init__(self, entity: str, mode: str, session: SessionLock | None) -> None:
        self.entity = entity
        self.mode = mode
        self.session = session
        self.session_token: str | None = session.session_lock_token if session else None
        self.deliveries: dict[int, str] = {}  # delivery id → lock token
        self.inflight = 0
        self.key: tuple[str, str] | None = None
        self.owner: AmqpConnection | None = None
        # The client released a delivery (it arrived outside a receive call): send no
        # more until it asks again with a new flow, or the message would bounce.
        self.paused = False


class AmqpConnection(asyncio.Protocol):
    def __init__(self, frontend: AmqpFrontend, namespace: str) -> None:
        self.frontend = frontend
        self.namespace = namespace
        self.service = frontend.service
        self.sender = frontend.service.new_sender()  # a paired primary's backlog key
        self.conn = Connection(self, trace=_trace if TRACE else None)
        self.replies = Replies(self.conn)
        self.transactions = Transactions(self)
        self.transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._paused = False  # frames wait for the next turn (:meth:`data_received`)
        self._flush_due = False  # a flush is scheduled (:meth:`flush_soon`)
        # The transfers and settlements of this read, acted on after it (or before what follows).
        self.arrivals = Arrivals(self, partial(settle_range, self))
        self.closed = False

    # ------------------------------------------------------------ transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.frontend.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.frontend.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        self.conn.close()
        self.conn.data_to_send()

    def data_received(self, data: bytes) -> None:
        try:
            self.conn.receive_data(data)
            self.arrivals.in_order()
            if self.conn.failure is not None:
                log.warning("AMQP peer sent an invalid frame: %r", self.conn.failure)
                self.conn.failure = None
        except Exception:
            log.error("AMQP connection failed:\n%s", traceback.format_exc())
            self.conn.close(Error(Symbol("amqp:internal-error"), "internal error"))
        self.flush()
        if self._timer is None and self.conn.heartbeat_interval:
            self._schedule_heartbeat()
        if self.conn.more_input and not self.closed and not self._paused:
            # Fairness (daemon/README.md §29.11): the frames left wait for the next turn of the
            # event loop, and the socket is not read meanwhile; every other connection runs.
            self._paused = True
            self._pause(True)
            asyncio.get_running_loop().call_soon(self._read_on)

    def _read_on(self) -> None:
        self._paused = False
        if not self.closed:
            self.data_received(b"")
        if not self._paused:
            self._pause(False)

    def _pause(self, paused: bool) -> None:
        with contextlib.suppress(AttributeError, NotImplementedError, RuntimeError):
            if paused:
                self.transport.pause_reading()  # type: ignore[union-attr]
            else:
                self.transport.resume_reading()  # type: ignore[union-attr]

    def flush(self) -> None:
        out = self.conn.data_to_send()
        if out and self.transport is not None and not self.closed:
            self.conn.last_sent = time.monotonic()
            self.transport.write(out)
        if self.conn.closed and self.transport is not None and not self.closed:
            self.transport.close()
            self.closed = True

    def flush_soon(self) -> None:
        """One write, later in this turn of the loop, for every frame queued until then: a
        commit round settles many transfers at once, and each would otherwise be a write."""
        if not self._flush_due:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush_now)

    def _flush_now(self) -> None:
        self._flush_due = False
        self.flush()

    def _schedule_heartbeat(self) -> None:
        interval = self.conn.heartbeat_interval
        if interval is None or self.closed:
            return
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(interval / 2, 0.05), self._heartbeat)

    def _heartbeat(self) -> None:
        self.conn.tick(time.monotonic())
        self.flush()
        self._schedule_heartbeat()

    # ------------------------------------------------------------ attach / detach

    def on_attach(self, link: Link) -> None:
        self.arrivals.in_order()
        address = link.address or ""
        if address == "$cbs" or address.endswith("/$cbs"):
            link.context = "cbs"
            self._accept(link)
            return
        if isinstance(link.target, CoordinatorTarget) and link.role == RECEIVER:
            link.context = "coordinator"
            self._accept(link)
            self.conn.grant(link, 100)
            self.flush()
            return
        path = entity_path(address)
        if path.lower().endswith("/$management"):
            link.context = ("mgmt", path[: -len("/$management")])
            self._accept(link)
            return
        try:
            key = self.service.key(self.namespace, path)
        except SbctlError as err:
            self.conn.refuse(link, *condition_of(err))
            self.flush()
            return
        if link.role == RECEIVER:
            link.context = ("in", path, key)
            self._accept(link, max_message_size=self.service.max_message_bytes(self.namespace))
            self.conn.grant(link, 1000)
        else:
            self._attach_receiver(link, path)
        self.flush()

    def _accept(self, link: Link, **kwargs: Any) -> None:
        self.conn.attach(link, source=link.source, target=link.target, **kwargs)
        if link.role == RECEIVER and _is_node(link.context):
            self.conn.grant(link, 100)
        self.flush()

    def _attach_receiver(self, link: Link, path: str) -> None:
        """A link we send messages on; a session receiver first locks its session (the next
        available one waits for a free session up to the link's time-out)."""
        filters = getattr(link.source, "filter", None) or {}
        if SESSION_FILTER not in filters:
            self._attached(link, path, None)
            return
        try:
            wanted = requested_session(filters[SESSION_FILTER])
        except SbctlError as err:
            self.conn.refuse(link, *condition_of(err))
            return
        wait_ms = round(self._session_timeout(link) * 1000) if wanted is None else 0
        waits = self.frontend.session_waits.setdefault(link, set())

        def locked(session: Any) -> None:
            self.frontend.session_waits.pop(link, None)
            if link.detached or self.closed:  # gone while a slow store delayed the answer
                if isinstance(session, SessionLock):
                    token = SessionToken(self.namespace, path, session.session_lock_token)
                    self.service.run("session_close", token, _ignore, sender=self.sender)
                return
            if isinstance(session, SbctlError):
                self.conn.refuse(link, *condition_of(session))
            else:
                self._attached(link, path, session)
            self.flush()

        self.service.run(
            "session_accept",
            SessionAccept(self.namespace, path, wanted, wait_ms),
            locked,
            sender=self.sender,
            alive=lambda: not link.detached and not self.closed,
            parked=waits,
        )

    def _attached(self, link: Link, path: str, session: SessionLock | None) -> None:
        mode = "receive-and-delete" if link.snd_settle_mode == 1 else "peek-lock"
        source = link.source
        filters = getattr(source, "filter", None) or {}
        state = ReceiveState(path, mode, session)
        state.key = self.service.key(self.namespace, path)
        state.owner = self
        link.context = state
        props: dict[Any, Any] | None = None
        if session is not None:
            filters = dict(filters)
            filters[SESSION_FILTER] = echoed(filters.get(SESSION_FILTER), session.session_id)
            source = Source(
                source.address,
                source.durable,
                source.expiry_policy,
                source.timeout,
                source.dynamic,
                source.dynamic_node_properties,
                source.distribution_mode,
                filters,
                source.default_outcome,
                source.outcomes,
                source.capabilities,
            )
            props = {LOCKED_UNTIL: session.locked_until_ms * 10_000 + TICKS_AT_EPOCH}
        self.conn.attach(
            link,
            source=source,
            target=link.target,
            properties=props,
            max_message_size=MAX_MESSAGE_SIZE,
        )

    @staticmethod
    def _session_timeout(link: Link) -> float:
        """Seconds a next-available session receiver waits: its com.microsoft:timeout."""
        value = link.properties.get(TIMEOUT)
        return int(value) / 1000 if isinstance(value, int) and value > 0 else SESSION_WAIT_S

    def session_token(self, path: str, session_id: str | None) -> str:
        """The session lock token a receive link of this connection holds."""
        for session in self.conn.sessions.values():
            for link in session.links.values():
                state = link.context
                if (
                    isinstance(state, ReceiveState)
                    and state.session is not None
                    and state.session_token is not None
                    and entity_key(state.entity) == entity_key(path)
                    and (session_id is None or state.session.session_id == session_id)
                ):
                    return state.session_token
        from sbctl.core.errors import SessionLockLost

        raise SessionLockLost(f"this connection holds no lock on session {session_id!r}")

    def on_detach(self, link: Link, error: Any) -> None:
        self.arrivals.in_order()
        self.replies.drop(link)
        if link.context == "coordinator":
            self.transactions.drop_link(link)
        waits = self.frontend.session_waits.pop(link, None)
        if waits is not None:
            self.service.cancel(waits)
        state = link.context
        if isinstance(state, ReceiveState):
            self.frontend.unwatch(link)
            if state.session_token is not None:  # (its close wakes a waiting receiver)
                token = SessionToken(self.namespace, state.entity, state.session_token)
                self.service.run("session_close", token, _ignore, sender=self.sender)
            if state.deliveries and state.mode == "peek-lock":
                tokens = list(state.deliveries.values())
                state.deliveries.clear()
                abandon = Settle(self.namespace, state.entity, "abandon", tokens)
                self.service.run("settle", abandon, _ignore, sender=self.sender)

    # ------------------------------------------------------------ incoming messages

    def on_transfer(self, link: Link, delivery: Delivery) -> None:
        ctx = link.context
        sending = isinstance(ctx, tuple) and ctx[0] == "in"
        if not sending:
            self.arrivals.in_order()
        try:
            if sending:
                self._send(link, ctx[1], delivery)
            elif ctx == "cbs":
                self._cbs(link, delivery)
            elif isinstance(ctx, tuple) and ctx[0] == "mgmt":
                self._management(link, ctx[1], delivery)
            elif ctx == "coordinator":
                self.transactions.on_transfer(link, delivery)
        except codec.DecodeError as exc:  # the peer's error: a typed answer, one log line
            text = str(exc) if str(exc).startswith(UNDECODABLE) else f"{UNDECODABLE}: {exc}"
            log.warning("AMQP peer sent an %s", text)
            self.reject(link, delivery, "amqp:decode-error", text)
        except Exception:
            log.error("AMQP transfer failed:\n%s", traceback.format_exc())
            self.reject(link, delivery, "amqp:internal-error", "internal error")
        if not sending:  # (a send is answered once stored; data_received flushes the rest)
            self.flush()

    def reject(self, link: Link, delivery: Delivery, condition: str, text: str) -> None:
        if not delivery.settled:
            self.conn.disposition(link, delivery.id, Rejected(Error(Symbol(condition), text)))

    def _reply_link(self, link: Link, address: str | None, node: str) -> Link | None:
        for other in link.session.local.values():
            if other.role == SENDER and (
                (address is not None and getattr(other.target, "address", None) == address)
                or (address is None and (other.address or "") == node)
            ):
                return other
        for other in link.session.local.values():
            if other.role == SENDER and (other.address or "") == node:
                return other
        return None

    def _respond(
        self, link: Link, request: codec.Message, app: dict[Any, Any], body: Any, node: str
    ) -> None:
        props = request.properties
        reply_to = props.reply_to if props is not None else None
        out_link = self._reply_link(link, reply_to, node)
        if out_link is None:
            return
        correlation = props.message_id if props is not None else None
        msg = codec.Message(
            properties=Properties(None, None, reply_to, None, None, correlation),
            application_properties=app,
            body=body,
            body_kind="value",
        )
        self.replies.send(out_link, codec.encode_message(msg))

    def _cbs(self, link: Link, delivery: Delivery) -> None:
        request = codec.decode_message(delivery.payload)
        app = request.application_properties or {}
        token = request.body
        if isinstance(token, bytes):
            token = token.decode(errors="replace")
        key_name, key = self.frontend.keys.get(self.namespace)
        problem = token_problem(str(token), key_name, key, time.time())
        if problem is None:
            status, text = 202, "Accepted"
        else:  # worded as Service Bus words it: "InvalidSignature: ..." (README §29)
            status, text = 401, f"{problem[0]}: {problem[1]}"
            log.warning("AMQP token refused for %s: %s", app.get("name"), text)
        if not delivery.settled:
            self.conn.disposition(link, delivery.id, Accepted())
        self._respond(
            link,
            request,
            {"status-code": Int(status), "status-description": text},
            None,
            link.address or "$cbs",
        )

    def _management(self, link: Link, path: str, delivery: Delivery) -> None:
        request = codec.decode_message(delivery.payload)
        state = delivery.state
        txn_id = state.txn_id if isinstance(state, TransactionalState) else None
        if not delivery.settled:
            done = Accepted() if txn_id is None else TransactionalState(txn_id, Accepted())
            self.conn.disposition(link, delivery.id, done)

        def respond(status: int, description: str, body: Any, condition: str | None) -> None:
            app: dict[Any, Any] = {"statusCode": Int(status), "statusDescription": description}
            if condition:
                app["errorCondition"] = Symbol(condition)
            self._respond(link, request, app, body, link.address or "")
            self.flush()

        txn = None  # daemon/README.md §29.7: a request carrying a txn-id
        if txn_id is not None:
            try:
                txn = self.transactions.get(txn_id)
            except SbctlError as err:
                respond(400, err.message, None, "amqp:transaction:unknown-id")
                return
        management.handle(self, path, request, respond, txn)

    def _send(self, link: Link, path: str, delivery: Delivery) -> None:
        try:
            messages: Any = intake_transfer(delivery.payload, delivery.message_format)
            if isinstance(delivery.state, TransactionalState):
                txn = self.transactions.get(delivery.state.txn_id)
                txn.entity(path)[0].extend(messages)
                self.conn.disposition(
                    link, delivery.id, TransactionalState(delivery.state.txn_id, Accepted())
                )
                return
        except SbctlError as err:
            self.settle_sends(((link, delivery),), err)
            return

        self.arrivals.send_later((link, path, delivery, messages))

    def settle_sends(self, transfers: Sequence[tuple[Link, Delivery]], result: Any) -> None:
        """Answer transfers: accepted, or rejected with the error ``result`` is."""
        if self.closed:
            return
        state: Any = ACCEPTED
        if isinstance(result, SbctlError):
            condition, description = condition_of(result)
            state = Rejected(Error(Symbol(condition), description))
        self.conn.settle_all(transfers, state)
        self.flush_soon()

    # ------------------------------------------------------------ outgoing messages

    def on_flow(self, link: Link) -> None:
        self.arrivals.in_order()
        if isinstance(link.context, ReceiveState):
            link.context.paused = False
            self.pump(link)
            self.flush()
        elif _is_node(link.context):
            self.replies.on_flow(link)
            self.flush()

    def pump(self, link: Link) -> None:
        """Send what the link has credit for; watch the entity when nothing is there."""
        state = link.context
        if not isinstance(state, ReceiveState) or link.detached or self.closed:
            return
        want = min(link.credit - state.inflight, MAX_RECEIVE)
        if want <= 0 or state.paused:
            if link.drain and not state.inflight:
                self.frontend.unwatch(link)
                self.conn.drained(link)
            return
        state.inflight += want
        answered_now = [True]  # (False once run returned: a later answer flushes itself)

        def received(got: Any) -> None:
            state.inflight -= want
            if link.detached or self.closed:
                return
            if isinstance(got, SbctlError):
                self.frontend.unwatch(link)
                self.conn.detach(link, *condition_of(got))
            elif got or answered_now[0]:
                self._deliver(link, state, got)
            else:  # nothing, after a slow store's delay: a write meanwhile woke no watch
                self.pump(link)
            if not answered_now[0]:
                self.flush()

        receive = Receive(self.namespace, state.entity, want, 0, state.mode, state.session_token)
        self.service.run("receive", receive, received, sender=self.sender)
        answered_now[0] = False

    def _deliver(self, link: Link, state: ReceiveState, got: list[Any]) -> None:
        """Transfer what a receive got (settled in receive-and-delete mode, answered once
        durable); nothing: watch the entity (or answer a drain)."""
        if not got:
            if link.drain:
                self.frontend.unwatch(link)
                self.conn.drained(link)
            else:
                self.frontend.watch(link)
            return
        if deletes_on_receive(state.mode):
            _, payloads, bad = splice_all(got, received=True, lock=False)
            self._unreadable(state, bad)
            for payload in payloads:
                self.conn.transfer(link, uuid.uuid4().bytes_le, payload, settled=True)
            self.pump(link)
            return
        lock = state.mode == "peek-lock" and state.session is None
        got, payloads, bad = splice_all(got, received=True, lock=lock)
        self._unreadable(state, bad)
        tokens = [d.lock_token or str(uuid.uuid4()) for d in got]
        ids = self.conn.transfers(link, lock_tags(tokens), payloads, settled=False)
        state.deliveries.update(zip(ids, tokens, strict=True))
        if link.credit > 0:
            self.pump(link)

    def _unreadable(self, state: ReceiveState, bad: list[tuple[Any, str]]) -> None:
        """Received messages whose stored record cannot be rendered: dead-lettered (when
        locked; a received-and-deleted one is gone already), one log line each, so they
        never block the others (daemon/README.md §29.11)."""
        for d, why in bad:
            log.warning("message %s of %s cannot be sent: %s", d.sequence_number, state.entity, why)
        tokens = [d.lock_token for d, _ in bad if d.lock_token]
        if tokens and not deletes_on_receive(state.mode):
            why = f"the stored message cannot be rendered ({bad[0][1]})"
            settle = Settle(
                self.namespace, state.entity, "dead-letter", tokens, None, "MessageUnreadable", why
            )
            self.service.run("settle", settle, _ignore, sender=self.sender)

    def on_dispositions(self, link: Link, ids: list[int], settled: bool, state: Any) -> None:
        """A disposition's range of our deliveries on ``link``: outside a transaction one
        ``settle`` for them all (:mod:`.settlement`), with the accepts next to it in the read."""
        ctx = link.context
        if isinstance(ctx, ReceiveState) and not isinstance(state, TransactionalState):
            self.arrivals.settle_later((link, ctx, ids, settled, state, Settlement(state)))
            return
        self.arrivals.in_order()
        if isinstance(ctx, ReceiveState):
            for delivery_id in ids:
                self.on_disposition(link, delivery_id, settled, state)
        elif _is_node(ctx):
            self.replies.on_disposition(link, ids, settled, state)

    def on_disposition(self, link: Link, delivery_id: int, settled: bool, state: Any) -> None:
        """One delivery settled inside a transaction: held until the discharge (the
        connection hands every other disposition to :meth:`on_dispositions`)."""
        self.arrivals.in_order()
        ctx = link.context
        if not isinstance(ctx, ReceiveState) or not isinstance(state, TransactionalState):
            return
        token = ctx.deliveries.pop(delivery_id, None)
        if token is None:
            return
        how = Settlement(state.outcome)
        if how.pause:
            ctx.paused = True
        if how.error is not None:
            condition, text = condition_of(how.error)
            self.conn.disposition(link, delivery_id, Rejected(Error(Symbol(condition), text)))
            return
        try:
            txn = self.transactions.get(state.txn_id)
        except SbctlError as err:
            self.conn.disposition(
                link,
                delivery_id,
                Rejected(Error(Symbol("amqp:transaction:unknown-id"), err.message)),
            )
            return
        txn.entity(ctx.entity)[1].append(
            TxSettle(how.op, token, how.props, how.reason, how.description)
        )
        if not settled:
            self.conn.disposition(
                link, delivery_id, TransactionalState(state.txn_id, state.outcome)
            )


# A protocol factory for a namespace's port → the factory that serves it.
Wrap = Callable[[Callable[[], asyncio.Protocol], str], Callable[[], asyncio.Protocol]]


class AmqpFrontend:
    """The listeners, the per-namespace ports and the receivers waiting for messages."""

    def __init__(
        self,
        service: Service,
        data_dir: Path,
        host: str,
        port: int,
        wrap: Wrap | None = None,
    ) -> None:
        self.service = service
        # What serves a namespace's port, given the AMQP protocol factory: the factory
        # itself, or what the entry point passes (it shares the ports with HTTP and HTTPS).
        self.wrap: Wrap = wrap or (lambda factory, _namespace: factory)
        self.host = host
        self.port = port
        self.data_dir = data_dir
        self.keys = service.key_store(data_dir)
        self.ports_file = layout.amqp_ports_file(data_dir)
        self.ports: dict[str, int] = {}  # namespace key → bound port
        self.listeners: dict[str, asyncio.AbstractServer] = {}
        self.connections: set[AmqpConnection] = set()
        self.watching: dict[Link, LinkWatch] = {}  # receiver links waiting for a message
        # session receivers waiting for a free session (parked in the service)
        self.session_waits: dict[Link, set[DelayedOperation]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Bind the main port (raises OSError when it is taken) and the namespaces' ports."""
        await self._listen(DEFAULT_NAMESPACE, self.port)
        self.port = self.ports[entity_key(DEFAULT_NAMESPACE)]
        saved = self._saved_ports()
        for name in self.service.namespaces():
            if entity_key(name) in self.ports:
                continue
            await self.ensure(name, saved.get(entity_key(name), 0))
        self.service.providers["amqp_endpoint"] = self.op_endpoint

    def op_endpoint(self, args: Any, answer: Callable[[Any], None]) -> None:
        """The operation behind `sbctl namespace connection-string` (run by the service for
        an existing namespace, by its name as created): ``answer`` gets the namespace's port
        and key, or an error."""
        name = args.name
        key_name, key = self.keys.get(name)

        def reply(port: int) -> None:
            result = {
                "namespace": name,
                "host": self.host,
                "port": port,
                "key_name": key_name,
                "key": key,
            }
            answer(result)

        known = self.ports.get(entity_key(name))
        if known is not None:
            reply(known)
            return

        async def bind() -> None:
            try:
                reply(await self.ensure(name))
            except OSError as exc:
                from sbctl.core.errors import GeneralError

                answer(GeneralError(f"cannot bind an AMQP port: {exc}"))

        task = asyncio.get_running_loop().create_task(bind())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def ensure(self, namespace: str, port: int | None = None) -> int:
        """The port serving ``namespace``, binding one when it has none yet."""
        key = entity_key(namespace)
        if key in self.ports:
            return self.ports[key]
        if port is None:
            port = self._saved_ports().get(key, 0)
        try:
            await self._listen(namespace, port)
        except OSError:
            if not port:
                raise
            log.warning("AMQP port %s for namespace %s is taken; using another", port, namespace)
            await self._listen(namespace, 0)
        self._save_ports()
        return self.ports[key]

    def connection(self, namespace: str) -> AmqpConnection:
        """A new AMQP connection of ``namespace`` (on a socket a listener or another
        front-end hands it: AMQP over WebSocket, sbctld.frontends.http.websocket)."""
        return AmqpConnection(self, namespace)

    async def _listen(self, namespace: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        factory = self.wrap(lambda: AmqpConnection(self, namespace), namespace)
        listener = await loop.create_server(factory, self.host, port, backlog=1024)
        bound = listener.sockets[0].getsockname()[1]
        self.listeners[entity_key(namespace)] = listener
        self.ports[entity_key(namespace)] = bound
        log.info("AMQP: namespace %s on %s:%s", namespace, self.host, bound)

    def _saved_ports(self) -> dict[str, int]:
        try:
            return {k: int(v) for k, v in json.loads(self.ports_file.read_text()).items()}
        except (FileNotFoundError, ValueError, AttributeError):
            return {}

    def _save_ports(self) -> None:
        saved = self._saved_ports()
        saved.update({k: v for k, v in self.ports.items() if k != entity_key(DEFAULT_NAMESPACE)})
        self.ports_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = layout.temp_sibling(self.ports_file)
        tmp.write_text(json.dumps(saved))
        tmp.replace(self.ports_file)

    async def stop(self) -> None:
        for listener in self.listeners.values():
            listener.close()
        for conn in list(self.connections):
            conn.conn.close(Error(Symbol("amqp:connection:forced"), "the daemon is stopping"))
            conn.flush()
        for op in self.watching.values():
            self.service.purgatory.cancel(op)
        for waits in self.session_waits.values():
            self.service.cancel(waits)
        self.watching.clear()
        self.session_waits.clear()

    # ------------------------------------------------------------ waiting receivers

    def watch(self, link: Link) -> None:
        state = link.context
        if not isinstance(state, ReceiveState) or state.key is None or not state.owner:
            return
        if link not in self.watching:
            op = LinkWatch(state.owner, link, self._forget_watch)
            self.watching[link] = op
            self.service.purgatory.watch(op, [state.key], None)

    def unwatch(self, link: Link) -> None:
        op = self.watching.pop(link, None)
        if op is not None:
            self.service.purgatory.cancel(op)

    def _forget_watch(self, link: Link) -> None:
        self.watching.pop(link, None)


def _ignore(_result: Any) -> None:
    """The reply of an operation no one waits for (a detach's close, an unreadable message's
    dead-lettering): an error changes nothing."""


__all__ = ["AmqpFrontend"]
