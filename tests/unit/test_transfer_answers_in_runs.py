"""A stored run of transfers is answered with one disposition per run of consecutive ids
(daemon/README.md §29.14): byte for byte the frames that answering each transfer on its own
makes, a settled or detached one left out as it would be alone."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sbctl.core.amqp import framing
from sbctl.core.amqp import types as t
from sbctl.core.amqp.types import Accepted, Error, Rejected, Symbol
from sbctld.frontends.amqp.connection import Connection, Delivery, Link, Session

OUTCOMES = {
    "accepted": Accepted(),
    "rejected": Rejected(Error(Symbol("amqp:not-found"), "no such entity")),
}


def _peer() -> tuple[Connection, dict[str, Link]]:
    """A connection with two sessions: links a and b on the first, c on the second, and d
    on the first with the other role."""
    conn = Connection(None)  # type: ignore[arg-type]
    one = Session(0, 0, t.Begin(None, 0, 5000, 5000))
    two = Session(1, 1, t.Begin(None, 0, 5000, 5000))
    links = {
        "a": Link(one, t.Attach("a", 0, False), 0),
        "b": Link(one, t.Attach("b", 1, False), 1),
        "c": Link(two, t.Attach("c", 0, False), 0),
        "d": Link(one, t.Attach("d", 2, True), 2),
    }
    return conn, links


UINT = 2**32
transfer = st.tuples(
    st.sampled_from("abcd"),
    # delivery ids close together, so that runs of consecutive ids are common; some at the
    # end of the uint range, where the next id is 0
    st.integers(0, 12) | st.integers(UINT - 4, UINT - 1),
    st.sampled_from(["live"] * 5 + ["settled", "detached"]),
)


@given(
    st.lists(transfer, max_size=25),
    st.sampled_from(sorted(OUTCOMES)),
    st.none() | st.tuples(st.sampled_from("abcd"), st.integers(0, 12) | st.just(UINT - 5)),
    st.booleans(),
)
def test_a_run_is_answered_as_each_transfer_alone(
    run: list[tuple[str, int, str]], outcome: str, before: tuple[str, int] | None, traced: bool
) -> None:
    state = OUTCOMES[outcome]
    outs = []
    frames = []
    for together in (True, False):
        conn, links = _peer()
        if traced:  # (frames then go through the general encoder)
            conn.trace = lambda *_: None
        if before is not None:  # an accept queued before the run, which it may extend
            conn.disposition(links[before[0]], before[1], Accepted())
        transfers = []
        for name, delivery_id, how in run:
            link = links[name]
            link.detached = how == "detached"
            transfers.append((link, Delivery(delivery_id, b"t", 0, how == "settled", None, b"")))
        if together:
            conn.settle_all(transfers, state)
        else:
            for link, delivery in transfers:
                if not (link.detached or delivery.settled):
                    conn.disposition(link, delivery.id, state)
        outs.append(bytes(conn.data_to_send()))
        frames.append(_dispositions(outs[-1]))
    assert outs[0] == outs[1]
    assert frames[0] == frames[1]


def _dispositions(data: bytes) -> list[tuple[int, Any, Any, bool]]:
    out, pos = [], 0
    while pos < len(data):
        got = framing.parse_frame(data, pos, 1 << 20)
        assert got is not None
        frame, pos = got
        d = frame.body
        assert isinstance(d, t.Disposition)
        out.append((frame.channel, d.first, d.last, bool(d.role)))
    return out


def test_consecutive_accepts_of_one_session_are_one_frame() -> None:
    conn, links = _peer()
    run = [(links["a"], i) for i in range(5, 9)] + [(links["b"], 9), (links["c"], 10)]
    conn.settle_all([(link, Delivery(i, b"t", 0, False, None, b"")) for link, i in run], Accepted())
    got = _dispositions(bytes(conn.data_to_send()))
    assert [(ch, first, last) for ch, first, last, _ in got] == [(0, 5, 9), (1, 10, None)]
