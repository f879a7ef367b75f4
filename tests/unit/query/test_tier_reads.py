"""How reads of the write tier's partitions cost: group partitions read whole across entities, Limits that
grow past group items holding none of an entity's readings, corrupt group items failing loudly."""

from __future__ import annotations

import pytest

from adapters.partition_reader import CorruptBlock
from doubles.memory_dynamo import MemoryReader
from doubles.tier_items import TierWriter
from keydesign import Layout, Reading, ShardMap, parse_timestamp
from keydesign.writetier import WriteTier
from query.logic import QueryService
from query.models import LatestReading, ReadingsPage
from query.params import PageArgs, TimeRange
from tests.unit.query.apigw import memory_service

NOW = parse_timestamp("2026-11-22T12:00:00Z")
HOUR = 3_600_000
LAYOUT = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
SHARD_MAP = ShardMap.initial(LAYOUT.bucket, 2)
TIER = WriteTier(1)


def world(readings: list[Reading]) -> MemoryReader:
    """``readings`` stored as ingest stores them with the tier on: one batch per 10 s of their time."""
    memory = MemoryReader()
    writer = TierWriter(LAYOUT, TIER, SHARD_MAP, 30 * 24 * HOUR)
    batches: dict[int, list[tuple[Reading, int]]] = {}
    for reading in readings:
        batches.setdefault(reading.ts_ms // 10_000, []).append((reading, reading.ts_ms // 10_000))
    for window, entries in sorted(batches.items()):
        for table, item in writer.ingest(entries, window * 10_000 + 10_000):
            memory.add_item(table, item)
    memory.tables.add(LAYOUT.table_for(NOW))
    return memory


def service(memory: MemoryReader) -> QueryService:
    return memory_service(LAYOUT, SHARD_MAP, memory, now_ms=NOW, write_tier=TIER)


def sparse_fleet(devices: int, every_ms: int) -> list[Reading]:
    """The last hour of ``devices`` devices, one reading each every ``every_ms``, at their own phases."""
    return [
        Reading(f"dev-{n:04d}", "e", ts, {"v": n})
        for n in range(devices)
        for ts in range(NOW - HOUR + n * 997 % every_ms, NOW, every_ms)
    ]


def test_a_cross_entity_page_reads_a_group_partition_whole_in_megabyte_pages_and_sorts_it() -> None:
    # Given an hour of 200 devices reporting every minute, in group items (time order across devices)
    memory = world(sparse_fleet(200, 60_000))
    # When a page of every entity's readings of the hour is read
    page = service(memory).range_readings(PageArgs(TimeRange(NOW - HOUR, NOW), 100, None, "asc"))
    assert isinstance(page, ReadingsPage)
    # Then the group partition was asked for whole (no Limit), in one Query, and the page is in entity order
    group = [r for r in memory.requests if r.partition.kind == "group"]
    assert group and all(r.limit is None for r in group)
    assert len(group) == 1
    assert [(i.entity_id, i.timestamp) for i in page.items] == sorted((i.entity_id, i.timestamp) for i in page.items)
    assert {i.entity_id for i in page.items} == {"dev-0000", "dev-0001"}


def test_latest_behind_group_items_of_other_entities_asks_for_more_items_each_query() -> None:
    # Given a device whose last reading is 50 minutes old, behind a busy group's items
    readings = sparse_fleet(400, 60_000)
    readings.append(Reading("quiet", "q", NOW - 50 * 60_000, {"v": 1}))
    memory = world(readings)
    items = sum(len(rows) for (_, pk), rows in memory.partitions.items() if pk.startswith("w#"))
    # When its latest reading is read
    latest = service(memory).latest("quiet")
    # Then it is found in a logarithmic number of Queries: items holding none of the device's readings make
    # the next Limit larger (the density seen is at most one reading in all the items seen)
    assert isinstance(latest, LatestReading) and latest.reading is not None
    assert latest.reading.timestamp == "2026-11-22T11:10:00.000Z"
    limits = [r.limit or 0 for r in memory.requests if r.partition.kind == "group"]
    assert limits == sorted(limits) and limits[-1] >= 64, limits
    assert len(limits) <= items.bit_length() + 4, (limits, items)


def test_a_corrupt_group_item_fails_the_read_naming_it() -> None:
    memory = world(sparse_fleet(5, 60_000))
    (key,) = [key for key in memory.partitions if key[1].startswith("w#")]
    row = memory.partitions[key][0]
    memory.add_item(key[0], {"pk": key[1], "sk": row.sk, "b": b"\x04not a group item"})
    with pytest.raises(CorruptBlock) as caught:
        service(memory).entity_readings("dev-0001", PageArgs(TimeRange(NOW - HOUR, NOW), 100, None, "asc"))
    assert (caught.value.pk, caught.value.sk) == (key[1], row.sk)


def test_latest_plans_its_lookback_a_day_at_a_time_newest_first() -> None:
    # Given a device reading every minute of the last hour, and one whose only reading is three days old
    readings = [*sparse_fleet(3, 60_000), Reading("old", "o", NOW - 3 * 24 * HOUR + 5 * 60_000, {"v": 1})]
    memory = world(readings)
    memory.tables.update(LAYOUT.table_for(NOW - h * HOUR) for h in range(7 * 24))
    # When each one's latest reading is read (a week's lookback)
    recent, old = service(memory).latest("dev-0001"), service(memory).latest("old")
    # Then both are found; the recent one's search planned only today's partitions (a plan costs CPU by
    # the hours it spans), the old one's went back day by day to the fourth
    assert isinstance(recent, LatestReading) and isinstance(old, LatestReading)
    assert recent.reading is not None and recent.reading.entity_id == "dev-0001"
    assert old.reading is not None and old.reading.timestamp == "2026-11-19T12:05:00.000Z"
    assert 3 * recent.cost.partitions_planned < old.cost.partitions_planned
