"""A delivery: the broker's facts spliced in front of the stored AMQP message.

A stored message is the AMQP encoding its sender sent (:mod:`sbctl.core.message_form`).
What the broker owns (sequence number, enqueued time, state, lock, delivery count,
partition, a forwarded message's origin) lives in the index and the journal and goes out as
two sections built here per delivery: the header (the sender's durable, priority, ttl and
first-acquirer fields as they were sent, then the delivery count) and the message
annotations (the broker's entries, then the sender's entries as they were sent). The
properties, application properties, body and footer follow byte for byte as stored.

Two exceptions, both rare, rebuild a section: properties modified by an abandon, defer or
dead-letter (``Delivered.changes``) rebuild the application properties; a message stored
without a message id (sent over the Unix socket without one) gets a stable id derived from
its place, so that peeks and redeliveries agree (SDKs need one: @azure/service-bus keys its
lock renewal by message id).

The header's delivery-count is the number of *earlier* deliveries (AMQP), so a received
message carries the broker's count minus one, a peeked one the count as is.
"""

from __future__ import annotations

import struct
import uuid
from hashlib import sha1
from typing import Any

from sbctl.core.amqp import codec
from sbctl.core.amqp.sections import map_of, properties_with_id, skip
from sbctl.core.delivered import Delivered
from sbctl.core.message_form import DEAD_LETTER_SOURCE, ENQUEUED_SEQUENCE, stored_form
from sbctl.core.typed import amqp_value

_q = struct.Struct(">q").pack
_I = struct.Struct(">I").pack
_h = struct.Struct(">h").pack
# sbctl's stored states → x-opt-message-state (0 active, 1 deferred, 2 scheduled).
MESSAGE_STATE = {1: 0, 2: 1, 3: 2, 4: 0, 5: 0}
_NO_ID = uuid.UUID("5b1c7d2e-0000-4000-8000-5bc71d000000")  # namespace of stable message ids
_NO_ID_BYTES = _NO_ID.bytes


def _sym(name: str) -> bytes:
    raw = name.encode("ascii")
    return bytes((0xA3, len(raw))) + raw


_SEQUENCE = _sym("x-opt-sequence-number") + b"\x81"  # (then the number: a long)
_ENQUEUED = _sym("x-opt-enqueued-time") + b"\x83"
_STATE = {
    state: _sym("x-opt-message-state") + bytes((0x54, amqp))
    for state, amqp in {0: 0, **MESSAGE_STATE}.items()
}
_LOCKED = _sym("x-opt-locked-until") + b"\x83"
_ENQUEUE_SEQUENCE = _sym(ENQUEUED_SEQUENCE) + b"\x81"
_DEADLETTER_SOURCE = _sym(DEAD_LETTER_SOURCE)
# The partition id is an AMQP short, as Service Bus sends it: the .NET SDKs unbox it as one
# (``(short)pair.Value``), and a long there fails every receive (daemon/README.md §29).
_PARTITION_ID = _sym("x-opt-partition-id") + b"\x61"
_NULLS = (b"", b"\x40", b"\x40\x40", b"\x40\x40\x40", b"\x40\x40\x40\x40")
_COUNTS = tuple(b"\x43" if n == 0 else bytes((0x52, n)) for n in range(256))
_UINT_END = 2**32


def stable_message_id(partition_id: int | None, sequence_number: int) -> str:
    """``uuid.uuid5(_NO_ID, f"{partition_id}:{sequence_number}").hex`` without the UUID
    objects: the id a message stored without one is given."""
    digest = sha1(_NO_ID_BYTES + f"{partition_id}:{sequence_number}".encode()).digest()
    n = int.from_bytes(digest[:16], "big")
    n = n & ~(0xC000 << 48) | 0x8000 << 48  # variant RFC 4122
    n = n & ~(0xF000 << 64) | 5 << 76  # version 5
    return f"{n:032x}"


def _list_items(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(count, first item, end) of the list or map whose constructor is at ``pos``."""
    ctor = buf[pos]
    if ctor == 0xC0 or ctor == 0xC1:
        return buf[pos + 2], pos + 3, pos + 2 + buf[pos + 1]
    if ctor == 0xD0 or ctor == 0xD1:
        size, count = struct.unpack_from(">II", buf, pos + 1)
        return count, pos + 9, pos + 5 + size
    return 0, pos + 1, pos + 1  # list0, null


def splice(d: Delivered, *, received: bool, lock: bool) -> bytes:
    """A peeked or received message → the AMQP message sent to its client. ``lock``: the
    locked-until annotation is sent (a peek-lock receive outside a session)."""
    buf = d.payload
    if not buf or buf[0] != 0x00:  # (a record of versions 1-3, as those releases sent it)
        buf = stored_form(buf, d.enqueued_time_ms, d.expires_at_ms)
    n = d.delivery_count - 1 if received else d.delivery_count
    locked = d.locked_until_ms if lock else None
    pid = d.partition_id
    if d.changes or not 0 <= n < 256 or len(buf) < 7:
        return _spliced(d, buf, n, locked, pid)
    pos = 0
    if buf[2] == 0x73 and buf[3] == 0xC0 and buf[5] and buf[6] != 0x40:
        # the usual stored form: properties holding an id first, no header, no annotations
        layout = _PLAIN.get((n, locked is not None, pid is not None)) or _plain(
            n, locked is not None, pid is not None
        )
    else:
        layout, pos = _after_header(buf, n, locked is not None, pid is not None)
        if layout is None:
            return _spliced(d, buf, n, locked, pid)
    state = _STATE.get(d.state, _STATE[0])
    args = [layout[1], d.sequence_number, _ENQUEUED, d.enqueued_time_ms, state]
    if locked is not None:
        args += (_LOCKED, locked)
    if pid is not None:
        args += (_PARTITION_ID, pid)
    head = layout[0](*args)
    return head + buf if pos == 0 else b"".join((head, memoryview(buf)[pos:]))


def _after_header(buf: bytes, n: int, locked: bool, partitioned: bool) -> tuple[Any, int]:
    """The packing of the header and the broker's annotations of a stored form that holds
    the sender's header, then properties holding an id (what the SDKs send), and where the
    properties start; (None, 0) for any other form, which :func:`_spliced` reads."""
    if (
        buf[3] == 0xC0
        and buf[2] == 0x70
        and buf[1] == 0x53
        and len(buf) > (pos := 5 + buf[4]) + 6
        and buf[pos + 2] == 0x73
        and buf[pos + 3] == 0xC0
        and buf[pos + 5]
        and buf[pos + 6] != 0x40
        and buf[pos] == 0x00
        and buf[pos + 1] == 0x53
    ):
        key = (buf[6:pos], buf[5], n, locked, partitioned)
        return _SENT.get(key) or _sent(*key), pos
    return None, 0


def _spliced(d: Delivered, buf: bytes, n: int, locked: int | None, pid: int | None) -> bytes:
    """:func:`splice` of any stored form (``n``: the header's delivery count)."""
    if buf.startswith(b"\x00\x53\x70"):  # the header: the sender's fields, then the count
        count, item, pos = _list_items(buf, 3)
        end = item
        for _ in range(min(count, 4)):
            end = skip(buf, end)
        header = _header(buf[item:end], min(count, 4), n)
    else:
        header = _HEADERS[n] if 0 <= n < 256 else _header(b"", 0, n)
        pos = 0
    # the broker's facts of a record it wrote (delivery annotations: not sent)
    facts: dict[Any, Any] | None = None
    if buf.startswith(b"\x00\x53\x71", pos):
        facts, pos = codec.decode(buf, pos + 3)
    # the message annotations: the broker's entries, then the sender's
    ann = [
        _BROKER[locked is not None, pid is not None](
            d.sequence_number,
            d.enqueued_time_ms,
            _STATE.get(d.state, _STATE[0]),
            locked or 0,
            pid or 0,
        )
    ]
    pairs = 3 + (locked is not None) + (pid is not None)
    if facts:
        pairs += _facts(facts, ann)
    if buf.startswith(b"\x00\x53\x72", pos):
        count, item, stop = _list_items(buf, pos + 3)
        ann.append(buf[item:stop])
        pairs += count // 2
        pos = stop
    plain = (  # (the usual properties: a list8 whose first field, the id, is set)
        len(buf) > pos + 6
        and buf[pos + 3] == 0xC0
        and buf[pos + 2] == 0x73
        and buf[pos + 5]
        and buf[pos + 6] != 0x40
    )
    if d.changes or not (plain or _has_message_id(buf, pos)):
        rest: bytes | memoryview = _rebuilt(d, buf[pos:])
    else:
        rest = memoryview(buf)[pos:]
    return b"".join((header, b"\x00\x53\x72", map_of(pairs, b"".join(ann)), rest))


def _header(sent: bytes, n_sent: int, count: int) -> bytes:
    """The header section: the sender's first ``n_sent`` fields (``sent``), nulls for the
    others, then the delivery count (a uint)."""
    count = min(max(count, 0), _UINT_END - 1)
    fields = sent + _NULLS[4 - n_sent] + (_COUNTS[count] if count < 256 else b"\x70" + _I(count))
    size = len(fields) + 1
    if size < 256:
        return bytes((0x00, 0x53, 0x70, 0xC0, size, 5)) + fields
    return b"\x00\x53\x70\xd0" + _I(size + 3) + _I(5) + fields


_HEADERS = [_header(b"", 0, n) for n in range(256)]


def _broker_entries(locked: bool, partitioned: bool) -> Any:
    """How the broker's entries are packed: sequence number, enqueued time, state, maybe
    the locked-until time and the partition id (a function of all five)."""
    fmt = f">{len(_SEQUENCE)}sq{len(_ENQUEUED)}sq{len(_STATE[0])}s"
    if locked:
        fmt += f"{len(_LOCKED)}sq"
    if partitioned:
        fmt += f"{len(_PARTITION_ID)}sh"
    pack = struct.Struct(fmt).pack

    def entries(seq: int, enqueued: int, state: bytes, until: int, pid: int) -> bytes:
        args: list[Any] = [_SEQUENCE, seq, _ENQUEUED, enqueued, state]
        if locked:
            args += (_LOCKED, until)
        if partitioned:
            args += (_PARTITION_ID, pid)
        return pack(*args)

    return entries


def _plain(
    n: int, locked: bool, partitioned: bool, header: bytes | None = None
) -> tuple[Any, bytes]:
    """The packing of the usual delivery's header and annotations (no sender's annotations;
    ``header``: the header section, else the one of count ``n`` alone): the constant bytes
    up to the sequence number, then each entry, one struct."""
    size = len(_SEQUENCE) + 8 + len(_ENQUEUED) + 8 + len(_STATE[0])
    fmt = f">{len(_ENQUEUED)}sq{len(_STATE[0])}s"
    if locked:
        size += len(_LOCKED) + 8
        fmt += f"{len(_LOCKED)}sq"
    if partitioned:
        size += len(_PARTITION_ID) + 2
        fmt += f"{len(_PARTITION_ID)}sh"
    pairs = 3 + locked + partitioned
    head = (_HEADERS[n] if header is None else header) + b"\x00\x53\x72"
    head += bytes((0xC1, size + 1, 2 * pairs)) + _SEQUENCE
    layout = (struct.Struct(f">{len(head)}sq" + fmt[1:]).pack, head)
    if header is None:
        _PLAIN[n, locked, partitioned] = layout
    return layout


def _sent(
    fields: bytes, count: int, n: int, locked: bool, partitioned: bool
) -> tuple[Any, bytes] | None:
    """:func:`_plain` after a header of the sender's first 4 of ``count`` ``fields``, as
    :func:`_spliced` writes it, kept for the next message sent with the same (a few thousand
    at most: a TTL can differ per message); None when the fields do not read."""
    end = 0
    try:
        for _ in range(min(count, 4)):
            end = skip(fields, end)
    except (ValueError, IndexError, struct.error, RecursionError):
        return None  # (the general path says why)
    if end > len(fields):  # (a field past the header's end: the general path reads on)
        return None
    if len(_SENT) >= 4096:
        _SENT.clear()
    layout = _SENT[fields, count, n, locked, partitioned] = _plain(
        n, locked, partitioned, _header(fields[:end], min(count, 4), n)
    )
    return layout


_PLAIN: dict[tuple[int, bool, bool], tuple[Any, bytes]] = {}
_SENT: dict[tuple[bytes, int, int, bool, bool], tuple[Any, bytes]] = {}
_BROKER = {
    (lock, part): _broker_entries(lock, part) for lock in (False, True) for part in (False, True)
}


def _facts(facts: dict[Any, Any], ann: list[bytes]) -> int:
    """The broker's annotations of a forwarded or dead-lettered message, added to ``ann``;
    returns how many."""
    added = 0
    seq = facts.get(ENQUEUED_SEQUENCE)
    if seq is not None:
        ann += (_ENQUEUE_SEQUENCE, _q(int(seq)))
        added += 1
    source = facts.get(DEAD_LETTER_SOURCE)
    if source is not None:
        ann += (_DEADLETTER_SOURCE, codec.encode(str(source)))
        added += 1
    return added


def _has_message_id(buf: bytes, pos: int = 0) -> bool:
    """Whether the properties section (at ``pos`` when there is one) holds a message id."""
    if not buf.startswith(b"\x00\x53\x73", pos):
        return False
    count, item, _ = _list_items(buf, pos + 3)
    return count > 0 and buf[item] != 0x40


def _rebuilt(d: Delivered, rest: bytes) -> bytes:
    """``rest`` (properties onwards) with the message id filled in and the properties the
    broker modified merged into the application properties (the rare cases)."""
    pos = skip(rest, 3) if rest[:3] == b"\x00\x53\x73" else 0
    props = rest[:pos]
    if not _has_message_id(props):
        props = properties_with_id(props[3:], stable_message_id(d.partition_id, d.sequence_number))
    if not d.changes:
        return props + rest[pos:]
    app: dict[Any, Any] = {}
    if rest[pos : pos + 3] == b"\x00\x53\x74":
        value, pos = codec.decode(rest, pos + 3)
        app = dict(value or {})
    app.update((k, amqp_value(v)) for k, v in d.changes.items())
    section = bytearray(b"\x00\x53\x74")
    codec.encode_into(app, section)
    return props + bytes(section) + rest[pos:]


def splice_all(
    got: list[Delivered], *, received: bool, lock: bool
) -> tuple[list[Delivered], list[bytes], list[tuple[Delivered, str]]]:
    """:func:`splice` of a batch that may hold a record that cannot be read (stored
    damaged, or by a release with a bug): (the deliveries that splice, their bytes, the
    others with why). One such record never blocks the others (daemon/README.md §29.11)."""
    good: list[Delivered] = []
    out: list[bytes] = []
    bad: list[tuple[Delivered, str]] = []
    for d in got:
        try:
            out.append(splice(d, received=received, lock=lock))
            good.append(d)
        except Exception as exc:
            bad.append((d, f"{type(exc).__name__}: {exc}"[:200]))
    return good, out, bad


# delivery-annotations {x-opt-lock-token: uuid} (map8: size 36, 2 items; sym8; uuid)
_LOCK_TOKEN_SECTION = b"\x00\x53\x71\xc1\x24\x02\xa3\x10x-opt-lock-token\x98"


def with_lock_token(encoded: bytes, lock_token: str) -> bytes:
    """A spliced message (a header first, never delivery annotations) with the delivery
    annotation ``x-opt-lock-token`` placed after the header as AMQP orders sections: how
    Service Bus returns a deferred message received by sequence number (the Go and .NET
    SDKs take its lock token from there)."""
    end = skip(encoded, 3)
    section = _LOCK_TOKEN_SECTION + uuid.UUID(lock_token).bytes
    return b"".join((encoded[:end], section, encoded[end:]))
