"""The HTTP status code of each of sbctl's errors: what the HTTP front-end answers and what
an AMQP ``$management`` response's ``statusCode`` carries (daemon/README.md §29, §30).

Rules kept here: the first class in :data:`STATUSES` an error is an instance of decides
(subclasses before their bases); an error of no listed class is 500.
"""

from __future__ import annotations

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

STATUSES: list[tuple[type[SbctlError], int]] = [
    (MessagingEntityNotFound, 404),
    (MessagingEntityAlreadyExists, 409),
    (MessagingEntityDisabled, 400),
    (MessageSizeExceeded, 413),
    (QuotaExceeded, 403),
    (MessageLockLost, 410),
    (MessageNotFound, 404),
    (SessionLockLost, 410),
    (SessionCannotBeLocked, 410),
    (ServerBusy, 503),
    (ServiceTimeout, 408),
    (BadRequest, 400),
    (InvalidOperation, 400),
]


def status_of(err: SbctlError) -> int:
    for cls, status in STATUSES:
        if isinstance(err, cls):
            return status
    return 500
