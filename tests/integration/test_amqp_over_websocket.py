"""AMQP over WebSocket: the azure-servicebus SDK's ``AmqpOverWebsocket`` transport (which a
custom endpoint address and an HTTP proxy switch on) against a real daemon, plain (the
connection string's emulator mode) and over TLS (a credential, ``connection_verify`` the
daemon's certificate), through a relay or a proxy that records what went through."""

from __future__ import annotations

import asyncio
import re
import socket
from typing import Any

import pytest

from tests.integration.amqp_sdk import cli_json, collect_sdk_sockets, connection_string, peek  # noqa: F401
from tests.integration.tcp_relay import Relay

pytest.importorskip("azure.servicebus")
pytest.importorskip("websocket", reason="the SDK's sync WebSocket transport needs websocket-client")
from azure.core.credentials import AzureNamedKeyCredential
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient

KEY = AzureNamedKeyCredential("RootManageSharedAccessKey", "SAS_KEY_VALUE")
UPGRADE = b"GET /$servicebus/websocket HTTP/1.1\r\n"


@pytest.fixture
def amqp(module_daemon: Any, request: pytest.FixtureRequest) -> tuple[Any, str, int, str]:
    """(daemon, connection string, AMQP port, a fresh queue's name)."""
    queue = re.sub(r"\W", "", request.node.name)[-40:]
    module_daemon.cli("queue", "create", queue, check=True)
    conn = connection_string(module_daemon)
    port = int(re.search(r"localhost:(\d+)", conn).group(1))  # type: ignore[union-attr]
    return module_daemon, conn, port, queue


def round_trip(client: ServiceBusClient, queue: str, body: str) -> list[str]:
    with client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages(ServiceBusMessage(body))
        with client.get_queue_receiver(queue) as receiver:
            got = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            for m in got:
                receiver.complete_message(m)
            return [str(m) for m in got]


async def round_trip_async(client: AsyncServiceBusClient, queue: str, body: str) -> list[str]:
    async with client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(ServiceBusMessage(body))
        async with client.get_queue_receiver(queue) as receiver:
            got = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            for m in got:
                await receiver.complete_message(m)
            return [str(m) for m in got]


def test_a_custom_endpoint_address_reaches_the_daemon_over_websocket(amqp: Any) -> None:
    daemon, conn, port, queue = amqp
    with Relay(target=("127.0.0.1", port)) as gateway:
        client = ServiceBusClient.from_connection_string(
            conn, custom_endpoint_address=f"sb://localhost:{gateway.port}"
        )
        assert round_trip(client, queue, "through the gateway") == ["through the gateway"]
        assert gateway.first and all(f.startswith(UPGRADE) for f in gateway.first)
    assert peek(daemon, queue) == []


def test_a_named_key_credential_over_tls_websocket_async(amqp: Any) -> None:
    daemon, _conn, port, queue = amqp
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    with Relay(target=("127.0.0.1", port)) as gateway:
        client = AsyncServiceBusClient(
            "localhost",
            KEY,
            custom_endpoint_address=f"sb://localhost:{gateway.port}",
            connection_verify=cert,
        )
        got = asyncio.run(round_trip_async(client, queue, "wss"))
        assert got == ["wss"]
        assert gateway.first and all(f[:1] == b"\x16" for f in gateway.first)  # TLS


def test_an_http_proxy_with_credentials_tunnels_to_the_daemon(amqp: Any) -> None:
    _daemon, conn, port, queue = amqp
    with Relay(proxy=True, auth=("admin", "123456")) as proxy:
        http_proxy = {
            "proxy_hostname": "127.0.0.1",
            "proxy_port": proxy.port,
            "username": "admin",
            "password": "123456",
        }
        client = ServiceBusClient.from_connection_string(
            conn, http_proxy=http_proxy, custom_endpoint_address=f"sb://localhost:{port}"
        )
        assert round_trip(client, queue, "proxied") == ["proxied"]
        assert proxy.first and all(f.startswith(UPGRADE) for f in proxy.first)
        assert proxy.refused == []


def raw_upgrade(port: int, headers: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            f"GET /$servicebus/websocket HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode()
        )
        data = b""
        while b"\r\n\r\n" not in data or len(data) < answer_length(data):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


def answer_length(data: bytes) -> int:
    """How long the answer whose head is in ``data`` is, head and body."""
    head, _, _ = data.partition(b"\r\n\r\n")
    found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    return len(head) + 4 + (int(found.group(1)) if found else 0)


def test_a_bad_upgrade_gets_a_clear_400_and_the_http_port_upgrades_too(amqp: Any) -> None:
    daemon, _conn, port, _queue = amqp
    good = (
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    )
    answer = raw_upgrade(
        port, good + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: AMQPWSB10\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 101 ")
    assert b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in answer  # RFC 6455's example
    assert b"Sec-WebSocket-Protocol: AMQPWSB10\r\n" in answer
    answer = raw_upgrade(port, good + "Sec-WebSocket-Version: 8\r\n")
    assert answer.startswith(b"HTTP/1.1 400 ") and b"Sec-WebSocket-Version: 13" in answer
    answer = raw_upgrade(
        port, good + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 400 ") and b"AMQPWSB10" in answer
    http_port = int(cli_json(daemon, "daemon", "status")["http_port"])
    answer = raw_upgrade(http_port, good + "Sec-WebSocket-Version: 13\r\n")
    assert answer.startswith(b"HTTP/1.1 101 ")  # the default namespace's AMQP


def test_pings_are_answered_amqp_rides_binary_frames_and_a_close_is_returned(amqp: Any) -> None:
    import websocket

    _daemon, _conn, port, _queue = amqp
    ws = websocket.create_connection(
        f"ws://localhost:{port}/$servicebus/websocket", subprotocols=["AMQPWSB10"], timeout=10
    )
    try:
        ws.ping(b"are you there")
        opcode, frame = ws.recv_data_frame(control_frame=True)
        assert (opcode, frame.data) == (websocket.ABNF.OPCODE_PONG, b"are you there")
        ws.send_binary(b"AMQP\x03\x01\x00\x00")  # the SASL layer's protocol header
        opcode, frame = ws.recv_data_frame()
        assert opcode == websocket.ABNF.OPCODE_BINARY
        assert frame.data.startswith(b"AMQP\x03\x01\x00\x00")
        ws.send_close()
        opcode, frame = ws.recv_data_frame(control_frame=True)
        assert (opcode, frame.data[:2]) == (websocket.ABNF.OPCODE_CLOSE, b"\x03\xe8")  # 1000
        # The connection is over. websocket-client answers the close frame with a close of
        # its own, which may reach the already closed socket and come back as a reset.
        with pytest.raises((websocket.WebSocketConnectionClosedException, ConnectionResetError)):
            ws.recv()
    finally:
        ws.shutdown()


def test_an_unmasked_frame_closes_with_1002_and_the_daemon_keeps_serving(amqp: Any) -> None:
    _daemon, conn, port, queue = amqp
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            b"GET /$servicebus/websocket HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 101 ")
        s.sendall(b"\x82\x08AMQP\x00\x01\x00\x00")  # a client's frame must be masked
        rest = head.partition(b"\r\n\r\n")[2]
        while chunk := s.recv(4096):
            rest += chunk
        assert rest[:1] == b"\x88" and rest[2:4] == b"\x03\xea"  # close, 1002
        assert b"masked" in rest
    client = ServiceBusClient.from_connection_string(
        conn, custom_endpoint_address=f"sb://localhost:{port}"
    )
    assert round_trip(client, queue, "still here") == ["still here"]


def test_without_the_amqp_endpoint_an_upgrade_gets_a_clear_400(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    d.cli("daemon", "start", "--no-amqp", check=True)
    http_port = int(cli_json(d, "daemon", "status")["http_port"])
    answer = raw_upgrade(
        http_port,
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n",
    )
    assert answer.startswith(b"HTTP/1.1 400 ") and b"AMQP endpoint, which is off" in answer
