"""The one error catalogue shared by the daemon, the client and the CLI.

Every failure a user can see is an :class:`SbctlError` with a stable ``code`` that mirrors
Azure Service Bus's failure reasons (daemon/README.md §16.1, §16.3), a one-line human ``message``,
whether it is ``transient`` (daemon/README.md §16.2: only busy, timeout and communication problems
are
retried) and, where it applies, ``retry_after`` in seconds.

The tree::

    SbctlError                              code                         exit
    ├── GeneralError                        GeneralError                  1
    ├── InvalidOperation                    InvalidOperation              5
    │   └── BadRequest                      BadRequest                    5
    ├── MessagingEntityNotFound             MessagingEntityNotFound       3
    ├── MessagingEntityAlreadyExists        MessagingEntityAlreadyExists  4
    ├── MessagingEntityDisabled             MessagingEntityDisabled       10
    ├── MessageSizeExceeded                 MessageSizeExceeded           6
    ├── QuotaExceeded                       QuotaExceeded                 6
    ├── MessageLockLost                     MessageLockLost               7
    ├── MessageNotFound                     MessageNotFound               7
    ├── SessionLockLost                     SessionLockLost               7
    ├── SessionCannotBeLocked               SessionCannotBeLocked         7
    ├── ServerBusy          (transient)     ServerBusy / 50009            8
    ├── ServiceTimeout      (transient)     ServiceTimeout                11
    └── ServiceCommunicationProblem (transient)
                                            ServiceCommunicationProblem   9

Only the CLI turns codes into exit statuses (``exit_code``); nothing else should branch on
them except the client's retry policy, which reads ``transient`` and ``retry_after`` only.
"""

from __future__ import annotations

from typing import Any, ClassVar


class SbctlError(Exception):
    """Root of every sbctl error. ``str(err)`` is the one-line message."""

    code: ClassVar[str] = "GeneralError"
    transient: ClassVar[bool] = False
    exit_code: ClassVar[int] = 1
    error_number: ClassVar[int | None] = None  # Azure's error number, where it has one

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.error_number is not None:
            out["error_number"] = self.error_number
        if self.retry_after is not None:
            out["retry_after"] = self.retry_after
        return out

    @staticmethod
    def from_wire(data: dict[str, Any]) -> SbctlError:
        cls = CATALOGUE.get(str(data.get("code")), GeneralError)
        message = str(data.get("message", "unknown error"))
        retry_after = data.get("retry_after")
        return cls(message, retry_after=float(retry_after) if retry_after is not None else None)


class GeneralError(SbctlError):
    code = "GeneralError"


class InvalidOperation(SbctlError):
    """The request is well formed but not allowed (AMQP ``amqp:not-allowed``)."""

    code = "InvalidOperation"
    exit_code = 5


class BadRequest(InvalidOperation):
    """The request itself is malformed: bad names, values, frames (ARM 40000)."""

    code = "BadRequest"


class MessagingEntityNotFound(SbctlError):
    code = "MessagingEntityNotFound"
    exit_code = 3


class MessagingEntityAlreadyExists(SbctlError):
    code = "MessagingEntityAlreadyExists"
    exit_code = 4


class MessagingEntityDisabled(SbctlError):
    code = "MessagingEntityDisabled"
    exit_code = 10


class MessageSizeExceeded(SbctlError):
    code = "MessageSizeExceeded"
    exit_code = 6


class QuotaExceeded(SbctlError):
    code = "QuotaExceeded"
    exit_code = 6


class MessageLockLost(SbctlError):
    code = "MessageLockLost"
    exit_code = 7


class MessageNotFound(SbctlError):
    code = "MessageNotFound"
    exit_code = 7


class SessionLockLost(SbctlError):
    code = "SessionLockLost"
    exit_code = 7


class SessionCannotBeLocked(SbctlError):
    code = "SessionCannotBeLocked"
    exit_code = 7


class ServerBusy(SbctlError):
    """Throttled (daemon/README.md §0.2.2): nothing of the request was applied; retry later."""

    code = "ServerBusy"
    transient = True
    exit_code = 8
    error_number = 50009


class ServiceTimeout(SbctlError):
    code = "ServiceTimeout"
    transient = True
    exit_code = 11


class ServiceCommunicationProblem(SbctlError):
    """The daemon (or a store behind it) cannot be reached."""

    code = "ServiceCommunicationProblem"
    transient = True
    exit_code = 9


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

EXIT_USAGE = 2  # click's own status for a bad command line
