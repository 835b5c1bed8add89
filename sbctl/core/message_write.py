"""A message's fields written in the AMQP form, the general way (sbctl.core.message_form
writes the usual messages itself and calls :func:`encode_general` for any other): a header
for its time to live, the broker's facts as delivery annotations, message annotations,
properties, application properties with their AMQP types, and the body as data, an
amqp-value or amqp-sequence sections."""

from __future__ import annotations

import struct
from typing import Any

from sbctl.core.amqp import codec
from sbctl.core.amqp.types import Int, Symbol, Timestamp, UInt, ULong
from sbctl.core.message_plain import property_fields
from sbctl.core.records import Message
from sbctl.core.typed import TYPED, amqp_value

UINT_END = 2**32
VALUE_STRING, VALUE_BINARY = b"\xa1", b"\xa0"  # a v3 body_amqp: "the value is the body"
# The broker's facts of a record it wrote itself (delivery annotations of the stored form).
ENQUEUED_SEQUENCE, DEAD_LETTER_SOURCE = "x-opt-enqueue-sequence-number", "x-opt-deadletter-source"
HOPS, LONG_TTL = "x-opt-sbctl-hops", "x-opt-sbctl-ttl"


def encode_general(m: Message, created_ms: int | None, expires_ms: int | None) -> bytes:
    """Any message's fields → its AMQP form (``created_ms``, ``expires_ms``: the creation and
    absolute expiry times its properties carry, for a record of versions 1-3 converted on
    delivery)."""
    out = bytearray()
    ttl = m.time_to_live_ms
    if ttl is not None and 0 <= ttl < UINT_END:
        out += b"\x00\x53\x70"
        codec.encode_into([None, None, UInt(ttl)], out)
    facts: dict[Any, Any] = {}
    if m.enqueued_sequence_number is not None:
        facts[Symbol(ENQUEUED_SEQUENCE)] = m.enqueued_sequence_number
    if m.dead_letter_source is not None:
        facts[Symbol(DEAD_LETTER_SOURCE)] = m.dead_letter_source
    if m.transfer_hops is not None:
        facts[Symbol(HOPS)] = Int(m.transfer_hops)
    if ttl is not None and not 0 <= ttl < UINT_END:
        facts[Symbol(LONG_TTL)] = ttl
    if facts:
        out += b"\x00\x53\x71"
        codec.encode_into(facts, out)
    # (annotation keys are symbols; one that is not ASCII, which no AMQP peer can send,
    # goes as a string)
    ann = {
        Symbol(k) if k.isascii() else k: _typed(k, v)
        for k, v in (m.message_annotations or {}).items()
    }
    if m.partition_key is not None:
        ann[Symbol("x-opt-partition-key")] = m.partition_key
    if m.scheduled_enqueue_time_ms is not None:
        ann[Symbol("x-opt-scheduled-enqueue-time")] = Timestamp(m.scheduled_enqueue_time_ms)
    if ann:
        out += b"\x00\x53\x72"
        codec.encode_into(ann, out)
    props = property_fields(
        m,
        Symbol(m.content_type) if m.content_type is not None else None,
        None if expires_ms is None else Timestamp(expires_ms),
        None if created_ms is None else Timestamp(created_ms),
    )
    while props and props[-1] is None:
        props.pop()
    out += b"\x00\x53\x73"
    codec.encode_into(props, out)
    if m.application_properties:
        out += b"\x00\x53\x74"
        codec.encode_into({k: _typed(k, v) for k, v in m.application_properties.items()}, out)
    _encode_body(m, out)
    return bytes(out)


def _typed(key: str, value: Any) -> Any:
    """A property value for the wire; ValueError naming the property when a typed value
    does not fit its type (a ``Short(70000)``)."""
    value = amqp_value(value)
    if type(value) is ULong and value >= 2**64:
        raise OverflowError(f"property {key!r}: {value} is more than 2**64 - 1")
    if type(value) in TYPED:
        try:
            raw = codec.encode(value)
            codec.decode_all(raw)
        except (struct.error, TypeError, ValueError, OverflowError):
            raise ValueError(
                f"property {key!r}: {value!r} is not a valid {TYPED[type(value)]}"
            ) from None
    return value


def _encode_body(m: Message, out: bytearray) -> None:
    amqp = m.body_amqp
    if m.body_kind == "value" and amqp is not None:
        try:
            value = m.body.decode() if amqp == VALUE_STRING else m.body
        except UnicodeDecodeError:  # (a v3 record's text that is not UTF-8: sent as data)
            amqp = None
        if amqp is not None:
            out += b"\x00\x53\x77"
            if amqp in (VALUE_STRING, VALUE_BINARY):
                codec.encode_into(value, out)
            else:
                out += amqp
            return
    if m.body_kind == "sequence" and amqp is not None:
        try:
            sequences = codec.decode_all(amqp)
        except codec.DecodeError:
            sequences = None
        if isinstance(sequences, list) and all(isinstance(s, list) for s in sequences):
            for s in sequences:
                out += b"\x00\x53\x76"
                codec.encode_into(s, out)
            return
    out += b"\x00\x53\x75"
    codec.encode_into(m.body, out)
