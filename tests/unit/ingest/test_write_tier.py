"""Ingest with the write tier (WRITE_TIER_GROUPS): sparse entities' readings of the current hour are
written as group items, dense entities and late readings as blocks (after their dense marks); every
reading is written, rejected with a reason or handed back, once."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest

from adapters.batch_writer import BatchWriter
from adapters.observability import metrics
from adapters.shard_map_source import StaticShardMap
from adapters.start_items import StartRecorder, write_tier_starts
from adapters.table_builds import TableBuilds
from doubles.clocks import ManualClock
from doubles.memory_dynamo import MemoryDynamo
from doubles.memory_sqs import MemorySQS
from ingest.logic import BatchOutcome, Ingestor
from ingest.rejects import RejectsPublisher
from ingest.settings import IngestSettings
from keydesign import Layout, Reading, ShardMap, format_ts
from keydesign.blocks import decode_group, keep_newest, newest_wins
from keydesign.writetier import (
    DENSE_MARK_PREFIX,
    GROUP_PK_PREFIX,
    START_EVERY_MS,
    START_KEEP_MS,
    WriteTier,
    slice_start,
    tier_start_pk,
)
from tests.unit.ingest.kinesis_events import as_json, batch, reading
from tests.unit.ingest.stored import newest_copies
from tests.unit.ingest.test_logic import FakeRotator

HOUR = 3_600_000
#: Half past an hour and 10 s: the readings of the seconds before it lie in its re-pack slice (the write tier's)
NOW = 1_795_000_000_000 - 1_795_000_000_000 % HOUR + 30 * 60_000 + 10_000
QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/rejects"
TIER = WriteTier(4)


def _ingestor(
    dynamodb: MemoryDynamo,
    sqs: MemorySQS | None = None,
    *,
    now: int = NOW,
    period: str | None = None,
    table_builds: TableBuilds | None = None,
    clock: ManualClock[float] | None = None,
    starts: bool = False,
) -> Ingestor:
    """An ingest container; with ``starts``, it puts the write tier's start items in the table "control"."""
    clock = clock or ManualClock(0.0)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period=period)
    return Ingestor(
        layout=layout,
        shard_maps=StaticShardMap(ShardMap.initial(layout.bucket, 4)),
        writer=BatchWriter(dynamodb, concurrency=2, clock=clock, sleep=clock.sleep, rng=random.Random(3)),
        rejects=RejectsPublisher(sqs or MemorySQS(), QUEUE, sleep=clock.sleep),
        retention_ms=30 * 86_400_000,
        max_future_ms=300_000,
        max_age_ms=7 * 86_400_000,
        clock=clock,
        wall_clock_ms=lambda: now,
        rng=random.Random(5),
        table_builds=table_builds,
        write_tier=TIER,
        tier_start=StartRecorder(write_tier_starts("control", "readings"), START_EVERY_MS) if starts else None,
    )


def _conserved(outcome: BatchOutcome) -> None:
    for record in outcome.records:
        assert record.readings == record.written + record.rejected + record.retry


def _group_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [i for i in items if i["pk"]["S"].startswith(GROUP_PK_PREFIX) and "b" in i]


def _marks(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((i["pk"]["S"], i["sk"]["S"]) for i in items if i["sk"]["S"].startswith(DENSE_MARK_PREFIX))


def _stored(items: list[dict[str, Any]]) -> list[Reading]:
    """Every reading of the table once, the newest copy winning, from blocks and group items alike."""
    groups = _group_items(items)
    copies = newest_copies([i for i in items if not i["pk"]["S"].startswith(GROUP_PK_PREFIX)])
    for item in groups:
        header, readings = decode_group(item["b"]["B"])
        keep_newest(copies, header.version, readings)
    return newest_wins(copies)


def _keys(call: dict[str, list[Any]]) -> str:
    """The sort keys a BatchWriteItem call put, joined."""
    return " ".join(r["PutRequest"]["Item"]["sk"]["S"] for rs in call.values() for r in rs)


def _sparse_and_dense() -> list[bytes]:
    """Three sparse devices (one reading each) and a dense sensor (10 readings), in two records."""
    sparse = [reading(f"dev-{i}", NOW - 1_000 * i, f"s{i}") for i in range(3)]
    dense = [reading("hot", NOW - 5_000 + 500 * i, f"h{i}") for i in range(10)]
    return [as_json(sparse + dense[:5]), as_json(dense[5:])]


def test_sparse_readings_go_to_group_items_and_a_dense_entity_to_its_blocks_after_its_mark() -> None:
    dynamodb = MemoryDynamo(tables={"readings"}, record_calls=True)
    outcome = _ingestor(dynamodb).ingest(batch(_sparse_and_dense()), 60_000)
    _conserved(outcome)
    assert (outcome.written, outcome.rejected, outcome.retry) == (13, 0, 0)
    items = dynamodb.items()
    groups = _group_items(items)
    in_groups = sorted(r.entity_id for i in groups for r in decode_group(i["b"]["B"])[1])
    assert in_groups == ["dev-0", "dev-1", "dev-2"]
    assert {i["pk"]["S"] for i in groups} == {TIER.group_pk(TIER.group_of(f"dev-{n}"), NOW) for n in range(3)}
    assert outcome.group_items == outcome.group_items_written == len(groups)
    assert outcome.readings_in_write_tier == 3 and outcome.blocks == 1
    assert _marks(items) == [(TIER.group_pk(TIER.group_of("hot"), NOW), "!dense#hot")]
    assert len(_stored(items)) == 13
    # the mark was put before the blocks: in a call of its own, ahead of every readings call
    first_mark = next(i for i, c in enumerate(dynamodb.calls) if "!dense#" in _keys(c))
    first_block = next(i for i, c in enumerate(dynamodb.calls) if "hot#" in _keys(c))
    assert first_mark < first_block
    emitted = metrics.metric_set
    assert emitted["GroupItemsWritten"]["Value"] == [float(len(groups))]
    assert emitted["ReadingsInWriteTier"]["Value"] == [3.0]
    assert emitted["DenseMarksWritten"]["Value"] == [1.0]
    assert emitted["BlocksWritten"]["Value"] == [1.0]


def test_a_redelivered_batch_makes_the_same_items_and_its_marks_are_put_once_per_container() -> None:
    dynamodb = MemoryDynamo(tables={"readings"})
    ingestor = _ingestor(dynamodb)
    ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    before = {k: dict(v) for k, v in dynamodb.table("readings").items()}
    puts = dynamodb.items_put
    again = ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    _conserved(again)
    assert again.written == 13 and again.dense_marks.calls == 0
    assert dynamodb.table("readings") == before  # the same keys and payloads, overwritten in place
    assert dynamodb.items_put - puts == len(before) - 1  # every item again but the mark
    # another container (a cold start) puts the mark again: the same item
    _ingestor(dynamodb).ingest(batch(_sparse_and_dense()), 60_000)
    assert dynamodb.table("readings") == before


def _starts(dynamodb: MemoryDynamo) -> list[tuple[str, int]]:
    """The write tier's start items stored: (hour, expiry in epoch s)."""
    return sorted((i["sk"]["S"], int(i["expires_at"]["N"])) for i in dynamodb.items("control"))


def _start(hour: int) -> tuple[str, int]:
    return format_ts(hour), (hour + START_KEEP_MS) // 1000


def test_a_batch_in_an_hours_first_minute_stamps_its_start_item_with_the_hour_before() -> None:
    # 07:00:30: a reading of 06:59:50 is within its slice's grace, a group item of the hour at 06:00
    dynamodb = MemoryDynamo(tables={"readings", "control"})
    start = slice_start(NOW) + HOUR + 30_000
    outcome = _ingestor(dynamodb, now=start, starts=True).ingest(
        batch([as_json([reading("dev-1", start - 40_000, "a")])]), 60_000
    )
    assert outcome.written == 1 and outcome.group_items_written == 1
    assert _starts(dynamodb) == [_start(slice_start(NOW))]


def test_a_container_puts_the_write_tier_start_item_before_its_first_group_items_and_once_a_day() -> None:
    dynamodb = MemoryDynamo(tables={"readings", "control"}, record_calls=True)
    ingestor = _ingestor(dynamodb, starts=True)
    # A batch of only late readings and a dense entity's: no group item, no start item
    dense = [reading("hot", NOW - 5_000 + 500 * i, f"h{i}") for i in range(10)]
    late = ingestor.ingest(batch([as_json([*dense, reading("dev-9", NOW - 2 * HOUR, "late")])]), 60_000)
    assert late.written == 11 and late.group_items == 0 and _starts(dynamodb) == []
    # The container's first group items: its start item (the hour the batch started in) is put first
    first = ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    assert first.written == 13 and first.group_items_written > 0
    assert dynamodb.items("control")[0]["pk"]["S"] == tier_start_pk("readings")
    assert _starts(dynamodb) == [_start(slice_start(NOW))]
    first_start = next(i for i, c in enumerate(dynamodb.calls) if "control" in c)
    first_group_item = next(
        i
        for i, c in enumerate(dynamodb.calls)
        if any(
            r["PutRequest"]["Item"]["pk"]["S"].startswith(GROUP_PK_PREFIX) and "b" in r["PutRequest"]["Item"]
            for rs in c.values()
            for r in rs
        )
    )
    assert first_start < first_group_item
    # Its next batches put none, until one starts a day or more past its start item's hour
    calls = len(dynamodb.calls)
    assert ingestor.ingest(batch(_sparse_and_dense()), 60_000).written == 13
    ingestor.wall_clock_ms = lambda: NOW + START_EVERY_MS - 31 * 60_000  # 23:59 past the start item's hour
    assert (
        ingestor.ingest(batch([as_json([reading("dev-1", NOW + START_EVERY_MS - 31 * 60_000, "n")])]), 60_000).written
        == 1
    )
    assert not any("control" in c for c in dynamodb.calls[calls:]) and len(_starts(dynamodb)) == 1
    later = NOW + START_EVERY_MS - 29 * 60_000
    ingestor.wall_clock_ms = lambda: later
    assert ingestor.ingest(batch([as_json([reading("dev-1", later, "m")])]), 60_000).written == 1
    assert _starts(dynamodb) == [_start(slice_start(NOW)), _start(slice_start(later))]
    # another container (a cold start) puts its own: here the same item as the first
    _ingestor(dynamodb, starts=True).ingest(batch(_sparse_and_dense()), 60_000)
    assert len(_starts(dynamodb)) == 2


def test_group_items_whose_start_item_is_not_stored_are_handed_back_and_stored_on_redelivery() -> None:
    def refuse(item: Mapping[str, Any]) -> str | None:
        return "no start today" if item["pk"]["S"] == tier_start_pk("readings") else None

    dynamodb = MemoryDynamo(tables={"readings", "control"}, refuse=refuse)
    ingestor = _ingestor(dynamodb, starts=True)
    first = ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    _conserved(first)
    # the dense sensor's block is stored; the sparse readings are not counted, and no group item is written
    assert (first.written, first.rejected, first.retry) == (10, 0, 3)
    assert first.group_items_written == 0 and not _group_items(dynamodb.items()) and _starts(dynamodb) == []
    assert first.records[0].retry == 3 and first.records[0].reason == (
        "write-tier start not written: DynamoDB refused the item: no start today"
    )
    # when the start item can be stored, the redelivery stores both
    dynamodb.refuse = None
    second = ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    assert (second.written, second.retry) == (13, 0) and len(_stored(dynamodb.items("readings"))) == 13
    assert _starts(dynamodb) == [_start(slice_start(NOW))]


def test_a_group_item_dynamodb_refuses_rejects_its_readings_with_the_reason() -> None:
    def refuse(item: Mapping[str, Any]) -> str | None:
        return "Item size has exceeded the maximum allowed size" if item["pk"]["S"].startswith("w#") else None

    dynamodb, sqs = MemoryDynamo(tables={"readings"}, refuse=refuse), MemorySQS()
    outcome = _ingestor(dynamodb, sqs).ingest(batch(_sparse_and_dense()), 60_000)
    _conserved(outcome)
    # the mark is refused too (it is in a group partition): the dense sensor's block is handed back
    assert (outcome.written, outcome.rejected, outcome.retry) == (0, 3, 10)
    bodies = [json.loads(m["MessageBody"]) for m in sqs.messages]
    assert sorted(json.loads(b["payload"])["entity_id"] for b in bodies) == ["dev-0", "dev-1", "dev-2"]
    assert all("exceeded the maximum allowed size" in b["reason"] and b["field"] == "item" for b in bodies)
    assert {r.reason for r in outcome.failed_records} == {
        "dense mark not written: DynamoDB refused the item: Item size has exceeded the maximum allowed size"
    }


def _refuse_marks(item: Mapping[str, Any]) -> str | None:
    return "no marks today" if item["sk"]["S"].startswith(DENSE_MARK_PREFIX) else None


def test_a_dense_block_whose_mark_is_not_stored_is_handed_back_and_stored_on_redelivery() -> None:
    dynamodb = MemoryDynamo(tables={"readings"}, refuse=_refuse_marks)
    ingestor = _ingestor(dynamodb)
    first = ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    _conserved(first)
    # the sparse readings are stored; the dense sensor's 10 are not (no block without its mark)
    assert (first.written, first.rejected, first.retry) == (3, 0, 10)
    assert sorted(r.entity_id for r in _stored(dynamodb.items())) == ["dev-0", "dev-1", "dev-2"]
    assert all(r.reason is not None and r.reason.startswith("dense mark not written") for r in first.failed_records)
    assert first.records[0].written == 3 and first.records[0].retry == 5
    # when the mark can be stored, the redelivery stores everything
    dynamodb.refuse = None
    second = ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    assert (second.written, second.retry) == (13, 0)
    assert len(_stored(dynamodb.items())) == 13 and len(_marks(dynamodb.items())) == 1


def test_a_batch_straddling_an_hour_boundary_writes_each_hour_to_its_own_group_partition() -> None:
    end = NOW - NOW % HOUR + HOUR
    payloads = [as_json([reading("dev-1", end - 2_000, "a"), reading("dev-1", end + 1_000, "b")])]
    # started before the hour ended: both readings in the write tier, one partition per hour
    dynamodb = MemoryDynamo(tables={"readings"})
    outcome = _ingestor(dynamodb, now=end - 1_000).ingest(batch(payloads), 60_000)
    group = TIER.group_of("dev-1")
    assert outcome.written == 2
    assert sorted(i["pk"]["S"] for i in _group_items(dynamodb.items())) == sorted(
        [TIER.group_pk(group, end - 1), TIER.group_pk(group, end)]
    )
    # started 3 s after it ended, within the slice rule's grace (a minute): the same
    dynamodb = MemoryDynamo(tables={"readings"})
    outcome = _ingestor(dynamodb, now=end + 3_000).ingest(batch(payloads), 60_000)
    assert outcome.written == 2 and outcome.blocks == 0
    assert len({i["pk"]["S"] for i in _group_items(dynamodb.items())}) == 2
    # started 61 s after it ended: the earlier reading is late, written as a block of its own, with no mark
    dynamodb = MemoryDynamo(tables={"readings"})
    outcome = _ingestor(dynamodb, now=end + 61_000).ingest(batch(payloads), 60_000)
    _conserved(outcome)
    items = dynamodb.items()
    assert outcome.written == 2 and outcome.blocks == 1 and outcome.group_items == 1
    assert [i["pk"]["S"] for i in _group_items(items)] == [TIER.group_pk(group, end)]
    assert not _marks(items) and [r.event_id for r in _stored(items)] == ["a", "b"]


def test_late_readings_are_blocks_as_before() -> None:
    dynamodb = MemoryDynamo(tables={"readings"})
    payloads = [as_json([reading(f"dev-{i}", NOW - 2 * HOUR - i, f"l{i}") for i in range(5)])]
    outcome = _ingestor(dynamodb).ingest(batch(payloads), 60_000)
    assert (outcome.written, outcome.blocks, outcome.group_items) == (5, 5, 0)
    assert not _group_items(dynamodb.items()) and not _marks(dynamodb.items())
    assert "GroupItemsWritten" not in metrics.metric_set


def test_a_group_item_whose_table_is_missing_is_handed_back_and_the_table_asked_for() -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="hour")
    dynamodb = MemoryDynamo(tables={layout.table_for(NOW - HOUR)})  # the current hour's table is not there yet
    rotator, clock = FakeRotator(dynamodb, builds=True), ManualClock(0.0)
    builds = TableBuilds(rotator, "rot", clock=clock)
    ingestor = _ingestor(dynamodb, period="hour", table_builds=builds, clock=clock)
    first = ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    _conserved(first)
    assert (first.written, first.rejected, first.retry) == (0, 0, 13)
    assert rotator.requests == [{"build": [layout.table_for(NOW)]}]
    assert all("does not exist yet; the rotator is asked" in (r.reason or "") for r in first.failed_records)
    second = ingestor.ingest(batch(_sparse_and_dense()), 60_000)
    assert second.written == 13 and len(_stored(dynamodb.items(layout.table_for(NOW)))) == 13


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (as_json([reading("dev-1", NOW + 3_600_000, "future")]), "timestamp"),
        (b'{"entity_id": "dev-1", "timestamp": "x", "measures": {"t": 1}}', "timestamp"),
        (b"\xff not json", "data"),
    ],
)
def test_bad_readings_are_rejected_beside_group_items(payload: bytes, field: str) -> None:
    sqs = MemorySQS()
    dynamodb = MemoryDynamo(tables={"readings"})
    outcome = _ingestor(dynamodb, sqs).ingest(batch([payload, as_json([reading("dev-2", NOW, "ok")])]), 60_000)
    _conserved(outcome)
    assert (outcome.written, outcome.rejected, outcome.retry) == (1, 1, 0)
    assert [json.loads(m["MessageBody"])["field"] for m in sqs.messages] == [field]
    assert [r.entity_id for r in _stored(dynamodb.items())] == ["dev-2"]


def test_copies_of_a_reading_in_one_batch_are_stored_once_the_last_winning() -> None:
    dynamodb = MemoryDynamo(tables={"readings"})
    payloads = [as_json([reading("dev-1", NOW, "x", v=1.0)]), as_json([reading("dev-1", NOW, "x", v=2.0)])]
    outcome = _ingestor(dynamodb).ingest(batch(payloads), 60_000)
    _conserved(outcome)
    assert outcome.written == 2 and outcome.duplicates == 1
    (stored,) = _stored(dynamodb.items())
    assert stored.measures == {"v": 2.0}


def test_the_write_tier_is_on_with_write_tier_groups_and_off_at_zero() -> None:
    base = {"SHARDS": "8", "TABLE_PREFIX": "readings", "REJECTS_QUEUE_URL": QUEUE}
    on = Ingestor.from_settings(
        IngestSettings.from_env({**base, "WRITE_TIER_GROUPS": "32"}),
        dynamodb=MemoryDynamo(tables={"readings"}),
        sqs=MemorySQS(),
    )
    off = Ingestor.from_settings(
        IngestSettings.from_env(base), dynamodb=MemoryDynamo(tables={"readings"}), sqs=MemorySQS()
    )
    assert on.write_tier == WriteTier(32) and on.dense_marks is not None
    assert off.write_tier is None and off.dense_marks is None
