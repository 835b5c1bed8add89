"""Paired namespaces (daemon/README.md §0.3, §19): the send-availability state machine of one
primary.

Pure and clock-driven: every method takes ``now`` (ms) from the broker's clock and nothing
here touches storage or sockets. :mod:`sbctld.paired` applies it to the broker: it routes
every send that reaches the primary namespace through :class:`Pairing`, pings, runs the
syphon and persists the pairing (daemon/README.md §0.4.5: the daemon plays the SDK messaging
factory's role).

One entity's life (per queue or topic of the primary, keyed by entity key)::

    healthy ──counted failure──▶ failing ──FailoverInterval with no success──▶ failed over
       ▲                           │ success                                    │
       └───────────────────────────┘◀──────────── first successful ping ────────┘

- *failing*: sends still go to the primary; a send that fails before FailoverInterval
  has passed since the first counted failure fails to the caller with its own error
  (daemon/README.md §0.3.2). FailoverInterval 0 fails over on the first counted failure.
- *failed over*: sends go to a backlog queue of the secondary, chosen at random per
  sender and kept while it stays in the rotation; a ping goes to the primary every
  PingPrimaryInterval (daemon/README.md §0.3.4).

A *sender* is one client connection to the daemon, through any front-end (the SDK picks a
backlog queue per QueueClient/TopicClient, daemon/README.md §0.3.2; a connection is the nearest
thing the daemon sees). It is known by a :data:`SenderId` that the service hands each
connection (``Service.new_sender``): never reused while the daemon runs, and the same kind
of key whichever protocol the connection speaks. ``None`` is the broker's own sends.
A backlog queue whose send fails leaves the rotation for every sender; when none is left
the send fails and the rotation starts over with all of them, and it is whole again once
no entity is failed over.

A faulted pairing (the other side was deleted or faulted, daemon/README.md §0.3.6) is terminal, like
a faulted MessagingFactory: sends to the primary fail until it is unpaired.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, NewType

import msgspec

from sbctl.core.durations import MAX_TIMESPAN_MS, MS_PER_MINUTE, MS_PER_SECOND
from sbctl.core.errors import BadRequest, SbctlError
from sbctl.core.records import Message, PropertyValue
from sbctld.credits import CreditQuotaExceeded
from sbctld.results import PairedEntity

# daemon/README.md §0.3.7 defaults and ranges [decomp].
DEFAULT_BACKLOG_QUEUE_COUNT = 10
MAX_BACKLOG_QUEUE_COUNT = 100  # an emulator bound: each one is a queue in the secondary
DEFAULT_FAILOVER_INTERVAL_MS = MS_PER_MINUTE
MAX_FAILOVER_INTERVAL_MS = 60 * MS_PER_MINUTE
DEFAULT_PING_INTERVAL_MS = MS_PER_MINUTE
MIN_PING_INTERVAL_MS = MS_PER_SECOND
MAX_PING_INTERVAL_MS = 30 * MS_PER_MINUTE
SYPHON_RETRY_MS = MS_PER_SECOND  # daemon/README.md §19.2: the syphon's retry interval

TRANSFER_SEGMENT = "x-servicebus-transfer"
# daemon/README.md §0.3.3: where a diverted message keeps what the backlog queue must not act on.
SESSION_ID_PROPERTY = "x-ms-sessionid"
TIME_TO_LIVE_PROPERTY = "x-ms-timetolive"  # milliseconds
SCHEDULED_PROPERTY = "x-ms-scheduledenqueuetimeutc"  # ms since the epoch
PATH_PROPERTY = "x-ms-path"
FAILOVER_PROPERTIES = (
    SESSION_ID_PROPERTY,
    TIME_TO_LIVE_PROPERTY,
    SCHEDULED_PROPERTY,
    PATH_PROPERTY,
)

# daemon/README.md §0.3.1: the backlog queues' description (the SDK's QueueDescription names).
BACKLOG_QUEUE_OPTIONS: dict[str, Any] = {
    "max_size_in_megabytes": 5120,
    "max_delivery_count": 2**31 - 1,  # int.MaxValue
    "default_message_time_to_live": MAX_TIMESPAN_MS,
    "auto_delete_on_idle": MAX_TIMESPAN_MS,
    "lock_duration": MS_PER_MINUTE,
    "dead_lettering_on_message_expiration": True,
    "enable_batched_operations": True,
}

# daemon/README.md §19.3: a non-transient messaging failure or a timeout starts (and keeps) the
# failover timer; so does an unavailable store (an injected fault: the SDK would see a
# communication failure once its retries ran out). Throttling (ServerBusy) does not, nor
# does anything the caller got wrong (BadRequest, InvalidOperation, MessageSizeExceeded,
# MessagingEntityNotFound: there would be nowhere to syphon the message back to). The
# emulator has no authorization errors.
FAILOVER_ERRORS = frozenset(
    {
        "ServiceCommunicationProblem",
        "ServiceTimeout",
        "GeneralError",
        "MessagingEntityDisabled",
        "QuotaExceeded",
    }
)
# A backlog-queue send failing with these says nothing about the queue: it stays in the
# rotation and the send fails to the caller (throttling, or the message itself).
KEEPS_ROTATION = frozenset({"ServerBusy", "MessageSizeExceeded", "BadRequest"})

# One sender (module docstring): a number the service hands out per client connection.
SenderId = NewType("SenderId", int)


def counts_for_failover(err: SbctlError) -> bool:
    if isinstance(err, CreditQuotaExceeded):
        return False  # a request bigger than a credit period: the caller's mistake
    return err.code in FAILOVER_ERRORS


def backlog_name(primary: str, index: int) -> str:
    """daemon/README.md §0.3.1: ``<primary>/x-servicebus-transfer/<i>``."""
    return f"{primary}/{TRANSFER_SEGMENT}/{index}"


class PairOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """What ``sbctl namespace pair`` set (SendAvailabilityPairedNamespaceOptions)."""

    primary: str
    secondary: str
    backlog_queue_count: int = DEFAULT_BACKLOG_QUEUE_COUNT
    failover_interval_ms: int = DEFAULT_FAILOVER_INTERVAL_MS
    ping_primary_interval_ms: int = DEFAULT_PING_INTERVAL_MS
    enable_syphon: bool = False
    paired_at_ms: int = 0


def check_options(options: PairOptions) -> None:
    """daemon/README.md §0.3.7 ranges."""
    if options.primary.lower() == options.secondary.lower():
        raise BadRequest("a namespace cannot be paired with itself")
    if not 1 <= options.backlog_queue_count <= MAX_BACKLOG_QUEUE_COUNT:
        raise BadRequest(f"backlog_queue_count must be between 1 and {MAX_BACKLOG_QUEUE_COUNT}")
    if not 0 <= options.failover_interval_ms <= MAX_FAILOVER_INTERVAL_MS:
        raise BadRequest("failover_interval must be between 0 and 60 minutes")
    if not MIN_PING_INTERVAL_MS <= options.ping_primary_interval_ms <= MAX_PING_INTERVAL_MS:
        raise BadRequest("ping_primary_interval must be between 1 second and 30 minutes")


class PairCounters(msgspec.Struct, kw_only=True):
    """What ``pair-status`` counts; persisted with the options (at most a second late)."""

    diverted: int = 0  # messages sent to backlog queues
    moved: int = 0  # messages the syphon brought back to the primary
    dead_lettered: int = 0  # backlog messages the syphon could never deliver
    pings_sent: int = 0
    pings_failed: int = 0
    failovers: int = 0
    rotation_removals: int = 0
    last_error: str | None = None
    last_error_at_ms: int | None = None


class PairRecord(msgspec.Struct, kw_only=True):
    """The persisted pairing (``pairing.toml`` in the primary's folder)."""

    options: PairOptions
    counters: PairCounters = msgspec.field(default_factory=PairCounters)
    faulted: str | None = None
    faulted_at_ms: int | None = None


@dataclass
class EntityState:
    """One primary entity that is failing or failed over (healthy ones have none)."""

    path: str  # as the first failing sender named it (the entity's key is the dict key)
    failing_since_ms: int
    last_error: str
    failed_over_at_ms: int | None = None
    next_ping_ms: int = 0
    diverted: int = 0
    senders: dict[SenderId | None, int] = field(default_factory=dict)  # -> backlog index

    @property
    def failed_over(self) -> bool:
        return self.failed_over_at_ms is not None


class Pairing:
    """The state machine of one primary (module docstring). Not thread-safe: the broker's
    one event loop drives it."""

    def __init__(self, record: PairRecord, rng: random.Random | None = None) -> None:
        self.options = record.options
        self.counters = record.counters
        self.faulted = record.faulted
        self.faulted_at_ms = record.faulted_at_ms
        self.rng = rng or random.Random()
        self.entities: dict[str, EntityState] = {}
        self.rotation: list[int] = list(range(self.options.backlog_queue_count))
        self.dirty = False  # counters changed since the last save
        # The syphon: nothing to try before this time; destinations backing off until
        # when; where its scan goes on (backlog queue, partition, sequence number); when
        # its next long-poll receives are charged.
        self.syphon_next_ms = 0
        self.syphon_blocked: dict[str, int] = {}
        self.syphon_resume = (0, 0, 0)
        self.syphon_poll_ms = 0

    @property
    def primary(self) -> str:
        return self.options.primary

    @property
    def secondary(self) -> str:
        return self.options.secondary

    def record(self) -> PairRecord:
        return PairRecord(
            options=self.options,
            counters=self.counters,
            faulted=self.faulted,
            faulted_at_ms=self.faulted_at_ms,
        )

    def note_error(self, message: str, now: int) -> None:
        self.counters.last_error = message
        self.counters.last_error_at_ms = now
        self.dirty = True

    # ------------------------------------------------------------ sends to the primary

    def failed_over(self, key: str) -> EntityState | None:
        st = self.entities.get(key)
        return st if st is not None and st.failed_over else None

    def send_failed(self, key: str, path: str, err: SbctlError, now: int) -> EntityState | None:
        """A send to the primary failed with a counted error: start (or keep) the timer.
        Returns the entity's state when it fails over now, else None (the send fails)."""
        st = self.entities.get(key)
        if st is None:
            st = self.entities[key] = EntityState(path, now, err.message)
        st.last_error = err.message
        self.note_error(f"{path}: {err.message}", now)
        if now - st.failing_since_ms < self.options.failover_interval_ms:
            return None
        st.failed_over_at_ms = now
        st.next_ping_ms = now + self.options.ping_primary_interval_ms
        self.counters.failovers += 1
        self.syphon_blocked.pop(key, None)
        return st

    def send_succeeded(self, key: str) -> None:
        """A successful send to the primary clears the timer (daemon/README.md §0.3.2)."""
        if self.entities:
            st = self.entities.get(key)
            if st is not None and not st.failed_over:
                del self.entities[key]

    # ------------------------------------------------------------ backlog queues

    def backlog_for(self, st: EntityState, sender: SenderId | None) -> int:
        """The sender's backlog queue for this entity: its earlier choice while that is
        still in the rotation, else a new random one (daemon/README.md §0.3.2)."""
        if not self.rotation:
            self.rotation = list(range(self.options.backlog_queue_count))
        choice = st.senders.get(sender)
        if choice is None or choice not in self.rotation:
            choice = st.senders[sender] = self.rng.choice(self.rotation)
        return choice

    def leave_rotation(self, index: int, err: SbctlError, now: int) -> bool:
        """A send to backlog queue ``index`` failed: it leaves the rotation for every
        sender. True while others are left to try; False when none is (the rotation then
        starts over with all of them, for the next send)."""
        if index in self.rotation:
            self.rotation.remove(index)
            self.counters.rotation_removals += 1
        self.note_error(f"{backlog_name(self.primary, index)}: {err.message}", now)
        if self.rotation:
            return True
        self.rotation = list(range(self.options.backlog_queue_count))
        return False

    def diverted(self, st: EntityState, count: int) -> None:
        st.diverted += count
        self.counters.diverted += count
        self.dirty = True

    # ------------------------------------------------------------ pings (daemon/README.md §0.3.4)

    def pings_due(self, now: int) -> list[tuple[str, EntityState]]:
        return [
            (key, st)
            for key, st in self.entities.items()
            if st.failed_over and st.next_ping_ms <= now
        ]

    def ping_throttled(self, st: EntityState, now: int) -> None:
        """Throttled pings are not sent; the next one waits a whole interval."""
        st.next_ping_ms = now + self.options.ping_primary_interval_ms

    def ping_failed(self, st: EntityState, err: SbctlError, now: int) -> None:
        self.counters.pings_sent += 1
        self.counters.pings_failed += 1
        st.last_error = err.message
        st.next_ping_ms = now + self.options.ping_primary_interval_ms
        self.note_error(f"ping {st.path}: {err.message}", now)

    def ping_succeeded(self, key: str, now: int) -> None:
        """The first successful ping returns every sender of the entity to the primary."""
        self.counters.pings_sent += 1
        self.dirty = True
        self.back_to_primary(key, now)

    def back_to_primary(self, key: str, now: int) -> None:
        self.entities.pop(key, None)
        self.syphon_next_ms = now  # what waited for this entity may move now
        if not any(st.failed_over for st in self.entities.values()):
            self.rotation = list(range(self.options.backlog_queue_count))

    # ------------------------------------------------------------ close/fault (daemon/README.md
    # §0.3.6)

    def fault(self, reason: str, now: int) -> None:
        if self.faulted is None:
            self.faulted = reason
            self.faulted_at_ms = now
            self.note_error(reason, now)
            self.entities.clear()

    # ------------------------------------------------------------ describing

    @property
    def state(self) -> str:
        if self.faulted is not None:
            return "Faulted"
        return "FailedOver" if any(st.failed_over for st in self.entities.values()) else "Active"

    def describe_entities(self) -> list[PairedEntity]:
        return [
            PairedEntity(
                entity=st.path,
                state="FailedOver" if st.failed_over else "Failing",
                failing_since_ms=st.failing_since_ms,
                failed_over_at_ms=st.failed_over_at_ms,
                next_ping_ms=st.next_ping_ms if st.failed_over else None,
                diverted=st.diverted,
                senders=len(st.senders),
                last_error=st.last_error,
            )
            for st in self.entities.values()
        ]


# ------------------------------------------------------------ message rewriting


def divert_message(m: Message, path: str) -> Message:
    """daemon/README.md §0.3.3: the copy of ``m`` a backlog queue receives. SessionId, TimeToLive
    and
    ScheduledEnqueueTimeUtc move into properties (so the backlog queue neither needs
    sessions, nor expires, nor schedules it) and ``x-ms-path`` names the destination."""
    props: dict[str, PropertyValue] = dict(m.application_properties or {})
    for name in FAILOVER_PROPERTIES:
        props.pop(name, None)  # ours to set: a sender's own values would be misread
    if m.session_id is not None:
        props[SESSION_ID_PROPERTY] = m.session_id
    if m.time_to_live_ms is not None:
        props[TIME_TO_LIVE_PROPERTY] = m.time_to_live_ms
    if m.scheduled_enqueue_time_ms is not None:
        props[SCHEDULED_PROPERTY] = m.scheduled_enqueue_time_ms
    props[PATH_PROPERTY] = path
    return msgspec.structs.replace(
        m,
        session_id=None,
        time_to_live_ms=None,
        scheduled_enqueue_time_ms=None,
        application_properties=props,
    )


def restore_message(m: Message) -> tuple[str, Message]:
    """The syphon's inverse of :func:`divert_message`: (destination path, the message as
    its sender sent it). Raises ValueError for a message no failover sender wrote."""
    props = dict(m.application_properties or {})
    path = props.pop(PATH_PROPERTY, None)
    session_id = props.pop(SESSION_ID_PROPERTY, None)
    ttl = props.pop(TIME_TO_LIVE_PROPERTY, None)
    scheduled = props.pop(SCHEDULED_PROPERTY, None)
    if not isinstance(path, str) or not path:
        raise ValueError(f"it has no {PATH_PROPERTY} property naming its destination")
    if session_id is not None and not isinstance(session_id, str):
        raise ValueError(f"its {SESSION_ID_PROPERTY} property is not a string")
    for name, value in ((TIME_TO_LIVE_PROPERTY, ttl), (SCHEDULED_PROPERTY, scheduled)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ValueError(f"its {name} property is not an integer")
    assert ttl is None or isinstance(ttl, int)
    assert scheduled is None or isinstance(scheduled, int)
    return path, msgspec.structs.replace(
        m,
        session_id=session_id if session_id is not None else m.session_id,
        time_to_live_ms=ttl,
        scheduled_enqueue_time_ms=scheduled,
        application_properties=props or None,
        enqueued_sequence_number=None,
        transfer_hops=None,
        dead_letter_source=None,
    )
