"""What the rotator must never do: change anything in a dry run, touch a table that is
not exactly its own, or drop a current, future or still-needed table."""

from __future__ import annotations

from typing import Any

import pytest

from doubles.clocks import ManualClock
from rotator.lifecycle import Lifecycle, PeriodTable, Phase
from tests.integration.rotator.conftest import HOUR, World, at
from tests.integration.rotator.test_faults import prepared

pytestmark = pytest.mark.integration


def snapshot(world: World) -> dict[str, Any]:
    """Everything a run could change, in comparable form."""
    tables = {
        name: (
            world.capacity(name),
            world.billing(name),
            world.insights(name),
            world.table_class(name),
            world.ttl(name),
            world.pitr(name),
            world.tags(name),
            world.table(name)["TableStatus"],
        )
        for name in world.table_names()
    }
    mappings = sorted((m["UUID"], m["EventSourceArn"], m.get("BisectBatchOnFunctionError")) for m in world.mappings())
    alarms = sorted((a["AlarmName"], a.get("AlarmDescription"), a.get("Threshold")) for a in world.alarms())
    return {"tables": tables, "mappings": mappings, "alarms": alarms}


def test_a_dry_run_on_an_empty_account_reports_the_tables_and_makes_none(world: World) -> None:
    rotator, clients = world.rotator(ManualClock(at("2026-11-22T12:00:00Z")))
    summary = rotator.run(dry_run=True)
    assert summary.dry_run
    assert summary.created == ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24"]
    assert clients.log.changes == []
    assert world.table_names() == [] and world.mappings() == [] and world.alarm_names() == []
    assert summary.to_dict()["dry_run"] is True


def test_a_dry_run_reports_every_change_a_live_run_would_make_and_makes_none(world: World) -> None:
    # Given a run with creations, closings and a drop to do
    rotator, clients, _ = prepared(world)
    before = snapshot(world)

    # When it is a dry run
    dry = rotator.run(dry_run=True)

    # Then nothing changed, not one mutating call was sent
    assert clients.log.changes == []
    assert snapshot(world) == before
    # And the summary lists what a live run then does, item for item
    live = rotator.run()
    assert live.errors == []
    assert dry.created == live.created == ["readings-2026-11-30", "readings-2026-12-01", "readings-2026-12-02"]
    assert dry.dialled_down == live.dialled_down
    assert dry.deleted == live.deleted == ["readings-2026-11-22"]
    assert dry.removed == live.removed
    assert len([r for r in dry.removed if r.startswith("stream mapping")]) == 3


def test_dry_run_in_the_environment_wins_over_the_caller(world: World) -> None:
    rotator, clients = world.rotator(ManualClock(at("2026-11-22T12:00:00Z")), DRY_RUN="true")
    summary = rotator.run(dry_run=False)
    assert summary.dry_run and summary.created
    assert clients.log.changes == [] and world.table_names() == []


def test_tables_that_only_share_the_prefix_are_never_touched(world: World) -> None:
    # Given tables that are not exactly <prefix>-<day label>, and old alarms that are not ours
    foreign = [
        "readings",
        "readings-archive",
        "readings-2026-11-22-old",
        "readings-2026-13-01",
        "readings-2026-11-01-06",
        "readings-2026-W47",
        "readings-eu-2026-11-01",
    ]
    for name in foreign:
        world.create_foreign(name)
    world.put_alarm_by_hand(
        "readings-2026-10-02-write-throttles", "WriteThrottleEvents", 1.0, AlarmDescription="made by hand"
    )
    before = {name: (world.tags(name), world.ttl(name), world.table(name)["TableStatus"]) for name in foreign}

    # When the rotator runs across a month
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, _ = world.rotator(clock)
    first = rotator.run()
    clock.now = at("2026-12-25T12:00:00Z")
    later = rotator.run()

    # Then each is reported as not ours and left exactly as it was: no tags, TTL, mapping or alarm
    assert first.errors == [] and later.errors == []
    assert {s.table for s in first.skipped if s.reason.startswith("not ours")} == set(foreign) - {"readings"}
    assert {name: (world.tags(name), world.ttl(name), world.table(name)["TableStatus"]) for name in foreign} == before
    assert not set(world.mapped_tables()) & set(foreign)
    assert not [
        a
        for a in world.alarm_names()
        if any(
            a.startswith(f"{name}-") and a[len(name) + 1 :] in ("write-throttles", "read-throttles", "system-errors")
            for name in foreign
        )
    ]
    assert "readings-2026-10-02-write-throttles" in world.alarm_names()


def test_a_table_with_our_name_that_we_did_not_create_is_never_changed_or_dropped(world: World) -> None:
    # Given someone made tables named like ours by hand: an old one and the next day's
    world.create_foreign("readings-2026-10-01")
    world.create_foreign(
        "readings-2026-11-23",
        BillingMode="PROVISIONED",
        ProvisionedThroughput={"ReadCapacityUnits": 50, "WriteCapacityUnits": 500},
    )
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, _ = world.rotator(clock)

    # When the rotator runs while the 23rd is upcoming, then closed, then expired
    upcoming = rotator.run()
    clock.now = at("2026-11-22T13:00:00Z")
    again = rotator.run()
    clock.now = at("2026-11-24T12:00:00Z")
    closed = rotator.run()
    clock.now = at("2026-12-02T12:00:00Z")
    expired = rotator.run()

    # Then, while it takes the 23rd's readings, it is watched (alarms) but not changed: no stream, TTL,
    # PITR, Contributor Insights or capacity (the role may change only tables carrying the rotator's tags)
    assert "readings-2026-11-23" not in upcoming.created
    assert upcoming.configured["readings-2026-11-23"] == ["alarms"]
    assert "setup: not created by this rotator" in " ".join(
        s.reason for s in upcoming.skipped if s.table == "readings-2026-11-23"
    )
    assert "readings-2026-11-23" not in again.configured and "readings-2026-11-23" not in world.mapped_tables()
    assert world.ttl("readings-2026-11-23")["TimeToLiveStatus"] == "DISABLED"
    assert world.insights("readings-2026-11-23") is None
    # And it is never switched to on-demand or dropped, and neither is the old one
    assert "on-demand: not created by this rotator" in " ".join(
        s.reason for s in closed.skipped if s.table == "readings-2026-11-23"
    )
    assert world.billing("readings-2026-11-23") == "PROVISIONED"
    assert world.capacity("readings-2026-11-23") == (500, 50)
    assert {"readings-2026-10-01", "readings-2026-11-23"} <= set(world.ours())
    assert not {"readings-2026-10-01", "readings-2026-11-23"} & set(expired.deleted)
    assert "not created by this rotator" in " ".join(
        s.reason for s in expired.skipped if s.table == "readings-2026-10-01"
    )
    assert [e for e in (*upcoming.errors, *again.errors, *closed.errors, *expired.errors)] == []


def test_the_guard_refuses_to_drop_live_tables_even_when_the_lifecycle_is_wrong(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a rotator that has built today's table and the next two
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, _ = world.rotator(clock)
    rotator.run()

    # When a bug makes every table look expired
    def always_expired(self: Lifecycle, table: PeriodTable, now_ms: int) -> Phase:
        return Phase.EXPIRED

    monkeypatch.setattr(Lifecycle, "phase", always_expired)
    summary = rotator.run()

    # Then the deletion guard refuses each one, says why, and every table is still there, with its mapping
    # and alarms (the sweep never takes them from the current or a future period's table)
    assert summary.deleted == []
    assert sorted((e.table, e.code) for e in summary.errors) == [
        ("readings-2026-11-22", "DeletionRefused"),
        ("readings-2026-11-23", "DeletionRefused"),
        ("readings-2026-11-24", "DeletionRefused"),
    ]
    assert {e.message for e in summary.errors} == {"it is the current or a future period's table"}
    assert world.ours() == ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24"]
    assert len(world.mapped_tables()) == 3 and len(world.alarm_names()) == 9


def test_tables_are_created_deletion_protected_and_only_the_rotator_lifts_it_to_drop(world: World) -> None:
    rotator, _, _ = prepared(world)
    assert world.table("readings-2026-11-23")["DeletionProtectionEnabled"] is True
    with pytest.raises(world.dynamodb.exceptions.ClientError, match=r"DeletionProtect|deletion protection"):
        world.dynamodb.delete_table(TableName="readings-2026-11-23")
    assert rotator.run().deleted == ["readings-2026-11-22"]


def test_max_deletes_per_run_zero_never_drops(world: World) -> None:
    rotator, _, _ = prepared(world, MAX_DELETES_PER_RUN="0")
    summary = rotator.run()
    assert summary.deleted == []
    assert "MAX_DELETES_PER_RUN (0)" in " ".join(s.reason for s in summary.skipped)
    assert "readings-2026-11-22" in world.ours()


def test_tables_that_cannot_be_retired_do_not_keep_younger_ones_from_being_dropped(world: World) -> None:
    # Given twelve tables named like ours for days long past retention that carry no ownership tags (point-in-time
    # restores under the old names, say): they can never be dropped, and are more than a run's expired slice
    foreign = [f"readings-2026-10-{day:02d}" for day in range(1, 13)]
    for name in foreign:
        world.create_foreign(name)
    rotator, _, clock = prepared(world)
    # When the rotator runs while yesterday's table expires
    summary = rotator.run()
    # Then the table past retention is dropped all the same: the overdue ones are looked at in turn, two a run
    assert summary.deleted == ["readings-2026-11-22"]
    assert len([s for s in summary.skipped if s.table in foreign and "not created by this rotator" in s.reason]) == 2
    # And they are counted as overdue (alarmed), every run, whichever are looked at
    assert summary.tables_overdue == 12
    seen: set[str] = set()
    for _ in range(6):
        clock.advance(HOUR)
        again = rotator.run()
        assert again.tables_overdue == 12 and again.errors == []
        seen |= {s.table for s in again.skipped if s.table in foreign}
    assert seen == set(foreign) and sorted(world.ours())[:12] == foreign
