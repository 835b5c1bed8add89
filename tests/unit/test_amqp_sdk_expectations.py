"""What the JavaScript, Java and .NET Service Bus SDKs expect of the broker beyond the wire
format, checked on the AMQP front-end's own conversion and error mapping (the end-to-end
proof is tests/integration/test_amqp_sdk_js.py and test_amqp_sdk_java.py)."""

from __future__ import annotations

import re
import uuid

from sbctl.core.amqp import codec
from sbctl.core.amqp import types as t
from sbctl.core.delivered import Delivered
from sbctl.core.errors import MessageNotFound, MessagingEntityNotFound
from sbctl.core.message_form import encode as encode_stored
from sbctl.core.message_form import intake_transfer
from sbctl.core.records import Message as Stored
from sbctl.core.splice import splice
from sbctld.frontends.amqp.errors import condition_of
from sbctld.frontends.amqp.settlement import lock_tag

# The pattern @azure/core-amqp (errors.ts), azure-core-amqp (ExceptionUtil) and
# Azure.Messaging.ServiceBus use to tell a missing entity from other amqp:not-found errors.
SDK_ENTITY_NOT_FOUND = re.compile(r"The messaging entity .* could not be found.*", re.I)


def test_a_missing_entity_is_described_in_the_words_the_sdks_match() -> None:
    err = MessagingEntityNotFound("queue 'orders' does not exist in namespace 'ns'")
    condition, text = condition_of(err)
    assert condition == "amqp:not-found"
    assert SDK_ENTITY_NOT_FOUND.search(text)
    assert text.startswith("The messaging entity 'orders' could not be found")
    assert text.endswith("queue 'orders' does not exist in namespace 'ns'")
    # without a quoted name the wording still matches
    assert SDK_ENTITY_NOT_FOUND.search(condition_of(MessagingEntityNotFound("gone"))[1])


def test_other_not_found_errors_keep_their_own_words() -> None:
    condition, text = condition_of(MessageNotFound("no message with sequence number 7"))
    assert condition == "com.microsoft:message-not-found"
    assert not SDK_ENTITY_NOT_FOUND.search(text)


def test_a_message_sent_without_a_message_id_gets_one_and_a_given_one_is_kept() -> None:
    # @azure/service-bus keys message-lock renewal by message id and cannot settle a
    # received message without one; Service Bus gives every message an id.
    bare = codec.encode_message(codec.Message(body=[b"x"]))

    def to_stored(raw: bytes) -> Stored:
        return intake_transfer(raw, 0)[0].message

    first, second = to_stored(bare), to_stored(bare)
    assert first.message_id and re.fullmatch(r"[0-9a-f]{32}", first.message_id)
    assert first.message_id != second.message_id
    assert uuid.UUID(first.message_id).version == 4  # a random UUID, as Service Bus gives
    assert len({to_stored(bare).message_id for _ in range(1000)}) == 1000
    given = codec.encode_message(
        codec.Message(properties=t.Properties("mine", None, None, "s"), body=[b"x"])
    )
    assert to_stored(given).message_id == "mine"


def _delivered(stored: Stored, seq: int) -> Delivered:
    return Delivered(seq, 1_700_000_000_000, 1, None, None, 2**62, None, 1, encode_stored(stored))


def _message_id(d: Delivered) -> object:
    props = codec.decode_message(splice(d, received=True, lock=False)).properties
    assert props is not None
    return props.message_id


def test_a_stored_message_without_an_id_is_delivered_with_a_stable_one() -> None:
    # e.g. sent with `sbctl send` and no --message-id, then received by @azure/service-bus
    bare = Stored(body=b"x")
    ids = {_message_id(_delivered(bare, 5)) for _ in range(3)}
    (only,) = ids
    assert isinstance(only, str) and re.fullmatch(r"[0-9a-f]{32}", only)
    assert _message_id(_delivered(bare, 6)) != only
    assert _message_id(_delivered(Stored(body=b"x", message_id="mine"), 5)) == "mine"


def test_a_lock_token_travels_as_its_uuid_in_dotnet_byte_order() -> None:
    for _ in range(200):
        token = uuid.uuid4()
        assert lock_tag(str(token)) == token.bytes_le
        assert lock_tag(str(token).upper()) == token.bytes_le
