"""Deleting an entity's oldest messages in one request, without receiving them
(``com.microsoft:batch-delete-messages``, the SDKs' ``delete_messages`` /
``DeleteMessagesAsync``; daemon/README.md §29.6).

Eligible: messages of the entity itself (active or deferred; not scheduled ones) or of the
sub-queue named (``$deadletterqueue``), enqueued before the cut-off, of the session named if
any, and not locked by a receiver. The oldest go first: each partition is read in sequence
order and the partitions are merged by enqueued time, so a request costs in proportion to
what it deletes, not to what the entity holds. At most :data:`MAX_BATCH_DELETE` per request
(the Premium tier's limit; Standard allows 500).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from sbctl.core.errors import BadRequest, MessagingEntityDisabled
from sbctld.storage.journal import Entry
from sbctld.storage.log import OP_STATE, State

if TYPE_CHECKING:
    from sbctld.partition import Partition
    from sbctld.queue import Queue

MAX_BATCH_DELETE = 4000
ENTITY_STATES = (State.ACTIVE, State.DEFERRED)


def delete_oldest(
    queue: Queue, count: int, before_ms: int, subqueue: str, session_id: str | None
) -> int:
    """Delete up to ``count`` eligible messages (see the module docstring); how many were."""
    if not 1 <= count <= MAX_BATCH_DELETE:
        raise BadRequest(f"message-count must be 1 to {MAX_BATCH_DELETE}, not {count}")
    status = queue.config.status
    if status in ("Disabled", "ReceiveDisabled"):
        raise MessagingEntityDisabled(
            f"{queue.kind} {queue.config.name!r} is {status}: deletes are refused"
        )
    states = (queue.partitions[0].view(subqueue).state,) if subqueue else ENTITY_STATES
    queue.reach_all()  # every partition answers, or nothing is deleted
    oldest = heapq.merge(
        *(_eligible(queue, p, states, before_ms, session_id) for p in queue.partitions)
    )
    chosen: dict[int, list[int]] = {}
    for _enqueued, pid, seq in itertools.islice(oldest, count):
        chosen.setdefault(pid, []).append(seq)
    for p in queue.partitions:
        seqs = chosen.get(p.id)
        if seqs:
            p.record(Entry(OP_STATE, seq, State.GONE, b"") for seq in seqs)
    return sum(len(seqs) for seqs in chosen.values())


def _eligible(
    queue: Queue,
    p: Partition,
    states: tuple[State, ...],
    before_ms: int,
    session_id: str | None,
) -> Iterator[tuple[int, int, int]]:
    """(enqueued time, partition, sequence number) of ``p``'s eligible messages, in sequence
    order (which is enqueue order, but for messages that were scheduled)."""
    for seq in heapq.merge(*(p.seqs_in(st) for st in states)):
        if seq in p.locks:
            continue
        enqueued = p.enqueued_at(seq)
        if enqueued >= before_ms:
            continue
        if session_id is not None and not queue.in_session(p, seq, session_id):
            continue
        yield enqueued, p.id, seq
