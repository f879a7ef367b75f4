"""Layout settings, bucket grids and table periods (one table name per period)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import Bucket, ConfigError, InvalidInput, Layout, TablePeriod, parse_duration, parse_timestamp
from keydesign.periods import PERIODS, period_of_table, period_table, table_head
from keydesign.timefmt import MAX_TS_MS, from_datetime, to_datetime

from .strategies import BUCKETS, PROPERTY

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000


def settings_with(**changes: str | None) -> dict[str, str | None]:
    return {"kind": "hybrid", "bucket": "15m", "table_prefix": "readings", "table_period": "day", **changes}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kind": "Hybrid"}, "layout"),
        ({"kind": "sharded"}, "layout"),
        ({"kind": ""}, "layout"),
        *[
            ({"bucket": bad}, "bucket")
            for bad in ("7m", "5h", "2d", "0m", "0h", "abc", "", "15", "m", "1w", "-1h", "1.5h", "90m", "25h", "1 h")
        ],
        ({"table_period": "year"}, "table_period"),
        ({"table_period": "daily"}, "table_period"),
        ({"table_period": "Hour"}, "table_period"),
        ({"bucket": "2h", "table_period": "hour"}, "bucket"),
        ({"bucket": "6h", "table_period": "hour"}, "bucket"),
        ({"bucket": "1d", "table_period": "hour"}, "bucket"),
        ({"table_prefix": ""}, "table_prefix"),
        ({"table_prefix": "ab", "table_period": None}, "table_prefix"),
        ({"table_prefix": "has space"}, "table_prefix"),
        ({"table_prefix": "readings#"}, "table_prefix"),
        ({"table_prefix": "readings/x"}, "table_prefix"),
        ({"table_prefix": "lectures-é"}, "table_prefix"),
        ({"table_prefix": "x" * 242}, "table_prefix"),  # + "-2026-11-22-06" would pass 255
        ({"table_prefix": "x" * 256, "table_period": None}, "table_prefix"),
    ],
    ids=repr,
)
def test_bad_layout_settings_are_refused_naming_the_setting(changes: dict[str, str | None], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Layout.from_settings(**settings_with(**changes))  # type: ignore[arg-type]
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("changes", "bucket_spec", "width"),
    [
        ({}, "15m", 15 * MINUTE),
        ({"bucket": " 1h "}, "1h", HOUR),
        ({"bucket": "60m", "table_period": "hour"}, "60m", HOUR),
        ({"bucket": "1m", "table_period": "hour"}, "1m", MINUTE),
        ({"bucket": "24h", "table_period": "month"}, "24h", DAY),
        ({"bucket": "1d", "table_period": "week"}, "1d", DAY),
        ({"table_prefix": "ab"}, "15m", 15 * MINUTE),  # short prefixes are fine once a suffix follows
        ({"table_prefix": "x" * 241}, "15m", 15 * MINUTE),
        ({"table_prefix": "x" * 255, "table_period": None}, "15m", 15 * MINUTE),
        ({"table_period": ""}, "15m", 15 * MINUTE),
    ],
)
def test_good_layout_settings_are_accepted(changes: dict[str, str | None], bucket_spec: str, width: int) -> None:
    layout = Layout.from_settings(**settings_with(**changes))  # type: ignore[arg-type]
    assert (layout.bucket.spec, layout.bucket.width_ms) == (bucket_spec, width)


@pytest.mark.parametrize("spec", BUCKETS)
@pytest.mark.parametrize("period", ["hour", "day", "week", "month"])
def test_every_bucket_nests_in_every_period_except_long_buckets_in_hours(spec: str, period: str) -> None:
    bucket, table_period = Bucket.parse(spec), TablePeriod.parse(period)
    if period == "hour" and bucket.width_ms > HOUR:
        with pytest.raises(ConfigError):
            table_period.check_nests(bucket)
    else:
        table_period.check_nests(bucket)


# -- table names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "at", "table"),
    [
        (None, "2026-11-22T06:57:51.123Z", "readings"),
        ("hour", "2026-11-22T06:57:51.123Z", "readings-2026-11-22-06"),
        ("hour", "2026-11-22T06:00:00Z", "readings-2026-11-22-06"),
        ("hour", "2026-11-22T05:59:59.999Z", "readings-2026-11-22-05"),
        ("day", "2026-11-22T23:59:59.999Z", "readings-2026-11-22"),
        ("week", "2026-11-22T06:57:51Z", "readings-2026-W47"),  # a Sunday: the week began on the 16th
        ("week", "2026-11-23T00:00:00Z", "readings-2026-W48"),
        ("week", "2026-12-31T12:00:00Z", "readings-2026-W53"),  # 2026 starts on a Thursday: 53 ISO weeks
        ("week", "2027-01-01T00:00:00Z", "readings-2026-W53"),
        ("week", "2027-01-03T23:59:59.999Z", "readings-2026-W53"),
        ("week", "2027-01-04T00:00:00Z", "readings-2027-W01"),
        ("week", "2024-12-30T00:00:00Z", "readings-2025-W01"),  # ISO year ahead of the calendar year
        ("month", "2026-11-30T23:59:59.999Z", "readings-2026-11"),
        ("month", "2026-12-01T00:00:00Z", "readings-2026-12"),
    ],
)
def test_table_names_per_period(period: str | None, at: str, table: str) -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period=period)
    ts = parse_timestamp(at)
    assert layout.table_for(ts) == table
    if period == "week":
        # The same answer from the standard library's ISO calendar.
        iso = to_datetime(ts).isocalendar()
        assert table == f"readings-{iso.year}-W{iso.week:02d}"


def _ms(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> int:
    return from_datetime(datetime(year, month, day, hour, minute, tzinfo=UTC))


@pytest.mark.parametrize(
    ("period", "at", "start", "next_start"),
    [
        ("hour", _ms(2026, 11, 22, 6, 57), _ms(2026, 11, 22, 6), _ms(2026, 11, 22, 7)),
        ("hour", _ms(2026, 12, 31, 23, 30), _ms(2026, 12, 31, 23), _ms(2027, 1, 1)),
        ("day", _ms(2026, 12, 31, 23, 59), _ms(2026, 12, 31), _ms(2027, 1, 1)),
        ("week", _ms(2027, 1, 1, 12), _ms(2026, 12, 28), _ms(2027, 1, 4)),
        ("week", _ms(2026, 11, 23), _ms(2026, 11, 23), _ms(2026, 11, 30)),
        ("month", _ms(2026, 1, 31, 23, 59), _ms(2026, 1, 1), _ms(2026, 2, 1)),
        ("month", _ms(2027, 2, 10), _ms(2027, 2, 1), _ms(2027, 3, 1)),
        ("month", _ms(2028, 2, 29, 12), _ms(2028, 2, 1), _ms(2028, 3, 1)),  # leap year
        ("month", _ms(2026, 4, 30, 12), _ms(2026, 4, 1), _ms(2026, 5, 1)),
        ("month", _ms(2026, 12, 15), _ms(2026, 12, 1), _ms(2027, 1, 1)),
        ("month", MAX_TS_MS, _ms(9999, 12, 1), MAX_TS_MS + 1),  # year 10000 is not a datetime
    ],
)
def test_period_start_and_next_start_across_month_and_year_ends(
    period: str, at: int, start: int, next_start: int
) -> None:
    table_period = TablePeriod.parse(period)
    assert table_period.start(at) == start
    assert table_period.next_start(at) == next_start


@PROPERTY
@given(name=st.sampled_from(["hour", "day", "week", "month"]), ts=st.integers(0, MAX_TS_MS))
def test_each_instant_lies_in_exactly_one_period_named_by_the_calendar(name: str, ts: int) -> None:
    period = TablePeriod.parse(name)
    start, after = period.start(ts), period.next_start(ts)
    assert start <= ts < after
    assert period.nominal_ms <= after - start <= 31 * DAY
    # (The last week of 9999 runs past the supported range: label its last supported instant.)
    assert period.label(start) == period.label(min(after - 1, MAX_TS_MS)) == period.label(ts)
    if after <= MAX_TS_MS:
        assert period.start(after) == after
        assert period.label(after) != period.label(ts)
    # The label, derived independently from the calendar.
    dt = to_datetime(ts)
    iso = dt.isocalendar()
    expected = {
        "hour": f"{dt:%Y-%m-%d-%H}",
        "day": f"{dt:%Y-%m-%d}",
        "week": f"{iso.year:04d}-W{iso.week:02d}",
        "month": f"{dt:%Y-%m}",
    }[name]
    assert period.label(ts) == expected
    if name == "week":
        assert to_datetime(start).weekday() == 0  # Monday (before 1970-01-05 that is in 1969)


#: Table prefixes as a deployment may set them, two of which begin like the others' names.
PREFIXES = ("readings", "r", "readings-eu", "a.b_c-1")


@PROPERTY
@given(name=st.sampled_from(PERIODS), prefix=st.sampled_from(PREFIXES), ts=st.integers(0, MAX_TS_MS))
def test_a_table_name_reads_back_to_its_period_and_to_nothing_else(name: str, prefix: str, ts: int) -> None:
    # Given the table of a period, under every period kind
    period = TablePeriod.parse(name)
    table = period_table(prefix, period, ts)
    assert table.startswith(table_head(prefix))
    assert table == Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=prefix, table_period=name).table_for(
        ts
    )
    # Then its name reads back to the period's start, under its prefix and period kind only
    assert period_of_table(prefix, period, table) == period.start(ts)
    for other in PERIODS:
        if other != name:
            assert period_of_table(prefix, TablePeriod.parse(other), table) is None
    for other in PREFIXES:
        if other != prefix:
            assert period_of_table(other, period, table) is None


@PROPERTY
@given(
    name=st.sampled_from(PERIODS),
    label=st.text(st.sampled_from("0123456789-W \u0662"), max_size=16) | st.text(max_size=16),
)
def test_a_name_reads_back_only_when_the_same_name_is_built_for_that_start(name: str, label: str) -> None:
    period = TablePeriod.parse(name)
    start = period_of_table("readings", period, f"readings-{label}")
    assert start is None or period_table("readings", period, start) == f"readings-{label}"


@pytest.mark.parametrize(
    ("name", "table", "start"),
    [
        ("hour", "readings-2026-11-22-06", "2026-11-22T06:00:00Z"),
        ("day", "readings-9999-12-31", "9999-12-31T00:00:00Z"),
        ("week", "readings-1970-W01", -3 * DAY),  # the first week starts on a Monday before the epoch
        ("week", "readings-2025-W53", None),  # 2025 has 52 ISO weeks
        ("week", "readings-2026-W53", "2026-12-28T00:00:00Z"),
        ("month", "readings-2026-02", "2026-02-01T00:00:00Z"),
        ("day", "readings-2026-11-22-old", None),
        ("day", "readings-2026-02-30", None),
        ("hour", "readings-2026-11-22-6", None),  # strptime reads the hour; the name built is -06
        ("day", "readings-\u0662\u0660\u0662\u0666-11-22", None),  # strptime reads Unicode digits
        ("day", "readings-", None),
        ("day", "readings", None),
    ],
)
def test_names_at_the_edges(name: str, table: str, start: str | int | None) -> None:
    found = period_of_table("readings", TablePeriod.parse(name), table)
    assert found == (parse_timestamp(start) if isinstance(start, str) else start)


@PROPERTY
@given(spec=st.sampled_from(BUCKETS), ts=st.integers(0, MAX_TS_MS))
def test_buckets_tile_time_from_midnight(spec: str, ts: int) -> None:
    bucket = Bucket.parse(spec)
    start = bucket.start(ts)
    assert start <= ts < start + bucket.width_ms
    assert bucket.is_boundary(start)
    # The grid restarts at every midnight UTC: a whole number of buckets per day.
    assert DAY % bucket.width_ms == 0
    assert (start - (ts - ts % DAY)) % bucket.width_ms == 0
    assert bucket.next_boundary(ts) == (ts if ts == start else start + bucket.width_ms)
    assert list(bucket.starts(ts, ts + 1)) == [start]


@pytest.mark.parametrize(("spec", "ms"), [("90s", 90_000), ("15m", 15 * MINUTE), ("2h", 2 * HOUR), ("30d", 30 * DAY)])
def test_durations_parse_to_milliseconds(spec: str, ms: int) -> None:
    assert parse_duration(spec, "cache_ttl") == ms


@pytest.mark.parametrize("spec", ["", "1w", "abc", "-5m", "1.5h", "15", "m", "12345678s"])
def test_bad_durations_are_refused_naming_the_field(spec: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_duration(spec, "cache_ttl")
    assert caught.value.field == "cache_ttl"


class TestPeriodAdmission:
    """Which event times a per-period deployment may write now."""

    DAY = 86_400_000
    NOW = 1_795_330_671_123  # 2026-11-22T06:57:51.123Z, a Sunday

    def check(self, ts_ms: int, grace_ms: int = 2 * 3_600_000, prebuilt: int = 2) -> None:
        TablePeriod.parse("day").check_admits(ts_ms, now_ms=self.NOW, grace_ms=grace_ms, prebuilt=prebuilt)

    def test_the_current_and_prebuilt_periods_take_writes(self) -> None:
        today = self.NOW - self.NOW % self.DAY
        for ts in (today, self.NOW, today + self.DAY, today + 3 * self.DAY - 1):
            self.check(ts)

    def test_a_period_closes_exactly_at_its_end_plus_grace(self) -> None:
        today = self.NOW - self.NOW % self.DAY
        # Yesterday ended at today 00:00; with a 6h58m grace it is still open at 06:57:51...
        self.check(today - 1, grace_ms=self.NOW - today + 1)
        # ...and closed the millisecond its grace runs out.
        with pytest.raises(InvalidInput) as exc:
            self.check(today - 1, grace_ms=self.NOW - today)
        assert exc.value.field == "timestamp"
        assert "period 2026-11-21 closed at" in exc.value.reason

    def test_a_period_beyond_the_prebuilt_ones_is_refused(self) -> None:
        today = self.NOW - self.NOW % self.DAY
        with pytest.raises(InvalidInput) as exc:
            self.check(today + 3 * self.DAY)
        assert exc.value.reason == "the table for period 2026-11-25 is not built yet"
        self.check(today + 3 * self.DAY, prebuilt=3)

    @PROPERTY
    @given(
        name=st.sampled_from(["hour", "day", "week", "month"]),
        now=st.integers(0, 4_000_000_000_000),
        offset=st.integers(-100 * 86_400_000, 100 * 86_400_000),
        grace_ms=st.integers(0, 40 * 86_400_000),
        prebuilt=st.integers(0, 5),
    )
    def test_admission_is_its_definition(self, name: str, now: int, offset: int, grace_ms: int, prebuilt: int) -> None:
        """Open until its end plus the grace window; built up to ``prebuilt`` periods after the current one."""
        period, ts = TablePeriod.parse(name), max(0, now + offset)
        last = period.start(now)
        for _ in range(prebuilt):
            last = period.next_start(last)
        closed, unbuilt = now >= period.next_start(ts) + grace_ms, period.start(ts) > last
        try:
            period.check_admits(ts, now_ms=now, grace_ms=grace_ms, prebuilt=prebuilt)
        except InvalidInput as exc:
            assert ("closed at" in exc.reason) == closed and ("not built yet" in exc.reason) == (unbuilt and not closed)
        else:
            assert not closed and not unbuilt
