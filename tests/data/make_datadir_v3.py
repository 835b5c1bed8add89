"""Writes tests/data/datadir_v3.tar.gz and datadir_v3.json: a data dir written by the release
whose stored message record is version 3 (sbctl.core.records: typed values as AMQP
extensions, amqp-value and amqp-sequence bodies), and what every message in it looks like.

Run once with that release's code, a daemon of its own on a temporary data dir::

    PYTHONPATH=<that checkout>:<that checkout>/daemon python tests/data/make_datadir_v3.py

(the committed files were written by commit b56458d). The daemon is driven the way users
drive it: the Unix client and the CLI, the azure-servicebus SDK over AMQP and the
administration SDK over HTTP. Two namespaces (the standard default and a premium one with
two partitions); a plain, a partitioned, a session, a duplicate-detection and a forwarding
queue; a topic with SQL (parameters, an action) and correlation rules. Messages are
active, deferred, scheduled (in 2100), dead-lettered with a reason, abandoned twice,
completed (gone), forwarded; properties and annotations of every AMQP type the SDK sends;
a 200 KiB body, unicode, amqp-value and amqp-sequence bodies; session state. The daemon is
stopped cleanly, then started again to take three more messages and killed (SIGKILL), so
one queue's tail is past its last checkpoint and is read back by recovery.

Do not regenerate the files with a later release: the point is that they stay as this
release wrote them. tests/integration/test_datadir_v3_opens.py opens them with today's code
and compares with :func:`unix_view` and :func:`sdk_view`, which use only the public client
and SDK (they run on both releases).
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import datetime
import gzip
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sbctl import Client, Message

HERE = Path(__file__).resolve().parent
NS = "sbemulatorns"
PREMIUM = "premns"
LATER_MS = 4_102_444_800_000  # 2100-01-01T00:00:00Z: scheduled messages never come due
LONG_TTL_MS = 3650 * 86_400_000  # ten years
BIG = bytes(range(256)) * 800  # 200 KiB, compresses well
UNICODE = "héllo wörld ✓ 日本語 🚀"
AT = datetime.datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=datetime.UTC)
ID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")

# What the Unix client sends as properties (the client's own typed values included).
UNIX_PROPS: dict[str, Any] = {
    "s": "text é",
    "i": 42,
    "big": 2**40,
    "neg": -7,
    "f": 2.5,
    "t": True,
    "n": None,
    "empty": "",
    "at": AT,
    "id": ID,
    "blob": b"\x00\x01\xfe\xff",
}
# What the SDK sends: pyamqp's {"TYPE", "VALUE"} form for the types Python cannot tell apart.
SDK_PROPS: dict[str, Any] = {
    "long": {"TYPE": "LONG", "VALUE": 2**40},
    "short": {"TYPE": "SHORT", "VALUE": -12},
    "symbol": {"TYPE": "SYMBOL", "VALUE": b"sym"},
    "binary": {"TYPE": "BINARY", "VALUE": b"\x00\x01\xfe\xff"},
    "uint": {"TYPE": "UINT", "VALUE": 4_000_000_000},
    "uuid": ID,
    "timestamp": AT,
    "double": 2.5,
    "bool": True,
    "null": None,
    "int": 7,
    "str": "välue",
}
ANNOTATIONS: dict[str, Any] = {
    "x-opt-custom": "mine",
    "x-opt-when": AT,
    "x-opt-count": {"TYPE": "LONG", "VALUE": 9},
}

# Every path the views cover (namespace, path); a session entity's sessions below.
PATHS = (
    (NS, "plain"),
    (NS, "plain/$deadletterqueue"),
    (NS, "sdkq"),
    (NS, "sdkq/$deadletterqueue"),
    (NS, "parts"),
    (NS, "parts/$deadletterqueue"),
    (NS, "sess"),
    (NS, "dedup"),
    (NS, "fwd-src"),
    (NS, "fwd-dst"),
    (NS, "events/subscriptions/all"),
    (NS, "events/subscriptions/all/$deadletterqueue"),
    (NS, "events/subscriptions/sql"),
    (NS, "events/subscriptions/corr"),
    (PREMIUM, "pq"),
    (PREMIUM, "pq/$deadletterqueue"),
)
SESSIONS = {(NS, "sess"): ("s1", "s2", "s3")}
QUEUES = (
    (NS, "plain"),
    (NS, "sdkq"),
    (NS, "parts"),
    (NS, "sess"),
    (NS, "dedup"),
    (NS, "fwd-src"),
    (NS, "fwd-dst"),
    (PREMIUM, "pq"),
)
SUBSCRIPTIONS = ("all", "sql", "corr")
COUNT_KEYS = (
    "active_message_count",
    "deferred_message_count",
    "dead_letter_message_count",
    "scheduled_message_count",
    "total_message_count",
)
# SDK annotations that depend on when (or by whom) a message was looked at, not on the data.
TRANSIENT = ("x-opt-locked-until", "x-opt-lock-token")


class Daemon:
    """A daemon of the checkout on PYTHONPATH, on ``root/data``, driven by its CLI."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.data = root / "data"
        self.socket = root / "s.sock"
        self.env = dict(os.environ)
        self.env.update(
            SBCTL_DATA_DIR=str(self.data),
            SBCTL_SOCKET=str(self.socket),
            SBCTL_DEFAULT_CREDITS_PER_SECOND="0",
            SBCTL_AMQP_PORT="0",
            SBCTL_HTTP_PORT="0",
            NO_COLOR="1",
        )
        self.env.pop("SBCTL_NAMESPACE", None)

    def cli(self, *args: str) -> Any:
        proc = subprocess.run(
            [sys.executable, "-m", "sbctl.cli.app", "-o", "json", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=120,
            check=False,
            cwd=self.root,  # not the checkout's directory: PYTHONPATH says which code runs
        )
        if proc.returncode != 0:
            raise RuntimeError(f"sbctl {' '.join(args)}: {proc.stderr}")
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    def client(self, namespace: str = NS) -> Client:
        return Client(self.socket, namespace=namespace)

    def connection_string(self, namespace: str = NS) -> str:
        return str(self.cli("namespace", "connection-string", namespace)["connection_string"])

    def kill(self) -> None:
        pid = int((self.data / "sbctld.pid").read_text().strip())
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise RuntimeError(f"daemon {pid} did not die")


# -- writing


def create_entities(d: Daemon) -> None:
    from azure.servicebus.management import (
        ServiceBusAdministrationClient,
        SqlRuleAction,
        SqlRuleFilter,
    )

    with d.client() as c:
        c.namespace_create(PREMIUM, sku="premium", premium_messaging_partitions=2)
        c.queue_create("plain", max_delivery_count=5)
        c.queue_create("parts", enable_partitioning=True)
        c.queue_create("sess", requires_session=True)
        c.queue_create("sdkq", max_delivery_count=5)
        c.queue_create("dedup", requires_duplicate_detection=True)
        c.queue_create("fwd-dst")
        c.queue_create("fwd-src", forward_to="fwd-dst")
        c.topic_create("events")
        for name in SUBSCRIPTIONS:
            c.subscription_create("events", name)
        c.rule_delete("events", "corr", "$Default")
        c.rule_create(
            "events",
            "corr",
            "urgent",
            {"type": "correlation", "subject": "urgent", "properties": {"color": "blue"}},
        )
    with d.client(PREMIUM) as c:
        c.queue_create("pq", enable_partitioning=True)
    cert = d.cli("daemon", "cert")["certificate"]
    with ServiceBusAdministrationClient.from_connection_string(
        d.connection_string(), connection_verify=cert, retry_total=0
    ) as admin:
        admin.delete_rule("events", "sql", "$Default")
        admin.create_rule(
            "events",
            "sql",
            "reds",
            filter=SqlRuleFilter(
                "color = @color AND n > @min", parameters={"@color": "red", "@min": 5}
            ),
            action=SqlRuleAction("SET by = @by; SET hops = 1", parameters={"@by": "sql-rule"}),
        )


def sdk_message(body: Any = None, **kw: Any) -> Any:
    from azure.servicebus import ServiceBusMessage

    return ServiceBusMessage(body, **kw)


def send_unix(d: Daemon) -> None:
    with d.client() as c:
        full = Message(
            body=b"hello",
            message_id="unix-full",
            correlation_id="c-1",
            subject="subj",
            content_type="text/plain",
            to="someone",
            reply_to="back",
            reply_to_session_id="rs",
            time_to_live_ms=LONG_TTL_MS,
            application_properties=dict(UNIX_PROPS),
        )
        c.send("plain", [full])
        c.send("plain", [Message(body=BIG, message_id="unix-big")])
        c.send("plain", [Message(body=UNICODE.encode(), message_id="unix-unicode")])
        c.send("plain", [Message(body=bytes(range(256)), message_id="unix-binary")])
        for name in ("unix-complete", "unix-defer", "unix-dead", "unix-abandon"):
            c.send("plain", [Message(body=name.encode(), message_id=name)])
        c.schedule("plain", [Message(body=b"later", message_id="unix-scheduled")], LATER_MS)
        got = {m.message_id: m for m in c.receive("plain", 20, max_wait=5)}
        assert len(got) == 8, sorted(got)
        c.complete("plain", [got["unix-complete"].lock_token or ""])
        c.defer("plain", [got["unix-defer"].lock_token or ""], properties={"deferred": 1})
        c.dead_letter(
            "plain",
            [got["unix-dead"].lock_token or ""],
            reason="TooOld",
            description="it was too old",
        )
        settled = ("unix-complete", "unix-defer", "unix-dead")
        rest = [m.lock_token or "" for k, m in got.items() if k not in settled]
        c.abandon("plain", rest, properties={"abandoned": "yes"})
        again = c.receive("plain", 20, max_wait=5)
        assert len(again) == 5, [m.message_id for m in again]
        c.abandon("plain", [m.lock_token or "" for m in again])  # delivery count 2 now

        for i in range(10):
            c.send(
                "parts",
                [Message(body=f"p{i}".encode(), message_id=f"p{i}", partition_key=f"k{i % 4}")],
            )
        (first,) = c.receive("parts", 1, max_wait=5)
        c.dead_letter("parts", [first.lock_token or ""], reason="Bad")

        for sid in ("s1", "s2"):
            for i in range(2):
                c.send(
                    "sess",
                    [Message(body=f"{sid}-{i}".encode(), session_id=sid, message_id=f"{sid}-{i}")],
                )
        c.set_session_state("sess", "s1", b"\x00state-of-s1\xff")

        for _ in range(2):  # the second is a duplicate, dropped
            c.send("dedup", [Message(body=b"once", message_id="dup-1")])
        c.send("dedup", [Message(body=b"twice", message_id="dup-2")])

        c.send(
            "fwd-src",
            [
                Message(
                    body=b"forwarded", message_id="fwd-1", application_properties={"via": "unix"}
                )
            ],
        )

        for color, subject, n in (
            ("red", None, 9),
            ("red", None, 1),
            ("blue", "urgent", 9),
            ("green", "x", 7),
        ):
            c.send(
                "events",
                [
                    Message(
                        body=f"{color}/{subject}/{n}".encode(),
                        subject=subject,
                        message_id=f"ev-{color}-{n}",
                        application_properties={"color": color, "n": n},
                    )
                ],
            )
        (one,) = c.receive("events/subscriptions/all", 1, max_wait=5)
        c.dead_letter(
            "events/subscriptions/all",
            [one.lock_token or ""],
            reason="R",
            description="subscription dead letter",
        )


def settle_with_sdk(sb: Any) -> None:
    """On ``sdkq``: deferred, dead-lettered, completed, abandoned twice and once."""
    names = ("sdk-defer", "sdk-dead", "sdk-complete", "sdk-abandon", "sdk-keep")
    with sb.get_queue_sender("sdkq") as sender:
        sender.send_messages([sdk_message(n, message_id=n) for n in names])
    with sb.get_queue_receiver("sdkq", max_wait_time=5) as receiver:
        got: dict[str, Any] = {}
        while len(got) < len(names):
            batch = receiver.receive_messages(max_message_count=len(names), max_wait_time=5)
            assert batch, sorted(got)
            got |= {m.message_id: m for m in batch}
        receiver.defer_message(got["sdk-defer"])
        receiver.dead_letter_message(
            got["sdk-dead"], reason="SdkReason", error_description="dead-lettered by the SDK"
        )
        receiver.complete_message(got["sdk-complete"])
        receiver.abandon_message(got["sdk-abandon"])
        receiver.abandon_message(got["sdk-keep"])
        (again,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert again.message_id == "sdk-abandon", again.message_id
        receiver.abandon_message(again)  # delivery count 2


def send_sdk(d: Daemon) -> None:
    from azure.servicebus import ServiceBusClient
    from azure.servicebus.amqp import AmqpAnnotatedMessage

    with ServiceBusClient.from_connection_string(d.connection_string()) as sb:
        with sb.get_queue_sender("plain") as sender:
            typed = sdk_message(
                "sdk typed", message_id="sdk-typed", application_properties=dict(SDK_PROPS)
            )
            typed.raw_amqp_message.annotations = dict(ANNOTATIONS)
            sender.send_messages(typed)
            value = AmqpAnnotatedMessage(
                value_body={"k": [1, "two", 3.5], "n": None},
                properties={"message_id": "sdk-value"},
                application_properties={"kind": "value"},
            )
            sender.send_messages(value)
            text_value = AmqpAnnotatedMessage(
                value_body="a string value", properties={"message_id": "sdk-string-value"}
            )
            sender.send_messages(text_value)
            sequence = AmqpAnnotatedMessage(
                sequence_body=[[1, "a"], [2, "b"]],
                properties={"message_id": "sdk-sequence"},
            )
            sender.send_messages(sequence)
            sender.send_messages(
                sdk_message(
                    UNICODE, message_id="sdk-unicode", content_type="text/plain; charset=utf-8"
                )
            )
            # (no TTL through AMQP: its header holds at most 49.7 days, so the message would
            # expire and the expected view would depend on the day the test runs)
            later = datetime.datetime.fromtimestamp(LATER_MS / 1000, tz=datetime.UTC)
            sender.schedule_messages(
                sdk_message(
                    "sdk later", message_id="sdk-scheduled", application_properties={"at": AT}
                ),
                later,
            )
        settle_with_sdk(sb)
        with sb.get_queue_sender("parts") as sender:
            sender.send_messages(
                [
                    sdk_message(
                        f"sp{i}",
                        message_id=f"sp{i}",
                        partition_key=f"k{i}",
                        application_properties={"i": i},
                    )
                    for i in range(4)
                ]
            )
        with sb.get_queue_sender("sess") as sender:
            for sid in ("s2", "s3"):
                sender.send_messages(
                    sdk_message(
                        f"sdk-{sid}",
                        session_id=sid,
                        message_id=f"sdk-{sid}",
                        application_properties=dict(SDK_PROPS),
                    )
                )
        with sb.get_queue_receiver("sess", session_id="s3", max_wait_time=5) as receiver:
            receiver.session.set_state(b"sdk state of s3")
            (m,) = receiver.receive_messages(max_wait_time=5)
            receiver.defer_message(m)  # a deferred message in a session
        with sb.get_queue_sender("fwd-src") as sender:
            sender.send_messages(
                sdk_message(
                    "forwarded by sdk", message_id="fwd-2", application_properties=dict(SDK_PROPS)
                )
            )
        with sb.get_topic_sender("events") as sender:
            m = sdk_message(
                "sdk red",
                message_id="ev-sdk-red",
                application_properties={"color": "red", "n": {"TYPE": "LONG", "VALUE": 50}},
            )
            m.raw_amqp_message.annotations = {"x-opt-custom": "topic"}
            sender.send_messages(m)
        with sb.get_subscription_receiver("events", "sql", max_wait_time=5) as receiver:
            (got,) = receiver.receive_messages(max_wait_time=5)  # the first red through SQL
            receiver.abandon_message(got)

    with ServiceBusClient.from_connection_string(d.connection_string(PREMIUM)) as sb:
        with sb.get_queue_sender("pq") as sender:
            sender.send_messages(
                [
                    sdk_message(
                        f"prem-{i}", message_id=f"prem-{i}", application_properties=dict(SDK_PROPS)
                    )
                    for i in range(6)
                ]
            )
            sender.send_messages(
                AmqpAnnotatedMessage(value_body=[1, 2, 3], properties={"message_id": "prem-value"})
            )
        with sb.get_queue_receiver("pq", max_wait_time=5) as receiver:
            (m,) = receiver.receive_messages(max_wait_time=5)
            receiver.dead_letter_message(m, reason="Premium", error_description="p")
    with d.client(PREMIUM) as c:
        c.send(
            "pq",
            [
                Message(
                    body=b"unix to premium",
                    message_id="prem-unix",
                    application_properties={"id": ID},
                )
            ],
        )


def send_after_restart(d: Daemon) -> None:
    """What the killed daemon took: the tail of ``plain`` past its last checkpoint."""
    from azure.servicebus import ServiceBusClient

    with d.client() as c:
        c.send(
            "plain",
            [
                Message(
                    body=b"after restart",
                    message_id="tail-unix",
                    application_properties={"id": ID, "at": AT},
                )
            ],
        )
    tail = sdk_message("tail sdk", message_id="tail-sdk", application_properties=dict(SDK_PROPS))
    tail.raw_amqp_message.annotations = dict(ANNOTATIONS)
    with (
        ServiceBusClient.from_connection_string(d.connection_string()) as sb,
        sb.get_queue_sender("plain") as sender,
    ):
        sender.send_messages(tail)


# -- reading (on both releases)


def _short(text: str) -> Any:
    """A long body as its length and SHA-256 (the JSON file stays small)."""
    if len(text) <= 1024:
        return text
    return {"length": len(text), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def unix_message_view(m: Any) -> dict[str, Any]:
    """A message as ``sbctl peek -o json`` shows it, without its lock."""
    out: dict[str, Any] = m.to_dict() | {"lock_token": None, "locked_until_utc": None}
    for key in ("body", "body_base64"):
        if key in out:
            out[key] = _short(out[key])
    return out


def _pages(c: Client, path: str) -> Iterator[Any]:
    start = 0
    while page := c.peek(path, 100, start):  # a peek walks on across partitions
        yield from page
        start = page[-1].sequence_number + 1


def unix_view(socket: Path) -> dict[str, Any]:
    """Every message as the Unix client peeks it (``sbctl peek -o json``), counts, rules
    and session states."""
    out: dict[str, Any] = {"entities": {}, "counts": {}, "rules": {}, "session_state": {}}
    for ns, path in PATHS:
        with Client(socket, namespace=ns) as c:
            out["entities"][f"{ns}/{path}"] = [unix_message_view(m) for m in _pages(c, path)]
    for ns, name in QUEUES:
        with Client(socket, namespace=ns) as c:
            q = c.queue_get(name)
        out["counts"][f"{ns}/{name}"] = {k: q[k] for k in COUNT_KEYS}
    with Client(socket, namespace=NS) as c:
        for name in SUBSCRIPTIONS:
            s = c.subscription_get("events", name)
            out["counts"][f"{NS}/events/{name}"] = {k: s.get(k) for k in COUNT_KEYS}
            out["rules"][name] = sorted(c.rule_list("events", name), key=lambda r: r["name"])
        for sid in SESSIONS[(NS, "sess")]:
            state = c.get_session_state("sess", sid)
            out["session_state"][sid] = None if state is None else state.hex()
    return json.loads(json.dumps(out))


def typed_json(value: Any) -> Any:
    """A value as the SDK handed it back, with its Python type, for JSON."""
    if isinstance(value, bytes):
        return ["bytes", _short(base64.b64encode(value).decode())]
    if isinstance(value, datetime.datetime):
        return ["datetime", value.isoformat()]
    if isinstance(value, uuid.UUID):
        return ["UUID", str(value)]
    if isinstance(value, list | tuple):
        return ["list", [typed_json(v) for v in value]]
    if isinstance(value, dict):
        return ["dict", [[typed_json(k), typed_json(v)] for k, v in value.items()]]
    return [type(value).__name__, value]


def _key(k: Any) -> str:
    return k.decode() if isinstance(k, bytes) else str(k)


def sdk_message_view(m: Any) -> dict[str, Any]:
    """A received (or peeked) SDK message: body as sent (data, value or sequence), typed
    application properties and annotations, the AMQP properties and the SDK's fields."""
    raw = m.raw_amqp_message
    kind = raw.body_type.value
    body = b"".join(raw.body) if kind == "data" else raw.body
    if kind == "sequence":
        body = list(body)
    props = raw.properties
    return {
        "body_type": kind,
        "body": typed_json(body),
        "application_properties": {
            _key(k): typed_json(v) for k, v in (m.application_properties or {}).items()
        },
        "annotations": {
            _key(k): typed_json(v)
            for k, v in (raw.annotations or {}).items()
            if _key(k) not in TRANSIENT
        },
        "properties": {
            name: typed_json(getattr(props, name))
            for name in (
                "message_id",
                "correlation_id",
                "subject",
                "content_type",
                "to",
                "reply_to",
                "reply_to_group_id",
                "group_id",
                "absolute_expiry_time",
                "creation_time",
            )
        },
        "time_to_live_ms": raw.header.time_to_live if raw.header else None,
        "sequence_number": m.sequence_number,
        "enqueued_time_utc": m.enqueued_time_utc.isoformat() if m.enqueued_time_utc else None,
        "scheduled_enqueue_time_utc": (
            m.scheduled_enqueue_time_utc.isoformat() if m.scheduled_enqueue_time_utc else None
        ),
        "state": m.state.name,
        "delivery_count": m.delivery_count,
        "partition_key": m.partition_key,
        "session_id": m.session_id,
        "dead_letter_reason": m.dead_letter_reason,
        "dead_letter_error_description": m.dead_letter_error_description,
        "dead_letter_source": m.dead_letter_source,
    }


@contextlib.contextmanager
def sdk_receiver(connection_string: str, path: str, sid: str | None = None) -> Iterator[Any]:
    """An SDK receiver (on a client of its own) of a queue, a subscription or their
    dead-letter queue (``.../$deadletterqueue``); of session ``sid`` when given."""
    from azure.servicebus import ServiceBusClient, ServiceBusSubQueue

    kw: dict[str, Any] = {"max_wait_time": 5}
    if sid is not None:
        kw["session_id"] = sid
    if path.endswith("/$deadletterqueue"):
        path = path.removesuffix("/$deadletterqueue")
        kw["sub_queue"] = ServiceBusSubQueue.DEAD_LETTER
    with ServiceBusClient.from_connection_string(connection_string) as sb:
        if "/subscriptions/" in path:
            topic, sub = path.split("/subscriptions/")
            receiver = sb.get_subscription_receiver(topic, sub, **kw)
        else:
            receiver = sb.get_queue_receiver(path, **kw)
        with receiver:
            yield receiver


def _sdk_peek_all(receiver: Any) -> list[Any]:
    got: list[Any] = []
    start = 0
    while page := receiver.peek_messages(max_message_count=50, sequence_number=start):
        got += page
        start = page[-1].sequence_number + 1
    return got


def sdk_jobs() -> list[tuple[str, str, str | None]]:
    """(namespace, path, session id or None): what one SDK receiver each covers."""
    return [(ns, path, sid) for ns, path in PATHS for sid in SESSIONS.get((ns, path), (None,))]


def in_parallel(job: Any, items: list[Any]) -> list[Any]:
    """``job(item)`` for every item, eight at a time: an SDK receiver takes about a second
    to open and close, nearly all of it waiting."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(job, items))


def sdk_view(connection_strings: dict[str, str]) -> dict[str, Any]:
    """Every message as the azure-servicebus SDK peeks it over AMQP (a session entity:
    session by session, with each session's state)."""

    def peek(job: tuple[str, str, str | None]) -> tuple[list[Any], Any]:
        ns, path, sid = job
        with sdk_receiver(connection_strings[ns], path, sid) as receiver:
            got = [sdk_message_view(m) for m in _sdk_peek_all(receiver)]
            state = receiver.session.get_state() if sid is not None else None
        return got, None if state is None else state.hex()

    jobs = sdk_jobs()
    out: dict[str, Any] = {
        "entities": {f"{ns}/{path}": [] for ns, path in PATHS},
        "session_state": {},
    }
    for (ns, path, sid), (got, state) in zip(jobs, in_parallel(peek, jobs), strict=True):
        out["entities"][f"{ns}/{path}"] += got
        if sid is not None:
            out["session_state"][sid] = state
    return json.loads(json.dumps(out))


# -- the tarball


# Files of the daemon's run, not of the data: its pid, lock and log, the AMQP ports it chose,
# its HTTPS certificate and explorer token (each made again by the next start).
RUNTIME = ("sbctld.pid", "sbctld.lock", "sbctld.log", "amqp/ports.json", "http")


def _tar(data: Path, target: Path) -> None:
    """``data`` as a gzip tarball that depends only on the files: sorted, no owner, no
    times (mtime 0), no gzip name or time; without the RUNTIME files."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted([data, *data.rglob("*")]):
            rel = path.relative_to(data).as_posix()
            if any(rel == skip or rel.startswith(skip + "/") for skip in RUNTIME):
                continue
            info = tar.gettarinfo(str(path), arcname=f"data/{rel}".removesuffix("/."))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            info.pax_headers = {}
            if info.isfile():
                with path.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)
    with target.open("wb") as out, gzip.GzipFile("", "wb", 9, out, mtime=0) as gz:
        gz.write(buf.getvalue())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="sbv3-") as tmp:
        d = Daemon(Path(tmp) / "w")
        d.cli("daemon", "start")
        try:
            create_entities(d)
            send_unix(d)
            send_sdk(d)
            d.cli("daemon", "stop")
            d.cli("daemon", "start")
            send_after_restart(d)
        finally:
            d.kill()
        _tar(d.data, HERE / "datadir_v3.tar.gz")

        # The expected view: the tarball itself, opened by this release.
        r = Daemon(Path(tmp) / "r")
        with tarfile.open(HERE / "datadir_v3.tar.gz") as tar:
            tar.extractall(r.data.parent, filter="data")
        r.cli("daemon", "start")
        try:
            expected = {
                "unix": unix_view(r.socket),
                "sdk": sdk_view({ns: r.connection_string(ns) for ns in (NS, PREMIUM)}),
            }
        finally:
            r.cli("daemon", "stop")
    (HERE / "datadir_v3.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    print("wrote", HERE / "datadir_v3.tar.gz", file=sys.stderr)


if __name__ == "__main__":
    main()
