"""A journal batch changes a partition log's index exactly as its entries would one by one:
states, counts, live bytes, delivery counts, properties and the head (every message before
it settled), whatever the order of the entries (daemon/README.md §21.5)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core.records import NOT_SCHEDULED, StagedRecord
from sbctld.storage.journal import Entry
from sbctld.storage.log import OP_DELIVERY, OP_PROPS, OP_STATE, PartitionLog, State
from sbctld.storage.sync import Syncer

N = 30
NOW = 1_767_225_600_000
STATES = [State.GONE, State.GONE, State.DEFERRED, State.DEADLETTERED, State.ACTIVE]

entries = st.lists(
    st.tuples(
        st.sampled_from([OP_STATE, OP_STATE, OP_STATE, OP_DELIVERY, OP_PROPS]),
        st.integers(0, N + 2),  # a few past the end: never durably appended
        st.integers(0, len(STATES) - 1),
        st.booleans(),
    ),
    max_size=60,
)


def entry(first: int, op: int, k: int, pick: int, props: bool) -> Entry:
    extra = msgspec.msgpack.encode({"p": k}) if props or op == OP_PROPS else b""
    if op == OP_DELIVERY:
        return Entry(op, first + k, pick + 1, b"")
    return Entry(op, first + k, int(STATES[pick]), extra)


def view(log: PartitionLog) -> tuple[object, ...]:
    return (
        bytes(log.state),
        list(log.dc),
        dict(log.counts) if isinstance(log.counts, dict) else list(log.counts),
        log.live_bytes,
        log.head,
        {k: dict(v) for k, v in log.props.items()},
        dict(log.seg_live),
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entries, st.integers(1, 8))
def test_a_batch_applies_as_its_entries_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, changes: list[tuple[int, int, int, bool]], cut: int
) -> None:
    root: Path = tmp_path_factory.mktemp("apply")
    logs = [PartitionLog.open(root / name, Syncer("os"), 8_000) for name in ("batch", "each")]
    try:
        for log in logs:
            for at in range(0, N, 10):
                log.append(
                    [StagedRecord(bytes([i]) * 700, -1, NOT_SCHEDULED) for i in range(at, at + 10)],
                    NOW,
                )
        first = logs[0].base
        made = [entry(first, *c) for c in changes]
        batch, each = logs
        for at in range(0, len(made), cut):  # batches of ``cut`` entries
            batch.record(made[at : at + cut])
        for e in made:
            each.record([e])
        assert view(batch) == view(each)
        assert all(batch.state[s - batch.base] == State.GONE for s in range(batch.base, batch.head))
        assert batch.head == batch.next_seq or batch.state[batch.head - batch.base] != State.GONE
    finally:
        for log in logs:
            log.close()
