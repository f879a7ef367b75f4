"""Long runs on a controllable clock: nine days of hourly runs over daily tables, and a
day of quarter-hourly runs over hourly tables, end with exactly the expected tables,
billing modes, table classes, mappings and alarms; after every run the live tables are
ready, only open tables have alarms, and no table a reading could still need is gone; a
last repeated run changes nothing.

The expectation is computed here from the settings with plain date arithmetic, not
with the rotator's own lifecycle module, so a wrong rule there cannot hide itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from doubles.clocks import ManualClock
from rotator.logic import Rotator
from rotator.summary import RunSummary
from tests.integration.rotator.conftest import HOUR, MINUTE, World, at

pytestmark = pytest.mark.integration

KINDS = ("write-throttles", "read-throttles", "system-errors")


def iso(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


@dataclass(frozen=True)
class Periods:
    """Tables of ``step`` named with ``fmt``, made since ``first``, kept ``retention`` after their end,
    built ``prebuild`` periods ahead."""

    first: datetime
    step: timedelta
    retention: timedelta
    prebuild: int
    fmt: str

    def expected(self, now_ms: int) -> dict[str, datetime]:
        """Name -> period end of every table that must exist at ``now_ms``: made since ``first``,
        not past retention, at most ``prebuild`` periods ahead."""
        now = iso(now_ms)
        current = self.first
        while current + self.step <= now:
            current += self.step
        found: dict[str, datetime] = {}
        start = self.first
        while start <= current + self.prebuild * self.step:
            end = start + self.step
            if end + self.retention > now:
                found[f"readings-{start.strftime(self.fmt)}"] = end
            start += self.step
        return found

    def run(self, rotator: Rotator, world: World, now_ms: int) -> tuple[RunSummary, dict[str, datetime]]:
        """One run at ``now_ms``: no error, the current table and the ``prebuild`` next ones ready, and
        exactly the tables that must exist (returned with the run's summary)."""
        summary = rotator.run()
        assert summary.errors == [], summary.errors
        assert summary.periods_ready == 1 + self.prebuild
        expected = self.expected(now_ms)
        assert world.ours() == sorted(expected)
        return summary, expected


def open_tables(expected: dict[str, datetime], now_ms: int, cold_after: timedelta) -> list[str]:
    return sorted(name for name, end in expected.items() if iso(now_ms) < end + cold_after)


def check_world(world: World, expected: dict[str, datetime], now_ms: int, cold_after: timedelta) -> None:
    now = iso(now_ms)
    assert world.ours() == sorted(expected)
    for name, end in expected.items():
        cold = now >= end + cold_after
        assert world.billing(name) == ("PAY_PER_REQUEST" if cold else "PROVISIONED"), f"{name} at {now}"
        assert cold or world.capacity(name) == (2000, 100), f"{name} at {now}"
        # A day after it closes, a table nobody reads (moto reports no reads) moves to Standard-IA
        reviewed = now >= end + cold_after + timedelta(days=1)
        assert world.table_class(name) == ("STANDARD_INFREQUENT_ACCESS" if reviewed else "STANDARD"), name
        assert world.insights(name) == (None if cold else "THROTTLED_KEYS"), f"{name} at {now}"
    live = open_tables(expected, now_ms, cold_after)
    assert world.mapped_tables() == live, "exactly one mapping per open table, none left over"
    assert world.alarm_names() == sorted(f"{name}-{kind}" for name in live for kind in KINDS)


#: Long enough for tables to be built, dialled down, moved to Standard-IA and dropped in turn: the 7-day
#: retention drops October 31st's table in the run at 00:30 on the 8th and November 1st's a day later. Every
#: day after that repeats the ninth (build one, dial one down, review one, drop one), so nine days exercise
#: every transition twice; twelve added three more of the same, and a quarter of the test's time.
DAYS = 9


def test_days_of_hourly_runs_over_daily_tables(world: World) -> None:
    # Given daily tables, 7 days of retention, 2 prebuilt, grace 2h + 15 minutes of dial-down delay
    start = at("2026-11-01T00:30:00Z")
    clock = ManualClock(start)
    rotator, clients = world.rotator(clock)
    # Kept RETENTION after its end, and DIAL_DOWN_DELAY more: MAX_AGE is RETENTION (unset)
    step, retention = timedelta(days=1), timedelta(days=7, minutes=15)
    # At 00:30 on the 1st, October 31st still takes late readings: it is built too.
    first = datetime(2026, 10, 31, tzinfo=UTC)
    daily = Periods(first, step, retention, prebuild=2, fmt="%Y-%m-%d")
    deleted: list[str] = []
    dialled: list[str] = []

    # When the rotator runs every hour for DAYS days
    for _ in range(DAYS * 24):
        # Then after every run: no error, the current table and the next two are ready,
        summary, expected = daily.run(rotator, world, clock.now)
        # only the open tables have alarms,
        live = open_tables(expected, clock.now, timedelta(hours=2, minutes=15))
        assert world.alarm_names() == sorted(f"{name}-{kind}" for name in live for kind in KINDS)
        # and nothing was dropped before its newest reading passed retention (MAX_AGE is RETENTION here:
        # a reading 7 days old may still land 15 minutes later).
        for name in summary.deleted:
            day = datetime.strptime(name.removeprefix("readings-"), "%Y-%m-%d").replace(tzinfo=UTC)
            assert iso(clock.now) >= day + step + retention
        deleted.extend(summary.deleted)
        dialled.extend(d.table for d in summary.dialled_down)
        clock.advance(HOUR)
    clock.advance(-HOUR)

    # Then the last day's state is exactly what the rules say
    expected = daily.expected(clock.now)
    assert sorted(expected) == [f"readings-2026-11-{d:02d}" for d in range(DAYS - 7, DAYS + 3)]
    check_world(world, expected, clock.now, timedelta(hours=2, minutes=15))
    # Every table that closed was switched to on-demand once, every expired one dropped once
    assert dialled == [f"readings-{(first + timedelta(days=i)):%Y-%m-%d}" for i in range(DAYS)]
    assert deleted == [f"readings-{(first + timedelta(days=i)):%Y-%m-%d}" for i in range(DAYS - 7)]

    # And one more run changes nothing
    clients.log.clear()
    again = rotator.run()
    assert clients.log.changes == [] and again.changes == 0 and again.skipped == []


def test_a_day_of_quarter_hourly_runs_over_hourly_tables(world: World) -> None:
    overrides = {
        "TABLE_PERIOD": "hour",
        "RETENTION": "12h",
        "GRACE": "30m",
        "DIAL_DOWN_DELAY": "10m",
        "PREBUILD_PERIODS": "3",
        "MAX_DELETES_PER_RUN": "2",
    }
    start = at("2026-11-22T00:05:00Z")
    clock = ManualClock(start)
    rotator, clients = world.rotator(clock, **overrides)
    first = datetime(2026, 11, 21, 23, tzinfo=UTC)  # 23:00 is still in grace at 00:05
    hourly = Periods(first, timedelta(hours=1), timedelta(hours=12, minutes=10), prebuild=3, fmt="%Y-%m-%d-%H")

    for _ in range(24 * 4):  # past the 12 hours of retention: tables are dropped two a run at most
        hourly.run(rotator, world, clock.now)
        clock.advance(15 * MINUTE)
    clock.advance(-15 * MINUTE)

    expected = hourly.expected(clock.now)
    assert len(expected) == 12 + 1 + 3  # twelve hours kept, the current one, three ahead
    check_world(world, expected, clock.now, timedelta(minutes=40))

    clients.log.clear()
    again = rotator.run()
    assert clients.log.changes == [] and again.changes == 0 and again.skipped == []
