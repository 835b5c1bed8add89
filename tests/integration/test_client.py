"""The Python client API against a real daemon: Client and AsyncClient mirror each other,
AsyncClient pipelines, long-poll receive, lock expiry end to end, typed errors.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from typing import Any

import pytest

from conftest import MakeClient
from sbctl import Client
from sbctl.client import AsyncClient
from sbctl.core.errors import (
    BadRequest,
    InvalidOperation,
    MessageLockLost,
    MessageSizeExceeded,
    MessagingEntityAlreadyExists,
    MessagingEntityDisabled,
    MessagingEntityNotFound,
    SbctlError,
    ServiceCommunicationProblem,
)
from sbctl.core.records import Message

SYNC_ONLY = {"close"}
# Plain methods on both: `using` builds a client; `transaction` is a (sync or async)
# context manager, not a coroutine.
FACTORIES = {"using", "transaction"}
ASYNC_ONLY = {"aclose"}


def public_methods(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_")
    }


def test_client_and_async_client_have_the_same_methods() -> None:
    sync = set(public_methods(Client)) - SYNC_ONLY
    async_ = set(public_methods(AsyncClient)) - ASYNC_ONLY
    assert sync == async_, f"Client only: {sync - async_}; AsyncClient only: {async_ - sync}"


def test_shared_methods_mirror_signatures() -> None:
    sync, async_ = public_methods(Client), public_methods(AsyncClient)
    shared = (set(sync) & set(async_)) - SYNC_ONLY - ASYNC_ONLY - FACTORIES
    assert {"send", "receive", "peek", "settle", "complete", "abandon", "queue_create"} <= shared
    for name in sorted(shared):
        assert not inspect.iscoroutinefunction(sync[name]), name
        assert inspect.iscoroutinefunction(async_[name]), name
        s, a = inspect.signature(sync[name]), inspect.signature(async_[name])
        assert list(s.parameters) == list(a.parameters), name
        for p in s.parameters:
            assert s.parameters[p].default == a.parameters[p].default, (name, p)
            assert s.parameters[p].kind == a.parameters[p].kind, (name, p)
    assert inspect.iscoroutinefunction(AsyncClient.aclose)
    assert hasattr(AsyncClient, "__aenter__") and hasattr(Client, "__enter__")


def test_async_client_pipelines(daemon: Any) -> None:
    n = 200

    async def run() -> tuple[list[list[int]], list[Any], dict[str, Any]]:
        async with AsyncClient(daemon.socket) as ac:
            await ac.queue_create("pipe", enable_partitioning=True)
            sends = await asyncio.gather(
                *(
                    ac.send("pipe", [Message(body=f"m{i}".encode(), message_id=f"id-{i}")])
                    for i in range(n)
                )
            )
            # Pipelined reads and management calls mixed on the same connection.
            peeks, info = await asyncio.gather(
                asyncio.gather(*(ac.peek("pipe", 1, s[0]) for s in sends[:20])),
                ac.queue_get("pipe"),
            )
            return sends, peeks, info

    sends, peeks, info = asyncio.run(run())
    assert all(len(s) == 1 for s in sends)
    seqs = [s[0] for s in sends]
    assert len(set(seqs)) == n
    assert info["active_message_count"] == n
    # Each reply went to its own request: the peeked message is the one that got that number.
    for i, peeked in enumerate(peeks):
        assert [m.sequence_number for m in peeked] == [seqs[i]]
        assert peeked[0].message.message_id == f"id-{i}"

    with daemon.client() as c:
        got = c.receive("pipe", count=n, mode="receive-and-delete")
        got += c.receive("pipe", count=n, mode="receive-and-delete")
    assert sorted(m.sequence_number for m in got) == sorted(seqs)


def test_long_poll_receive(daemon: Any) -> None:
    with daemon.client() as c:
        c.queue_create("poll")
        assert c.receive("poll", max_wait=0.3) == []
        assert c.receive("poll", count=5, max_wait=0.3, mode="receive-and-delete") == []

    async def run() -> list[Any]:
        async with AsyncClient(daemon.socket) as ac:
            waiting = asyncio.ensure_future(ac.receive("poll", count=1, max_wait=30))
            await asyncio.to_thread(daemon.wait_parked)  # the daemon holds the receive
            assert not waiting.done(), "receive returned before anything was sent"
            await asyncio.to_thread(send_one, daemon, b"wake up")
            got: list[Any] = await waiting
            return got

    got = asyncio.run(run())
    assert [m.body for m in got] == [b"wake up"]
    assert got[0].delivery_count == 1 and got[0].lock_token

    # The blocking client too, woken by a send from another thread.
    with daemon.client() as c:
        c.complete("poll", [got[0].lock_token])

        def send_when_parked() -> None:
            daemon.wait_parked()
            send_one(daemon, b"again")

        timer = threading.Thread(target=send_when_parked)
        timer.start()
        try:
            got = c.receive("poll", count=1, max_wait=30, mode="receive-and-delete")
        finally:
            timer.join()
        assert [m.body for m in got] == [b"again"]
        assert c.queue_get("poll")["active_message_count"] == 0


def send_one(daemon: Any, body: bytes) -> None:
    with daemon.client() as other:
        other.send("poll", [Message(body=body)])


@pytest.mark.slow
def test_lock_expiry_redelivers(daemon: Any, make_client: MakeClient) -> None:
    with make_client(daemon.socket) as c:
        info = c.queue_create("locks", lock_duration=5000)
        assert info["lock_duration"] == "PT5S"
        (seq,) = c.send("locks", [Message(body=b"slow consumer", message_id="m-1")])
        (first,) = c.receive("locks")
        assert first.sequence_number == seq
        assert first.delivery_count == 1
        assert first.locked_until_utc is not None
        # Locked: nobody else gets it, peek shows it with its delivery count.
        assert c.receive("locks", max_wait=0.2) == []
        (peeked,) = c.peek("locks", from_sequence=seq)
        assert peeked.delivery_count == 1

        # A receive parked until the lock expires: the daemon redelivers at expiry.
        t0 = time.monotonic()
        (second,) = c.receive("locks", max_wait=30)
        assert time.monotonic() - t0 > 3.5  # not before the 5 s lock ran out
        assert second.sequence_number == seq
        assert second.message.message_id == "m-1"
        assert second.delivery_count == 2
        assert second.lock_token != first.lock_token

        # The expired lock cannot settle; the new one can.
        (old,) = c.complete("locks", [str(first.lock_token)])
        assert old["error"]["code"] == "MessageLockLost"
        (new,) = c.complete("locks", [str(second.lock_token)])
        assert new.get("ok") is True
        assert c.queue_get("locks")["active_message_count"] == 0


def list_in(c: Any, namespace: str) -> list[dict[str, Any]]:
    with c.using(namespace) as other:
        return other.queue_list()


def test_errors_are_typed(daemon: Any, make_client: MakeClient) -> None:
    with make_client(daemon.socket) as c:
        c.queue_create("errs")
        cases: list[tuple[type[SbctlError], Any]] = [
            (MessagingEntityNotFound, lambda: c.queue_get("missing")),
            (MessagingEntityNotFound, lambda: c.send("missing", [Message(body=b"x")])),
            (MessagingEntityNotFound, lambda: c.namespace_get("nowhere-ns")),
            (MessagingEntityNotFound, lambda: list_in(c, "nowhere-ns")),
            (MessagingEntityAlreadyExists, lambda: c.queue_create("errs")),
            (MessagingEntityAlreadyExists, lambda: c.queue_create("ERRS")),
            (MessagingEntityAlreadyExists, lambda: c.namespace_create("sbemulatorns")),
            (BadRequest, lambda: c.queue_create("bad/../name")),
            (BadRequest, lambda: c.peek("errs", count=251)),
            (BadRequest, lambda: c.receive("errs", count=0)),
            (BadRequest, lambda: c.receive("errs", mode="sideways")),
            (BadRequest, lambda: c.settle("errs", "explode", [])),
            (InvalidOperation, lambda: c.queue_update("errs", enable_partitioning=True)),
            (MessageSizeExceeded, lambda: c.send("errs", [Message(body=b"x" * 300_000)])),
            (
                InvalidOperation,
                lambda: c.send("errs", [Message(body=b"x", session_id="a", partition_key="b")]),
            ),
        ]
        for cls, call in cases:
            with pytest.raises(SbctlError) as info:
                call()
            err = info.value
            assert type(err) is cls, (cls, err)
            assert err.code == cls.code
            assert err.message and "\n" not in err.message
            assert not err.transient
        # Settlement reports per token: a stale lock and a malformed token.
        (seq,) = c.send("errs", [Message(body=b"x")])
        (m,) = c.receive("errs")
        assert c.complete("errs", [str(m.lock_token)])[0].get("ok") is True
        stale, bad = c.complete("errs", [str(m.lock_token), "not-a-guid"])
        assert stale["error"]["code"] == MessageLockLost.code
        assert bad["error"]["code"] == BadRequest.code
        # A disabled queue.
        c.queue_update("errs", status="Disabled")
        with pytest.raises(MessagingEntityDisabled):
            c.send("errs", [Message(body=b"x")])
        with pytest.raises(MessagingEntityDisabled):
            c.receive("errs")
        assert seq

    # The connection survives server-side errors.
    with make_client(daemon.socket) as c:
        for _ in range(3):
            with pytest.raises(MessagingEntityNotFound):
                c.queue_get("missing")
        assert c.ping()["pid"] == daemon.pid()


def test_async_errors_are_typed(daemon: Any) -> None:
    async def run() -> None:
        async with AsyncClient(daemon.socket) as ac:
            results = await asyncio.gather(
                ac.queue_get("missing"),
                ac.queue_create("bad/../name"),
                ac.send("missing", [Message(body=b"x")]),
                ac.ping(),
                return_exceptions=True,
            )
            assert type(results[0]) is MessagingEntityNotFound
            assert type(results[1]) is BadRequest
            assert type(results[2]) is MessagingEntityNotFound
            assert isinstance(results[3], dict) and results[3]["pid"] == daemon.pid()

    asyncio.run(run())


def test_unreachable_daemon(daemon: Any) -> None:
    daemon.stop()
    with Client(daemon.socket) as c, pytest.raises(ServiceCommunicationProblem) as info:
        c.ping()
    assert info.value.transient
    assert str(daemon.socket) in info.value.message

    async def run() -> None:
        async with AsyncClient(daemon.socket) as ac:
            with pytest.raises(ServiceCommunicationProblem):
                await ac.ping()

    asyncio.run(run())

    # A client whose daemon dies under it gets the transient error, not a hang.
    daemon.start()
    with daemon.client() as c:
        c.ping()
        daemon.kill()
        with pytest.raises(ServiceCommunicationProblem):
            c.ping()
