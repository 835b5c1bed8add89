"""A settle request of many lock tokens settles as its tokens would one by one, in order:
the same result for each (a token named twice is settled once, then its lock is lost; a
token that is no GUID, a lost lock or a dead-lettered message dead-lettered again fail
alone) and the same messages left in each state (daemon/README.md §3.4, §3.6, §4)."""

from __future__ import annotations

import itertools
from typing import Any

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
