"""What the JavaScript, Java and .NET Service Bus SDKs expect of the broker beyond the wire
format, checked on the AMQP front-end's own conversion and error mapping (the end-to-end
proof is tests/integration/test_amqp_sdk_js.py and test_amqp_sdk_java.py)."""

from __future__ import annotations

import re

from sbctl.errors import MessageNotFound, MessagingEntityNotFound
from sbctld.frontends.amqp.errors import condition_of

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
