"""sbctl's errors as the AMQP error conditions the Service Bus SDKs map to their
exceptions (daemon/README.md §29)."""

from __future__ import annotations

import re

from sbctl.errors import (
    BadRequest,
    InvalidOperation,
    MessageLockLost,
    MessageNotFound,
    MessageSizeExceeded,
    MessagingEntityAlreadyExists,
    MessagingEntityDisabled,
    MessagingEntityNotFound,
    QuotaExceeded,
    SbctlError,
    ServerBusy,
    ServiceTimeout,
    SessionCannotBeLocked,
    SessionLockLost,
)

CONDITIONS: list[tuple[type[SbctlError], str, int]] = [
    (MessagingEntityNotFound, "amqp:not-found", 404),
    (MessagingEntityAlreadyExists, "com.microsoft:entity-already-exists", 409),
    (MessagingEntityDisabled, "com.microsoft:entity-disabled", 400),
    (MessageSizeExceeded, "amqp:link:message-size-exceeded", 413),
    (QuotaExceeded, "amqp:resource-limit-exceeded", 403),
    (MessageLockLost, "com.microsoft:message-lock-lost", 410),
    (MessageNotFound, "com.microsoft:message-not-found", 404),
    (SessionLockLost, "com.microsoft:session-lock-lost", 410),
    (SessionCannotBeLocked, "com.microsoft:session-cannot-be-locked", 410),
    (ServerBusy, "com.microsoft:server-busy", 503),
    (ServiceTimeout, "com.microsoft:timeout", 408),
    (BadRequest, "com.microsoft:argument-error", 400),
    (InvalidOperation, "amqp:not-allowed", 400),
]


def condition_of(err: SbctlError) -> tuple[str, str]:
    """(condition, description) for an error; throttling keeps Azure's 50009 text."""
    for cls, condition, _status in CONDITIONS:
        if isinstance(err, cls):
            text = err.message
            if isinstance(err, ServerBusy) and "50009" not in text:
                text = f"{text} (error code 50009)"
            if isinstance(err, MessagingEntityNotFound):
                # The JavaScript, Java and .NET SDKs tell a missing entity from other
                # amqp:not-found errors only by Azure's wording of the description.
                quoted = re.search(r"'[^']*'", text)
                name = quoted.group(0) if quoted else "named in the request"
                text = f"The messaging entity {name} could not be found: {text}"
            return condition, text
    return "amqp:internal-error", err.message


def status_of(err: SbctlError) -> int:
    for cls, _condition, status in CONDITIONS:
        if isinstance(err, cls):
            return status
    return 500
