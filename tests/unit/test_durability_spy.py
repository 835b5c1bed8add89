"""Every file an acknowledged send, settlement or entity change wrote is synced before the
acknowledgement goes out (and a directory after a create or rename in it); a journal's mirror,
a redundant copy no acknowledgement waits for, is synced by the round after the next
``Syncer.take_lazy`` (the daemon calls it each second), so an awaited settlement costs one
sync.

Spies on ``os.write`` / ``os.pwrite`` / ``os.ftruncate`` / ``open`` for writing (what was
written), ``os.rename`` /
``os.replace`` / ``os.mkdir`` / ``os.open(O_CREAT)`` (directories changed) and ``os.fsync`` /
``os.fdatasync`` (what was synced), through the daemon's real group commit
(sbctld.service.commit.Committer). The last test shows the check fails when a commit round skips
its fdatasync.
"""

from __future__ import annotations

import asyncio
import builtins
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sbctl.core.layout import MIRROR_SUFFIX
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.service import commit
from sbctld.storage.sync import Syncer

NS = DEFAULT_NAMESPACE


class Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, root: Path) -> None:
        self.root = str(root)
        self.unsynced: dict[str, str] = {}  # path -> what wrote it
        self.mirrors: dict[str, str] = {}  # the same for journal mirrors (synced lazily)
        self.syncs = 0
        real = {n: getattr(os, n) for n in ("write", "pwrite", "ftruncate", "fsync", "fdatasync")}
        real_open, real_rename, real_replace = os.open, os.rename, os.replace

        def path_of(fd: int) -> str:
            return os.readlink(f"/proc/self/fd/{fd}")

        def wrote(name: str) -> Callable[..., Any]:
            def spy(fd: int, *args: Any) -> Any:
                out = real[name](fd, *args)
                path = path_of(fd)
                if path.endswith(MIRROR_SUFFIX):
                    self.mirrors[path] = name
                elif path.startswith(self.root) and not path.endswith((".tmp", "reserve.bin")):
                    self.unsynced[path] = name
                return out

            return spy

        def synced(name: str) -> Callable[[int], None]:
            def spy(fd: int) -> None:
                path = path_of(fd)  # before the sync: a closing round closes right after
                real[name](fd)
                self.syncs += 1
                self.unsynced.pop(path, None)
                self.mirrors.pop(path, None)

            return spy

        def dir_changed(path: Any) -> None:
            parent = os.path.dirname(os.path.abspath(os.fspath(path)))
            if parent.startswith(self.root):
                self.unsynced[parent] = "directory entry"

        def spy_open(path: Any, flags: int, *args: Any, **kw: Any) -> int:
            existed = os.path.exists(path)
            fd = real_open(path, flags, *args, **kw)
            if flags & os.O_CREAT and not existed:
                dir_changed(path)
            return fd

        def spy_rename(src: Any, dst: Any, *args: Any, **kw: Any) -> None:
            real_rename(src, dst, *args, **kw)
            dir_changed(dst)

        def spy_replace(src: Any, dst: Any, *args: Any, **kw: Any) -> None:
            real_replace(src, dst, *args, **kw)
            dir_changed(dst)

        real_io_open = io.open

        def spy_io_open(file: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
            # Python-level writes (Path.write_bytes, open(..., "w")) count as writes too.
            if isinstance(file, (str, os.PathLike)) and set(mode) & set("wax+"):
                path = os.path.abspath(os.fspath(file))
                existed = os.path.exists(path)
                if path.startswith(self.root) and not path.endswith((".log", ".corrupt")):
                    self.unsynced[path] = f"open({mode!r})"
                    if not existed:
                        dir_changed(path)
            return real_io_open(file, mode, *args, **kw)

        monkeypatch.setattr(io, "open", spy_io_open)
        monkeypatch.setattr(builtins, "open", spy_io_open)
        for name in ("write", "pwrite", "ftruncate"):
            monkeypatch.setattr(os, name, wrote(name))
        for name in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, name, synced(name))
        monkeypatch.setattr(os, "open", spy_open)
        monkeypatch.setattr(os, "rename", spy_rename)
        monkeypatch.setattr(os, "replace", spy_replace)

    def check(self) -> None:
        assert self.unsynced == {}, f"acknowledged with unsynced writes: {self.unsynced}"


def acknowledged(committer: commit.Committer, spy: Spy, steps: list[Callable[[], Any]]) -> None:
    """Run each step, then check at its acknowledgement (the durable-reply callback)."""

    async def main() -> None:
        for step in steps:
            step()
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def ack(error: Any, done: asyncio.Future[None] = done) -> None:
                try:
                    assert error is None
                    spy.check()  # the moment the reply would go out
                except AssertionError as exc:
                    done.set_exception(exc)
                else:
                    done.set_result(None)

            committer.after_durable(ack)
            await done

    asyncio.run(main())


def scenario(b: Broker) -> list[Callable[[], Any]]:
    tokens: list[str] = []

    def receive() -> None:
        tokens.extend(
            d.lock_token for d in b.messaging.receive(NS, "q", 5, "peek-lock") if d.lock_token
        )

    return [
        lambda: b.management.queue_create(NS, "q", {"enable_partitioning": True}),
        lambda: b.messaging.send(NS, "q", [Message(f"m{k}".encode()) for k in range(20)]),
        receive,
        lambda: b.messaging.settle(NS, "q", "complete", tokens[:3]),
        lambda: b.messaging.receive(NS, "q", 2, "receive-and-delete"),
        lambda: b.management.topic_create(NS, "t", {}),
        lambda: b.management.subscription_create(NS, "t", "s", {}),
        lambda: b.messaging.send(NS, "t", [Message(b"fan-out")] * 5),
        lambda: b.messaging.purge(NS, "q"),
        lambda: b.management.queue_delete(NS, "q"),
    ]


def test_every_acknowledged_write_is_synced_first(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncer = Syncer("fsync")
    b = Broker(tmp_path / "data", clock, syncer, default_credits_per_second=0)
    spy = Spy(monkeypatch, tmp_path)
    committer = commit.Committer(syncer)
    try:
        acknowledged(committer, spy, scenario(b)[:-1])  # (the last deletes the mirrors)
        assert spy.mirrors  # written, not yet synced: no acknowledgement waited for them
        syncer.take_lazy()
        asyncio.run(committer.drain())
        assert spy.mirrors == {}
    finally:
        committer.close()
        b.housekeeping.close()


def test_the_check_fails_when_a_commit_round_skips_fdatasync(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncer = Syncer("fsync")
    b = Broker(tmp_path / "data", clock, syncer, default_credits_per_second=0)
    b.management.queue_create(NS, "q", {})
    spy = Spy(monkeypatch, tmp_path)
    monkeypatch.setattr(commit, "sync_fds", lambda dirty, closing, durable: None)
    committer = commit.Committer(syncer)
    try:
        with pytest.raises(AssertionError, match="unsynced writes"):
            acknowledged(committer, spy, [lambda: b.messaging.send(NS, "q", [Message(b"x")])])
    finally:
        committer.close()
        b.housekeeping.close()


def _queue_of(tmp_path: Path, clock: FakeClock, n: int) -> tuple[Syncer, Broker, commit.Committer]:
    """A broker with queue "q" holding ``n`` messages, and a committer over its syncer."""
    syncer = Syncer("fsync")
    b = Broker(tmp_path / "data", clock, syncer, default_credits_per_second=0)
    b.management.queue_create(NS, "q", {})
    b.messaging.send(NS, "q", [Message(f"m{k}".encode()) for k in range(n)])
    return syncer, b, commit.Committer(syncer)


def test_writes_no_one_waits_for_are_synced_by_the_next_round(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A settled complete (an AMQP receiver's pre-settled accept) has no one to answer: the
    front-end asks for a round all the same (Committer.flush_soon), and the next turns of the
    loop sync it. 10,000 such completes used to leave their writes in the OS's cache."""
    _syncer, b, committer = _queue_of(tmp_path, clock, 50)

    async def main() -> None:
        await committer.drain()
        spy = Spy(monkeypatch, tmp_path)
        tokens = [
            d.lock_token for d in b.messaging.receive(NS, "q", 50, "peek-lock") if d.lock_token
        ]
        await committer.drain()
        b.messaging.settle(NS, "q", "complete", tokens)
        assert spy.unsynced  # written, not synced yet
        committer.flush_soon()
        for _ in range(3):
            await asyncio.sleep(0)
        spy.check()

    try:
        asyncio.run(main())
    finally:
        committer.close()
        b.housekeeping.close()


def test_an_awaited_complete_costs_one_sync(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an SDK's awaited complete waits for: one fdatasync (the journal), not two."""
    syncer, b, committer = _queue_of(tmp_path, clock, 3)

    async def main() -> None:
        await committer.drain()
        spy = Spy(monkeypatch, tmp_path)
        for d in b.messaging.receive(NS, "q", 3, "peek-lock"):
            assert d.lock_token is not None
            before = spy.syncs
            b.messaging.settle(NS, "q", "complete", [d.lock_token])
            await committer.drain()
            assert spy.syncs - before == 1
            spy.check()
        assert spy.mirrors
        syncer.take_lazy()
        await committer.drain()
        assert spy.mirrors == {}

    try:
        asyncio.run(main())
    finally:
        committer.close()
        b.housekeeping.close()
