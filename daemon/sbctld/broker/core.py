"""The broker's state and what every part of it uses: finding entities, resolving paths,
removing folders, timers, and auto-forwarding (daemon/README.md §11, §4.7).

Rule 1: :class:`BrokerState` holds every attribute the broker's concern objects share
(:mod:`sbctld.broker.management`, ``messaging``, ``housekeeping``, ``timetravel``); each
concern holds the state and calls only what is here or in itself, never another concern.
Rule 2: a data-plane request pays at most two attribute reads here when nothing forwards.
"""

from __future__ import annotations

import heapq
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from sbctl.core import layout
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessagingEntityNotFound,
    SbctlError,
    ServiceCommunicationProblem,
)
from sbctl.core.limits import (
    MAX_TRANSFER_HOPS,
)
from sbctl.core.message_form import decode as decode_message
from sbctl.core.names import (
    entity_key,
    parse_entity_path,
    validate_entity_name,
    validate_subscription_name,
)
from sbctld.broker.namespace import Namespace
from sbctld.clock import Clock
from sbctld.faults import FaultRegistry
from sbctld.paired import PairedNamespaces
from sbctld.pairing import Pairing
from sbctld.partition import Partition
from sbctld.queue import Queue
from sbctld.storage.files import fsync_dir
from sbctld.storage.log import State
from sbctld.storage.space import CorruptRecord, StorageError
from sbctld.storage.sync import Syncer
from sbctld.topic import (
    Subscription,
    Topic,
)

RESOLVE_CACHE = 4096


class BrokerState:
    """State and shared helpers of the broker (see the module docstring)."""

    # Set by sbctld.broker.Broker, which needs the concern objects first.
    pairings: PairedNamespaces
    # ``paired`` maps a primary's key to its pairing (sbctld.paired); empty, it costs every
    # send one truthiness check.
    paired: dict[str, Pairing]

    def __init__(
        self,
        data_dir: Path,
        clock: Clock,
        syncer: Syncer,
        report: Callable[[str], None],
        segment_bytes: int,
        default_credits_per_second: int,
    ) -> None:
        if default_credits_per_second < 0:
            raise BadRequest("default credits per second must not be negative")
        self.data_dir = data_dir
        self.root = layout.namespaces_dir(data_dir)
        self.clock = clock
        self.syncer = syncer
        self.report = report
        self.faults = FaultRegistry(report)  # injected store faults (sbctld.faults)
        self.segment_bytes = segment_bytes
        self.default_credits_per_second = default_credits_per_second
        self.namespaces: dict[str, Namespace] = {}
        # (deadline, namespace key, queue key): when some lock of that queue may run out,
        # so that a tick visits only queues with something due, not every partition.
        self.due: list[tuple[int, str, str]] = []
        self._resolved: dict[tuple[str, str], tuple[Queue, str]] = {}  # cleared on deletes
        self._touched: set[tuple[str, str]] = set()

    def namespace(self, name: str) -> Namespace:
        ns = self.namespaces.get(entity_key(name))
        if ns is None:
            raise MessagingEntityNotFound(f"namespace {name!r} does not exist")
        return ns

    def queue(self, namespace: str, name: str) -> Queue:
        ns = self.namespace(namespace)
        queue = ns.queues.get(entity_key(name))
        if queue is None:
            validate_entity_name(name)
            raise MessagingEntityNotFound(
                f"queue {name!r} does not exist in namespace {ns.name!r}"
                f"{_subscription_hint(ns, name)}"
            )
        return queue

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

    def forget_paths(self) -> None:
        """Empty the :meth:`resolve` cache (after an entity or namespace is deleted)."""
        self._resolved.clear()

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

    def reader(self, namespace: str, path: str) -> tuple[Queue, str]:
        """An entity messages are read from: a queue or a subscription, never a topic."""
        queue, sub = self.resolve(namespace, path)
        if isinstance(queue, Topic):
            raise InvalidOperation(
                f"{queue.name!r} is a topic: read from its subscriptions "
                f"({queue.name}/subscriptions/<name>)"
            )
        return queue, sub

    def folders(self, parent: Path) -> list[Path]:
        """Entity folders of ``parent``; leftovers of interrupted creates/deletes removed."""
        out = []
        for p in sorted(parent.iterdir()):
            if layout.is_work_dir(p):
                shutil.rmtree(p, ignore_errors=True)
            elif p.is_dir():
                out.append(p)
        return out

    def remove_dir(self, directory: Path) -> None:
        """Rename first (atomic), then delete: a crash never leaves half an entity."""
        trash = layout.work_dir(directory.parent, "deleted")
        os.rename(directory, trash)
        fsync_dir(directory.parent)
        shutil.rmtree(trash, ignore_errors=True)

    def reach_namespace(self, ns: Namespace) -> None:
        """Creating needs the namespace's stores: a namespace-wide unavailable fault
        refuses it (daemon/README.md §0.1.10)."""
        fault = self.faults.namespace_down(entity_key(ns.name))
        if fault is not None:
            raise ServiceCommunicationProblem(
                f"the stores of namespace {ns.name!r} are unavailable (injected fault {fault.id})"
            )

    def drop_faults(self, ns_key: str, key: str | None, why: str) -> None:
        """Faults on a deleted namespace or entity go with it."""
        gone = [
            f
            for f in self.faults.faults.values()
            if f.ns_key == ns_key and (key is None or f.entity_key == key)
        ]
        if gone:
            self.faults.remove(gone, f"dropped, {why}")

    def now_in(self, ns_key: str) -> int:
        """The time of the namespace with this key: the clock plus the namespace's offset
        (daemon/README.md §31); the clock's time for a namespace that is gone."""
        ns = self.namespaces.get(ns_key)
        now = self.clock.now_ms()
        return now if ns is None else now + ns.offset_ms

    def time_of(self, ns: Namespace) -> int:
        return self.clock.now_ms() + ns.offset_ms

    def due_at(self, when: int, ns_key: str, q_key: str) -> None:
        """Visit the entity at ``when``, a time of its namespace; the heap holds clock
        times (an offset only grows, so an entry never comes due too early)."""
        ns = self.namespaces.get(ns_key)
        offset = 0 if ns is None else ns.offset_ms
        heapq.heappush(self.due, (when - offset, ns_key, q_key))

    def note_scheduled(self, ns_key: str, q_key: str, queue: Queue) -> None:
        when = queue.next_scheduled()
        if when is not None:
            self.due_at(when, ns_key, q_key)

    def delete_queue(self, namespace: str, name: str) -> dict[str, Any]:
        ns = self.namespace(namespace)
        queue = self.queue(namespace, name)
        queue.close()
        self.remove_dir(queue.directory)
        del ns.queues[entity_key(name)]
        self.forget_paths()
        self.drop_faults(queue.key[0], queue.key[1], "its queue was deleted")
        return {"deleted": queue.name}

    def delete_topic(self, ns: Namespace, topic: Topic) -> dict[str, Any]:
        topic.close()
        self.remove_dir(topic.directory)
        del ns.topics[entity_key(topic.name)]
        self.forget_paths()
        self.drop_faults(topic.key[0], topic.key[1], "its topic was deleted")
        return {"deleted": topic.name}

    def delete_subscription(self, topic: Topic, sub: Subscription) -> dict[str, Any]:
        topic.remove_subscription(sub)
        self.remove_dir(sub.directory)
        self.forget_paths()
        return {"deleted": sub.name, "topic": topic.name}

    def run_timers(self, queue: Queue, now: int, *, own_times: bool = False) -> bool:
        """Expire the entity's locks and activate its scheduled messages at ``now`` (its
        namespace's time; ``own_times``: each at its scheduled time), then forward; True
        when a queue's receivers have new messages."""
        freed = queue.expire_locks(now)
        if queue.activate_scheduled(now, own_times=own_times):
            freed = True
        self.note_scheduled(*queue.key, queue)
        if isinstance(queue, Topic):
            if freed:
                self.fanned_out(queue)
            return False
        self.flow(queue)
        return freed

    def delete_idle(self, ns: Namespace, now: int) -> int:
        """Delete the namespace's entities idle at ``now``; returns how many. An entity with
        an unavailable store cannot be deleted (daemon/README.md §0.1.10): it waits."""
        deleted = 0
        for queue in [q for q in ns.queues.values() if q.idle(now) and not q.unavailable()]:
            self.delete_queue(ns.name, queue.name)  # the system's own: not charged
            self.report(f"deleted queue {ns.name}/{queue.name}: idle for auto_delete_on_idle")
            deleted += 1
        for topic in list(ns.topics.values()):
            if topic.unavailable():
                continue
            if topic.idle(now):
                self.delete_topic(ns, topic)
                self.report(f"deleted topic {ns.name}/{topic.name}: idle for auto_delete_on_idle")
                deleted += 1
                continue
            for sub in [s for s in topic.subscriptions.values() if s.idle(now)]:
                self.delete_subscription(topic, sub)
                self.report(
                    f"deleted subscription {ns.name}/{topic.name}/subscriptions/"
                    f"{sub.name}: idle for auto_delete_on_idle"
                )
                deleted += 1
        return deleted

    @property
    def touched(self) -> bool:
        return bool(self._touched)

    def wake(self, key: tuple[str, str]) -> None:
        """Wake the receivers of the queue with this key (at the next :meth:`take_touched`)."""
        self._touched.add(key)

    def take_touched(self) -> set[tuple[str, str]]:
        """Queues that forwarding put messages in since the last call (to wake receivers)."""
        touched, self._touched = self._touched, set()
        return touched

    def fanned_out(self, topic: Topic) -> None:
        """After messages reached a topic's subscriptions: timers, forwarding, wake-ups."""
        if topic.scheduled_pending:
            self.note_scheduled(*topic.key, topic)
        for sub in topic.subscriptions.values():
            self._touched.add(sub.key)
            self.flow(sub)

    def flow(self, queue: Queue) -> None:
        """Forward what ``queue`` must pass on (daemon/README.md §11, §4.7), along the whole
        chain."""
        cfg = queue.config
        if cfg.forward_to is None and cfg.forward_dead_lettered_messages_to is None:
            return  # the common case, on every data-plane request: two attribute reads
        ns = self.namespaces.get(queue.key[0])
        if ns is None:
            return
        now = self.time_of(ns)
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
            message = decode_message(p.read_payload(seq))
        except CorruptRecord:
            p.discard_corrupt(seq)
            return []
        hops = (message.transfer_hops or 0) + 1
        if from_dlq:
            props = {**(message.application_properties or {}), **(p.props_of(seq) or {})}
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
            p.set_state(seq, State.GONE)
            assert target is not None
            if isinstance(target, Topic):  # daemon/README.md §11.1: a topic fans it out
                for sub in target.subscriptions.values():
                    self._touched.add(sub.key)
                if target.scheduled_pending:
                    self.note_scheduled(*target.key, target)
                return list(target.subscriptions.values())
            self._touched.add(target.key)
            return [target]
        if not from_dlq:  # daemon/README.md §4.6: the source's transfer dead-letter queue
            reason, description = failure
            p.set_state(
                seq,
                State.TRANSFER_DEADLETTERED,
                {"DeadLetterReason": reason, "DeadLetterErrorDescription": description},
            )
            p.give_back(seq)
        return []


def _subscription_hint(ns: Namespace, name: str) -> str:
    """For ``TOPIC/SUB`` naming an existing subscription: how to address it (daemon/README.md
    §25.8)."""
    topic_name, _, sub = name.partition("/")
    topic = ns.topics.get(entity_key(topic_name))
    if not sub or "/" in sub or topic is None or sub.lower() not in topic.subscriptions:
        return ""
    return f"; subscription {sub!r} of topic {topic.name!r} is '{topic_name}/subscriptions/{sub}'"
