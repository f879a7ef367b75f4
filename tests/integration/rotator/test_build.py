"""Build runs: ingest asks for the table of a period that has none (a reading up to MAX_AGE old from
before the deployment, or a backfill); the rotator builds it closed (on-demand, TTL, PITR, nothing an
open table keeps), and only when a reading of that period can still be admitted.

The world: daily tables, RETENTION 7 days, MAX_AGE 3 days (the default), provisioned at 2,000 WCU.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from doubles.clocks import ManualClock
from rotator.logic import CREATING_POLL_S
from tests.integration.rotator.conftest import HOUR, MINUTE, Clients, Ticks, World, at

pytestmark = pytest.mark.integration


def test_a_build_run_makes_a_closed_periods_table_that_takes_writes_and_pays_for_nothing_idle(world: World) -> None:
    # Given a deployment started today at noon (no table of the 20th), and a reading two days old
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock)
    rotator.run()
    assert "readings-2026-11-20" not in world.ours()
    clients.log.clear()
    # When ingest asks for its table
    summary = rotator.build(["readings-2026-11-20"])
    # Then it is built on-demand (not at the 2,000 WCU an open table gets), with TTL and PITR, and no
    # alarms, mapping or warm throughput: it is closed, and takes a trickle of late readings
    assert summary.created == ["readings-2026-11-20"] and summary.errors == []
    assert summary.configured == {"readings-2026-11-20": ["ttl", "point_in_time_recovery"]}
    assert summary.phases == {"readings-2026-11-20": "cold"}
    assert world.billing("readings-2026-11-20") == "PAY_PER_REQUEST"
    assert world.ttl("readings-2026-11-20")["TimeToLiveStatus"] == "ENABLED"
    assert world.pitr("readings-2026-11-20") == "ENABLED"
    assert world.tags("readings-2026-11-20")["timeseries:period"] == "2026-11-20"
    assert not [a for a in world.alarm_names() if a.startswith("readings-2026-11-20-")]
    assert "readings-2026-11-20" not in world.mapped_tables()
    # And the run looked at that table alone: no listing, no other table
    assert "ListTables" not in clients.log.operations
    assert sorted(set(clients.log.operations)) == [
        "CreateTable",
        "DescribeContinuousBackups",
        "DescribeContributorInsights",
        "DescribeTable",
        "DescribeTimeToLive",
        "UpdateContinuousBackups",
        "UpdateTimeToLive",
    ]
    # And a late reading can be written to it
    world.dynamodb.put_item(
        TableName="readings-2026-11-20", Item={"pk": {"S": "s#0"}, "sk": {"S": "2026-11-20T10:00:00.000Z#a#1"}}
    )
    # And scheduled runs keep it (it is within retention) without changing it
    clock.advance(HOUR)
    again = rotator.run()
    assert "readings-2026-11-20" in world.ours() and again.errors == []
    assert "readings-2026-11-20" not in again.configured and "readings-2026-11-20" not in again.deleted


def test_a_build_run_refuses_what_no_admitted_reading_can_need(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, _ = world.rotator(clock)
    asked = [
        "readings-2026-11-18",  # ended more than MAX_AGE (3 days) ago: no reading of it is admitted
        "readings-2026-11-25",  # past the 2 periods built ahead
        "readings-2026-11-20-old",  # not exactly <prefix>-<label>
        "other-2026-11-20",
    ]
    summary = rotator.build(asked)
    assert summary.created == [] and world.ours() == []
    reasons = {s.table: s.reason for s in summary.skipped}
    assert "older than MAX_AGE" in reasons["readings-2026-11-18"]
    assert "older than MAX_AGE" in reasons["readings-2026-11-25"]
    assert reasons["readings-2026-11-20-old"].startswith("not ours")
    assert reasons["other-2026-11-20"].startswith("not ours")
    # The oldest period a reading may still be admitted to is built: the 19th (00:00 is within 3 days of noon)
    assert rotator.build(["readings-2026-11-19"]).created == ["readings-2026-11-19"]


def test_asking_twice_builds_once(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, _ = world.rotator(clock)
    first = rotator.build(["readings-2026-11-21"])
    second = rotator.build(["readings-2026-11-21"])
    assert first.created == ["readings-2026-11-21"]
    assert second.created == [] and second.configured == {} and second.errors == []


def creating_until(clients: Clients, ticks: Ticks, active_at_s: float) -> None:
    """DynamoDB keeps new tables CREATING until ``active_at_s`` on the test's ticks (moto makes them ACTIVE at once)."""

    def creating(parsed: dict[str, Any], key: str) -> None:
        if ticks() < active_at_s:
            parsed[key]["TableStatus"] = "CREATING"

    clients.edit("CreateTable", partial(creating, key="TableDescription"))
    clients.edit("DescribeTable", partial(creating, key="Table"))


def test_a_build_run_waits_while_its_table_is_creating_and_sets_it_up_as_soon_as_it_is_active(world: World) -> None:
    # Given DynamoDB takes 42 s to make the table (the run has Lambda's 300 s)
    clock, ticks = ManualClock(at("2026-11-22T12:00:00Z")), Ticks()
    rotator, clients = world.rotator(clock, ticks=ticks)
    creating_until(clients, ticks, 42.0)
    # When ingest asks for it
    built = rotator.build(["readings-2026-11-20"], budget_ms=300_000)
    # Then the run describes it every few seconds until it is ACTIVE, and sets up its TTL and PITR then
    assert built.created == ["readings-2026-11-20"] and built.creating == [] and built.errors == []
    assert built.configured == {"readings-2026-11-20": ["ttl", "point_in_time_recovery"]}
    assert world.ttl("readings-2026-11-20")["TimeToLiveStatus"] == "ENABLED"
    assert world.pitr("readings-2026-11-20") == "ENABLED"
    assert 42.0 <= ticks() < 42.0 + CREATING_POLL_S
    assert clients.log.operations.count("DescribeTable") == len(ticks.slept) + 1 == 10


def test_a_build_run_whose_table_outlasts_its_time_leaves_it_to_the_next_run_that_looks_at_it(world: World) -> None:
    # Given DynamoDB still CREATING the table when the build run's time is up (20 s left, 10 s kept back)
    clock, ticks = ManualClock(at("2026-11-22T12:00:00Z")), Ticks()
    rotator, clients = world.rotator(clock, ticks=ticks)
    creating_until(clients, ticks, 3_600.0)
    built = rotator.build(["readings-2026-11-20"], budget_ms=20_000)
    # Then the run stops waiting within its time, and says which table it left CREATING (the handler fails
    # the invocation on it, so Lambda's retries wait again: test_handler)
    assert built.created == ["readings-2026-11-20"] and built.creating == ["readings-2026-11-20"]
    assert built.configured == {} and ticks() <= 10.0
    assert world.ttl("readings-2026-11-20")["TimeToLiveStatus"] == "DISABLED"
    # And a scheduled run that looks at it once it is ACTIVE (a closed table is looked at in turn) finds it
    # made after it closed, so without an open table's setup, and sets up its TTL and PITR
    ticks.now_s = 3_600.0
    clock.advance(15 * MINUTE)
    later, _ = world.rotator(clock)
    summary = later.run()
    assert summary.configured["readings-2026-11-20"] == ["ttl", "point_in_time_recovery"]
    assert world.ttl("readings-2026-11-20")["TimeToLiveStatus"] == "ENABLED"
