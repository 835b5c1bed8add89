"""A real daemon on a small tmpfs that fills up: clear QuotaExceeded, nothing acknowledged
lost (after space is freed and after SIGKILL + restart), nothing refused stored, settling
and purge work while the disk is full, and sends work again once space is free, without a
restart. Plain and partitioned queues and a topic.

Needs root to mount a tmpfs; skipped otherwise.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from sbctl.core.errors import QuotaExceeded
from sbctl.core.records import Message

BODY = 16 * 1024
ENTITIES = ("q", "qp", "t")


def mount_tmpfs(path: str, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", path],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


def drain(client: Any, entity: str) -> set[str]:
    """Every message left, by receive-and-delete."""
    out: set[str] = set()
    while True:
        got = client.receive(entity, 100, mode="receive-and-delete")
        if not got:
            return out
        out.update(m.body.decode().split(":")[0] for m in got)


def test_a_full_disk_refuses_sends_clearly_and_loses_nothing(daemon_factory: Any) -> None:
    d = daemon_factory(start=False)
    mount_tmpfs(str(d.data_dir), "24m")
    try:
        d.start()
        c = d.client()
        c.queue_create("q")
        c.queue_create("qp", enable_partitioning=True)
        c.topic_create("t")
        for name in ("a", "b"):
            c.subscription_create("t", name)
        filler = d.data_dir / "filler.bin"
        filler.write_bytes(b"\0" * (4 * 1024 * 1024))  # freed later, as an operator would
        acked: dict[str, set[str]] = {e: set() for e in ENTITIES}
        refused: set[str] = set()
        errors: list[str] = []
        n = 0
        full: set[str] = set()
        while len(full) < len(ENTITIES) and n < 20_000:
            for entity in ENTITIES:
                ids = [f"{entity}-{n}-{k}" for k in range(4)]
                batch = [Message(f"{i}:".encode() + b"x" * BODY, partition_key=i) for i in ids]
                try:
                    c.send(entity, batch)
                    acked[entity].update(ids)
                except QuotaExceeded as exc:
                    refused.update(ids)
                    errors.append(exc.message)
                    full.add(entity)
            n += 1
        assert full == set(ENTITIES), "the disk never filled"
        assert all("disk is full" in e for e in errors), errors[:3]
        # Reads and settlements still work on the full disk.
        assert c.peek("q", 5, 1)
        got = c.receive("q", 10)
        assert all(r.get("ok") for r in c.complete("q", [m.lock_token for m in got]))
        completed = {m.body.decode().split(":")[0] for m in got}
        purged = c.purge("qp")
        assert purged
        with pytest.raises(QuotaExceeded):
            c.send("q", [Message(b"still-full:")])
        # Space comes back: sends are accepted again, without a restart.
        filler.unlink()
        c.send("q", [Message(b"after-free:")])
        acked["q"].add("after-free")
        c.close()
        d.kill()
        d.start()
        c = d.client()
        left_q = drain(c, "q")
        assert left_q == acked["q"] - completed  # 0 lost, 0 resurrected, 0 refused stored
        assert drain(c, "qp") == set()  # purged while full, stays purged
        for sub in ("t/subscriptions/a", "t/subscriptions/b"):
            assert drain(c, sub) == acked["t"]
        assert not refused & (left_q | acked["t"])
        c.close()
        d.stop()
    finally:
        try:
            d.kill()
        except (OSError, ValueError, AssertionError):
            pass  # not running
        subprocess.run(["umount", str(d.data_dir)], capture_output=True, timeout=30)
