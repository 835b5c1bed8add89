"""Topics and subscriptions (daemon/README.md §10, §0.1): fan-out through rules, stored once per
topic.

A :class:`Topic` is a queue-shaped entity whose partitions are
:class:`~sbctld.storage.topic.TopicLog` stores: sending to it validates, deduplicates and
partitions exactly like a queue (sbctld.queue), then *routes* each message through every
subscription's rules before the batch is written. A :class:`Subscription` is a
:class:`~sbctld.queue.Queue` over :class:`~sbctld.storage.topic.SubLog` views of those
same stores, so every lifecycle feature of a queue (locks, settlement, DLQ, TTL, sessions,
deferral, forwarding) works on it unchanged, and it sees the topic's sequence numbers
(partitioned ones carry the partition id in their top 16 bits, daemon/README.md §0.1.7).

Routing (daemon/README.md §10.2-10.3): within one subscription, all matching rules without an action
yield one copy (a reference to the topic's message, not a second copy of its bytes); each
matching rule with an action yields its own copy, stored as an extra record of the batch
and carrying ``RuleName``. A send matching nothing succeeds and is dropped. A filter error
dead-letters the message in that subscription when
``dead_lettering_on_filter_evaluation_exceptions`` is on (the default), and drops it there
otherwise (daemon/README.md §4.4-4.5, §10.7). A message without a SessionId reaching a session-
enabled
subscription goes to its DLQ with the reason ``Session ID is null`` (daemon/README.md §4.4).

Messages scheduled on the topic stay in the topic (its ``scheduled_message_count``, cancel
by the topic's sequence number) and are routed when they activate, with a new sequence
number (daemon/README.md §7, §2.4).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from sbctl.core import layout
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.records import NOT_SCHEDULED, Message, StagedRecord
from sbctld.config import SubscriptionConfig, TopicConfig, load_toml, save_toml
from sbctld.dedup import DuplicateHistory
from sbctld.filters import (
    CompiledAction,
    CompiledFilter,
    FilterEvaluationError,
    MessageView,
    check_parameters,
    compile_action,
    compile_filter,
    normalize_filter,
)
from sbctld.partition import Partition
from sbctld.queue import Queue
from sbctld.queue_state import DEAD_LETTER_DESCRIPTION, DEAD_LETTER_REASON, SCHEDULE_RETRY_MS
from sbctld.results import RuleInfo, SubscriptionInfo, TopicInfo, TopicPartition
from sbctld.storage.files import exists_verified, read_verified, write_atomic
from sbctld.storage.log import State
from sbctld.storage.space import StorageError
from sbctld.storage.sync import Syncer
from sbctld.storage.topic import TopicLog

DEFAULT_RULE = "$Default"  # daemon/README.md §10.1
RULE_NAME = "RuleName"  # daemon/README.md §10.3
NOT_RECEIVING = ("Disabled", "ReceiveDisabled")  # daemon/README.md §17.2: the same as Disabled
SESSION_ID_NULL = "Session ID is null"  # daemon/README.md §4.4
SESSION_ID_NULL_DESCRIPTION = (
    "A session-enabled subscription does not accept a message without a session id."
)


class Rule:
    """A subscription's rule: its filter and action compiled once; ``action_parameters``
    give the values of the action's ``@names`` (the filter's are in its spec)."""

    __slots__ = (
        "action",
        "action_parameters",
        "action_text",
        "created_at_ms",
        "filter",
        "name",
        "spec",
    )

    def __init__(
        self,
        name: str,
        spec: dict[str, Any] | None,
        action: str | None,
        created_at_ms: int,
        action_parameters: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.filter: CompiledFilter = compile_filter(spec)  # parsed and checked once
        self.spec = normalize_filter(spec)
        self.action_text = action or None
        self.action: CompiledAction | None = compile_action(action, action_parameters)
        params = check_parameters(action_parameters, "action")
        self.action_parameters = params if params and self.action_text else None
        self.created_at_ms = created_at_ms

    @property
    def is_sql(self) -> bool:
        return self.filter.kind != "correlation"

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "filter": self.spec,
            "action": self.action_text,
            "created_at_ms": self.created_at_ms,
        }
        if self.action_parameters:
            out["action_parameters"] = self.action_parameters
        return out

    def describe(self) -> RuleInfo:
        return RuleInfo(
            name=self.name,
            filter=self.spec,
            action=self.action_text,
            created_at_ms=self.created_at_ms,
            action_parameters=self.action_parameters or msgspec.UNSET,
        )


class Subscription(Queue):
    """A queue over a topic's stores (module docstring)."""

    kind = "subscription"
    sessions_span_partitions = True
    config: SubscriptionConfig

    def __init__(
        self,
        directory: Path,
        config: SubscriptionConfig,
        partitions: list[Partition],
        *,
        max_message_bytes: int,
        topic: Topic,
    ) -> None:
        super().__init__(directory, config, partitions, max_message_bytes=max_message_bytes)
        self.topic = topic
        self.rules: list[Rule] = []

    @property
    def id(self) -> int:
        return self.config.subscription_id

    @property
    def ttl_cap_ms(self) -> int | None:
        """The subscription's default TTL when it is below the topic's (daemon/README.md §1.6)."""
        ttl = self.config.default_message_time_to_live
        return ttl if ttl < self.topic.config.default_message_time_to_live else None

    def save(self) -> None:
        save_toml(layout.subscription_file(self.directory), self.config)
        self.refresh_ttl_cap()

    def refresh_ttl_cap(self) -> None:
        for p in self.partitions:
            p.set_ttl_cap(self.ttl_cap_ms)

    def save_rules(self) -> None:
        data = json.dumps([r.to_json() for r in self.rules], indent=1).encode()
        write_atomic(layout.rules_file(self.directory), data)

    def load_rules(self) -> None:
        path = layout.rules_file(self.directory)
        if exists_verified(path):
            self.rules = [
                Rule(
                    r["name"],
                    r["filter"],
                    r["action"],
                    r["created_at_ms"],
                    r.get("action_parameters"),
                )
                for r in json.loads(read_verified(path))
            ]

    def rule(self, name: str) -> Rule | None:
        key = name.lower()
        return next((r for r in self.rules if r.name.lower() == key), None)

    def describe(self, *, partitions: bool = True) -> SubscriptionInfo:  # type: ignore[override]
        del partitions
        return self.state.described(
            SubscriptionInfo,
            **self.state.counts(),
            topic_name=self.topic.name,
            dead_lettering_on_filter_evaluation_exceptions=(
                self.config.dead_lettering_on_filter_evaluation_exceptions
            ),
            rule_count=len(self.rules),
        )


class _Plan(NamedTuple):
    """One partition's batch after routing: what to write and who gets what."""

    records: list[StagedRecord]
    routes: dict[int, bytearray]
    props: list[tuple[int, int, dict[str, Any]]]
    session_ids: list[str | None]  # per record (copies may have SET sys.SessionId)
    evaluations: int


class Topic(Queue):
    kind = "topic"
    config: TopicConfig

    def __init__(
        self,
        directory: Path,
        config: TopicConfig,
        partitions: list[Partition],
        *,
        max_message_bytes: int,
    ) -> None:
        super().__init__(directory, config, partitions, max_message_bytes=max_message_bytes)
        self.subscriptions: dict[str, Subscription] = {}

    @classmethod
    def open_topic(
        cls,
        directory: Path,
        config: TopicConfig,
        partition_count: int,
        syncer: Syncer,
        *,
        max_message_bytes: int,
        segment_bytes: int,
        notes: list[str],
        now: int,
        folders: Callable[[Path], list[Path]],
        key: tuple[str, str],
    ) -> Topic:
        sub_configs: list[tuple[Path, SubscriptionConfig]] = []
        subs_dir = layout.subscriptions_dir(directory)
        if subs_dir.exists():
            for d in folders(subs_dir):
                if exists_verified(layout.subscription_file(d)):
                    sub_configs.append(
                        (d, load_toml(layout.subscription_file(d), SubscriptionConfig))
                    )
        topic_ttl = config.default_message_time_to_live
        caps = {
            sc.subscription_id: (
                sc.default_message_time_to_live
                if sc.default_message_time_to_live < topic_ttl
                else None
            )
            for _d, sc in sub_configs
        }
        parts = []
        for pid in range(partition_count):
            log = TopicLog.open_topic(
                layout.partition_dir(directory, pid), syncer, segment_bytes, caps
            )
            notes.extend(log.notes)
            parts.append(Partition(log, pid, partition_count > 1))
        topic = cls(directory, config, parts, max_message_bytes=max_message_bytes)
        topic.key = key
        topic.accessed_at_ms = max(config.updated_at_ms, now)
        if config.requires_duplicate_detection:
            window = config.duplicate_detection_history_time_window
            topic.dedup = DuplicateHistory.open(layout.dedup_dir(directory), syncer, window, now)
        for d, sc in sub_configs:
            sub = topic.attach(d, sc, syncer, now)
            sub.load_rules()
        return topic

    def attach(
        self, directory: Path, config: SubscriptionConfig, syncer: Syncer, now: int
    ) -> Subscription:
        """Build the Subscription over this topic's stores (its SubLogs must exist)."""
        n = len(self.partitions)
        parts = [p.subscription(config.subscription_id, n > 1) for p in self.partitions]
        sub = Subscription(
            directory, config, parts, max_message_bytes=self.max_message_bytes, topic=self
        )
        sub.accessed_at_ms = max(config.updated_at_ms, now)
        sub.key = (self.key[0], f"{self.key[1]}/subscriptions/{config.name.lower()}")
        sub.sessions.open(syncer)
        self.subscriptions[config.name.lower()] = sub
        return sub

    def add_subscription(
        self, directory: Path, config: SubscriptionConfig, syncer: Syncer, now: int
    ) -> Subscription:
        topic_ttl = self.config.default_message_time_to_live
        ttl = config.default_message_time_to_live
        cap = ttl if ttl < topic_ttl else None
        for p in self.partitions:
            p.add_subscription(config.subscription_id, cap)
        return self.attach(directory, config, syncer, now)

    def remove_subscription(self, sub: Subscription) -> None:
        for p in self.partitions:
            p.remove_subscription(sub.id)
        sub.close()
        del self.subscriptions[sub.name.lower()]

    def close(self) -> None:
        for sub in self.subscriptions.values():
            sub.close()
        super().close()

    def destroy(self) -> None:
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def save(self) -> None:
        save_toml(layout.topic_file(self.directory), self.config)
        for sub in self.subscriptions.values():
            sub.refresh_ttl_cap()  # the topic's TTL may change which subscriptions cap it

    # ------------------------------------------------------------ routing

    def _store(
        self,
        groups: dict[int, list[StagedRecord]],
        messages: dict[int, list[Message]],
        now: int,
        charge: Callable[[int], None] | None,
    ) -> dict[int, int]:
        """Route every partition's batch first (pure), charge the filter evaluations
        (daemon/README.md §0.2.1: refused whole when the credits do not cover it), then write."""
        plans = {pid: self._route(pid, recs, messages[pid], now) for pid, recs in groups.items()}
        if charge is not None:
            charge(sum(plan.evaluations for plan in plans.values()))
        return self._write_all(plans, now)

    def _route(
        self, pid: int, records: list[StagedRecord], messages: list[Message], now: int
    ) -> _Plan:
        p = self.partitions[pid]
        first = p.next_seq
        n = len(records)
        subs = [s for s in self.subscriptions.values() if s.config.status not in NOT_RECEIVING]
        out = list(records)
        session_ids: list[str | None] = [m.session_id for m in messages]
        routes = {s.id: bytearray(n) for s in subs}
        props: list[tuple[int, int, dict[str, Any]]] = []
        evaluations = 0
        default_ttl = self.config.default_message_time_to_live
        for k, (m, rec) in enumerate(zip(messages, records, strict=True)):
            if rec.scheduled_ms >= 0:
                continue  # routed when it activates (module docstring)
            view = MessageView(
                m,
                sequence_number=p.shift | (first + k),
                enqueued_time_ms=now,
                size=len(rec.payload),
            )
            for s in subs:
                plain = False
                copies: list[tuple[Rule, Message]] = []
                try:
                    for rule in s.rules:
                        evaluations += 1
                        if rule.filter.matches(view):
                            if rule.action is None:
                                plain = True
                            else:
                                copies.append((rule, rule.action.apply(view)))
                except FilterEvaluationError as exc:
                    if s.config.dead_lettering_on_filter_evaluation_exceptions:
                        routes[s.id][k] = State.DEADLETTERED
                        props.append(
                            (
                                s.id,
                                k,
                                {
                                    DEAD_LETTER_REASON: exc.type_name,
                                    DEAD_LETTER_DESCRIPTION: exc.description,
                                },
                            )
                        )
                    continue
                if plain:
                    self._deliver(s, k, m.session_id, routes, props)
                for rule, copy in copies:
                    copy = msgspec.structs.replace(
                        copy,
                        application_properties={
                            **(copy.application_properties or {}),
                            RULE_NAME: rule.name,
                        },
                    )
                    payload = encode_message(copy)
                    if len(payload) > self.max_message_bytes:
                        # The action grew the copy past the message size limit: the copy is
                        # not stored; the message is dead-lettered there (if nothing else of
                        # this subscription took it) like a failed evaluation.
                        if not routes[s.id][k] and (
                            s.config.dead_lettering_on_filter_evaluation_exceptions
                        ):
                            routes[s.id][k] = State.DEADLETTERED
                            props.append(
                                (
                                    s.id,
                                    k,
                                    {
                                        DEAD_LETTER_REASON: "MessageSizeExceeded",
                                        DEAD_LETTER_DESCRIPTION: f"rule {rule.name!r} made a "
                                        f"copy of {len(payload)} bytes, more than the "
                                        f"{self.max_message_bytes // 1024} KB allowed",
                                    },
                                )
                            )
                        continue
                    ttl = copy.time_to_live_ms
                    ttl = default_ttl if ttl is None or ttl > default_ttl else ttl
                    idx = len(out)
                    out.append(StagedRecord(payload, ttl, NOT_SCHEDULED))
                    session_ids.append(copy.session_id)
                    for states in routes.values():
                        states.append(0)
                    self._deliver(s, idx, copy.session_id, routes, props)
        return _Plan(out, routes, props, session_ids, evaluations)

    @staticmethod
    def _deliver(
        s: Subscription,
        k: int,
        session_id: str | None,
        routes: dict[int, bytearray],
        props: list[tuple[int, int, dict[str, Any]]],
    ) -> None:
        if s.config.requires_session and not session_id:
            routes[s.id][k] = State.DEADLETTERED
            props.append(
                (
                    s.id,
                    k,
                    {
                        DEAD_LETTER_REASON: SESSION_ID_NULL,
                        DEAD_LETTER_DESCRIPTION: SESSION_ID_NULL_DESCRIPTION,
                    },
                )
            )
        else:
            routes[s.id][k] = State.ACTIVE

    def _write_all(self, plans: dict[int, _Plan], now: int) -> dict[int, int]:
        """Write every partition's batch and routes, all or nothing: if the disk refuses
        one (StorageError), the ones already written are taken back (daemon/README.md
        §0.4)."""
        staged = []
        try:
            for pid, plan in plans.items():
                p = self.partitions[pid]
                routes = {sub_id: bytes(states) for sub_id, states in plan.routes.items()}
                staged.append((p, p.stage_routed(plan.records, now, routes, plan.props)))
        except StorageError:
            for p, batch in reversed(staged):
                p.unstage_routed(batch)
            raise
        firsts = {}
        for p, batch in staged:
            firsts[p.id] = first = p.commit_routed(batch)
            self._index_sessions(p.id, plans[p.id], first)
        return firsts

    def _write(self, pid: int, plan: _Plan, now: int) -> int:
        return self._write_all({pid: plan}, now)[pid]

    def _index_sessions(self, pid: int, plan: _Plan, first: int) -> None:
        routes = plan.routes
        for sub in self.subscriptions.values():  # session indexes of session subscriptions
            states = routes.get(sub.id)
            if sub.state.session_store is None or states is None:
                continue
            part = sub.partitions[pid]
            for k, st in enumerate(states):
                session_id = plan.session_ids[k]
                if st == State.ACTIVE and session_id is not None:
                    part.index_session(first + k, session_id)

    def activate_scheduled(self, now: int, *, own_times: bool = False) -> bool:
        """Scheduled topic messages whose time came are routed now (with ``own_times``: each
        at its scheduled time, daemon/README.md §31), with new sequence numbers
        (daemon/README.md §7, §2.4); appended before the original is retired."""
        woke = False
        for p in self.partitions:
            if p.fault is not None and p.fault.down:
                continue  # its timers wait for the store (the broker revisits on clear)
            for when, seq in p.due_scheduled_at(now):
                at = when if own_times else now
                record = p.activation_record(seq)
                if record is None:
                    continue
                plan = self._route(p.id, [record], [decode_message(record.payload)], at)
                try:
                    self._write(p.id, plan, at)
                except StorageError:  # a full disk: it activates once there is space
                    p.schedule(now + SCHEDULE_RETRY_MS, seq)
                    continue
                p.set_state(seq, State.GONE)
                woke = True
        return woke

    # ------------------------------------------------------------ describing

    def describe(self, *, partitions: bool = True) -> TopicInfo:  # type: ignore[override]
        # daemon/README.md §0.1.10: what the available partitions hold.
        up = [p for p in self.partitions if p.fault is None or p.fault.reachable()]
        info = self.state.described(
            TopicInfo,
            support_ordering=self.config.support_ordering,
            subscription_count=len(self.subscriptions),
            size_in_bytes=sum(p.live_bytes for p in up),
            scheduled_message_count=sum(p.counts[State.SCHEDULED] for p in up),
            # Records that failed their CRC check, never served (daemon/README.md §0.4).
            corrupt_message_count=sum(p.corrupt_count for p in self.partitions),
        )
        if partitions:
            info.partitions = [
                self.state.partition_fault(p)
                or TopicPartition(
                    partition_id=p.id,
                    size_in_bytes=p.live_bytes,
                    scheduled_message_count=p.counts[State.SCHEDULED],
                    next_sequence_number=p.shift | p.next_seq,
                    **self.state.partition_slowness(p),
                )
                for p in self.partitions
            ]
        return info

    def idle(self, now: int) -> bool:
        """daemon/README.md §6.5: a topic with subscriptions that were used recently is not idle."""
        return super().idle(now) and all(
            now - s.accessed_at_ms >= self.config.auto_delete_on_idle
            for s in self.subscriptions.values()
        )
