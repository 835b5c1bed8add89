"""``/$sbctl/clock``: time travel over HTTP for test suites in any language
(daemon/README.md §31.5, beyond Azure).

``GET`` answers the namespace's time; ``POST`` with a JSON body ``{"advance": "1h"}`` or
``{"set": "2030-01-01T00:00:00Z"}`` moves it forward and answers once the new offset and
everything the advance wrote are durable. Answers and errors are JSON
(``{"error": {"code": …, "message": …}}`` with the status of the error's code).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sbctl.core.durations import (
    format_duration_iso,
    format_instant,
    parse_absolute_instant_ms,
    parse_duration_ms,
)
from sbctl.core.errors import BadRequest, SbctlError
from sbctl.core.protocol import ClockAdvance, ClockSet, NamespaceRef
from sbctld.frontends.http.request import Request, Respond
from sbctld.frontends.statuses import status_of
from sbctld.results import ClockInfo

if TYPE_CHECKING:
    from sbctld.service import Service

JSON = [("Content-Type", "application/json")]
USAGE = 'POST a JSON object: {"advance": "1h"} or {"set": "2030-01-01T00:00:00Z"}'


def handle(service: Service, req: Request, respond: Respond) -> None:
    def reply(result: Any) -> None:
        if isinstance(result, SbctlError):
            _error(respond, result)
        else:
            _answer(respond, result)

    try:
        if req.method == "GET":
            service.run("clock_show", NamespaceRef(req.namespace), reply)
        elif req.method == "POST":
            service.run(*_move(req), reply)
        else:
            _error(respond, BadRequest(f"{req.method} is not allowed on {req.path}: GET or POST"))
    except SbctlError as err:
        _error(respond, err)


def _move(req: Request) -> tuple[str, ClockAdvance | ClockSet]:
    """The operation a POST asks for (wakes every entity of the namespace, durable)."""
    try:
        body = json.loads(req.body or b"null")
    except ValueError:
        raise BadRequest(f"the body is not JSON: {USAGE}") from None
    if not isinstance(body, dict) or len(body) != 1 or not set(body) <= {"advance", "set"}:
        raise BadRequest(USAGE)
    ((how, value),) = body.items()
    if not isinstance(value, str):
        raise BadRequest(f"{how!r} must be a string: {USAGE}")
    if how == "advance":
        return "clock_advance", ClockAdvance(req.namespace, parse_duration_ms(value))
    return "clock_set", ClockSet(req.namespace, parse_absolute_instant_ms(value))


def _answer(respond: Respond, info: ClockInfo) -> None:
    out: dict[str, Any] = {
        "namespace": info.namespace,
        "now_utc": format_instant(info.now_ms),
        "offset": format_duration_iso(info.offset_ms),
        "offset_ms": info.offset_ms,
    }
    for name in ("activated", "expired", "deleted_entities"):
        value = getattr(info, name)
        if isinstance(value, int):
            out[name] = value
    respond(200, JSON, json.dumps(out).encode())


def _error(respond: Respond, err: SbctlError) -> None:
    body = {"error": {"code": err.code, "message": err.message}}
    respond(status_of(err), JSON, json.dumps(body).encode())
