"""Typed application property values (timestamp, UUID, binary): how JSON input and the
command line give them, how JSON output shows them, and that they cross the Unix protocol
as the daemon stores them."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode as encode_message
from sbctl.core.message_form import intake_sent
from sbctl.core.messages import (
    ReceivedMessage,
    check_properties,
    json_value,
    message_from_json,
    parse_property,
)
from sbctl.core.operations import decode_request
from sbctl.core.protocol import LENGTH, Send, encode_request
from sbctl.core.records import Message

AT = datetime(2026, 3, 4, 5, 6, 7, 891000, tzinfo=UTC)
ID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")
TYPED_JSON = {
    "at": {"$type": "timestamp", "value": "2026-03-04T05:06:07.891Z"},
    "id": {"$type": "uuid", "value": str(ID)},
    "blob": {"$type": "binary", "value": "AP8="},
}


def test_json_input_and_output_use_the_same_typed_convention() -> None:
    m = message_from_json({"body": "x", "application_properties": {**TYPED_JSON, "n": 1}}, 0)
    assert m.application_properties == {"at": AT, "id": ID, "blob": b"\x00\xff", "n": 1}
    stored = decode_message(encode_message(m))
    d = Delivered(1, 0, 0, None, None, 0, 0, 1, encode_message(stored))
    shown = ReceivedMessage.from_wire(d).to_dict()
    assert shown["application_properties"] == {**TYPED_JSON, "n": 1}
    assert "message_annotations" not in shown and "body_kind" not in shown


def test_plain_properties_show_as_before() -> None:
    props: dict[str, Any] = {"s": "v", "i": 1, "f": 0.5, "b": False, "n": None}
    assert check_properties(props) == props
    assert {k: json_value(v) for k, v in props.items()} == props


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"a": {"$type": "timestamp", "value": "yesterday-ish"}}, "invalid timestamp"),
        ({"a": {"$type": "uuid", "value": "nope"}}, "invalid uuid"),
        ({"a": {"$type": "binary", "value": "***"}}, "invalid binary"),
        ({"a": {"$type": "decimal", "value": "1"}}, "unknown $type 'decimal'"),
        ({"a": {"$type": "uuid"}}, "must be a string, number"),
        ({"a": [1]}, "must be a string, number"),
    ],
)
def test_bad_typed_values_are_refused_naming_the_property(
    props: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(BadRequest) as info:
        check_properties(props)
    assert "'a'" in info.value.message and fragment in info.value.message


def test_the_command_line_takes_typed_json() -> None:
    assert parse_property('at={"$type":"timestamp","value":"2026-03-04T05:06:07.891Z"}') == (
        "at",
        AT,
    )
    assert parse_property(f'id={{"$type":"uuid","value":"{ID}"}}') == ("id", ID)
    assert parse_property('j={"k":1}') == ("j", '{"k":1}')  # other JSON objects stay text


def test_a_naive_datetime_is_utc() -> None:
    assert check_properties({"at": AT.replace(tzinfo=None)}) == {"at": AT}


def test_typed_values_cross_the_unix_protocol_as_stored() -> None:
    m = Message(b"x", application_properties={"at": AT, "id": ID, "blob": b"\x00"})
    frame = encode_request(7, "send", Send("ns", "q", [m]))
    _, op, args = decode_request(frame[LENGTH.size :])
    assert op == "send"
    (raw,) = args.messages
    assert intake_sent(raw).payload == encode_message(m)  # what the daemon stores as is
    assert decode_message(intake_sent(raw).payload).application_properties == {
        "at": AT,
        "id": ID,
        "blob": b"\x00",
    }
    assert type(m.application_properties["id"]) is uuid.UUID  # type: ignore[index]


def test_a_sent_record_with_a_list_property_is_refused_naming_it(broker: Any) -> None:
    from sbctld.broker import DEFAULT_NAMESPACE

    broker.management.queue_create(DEFAULT_NAMESPACE, "q", {})
    bad = msgspec.msgpack.encode([b"x", *[None] * 11, {"ok": 1, "k": [1, 2]}])
    with pytest.raises(BadRequest, match=r"message 1 of the batch is malformed.*'k'"):
        broker.messaging.send(DEFAULT_NAMESPACE, "q", [msgspec.Raw(bad)])
    good = encode_message(Message(b"x", application_properties={"id": ID}))
    assert len(broker.messaging.send(DEFAULT_NAMESPACE, "q", [msgspec.Raw(good)])) == 1


def test_spark_export_writes_and_spark_load_reads_typed_properties() -> None:
    from sbctl.spark.export import _props_json
    from sbctl.spark.stage import Rejected, Row, _props

    props = {"at": AT, "id": ID, "blob": b"\x00\xff", "n": 1, "s": "x"}
    text = _props_json(props)
    assert msgspec.json.decode(text) == {**TYPED_JSON, "n": 1, "s": "x"}
    assert _props(Row(o=0, pr=text)) == props
    assert _props(Row(o=0, pr='{"plain": 2}')) == {"plain": 2}  # unchanged
    with pytest.raises(Rejected, match="invalid uuid"):
        _props(Row(o=0, pr='{"u": {"$type": "uuid", "value": "x"}}'))


def test_a_naive_datetime_from_the_python_client_is_stored_as_utc() -> None:
    m = Message(b"", application_properties={"at": AT.replace(tzinfo=None)})
    assert decode_message(encode_message(m)).application_properties == {"at": AT}
