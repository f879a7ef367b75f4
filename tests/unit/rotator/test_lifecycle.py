"""The lifecycle rules: table names, phases at the boundaries, what must exist, when a
closed table's steps fall due, and the guard that never lets a live table be dropped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keydesign import Layout, parse_timestamp
from keydesign.timefmt import MAX_TS_MS
from rotator.lifecycle import DeletionRefused, Lifecycle, Phase

HOUR = 3_600_000
DAY = 24 * HOUR
MINUTE = 60_000


def lifecycle(
    period: str = "day",
    *,
    prebuild: int = 2,
    grace: int = 2 * HOUR,
    retention: int = 7 * DAY,
    max_age: int | None = None,
) -> Lifecycle:
    """MAX_AGE unset is RETENTION, as ingest and the rotator's settings read it."""
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period=period)
    assert layout.table_period is not None
    return Lifecycle(
        layout=layout,
        period=layout.table_period,
        prebuild_periods=prebuild,
        grace_ms=grace,
        dial_down_delay_ms=15 * MINUTE,
        retention_ms=retention,
        max_age_ms=retention if max_age is None else max_age,
    )


def at(text: str) -> int:
    return parse_timestamp(text)


PERIODS = ("hour", "day", "week", "month")
instants = st.integers(min_value=0, max_value=MAX_TS_MS - 40 * DAY)


@settings(max_examples=300, deadline=None)  # pure logic; a loaded machine is not a failure
@given(period=st.sampled_from(PERIODS), ts=instants)
def test_every_table_name_parses_back_to_its_period(period: str, ts: int) -> None:
    life = lifecycle(period, retention=40 * DAY)
    table = life.table(ts)
    assert table.start_ms <= ts < table.end_ms
    assert life.parse(table.name) == table
    assert table.name == life.layout.table_for(ts)


@pytest.mark.parametrize(
    ("period", "name", "start"),
    [
        ("hour", "readings-2026-11-22-06", "2026-11-22T06:00:00Z"),
        ("day", "readings-2026-11-22", "2026-11-22T00:00:00Z"),
        ("week", "readings-2026-W47", "2026-11-16T00:00:00Z"),
        ("week", "readings-2027-W01", "2027-01-04T00:00:00Z"),
        ("month", "readings-2026-02", "2026-02-01T00:00:00Z"),
    ],
)
def test_names_of_each_period(period: str, name: str, start: str) -> None:
    table = lifecycle(period, retention=40 * DAY).parse(name)
    assert table is not None
    assert table.start_ms == at(start)


@pytest.mark.parametrize(
    "name",
    [
        "readings",
        "readings-",
        "readings-2026-11-22-old",  # a backup someone made
        "readings-2026-11-22-06",  # an hourly name under a daily layout
        "readings-2026-11",  # a monthly name
        "readings-2026-W47",  # a weekly name
        "readings-2026-02-30",  # no such day
        "readings-2026-13-01",
        "readings-2026-1-22",
        "readings-20261122",
        "readings-archive",
        "readings-eu-2026-11-22",  # another deployment's prefix
        "Readings-2026-11-22",
        "readings-2026-11-22 ",
        "xreadings-2026-11-22",
        "readings-٢٠٢٦-11-22",  # non-ASCII digits
        "readings-0000-01-01",
    ],
)
def test_a_name_that_is_not_exactly_ours_is_refused(name: str) -> None:
    assert lifecycle("day").parse(name) is None


@pytest.mark.parametrize("name", ["readings-2026-W54", "readings-2026-W00", "readings-2026-11-22-24"])
def test_impossible_weeks_and_hours_are_refused(name: str) -> None:
    period = "hour" if name.count("-") == 4 else "week"
    assert lifecycle(period, retention=40 * DAY).parse(name) is None


def test_phases_across_a_daily_boundary() -> None:
    life = lifecycle("day")
    sunday = life.table(at("2026-11-22T00:00:00Z"))
    assert life.phase(sunday, at("2026-11-21T23:59:59.999Z")) is Phase.UPCOMING
    assert life.phase(sunday, at("2026-11-22T00:00:00Z")) is Phase.CURRENT
    assert life.phase(sunday, at("2026-11-22T23:59:59.999Z")) is Phase.CURRENT
    assert life.phase(sunday, at("2026-11-23T00:00:00Z")) is Phase.GRACE
    # Ingest closes the period at end + GRACE; writes it accepted may land for DIAL_DOWN_DELAY more.
    assert life.closes_at(sunday) == at("2026-11-23T02:00:00Z")
    assert life.phase(sunday, at("2026-11-23T02:14:59.999Z")) is Phase.GRACE
    assert life.phase(sunday, at("2026-11-23T02:15:00Z")) is Phase.COLD
    # A reading up to MAX_AGE (here RETENTION, 7 days) old may still arrive until 2026-11-30T00:00,
    # and land up to DIAL_DOWN_DELAY later: only then may the table be exported and dropped.
    assert life.phase(sunday, at("2026-11-30T00:14:59.999Z")) is Phase.COLD
    assert life.phase(sunday, at("2026-11-30T00:15:00Z")) is Phase.EXPIRED


def test_with_a_shorter_max_age_retention_decides_when_a_table_expires() -> None:
    life = lifecycle("day", max_age=3 * DAY)
    sunday = life.table(at("2026-11-22T00:00:00Z"))
    assert life.last_write_at(sunday) == at("2026-11-26T00:15:00Z")
    assert life.phase(sunday, at("2026-11-29T23:59:59.999Z")) is Phase.COLD
    assert life.phase(sunday, at("2026-11-30T00:00:00Z")) is Phase.EXPIRED


@pytest.mark.parametrize("period", PERIODS)
def test_a_closed_tables_steps_fall_due_in_windows_one_period_long(period: str) -> None:
    life = lifecycle(period, retention=90 * DAY)
    table = life.table(at("2026-11-02T00:00:00Z"))
    length = table.end_ms - table.start_ms
    closed, review = life.dial_down_at(table), life.class_review_at(table)
    # It closes at end + GRACE + DIAL_DOWN_DELAY; the closing steps are due for one period after that
    assert [life.closing(table, t) for t in (closed - 1, closed, closed + length - 1, closed + length)] == [
        False,
        True,
        True,
        False,
    ]
    # Its class is reviewed a day after it closed, for one period
    assert review == closed + DAY
    assert [life.class_review_due(table, t) for t in (review - 1, review, review + length - 1, review + length)] == [
        False,
        True,
        True,
        False,
    ]


def test_no_class_review_for_a_table_that_expires_first() -> None:
    life = lifecycle("hour", grace=HOUR, retention=3 * HOUR)
    table = life.table(at("2026-11-22T05:00:00Z"))
    assert life.expires_at(table) < life.class_review_at(table)
    assert not life.class_review_due(table, life.class_review_at(table))


def test_wanted_tables_most_urgent_first() -> None:
    life = lifecycle("day")
    names = [t.name for t in life.wanted(at("2026-11-22T01:00:00Z"))]
    # current, the next two, then yesterday's (still in its grace window)
    assert names == ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24", "readings-2026-11-21"]
    names = [t.name for t in life.wanted(at("2026-11-22T02:00:00Z"))]
    assert names == ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24"]


def test_a_long_grace_keeps_several_hourly_tables_wanted() -> None:
    life = lifecycle("hour", prebuild=1, grace=150 * MINUTE, retention=DAY)
    names = [t.name for t in life.wanted(at("2026-11-22T06:10:00Z"))]
    assert names == [
        "readings-2026-11-22-06",
        "readings-2026-11-22-07",
        "readings-2026-11-22-05",
        "readings-2026-11-22-04",
        "readings-2026-11-22-03",
    ]


def test_wanted_months_follow_the_calendar() -> None:
    life = lifecycle("month", retention=90 * DAY)
    names = [t.name for t in life.wanted(at("2026-12-15T00:00:00Z"))]
    assert names == ["readings-2026-12", "readings-2027-01", "readings-2027-02"]


@settings(max_examples=300, deadline=None)  # pure logic; a loaded machine is not a failure
@given(
    period=st.sampled_from(PERIODS),
    table_ts=instants,
    now=instants,
    grace_minutes=st.integers(0, 600),
    max_age_hours=st.integers(0, 40 * 24),
)
def test_the_guard_refuses_every_table_a_reading_could_still_need(
    period: str, table_ts: int, now: int, grace_minutes: int, max_age_hours: int
) -> None:
    life = lifecycle(period, grace=grace_minutes * MINUTE, retention=40 * DAY, max_age=max_age_hours * HOUR)
    table = life.table(table_ts)
    # A table is needed while its readings are within retention, and while a reading up to MAX_AGE old
    # may still be accepted for it (its newest instant is just before its end) and land DIAL_DOWN_DELAY later
    deletable = now >= table.end_ms + 40 * DAY and now >= table.end_ms + max_age_hours * HOUR + 15 * MINUTE
    if deletable:
        life.check_deletable(table, now)
        assert life.phase(table, now) is Phase.EXPIRED
        assert table not in life.wanted(now)
    else:
        with pytest.raises(DeletionRefused):
            life.check_deletable(table, now)
        assert life.phase(table, now) is not Phase.EXPIRED


@pytest.mark.parametrize(
    ("table_day", "reason"),
    [
        ("2026-11-22", "current or a future"),
        ("2026-11-24", "current or a future"),
        ("2026-12-25", "current or a future"),
        ("2026-11-21", "still takes late readings"),
        ("2026-11-15", "younger than the retention"),
    ],
)
def test_the_guard_says_why(table_day: str, reason: str) -> None:
    life = lifecycle("day")
    with pytest.raises(DeletionRefused, match=reason):
        life.check_deletable(life.table(at(f"{table_day}T00:00:00Z")), at("2026-11-22T01:00:00Z"))


def test_the_guard_refuses_a_table_a_reading_up_to_max_age_old_may_still_reach() -> None:
    life = lifecycle("day", retention=7 * DAY)
    # Past retention (2026-11-22T00:00) but a 7-day-old reading accepted a moment ago may still land
    with pytest.raises(DeletionRefused, match="MAX_AGE"):
        life.check_deletable(life.table(at("2026-11-14T00:00:00Z")), at("2026-11-22T00:10:00Z"))


def test_the_guard_refuses_a_table_whose_accepted_writes_may_still_land() -> None:
    # Retention shorter than a day plus grace is refused by settings; build the edge by hand.
    life = lifecycle("hour", grace=HOUR, retention=HOUR + 16 * MINUTE)
    table = life.table(at("2026-11-22T05:00:00Z"))
    with pytest.raises(DeletionRefused, match="may still be landing"):
        life.check_deletable(table, at("2026-11-22T07:10:00Z"))


def test_a_lifecycle_whose_retention_is_too_short_is_refused() -> None:
    with pytest.raises(ValueError, match="shorter than retention"):
        lifecycle("day", grace=7 * DAY, retention=7 * DAY)
    with pytest.raises(ValueError, match="max age"):
        lifecycle("day", retention=7 * DAY, max_age=8 * DAY)
