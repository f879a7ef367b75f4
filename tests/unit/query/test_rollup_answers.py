"""Aggregates from rollups: the same figures as the raw readings give, for far fewer items read."""

from __future__ import annotations

import random

import pytest

from adapters.batch_writer import BatchWriter
from adapters.retry import Deadline
from adapters.rollup_store import RollupStore
from adapters.shard_map_source import StaticShardMap
from doubles.memory_dynamo import MemoryDynamo as FakeDynamo
from doubles.memory_dynamo import MemoryReader
from keydesign import InvalidInput, Layout, Reading, ShardMap, format_ts
from keydesign.rollup import Granularities
from query.api import create_app
from query.logic import QueryService
from query.models import AggregateSeries, Explanation
from query.params import ReadArgs, TimeRange
from query.rollups import RollupAnswers
from rollup.logic import RollupRunner
from tests.unit.query.apigw import ApiClient, memory_service
from tests.unit.rollup.oracles import marks_of

MINUTE, HOUR = 60_000, 3_600_000
T0 = 1_795_000_000_000 - 1_795_000_000_000 % 86_400_000  # a day boundary
LEVELS = Granularities.parse("1m,1h,1d")


@pytest.fixture(scope="module")
def world() -> tuple[QueryService, QueryService, MemoryReader]:
    """Three hours of two entities, rolled up through T0 + 2h (the last hour is not yet rolled up)."""
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    shard_maps = StaticShardMap(ShardMap.initial(layout.bucket, 4))
    reader = MemoryReader(page_items=50)
    reader.tables.add("readings")
    db = FakeDynamo(page_items=100, get_limit=100)
    store = RollupStore(db, BatchWriter(db, concurrency=1), "control", "readings", 30 * 86_400_000)
    rng = random.Random(7)
    now = [T0 - 2 * MINUTE]
    runner = RollupRunner(
        layout=layout,
        shard_maps=shard_maps,
        reader=reader,
        store=store,
        granularities=LEVELS,
        lateness_ms=HOUR,
        settle_ms=2 * MINUTE,
        clock_ms=lambda: now[0],
        concurrency=2,
    )
    runner.run(Deadline.never())
    for minute in range(180):
        readings = [
            Reading(
                entity_id=entity,
                event_id=f"{minute}-{n}",
                ts_ms=T0 + minute * MINUTE + rng.randrange(MINUTE),
                measures={"v": rng.randrange(-50, 50)},
            )
            for entity in ("alpha", "beta")
            for n in range(rng.randrange(0, 6))
        ]
        reader.store(layout, shard_maps.current(), [(reading, minute) for reading in readings])
        marks = marks_of(T0 + minute * MINUTE, MINUTE, [(r.entity_id, r.ts_ms) for r in readings])
        store.write(store.marks_writes(marks), Deadline.never())
    now[0] = T0 + 2 * HOUR + 2 * MINUTE  # slots before T0 + 2h are closed
    runner.run(Deadline.never())

    def service(rollups: RollupAnswers | None) -> QueryService:
        return memory_service(layout, shard_maps.current(), reader, now_ms=T0 + 3 * HOUR, rollups=rollups)

    return service(RollupAnswers(store, LEVELS)), service(None), reader


def _figures(series: AggregateSeries | Explanation) -> list[tuple[str, int, dict[str, dict[str, float]]]]:
    assert isinstance(series, AggregateSeries)
    return [(i.start, i.readings, i.measures) for i in series.intervals]


@pytest.mark.parametrize(
    ("interval", "hours", "source"),
    [
        (MINUTE, 2, "rollups"),
        (HOUR, 2, "rollups"),
        (HOUR, 3, "rollups+raw"),
        (30 * MINUTE, 1, "rollups"),
        (90_000, 2, "raw"),
    ],
)
def test_rollups_answer_what_the_raw_readings_answer(world, interval: int, hours: int, source: str) -> None:
    rolled, raw, _ = world
    window = TimeRange(T0, T0 + hours * HOUR)
    # When the same aggregate is asked with and without rollups
    got = rolled.aggregates("alpha", window, interval)
    want = raw.aggregates("alpha", window, interval)
    # Then the figures are the same and the source is said, with the rollups' freshness
    assert isinstance(got, AggregateSeries) and isinstance(want, AggregateSeries)
    assert got.source == source and want.source == "raw"
    assert got.rollups_through == (None if source == "raw" else format_ts(T0 + 2 * HOUR))
    assert _figures(got) == _figures(want) and got.readings == want.readings > 0
    if source == "rollups":
        assert got.cost.items_read <= (window.to_ms - window.from_ms) // MINUTE < want.cost.items_read


def test_explain_says_which_source_and_why(world) -> None:
    rolled, _, _ = world
    explained = rolled.aggregates("alpha", TimeRange(T0, T0 + HOUR), 90_000, read=ReadArgs(explain=True))
    assert isinstance(explained, Explanation) and explained.source == "raw"
    assert "not a multiple of a rollup granularity (1m, 1h, 1d)" in (explained.source_reason or "")
    explained = rolled.aggregates("alpha", TimeRange(T0, T0 + HOUR), HOUR, read=ReadArgs(explain=True))
    assert isinstance(explained, Explanation) and explained.source == "rollups"


def test_every_entity_totals_equal_the_sum_of_the_entities(world) -> None:
    rolled, raw, _ = world
    window = TimeRange(T0, T0 + 3 * HOUR)
    total = rolled.total_aggregates(window, HOUR)
    assert total.reached == format_ts(T0 + 2 * HOUR) and total.entity_id is None
    assert total.cost.items_read == 2  # two hourly totals, no raw item
    parts = [raw.aggregates(e, TimeRange(T0, T0 + 2 * HOUR), HOUR) for e in ("alpha", "beta")]
    for index, interval in enumerate(total.intervals):
        mine = [p.intervals[index] for p in parts if isinstance(p, AggregateSeries)]
        assert interval.readings == sum(m.readings for m in mine)
        assert interval.measures["v"]["sum"] == sum(m.measures["v"]["sum"] for m in mine)
        assert interval.measures["v"]["max"] == max(m.measures["v"]["max"] for m in mine)


def test_every_entity_aggregates_refuse_what_rollups_cannot_answer(world) -> None:
    rolled, _, _ = world
    with pytest.raises(InvalidInput) as refused:
        rolled.total_aggregates(TimeRange(T0, T0 + HOUR), 90_000)
    assert refused.value.field == "interval"
    with pytest.raises(InvalidInput):
        rolled.total_aggregates(TimeRange(T0 + 30_000, T0 + HOUR), HOUR)


def test_the_every_entity_route_answers_and_refuses_with_the_api_error_shape(world) -> None:
    rolled, plain, _ = world
    api = ApiClient(create_app(rolled).resolve)
    window = {"from": format_ts(T0), "to": format_ts(T0 + 3 * HOUR)}
    # Seed 003's question, hourly over every entity
    reply = api.get("/aggregates", **window, interval="1h", stats="avg,count")
    assert reply.status == 200, reply.body
    assert reply.body["source"] == "rollups" and reply.body["entity_id"] is None
    assert [set(i["measures"]["v"]) for i in reply.body["intervals"]] == [{"avg", "count"}] * 2
    # An interval the rollups cannot tile, a typo, and a deployment without rollups: 400 naming the parameter
    assert api.get("/aggregates", **window, interval="90s").body["parameter"] == "interval"
    assert api.get("/aggregates", **window, interval="1h", entity="x").body["parameter"] == "entity"
    off = ApiClient(create_app(plain).resolve).get("/aggregates", **window, interval="1h")
    assert off.status == 400 and "ROLLUPS unset" in off.body["error"]
