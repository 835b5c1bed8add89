"""The async SDK over AMQP, durability of what AMQP acknowledged (SIGKILL), and
throttling answered with the server-busy condition the SDK retries."""

from __future__ import annotations

import asyncio
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

from tests.integration.amqp_sdk import collect_sdk_sockets, connection_string, peek  # noqa: F401


def test_async_send_receive_complete_and_session(daemon: Any) -> None:
    daemon.cli("queue", "create", "aq", check=True)
    daemon.cli("queue", "create", "asq", "--enable-session", check=True)
    cs = connection_string(daemon)

    async def scenario() -> None:
        async with AsyncServiceBusClient.from_connection_string(cs) as client:
            async with client.get_queue_sender("aq") as sender:
                batch = await sender.create_message_batch()
                for i in range(5):
                    batch.add_message(ServiceBusMessage(f"a{i}"))
                await sender.send_messages(batch)
            async with client.get_queue_receiver("aq", max_wait_time=5) as receiver:
                got = []
                while len(got) < 5:
                    more = await receiver.receive_messages(max_message_count=5, max_wait_time=5)
                    assert more, "messages went missing"
                    for m in more:
                        await receiver.complete_message(m)
                    got += [str(m) for m in more]
                assert got == [f"a{i}" for i in range(5)]
            async with client.get_queue_sender("asq") as sender:
                await sender.send_messages(ServiceBusMessage("s", session_id="X"))
            async with client.get_queue_receiver("asq", session_id="X", max_wait_time=5) as r:
                await r.session.set_state(b"st")
                assert await r.session.get_state() == b"st"
                (m,) = await r.receive_messages(max_wait_time=5)
                await r.complete_message(m)

    asyncio.run(scenario())
    assert peek(daemon, "aq") == []


def test_a_message_acknowledged_over_amqp_survives_sigkill(daemon: Any) -> None:
    daemon.cli("queue", "create", "durable", check=True)
    with (
        ServiceBusClient.from_connection_string(connection_string(daemon)) as client,
        client.get_queue_sender("durable") as sender,
    ):
        for i in range(20):
            sender.send_messages(ServiceBusMessage(f"d{i}"))  # returns once accepted
        daemon.kill()
    daemon.start()
    assert [m["body"] for m in peek(daemon, "durable", "--count", "50")] == [
        f"d{i}" for i in range(20)
    ]


def test_throttled_sends_are_retried_by_the_sdk_and_nothing_is_lost(daemon: Any) -> None:
    daemon.cli("namespace", "create", "slowns", "--credits-per-second", "20", check=True)
    daemon.cli("-n", "slowns", "queue", "create", "t", check=True)
    cs = connection_string(daemon, "slowns")
    with (
        ServiceBusClient.from_connection_string(cs) as client,
        client.get_queue_sender("t") as sender,
    ):
        # 15 credits a request at 20 a second: the second request of any second is
        # throttled however slowly this machine runs.
        for start in range(0, 60, 15):
            sender.send_messages([ServiceBusMessage(f"t{i}") for i in range(start, start + 15)])
    credits = daemon.cli("-n", "slowns", "-o", "json", "credits", check=True).json()
    assert credits["throttled_requests"] > 0
    # Unthrottle to read everything back in one peek (a peek is metered too).
    daemon.cli("namespace", "update", "slowns", "--credits-per-second", "0", check=True)
    bodies = [
        m["body"]
        for m in daemon.cli("-n", "slowns", "-o", "json", "peek", "t", "--count", "100").jsonl()
    ]
    assert bodies == [f"t{i}" for i in range(60)]


def test_sixty_sdk_clients_connecting_at_once_all_succeed(daemon: Any) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    daemon.cli("queue", "create", "crowd", check=True)
    cs = connection_string(daemon)
    n = 60
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        with (
            ServiceBusClient.from_connection_string(cs) as client,
            client.get_queue_sender("crowd") as sender,
        ):
            barrier.wait(timeout=120)  # every connection open at the same time
            sender.send_messages(ServiceBusMessage(f"c{i}"))

    with ThreadPoolExecutor(n) as pool:
        list(pool.map(one, range(n)))
    shown = daemon.cli("-o", "json", "queue", "show", "crowd", check=True).json()
    assert shown["active_message_count"] == n
