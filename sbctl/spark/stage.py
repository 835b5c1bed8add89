"""What a Spark task does with its rows: validate, encode, write staged record batches.

This module runs in Spark's Python workers (``mapPartitionsWithIndex``), so it imports
neither pyspark nor the client: only the shared codec and rules. Each task writes, for each
target partition it has rows for, files of whole record batches encoded with
:func:`sbctl.core.records.encode_batch` at base sequence 0 and time 0; the daemon assigns both at
adoption by rewriting the batch headers (daemon/README.md §21).

A task reads its rows as JSON text made by Spark (:class:`Row`, one object per line). Rows
the rules refuse go to the task's rejects file as ``{"o": ordinal, "reason": ...}``; the
driver later joins them back to the source rows.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgspec

from sbctl.core import layout, send_rules
from sbctl.core.durations import parse_duration_ms, parse_instant_ms
from sbctl.core.errors import SbctlError
from sbctl.core.message_form import encode as _encode
from sbctl.core.messages import message_from_line, property_value
from sbctl.core.partitioning import partition_for_key
from sbctl.core.records import NOT_SCHEDULED, STRING_FIELDS, Message, StagedRecord, encode_batch

BATCH_BYTES = 1024 * 1024  # a staged batch is cut at about this many payload bytes
FILE_BYTES = 64 * 1024 * 1024  # and a staged file (a future segment) at about this many


class Row(msgspec.Struct, omit_defaults=True):
    """One source row as Spark hands it over (short names keep the JSON small).

    ``p`` is the partition Spark SQL chose (``pmod(xxhash64(key), P)``, or round-robin);
    ``d`` marks a duplicate MessageId that an earlier row of the load already carries.
    """

    o: int  # the row's ordinal in the input
    p: int = 0
    d: bool = False
    b: str | None = None  # body as text (UTF-8)
    b64: str | None = None  # body as base64 (binary columns, body_base64)
    message_id: str | None = None
    session_id: str | None = None
    partition_key: str | None = None
    correlation_id: str | None = None
    subject: str | None = None
    content_type: str | None = None
    to: str | None = None
    reply_to: str | None = None
    reply_to_session_id: str | None = None
    ttl_ms: float | None = None  # a numeric TTL column: seconds, already scaled to ms
    ttl: str | None = None  # a text TTL column: PT1M, 30s, 90
    at_ms: int | None = None  # a timestamp column, ms since the epoch
    at: str | None = None  # a text scheduled-enqueue-time column
    pr: dict[str, Any] | str | None = None  # application_properties: object or JSON text
    pc: dict[str, Any] | None = None  # --property-columns


@dataclass(frozen=True)
class Rules:
    """What the target entity allows (from ``queue show``), fixed for the whole load."""

    partitions: int
    requires_session: bool
    duplicate_detection: bool
    default_ttl_ms: int
    max_message_bytes: int
    now_ms: int


class Rejected(Exception):
    """A row the rules refuse; the message is the reason written to the rejects file."""


def _props(row: Row) -> dict[str, Any] | None:
    props: dict[str, Any] = {}
    if isinstance(row.pr, str):
        try:
            decoded = msgspec.json.decode(row.pr)
        except msgspec.DecodeError:
            raise Rejected("application_properties is not a JSON object") from None
        if not isinstance(decoded, dict):
            raise Rejected("application_properties is not a JSON object")
        props.update(decoded)
    elif row.pr is not None:
        props.update(row.pr)
    if row.pc:
        props.update(row.pc)
    for key, value in props.items():
        if isinstance(value, dict) and "$type" in value:  # a typed value, as peek shows it
            try:
                props[key] = property_value(str(key), value)
            except SbctlError as exc:
                raise Rejected(exc.message) from None
        # daemon/README.md §1.5: scalars only; lists and maps are not supported.
        elif isinstance(value, dict | list):
            raise Rejected(
                f"application property {key!r} is a {type(value).__name__}: properties must "
                "be strings, numbers, booleans or null"
            )
    return props or None


def _body(row: Row) -> bytes:
    if row.b64 is not None:
        try:
            return base64.b64decode(row.b64, validate=True)
        except (binascii.Error, ValueError):
            raise Rejected("the body is not valid base64") from None
    return row.b.encode() if row.b is not None else b""


def build(row: Row, rules: Rules) -> tuple[Message, int | None, int]:
    """The message of a row, its TTL as stored (capped) and its scheduled time.

    The checks are the daemon's own for a send (:mod:`sbctl.core.send_rules`); a failure raises
    :class:`Rejected` with the reason. The rules that need the encoded message follow in
    :func:`check_size`.
    """
    fields: dict[str, Any] = {"body": _body(row)}
    for name in STRING_FIELDS:
        value = getattr(row, name)
        if value is not None:
            fields[name] = value
    try:
        ttl = _ttl(row)
        at = _scheduled(row, rules.now_ms)
    except SbctlError as exc:
        raise Rejected(exc.message) from None
    if ttl is not None:
        fields["time_to_live_ms"] = ttl
    if at is not None:
        fields["scheduled_enqueue_time_ms"] = at
    message = Message(**fields)
    try:
        send_rules.check_fields(message, requires_session=rules.requires_session)
    except SbctlError as exc:
        raise Rejected(exc.message) from None
    message.application_properties = _props(row)
    return message, *_as_stored(ttl, at, rules)


def _as_stored(ttl: int | None, at: int | None, rules: Rules) -> tuple[int, int]:
    """A message's TTL as stored (capped by the queue's default) and its scheduled time (or
    NOT_SCHEDULED when none, or already past)."""
    stored_ttl = send_rules.stored_time_to_live(ttl, rules.default_ttl_ms)
    return stored_ttl, at if at is not None and at > rules.now_ms else NOT_SCHEDULED


def _ttl(row: Row) -> int | None:
    if row.ttl_ms is not None:
        ttl = int(row.ttl_ms)
    elif row.ttl is not None:
        ttl = parse_duration_ms(row.ttl)
    else:
        return None
    return ttl


def _scheduled(row: Row, now_ms: int) -> int | None:
    at = row.at_ms if row.at_ms is not None else None
    if at is None and row.at is not None:
        at = parse_instant_ms(row.at, now_ms)
    return at


def check_size(message: Message, payload: bytes, rules: Rules) -> str | None:
    """The rules that need the encoded message (:mod:`sbctl.core.send_rules`, in the daemon's
    order): header and property sizes, the partition key (returned), then the tier's
    limit."""
    try:
        key = send_rules.check_encoded(
            message, len(payload), duplicate_detection=rules.duplicate_detection
        )
        send_rules.check_size(len(payload), rules.max_message_bytes)
    except SbctlError as exc:
        raise Rejected(exc.message) from None
    return key


@dataclass(frozen=True)
class Target:
    """Where a task writes: ``<directory>/p<NN>/t<task>-<k>.sbb`` and ``rejects/``."""

    directory: str
    rules: Rules


class _PartitionFiles:
    """The staged files one task writes for one target partition."""

    def __init__(self, directory: str, pid: int, task: int) -> None:
        self.directory = os.fspath(layout.staged_partition_dir(directory, pid))
        self.pid = pid
        self.task = task
        self.pending: list[StagedRecord] = []
        self.pending_bytes = 0
        self.fh: Any = None
        self.file_bytes = 0
        self.file_records = 0
        self.k = 0
        self.done: list[tuple[int, str, int, int]] = []  # (pid, path, records, bytes)

    def add(self, record: StagedRecord) -> None:
        self.pending.append(record)
        self.pending_bytes += len(record.payload)
        if self.pending_bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        batch, _offsets = encode_batch(0, 0, self.pending)
        if self.fh is None:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            path = os.fspath(layout.staged_file(self.directory, self.task, self.k))
            self.fh = layout.open_private(path)  # (closed in close_file())
        self.fh.write(batch)
        self.file_bytes += len(batch)
        self.file_records += len(self.pending)
        self.pending = []
        self.pending_bytes = 0
        if self.file_bytes >= FILE_BYTES:
            self.close_file()

    def close_file(self) -> None:
        if self.fh is None:
            return
        # The daemon syncs every staged file before it adopts the load; syncing here, while
        # the other tasks still compute, leaves it little to wait for.
        self.fh.flush()
        os.fdatasync(self.fh.fileno())
        self.fh.close()
        self.done.append((self.pid, self.fh.name, self.file_records, self.file_bytes))
        self.fh = None
        self.file_bytes = self.file_records = 0
        self.k += 1


class _TaskOutput:
    """What one task writes: staged files per target partition, and its rejects file."""

    def __init__(self, target: Target, task: int) -> None:
        self.target = target
        self.task = task
        self.files: dict[int, _PartitionFiles] = {}
        self.rejects: Any = None
        self.staged = self.rejected = 0

    def add(self, pid: int, record: StagedRecord) -> None:
        out = self.files.get(pid)
        if out is None:
            out = self.files[pid] = _PartitionFiles(self.target.directory, pid, self.task)
        out.add(record)
        self.staged += 1

    def reject(self, line: bytes) -> None:
        self.rejected += 1
        if self.rejects is None:
            folder = layout.task_rejects_dir(self.target.directory)
            os.makedirs(folder, mode=0o700, exist_ok=True)
            self.rejects = layout.open_private(layout.task_rejects_file(folder, self.task))
        self.rejects.write(line)

    def finish(self) -> None:
        for out in self.files.values():
            out.flush()
            out.close_file()

    def close(self) -> None:
        if self.rejects is not None:
            self.rejects.close()

    def results(self, rows: int, duplicates: int) -> Iterator[tuple[Any, ...]]:
        """``("file", pid, path, records, bytes)`` per staged file, then the task's
        ``("task", rows, staged, rejected, duplicates)``."""
        for out in self.files.values():
            for pid, path, records, size in out.done:
                yield ("file", pid, path, records, size)
        yield ("task", rows, self.staged, self.rejected, duplicates)


def stage_rows(task: int, lines: Iterable[str], target: Target) -> Iterator[tuple[Any, ...]]:
    """Spark's ``mapPartitionsWithIndex`` function: stage one task's rows.

    Yields ``("file", pid, path, records, bytes)`` per staged file and one
    ``("task", rows, staged, rejected, duplicates)`` summary.
    """
    rules = target.rules
    decode = msgspec.json.Decoder(Row).decode
    out = _TaskOutput(target, task)
    rows = duplicates = 0
    reject_line = msgspec.json.Encoder().encode
    try:
        for line in lines:
            rows += 1
            row = decode(line)
            if row.d:
                duplicates += 1  # daemon/README.md §8.3: accepted, then silently dropped
                continue
            try:
                message, ttl, sched = build(row, rules)
                payload = _encode(message)
                check_size(message, payload, rules)
                if not 0 <= row.p < rules.partitions:
                    raise Rejected(f"partition {row.p} is outside [0, {rules.partitions})")
            except Rejected as exc:
                out.reject(reject_line({"o": row.o, "reason": str(exc)}) + b"\n")
                continue
            out.add(row.p, StagedRecord(payload, ttl if ttl is not None else -1, sched))
        out.finish()
    finally:
        out.close()
    yield from out.results(rows, duplicates)


def _from_line(line: bytes, rules: Rules) -> tuple[bytes, int, int, str | None]:
    """A `send --input` line → its stored form, TTL as stored, scheduled time and partition
    key, checked as `send` and the daemon check it (:class:`Rejected` with the reason)."""
    try:
        message = message_from_line(line, rules.now_ms)
        send_rules.check_fields(message, requires_session=rules.requires_session)
        payload = _encode(message)
    except msgspec.DecodeError as exc:
        raise Rejected(f"not a JSON object: {exc}") from None
    except SbctlError as exc:
        raise Rejected(exc.message) from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise Rejected(str(exc)) from None
    key = check_size(message, payload, rules)
    ttl, at = _as_stored(message.time_to_live_ms, message.scheduled_enqueue_time_ms, rules)
    return payload, ttl, at, key


def _lines(path: str, start: int, end: int) -> Iterator[bytes]:
    """The lines that start in ``[start, end)`` of the file (a split's, as Hadoop cuts text:
    a line belongs to the split its first byte is in)."""
    with open(path, "rb", buffering=1024 * 1024) as fh:
        pos = start
        if start:
            fh.seek(start - 1)
            pos = start - 1 + len(fh.readline())  # the end of the line before the split
        while pos < end:
            line = fh.readline()
            if not line:
                return
            pos += len(line)
            yield line


def _reject_line(line: bytes, reason: str) -> bytes:
    """``{"row": <the line's JSON>, "reason": ...}`` (a line that is not JSON: as text)."""
    row = line.strip()
    try:
        msgspec.json.decode(row)
    except msgspec.DecodeError:
        row = msgspec.json.encode(row.decode("utf-8", "replace"))
    return b'{"row": ' + row + b', "reason": ' + msgspec.json.encode(reason) + b"}\n"


def stage_lines(
    task: int, splits: Iterable[tuple[str, int, int]], target: Target
) -> Iterator[tuple[Any, ...]]:
    """Spark's ``mapPartitionsWithIndex`` function for `send --input` JSON Lines files: read
    the task's byte ranges of the files itself (no row passes through the JVM), stage each
    line as `send --input` would send it. Yields what :func:`stage_rows` yields; a refused
    line goes to the task's rejects file whole, with the reason."""
    rules = target.rules
    out = _TaskOutput(target, task)
    rows = 0
    turn = task << 33  # keyless messages go round-robin, as Spark's row ids would place them
    try:
        for path, start, end in splits:
            for line in _lines(path, start, end):
                if line.isspace():
                    continue  # blank lines are skipped, as `send --input` skips them
                rows += 1
                try:
                    payload, ttl, sched, key = _from_line(line, rules)
                except Rejected as exc:
                    out.reject(_reject_line(line, str(exc)))
                    continue
                if rules.partitions == 1:
                    pid = 0
                elif key is not None:
                    pid = partition_for_key(key, rules.partitions)
                else:
                    pid = (turn + rows) % rules.partitions
                out.add(pid, StagedRecord(payload, ttl, sched))
        out.finish()
    finally:
        out.close()
    yield from out.results(rows, 0)
