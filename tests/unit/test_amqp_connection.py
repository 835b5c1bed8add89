"""The sans-IO AMQP connection, driven with bytes and checked on the bytes it answers:
no sockets, no clock."""

from __future__ import annotations

from typing import Any

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from sbctld.frontends.amqp.connection import RECEIVER, SENDER, Connection, Delivery, Link

SASL_MECHANISMS_FRAME = (
    # size 0x33, doff 2, type 1 (SASL), channel 0; sasl-mechanisms (0x40): a list8 of
    # one field, an array8 (size 0x23, 3 items) of sym32: MSSBCBS, PLAIN, ANONYMOUS.
    "0000003302010000"
    "005340"
    "c02601"
    "e02303b3"
    "000000074d535342434253"
    "00000005504c41494e" + "00000009414e4f4e594d4f5553"
)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.links: list[Link] = []

    def on_attach(self, link: Link) -> None:
        self.links.append(link)
        self.events.append(("attach", link.name))

    def on_transfer(self, link: Link, delivery: Delivery) -> None:
        self.events.append(("transfer", delivery.payload))

    def on_flow(self, link: Link) -> None:
        self.events.append(("flow", link.credit))

    def on_disposition(self, link: Link, delivery_id: int, settled: bool, state: Any) -> None:
        self.events.append(("disposition", (delivery_id, settled, type(state).__name__)))

    def on_detach(self, link: Link, error: Any) -> None:
        self.events.append(("detach", link.name))


def frames(raw: bytes) -> list[Any]:
    out = []
    pos = 0
    while pos < len(raw):
        if raw[pos : pos + 4] == b"AMQP":
            out.append(raw[pos : pos + 8])
            pos += 8
            continue
        got = framing.parse_frame(raw, pos, 1 << 24)
        assert got is not None, "truncated frame in the output"
        frame, pos = got
        out.append(frame)
    return out


def f(channel: int, perf: t.Composite, payload: bytes = b"") -> bytes:
    return framing.encode_frame(channel, perf, payload)


def opened(idle: int | None = None, max_frame: int = 1 << 20) -> tuple[Connection, Recorder]:
    rec = Recorder()
    conn = Connection(rec)
    conn.receive_data(
        framing.PROTOCOL_AMQP
        + f(0, t.Open("client", "localhost", max_frame, 65535, idle))
        + f(1, t.Begin(None, 0, 65536, 65536, 2**32 - 1))
    )
    conn.data_to_send()
    return conn, rec


def attach(conn: Connection, rec: Recorder, role: bool, address: str, snd: int = 0) -> Link:
    source = t.Source(address) if role == RECEIVER else t.Source("client-src")
    target = t.Target(address) if role == SENDER else t.Target("client-tgt")
    conn.receive_data(f(1, t.Attach("L" + address, 1, role, snd, 1, source, target, None, None, 0)))
    return rec.links[-1]


def test_sasl_advertises_mssbcbs_plain_anonymous_and_accepts() -> None:
    conn = Connection(Recorder())
    conn.receive_data(framing.PROTOCOL_SASL)
    out = conn.data_to_send()
    assert out.hex() == framing.PROTOCOL_SASL.hex() + SASL_MECHANISMS_FRAME
    conn.receive_data(
        framing.encode_frame(0, t.SaslInit("MSSBCBS", b"", "localhost"), kind=framing.SASL_FRAME)
    )
    # sasl-outcome code 0 (ok) with a null additional-data field.
    assert conn.data_to_send().hex() == "0000001102010000" + "005344" + "c004025000" + "40"
    conn.receive_data(framing.PROTOCOL_AMQP)
    assert conn.data_to_send() == framing.PROTOCOL_AMQP


def test_an_unknown_mechanism_fails_sasl() -> None:
    conn = Connection(Recorder())
    conn.receive_data(
        framing.PROTOCOL_SASL
        + framing.encode_frame(0, t.SaslInit("SCRAM-SHA-1"), kind=framing.SASL_FRAME)
    )
    out = frames(conn.data_to_send())
    assert out[-1].body.code == 1 and conn.closed


def test_pipelined_open_begin_attach_are_answered_in_order() -> None:
    rec = Recorder()
    conn = Connection(rec)
    conn.receive_data(
        framing.PROTOCOL_AMQP
        + f(0, t.Open("client", "localhost", 1 << 20))
        + f(1, t.Begin(None, 0, 65536, 65536, 2**32 - 1))
        + f(1, t.Attach("snd", 1, SENDER, 0, 1, t.Source("s"), t.Target("q"), None, None, 0))
    )
    assert rec.events == [("attach", "snd")]
    link = rec.links[0]
    conn.attach(link, source=link.source, target=link.target, max_message_size=262144)
    conn.grant(link, 1000)
    out = frames(conn.data_to_send())
    assert out[0] == framing.PROTOCOL_AMQP
    assert [type(x.body).__name__ for x in out[1:]] == ["Open", "Begin", "Attach", "Flow"]
    op, begin, att, flow = (x.body for x in out[1:])
    assert op.max_frame_size == 1 << 20 and op.idle_time_out == 240_000
    assert begin.remote_channel == 1 and out[2].channel == 0
    assert att.role is RECEIVER and att.handle == 0 and att.target.address == "q"
    assert att.max_message_size == 262144
    assert flow.handle == 0 and flow.link_credit == 1000 and flow.delivery_count == 0


def test_heartbeats_at_half_the_peer_idle_timeout() -> None:
    conn, _ = opened(idle=1000)
    assert conn.heartbeat_interval == 0.5
    conn.tick(0.0)
    conn.data_to_send()
    conn.last_sent = 10.0
    conn.tick(10.2)
    assert conn.data_to_send() == b""
    conn.tick(10.25)  # ticked every 0.25 s, no silence reaches 0.5 s
    assert conn.data_to_send() == bytes.fromhex("0000000802000000")


def test_no_heartbeats_without_a_peer_idle_timeout() -> None:
    conn, _ = opened(idle=None)
    conn.tick(1e9)
    assert conn.heartbeat_interval is None and conn.data_to_send() == b""


def test_multi_frame_transfers_are_joined_and_credit_topped_up() -> None:
    conn, rec = opened()
    link = attach(conn, rec, SENDER, "q")
    conn.attach(link, source=link.source, target=link.target)
    conn.grant(link, 4)
    conn.data_to_send()
    payload = bytes(range(256)) * 10
    first = t.Transfer(1, 0, b"\x00\x00\x00\x00", 0, False, True)
    conn.receive_data(
        f(1, first, payload[:1000])
        + f(1, t.Transfer(1, None, None, None, None, True), payload[1000:2000])
    )
    assert rec.events[-1][0] == "attach"
    conn.receive_data(f(1, t.Transfer(1, None, None, None, None, False), payload[2000:]))
    assert rec.events[-1] == ("transfer", payload)
    for i in range(1, 3):
        conn.receive_data(f(1, t.Transfer(1, i, b"x", 0, False, False), b"m"))
    # 4 granted, 3 used: below half, so the link is topped up to 4 again.
    flows = [x.body for x in frames(conn.data_to_send()) if isinstance(x.body, t.Flow)]
    assert flows and flows[-1].link_credit == 4 and flows[-1].delivery_count == 3


def test_outgoing_transfers_follow_credit_and_the_peer_frame_size() -> None:
    conn, rec = opened(max_frame=512)
    link = attach(conn, rec, RECEIVER, "q")
    conn.attach(link, source=link.source, target=link.target)
    conn.data_to_send()
    conn.receive_data(f(1, t.Flow(0, 65536, 0, 65536, 1, 0, 2)))
    assert rec.events[-1] == ("flow", 2) and link.credit == 2
    payload = b"z" * 2000
    delivery_id = conn.transfer(link, b"tag", payload, settled=False)
    out = frames(conn.data_to_send())
    assert len(out) == 5 and all(x.body.handle == 0 for x in out)
    assert [bool(x.body.more) for x in out] == [True] * 4 + [False]
    assert b"".join(x.payload for x in out) == payload
    assert link.credit == 1 and link.delivery_count == 1
    conn.receive_data(f(1, t.Disposition(RECEIVER, delivery_id, None, True, t.Accepted())))
    assert rec.events[-1] == ("disposition", (delivery_id, True, "Accepted"))


def test_delivery_ids_count_deliveries_and_transfer_ids_count_frames() -> None:
    # A message split over 5 frames is one delivery: the next message takes the next
    # delivery id (proton-j, under the Java SDK, fails the session on a gap), while the
    # session window counts every frame.
    conn, rec = opened(max_frame=512)
    link = attach(conn, rec, RECEIVER, "q")
    conn.attach(link, source=link.source, target=link.target)
    conn.data_to_send()
    conn.receive_data(f(1, t.Flow(0, 65536, 0, 65536, 1, 0, 3)))
    first = conn.transfer(link, b"a", b"z" * 2000, settled=False)
    second = conn.transfer(link, b"b", b"small", settled=False)
    out = frames(conn.data_to_send())
    assert second == first + 1
    assert [x.body.delivery_id for x in out] == [first] * 5 + [second]
    assert link.session.next_outgoing_id == 6
    conn.receive_data(f(1, t.Disposition(RECEIVER, first, second, True, t.Accepted())))
    assert [e for e in rec.events if e[0] == "disposition"] == [
        ("disposition", (first, True, "Accepted")),
        ("disposition", (second, True, "Accepted")),
    ]


def test_drain_uses_up_the_credit_and_answers_drain() -> None:
    conn, rec = opened()
    link = attach(conn, rec, RECEIVER, "q")
    conn.attach(link, source=link.source, target=link.target)
    conn.receive_data(f(1, t.Flow(0, 65536, 0, 65536, 1, 0, 5, None, True)))
    assert link.drain
    conn.data_to_send()
    conn.drained(link)
    (flow,) = [x.body for x in frames(conn.data_to_send())]
    assert flow.drain is True and flow.link_credit == 0 and flow.delivery_count == 5


def test_the_peer_session_window_holds_frames_back() -> None:
    conn, rec = opened()
    link = attach(conn, rec, RECEIVER, "q")
    conn.attach(link, source=link.source, target=link.target)
    conn.receive_data(f(1, t.Flow(0, 1, 0, 65536, 1, 0, 10)))
    conn.data_to_send()
    conn.transfer(link, b"1", b"a", settled=True)
    conn.transfer(link, b"2", b"b", settled=True)
    assert [x.payload for x in frames(conn.data_to_send())] == [b"a"]
    conn.receive_data(f(1, t.Flow(1, 10, 0, 65536)))
    assert [x.payload for x in frames(conn.data_to_send())] == [b"b"]


def test_refused_attach_has_a_null_terminus_then_a_detach_with_the_error() -> None:
    conn, rec = opened()
    link = attach(conn, rec, SENDER, "missing")
    conn.refuse(link, "amqp:not-found", "queue 'missing' does not exist")
    att, det = (x.body for x in frames(conn.data_to_send()))
    assert isinstance(att, t.Attach) and att.target is None and att.source is not None
    assert isinstance(det, t.Detach) and det.closed is True
    assert det.error.condition == "amqp:not-found"


def test_peer_detach_end_and_close_are_answered_and_reported() -> None:
    conn, rec = opened()
    attach(conn, rec, SENDER, "a")
    conn.data_to_send()
    conn.receive_data(f(1, t.Detach(1, True)))
    assert rec.events[-1] == ("detach", "La")
    assert isinstance(frames(conn.data_to_send())[0].body, t.Detach)
    attach(conn, rec, SENDER, "b")
    conn.receive_data(f(1, t.End()) + f(0, t.Close()))
    assert rec.events[-1] == ("detach", "Lb")
    assert [type(x.body).__name__ for x in frames(conn.data_to_send())] == ["End", "Close"]
    assert conn.closed


def test_a_frame_before_open_closes_with_an_error() -> None:
    conn = Connection(Recorder())
    conn.receive_data(framing.PROTOCOL_AMQP + f(0, t.Begin(None, 0, 1, 1)))
    out = frames(conn.data_to_send())
    assert isinstance(out[-1].body, t.Close) and out[-1].body.error.condition == "amqp:not-allowed"
    assert conn.closed


def test_an_unknown_protocol_header_is_answered_with_ours_and_closed() -> None:
    conn = Connection(Recorder())
    conn.receive_data(b"HTTP/1.1")
    assert conn.data_to_send() == framing.PROTOCOL_SASL and conn.closed


def test_garbage_frames_close_with_a_decode_error() -> None:
    conn, _ = opened()
    conn.receive_data(bytes.fromhex("0000000a02000000ff00"))  # (0xff: no such type code)
    out = frames(conn.data_to_send())
    assert out[-1].body.error.condition == "amqp:decode-error"


def _anything() -> Any:
    from hypothesis import strategies as st

    junk = st.one_of(
        st.none(), st.booleans(), st.integers(-5, 2**33), st.text(max_size=5),
        st.binary(max_size=5), st.lists(st.integers(0, 3), max_size=3),
    )  # fmt: skip
    return st.lists(
        st.tuples(
            st.sampled_from(list(t.COMPOSITES.values())),
            st.lists(junk, max_size=14),
            st.integers(0, 3),
            st.binary(max_size=20),
        ),
        max_size=12,
    )


def test_any_sequence_of_frames_with_any_field_values_never_escapes() -> None:
    from hypothesis import given, settings

    @settings(max_examples=300, deadline=None)
    @given(_anything())
    def run(frames_in: list[Any]) -> None:
        rec = Recorder()
        conn = Connection(rec)
        data = framing.PROTOCOL_AMQP + f(0, t.Open("c", None, 4096))
        data += f(0, t.Begin(None, 0, 10, 10))
        data += f(0, t.Attach("l", 0, SENDER, 0, 0, t.Source("s"), t.Target("q")))
        for cls, fields, channel, payload in frames_in:
            # Raw described lists: the fields go on the wire untyped, as a broken peer's.
            body = codec.encode(t.Described(t.ULong(cls.CODE), fields)) + payload
            data += framing.FRAME_HEADER.pack(8 + len(body), 2, 0, channel) + body
        conn.receive_data(data)  # must not raise, whatever the frames hold
        conn.data_to_send()
        for link in rec.links:  # and the application side keeps working
            if not link.detached and not conn.closed:
                conn.grant(link, 10)

    run()


def test_a_detach_straggling_after_end_is_ignored() -> None:
    conn, rec = opened()
    attach(conn, rec, SENDER, "a")
    conn.receive_data(f(1, t.End()))
    conn.data_to_send()
    conn.receive_data(f(1, t.Detach(1, False)))  # pyamqp does this when closing
    assert conn.data_to_send() == b"" and not conn.closed
    conn.receive_data(f(7, t.Detach(1, False)))  # a channel that never had a session
    assert conn.closed
