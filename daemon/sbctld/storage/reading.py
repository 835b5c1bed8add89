"""Reading stored records back, each checked against the CRC its log indexed
(daemon/README.md §21.4, §21.11).

Rules kept here: a record is served only when its bytes match its indexed CRC (else
CorruptRecord, or None from :meth:`RecordReading.read_payloads`, and the caller discards
it); a read of the record right after the one read last reads up to ``READ_AHEAD_BYTES`` of
the segment at once and the next records come from that buffer; the daemon keeps one such
buffer, whichever log read last, and a log that cuts or truncates a segment forgets it.
Only the daemon's event-loop thread reads.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import crc32c

from sbctl.core.records import RECORD_HEADER
from sbctld.storage.space import CorruptRecord

READ_AHEAD_BYTES = 64 * 1024
# (segment, its offset, the bytes read there, the sequence number read last)
_read_ahead: list[tuple[Any, int, bytes, int] | None] = [None]


def forget_read_ahead() -> None:
    """A segment was cut or truncated: the buffer may hold bytes no longer there."""
    _read_ahead[0] = None


class RecordReading:
    """The reads of a :class:`~sbctld.storage.log.PartitionLog` (its index's arrays and
    its segments, ``_bases`` their first sequence numbers)."""

    directory: Path
    base: int
    offset: array[int]
    length: array[int]
    crc: array[int]
    _bases: list[int]
    segments: list[Any]

    def read_record(self, seq: int) -> bytes:
        """The stored record (header and payload) of ``seq``, its CRC checked.

        Raises CorruptRecord when it fails: the caller skips it (:meth:`discard_corrupt`).
        """
        i = seq - self.base
        off, n = self.offset[i], self.length[i]
        k = bisect_right(self._bases, seq) - 1
        if k < 0 or off < RECORD_HEADER.size:
            raise CorruptRecord(seq, str(self.directory))
        seg = self.segments[k]
        start, size = off - RECORD_HEADER.size, n + RECORD_HEADER.size
        ahead = _read_ahead[0]
        raw = b""
        if ahead is not None and ahead[0] is seg and start >= ahead[1]:
            _seg, base, buf, _last = ahead
            raw = buf[start - base : start - base + size]
        if len(raw) != size:
            sequential = ahead is not None and ahead[0] is seg and ahead[3] == seq - 1
            want = max(size, min(READ_AHEAD_BYTES, seg.size - start)) if sequential else size
            try:
                base, buf = start, os.pread(seg.fd, want, start)
            except OSError as exc:
                raise CorruptRecord(seq, f"{seg.path} ({exc})") from exc
            raw = buf[:size]
        _read_ahead[0] = (seg, base, buf, seq)
        if len(raw) != size or crc32c.crc32c(raw) != self.crc[i]:
            raise CorruptRecord(seq, str(seg.path))
        return raw

    def read_payload(self, seq: int) -> bytes:
        return self.read_record(seq)[RECORD_HEADER.size :]

    def read_payloads(self, seqs: Sequence[int]) -> list[bytes | None]:
        """:meth:`read_payload` of each of ``seqs`` in one pass (a receive's batch); None for
        a record that fails, which the caller discards. A record inside the buffer the last
        read left is checked and taken from it; any other goes through :meth:`read_record`,
        which reads and checks it as it does alone (and refills the buffer)."""
        h = RECORD_HEADER.size
        base, offset, length, crc = self.base, self.offset, self.length, self.crc
        bases, segments = self._bases, self.segments
        out: list[bytes | None] = []
        last = -1  # the last record taken from the buffer, not yet noted in _read_ahead
        for seq in seqs:
            ahead = _read_ahead[0]
            if ahead is not None:
                seg, start, buf, _seq = ahead
                i = seq - base
                begin = offset[i] - h - start
                end = begin + h + length[i]
                k = bisect_right(bases, seq) - 1
                if (
                    begin >= 0
                    and end <= len(buf)
                    and k >= 0
                    and segments[k] is seg
                    and offset[i] >= h
                    and crc32c.crc32c(memoryview(buf)[begin:end]) == crc[i]
                ):
                    out.append(buf[begin + h : end])
                    last = seq
                    continue
                if last >= 0:
                    _read_ahead[0] = (seg, start, buf, last)
                    last = -1
            try:
                out.append(self.read_record(seq)[h:])
            except CorruptRecord:
                out.append(None)
        if last >= 0:
            seg, start, buf, _seq = _read_ahead[0]  # type: ignore[misc]
            _read_ahead[0] = (seg, start, buf, last)
        return out

    def record_header(self, seq: int) -> tuple[int, int]:
        """(ttl_ms, scheduled_ms) of a stored record, read from its segment."""
        raw = self.read_record(seq)
        _length, _rel, ttl_ms, scheduled_ms = RECORD_HEADER.unpack_from(raw)
        return ttl_ms, scheduled_ms
