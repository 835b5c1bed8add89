"""A disposition settling a range of deliveries reaches each link with its own deliveries,
and is answered with one disposition per run of consecutive delivery ids that share an
answer (sbctld.frontends.amqp.settlement)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sbctl.core.amqp import types as t
from sbctl.core.amqp.types import Accepted, Rejected
from sbctl.core.errors import MessageLockLost, SbctlError
from sbctld.frontends.amqp.connection import Connection, Link, Session
from sbctld.frontends.amqp.settlement import answer_runs


class _Conn:
    def __init__(self) -> None:
        self.sent: list[tuple[int, int | None, Any]] = []

    def disposition(self, link: Any, first: int, state: Any, *, last: int | None = None) -> None:
        self.sent.append((first, last, state))


class _Owner:
    def __init__(self) -> None:
        self.conn = _Conn()


def _answers(sent: list[tuple[int, int | None, Any]]) -> dict[int, str]:
    """Delivery id → the answer it got (checking no id is answered twice)."""
    got: dict[int, str] = {}
    for first, last, state in sent:
        assert last is None or last > first
        for delivery_id in range(first, (first if last is None else last) + 1):
            assert delivery_id not in got
            got[delivery_id] = state.error.description if isinstance(state, Rejected) else "ok"
    return got


@given(
    st.lists(st.integers(0, 60), min_size=1, unique=True).map(sorted),
    st.data(),
)
def test_each_delivery_gets_its_answer_in_as_few_dispositions_as_runs(
    ids: list[int], data: st.DataObject
) -> None:
    failing = data.draw(st.sets(st.sampled_from(ids)))
    errors: dict[int, SbctlError] = {i: MessageLockLost(f"lost {i}") for i in failing}
    owner = _Owner()
    answer_runs(owner, None, ids, errors, Accepted())  # type: ignore[arg-type]
    got = _answers(owner.conn.sent)
    expected = {i: (f"lost {i}" if i in errors else "ok") for i in ids}
    assert got == expected
    # one disposition per maximal run of consecutive accepted ids; each failure its own
    runs = sum(
        1
        for k, i in enumerate(ids)
        if k == 0 or ids[k - 1] != i - 1 or expected[ids[k - 1]] != "ok" or expected[i] != "ok"
    )
    assert len(owner.conn.sent) == runs


def test_a_whole_range_settled_is_one_disposition() -> None:
    owner = _Owner()
    answer_runs(owner, None, list(range(100, 200)), {}, Accepted())  # type: ignore[arg-type]
    assert [(f, last) for f, last, _ in owner.conn.sent] == [(100, 199)]
    owner = _Owner()
    answer_runs(owner, None, [7], {}, Accepted())  # type: ignore[arg-type]
    assert [(f, last) for f, last, _ in owner.conn.sent] == [(7, None)]


class _Ranges:
    def __init__(self) -> None:
        self.got: list[tuple[str, list[int], bool]] = []

    def on_dispositions(self, link: Link, ids: list[int], settled: bool, state: Any) -> None:
        self.got.append((link.name, ids, settled))


@given(
    st.lists(st.sampled_from(["a", "b", "settled"]), max_size=30)
    | st.lists(st.just("b"), max_size=30),
    st.integers(-3, 33),
    st.integers(-3, 33),
    st.booleans(),
)
def test_a_peer_disposition_reaches_each_link_with_its_own_deliveries(
    owners: list[str], first: int, last: int, settled: bool
) -> None:
    handler = _Ranges()
    conn = Connection(handler)  # type: ignore[arg-type]
    session = Session(0, 0, t.Begin(None, 0, 5000, 5000))
    session.remote_incoming_window = 1000
    links = {name: Link(session, t.Attach(name, h, True), h) for h, name in enumerate("ab")}
    for owner in owners:
        link = links["a" if owner == "settled" else owner]
        conn.transfer(link, b"tag", b"payload", settled=owner == "settled")
    first, last = max(first, 0), max(last, 0)
    before = dict(session.unsettled)
    conn._on_disposition(session, t.Disposition(True, first, last, settled, t.Accepted()))
    expected: dict[str, list[int]] = {}
    for delivery_id in range(first, last + 1):
        if delivery_id in before:
            expected.setdefault(before[delivery_id].name, []).append(delivery_id)
    assert {name: ids for name, ids, _ in handler.got} == expected
    assert all(s is settled for _, _, s in handler.got)
    gone = {d for ids in expected.values() for d in ids} if settled else set()
    assert session.unsettled == {d: link for d, link in before.items() if d not in gone}


def _frames(data: bytes) -> list[Any]:
    from sbctl.core.amqp import framing

    out, pos = [], 0
    while pos < len(data):
        got = framing.parse_frame(data, pos, 1 << 20)
        assert got is not None
        frame, pos = got
        out.append(frame.body)
    return out


@given(
    st.lists(
        st.tuples(st.integers(0, 40), st.sampled_from(["accept", "reject", "unsettled", "flow"])),
        max_size=40,
    )
)
def test_accepts_queued_one_after_another_go_out_as_ranges(
    steps: list[tuple[int, str]],
) -> None:
    """Settled accepts of consecutive deliveries, queued one after another, leave as one
    disposition per run; every delivery gets exactly the answer it was given."""
    conn = Connection(_Ranges())  # type: ignore[arg-type]
    session = Session(0, 0, t.Begin(None, 0, 5000, 5000))
    link = Link(session, t.Attach("in", 0, True), 0)
    given_answers: list[tuple[int, str]] = []
    for delivery_id, kind in steps:
        if kind == "flow":
            conn._emit(0, t.Flow(0, 100, 0, 100))  # another frame in between
            given_answers.append((-1, "flow"))
            continue
        state = t.Rejected(t.Error(t.Symbol("x"))) if kind == "reject" else Accepted()
        conn.disposition(link, delivery_id, state, settled=kind != "unsettled")
        given_answers.append((delivery_id, kind))
    sent = _frames(conn.data_to_send())
    got: list[tuple[int, str]] = []
    for body in sent:
        if isinstance(body, t.Flow):
            got.append((-1, "flow"))
            continue
        last = body.first if body.last is None else body.last
        assert last >= body.first
        if body.last is not None and last > body.first:  # only a run of settled accepts
            assert body.settled and isinstance(body.state, t.Accepted)
        kind = (
            "reject"
            if isinstance(body.state, t.Rejected)
            else ("accept" if body.settled else "unsettled")
        )
        got += [(d, kind) for d in range(int(body.first), int(last) + 1)]
    assert got == given_answers
    runs = sum(
        1
        for k, (d, kind) in enumerate(given_answers)
        if not (k > 0 and kind == "accept" and given_answers[k - 1] == (d - 1, "accept"))
    )
    assert len(sent) == runs


def test_a_commit_round_accepts_consecutive_transfers_in_one_frame() -> None:
    conn = Connection(_Ranges())  # type: ignore[arg-type]
    session = Session(0, 0, t.Begin(None, 0, 5000, 5000))
    link = Link(session, t.Attach("in", 0, True), 0)
    for delivery_id in range(10, 110):
        conn.disposition(link, delivery_id, Accepted())
    (only,) = _frames(conn.data_to_send())
    assert (only.first, only.last, only.settled) == (10, 109, True)
    conn.disposition(link, 110, Accepted())  # after a write: a frame of its own
    (alone,) = _frames(conn.data_to_send())
    assert (alone.first, alone.last) == (110, None)
