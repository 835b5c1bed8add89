"""Adopting a spark-load: staged record batches become an entity's messages, all or none.

SPEC §0.4.6: bulk import is an emulator-only administrative path, charged no credits.

A load is adopted in one synchronous call on the event loop, so nothing else runs, and no
reader sees any of it, until it returns. Crash safety comes from a manifest per load in
``<entity>/loads/``, written with write-temp-then-rename:

1. every staged file is checked (CRC, lengths, record numbering, message size) and
   numbered in place from its partition's next sequence number, then fdatasynced;
2. the manifest says ``adopting`` and records each partition's next sequence number;
3. the files are renamed into the partition folders as new segments;
4. the manifest says ``committed`` (with the load's result); only then
5. the new segments are indexed in memory: the load becomes visible at once.

On start, :func:`recover` rolls every partition of an ``adopting`` manifest back to its
recorded next sequence number (removing the new segments) and forgets the manifest, so a
crash anywhere before step 4 leaves nothing, and after it everything. A committed manifest
stays: the same load id is then a no-op (exactly once).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from sbctl.errors import BadRequest, MessagingEntityDisabled, QuotaExceeded
from sbctld.config import MB
from sbctld.queue import Queue
from sbctld.storage.adoption import AdoptionError, StagedSegment, rollback_adoption
from sbctld.storage.files import read_verified, remove_verified, write_atomic
from sbctld.storage.log import PartitionLog
from sbctld.storage.topic import TopicLog

LOADS_DIR = "loads"
MAX_LOAD_ID = 128
# Test hook: seconds to stop for after the first partition's files are linked and before the
# commit, so that a test can SIGKILL the daemon mid-adoption.
PAUSE_ENV = "SBCTLD_TEST_ADOPTION_PAUSE"


class Manifest(msgspec.Struct, kw_only=True):
    load_id: str
    state: str  # "adopting" | "committed"
    next_seq: dict[str, int]  # partition folder -> next sequence number before the load
    result: dict[str, Any] = {}


def _path(entity_dir: Path, load_id: str) -> Path:
    digest = hashlib.sha256(load_id.encode()).hexdigest()[:32]
    return entity_dir / LOADS_DIR / f"{digest}.load"


def _read(path: Path) -> Manifest | None:
    try:
        return msgspec.msgpack.decode(read_verified(path), type=Manifest)
    except FileNotFoundError:
        return None


def _write(path: Path, manifest: Manifest) -> None:
    path.parent.mkdir(mode=0o700, exist_ok=True)
    write_atomic(path, msgspec.msgpack.encode(manifest))


def recover(entity_dir: Path, report: Callable[[str], None]) -> None:
    """Roll back adoptions that never committed (before the partition logs are opened)."""
    folder = entity_dir / LOADS_DIR
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.load")):
        manifest = _read(path)
        if manifest is None or manifest.state == "committed":
            continue
        removed = sum(
            rollback_adoption(entity_dir / part, seq) for part, seq in manifest.next_seq.items()
        )
        remove_verified(path)
        report(
            f"load {manifest.load_id!r} did not commit before the daemon stopped: rolled "
            f"back ({removed} staged segments removed); nothing of it is visible"
        )


def check_load_id(load_id: str) -> None:
    if not 1 <= len(load_id) <= MAX_LOAD_ID or not load_id.isprintable():
        raise BadRequest("a load id must be 1-128 printable characters")


def status(queue: Queue, load_id: str) -> dict[str, Any]:
    check_load_id(load_id)
    manifest = _read(_path(queue.directory, load_id))
    if manifest is None or manifest.state != "committed":
        return {"load_id": load_id, "state": "unknown"}
    return {**manifest.result, "load_id": load_id, "state": "committed"}


def adopt(
    queue: Queue, load_id: str, files: Sequence[tuple[int, str]], now_ms: int
) -> dict[str, Any]:
    """Adopt staged files ``(partition, path)`` (in order) as one atomic load."""
    check_load_id(load_id)
    cfg = queue.config
    manifest_path = _path(queue.directory, load_id)
    done = _read(manifest_path)
    if done is not None and done.state == "committed":
        return {**done.result, "load_id": load_id, "adopted": False}
    if cfg.status in ("Disabled", "SendDisabled"):
        raise MessagingEntityDisabled(f"queue {cfg.name!r} is {cfg.status}: loads are refused")
    logs: list[PartitionLog] = []
    for p in queue.partitions:
        if not isinstance(p.log, PartitionLog) or isinstance(p.log, TopicLog):
            raise BadRequest("spark-load loads into queues only, not topics or subscriptions")
        logs.append(p.log)
    by_partition: dict[int, list[Path]] = {}
    for pid, name in files:
        if not 0 <= pid < len(queue.partitions):
            raise BadRequest(f"partition {pid} is not a partition of queue {cfg.name!r}")
        path = Path(name)
        if not path.is_absolute() or not path.is_file():
            raise BadRequest(f"staged file {name!r} is not a file the daemon can read")
        by_partition.setdefault(pid, []).append(path)

    # 1. Check and number everything; a bad file refuses the whole load, nothing changed.
    prepared: dict[int, list[StagedSegment]] = {}
    try:
        for pid, paths in by_partition.items():
            prepared[pid] = logs[pid].prepare_adoption(paths, now_ms, queue.max_message_bytes)
    except (AdoptionError, OSError) as exc:
        raise BadRequest(f"load {load_id!r} refused, nothing adopted: {exc}") from None
    quota = cfg.max_size_in_megabytes * MB
    for pid, staged in prepared.items():
        added = sum(sum(st.lengths) for st in staged)
        if queue.partitions[pid].log.live_bytes + added > quota:
            # SPEC §0.1.3: each partition holds up to the entity's max size.
            raise QuotaExceeded(
                f"load {load_id!r} would take partition {pid} of queue {cfg.name!r} over its "
                f"{cfg.max_size_in_megabytes} MB; nothing adopted"
            )

    # 2-3. Record where each partition stood, then link the files in.
    next_seq = {logs[pid].directory.name: logs[pid].next_seq for pid in prepared}
    _write(manifest_path, Manifest(load_id=load_id, state="adopting", next_seq=next_seq))
    pause = float(os.environ.get(PAUSE_ENV) or 0)
    for k, (pid, staged) in enumerate(prepared.items()):
        logs[pid].link_adoption(staged)
        if k == 0 and pause:
            time.sleep(pause)

    # 4. Commit durably, 5. then make it visible.
    counts = {pid: sum(len(st.offsets) for st in staged) for pid, staged in prepared.items()}
    result: dict[str, Any] = {
        "messages": sum(counts.values()),
        "partitions": len(counts),
        "per_partition": {str(pid): n for pid, n in sorted(counts.items())},
        "adopted_at_ms": now_ms,
    }
    _write(
        manifest_path,
        Manifest(load_id=load_id, state="committed", next_seq=next_seq, result=result),
    )
    for pid, staged in prepared.items():
        p = queue.partitions[pid]
        for when, seq in logs[pid].commit_adoption(staged, now_ms):
            p.schedule(when, seq)
    queue.accessed_at_ms = now_ms
    return {**result, "load_id": load_id, "adopted": True}
