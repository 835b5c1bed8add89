"""The wire protocol: strict request decoding and frame round trips (daemon/README.md §23)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sbctl.core.delivered import Delivered
from sbctl.core.errors import BadRequest
from sbctl.core.message_form import decode as decode_message
from sbctl.core.message_form import encode, intake_sent
from sbctl.core.operations import OPS, decode_args, decode_request
from sbctl.core.protocol import (
    LENGTH,
    PROTOCOL_VERSION,
    ClockAdvance,
    ClockSet,
    DeleteMessages,
    EntityCreate,
    EntityPath,
    EntityRef,
    FaultAdd,
    FaultClear,
    FaultList,
    LoadAdopt,
    LoadRef,
    NamespaceCreate,
    NamespacePair,
    NamespaceRef,
    NamespaceScope,
    NamespaceSetKey,
    NamespaceUpdate,
    Peek,
    Receive,
    ReceiveDeferred,
    Resubmit,
    RuleCreate,
    RuleRef,
    Send,
    SequenceNumbers,
    SessionAccept,
    SessionRef,
    SessionState,
    SessionToken,
    Settle,
    StagedFile,
    SubscriptionCreate,
    SubscriptionRef,
    TopicScope,
    Transact,
    TxSettle,
    decode_envelope,
    decode_reply,
    decode_result,
    encode_frame,
    encode_reply,
    encode_request,
)
from sbctl.core.protocol import Empty as EmptyArgs
from sbctl.core.records import Message


def body(obj: Any) -> bytes:
    return msgspec.msgpack.encode(obj)


def frame_body(req_id: int, op: str, args: msgspec.Struct) -> bytes:
    frame = encode_request(req_id, op, args)
    (length,) = LENGTH.unpack_from(frame)
    assert length == len(frame) - LENGTH.size
    return frame[LENGTH.size :]


def same_args(op: str, decoded: Any, sent: msgspec.Struct) -> bool:
    """Equal field by field; a send's messages may stay encoded on the daemon side."""
    if op not in ("send", "transact"):
        return bool(decoded == sent)
    got = [m if isinstance(m, Message) else intake_sent(m).message for m in decoded.messages]
    others = getattr(decoded, "settlements", None), getattr(sent, "settlements", None)
    return (decoded.namespace, decoded.entity, got) == (
        sent.namespace,  # type: ignore[attr-defined]
        sent.entity,  # type: ignore[attr-defined]
        sent.messages,  # type: ignore[attr-defined]
    ) and others[0] == others[1]


SAMPLES: dict[str, list[msgspec.Struct]] = {
    "topic_create": [EntityCreate("ns", "events", {"enable_partitioning": True})],
    "topic_update": [EntityCreate("ns", "events", {"status": "Disabled"})],
    "topic_get": [EntityRef("ns", "events")],
    "topic_list": [NamespaceScope("ns")],
    "topic_delete": [EntityRef("ns", "events")],
    "subscription_create": [
        SubscriptionCreate("ns", "events", "audit"),
        SubscriptionCreate("ns", "events", "audit", {"lock_duration": 30_000}),
    ],
    "subscription_update": [SubscriptionCreate("ns", "events", "audit", {"status": "Active"})],
    "subscription_get": [SubscriptionRef("ns", "events", "audit")],
    "subscription_list": [TopicScope("ns", "events")],
    "subscription_delete": [SubscriptionRef("ns", "events", "audit")],
    "rule_create": [
        RuleCreate("ns", "events", "audit", "r1"),
        RuleCreate("ns", "events", "audit", "r2", {"type": "sql", "sql_expression": "a > 1"}),
        RuleCreate(
            "ns",
            "events",
            "audit",
            "r3",
            {"type": "correlation", "correlation_id": "c", "properties": {"k": 1}},
            "SET sys.Label = 'x'",
        ),
    ],
    "rule_get": [RuleRef("ns", "events", "audit", "r1")],
    "rule_list": [SubscriptionRef("ns", "events", "audit")],
    "rule_delete": [RuleRef("ns", "events", "audit", "r1")],
    "ping": [EmptyArgs()],
    "status": [EmptyArgs()],
    "shutdown": [EmptyArgs()],
    "namespace_create": [
        NamespaceCreate("ns-one"),
        NamespaceCreate("premiumns", "premium", 4, 8),
    ],
    "namespace_get": [NamespaceRef("ns-one")],
    "amqp_endpoint": [NamespaceRef("ns-one")],
    "namespace_list": [EmptyArgs()],
    "namespace_delete": [NamespaceRef("ns-one")],
    "namespace_update": [
        NamespaceUpdate("ns-one", credits_per_second=0),
        NamespaceUpdate("ns-one", capacity=4, ops_per_unit=500),
    ],
    "namespace_set_key": [NamespaceSetKey("ns-one", "RootManageSharedAccessKey", "k3y=")],
    "namespace_credits": [NamespaceRef("ns-one")],
    "namespace_metrics": [NamespaceRef("ns-one")],
    "overview": [NamespaceRef("ns-one")],
    "namespace_pair": [
        NamespacePair("ns-one", "ns-two"),
        NamespacePair("ns-one", "ns-two", 3, 0, 1000, True),
    ],
    "namespace_unpair": [NamespaceRef("ns-one")],
    "namespace_pair_status": [NamespaceRef("ns-one")],
    "queue_create": [
        EntityCreate("ns", "q"),
        EntityCreate("ns", "a/b", {"lock_duration": 5000, "requires_session": True}),
    ],
    "queue_update": [EntityCreate("ns", "q", {"status": "Disabled", "user_metadata": None})],
    "queue_get": [EntityRef("ns", "q")],
    "queue_list": [NamespaceScope("ns")],
    "queue_delete": [EntityRef("ns", "q")],
    "send": [
        Send("ns", "q", [Message()]),
        Send(
            "ns",
            "q",
            [
                Message(b"\x00\xff", "id", "s", "s", application_properties={"k": 1.5}),
                Message(b"two", time_to_live_ms=1000, scheduled_enqueue_time_ms=5),
            ],
        ),
    ],
    "peek": [Peek("ns", "q"), Peek("ns", "q/$deadletterqueue", 250, (3 << 48) | 7)],
    "receive": [Receive("ns", "q"), Receive("ns", "q", 10, 5000, "receive-and-delete")],
    "settle": [
        Settle("ns", "q", "complete", ["00000000-0000-0001-0000-000000000002"]),
        Settle("ns", "q", "abandon", [], {"k": "v"}, "reason", "description"),
    ],
    "receive_deferred": [
        ReceiveDeferred("ns", "q", [1, (3 << 48) | 7]),
        ReceiveDeferred("ns", "q", [], "receive-and-delete"),
    ],
    "cancel_scheduled": [SequenceNumbers("ns", "q", [5, 6])],
    "load_adopt": [
        LoadAdopt("ns", "q", "load-1", [StagedFile(0, "/s/p00/t00000-000.sbb")]),
        LoadAdopt("ns", "q", "load-2", []),
    ],
    "load_status": [LoadRef("ns", "q", "load-1")],
    "purge": [EntityPath("ns", "q"), EntityPath("ns", "q/$deadletterqueue")],
    "dlq_resubmit": [Resubmit("ns", "q"), Resubmit("ns", "q", 10, "other")],
    "delete_messages": [
        DeleteMessages("ns", "q", 10),
        DeleteMessages("ns", "q", 5000, 1_700_000_000_000, "s-1"),
    ],
    "session_accept": [SessionAccept("ns", "q"), SessionAccept("ns", "q", "s-1")],
    "session_renew": [SessionToken("ns", "q", "8c2e0f3a-0000-4000-8000-000000000001")],
    "session_close": [SessionToken("ns", "q", "8c2e0f3a-0000-4000-8000-000000000001")],
    "session_list": [EntityPath("ns", "q")],
    "transact": [
        Transact("ns", "q", [Message(b"x", partition_key="k")]),
        Transact("ns", "q", [], [TxSettle("complete", "00000000-0000-0001-0000-000000000002")]),
    ],
    "session_get_state": [SessionRef("ns", "q", "s-1")],
    "session_set_state": [
        SessionState("ns", "q", "s-1", b"\x00state"),
        SessionState("ns", "q", "s-1"),
    ],
    "fault_add": [
        FaultAdd("ns"),
        FaultAdd("ns", "q", [0, 15], "slow", 250),
    ],
    "fault_list": [FaultList(), FaultList("ns")],
    "clock_show": [NamespaceRef("ns")],
    "clock_advance": [ClockAdvance("ns", 3_600_000)],
    "clock_set": [ClockSet("ns", 1_893_456_000_000)],
    "fault_clear": [
        FaultClear("ns"),
        FaultClear(ids=["f1", "f2"]),
        FaultClear(all_namespaces=True),
    ],
}


def test_every_op_has_samples() -> None:
    assert set(SAMPLES) == set(OPS)


@pytest.mark.parametrize(
    ("op", "args"), [(op, a) for op, samples in SAMPLES.items() for a in samples]
)
def test_valid_requests_round_trip(op: str, args: msgspec.Struct) -> None:
    req_id, got_op, decoded = decode_request(frame_body(12345, op, args))
    assert (req_id, got_op) == (12345, op)
    assert isinstance(decoded, OPS[op])
    assert same_args(op, decoded, args)


def test_defaults_fill_missing_optional_fields() -> None:
    _, _, args = decode_request(body([1, 7, "receive", {"namespace": "n", "entity": "q"}]))
    assert args == Receive("n", "q", 1, 0, "peek-lock")
    _, _, args = decode_request(body([1, 8, "ping"]))  # args omitted altogether
    assert args == EmptyArgs()


@given(
    req_id=st.integers(min_value=-(2**63), max_value=2**64 - 1),
    count=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    start=st.one_of(st.none(), st.integers(min_value=0, max_value=2**64 - 1)),
    name=st.text(max_size=30),
)
def test_peek_round_trip(req_id: int, count: int, start: int | None, name: str) -> None:
    args = Peek(name, name + "/x", count, start)
    assert decode_request(frame_body(req_id, "peek", args)) == (req_id, "peek", args)


@given(
    tokens=st.lists(st.text(max_size=40), max_size=5),
    props=st.one_of(
        st.none(),
        st.dictionaries(
            st.text(max_size=10),
            st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), st.text()),
        ),
    ),
)
def test_settle_round_trip(tokens: list[str], props: dict[str, Any] | None) -> None:
    args = Settle("ns", "q", "abandon", tokens, props)
    assert decode_request(frame_body(1, "settle", args)) == (1, "settle", args)


# --------------------------------------------------------------------- hostile input


def decodes_or_refuses(data: bytes) -> None:
    try:
        req_id, op, args = decode_request(data)
    except BadRequest as exc:
        assert str(exc)
        return
    assert isinstance(req_id, int)
    assert isinstance(args, OPS[op])


@settings(max_examples=500)
@given(data=st.binary(max_size=200))
def test_random_bytes_never_escape_as_other_exceptions(data: bytes) -> None:
    decodes_or_refuses(data)


@given(data=st.binary(max_size=100))
def test_random_bytes_are_refused(data: bytes) -> None:
    # A random byte string is not a request: at best it is valid MessagePack of another shape.
    if data[:1] in (b"\x93", b"\x94"):
        return  # could start a real 3- or 4-element request; covered above
    with pytest.raises(BadRequest):
        decode_request(data)


msgpack_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**64 - 1),
        st.floats(),
        st.text(max_size=10),
        st.binary(max_size=10),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=12), children, max_size=4),
    ),
    max_leaves=12,
)
field_names = st.sampled_from(
    [
        "namespace",
        "name",
        "entity",
        "options",
        "count",
        "from_sequence",
        "max_wait_ms",
        "mode",
        "op",
        "lock_tokens",
        "properties",
        "messages",
        "sku",
        "bogus",
    ]
)


@settings(max_examples=250)
@given(
    v=st.one_of(st.just(PROTOCOL_VERSION), msgpack_values),
    req_id=st.one_of(st.integers(min_value=0, max_value=2**64 - 1), msgpack_values),
    op=st.one_of(st.sampled_from(sorted(OPS)), msgpack_values),
    args=st.one_of(st.dictionaries(field_names, msgpack_values, max_size=6), msgpack_values),
    extra=st.lists(msgpack_values, max_size=2),
)
def test_structured_garbage_is_refused_cleanly(
    v: Any, req_id: Any, op: Any, args: Any, extra: list[Any]
) -> None:
    decodes_or_refuses(body([v, req_id, op, args, *extra]))


def test_unknown_op() -> None:
    with pytest.raises(BadRequest, match="unknown operation 'drop_everything'"):
        decode_request(body([1, 1, "drop_everything", {}]))


@pytest.mark.parametrize("version", [0, 2, 255])
def test_wrong_version(version: int) -> None:
    with pytest.raises(BadRequest, match=f"protocol version {version} is not supported"):
        decode_request(body([version, 1, "ping", {}]))


@pytest.mark.parametrize(
    ("frame", "fragments"),
    [
        ([1, 1, "queue_get", {"namespace": "n", "name": 5}], ["queue_get", "`str`", "$.name"]),
        ([1, 1, "peek", {"namespace": "n", "entity": "q", "count": "3"}], ["`int`", "$.count"]),
        (
            [1, 1, "settle", {"namespace": "n", "entity": "q", "op": "complete", "lock_tokens": 5}],
            ["settle", "`array`", "$.lock_tokens"],
        ),
        ([1, 1, "queue_create", {"namespace": "n", "name": "q", "options": [1]}], ["$.options"]),
        ([1, 1, "queue_get", {"namespace": "n"}], ["missing required field `name`"]),
        ([1, 1, "queue_get", {"namespace": "n", "name": "q", "bogus": 1}], ["unknown field"]),
        ([1, 1, "ping", {"extra": True}], ["ping", "unknown field `extra`"]),
        ([1, 1, "queue_get", ["n", "q"]], ["queue_get", "`object`"]),
        ([1, 1, "send", {"namespace": "n", "entity": "q", "messages": 1}], ["$.messages"]),
    ],
)
def test_bad_arguments_name_the_op_and_field(frame: list[Any], fragments: list[str]) -> None:
    with pytest.raises(BadRequest) as info:
        decode_request(body(frame))
    message = str(info.value)
    assert message.startswith(f"bad arguments for {frame[2]}: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1",
        body({"v": 1, "id": 1, "op": "ping"}),
        body([1, 1]),
        body([1, 1, "ping", {}, "extra"]),
        body(["1", 1, "ping", {}]),
        body([1, "one", "ping", {}]),
        body([1, 1, 7, {}]),
        body([1, 1, None, {}]),
        body([1, 1, "ping", {}]) + b"\x00",
        body([1.0, 1, "ping", {}]),
    ],
)
def test_malformed_frames(data: bytes) -> None:
    with pytest.raises(BadRequest, match="malformed request frame"):
        decode_request(data)


@pytest.mark.parametrize("where", ["args", "options"])
def test_deeply_nested_input_is_a_bad_request(where: str) -> None:
    nested = b"\x91" * 5000 + b"\x01"  # [[[[...1...]]]], 5000 deep, 5 KB
    if where == "args":
        data = b"\x94\x01\x01\xa4ping" + nested
    else:
        data = (
            b"\x94\x01\x01\xacqueue_create\x83\xa9namespace\xa1n\xa4name\xa1q\xa7options\x81\xa1x"
            + nested
        )
    with pytest.raises(BadRequest):
        decode_request(data)


def test_bad_arguments_keep_the_request_id() -> None:
    """The envelope is read first, so the server can answer a bad request by its id."""
    req = decode_envelope(body([1, 42, "queue_get", {"namespace": "n"}]))
    assert req.id == 42
    with pytest.raises(BadRequest, match="queue_get"):
        decode_args(req)


# --------------------------------------------------------------------- replies


@pytest.mark.parametrize(
    "result",
    [None, {"deleted": "q"}, [1, 2, 3], {"code": "BadRequest", "message": "no"}],
)
def test_replies_round_trip(result: Any) -> None:
    frame = encode_reply(99, result is not None, result)
    (length,) = LENGTH.unpack_from(frame)
    reply = decode_reply(frame[LENGTH.size : LENGTH.size + length])
    assert (reply.id, reply.ok) == (99, result is not None)
    assert decode_result(reply.result) == result


def test_delivered_round_trips_with_its_raw_payload() -> None:
    payload = encode(Message(b"body", "mid"))
    d = Delivered((2 << 48) | 5, 1, 1, "tok", 10, 20, 2, 1, payload, {"DeadLetterReason": "r"})
    frame = encode_reply(1, True, [d])
    reply = decode_reply(frame[LENGTH.size :])
    (back,) = decode_result(reply.result, list[Delivered])
    assert back.sequence_number == (2 << 48) | 5
    assert decode_message(back.payload) == Message(b"body", "mid")
    assert back.changes == {"DeadLetterReason": "r"}


def test_frame_length_prefix() -> None:
    frame = encode_frame({"a": b"x" * 300})
    (length,) = LENGTH.unpack_from(frame)
    assert length == len(frame) - 4
    assert msgspec.msgpack.decode(frame[4:]) == {"a": b"x" * 300}


@given(
    st.lists(
        st.one_of(
            st.binary(max_size=70_000).map(Message),
            st.builds(Message, st.binary(max_size=300), st.text(min_size=1, max_size=20)),
            st.binary(max_size=300).map(lambda b: encode(Message(b))),  # encoded already
        ),
        min_size=1,
        max_size=40,
    )
)
@settings(max_examples=60, deadline=None)
def test_a_sends_messages_travel_as_their_amqp_forms(messages: list[Message | bytes]) -> None:
    """Written straight into the frame (a body alone never copied into a message of its
    own first), each arrives as exactly its AMQP form, whatever the count or sizes."""
    frame = encode_request(3, "send", Send("ns", "q", messages))
    assert LENGTH.unpack_from(frame)[0] == len(frame) - LENGTH.size
    _, op, args = decode_request(bytes(frame[LENGTH.size :]))
    assert op == "send"
    assert args.messages == [encode(m) if isinstance(m, Message) else m for m in messages]


def test_a_send_of_many_messages_keeps_its_count() -> None:
    messages = [Message(bytes([i % 256])) for i in range(70_000)]  # a 32-bit array length
    frame = encode_request(4, "send", Send("ns", "q", messages))
    _, _, args = decode_request(bytes(frame[LENGTH.size :]))
    assert len(args.messages) == 70_000 and args.messages[-1] == encode(messages[-1])
