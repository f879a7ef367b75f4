"""Runs around a period boundary: just before, exactly at, and after it (and after its grace).

Given the daily tables of the conftest (retention 7d, 2 prebuilt, grace 2h,
closed 15 minutes after the grace), each step runs twice: the second run
must find nothing to do.
"""

from __future__ import annotations

from typing import Any

import pytest

from doubles.clocks import ManualClock
from rotator.logic import Rotator
from rotator.summary import RunSummary
from tests.integration.rotator.conftest import MINUTE, Clients, World, at

pytestmark = pytest.mark.integration


def run_twice(rotator: Rotator, clients: Clients) -> RunSummary:
    """Run, then check a second run at the same instant changes nothing."""
    clients.log.clear()
    summary = rotator.run()
    assert summary.errors == []
    clients.log.clear()
    again = rotator.run()
    assert clients.log.changes == [], "a second run must change nothing"
    assert again.changes == 0 and again.errors == [] and again.skipped == []
    return summary


def mapping_of(world: World, table: str) -> dict[str, Any]:
    stream = world.table(table)["LatestStreamArn"]
    found = [m for m in world.mappings() if m["EventSourceArn"] == stream]
    assert len(found) == 1, f"{table} must have exactly one mapping"
    return found[0]


def test_the_first_run_builds_the_current_and_next_tables_fully_set_up(world: World) -> None:
    # Given no tables, When the rotator runs at noon
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock)
    summary = run_twice(rotator, clients)

    # Then today's table and the next two exist, with the stack's schema and the configured capacity
    expected = ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24"]
    assert summary.created == expected
    assert world.ours() == expected
    assert summary.current_table == "readings-2026-11-22"
    assert summary.periods_ready == 3
    for name in expected:
        table = world.table(name)
        assert table["TableStatus"] == "ACTIVE"
        assert table["KeySchema"] == [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ]
        assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}
        assert table["DeletionProtectionEnabled"] is True
        assert world.capacity(name) == (2000, 100)
        assert world.ttl(name) == {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}
        assert world.pitr(name) == "ENABLED"
        # And Contributor Insights, as the stack's single table has it
        assert world.insights(name) == "THROTTLED_KEYS"
        assert world.table_class(name) == "STANDARD"
        assert world.tags(name) == {
            "timeseries:managed-by": "rotator",
            "timeseries:table-prefix": "readings",
            "timeseries:period": name.removeprefix("readings-"),
        }
        # And its stream feeds the hot-key function, with a failure plan
        mapping = mapping_of(world, name)
        assert mapping["FunctionArn"] == world.function_arn
        assert mapping["StartingPosition"] == "TRIM_HORIZON"
        assert mapping["BisectBatchOnFunctionError"] is True
        assert mapping["MaximumRetryAttempts"] == 5
        assert mapping["MaximumRecordAgeInSeconds"] == 3600
        assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert mapping["DestinationConfig"] == {"OnFailure": {"Destination": world.dead_letter_arn}}
        assert sorted(summary.configured[name]) == [
            "alarms",
            "contributor_insights",
            "point_in_time_recovery",
            "stream_mapping",
            "ttl",
        ]
    # And each table has its three alarms, notifying the topic
    alarms = world.alarms()
    assert sorted(a["AlarmName"] for a in alarms) == sorted(
        f"{name}-{kind}" for name in expected for kind in ("write-throttles", "read-throttles", "system-errors")
    )
    for alarm in alarms:
        assert alarm["AlarmActions"] == alarm["OKActions"] == [world.topic_arn]


def test_across_a_daily_boundary(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock)
    run_twice(rotator, clients)

    # Just before midnight: nothing to do, everything is built already
    clock.now = at("2026-11-22T23:59:59.999Z")
    before = run_twice(rotator, clients)
    assert before.changes == 0
    assert before.current_table == "readings-2026-11-22"

    # Exactly at midnight: the 25th is prebuilt; the 22nd is in its grace window, still at full capacity
    clock.now = at("2026-11-23T00:00:00Z")
    boundary = run_twice(rotator, clients)
    assert boundary.current_table == "readings-2026-11-23"
    assert boundary.created == ["readings-2026-11-25"]
    assert boundary.dialled_down == []
    assert boundary.phases["readings-2026-11-22"] == "grace"
    assert world.capacity("readings-2026-11-22") == (2000, 100)
    assert world.ours() == [f"readings-2026-11-{d}" for d in (22, 23, 24, 25)]

    # Ingest closes the 22nd at 02:00; accepted writes may land until 02:15: still untouched
    clock.now = at("2026-11-23T02:14:59.999Z")
    assert run_twice(rotator, clients).changes == 0
    assert world.capacity("readings-2026-11-22") == (2000, 100)

    # After grace and the dial-down delay the table closes: it pays for no capacity (on-demand) ...
    clock.now = at("2026-11-23T02:15:00Z")
    after = run_twice(rotator, clients)
    assert [(d.table, d.write, d.read) for d in after.dialled_down] == [("readings-2026-11-22", (2000, 0), (100, 0))]
    assert after.phases["readings-2026-11-22"] == "cold"
    assert world.billing("readings-2026-11-22") == "PAY_PER_REQUEST"
    assert [world.billing(f"readings-2026-11-{d}") for d in (23, 24, 25)] == ["PROVISIONED"] * 3
    assert [world.capacity(f"readings-2026-11-{d}") for d in (23, 24, 25)] == [(2000, 100)] * 3
    # ... has no Contributor Insights, no alarms and no mapping: nothing writes to it at a rate worth watching
    assert after.configured == {"readings-2026-11-22": ["contributor_insights_off"]}
    assert world.insights("readings-2026-11-22") is None
    assert not [name for name in world.alarm_names() if name.startswith("readings-2026-11-22-")]
    assert "readings-2026-11-22" not in world.mapped_tables()
    assert sorted(r.split(" ")[0] for r in after.removed) == ["alarm"] * 3 + ["stream"]
    # ... and still takes the late readings ingest lets through (up to MAX_AGE)
    item = {"pk": {"S": "sensor-1#0"}, "sk": {"S": "2026-11-22T23:59:59.000Z#late"}}
    world.dynamodb.put_item(TableName="readings-2026-11-22", Item=item)


@pytest.mark.parametrize(
    ("max_age", "last_moment"),
    [
        # MAX_AGE as long as RETENTION: a 7-day-old reading of the 22nd may arrive until 2026-11-30T00:00
        # and land 15 minutes (DIAL_DOWN_DELAY) later
        ("7d", "2026-11-30T00:14:59.999Z"),
        # A shorter MAX_AGE (unset: 3 days): the last write lands long before; retention decides (end + 7 days)
        ("3d", "2026-11-29T23:59:59.999Z"),
        (None, "2026-11-29T23:59:59.999Z"),
    ],
)
def test_a_table_is_dropped_once_past_retention_and_no_late_reading_can_reach_it(
    world: World, max_age: str | None, last_moment: str
) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock, **({"MAX_AGE": max_age} if max_age else {}))
    run_twice(rotator, clients)

    clock.now = at(last_moment)
    rotator.run()  # a week later: the closed tables are switched to on-demand, then moved to Standard-IA
    run_twice(rotator, clients)
    assert "readings-2026-11-22" in world.ours()

    clock.advance(1)
    summary = run_twice(rotator, clients)
    assert summary.deleted == ["readings-2026-11-22"]
    assert "readings-2026-11-22" not in world.ours()
    # Its mapping and alarms went when it closed, days before
    assert "readings-2026-11-22" not in world.mapped_tables()
    assert not [name for name in world.alarm_names() if name.startswith("readings-2026-11-22-")]


def test_on_demand_tables_are_pre_warmed_and_stay_on_demand(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock, BILLING_MODE="PAY_PER_REQUEST", WARM_WRITES_PER_S="20000")
    run_twice(rotator, clients)
    for name in world.ours():
        table = world.table(name)
        assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert table["WarmThroughput"]["WriteUnitsPerSecond"] == 20000

    clock.now = at("2026-11-23T03:00:00Z")
    summary = run_twice(rotator, clients)
    assert summary.phases["readings-2026-11-22"] == "cold"
    assert summary.dialled_down == []
    assert world.billing("readings-2026-11-22") == "PAY_PER_REQUEST"


def test_a_raised_configuration_reaches_the_tables_still_to_be_written(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock)
    run_twice(rotator, clients)

    # When the operator raises WRITE_CAPACITY, the current and upcoming tables follow (never down)
    raised, raised_clients = world.rotator(clock, WRITE_CAPACITY="3000")
    summary = run_twice(raised, raised_clients)
    assert {t for t, steps in summary.configured.items() if "capacity_raised" in steps} == set(world.ours())
    assert [world.capacity(n) for n in world.ours()] == [(3000, 100)] * 3

    lowered, lowered_clients = world.rotator(clock, WRITE_CAPACITY="1000")
    assert run_twice(lowered, lowered_clients).changes == 0
    assert [world.capacity(n) for n in world.ours()] == [(3000, 100)] * 3


def test_a_drifted_mapping_and_alarm_are_put_back(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock)
    run_twice(rotator, clients)

    # When someone turns bisect off on a mapping and edits an alarm by hand
    mapping = mapping_of(world, "readings-2026-11-23")
    world.lambda_.update_event_source_mapping(UUID=mapping["UUID"], BisectBatchOnFunctionError=False)
    world.put_alarm_by_hand("readings-2026-11-23-read-throttles", "ReadThrottleEvents", 1000.0)
    # Then the next run restores both, and only those
    summary = run_twice(rotator, clients)
    assert summary.configured == {"readings-2026-11-23": ["stream_mapping_updated", "alarms"]}
    assert mapping_of(world, "readings-2026-11-23")["BisectBatchOnFunctionError"] is True
    alarm = next(a for a in world.alarms() if a["AlarmName"] == "readings-2026-11-23-read-throttles")
    assert alarm["Threshold"] == 1.0 and alarm["AlarmActions"] == [world.topic_arn]


def test_a_late_first_deploy_also_builds_the_table_still_taking_late_readings(world: World) -> None:
    # At 01:00 yesterday's period is still open to late readings (until 02:00)
    clock = ManualClock(at("2026-11-22T01:00:00Z"))
    rotator, clients = world.rotator(clock)
    summary = run_twice(rotator, clients)
    assert summary.created == [
        "readings-2026-11-22",
        "readings-2026-11-23",
        "readings-2026-11-24",
        "readings-2026-11-21",
    ]
    # And it closes like any other once its grace and the delay are over
    clock.advance(90 * MINUTE)
    assert [d.table for d in run_twice(rotator, clients).dialled_down] == ["readings-2026-11-21"]
