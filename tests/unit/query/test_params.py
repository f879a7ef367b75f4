"""Request parameters: each bad value is an InvalidInput naming the parameter as the client spelt it."""

from __future__ import annotations

import pytest

from keydesign import InvalidInput, parse_timestamp
from keydesign.periods import format_duration
from query.params import (
    MAX_INTERVALS,
    TimeRange,
    parse_interval,
    parse_limit,
    parse_lookback,
    parse_measures,
    parse_range,
    parse_stats,
    parse_time,
)

DAY = 86_400_000
T = parse_timestamp("2026-11-22T06:00:00Z")


def test_times_are_rfc3339_with_offset_or_epoch_milliseconds() -> None:
    assert parse_time("2026-11-22T06:00:00Z", "from") == T
    assert parse_time("2026-11-22T08:00:00+02:00", "from") == T
    assert parse_time(str(T), "from") == T


@pytest.mark.parametrize(
    ("raw", "hint"),
    [
        ("yesterday", "RFC 3339"),
        ("1795000000", "epoch seconds"),
        ("2026-11-22T06:00:00", "RFC 3339"),
        ("2026-13-01T00:00:00Z", "real date-time"),
        ("2026-11-22T08:00:00 02:00", "%2B"),
        ("-1", "RFC 3339"),
        ("99999999999999999", "RFC 3339"),
        ("", "RFC 3339"),
    ],
)
def test_bad_times_name_the_parameter(raw: str, hint: str) -> None:
    with pytest.raises(InvalidInput, match=hint) as caught:
        parse_time(raw, "to")
    assert caught.value.field == "to"


def test_a_range_must_run_forwards_and_stay_within_the_maximum() -> None:
    assert parse_range(str(T), str(T + DAY), 31 * DAY) == TimeRange(T, T + DAY)
    with pytest.raises(InvalidInput, match="before 'to'") as reversed_range:
        parse_range(str(T + 1), str(T), 31 * DAY)
    assert reversed_range.value.field == "from"
    with pytest.raises(InvalidInput, match="before 'to'"):
        parse_range(str(T), str(T), 31 * DAY)
    with pytest.raises(InvalidInput, match="at most 31d") as oversize:
        parse_range(str(T), str(T + 31 * DAY + 1), 31 * DAY)
    assert oversize.value.field == "to"


def test_limit_bounds() -> None:
    assert parse_limit(1, 1000) == 1
    assert parse_limit(1000, 1000) == 1000
    for bad in (0, -1, 1001):
        with pytest.raises(InvalidInput) as caught:
            parse_limit(bad, 1000)
        assert caught.value.field == "limit"


def test_measures_are_names_in_order_without_repeats() -> None:
    assert parse_measures(None) is None
    assert parse_measures("temp, rh,temp") == ("temp", "rh")


@pytest.mark.parametrize("raw", ["", "temp,", "#m", ":v", "temp;drop", "1st", "a" * 65, "t\u00e9mp", "m,x y"])
def test_bad_measures_name_the_parameter(raw: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_measures(raw)
    assert caught.value.field == "measures"


def test_more_than_a_hundred_measures_are_refused() -> None:
    with pytest.raises(InvalidInput, match="maximum is 100"):
        parse_measures(",".join(f"m{i}" for i in range(101)))


def test_stats_default_to_all_and_refuse_unknown_names() -> None:
    assert parse_stats(None) == ("count", "min", "max", "avg", "sum")
    assert parse_stats("max,min") == ("min", "max")
    with pytest.raises(InvalidInput, match="median") as caught:
        parse_stats("avg,median")
    assert caught.value.field == "stats"


def test_intervals_are_at_least_a_second_and_at_most_ten_thousand_per_range() -> None:
    window = TimeRange(T, T + DAY)
    assert parse_interval("15m", window) == 900_000
    with pytest.raises(InvalidInput, match="at least 1s"):
        parse_interval("0s", window)
    with pytest.raises(InvalidInput, match=str(MAX_INTERVALS)):
        parse_interval("1s", window)
    with pytest.raises(InvalidInput) as caught:
        parse_interval("5 minutes", window)
    assert caught.value.field == "interval"


def test_lookback_defaults_to_and_is_capped_by_the_setting() -> None:
    assert parse_lookback(None, 7 * DAY) == 7 * DAY
    assert parse_lookback("6h", 7 * DAY) == 6 * 3_600_000
    for bad in ("8d", "0s", "soon"):
        with pytest.raises(InvalidInput) as caught:
            parse_lookback(bad, 7 * DAY)
        assert caught.value.field == "lookback"


def test_durations_are_described_in_their_largest_whole_unit() -> None:
    assert [format_duration(v) for v in (31 * DAY, 7_200_000, 90_000, 1_000, 1_500)] == [
        "31d",
        "2h",
        "90s",
        "1s",
        "1500ms",
    ]
