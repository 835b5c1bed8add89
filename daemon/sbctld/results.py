"""Typed results of the domain's operations: what the broker answers, before any front-end
shows it.

Rules kept here:
- no display strings: a duration is an ``int`` of milliseconds (:data:`DurationMs`), an
  instant an ``int`` of milliseconds since the Unix epoch (:data:`InstantMs`); both field
  names end in ``_ms``;
- field order is the order front-ends show the fields in;
- a field that is :data:`msgspec.UNSET` is absent (a healthy partition has no latency);
- each front-end turns these into its own form: the Unix socket into the CLI's dicts
  (sbctld.frontends.unix.present: a duration ``x_ms`` becomes ``x`` in ISO 8601, an instant
  ``x_ms`` becomes ``x_utc``), the HTTP front-end into Atom XML, AMQP into typed AMQP values.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from sbctl.core.errors import SbctlError

DurationMs = Annotated[int, msgspec.Meta(extra={"shown": "duration"})]
InstantMs = Annotated[int, msgspec.Meta(extra={"shown": "instant"})]


class Result(msgspec.Struct, kw_only=True):
    """The base of every typed result (front-ends recognise results by it)."""


# ------------------------------------------------------------ namespaces


class NamespaceInfo(Result, kw_only=True):
    name: str
    sku: str
    premium_messaging_partitions: int
    capacity: int | None
    credits_per_second: int | None
    ops_per_unit: int | None
    created_at_ms: InstantMs
    queue_count: int
    topic_count: int
    partitioned_entity_count: int
    max_message_size_in_kilobytes: int
    # time travel (daemon/README.md §31): how far its time is ahead, shown once it is
    clock_offset_ms: DurationMs | UnsetType = UNSET


class ClockInfo(Result, kw_only=True):
    """A namespace's time (daemon/README.md §31): the daemon's clock plus its offset."""

    namespace: str
    now_ms: InstantMs
    offset_ms: DurationMs
    # what an advance ran: scheduled messages activated, locks expired, messages expired
    activated: int | UnsetType = UNSET
    locks_expired: int | UnsetType = UNSET
    expired: int | UnsetType = UNSET
    deleted_entities: int | UnsetType = UNSET


class Credits(Result, kw_only=True):
    """Throttling state (sbctld.credits): the budget, what is left of this period and the
    consumption by kind; capacity and operations only on Premium."""

    namespace: str
    sku: str
    credits_per_second: int | None
    capacity: int | UnsetType = UNSET
    ops_per_unit: int | UnsetType = UNSET
    ops_per_second: int | UnsetType = UNSET
    remaining: int | None
    period_ms_left: int
    consumed: dict[str, dict[str, int]]
    throttled_requests: int
    requests_served: int


# ------------------------------------------------------------ queues, topics, subscriptions


class UnavailablePartition(Result, kw_only=True):
    """A partition whose store is unavailable: no counts."""

    partition_id: int
    availability_status: str = "Unavailable"
    faults: list[str]


class QueuePartition(Result, kw_only=True):
    partition_id: int
    active_message_count: int
    dead_letter_message_count: int
    size_in_bytes: int
    next_sequence_number: int
    # a slow store only
    availability_status: str | UnsetType = UNSET
    latency_ms: DurationMs | UnsetType = UNSET
    faults: list[str] | UnsetType = UNSET


class TopicPartition(Result, kw_only=True):
    partition_id: int
    size_in_bytes: int
    scheduled_message_count: int
    next_sequence_number: int
    # a slow store only
    availability_status: str | UnsetType = UNSET
    latency_ms: DurationMs | UnsetType = UNSET
    faults: list[str] | UnsetType = UNSET


class QueueInfo(Result, kw_only=True):
    name: str
    max_size_in_megabytes: int
    max_message_size_in_kilobytes: int
    lock_duration_ms: DurationMs
    max_delivery_count: int
    default_message_time_to_live_ms: DurationMs
    requires_duplicate_detection: bool
    duplicate_detection_history_time_window_ms: DurationMs
    requires_session: bool
    enable_partitioning: bool
    forward_to: str | None
    forward_dead_lettered_messages_to: str | None
    dead_lettering_on_message_expiration: bool
    auto_delete_on_idle_ms: DurationMs
    enable_batched_operations: bool
    enable_express: bool
    status: str
    user_metadata: str | None
    created_at_ms: InstantMs
    updated_at_ms: InstantMs
    accessed_at_ms: InstantMs
    active_message_count: int
    deferred_message_count: int
    dead_letter_message_count: int
    scheduled_message_count: int
    transfer_message_count: int
    transfer_dead_letter_message_count: int
    total_message_count: int
    size_in_bytes: int
    corrupt_message_count: int
    partition_count: int
    availability_status: str
    partitions: list[QueuePartition | UnavailablePartition] | UnsetType = UNSET


class TopicInfo(Result, kw_only=True):
    name: str
    max_size_in_megabytes: int
    max_message_size_in_kilobytes: int
    default_message_time_to_live_ms: DurationMs
    requires_duplicate_detection: bool
    duplicate_detection_history_time_window_ms: DurationMs
    enable_batched_operations: bool
    support_ordering: bool
    enable_partitioning: bool
    auto_delete_on_idle_ms: DurationMs
    enable_express: bool
    status: str
    user_metadata: str | None
    created_at_ms: InstantMs
    updated_at_ms: InstantMs
    accessed_at_ms: InstantMs
    subscription_count: int
    size_in_bytes: int
    scheduled_message_count: int
    corrupt_message_count: int
    partition_count: int
    availability_status: str
    partitions: list[TopicPartition | UnavailablePartition] | UnsetType = UNSET


class SubscriptionInfo(Result, kw_only=True):
    name: str
    topic_name: str
    lock_duration_ms: DurationMs
    requires_session: bool
    default_message_time_to_live_ms: DurationMs
    dead_lettering_on_message_expiration: bool
    dead_lettering_on_filter_evaluation_exceptions: bool
    max_delivery_count: int
    enable_batched_operations: bool
    status: str
    forward_to: str | None
    forward_dead_lettered_messages_to: str | None
    auto_delete_on_idle_ms: DurationMs
    user_metadata: str | None
    created_at_ms: InstantMs
    updated_at_ms: InstantMs
    accessed_at_ms: InstantMs
    rule_count: int
    active_message_count: int
    deferred_message_count: int
    dead_letter_message_count: int
    transfer_message_count: int
    transfer_dead_letter_message_count: int
    total_message_count: int
    corrupt_message_count: int
    availability_status: str  # the topic's stores (daemon/README.md §0.1.10)


class RuleInfo(Result, kw_only=True):
    name: str
    filter: dict[str, Any]  # the normalised filter spec (sbctld.filters.normalize_filter)
    action: str | None
    created_at_ms: InstantMs
    # The values of the action's @names; unset (not shown) when it has none.
    action_parameters: dict[str, Any] | msgspec.UnsetType = msgspec.UNSET

    @property
    def action_params(self) -> dict[str, Any] | None:
        """``action_parameters``, None when there are none."""
        params = self.action_parameters
        return params if isinstance(params, dict) and params else None


# ------------------------------------------------------------ sessions and locks


class SessionLock(Result, kw_only=True):
    """A session locked for a session receiver (accepted or renewed)."""

    session_id: str
    session_lock_token: str
    locked_until_ms: InstantMs


class SessionEntry(Result, kw_only=True):
    session_id: str
    active_message_count: int
    locked_until_ms: InstantMs | None  # None: not locked
    has_state: bool


class Settled(Result, kw_only=True):
    """One lock token's result of a complete, abandon, defer or dead-letter settlement."""

    lock_token: str
    ok: bool = True


class LockRenewed(Result, kw_only=True):
    """One lock token's result of a renew-lock settlement."""

    lock_token: str
    ok: bool = True
    locked_until_ms: InstantMs


class SettleFailed(Result, kw_only=True):
    """One lock token that could not be settled (its lock lost, a session's lock lost, ...):
    the error itself, which each front-end maps to its own form."""

    lock_token: str
    error: SbctlError


# What a settlement answers per lock token.
SettleResult = Settled | LockRenewed | SettleFailed


class Transacted(Result, kw_only=True):
    """A transaction's commit on one entity: the sequence numbers of what it sent, one
    result per settlement."""

    sequence_numbers: list[int]
    settlements: list[SettleResult]


# ------------------------------------------------------------ faults


class FaultInfo(Result, kw_only=True):
    id: str
    namespace: str
    entity: str | None  # None: the whole namespace
    entity_kind: str | None
    partitions: list[int] | None  # None: every partition
    kind: str
    latency_ms: DurationMs | None  # None unless slow
    created_at_ms: InstantMs


class FaultsCleared(Result, kw_only=True):
    cleared: list[FaultInfo]


# ------------------------------------------------------------ pairing


class PairedEntity(Result, kw_only=True):
    """A primary entity that is failing or failed over."""

    entity: str
    state: str
    failing_since_ms: InstantMs
    failed_over_at_ms: InstantMs | None
    next_ping_ms: InstantMs | None  # while failed over
    diverted: int
    senders: int
    last_error: str


class BacklogQueue(Result, kw_only=True):
    name: str
    status: str
    in_rotation: bool
    pending: int | None  # None: missing, or some of its stores are down


class PairingStatus(Result, kw_only=True):
    primary: str
    secondary: str
    state: str
    fault_reason: str | None
    faulted_at_ms: InstantMs | None
    backlog_queue_count: int
    failover_interval_ms: DurationMs
    ping_primary_interval_ms: DurationMs
    enable_syphon: bool
    paired_at_ms: InstantMs
    entities: list[PairedEntity]
    backlog_queues: list[BacklogQueue]
    pending: int | None  # None when a backlog queue's stores are down
    diverted: int
    moved: int
    dead_lettered: int
    pings_sent: int
    pings_failed: int
    failovers: int
    rotation_removals: int
    last_error: str | None
    last_error_at_ms: InstantMs | None


# ------------------------------------------------------------ overview (sbctl top)


class EntityOverview(Result, kw_only=True):
    """One queue, topic or subscription of an overview; ``path`` names a subscription
    ``topic/subscriptions/name``."""

    kind: str
    path: str
    description: QueueInfo | TopicInfo | SubscriptionInfo


class Overview(Result, kw_only=True):
    namespace: NamespaceInfo
    credits: Credits
    entities: list[EntityOverview]
    faults: list[FaultInfo]
    pairing: PairingStatus | None
