"""The broker: namespaces and their entities, and every operation the API exposes.

Pure and synchronous (DESIGN.md §1): it reads time only from the injected clock, writes
only through partition logs and TOML descriptions, and never touches sockets. The server
awaits the group commit before acknowledging anything the broker wrote.

Data-dir layout::

    <data>/namespaces/<ns>/namespace.toml
    <data>/namespaces/<ns>/queues/<entity dir>/queue.toml
    <data>/namespaces/<ns>/queues/<entity dir>/p00 … p15/   (partition stores)
"""

from __future__ import annotations

import heapq
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
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
)
from sbctl.limits import (
    MAX_ENTITIES,
    MAX_PARTITIONED,
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
)
from sbctl.partitioning import STANDARD_PARTITION_COUNT
from sbctl.protocol import MAX_PEEK, MAX_RECEIVE, Delivered
from sbctld import loads
from sbctld.clock import Clock
from sbctld.config import (
    SKUS,
    NamespaceConfig,
    QueueConfig,
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
from sbctld.partition import Partition
from sbctld.queue import DESCRIPTION, Queue
from sbctld.storage.files import fsync_dir
from sbctld.storage.log import DEFAULT_SEGMENT_BYTES, State
from sbctld.storage.sync import Syncer

DEFAULT_NAMESPACE = "sbemulatorns"  # the name Microsoft's emulator uses
NAMESPACE_FILE = "namespace.toml"
# Folders being created or deleted. '@' is in no namespace or entity name (SPEC §14.8-9),
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
    def max_entities(self) -> int:
        """SPEC §14: 10,000 queues and topics; on Premium 1,000 per messaging unit."""
        if self.premium:
            return min(MAX_ENTITIES, PREMIUM_ENTITIES_PER_UNIT * self.config.capacity)
        return MAX_ENTITIES

    @property
    def max_message_bytes(self) -> int:
        return PREMIUM_MESSAGE_BYTES if self.premium else STANDARD_MESSAGE_BYTES

    def partition_count(self, cfg: QueueConfig) -> int:
        """SPEC §0.1.2: 16 on Basic/Standard when asked; Premium partitions everything."""
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
            "partitioned_entity_count": sum(q.partitioned for q in self.queues.values()),
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
        first_start = not self.root.exists()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._load()
        if first_start:
            self.namespace_create(DEFAULT_NAMESPACE, "standard")

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

    def _load(self) -> None:
        for ns_dir in self._folders(self.root):
            desc = ns_dir / NAMESPACE_FILE
            if not desc.exists():
                continue
            ns = Namespace(ns_dir, load_toml(desc, NamespaceConfig))
            self.namespaces[entity_key(ns.name)] = ns
            queues = ns_dir / "queues"
            if not queues.exists():
                continue
            for q_dir in self._folders(queues):
                if not (q_dir / DESCRIPTION).exists():
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
            # SPEC §0.1.2: namespace partitions are a Premium setting.
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
            held = len(ns.queues)
            if held > PREMIUM_ENTITIES_PER_UNIT * capacity:
                raise QuotaExceeded(
                    f"namespace {ns.name!r} holds {held} entities, more than {capacity} "
                    "messaging units allow (SPEC §14)"
                )
        if credits_per_second is not None and ns.premium:
            raise InvalidOperation(
                "premium namespaces have no credits: scale them with capacity (SPEC §0.2.4)"
            )
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
        for queue in ns.queues.values():
            queue.close()
        self._remove_dir(ns.directory)
        del self.namespaces[entity_key(name)]
        self._resolved.clear()
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
        """A management operation (SPEC §0.2.1): charged 10 before anything happens."""
        ns = self.namespace(namespace)
        ns.charge("management", MANAGEMENT_COST, self.clock.now_ms())
        return ns

    def queue_create(self, namespace: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
        ns = self._manage(namespace)
        validate_entity_name(name)
        key = entity_key(name)
        if key in ns.queues:
            raise MessagingEntityAlreadyExists(
                f"queue {name!r} already exists in namespace {ns.name!r}"
            )
        now = self.clock.now_ms()
        cfg = merge_options(QueueConfig(name=name), options, creating=True)
        if ns.premium:
            if cfg.enable_partitioning and ns.config.premium_messaging_partitions == 1:
                raise InvalidOperation(
                    "premium namespaces do not partition entities one by one; create the "
                    "namespace with --premium-messaging-partitions 2 or 4 (SPEC §15.3)"
                )
            cfg.enable_partitioning = ns.config.premium_messaging_partitions > 1
        if ns.config.sku == "basic" and "default_message_time_to_live" not in options:
            cfg.default_message_time_to_live = 14 * 86_400_000  # SPEC §15.1
        check_queue(cfg, ns.config.sku, set(options))
        self._check_forwarding(ns, cfg)
        limit = ns.max_entities
        if len(ns.queues) >= limit:
            raise QuotaExceeded(f"namespace {ns.name!r} already holds {limit} entities (SPEC §14)")
        partitions = ns.partition_count(cfg)
        if partitions > 1 and not ns.premium:
            used = sum(q.partitioned for q in ns.queues.values())
            if used >= MAX_PARTITIONED:
                raise QuotaExceeded(
                    f"namespace {ns.name!r} already holds {MAX_PARTITIONED} partitioned "
                    "entities (SPEC §0.1.11)"
                )
        cfg.created_at_ms = cfg.updated_at_ms = now
        parent = ns.directory / "queues"
        parent.mkdir(mode=0o700, exist_ok=True)
        directory = parent / entity_dir_name(name)
        if directory.exists():  # leftovers of a create that never completed
            shutil.rmtree(directory)
        tmp = parent / f"{WORK_PREFIX}tmp-{uuid.uuid4().hex}"
        tmp.mkdir(mode=0o700)
        save_toml(tmp / DESCRIPTION, cfg)
        os.rename(tmp, directory)
        fsync_dir(parent)
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
        return queue.describe()

    def _check_forwarding(self, ns: Namespace, cfg: QueueConfig) -> None:
        """SPEC §11.1, §4.7: the destination must exist in the same namespace."""
        for field in ("forward_to", "forward_dead_lettered_messages_to"):
            target = getattr(cfg, field)
            if target is None:
                continue
            validate_entity_name(target)
            if entity_key(target) == entity_key(cfg.name):
                raise InvalidOperation(f"{field} cannot point a queue at itself")
            if entity_key(target) not in ns.queues:
                raise MessagingEntityNotFound(
                    f"{field} destination {target!r} does not exist in namespace {ns.name!r}"
                )

    def queue_update(self, namespace: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
        ns = self._manage(namespace)
        queue = self.queue(namespace, name)
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
        return self._queue_delete(namespace, name)

    def _queue_delete(self, namespace: str, name: str) -> dict[str, Any]:
        ns = self.namespace(namespace)
        queue = self.queue(namespace, name)
        queue.close()
        self._remove_dir(queue.directory)
        del ns.queues[entity_key(name)]
        self._resolved.clear()
        return {"deleted": queue.name}

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
            raise MessagingEntityNotFound(f"{path!r}: topics and subscriptions are not available")
        return self.queue(namespace, parsed.entity), parsed.subqueue

    def send(
        self, namespace: str, path: str, messages: Sequence[Message | bytes | msgspec.Raw]
    ) -> list[int]:
        queue, dlq = self.resolve(namespace, path)
        if dlq:
            # SPEC §4.3: only the parent's dead-letter operation fills a DLQ.
            raise InvalidOperation("messages cannot be sent to a dead-letter queue")
        now = self.clock.now_ms()
        # SPEC §0.4.4: the whole batch is admitted or nothing of it is stored.
        self.namespace(namespace).charge("data", DATA_COST * len(messages), now)
        seqs = queue.send(messages, now)
        if queue.scheduled_pending:
            self._note_scheduled(*queue.key, queue)
        self.flow(queue)
        return seqs

    def peek(
        self, namespace: str, path: str, count: int, from_sequence: int | None
    ) -> list[Delivered]:
        if not 1 <= count <= MAX_PEEK:
            raise BadRequest(f"peek count must be between 1 and {MAX_PEEK} (SPEC §13.2)")
        if from_sequence is not None and from_sequence < 0:
            raise BadRequest("from_sequence must not be negative")
        queue, dlq = self.resolve(namespace, path)
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
        queue, dlq = self.resolve(namespace, path)
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
        queue, _dlq = self.resolve(namespace, path)
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
        queue, dlq = self.resolve(namespace, path)
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
        """Sends and settlements on one entity, all or nothing (SPEC §12)."""
        if self.namespace(namespace).config.sku == "basic":
            raise InvalidOperation("transactions are not supported on the Basic tier (SPEC §15.1)")
        queue, dlq = self.resolve(namespace, path)
        if dlq and messages:
            raise InvalidOperation("messages cannot be sent to a dead-letter queue")
        now = self.clock.now_ms()
        # The commit's sends are charged (settlements are free; README "Throttling").
        self.namespace(namespace).charge("data", DATA_COST * len(messages), now)
        result = queue.transact(messages, settlements, now)
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
        """Forward what ``queue`` must pass on (SPEC §11, §4.7), along the whole chain."""
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
        message = decode_message(p.log.read_payload(seq))
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
        target = ns.queues.get(entity_key(target_name))
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
            except SbctlError as exc:  # disabled, full, needs a session...: SPEC §4.6
                failure = (exc.code, exc.message)
        if failure is None:
            p.log.set_state(seq, State.GONE)
            assert target is not None
            self._touched.add(target.key)
            return [target]
        if not from_dlq:  # SPEC §4.6: the source's transfer dead-letter queue
            reason, description = failure
            p.log.set_state(
                seq,
                State.TRANSFER_DEADLETTERED,
                {"DeadLetterReason": reason, "DeadLetterErrorDescription": description},
            )
            p.give_back(seq)
        return []

    def _session_queue(self, namespace: str, path: str) -> Queue:
        queue, dlq = self.resolve(namespace, path)
        if dlq:
            raise InvalidOperation("a dead-letter queue has no sessions")
        return queue

    def session_accept(self, namespace: str, path: str, session_id: str | None) -> dict[str, Any]:
        """Lock a session (or the next available one) for a session receiver (SPEC §9.6)."""
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
        queue, dlq = self.resolve(namespace, path)
        return queue.purge(subqueue=dlq)

    def dlq_resubmit(
        self, namespace: str, path: str, count: int | None, to: str | None
    ) -> dict[str, Any]:
        """Move dead-lettered messages back (to the queue itself or to ``to``), without
        their dead-letter properties; each gets a new sequence number there."""
        queue, from_sub = self.resolve(namespace, path)
        target, into_dlq = (queue, "") if to is None else self.resolve(namespace, to)
        if into_dlq:
            raise InvalidOperation("messages cannot be resubmitted into a dead-letter queue")
        if count is not None and count < 1:
            raise BadRequest("count must be at least 1")
        now = self.clock.now_ms()
        moved: list[int] = []
        state = (
            State.TRANSFER_DEADLETTERED if from_sub == "transfer-deadletter" else State.DEADLETTERED
        )
        for p, seq in queue.waiting(state, count):
            message = queue.resubmittable(p, seq)
            # The copy is stored before the DLQ entry is retired: never lost, at worst twice.
            moved += target.send([message], now, detect_duplicates=False)
            p.log.set_state(seq, State.GONE)
        self.flow(target)  # a forwarding target passes them on (SPEC §11)
        return {"resubmitted": len(moved), "to": target.name, "sequence_numbers": moved}

    def load_adopt(
        self, namespace: str, path: str, load_id: str, files: Sequence[tuple[int, str]]
    ) -> dict[str, Any]:
        """Adopt a spark-load's staged batches atomically (sbctld.loads; SPEC §0.4.6)."""
        queue, dlq = self.resolve(namespace, path)
        if dlq:
            raise InvalidOperation("messages cannot be loaded into a dead-letter queue")
        result = loads.adopt(queue, load_id, files, self.clock.now_ms())
        if queue.scheduled_pending:
            self._note_scheduled(*queue.key, queue)
        return result

    def load_status(self, namespace: str, path: str, load_id: str) -> dict[str, Any]:
        return loads.status(self.resolve(namespace, path)[0], load_id)

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
            ns = self.namespaces.get(ns_key)
            queue = ns.queues.get(q_key) if ns else None
            if queue is None:
                continue
            freed = queue.expire_locks(now)
            if queue.activate_scheduled(now):
                freed = True
            self._note_scheduled(ns_key, q_key, queue)
            self.flow(queue)
            if freed:
                woke.append((ns_key, q_key))
        return woke

    def _delete_idle(self, now: int) -> None:
        for ns in list(self.namespaces.values()):
            for queue in [q for q in ns.queues.values() if q.idle(now)]:
                self._queue_delete(ns.name, queue.name)  # the system's own: not charged
                self.report(f"deleted queue {ns.name}/{queue.name}: idle for auto_delete_on_idle")

    def _note_scheduled(self, ns_key: str, q_key: str, queue: Queue) -> None:
        when = queue.next_scheduled()
        if when is not None:
            heapq.heappush(self._due, (when, ns_key, q_key))

    def checkpoint(self, *, min_changes: int = 1) -> int:
        """Checkpoint every partition with at least ``min_changes`` changes; returns how many."""
        done = 0
        for ns in self.namespaces.values():
            for queue in ns.queues.values():
                for p in queue.partitions:
                    if p.log.changes_since_checkpoint >= min_changes:
                        p.log.checkpoint()
                        done += 1
        return done

    def close(self) -> None:
        self.checkpoint()
        for ns in self.namespaces.values():
            for queue in ns.queues.values():
                queue.close()
        self.syncer.sync_now()

    def stats(self) -> dict[str, Any]:
        queues = [q for ns in self.namespaces.values() for q in ns.queues.values()]
        return {
            "namespaces": len(self.namespaces),
            "entities": len(queues),
            "partitions": sum(len(q.partitions) for q in queues),
            "messages": sum(p.log.message_count for q in queues for p in q.partitions),
        }
