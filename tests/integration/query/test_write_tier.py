"""Reads of both tiers on moto: group items, dense marks, compacted blocks and blocks, through the API.

The items are written as ingest and compaction write them (``doubles/tier_items.py``) into
hourly tables; the compaction state is put in the control table and read by the real watermark
source (``adapters.compaction_state.CachedWatermark``) through its cache. Entity pages, cross-entity
pages with their cursors, ``latest`` and raw aggregates equal the newest copy of each reading,
before compaction, after it, and with a cached watermark older than the stored one.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest

from adapters.batch_writer import BatchWriter, serialize_item
from adapters.compaction_state import CachedWatermark
from adapters.partition_reader import DynamoPartitionReader
from adapters.retry import Deadline
from adapters.rollup_store import RollupStore
from adapters.shard_map_source import StaticShardMap
from doubles.tier_items import TierWriter
from keydesign import Layout, Reading, ShardMap, format_ts
from keydesign.blocks import decode_group
from keydesign.rollup import STATE_PK, Figures, Granularities, total_pk, total_sk
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    MAX_COMPACTED_SPAN_MS,
    CompactionState,
    EarlierGroups,
    WriteTier,
    hour_tiers,
    state_key,
    tier_for_hour,
)
from query.api import create_app
from query.cursor import CursorCodec
from query.logic import QueryService
from query.rollups import RollupAnswers
from query.settings import QueryLimits
from tests.integration.mocked_aws import create_readings_table
from tests.integration.query.conftest import HOUR, KEY, NOW, PREFIX, pages, to_dynamodb
from tests.unit.query.apigw import ApiClient

pytestmark = pytest.mark.integration

CONTROL = "tier-control"
MINUTE = 60_000
START = NOW - 3 * HOUR  # 09:00; NOW is 12:00
ENTITIES = ("dev-1", "dev-2", "dev-3", "hot-1")
TTL_MS = 60_000


class World:
    """Hourly tables on moto, written through a TierWriter, read through the API with a cached watermark."""

    def __init__(self, dynamodb: Any, bucket: str = "15m", period: str = "hour") -> None:
        self.dynamodb = dynamodb
        self.layout = Layout.from_settings(kind="hybrid", bucket=bucket, table_prefix=PREFIX, table_period=period)
        self.shard_map = ShardMap.initial(self.layout.bucket, 2)
        self.tier = WriteTier(2)
        self.writer = TierWriter(self.layout, self.tier, self.shard_map, 30 * 24 * HOUR)
        for start in self.layout.table_period.starts(START - HOUR, NOW + HOUR):  # type: ignore[union-attr]
            create_readings_table(dynamodb, self.layout.table_for(start))
        create_readings_table(dynamodb, CONTROL)
        self.newest: dict[tuple[str, int, str], tuple[int, Reading]] = {}
        self.version = 0
        self.state = CompactionState()
        self.clock_s = 0.0
        self.watermark = CachedWatermark(dynamodb, CONTROL, PREFIX, TTL_MS, clock=lambda: self.clock_s)
        self.api = ApiClient(
            create_app(
                QueryService(
                    layout=self.layout,
                    shard_maps=StaticShardMap(self.shard_map),
                    reader=DynamoPartitionReader(dynamodb),
                    cursors=CursorCodec(lambda: KEY),
                    limits=QueryLimits(),
                    clock_ms=lambda: NOW,
                    write_tier=self.tier,
                    watermark=self.watermark,
                )
            ).resolve
        )

    def put(self, items: list[tuple[str, dict[str, object]]]) -> None:
        for table, item in items:
            self.dynamodb.put_item(TableName=table, Item=to_dynamodb(item))

    def ingest(self, readings: list[Reading], started_ms: int) -> None:
        self.version += 1
        self.put(self.writer.ingest([(r, self.version) for r in readings], started_ms, random.Random(self.version)))
        for r in readings:
            self.newest[r.entity_id, r.ts_ms, r.event_id] = (self.version, r)

    def compact(self, hour: int) -> None:
        """Compaction of ``hour`` (of every group count's items; the first hour compacted, or the one after the
        last), and its state advanced past it as compaction advances it, with the hour's G's (its largest,
        then the others that may hold it)."""
        self.put(self.writer.compact(hour))
        state = self.state if self.state.through else dataclasses.replace(self.state, through=hour)
        assert state.through == hour, "compaction does the hours in order"
        tier = tier_for_hour(self.tier, state, hour)
        groups = (tier.groups, *(t.groups for t in hour_tiers(self.tier, state, hour, tier)))
        self.record(state.advanced(NOW, groups))

    def record(self, state: CompactionState) -> None:
        """The compaction state as compaction stores it."""
        self.state = state
        self.dynamodb.put_item(TableName=CONTROL, Item=to_dynamodb({**state_key(PREFIX), **state.item()}))

    def expected(self, entity: str | None, from_ms: int, to_ms: int) -> list[tuple[str, str, str, float]]:
        rows = [r for _, r in self.newest.values() if entity in (None, r.entity_id) and from_ms <= r.ts_ms < to_ms]
        if entity is None:
            bucket = self.layout.bucket
            rows.sort(key=lambda r: (max(from_ms, bucket.start(r.ts_ms)), r.entity_id, r.ts_ms, r.event_id))
        else:
            rows.sort(key=lambda r: (r.ts_ms, r.event_id))
        return [(r.entity_id, r.ts, r.event_id, float(r.measures["v"])) for r in rows]

    def check(self) -> None:
        """Every read equals the newest copy of each reading."""
        window = {"from": format_ts(START), "to": format_ts(NOW)}
        for entity in ENTITIES:
            for order in ("asc", "desc"):
                items, _ = pages(self.api, f"/entities/{entity}/readings", limit=3, order=order, **window)
                want = self.expected(entity, START, NOW)
                assert [_row(i) for i in items] == (want if order == "asc" else want[::-1]), (entity, order)
            latest = self.api.get(f"/entities/{entity}/latest").body["reading"]
            assert _row(latest) == self.expected(entity, START, NOW)[-1]
            series = self.api.get(f"/entities/{entity}/aggregates", interval="1h", **window).body
            assert [(i["start"], i["readings"]) for i in series["intervals"]] == _hours(
                self.expected(entity, START, NOW)
            )
        for order in ("asc", "desc"):
            items, _ = pages(self.api, "/readings", limit=4, order=order, **window)
            want = self.expected(None, START, NOW)
            assert [_row(i) for i in items] == (want if order == "asc" else want[::-1]), order


def _row(item: dict[str, Any]) -> tuple[str, str, str, float]:
    return item["entity_id"], item["timestamp"], item["event_id"], float(item["measures"]["v"])


def _hours(rows: list[tuple[str, str, str, float]]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for _, ts, _, _ in rows:
        counts[ts[:13] + ":00:00.000Z"] = counts.get(ts[:13] + ":00:00.000Z", 0) + 1
    return sorted(counts.items())


def reading(entity: str, ts_ms: int, event: str, value: float) -> Reading:
    return Reading(entity, event, ts_ms, {"v": value})


@pytest.fixture
def world(dynamodb: Any, request: pytest.FixtureRequest) -> World:
    """The world on hourly tables with 15-minute buckets, or (a parameter) another bucket and period."""
    return written(World(dynamodb, *getattr(request, "param", None) or ()))


def written(world: World, change: tuple[WriteTier, int] | None = None) -> World:
    """The world's readings; with ``change`` (tier, at), the batches that start before ``at`` are
    written with that tier's group count, the later ones with the world's."""
    if change is not None:
        ingest, (earlier, at) = world.ingest, change

        def switching(readings: list[Reading], started_ms: int) -> None:
            world.writer.tier = earlier if started_ms < at else world.tier
            ingest(readings, started_ms)

        world.ingest = switching  # type: ignore[method-assign]
    # Three hours of a sparse fleet (group items), a dense entity (its own blocks and a dense mark),
    # readings across a 15-minute bucket's start (and a re-pack slice's: its batch started before it), and
    # late readings and corrections (blocks)
    for hour in range(3):
        base = START + hour * HOUR
        for minute in range(0, 60, 7):
            batch = [
                reading(e, base + minute * MINUTE + i * 1_000, f"m{minute}", hour + minute)
                for i, e in enumerate(ENTITIES[:3])
            ]
            world.ingest(batch, base + minute * MINUTE + 5_000)
        world.ingest(
            [reading("hot-1", base + 10 * MINUTE + i * 100, f"h{i}", i) for i in range(12)], base + 11 * MINUTE
        )
        world.ingest(
            [
                reading("dev-1", base + 15 * MINUTE - 1_000, "edge", 1),
                reading("dev-2", base + 15 * MINUTE + 1_000, "edge", 2),
            ],
            base + 15 * MINUTE - 500,
        )
    world.ingest([reading("dev-1", START + 7 * MINUTE, "m7", -1.0)], START + HOUR + 10 * MINUTE)  # a late correction
    world.ingest([reading("dev-2", START + 30 * MINUTE, "late", 5.0)], START + HOUR + 20 * MINUTE)  # a late reading
    return world


@pytest.mark.parametrize(
    "world",
    [
        pytest.param(None, id="hourly tables, 15-minute buckets"),
        pytest.param(("1d", "day"), id="daily tables, 1-day buckets (tsctl plan's, for a sparse fleet)"),
    ],
    indirect=True,
)
def test_reads_equal_the_newest_copies_before_and_after_compaction(world: World) -> None:
    # Before compaction: every hour read from its group items and blocks
    world.check()

    # After the first two hours are compacted (and the watermark moved), and a correction after that
    world.compact(START)
    world.compact(START + HOUR)
    world.clock_s += TTL_MS  # the cached watermark expires
    world.ingest([reading("dev-3", START + 14 * MINUTE + 2_000, "m14", 42.0)], START + 2 * HOUR + 30 * MINUTE)
    assert world.watermark.state().through == START + 2 * HOUR
    world.check()
    # A group's two compacted hours share one cluster partition when the bucket is a day (a device's compacted
    # day: one Query of its cluster's sort keys), one an hour each with 15-minute buckets
    tables = {world.layout.table_for(hour) for hour in (START, START + HOUR)}
    pks = {i["pk"]["S"] for table in tables for i in world.dynamodb.scan(TableName=table)["Items"]}
    clusters = {pk for pk in pks if pk.startswith(CLUSTER_PK_PREFIX)}
    groups = {pk.split("#")[1] for pk in clusters}
    assert len(clusters) == len(groups) * (1 if world.layout.bucket.width_ms == 24 * HOUR else 2)


def test_a_stale_watermark_still_reads_every_reading_once(world: World) -> None:
    # Given a reader that cached the watermark before compaction (nothing compacted)
    assert world.watermark.state().through == 0

    # When the first two hours are compacted and the stored watermark moves on, within the cache's time
    world.compact(START)
    world.compact(START + HOUR)

    # Then the stale reader (reading those hours' group items) and a fresh one answer the same, correctly
    assert world.watermark.state().through == 0
    world.check()
    world.clock_s += TTL_MS
    assert world.watermark.state().through == START + 2 * HOUR
    world.check()


def test_readings_written_under_an_earlier_group_count_are_read_before_and_after_compaction(dynamodb: Any) -> None:
    # Given readings written with 5 groups until START + 1h 30m, with the reader's 2 groups after (dev-1
    # and dev-2 change groups: 1 -> 0, 3 -> 1), and compaction still running with 5
    world = World(dynamodb)
    earlier = WriteTier(5)
    written(world, (earlier, START + HOUR + 30 * MINUTE))
    assert {world.tier.group_of(e) != earlier.group_of(e) for e in ENTITIES} == {True, False}
    world.record(CompactionState(0, 5))
    # Then a reader with 2 groups reads both counts' group items of every uncompacted hour
    world.check()

    # When compaction runs with 2, records the change (5 may hold the hours up to START + 2h) and
    # compacts the first two hours
    world.record(CompactionState(0, 2, (EarlierGroups(5, START + 2 * HOUR),)))
    world.clock_s += TTL_MS
    world.check()
    world.compact(START)
    world.compact(START + HOUR)
    world.clock_s += TTL_MS
    assert world.watermark.state().through == START + 2 * HOUR
    # Then every reading is still read once, newest copy winning
    world.check()


def _rolled_up(world: World, totals_through: int) -> ApiClient:
    """The world's API with hourly rollups on, the rollup function's state through NOW and ``totals_through``."""
    store = RollupStore(world.dynamodb, BatchWriter(world.dynamodb, concurrency=1), CONTROL, PREFIX, 30 * 24 * HOUR)
    state = {"pk": STATE_PK, "sk": PREFIX, "through": NOW, "late": 0, "totals_through": totals_through}
    world.dynamodb.put_item(TableName=CONTROL, Item=serialize_item(state))
    service = QueryService(
        layout=world.layout,
        shard_maps=StaticShardMap(world.shard_map),
        reader=DynamoPartitionReader(world.dynamodb),
        cursors=CursorCodec(lambda: KEY),
        limits=QueryLimits(),
        clock_ms=lambda: NOW,
        rollups=RollupAnswers(store, Granularities.parse("1h")),
        write_tier=world.tier,
        watermark=world.watermark,
    )
    return ApiClient(create_app(service).resolve)


def test_aggregates_from_rollups_and_compacted_blocks_equal_the_raw_ones(world: World) -> None:
    # Given the first two hours compacted, with the hours of dev-1 and dev-2 that got a late block
    # redone (their compacted blocks flagged: the rollup function's), and hot-1's hours (its own
    # blocks) the rollup function's too: their rollups are put, compaction's hours have none
    world.compact(START)
    world.compact(START + HOUR)
    world.clock_s += TTL_MS
    redone = {("dev-1", START), ("dev-2", START)}
    table = world.layout.table_for(START)
    for item in world.dynamodb.scan(TableName=table)["Items"]:
        if not (item["pk"]["S"].startswith(CLUSTER_PK_PREFIX) and item["pk"]["S"].endswith(format_ts(START)[:16])):
            continue
        held = {r.entity_id for r in decode_group(item["b"]["B"], span_limit_ms=MAX_COMPACTED_SPAN_MS)[1]}
        names = sorted(e for e, hour in redone if hour == START and e in held)
        if names:  # the cluster block's first hour: flag them (its r set), as a redo does
            world.dynamodb.update_item(
                TableName=table, Key={"pk": item["pk"], "sk": item["sk"]}, UpdateExpression="ADD r :them",
                ExpressionAttributeValues={":them": {"SS": names}},
            )  # fmt: skip
    owned = redone | {("hot-1", START + h * HOUR) for h in range(3)}
    figures: dict[tuple[str, int], Figures] = {}
    for _, r in world.newest.values():
        if (r.entity_id, r.ts_ms - r.ts_ms % HOUR) in owned:
            figures.setdefault((r.entity_id, r.ts_ms - r.ts_ms % HOUR), Figures()).add(r.measures)
    api = _rolled_up(world, START + 2 * HOUR)
    store = RollupStore(world.dynamodb, BatchWriter(world.dynamodb, concurrency=1), CONTROL, PREFIX, 30 * 24 * HOUR)
    writes = [store.rollup_write(HOUR, start, entity, f) for (entity, start), f in figures.items()]
    assert not store.write(writes, Deadline.never())
    window = {"from": format_ts(START), "to": format_ts(NOW)}
    for entity in ENTITIES:
        for consistent in ("false", "true"):
            # When an entity's hours are asked with rollups (the third hour after totals_through: raw)
            got = api.get(f"/entities/{entity}/aggregates", interval="1h", consistent=consistent, **window).body
            want = world.api.get(f"/entities/{entity}/aggregates", interval="1h", **window).body
            # Then they are the raw readings' hours, each reading once
            assert got["source"] == "rollups+raw" and got["rollups_through"] == format_ts(START + 2 * HOUR)
            assert got["intervals"] == want["intervals"], entity
            assert got["intervals"] and got["cost"]["read_units"] > 0


def test_totals_combine_the_rollup_functions_item_and_compactions_part(world: World) -> None:
    api = _rolled_up(world, START + 2 * HOUR)
    for hour, part, values in [(0, False, (1, 2)), (0, True, (3,)), (1, True, (4, 5)), (2, False, (6,))]:
        figures = Figures()
        for value in values:
            figures.add({"v": value})
        start = START + hour * HOUR
        item = {"pk": total_pk(PREFIX, HOUR, start), "sk": total_sk(start, fleet_part=part), **figures.item()}
        world.dynamodb.put_item(TableName=CONTROL, Item=serialize_item(item))

    reply = api.get("/aggregates", interval="1h", stats="sum,count", **{"from": format_ts(START), "to": format_ts(NOW)})
    assert reply.status == 200, reply.body
    body = reply.body

    assert body["reached"] == format_ts(START + 2 * HOUR)
    assert [(i["start"], i["readings"], i["measures"]["v"]["sum"]) for i in body["intervals"]] == [
        (format_ts(START), 3, 6),
        (format_ts(START + HOUR), 2, 9),
    ]
