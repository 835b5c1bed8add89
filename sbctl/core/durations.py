"""Durations and instants as sbctl reads and prints them.

Durations are whole milliseconds. They are read as ISO 8601 (``PT1M``, ``P14D``, the forms
Azure and its emulator's Config.json use, daemon/README.md §25) or as short forms (``30s``, ``5m``,
``1h30m``, ``500ms``, or a bare number of seconds), and printed the way Azure prints a .NET
TimeSpan. The largest TimeSpan, Azure's "infinite" default for DefaultMessageTimeToLive and
AutoDeleteOnIdle (daemon/README.md §6.1, §6.5), is :data:`MAX_TIMESPAN_MS`.

Instants are milliseconds since the Unix epoch, UTC; they print as ISO 8601 with ``Z``,
clamped to .NET's DateTime range as Azure clamps ExpiresAtUtc (daemon/README.md §1.8).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any, Final

from sbctl.core.errors import BadRequest
from sbctl.core.names import display_value

MS_PER_SECOND: Final = 1_000
MS_PER_MINUTE: Final = 60 * MS_PER_SECOND
MS_PER_HOUR: Final = 60 * MS_PER_MINUTE
MS_PER_DAY: Final = 24 * MS_PER_HOUR
MS_PER_WEEK: Final = 7 * MS_PER_DAY

# .NET TimeSpan.MaxValue is 10675199.02:48:05.4775807 (Int64.MaxValue ticks of 100 ns).
MAX_TIMESPAN_ISO: Final = "P10675199DT2H48M5.4775807S"
_MAX_TIMESPAN_EXACT_MS: Final = Decimal("922337203685477.5807")
MAX_TIMESPAN_MS: Final = 922_337_203_685_477

# .NET DateTime's range, 0001-01-01T00:00:00.000Z to 9999-12-31T23:59:59.999Z (daemon/README.md
# §1.8).
_EPOCH: Final = datetime(1970, 1, 1)
_EPOCH_UTC: Final = datetime(1970, 1, 1, tzinfo=UTC)
MIN_INSTANT_MS: Final = -62_135_596_800_000
MAX_INSTANT_MS: Final = 253_402_300_799_999

_NUMBER: Final = r"\d+(?:\.\d+)?"
_ISO_RE: Final = re.compile(
    rf"P(?:(?P<W>{_NUMBER})W)?(?:(?P<D>{_NUMBER})D)?"
    rf"(?:(?P<T>T)(?:(?P<H>{_NUMBER})H)?(?:(?P<M>{_NUMBER})M)?(?:(?P<S>{_NUMBER})S)?)?"
)
_ISO_CALENDAR_RE: Final = re.compile(r"P[^T]*[YM]")
_SHORT_RE: Final = re.compile(rf"(?:{_NUMBER}(?:MS|[DHMS]))+")
_SHORT_TOKEN_RE: Final = re.compile(rf"({_NUMBER})(MS|[DHMS])")
_BARE_RE: Final = re.compile(_NUMBER)

_ISO_UNIT_MS: Final = {
    "W": MS_PER_WEEK,
    "D": MS_PER_DAY,
    "H": MS_PER_HOUR,
    "M": MS_PER_MINUTE,
    "S": MS_PER_SECOND,
}
_SHORT_UNIT_MS: Final = {
    "D": MS_PER_DAY,
    "H": MS_PER_HOUR,
    "M": MS_PER_MINUTE,
    "S": MS_PER_SECOND,
    "MS": 1,
}


def _malformed(text: str) -> BadRequest:
    return BadRequest(
        f"invalid duration {display_value(text)}: use ISO 8601 like PT1M or a short form "
        "like 30s, 5m, 1h"
    )


def _exact_ms(text: str, upper: str) -> Decimal:
    """The duration in exact (fractional) milliseconds; ``upper`` is the trimmed upper case."""
    parts: list[tuple[str, int]] = []
    iso = _ISO_RE.fullmatch(upper)
    if iso:
        has_time = any(iso.group(unit) for unit in "HMS")
        if not (has_time or iso.group("W") or iso.group("D")) or (iso.group("T") and not has_time):
            raise _malformed(text)
        parts = [(iso.group(u), ms) for u, ms in _ISO_UNIT_MS.items() if iso.group(u)]
    elif _ISO_CALENDAR_RE.match(upper):
        raise BadRequest(
            f"invalid duration {display_value(text)}: years and months have no fixed length; "
            "use days or weeks (P30D, P2W)"
        )
    elif _SHORT_RE.fullmatch(upper):
        tokens: list[tuple[str, str]] = _SHORT_TOKEN_RE.findall(upper)
        if len({unit for _, unit in tokens}) != len(tokens):
            raise BadRequest(
                f"invalid duration {display_value(text)}: each unit may appear only once"
            )
        parts = [(value, _SHORT_UNIT_MS[unit]) for value, unit in tokens]
    elif _BARE_RE.fullmatch(upper):
        parts = [(upper, MS_PER_SECOND)]
    else:
        raise _malformed(text)
    return sum((Decimal(value) * ms for value, ms in parts), Decimal(0))


def parse_duration_ms(text: str) -> int:
    """Read a duration, case-insensitively, as whole milliseconds (rounded half up).

    Accepted: ISO 8601 with weeks, days, hours, minutes and seconds, fractions allowed
    (``PT1M``, ``PT0.5S``, ``P1DT2H``, ``P2W``, ``P10675199DT2H48M5.4775807S``); short forms
    ``500ms``, ``30s``, ``5m``, ``1h``, ``2d`` and combinations of distinct units
    (``1h30m``); a bare number of seconds (``90``, ``1.5``). Years and months, negative
    values and anything above .NET's TimeSpan.MaxValue are refused; TimeSpan.MaxValue
    itself reads as :data:`MAX_TIMESPAN_MS`.
    """
    stripped = text.strip()
    with localcontext() as context:
        context.prec = 60
        exact = _exact_ms(text, stripped.upper())
        if exact > _MAX_TIMESPAN_EXACT_MS:
            raise BadRequest(
                f"invalid duration {display_value(text)}: exceeds the maximum {MAX_TIMESPAN_ISO}"
            )
        rounded = int(exact.to_integral_value(rounding=ROUND_HALF_UP))
    return min(rounded, MAX_TIMESPAN_MS)


def format_duration_iso(ms: int) -> str:
    """Print a duration as Azure prints a TimeSpan: ``PT1M``, ``PT0.5S``, ``P1DT2H``, ``PT0S``.

    ``ms`` at or above :data:`MAX_TIMESPAN_MS` prints as ``P10675199DT2H48M5.4775807S``.
    """
    if ms < 0:
        raise ValueError(f"a duration cannot be negative: {ms} ms")
    if ms >= MAX_TIMESPAN_MS:
        return MAX_TIMESPAN_ISO
    days, rest = divmod(ms, MS_PER_DAY)
    hours, rest = divmod(rest, MS_PER_HOUR)
    minutes, rest = divmod(rest, MS_PER_MINUTE)
    seconds, millis = divmod(rest, MS_PER_SECOND)
    date = f"{days}D" if days else ""
    time = f"{hours}H" if hours else ""
    time += f"{minutes}M" if minutes else ""
    if millis:
        time += f"{seconds}.{millis:03d}".rstrip("0") + "S"
    elif seconds or not (date or time):
        time += f"{seconds}S"
    return f"P{date}T{time}" if time else f"P{date}"


def parse_instant_ms(text: str, now_ms: int) -> int:
    """Read an absolute UTC time (for scheduling) as milliseconds since the epoch.

    Accepted: ``now``; ``+<duration>`` meaning ``now_ms`` plus any form
    :func:`parse_duration_ms` reads (``+30s``, ``+5m``, ``+PT1M``); an ISO 8601 date or
    datetime (``2026-11-21T10:00:00Z``, ``2026-11-21T12:00:00+02:00``), UTC when it has no
    offset. Case-insensitive. Sub-millisecond digits are truncated.
    """
    stripped = text.strip()
    if stripped.lower() == "now":
        return now_ms
    if stripped.startswith("+"):
        return now_ms + parse_duration_ms(stripped[1:])
    try:
        moment = datetime.fromisoformat(stripped.upper())  # ``t`` and ``z`` in any case
    except ValueError:
        raise BadRequest(
            f"invalid time {display_value(text)}: use ISO 8601 like 2026-11-21T10:00:00Z, "
            "a relative time like +30s or +PT1M, or 'now'"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH_UTC) // timedelta(milliseconds=1)


def parse_absolute_instant_ms(text: str) -> int:
    """Read an absolute ISO 8601 time as :func:`parse_instant_ms` does, refusing the relative
    forms (``now``, ``+30s``): what a namespace's clock is set to (daemon/README.md §31)."""
    stripped = text.strip()
    if stripped.startswith("+") or stripped.lower() == "now":
        raise BadRequest(
            f"invalid time {display_value(text)}: use ISO 8601 like 2030-01-01T00:00:00Z "
            "(to move by a duration, advance the clock instead)"
        )
    return parse_instant_ms(stripped, 0)


def format_instant(ms: int) -> str:
    """Print an instant as ISO 8601 UTC with milliseconds: ``2026-11-21T10:00:00.123Z``.

    Values outside .NET's DateTime range clamp to ``0001-01-01T00:00:00.000Z`` and
    ``9999-12-31T23:59:59.999Z`` (daemon/README.md §1.8: ExpiresAtUtc is capped at the maximum
    date).
    """
    clamped = min(max(ms, MIN_INSTANT_MS), MAX_INSTANT_MS)
    moment = _EPOCH + timedelta(milliseconds=clamped)
    return moment.isoformat(timespec="milliseconds") + "Z"


def instant_ms(value: Any, name: str = "time") -> int:
    """Epoch milliseconds from an int (already epoch milliseconds) or a datetime (naive:
    UTC)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return round(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise BadRequest(f"{name} must be epoch milliseconds (int) or a datetime, not {value!r}")
