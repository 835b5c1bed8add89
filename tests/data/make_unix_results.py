"""Writes tests/data/unix_results_v1.json: what the Unix socket answered for every kind of
described result (namespaces, credits, queues with a slow and an unavailable partition,
topics, subscriptions, rules, faults, sessions, a renewed lock, a pairing, an overview)
in the release before the domain returned typed results (its dicts were the wire form).

Run once with that release's code (``python tests/data/make_unix_results.py``); the
committed file is what tests/unit/test_unix_presentation.py compares today's presentation
with, key order included (``sbctl … -o json`` prints the keys in that order). Lock tokens
are random: they are replaced by ``<token>``.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sbctl.core.errors import SbctlError
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.overview import overview
from sbctld.storage.sync import Syncer

NS = DEFAULT_NAMESPACE
HERE = Path(__file__).resolve().parent
TOKEN_KEYS = ("lock_token", "session_lock_token")


def scrub(value: Any) -> Any:
    """Lock tokens → ``<token>`` (they are random)."""
    if isinstance(value, dict):
        return {k: "<token>" if k in TOKEN_KEYS else scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def scenario(b: Broker, clock: FakeClock, show: Callable[[Any], Any]) -> dict[str, Any]:
    """Every described result, each as ``show`` turns it into the wire form."""
    out: dict[str, Any] = {}

    def keep(name: str, result: Any) -> None:
        out[name] = scrub(show(result))

    keep("namespace_create", b.management.namespace_create("premium1", "premium", 2, 2))
    keep("namespace_get", b.management.namespace_get(NS))
    keep("namespace_list", b.management.namespace_list())
    clock.advance(1_500)
    keep("namespace_credits", b.management.namespace_credits(NS))
    keep("namespace_credits_premium", b.management.namespace_credits("premium1"))
    keep("queue_create", b.management.queue_create(NS, "q", {"enable_partitioning": True}))
    options = {"lock_duration": 30_000, "default_message_time_to_live": 3_723_004}
    clock.advance(61_000)
    keep("queue_update", b.management.queue_update(NS, "q", options | {"user_metadata": "m"}))
    keep("fault_unavailable", b.housekeeping.fault_add(NS, "q", [1]))
    keep("fault_slow", b.housekeeping.fault_add(NS, "q", [2, 3], "slow", 1_250))
    keep("queue_get_faulty", b.management.queue_get(NS, "q"))
    keep("queue_list", b.management.queue_list(NS))
    keep("fault_list", b.housekeeping.fault_list(NS))
    keep("fault_clear", b.housekeeping.fault_clear(NS, ["f1"]))
    keep("topic_create", b.management.topic_create(NS, "t", {"auto_delete_on_idle": 3_600_000}))
    keep(
        "subscription_create",
        b.management.subscription_create(NS, "t", "s", {"lock_duration": 5_000}),
    )
    rule = b.management.rule_create(
        NS, "t", "s", "red", {"type": "sql", "sql_expression": "a > 1"}, "SET a=2"
    )
    keep("rule_create", rule)
    keep("rule_list", b.management.rule_list(NS, "t", "s"))
    b.messaging.send(NS, "t", [Message(body=b"x", application_properties={"a": 2})])
    keep("topic_get", b.management.topic_get(NS, "t"))
    keep("topic_list", b.management.topic_list(NS))
    keep("subscription_get", b.management.subscription_get(NS, "t", "s"))
    keep("subscription_list", b.management.subscription_list(NS, "t"))
    b.management.queue_create(NS, "sq", {"requires_session": True})
    b.messaging.send(
        NS, "sq", [Message(body=b"s", session_id="s1"), Message(body=b"t", session_id="s2")]
    )
    accepted = b.messaging.session_accept(NS, "sq", "s1")
    keep("session_accept", accepted)
    token = show(accepted)["session_lock_token"]
    clock.advance(2_000)
    keep("session_renew", b.messaging.session_renew(NS, "sq", token))
    keep("session_list", b.messaging.session_list(NS, "sq"))
    b.management.queue_create(NS, "plain", {})
    b.messaging.send(NS, "plain", [Message(body=b"p")])
    (got,) = b.messaging.receive(NS, "plain", 1, "peek-lock")
    clock.advance(3_000)
    bad = "00000000-0000-0000-0000-000000000000"
    keep("settle_renew_lock", b.messaging.settle(NS, "plain", "renew-lock", [got.lock_token, bad]))
    b.management.namespace_create("secondary1")
    b.pairings.rng.seed(7)  # which backlog queue a sender gets
    keep("pair", b.pairings.pair(NS, "secondary1", 2, 60_000, 5_000, False))
    b.housekeeping.fault_add(NS, "plain")  # its sends fail, then fail over to the backlog queues
    for _ in range(2):
        with contextlib.suppress(SbctlError):
            b.messaging.send(NS, "plain", [Message(body=b"f")], 1)
        clock.advance(61_000)
    keep("pair_status_failed_over", b.pairings.status(NS))
    keep("overview", overview(b, NS))
    b.management.namespace_delete("secondary1")  # faults the pairing
    keep("pair_status_faulted", b.pairings.status(NS))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clock = FakeClock()
        b = Broker(Path(tmp) / "data", clock, Syncer("os"), default_credits_per_second=0)
        try:
            results = scenario(b, clock, lambda result: result)
        finally:
            b.housekeeping.close()
    (HERE / "unix_results_v1.json").write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {len(results)} results", file=sys.stderr)


if __name__ == "__main__":
    main()
