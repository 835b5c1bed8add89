"""AMQP frames (AMQP 1.0 §2.3): an 8-byte header, then a performative and a payload.

Header: ``size`` u32 (the whole frame), ``doff`` u8 (header length in 4-byte words, 2),
``type`` u8 (0 AMQP, 1 SASL), ``channel`` u16. A frame of exactly 8 bytes is a heartbeat.

:func:`transfer_frames` splits a delivery across as many transfer frames as the peer's
max frame size needs, each but the last with ``more=true``; :class:`Reassembly` joins the
payloads of a multi-frame delivery back together.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from sbctl.core.amqp.codec import DecodeError, _enc_composite, decode
from sbctl.core.amqp.types import Accepted, Composite, Disposition, Flow, Transfer, UByte, UInt

FRAME_HEADER = struct.Struct(">IBBH")
HEADER_SIZE = 8
AMQP_FRAME = 0
SASL_FRAME = 1
MIN_MAX_FRAME_SIZE = 512  # the smallest max-frame-size a peer may announce (§2.7.1)
HEAD_BYTES = 512  # a frame's first bytes, where its performative is looked for first

PROTOCOL_AMQP = b"AMQP\x00\x01\x00\x00"
PROTOCOL_SASL = b"AMQP\x03\x01\x00\x00"
HEARTBEAT = FRAME_HEADER.pack(HEADER_SIZE, 2, AMQP_FRAME, 0)
_LEN = struct.Struct(">I")


class FrameError(ValueError):
    """A frame that breaks the framing rules (the connection must close)."""

    condition = "amqp:connection:framing-error"


class UndecodableFrame(FrameError):
    """A frame whose performative does not decode (nested too deep, a count its size cannot
    hold, an unknown type code...): closes the connection with amqp:decode-error."""

    condition = "amqp:decode-error"


class Frame(NamedTuple):
    type: int
    channel: int
    body: Any  # the performative (None for a heartbeat)
    payload: bytes  # what follows the performative (a transfer's message bytes)


def encode_frame(
    channel: int, performative: Composite, payload: bytes = b"", kind: int = 0
) -> bytes:
    body = bytearray()
    _enc_composite(performative, body)
    size = HEADER_SIZE + len(body) + len(payload)
    return FRAME_HEADER.pack(size, 2, kind, channel) + bytes(body) + payload


# A disposition's fields after first and last when it settles with accepted: settled true,
# state accepted (descriptor 0x24, empty list), batchable null (as encode_frame writes them).
_ACCEPTED_TAIL = b"\x41\x00\x53\x24\x45\x40"


def accepted_disposition(channel: int, role: bool, first: int, last: int | None) -> bytes:
    """``encode_frame(channel, Disposition(role, first, last, True, Accepted()))``, byte for
    byte, without the generic encoder: a commit round sends one per run of transfers
    (tests/unit/test_amqp_framing.py compares the two)."""
    fields = (
        (b"\x41" if role else b"\x42")
        + _uint(first)
        + (b"\x40" if last is None else _uint(last))
        + _ACCEPTED_TAIL
    )
    body = b"\x00\x53\x15\xc0" + bytes((len(fields) + 1, 6)) + fields
    return FRAME_HEADER.pack(HEADER_SIZE + len(body), 2, AMQP_FRAME, channel) + body


def parse_frame(
    buf: bytes | bytearray | memoryview, pos: int, max_size: int
) -> tuple[Frame, int] | None:
    """The frame at ``pos`` and the position after it, or None if more bytes are needed."""
    if len(buf) - pos < HEADER_SIZE:
        return None
    size, doff, kind, channel = FRAME_HEADER.unpack_from(buf, pos)
    if size < HEADER_SIZE or doff < 2 or doff * 4 > size:
        raise FrameError(f"malformed frame header (size {size}, doff {doff})")
    if size > max_size:
        raise FrameError(f"frame of {size} bytes exceeds the max frame size {max_size}")
    if kind not in (AMQP_FRAME, SASL_FRAME):
        raise FrameError(f"unknown frame type {kind}")
    end = pos + size
    if len(buf) < end:
        return None
    start = pos + doff * 4
    if start == end:
        return Frame(kind, channel, None, b""), end
    body, used = _performative(buf, start, end) or _decoded(buf, start, end)
    if used == end:
        return Frame(kind, channel, body, b""), end
    with memoryview(buf) as view:
        payload = bytes(view[used:end])
    return Frame(kind, channel, body, payload), end


def _decoded(buf: bytes | bytearray | memoryview, start: int, end: int) -> tuple[Composite, int]:
    """The performative at ``start`` read by the generic decoder, and where it ends.

    It is decoded from its frame's bytes only, never from the buffer after them: a compound
    claiming more than its frame must not make the decoder walk the rest of the connection's
    buffer, frame after frame (daemon/README.md §29.11). It is short (a transfer's payload is
    most of the frame): the first HEAD_BYTES, copied, hold it, and only a longer one is
    decoded from the whole frame."""
    head_end = min(end, start + HEAD_BYTES)
    try:
        body, used = decode(bytes(buf[start:head_end]), 0)
    except DecodeError as exc:
        if head_end == end:
            raise UndecodableFrame(f"undecodable frame body: {exc}") from None
        try:
            body, used = decode(bytes(buf[start:end]), 0)
        except DecodeError as exc:
            raise UndecodableFrame(f"undecodable frame body: {exc}") from None
    if not isinstance(body, Composite):
        raise FrameError("a frame body must be a performative")
    return body, start + used


_TRANSFER_HEAD = b"\x00\x53\x14"
_TRANSFER_TAIL = b"\x42\x40\x40\x40\x40\x40"  # more=false, then five nulls (11 fields)
_UINT8 = tuple(UInt(v) for v in range(256))
_UBYTE = tuple(UByte(v) for v in range(256))
_U32 = _LEN.unpack_from


# The performatives a client sends for every message: read by _performative.
_SHORT = {cls.CODE: cls for cls in (Flow, Transfer, Disposition)}
_ACCEPTED_STATES = (b"\x00\x53\x24\x45", b"\x00\x53\x24\xc0\x01\x00")
# Values of one byte (a null, uint 0, true, false), and values of a byte after their
# constructor (smalluint, ubyte, a boolean in its long form).
_CONSTANT = {0x40: None, 0x43: _UINT8[0], 0x41: True, 0x42: False}
_BYTE_VALUE: dict[int, tuple[Any, ...]] = {0x52: _UINT8, 0x50: _UBYTE, 0x56: (False, True)}


def _performative(
    buf: bytes | bytearray | memoryview, start: int, end: int
) -> tuple[Any, int] | None:
    """The flow, transfer or disposition at ``start`` and where it ends, read without the
    generic decoder when it takes the usual forms (a list8 or list32 of nulls, booleans,
    uints, a ubyte, a short delivery tag and the accepted outcome: what every client sends
    for every message); None for any other form, which :func:`decode` then reads (and
    refuses when it is wrong). Equal, field for field and type for type, to what
    :func:`decode` gives (tests/unit/test_amqp_performative_parse.py)."""
    if end - start < 6 or buf[start] != 0 or buf[start + 1] != 0x53:
        return None
    cls = _SHORT.get(buf[start + 2])
    if cls is None:
        return None
    head = _list_head(buf, start + 3, end)
    if head is None or head[2] > len(cls.NAMES):
        return None
    pos, stop, count = head
    values: list[Any] = [None] * count
    for i in range(count):
        if pos >= stop:
            return None
        code = buf[pos]
        if code in _CONSTANT:
            values[i] = _CONSTANT[code]
            pos += 1
            continue
        table = _BYTE_VALUE.get(code)
        if table is not None:
            if pos + 1 >= stop or buf[pos + 1] >= len(table):
                return None
            values[i] = table[buf[pos + 1]]
            pos += 2
            continue
        values[i], pos = _wider(buf, pos, stop)
        if pos < 0:
            return None
    if pos != stop:
        return None
    return cls(*values), stop


def _list_head(
    buf: bytes | bytearray | memoryview, pos: int, end: int
) -> tuple[int, int, int] | None:
    """(first item, end, count) of the list8 or list32 at ``pos``; None for any other."""
    ctor = buf[pos]
    if ctor == 0xC0:
        first, stop, count = pos + 3, pos + 2 + buf[pos + 1], buf[pos + 2]
    elif ctor == 0xD0 and end - pos >= 9:
        first, stop, count = pos + 9, pos + 5 + _U32(buf, pos + 1)[0], _U32(buf, pos + 5)[0]
    else:
        return None
    return (first, stop, count) if stop <= end else None


def _wider(buf: bytes | bytearray | memoryview, pos: int, stop: int) -> tuple[Any, int]:
    """A short delivery tag, a 4-byte uint or the accepted outcome at ``pos`` and where it
    ends; (None, -1) for any other value."""
    code = buf[pos]
    if code == 0xA0 and pos + 1 < stop:
        n = pos + 2 + buf[pos + 1]
        return (bytes(buf[pos + 2 : n]), n) if n <= stop else (None, -1)
    if code == 0x70 and pos + 4 < stop:
        return UInt(_U32(buf, pos + 1)[0]), pos + 5
    for form in _ACCEPTED_STATES:
        if bytes(buf[pos : pos + len(form)]) == form and pos + len(form) <= stop:
            return Accepted(), pos + len(form)
    return None, -1


_UINTS = (b"\x43", *(bytes((0x52, v)) for v in range(1, 256)))  # uint0, smalluint


def _uint(v: int) -> bytes:
    return _UINTS[v] if v < 256 else b"\x70" + _LEN.pack(v)


def transfer_head(
    channel: int,
    handle: int,
    delivery_id: int,
    tag: bytes,
    message_format: int,
    settled: bool,
    payload_size: int,
) -> bytes:
    """The bytes before the payload of a single-frame transfer without a state, encoded
    directly: with the payload appended, what ``encode_frame(channel, Transfer(handle,
    delivery_id, tag, message_format, settled, False, None, None), payload)`` gives,
    without building the performative."""
    if delivery_id >= 256:  # (every delivery but a link's first few: one struct)
        key = (handle, len(tag), message_format, settled)
        layout = _HEADS.get(key) or _head_layout(*key)
        if layout is not None:
            pack, fixed, before, tagged, after = layout
            return pack(
                fixed + payload_size, 2, 0, channel, before, delivery_id, tagged, tag, after
            )
    n = len(tag)
    body = b"".join(
        (
            _UINTS[handle] if handle < 256 else b"\x70" + _LEN.pack(handle),
            _UINTS[delivery_id] if delivery_id < 256 else b"\x70" + _LEN.pack(delivery_id),
            bytes((0xA0, n)) if n < 256 else b"\xb0" + _LEN.pack(n),
            tag,
            _UINTS[message_format] if message_format < 256 else _uint(message_format),
            b"\x41" if settled else b"\x42",
            _TRANSFER_TAIL,
        )
    )
    size = len(body)
    if size + 1 < 256:
        listed = bytes((0xC0, size + 1, 11))
    else:
        listed = b"\xd0" + _LEN.pack(size + 4) + _LEN.pack(11)
    return b"".join(
        (
            FRAME_HEADER.pack(HEADER_SIZE + 3 + len(listed) + size + payload_size, 2, 0, channel),
            _TRANSFER_HEAD,
            listed,
            body,
        )
    )


def transfer_heads(
    channel: int,
    handle: int,
    ids: list[int],
    tags: list[bytes],
    message_format: int,
    settled: bool,
    sizes: list[int],
) -> list[bytes]:
    """:func:`transfer_head` of several deliveries on one link at once: delivery ``ids[i]``
    with tag ``tags[i]`` and a payload of ``sizes[i]`` bytes."""
    n = len(tags[0]) if tags else 0
    layout = _HEADS.get((handle, n, message_format, settled)) or _head_layout(
        handle, n, message_format, settled
    )
    if layout is None or not ids or ids[0] < 256 or any(len(tag) != n for tag in tags):
        return [
            transfer_head(channel, handle, i, tag, message_format, settled, size)
            for i, tag, size in zip(ids, tags, sizes, strict=True)
        ]
    pack, fixed, before, tagged, after = layout
    return [
        pack(fixed + size, 2, 0, channel, before, i, tagged, tag, after)
        for i, tag, size in zip(ids, tags, sizes, strict=True)
    ]


def transfer_head_room(tag_size: int) -> int:
    """The most bytes a transfer head takes with a tag of ``tag_size`` bytes."""
    return HEADER_SIZE + 3 + 9 + 5 + 5 + 5 + tag_size + 5 + 1 + len(_TRANSFER_TAIL)


_HeadLayout = tuple[Callable[..., bytes], int, bytes, bytes, bytes]
_HEADS: dict[tuple[int, int, int, bool], _HeadLayout] = {}
_HEADS_MAX = 1024


def _head_layout(handle: int, n: int, message_format: int, settled: bool) -> _HeadLayout | None:
    """How transfer_head packs a transfer whose delivery id takes a full uint: the struct,
    the frame size but the payload, and the constant bytes around the id and the tag."""
    if n >= 256:
        return None
    after = _uint(message_format) + (b"\x41" if settled else b"\x42") + _TRANSFER_TAIL
    size = len(_uint(handle)) + 5 + 2 + n + len(after)  # the list's fields
    if size + 1 >= 256:
        return None
    before = _TRANSFER_HEAD + bytes((0xC0, size + 1, 11)) + _uint(handle) + b"\x70"
    tagged = bytes((0xA0, n))
    fmt = f">IBBH{len(before)}sI{len(tagged)}s{n}s{len(after)}s"
    layout = (struct.Struct(fmt).pack, HEADER_SIZE + 3 + 3 + size, before, tagged, after)
    if len(_HEADS) < _HEADS_MAX:
        _HEADS[(handle, n, message_format, settled)] = layout
    return layout


def transfer_frames(
    channel: int, transfer: Composite, payload: bytes, max_frame_size: int
) -> Iterator[bytes]:
    """One delivery as frames no larger than ``max_frame_size`` (§2.6.14)."""
    if (
        transfer.state is None
        and not transfer.more
        and transfer.message_format is not None
        and transfer.delivery_tag is not None
        and transfer.settled is not None
    ):
        first = (
            transfer_head(
                channel,
                transfer.handle,
                transfer.delivery_id,
                transfer.delivery_tag,
                transfer.message_format,
                transfer.settled,
                len(payload),
            )
            + payload
        )
    else:
        first = encode_frame(channel, transfer, payload)
    if len(first) <= max_frame_size:
        yield first
        return
    more = Transfer(
        transfer.handle,
        transfer.delivery_id,
        transfer.delivery_tag,
        transfer.message_format,
        transfer.settled,
        True,
    )
    overhead = len(encode_frame(channel, more))
    room = max_frame_size - overhead
    if room <= 0:
        raise FrameError(f"max frame size {max_frame_size} leaves no room for a payload")
    pos = 0
    n = len(payload)
    while pos < n:
        chunk = payload[pos : pos + room]
        pos += len(chunk)
        if pos < n:
            yield encode_frame(channel, more, chunk)
        else:
            last = Transfer(
                transfer.handle,
                transfer.delivery_id,
                transfer.delivery_tag,
                transfer.message_format,
                transfer.settled,
                False,
                None,
                transfer.state,
            )
            yield encode_frame(channel, last, chunk)


class Reassembly:
    """The frames of one incoming multi-frame delivery, joined."""

    __slots__ = ("chunks", "first", "size")

    def __init__(self, first: Composite) -> None:
        self.first = first
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, payload: bytes, limit: int) -> None:
        self.size += len(payload)
        if limit and self.size > limit:
            raise FrameError(f"delivery exceeds {limit} bytes")
        self.chunks.append(payload)

    def payload(self) -> bytes:
        return b"".join(self.chunks)
