"""The CLI's exit statuses: which error ends ``sbctl`` with which status.

Only the CLI turns errors into exit statuses (as httpie keeps its ``ExitStatus`` in its CLI);
the error catalogue (:mod:`sbctl.core.errors`) knows nothing of them. Rules this module keeps:

- the table is keyed on an error's ``code``; an error class whose code is not in it exits as
  the nearest base class whose code is (so ``BadRequest`` exits as ``InvalidOperation``);
- statuses are part of the CLI's interface: scripts branch on them, so a status never changes
  its meaning.

The table::

    code                          status
    GeneralError                  1     (and any error without a status of its own)
    UsageError                    2     (a bad command line, as click exits)
    MessagingEntityNotFound       3
    MessagingEntityAlreadyExists  4
    InvalidOperation, BadRequest  5
    MessageSizeExceeded           6
    QuotaExceeded                 6
    MessageLockLost               7
    MessageNotFound               7
    SessionLockLost               7
    SessionCannotBeLocked         7
    ServerBusy                    8
    ServiceCommunicationProblem   9
    MessagingEntityDisabled       10
    ServiceTimeout                11
    DataDirBusy, SocketBusy       1     (another daemon holds the data dir or the socket)
    (Ctrl-C)                      130
"""

from __future__ import annotations

from enum import IntEnum

from sbctl.core.errors import SbctlError, by_code


class ExitStatus(IntEnum):
    """Every status ``sbctl`` exits with."""

    SUCCESS = 0
    ERROR = 1
    USAGE = 2  # click's own status for a bad command line
    NOT_FOUND = 3
    ALREADY_EXISTS = 4
    INVALID_OPERATION = 5
    QUOTA = 6
    LOCK_LOST = 7
    BUSY = 8
    UNREACHABLE = 9
    DISABLED = 10
    TIMEOUT = 11
    INTERRUPTED = 130


BY_CODE: dict[str, ExitStatus] = {
    "GeneralError": ExitStatus.ERROR,
    "InvalidOperation": ExitStatus.INVALID_OPERATION,
    "BadRequest": ExitStatus.INVALID_OPERATION,
    "MessagingEntityNotFound": ExitStatus.NOT_FOUND,
    "MessagingEntityAlreadyExists": ExitStatus.ALREADY_EXISTS,
    "MessagingEntityDisabled": ExitStatus.DISABLED,
    "MessageSizeExceeded": ExitStatus.QUOTA,
    "QuotaExceeded": ExitStatus.QUOTA,
    "MessageLockLost": ExitStatus.LOCK_LOST,
    "MessageNotFound": ExitStatus.LOCK_LOST,
    "SessionLockLost": ExitStatus.LOCK_LOST,
    "SessionCannotBeLocked": ExitStatus.LOCK_LOST,
    "ServerBusy": ExitStatus.BUSY,
    "ServiceTimeout": ExitStatus.TIMEOUT,
    "ServiceCommunicationProblem": ExitStatus.UNREACHABLE,
    "DataDirBusy": ExitStatus.ERROR,
    "SocketBusy": ExitStatus.ERROR,
}


def exit_status(error: SbctlError | type[SbctlError]) -> ExitStatus:
    """The status ``sbctl`` exits with for ``error`` (an instance or a class)."""
    return by_code(error, BY_CODE, ExitStatus.ERROR)
