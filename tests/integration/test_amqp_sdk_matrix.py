"""The rows of the SDK scenario matrix the other azure-servicebus modules leave out (the same
rows the Java, JavaScript and Go programs run): a batch of 100 and the batch size limit,
paging peek over a partitioned queue, abandon to delivery count 2 and the max delivery count,
TTL expiry to the DLQ, every message field, a topic with a SQL rule made by the
administration client, and application properties of every AMQP type the SDK can send (its
``{"TYPE": ..., "VALUE": ...}`` form). The SDK has no transactions. One daemon for the
module, one queue per test."""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest

from tests.integration.amqp_sdk import (  # noqa: F401
    amqp_type,
    collect_sdk_sockets,
    connection_string,
    peek,
)

pytest.importorskip("azure.servicebus")
from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessageSizeExceededError

from tests.integration.sdk_programs import MATRIX_FIELDS
from tests.integration.test_http_admin_sdk import admin

DLQ = ServiceBusSubQueue.DEAD_LETTER


@pytest.fixture(scope="module")
def sb(module_daemon: Any) -> Any:
    with ServiceBusClient.from_connection_string(connection_string(module_daemon)) as client:
        yield module_daemon, client


def queue(daemon: Any, name: str, **options: Any) -> str:
    with daemon.client() as c:
        c.queue_create(name, **options)
    return name


def receive_all(client: ServiceBusClient, name: str, n: int, **kw: Any) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 20
    with client.get_queue_receiver(name, **kw) as receiver:
        while len(got) < n and time.monotonic() < deadline:
            batch = receiver.receive_messages(max_message_count=n - len(got), max_wait_time=3)
            for m in batch:
                receiver.complete_message(m)
            got += batch
    return got


def test_a_batch_of_a_hundred_and_the_batch_size_limit(sb: Any) -> None:
    daemon, client = sb
    name = queue(daemon, "py-batch")
    with client.get_queue_sender(name) as sender:
        batch = sender.create_message_batch()
        for i in range(100):
            batch.add_message(ServiceBusMessage(f"m{i}"))
        sender.send_messages(batch)
        assert [str(m) for m in receive_all(client, name, 100)] == [f"m{i}" for i in range(100)]
        # The limit the broker announces (256 KB on Standard): a message over it does not fit
        # a batch nor go alone; a batch filled up to it goes through whole.
        full = sender.create_message_batch()
        assert full.max_size_in_bytes == 256 * 1024
        with pytest.raises(MessageSizeExceededError):
            full.add_message(ServiceBusMessage(b"x" * 300 * 1024))
        with pytest.raises(MessageSizeExceededError):
            sender.send_messages(ServiceBusMessage(b"x" * 300 * 1024))
        n = 0
        while True:
            try:
                full.add_message(ServiceBusMessage(b"y" * 1000))
            except MessageSizeExceededError:
                break
            n += 1
        sender.send_messages(full)
    assert n > 200
    shown = daemon.cli("-o", "json", "queue", "show", name, check=True).json()
    assert shown["active_message_count"] == n


def test_paging_peek_over_a_partitioned_queue_sees_every_message_once(sb: Any) -> None:
    """daemon/README.md §0.1.7: each peek_messages(10) continues after the last one."""
    daemon, client = sb
    name = queue(daemon, "py-parted", enable_partitioning=True)
    with client.get_queue_sender(name) as sender:
        for k in range(8):
            sender.send_messages([ServiceBusMessage(f"k{k}-{i}", partition_key=f"key-{k}")
                                  for i in range(5)])  # fmt: skip
    with client.get_queue_receiver(name) as receiver:
        pages = []
        while page := receiver.peek_messages(max_message_count=10):
            pages.append([m.sequence_number for m in page])
            assert len(pages) <= 10
    seqs = [s for p in pages for s in p]
    assert [len(p) for p in pages] == [10, 10, 10, 10]
    assert seqs == sorted(set(seqs))
    assert len({s >> 48 for s in seqs}) > 1


def test_abandoned_twice_then_the_max_delivery_count(sb: Any) -> None:
    daemon, client = sb
    name = queue(daemon, "py-retries", max_delivery_count=3)
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("retry-me"))
    counts = []
    with client.get_queue_receiver(name, max_wait_time=5) as receiver:
        for _ in range(3):
            (m,) = receiver.receive_messages(max_wait_time=5)
            counts.append(m.delivery_count)
            receiver.abandon_message(m)
        assert receiver.peek_messages(max_message_count=5) == []
    assert counts == [0, 1, 2]
    (dead,) = receive_all(client, name, 1, sub_queue=DLQ)
    assert (str(dead), dead.dead_letter_reason) == ("retry-me", "MaxDeliveryCountExceeded")


def test_an_expired_message_goes_to_the_dead_letter_queue(sb: Any) -> None:
    daemon, client = sb
    name = queue(daemon, "py-expiring", dead_lettering_on_message_expiration=True)
    with client.get_queue_sender(name) as sender:
        sender.send_messages(
            ServiceBusMessage("short-lived", time_to_live=datetime.timedelta(seconds=1))
        )
    time.sleep(1.2)
    with client.get_queue_receiver(name) as receiver:  # meets it expired (daemon/README.md §6.2)
        assert receiver.receive_messages(max_wait_time=0.5) == []
    (dead,) = receive_all(client, name, 1, sub_queue=DLQ)
    assert (str(dead), dead.dead_letter_reason) == ("short-lived", "TTLExpiredException")


def test_every_message_field_round_trips(sb: Any) -> None:
    daemon, client = sb
    name = queue(daemon, "py-fields")
    due = datetime.datetime.now(datetime.UTC).replace(microsecond=0) + datetime.timedelta(seconds=1)
    fields = {
        **MATRIX_FIELDS,
        "time_to_live": datetime.timedelta(seconds=90),
        "scheduled_enqueue_time_utc": due,
    }
    with client.get_queue_sender(name) as sender:
        sender.send_messages(ServiceBusMessage("fields", **fields))
    (m,) = receive_all(client, name, 1)
    assert {k: getattr(m, k) for k in fields} == fields
    assert m.enqueued_time_utc >= due


def test_a_topic_with_a_sql_rule_made_by_the_administration_client(sb: Any) -> None:
    daemon, client = sb
    from azure.servicebus.management import SqlRuleFilter

    with admin(daemon) as c:
        c.create_topic("py-events")
        c.create_subscription("py-events", "reds")
        c.delete_rule("py-events", "reds", "$Default")
        c.create_rule("py-events", "reds", "red-only", filter=SqlRuleFilter("color = 'red'"))
    with client.get_topic_sender("py-events") as sender:
        sender.send_messages(
            [ServiceBusMessage(c, application_properties={"color": c}) for c in ("blue", "red")]
        )
    with client.get_subscription_receiver("py-events", "reds", max_wait_time=3) as receiver:
        assert [str(m) for m in receiver.peek_messages(max_message_count=5)] == ["red"]
        (red,) = receiver.receive_messages(max_wait_time=3)
        receiver.complete_message(red)


TYPED = {  # name -> (pyamqp type, value sent)
    "int": ("INT", -7),
    "long": ("LONG", 42),
    "short": ("SHORT", 12),
    "byte": ("BYTE", 5),
    "ubyte": ("UBYTE", 200),
    "ushort": ("USHORT", 60000),
    "uint": ("UINT", 4_000_000_000),
    "ulong": ("ULONG", 2**63 - 1),
    "float": ("FLOAT", 1.5),
    "double": ("DOUBLE", 2.5),
    "bool": ("BOOL", True),
    "symbol": ("SYMBOL", b"sym"),
    "binary": ("BINARY", b"\x00\x01\xfe\xff"),
}


def typed_message(body: str) -> ServiceBusMessage:
    props = {k: {"TYPE": t, "VALUE": v} for k, (t, v) in TYPED.items()}
    return ServiceBusMessage(body, application_properties=props)  # type: ignore[arg-type]


def test_typed_application_properties_reach_the_receiver(sb: Any) -> None:
    daemon, client = sb
    name = queue(daemon, "py-types")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(typed_message("typed"))
    (m,) = receive_all(client, name, 1)
    got = {k.decode(): v for k, v in m.application_properties.items()}
    assert got == {k: v for k, (_t, v) in TYPED.items()}


def test_typed_application_properties_are_kept_exactly(sb: Any) -> None:
    """The types as `sbctl peek -o json` shows them: what the SDK sent, not a wider one."""
    daemon, client = sb
    name = queue(daemon, "py-types-kept")
    with client.get_queue_sender(name) as sender:
        sender.send_messages(typed_message("typed"))
    (left,) = peek(daemon, name)
    shown = {k: amqp_type(v) for k, v in left["application_properties"].items()}
    assert shown == {k: t.lower().replace("bool", "boolean") for k, (t, _v) in TYPED.items()}
