"""The ``overview`` operation: one namespace at a glance, for ``sbctl top``.

Everything ``top`` shows of a namespace in one request: the namespace, its throttling
state, every queue, topic and subscription with its counts and partitions, its faults and
its pairing. Like Azure Monitor's metrics, reading it costs the namespace no credits: a
monitor refreshing every second must neither throttle the application it watches nor be
throttled by it (the entity reads of the management API cost 10 credits each,
daemon/README.md §0.2.1).

Incoming counts come from the partitions' next sequence numbers (every enqueued message
takes one); the client derives rates from the difference between two overviews.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sbctl.core.names import entity_key
from sbctld.results import EntityOverview, Overview

if TYPE_CHECKING:
    from sbctld.broker import Broker


def overview(broker: Broker, namespace: str) -> Overview:
    ns = broker.namespace(namespace)
    entities: list[EntityOverview] = []
    for queue in ns.queues.values():
        entities.append(EntityOverview(kind="queue", path=queue.name, description=queue.describe()))
    for topic in ns.topics.values():
        entities.append(EntityOverview(kind="topic", path=topic.name, description=topic.describe()))
        for sub in topic.subscriptions.values():
            described = sub.describe()
            path = f"{topic.name}/subscriptions/{described.name}"
            entities.append(EntityOverview(kind="subscription", path=path, description=described))
    pairing = None
    if entity_key(ns.name) in broker.pairings.by_primary:
        pairing = broker.pairings.status(ns.name)
    return Overview(
        namespace=ns.describe(),
        # at the namespace's own time (daemon/README.md §31)
        credits=ns.credits(broker.now_in(entity_key(ns.name))),
        entities=entities,
        faults=broker.housekeeping.fault_list(ns.name),
        pairing=pairing,
    )
