"""Entity descriptions: validated once at the edge, persisted as TOML (daemon/README.md §21).

Option names are the azure-servicebus SDK's ``QueueProperties`` names; durations travel as
milliseconds and are written to TOML as ISO 8601 (``PT1M``) so the files read like Azure's.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import tomli_w

from sbctl.core.durations import MAX_TIMESPAN_MS, format_duration_iso, parse_duration_ms
from sbctl.core.errors import BadRequest, InvalidOperation
from sbctld.storage.files import read_verified, write_atomic

T = TypeVar("T", bound=msgspec.Struct)
MB = 1024 * 1024
DAY_MS = 86_400_000
INT32_MAX = 2**31 - 1  # MaxDeliveryCount is an Int32 in Azure's API
STATUSES = ("Active", "Disabled", "SendDisabled", "ReceiveDisabled")
SKUS = ("basic", "standard", "premium")
STANDARD_SIZES_MB = (1024, 2048, 3072, 4096, 5120)  # daemon/README.md §14.7
# daemon/README.md §14
PREMIUM_SIZES_MB = tuple(gb * 1024 for gb in (1, 2, 3, 4, 5, 10, 20, 40, 80))
DURATIONS = (
    "lock_duration",
    "default_message_time_to_live",
    "duplicate_detection_history_time_window",
    "auto_delete_on_idle",
)
IMMUTABLE = ("enable_partitioning", "requires_session", "requires_duplicate_detection")
# ARM refuses these on Basic (daemon/README.md §15.1).
NOT_ON_BASIC = (
    "requires_duplicate_detection",
    "requires_session",
    "forward_to",
    "forward_dead_lettered_messages_to",
    "auto_delete_on_idle",
    "default_message_time_to_live",
    "duplicate_detection_history_time_window",
)


class QueueConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    max_size_in_megabytes: int = 1024
    lock_duration: int = 60_000
    max_delivery_count: int = 10
    default_message_time_to_live: int = MAX_TIMESPAN_MS
    requires_duplicate_detection: bool = False
    duplicate_detection_history_time_window: int = 600_000
    requires_session: bool = False
    enable_partitioning: bool = False
    forward_to: str | None = None
    forward_dead_lettered_messages_to: str | None = None
    dead_lettering_on_message_expiration: bool = False
    auto_delete_on_idle: int = MAX_TIMESPAN_MS
    status: str = "Active"
    enable_batched_operations: bool = True
    user_metadata: str | None = None
    created_at_ms: int = 0
    updated_at_ms: int = 0


USER_OPTIONS = frozenset(QueueConfig.__struct_fields__) - {"name", "created_at_ms", "updated_at_ms"}


class TopicConfig(QueueConfig, kw_only=True, forbid_unknown_fields=True):
    """A topic's description. It reuses the queue's fields (a topic stores messages the way
    a queue does); only TOPIC_OPTIONS are settable, the rest keep their defaults."""

    support_ordering: bool = True
    next_subscription_id: int = 1  # subscription ids are never reused (sbctld.storage.topic)


class SubscriptionConfig(QueueConfig, kw_only=True, forbid_unknown_fields=True):
    """A subscription's description; only SUBSCRIPTION_OPTIONS are settable."""

    dead_lettering_on_filter_evaluation_exceptions: bool = True  # daemon/README.md §4.5
    subscription_id: int = 0


# The azure-servicebus SDK's TopicProperties / SubscriptionProperties names.
TOPIC_OPTIONS = frozenset(
    {
        "max_size_in_megabytes",
        "default_message_time_to_live",
        "requires_duplicate_detection",
        "duplicate_detection_history_time_window",
        "enable_batched_operations",
        "status",
        "support_ordering",
        "auto_delete_on_idle",
        "enable_partitioning",
        "user_metadata",
    }
)
SUBSCRIPTION_OPTIONS = frozenset(
    {
        "lock_duration",
        "requires_session",
        "default_message_time_to_live",
        "dead_lettering_on_message_expiration",
        "dead_lettering_on_filter_evaluation_exceptions",
        "max_delivery_count",
        "enable_batched_operations",
        "status",
        "forward_to",
        "forward_dead_lettered_messages_to",
        "auto_delete_on_idle",
        "user_metadata",
    }
)
TOPIC_STATUSES = ("Active", "Disabled", "SendDisabled")
SUBSCRIPTION_STATUSES = ("Active", "Disabled", "ReceiveDisabled")


class NamespaceConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: str
    sku: str = "standard"
    premium_messaging_partitions: int = 1
    capacity: int = 1
    # Throttling (sbctld.credits): Basic/Standard credits per second (0: unlimited) and
    # the operations per second one premium messaging unit carries.
    credits_per_second: int = 1000
    ops_per_unit: int = 2000
    created_at_ms: int = 0
    # Time travel (daemon/README.md §31): the namespace's time is the clock plus this; it
    # only grows. None (not written) until the clock first moves, so that a data dir whose
    # clocks never moved stays readable by the release before.
    clock_offset_ms: int | None = None


Q = TypeVar("Q", bound=QueueConfig)
_ALLOWED = {
    QueueConfig: (USER_OPTIONS, "queue"),
    TopicConfig: (TOPIC_OPTIONS, "topic"),
    SubscriptionConfig: (SUBSCRIPTION_OPTIONS, "subscription"),
}


def merge_options(current: Q, options: dict[str, Any], *, creating: bool) -> Q:
    """Apply user options to a description; type-checks every value."""
    allowed, what = _ALLOWED[type(current)]
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise BadRequest(f"unknown {what} property {unknown[0]!r}")
    if not creating:
        for key in IMMUTABLE:
            if key in options and options[key] != getattr(current, key):
                # daemon/README.md §14.10: fixed at creation.
                raise InvalidOperation(f"{key} cannot be changed after the entity is created")
    data = msgspec.structs.asdict(current)
    data.update(options)
    try:
        return msgspec.convert(data, type(current), strict=True)
    except msgspec.ValidationError as exc:
        raise BadRequest(f"invalid {what} property: {exc}") from None


def check_queue(cfg: QueueConfig, sku: str, explicit: set[str]) -> None:
    """Range and tier checks (daemon/README.md §3.3, §3.8, §0.4.2, §6, §8.2, §14.7, §15.1)."""
    if sku == "basic":
        for key in NOT_ON_BASIC:
            if key in explicit and _is_set(getattr(cfg, key)):
                raise InvalidOperation(f"{key} is not supported on the Basic tier")
    if not 5_000 <= cfg.lock_duration <= 300_000:
        raise BadRequest(
            f"lock_duration {format_duration_iso(cfg.lock_duration)} is out of range: "
            "it must be between 5 seconds and 5 minutes"
        )
    if not 1 <= cfg.max_delivery_count <= INT32_MAX:
        raise BadRequest(f"max_delivery_count must be between 1 and {INT32_MAX} (an Int32)")
    if not 1_000 <= cfg.default_message_time_to_live <= MAX_TIMESPAN_MS:
        raise BadRequest("default_message_time_to_live must be at least 1 second")
    if not 20_000 <= cfg.duplicate_detection_history_time_window <= 7 * DAY_MS:
        raise BadRequest(
            "duplicate_detection_history_time_window must be between 20 seconds and 7 days"
        )
    if cfg.auto_delete_on_idle < 300_000:
        raise BadRequest("auto_delete_on_idle must be at least 5 minutes")
    sizes = PREMIUM_SIZES_MB if sku == "premium" else STANDARD_SIZES_MB
    if cfg.max_size_in_megabytes not in sizes:
        allowed = ", ".join(str(s) for s in sizes)
        raise BadRequest(
            f"max_size_in_megabytes {cfg.max_size_in_megabytes} is not allowed on "
            f"{sku.capitalize()}; use one of {allowed}"
        )
    statuses: tuple[str, ...] = STATUSES
    if isinstance(cfg, TopicConfig):
        statuses = TOPIC_STATUSES
    elif isinstance(cfg, SubscriptionConfig):
        statuses = SUBSCRIPTION_STATUSES
    if cfg.status not in statuses:
        raise BadRequest(f"status {cfg.status!r} is not one of {', '.join(statuses)}")


def _is_set(value: Any) -> bool:
    return value not in (None, False, MAX_TIMESPAN_MS)


def save_toml(path: Path, struct: msgspec.Struct) -> None:
    data = {}
    for key, value in msgspec.structs.asdict(struct).items():
        if value is None:
            continue
        data[key] = format_duration_iso(value) if key in DURATIONS else value
    write_atomic(path, tomli_w.dumps(data).encode())


def load_toml(path: Path, type_: type[T]) -> T:
    data = tomllib.loads(read_verified(path).decode())
    for key in DURATIONS:
        if isinstance(data.get(key), str):
            data[key] = parse_duration_ms(data[key])
    return msgspec.convert(data, type_)
