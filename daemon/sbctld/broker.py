"""The broker: namespaces and their entities, and every operation the API exposes.

Pure and synchronous (daemon/README.md §27): it reads time only from the injected clock, writes
only through partition logs and TOML descriptions, and never touches sockets. The server
awaits the group commit before acknowledging anything the broker wrote.

Data-dir layout::

    <data>/namespaces/<ns>/namespace.toml
    <data>/namespaces/<ns>/queues/<entity dir>/queue.toml
    <data>/namespaces/<ns>/queues/<entity dir>/p00 … p15/   (partition stores)
    <data>/namespaces/<ns>/topics/<entity dir>/topic.toml
    <data>/namespaces/<ns>/topics/<entity dir>/p00 … p15/   (topic stores, sbctld.storage.topic)
    <data>/namespaces/<ns>/topics/<entity dir>/subscriptions/<sub>/subscription.toml, rules.json
"""

from __future__ import annotations

import heapq
import json
import os
import shutil
import uuid
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from sbctl.codec import Message, decode_message
from sbctl.durations import format_instant
from sbctl.errors import (
    BadRequest,
    InvalidOperation,
    MessagingEntityAlreadyExists,
    MessagingEntityNotFound,
    QuotaExceeded,
    SbctlError,
    ServiceCommunicationProblem,
)
from sbctl.limits import (
    MAX_CORRELATION_FILTERS,
    MAX_ENTITIES,
    MAX_PARTITIONED,
    MAX_SQL_FILTERS,
    MAX_SUBSCRIPTIONS,
    MAX_TRANSFER_HOPS,
    PREMIUM_ENTITIES_PER_UNIT,
    PREMIUM_MESSAGE_BYTES,
    STANDARD_MESSAGE_BYTES,
)
from sbctl.names import (
    entity_dir_name,
    entity_key,
    parse_entity_path,
    validate_entity_name,
    validate_namespace_name,
    validate_rule_name,
    validate_subscription_name,
)
from sbctl.partitioning import STANDARD_PARTITION_COUNT
from sbctl.protocol import MAX_PEEK, MAX_RECEIVE, Delivered
from sbctld import loads
from sbctld.clock import Clock
from sbctld.config import (
    SKUS,
    NamespaceConfig,
    QueueConfig,
    SubscriptionConfig,
    TopicConfig,
    check_queue,
    load_toml,
    merge_options,
    save_toml,
)
from sbctld.credits import (
    DATA_COST,
    DEFAULT_CREDITS_PER_SECOND,
    DEFAULT_OPS_PER_UNIT,
    MANAGEMENT_COST,
    CreditMeter,
)
from sbctld.faults import KINDS, MAX_LATENCY_MS, Fault, FaultRegistry
from sbctld.paired import PairedNamespaces
from sbctld.partition import Partition
from sbctld.queue import DESCRIPTION, Queue
from sbctld.storage.files import exists_verified, fsync_dir, write_atomic
from sbctld.storage.log import DEFAULT_SEGMENT_BYTES, PartitionLog, State
from sbctld.storage.space import RESERVE_NAME, CorruptRecord, Reserve, StorageError
from sbctld.storage.sync import Syncer
from sbctld.topic import (
    DEFAULT_RULE,
    RULES_FILE,
    SUBSCRIPTION_DESCRIPTION,
    SUBSCRIPTIONS_DIR,
    TOPIC_DESCRIPTION,
    Rule,
    Subscription,
    Topic,
)

DEFAULT_NAMESPACE = "sbemulatorns"  # the name Microsoft's emulator uses
NAMESPACE_FILE = "namespace.toml"
# Folders being created or deleted. '@' is in no namespace or entity name (daemon/README.md
# §14.8-9),
# so such a folder is never mistaken for an entity; start-up removes any left behind.
WORK_PREFIX = "@"
RESOLVE_CACHE = 4096
IDLE_CHECK_MS = 1000


def _check_throttling(credits_per_second: int, ops_per_unit: int) -> None:
    if credits_per_second < 0:
        raise BadRequest("credits_per_second must not be negative (0: unlimited)")
    if ops_per_unit < 1:
        raise BadRequest("ops_per_unit must be at least 1")


def _check_mode(mode: str) -> None:
    if mode not in ("peek-lock", "receive-and-delete"):
        raise BadRequest(f"receive mode {mode!r} is not peek-lock or receive-and-delete")


class Namespace:
    def __init__(self, directory: Path, config: NamespaceConfig) -> None:
        self.directory = directory
        self.config = config
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}
        self.meter = CreditMeter(self.credit_limit, premium=self.premium)

    @property
    def credit_limit(self) -> int:
        """Per-second budget: credits (Basic/Standard) or premium units' operations."""
        if self.premium:
            return self.config.capacity * self.config.ops_per_unit
        return self.config.credits_per_second

    def charge(self, kind: str, cost: int, now: int) -> None:
        self.meter.charge(kind, cost, now)

    def credits(self, now: int) -> dict[str, Any]:
        cfg = self.config
        out: dict[str, Any] = {
            "namespace": cfg.name,
            "sku": cfg.sku,
            "credits_per_second": None if self.premium else cfg.credits_per_second,
        }
        if self.premium:
            out |= {
                "capacity": cfg.capacity,
                "ops_per_unit": cfg.ops_per_unit,
                "ops_per_second": self.credit_limit,
            }
        return out | self.meter.snapshot(now)

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

    def describe(self) -> dict[str, Any]:
        cfg = self.config
        return {
            "name": cfg.name,
            "sku": cfg.sku,
            "premium_messaging_partitions": cfg.premium_messaging_partitions,
            "capacity": cfg.capacity if self.premium else None,
            "credits_per_second": None if self.premium else cfg.credits_per_second,
            "ops_per_unit": cfg.ops_per_unit if self.premium else None,
            "created_at_utc": format_instant(cfg.created_at_ms),
            "queue_count": len(self.queues),
            "topic_count": len(self.topics),
            "partitioned_entity_count": self.partitioned_count,
            "max_message_size_in_kilobytes": self.max_message_bytes // 1024,
        }


class Broker:
    def __init__(
        self,
        data_dir: Path,
        clock: Clock,
        syncer: Syncer,
        *,
        report: Callable[[str], None] = lambda _msg: None,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        default_credits_per_second: int = DEFAULT_CREDITS_PER_SECOND,
    ) -> None:
        self.data_dir = data_dir
        self.root = data_dir / "namespaces"
        self.clock = clock
        self.syncer = syncer
        self.report = report
        self.faults = FaultRegistry(report)  # injected store faults (sbctld.faults)
        self.segment_bytes = segment_bytes
        if default_credits_per_second < 0:
            raise BadRequest("default credits per second must not be negative")
        self.default_credits_per_second = default_credits_per_second
        self.namespaces: dict[str, Namespace] = {}
        # (deadline, namespace key, queue key): when some lock of that queue may run out,
        # so that tick() visits only queues with something due, not every partition.
        self._due: list[tuple[int, str, str]] = []
        self._resolved: dict[tuple[str, str], tuple[Queue, str]] = {}  # cleared on deletes
        self._touched: set[tuple[str, str]] = set()
        self._idle_check_ms = 0
        # Paired namespaces (sbctld.paired): ``paired`` maps a primary's key to its
        # pairing; empty, it costs every send one truthiness check.
        self.pairings = PairedNamespaces(self)
        self.paired = self.pairings.by_primary
        first_start = not self.root.exists()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Space kept for settling on a full disk (sbctld.storage.space).
        syncer.reserve = Reserve(data_dir / RESERVE_NAME)
        syncer.reserve.ensure()
        self._load()
        self._checkpoint_recovered()
        if first_start:
            self.namespace_create(DEFAULT_NAMESPACE, "standard")
        self.pairings.load()

    # ------------------------------------------------------------ loading

    def _folders(self, parent: Path) -> list[Path]:
        """Entity folders of ``parent``; leftovers of interrupted creates/deletes removed."""
        out = []
        for p in sorted(parent.iterdir()):
            if p.name.startswith(WORK_PREFIX):
                shutil.rmtree(p, ignore_errors=True)
            elif p.is_dir():
                out.append(p)
        return out

    def _checkpoint_recovered(self) -> None:
        """Checkpoint every store whose recovery replayed anything (restart time stays
        flat across crashes: the next start does not redo it)."""
        for ns in self.namespaces.values():
            for queue in [*ns.queues.values(), *ns.topics.values()]:
                for p in queue.partitions:
                    log = p.log
                    if isinstance(log, PartitionLog):
                        log.checkpoint_recovered()
                        for note in log.notes[-1:] if log.notes else ():
                            if "not checkpointed" in note:
                                self.report(note)

    def _load(self) -> None:
        for ns_dir in self._folders(self.root):
            desc = ns_dir / NAMESPACE_FILE
            if not exists_verified(desc):
                continue
            ns = Namespace(ns_dir, load_toml(desc, NamespaceConfig))
            self.namespaces[entity_key(ns.name)] = ns
            self._load_topics(ns, ns_dir / "topics")
            queues = ns_dir / "queues"
            if not queues.exists():
                continue
            for q_dir in self._folders(queues):
                if not exists_verified(q_dir / DESCRIPTION):
                    continue  # an interrupted create or delete: nothing was acknowledged
                cfg = load_toml(q_dir / DESCRIPTION, QueueConfig)
                notes: list[str] = []
                loads.recover(q_dir, notes.append)  # spark-load adoptions that never committed
                queue = Queue.open(
                    q_dir,
                    cfg,
                    ns.partition_count(cfg),
                    self.syncer,
                    max_message_bytes=ns.max_message_bytes,
                    segment_bytes=self.segment_bytes,
                    notes=notes,
                    now=self.clock.now_ms(),
                )
                for note in notes:
                    self.report(f"recovery: {ns.name}/{cfg.name}: {note}")
                queue.key = (entity_key(ns.name), entity_key(cfg.name))
                ns.queues[entity_key(cfg.name)] = queue
                self._note_scheduled(entity_key(ns.name), entity_key(cfg.name), queue)

    def _load_topics(self, ns: Namespace, parent: Path) -> None:
        if not parent.exists():
            return
        for t_dir in self._folders(parent):
            if not exists_verified(t_dir / TOPIC_DESCRIPTION):
                continue
            cfg = load_toml(t_dir / TOPIC_DESCRIPTION, TopicConfig)
            notes: list[str] = []
            topic = Topic.open_topic(
                t_dir,
                cfg,
                ns.partition_count(cfg),
                self.syncer,
                max_message_bytes=ns.max_message_bytes,
                segment_bytes=self.segment_bytes,
                notes=notes,
                now=self.clock.now_ms(),
                folders=self._folders,
                key=(entity_key(ns.name), entity_key(cfg.name)),
            )
            for note in notes:
                self.report(f"recovery: {ns.name}/{cfg.name}: {note}")
            ns.topics[entity_key(cfg.name)] = topic
            self._note_scheduled(*topic.key, topic)

    # ------------------------------------------------------------ namespaces

    def namespace(self, name: str) -> Namespace:
        ns = self.namespaces.get(entity_key(name))
        if ns is None:
            raise MessagingEntityNotFound(f"namespace {name!r} does not exist")
        return ns

    def namespace_create(
        self,
        name: str,
        sku: str = "standard",
        partitions: int = 1,
        capacity: int = 1,
        credits_per_second: int | None = None,
        ops_per_unit: int | None = None,
    ) -> dict[str, Any]:
        validate_namespace_name(name)
        sku = sku.lower()
        if sku not in SKUS:
            raise BadRequest(f"sku {sku!r} is not one of basic, standard, premium")
        if partitions not in (1, 2, 4):
            raise BadRequest("premium_messaging_partitions must be 1, 2 or 4")
        if sku != "premium" and partitions != 1:
            # daemon/README.md §0.1.2: namespace partitions are a Premium setting.
            raise InvalidOperation("premium_messaging_partitions needs the premium sku")
        if capacity not in (1, 2, 4, 8, 16):
            raise BadRequest("capacity must be 1, 2, 4, 8 or 16 messaging units")
        if credits_per_second is None:
            credits_per_second = self.default_credits_per_second
        if ops_per_unit is None:
            ops_per_unit = DEFAULT_OPS_PER_UNIT
        _check_throttling(credits_per_second, ops_per_unit)
        key = entity_key(name)
        if key in self.namespaces:
            raise MessagingEntityAlreadyExists(f"namespace {name!r} already exists")
        cfg = NamespaceConfig(
            name=name,
            sku=sku,
            premium_messaging_partitions=partitions,
            capacity=capacity,
            credits_per_second=credits_per_second,
            ops_per_unit=ops_per_unit,
            created_at_ms=self.clock.now_ms(),
        )
        directory = self.root / key
        tmp = self.root / f"{WORK_PREFIX}tmp-{uuid.uuid4().hex}"
        tmp.mkdir(mode=0o700)
        save_toml(tmp / NAMESPACE_FILE, cfg)
        os.rename(tmp, directory)
        fsync_dir(self.root)
        ns = Namespace(directory, cfg)
        self.namespaces[key] = ns
        return ns.describe()

    def namespace_get(self, name: str) -> dict[str, Any]:
        return self.namespace(name).describe()

    def namespace_update(
        self,
        name: str,
        credits_per_second: int | None = None,
        capacity: int | None = None,
        ops_per_unit: int | None = None,
    ) -> dict[str, Any]:
        """Change a namespace's throttling at runtime (credits; premium units scale)."""
        ns = self.namespace(name)
        cfg = ns.config
        if capacity is not None:
            if capacity not in (1, 2, 4, 8, 16):
                raise BadRequest("capacity must be 1, 2, 4, 8 or 16 messaging units")
            if not ns.premium:
                raise InvalidOperation("capacity (messaging units) needs the premium sku")
            held = ns.entity_count
            if held > PREMIUM_ENTITIES_PER_UNIT * capacity:
                raise QuotaExceeded(
                    f"namespace {ns.name!r} holds {held} entities, more than {capacity} "
                    "messaging units allow"
                )
        if credits_per_second is not None and ns.premium:
            raise InvalidOperation("premium namespaces have no credits: scale them with capacity")
        new = msgspec.structs.replace(
            cfg,
            credits_per_second=cfg.credits_per_second
            if credits_per_second is None
            else credits_per_second,
            capacity=cfg.capacity if capacity is None else capacity,
            ops_per_unit=cfg.ops_per_unit if ops_per_unit is None else ops_per_unit,
        )
        _check_throttling(new.credits_per_second, new.ops_per_unit)
        save_toml(ns.directory / NAMESPACE_FILE, new)
        ns.config = new
        ns.meter.limit = ns.credit_limit
        return ns.describe()

    def namespace_credits(self, name: str) -> dict[str, Any]:
        """Throttling state: budget, what is left of this period, consumption by kind."""
        return self.namespace(name).credits(self.clock.now_ms())

    def namespace_list(self) -> list[dict[str, Any]]:
        return [ns.describe() for ns in self.namespaces.values()]

    def namespace_delete(self, name: str) -> dict[str, Any]:
        ns = self.namespace(name)
        self._reach_namespace(ns)
        for entity in [*ns.queues.values(), *ns.topics.values()]:
            entity.reach_all()  # daemon/README.md §0.1.10: deleting needs every store
        for queue in [*ns.queues.values(), *ns.topics.values()]:
            queue.close()
        self._remove_dir(ns.directory)
        del self.namespaces[entity_key(name)]
        self._resolved.clear()
        self._drop_faults(entity_key(name), None, "its namespace was deleted")
        if self.paired:
            self.pairings.namespace_deleted(entity_key(name), self.clock.now_ms())
        return {"deleted": ns.name}

    def _remove_dir(self, directory: Path) -> None:
        """Rename first (atomic), then delete: a crash never leaves half an entity."""
        trash = directory.with_name(f"{WORK_PREFIX}deleted-{uuid.uuid4().hex}")
        os.rename(directory, trash)
        fsync_dir(directory.parent)
        shutil.rmtree(trash, ignore_errors=True)

    # ------------------------------------------------------------ queues

    def queue(self, namespace: str, name: str) -> Queue:
        ns = self.namespace(namespace)
        queue = ns.queues.get(entity_key(name))
        if queue is None:
            validate_entity_name(name)
            raise MessagingEntityNotFound(f"queue {name!r} does not exist in namespace {ns.name!r}")
        return queue

    def _manage(self, namespace: str) -> Namespace:
        """A management operation (daemon/README.md §0.2.1): charged 10 before anything happens."""
        ns = self.namespace(namespace)
        ns.charge("management", MANAGEMENT_COST, self.clock.now_ms())
        return ns

    def queue_create(self, namespace: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
        ns = self._manage(namespace)
        key = self._new_entity_key(ns, name, "queue")
        now = self.clock.now_ms()
        cfg = merge_options(QueueConfig(name=name), options, creating=True)
        partitions = self._check_new_entity(ns, cfg, options)
        self._reach_namespace(ns)
        cfg.created_at_ms = cfg.updated_at_ms = now
        parent = ns.directory / "queues"
        directory = self._make_dir(parent, name, {DESCRIPTION: cfg})
        queue = Queue.open(
            directory,
            cfg,
            partitions,
            self.syncer,
            max_message_bytes=ns.max_message_bytes,
            segment_bytes=self.segment_bytes,
            notes=[],
            now=now,
        )
        queue.key = (entity_key(ns.name), key)
        ns.queues[key] = queue
        if self.faults.faults:
            self.faults.apply(queue, "queue")  # a namespace-wide slow fault covers it
        return queue.describe()

    def _new_entity_key(self, ns: Namespace, name: str, kind: str) -> str:
        """A queue or topic name that is free: names are one space (daemon/README.md §14.9)."""
        validate_entity_name(name, kind)
        key = entity_key(name)
        if key in ns.queues or key in ns.topics:
            other = "queue" if key in ns.queues else "topic"
            raise MessagingEntityAlreadyExists(
                f"{other} {name!r} already exists in namespace {ns.name!r}"
            )
        return key

    def _make_dir(self, parent: Path, name: str, files: dict[str, Any]) -> Path:
        """Create an entity folder with its description files, atomically."""
        parent.mkdir(mode=0o700, exist_ok=True)
        directory = parent / entity_dir_name(name)
        if directory.exists():  # leftovers of a create that never completed
            shutil.rmtree(directory)
        tmp = parent / f"{WORK_PREFIX}tmp-{uuid.uuid4().hex}"
        tmp.mkdir(mode=0o700)
        for file_name, content in files.items():
            if isinstance(content, bytes):
                write_atomic(tmp / file_name, content)  # synced, with its seal
            else:
                save_toml(tmp / file_name, content)
        os.rename(tmp, directory)
        fsync_dir(parent)
        return directory

    def _check_new_entity(self, ns: Namespace, cfg: QueueConfig, options: dict[str, Any]) -> int:
        """Tier, range, forwarding and quota checks of a new queue or topic; returns its
        partition count."""
        if ns.premium:
            if cfg.enable_partitioning and ns.config.premium_messaging_partitions == 1:
                raise InvalidOperation(
                    "premium namespaces do not partition entities one by one; create the "
                    "namespace with --premium-messaging-partitions 2 or 4"
                )
            cfg.enable_partitioning = ns.config.premium_messaging_partitions > 1
        if ns.config.sku == "basic" and "default_message_time_to_live" not in options:
            cfg.default_message_time_to_live = 14 * 86_400_000  # daemon/README.md §15.1
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        limit = ns.max_entities
        if ns.entity_count >= limit:
            raise QuotaExceeded(f"namespace {ns.name!r} already holds {limit} entities")
        partitions = ns.partition_count(cfg)
        if partitions > 1 and not ns.premium and ns.partitioned_count >= MAX_PARTITIONED:
            raise QuotaExceeded(
                f"namespace {ns.name!r} already holds {MAX_PARTITIONED} partitioned entities"
            )
        return partitions

    def _check_forwarding(self, ns: Namespace, cfg: QueueConfig) -> None:
        """daemon/README.md §11.1, §4.7: the destination must exist in the same namespace."""
        for field in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(cfg, field)
            if target is None:
                continue
            validate_entity_name(target)
            if not isinstance(cfg, SubscriptionConfig) and entity_key(target) == entity_key(
                cfg.name
            ):
                raise InvalidOperation(f"{field} cannot point an entity at itself")
            if entity_key(target) not in ns.queues and entity_key(target) not in ns.topics:
                raise MessagingEntityNotFound(
                    f"{field} destination {target!r} does not exist in namespace {ns.name!r}"
                )

    def queue_update(self, namespace: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
        ns = self._manage(namespace)
        queue = self.queue(namespace, name)
        queue.reach_all()  # daemon/README.md §0.1.10
        cfg = merge_options(queue.config, options, creating=False)
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        cfg.updated_at_ms = queue.accessed_at_ms = self.clock.now_ms()
        queue.config = cfg
        queue.save()
        self.flow(queue)  # a new forward_to passes on what the queue holds
        return queue.describe()

    def queue_get(self, namespace: str, name: str) -> dict[str, Any]:
        self._manage(namespace)
        return self.queue(namespace, name).describe()

    def queue_list(self, namespace: str) -> list[dict[str, Any]]:
        ns = self._manage(namespace)
        return [q.describe(partitions=False) for q in ns.queues.values()]

    def queue_delete(self, namespace: str, name: str) -> dict[str, Any]:
        self._manage(namespace)
        self.queue(namespace, name).reach_all()  # daemon/README.md §0.1.10
        return self._queue_delete(namespace, name)

    def _queue_delete(self, namespace: str, name: str) -> dict[str, Any]:
        ns = self.namespace(namespace)
        queue = self.queue(namespace, name)
        queue.close()
        self._remove_dir(queue.directory)
        del ns.queues[entity_key(name)]
        self._resolved.clear()
        self._drop_faults(queue.key[0], queue.key[1], "its queue was deleted")
        return {"deleted": queue.name}

    # ------------------------------------------------------------ topics (daemon/README.md §10)

    def topic(self, namespace: str, name: str) -> Topic:
        ns = self.namespace(namespace)
        topic = ns.topics.get(entity_key(name))
        if topic is None:
            validate_entity_name(name, "topic")
            raise MessagingEntityNotFound(f"topic {name!r} does not exist in namespace {ns.name!r}")
        return topic

    def subscription(self, topic: Topic, name: str) -> Subscription:
        sub = topic.subscriptions.get(name.lower())
        if sub is None:
            validate_subscription_name(name)
            raise MessagingEntityNotFound(
                f"subscription {name!r} does not exist in topic {topic.name!r}"
            )
        return sub

    def topic_create(self, namespace: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
        ns = self._manage(namespace)
        if ns.config.sku == "basic":
            raise InvalidOperation("topics are not supported on the Basic tier")
        key = self._new_entity_key(ns, name, "topic")
        now = self.clock.now_ms()
        cfg = merge_options(TopicConfig(name=name), options, creating=True)
        partitions = self._check_new_entity(ns, cfg, options)
        self._reach_namespace(ns)
        cfg.created_at_ms = cfg.updated_at_ms = now
        directory = self._make_dir(ns.directory / "topics", name, {TOPIC_DESCRIPTION: cfg})
        topic = Topic.open_topic(
            directory,
            cfg,
            partitions,
            self.syncer,
            max_message_bytes=ns.max_message_bytes,
            segment_bytes=self.segment_bytes,
            notes=[],
            now=now,
            folders=self._folders,
            key=(entity_key(ns.name), key),
        )
        ns.topics[key] = topic
        if self.faults.faults:
            self.faults.apply(topic, "topic")  # a namespace-wide slow fault covers it
        return topic.describe()

    def topic_update(self, namespace: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
        ns = self._manage(namespace)
        topic = self.topic(namespace, name)
        topic.reach_all()  # daemon/README.md §0.1.10
        cfg = merge_options(topic.config, options, creating=False)
        check_queue(cfg, ns.config.sku, set(options))
        cfg.updated_at_ms = topic.accessed_at_ms = self.clock.now_ms()
        topic.config = cfg
        topic.save()
        return topic.describe()

    def topic_get(self, namespace: str, name: str) -> dict[str, Any]:
        self._manage(namespace)
        return self.topic(namespace, name).describe()

    def topic_list(self, namespace: str) -> list[dict[str, Any]]:
        ns = self._manage(namespace)
        return [t.describe(partitions=False) for t in ns.topics.values()]

    def topic_delete(self, namespace: str, name: str) -> dict[str, Any]:
        ns = self._manage(namespace)
        topic = self.topic(namespace, name)
        topic.reach_all()  # daemon/README.md §0.1.10
        return self._topic_delete(ns, topic)

    def _topic_delete(self, ns: Namespace, topic: Topic) -> dict[str, Any]:
        topic.close()
        self._remove_dir(topic.directory)
        del ns.topics[entity_key(topic.name)]
        self._resolved.clear()
        self._drop_faults(topic.key[0], topic.key[1], "its topic was deleted")
        return {"deleted": topic.name}

    def subscription_keys(self, namespace: str, topic: str) -> list[tuple[str, str]]:
        """Keys of a topic's subscriptions (the server fails their waiters on deletes)."""
        ns = self.namespaces.get(entity_key(namespace))
        found = ns.topics.get(entity_key(topic)) if ns else None
        return [s.key for s in found.subscriptions.values()] if found else []

    def subscription_create(
        self, namespace: str, topic_name: str, name: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        ns = self._manage(namespace)
        topic = self.topic(namespace, topic_name)
        validate_subscription_name(name)
        # daemon/README.md §0.1.10: a subscription lives in every store of its topic
        topic.reach_all()
        if name.lower() in topic.subscriptions:
            raise MessagingEntityAlreadyExists(
                f"subscription {name!r} already exists in topic {topic.name!r}"
            )
        if len(topic.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise QuotaExceeded(
                f"topic {topic.name!r} already has {MAX_SUBSCRIPTIONS} subscriptions"
            )
        self._check_filter_quota(topic, sql=1)  # its $Default rule
        now = self.clock.now_ms()
        cfg = merge_options(SubscriptionConfig(name=name), options, creating=True)
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        # Ids are never reused: the topic's description records the next one first.
        cfg.subscription_id = topic.config.next_subscription_id
        topic.config.next_subscription_id += 1
        topic.save()
        cfg.created_at_ms = cfg.updated_at_ms = now
        rules = [Rule(DEFAULT_RULE, None, None, now)]  # daemon/README.md §10.1
        rules_json = json.dumps([r.to_json() for r in rules]).encode()
        directory = self._make_dir(
            topic.directory / SUBSCRIPTIONS_DIR,
            name,
            {SUBSCRIPTION_DESCRIPTION: cfg, RULES_FILE: rules_json},
        )
        sub = topic.add_subscription(directory, cfg, self.syncer, now)
        sub.rules = rules
        if topic.faulty:
            self.faults.apply(topic, "topic", topic.subscriptions.values())
        return sub.describe()

    def subscription_update(
        self, namespace: str, topic_name: str, name: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        ns = self._manage(namespace)
        sub = self.subscription(self.topic(namespace, topic_name), name)
        sub.reach_all()  # daemon/README.md §0.1.10
        cfg = merge_options(sub.config, options, creating=False)
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        cfg.updated_at_ms = sub.accessed_at_ms = self.clock.now_ms()
        sub.config = cfg
        sub.save()
        self.flow(sub)  # a new forward_to passes on what the subscription holds
        return sub.describe()

    def subscription_get(self, namespace: str, topic_name: str, name: str) -> dict[str, Any]:
        self._manage(namespace)
        return self.subscription(self.topic(namespace, topic_name), name).describe()

    def subscription_list(self, namespace: str, topic_name: str) -> list[dict[str, Any]]:
        self._manage(namespace)
        return [s.describe() for s in self.topic(namespace, topic_name).subscriptions.values()]

    def subscription_delete(self, namespace: str, topic_name: str, name: str) -> dict[str, Any]:
        self._manage(namespace)
        topic = self.topic(namespace, topic_name)
        sub = self.subscription(topic, name)
        sub.reach_all()  # daemon/README.md §0.1.10
        return self._subscription_delete(topic, sub)

    def _subscription_delete(self, topic: Topic, sub: Subscription) -> dict[str, Any]:
        topic.remove_subscription(sub)
        self._remove_dir(sub.directory)
        self._resolved.clear()
        return {"deleted": sub.name, "topic": topic.name}

    def _check_filter_quota(self, topic: Topic, *, sql: int = 0, correlation: int = 0) -> None:
        """daemon/README.md §10.9, §14.5: 2,000 SQL and 100,000 correlation filters per topic."""
        rules = [r for s in topic.subscriptions.values() for r in s.rules]
        have_sql = sum(r.is_sql for r in rules)
        if sql and have_sql + sql > MAX_SQL_FILTERS:
            raise QuotaExceeded(f"topic {topic.name!r} already has {MAX_SQL_FILTERS} SQL filters")
        if correlation and len(rules) - have_sql + correlation > MAX_CORRELATION_FILTERS:
            raise QuotaExceeded(
                f"topic {topic.name!r} already has {MAX_CORRELATION_FILTERS} correlation filters"
            )

    def rule_create(
        self,
        namespace: str,
        topic_name: str,
        sub_name: str,
        name: str,
        filter_spec: dict[str, Any] | None,
        action: str | None,
    ) -> dict[str, Any]:
        self._manage(namespace)
        topic = self.topic(namespace, topic_name)
        sub = self.subscription(topic, sub_name)
        validate_rule_name(name)
        sub.reach_all()  # daemon/README.md §0.1.10, §0.1.11
        if sub.rule(name) is not None:
            raise MessagingEntityAlreadyExists(
                f"rule {name!r} already exists in subscription {sub.name!r}"
            )
        rule = Rule(name, filter_spec, action, self.clock.now_ms())  # parsed and checked
        if rule.is_sql:
            self._check_filter_quota(topic, sql=1)
        else:
            self._check_filter_quota(topic, correlation=1)
        sub.rules.append(rule)
        sub.save_rules()
        return rule.describe()

    def _rule(self, namespace: str, topic_name: str, sub_name: str, name: str) -> Rule:
        sub = self.subscription(self.topic(namespace, topic_name), sub_name)
        rule = sub.rule(name)
        if rule is None:
            validate_rule_name(name)
            raise MessagingEntityNotFound(
                f"rule {name!r} does not exist in subscription {sub.name!r}"
            )
        return rule

    def rule_get(self, namespace: str, topic_name: str, sub_name: str, name: str) -> dict[str, Any]:
        self._manage(namespace)
        return self._rule(namespace, topic_name, sub_name, name).describe()

    def rule_list(self, namespace: str, topic_name: str, sub_name: str) -> list[dict[str, Any]]:
        self._manage(namespace)
        sub = self.subscription(self.topic(namespace, topic_name), sub_name)
        return [r.describe() for r in sub.rules]

    def rule_delete(
        self, namespace: str, topic_name: str, sub_name: str, name: str
    ) -> dict[str, Any]:
        """daemon/README.md §10.1: deleting every rule means the subscription receives nothing."""
        self._manage(namespace)
        rule = self._rule(namespace, topic_name, sub_name, name)
        sub = self.subscription(self.topic(namespace, topic_name), sub_name)
        sub.reach_all()  # daemon/README.md §0.1.10, §0.1.11
        sub.rules.remove(rule)
        sub.save_rules()
        return {"deleted": rule.name, "subscription": sub.name}

    # ------------------------------------------------------------ data plane

    def resolve(self, namespace: str, path: str) -> tuple[Queue, str]:
        """An entity path → (queue, sub-queue: "", "deadletter" or "transfer-deadletter").
        Cached: every data-plane request asks."""
        hit = self._resolved.get((namespace, path))
        if hit is not None:
            return hit
        found = self._resolve(namespace, path)
        if len(self._resolved) >= RESOLVE_CACHE:
            self._resolved.clear()
        self._resolved[(namespace, path)] = found
        return found

    def _resolve(self, namespace: str, path: str) -> tuple[Queue, str]:
        parsed = parse_entity_path(path)
        if parsed.subscription is not None:
            topic = self.topic(namespace, parsed.entity)
            return self.subscription(topic, parsed.subscription), parsed.subqueue
        ns = self.namespace(namespace)
        topic_or_none = ns.topics.get(entity_key(parsed.entity))
        if topic_or_none is not None:
            if parsed.subqueue:
                raise MessagingEntityNotFound(
                    f"{path!r}: a topic has no dead-letter queue; its subscriptions do"
                )
            return topic_or_none, ""
        return self.queue(namespace, parsed.entity), parsed.subqueue

    def _reader(self, namespace: str, path: str) -> tuple[Queue, str]:
        """An entity messages are read from: a queue or a subscription, never a topic."""
        queue, sub = self.resolve(namespace, path)
        if isinstance(queue, Topic):
            raise InvalidOperation(
                f"{queue.name!r} is a topic: read from its subscriptions "
                f"({queue.name}/subscriptions/<name>)"
            )
        return queue, sub

    def send(
        self,
        namespace: str,
        path: str,
        messages: Sequence[Message | bytes | msgspec.Raw],
        sender: Hashable = None,
        *,
        direct: bool = False,
    ) -> list[int]:
        """``sender``: the client connection (a paired primary keeps a backlog queue per
        sender, sbctld.pairing); ``direct``: past the pairing (its own sends)."""
        if self.paired and not direct:
            pairing = self.paired.get(entity_key(namespace))
            if pairing is not None:
                return self.pairings.send(pairing, namespace, path, messages, sender)
        queue, dlq = self.resolve(namespace, path)
        if dlq:
            # daemon/README.md §4.3: only the parent's dead-letter operation fills a DLQ.
            raise InvalidOperation("messages cannot be sent to a dead-letter queue")
        if isinstance(queue, Subscription):
            raise InvalidOperation(
                f"messages cannot be sent to subscription {path!r}: send to its topic"
            )
        now = self.clock.now_ms()
        meter = self.namespace(namespace).meter
        if isinstance(queue, Topic):
            data = DATA_COST * len(messages)

            def charge(filters: int) -> None:
                # daemon/README.md §0.2.1: 1 per message and 1 per filter evaluated, all or nothing.
                meter.check(data + filters, now)
                meter.record("data", data, now)
                meter.record("filter", filters, now)

            seqs = queue.send(messages, now, charge=charge)
            self._fanned_out(queue)
            return seqs
        # daemon/README.md §0.4.4: the whole batch is admitted or nothing of it is stored.
        meter.charge("data", DATA_COST * len(messages), now)
        seqs = queue.send(messages, now)
        if queue.scheduled_pending:
            self._note_scheduled(*queue.key, queue)
        self.flow(queue)
        return seqs

    def _fanned_out(self, topic: Topic) -> None:
        """After messages reached a topic's subscriptions: timers, forwarding, wake-ups."""
        if topic.scheduled_pending:
            self._note_scheduled(*topic.key, topic)
        for sub in topic.subscriptions.values():
            self._touched.add(sub.key)
            self.flow(sub)

    def peek(
        self, namespace: str, path: str, count: int, from_sequence: int | None
    ) -> list[Delivered]:
        if not 1 <= count <= MAX_PEEK:
            raise BadRequest(f"peek count must be between 1 and {MAX_PEEK}")
        if from_sequence is not None and from_sequence < 0:
            raise BadRequest("from_sequence must not be negative")
        queue, dlq = self._reader(namespace, path)
        now = queue.accessed_at_ms = self.clock.now_ms()
        meter = self.namespace(namespace).meter
        count = meter.admit_count(count, now)  # at most what the period has left
        got = queue.peek(count, from_sequence, subqueue=dlq)
        meter.record("data", DATA_COST * len(got), now)
        return got

    def receive(
        self,
        namespace: str,
        path: str,
        count: int,
        mode: str,
        session_lock_token: str | None = None,
    ) -> list[Delivered]:
        if not 1 <= count <= MAX_RECEIVE:
            raise BadRequest(f"receive count must be between 1 and {MAX_RECEIVE}")
        _check_mode(mode)
        queue, dlq = self._reader(namespace, path)
        now = self.clock.now_ms()
        meter = self.namespace(namespace).meter
        count = meter.admit_count(count, now)  # at most what the period has left
        queue.expire_locks(now)
        delete = mode == "receive-and-delete"
        if session_lock_token is not None:
            if dlq:
                raise InvalidOperation("a dead-letter queue has no sessions")
            got = queue.receive_session(session_lock_token, count, now, delete=delete)
        else:
            got = queue.receive(count, now, delete=delete, subqueue=dlq)
        meter.record("data", DATA_COST * len(got), now)
        if got and mode == "peek-lock":
            heapq.heappush(self._due, (now + queue.config.lock_duration, *queue.key))
        self.flow(queue)  # expiry may have dead-lettered something
        return got

    def settle(
        self,
        namespace: str,
        path: str,
        op: str,
        tokens: Sequence[str],
        properties: dict[str, Any] | None = None,
        reason: str | None = None,
        description: str | None = None,
    ) -> list[dict[str, Any]]:
        queue, _dlq = self._reader(namespace, path)
        now = queue.accessed_at_ms = self.clock.now_ms()
        results = queue.settle(op, tokens, now, properties, reason, description)
        if op == "renew-lock":
            heapq.heappush(self._due, (now + queue.config.lock_duration, *queue.key))
        self.flow(queue)
        return results

    def receive_deferred(
        self, namespace: str, path: str, sequence_numbers: Sequence[int], mode: str
    ) -> list[Delivered]:
        _check_mode(mode)
        queue, dlq = self._reader(namespace, path)
        if dlq:
            raise InvalidOperation("deferred messages live in the queue, not in its DLQ")
        now = self.clock.now_ms()
        meter = self.namespace(namespace).meter
        meter.check(DATA_COST * len(sequence_numbers), now)
        got = queue.receive_deferred(sequence_numbers, now, delete=mode == "receive-and-delete")
        meter.record("data", DATA_COST * len(got), now)
        if got and mode == "peek-lock":
            heapq.heappush(self._due, (now + queue.config.lock_duration, *queue.key))
        return got

    def transact(
        self,
        namespace: str,
        path: str,
        messages: Sequence[Message | bytes | msgspec.Raw],
        settlements: Sequence[tuple[str, str, dict[str, Any] | None, str | None, str | None]],
    ) -> dict[str, Any]:
        """Sends and settlements on one entity, all or nothing (daemon/README.md §12)."""
        if self.namespace(namespace).config.sku == "basic":
            raise InvalidOperation("transactions are not supported on the Basic tier")
        queue, dlq = self.resolve(namespace, path)
        if dlq and messages:
            raise InvalidOperation("messages cannot be sent to a dead-letter queue")
        if isinstance(queue, Subscription) and messages:
            raise InvalidOperation(
                f"messages cannot be sent to subscription {path!r}: send to its topic"
            )
        if isinstance(queue, Topic) and settlements:
            raise InvalidOperation(f"{queue.name!r} is a topic: settle on its subscriptions")
        now = self.clock.now_ms()
        # The commit's sends are charged (settlements are free; README "Throttling").
        self.namespace(namespace).charge("data", DATA_COST * len(messages), now)
        result = queue.transact(messages, settlements, now)
        if isinstance(queue, Topic):
            self._fanned_out(queue)
            return result
        if messages and queue.scheduled_pending:
            self._note_scheduled(*queue.key, queue)
        self.flow(queue)
        return result

    # ------------------------------------------------------------ auto-forwarding

    @property
    def touched(self) -> bool:
        return bool(self._touched)

    def take_touched(self) -> set[tuple[str, str]]:
        """Queues that forwarding put messages in since the last call (to wake receivers)."""
        touched, self._touched = self._touched, set()
        return touched

    def flow(self, queue: Queue) -> None:
        """Forward what ``queue`` must pass on (daemon/README.md §11, §4.7), along the whole
        chain."""
        cfg = queue.config
        if cfg.forward_to is None and cfg.forward_dead_lettered_messages_to is None:
            return  # the common case, on every data-plane request: two attribute reads
        ns = self.namespaces.get(queue.key[0])
        if ns is None:
            return
        now = self.clock.now_ms()
        pending = [queue]
        for _hop in range(MAX_TRANSFER_HOPS + 2):
            if not pending:
                break
            nxt: list[Queue] = []
            for source in pending:
                nxt += self._forward(ns, source, now)
            pending = nxt

    def _forward(self, ns: Namespace, source: Queue, now: int) -> list[Queue]:
        """Move the source's forwardable messages on; returns the queues that received some."""
        cfg = source.config
        received: list[Queue] = []
        if cfg.forward_to is not None:
            for p, seq in source.waiting(State.ACTIVE):
                received += self._transfer(ns, source, p, seq, cfg.forward_to, now, False)
        if cfg.forward_dead_lettered_messages_to is not None:
            for p, seq in source.waiting(State.DEADLETTERED):
                target = cfg.forward_dead_lettered_messages_to
                received += self._transfer(ns, source, p, seq, target, now, True)
        return received

    def _transfer(
        self,
        ns: Namespace,
        source: Queue,
        p: Partition,
        seq: int,
        target_name: str,
        now: int,
        from_dlq: bool,
    ) -> list[Queue]:
        try:
            message = decode_message(p.log.read_payload(seq))
        except CorruptRecord:
            p.log.discard_corrupt(seq)
            return []
        hops = (message.transfer_hops or 0) + 1
        if from_dlq:
            props = {**(message.application_properties or {}), **p.log.props.get(seq, {})}
            message = msgspec.structs.replace(
                message, application_properties=props or None, dead_letter_source=source.name
            )
        message = msgspec.structs.replace(
            message,
            enqueued_sequence_number=message.enqueued_sequence_number or (p.shift | seq),
            transfer_hops=hops,
        )
        key = entity_key(target_name)
        target: Queue | None = ns.queues.get(key) or ns.topics.get(key)
        failure: tuple[str, str] | None = None
        if hops > MAX_TRANSFER_HOPS:
            failure = (
                "MaxTransferHopCountExceeded",
                f"the message passed more than {MAX_TRANSFER_HOPS} forwarding hops",
            )
        elif target is None:
            failure = ("MessagingEntityNotFound", f"the destination {target_name!r} is gone")
        else:
            try:
                target.send([message], now, from_broker=True)
            except SbctlError as exc:  # disabled, full, needs a session...: daemon/README.md §4.6
                if exc.transient or isinstance(exc, StorageError):
                    return []  # an unavailable store or a full disk: it stays, forwarded later
                failure = (exc.code, exc.message)
        if failure is None:
            p.log.set_state(seq, State.GONE)
            assert target is not None
            if isinstance(target, Topic):  # daemon/README.md §11.1: a topic fans it out
                for sub in target.subscriptions.values():
                    self._touched.add(sub.key)
                if target.scheduled_pending:
                    self._note_scheduled(*target.key, target)
                return list(target.subscriptions.values())
            self._touched.add(target.key)
            return [target]
        if not from_dlq:  # daemon/README.md §4.6: the source's transfer dead-letter queue
            reason, description = failure
            p.log.set_state(
                seq,
                State.TRANSFER_DEADLETTERED,
                {"DeadLetterReason": reason, "DeadLetterErrorDescription": description},
            )
            p.give_back(seq)
        return []

    def _session_queue(self, namespace: str, path: str) -> Queue:
        queue, dlq = self._reader(namespace, path)
        if dlq:
            raise InvalidOperation("a dead-letter queue has no sessions")
        return queue

    def session_accept(self, namespace: str, path: str, session_id: str | None) -> dict[str, Any]:
        """Lock a session (or the next available one) for a session receiver (daemon/README.md
        §9.6)."""
        queue = self._session_queue(namespace, path)
        return queue.accept_session(session_id, self.clock.now_ms())

    def session_renew(self, namespace: str, path: str, token: str) -> dict[str, Any]:
        return self._session_queue(namespace, path).renew_session(token, self.clock.now_ms())

    def session_close(self, namespace: str, path: str, token: str) -> dict[str, Any]:
        return self._session_queue(namespace, path).close_session(token, self.clock.now_ms())

    def session_list(self, namespace: str, path: str) -> list[dict[str, Any]]:
        return self._session_queue(namespace, path).list_sessions(self.clock.now_ms())

    def session_get_state(self, namespace: str, path: str, session_id: str) -> bytes | None:
        return self._session_queue(namespace, path).get_session_state(session_id)

    def session_set_state(
        self, namespace: str, path: str, session_id: str, state: bytes | None
    ) -> None:
        self._session_queue(namespace, path).set_session_state(session_id, state)

    def cancel_scheduled(self, namespace: str, path: str, sequence_numbers: Sequence[int]) -> int:
        queue, dlq = self.resolve(namespace, path)
        if dlq:
            raise InvalidOperation("a dead-letter queue holds no scheduled messages")
        return queue.cancel_scheduled(sequence_numbers)

    def purge(self, namespace: str, path: str) -> int:
        """Delete every message of a queue or of its DLQ (beyond Azure: a chore)."""
        queue, dlq = self._reader(namespace, path)
        return queue.purge(subqueue=dlq)

    def dlq_resubmit(
        self, namespace: str, path: str, count: int | None, to: str | None
    ) -> dict[str, Any]:
        """Move dead-lettered messages back (to the queue itself or to ``to``), without
        their dead-letter properties; each gets a new sequence number there."""
        queue, from_sub = self._reader(namespace, path)
        target, into_dlq = (queue, "") if to is None else self.resolve(namespace, to)
        if into_dlq:
            raise InvalidOperation("messages cannot be resubmitted into a dead-letter queue")
        if count is not None and count < 1:
            raise BadRequest("count must be at least 1")
        if queue.faulty:
            queue.check_reachable()  # daemon/README.md §0.1.6: what the available partitions hold
        now = self.clock.now_ms()
        moved: list[int] = []
        if isinstance(target, Subscription) and target is not queue:
            raise InvalidOperation(
                f"messages cannot be resubmitted to subscription {to!r}: use its topic"
            )
        state = (
            State.TRANSFER_DEADLETTERED if from_sub == "transfer-deadletter" else State.DEADLETTERED
        )
        for p, seq in queue.waiting(state, count):
            message = queue.resubmittable(p, seq)
            # The copy is stored before the DLQ entry is retired: never lost, at worst twice.
            moved += target.send([message], now, detect_duplicates=False)
            p.log.set_state(seq, State.GONE)
        if isinstance(target, Topic):
            self._fanned_out(target)
        self.flow(target)  # a forwarding target passes them on (daemon/README.md §11)
        return {"resubmitted": len(moved), "to": target.name, "sequence_numbers": moved}

    def load_adopt(
        self, namespace: str, path: str, load_id: str, files: Sequence[tuple[int, str]]
    ) -> dict[str, Any]:
        """Adopt a spark-load's staged batches atomically, in one call (sbctld.loads;
        daemon/README.md §0.4.6). The daemon checks them off the loop instead (:meth:`load_queue`,
        ``loads.check``, ``loads.commit``, :meth:`load_adopted`)."""
        queue = self.load_queue(namespace, path, files)
        return self.load_adopted(queue, loads.adopt(queue, load_id, files, self.clock.now_ms()))

    def load_queue(self, namespace: str, path: str, files: Sequence[tuple[int, str]]) -> Queue:
        """The queue a load goes to, every partition it touches available."""
        queue, dlq = self._reader(namespace, path)
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
            self._note_scheduled(*queue.key, queue)
        return result

    def load_status(self, namespace: str, path: str, load_id: str) -> dict[str, Any]:
        return loads.status(self._reader(namespace, path)[0], load_id)

    # ------------------------------------------------------------ faults (sbctld.faults)

    def fault_add(
        self,
        namespace: str,
        entity: str | None = None,
        partitions: Sequence[int] = (),
        kind: str = "unavailable",
        latency_ms: int | None = None,
    ) -> dict[str, Any]:
        """Make stores of a namespace unavailable or slow: every one, one queue's or
        topic's, or some partitions of it (test tooling, beyond Azure)."""
        ns = self.namespace(namespace)
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
            id=self.faults.new_id(),
            namespace=ns.name,
            kind=kind,
            created_at_ms=self.clock.now_ms(),
            entity=None if target is None else target.name,
            entity_kind=entity_kind,
            partitions=tuple(sorted(set(partitions))),
            latency_ms=latency_ms or 0,
        )
        self.faults.add(fault)
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

    def fault_list(self, namespace: str | None = None) -> list[dict[str, Any]]:
        """The faults of one namespace (None: of every namespace), oldest first."""
        faults = list(self.faults.faults.values())
        if namespace is not None:
            ns_key = entity_key(self.namespace(namespace).name)
            faults = [f for f in faults if f.ns_key == ns_key]
        return [f.describe() for f in faults]

    def fault_clear(
        self,
        namespace: str | None = None,
        ids: Sequence[str] = (),
        all_namespaces: bool = False,
    ) -> dict[str, Any]:
        """Clear faults by id, every fault of ``namespace``, or every fault. The stores
        answer again with everything they held (nothing was changed while they were down)."""
        if ids and all_namespaces:
            raise BadRequest("clear some faults by id or every fault, not both")
        if ids:
            wanted = list(dict.fromkeys(i.lower() for i in ids))
            unknown = [i for i in wanted if i not in self.faults.faults]
            if unknown:
                raise MessagingEntityNotFound(
                    f"no fault {unknown[0]!r} (`sbctl fault list --all` shows them)"
                )
            chosen = [self.faults.faults[i] for i in wanted]
        elif all_namespaces:
            chosen = list(self.faults.faults.values())
        elif namespace is not None:
            chosen = self.faults.in_namespace(entity_key(self.namespace(namespace).name))
        else:
            raise BadRequest("say which faults to clear: ids, a namespace, or all of them")
        cleared = self.faults.remove(chosen)
        for ns_key in dict.fromkeys(f.ns_key for f in cleared):
            ns = self.namespaces.get(ns_key)
            if ns is not None:
                self._apply_faults(ns)
                self._revisit(ns)
        return {"cleared": [f.describe() for f in cleared]}

    def _apply_faults(self, ns: Namespace) -> None:
        for queue in ns.queues.values():
            self.faults.apply(queue, "queue")
        for topic in ns.topics.values():
            self.faults.apply(topic, "topic", topic.subscriptions.values())

    def _revisit(self, ns: Namespace) -> None:
        """After stores came back: run their timers (locks, schedules) and forwarding."""
        now = self.clock.now_ms()
        for entity in ns.entities():
            heapq.heappush(self._due, (now, *entity.key))

    def _drop_faults(self, ns_key: str, key: str | None, why: str) -> None:
        """Faults on a deleted namespace or entity go with it."""
        gone = [
            f
            for f in self.faults.faults.values()
            if f.ns_key == ns_key and (key is None or f.entity_key == key)
        ]
        if gone:
            self.faults.remove(gone, f"dropped, {why}")

    def _reach_namespace(self, ns: Namespace) -> None:
        """Creating needs the namespace's stores: a namespace-wide unavailable fault
        refuses it (daemon/README.md §0.1.10)."""
        fault = self.faults.namespace_down(entity_key(ns.name))
        if fault is not None:
            raise ServiceCommunicationProblem(
                f"the stores of namespace {ns.name!r} are unavailable (injected fault {fault.id})"
            )

    # ------------------------------------------------------------ time

    def tick(self) -> list[tuple[str, str]]:
        """Run what time makes due; returns (namespace, queue) keys with new messages."""
        now = self.clock.now_ms()
        if now >= self._idle_check_ms:
            self._idle_check_ms = now + IDLE_CHECK_MS
            self._delete_idle(now)
        due: set[tuple[str, str]] = set()
        while self._due and self._due[0][0] <= now:
            _deadline, ns_key, q_key = heapq.heappop(self._due)
            due.add((ns_key, q_key))
        woke = []
        for ns_key, q_key in due:
            queue = self._by_key(ns_key, q_key)
            if queue is None:
                continue
            freed = queue.expire_locks(now)
            if queue.activate_scheduled(now):
                freed = True
            self._note_scheduled(ns_key, q_key, queue)
            if isinstance(queue, Topic):
                if freed:
                    self._fanned_out(queue)
                continue
            self.flow(queue)
            if freed:
                woke.append((ns_key, q_key))
        if self.paired:
            woke += self.pairings.tick(now)  # pings, the syphon, fault propagation
        return woke

    def _by_key(self, ns_key: str, key: str) -> Queue | None:
        """The queue, topic or subscription with this key (``Queue.key[1]``)."""
        ns = self.namespaces.get(ns_key)
        if ns is None:
            return None
        found: Queue | None = ns.queues.get(key) or ns.topics.get(key)
        if found is None and "/subscriptions/" in key:
            topic_key, sub_key = key.rsplit("/subscriptions/", 1)
            topic = ns.topics.get(topic_key)
            found = topic.subscriptions.get(sub_key) if topic else None
        return found

    def _delete_idle(self, now: int) -> None:
        # An entity with an unavailable store cannot be deleted (daemon/README.md §0.1.10): it
        # waits.
        for ns in list(self.namespaces.values()):
            for queue in [q for q in ns.queues.values() if q.idle(now) and not q.unavailable()]:
                self._queue_delete(ns.name, queue.name)  # the system's own: not charged
                self.report(f"deleted queue {ns.name}/{queue.name}: idle for auto_delete_on_idle")
            for topic in list(ns.topics.values()):
                if topic.unavailable():
                    continue
                if topic.idle(now):
                    self._topic_delete(ns, topic)
                    self.report(
                        f"deleted topic {ns.name}/{topic.name}: idle for auto_delete_on_idle"
                    )
                    continue
                for sub in [s for s in topic.subscriptions.values() if s.idle(now)]:
                    self._subscription_delete(topic, sub)
                    self.report(
                        f"deleted subscription {ns.name}/{topic.name}/subscriptions/"
                        f"{sub.name}: idle for auto_delete_on_idle"
                    )

    def _note_scheduled(self, ns_key: str, q_key: str, queue: Queue) -> None:
        when = queue.next_scheduled()
        if when is not None:
            heapq.heappush(self._due, (when, ns_key, q_key))

    def checkpoint(self, *, min_changes: int = 1) -> int:
        """Checkpoint every partition with at least ``min_changes`` changes; returns how many.

        On a full disk (the settlement reserve spent), and for ``min_changes`` 1, every
        partition with any change or a settled segment is checkpointed, which deletes the
        segments settled at its previous checkpoint and frees their space.
        """
        done = 0
        full = self.syncer.reserve.full
        for ns in self.namespaces.values():
            for queue in [*ns.queues.values(), *ns.topics.values()]:
                for p in queue.partitions:
                    log = p.log
                    if log.changes_since_checkpoint >= min_changes or (
                        (full or min_changes <= 1)
                        and (log.changes_since_checkpoint or log.settled_segments)
                    ):
                        try:
                            log.checkpoint()
                        except StorageError as exc:
                            self.report(f"checkpoint of {log.directory} not written: {exc}")
                            continue
                        done += 1
        return done

    def close(self) -> None:
        self.pairings.close()
        try:
            self.checkpoint()
        except StorageError as exc:  # the journals still hold it all
            self.report(f"final checkpoint not written: {exc}")
        for ns in self.namespaces.values():
            for queue in [*ns.queues.values(), *ns.topics.values()]:
                queue.close()
        self.syncer.sync_now()

    def stats(self) -> dict[str, Any]:
        queues = [
            q for ns in self.namespaces.values() for q in [*ns.queues.values(), *ns.topics.values()]
        ]
        return {
            "namespaces": len(self.namespaces),
            "entities": len(queues),
            "partitions": sum(len(q.partitions) for q in queues),
            "messages": sum(p.log.message_count for q in queues for p in q.partitions),
        }
