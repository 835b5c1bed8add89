"""Durations and instants (daemon/README.md §25, §6.1, §6.5, §1.8)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sbctl.core.durations import (
    MAX_INSTANT_MS,
    MAX_TIMESPAN_MS,
    format_duration_iso,
    format_instant,
    parse_duration_ms,
    parse_instant_ms,
)
from sbctl.core.errors import BadRequest

S, M, H, D = 1_000, 60_000, 3_600_000, 86_400_000


def test_max_timespan_is_dotnet_timespan_max_value() -> None:
    ticks = 2**63 - 1  # TimeSpan.MaxValue in 100 ns ticks
    assert ticks // 10_000 == MAX_TIMESPAN_MS == 922_337_203_685_477
    assert MAX_TIMESPAN_MS == ((10_675_199 * 24 + 2) * 60 + 48) * 60_000 + 5_477


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        # ISO 8601, as Azure and the emulator's Config.json write them
        ("PT1M", M),
        ("PT30S", 30 * S),
        ("PT0.5S", 500),
        ("PT0S", 0),
        ("P14D", 14 * D),
        ("P1DT2H", D + 2 * H),
        ("P1DT2H3M4.005S", D + 2 * H + 3 * M + 4_005),
        ("PT5M", 5 * M),
        ("PT1H30M", H + 30 * M),
        ("P2W", 14 * D),
        ("P1W1D", 8 * D),
        ("PT1.5M", 90 * S),
        ("PT0.0005S", 1),  # half a millisecond rounds up
        ("PT0.0004999S", 0),
        ("PT0.0015S", 2),
        ("PT90S", 90 * S),
        ("P10675199DT2H48M5.4775807S", MAX_TIMESPAN_MS),
        ("P10675199DT2H48M5.477S", MAX_TIMESPAN_MS),
        ("pt1m", M),
        ("p1dt2h", D + 2 * H),
        ("  PT1M\n", M),
        # short forms
        ("500ms", 500),
        ("30s", 30 * S),
        ("5m", 5 * M),
        ("1h", H),
        ("2d", 2 * D),
        ("1h30m", H + 30 * M),
        ("1m30s", 90 * S),
        ("2d3h4m5s6ms", 2 * D + 3 * H + 4 * M + 5 * S + 6),
        ("5m500ms", 5 * M + 500),
        ("1.5h", 90 * M),
        ("0.25s", 250),
        ("30S", 30 * S),
        ("500MS", 500),
        ("1H30M", H + 30 * M),
        ("0s", 0),
        # bare numbers are seconds
        ("90", 90 * S),
        ("1.5", 1_500),
        ("0", 0),
        ("0.0004", 0),
        ("86400", D),
    ],
)
def test_parse_duration(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


MALFORMED = [
    "",
    " ",
    "xyz",
    "P",
    "PT",
    "P1DT",
    "T1M",
    "PT1M1H",
    "PT-1M",
    "-PT1M",
    "-30s",
    "-1",
    "1.",
    ".5s",
    "1e3",
    "1,5s",
    "PT0,5S",
    "30 s",
    "30sec",
    "1w",
    "5 m",
    "inf",
    "nan",
    "P1DT2H\x00",
    "PT1M\x1b[2J",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_parse_duration_refuses_malformed(text: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_duration_ms(text)
    message = str(info.value)
    assert message == (
        f"invalid duration {text!r}: use ISO 8601 like PT1M or a short form like 30s, 5m, 1h"
    )
    assert message.isprintable()


@pytest.mark.parametrize("text", ["P1Y", "P1M", "P1Y2M3D", "P1MT1H", "p6m"])
def test_parse_duration_refuses_years_and_months(text: str) -> None:
    with pytest.raises(BadRequest, match="years and months have no fixed length"):
        parse_duration_ms(text)


@pytest.mark.parametrize("text", ["1h1h", "30s5m30s", "1m1M"])
def test_parse_duration_refuses_repeated_units(text: str) -> None:
    with pytest.raises(BadRequest, match="each unit may appear only once"):
        parse_duration_ms(text)


@pytest.mark.parametrize(
    "text", ["P10675199DT2H48M5.4775808S", "P10675200D", "P99999999999999999999D", "1" * 30]
)
def test_parse_duration_refuses_more_than_timespan_max(text: str) -> None:
    with pytest.raises(BadRequest, match=r"exceeds the maximum P10675199DT2H48M5\.4775807S"):
        parse_duration_ms(text)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "PT0S"),
        (1, "PT0.001S"),
        (10, "PT0.01S"),
        (500, "PT0.5S"),
        (30 * S, "PT30S"),
        (M, "PT1M"),
        (90 * S, "PT1M30S"),
        (H, "PT1H"),
        (H + 500, "PT1H0.5S"),
        (D, "P1D"),
        (14 * D, "P14D"),
        (D + 2 * H, "P1DT2H"),
        (D + 1, "P1DT0.001S"),
        (D + 2 * H + 3 * M + 4_005, "P1DT2H3M4.005S"),
        (MAX_TIMESPAN_MS - 1, "P10675199DT2H48M5.476S"),
        (MAX_TIMESPAN_MS, "P10675199DT2H48M5.4775807S"),
        (MAX_TIMESPAN_MS + 1, "P10675199DT2H48M5.4775807S"),
        (2**80, "P10675199DT2H48M5.4775807S"),
    ],
)
def test_format_duration_iso(ms: int, text: str) -> None:
    assert format_duration_iso(ms) == text


def test_format_duration_refuses_negative() -> None:
    with pytest.raises(ValueError, match="negative"):
        format_duration_iso(-1)


@given(st.integers(min_value=0, max_value=MAX_TIMESPAN_MS - 1))
def test_duration_round_trip(ms: int) -> None:
    text = format_duration_iso(ms)
    assert parse_duration_ms(text) == ms
    assert parse_duration_ms(text.lower()) == ms


@given(
    st.integers(0, 10_000),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.integers(0, 999),
)
def test_short_form_agrees_with_iso(d: int, h: int, m: int, s: int, ms: int) -> None:
    total = d * D + h * H + m * M + s * S + ms
    short = f"{d}d{h}h{m}m{s}s{ms}ms"
    iso = f"P{d}DT{h}H{m}M{s}.{ms:03d}S"
    assert parse_duration_ms(short) == parse_duration_ms(iso) == total


# --- instants ----------------------------------------------------------------------------

NOW = 1_795_255_200_000  # 2026-11-21T10:00:00Z


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("now", NOW),
        ("NOW", NOW),
        ("+30s", NOW + 30 * S),
        ("+5m", NOW + 5 * M),
        ("+PT1M", NOW + M),
        ("+pt0.5s", NOW + 500),
        ("+90", NOW + 90 * S),
        ("2026-11-21T10:00:00Z", NOW),
        ("2026-11-21t10:00:00z", NOW),
        ("2026-11-21T10:00:00", NOW),
        ("2026-11-21T10:00:00.123Z", NOW + 123),
        ("2026-11-21T10:00:00.1239Z", NOW + 123),
        ("2026-11-21T12:00:00+02:00", NOW),
        ("2026-11-21T05:30:00-04:30", NOW),
        ("2026-11-21T10:00:00+00:00", NOW),
        ("2026-11-21 10:00:00Z", NOW),
        ("2026-11-21", NOW - 10 * H),
        ("1970-01-01T00:00:00Z", 0),
        ("1969-12-31T23:59:59.999Z", -1),
        ("9999-12-31T23:59:59.999Z", MAX_INSTANT_MS),
    ],
)
def test_parse_instant(text: str, ms: int) -> None:
    assert parse_instant_ms(text, NOW) == ms


@pytest.mark.parametrize(
    "text", ["", "tomorrow", "2026-13-01T00:00:00Z", "2026-11-21T25:00:00Z", "10:00", "-30s"]
)
def test_parse_instant_refused(text: str) -> None:
    with pytest.raises(BadRequest, match=r"^invalid time .*use ISO 8601 like 2026-11-21T10:00:00Z"):
        parse_instant_ms(text, NOW)


@pytest.mark.parametrize("text", ["+", "+xyz", "+-5m", "+P1M"])
def test_parse_relative_instant_refused(text: str) -> None:
    with pytest.raises(BadRequest, match=r"^invalid duration "):
        parse_instant_ms(text, NOW)


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (NOW, "2026-11-21T10:00:00.000Z"),
        (NOW + 123, "2026-11-21T10:00:00.123Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (MAX_INSTANT_MS, "9999-12-31T23:59:59.999Z"),
        (MAX_INSTANT_MS + 1, "9999-12-31T23:59:59.999Z"),
        (NOW + MAX_TIMESPAN_MS, "9999-12-31T23:59:59.999Z"),  # ExpiresAtUtc of infinite TTL
        (-62_135_596_800_000, "0001-01-01T00:00:00.000Z"),
        (-(2**62), "0001-01-01T00:00:00.000Z"),
    ],
)
def test_format_instant(ms: int, text: str) -> None:
    assert format_instant(ms) == text


@given(st.integers(min_value=-62_135_596_800_000, max_value=MAX_INSTANT_MS))
def test_instant_round_trip(ms: int) -> None:
    assert parse_instant_ms(format_instant(ms), NOW) == ms
