"""Writes tests/data/datadir_v1.tar.gz and datadir_v1.json: a data dir written by the release
whose stored message record is the first one (no record version), and what it holds.

Run once with that release's code (``python tests/data/make_datadir_v1.py``); the committed
files are what tests/unit/test_datadir_compat.py opens with today's code. Do not regenerate
them with a later release: the point is that they stay as the old release wrote them.
"""

from __future__ import annotations

import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from sbctl.core.delivered import Delivered
from sbctl.core.messages import ReceivedMessage
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.storage.sync import Syncer

NS = DEFAULT_NAMESPACE
HERE = Path(__file__).resolve().parent
PATHS = (
    "q",
    "q/$deadletterqueue",
    "pq",
    "pq/$deadletterqueue",
    "sq",
    "t/subscriptions/all",
    "t/subscriptions/all/$deadletterqueue",
    "t/subscriptions/red",
)
COUNT_KEYS = (
    "active_message_count",
    "deferred_message_count",
    "dead_letter_message_count",
    "scheduled_message_count",
    "total_message_count",
)

PROPS: dict[str, Any] = {
    "s": "text é",
    "i": 42,
    "big": 2**40,
    "neg": -7,
    "f": 2.5,
    "t": True,
    "no": False,
    "n": None,
    "empty": "",
}


def populate(b: Broker, clock: FakeClock) -> None:
    b.management.queue_create(NS, "q", {"max_delivery_count": 3})
    b.management.queue_create(NS, "pq", {"enable_partitioning": True})
    b.management.queue_create(NS, "sq", {"requires_session": True})
    b.management.topic_create(NS, "t", {})
    b.management.subscription_create(NS, "t", "all", {})
    b.management.subscription_create(NS, "t", "red", {})
    b.management.rule_delete(NS, "t", "red", "$Default")
    b.management.rule_create(
        NS, "t", "red", "sql", {"type": "sql", "sql_expression": "color = 'red'"}, "SET hit = 1"
    )
    b.management.rule_create(
        NS, "t", "red", "corr", {"type": "correlation", "subject": "urgent"}, None
    )

    full = Message(
        body=b"hello",
        message_id="m-1",
        session_id=None,
        partition_key=None,
        correlation_id="c-1",
        subject="subj",
        content_type="text/plain",
        to="someone",
        reply_to="back",
        reply_to_session_id="rs",
        time_to_live_ms=86_400_000,
        application_properties=dict(PROPS),
    )
    b.messaging.send(NS, "q", [full])
    b.messaging.send(NS, "q", [Message(body=bytes(range(256)), message_id="binary")])
    for name in ("complete-me", "defer-me", "dead-me", "stay"):
        b.messaging.send(NS, "q", [Message(body=name.encode(), message_id=name)])
    b.messaging.send(
        NS,
        "q",
        [
            Message(
                body=b"later",
                message_id="scheduled",
                scheduled_enqueue_time_ms=clock.now_ms() + 3_600_000,
            )
        ],
    )
    got = {
        r.message_id: r
        for r in (
            ReceivedMessage.from_wire(d) for d in b.messaging.receive(NS, "q", 10, "peek-lock")
        )
    }
    b.messaging.settle(NS, "q", "complete", [got["complete-me"].lock_token or ""])
    b.messaging.settle(
        NS, "q", "defer", [got["defer-me"].lock_token or ""], properties={"deferred": 1}
    )
    b.messaging.settle(
        NS,
        "q",
        "dead-letter",
        [got["dead-me"].lock_token or ""],
        reason="TooOld",
        description="it was too old",
    )
    rest = [t.lock_token or "" for k, t in got.items() if k not in ("complete-me", "defer-me")]
    rest = [t for t in rest if t != got["dead-me"].lock_token]
    b.messaging.settle(NS, "q", "abandon", rest, properties={"abandoned": "yes"})

    for i in range(12):
        b.messaging.send(
            NS,
            "pq",
            [Message(body=f"p{i}".encode(), message_id=f"p{i}", partition_key=f"k{i % 5}")],
        )
    (first,) = b.messaging.receive(NS, "pq", 1, "peek-lock")
    b.messaging.settle(NS, "pq", "dead-letter", [first.lock_token or ""], reason="Bad")

    for sid in ("s1", "s2"):
        for i in range(3):
            b.messaging.send(NS, "sq", [Message(body=f"{sid}-{i}".encode(), session_id=sid)])
    b.messaging.session_set_state(NS, "sq", "s1", b"\x00state-of-s1\xff")
    b.messaging.session_set_state(NS, "sq", "s2", b"{}")

    for color, subject in (("red", None), ("blue", "urgent"), ("green", None), ("red", "x")):
        b.messaging.send(
            NS,
            "t",
            [
                Message(
                    body=f"{color}/{subject}".encode(),
                    subject=subject,
                    application_properties={"color": color, "n": 1.5, "flag": True},
                )
            ],
        )
    (one,) = b.messaging.receive(NS, "t/subscriptions/all", 1, "peek-lock")
    b.messaging.settle(NS, "t/subscriptions/all", "dead-letter", [one.lock_token or ""], reason="R")
    clock.advance(1_000)


def snapshot(b: Broker) -> dict[str, Any]:
    out: dict[str, Any] = {"entities": {}, "counts": {}, "session_state": {}}
    for path in PATHS:
        got: list[Delivered] = []
        start = 0
        while page := b.messaging.peek(NS, path, 100, start):  # a peek walks on across partitions
            got.extend(page)
            start = page[-1].sequence_number + 1
        out["entities"][path] = [
            ReceivedMessage.from_wire(d).to_dict() | {"lock_token": None, "locked_until_utc": None}
            for d in got
        ]
    for name in ("q", "pq", "sq"):
        q = b.management.queue_get(NS, name)
        out["counts"][name] = {k: q[k] for k in COUNT_KEYS}
    for name in ("all", "red"):
        s = b.management.subscription_get(NS, "t", name)
        out["counts"][f"t/{name}"] = {k: s.get(k) for k in COUNT_KEYS}
    out["rules"] = {r["name"]: r for r in b.management.rule_list(NS, "t", "red")}
    for sid in ("s1", "s2"):
        state = b.messaging.session_get_state(NS, "sq", sid)
        out["session_state"][sid] = None if state is None else state.hex()
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        clock = FakeClock()
        b = Broker(data, clock, Syncer("fsync"), default_credits_per_second=0)
        populate(b, clock)
        b.housekeeping.close()
        b = Broker(data, clock, Syncer("fsync"), default_credits_per_second=0)
        expected = snapshot(b)
        b.housekeeping.close()
        with tarfile.open(HERE / "datadir_v1.tar.gz", "w:gz") as tar:
            tar.add(data, arcname="data")
    (HERE / "datadir_v1.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", HERE / "datadir_v1.tar.gz", file=sys.stderr)


if __name__ == "__main__":
    main()
