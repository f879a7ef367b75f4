"""Plans pruned by occupancy: empty partitions are skipped, partitions holding data never are."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.batch_writer import serialize_item
from adapters.occupancy import OccupancyReader, OccupancyStore
from doubles.memory_dynamo import MemoryDynamo, MemoryReader
from keydesign import Layout, Reading, ShardMap, format_ts, parse_timestamp
from keydesign.occupancy import OccupancyRecord, day_of
from query.errors import ScanLimitExceeded
from query.logic import QueryService
from query.models import AggregateSeries, ReadingsPage
from query.params import PageArgs, ReadArgs, TimeRange
from query.settings import DEFAULT_LIMIT, QueryLimits
from tests.unit.query.apigw import memory_service

NOW = parse_timestamp("2026-11-22T12:00:00Z")
HOUR = 3_600_000
DAY = 24 * HOUR
START = NOW - 3 * DAY
ENTITIES = ("a-1", "b-2", "c-3")
CONTROL = "control"


class World:
    """Readings in an in-memory table, and their occupancy in an in-memory control table, as ingest leaves them."""

    def __init__(self, layout: Layout, shard_map: ShardMap, since_ms: int | None) -> None:
        self.layout = layout
        self.shard_map = shard_map
        self.readings = MemoryReader(page_items=3)
        self.control = MemoryDynamo(tables={CONTROL})
        self.store = OccupancyStore(self.control, CONTROL, layout.table_prefix)
        self.rng = random.Random(7)
        self.expected: list[Reading] = []
        if since_ms is not None:
            self.store.mark_since(since_ms)

    def write(self, reading: Reading, *, recorded: bool = True, copies: int = 1) -> None:
        """Store ``reading`` (``copies`` deliveries: the random layout may put each elsewhere)
        and, unless written before recording started, its partition's occupancy."""
        self.expected.append(reading)
        for _ in range(copies):
            for block in self.readings.store(self.layout, self.shard_map, [(reading, 1)], rng=self.rng):
                if recorded:
                    key = block.key
                    record = OccupancyRecord.of(
                        self.layout.table_prefix, self.layout.bucket, key.table, key.pk, reading.ts_ms
                    )
                    self.control.put_item(TableName=CONTROL, Item=serialize_item(record.item(30 * DAY)))

    def service(self, *, pruned: bool, reader: OccupancyReader | None = None, **limits: Any) -> QueryService:
        """The query service over this world; ``pruned`` with an uncached reader unless ``reader`` is given."""
        if pruned and reader is None:
            reader = OccupancyReader(self.store, ttl_s=0)
        return memory_service(
            self.layout,
            self.shard_map,
            self.readings,
            now_ms=NOW,
            limits=QueryLimits(**limits),
            occupancy=reader if pruned else None,
        )


def entity_page(
    svc: QueryService,
    entity: str,
    from_ms: int,
    to_ms: int,
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    order: Any = "asc",
    consistent: bool = False,
) -> Any:
    return svc.entity_readings(
        entity, PageArgs(TimeRange(from_ms, to_ms), limit, cursor, order), ReadArgs(consistent=consistent)
    )


def range_page(
    svc: QueryService,
    from_ms: int,
    to_ms: int,
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    order: Any = "asc",
) -> Any:
    return svc.range_readings(PageArgs(TimeRange(from_ms, to_ms), limit, cursor, order))


def hourly(svc: QueryService, entity: str, from_ms: int, to_ms: int) -> Any:
    return svc.aggregates(entity, TimeRange(from_ms, to_ms), HOUR)


def follow(read: Any, *args: Any, **params: Any) -> tuple[list[tuple[str, str, str]], list[ReadingsPage]]:
    pages: list[ReadingsPage] = []
    cursor = None
    for _ in range(5_000):
        page = read(*args, cursor=cursor, **params)
        assert isinstance(page, ReadingsPage)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return [(i.entity_id, i.timestamp, i.event_id) for p in pages for i in p.items], pages
    raise AssertionError("the cursors never reached the end of the range")


def reading(entity: str, ts_ms: int, event_id: str) -> Reading:
    return Reading.parse(
        {"entity_id": entity, "timestamp": format_ts(ts_ms), "event_id": event_id, "measures": {"v": 1}}
    )


def hybrid_world(since_ms: int | None = NOW - 40 * DAY, shards: int = 100) -> World:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    return World(layout, ShardMap.initial(layout.bucket, shards), since_ms)


def test_an_empty_cross_entity_day_costs_one_occupancy_query_and_no_partition_query() -> None:
    # Given 100 shards, occupancy recording on, and one reading two days before the range
    world = hybrid_world()
    world.write(reading("a-1", NOW - 2 * DAY, "old"))
    svc = world.service(pruned=True)
    # When an empty day is read across entities
    page = range_page(svc, NOW - DAY, NOW)
    # Then the page is complete and the only Queries were for the days' occupancy
    assert isinstance(page, ReadingsPage)
    assert page.complete and page.next_cursor is None and page.count == 0
    assert world.readings.requests == []
    assert page.cost.queries == 2  # the occupancy of the two UTC days the range touches


def test_an_entity_that_reported_once_in_31_days_costs_a_few_dozen_calls_in_one_page() -> None:
    world = hybrid_world()
    world.write(reading("a-1", NOW - HOUR, "once"))
    for other in range(30):
        world.write(reading(f"other-{other}", NOW - 20 * DAY + other * HOUR, f"o{other}"))
    svc = world.service(pruned=True)
    page = entity_page(svc, "a-1", NOW - 31 * DAY, NOW, limit=10)
    assert isinstance(page, ReadingsPage)
    assert [item.event_id for item in page.items] == ["once"]
    assert page.next_cursor is None and page.complete
    assert len(world.readings.requests) == 1
    assert page.cost.queries <= 1 + 32 + 1


def test_a_31_day_aggregate_of_a_quiet_entity_answers_within_the_call_cap() -> None:
    world = hybrid_world()
    world.write(reading("a-1", NOW - 10 * DAY, "x"))
    world.write(reading("a-1", NOW - 2 * HOUR, "y"))
    pruned, plain = world.service(pruned=True), world.service(pruned=False)
    series = hourly(pruned, "a-1", NOW - 31 * DAY, NOW)
    assert isinstance(series, AggregateSeries)
    assert series.readings == 2 and series.cost.queries <= 1 + 32 + 2
    # The unpruned plan opens all 744 hourly partitions: past the default cap of 200.
    try:
        hourly(plain, "a-1", NOW - 31 * DAY, NOW)
    except ScanLimitExceeded:
        pass
    else:
        raise AssertionError("the unpruned aggregate should pass the call cap")


def test_a_busy_entity_on_few_suffixes_pays_one_occupancy_query_per_page() -> None:
    # Given an entity writing every 10 minutes for 31 days over 4 random suffixes
    layout = Layout.from_settings(kind="random", bucket="1h", table_prefix="readings")
    world = World(layout, ShardMap.initial(layout.bucket, 4), NOW - 40 * DAY)
    for n in range(31 * 144):
        world.write(reading("busy", NOW - 31 * DAY + n * 600_000, f"b{n:05d}"))
    # When its first page of the month is read
    page = entity_page(world.service(pruned=True), "busy", NOW - 31 * DAY, NOW, limit=50)
    # Then one day's occupancy was enough to plan it
    assert isinstance(page, ReadingsPage) and page.count == 50 and page.next_cursor is not None
    occupancy_queries = page.cost.queries - len(world.readings.requests)
    assert occupancy_queries == 1


def test_without_a_marker_nothing_is_pruned() -> None:
    # Given readings written with no marker stored (recording never started, or data from before it)
    world = hybrid_world(since_ms=None, shards=4)
    world.write(reading("a-1", NOW - HOUR, "x"), recorded=False)
    page = range_page(world.service(pruned=True), NOW - 2 * HOUR, NOW)
    assert isinstance(page, ReadingsPage)
    assert [item.event_id for item in page.items] == ["x"]
    assert len(world.readings.requests) >= 8  # every shard of both buckets


def test_data_older_than_the_marker_is_read_unpruned() -> None:
    world = hybrid_world(since_ms=NOW - HOUR, shards=4)
    world.write(reading("a-1", NOW - 3 * HOUR, "before"), recorded=False)
    world.write(reading("a-1", NOW - 30 * 60_000, "after"))
    items, _ = follow(entity_page, world.service(pruned=True), "a-1", NOW - DAY, NOW)
    assert [event for _, _, event in items] == ["before", "after"]


def test_a_consistent_read_bypasses_a_stale_cache() -> None:
    # Given a reader that has cached an empty day
    world = hybrid_world(shards=4)
    reader = OccupancyReader(world.store, ttl_s=3600)
    svc = world.service(pruned=True, reader=reader)
    first = entity_page(svc, "a-1", NOW - DAY, NOW)
    assert isinstance(first, ReadingsPage) and first.count == 0
    # When a reading lands in a new partition
    world.write(reading("a-1", NOW - HOUR, "new"))
    # Then a consistent read sees it at once; an eventually consistent one within the cache's TTL
    fresh = entity_page(svc, "a-1", NOW - DAY, NOW, consistent=True)
    assert isinstance(fresh, ReadingsPage) and [i.event_id for i in fresh.items] == ["new"]


def test_today_and_yesterday_are_read_afresh_older_days_through_the_cache() -> None:
    # Given a reader whose cache would keep a day for an hour, on a wall clock at NOW
    world = hybrid_world(shards=4)
    loads: list[int] = []
    read_day = world.store.read_day

    def counted(day_ms: int, prefix: str, **options: Any) -> Any:
        loads.append(day_ms)
        return read_day(day_ms, prefix, **options)

    world.store.read_day = counted  # type: ignore[method-assign]
    reader = OccupancyReader(world.store, ttl_s=3600, wall_ms=lambda: NOW)
    svc = world.service(pruned=True, reader=reader)
    today, yesterday, older = day_of(NOW), day_of(NOW) - DAY, day_of(NOW) - 2 * DAY
    # When each day is asked for twice
    for day in (today, today, yesterday, yesterday, older, older):
        reader.day(day, "")
    # Then today and yesterday were loaded each time, the older day once
    assert loads == [today, today, yesterday, yesterday, older]
    # And so a reading in a partition first written after a read shows in the next eventually
    # consistent read at once
    assert entity_page(svc, "a-1", NOW - DAY, NOW).count == 0
    world.write(reading("a-1", NOW - HOUR, "new"))
    assert [i.event_id for i in entity_page(svc, "a-1", NOW - DAY, NOW).items] == ["new"]


# -- the property: occupancy never hides a reading -------------------------------------------------


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(("hybrid", "calculated", "random")))
    period = draw(st.sampled_from((None, "day", "hour")))
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings", table_period=period)
    shard_map = ShardMap.initial(layout.bucket, draw(st.integers(1, 4)))
    changes = draw(st.lists(st.integers(1, 71), max_size=2, unique=True))
    for hour in sorted(changes):
        # A split or a new global count, effective at a bucket boundary inside the window.
        at = START + hour * HOUR
        if draw(st.booleans()):
            shard_map = shard_map.with_global(draw(st.integers(1, 5)), at, now_ms=at - 1)
        else:
            who, count = draw(st.sampled_from(ENTITIES)), draw(st.integers(2, 4))
            shard_map = shard_map.with_entity(who, count, at, now_ms=at - 1)
    since = draw(st.one_of(st.none(), st.integers(START - DAY, NOW)))
    rows = draw(
        st.lists(
            st.tuples(
                st.sampled_from(ENTITIES),
                st.integers(0, 3 * DAY - 1),
                st.booleans(),  # recorded, when written before the marker
                st.integers(1, 2),  # deliveries
            ),
            max_size=25,
        )
    )
    return {"layout": layout, "shard_map": shard_map, "since": since, "rows": rows}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workload=workloads(),
    span=st.tuples(st.integers(0, 3 * DAY - 1), st.integers(1, 3 * DAY)),
    order=st.sampled_from(("asc", "desc")),
    limit=st.integers(1, 7),
    cap=st.integers(1, 40),
    entity=st.sampled_from(ENTITIES),
)
def test_pruned_plans_return_exactly_what_unpruned_ones_do(  # noqa: PLR0917 - one argument per drawn dimension
    workload: dict[str, Any], span: tuple[int, int], order: str, limit: int, cap: int, entity: str
) -> None:
    # Given random readings over three days under a random key design and shard-map history,
    # some written before occupancy recording started (and then not recorded)
    world = World(workload["layout"], workload["shard_map"], workload["since"])
    since = workload["since"]
    for n, (who, offset, recorded, copies) in enumerate(workload["rows"]):
        ts = START + offset
        must_record = since is None or ts >= since
        world.write(reading(who, ts, f"e{n}"), recorded=recorded or must_record, copies=copies)
    start = START + span[0]
    end = min(NOW, start + span[1])
    window = {"order": order, "limit": limit}
    pruned = world.service(pruned=True, max_query_calls=cap, concurrency=3)
    plain = world.service(pruned=False, max_query_calls=cap, concurrency=3)

    # When the same reads follow their cursors with and without occupancy
    # Then they return the same readings, in the same order: every reading in the range, once
    got, _ = follow(entity_page, pruned, entity, start, end, **window)
    want, _ = follow(entity_page, plain, entity, start, end, **window)
    assert got == want
    expected = {
        (r.entity_id, r.ts, r.event_id) for r in world.expected if r.entity_id == entity and start <= r.ts_ms < end
    }
    assert set(got) == expected and len(got) == len(expected)

    if world.layout.kind == "hybrid":
        got, _ = follow(range_page, pruned, start, end, **window)
        want, _ = follow(range_page, plain, start, end, **window)
        assert got == want
        expected = {(r.entity_id, r.ts, r.event_id) for r in world.expected if start <= r.ts_ms < end}
        assert set(got) == expected and len(got) == len(expected)

    unbounded = {"max_query_calls": 100_000, "concurrency": 3}
    series = hourly(world.service(pruned=True, **unbounded), entity, start, end)
    reference = hourly(world.service(pruned=False, **unbounded), entity, start, end)
    assert isinstance(series, AggregateSeries) and isinstance(reference, AggregateSeries)
    assert series.intervals == reference.intervals and series.readings == reference.readings
