"""The HTTP status code of each of sbctl's errors: what the HTTP front-end answers and what
an AMQP ``$management`` response's ``statusCode`` carries (daemon/README.md §29, §30).

Rules kept here: :data:`STATUSES` is keyed on the error's code; an error whose code is not
listed takes its nearest base class's entry (sbctl.core.errors.by_code), and one with none is 500.
"""

from __future__ import annotations

from sbctl.core.errors import SbctlError, by_code

STATUSES: dict[str, int] = {
    "MessagingEntityNotFound": 404,
    "MessagingEntityAlreadyExists": 409,
    "MessagingEntityDisabled": 400,
    "MessageSizeExceeded": 413,
    "QuotaExceeded": 403,
    "MessageLockLost": 410,
    "MessageNotFound": 404,
    "SessionLockLost": 410,
    "SessionCannotBeLocked": 410,
    "ServerBusy": 503,
    "ServiceTimeout": 408,
    "BadRequest": 400,
    "InvalidOperation": 400,
}


def status_of(err: SbctlError) -> int:
    return by_code(err, STATUSES, 500)
