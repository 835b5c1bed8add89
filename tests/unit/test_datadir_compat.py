"""A data dir written by the first release (stored records without a version) still opens.

tests/data/datadir_v1.tar.gz was written by tests/data/make_datadir_v1.py with that release's
code and is never regenerated; tests/data/datadir_v1.json is what it held then (every message
of every entity and dead-letter queue, counts, rules, session state).
"""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import presenting
from sbctl.core.messages import ReceivedMessage
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.storage.sync import Syncer

DATA = Path(__file__).resolve().parent.parent / "data"
START_MS = 1_767_225_600_000 + 1_000  # the generator's fake clock when it closed the dir


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_datadir_v1", DATA / "make_datadir_v1.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _open(tmp_path: Path, clock: FakeClock) -> Any:
    """The data dir's broker, its results as the CLI sees them (tests/presenting.py)."""
    with tarfile.open(DATA / "datadir_v1.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    b = Broker(tmp_path / "data", clock, Syncer("fsync"), default_credits_per_second=0)
    return presenting.Presented(b)


def test_every_message_count_rule_and_session_state_reads_back(tmp_path: Path) -> None:
    expected: dict[str, Any] = json.loads((DATA / "datadir_v1.json").read_text())
    gen = _generator()
    b = _open(tmp_path, FakeClock(START_MS))
    try:
        got = json.loads(json.dumps(gen.snapshot(b)))
    finally:
        b.housekeeping.close()
    for path, messages in expected["entities"].items():
        assert got["entities"][path] == messages, path
    assert got["counts"] == expected["counts"]
    assert got["rules"] == expected["rules"]
    assert got["session_state"] == expected["session_state"]
    # The scenario the generator wrote, spelled out, so a wrong snapshot cannot pass.
    q = {m["message_id"]: m for m in got["entities"]["q"]}
    assert q["m-1"]["application_properties"] == gen.PROPS | {"abandoned": "yes"}
    assert q["binary"]["body_base64"] and q["defer-me"]["state"] == "deferred"
    assert q["scheduled"]["state"] == "scheduled" and "complete-me" not in q
    (dead,) = got["entities"]["q/$deadletterqueue"]
    assert (dead["message_id"], dead["dead_letter_reason"]) == ("dead-me", "TooOld")
    assert len(got["entities"]["pq"]) == 11 and got["session_state"]["s1"] is not None


def test_an_old_data_dir_takes_new_messages_and_settles_old_ones(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    b = _open(tmp_path, clock)
    try:
        ns = DEFAULT_NAMESPACE
        b.messaging.send(ns, "q", [Message(body=b"new", message_id="new")])
        got = [ReceivedMessage.from_wire(d) for d in b.messaging.receive(ns, "q", 10, "peek-lock")]
        ids = sorted(m.message_id or "" for m in got)
        assert ids == ["binary", "m-1", "new", "stay"]
        b.messaging.settle(ns, "q", "complete", [m.lock_token or "" for m in got])
        b.housekeeping.close()
        b = presenting.Presented(
            Broker(tmp_path / "data", clock, Syncer("fsync"), default_credits_per_second=0)
        )
        assert b.messaging.receive(ns, "q", 10, "receive-and-delete") == []
        counts = b.management.queue_get(ns, "q")
        assert counts["deferred_message_count"] == 1
        assert counts["dead_letter_message_count"] == 1
        assert counts["total_message_count"] == 3  # deferred, scheduled, dead-lettered
    finally:
        b.housekeeping.close()
