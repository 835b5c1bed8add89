"""A topic partition's store: every message written once, every subscription's state of it.

Issue 4 item 7: a message sent to a topic is stored once per topic, not once per
subscription. A :class:`TopicLog` is a :class:`PartitionLog` (segments, index arrays,
journal, checkpoint) whose records are the topic's messages; each subscription is a
:class:`SubLog`, a view over the same sequence numbers with its own per-message state,
delivery count and property changes. The queue code (sbctld.queue, sbctld.partition) works
on a SubLog exactly as on a queue's PartitionLog, so every lifecycle rule of a queue holds
for a subscription (daemon/README.md §10 item 2 of the issue).

What is persisted, all in the topic partition's one journal:
- ``OP_ROUTE``: which messages of a new batch a subscription received, one State byte per
  message (0: not routed). Written in the same commit round as the batch itself.
- ``OP_SUB + op``: a subscription's state change, delivery count or property change; the
  ``arg`` carries the value in its low 32 bits and the subscription id above them.
Subscription ids are never reused (the topic's config hands them out), so journal entries of
a deleted subscription are ignored on recovery.

The topic's own ``state`` is derived: SCHEDULED for a message scheduled on the topic and not
yet routed (daemon/README.md §7: it reaches the subscriptions when it activates), ACTIVE while at
least
one subscription holds the message (``refs``), GONE otherwise. So the settled prefix, segment
deletion and size accounting of PartitionLog work unchanged for the topic as a whole.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import compress
from pathlib import Path
from typing import Any

import msgspec

from sbctl.core.limits import MAX_TIME_MS
from sbctl.core.records import Indexed, StagedRecord
from sbctld.storage import journal as jnl
from sbctld.storage.files import fsync_dir
from sbctld.storage.log import (
    OP_CORRUPT,
    OP_DELIVERY,
    OP_PROPS,
    OP_STATE,
    STATE_COUNT,
    PartitionLog,
    Staged,
    State,
    StateIndex,
)
from sbctld.storage.space import StorageError
from sbctld.storage.sync import Syncer

OP_ROUTE = 10
OP_SUB = 16  # OP_SUB + OP_STATE / OP_DELIVERY / OP_PROPS
ID_SHIFT = 32
VALUE_MASK = (1 << ID_SHIFT) - 1
_ONES = bytes([0] + [1] * 255)  # bytes.translate: every live state to 1


class SubLog(StateIndex):
    """A subscription's view of one topic partition (duck-types what the queue code uses
    of a PartitionLog)."""

    def __init__(self, topic: TopicLog, sub_id: int, ttl_cap_ms: int | None) -> None:
        self.topic = topic
        self.id = sub_id
        n = len(topic.state)
        self.state = bytearray(n)
        self.dc = array("I", bytes(4 * n))
        self.props: dict[int, dict[str, Any]] = {}
        self.counts = [0] * STATE_COUNT
        self.counts[State.GONE] = n
        self.corrupt_count = 0
        self.live_bytes = 0
        self.ttl_cap_ms = ttl_cap_ms
        self.own_exp: array[int] | None = None
        self._build_exp()

    # The topic's arrays, read through (never copied).
    @property
    def base(self) -> int:  # type: ignore[override]
        return self.topic.base

    @property
    def head(self) -> int:  # type: ignore[override]
        return self.topic.head

    @property
    def next_seq(self) -> int:  # type: ignore[override]
        return self.topic.next_seq

    @property
    def enq(self) -> array[int]:
        return self.topic.enq

    @property
    def length(self) -> array[int]:
        return self.topic.length

    @property
    def exp(self) -> array[int]:
        """Expiry: the topic's, capped by this subscription's default TTL (daemon/README.md
        §1.6)."""
        return self.topic.exp if self.own_exp is None else self.own_exp

    def set_ttl_cap(self, ttl_cap_ms: int | None) -> None:
        self.ttl_cap_ms = ttl_cap_ms
        self._build_exp()

    def _build_exp(self) -> None:
        cap = self.ttl_cap_ms
        if cap is None:
            self.own_exp = None
            return
        t = self.topic
        self.own_exp = array(
            "q", [min(e, q + cap, MAX_TIME_MS) for e, q in zip(t.exp, t.enq, strict=True)]
        )

    def _extend(self, start: int, n: int) -> None:
        """Index ``n`` new topic messages from index ``start``: none of them routed here."""
        self.state.extend(bytes(n))
        self.dc.frombytes(bytes(4 * n))
        self.counts[State.GONE] += n
        if self.own_exp is not None:
            cap = self.ttl_cap_ms or 0
            t = self.topic
            self.own_exp.extend(
                min(t.exp[i], t.enq[i] + cap, MAX_TIME_MS) for i in range(start, start + n)
            )

    def _trim(self, k: int) -> None:
        del self.state[:k]
        del self.dc[:k]
        if self.own_exp is not None:
            del self.own_exp[:k]
        self.counts[State.GONE] -= k

    # What the queue code calls.
    @property
    def directory(self) -> Path:
        return self.topic.directory

    settled_segments = False  # the topic's log checkpoints for every subscription

    def read_record(self, seq: int) -> bytes:
        return self.topic.read_record(seq)

    def read_payload(self, seq: int) -> bytes:
        return self.topic.read_payload(seq)

    def read_payloads(self, seqs: Sequence[int]) -> list[bytes | None]:
        return self.topic.read_payloads(seqs)

    def record_header(self, seq: int) -> tuple[int, int]:
        return self.topic.record_header(seq)

    def discard_corrupt(self, seq: int, where: str = "") -> None:
        """The topic's record failed its CRC: gone from every subscription holding it."""
        self.topic.discard_corrupt(seq, where)

    def record(self, entries: Iterable[jnl.Entry], *, reserve: bool = True) -> None:
        tag = self.id << ID_SHIFT
        self.topic.record(
            (jnl.Entry(OP_SUB + op, seq, arg | tag, extra) for op, seq, arg, extra in entries),
            reserve=reserve,
        )

    def set_state(self, seq: int, state: State, changes: dict[str, Any] | None = None) -> None:
        extra = msgspec.msgpack.encode(changes) if changes else b""
        self.record([jnl.Entry(OP_STATE, seq, int(state), extra)])

    def append(self, records: Sequence[StagedRecord], now_ms: int) -> int:
        """Store messages for this subscription only (a resubmit, a scheduled activation)."""
        states = bytes(State.SCHEDULED if r.scheduled_ms >= 0 else State.ACTIVE for r in records)
        return self.topic.append_routed(records, now_ms, {self.id: states})

    @property
    def changes_since_checkpoint(self) -> int:
        return 0  # the topic's log checkpoints for every subscription

    def checkpoint(self) -> None:
        self.topic.checkpoint()

    def close(self) -> None:
        pass


class TopicLog(PartitionLog):
    def __init__(self, directory: Path, syncer: Syncer, segment_bytes: int) -> None:
        super().__init__(directory, syncer, segment_bytes)
        self.subs: dict[int, SubLog] = {}
        self.refs = array("H")  # how many subscriptions hold each message
        self._replaying = False

    @classmethod
    def open_topic(
        cls,
        directory: Path,
        syncer: Syncer,
        segment_bytes: int,
        subs: dict[int, int | None],
    ) -> TopicLog:
        """Open and recover a topic partition whose subscriptions are ``{id: ttl cap}``."""
        created = not directory.exists()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if created:
            fsync_dir(directory.parent)
        log = cls(directory, syncer, segment_bytes)
        for sub_id, cap in subs.items():
            log.subs[sub_id] = SubLog(log, sub_id, cap)
        log._replaying = True
        try:
            log._recover()
        finally:
            log._replaying = False
        return log

    # ---------------------------------------------------------------- subscriptions

    def add_sub(self, sub_id: int, ttl_cap_ms: int | None) -> SubLog:
        """A new subscription: it holds none of the messages already stored (daemon/README.md
        §10)."""
        sub = self.subs[sub_id] = SubLog(self, sub_id, ttl_cap_ms)
        return sub

    def remove_sub(self, sub_id: int) -> None:
        """Forget a subscription; messages only it held are dropped. Nothing to journal:
        recovery ignores the entries of an id it does not know."""
        sub = self.subs.pop(sub_id)
        self.changes_since_checkpoint += 1  # the next checkpoint may drop segments
        base = self.base
        for st in State:
            if st == State.GONE:
                continue
            for seq in sub.seqs_in(st):
                self._unref(seq - base)

    # ---------------------------------------------------------------- writing

    def append_routed(
        self,
        records: Sequence[StagedRecord],
        now_ms: int,
        routes: dict[int, bytes],
        props: Sequence[tuple[int, int, dict[str, Any]]] = (),
    ) -> int:
        """Append one batch and route it: ``routes`` maps a subscription id to one State
        byte per record (0: not routed); ``props`` adds (subscription id, index, property
        changes), e.g. dead-letter reasons. Returns the first sequence number.

        All or nothing: if the disk refuses the batch or its routes, nothing is kept.
        """
        return self.commit_routed(self.stage_routed(records, now_ms, routes, props))

    def stage_routed(
        self,
        records: Sequence[StagedRecord],
        now_ms: int,
        routes: dict[int, bytes],
        props: Sequence[tuple[int, int, dict[str, Any]]] = (),
    ) -> tuple[Staged, list[jnl.Entry], int]:
        """Write the batch and its routes, applying neither (:meth:`commit_routed`)."""
        staged = self.stage(records, now_ms)
        first = self.next_seq
        entries = [
            jnl.Entry(OP_ROUTE, first, sub_id, states)
            for sub_id, states in routes.items()
            if states.strip(b"\x00")
        ]
        for sub_id, k, changes in props:
            entries.append(
                jnl.Entry(
                    OP_SUB + OP_PROPS,
                    first + k,
                    sub_id << ID_SHIFT,
                    msgspec.msgpack.encode(changes),
                )
            )
        journal_size = self.journal.size
        if entries:
            try:
                fds = self.journal.append(entries)
            except StorageError:
                self.unstage(staged)
                raise
            self.journaled(fds)
        return staged, entries, journal_size

    def unstage_routed(self, staged: tuple[Staged, list[jnl.Entry], int]) -> None:
        """Take back a staged batch and its routes (another partition's write failed)."""
        batch, entries, journal_size = staged
        self.unstage(batch)
        if entries:
            self.journal.truncate(journal_size)

    def commit_routed(self, staged: tuple[Staged, list[jnl.Entry], int]) -> int:
        batch, entries, _size = staged
        first = self.commit(batch)
        for entry in entries:
            self._apply(entry)
        self.changes_since_checkpoint += len(entries)
        base = self.base
        for seq in range(first, first + len(batch.cols.lengths)):
            i = seq - base
            if self.refs[i] == 0 and self.state[i] == State.ACTIVE:
                self._drop(seq)  # matched no subscription: dropped (daemon/README.md §10.2)
        return first

    def _index_batch(self, now_ms: int, at: int, cols: Indexed) -> None:
        start = len(self.state)
        super()._index_batch(now_ms, at, cols)
        self._grow(start, len(cols.lengths))

    def _fill_gone(self, upto: int) -> None:
        start = len(self.state)
        super()._fill_gone(upto)
        self._grow(start, len(self.state) - start)

    def _grow(self, start: int, n: int) -> None:
        self.refs.frombytes(bytes(2 * n))
        for sub in self.subs.values():
            sub._extend(start, n)

    # ---------------------------------------------------------------- applying

    def _apply_all(self, entries: Iterable[jnl.Entry]) -> None:
        for entry in entries:
            self._apply(entry)  # (routes, subscription changes: one by one)

    def _apply(self, entry: jnl.Entry) -> None:
        op = entry.op
        seq = entry.seq
        if op == OP_CORRUPT:
            self._corrupt(seq)
            return
        if op < OP_ROUTE:
            super()._apply(entry)
            return
        if op == OP_ROUTE:
            sub = self.subs.get(entry.arg)
            if sub is not None:
                self._route(sub, seq, entry.extra)
            return
        sub = self.subs.get(entry.arg >> ID_SHIFT)
        i = seq - self.base
        if sub is None or i < 0 or seq >= self.next_seq:
            return
        value = entry.arg & VALUE_MASK
        kind = op - OP_SUB
        old = sub.state[i]
        if kind == OP_STATE:
            if old == State.GONE:
                return
            if entry.extra:
                _merge(sub.props, seq, entry.extra)
            if old == value:
                return
            sub.state[i] = value
            sub.counts[old] -= 1
            sub.counts[value] += 1
            if value == State.GONE:
                sub.live_bytes -= self.length[i]
                sub.props.pop(seq, None)
                self._unref(i)
        elif kind == OP_DELIVERY:
            sub.dc[i] = value
        elif kind == OP_PROPS and old != State.GONE:
            _merge(sub.props, seq, entry.extra)

    def _corrupt(self, seq: int) -> None:
        """A record failed its CRC: gone from every subscription, counted in each."""
        i = seq - self.base
        if i < 0 or seq >= self.next_seq:
            return
        hit = False
        for sub in self.subs.values():
            old = sub.state[i]
            if old == State.GONE:
                continue
            hit = True
            sub.corrupt_count += 1
            sub.state[i] = State.GONE
            sub.counts[old] -= 1
            sub.counts[State.GONE] += 1
            sub.live_bytes -= self.length[i]
            sub.props.pop(seq, None)
            self._unref(i)
        if hit or self.state[i] != State.GONE:
            self.corrupt_count += 1
        if self.state[i] != State.GONE:
            self._drop(seq)

    def _route(self, sub: SubLog, first: int, states: bytes) -> None:
        base = self.base
        for k, st in enumerate(states):
            if not st:
                continue
            seq = first + k
            i = seq - base
            if i < 0 or seq >= self.next_seq or sub.state[i] != State.GONE:
                continue
            if self.state[i] == State.GONE:  # lost to damage (recovery): never routed
                if any(a <= seq < b for a, b in self._holes):
                    sub.corrupt_count += 1
                continue
            sub.state[i] = st
            sub.counts[State.GONE] -= 1
            sub.counts[st] += 1
            sub.live_bytes += self.length[i]
            if self._replaying:
                if self.state[i] == State.SCHEDULED:
                    self.state[i] = State.ACTIVE  # counted again after recovery
                continue
            self.refs[i] += 1
            if self.state[i] == State.SCHEDULED:  # stored for this subscription only
                self.state[i] = State.ACTIVE
                self.counts[State.SCHEDULED] -= 1
                self.counts[State.ACTIVE] += 1

    def _unref(self, i: int) -> None:
        if self._replaying:
            return
        self.refs[i] -= 1
        if self.refs[i] == 0 and self.state[i] == State.ACTIVE:
            self._drop(self.base + i)

    def _drop(self, seq: int) -> None:
        """The topic's own state follows its subscriptions: derived, never journaled."""
        super()._apply(jnl.Entry(OP_STATE, seq, State.GONE, b""))

    # ---------------------------------------------------------------- recovery

    def _restore_extra(self, ckpt: dict[str, Any]) -> None:
        saved = ckpt.get("subs", {})
        n = len(self.state)
        for sub_id, sub in self.subs.items():
            data = saved.get(str(sub_id))
            if data is None:
                sub.state = bytearray(n)
                sub.dc = array("I", bytes(4 * n))
                continue
            sub.state = bytearray(data["state"])
            sub.corrupt_count = data.get("corrupt", 0)
            sub.dc = array("I")
            sub.dc.frombytes(data["dc"])
            sub.props = {int(k): v for k, v in data["props"].items()}

    def _checkpoint_extra(self) -> dict[str, Any]:
        return {
            "subs": {
                str(sub_id): {
                    "state": bytes(sub.state),
                    "dc": sub.dc.tobytes(),
                    "corrupt": sub.corrupt_count,
                    "props": {str(k): v for k, v in sub.props.items()},
                }
                for sub_id, sub in self.subs.items()
            }
        }

    def _lost(self, j: int) -> None:
        for sub in self.subs.values():
            if sub.state[j] != State.GONE:
                sub.state[j] = State.GONE
                sub.props.pop(self.base + j, None)

    def _rebuild_derived(self) -> None:
        """Recount every subscription and the references, then derive the topic's state."""
        n = len(self.state)
        total = 0
        for sub in self.subs.values():
            for st in State:
                sub.counts[st] = sub.state.count(st)
            sub.live_bytes = sum(compress(self.length, sub.state))
            sub._build_exp()
            wide = bytearray(2 * n)
            wide[0::2] = sub.state.translate(_ONES)
            total += int.from_bytes(wide, "little")  # lanes of 16 bits: no carries
        self.refs = array("H")
        self.refs.frombytes(total.to_bytes(2 * n, "little"))
        refs, state = self.refs, self.state
        i = state.find(b"\x01")
        while i >= 0:
            if refs[i] == 0:
                state[i] = State.GONE
                self.props.pop(self.base + i, None)
            i = state.find(b"\x01", i + 1)
        super()._rebuild_derived()

    def _trim(self) -> None:
        k = self.head - self.base
        if k > 0:
            del self.refs[:k]
            for sub in self.subs.values():
                sub._trim(k)
        super()._trim()


def _merge(props: dict[int, dict[str, Any]], seq: int, extra: bytes) -> None:
    changes = msgspec.msgpack.decode(extra)
    if isinstance(changes, dict):
        props.setdefault(seq, {}).update(changes)
