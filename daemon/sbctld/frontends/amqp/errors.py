"""sbctl's errors as the AMQP error conditions the Service Bus SDKs map to their
exceptions (daemon/README.md §29). The status code a ``$management`` answer carries is
sbctld.frontends.statuses' (the HTTP front-end answers the same)."""

from __future__ import annotations

import re

from sbctl.core.errors import MessagingEntityNotFound, SbctlError, ServerBusy, by_code
from sbctld.frontends.statuses import status_of

__all__ = ["CONDITIONS", "condition_of", "status_of"]

CONDITIONS: dict[str, str] = {
    "MessagingEntityNotFound": "amqp:not-found",
    "MessagingEntityAlreadyExists": "com.microsoft:entity-already-exists",
    "MessagingEntityDisabled": "com.microsoft:entity-disabled",
    "MessageSizeExceeded": "amqp:link:message-size-exceeded",
    "QuotaExceeded": "amqp:resource-limit-exceeded",
    "MessageLockLost": "com.microsoft:message-lock-lost",
    "MessageNotFound": "com.microsoft:message-not-found",
    "SessionLockLost": "com.microsoft:session-lock-lost",
    "SessionCannotBeLocked": "com.microsoft:session-cannot-be-locked",
    "ServerBusy": "com.microsoft:server-busy",
    "ServiceTimeout": "com.microsoft:timeout",
    "BadRequest": "com.microsoft:argument-error",
    "InvalidOperation": "amqp:not-allowed",
}


def condition_of(err: SbctlError) -> tuple[str, str]:
    """(condition, description) for an error; throttling keeps Azure's 50009 text."""
    condition = by_code(err, CONDITIONS, "amqp:internal-error")
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
