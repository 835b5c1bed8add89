"""Each side's form of an error: the CLI's exit statuses and the Unix protocol's map.

The statuses are the CLI's interface (scripts branch on them) and the map's bytes are the
Unix protocol's: both are pinned here, value by value, for every error of the catalogue.
"""

from __future__ import annotations

import msgspec
import pytest

from sbctl.cli.exit_codes import BY_CODE, ExitStatus, exit_status
from sbctl.core import errors
from sbctl.core.wire_errors import error_from_wire, error_to_wire
from sbctld.credits import CreditQuotaExceeded
from sbctld.ownership import DataDirBusy, SocketBusy
from sbctld.storage.space import StorageError

STATUSES: dict[type[errors.SbctlError], int] = {
    errors.SbctlError: 1,
    errors.GeneralError: 1,
    errors.InvalidOperation: 5,
    errors.BadRequest: 5,
    errors.MessagingEntityNotFound: 3,
    errors.MessagingEntityAlreadyExists: 4,
    errors.MessagingEntityDisabled: 10,
    errors.MessageSizeExceeded: 6,
    errors.QuotaExceeded: 6,
    errors.MessageLockLost: 7,
    errors.MessageNotFound: 7,
    errors.SessionLockLost: 7,
    errors.SessionCannotBeLocked: 7,
    errors.ServerBusy: 8,
    errors.ServiceTimeout: 11,
    errors.ServiceCommunicationProblem: 9,
    # defined outside the catalogue: they exit as their nearest listed base
    StorageError: 6,
    CreditQuotaExceeded: 6,
    DataDirBusy: 1,
    SocketBusy: 1,
}


@pytest.mark.parametrize(
    ("cls", "status"), STATUSES.items(), ids=lambda v: getattr(v, "__name__", str(v))
)
def test_every_error_exits_with_its_status(cls: type[errors.SbctlError], status: int) -> None:
    assert exit_status(cls) == status
    assert exit_status(cls("x")) == status


def test_every_catalogue_code_has_a_status() -> None:
    assert set(errors.CATALOGUE) <= set(BY_CODE)
    assert ExitStatus.USAGE == 2 and ExitStatus.INTERRUPTED == 130


def test_an_error_of_an_unlisted_code_exits_1() -> None:
    class Odd(errors.SbctlError):
        code = "SomethingElse"

    assert exit_status(Odd("x")) == ExitStatus.ERROR


def test_the_wire_map_bytes() -> None:
    busy = errors.ServerBusy("slow down", retry_after=2.0)
    assert msgspec.msgpack.encode(error_to_wire(busy)) == (
        b"\x84\xa4code\xaaServerBusy\xa7message\xa9slow down"
        b"\xacerror_number\xcd\xc3Y\xabretry_after\xcb@\x00\x00\x00\x00\x00\x00\x00"
    )
    plain = errors.MessageLockLost("gone")
    assert msgspec.msgpack.encode(error_to_wire(plain)) == (
        b"\x82\xa4code\xafMessageLockLost\xa7message\xa4gone"
    )


@pytest.mark.parametrize("cls", list(errors.CATALOGUE.values()), ids=lambda c: c.__name__)
def test_every_catalogue_error_reads_back_as_itself(cls: type[errors.SbctlError]) -> None:
    back = error_from_wire(error_to_wire(cls("what went wrong", retry_after=1.5)))
    assert type(back) is cls
    assert (back.message, back.retry_after) == ("what went wrong", 1.5)


def test_an_unknown_code_reads_back_as_a_general_error() -> None:
    back = error_from_wire({"code": "NoSuchCode", "message": "m"})
    assert type(back) is errors.GeneralError and back.message == "m"
    assert error_from_wire({}).message == "unknown error"
    # a daemon-side error outside the catalogue travels as its base's code
    assert type(error_from_wire(error_to_wire(StorageError("disk full")))) is errors.QuotaExceeded


def test_every_error_table_is_keyed_on_real_codes_and_falls_back_to_the_base() -> None:
    """The exit statuses, HTTP statuses and AMQP conditions are looked up by code
    (sbctl.core.errors.by_code): a misspelt code would silently fall to the default."""
    from sbctl.cli.exit_codes import BY_CODE
    from sbctl.core.errors import CATALOGUE, BadRequest, InvalidOperation, by_code
    from sbctld.frontends.amqp.errors import CONDITIONS
    from sbctld.frontends.statuses import STATUSES
    from sbctld.ownership import DataDirBusy, SocketBusy

    codes = set(CATALOGUE) | {DataDirBusy.code, SocketBusy.code}
    for table in (BY_CODE, STATUSES, CONDITIONS):
        assert set(table) <= codes, set(table) - codes

    class Refused(BadRequest):  # a subclass without a code of its own
        pass

    assert by_code(Refused("x"), {"InvalidOperation": 1, "BadRequest": 2}, 0) == 2
    assert by_code(Refused, {"InvalidOperation": 1}, 0) == 1
    assert by_code(InvalidOperation("x"), {"BadRequest": 2}, 0) == 0
