"""The archive of a dropped table holds every reading it ever held, the last published copy of each, although
TTL deletes its items as early as DynamoDB may: the export shows the table as it was when it stopped taking
writes (ExportTime), not as it is at its drop, when every item has expired.

Weekly tables, 30 days of retention, MAX_AGE 3 days: the week of 2026-11-16 stops taking writes at
2026-11-26T00:15 (its end, MAX_AGE and the dial-down delay) and is dropped from 2026-12-23 on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from boto3.dynamodb.types import TypeSerializer

from doubles.clocks import ManualClock
from keydesign import Reading, ShardMap
from tests.integration.rotator.backups import Backups
from tests.integration.rotator.conftest import DAY, HOUR, MINUTE, World, at
from tests.unit.tsctl.exports import reading
from tests.unit.tsctl.running import run_archive

pytestmark = pytest.mark.integration

WEEKLY = {
    "TABLE_PERIOD": "week",
    "RETENTION": "30d",
    "EXPORT_BUCKET": "readings-archive",
    "EXPORT_PREFIX": "exports",
    "INFREQUENT_ACCESS_STORAGE_PERCENT": "",
    "HOTKEYS_FUNCTION_ARN": "",  # moto would run the hot-key function (in docker) for every write
}
TABLE = "readings-2026-W47"
WEEK = at("2026-11-16T00:00:00Z")
END = WEEK + 7 * DAY


def test_the_archive_holds_every_reading_as_published_last_though_ttl_swept_the_table_first(
    world: World, tmp_path: Path
) -> None:
    clock = ManualClock(WEEK + HOUR)
    rotator, clients = world.rotator(clock, **WEEKLY)
    backups = Backups(world.dynamodb, clock)
    backups.install(clients.dynamodb)
    layout, serialize = rotator.settings.layout, TypeSerializer().serialize
    shard_map = ShardMap.initial(layout.bucket, 4)

    def publish(entries: list[tuple[Reading, int]]) -> None:
        for block in layout.pack(entries, shard_map, retention_ms=30 * DAY):
            assert block.key.table == TABLE
            backups.put(TABLE, {k: serialize(v) for k, v in block.item().items()})

    # Given the week's table, and a week of readings published as they happen (5 sensors, every 3 hours)
    assert rotator.run().created[0] == TABLE
    week = [reading(f"sensor-{e}", WEEK + i * 3 * HOUR + e, 20.0 + i, f"{e}-{i}") for i in range(56) for e in range(5)]
    for day in range(7):
        clock.now = WEEK + (day + 1) * DAY - MINUTE
        publish([(r, 1) for r in week if WEEK + day * DAY <= r.ts_ms < WEEK + (day + 1) * DAY])
    # And a one-reading correction of the week's first hour: its block expires first, weeks before the original's
    clock.now = END + HOUR
    corrected = reading("sensor-0", WEEK, -1.0, "0-0")
    publish([(corrected, 2)])
    # And the latest reading the table can take: the period's last second, MAX_AGE old less a minute
    clock.now = END + 3 * DAY - MINUTE
    last = reading("sensor-9", END - 1_000, 99.0, "9-0")
    publish([(last, 1)])
    expected = sorted([corrected, *week[1:], last], key=lambda r: (r.entity_id, r.ts_ms, r.event_id))

    # When the rotator runs every day until the table is gone, TTL deleting each item the moment it expires
    started = dropped = None
    clock.now = END + 12 * HOUR
    while dropped is None:
        assert clock.now < END + 40 * DAY, "the table was never dropped"
        backups.sweep()
        summary = rotator.run()
        assert summary.errors == [], summary.errors
        if TABLE in summary.exports_started:
            started = clock.now
        if TABLE in summary.deleted:
            dropped = clock.now
        clock.advance(DAY)

    # Then tsctl archive reads back every reading, the correction over the original
    out = tmp_path / "archive.jsonl"
    assert run_archive([f"s3://readings-archive/exports/{TABLE}/", "-o", str(out), "--without-manifest"]) == 0
    assert [json.loads(line) for line in out.read_text().splitlines()] == [r.to_json() for r in expected]
    # And the export was asked for once the table took no more writes, and the drop came at retention
    assert started == at("2026-11-26T12:00:00Z")
    assert dropped == at("2026-12-23T12:00:00Z") and TABLE not in world.ours()
    # And TTL had deleted every item by the drop (DynamoDB may), the correction before the original
    assert backups.swept >= len(expected) and backups.as_of(TABLE, dropped) == []


def test_an_export_time_the_backup_does_not_reach_is_reported_and_the_table_kept(world: World) -> None:
    # Given the week's table made without point-in-time recovery (a deployment from before exports)
    clock = ManualClock(WEEK + HOUR)
    plain, _ = world.rotator(clock, **{**WEEKLY, "EXPORT_BUCKET": "", "POINT_IN_TIME_RECOVERY": "false"})
    assert plain.run().errors == []
    assert world.pitr(TABLE) == "DISABLED"
    # When exports are configured after the table stopped taking writes
    clock.now = at("2026-11-26T12:00:00Z")
    rotator, clients = world.rotator(clock, **WEEKLY)
    backups = Backups(world.dynamodb, clock)
    backups.install(clients.dynamodb)
    first = rotator.run()
    # Then its PITR goes on, but no backup shows the table as it was then: an error says so, nothing is exported
    assert [(e.table, e.code) for e in first.errors] == [(TABLE, "PointInTimeRecoveryUnavailableException")]
    assert "when it stopped taking writes" in first.errors[0].message
    assert "point_in_time_recovery" in first.configured[TABLE] and first.exports_started == []
    clock.advance(HOUR)
    second = rotator.run()
    assert [(e.table, e.code) for e in second.errors] == [(TABLE, "InvalidExportTimeException")]
    # And the table is never dropped without its archive
    clock.now = at("2026-12-23T12:00:00Z")
    summary = rotator.run()
    assert summary.deleted == [] and TABLE in world.ours()
    assert [e.code for e in summary.errors if e.table == TABLE] == ["InvalidExportTimeException"]
