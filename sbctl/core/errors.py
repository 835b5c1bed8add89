"""The one error catalogue shared by the daemon, the client and the CLI.

Every failure a user can see is an :class:`SbctlError` with a stable ``code`` that mirrors
Azure Service Bus's failure reasons (daemon/README.md §16.1, §16.3), a one-line human ``message``,
whether it is ``transient`` (daemon/README.md §16.2: only busy, timeout and communication problems
are
retried) and, where it applies, ``retry_after`` in seconds.

The tree::

    SbctlError                              code / Azure error number
    ├── GeneralError                        GeneralError
    ├── InvalidOperation                    InvalidOperation
    │   └── BadRequest                      BadRequest
    ├── MessagingEntityNotFound             MessagingEntityNotFound
    ├── MessagingEntityAlreadyExists        MessagingEntityAlreadyExists
    ├── MessagingEntityDisabled             MessagingEntityDisabled
    ├── MessageSizeExceeded                 MessageSizeExceeded
    ├── QuotaExceeded                       QuotaExceeded
    ├── MessageLockLost                     MessageLockLost
    ├── MessageNotFound                     MessageNotFound
    ├── SessionLockLost                     SessionLockLost
    ├── SessionCannotBeLocked               SessionCannotBeLocked
    ├── ServerBusy          (transient)     ServerBusy / 50009
    ├── ServiceTimeout      (transient)     ServiceTimeout
    └── ServiceCommunicationProblem (transient)
                                            ServiceCommunicationProblem

This module is the catalogue only. Each side maps errors to its own form: the CLI to exit
statuses (:mod:`sbctl.cli.exit_codes`), the Unix protocol to a map
(:mod:`sbctl.core.wire_errors`), the AMQP and HTTP front-ends to their protocols' conditions and
status codes. Nothing else should branch on codes except the client's retry policy, which
reads ``transient`` and ``retry_after`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, TypeVar

T = TypeVar("T")


class SbctlError(Exception):
    """Root of every sbctl error. ``str(err)`` is the one-line message."""

    code: ClassVar[str] = "GeneralError"
    transient: ClassVar[bool] = False
    error_number: ClassVar[int | None] = None  # Azure's error number, where it has one

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class GeneralError(SbctlError):
    code = "GeneralError"


class InvalidOperation(SbctlError):
    """The request is well formed but not allowed (AMQP ``amqp:not-allowed``)."""

    code = "InvalidOperation"


class BadRequest(InvalidOperation):
    """The request itself is malformed: bad names, values, frames (ARM 40000)."""

    code = "BadRequest"


class MessagingEntityNotFound(SbctlError):
    code = "MessagingEntityNotFound"


class MessagingEntityAlreadyExists(SbctlError):
    code = "MessagingEntityAlreadyExists"


class MessagingEntityDisabled(SbctlError):
    code = "MessagingEntityDisabled"


class MessageSizeExceeded(SbctlError):
    code = "MessageSizeExceeded"


class QuotaExceeded(SbctlError):
    code = "QuotaExceeded"


class MessageLockLost(SbctlError):
    code = "MessageLockLost"


class MessageNotFound(SbctlError):
    code = "MessageNotFound"


class SessionLockLost(SbctlError):
    code = "SessionLockLost"


class SessionCannotBeLocked(SbctlError):
    code = "SessionCannotBeLocked"


class ServerBusy(SbctlError):
    """Throttled (daemon/README.md §0.2.2): nothing of the request was applied; retry later."""

    code = "ServerBusy"
    transient = True
    error_number = 50009


class ServiceTimeout(SbctlError):
    code = "ServiceTimeout"
    transient = True


class ServiceCommunicationProblem(SbctlError):
    """The daemon (or a store behind it) cannot be reached."""

    code = "ServiceCommunicationProblem"
    transient = True


CATALOGUE: dict[str, type[SbctlError]] = {
    cls.code: cls
    for cls in (
        GeneralError,
        InvalidOperation,
        BadRequest,
        MessagingEntityNotFound,
        MessagingEntityAlreadyExists,
        MessagingEntityDisabled,
        MessageSizeExceeded,
        QuotaExceeded,
        MessageLockLost,
        MessageNotFound,
        SessionLockLost,
        SessionCannotBeLocked,
        ServerBusy,
        ServiceTimeout,
        ServiceCommunicationProblem,
    )
}


def by_code(error: SbctlError | type[SbctlError], table: Mapping[str, T], default: T) -> T:
    """``table``'s entry for ``error`` (an instance or a class): the entry of its ``code``, or
    of the nearest base class whose code has one (so ``BadRequest`` falls back to
    ``InvalidOperation``'s), else ``default``. How each front-end, and the CLI, map errors to
    their own forms: exit statuses, HTTP statuses, AMQP conditions."""
    cls = error if isinstance(error, type) else type(error)
    for klass in cls.__mro__:
        code = klass.__dict__.get("code")
        if isinstance(code, str) and code in table:
            return table[code]
    return default
