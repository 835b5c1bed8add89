"""What the broker does on its own: recovery at start-up, timers (locks, schedules, idle
deletion), checkpoints, spark-load adoption, injected faults, shutdown and statistics.

Rule 1: time comes only from the injected clock; :meth:`Housekeeping.tick` visits only
queues with something due.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sbctl.core import layout
from sbctl.core.durations import format_duration_iso
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessagingEntityNotFound,
)
from sbctl.core.names import (
    entity_key,
    parse_entity_path,
    validate_entity_name,
)
from sbctld import loads
from sbctld.broker.core import BrokerState
from sbctld.broker.namespace import (
    Namespace,
)
from sbctld.config import (
    NamespaceConfig,
    QueueConfig,
    TopicConfig,
    load_toml,
)
from sbctld.faults import KINDS, MAX_LATENCY_MS, Fault
from sbctld.queue import Queue
from sbctld.results import FaultInfo, FaultsCleared
from sbctld.storage.files import exists_verified
from sbctld.storage.space import StorageError
from sbctld.topic import (
    Topic,
)

IDLE_CHECK_MS = 1000


class Housekeeping:
    """What the broker does on its own (see the module docstring), over its state."""

    def __init__(self, state: BrokerState) -> None:
        self.state = state
        self._idle_check_ms = 0  # the next time tick() looks for idle entities

    def recover(self) -> None:
        """Open every namespace and entity the data dir holds (at start-up), then checkpoint
        what their recovery replayed."""
        self._load()
        self._checkpoint_recovered()

    def _checkpoint_recovered(self) -> None:
        """Checkpoint every store whose recovery replayed anything (restart time stays
        flat across crashes: the next start does not redo it)."""
        for ns in self.state.namespaces.values():
            for queue in [*ns.queues.values(), *ns.topics.values()]:
                for p in queue.partitions:
                    for note in p.checkpoint_recovered():
                        self.state.report(note)

    def _load(self) -> None:
        for ns_dir in self.state.folders(self.state.root):
            desc = layout.namespace_file(ns_dir)
            if not exists_verified(desc):
                continue
            ns = Namespace(ns_dir, load_toml(desc, NamespaceConfig))
            self.state.namespaces[entity_key(ns.name)] = ns
            self._load_topics(ns, layout.topics_dir(ns_dir))
            queues = layout.queues_dir(ns_dir)
            if not queues.exists():
                continue
            for q_dir in self.state.folders(queues):
                if not exists_verified(layout.queue_file(q_dir)):
                    continue  # an interrupted create or delete: nothing was acknowledged
                cfg = load_toml(layout.queue_file(q_dir), QueueConfig)
                notes: list[str] = []
                loads.recover(q_dir, notes.append)  # spark-load adoptions that never committed
                queue = Queue.open(
                    q_dir,
                    cfg,
                    ns.partition_count(cfg),
                    self.state.syncer,
                    max_message_bytes=ns.max_message_bytes,
                    segment_bytes=self.state.segment_bytes,
                    notes=notes,
                    now=self.state.time_of(ns),
                )
                for note in notes:
                    self.state.report(f"recovery: {ns.name}/{cfg.name}: {note}")
                queue.key = (entity_key(ns.name), entity_key(cfg.name))
                ns.queues[entity_key(cfg.name)] = queue
                self.state.note_scheduled(entity_key(ns.name), entity_key(cfg.name), queue)

    def _load_topics(self, ns: Namespace, parent: Path) -> None:
        if not parent.exists():
            return
        for t_dir in self.state.folders(parent):
            if not exists_verified(layout.topic_file(t_dir)):
                continue
            cfg = load_toml(layout.topic_file(t_dir), TopicConfig)
            notes: list[str] = []
            topic = Topic.open_topic(
                t_dir,
                cfg,
                ns.partition_count(cfg),
                self.state.syncer,
                max_message_bytes=ns.max_message_bytes,
                segment_bytes=self.state.segment_bytes,
                notes=notes,
                now=self.state.time_of(ns),
                folders=self.state.folders,
                key=(entity_key(ns.name), entity_key(cfg.name)),
            )
            for note in notes:
                self.state.report(f"recovery: {ns.name}/{cfg.name}: {note}")
            ns.topics[entity_key(cfg.name)] = topic
            self.state.note_scheduled(*topic.key, topic)

    def load_adopt(
        self, namespace: str, path: str, load_id: str, files: Sequence[tuple[int, str]]
    ) -> dict[str, Any]:
        """Adopt a spark-load's staged batches atomically, in one call (sbctld.loads;
        daemon/README.md §0.4.6). The daemon checks them off the loop instead
        (:meth:`load_queue`,
        ``loads.check``, ``loads.commit``, :meth:`load_adopted`)."""
        queue = self.load_queue(namespace, path, files)
        now = self.state.now_in(queue.key[0])
        return self.load_adopted(queue, loads.adopt(queue, load_id, files, now))

    def load_queue(self, namespace: str, path: str, files: Sequence[tuple[int, str]]) -> Queue:
        """The queue a load goes to, every partition it touches available."""
        queue, dlq = self.state.reader(namespace, path)
        if dlq:
            raise InvalidOperation("messages cannot be loaded into a dead-letter queue")
        if queue.faulty:
            for pid in {pid for pid, _path in files if 0 <= pid < len(queue.partitions)}:
                fault = queue.partitions[pid].fault
                if fault is not None:
                    fault.touch()  # all or nothing: no partition may be unavailable
        return queue

    def load_adopted(self, queue: Queue, result: dict[str, Any]) -> dict[str, Any]:
        if queue.scheduled_pending:
            self.state.note_scheduled(*queue.key, queue)
        return result

    def load_status(self, namespace: str, path: str, load_id: str) -> dict[str, Any]:
        return loads.status(self.state.reader(namespace, path)[0], load_id)

    def fault_add(
        self,
        namespace: str,
        entity: str | None = None,
        partitions: Sequence[int] = (),
        kind: str = "unavailable",
        latency_ms: int | None = None,
    ) -> FaultInfo:
        """Make stores of a namespace unavailable or slow: every one, one queue's or
        topic's, or some partitions of it (test tooling, beyond Azure)."""
        ns = self.state.namespace(namespace)
        if kind not in KINDS:
            raise BadRequest(f"fault kind {kind!r} is not one of {', '.join(KINDS)}")
        if kind == "slow":
            if latency_ms is None:
                raise BadRequest("a slow fault needs a latency")
            if not 0 < latency_ms <= MAX_LATENCY_MS:
                raise BadRequest("a slow fault's latency must be above 0 and at most 1 hour")
        elif latency_ms is not None:
            raise BadRequest("only a slow fault takes a latency")
        target: Queue | None = None
        entity_kind = None
        if entity is None:
            if partitions:
                raise BadRequest("partitions need an entity: name a queue or topic")
        else:
            target, entity_kind = self._fault_target(ns, entity)
            count = len(target.partitions)
            for pid in partitions:
                if not 0 <= pid < count:
                    raise BadRequest(
                        f"partition {pid} is not a partition of {entity_kind} "
                        f"{target.name!r} (it has {count}: 0-{count - 1})"
                    )
        fault = Fault(
            id=self.state.faults.new_id(),
            namespace=ns.name,
            kind=kind,
            created_at_ms=self.state.time_of(ns),
            entity=None if target is None else target.name,
            entity_kind=entity_kind,
            partitions=tuple(sorted(set(partitions))),
            latency_ms=latency_ms or 0,
        )
        self.state.faults.add(fault)
        self._apply_faults(ns)
        return fault.describe()

    def _fault_target(self, ns: Namespace, entity: str) -> tuple[Queue, str]:
        """The queue or topic a fault names (a subscription or DLQ lives in its stores)."""
        parsed = parse_entity_path(entity)
        if parsed.subscription is not None or parsed.subqueue:
            owner = "topic" if parsed.subscription is not None else "entity"
            raise BadRequest(
                f"{entity!r} lives in the stores of {parsed.entity!r}: fault that {owner}"
            )
        key = entity_key(parsed.entity)
        if key in ns.queues:
            return ns.queues[key], "queue"
        if key in ns.topics:
            return ns.topics[key], "topic"
        validate_entity_name(parsed.entity)
        raise MessagingEntityNotFound(
            f"queue or topic {entity!r} does not exist in namespace {ns.name!r}"
        )

    def fault_list(self, namespace: str | None = None) -> list[FaultInfo]:
        """The faults of one namespace (None: of every namespace), oldest first."""
        faults = list(self.state.faults.faults.values())
        if namespace is not None:
            ns_key = entity_key(self.state.namespace(namespace).name)
            faults = [f for f in faults if f.ns_key == ns_key]
        return [f.describe() for f in faults]

    def fault_clear(
        self,
        namespace: str | None = None,
        ids: Sequence[str] = (),
        all_namespaces: bool = False,
    ) -> FaultsCleared:
        """Clear faults by id, every fault of ``namespace``, or every fault. The stores
        answer again with everything they held (nothing was changed while they were down)."""
        if ids and all_namespaces:
            raise BadRequest("clear some faults by id or every fault, not both")
        if ids:
            wanted = list(dict.fromkeys(i.lower() for i in ids))
            unknown = [i for i in wanted if i not in self.state.faults.faults]
            if unknown:
                raise MessagingEntityNotFound(
                    f"no fault {unknown[0]!r} (`sbctl fault list --all` shows them)"
                )
            chosen = [self.state.faults.faults[i] for i in wanted]
        elif all_namespaces:
            chosen = list(self.state.faults.faults.values())
        elif namespace is not None:
            chosen = self.state.faults.in_namespace(
                entity_key(self.state.namespace(namespace).name)
            )
        else:
            raise BadRequest("say which faults to clear: ids, a namespace, or all of them")
        cleared = self.state.faults.remove(chosen)
        for ns_key in dict.fromkeys(f.ns_key for f in cleared):
            ns = self.state.namespaces.get(ns_key)
            if ns is not None:
                self._apply_faults(ns)
                self._revisit(ns)
        return FaultsCleared(cleared=[f.describe() for f in cleared])

    def _apply_faults(self, ns: Namespace) -> None:
        for queue in ns.queues.values():
            self.state.faults.apply(queue, "queue")
        for topic in ns.topics.values():
            self.state.faults.apply(topic, "topic", topic.subscriptions.values())

    def _revisit(self, ns: Namespace) -> None:
        """After stores came back: run their timers (locks, schedules) and forwarding."""
        now = self.state.clock.now_ms()
        for entity in ns.entities():
            heapq.heappush(self.state.due, (now, *entity.key))

    def tick(self) -> list[tuple[str, str]]:
        """Run what time makes due; returns (namespace, queue) keys with new messages."""
        now = self.state.clock.now_ms()
        if now >= self._idle_check_ms:
            self._idle_check_ms = now + IDLE_CHECK_MS
            for ns in list(self.state.namespaces.values()):
                self.state.delete_idle(ns, now + ns.offset_ms)
        due: set[tuple[str, str]] = set()
        while self.state.due and self.state.due[0][0] <= now:
            _deadline, ns_key, q_key = heapq.heappop(self.state.due)
            due.add((ns_key, q_key))
        woke = []
        for ns_key, q_key in due:
            queue = self._by_key(ns_key, q_key)
            if queue is not None and self.state.run_timers(queue, self.state.now_in(ns_key)):
                woke.append((ns_key, q_key))
        if self.state.paired:
            woke += self.state.pairings.tick(now)  # pings, the syphon, fault propagation
        return woke

    def _by_key(self, ns_key: str, key: str) -> Queue | None:
        """The queue, topic or subscription with this key (``Queue.key[1]``)."""
        ns = self.state.namespaces.get(ns_key)
        if ns is None:
            return None
        found: Queue | None = ns.queues.get(key) or ns.topics.get(key)
        if found is None and "/subscriptions/" in key:
            topic_key, sub_key = key.rsplit("/subscriptions/", 1)
            topic = ns.topics.get(topic_key)
            found = topic.subscriptions.get(sub_key) if topic else None
        return found

    def checkpoint(self, *, min_changes: int = 1) -> int:
        """Checkpoint every partition with at least ``min_changes`` changes; returns how many.

        On a full disk (the settlement reserve spent), and for ``min_changes`` 1, every
        partition with any change or a settled segment is checkpointed, which deletes the
        segments settled at its previous checkpoint and frees their space.
        """
        done = 0
        full = self.state.syncer.reserve.full
        for ns in self.state.namespaces.values():
            for queue in [*ns.queues.values(), *ns.topics.values()]:
                for p in queue.partitions:
                    if p.checkpoint_due(min_changes, full):
                        try:
                            p.checkpoint()
                        except StorageError as exc:
                            self.state.report(f"checkpoint of {p.directory} not written: {exc}")
                            continue
                        done += 1
        return done

    def close(self) -> None:
        self.state.pairings.close()
        try:
            self.checkpoint()
        except StorageError as exc:  # the journals still hold it all
            self.state.report(f"final checkpoint not written: {exc}")
        for ns in self.state.namespaces.values():
            for queue in [*ns.queues.values(), *ns.topics.values()]:
                queue.close()
        self.state.syncer.sync_now()

    def stats(self) -> dict[str, Any]:
        queues = [
            q
            for ns in self.state.namespaces.values()
            for q in [*ns.queues.values(), *ns.topics.values()]
        ]
        travelled = {ns.name: ns.offset_ms for ns in self.state.namespaces.values() if ns.offset_ms}
        return {
            "namespaces": len(self.state.namespaces),
            "entities": len(queues),
            "partitions": sum(len(q.partitions) for q in queues),
            "messages": sum(p.message_count for q in queues for p in q.partitions),
            # time travel (daemon/README.md §31): namespaces whose time is ahead, by how much
            **({"clock_offsets": _offsets(travelled)} if travelled else {}),
        }


def _offsets(travelled: dict[str, int]) -> dict[str, str]:
    return {name: format_duration_iso(ms) for name, ms in travelled.items()}
