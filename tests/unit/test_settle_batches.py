"""A settle request of many lock tokens settles as its tokens would one by one, in order:
the same result for each (a token named twice is settled once, then its lock is lost; a
token that is no GUID, a lost lock or a dead-lettered message dead-lettered again fail
alone) and the same messages left in each state (daemon/README.md §3.4, §3.6, §4)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE as NS
from sbctld.broker import Broker

N = 12
OPS = ["complete", "abandon", "defer", "dead-letter", "renew-lock"]
# A token: a received message (by index), an unknown GUID or a string that is no GUID.
TOKENS = st.one_of(
    st.integers(0, N - 1),
    st.sampled_from(["00000000-0000-0000-0000-000000000000", "not-a-token", ""]),
)
NAMES = itertools.count()
BATCHES = st.lists(st.tuples(st.sampled_from(OPS), st.lists(TOKENS, max_size=8)), max_size=6)


def codes(results: list[Any]) -> list[str]:
    return [type(r).__name__ + ":" + type(getattr(r, "error", None)).__name__ for r in results]


def left(b: Broker, queue: str) -> tuple[list[int], ...]:
    def seqs(subqueue: str | None) -> list[int]:
        path = queue if subqueue is None else f"{queue}/$deadletterqueue"
        return sorted(d.sequence_number for d in b.messaging.peek(NS, path, 100, None))

    return seqs(None), seqs("dlq")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(BATCHES, st.booleans())
def test_a_batch_settles_as_its_tokens_one_by_one(
    twins: tuple[Broker, Broker], batches: list[tuple[str, list[int | str]]], partitioned: bool
) -> None:
    queue = f"q{next(NAMES)}"
    tokens: dict[Broker, list[str]] = {}
    for b in twins:
        b.management.queue_create(NS, queue, {"enable_partitioning": partitioned})
        b.messaging.send(NS, queue, [Message(b"m", message_id=str(i)) for i in range(N)])
        got = b.messaging.receive(NS, queue, N, "peek-lock")
        got.sort(key=lambda d: d.sequence_number)
        tokens[b] = [d.lock_token for d in got]  # type: ignore[misc]
    batch, each = twins
    for op, picks in batches:
        if op == "dead-letter":  # once more, some already dead-lettered: refused alone
            picks = picks + picks

        def named(b: Broker, picks: list[int | str] = picks) -> list[str]:
            return [tokens[b][p] if isinstance(p, int) else p for p in picks]

        kw: dict[str, Any] = {"reason": "r"} if op == "dead-letter" else {}
        together = batch.messaging.settle(NS, queue, op, named(batch), **kw)
        alone = [r for t in named(each) for r in each.messaging.settle(NS, queue, op, [t], **kw)]
        assert codes(together) == codes(alone)
    assert left(batch, queue) == left(each, queue)


@pytest.mark.parametrize("op", ["abandon", "complete", "defer"])
def test_a_session_message_named_twice_fails_the_second_time_as_alone(
    twins: tuple[Broker, Broker], op: str
) -> None:
    results = []
    for k, b in enumerate(twins):
        b.management.queue_create(NS, "sq", {"requires_session": True})
        b.messaging.send(NS, "sq", [Message(b"%d" % i, session_id="s") for i in range(2)])
        held = b.messaging.session_accept(NS, "sq", "s")
        lock = held["session_lock_token"] if isinstance(held, dict) else held.session_lock_token
        token = b.messaging.receive(NS, "sq", 2, "peek-lock", lock)[0].lock_token
        assert token is not None
        if k == 0:
            results.append(codes(b.messaging.settle(NS, "sq", op, [token, token])))
        else:
            alone = [b.messaging.settle(NS, "sq", op, [token])[0] for _ in range(2)]
            results.append(codes(alone))
    assert results[0] == results[1]
    assert results[0][0] == "Settled:NoneType"


def test_a_batch_gives_each_token_its_own_answer(twins: tuple[Broker, Broker]) -> None:
    b = twins[0]
    b.management.queue_create(NS, "q", {})
    b.messaging.send(NS, "q", [Message(b"a"), Message(b"b")])
    t1, t2 = (d.lock_token for d in b.messaging.receive(NS, "q", 2, "peek-lock"))
    got = b.messaging.settle(NS, "q", "complete", [t1, t1, "not-a-guid", t2])  # type: ignore[list-item]
    assert codes(got) == [
        "Settled:NoneType",
        "SettleFailed:MessageLockLost",
        "SettleFailed:BadRequest",
        "Settled:NoneType",
    ]
    assert b.messaging.peek(NS, "q", 10, None) == []
