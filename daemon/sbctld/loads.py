"""Adopting a spark-load: staged record batches become an entity's messages, all or none.

daemon/README.md §0.4.6: bulk import is an emulator-only administrative path, charged no credits.

Adoption has two halves. :func:`check` runs while the daemon keeps serving: it streams every
staged file (CRC, lengths, record numbering, message size; :mod:`sbctld.staged`), then
numbers the files in place from each partition's next sequence number and fdatasyncs them
in a worker thread. Nothing of the store changes. :func:`commit` is one synchronous call on
the event loop, so no reader sees any of the load until it returns; it renumbers a
partition that took other messages in the meantime, then does steps 2-5 below. Crash
safety comes from a manifest per load in ``<entity>/loads/``, written with
write-temp-then-rename:

1. every staged file is checked and numbered, then fdatasynced (as above);
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
from typing import Any, NamedTuple

import msgspec

from sbctl.core import layout
from sbctl.core.errors import BadRequest, MessagingEntityDisabled, QuotaExceeded
from sbctld import staged
from sbctld.config import MB
from sbctld.partition import Partition
from sbctld.queue import Queue
from sbctld.staged import CheckedFile
from sbctld.storage.adoption import AdoptionError, StagedSegment, rollback_adoption
from sbctld.storage.files import read_verified, remove_verified, write_atomic

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
    return layout.load_manifest(entity_dir, digest)


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
    folder = layout.loads_dir(entity_dir)
    if not folder.is_dir():
        return
    for path in sorted(folder.glob(f"*{layout.LOAD_SUFFIX}")):
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


class Prepared(NamedTuple):
    """A load checked and numbered off the loop, waiting for :func:`commit`."""

    partitions: dict[int, Partition]
    files: dict[int, list[CheckedFile]]
    segments: dict[int, list[StagedSegment]]
    ids: dict[int, list[tuple[int, int, int, int]]]
    bases: dict[int, int]  # each partition's next_seq the numbering started from
    now_ms: int


def _start(
    queue: Queue, load_id: str, files: Sequence[tuple[int, str]]
) -> dict[str, Any] | tuple[dict[int, Partition], dict[int, list[Path]]]:
    """Validate the request; the earlier result when this load id already committed."""
    check_load_id(load_id)
    cfg = queue.config
    done = _read(_path(queue.directory, load_id))
    if done is not None and done.state == "committed":
        return {**done.result, "load_id": load_id, "adopted": False}
    if cfg.status in ("Disabled", "SendDisabled"):
        raise MessagingEntityDisabled(f"queue {cfg.name!r} is {cfg.status}: loads are refused")
    if not all(p.takes_loads for p in queue.partitions):
        raise BadRequest("spark-load loads into queues only, not topics or subscriptions")
    by_partition: dict[int, list[Path]] = {}
    for pid, name in files:
        if not 0 <= pid < len(queue.partitions):
            raise BadRequest(f"partition {pid} is not a partition of queue {cfg.name!r}")
        path = Path(name)
        if not path.is_absolute() or not path.is_file():
            raise BadRequest(f"staged file {name!r} is not a file the daemon can read")
        by_partition.setdefault(pid, []).append(path)
    return {pid: queue.partitions[pid] for pid in by_partition}, by_partition


def _refused(load_id: str, exc: Exception) -> BadRequest:
    return BadRequest(f"load {load_id!r} refused, nothing adopted: {exc}")


def adopt(
    queue: Queue, load_id: str, files: Sequence[tuple[int, str]], now_ms: int
) -> dict[str, Any]:
    """Adopt staged files ``(partition, path)`` (in order) as one atomic load, in one call
    (tests and tools; the daemon uses :func:`check` then :func:`commit`)."""
    started = _start(queue, load_id, files)
    if isinstance(started, dict):
        return started
    parts, by_partition = started
    try:
        checked = {
            pid: [staged.check_now(path, queue.max_message_bytes) for path in paths]
            for pid, paths in by_partition.items()
        }
        numbered = {
            pid: staged.number_now(fs, parts[pid].next_seq, now_ms) for pid, fs in checked.items()
        }
    except (AdoptionError, OSError) as exc:
        raise _refused(load_id, exc) from None
    prepared = Prepared(
        parts,
        checked,
        {pid: segs for pid, (segs, _ids) in numbered.items()},
        {pid: ids for pid, (_segs, ids) in numbered.items()},
        {pid: parts[pid].next_seq for pid in checked},
        now_ms,
    )
    return commit(queue, load_id, prepared)


async def check(
    queue: Queue, load_id: str, files: Sequence[tuple[int, str]], clock: Callable[[], int]
) -> dict[str, Any] | Prepared:
    """Step 1 off the loop: check every staged file (streamed, yielding between chunks),
    then number them from each partition's current next_seq in a worker thread.

    Nothing of the store changes; :func:`commit` follows (or the earlier result when this
    load id already committed)."""
    started = _start(queue, load_id, files)
    if isinstance(started, dict):
        return started
    parts, by_partition = started
    try:
        checked: dict[int, list[CheckedFile]] = {}
        for pid, paths in by_partition.items():
            checked[pid] = [await staged.check(path, queue.max_message_bytes) for path in paths]
        now_ms = clock()
        bases = {pid: parts[pid].next_seq for pid in checked}
        segments, ids = {}, {}
        for pid, fs in checked.items():
            segments[pid], ids[pid] = await staged.number_in_thread(fs, bases[pid], now_ms)
    except (AdoptionError, OSError) as exc:
        raise _refused(load_id, exc) from None
    return Prepared(parts, checked, segments, ids, bases, now_ms)


def commit(queue: Queue, load_id: str, prepared: Prepared) -> dict[str, Any]:
    """Steps 2-5, atomic on the loop: renumber any partition that took other messages since
    :func:`check`, then record, link, commit and index the load."""
    started = _start(queue, load_id, [])
    if isinstance(started, dict):
        return started  # the same load id committed meanwhile
    cfg = queue.config
    now_ms = prepared.now_ms
    parts = prepared.partitions
    segments = dict(prepared.segments)
    for pid, p in parts.items():
        if queue.partitions[pid] is not p:
            raise BadRequest(
                f"load {load_id!r} refused, nothing adopted: queue {cfg.name!r} changed while "
                f"the load was being checked"
            )
    try:
        for pid, fs in prepared.files.items():
            for f, before in zip(fs, prepared.ids[pid], strict=True):
                if staged.identity(f.source) != before:
                    raise AdoptionError(f"{f.source}: changed while the load was being checked")
            if parts[pid].next_seq != prepared.bases[pid]:
                segments[pid] = staged.number_now(fs, parts[pid].next_seq, now_ms)[0]
    except (AdoptionError, OSError) as exc:
        raise _refused(load_id, exc) from None
    manifest_path = _path(queue.directory, load_id)
    quota = cfg.max_size_in_megabytes * MB
    for pid, segs in segments.items():
        added = sum(st.payload_bytes for st in segs)
        if parts[pid].live_bytes + added > quota:
            # daemon/README.md §0.1.3: each partition holds up to the entity's max size.
            raise QuotaExceeded(
                f"load {load_id!r} would take partition {pid} of queue {cfg.name!r} over its "
                f"{cfg.max_size_in_megabytes} MB; nothing adopted"
            )

    # 2-3. Record where each partition stood, then link the files in.
    next_seq = {parts[pid].directory.name: parts[pid].next_seq for pid in segments}
    _write(manifest_path, Manifest(load_id=load_id, state="adopting", next_seq=next_seq))
    pause = float(os.environ.get(PAUSE_ENV) or 0)
    for k, (pid, segs) in enumerate(segments.items()):
        parts[pid].link_adoption(segs)
        if k == 0 and pause:
            time.sleep(pause)

    # 4. Commit durably, 5. then make it visible.
    counts = {pid: sum(len(st.offsets) for st in segs) for pid, segs in segments.items()}
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
    for pid, segs in segments.items():
        parts[pid].commit_adoption(segs, now_ms)
    queue.accessed_at_ms = now_ms
    return {**result, "load_id": load_id, "adopted": True}
