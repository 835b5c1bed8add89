"""A paired primary keeps a backlog queue per sender, and a sender is one client connection
of any front-end: the service numbers it, so a Unix, an AMQP and an HTTP connection are
keyed alike, and a new connection never inherits a closed one's choice (as it could when the
key was the connection object's ``id()``, which CPython reuses once the object is collected).

No sockets: the front-ends' connection objects are made directly and their send paths called
on a broker with the fake clock.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path
from typing import Any

import pytest

from sbctl.core.amqp import codec as amqp_codec
from sbctl.core.protocol import Send, encode_request
from sbctl.core.records import Message
from sbctld.broker import Broker
from sbctld.clock import FakeClock
from sbctld.frontends.amqp import management as amqp_management
from sbctld.frontends.amqp.arguments import Args
from sbctld.frontends.amqp.server import AmqpConnection, AmqpFrontend
from sbctld.frontends.http.request import Request
from sbctld.frontends.http.server import HttpConnection, HttpFrontend
from sbctld.frontends.unix.connection import Connection
from sbctld.frontends.unix.server import UnixFrontend
from sbctld.service import Service
from tests.unit.test_service import FakeTimers, MemoryTransport

P, S = "primary-ns", "secondary-ns"
BACKLOGS = 10


@pytest.fixture
def service(broker: Broker, clock: FakeClock) -> Service:
    timers = FakeTimers(clock)
    return Service(broker, broker.syncer, timers=lambda: timers)


@pytest.fixture
def fronts(service: Service, tmp_path: Path) -> tuple[UnixFrontend, AmqpFrontend, HttpFrontend]:
    return (
        UnixFrontend(service, tmp_path / "never-bound.sock"),
        AmqpFrontend(service, tmp_path, "127.0.0.1", 0),
        HttpFrontend(service, tmp_path, "127.0.0.1", None),
    )


def test_every_connection_of_every_front_end_is_a_new_sender(fronts: Any) -> None:
    unix, amqp, http = fronts
    seen = []
    for _ in range(200):  # each dropped at once: their id()s are reused, their senders not
        seen.append(Connection(unix).sender)
        seen.append(AmqpConnection(amqp, P).sender)
        seen.append(HttpConnection(http, P).sender)
        gc.collect(0)
    assert len(set(seen)) == len(seen) == 600
    assert len({id(Connection(unix)) for _ in range(200)}) < 200  # what the old key did


def failed_over(broker: Broker, clock: FakeClock) -> None:
    broker.management.namespace_create(P)
    broker.management.namespace_create(S)
    broker.management.queue_create(P, "orders", {})
    broker.pairings.pair(P, S, BACKLOGS, 0, 1000, False)
    broker.housekeeping.fault_add(P)  # FailoverInterval 0: the first failing send fails over


async def unix_sends(unix: UnixFrontend, count: int) -> tuple[Connection, set[str | None]]:
    """``count`` sends on one Unix connection; where each report says they went."""
    conn = Connection(unix)
    transport = MemoryTransport([])
    conn.connection_made(transport)  # type: ignore[arg-type]
    for req_id in range(1, count + 1):
        conn.data_received(encode_request(req_id, "send", Send(P, "orders", [Message(b"u")], True)))
    for _ in range(5):
        await asyncio.sleep(0)  # the group commits answer
    went = set()
    for req_id in range(1, count + 1):
        ok, report = transport.replies[req_id]
        assert ok and report["sequence_numbers"] == [0], report
        went.add(report["diverted_to"])
    return conn, went


def test_sends_of_each_front_end_keep_their_connections_backlog_queue(
    broker: Broker, clock: FakeClock, fronts: Any
) -> None:
    asyncio.run(send_through_every_front_end(broker, clock, fronts))


async def send_through_every_front_end(broker: Broker, clock: FakeClock, fronts: Any) -> None:
    unix, amqp, http = fronts
    failed_over(broker, clock)
    pairings = broker.pairings
    where: dict[str, set[str | None]] = {}
    answers: list[Any] = []

    # Unix: the front-end's own send, which reports where the messages went.
    for i in range(3):
        conn, went = await unix_sends(unix, 5)
        where[f"unix{i}"] = went | {pairings.backlog_of(P, "orders", conn.sender)}

    # HTTP: a connection's requests carry its sender.
    for i in range(3):
        hconn = HttpConnection(http, P)
        for _ in range(5):
            req = Request("POST", "/orders/messages", {}, [], b"http", "http", P, hconn.sender)
            http.dataplane.send(req, "orders", lambda status, _h, _b: answers.append(status))
        where[f"http{i}"] = {pairings.backlog_of(P, "orders", hconn.sender)}

    # AMQP: the management node's schedule operation sends as the connection.
    for i in range(3):
        aconn = AmqpConnection(amqp, P)
        for _ in range(5):
            item = {"message": amqp_codec.encode_message(amqp_codec.Message(body=[b"amqp"]))}
            amqp_management.schedule_message(
                aconn,
                "orders",
                Args({"messages": [item]}),
                lambda *answer: answers.append(answer[0]),
            )
        where[f"amqp{i}"] = {pairings.backlog_of(P, "orders", aconn.sender)}

    for _ in range(5):
        await asyncio.sleep(0)  # the group commits answer
    assert answers == [201] * 15 + [200] * 15

    # each connection kept one backlog queue over all its sends, whatever its protocol
    assert all(len(queues) == 1 and None not in queues for queues in where.values()), where
    st = broker.paired[P].entities["orders"]
    assert len(st.senders) == 9  # one per connection, none shared
    total = sum(
        len(broker.messaging.peek(S, f"{P}/x-servicebus-transfer/{i}", 100, None))
        for i in range(BACKLOGS)
    )
    assert total == 3 * 5 + 3 * 5 + 3 * 5
