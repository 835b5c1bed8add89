"""A message appended alone is indexed as it is in a batch: expiry (TTL capped at the
largest date, none without one), state (scheduled or active), counts, enqueue time,
delivery count, length and live bytes (its CRC covers its place in the batch: not compared)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbctl.core.limits import MAX_TIME_MS
from sbctl.core.records import NOT_SCHEDULED, StagedRecord
from sbctld.storage.log import PartitionLog
from sbctld.storage.sync import Syncer

NOW = 1_767_225_600_000
RECORDS = st.lists(
    st.tuples(
        st.binary(max_size=300),
        st.sampled_from([-1, 0, 1, 60_000, MAX_TIME_MS]),  # TTL ms (-1: none)
        st.sampled_from([NOT_SCHEDULED, NOW + 5_000]),
    ),
    min_size=1,
    max_size=12,
)


def index(log: PartitionLog) -> tuple[object, ...]:
    return (
        list(log.length),
        list(log.exp),
        bytes(log.state),
        list(log.counts),
        list(log.enq),
        list(log.dc),
        log.live_bytes,
        log.next_seq,
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(RECORDS)
def test_one_by_one_indexes_as_a_batch(
    tmp_path_factory: pytest.TempPathFactory, records: list[tuple[bytes, int, int]]
) -> None:
    root = tmp_path_factory.mktemp("index")
    one, many = (PartitionLog.open(root / n, Syncer("os"), 1 << 20) for n in ("one", "many"))
    try:
        staged = [StagedRecord(body, ttl, sched) for body, ttl, sched in records]
        for rec in staged:
            one.append([rec], NOW)
        many.append(staged, NOW)
        assert index(one) == index(many)
        assert [one.read_payload(s) for s in range(one.base, one.next_seq)] == [
            body for body, _ttl, _sched in records
        ]
    finally:
        one.close()
        many.close()
