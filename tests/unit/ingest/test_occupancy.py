"""Ingest records each partition's occupancy before writing its readings, once per container."""

from __future__ import annotations

import random
from typing import Any

from adapters.batch_writer import BatchWriter
from adapters.occupancy import OccupancyRecorder, OccupancyStore
from adapters.shard_map_source import StaticShardMap
from doubles.clocks import ManualClock
from doubles.memory_dynamo import MemoryDynamo
from doubles.memory_sqs import MemorySQS
from ingest.logic import Ingestor
from ingest.rejects import RejectsPublisher
from keydesign import Layout, ShardMap
from keydesign.occupancy import MAX_WRITER_OVERLAP_MS, SINCE_PK, day_pk
from tests.unit.ingest.kinesis_events import as_json, batch, reading

NOW = 1_795_000_000_000  # 2026-11-18T...
DAY = 86_400_000
QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/rejects"
CONTROL = "control"
MAX_FUTURE = 300_000


def _ingestor(dynamodb: MemoryDynamo, *, kind: str = "hybrid") -> Ingestor:
    clock = ManualClock(0.0)
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    return Ingestor(
        layout=layout,
        shard_maps=StaticShardMap(ShardMap.initial(layout.bucket, 4)),
        writer=BatchWriter(dynamodb, concurrency=2, clock=clock, sleep=clock.sleep, rng=random.Random(3)),
        rejects=RejectsPublisher(MemorySQS(), QUEUE, sleep=clock.sleep),
        retention_ms=30 * DAY,
        max_future_ms=MAX_FUTURE,
        max_age_ms=7 * DAY,
        clock=clock,
        wall_clock_ms=lambda: NOW,
        rng=random.Random(5),
        occupancy=OccupancyRecorder(OccupancyStore(dynamodb, CONTROL, "readings"), max_future_ms=MAX_FUTURE),
    )


def _occupancy(dynamodb: MemoryDynamo) -> set[tuple[str, str]]:
    return {key for key in dynamodb.table(CONTROL) if key[0] != SINCE_PK}


def test_every_partition_written_to_is_recorded_first_and_once() -> None:
    # Given readings of two entities over two days
    db = MemoryDynamo(tables={"readings", CONTROL}, record_calls=True)
    ingestor = _ingestor(db)
    readings = [
        as_json(reading("a", NOW - DAY, "1")),
        as_json(reading("a", NOW - DAY + 1, "2")),
        as_json(reading("b", NOW, "3")),
    ]
    # When they are ingested
    outcome = ingestor.ingest(batch(readings), 60_000)
    # Then each reading's partition is recorded under its table and day
    assert outcome.written == 3
    recorded = _occupancy(db)
    assert {sk for _, sk in recorded} == {f"readings#{item['pk']['S']}" for item in db.items("readings")}
    today = NOW - NOW % DAY
    assert {pk for pk, _ in recorded} == {day_pk("readings", today - DAY), day_pk("readings", today)}
    assert len(recorded) == 2
    # ... in a BatchWriteItem call before any call that carries readings
    first_readings = next(i for i, call in enumerate(db.calls) if "readings" in call)
    assert all(CONTROL not in call for call in db.calls[first_readings:])
    assert any(CONTROL in call for call in db.calls[:first_readings])
    # ... with a TTL past the last reading of the day and the bucket start
    for (pk, _), item in db.table(CONTROL).items():
        if pk != SINCE_PK:
            assert int(item["expires_at"]["N"]) * 1000 > NOW + 30 * DAY
            assert int(item["bucket"]["N"]) % 3_600_000 == 0
    # And the marker says from when on pruning is safe
    marker = db.table(CONTROL)[(SINCE_PK, "readings")]
    assert int(marker["since"]["N"]) == NOW + MAX_WRITER_OVERLAP_MS + MAX_FUTURE

    # When the same partitions (and a redelivery) come again
    calls = len(db.calls)
    again = ingestor.ingest(batch([*readings, as_json(reading("a", NOW - DAY + 2, "4"))]), 60_000)
    # Then no occupancy is written again: the container remembers it
    assert again.written == 4
    assert all(CONTROL not in call for call in db.calls[calls:])
    assert len(again.occupancy.written) == 0


def test_the_marker_is_never_moved_by_later_writers() -> None:
    db = MemoryDynamo(tables={"readings", CONTROL})
    store = OccupancyStore(db, CONTROL, "readings")
    assert store.mark_since(100) is True
    assert store.mark_since(200) is False
    assert store.read_since() == 100


def test_a_partition_whose_occupancy_cannot_be_recorded_is_not_written() -> None:
    # Given a control table that refuses one partition's occupancy record
    blocked_entity_pk = "readings#"

    def refuse(item: Any) -> str | None:
        sk = item["sk"]["S"]
        if item["pk"]["S"].startswith("occupancy#") and sk.startswith(blocked_entity_pk) and sk.endswith(blocked):
            return "refused for the test"
        return None

    db = MemoryDynamo(tables={"readings", CONTROL}, refuse=refuse)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 4)
    (blocked,) = layout.partitions_of("victim", NOW, shard_map)
    candidates = ("x1", "x2", "x3", "x4", "x5", "x6")
    others = [e for e in candidates if layout.partitions_of(e, NOW, shard_map) != [blocked]]
    ingestor = _ingestor(db)
    readings = [as_json(reading("victim", NOW, "v")), *(as_json(reading(e, NOW, "o")) for e in others)]
    # When the batch is ingested
    outcome = ingestor.ingest(batch(readings), 60_000)
    # Then the victim's reading is handed back, never written unrecorded; the others are written
    assert outcome.records[0].retry == 1 and "occupancy not recorded" in (outcome.records[0].reason or "")
    assert all(r.written == 1 for r in outcome.records[1:])
    stored_pks = {item["pk"]["S"] for item in db.items("readings")}
    assert blocked not in stored_pks
    recorded = {sk.split("#", 1)[1] for _, sk in _occupancy(db)}
    assert stored_pks <= recorded
    for record in outcome.records:
        assert record.readings == record.written + record.rejected + record.retry


def test_without_a_recorder_nothing_is_written_to_the_control_table() -> None:
    db = MemoryDynamo(tables={"readings", CONTROL})
    ingestor = _ingestor(db)
    ingestor.occupancy = None
    ingestor.ingest(batch([as_json(reading("a", NOW, "1"))]), 60_000)
    assert db.table(CONTROL) == {}


def test_readings_wait_for_a_throttled_record_and_are_handed_back_when_it_never_lands() -> None:
    # Given a control table that leaves every occupancy record unprocessed
    class Unprocessed(MemoryDynamo):
        def batch_write_item(self, **kwargs: Any) -> Any:
            control = kwargs["RequestItems"].get(CONTROL)
            if control is None:
                return super().batch_write_item(**kwargs)
            return {"UnprocessedItems": {CONTROL: control}}

    db = Unprocessed(tables={"readings", CONTROL})
    ingestor = _ingestor(db)
    # When a batch is ingested within a short time budget
    outcome = ingestor.ingest(batch([as_json(reading("a", NOW, "1"))]), 3_000)
    # Then nothing reaches the readings table and the record is redelivered later
    assert db.items("readings") == []
    assert outcome.records[0].retry == 1 and outcome.records[0].written == 0
    assert "occupancy not recorded" in (outcome.records[0].reason or "")
