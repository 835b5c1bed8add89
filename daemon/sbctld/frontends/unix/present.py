"""The Unix front-end's presentation: the domain's typed results (sbctld.results) → the
dicts the Python client and the CLI read.

Rules kept here: the output is exactly the wire form the client has always read (its API is
public, ``sbctl … -o json`` prints it): a duration field ``x_ms`` becomes ``x`` as an
ISO 8601 duration (``PT1M``), an instant ``x_ms`` becomes ``x_utc`` as ISO 8601 UTC with
milliseconds, an UNSET field is left out, the field order is kept. A result may stand
alone, in a list, or in a field of a result; a delivered message goes out in its stored
AMQP form (sbctl.core.message_form, which the client decodes; a record of an older version
is converted as it is read) beside the broker's facts Delivered carries; anything else
(sequence numbers, plain dicts) passes as it is, without a look at each item, so the data
plane's replies cost one check. Called once, where a reply is encoded
(sbctld.frontends.unix.connection).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

import msgspec
from msgspec.structs import replace

from sbctl.core.delivered import Delivered
from sbctl.core.durations import format_duration_iso, format_instant
from sbctl.core.errors import SbctlError
from sbctl.core.message_form import is_amqp, stored_form
from sbctl.core.wire_errors import error_to_wire
from sbctld.results import EntityOverview, Result, Settled

# One step per field: (attribute, wire name, how its value is shown).
Plan = list[tuple[str, str, Callable[[Any], Any]]]
_plans: dict[type, Plan] = {}


def present(result: Any) -> Any:
    """A handler's result → what the reply carries."""
    if isinstance(result, Result):
        return _struct(result)
    if type(result) is list and result:
        first = type(result[0])
        if first is Delivered:
            return [d if is_amqp(d.payload) else _converted(d) for d in result]
        if first is Settled and all(type(v) is Settled for v in result):
            return [{"lock_token": v.lock_token, "ok": v.ok} for v in result]  # (_struct's)
        if issubclass(first, Result):
            return [_struct(v) for v in result]  # settlement results: one per lock token
    return result


def _converted(d: Delivered) -> Delivered:
    """A delivery of a record of versions 1-3, its payload in the AMQP form."""
    try:
        return replace(d, payload=stored_form(d.payload))
    except Exception:  # (a damaged record: the client shows why, never blocking the rest)
        return d


def _show(value: Any) -> Any:
    """A field's value: results in it presented, an error in its wire form
    (sbctl.core.wire_errors), anything else as it is."""
    if isinstance(value, Result):
        return _struct(value)
    if type(value) is list:
        return [_show(v) for v in value]
    if isinstance(value, SbctlError):
        return error_to_wire(value)
    return value


def _struct(result: Result) -> dict[str, Any]:
    if type(result) is EntityOverview:
        # sbctl top reads an entity as its description with its kind and path
        return {"kind": result.kind, **_struct(result.description), "name": result.path}
    plan = _plans.get(type(result))
    if plan is None:
        plan = _plans[type(result)] = _plan(type(result))
    out: dict[str, Any] = {}
    for attr, key, show in plan:
        value = getattr(result, attr)
        if value is not msgspec.UNSET:
            out[key] = show(value)
    return out


def _duration(value: int | None) -> str | None:
    return None if value is None else format_duration_iso(value)


def _instant(value: int | None) -> str | None:
    return None if value is None else format_instant(value)


def _plan(cls: type[Result]) -> Plan:
    hints = typing.get_type_hints(cls, include_extras=True)
    plan: Plan = []
    for attr in cls.__struct_fields__:
        shown = _shown(hints[attr])
        if shown == "duration":
            plan.append((attr, attr.removesuffix("_ms"), _duration))
        elif shown == "instant":
            plan.append((attr, attr.removesuffix("_ms") + "_utc", _instant))
        else:
            plan.append((attr, attr, _show))
    return plan


def _shown(hint: Any) -> str | None:
    """ "duration" or "instant" for a DurationMs / InstantMs field (optional or not)."""
    if typing.get_origin(hint) is typing.Annotated:
        for meta in hint.__metadata__:
            if isinstance(meta, msgspec.Meta) and meta.extra:
                return str(meta.extra.get("shown"))
        return None
    for arg in typing.get_args(hint):
        found = _shown(arg)
        if found is not None:
            return found
    return None
