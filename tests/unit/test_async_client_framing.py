"""AsyncClient reads length-prefixed replies from the byte stream as they complete: split
over many reads, several in one read, out of order; a connection that ends or sends an
unreadable reply fails every waiting request with ServiceCommunicationProblem (no hang).

A real Unix socket with a scripted peer in place of the daemon: the peer decides how the
reply bytes are cut."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import pytest

from sbctl.client import AsyncClient
from sbctl.core.errors import ServiceCommunicationProblem
from sbctl.core.protocol import LENGTH, decode_envelope

Peer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def frame(body: bytes) -> bytes:
    return LENGTH.pack(len(body)) + body


def pong(req_id: int, pid: int) -> bytes:
    return frame(msgspec.msgpack.encode([req_id, True, {"pid": pid}]))


async def read_request_ids(reader: asyncio.StreamReader, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        (n,) = LENGTH.unpack(await reader.readexactly(4))
        ids.append(decode_envelope(await reader.readexactly(n)).id)
    return ids


def with_peer(
    tmp_path: Path, peer: Peer, client_side: Callable[[AsyncClient], Awaitable[None]]
) -> None:
    sock = tmp_path / "s.sock"

    async def run() -> None:
        handlers: list[asyncio.Task[None]] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            handlers.append(asyncio.current_task())  # type: ignore[arg-type]
            try:
                await peer(reader, writer)
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()

        server = await asyncio.start_unix_server(serve, path=str(sock))
        try:
            async with AsyncClient(sock, retry_total=0) as client:
                await asyncio.wait_for(client_side(client), 10)
            await asyncio.wait_for(asyncio.gather(*handlers), 10)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(run())


def test_replies_cut_anywhere_and_out_of_order_reach_their_requests(tmp_path: Path) -> None:
    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ids = await read_request_ids(reader, 3)
        # answered in reverse order, the bytes of all three cut one at a time, then the
        # same again as one write
        stream = b"".join(pong(i, 1000 + i) for i in reversed(ids))
        for k in range(len(stream)):
            writer.write(stream[k : k + 1])
            await writer.drain()
            await asyncio.sleep(0)
        ids = await read_request_ids(reader, 3)
        writer.write(b"".join(pong(i, 2000 + i) for i in ids))
        await writer.drain()
        await reader.read()

    async def client_side(client: AsyncClient) -> None:
        for base in (1000, 2000):
            tasks = [asyncio.ensure_future(client.ping()) for _ in range(3)]
            results = await asyncio.gather(*tasks)
            pids = sorted(r["pid"] for r in results)
            assert pids == sorted(pids) and all(p > base for p in pids)
            assert len(set(pids)) == 3

    with_peer(tmp_path, peer, client_side)


def test_a_closed_connection_fails_the_waiting_requests(tmp_path: Path) -> None:
    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        ids = await read_request_ids(reader, 2)
        writer.write(pong(ids[0], 7) + pong(ids[1], 8)[:5])  # the second one half sent
        await writer.drain()

    async def client_side(client: AsyncClient) -> None:
        first = asyncio.ensure_future(client.ping())
        second = asyncio.ensure_future(client.ping())
        assert (await first)["pid"] == 7
        with pytest.raises(ServiceCommunicationProblem, match="closed the connection"):
            await second

    with_peer(tmp_path, peer, client_side)


@pytest.mark.parametrize(
    ("garbage", "why"),
    [
        (LENGTH.pack(3) + b"\xc1\xc1\xc1", "an unreadable reply"),
        (LENGTH.pack(0xFFFFFFFF), "a reply of 4294967295 bytes"),
    ],
)
def test_an_unreadable_reply_fails_the_waiting_requests(
    tmp_path: Path, garbage: bytes, why: str
) -> None:
    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request_ids(reader, 1)
        writer.write(garbage)
        await writer.drain()
        await reader.read()

    async def client_side(client: AsyncClient) -> None:
        with pytest.raises(ServiceCommunicationProblem, match=why):
            await client.ping()

    with_peer(tmp_path, peer, client_side)


def test_a_closed_client_connects_again_on_its_next_request(tmp_path: Path) -> None:
    async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (req_id,) = await read_request_ids(reader, 1)
        writer.write(pong(req_id, 5))
        await writer.drain()
        await reader.read()

    async def client_side(client: AsyncClient) -> None:
        assert (await client.ping())["pid"] == 5
        await client.aclose()
        assert (await client.ping())["pid"] == 5  # a new connection, its own reply

    with_peer(tmp_path, peer, client_side)
