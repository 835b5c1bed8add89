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
- :mod:`sbctld.broker.core`: :class:`~sbctld.broker.core.BrokerState`, the broker's one shared
  state (namespaces, clock, syncer, faults, pairings, the timer heap) with entity lookup, path
  resolution, timers and auto-forwarding: what every concern uses;
- :mod:`sbctld.broker.management` (``broker.management``): namespaces, queues, topics,
  subscriptions, rules;
- :mod:`sbctld.broker.messaging` (``broker.messaging``): send, receive, peek, settle, sessions,
  transactions, deferred and scheduled messages, purge, resubmission;
- :mod:`sbctld.broker.housekeeping` (``broker.housekeeping``): recovery, ticks (locks,
  schedules, idle deletion), checkpoints, spark-load adoption, injected faults, shutdown,
  statistics;
- :mod:`sbctld.broker.timetravel` (``broker.time_travel``): a namespace's clock offset, and
  advancing it.

Rule 1: :class:`Broker` is the one public entry, by composition: it is the shared state and
owns one object per concern, each holding that state (``broker.messaging.send(...)``,
``broker.management.queue_create(...)``); the state's attributes and helpers are read on the
broker itself (``broker.namespaces``, ``broker.clock``, ``broker.resolve(...)``). A concern
never calls another; what needs two (start-up) goes through the broker.
Rule 2: the state class is the broker's only base (``test_architecture.py`` checks its MRO):
it is separate so that the concerns can name its type without importing the module that
builds them, which would close an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sbctl.core import layout
from sbctld.broker.core import BrokerState
from sbctld.broker.housekeeping import Housekeeping
from sbctld.broker.management import Management
from sbctld.broker.messaging import Messaging
from sbctld.broker.namespace import DEFAULT_NAMESPACE, Namespace
from sbctld.broker.timetravel import TimeTravel
from sbctld.clock import Clock
from sbctld.credits import DEFAULT_CREDITS_PER_SECOND
from sbctld.paired import PairedNamespaces
from sbctld.storage.log import DEFAULT_SEGMENT_BYTES
from sbctld.storage.space import Reserve
from sbctld.storage.sync import Syncer

__all__ = ["DEFAULT_NAMESPACE", "Broker", "Namespace"]


class Broker(BrokerState):
    """The broker's state and its concern objects (see the module docstring)."""

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
        super().__init__(data_dir, clock, syncer, report, segment_bytes, default_credits_per_second)
        self.management = Management(self)
        self.messaging = Messaging(self)
        self.housekeeping = Housekeeping(self)
        self.time_travel = TimeTravel(self)
        self.pairings = PairedNamespaces(self)  # sbctld.paired: it calls the concerns
        self.paired = self.pairings.by_primary
        first_start = not self.root.exists()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Space kept for settling on a full disk (sbctld.storage.space).
        syncer.reserve = Reserve(layout.reserve_file(data_dir))
        syncer.reserve.ensure()
        self.housekeeping.recover()
        if first_start:
            self.management.namespace_create(DEFAULT_NAMESPACE, "standard")
        self.pairings.load()
