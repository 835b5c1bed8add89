"""Fault injection: partition stores made unavailable or slow on purpose (test tooling).

daemon/README.md §0.1.1, §0.1.5, §0.1.6 and §0.1.10 say what a partitioned entity does while some of
its partition stores are unavailable; this module only knows *which* stores suffer what.

A :class:`Fault` covers every store of a namespace (present and future entities), every
store of one queue or topic, or some partitions of it. A topic's subscriptions live in the
topic's stores (sbctld.topic), so they share its faults. Kinds:

- ``unavailable``: the store answers nothing; touching it raises ServiceCommunicationProblem
  (transient, daemon/README.md §16.2), which the client retries;
- ``slow``: the store answers after ``latency_ms``; the server delays the reply.

The :class:`FaultRegistry` folds the faults covering one store into one :class:`StoreFault`
(unavailable wins over slow; the largest latency wins among slow ones) and hangs it on the
store's :class:`~sbctld.partition.Partition` objects (``Partition.fault``), flagging their
entity (``Queue.faulty``). With no faults the data plane pays one attribute check per
request, and nothing here runs.

Faults live in memory only: a daemon restart clears them (a restarted daemon is a
recovered store), and deleting their namespace or entity drops them. Adding and clearing
one is written to the daemon log through the broker's ``report``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from sbctl.core.durations import format_duration_iso
from sbctl.core.errors import ServiceCommunicationProblem
from sbctl.core.names import entity_key
from sbctld.results import FaultInfo

KINDS = ("unavailable", "slow")
MAX_LATENCY_MS = 3_600_000  # daemon/README.md §16.4: an SDK's try timeout is at most 1 h
ENTITY_UNAVAILABLE = (
    "Unknown"  # daemon/README.md §0.1.10; Azure's EntityAvailabilityStatus has no "Unavailable"
)


@dataclass(frozen=True)
class Fault:
    id: str
    namespace: str
    kind: str
    created_at_ms: int
    entity: str | None = None  # a queue or topic name; None: the whole namespace
    entity_kind: str | None = None  # "queue" or "topic"
    partitions: tuple[int, ...] = ()  # empty: every partition
    latency_ms: int = 0

    @property
    def ns_key(self) -> str:
        return entity_key(self.namespace)

    @property
    def entity_key(self) -> str | None:
        return None if self.entity is None else entity_key(self.entity)

    def covers(self, ns_key: str, key: str | None, pid: int | None = None) -> bool:
        """Does this fault cover partition ``pid`` (None: some partition) of ``key``
        (None: the namespace as such)?"""
        if ns_key != self.ns_key:
            return False
        if self.entity is None:
            return True
        if key != self.entity_key:
            return False
        return pid is None or not self.partitions or pid in self.partitions

    def scope(self) -> str:
        """The stores it covers, for people: ``partitions 3, 5 of queue ns/orders``."""
        if self.entity is None:
            return f"every store of namespace {self.namespace}"
        where = f"{self.entity_kind} {self.namespace}/{self.entity}"
        if not self.partitions:
            return f"every partition of {where}"
        label = "partition" if len(self.partitions) == 1 else "partitions"
        return f"{label} {', '.join(map(str, self.partitions))} of {where}"

    def what(self) -> str:
        if self.kind == "slow":
            return f"slow ({format_duration_iso(self.latency_ms)})"
        return self.kind

    def describe(self) -> FaultInfo:
        return FaultInfo(
            id=self.id,
            namespace=self.namespace,
            entity=self.entity,
            entity_kind=self.entity_kind,
            partitions=list(self.partitions) or None,
            kind=self.kind,
            latency_ms=self.latency_ms if self.kind == "slow" else None,
            created_at_ms=self.created_at_ms,
        )


class StoreFault:
    """What one partition store suffers now. Shared by every Partition object over that
    store (a topic's and its subscriptions')."""

    __slots__ = ("down", "entity", "fault_ids", "latency_ms", "pid", "registry")

    def __init__(
        self,
        registry: FaultRegistry,
        entity: str,
        pid: int | None,
        down: bool,
        latency_ms: int,
        fault_ids: tuple[str, ...],
    ) -> None:
        self.registry = registry
        self.entity = entity  # "queue 'orders'"
        self.pid = pid  # None: the one store of a plain entity
        self.down = down
        self.latency_ms = 0 if down else latency_ms
        self.fault_ids = fault_ids

    def touch(self) -> None:
        """An operation reaches this store: raise if it is unavailable, else note its
        latency for the reply."""
        if self.down:
            raise self.error()
        if self.latency_ms > self.registry.delay_ms:
            self.registry.delay_ms = self.latency_ms

    def reachable(self) -> bool:
        """Like :meth:`touch`, but False instead of raising (to skip the store)."""
        if self.down:
            return False
        self.touch()
        return True

    def error(self) -> ServiceCommunicationProblem:
        where = "the store" if self.pid is None else f"partition {self.pid}"
        return ServiceCommunicationProblem(
            f"{where} of {self.entity} is unavailable (injected fault {', '.join(self.fault_ids)})"
        )


class Store(Protocol):
    """A partition store as faults see it (:class:`sbctld.partition.Partition` is one)."""

    fault: StoreFault | None


class Entity(Protocol):
    """A queue, topic or subscription as faults see it (:class:`sbctld.queue.Queue` is
    one): this module flags entities without importing them."""

    faulty: bool

    @property
    def key(self) -> tuple[str, str]: ...

    @property
    def name(self) -> str: ...

    @property
    def partitions(self) -> Sequence[Store]: ...


def all_down(queue: Entity) -> ServiceCommunicationProblem:
    """The error of an entity none of whose stores is available."""
    faults = [p.fault for p in queue.partitions if p.fault is not None]
    if len(queue.partitions) == 1:
        return faults[0].error()
    ids = sorted({i for f in faults for i in f.fault_ids}, key=lambda i: int(i[1:]))
    return ServiceCommunicationProblem(
        f"every partition of {faults[0].entity} is unavailable (injected fault {', '.join(ids)})"
    )


class FaultRegistry:
    """Every fault of the daemon, by id (``f1``, ``f2``, ... in the order added)."""

    def __init__(self, report: Callable[[str], None]) -> None:
        self.report = report
        self.faults: dict[str, Fault] = {}
        self.delay_ms = 0  # the largest latency touched since the server last took it
        self._next_id = 1

    def new_id(self) -> str:
        fid = f"f{self._next_id}"
        self._next_id += 1
        return fid

    def add(self, fault: Fault) -> None:
        self.faults[fault.id] = fault
        self.report(f"fault {fault.id} added: {fault.scope()} {fault.what()}")

    def remove(self, faults: Iterable[Fault], why: str = "cleared") -> list[Fault]:
        gone = []
        for fault in faults:
            if self.faults.pop(fault.id, None) is not None:
                gone.append(fault)
                self.report(f"fault {fault.id} {why} (was: {fault.scope()} {fault.what()})")
        return gone

    def in_namespace(self, ns_key: str) -> list[Fault]:
        return [f for f in self.faults.values() if f.ns_key == ns_key]

    def namespace_down(self, ns_key: str) -> Fault | None:
        """A namespace-wide unavailable fault: nothing can be created there."""
        for f in self.faults.values():
            if f.entity is None and f.kind == "unavailable" and f.ns_key == ns_key:
                return f
        return None

    def take_delay(self) -> int:
        delay, self.delay_ms = self.delay_ms, 0
        return delay

    def store_fault(
        self, ns_key: str, key: str, pid: int, entity: str, partitioned: bool
    ) -> StoreFault | None:
        """The faults covering one store, folded; None when it is healthy."""
        covering = [f for f in self.faults.values() if f.covers(ns_key, key, pid)]
        if not covering:
            return None
        at = pid if partitioned else None
        down = [f for f in covering if f.kind == "unavailable"]
        if down:
            return StoreFault(self, entity, at, True, 0, tuple(f.id for f in down))
        latency = max(f.latency_ms for f in covering)
        return StoreFault(self, entity, at, False, latency, tuple(f.id for f in covering))

    def apply(self, entity: Entity, kind: str, shared: Iterable[Entity] = ()) -> None:
        """Hang the current faults on ``entity``'s partitions and on those of the
        entities in ``shared`` (a topic's subscriptions, which live in its stores)."""
        ns_key, key = entity.key
        n = len(entity.partitions)
        others = list(shared)
        faulty = False
        label = f"{kind} {entity.name!r}"
        for pid, p in enumerate(entity.partitions):
            fault = self.store_fault(ns_key, key, pid, label, n > 1) if self.faults else None
            p.fault = fault
            for other in others:
                other.partitions[pid].fault = fault
            faulty = faulty or fault is not None
        for q in (entity, *others):
            q.faulty = faulty
