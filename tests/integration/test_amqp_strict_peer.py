"""Apache Qpid Proton, a strict independent AMQP 1.0 stack, against a real daemon: every
frame sbctl sends is traced and must be one the specification allows (Proton rejects or
warns about none): small frames and a one-frame session window, settle modes, drain,
channel-max and handle-max, idle time-out heartbeats, end and close handshakes, and the
``$cbs`` / ``$management`` replies (link credit, settle mode). Beside Proton, a few raw
frames for what a conforming stack cannot be made to send (a channel or handle past the
negotiated maximum)."""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

import pytest
from proton import Delivery, Endpoint, Link, Message, int32, short, symbol, timestamp

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from sbctl.core.sas import DEFAULT_KEY, DEFAULT_KEY_NAME, make_token
from tests.integration.amqp_proton import ProtonPeer

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def port(module_daemon: Any) -> int:
    for queue in ("small", "modes", "drained", "mgmt", "ends"):
        module_daemon.cli("queue", "create", queue, check=True)
    module_daemon.cli("queue", "create", "parted", "--enable-partitioning", check=True)
    status = module_daemon.cli("-o", "json", "daemon", "status", check=True).json()
    return int(status["amqp_port"])


def strict(peer: ProtonPeer) -> None:
    """Nothing Proton rejected or warned about, and every frame fit its max-frame-size."""
    assert peer.problems() == [], peer.tail()


def fill(port: int, queue: str, bodies: list[Any]) -> None:
    """Send ``bodies`` to ``queue`` through Proton (each accepted before this returns)."""
    peer = ProtonPeer(port, max_frame_size=65_536)
    sender = peer.attach(peer.session().sender(f"fill-{uuid.uuid4()}"), queue)
    sent = [peer.send(sender, body) for body in bodies]
    peer.run_until(lambda: all(d.remote_state == Delivery.ACCEPTED for d in sent))
    peer.close()
    strict(peer)


def test_a_one_frame_window_at_512_byte_frames_delivers_every_message(port: int) -> None:
    """Three one-frame messages and one of many frames, to a receiver whose session takes
    one frame at a time (incoming-window 1) of at most 512 bytes, credit 4: all arrive
    (the window re-opened by each of Proton's flows is used, never exceeded)."""
    big = "x" * 2000
    fill(port, "small", ["m1", "m2", "m3", big])
    peer = ProtonPeer(port, max_frame_size=512)
    session = peer.session(window_bytes=512)
    receiver = peer.attach(session.receiver("small-rx"), "small")
    receiver.flow(4)
    got = peer.receive(receiver, 4)
    assert [r.message.body for r in got] == ["m1", "m2", "m3", big]
    for r in got:
        r.delivery.update(Delivery.ACCEPTED)
        r.delivery.settle()
    transfers = peer.frames_in("transfer")
    assert len(transfers) > 6  # the big one took several frames
    assert any("-> @begin" in line and "incoming-window=0x1," in line for line in peer.trace)
    peer.close()
    strict(peer)


def test_broker_annotations_have_the_types_the_dotnet_sdk_unboxes(port: int) -> None:
    """Azure.Messaging.ServiceBus casts the broker's annotations to exact .NET types
    (``(long)``, ``(DateTime)``, ``(int)``, ``(short)``, ``(string)``: a boxed value of
    another width throws); Proton keeps every AMQP type, so they are checked here."""
    peer = ProtonPeer(port, max_frame_size=65_536)
    session = peer.session()
    sender = peer.attach(session.sender("typed-tx"), "parted")
    sent = peer.send(sender, "typed", annotations={symbol("x-opt-partition-key"): "pk"})
    peer.run_until(lambda: sent.remote_state == Delivery.ACCEPTED)
    receiver = peer.attach(session.receiver("typed-rx"), "parted")
    receiver.flow(1)
    (got,) = peer.receive(receiver, 1)
    annotations = got.message.annotations
    expected = {
        "x-opt-sequence-number": int,  # a long (proton: plain int)
        "x-opt-enqueued-time": timestamp,
        "x-opt-locked-until": timestamp,
        "x-opt-message-state": int32,
        "x-opt-partition-id": short,
        "x-opt-partition-key": str,
    }
    assert {k: type(annotations[k]) for k in expected} == expected
    got.delivery.update(Delivery.ACCEPTED)
    got.delivery.settle()
    peer.close()
    strict(peer)


def test_the_largest_message_fits_the_receive_links_max_message_size(module_daemon: Any) -> None:
    """A Premium namespace takes 1 MiB messages; delivered, with the broker's annotations,
    one is larger than that: the receive link's max-message-size leaves room for it (.NET
    closes a link whose delivery exceeds the size the broker announced)."""
    module_daemon.cli("namespace", "create", "premiumns", "--sku", "premium", check=True)
    module_daemon.cli("-n", "premiumns", "queue", "create", "big", check=True)
    text = module_daemon.cli("-o", "json", "namespace", "connection-string", "premiumns").json()
    port = int(text["connection_string"].split("localhost:")[1].split(";")[0])
    peer = ProtonPeer(port, max_frame_size=65_536)
    session = peer.session()
    sender = peer.attach(session.sender("big-tx"), "big")
    sent = peer.send(sender, b"x" * (1_048_576 - 100), inferred=True)  # a data section
    peer.run_until(lambda: sent.remote_state == Delivery.ACCEPTED)
    receiver = peer.attach(session.receiver("big-rx"), "big")
    receiver.flow(1)
    (got,) = peer.receive(receiver, 1)
    assert 1_048_576 < got.size <= receiver.remote_max_message_size
    got.delivery.update(Delivery.ACCEPTED)
    got.delivery.settle()
    peer.close()
    strict(peer)


def test_settle_modes_and_drain_follow_the_links_declared_modes(port: int) -> None:
    fill(port, "modes", ["a", "b", "c"])
    peer = ProtonPeer(port)
    session = peer.session()
    # receive-and-delete: snd-settle-mode settled, every delivery arrives settled
    rad = peer.attach(session.receiver("rad"), "modes", snd=Link.SND_SETTLED)
    assert rad.remote_snd_settle_mode == Link.SND_SETTLED
    rad.flow(1)
    (first,) = peer.receive(rad, 1)
    assert first.delivery.settled and first.message.body == "a"
    # peek-lock, rcv-settle-mode first: unsettled deliveries, settled by the accept
    lock = peer.attach(session.receiver("lock"), "modes", snd=Link.SND_UNSETTLED)
    assert lock.remote_snd_settle_mode == Link.SND_UNSETTLED
    lock.flow(1)
    (second,) = peer.receive(lock, 1)
    assert not second.delivery.settled and second.message.body == "b"
    second.delivery.update(Delivery.ACCEPTED)
    second.delivery.settle()
    # drain: credit 5 with one message left: it arrives, then the credit is used up
    lock.drain(5)
    (third,) = peer.receive(lock, 1)
    peer.run_until(lambda: lock.credit == 0 and not lock.draining())
    assert third.message.body == "c"
    drained = [f for f in peer.frames_in("flow") if "drain=true" in f]
    assert drained and "link-credit=0x0" in drained[-1]
    third.delivery.update(Delivery.ACCEPTED)
    third.delivery.settle()
    # sends: unsettled ones are accepted and settled; a settled one gets no disposition
    sender = peer.attach(session.sender("tx"), "drained")
    unsettled = peer.send(sender, "u")
    peer.run_until(lambda: unsettled.remote_state == Delivery.ACCEPTED and unsettled.settled)
    before = len(peer.frames_in("disposition"))
    presettled = peer.attach(session.sender("tx-settled"), "drained", snd=Link.SND_SETTLED)
    peer.send(presettled, "s")
    peer.run_for(0.3)
    assert len(peer.frames_in("disposition")) == before
    peer.close()
    strict(peer)


def request(
    peer: ProtonPeer, sender: Link, node: str, operation: str, body: Any, **props: Any
) -> Delivery:
    message = Message(
        id=str(uuid.uuid4()),
        reply_to=f"{node}-reply",
        properties={"operation": operation, **props},
        body=body,
    )
    peer.run_until(lambda: sender.credit > 0)
    delivery = sender.delivery(str(uuid.uuid4()).encode())
    sender.send(message.encode())
    sender.advance()
    return delivery


def reply_link(peer: ProtonPeer, session: Any, node: str, snd: int) -> Link:
    receiver = session.receiver(f"{node}-reply-{snd}")
    receiver.target.address = f"{node}-reply"
    return peer.attach(receiver, node, snd=snd)


def test_cbs_and_management_replies_wait_for_credit_and_keep_the_settle_mode(
    port: int,
) -> None:
    peer = ProtonPeer(port)
    session = peer.session()
    # $cbs: a put-token with the namespace key is accepted (the reply as any other)
    cbs_tx = peer.attach(session.sender("cbs-tx"), "$cbs")
    cbs_rx = reply_link(peer, session, "$cbs", Link.SND_SETTLED)
    cbs_rx.flow(1)
    audience = "sb://localhost/mgmt"
    token = make_token(audience, DEFAULT_KEY_NAME, DEFAULT_KEY, int(time.time()) + 600)
    request(peer, cbs_tx, "$cbs", "put-token", token, type="jwt", name=audience)
    (answer,) = peer.receive(cbs_rx, 1)
    assert answer.message.properties["status-code"] == 202
    assert answer.delivery.settled  # the link asked for settled replies
    # $management on a reply link that declared unsettled and granted no credit yet
    node = "mgmt/$management"
    mgmt_tx = peer.attach(session.sender("mgmt-tx"), node)
    mgmt_rx = reply_link(peer, session, node, Link.SND_UNSETTLED)
    assert mgmt_rx.remote_snd_settle_mode == Link.SND_UNSETTLED
    peek = {"from-sequence-number": 1, "message-count": 1}
    replies = len(peer.frames_in("transfer"))
    for _ in range(2):
        request(peer, mgmt_tx, node, "com.microsoft:peek-message", peek)
    peer.run_for(0.5)
    assert len(peer.frames_in("transfer")) == replies  # no credit, no reply
    mgmt_rx.flow(1)
    (first,) = peer.receive(mgmt_rx, 1)
    peer.run_for(0.3)
    assert len(peer.frames_in("transfer")) == replies + 1  # one credit, one reply
    assert first.message.properties["statusCode"] == 204
    assert not first.delivery.settled
    first.delivery.update(Delivery.ACCEPTED)
    first.delivery.settle()
    mgmt_rx.flow(1)
    (second,) = peer.receive(mgmt_rx, 1)
    assert second.message.correlation_id != first.message.correlation_id
    peer.close()
    strict(peer)


def test_heartbeats_keep_protons_idle_time_out(port: int) -> None:
    """Proton asks for a 1 s idle time-out (it advertises half, 500 ms, and closes the
    connection when nothing arrives for 1 s): sbctl's empty frames keep it open."""
    peer = ProtonPeer(port, idle_timeout_s=1.0)
    peer.session()
    peer.run_until(lambda: peer.connection.state & Endpoint.REMOTE_ACTIVE)
    peer.run_for(1.5)
    assert peer.heartbeats_in() >= 3
    assert not peer.eof
    peer.close()
    strict(peer)


def test_end_close_and_refusal_handshakes(port: int) -> None:
    peer = ProtonPeer(port, channel_max=1)
    one, two = peer.session(), peer.session()
    receiver = peer.attach(one.receiver("ends-rx"), "ends")
    missing = peer.attach(two.receiver("missing-rx"), "no-such-queue")
    assert missing.remote_condition.name == "amqp:not-found"
    peer.run_until(lambda: missing.state & Endpoint.REMOTE_CLOSED)
    missing.close()
    receiver.close()
    peer.run_until(lambda: receiver.state & Endpoint.REMOTE_CLOSED)
    suspended = peer.attach(one.receiver("ends-suspended"), "ends")
    answered = len(peer.frames_in("detach"))
    suspended.detach()  # closed=false: answered with a detach, not a close
    peer.run_until(lambda: len(peer.frames_in("detach")) > answered)
    detaches = peer.frames_in("detach")
    assert "closed=true" in detaches[-2] and "closed=true" not in detaches[-1], detaches
    two.close()
    peer.run_until(lambda: two.state & Endpoint.REMOTE_CLOSED)
    opened = peer.frames_in("open")[0]
    assert "channel-max=0x1387" in opened  # 4999, as Service Bus
    begins = peer.frames_in("begin")
    assert all("handle-max=0x3ffff" in b for b in begins)  # 262,143
    assert {b.split(" ", 2)[1] for b in begins} <= {"0", "1"}  # within Proton's channel-max
    peer.close()
    strict(peer)


# ------------------------------------------------------------ past the negotiated maxima


class Raw:
    """Hand-built frames, for what no conforming stack sends."""

    def __init__(self, port: int, channel_max: int = 65_535) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = bytearray()
        self.sock.sendall(
            framing.PROTOCOL_AMQP
            + framing.encode_frame(0, t.Open("raw", "localhost", 65_536, channel_max))
        )

    def send(self, channel: int, performative: Any, payload: bytes = b"") -> None:
        self.sock.sendall(framing.encode_frame(channel, performative, payload))

    def parsed(self) -> list[framing.Frame]:
        out, pos = [], 8  # (after the protocol header)
        while (parsed := framing.parse_frame(self.buf, pos, 1 << 20)) is not None:
            frame, pos = parsed
            out.append(frame)
        return out

    def until(self, kind: type) -> list[framing.Frame]:
        """Every frame so far, once one of ``kind`` arrived."""
        while not any(isinstance(f.body, kind) for f in self.parsed()):
            self.buf += self.sock.recv(65_536)
        return self.parsed()

    def frames(self) -> list[framing.Frame]:
        """Every frame until the daemon closes the socket."""
        with self.sock:
            while chunk := self.sock.recv(65_536):
                self.buf += chunk
        return self.parsed()


def closed_with(frames: list[framing.Frame]) -> Any:
    closes = [f.body for f in frames if isinstance(f.body, t.Close)]
    assert closes, frames
    return closes[-1].error


@pytest.mark.parametrize("channel", [1, 65_535])
def test_a_session_past_the_channel_max_closes_the_connection(port: int, channel: int) -> None:
    raw = Raw(port, channel_max=0)
    raw.send(0, t.Begin(None, 0, 100, 100))
    raw.send(channel, t.Begin(None, 0, 100, 100))
    frames = raw.frames()
    begins = [f for f in frames if isinstance(f.body, t.Begin)]
    assert [(f.channel, f.body.remote_channel) for f in begins] == [(0, 0)]
    error = closed_with(frames)
    assert error.condition == "amqp:connection:framing-error"
    assert "channel-max" in error.description


@pytest.mark.parametrize("handles", [[262_144], [0, 1]])
def test_a_link_past_the_handle_max_closes_the_connection(port: int, handles: list[int]) -> None:
    """A handle above ours (262,143), or a second link on a session whose peer said
    handle-max 0 (we would have no handle to answer it on): framing-error."""
    raw = Raw(port)
    raw.send(0, t.Begin(None, 0, 100, 100, 0))
    for h in handles:
        raw.send(0, t.Attach(f"l{h}", h, True, 0, 0, t.Source("ends"), t.Target("x")))
    frames = raw.frames()
    attaches = [f.body for f in frames if isinstance(f.body, t.Attach)]
    assert [a.handle for a in attaches] == [0] * (len(handles) - 1)
    error = closed_with(frames)
    assert error.condition == "amqp:connection:framing-error"
    assert "handle-max" in error.description


def test_a_reply_link_without_settle_modes_gets_settled_replies(port: int) -> None:
    """An attach without snd-settle-mode asks for the default, mixed: the daemon answers
    with that mode (not unsettled) and settles its replies."""
    raw = Raw(port)
    node = "mgmt/$management"
    raw.send(0, t.Begin(None, 0, 100, 100))
    raw.send(0, t.Attach("rx", 0, True, None, None, t.Source(node), t.Target("reply")))
    raw.send(0, t.Attach("tx", 1, False, None, None, t.Source("x"), t.Target(node), None, None, 0))
    raw.send(0, t.Flow(0, 100, 0, 100, 0, 0, 10))
    request = codec.Message(
        properties=t.Properties("id-1", None, None, None, "reply"),
        application_properties={"operation": "com.microsoft:peek-message"},
        body={"from-sequence-number": 1, "message-count": 1},
        body_kind="value",
    )
    raw.send(0, t.Transfer(1, 0, b"\x00", 0, True), codec.encode_message(request))
    frames = raw.until(t.Transfer)
    raw.sock.close()
    attach = next(f.body for f in frames if isinstance(f.body, t.Attach) and f.body.role is False)
    assert attach.snd_settle_mode == 2
    reply = next(f.body for f in frames if isinstance(f.body, t.Transfer))
    assert reply.settled is True
