"""Any single flipped byte in a crashed data dir (every file, several positions), or any
one file deleted or truncated: the daemon still opens it, never serves a corrupt message,
never brings back a completed one, and loses at most the messages of the damaged batch
(of the damaged segment when a segment file is deleted or cut) (daemon/README.md §0.4)."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

from conftest import crash
from sbctl.core.message_form import decode as decode_message
from sbctl.core.records import Message
from sbctld.broker import DEFAULT_NAMESPACE, Broker
from sbctld.clock import FakeClock
from sbctld.storage.sync import Syncer

NS = DEFAULT_NAMESPACE
ENTITIES = ("q", "qp", "t/subscriptions/a", "t/subscriptions/b")
BATCH = 10


def build(data_dir: Path, clock: FakeClock) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """A crashed data dir; returns (acknowledged, completed) bodies per entity."""
    b = Broker(data_dir, clock, Syncer("os"), default_credits_per_second=0)
    b.management.queue_create(NS, "q", {})
    b.management.queue_create(NS, "qp", {"enable_partitioning": True})
    b.management.topic_create(NS, "t", {})
    for name in ("a", "b"):
        b.management.subscription_create(NS, "t", name, {})
    acked: dict[str, set[str]] = {e: set() for e in ENTITIES}
    done: dict[str, set[str]] = {e: set() for e in ENTITIES}
    for round_ in range(2):
        for target in ("q", "qp", "t"):
            for k in range(5):
                bodies = [f"{target}-{round_}-{k}-{j}" for j in range(BATCH)]
                b.messaging.send(NS, target, [Message(x.encode(), partition_key=x) for x in bodies])
                for e in ENTITIES:
                    if e.split("/")[0] == target:
                        acked[e].update(bodies)
        for e in ("q", "qp", "t/subscriptions/a"):
            got = b.messaging.receive(NS, e, 15, "peek-lock")
            tokens = [d.lock_token for d in got if d.lock_token]
            for i in range(0, len(tokens), 5):
                b.messaging.settle(NS, e, "complete", tokens[i : i + 5])
            done[e].update(decode_message(d.payload).body.decode() for d in got)
        if round_ == 0:
            b.housekeeping.checkpoint()
    crash(b)
    return acked, done


def drain(b: Broker, entity: str) -> list[str]:
    out: list[str] = []
    for _ in range(100):
        got = b.messaging.receive(NS, entity, 100, "receive-and-delete")
        if not got:
            break
        out.extend(decode_message(d.payload).body.decode() for d in got)
    return out


def damage_cases(root: Path, thorough: bool) -> list[tuple[str, int]]:
    """Seven positions in every file (thorough), else one chosen per file (seeded)."""
    cases = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name in ("reserve.bin",) or path.suffix == ".corrupt":
            continue
        size = path.stat().st_size
        spots = sorted({0, 9, 21, size // 3, size // 2, size - 2, size - 1})
        if not thorough:
            spots = [random.Random(path.name).choice(spots)]
        for at in spots:
            if 0 <= at < size:
                cases.append((str(path.relative_to(root)), at))
    return cases


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    root = tmp_path_factory.mktemp("pristine") / "data"
    acked, done = build(root, FakeClock())
    return root, acked, done


THOROUGH = pytest.mark.skipif(
    os.environ.get("SBCTL_THOROUGH") != "1",
    reason="every file at every position or cut (minutes): set SBCTL_THOROUGH=1",
)


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "thorough", [False, pytest.param(True, marks=[pytest.mark.slow, THOROUGH])]
)
def test_any_single_flipped_byte(
    pristine: tuple[Path, dict, dict],
    tmp_path: Path,
    thorough: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Content, not durability, is checked here: no waiting for the disk.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    root, acked, done = pristine
    problems: list[str] = []
    cases = damage_cases(root, thorough)
    assert len(cases) > (300 if thorough else 40)
    for rel, at in cases:
        copy = tmp_path / "d"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("reserve.bin"))
        target = copy / rel
        data = bytearray(target.read_bytes())
        data[at] ^= 0x04
        target.write_bytes(bytes(data))
        check(copy, f"{rel}@{at}", acked, done, problems, lossy=False)
    assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems[:40])


def check(
    copy: Path,
    where: str,
    acked: dict[str, set[str]],
    done: dict[str, set[str]],
    problems: list[str],
    lossy: bool,
) -> None:
    """Open the damaged dir and drain every entity; ``lossy``: a whole segment may be lost."""
    try:
        b = Broker(copy, FakeClock(), Syncer("os"), default_credits_per_second=0)
    except Exception as exc:
        problems.append(f"{where}: daemon did not start: {exc!r}")
        return
    try:
        for e in ENTITIES:
            got = drain(b, e)
            want = acked[e] - done[e]
            served = set(got)
            if served - acked[e]:
                problems.append(f"{where}: {e} served corrupt {sorted(served - acked[e])[:2]}")
            if served & done[e]:
                problems.append(f"{where}: {e} resurrected {len(served & done[e])}")
            if len(want - served) > BATCH and not lossy:
                problems.append(f"{where}: {e} lost {len(want - served)}")
    except Exception as exc:
        problems.append(f"{where}: failed while serving: {exc!r}")
    finally:
        try:
            b.housekeeping.close()
        except Exception:
            pass


CUTS = ("delete", "truncate-half", "truncate-zero")


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "thorough", [False, pytest.param(True, marks=[pytest.mark.slow, THOROUGH])]
)
def test_any_single_deleted_or_truncated_file(
    pristine: tuple[Path, dict, dict],
    tmp_path: Path,
    thorough: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every file deleted, cut to half, cut to nothing (thorough), else one of these per
    file (seeded). A segment loses its own messages (they are not in any other file); any
    other file loses nothing beyond one batch: journals have mirrors, metadata has seals,
    a checkpoint has its previous generation."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    root, acked, done = pristine
    problems: list[str] = []
    cases = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.name == "reserve.bin" or path.suffix == ".corrupt":
            continue
        hows = list(CUTS) if thorough else [random.Random(path.name).choice(CUTS)]
        cases += [(str(path.relative_to(root)), how) for how in hows]
    assert len(cases) > (150 if thorough else 40)
    for rel, how in cases:
        copy = tmp_path / "d"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(root, copy, ignore=shutil.ignore_patterns("reserve.bin"))
        target = copy / rel
        if how == "delete":
            target.unlink()
        else:
            os.truncate(target, target.stat().st_size // 2 if how == "truncate-half" else 0)
        check(copy, f"{rel} {how}", acked, done, problems, lossy=target.suffix == ".log")
    assert not problems, f"{len(problems)} of {len(cases)} cases:\n" + "\n".join(problems[:40])
