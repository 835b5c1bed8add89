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

Module map (imports run one way: namespace → core → the four concerns → here):

- :mod:`sbctld.broker.namespace`: :class:`Namespace` (settings, entities, meter, limits);
- :mod:`sbctld.broker.core`: the broker's state, entity lookup, path resolution, timers,
  auto-forwarding: what every concern uses;
- :mod:`sbctld.broker.management`: namespaces, queues, topics, subscriptions, rules;
- :mod:`sbctld.broker.messaging`: send, receive, peek, settle, sessions, transactions,
  deferred and scheduled messages, purge, resubmission;
- :mod:`sbctld.broker.housekeeping`: recovery, ticks (locks, schedules, idle deletion),
  checkpoints, spark-load adoption, injected faults, shutdown, statistics;
- :mod:`sbctld.broker.timetravel`: a namespace's clock offset, and advancing it.

Rule 1: :class:`Broker` is the one public entry; its methods keep their names and
signatures whichever module defines them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sbctl.core import layout
from sbctl.core.errors import BadRequest
from sbctld.broker.housekeeping import Housekeeping
from sbctld.broker.management import Management
from sbctld.broker.messaging import Messaging
from sbctld.broker.namespace import DEFAULT_NAMESPACE, Namespace
from sbctld.broker.timetravel import TimeTravel
from sbctld.clock import Clock
from sbctld.credits import DEFAULT_CREDITS_PER_SECOND
from sbctld.faults import FaultRegistry
from sbctld.paired import PairedNamespaces
from sbctld.storage.log import DEFAULT_SEGMENT_BYTES
from sbctld.storage.space import Reserve
from sbctld.storage.sync import Syncer

__all__ = ["DEFAULT_NAMESPACE", "Broker", "Namespace"]


class Broker(Management, Messaging, Housekeeping, TimeTravel):
    """Every operation of the daemon's domain (see the module docstring)."""

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
        self.root = layout.namespaces_dir(data_dir)
        self.clock = clock
        self.syncer = syncer
        self.report = report
        self.faults = FaultRegistry(report)  # injected store faults (sbctld.faults)
        self.segment_bytes = segment_bytes
        if default_credits_per_second < 0:
            raise BadRequest("default credits per second must not be negative")
        self.default_credits_per_second = default_credits_per_second
        self.namespaces = {}
        self._due = []  # (deadline, namespace key, queue key): see BrokerCore
        self._resolved = {}  # cleared on deletes
        self._touched = set()
        self._idle_check_ms = 0
        # Paired namespaces (sbctld.paired): ``paired`` maps a primary's key to its
        # pairing; empty, it costs every send one truthiness check.
        self.pairings = PairedNamespaces(self)
        self.paired = self.pairings.by_primary
        first_start = not self.root.exists()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Space kept for settling on a full disk (sbctld.storage.space).
        syncer.reserve = Reserve(layout.reserve_file(data_dir))
        syncer.reserve.ensure()
        self._load()
        self._checkpoint_recovered()
        if first_start:
            self.namespace_create(DEFAULT_NAMESPACE, "standard")
        self.pairings.load()
