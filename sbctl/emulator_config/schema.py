"""The Config.json schema as sbctl knows it: property tables (:data:`QUEUE_PROPS` and
friends, sbctl's extras marked), fixed vocabularies, and the typed plan a document becomes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from sbctl.core.durations import MAX_TIMESPAN_MS

if TYPE_CHECKING:
    pass


Kind = Literal["bool", "count", "duration", "entity", "text", "status", "sku"]


@dataclass(frozen=True)
class Prop:
    """One ``Properties`` key: the client option it sets and how its value is read.

    ``extra``: an sbctl extra, not in the emulator's schema; export writes an extra only
    when its value differs from ``default`` (Azure's default), so exports of entities that
    use none stay within the official schema.
    """

    key: str
    kind: Kind
    extra: bool = False
    default: Any = None


def _extra(key: str, kind: Kind, default: Any) -> Prop:
    return Prop(key, kind, extra=True, default=default)


_SIZE_EXTRAS: Final = {
    "MaxSizeInMegabytes": _extra("max_size_in_megabytes", "count", 1024),
    "EnablePartitioning": _extra("enable_partitioning", "bool", False),
}
_COMMON_EXTRAS: Final = {
    "AutoDeleteOnIdle": _extra("auto_delete_on_idle", "duration", MAX_TIMESPAN_MS),
    "Status": _extra("status", "status", "Active"),
    "EnableBatchedOperations": _extra("enable_batched_operations", "bool", True),
    "UserMetadata": _extra("user_metadata", "text", None),
}
# Official keys first, in the order of the installer's Config.json (export keeps it).
QUEUE_PROPS: Final = {
    "DeadLetteringOnMessageExpiration": Prop("dead_lettering_on_message_expiration", "bool"),
    "DefaultMessageTimeToLive": Prop("default_message_time_to_live", "duration"),
    "DuplicateDetectionHistoryTimeWindow": Prop(
        "duplicate_detection_history_time_window", "duration"
    ),
    "ForwardDeadLetteredMessagesTo": Prop("forward_dead_lettered_messages_to", "entity"),
    "ForwardTo": Prop("forward_to", "entity"),
    "LockDuration": Prop("lock_duration", "duration"),
    "MaxDeliveryCount": Prop("max_delivery_count", "count"),
    "RequiresDuplicateDetection": Prop("requires_duplicate_detection", "bool"),
    "RequiresSession": Prop("requires_session", "bool"),
    **_SIZE_EXTRAS,
    **_COMMON_EXTRAS,
}
TOPIC_PROPS: Final = {
    "DefaultMessageTimeToLive": Prop("default_message_time_to_live", "duration"),
    "DuplicateDetectionHistoryTimeWindow": Prop(
        "duplicate_detection_history_time_window", "duration"
    ),
    "RequiresDuplicateDetection": Prop("requires_duplicate_detection", "bool"),
    **_SIZE_EXTRAS,
    "SupportOrdering": _extra("support_ordering", "bool", True),  # the daemon's default
    **_COMMON_EXTRAS,
}
SUBSCRIPTION_PROPS: Final = {
    "DeadLetteringOnMessageExpiration": Prop("dead_lettering_on_message_expiration", "bool"),
    "DefaultMessageTimeToLive": Prop("default_message_time_to_live", "duration"),
    "LockDuration": Prop("lock_duration", "duration"),
    "MaxDeliveryCount": Prop("max_delivery_count", "count"),
    "ForwardDeadLetteredMessagesTo": Prop("forward_dead_lettered_messages_to", "entity"),
    "ForwardTo": Prop("forward_to", "entity"),
    "RequiresSession": Prop("requires_session", "bool"),
    "DeadLetteringOnFilterEvaluationExceptions": _extra(
        "dead_lettering_on_filter_evaluation_exceptions", "bool", True
    ),
    **_COMMON_EXTRAS,
}
# The emulator's namespace has no Properties; sbctl's tiers (daemon/README.md §15) need them.
NAMESPACE_PROPS: Final = {
    "Sku": _extra("sku", "sku", "standard"),
    "PremiumMessagingPartitions": _extra("premium_messaging_partitions", "count", 1),
    "Capacity": _extra("capacity", "count", 1),
}
# daemon/README.md §14.10 (and §15 for a namespace's tier): fixed at creation.
IMMUTABLE: Final = {
    "namespace": ("sku", "premium_messaging_partitions"),
    "queue": ("enable_partitioning", "requires_session", "requires_duplicate_detection"),
    "topic": ("enable_partitioning", "requires_duplicate_detection"),
    "subscription": ("requires_session",),
}
FORWARD_KEYS: Final = ("forward_to", "forward_dead_lettered_messages_to")
# daemon/README.md §15.1: the Basic tier refuses these even at their (fixed) Basic values, so an
# export of a Basic namespace leaves them out.
NOT_ON_BASIC: Final = (
    *FORWARD_KEYS,
    "requires_duplicate_detection",
    "requires_session",
    "auto_delete_on_idle",
    "default_message_time_to_live",
    "duplicate_detection_history_time_window",
)
STATUSES: Final = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")
SKUS: Final = ("basic", "standard", "premium")
FILTER_TYPES: Final = ("Sql", "Correlation")
# CorrelationFilter keys → the client's filter keys (the emulator says Label for Subject).
CORRELATION_KEYS: Final = {
    "ContentType": "content_type",
    "CorrelationId": "correlation_id",
    "Label": "subject",
    "MessageId": "message_id",
    "ReplyTo": "reply_to",
    "ReplyToSessionId": "reply_to_session_id",
    "SessionId": "session_id",
    "To": "to",
}
_HINTS: Final = {"Subject": "Label"}  # names users bring from the SDKs
# .NET XmlConvert.ToTimeSpan, which the emulator's schema pattern allows: Y = 365 days,
# M (before T) = 30 days; sbctl's own parser refuses both (no fixed length).
_CALENDAR_RE: Final = re.compile(r"P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)D)?(T.*)?", re.IGNORECASE)
_IDENTIFIER_RE: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
LOGGING_DEFAULT: Final = {"Type": "File"}
INT64_MAX: Final = 2**63 - 1


# -- the typed plan


@dataclass(frozen=True)
class RulePlan:
    path: str
    name: str
    filter: dict[str, Any]  # as the client's rule_create takes it
    action: str | None


@dataclass(frozen=True)
class EntityPlan:
    """A queue (or the base of the others): ``options`` holds only what the config sets,
    as client option keys with durations in milliseconds; the rest keeps its value (its
    default on creation)."""

    path: str
    name: str
    options: dict[str, Any]


@dataclass(frozen=True)
class SubscriptionPlan(EntityPlan):
    rules: tuple[RulePlan, ...] | None  # None: the config lists none ($Default stays)


@dataclass(frozen=True)
class TopicPlan(EntityPlan):
    subscriptions: tuple[SubscriptionPlan, ...]


@dataclass(frozen=True)
class NamespacePlan(EntityPlan):
    queues: tuple[EntityPlan, ...]
    topics: tuple[TopicPlan, ...]


@dataclass(frozen=True)
class ConfigPlan:
    namespaces: tuple[NamespacePlan, ...]
    warnings: tuple[str, ...] = ()
