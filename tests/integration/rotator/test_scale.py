"""What a run costs with hundreds of tables: it looks at a bounded number of them, only open
tables keep alarms and mappings, and a deployment whose closed tables still hold them (made
before closed tables shed them) is brought down a bounded step per run.

The history of closed tables is made here, directly, as the rotator leaves them; then the
rotator runs and its calls are counted (every client call, by operation).
"""

from __future__ import annotations

from collections import Counter

import pytest

from doubles.clocks import ManualClock
from rotator.lifecycle import Lifecycle, PeriodTable
from rotator.logic import AUDITED_PER_RUN, MAPPING_DELETES_PER_RUN
from rotator.settings import RotatorSettings
from rotator.specs import alarm_requests, create_mapping_request, create_table_request
from tests.integration.rotator.conftest import HOUR, MINUTE, World, at

pytestmark = pytest.mark.integration

#: The shipped defaults: hourly tables kept 30 days, two built ahead, 2 h of grace, closed 15 minutes later.
HOURLY = {
    "TABLE_PERIOD": "hour",
    "RETENTION": "30d",
    "PREBUILD_PERIODS": "2",
    "GRACE": "2h",
    "DIAL_DOWN_DELAY": "15m",
    # The widest MAX_AGE: a table is kept RETENTION + DIAL_DOWN_DELAY after its end, so 720 are
    # closed or in grace at 02:05, none expired.
    "MAX_AGE": "30d",
}
KINDS = ("write-throttles", "read-throttles", "system-errors")


def closed_history(
    world: World, settings: RotatorSettings, before: PeriodTable, count: int, *, settled: bool
) -> list[PeriodTable]:
    """``count`` tables of the periods before ``before``, as the rotator made them. Settled: as it
    leaves a closed table (on-demand, Standard-IA, no mapping or alarms); otherwise as an older
    version left one (provisioned, Standard, its mapping and three alarms)."""
    life = Lifecycle.from_settings(settings)
    made: list[PeriodTable] = []
    table = before
    for _ in range(count):
        table = life.table(table.start_ms - 1)
        request = create_table_request(settings, table)
        if settled:
            request.pop("ProvisionedThroughput", None)
            request["BillingMode"] = "PAY_PER_REQUEST"
            world.extras.classes[table.name] = "STANDARD_INFREQUENT_ACCESS"
        stream = world.dynamodb.create_table(**request)["TableDescription"]["LatestStreamArn"]
        if not settled and settings.hotkeys_function_arn is not None:
            world.lambda_.create_event_source_mapping(**create_mapping_request(settings, stream))
            for alarm in alarm_requests(settings, table):
                world.cloudwatch.put_metric_alarm(**alarm)
        made.append(table)
    return made


def calls_of_a_run(world: World, now: int, tables: int, **overrides: str) -> Counter[str]:
    """The calls of a steady run at ``now`` with ``tables`` settled closed tables behind the open ones."""
    overrides = {**HOURLY, **overrides}
    settings = world.settings(**overrides)
    life = Lifecycle.from_settings(settings)
    # Behind the tables the rotator builds itself (current, ahead, and those still taking late readings)
    oldest_built = min(t.start_ms for t in life.wanted(now))
    closed_history(world, settings, life.table(oldest_built), tables, settled=True)
    rotator, clients = world.rotator(ManualClock(now), **overrides)
    first = rotator.run()
    assert first.errors == [] and first.deleted == []
    clients.log.clear()
    again = rotator.run()
    assert again.errors == [] and again.changes == 0
    return Counter(clients.log.operations)


def test_a_run_makes_as_many_calls_with_1440_tables_as_with_720(world: World) -> None:
    # Given 30 days of hourly tables at 02:05: 719 closed or in grace, 00:00 to 04:00 built by the rotator
    now = at("2026-11-22T02:05:00Z")
    month = calls_of_a_run(world, now, 719)
    assert len(world.ours()) == 724
    # And, beside them, another deployment's 60 days of hourly tables kept for 60 days
    two_months = calls_of_a_run(world, now, 1439, RETENTION="60d", MAX_AGE="60d", TABLE_PREFIX="older")
    assert len([n for n in world.table_names() if n.startswith("older-")]) == 1444

    # Then only the listing grows (100 names a page); every other call is the same, one by one
    assert month.pop("ListTables") == 8 and two_months.pop("ListTables") == 22
    assert month == two_months
    # And a run describes the open tables (current, 2 ahead, 3 in grace at 02:05), the one that closed
    # within the hour, the one whose class review is due (closed a day ago), and AUDITED_PER_RUN closed
    # ones in turn: not the 720
    assert month["DescribeTable"] == 6 + 1 + 1 + AUDITED_PER_RUN
    assert sum(month.values()) == 54, month  # with 8 pages of ListTables, 62 calls; describing every table was 724


def test_only_open_tables_have_alarms_at_most_eighteen_with_hourly_tables(world: World) -> None:
    # Given the shipped hourly settings, When the rotator runs every 15 minutes for a day
    clock = ManualClock(at("2026-11-22T00:05:00Z"))
    rotator, _ = world.rotator(clock, **HOURLY)
    life = rotator.lifecycle
    counts = []
    for _ in range(4 * 24):
        assert rotator.run().errors == []
        tables = [t for t in map(life.parse, world.ours()) if t is not None]
        open_ = sorted(t.name for t in tables if life.phase(t, clock.now).open)
        # Then after every run exactly the open tables have alarms (and mappings)
        assert world.alarm_names() == sorted(f"{n}-{k}" for n in open_ for k in KINDS)
        assert world.mapped_tables() == open_
        counts.append(len(world.alarm_names()))
        clock.advance(15 * MINUTE)
    # The current hour, the two ahead, and those that ended less than GRACE + DIAL_DOWN_DELAY (2h15) ago:
    # six tables from minute 0 to 14 of each hour, five after; 18 alarms at most, whatever the retention
    assert max(counts) == 18 and min(counts) == 15


def test_closed_tables_left_with_capacity_mappings_and_alarms_are_brought_down_a_bounded_step_a_run(
    world: World,
) -> None:
    # Given 40 closed daily tables as an older version left them: provisioned, mapped and alarmed
    now = at("2026-12-15T12:05:00Z")
    settings = world.settings()
    life = Lifecycle.from_settings(settings)
    oldest_built = min(t.start_ms for t in life.wanted(now))
    closed_history(world, settings, life.table(oldest_built), 40, settled=False)
    assert len(world.mapped_tables()) == 40 and len(world.alarm_names()) == 120
    clock = ManualClock(now)
    rotator, clients = world.rotator(clock, RETENTION="60d", INFREQUENT_ACCESS_STORAGE_PERCENT="")
    legacy = [name for name in world.ours()]

    # When the rotator runs once
    first = rotator.run()
    # Then it removes MAPPING_DELETES_PER_RUN mappings and every stale alarm (up to 500 a run), and switches
    # the tables it looks at to on-demand
    assert first.errors == []
    assert len([r for r in first.removed if r.startswith("stream mapping")]) == MAPPING_DELETES_PER_RUN
    assert "15 more stale stream mappings: next runs" in [s.reason for s in first.skipped]
    assert world.alarm_names() == sorted(f"{n}-{k}" for n in world.ours() if n not in legacy for k in KINDS)
    # (the one that closed today, due anyway, and AUDITED_PER_RUN others in turn)
    assert len(first.dialled_down) == 1 + AUDITED_PER_RUN

    # And an hourly run after another settles the rest: every table is seen within 40 / 12 hours
    for _ in range(3):
        clock.advance(HOUR)
        assert rotator.run().errors == []
    assert [world.billing(name) for name in legacy] == ["PAY_PER_REQUEST"] * 40
    assert not set(world.mapped_tables()) & set(legacy)
    clients.log.clear()
    clock.advance(HOUR)
    assert rotator.run().changes == 0 and clients.log.changes == []
