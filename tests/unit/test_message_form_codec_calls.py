"""An SDK's message is read once on the way in and never re-encoded on the way out.

The AMQP front-end's own send and receive paths (``AmqpConnection._send`` and ``pump``, on
a broker with the fake clock, no sockets) take a transfer encoded by azure-servicebus's own
pyamqp codec (a batch, message format 0x80013700, and a single message); the codec entry
points are counted meanwhile: every value encoder of :mod:`sbctl.core.amqp.codec`, its message
encoder and decoder, and the one reader of :mod:`sbctl.core.message_form`. On the way in each
message is read once (and the generic message decoder never runs); on the way out nothing of
the message is encoded again: the delivery is the broker's header and annotations, then the
sender's properties, application properties and body bytes exactly as they were sent.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus._common.message import ServiceBusMessageBatch
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

from sbctl.core import message_form
from sbctl.core.amqp import codec
from sbctld.broker import Broker
from sbctld.clock import FakeClock
from sbctld.frontends.amqp.server import AmqpConnection, AmqpFrontend, ReceiveState
from sbctld.service import Service
from tests.unit.test_service import FakeTimers

NS = "form-ns"


def sdk_messages(n: int) -> tuple[bytes, list[bytes]]:
    """A batch transfer's payload as azure-servicebus encodes it, and its messages."""
    batch = ServiceBusMessageBatch(max_size_in_bytes=1 << 20, amqp_transport=PyamqpTransport)
    for i in range(n):
        batch.add_message(
            ServiceBusMessage(
                f"body {i}",
                application_properties={"n": i, "s": "text", "f": 1.5, "b": True},
                subject="orders",
                content_type="text/plain",
                correlation_id=f"c{i}",
                time_to_live=datetime.timedelta(minutes=5),
            )
        )
    payload = bytes(encode_payload(bytearray(), batch._message))
    inner = [sent.payload for sent in message_form.intake_transfer(payload, codec.BATCH_FORMAT)]
    return payload, inner


class Calls:
    """Counts calls of the codec's entry points while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.counts: Counter[str] = Counter()

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kw: Any) -> Any:
            if self.on:
                self.counts[name] += 1
            return fn(*args, **kw)

        return counted


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[Calls]:
    c = Calls()
    for kind, encoder in list(codec.ENCODERS.items()):
        monkeypatch.setitem(codec.ENCODERS, kind, c.wrap(f"encode {kind.__name__}", encoder))
    for name in ("encode", "encode_into", "encode_message", "decode_message", "_enc_other"):
        monkeypatch.setattr(codec, name, c.wrap(name, getattr(codec, name)))
    monkeypatch.setattr(message_form, "_read", c.wrap("read", message_form._read))
    yield c


class Link:
    """What the AMQP connection's send and receive paths read of a link."""

    def __init__(self, context: Any, credit: int = 0) -> None:
        self.context = context
        self.credit = credit
        self.detached = False
        self.drain = False
        self.address = "q"


class Delivery:
    def __init__(self, payload: bytes, message_format: int) -> None:
        self.payload = payload
        self.message_format = message_format
        self.state = None
        self.settled = False
        self.id = 0


class Wire:
    """The sans-IO connection's calls, recorded (no frames are encoded)."""

    def __init__(self) -> None:
        self.outcomes: list[Any] = []
        self.sent: list[bytes] = []
        self.closed = False

    def disposition(self, link: Any, delivery_id: int, state: Any) -> None:
        self.outcomes.append(state)

    def settle_all(self, transfers: list[Any], state: Any) -> None:
        self.outcomes.extend(state for _ in transfers)

    def transfers(self, link: Any, tags: Any, payloads: list[bytes], settled: bool) -> list[int]:
        self.sent.extend(payloads)
        link.credit -= len(payloads)
        return list(range(len(self.sent) - len(payloads), len(self.sent)))

    def data_to_send(self) -> bytes:
        return b""


@pytest.fixture
def amqp(broker: Broker, clock: FakeClock, tmp_path: Path) -> AmqpConnection:
    timers = FakeTimers(clock)
    service = Service(broker, broker.syncer, timers=lambda: timers)
    broker.management.namespace_create(NS)
    broker.management.queue_create(NS, "q", {})
    conn = AmqpConnection(AmqpFrontend(service, tmp_path, "127.0.0.1", 0), NS)
    conn.conn = Wire()  # type: ignore[assignment]
    return conn


def send_and_receive(
    amqp: AmqpConnection, calls: Calls, payload: bytes, message_format: int, n: int
) -> list[bytes]:
    wire: Wire = amqp.conn  # type: ignore[assignment]

    async def run() -> None:
        calls.on = True
        amqp._send(Link("in"), "q", Delivery(payload, message_format))
        amqp.arrivals.store()  # what the end of a read does (daemon/README.md §29.14)
        calls.on = False
        for _ in range(5):
            await asyncio.sleep(0)  # the group commit answers

    asyncio.run(run())
    assert [type(o).__name__ for o in wire.outcomes] == ["Accepted"]
    inbound = dict(calls.counts)
    calls.counts.clear()
    calls.on = True
    amqp.pump(Link(ReceiveState("q", "peek-lock", None), credit=n))
    calls.on = False
    assert len(wire.sent) == n
    assert inbound == {"read": n}, inbound  # read once each; nothing decoded twice
    assert not calls.counts, calls.counts  # nothing of the messages encoded on the way out
    return wire.sent


def test_a_batch_is_read_once_and_delivered_with_the_senders_bytes(
    amqp: AmqpConnection, calls: Calls
) -> None:
    payload, inner = sdk_messages(3)
    out = send_and_receive(amqp, calls, payload, codec.BATCH_FORMAT, 3)
    for sent, delivered in zip(inner, out, strict=True):
        kept = sent[sent.index(b"\x00\x53\x73") :]  # properties onwards, as sent
        assert delivered.endswith(kept)
        got = codec.decode_message(delivered)
        assert got.header.delivery_count == 0 and got.header.ttl == 300_000
        assert got.message_annotations["x-opt-sequence-number"] > 0


def test_a_single_message_is_read_once_and_delivered_with_the_senders_bytes(
    amqp: AmqpConnection, calls: Calls
) -> None:
    _, (single,) = sdk_messages(1)
    (delivered,) = send_and_receive(amqp, calls, single, 0, 1)
    assert delivered.endswith(single[single.index(b"\x00\x53\x73") :])
