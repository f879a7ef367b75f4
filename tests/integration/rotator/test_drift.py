"""The world changed under the rotator: a table dropped or re-made by hand, a table busy
UPDATING, TTL set on another attribute. Each run converges on what the rules say,
and leaves alone what is not its to change."""

from __future__ import annotations

from typing import Any

import pytest

from doubles.clocks import ManualClock
from tests.integration.rotator.conftest import MINUTE, World, at
from tests.integration.rotator.test_faults import prepared

pytestmark = pytest.mark.integration


def drop_by_hand(world: World, name: str) -> None:
    world.dynamodb.update_table(TableName=name, DeletionProtectionEnabled=False)
    world.dynamodb.delete_table(TableName=name)


def test_the_mapping_and_alarms_of_a_table_dropped_by_hand_are_removed(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, _ = world.rotator(clock)
    rotator.run()
    # Given the 22nd is past the time ingest takes its late readings (02:00) but not yet closed (02:15),
    # and an operator drops it by hand, leaving its mapping and alarms behind
    clock.now = at("2026-11-23T02:05:00Z")
    rotator.run()
    drop_by_hand(world, "readings-2026-11-22")
    mapped = world.mapped_tables()
    assert "readings-2026-11-22" in mapped

    clock.advance(MINUTE)
    summary = rotator.run()
    # Then the next run removes them (it does not build the table again), and nothing else
    assert summary.errors == [] and summary.created == []
    assert sorted(summary.removed) == sorted(
        [
            *(f"alarm readings-2026-11-22-{k}" for k in ("write-throttles", "read-throttles", "system-errors")),
            *(r for r in summary.removed if r.startswith("stream mapping") and "(readings-2026-11-22)" in r),
        ]
    )
    assert len(summary.removed) == 4
    assert world.mapped_tables() == [name for name in mapped if name != "readings-2026-11-22"]
    assert not [a for a in world.alarm_names() if a.startswith("readings-2026-11-22-")]


def test_a_wanted_table_made_again_gets_a_mapping_on_its_new_stream(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, _ = world.rotator(clock)
    rotator.run()
    old_stream = world.table("readings-2026-11-24")["LatestStreamArn"]
    # Given the next-but-one table is dropped by hand: its mapping now points at a dead stream
    drop_by_hand(world, "readings-2026-11-24")

    summary = rotator.run()
    # Then it is built again, the mapping to the old stream goes, one to the new stream comes
    assert summary.created == ["readings-2026-11-24"]
    new_stream = world.table("readings-2026-11-24")["LatestStreamArn"]
    sources = [m["EventSourceArn"] for m in world.mappings() if "readings-2026-11-24" in m["EventSourceArn"]]
    assert sources == [new_stream] and old_stream not in sources
    assert any(r.startswith("stream mapping") for r in summary.removed)


def test_a_table_busy_updating_is_switched_to_on_demand_on_a_later_run(world: World) -> None:
    rotator, clients, _ = prepared(world)
    busy = [True]

    def updating(parsed: dict[str, Any]) -> None:
        if busy[0] and parsed["Table"]["TableName"] == "readings-2026-11-23":
            parsed["Table"]["TableStatus"] = "UPDATING"

    clients.edit("DescribeTable", updating)
    summary = rotator.run()
    assert [d.table for d in summary.dialled_down] == ["readings-2026-11-24"]
    assert "UPDATING" in " ".join(s.reason for s in summary.skipped if s.table == "readings-2026-11-23")
    assert world.billing("readings-2026-11-23") == "PROVISIONED"

    busy[0] = False
    assert [d.table for d in rotator.run().dialled_down] == ["readings-2026-11-23"]


def test_ttl_on_another_attribute_is_reported_and_left_alone(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    world.create_foreign("readings-2026-11-23")
    world.dynamodb.update_time_to_live(
        TableName="readings-2026-11-23", TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires"}
    )
    rotator, _ = world.rotator(clock)
    summary = rotator.run()
    assert "TTL is ENABLED on 'expires', not 'ttl'; left alone" in [
        s.reason for s in summary.skipped if s.table == "readings-2026-11-23"
    ]
    assert world.ttl("readings-2026-11-23")["AttributeName"] == "expires"


def test_a_table_in_an_unexpected_state_is_left_alone(world: World) -> None:
    rotator, clients, _ = prepared(world)

    def inaccessible(parsed: dict[str, Any]) -> None:
        if parsed["Table"]["TableName"] == "readings-2026-11-22":
            parsed["Table"]["TableStatus"] = "INACCESSIBLE_ENCRYPTION_CREDENTIALS"

    clients.edit("DescribeTable", inaccessible)
    summary = rotator.run()
    assert summary.deleted == [] and summary.errors == []
    assert "status INACCESSIBLE_ENCRYPTION_CREDENTIALS: left alone" in [
        s.reason for s in summary.skipped if s.table == "readings-2026-11-22"
    ]
    assert "readings-2026-11-22" in world.ours()
