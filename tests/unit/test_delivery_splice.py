"""A delivery is the broker's header and annotations spliced in front of the stored message:
whatever the stored message holds (a header or not, annotations or not, an id or not) and
whatever the broker's facts (count, lock, partition, state, modified properties), an AMQP
client reads the broker's facts and the sender's sections as they were sent
(sbctl/core/splice.py, daemon/README.md §21.3.1)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.amqp import codec
from sbctl.core.amqp import types as t
from sbctl.core.delivered import Delivered
from sbctl.core.message_form import intake_transfer
from sbctl.core.splice import MESSAGE_STATE, _spliced, splice, stable_message_id

TEXT = st.text(max_size=20)
SENT = st.builds(
    dict,
    header=st.none() | st.builds(t.Header, st.booleans(), st.none(), st.integers(1, 2**32 - 1)),
    annotations=st.dictionaries(st.sampled_from(["x-a", "x-b", "x-opt-partition-key"]), TEXT),
    message_id=st.none() | TEXT.filter(bool),
    props=st.dictionaries(TEXT, st.integers(-(2**31), 2**31 - 1) | TEXT, max_size=4),
    body=st.binary(max_size=300),
)
FACTS = st.builds(
    dict,
    seq=st.integers(1, 2**62),
    count=st.integers(1, 300),
    lock=st.booleans(),
    pid=st.none() | st.integers(0, 15),
    state=st.sampled_from(sorted(MESSAGE_STATE)),
    changes=st.none() | st.dictionaries(TEXT, TEXT, min_size=1, max_size=2),
)


def amqp_message(sent: dict[str, Any]) -> bytes:
    return codec.encode_message(
        codec.Message(
            header=sent["header"],
            message_annotations={t.Symbol(k): v for k, v in sent["annotations"].items()} or None,
            properties=t.Properties(sent["message_id"]) if sent["message_id"] else None,
            application_properties=sent["props"] or None,
            body=[sent["body"]],
        )
    )


@settings(max_examples=300, deadline=None)
@given(SENT, FACTS, st.booleans())
def test_a_client_reads_the_brokers_facts_and_the_senders_sections(
    sent: dict[str, Any], facts: dict[str, Any], received: bool
) -> None:
    (stored,) = intake_transfer(amqp_message(sent), 0)
    given_id = stored.message.message_id
    d = Delivered(
        facts["seq"],
        1_700_000_000_000,
        facts["count"],
        "token",
        1_700_000_060_000,
        1_800_000_000_000,
        facts["pid"],
        facts["state"],
        stored.payload,
        facts["changes"],
    )
    got = codec.decode_message(splice(d, received=received, lock=facts["lock"]))
    assert got.header is not None
    assert got.header.delivery_count == facts["count"] - (1 if received else 0)
    if sent["header"] is not None:
        assert (got.header.durable, got.header.ttl) == (sent["header"].durable, sent["header"].ttl)
    ann = got.message_annotations or {}
    assert ann["x-opt-sequence-number"] == facts["seq"]
    assert ann["x-opt-enqueued-time"] == 1_700_000_000_000
    assert ann["x-opt-message-state"] == MESSAGE_STATE[facts["state"]]
    assert ann.get("x-opt-locked-until") == (1_700_000_060_000 if facts["lock"] else None)
    assert ann.get("x-opt-partition-id") == facts["pid"]
    for key, value in sent["annotations"].items():
        assert ann[key] == value
    assert got.properties is not None
    assert got.properties.message_id == (sent["message_id"] or given_id)
    assert (got.application_properties or {}) == {**sent["props"], **(facts["changes"] or {})}
    assert got.body == [sent["body"]]


@settings(max_examples=300, deadline=None)
@given(SENT, FACTS, st.booleans(), st.data())
def test_the_short_paths_write_what_the_general_one_writes(
    sent: dict[str, Any], facts: dict[str, Any], received: bool, data: st.DataObject
) -> None:
    """A usual message (an id, no annotations, maybe the sender's header) is spliced without
    reading its sections: byte for byte what the general path writes; so is any prefix of
    it, which the short paths must not read past."""
    (stored,) = intake_transfer(amqp_message(sent), 0)
    payload = stored.payload
    if payload.startswith(b"\x00\x53\x70\xc0"):  # the header as sent, or as rhea sends it
        short = data.draw(  # (the last two: a field that runs past the header's end)
            st.sampled_from(
                [b"", b"\x01\x41", b"\x02\x42\x40", b"\x00", b"\x01\x81", b"\x01\xa1\x09"]
            )
        )
        if short:
            payload = b"\x00\x53\x70\xc0" + bytes((len(short),)) + short + payload[5 + payload[4] :]
    cut = payload[: data.draw(st.integers(1, len(payload)))]
    payload = cut if data.draw(st.booleans()) else payload
    d = Delivered(
        facts["seq"], 1_700_000_000_000, facts["count"], "token", 1_700_000_060_000,
        1_800_000_000_000, facts["pid"], facts["state"], payload, facts["changes"],
    )  # fmt: skip
    locked = 1_700_000_060_000 if facts["lock"] else None
    n = facts["count"] - 1 if received else facts["count"]
    try:
        expected: bytes | str = _spliced(d, payload, n, locked, facts["pid"])
    except Exception as exc:  # (a cut message: the same failure either way)
        expected = type(exc).__name__
    try:
        got: bytes | str = splice(d, received=received, lock=facts["lock"])
    except Exception as exc:
        got = type(exc).__name__
    assert got == expected


def test_a_message_stored_without_an_id_is_delivered_with_its_stable_one() -> None:
    from sbctl.core.message_form import encode
    from sbctl.core.records import Message

    d = Delivered(9, 1, 1, None, None, 2, 3, 1, encode(Message(b"x")))
    got = codec.decode_message(splice(d, received=False, lock=False))
    assert got.properties is not None
    assert got.properties.message_id == stable_message_id(3, 9)
