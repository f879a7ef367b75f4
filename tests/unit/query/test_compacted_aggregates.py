"""Aggregates with the write tier: an entity's hour is the rollup function's (its rollups) or
compaction's (its unflagged compacted blocks), and a total is the rollup function's item and
compaction's ``#c`` part combined, both served before min(through, totals_through).

One entity's four hours: H0 compaction's; H1 the rollup function's after a redo (its flagged
compacted block, and the unflagged one compaction put before the redo, still stored); H2 compaction's,
compacted twice (newest copy wins); H3 after ``totals_through``, read raw. Checked against the raw
readings (both tiers, newest copy winning), which the same service answers without rollups.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from adapters.batch_writer import BatchWriter, serialize_item
from adapters.partition_reader import Page, PageRequest
from adapters.retry import Deadline
from adapters.rollup_store import ReadCount, RollupStore
from doubles.memory_dynamo import MemoryDynamo, MemoryReader
from keydesign import Layout, Reading, ShardMap, format_ts
from keydesign.rollup import STATE_PK, Figures, Granularities, floor_to, total_pk, total_sk
from keydesign.tiering import compact_hour
from keydesign.writetier import (
    Clustered,
    CompactionState,
    WriteTier,
)
from query.errors import ScanLimitExceeded
from query.logic import QueryService
from query.models import AggregateSeries
from query.params import ReadArgs, TimeRange
from query.rollups import RollupAnswers
from query.settings import QueryLimits
from tests.unit.query.apigw import memory_service

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
T0 = 1_795_000_000_000 - 1_795_000_000_000 % DAY
LEVELS = Granularities.parse("1m,1h,1d")
PREFIX = "readings"
ENTITY = "dev-1"
RETENTION = 30 * DAY


class Watermark:
    def __init__(self, through: int) -> None:
        self.through = through

    def state(self) -> CompactionState:
        # every compacted hour into cluster blocks under the world's 2 groups
        return CompactionState(through=self.through, clustered=(Clustered((2,), 0),))

    def consistent(self) -> CompactionState:
        return self.state()


class CountingReader:
    """The in-memory reader, with the requests and read units of each kind of partition."""

    def __init__(self, inner: MemoryReader) -> None:
        self.inner = inner
        self.calls: dict[str, int] = {}
        self.units: dict[str, float] = {}

    def read_page(self, request: PageRequest) -> Page:
        page = self.inner.read_page(request)
        kind = request.partition.kind
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.units[kind] = self.units.get(kind, 0.0) + page.read_units
        return page


@dataclass
class World:
    layout: Layout
    shard_map: ShardMap
    reader: MemoryReader
    db: MemoryDynamo
    store: RollupStore
    tier: WriteTier
    watermark: Watermark

    def service(
        self, *, rollups: bool, limits: QueryLimits | None = None, now_ms: int = T0 + 5 * HOUR
    ) -> tuple[QueryService, CountingReader]:
        counting = CountingReader(self.reader)
        service = memory_service(
            self.layout,
            self.shard_map,
            counting,
            now_ms=now_ms,
            limits=limits,
            rollups=RollupAnswers(self.store, LEVELS) if rollups else None,
            retention_ms=RETENTION,
            write_tier=self.tier,
            watermark=self.watermark,
        )
        return service, counting

    def compacted(self, hour: int, tier: list[tuple[int, list[Reading]]], **kwargs: object) -> None:
        """Compact ``hour``'s group items ``tier`` as compaction does: each group partition's in its own pass."""
        table = self.layout.table_for(hour)
        for group in range(self.tier.groups):
            mine = [(v, [r for r in rs if self.tier.group_of(r.entity_id) == group]) for v, rs in tier]
            pk = self.tier.cluster_pk(group, self.layout.cluster_span(hour))
            made = compact_hour(hour, mine, table=table, pk=pk, retention_ms=RETENTION, **kwargs)  # type: ignore[arg-type]
            for block in made:
                self.reader.add_item(block.table, block.item())

    def rollups(self, readings: list[Reading]) -> None:
        """The entity's rollups of ``readings`` (its rollup-owned hours), at every level."""
        writes = []
        for level in LEVELS.levels:
            figures: dict[int, Figures] = {}
            for r in readings:
                figures.setdefault(floor_to(r.ts_ms, level), Figures()).add(r.measures)
            writes += [self.store.rollup_write(level, start, ENTITY, f) for start, f in figures.items()]
        assert not self.store.write(writes, Deadline.never())

    def state(self, through: int, totals_through: int | None) -> None:
        item: dict[str, object] = {"pk": STATE_PK, "sk": PREFIX, "through": through, "late": 0}
        if totals_through is not None:
            item["totals_through"] = totals_through
        self.db.put_item(TableName="control", Item=serialize_item(item))


def _world(layout: Layout | None = None, page_items: int | None = 3) -> World:
    layout = layout or Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=PREFIX)
    reader = MemoryReader(page_items=page_items)
    db = MemoryDynamo(page_items=50, get_limit=100)
    store = RollupStore(db, BatchWriter(db, concurrency=1), "control", PREFIX, RETENTION)
    return World(layout, ShardMap.initial(layout.bucket, 2), reader, db, store, WriteTier(2), Watermark(0))


def _readings(entity: str, hour: int, count: int, rng: random.Random, tag: str) -> list[Reading]:
    return [
        Reading(entity, f"{tag}{n}", hour + rng.randrange(HOUR), {"v": rng.randrange(-50, 50), "w": rng.random()})
        for n in range(count)
    ]


@pytest.fixture(scope="module")
def world() -> World:
    world = _world()
    rng = random.Random(38)
    h0, h1, h2, h3 = (T0 + n * HOUR for n in range(4))
    other = _readings("dev-2", h0, 5, rng, "o")  # a shard neighbour's compacted readings: never the entity's
    # H0: compaction's (a stray rollup of it, as the rollup function put before compaction did rollups,
    # is not read: the hour's compacted block is its figures)
    world.compacted(h0, [(1, _readings(ENTITY, h0, 12, rng, "a") + other)])
    world.rollups([Reading(ENTITY, "stray", h0 + 1, {"v": 10_000})])
    # H1: compacted unflagged, then redone: the entity wrote a block (a late reading) and its hour is the
    # rollup function's; the first compacted block stays stored, of an older version
    tiered, late = _readings(ENTITY, h1, 9, rng, "b"), _readings(ENTITY, h1, 2, rng, "late")
    world.compacted(h1, [(1, tiered)])
    world.compacted(h1, [(1, tiered)], blocks=[(2, late)], dense={ENTITY})
    world.reader.store(world.layout, world.shard_map, [(r, 2) for r in late], retention_ms=RETENTION)
    world.rollups(tiered + late)
    # H2: compaction's, compacted twice: the second time with a corrected copy of one reading (newer)
    first = _readings(ENTITY, h2, 10, rng, "c")
    corrected = Reading(ENTITY, first[0].event_id, first[0].ts_ms, {"v": 1000})
    world.compacted(h2, [(3, first)])
    world.compacted(h2, [(3, first), (4, [corrected])])
    # H3: after totals_through (its readings in blocks)
    world.reader.store(
        world.layout, world.shard_map, [(r, 5) for r in _readings(ENTITY, h3, 7, rng, "d")], retention_ms=RETENTION
    )
    world.watermark.through = h3
    world.state(T0 + 4 * HOUR + 2 * MINUTE, h3)
    return world


def _figures(series: object) -> list[tuple[str, int, dict[str, dict[str, float]]]]:
    assert isinstance(series, AggregateSeries)
    return [(i.start, i.readings, i.measures) for i in series.intervals]


@pytest.mark.parametrize("interval", [MINUTE, 30 * MINUTE, HOUR, 2 * HOUR])
def test_an_entitys_aggregates_equal_its_raw_readings_across_both_owners_and_the_raw_part(
    world: World, interval: int
) -> None:
    rolled, _ = world.service(rollups=True)
    raw, _ = world.service(rollups=False)
    window = TimeRange(T0, T0 + 4 * HOUR)
    # When the entity's aggregates are asked with rollups and without
    got = rolled.aggregates(ENTITY, window, interval)
    want = raw.aggregates(ENTITY, window, interval)
    # Then both give the same figures: each hour once (compaction's from its compacted blocks, the
    # redone hour from its rollups only, the hour compacted twice with its newest copies), and the
    # intervals from totals_through (floored to the interval: 2h for 2h) on raw
    assert isinstance(got, AggregateSeries) and isinstance(want, AggregateSeries)
    assert got.source == "rollups+raw" and want.source == "raw"
    assert got.rollups_through == format_ts(T0 + 3 * HOUR)
    assert _figures(got) == _figures(want) and got.readings == want.readings == 12 + 11 + 10 + 7


def test_the_compacted_reads_are_in_the_answers_cost(world: World) -> None:
    rolled, counting = world.service(rollups=True)
    window = TimeRange(T0, T0 + 3 * HOUR)
    got = rolled.aggregates(ENTITY, window, HOUR)
    assert isinstance(got, AggregateSeries) and got.source == "rollups"
    rollups = ReadCount()
    world.store.entity_rollups(HOUR, [T0 + HOUR], ENTITY, rollups)
    # The rollup of the rollup function's hour and compacted partitions were read, each call and unit in the cost
    assert set(counting.calls) == {"cluster"} and counting.calls["cluster"] >= 3
    assert got.cost.queries == rollups.calls + counting.calls["cluster"]
    assert got.cost.read_units == rollups.read_units + counting.units["cluster"]
    assert got.cost.partitions_planned == got.cost.partitions_queried == 3


def test_the_compacted_reads_count_in_the_requests_budget(world: World) -> None:
    window = TimeRange(T0, T0 + 3 * HOUR)
    # Three hourly partitions (the entity's 1, 2 and 2 compacted blocks: a call each) of 12, 9 (and a
    # flagged block, not decoded) and 20 readings
    for limits, reason in [
        (QueryLimits(max_compacted_calls=2), "used the 2 Query calls of compacted hours one request may make"),
        (QueryLimits(max_scan_items=10), "decoded the 10 readings one request may read"),
    ]:
        rolled, _ = world.service(rollups=True, limits=limits)
        with pytest.raises(ScanLimitExceeded) as refused:
            rolled.aggregates(ENTITY, window, HOUR)
        assert reason in refused.value.reason and "reading [" in refused.value.reason
    # (their Query calls have a cap of their own: the raw part's MAX_QUERY_CALLS is not spent on them)
    limits = QueryLimits(max_query_calls=1, max_compacted_calls=3, max_scan_items=41)
    rolled, _ = world.service(rollups=True, limits=limits)
    assert isinstance(rolled.aggregates(ENTITY, window, HOUR), AggregateSeries)


def test_explain_names_both_watermarks(world: World) -> None:
    rolled, _ = world.service(rollups=True)
    explained = rolled.aggregates(ENTITY, TimeRange(T0, T0 + 4 * HOUR), HOUR, read=ReadArgs(explain=True))
    assert explained.source == "rollups+raw"  # type: ignore[union-attr]
    reason = explained.source_reason or ""  # type: ignore[union-attr]
    assert format_ts(T0 + 4 * HOUR + 2 * MINUTE) in reason and format_ts(T0 + 3 * HOUR) in reason


def _put_total(world: World, level: int, start: int, figures: Figures, *, part: bool) -> None:
    item = {"pk": total_pk(PREFIX, level, start), "sk": total_sk(start, fleet_part=part), **figures.item()}
    world.db.put_item(TableName="control", Item=serialize_item(item))


def _figures_of(*values: int) -> Figures:
    figures = Figures()
    for value in values:
        figures.add({"v": value})
    return figures


def test_totals_combine_both_items_and_leave_out_the_intervals_after_totals_through() -> None:
    world = _world()
    world.state(T0 + 4 * HOUR + 2 * MINUTE, T0 + 3 * HOUR)
    # H0: both items; H1: the rollup function's only; H2: compaction's only (an empty one is put
    # too); H3: both, but after totals_through
    _put_total(world, HOUR, T0, _figures_of(1, 2, 3), part=False)
    _put_total(world, HOUR, T0, _figures_of(10, -4), part=True)
    _put_total(world, HOUR, T0 + HOUR, _figures_of(7), part=False)
    _put_total(world, HOUR, T0 + 2 * HOUR, _figures_of(5, 6), part=True)
    _put_total(world, HOUR, T0 + 3 * HOUR, _figures_of(9), part=False)
    _put_total(world, HOUR, T0 + 3 * HOUR, _figures_of(9), part=True)
    rolled, _ = world.service(rollups=True)

    total = rolled.total_aggregates(TimeRange(T0, T0 + 5 * HOUR), HOUR)

    assert total.reached == format_ts(T0 + 3 * HOUR) and total.rollups_through == format_ts(T0 + 3 * HOUR)
    shown = [(i.start, i.readings, i.measures["v"]["sum"], i.measures["v"]["min"]) for i in total.intervals]
    assert shown == [
        (format_ts(T0), 5, 12, -4),
        (format_ts(T0 + HOUR), 1, 7, 7),
        (format_ts(T0 + 2 * HOUR), 2, 11, 5),
    ]
    # One Query of the day's total partition
    assert total.cost.queries == 1
    # The store alone: the last interval asked for has both its items too
    found = world.store.totals(HOUR, T0 + 3 * HOUR, T0 + 4 * HOUR, ReadCount())
    assert {start: f.readings for start, f in found.items()} == {T0 + 3 * HOUR: 2}


def test_without_totals_through_nothing_is_served_from_rollups_and_entities_read_raw(world: World) -> None:
    fresh = _world()
    fresh.reader, fresh.watermark = world.reader, world.watermark
    fresh.rollups([])
    fresh.state(T0 + 4 * HOUR + 2 * MINUTE, None)  # a state item from before the field
    _put_total(fresh, HOUR, T0, _figures_of(1), part=False)
    assert fresh.store.state() is not None and fresh.store.state().totals_through == 0  # type: ignore[union-attr]
    rolled, _ = fresh.service(rollups=True)
    raw, _ = world.service(rollups=False)
    window = TimeRange(T0, T0 + 4 * HOUR)

    total = rolled.total_aggregates(window, HOUR)
    series = rolled.aggregates(ENTITY, window, HOUR)

    assert total.intervals == [] and total.reached == format_ts(T0)
    assert isinstance(series, AggregateSeries) and series.source == "raw"
    assert _figures(series) == _figures(raw.aggregates(ENTITY, window, HOUR))


@pytest.mark.parametrize(
    ("kind", "bucket", "calls", "units", "raw_units"),
    [("hybrid", "1h", 24, 12.0, 24.0), ("hybrid", "1d", 1, 1.0, 1.5), ("calculated", "1h", 1, 1.0, 2.0)],
)
def test_a_sparse_devices_hourly_day_costs_its_absent_rollups_and_its_compacted_queries(
    kind: str, bucket: str, calls: int, units: float, raw_units: float
) -> None:
    """Seed 003's device (one reading every 259 s, all in the write tier): its day, compacted. The
    default layout (hybrid, 1-hour buckets) has a cluster partition per bucket: a Query an hour; a day's
    bucket, or a day of another layout, one. Its hours are compaction's: their rollups are not read (24
    absent keys would cost 12 units). The device is alone in its cluster here (a cluster's day of
    several devices costs more units, not more Queries)."""
    world = _world(Layout.from_settings(kind=kind, bucket=bucket, table_prefix=PREFIX), page_items=None)
    readings = [Reading(ENTITY, f"e{n}", T0 + n * 259_000, {"value": 21.5 + n % 7}) for n in range(DAY // 259_000)]
    for hour in range(T0, T0 + DAY, HOUR):
        world.compacted(hour, [(1, [r for r in readings if hour <= r.ts_ms < hour + HOUR])])
    world.watermark.through = T0 + DAY
    world.state(T0 + DAY + 2 * MINUTE, T0 + DAY)
    rolled, counting = world.service(rollups=True)
    raw, _ = world.service(rollups=False)

    got = rolled.aggregates(ENTITY, TimeRange(T0, T0 + DAY), HOUR)
    want = raw.aggregates(ENTITY, TimeRange(T0, T0 + DAY), HOUR)

    assert isinstance(got, AggregateSeries) and isinstance(want, AggregateSeries) and got.source == "rollups"
    assert _figures(got) == _figures(want) and got.readings == len(readings) == 333
    # The compacted Queries only: one per bucket (half a unit each), or one for the day (24 small
    # blocks, 8 KB or less: a unit)
    assert counting.calls == {"cluster": calls}
    assert (got.cost.queries, got.cost.read_units) == (calls, units)
    assert want.cost.read_units == raw_units  # without occupancy records: every block partition read


@pytest.mark.parametrize(("bucket", "calls", "units"), [("1h", 30 * 24, 0.5), ("1d", 30, 1.5)])
def test_a_sparse_devices_daily_aggregates_of_30_days_read_its_compacted_hours(
    bucket: str, calls: int, units: float
) -> None:
    """No per-entity day rollup for compaction's hours: 30 days of a seed 003 device read its compacted
    partitions, one Query each: 720 with the default 1-hour buckets, half a read unit each (they have
    MAX_COMPACTED_CALLS, past MAX_QUERY_CALLS' 200), 30 with 1-day buckets, as docs/query.md says."""
    world = _world(Layout.from_settings(kind="hybrid", bucket=bucket, table_prefix=PREFIX), page_items=None)
    start, days = T0 - 29 * DAY, 30
    readings = [Reading(ENTITY, f"e{n}", start + n * 259_000, {"value": 20}) for n in range(days * DAY // 259_000)]
    for hour in range(start, start + days * DAY, HOUR):
        world.compacted(hour, [(1, [r for r in readings if hour <= r.ts_ms < hour + HOUR])])
    world.watermark.through = T0 + DAY
    world.state(T0 + DAY + 2 * MINUTE, T0 + DAY)
    rolled, counting = world.service(rollups=True)
    got = rolled.aggregates(ENTITY, TimeRange(start, T0 + DAY), DAY)
    assert isinstance(got, AggregateSeries) and got.readings == len(readings) and len(got.intervals) == days
    assert counting.calls == {"cluster": calls} and counting.units["cluster"] <= calls * units


class StaleWatermark(Watermark):
    """A cached compaction state from before compaction passed the hours (the rollups' state is newer)."""

    def state(self) -> CompactionState:
        return CompactionState()

    def consistent(self) -> CompactionState:
        return super().state()


class CountingWatermark(Watermark):
    def __init__(self, through: int) -> None:
        super().__init__(through)
        self.consistent_reads = 0

    def consistent(self) -> CompactionState:
        self.consistent_reads += 1
        return self.state()


@pytest.mark.parametrize(("through", "reads"), [(T0 + 5 * HOUR, 0), (T0 + 4 * HOUR, 1)], ids=["now's hour", "earlier"])
def test_the_state_is_read_again_only_for_an_hour_compaction_may_have_passed_since(
    world: World, through: int, reads: int
) -> None:
    # Given rollups into now's hour (now 10 minutes into it), and a cached compaction state through its start
    # (compaction cannot reach the hour now is in) or through an earlier hour
    kept, world.watermark = world.watermark, CountingWatermark(through)
    world.state(T0 + 5 * HOUR + 5 * MINUTE, T0 + 5 * HOUR + 5 * MINUTE)
    try:
        now = T0 + 5 * HOUR + 10 * MINUTE
        rolled, _ = world.service(rollups=True, now_ms=now)
        # When an aggregate up to now is asked
        assert isinstance(rolled.aggregates(ENTITY, TimeRange(T0, now), MINUTE), AggregateSeries)
        # Then the state is read again (consistently) only when compaction may have passed it since
        assert world.watermark.consistent_reads == reads  # type: ignore[attr-defined]
    finally:
        world.watermark = kept
        world.state(T0 + 4 * HOUR + 2 * MINUTE, T0 + 3 * HOUR)


def test_a_compaction_state_cached_before_the_hours_were_compacted_is_read_again(world: World) -> None:
    # Given the query function's cached compaction state older than the rollups' (it knows no compacted hour)
    window = TimeRange(T0, T0 + 3 * HOUR)
    want = world.service(rollups=False)[0].aggregates(ENTITY, window, HOUR)  # raw, with the state as stored
    kept = world.watermark
    world.watermark = StaleWatermark(kept.through)
    try:
        rolled, _ = world.service(rollups=True)
        # When the entity's hours are asked from rollups, then they are read from the cluster blocks the
        # state read again names (not left out as if no hour were compacted)
        got = rolled.aggregates(ENTITY, window, HOUR)
        assert isinstance(got, AggregateSeries) and got.source == "rollups"
        assert _figures(got) == _figures(want) and got.readings == 12 + 11 + 10
    finally:
        world.watermark = kept
