"""A namespace: its settings, its queues and topics, its credit meter, its limits.

Rule 1: a namespace holds state and answers questions about it; the broker changes it.
"""

from __future__ import annotations

from pathlib import Path

from msgspec import UNSET

from sbctl.core.errors import (
    BadRequest,
)
from sbctl.core.limits import (
    MAX_ENTITIES,
    PREMIUM_ENTITIES_PER_UNIT,
    PREMIUM_MESSAGE_BYTES,
    STANDARD_MESSAGE_BYTES,
)
from sbctl.core.partitioning import STANDARD_PARTITION_COUNT
from sbctld.config import (
    NamespaceConfig,
    QueueConfig,
)
from sbctld.credits import (
    CreditMeter,
)
from sbctld.queue import Queue
from sbctld.results import Credits, NamespaceInfo
from sbctld.topic import (
    Topic,
)

DEFAULT_NAMESPACE = "sbemulatorns"  # the name Microsoft's emulator uses


def check_throttling(credits_per_second: int, ops_per_unit: int) -> None:
    if credits_per_second < 0:
        raise BadRequest("credits_per_second must not be negative (0: unlimited)")
    if ops_per_unit < 1:
        raise BadRequest("ops_per_unit must be at least 1")


def check_mode(mode: str) -> None:
    if mode not in ("peek-lock", "receive-and-delete"):
        raise BadRequest(f"receive mode {mode!r} is not peek-lock or receive-and-delete")


class Namespace:
    def __init__(self, directory: Path, config: NamespaceConfig) -> None:
        self.directory = directory
        self.config = config
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self.meter = CreditMeter(self.credit_limit, premium=self.premium)
        # How far the namespace's time is ahead of the clock (daemon/README.md §31).
        self.offset_ms: int = config.clock_offset_ms or 0

    @property
    def credit_limit(self) -> int:
        """Per-second budget: credits (Basic/Standard) or premium units' operations."""
        if self.premium:
            return self.config.capacity * self.config.ops_per_unit
        return self.config.credits_per_second

    def charge(self, kind: str, cost: int, now: int) -> None:
        self.meter.charge(kind, cost, now)

    def credits(self, now: int) -> Credits:
        cfg = self.config
        premium = self.premium
        return Credits(
            namespace=cfg.name,
            sku=cfg.sku,
            credits_per_second=None if premium else cfg.credits_per_second,
            capacity=cfg.capacity if premium else UNSET,
            ops_per_unit=cfg.ops_per_unit if premium else UNSET,
            ops_per_second=self.credit_limit if premium else UNSET,
            **self.meter.snapshot(now),
        )

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def premium(self) -> bool:
        return self.config.sku == "premium"

    @property
    def entity_count(self) -> int:
        return len(self.queues) + len(self.topics)

    def entities(self) -> list[Queue]:
        """Every queue, topic and subscription (for housekeeping)."""
        out: list[Queue] = [*self.queues.values()]
        for topic in self.topics.values():
            out.append(topic)
            out.extend(topic.subscriptions.values())
        return out

    @property
    def max_entities(self) -> int:
        """daemon/README.md §14: 10,000 queues and topics; on Premium 1,000 per messaging unit."""
        if self.premium:
            return min(MAX_ENTITIES, PREMIUM_ENTITIES_PER_UNIT * self.config.capacity)
        return MAX_ENTITIES

    @property
    def max_message_bytes(self) -> int:
        return PREMIUM_MESSAGE_BYTES if self.premium else STANDARD_MESSAGE_BYTES

    @property
    def partitioned_count(self) -> int:
        return sum(q.partitioned for q in self.queues.values()) + sum(
            t.partitioned for t in self.topics.values()
        )

    def partition_count(self, cfg: QueueConfig) -> int:
        """daemon/README.md §0.1.2: 16 on Basic/Standard when asked; Premium partitions
        everything."""
        if self.premium:
            return self.config.premium_messaging_partitions
        return STANDARD_PARTITION_COUNT if cfg.enable_partitioning else 1

    def describe(self) -> NamespaceInfo:
        cfg = self.config
        return NamespaceInfo(
            name=cfg.name,
            sku=cfg.sku,
            premium_messaging_partitions=cfg.premium_messaging_partitions,
            capacity=cfg.capacity if self.premium else None,
            credits_per_second=None if self.premium else cfg.credits_per_second,
            ops_per_unit=cfg.ops_per_unit if self.premium else None,
            created_at_ms=cfg.created_at_ms,
            queue_count=len(self.queues),
            topic_count=len(self.topics),
            partitioned_entity_count=self.partitioned_count,
            max_message_size_in_kilobytes=self.max_message_bytes // 1024,
            clock_offset_ms=self.offset_ms or UNSET,
        )
