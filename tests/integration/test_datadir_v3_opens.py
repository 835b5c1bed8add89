"""A data dir written by the release whose stored record is version 3 opens with today's
daemon and serves every message as that release recorded it.

tests/data/datadir_v3.tar.gz was written by tests/data/make_datadir_v3.py with that release's
daemon (commit b56458d), through the Unix client, the azure-servicebus SDK and the
administration SDK, and is never regenerated; tests/data/datadir_v3.json is what that
release served from it: every message of every entity and sub-queue as the Unix client
peeks it (typed values with their AMQP ``$type``) and as the SDK peeks it over AMQP, counts,
rules and session states. The tail of one queue was written after the last checkpoint (the
daemon was killed), so recovery reads it. Here today's daemon opens the same tarball: the
views must be equal, the typed values must reach an AMQP peer with their AMQP types, every
active and deferred message is received once (through the Unix client or the SDK) and new
messages go and come back. One daemon for the module; the read-only tests run first.
"""

from __future__ import annotations

import importlib.util
import json
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from conftest import Daemon, dispose, new_daemon
from sbctl import Message
from sbctl.core.amqp import codec
from sbctl.core.amqp import types as t
from tests.integration.amqp_raw import RawClient
from tests.integration.amqp_sdk import (  # noqa: F401
    cli_json,
    collect_sdk_sockets,
    connection_string,
    receive_exactly,
)

pytest.importorskip("azure.servicebus")
from azure.servicebus import ServiceBusClient, ServiceBusMessage

DATA = Path(__file__).resolve().parent.parent / "data"
EXPECTED: dict[str, Any] = json.loads((DATA / "datadir_v3.json").read_text())
NS, PREMIUM = "sbemulatorns", "premns"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_datadir_v3", DATA / "make_datadir_v3.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _generator()


@pytest.fixture(scope="module")
def v3() -> Iterator[Daemon]:
    d = new_daemon(start=False)
    try:
        with tarfile.open(DATA / "datadir_v3.tar.gz") as tar:
            tar.extractall(d.data_dir.parent, filter="data")
        d.start()
        yield d
    finally:
        dispose(d)


def _by_id(messages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {m["message_id"]: m for m in messages}


def _expected(view: str, path: str) -> dict[int, dict[str, Any]]:
    """The recorded messages of ``path`` by sequence number."""
    return {m["sequence_number"]: m for m in EXPECTED[view]["entities"][path]}


def test_every_message_count_rule_and_session_state_reads_back_through_the_unix_client(
    v3: Daemon,
) -> None:
    got = gen.unix_view(v3.socket)
    for path, messages in EXPECTED["unix"]["entities"].items():
        assert got["entities"][path] == messages, path
    assert got["counts"] == EXPECTED["unix"]["counts"]
    assert got["rules"] == EXPECTED["unix"]["rules"]
    assert got["session_state"] == EXPECTED["unix"]["session_state"]
    # The scenario the generator wrote, spelled out, so a wrong recording cannot pass.
    plain = _by_id(got["entities"][f"{NS}/plain"])
    typed = plain["sdk-typed"]["application_properties"]
    assert {k: v["$type"] for k, v in typed.items() if isinstance(v, dict)} == {
        "short": "short",
        "symbol": "symbol",
        "binary": "binary",
        "uint": "uint",
        "uuid": "uuid",
        "timestamp": "timestamp",
    }
    assert (typed["double"], typed["bool"], typed["null"], typed["long"]) == (
        2.5,
        True,
        None,
        2**40,
    )
    assert plain["sdk-typed"]["message_annotations"]["x-opt-count"] == {"$type": "long", "value": 9}
    assert plain["unix-full"]["application_properties"]["id"] == {
        "$type": "uuid",
        "value": str(gen.ID),
    }
    assert plain["unix-full"]["time_to_live"] == gen.LONG_TTL_MS / 1000
    assert plain["unix-big"]["body_base64"]["length"] > 200 * 1024
    assert plain["unix-unicode"]["body"] == plain["sdk-unicode"]["body"] == gen.UNICODE
    assert (plain["sdk-value"]["body_kind"], plain["sdk-sequence"]["body_kind"]) == (
        "value",
        "sequence",
    )
    assert plain["unix-defer"]["state"] == "deferred" and "unix-complete" not in plain
    assert plain["unix-abandon"]["delivery_count"] == 2
    scheduled = [
        m["scheduled_enqueue_time_utc"] for m in plain.values() if m["state"] == "scheduled"
    ]
    assert scheduled == ["2100-01-01T00:00:00.000Z"] * 2
    assert {"tail-unix", "tail-sdk"} <= set(plain)  # written after the last checkpoint
    (dead,) = got["entities"][f"{NS}/sdkq/$deadletterqueue"]
    assert (dead["dead_letter_reason"], dead["dead_letter_error_description"]) == (
        "SdkReason",
        "dead-lettered by the SDK",
    )
    forwarded = got["entities"][f"{NS}/fwd-dst"]
    assert [m["message_id"] for m in forwarded] == ["fwd-1", "fwd-2"]
    assert all(m["enqueued_sequence_number"] is not None for m in forwarded)
    assert [m["message_id"] for m in got["entities"][f"{NS}/dedup"]] == ["dup-1", "dup-2"]
    assert len(got["entities"][f"{PREMIUM}/pq"]) == 7
    assert got["rules"]["sql"][0]["action_parameters"] == {"@by": "sql-rule"}
    assert got["session_state"]["s1"] is not None and got["session_state"]["s3"] is not None


def test_every_message_reads_back_through_the_sdk(v3: Daemon) -> None:
    got = gen.sdk_view({ns: connection_string(v3, ns) for ns in (NS, PREMIUM)})
    for path, messages in EXPECTED["sdk"]["entities"].items():
        assert got["entities"][path] == messages, path
    assert got["session_state"] == EXPECTED["sdk"]["session_state"]
    plain = {m["properties"]["message_id"][1]: m for m in got["entities"][f"{NS}/plain"]}
    typed = plain["c2RrLXR5cGVk"]  # b"sdk-typed"
    assert typed["application_properties"]["uuid"] == ["UUID", str(gen.ID)]
    assert typed["application_properties"]["double"] == ["float", 2.5]
    assert [plain[k]["body_type"] for k in ("c2RrLXZhbHVl", "c2RrLXNlcXVlbmNl")] == [
        "value",
        "sequence",
    ]


def _wire_peek(port: int, entity: str, count: int) -> list[codec.Message]:
    """``count`` messages of ``entity`` as an AMQP peer decodes them (a management peek)."""
    client = RawClient(port)
    try:
        tx, _rx = client.management(f"{entity}/$management")
        client.until(t.Attach)
        status, body = client.request(
            tx, f"{entity}/$management", "com.microsoft:peek-message",
            {"from-sequence-number": t.Long(0), "message-count": count}, 0,
        )  # fmt: skip
        assert status["statusCode"] == 200, status
        return [codec.decode_message(bytes(m["message"])) for m in body["messages"]]
    finally:
        client.close()


def test_typed_values_reach_an_amqp_peer_with_their_amqp_types(v3: Daemon) -> None:
    port: int = cli_json(v3, "daemon", "status")["amqp_port"]
    count = len(EXPECTED["unix"]["entities"][f"{NS}/plain"])
    got = {str(m.properties.message_id): m for m in _wire_peek(port, "plain", count)}
    assert len(got) == count
    for name in ("sdk-typed", "tail-sdk"):  # (tail-sdk: recovered, past the checkpoint)
        typed = got[name].application_properties or {}
        assert {k: type(v) for k, v in typed.items()} == {
            "long": int,  # (the codec's plain int is an AMQP long)
            "short": t.Short,
            "symbol": t.Symbol,
            "binary": bytes,
            "uint": t.UInt,
            "uuid": uuid.UUID,
            "timestamp": t.Timestamp,
            "double": float,
            "bool": bool,
            "null": type(None),
            "int": t.Int,
            "str": str,
        }, name
        assert typed["timestamp"] == int(gen.AT.timestamp() * 1000)
        assert (typed["symbol"], typed["short"], typed["uint"]) == ("sym", -12, 4_000_000_000)
        annotations = got[name].message_annotations or {}
        assert type(annotations["x-opt-when"]) is t.Timestamp
        assert (annotations["x-opt-custom"], annotations["x-opt-count"]) == ("mine", 9)
    unix = got["unix-full"].application_properties or {}
    assert (type(unix["at"]), type(unix["id"]), type(unix["blob"])) == (
        t.Timestamp,
        uuid.UUID,
        bytes,
    )
    assert (got["sdk-value"].body_kind, got["sdk-value"].body) == (
        "value",
        {"k": [1, "two", 3.5], "n": None},
    )
    assert (got["sdk-sequence"].body_kind, got["sdk-sequence"].body) == (
        "sequence",
        [[1, "a"], [2, "b"]],
    )


def _view_when_received(view: dict[str, Any]) -> dict[str, Any]:
    """What a recorded peek view of an active message becomes when it is received."""
    return view | {"delivery_count": view["delivery_count"] + 1}


def test_active_and_deferred_messages_are_received_through_the_unix_client(v3: Daemon) -> None:
    path = f"{NS}/plain"
    expected = _expected("unix", path)
    active = sorted(s for s, m in expected.items() if m["state"] == "active")
    (deferred,) = [s for s, m in expected.items() if m["state"] == "deferred"]
    with v3.client() as c:
        got = c.receive("plain", len(active) + 5, max_wait=5)
        while len(got) < len(active) and (more := c.receive("plain", len(active), max_wait=5)):
            got += more
        assert sorted(m.sequence_number for m in got) == active
        for m in got:
            assert gen.unix_message_view(m) == _view_when_received(expected[m.sequence_number]), (
                m.message_id
            )
        c.complete("plain", [m.lock_token or "" for m in got])
        (d,) = c.receive_deferred("plain", [deferred])
        assert gen.unix_message_view(d) == _view_when_received(expected[deferred])
        c.complete("plain", [d.lock_token or ""])
        # New messages go and come back beside the old ones.
        c.send(
            "plain", [Message(body=b"new", message_id="new", application_properties={"id": gen.ID})]
        )
        (new,) = c.receive("plain", 5, max_wait=5, mode="receive-and-delete")
        assert (new.body, new.application_properties) == (b"new", {"id": gen.ID})
        assert new.sequence_number > max(expected)
        counts = c.queue_get("plain")
    assert (counts["active_message_count"], counts["scheduled_message_count"]) == (0, 2)
    assert counts["dead_letter_message_count"] == 1


def _receive_recorded(receiver: Any, expected: dict[int, dict[str, Any]], sid: Any) -> int:
    """Receive and complete every recorded active and deferred message ``receiver`` serves
    (of session ``sid``); each must equal its recorded peek (the AMQP header's delivery
    count is the number of earlier deliveries, daemon/README.md §29). How many it got."""
    mine = {s: m for s, m in expected.items() if m["session_id"] == sid}
    active = sorted(s for s, m in mine.items() if m["state"] == "ACTIVE")
    deferred = sorted(s for s, m in mine.items() if m["state"] == "DEFERRED")
    got = receive_exactly(receiver, len(active)) if active else []
    if deferred:
        got += receiver.receive_deferred_messages(sequence_numbers=deferred)
    assert sorted(m.sequence_number for m in got) == sorted(active + deferred)
    for m in got:
        assert gen.sdk_message_view(m) == mine[m.sequence_number], m.sequence_number
        receiver.complete_message(m)
    return len(got)


def test_every_other_message_is_received_through_the_sdk(v3: Daemon) -> None:
    """Every entity and sub-queue but ``plain`` (the Unix client's), session by session."""
    strings = {ns: connection_string(v3, ns) for ns in (NS, PREMIUM)}

    def receive(job: tuple[str, str, str | None]) -> int:
        ns, path, sid = job
        with gen.sdk_receiver(strings[ns], path, sid) as receiver:
            if sid is not None:
                state = receiver.session.get_state()
                want = EXPECTED["sdk"]["session_state"][sid]
                assert (None if state is None else state.hex()) == want, sid
            return _receive_recorded(receiver, _expected("sdk", f"{ns}/{path}"), sid)

    jobs = [job for job in gen.sdk_jobs() if job[:2] != (NS, "plain")]
    recorded = sum(
        m["state"] in ("ACTIVE", "DEFERRED")
        for path, messages in EXPECTED["sdk"]["entities"].items()
        if path != f"{NS}/plain"
        for m in messages
    )
    assert sum(gen.in_parallel(receive, jobs)) == recorded == 45
    # A new message with typed values goes and comes back with them.
    with ServiceBusClient.from_connection_string(strings[NS]) as sb:
        with sb.get_queue_sender("sdkq") as sender:
            sender.send_messages(ServiceBusMessage("new", application_properties={"id": gen.ID}))
        with sb.get_queue_receiver("sdkq", max_wait_time=5) as receiver:
            (new,) = receive_exactly(receiver, 1)
            receiver.complete_message(new)
            assert receiver.receive_messages(max_wait_time=1) == []
    assert (str(new), new.application_properties) == ("new", {b"id": gen.ID})
    for ns, name in gen.QUEUES:
        if name not in ("plain", "sdkq"):
            with v3.client(ns) as c:
                counts = c.queue_get(name)
            assert counts["active_message_count"] == counts["deferred_message_count"] == 0, name
