"""The AMQP form of a message with text fields only is written without the generic codec
(sbctl.core.message_plain.plain_head): byte for byte what the generic encoder writes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sbctl.core import message_form, message_plain, message_write
from sbctl.core.amqp import codec
from sbctl.core.errors import BadRequest
from sbctl.core.records import Message

# Lengths around the one-byte/four-byte size boundaries count most.
texts = st.one_of(
    st.none(),
    st.text(max_size=8),
    st.text(min_size=250, max_size=260),
    st.text(alphabet="é", min_size=126, max_size=130),  # 2 bytes a character
)
symbols = st.one_of(st.none(), st.text(alphabet="abc/+-;= ", max_size=300), st.just("é/x"))
bodies = st.one_of(st.binary(max_size=8), st.binary(min_size=254, max_size=258))


@st.composite
def messages(draw: st.DrawFn) -> Message:
    fields = {
        name: draw(texts)
        for name in (
            "message_id",
            "session_id",
            "partition_key",
            "correlation_id",
            "subject",
            "to",
            "reply_to",
            "reply_to_session_id",
        )
    }
    extra = draw(
        st.sampled_from(
            [
                {},
                {},
                {"time_to_live_ms": 5000},
                {"scheduled_enqueue_time_ms": 1_700_000_000_000},
                {"application_properties": {"a": 1}},
                {"message_annotations": {"x-opt-k": "v"}},
                {"body_kind": "value", "body_amqp": b"\xa1"},
            ]
        )
    )
    return Message(draw(bodies), content_type=draw(symbols), **fields, **extra)


@given(messages())
def test_plain_messages_encode_as_the_generic_encoder_does(m: Message) -> None:
    head = message_plain.plain_head(m)
    try:
        generic = message_write.encode_general(m, None, None)
    except UnicodeEncodeError:  # a content type that is no symbol: the generic error stands
        assert head is None
        return
    if head is not None:
        assert head + m.body == generic
    assert message_form.encode(m) == generic
    assert message_form.decode(message_form.encode(m)) == message_form.decode(generic)


def test_only_text_fields_take_the_short_way() -> None:
    m = Message(b"x", message_id="m", partition_key="k", content_type="text/plain", to="t")
    assert message_plain.plain_head(m) is not None
    buf = message_form.encode(m)
    assert message_plain.plain_message(buf, 0, len(buf)) == m
    assert message_plain.plain_head(Message(b"x", message_id="m", time_to_live_ms=1)) is None
    assert message_plain.plain_head(Message(b"x", application_properties={"a": 1})) is None


def _generic(buf: bytes, delivered: bool = False) -> Message | Exception:
    try:
        return message_form._message(buf, message_form._read(buf, 0, len(buf), delivered))
    except Exception as exc:  # what the generic reader refuses
        return exc


@given(messages(), st.booleans())
def test_a_delivered_message_reads_as_the_generic_reader_reads_it(
    m: Message, give_id: bool
) -> None:
    """A client reads what it receives (the stored form) with decode(): the plain reader
    first, field for field what the generic reader of a delivered message gives."""
    try:
        sent = message_form.intake(message_form.encode(m), give_id=give_id)
    except (UnicodeEncodeError, BadRequest, codec.DecodeError):
        return
    assert message_form.decode(sent.payload) == _generic(sent.payload, True) == sent.message


@given(messages())
def test_plain_messages_read_as_the_generic_reader_reads_them(m: Message) -> None:
    try:
        buf = message_form.encode(m)
    except UnicodeEncodeError:
        return
    plain = message_plain.plain_message(buf, 0, len(buf))
    if message_plain.plain_head(m) is not None:
        assert plain in (None, m)  # (None: left to the generic reader, e.g. a long key)
    if plain is not None:
        assert plain == _generic(buf)


@given(messages(), st.data())
def test_a_damaged_plain_message_is_read_as_the_generic_reader_reads_it_or_left_to_it(
    m: Message, data: st.DataObject
) -> None:
    try:
        buf = bytearray(message_form.encode(m))
    except UnicodeEncodeError:
        return
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, 2))
    raw = bytes(buf[: len(buf) - cut])
    plain = message_plain.plain_message(raw, 0, len(raw))
    if plain is not None:
        assert plain == _generic(raw) == _generic(raw, True) == message_form.decode(raw)
    sent = message_form.intake(raw) if plain is not None else None
    assert sent is None or sent.message == plain
