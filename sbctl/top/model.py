"""What ``sbctl top`` shows, as plain data: sampling, rates, rows, sorting, filtering.

One :meth:`Sampler.sample` is one ``status`` and one ``overview`` per namespace (the
daemon's uncharged read, :mod:`sbctld.overview`): watching costs the application no
credits. Rates are differences between two samples:

- incoming/s of a queue or topic: how much its partitions' next sequence numbers grew
  (every enqueued or scheduled message takes one);
- outgoing/s of a queue: incoming minus the growth of its total count, i.e. messages that
  left it (completed, received and deleted, expired, forwarded); dead-lettering moves a
  message inside the entity and is not outgoing. Subscriptions have no sequence numbers of
  their own and topics no outgoing, so those cells stay empty.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

SEQ_MASK = (1 << 48) - 1  # a partitioned entity's sequence numbers carry the partition above

# (key, heading, JSON field) of the entity table, in column order.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "NAME"),
    ("kind", "KIND"),
    ("active", "ACTIVE"),
    ("dead_lettered", "DLQ"),
    ("scheduled", "SCHED"),
    ("deferred", "DEFER"),
    ("incoming_per_s", "IN/s"),
    ("outgoing_per_s", "OUT/s"),
    ("size_bytes", "SIZE"),
    ("partitions", "PARTS"),
    ("availability", "AVAILABILITY"),
)
SORT_KEYS = tuple(key for key, _ in COLUMNS)


def enqueued(entity: dict[str, Any] | None) -> dict[int, int]:
    """Messages ever enqueued into each reachable partition of a queue or topic, from its
    next sequence number (a faulted partition reports none); {} for subscriptions."""
    if entity is None or entity.get("kind") == "subscription":
        return {}
    out = {}
    for p in entity.get("partitions") or []:
        seq = p.get("next_sequence_number")
        if seq is not None:
            out[int(p["partition_id"])] = (int(seq) & SEQ_MASK) - 1
    return out


def _incoming(now: dict[int, int], before: dict[int, int], seconds: float) -> float | None:
    """Enqueued per second over the partitions reachable in both samples."""
    common = now.keys() & before.keys()
    if not common or seconds <= 0:
        return None
    return max(0.0, sum(now[p] - before[p] for p in common) / seconds)


def _faulted_partitions(entity: dict[str, Any], faults: list[dict[str, Any]]) -> set[int]:
    """Partitions of ``entity`` an ``unavailable`` fault takes away."""
    count = int(entity.get("partition_count") or 1)
    name = str(entity["name"]).split("/subscriptions/")[0].lower()
    down: set[int] = set()
    for f in faults:
        if f.get("kind") != "unavailable":
            continue
        target = f.get("entity")
        if target is not None and str(target).lower() != name:
            continue
        parts = f.get("partitions") or range(count)
        down.update(p for p in parts if 0 <= p < count)
    return down


@dataclass
class Sample:
    """One look at the daemon: its status and each namespace's overview."""

    at: float
    status: dict[str, Any]
    overviews: dict[str, dict[str, Any]]


@dataclass
class Sampler:
    """Samples the daemon and keeps the previous sample, for rates."""

    client: Any  # sbctl.Client
    previous: Sample | None = None
    current: Sample | None = None
    errors: dict[str, str] = field(default_factory=dict)

    def sample(self) -> Sample:
        from sbctl.core.errors import SbctlError

        status = self.client.status()
        overviews: dict[str, dict[str, Any]] = {}
        self.errors = {}
        for ns in self.client.namespace_list():
            name = str(ns["name"])
            try:
                overviews[name] = self.client.overview(name)
            except SbctlError as exc:  # deleted between the list and the overview
                self.errors[name] = exc.message
        self.previous, self.current = self.current, Sample(time.monotonic(), status, overviews)
        return self.current


def _rate(now: float | None, before: float | None, seconds: float) -> float | None:
    if now is None or before is None or seconds <= 0:
        return None
    return max(0.0, (now - before) / seconds)


def entity_rows(current: Sample, previous: Sample | None, namespace: str) -> list[dict[str, Any]]:
    """The entity table of ``namespace``: one row per queue, topic and subscription."""
    ov = current.overviews.get(namespace)
    if ov is None:
        return []
    before: dict[tuple[str, str], dict[str, Any]] = {}
    seconds = 0.0
    if previous is not None and namespace in previous.overviews:
        seconds = current.at - previous.at
        for e in previous.overviews[namespace]["entities"]:
            before[(e["kind"], e["name"])] = e
    faults = ov.get("faults") or []
    topic_parts = {
        str(e["name"]).lower(): e.get("partition_count")
        for e in ov["entities"]
        if e["kind"] == "topic"
    }
    rows = []
    for e in ov["entities"]:
        old = before.get((e["kind"], e["name"]))
        count = int(e.get("partition_count") or 1)
        if e["kind"] == "subscription":  # it lives in its topic's stores
            e = {**e, "partition_count": topic_parts.get(str(e["name"]).split("/")[0].lower())}
            count = int(e.get("partition_count") or 1)
        down = _faulted_partitions(e, faults)
        incoming = _incoming(enqueued(e), enqueued(old), seconds)
        outgoing = None
        if e["kind"] == "queue" and incoming is not None and old is not None and not down:
            grown = int(e.get("total_message_count", 0)) - int(old.get("total_message_count", 0))
            outgoing = max(0.0, incoming - grown / seconds)
        rows.append(
            {
                "name": e["name"],
                "kind": e["kind"],
                "active": e.get("active_message_count"),
                "dead_lettered": e.get("dead_letter_message_count"),
                "scheduled": e.get("scheduled_message_count"),
                "deferred": e.get("deferred_message_count"),
                "incoming_per_s": None if incoming is None else round(incoming, 1),
                "outgoing_per_s": None if outgoing is None else round(outgoing, 1),
                "size_bytes": e.get("size_in_bytes"),
                "partitions": count,
                "partitions_available": count - len(down),
                "availability": e.get("availability_status"),
                "status": e.get("status"),
            }
        )
    return rows


def credits_used(credits: dict[str, Any]) -> tuple[int, int | None]:
    """Credits consumed in the last full second, and the budget per second (None:
    unlimited)."""
    last = credits.get("consumed", {}).get("last_period", {})
    used = sum(int(v) for v in last.values())
    budget = credits.get("credits_per_second")
    if budget is None:
        budget = credits.get("ops_per_second")
    return used, (int(budget) if budget else None)


def namespace_rows(current: Sample, previous: Sample | None) -> list[dict[str, Any]]:
    """One row per namespace: totals, credits, throttling, pairing and faults."""
    rows = []
    for name, ov in current.overviews.items():
        rates = entity_rows(current, previous, name)
        credits = ov["credits"]
        used, budget = credits_used(credits)
        throttled = int(credits.get("throttled_requests", 0))
        throttled_rate = None
        if previous is not None and name in previous.overviews:
            old = int(previous.overviews[name]["credits"].get("throttled_requests", 0))
            throttled_rate = _rate(throttled, old, current.at - previous.at)
        pairing = ov.get("pairing")
        entities = ov["entities"]
        rows.append(
            {
                "name": name,
                "sku": ov["namespace"].get("sku"),
                "entities": len(entities),
                "active": sum(int(e.get("active_message_count") or 0) for e in entities),
                "dead_lettered": sum(
                    int(e.get("dead_letter_message_count") or 0) for e in entities
                ),
                "incoming_per_s": round(
                    sum(r["incoming_per_s"] or 0 for r in rates if r["kind"] != "subscription"),
                    1,
                ),
                "credits_used": used,
                "credits_per_second": budget,
                "throttled_requests": throttled,
                "throttled_per_s": None if throttled_rate is None else round(throttled_rate, 1),
                "pairing_state": pairing.get("state") if pairing else None,
                "pairing_secondary": pairing.get("secondary") if pairing else None,
                "pairing_pending": pairing.get("pending") if pairing else None,
                "faults": len(ov.get("faults") or []),
                # time travel (daemon/README.md §31): how far its time is ahead, ISO 8601
                "clock_offset": ov["namespace"].get("clock_offset", "PT0S"),
            }
        )
    return rows


def sort_rows(rows: list[dict[str, Any]], key: str, reverse: bool) -> list[dict[str, Any]]:
    """Rows sorted by ``key``; empty cells last either way; names break ties."""

    def value(row: dict[str, Any]) -> Any:
        v = row.get(key)
        if key == "partitions":
            v = (row["partitions_available"] - row["partitions"], row["partitions"])
        return v

    present = [r for r in rows if value(r) is not None]
    missing = [r for r in rows if value(r) is None]
    present.sort(key=lambda r: str(r["name"]).lower())
    present.sort(key=value, reverse=reverse)
    missing.sort(key=lambda r: str(r["name"]).lower())
    return present + missing


def filter_rows(rows: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """Rows whose name contains ``text`` (case-insensitively)."""
    needle = text.lower()
    return [r for r in rows if needle in str(r["name"]).lower()] if needle else rows


def snapshot(sample: Sample, previous: Sample | None, namespace: str) -> dict[str, Any]:
    """``sbctl top --once -o json``: the daemon, every namespace, and ``namespace``'s
    entities, faults, credits and pairing."""
    ov = sample.overviews[namespace]
    st = sample.status
    return {
        "daemon": {
            k: st.get(k)
            for k in ("version", "pid", "uptime_s", "cpu_percent", "rss_bytes", "amqp_port")
            if k in st
        },
        "namespace": namespace,
        "namespaces": namespace_rows(sample, previous),
        "entities": entity_rows(sample, previous, namespace),
        "faults": ov.get("faults") or [],
        "credits": ov["credits"],
        "pairing": ov.get("pairing"),
    }
