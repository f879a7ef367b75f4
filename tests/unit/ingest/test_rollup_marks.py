"""Ingest marks the intervals of the readings it writes as blocks for the rollup function: before them, once per
container, so no reading is ever stored without a mark stamped no later than its storage, however the invocation
ends. A reading in a group item (the write tier) gets no mark: its entity-hour is compaction's (docs/rollups.md)."""

from __future__ import annotations

import random
from typing import Any

from adapters.batch_writer import BatchWriter
from adapters.rollup_store import MarkRecorder, RollupStore, start_pk
from adapters.shard_map_source import StaticShardMap
from doubles.clocks import ManualClock
from doubles.memory_dynamo import MemoryDynamo
from doubles.memory_sqs import MemorySQS
from ingest.logic import Ingestor
from ingest.rejects import RejectsPublisher
from keydesign import Layout, ShardMap, parse_timestamp
from keydesign.rollup import Mark
from keydesign.writetier import DENSE_READINGS, WriteTier
from tests.unit.ingest.kinesis_events import as_json, batch, reading
from tests.unit.ingest.stored import stored_readings

NOW = 1_795_000_000_000
MINUTE = 60_000
CONTROL = "control"


def _ingestor(db: MemoryDynamo, write_tier: WriteTier | None = None) -> Ingestor:
    clock = ManualClock(0.0)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    writer = BatchWriter(db, concurrency=1, clock=clock, sleep=clock.sleep, rng=random.Random(3))
    return Ingestor(
        layout=layout,
        shard_maps=StaticShardMap(ShardMap.initial(layout.bucket, 4)),
        writer=writer,
        rejects=RejectsPublisher(MemorySQS(), "https://sqs.eu-west-1.amazonaws.com/1/rejects", sleep=clock.sleep),
        retention_ms=30 * 86_400_000,
        max_future_ms=300_000,
        max_age_ms=None,
        clock=clock,
        wall_clock_ms=lambda: NOW,
        rollup_marks=MarkRecorder(RollupStore(db, writer, CONTROL, "readings", 30 * 86_400_000), MINUTE),
        write_tier=write_tier,
    )


def _marks(db: MemoryDynamo) -> set[Mark]:
    """The marks stored (beside them, the container's start item, rollup.logic's first run, and the
    marked-minutes index items)."""
    return {
        Mark.parse(parse_timestamp(pk.split("#")[2]), sk)
        for pk, sk in db.table(CONTROL)
        if pk != start_pk("readings") and "#minutes#" not in pk
    }


def test_one_mark_per_entity_minute_before_the_readings_and_once_per_container() -> None:
    # Given readings of two entities, two of them in one minute, one a minute late
    db = MemoryDynamo(tables={"readings", CONTROL}, record_calls=True)
    ingestor = _ingestor(db)
    payloads = [
        as_json(reading("a", NOW, "1")),
        as_json(reading("a", NOW + 5, "2")),
        as_json(reading("b", NOW - MINUTE, "3")),
    ]
    # When they are ingested
    outcome = ingestor.ingest(batch(payloads), 60_000)
    # Then each (entity, minute) is marked once, stamped with the batch's start, before the readings
    assert outcome.written == 3
    start = NOW - NOW % MINUTE
    assert _marks(db) == {Mark(start, MINUTE, start, "a"), Mark(start, MINUTE, start - MINUTE, "b")}
    first_block = next(i for i, call in enumerate(db.calls) if "readings" in call)
    assert all("readings" not in call for call in db.calls[:first_block]) and CONTROL in db.calls[0]
    # When the batch is redelivered, its marks are not written again by this container
    calls = len(db.calls)
    ingestor.ingest(batch(payloads), 60_000)
    assert all(CONTROL not in call for call in db.calls[calls:])


def test_a_reading_whose_mark_is_not_written_is_handed_back() -> None:
    # Given a control table that refuses every write
    db = MemoryDynamo(
        tables={"readings", CONTROL}, refuse=lambda item: "no" if item["pk"]["S"].startswith("rollmark") else None
    )
    ingestor = _ingestor(db)
    # When a reading is ingested, it is not stored and its record is not settled: redelivery marks it again
    outcome = ingestor.ingest(batch([as_json(reading("a", NOW, "1"))]), 60_000)
    assert stored_readings(db.items("readings")) == []
    assert outcome.written == 0
    assert outcome.records[0].failed
    assert "rollup mark not written" in (outcome.records[0].reason or "")


def test_a_block_across_a_minute_boundary_marks_each_minute_it_holds_readings_of() -> None:
    # Given two readings of one entity six seconds apart, on either side of a minute boundary
    db = MemoryDynamo(tables={"readings", CONTROL})
    boundary = NOW - NOW % MINUTE + MINUTE
    payloads = [as_json([reading("c", boundary - 3_000, "1"), reading("c", boundary + 3_000, "2")])]
    # When they are ingested: one block
    outcome = _ingestor(db).ingest(batch(payloads), 60_000)
    assert outcome.written == 2 and len(db.items("readings")) == 1
    # Then both minutes are marked: the rollup function recomputes each from the blocks
    start = NOW - NOW % MINUTE
    assert _marks(db) == {Mark(start, MINUTE, boundary - MINUTE, "c"), Mark(start, MINUTE, boundary, "c")}


def test_an_ingest_slowed_past_its_deadline_never_leaves_a_stored_reading_unmarked() -> None:
    # Given a DynamoDB so slow that the first write of a batch uses up the invocation's whole time
    db = MemoryDynamo(tables={"readings", CONTROL})
    ingestor = _ingestor(db)
    clock = ingestor.clock
    assert isinstance(clock, ManualClock)
    write = db.batch_write_item

    def slow(**kwargs: Any) -> Any:
        answer = write(**kwargs)
        clock.advance(120)  # past the 60 s the invocation has: nothing may start after this
        return answer

    db.batch_write_item = slow  # type: ignore[method-assign]
    # When a batch of corrections (fewer measures than their originals) and new readings is ingested
    payloads = [as_json(reading("a", NOW - 5 * MINUTE, "1", kw=1.5)), as_json(reading("new", NOW - 9 * MINUTE, "2"))]
    outcome = ingestor.ingest(batch(payloads), 60_000)
    # Then every reading stored has its minute marked, stamped with the batch's start (here: none is stored,
    # since the marks took the time; the records are handed back and redelivered, and then marked first)
    start = NOW - NOW % MINUTE
    marked = {(m.entity, m.start_ms) for m in _marks(db) if m.slot_ms == start}
    stored = {(r.entity_id, r.ts_ms - r.ts_ms % MINUTE) for r in stored_readings(db.items("readings"))}
    assert stored <= marked
    assert all(r.failed or r.written == r.readings for r in outcome.records)


HOUR = 3_600_000


def test_with_the_write_tier_only_readings_written_as_blocks_are_marked() -> None:
    # Given the write tier, a sparse fleet's batch (one reading a device, in the current hour)
    db = MemoryDynamo(tables={"readings", CONTROL}, record_calls=True)
    ingestor = _ingestor(db, WriteTier(4))
    sparse = [as_json(reading(f"dev-{n}", NOW - 1_000 * n, f"s{n}")) for n in range(20)]
    # When it is ingested: every reading in group items, and no mark at all (nor a start item)
    outcome = ingestor.ingest(batch(sparse), 60_000)
    assert outcome.written == 20 and outcome.blocks == 0 and outcome.group_items > 0
    assert db.items(CONTROL) == []

    # Given a dense entity (its own blocks), a late reading (its hour ended before the batch: a block) and a
    # sparse device's reading of the current hour (a group item)
    hour = NOW - NOW % HOUR
    dense = [reading("hot", NOW - 2 * MINUTE + 1_000 * n, f"h{n}") for n in range(DENSE_READINGS)]
    late = reading("old", hour - 5 * MINUTE, "l")
    payloads = [as_json(dense), as_json(late), as_json(reading("dev-99", NOW, "s"))]
    # When they are ingested
    calls = len(db.calls)
    outcome = ingestor.ingest(batch(payloads), 60_000)
    # Then the dense entity's minute and the late reading's are marked, stamped with the batch's start, and
    # the sparse device's is not
    assert outcome.written == DENSE_READINGS + 2 and outcome.blocks == 2
    start = NOW - NOW % MINUTE
    assert _marks(db) == {Mark(start, MINUTE, start - 2 * MINUTE, "hot"), Mark(start, MINUTE, hour - 5 * MINUTE, "old")}
    # before the blocks: the batch's first call puts the marks, and nothing in the readings table
    assert CONTROL in db.calls[calls] and "readings" not in db.calls[calls]
