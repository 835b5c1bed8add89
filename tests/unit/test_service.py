"""The service layer without sockets, on the fake clock: group commit, parked requests woken
across front-ends, the slow-store delay.

The Unix front-end runs for real over an in-memory transport (requests in as bytes, replies
out as bytes); the "other protocol" is a stand-in front-end that, like the AMQP and HTTP
ones, runs the service's declared operations (Service.run). Time-outs and fault delays run on
fake timers driven by the fake clock; the group commit runs on a real event loop
(``call_soon``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sbctl.core.delivered import Delivered
from sbctl.core.errors import SbctlError, ServiceTimeout
from sbctl.core.message_form import decode as decode_message
from sbctl.core.protocol import (
    LENGTH,
    EntityRef,
    Receive,
    Send,
    SendEncoded,
    decode_reply,
    decode_result,
    encode_request,
)
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.frontends.unix.connection import Connection
from sbctld.frontends.unix.server import UnixFrontend
from sbctld.service import DelayedOperation, Purgatory, Service
from sbctld.service import commit as commit_module

NS = DEFAULT_NAMESPACE


class FakeHandle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeTimers:
    """``call_later`` on the fake clock: callbacks run when :meth:`advance` passes them."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.due: list[tuple[int, int, Callable[..., Any], tuple[Any, ...], FakeHandle]] = []
        self.seq = 0

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> FakeHandle:
        handle = FakeHandle()
        self.seq += 1
        at = self.clock.now_ms() + round(delay * 1000)
        self.due.append((at, self.seq, callback, args, handle))
        return handle

    def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        while True:
            ready = sorted(d for d in self.due if d[0] <= self.clock.now_ms())
            if not ready:
                return
            entry = ready[0]
            self.due.remove(entry)
            if not entry[4].cancelled:
                entry[2](*entry[3])


class MemoryTransport:
    """What a :class:`Connection` needs of an asyncio transport; replies are decoded into
    ``replies`` and noted in ``events``."""

    def __init__(self, events: list[Any]) -> None:
        self.events = events
        self.buf = bytearray()
        self.replies: dict[int, tuple[bool, Any]] = {}
        self.raw: dict[int, msgspec.Raw] = {}

    def write(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 4:
            (n,) = LENGTH.unpack_from(self.buf, 0)
            if len(self.buf) < 4 + n:
                break
            reply = decode_reply(bytes(self.buf[4 : 4 + n]))
            del self.buf[: 4 + n]
            self.replies[reply.id] = (reply.ok, decode_result(reply.result))
            self.raw[reply.id] = reply.result
            self.events.append(("reply", reply.id))

    def set_write_buffer_limits(self, high: int, low: int) -> None:
        pass

    def get_extra_info(self, name: str) -> Any:
        return None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


class Unix:
    """A client of the real Unix front-end, without the socket."""

    def __init__(self, frontend: UnixFrontend, events: list[Any]) -> None:
        self.transport = MemoryTransport(events)
        self.conn = Connection(frontend)
        self.conn.connection_made(self.transport)  # type: ignore[arg-type]
        self.next_id = 0

    def request(self, op: str, args: msgspec.Struct) -> int:
        self.next_id += 1
        self.conn.data_received(encode_request(self.next_id, op, args))
        return self.next_id

    def reply(self, req_id: int) -> tuple[bool, Any] | None:
        return self.transport.replies.get(req_id)


class OtherFrontend:
    """A second protocol, as AMQP and HTTP are: it runs the service's declared operations."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def send(self, entity: str, body: bytes, answer: Callable[[SbctlError | None], None]) -> None:
        def sent(result: Any) -> None:
            answer(result if isinstance(result, SbctlError) else None)

        messages: Any = [Message(body=body)]
        self.service.run("send", SendEncoded(NS, entity, messages), sent)

    def receive(self, entity: str, timeout_s: float, answer: Callable[[Any], None]) -> bool:
        """Answers the body, None on the time-out or the error; True when answered now."""
        answered = []

        def got(result: Any) -> None:
            answered.append(True)
            if isinstance(result, SbctlError):
                answer(result)
            else:
                answer(decode_message(result[0].payload).body if result else None)

        self.service.run("receive", Receive(NS, entity, 1, round(timeout_s * 1000)), got)
        return bool(answered)


async def settle_loop() -> None:
    """Let the loop run the commit rounds it scheduled."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
def parts(broker: Broker, clock: FakeClock, tmp_path: Path) -> Any:
    broker.management.queue_create(NS, "q", {})
    broker.management.queue_create(NS, "other", {})
    timers = FakeTimers(clock)

    def make() -> tuple[Service, UnixFrontend, FakeTimers]:
        service = Service(broker, broker.syncer, timers=lambda: timers)
        unix = UnixFrontend(service, tmp_path / "never-bound.sock")
        return service, unix, timers

    return make


def test_acknowledgements_wait_for_the_rounds_sync_and_keep_their_order(
    parts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    events: list[Any] = []
    real_sync = commit_module.sync_fds

    def spy(dirty: list[int], closing: list[int], durable: bool) -> None:
        events.append("sync")
        real_sync(dirty, closing, durable)

    monkeypatch.setattr(commit_module, "sync_fds", spy)

    async def scenario() -> None:
        service, unix, _timers = parts()
        client = Unix(unix, events)
        ids = [client.request("send", Send(NS, "q", [Message(body=b"%d" % i)])) for i in range(3)]
        assert events == []  # written, not yet durable: nothing acknowledged
        await settle_loop()
        assert events == ["sync", *(("reply", i) for i in ids)]
        assert service.committer.rounds == 1  # one sync covered the three
        # A write after the round waits for the next one.
        late = client.request("send", Send(NS, "q", [Message(body=b"late")]))
        assert events[-1] == ("reply", ids[-1])
        await settle_loop()
        assert events[-2:] == ["sync", ("reply", late)]
        assert [client.reply(i) for i in ids] == [(True, [i]) for i in range(1, 4)]
        await service.stop()

    asyncio.run(scenario())


def test_a_send_through_another_front_end_completes_a_unix_long_poll(parts: Any) -> None:
    async def scenario() -> None:
        service, unix, _timers = parts()
        client = Unix(unix, [])
        rid = client.request("receive", Receive(NS, "q", max_wait_ms=30_000))
        await settle_loop()
        assert client.reply(rid) is None
        assert service.status()["parked_receives"] == 1
        acked: list[SbctlError | None] = []
        OtherFrontend(service).send("q", b"across", acked.append)
        await settle_loop()
        assert acked == [None]
        reply = client.reply(rid)
        assert reply is not None and reply[0]
        delivered = decode_result(client.transport.raw[rid], list[Delivered])
        assert [decode_message(bytes(d.payload)).body for d in delivered] == [b"across"]
        assert service.status()["parked_receives"] == 0
        await service.stop()

    asyncio.run(scenario())


def test_a_unix_send_completes_a_receive_parked_by_another_front_end(parts: Any) -> None:
    async def scenario() -> None:
        service, unix, timers = parts()
        other = OtherFrontend(service)
        got: list[Any] = []
        assert not other.receive("q", 10.0, got.append)
        parked_other: list[Any] = []
        assert not other.receive("other", 10.0, parked_other.append)
        client = Unix(unix, [])
        client.request("send", Send(NS, "q", [Message(body=b"from unix")]))
        await settle_loop()
        assert got == [b"from unix"]
        assert parked_other == []  # a write elsewhere completes nothing here
        timers.advance(9_999)
        assert parked_other == []
        timers.advance(1)  # the time-out, on the fake clock
        assert parked_other == [None]
        assert service.purgatory.watched() == 0
        await service.stop()

    asyncio.run(scenario())


def test_deleting_a_queue_fails_the_receives_parked_on_it_by_every_front_end(
    parts: Any,
) -> None:
    async def scenario() -> None:
        service, unix, _timers = parts()
        other = OtherFrontend(service)
        got: list[Any] = []
        other.receive("q", 10.0, got.append)
        client = Unix(unix, [])
        rid = client.request("receive", Receive(NS, "q", max_wait_ms=10_000))
        client.request("queue_delete", EntityRef(NS, "q"))
        await settle_loop()
        assert len(got) == 1 and isinstance(got[0], ServiceTimeout)
        reply = client.reply(rid)
        assert reply is not None and not reply[0] and "was deleted" in reply[1]["message"]
        await service.stop()

    asyncio.run(scenario())


def test_a_slow_store_delays_only_the_requests_that_touched_it(parts: Any) -> None:
    async def scenario() -> None:
        service, unix, timers = parts()
        service.broker.housekeeping.fault_add(NS, "q", [], "slow", 250)
        client = Unix(unix, [])
        slow = client.request("send", Send(NS, "q", [Message(body=b"slow")]))
        fast = client.request("send", Send(NS, "other", [Message(body=b"fast")]))
        assert service.faults.delay_ms == 0  # per request, not left on the shared registry
        await settle_loop()
        assert client.reply(fast) == (True, [1])
        assert client.reply(slow) is None  # durable, but the store answers later
        timers.advance(249)
        assert client.reply(slow) is None
        timers.advance(1)
        assert client.reply(slow) == (True, [1])
        # Another front-end's request meets the same delay.
        acked: list[Any] = []
        OtherFrontend(service).send("q", b"again", acked.append)
        await settle_loop()
        assert acked == []
        timers.advance(250)
        assert acked == [None]
        await service.stop()

    asyncio.run(scenario())


class Counting(DelayedOperation):
    """Completes once ``ready[0]`` is true; records what happened to it in ``log``."""

    def __init__(self, name: str, ready: list[bool], log: list[str]) -> None:
        super().__init__()
        self.name = name
        self.ready = ready
        self.log = log

    def try_complete(self) -> bool:
        self.log.append(f"try {self.name}")
        return self.ready[0]

    def on_expire(self) -> None:
        self.log.append(f"expired {self.name}")

    def on_cancel(self) -> None:
        self.log.append(f"cancelled {self.name}")


def test_the_purgatory_retries_oldest_first_and_completes_each_operation_once(
    clock: FakeClock,
) -> None:
    timers = FakeTimers(clock)
    purgatory = Purgatory(lambda: timers)
    log: list[str] = []
    ready = [False]
    key = ("ns", "q")
    a, b = Counting("a", ready, log), Counting("b", ready, log)
    assert not purgatory.watching()  # (the service then skips looking up what a write woke)
    assert not purgatory.try_complete_else_watch(a, [key], 1.0)
    assert not purgatory.try_complete_else_watch(b, [key, ("ns", "other")], None)
    assert purgatory.watched() == 2
    log.clear()
    assert purgatory.check_and_complete(key) == 0
    assert log == ["try a", "try b"]
    ready[0] = True
    log.clear()
    assert purgatory.check_and_complete(key) == 2
    assert log == ["try a", "try b"]
    assert purgatory.check_and_complete(("ns", "other")) == 0  # b completed already
    timers.advance(1000)
    assert log == ["try a", "try b"]  # a's timer was cancelled when it completed
    assert purgatory.watched() == 0
    assert not purgatory.watching()


def test_the_purgatory_expires_cancels_and_fails(clock: FakeClock) -> None:
    timers = FakeTimers(clock)
    purgatory = Purgatory(lambda: timers)
    log: list[str] = []
    never = [False]
    key = ("ns", "q")
    a, b, c = (Counting(n, never, log) for n in "abc")
    for op in (a, b, c):
        purgatory.watch(op, [key], 2.0)
    purgatory.cancel(b)
    timers.advance(1999)
    assert log == ["cancelled b"]
    purgatory.fail(key, ServiceTimeout("queue 'q' was deleted"))  # default: try, then expire
    assert log == ["cancelled b", "try a", "expired a", "try c", "expired c"]
    timers.advance(1)
    assert log[-1] == "expired c" and len(log) == 5  # each answered once
    assert purgatory.watched() == 0
