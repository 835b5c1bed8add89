"""An error as data: the form the Unix protocol sends.

An :class:`~sbctl.core.errors.SbctlError` travels as a map ``{"code", "message"}`` plus
``"error_number"`` (when the error has an Azure error number) and ``"retry_after"`` (seconds,
when the error names one). The Unix front-end answers a failed request with it and shows a
lock token's failed settlement (``sbctld.results.SettleFailed``, which holds the error
itself) as ``{"lock_token", "error"}`` with it; the client raises it back; the bench's
worker processes report through it. Rules this module keeps:

- the map's keys and their order are wire bytes: never rename or reorder them;
- an unknown code reads back as ``GeneralError`` with the message unchanged;
- the AMQP and HTTP front-ends map errors to their own protocols' forms themselves; this is
  not their wire form.
"""

from __future__ import annotations

from typing import Any

from sbctl.core.errors import CATALOGUE, GeneralError, SbctlError


def error_to_wire(err: SbctlError) -> dict[str, Any]:
    """``err`` as the map the Unix protocol sends."""
    out: dict[str, Any] = {"code": err.code, "message": err.message}
    if err.error_number is not None:
        out["error_number"] = err.error_number
    if err.retry_after is not None:
        out["retry_after"] = err.retry_after
    return out


def error_from_wire(data: dict[str, Any]) -> SbctlError:
    """The catalogue's error for a map made by :func:`error_to_wire`."""
    cls = CATALOGUE.get(str(data.get("code")), GeneralError)
    message = str(data.get("message", "unknown error"))
    retry_after = data.get("retry_after")
    return cls(message, retry_after=float(retry_after) if retry_after is not None else None)
