"""A table deployed before blocks: items of one reading each (``e``, ``t``, ``i``, ``m``, ``d``, sort key
``<entity>#<ts>#<event id>`` or ``<ts>#<event id>``) beside the blocks written since the upgrade, on moto.

Every route returns both, each reading once and in order, an old item counting as a block of one
reading older than every block: a reading stored both ways (a batch delivered again after the
upgrade, here with other values) comes back as the block has it. The rollup function's raw read
counts the same readings.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.batch_writer import BatchWriter
from adapters.partition_reader import DynamoPartitionReader
from adapters.rollup_store import ReadCount, RollupStore
from adapters.shard_map_source import StaticShardMap
from keydesign import Reading, ShardMap, format_ts
from keydesign.periods import Bucket
from keydesign.rollup import Granularities
from rollup.logic import RollupRunner
from tests.integration.query.conftest import (
    HOUR,
    LAYOUT_KINDS,
    NOW,
    PREFIX,
    Store,
    Written,
    api_for,
    pages,
    reading,
    shared_store,
)
from tests.legacy_items import legacy_item
from tests.unit.query.apigw import entity_path

pytestmark = pytest.mark.integration

FROM, TO = NOW - 6 * HOUR, NOW
#: When the deployment was upgraded: old items before it (and a little after: late ones), blocks after.
UPGRADE = NOW - 2 * HOUR
ENTITIES = ("sensor-1", "sensor-2", "sensor-3")
MINUTE = 60_000


def put_legacy(store: Store, r: Reading, *, ttl: int | None = None) -> None:
    """Store ``r`` as an item of the format before blocks, as ingest did before the upgrade."""
    item = legacy_item(r, store.layout, store.shard_map, ttl=ttl)
    store.dynamodb.put_item(TableName=store.layout.table_for(r.ts_ms), Item=item)
    store.written.append(Written(r, ttl, store.layout.reading_key(r.entity_id, r.ts, r.event_id)))


def upgraded_stores(
    kinds: tuple[str, ...] = LAYOUT_KINDS, periods: tuple[str | None, ...] = (None,)
) -> pytest.MarkDecorator:
    """``store`` (indirect) parametrized with each of ``kinds`` and ``periods``; the test ids name what varies."""
    params = [(kind, period) for period in periods for kind in kinds]
    varies = (len(kinds) > 1, len(periods) > 1)
    ids = ["-".join(str(value) for value, shown in zip(param, varies, strict=True) if shown) for param in params]
    return pytest.mark.parametrize("store", params, indirect=True, ids=ids)


@pytest.fixture(scope="module")
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """:func:`upgraded` for the test's (kind, period), written once for the whole module: its tests only read it."""
    kind, period = request.param
    shard_map = ShardMap.initial(Bucket.parse("1h"), 3).with_entity("sensor-1", 3, NOW - 4 * HOUR, now_ms=FROM)
    with shared_store(kind, shard_map=shard_map, table_period=period) as made:
        upgraded(made)
        yield made


def upgraded(store: Store) -> None:
    """Four hours of old items, then blocks; they meet in a few seconds where a block's span holds old
    items, and ten old readings are delivered again after the upgrade as blocks, five with other values.
    sensor-1 is split over 3 partitions from four hours ago; sensor-3 has old items only."""
    rng = random.Random(36)
    old: dict[str, list[Reading]] = defaultdict(list)
    for entity in ENTITIES:
        for n in range(30):
            ts = FROM + rng.randrange(0, UPGRADE - FROM)
            r = reading(entity, ts, f"o{n:02d}", temp=round(rng.uniform(-20, 40), 2), rh=float(n))
            put_legacy(store, r, ttl=NOW // 1000 - 1 if n == 7 else NOW // 1000 + 86_400)  # o07 has expired
            old[entity].append(r)
        # three readings of one millisecond, and one with a dimension and a whole-number measure
        for event in ("m-a", "m-c", "m-b"):
            put_legacy(store, reading(entity, UPGRADE - 5 * MINUTE, event, temp=1.5))
        put_legacy(
            store,
            Reading.parse(
                {
                    "entity_id": entity,
                    "timestamp": UPGRADE - 4 * MINUTE,
                    "event_id": "dim",
                    "measures": {"count": 3},
                    "dimensions": {"site": "p7"},
                }
            ),
        )
    # Where they meet: old items every second from the upgrade, and a block whose span holds them
    for entity in ENTITIES[:2]:
        for k in range(9):
            put_legacy(store, reading(entity, UPGRADE + k * 1_000, f"edge-old{k}", temp=float(k)))
        store.write_batch(
            [reading(entity, UPGRADE + k * 1_000 + 500, f"edge-new{k}", temp=-float(k)) for k in range(9)]
        )
        # After the upgrade: batches of readings a few seconds apart, up to a minute ago
        at = UPGRADE + 20_000
        n = 0
        while at < NOW - MINUTE:
            batch = [reading(entity, at + i * 700, f"b{n:03d}-{i}", temp=rng.uniform(-20, 40)) for i in range(6)]
            store.write_batch(batch)
            at += rng.randrange(60_000, 600_000)
            n += 1
        # Ten old readings delivered again after the upgrade: five as they were, five with other values
        again = sorted(old[entity], key=lambda r: r.ts_ms)[10:20]
        for i, r in enumerate(again):
            changed = Reading(r.entity_id, r.event_id, r.ts_ms, {"temp": 1000.0 + i}) if i % 2 else r
            store.write_batch([changed])
    # sensor-2's newest reading is stored both ways: the block's copy, with other values, wins
    newest = reading("sensor-2", NOW - 10_000, "last", temp=1.0)
    put_legacy(store, newest)
    store.write(reading("sensor-2", NOW - 10_000, "last", temp=2.0))


def shown(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(i["entity_id"], i["timestamp"], i["event_id"], i["measures"], i.get("dimensions") or {}) for i in items]


def expected_of(rows: list[Written]) -> list[tuple[Any, ...]]:
    return [
        (w.reading.entity_id, w.reading.ts, w.reading.event_id, dict(w.reading.measures), dict(w.reading.dimensions))
        for w in rows
    ]


@upgraded_stores(periods=(None, "hour"))
def test_an_entitys_pages_return_old_items_and_blocks_once_in_order(store: Store) -> None:
    # Given a table holding items from before blocks beside blocks
    api = api_for(store)
    for entity in ENTITIES:
        expected = expected_of(store.expected(entity, FROM, TO))
        assert any(r[3].get("temp", 0) >= 1000 for r in expected) or entity == "sensor-3"
        for limit in (7, 1000):
            # When an entity's range is followed page by page, in both orders
            up, _ = pages(api, entity_path(entity, "readings"), from_=format_ts(FROM), to=format_ts(TO), limit=limit)
            down, _ = pages(
                api,
                entity_path(entity, "readings"),
                from_=format_ts(FROM),
                to=format_ts(TO),
                limit=limit,
                order="desc",
            )
            # Then every live reading comes once, in time order, a reading stored both ways as its block has it
            assert shown(up) == expected, (entity, limit)
            assert shown(down) == expected[::-1], (entity, limit)


@upgraded_stores(kinds=("hybrid",), periods=(None, "hour"))
def test_cross_entity_pages_return_old_items_and_blocks_once_in_order(store: Store) -> None:
    api = api_for(store)
    expected = expected_of(store.expected_range(FROM, TO))

    up, _ = pages(api, "/readings", from_=format_ts(FROM), to=format_ts(TO), limit=9)
    down, _ = pages(api, "/readings", from_=format_ts(FROM), to=format_ts(TO), limit=9, order="desc")

    assert shown(up) == expected
    assert shown(down) == expected[::-1]


@upgraded_stores()
def test_latest_is_an_old_item_when_it_is_the_newest_and_the_block_when_both_hold_it(store: Store) -> None:
    api = api_for(store)

    only_old = api.get(entity_path("sensor-3", "latest"))
    both = api.get(entity_path("sensor-2", "latest"))

    assert only_old.status == 200, only_old.body
    newest_old = store.expected("sensor-3", FROM, TO)[-1].reading
    assert (only_old.body["reading"]["timestamp"], only_old.body["reading"]["event_id"]) == (newest_old.ts, "dim")
    assert newest_old.dimensions == {"site": "p7"} and only_old.body["reading"]["dimensions"] == {"site": "p7"}
    assert only_old.body["reading"]["measures"] == {"count": 3}
    assert both.status == 200, both.body
    assert (both.body["reading"]["event_id"], both.body["reading"]["measures"]) == ("last", {"temp": 2.0})


def brute_force(rows: list[Written], interval: int) -> dict[str, tuple[int, float]]:
    out: dict[str, tuple[int, float]] = {}
    for w in rows:
        start = format_ts(w.reading.ts_ms - w.reading.ts_ms % interval)
        count, total = out.get(start, (0, 0.0))
        out[start] = (count + 1, total + w.reading.measures.get("temp", 0.0))
    return out


@upgraded_stores()
def test_raw_aggregates_count_old_items_and_blocks_once(store: Store) -> None:
    api = api_for(store)
    for entity in ENTITIES:
        reply = api.get(entity_path(entity, "aggregates"), from_=format_ts(FROM), to=format_ts(TO), interval="30m")

        assert reply.status == 200, reply.body
        assert reply.body["source"] == "raw"
        got = {
            i["start"]: (i["readings"], i["measures"].get("temp", {}).get("sum", 0.0)) for i in reply.body["intervals"]
        }
        expected = brute_force(store.expected(entity, FROM, TO), 30 * MINUTE)
        assert list(got) == list(expected)
        for start, (count, total) in expected.items():
            assert got[start] == (count, pytest.approx(total)), start


@upgraded_stores()
def test_the_rollups_raw_read_counts_old_items_and_blocks_once(store: Store) -> None:
    # Given the upgraded table, and the rollup function's recomputation over it (its raw read)
    runner = RollupRunner(
        layout=store.layout,
        shard_maps=StaticShardMap(store.shard_map),
        reader=DynamoPartitionReader(store.dynamodb),
        store=RollupStore(
            store.dynamodb, BatchWriter(store.dynamodb, concurrency=1), "control", PREFIX, 30 * 86_400_000
        ),
        granularities=Granularities.parse("1m,1h"),
        lateness_ms=3 * 86_400_000,
        settle_ms=MINUTE,
        clock_ms=lambda: NOW,
    )
    try:
        for entity in ENTITIES:
            starts = list(range(FROM, TO, 30 * MINUTE))
            figures = runner.raw_figures(entity, starts, 30 * MINUTE, ReadCount())
            # Then each interval counts what the raw reads return: every live reading once, the block's copy
            expected = brute_force(store.expected(entity, FROM, TO), 30 * MINUTE)
            got = {
                format_ts(start): (f.readings, f.measures["temp"].total if "temp" in f.measures else 0.0)
                for start, f in figures.items()
                if f.readings
            }
            assert got.keys() == expected.keys()
            for start, (count, total) in expected.items():
                assert got[start] == (count, pytest.approx(total)), (entity, start)
    finally:
        runner.close()
