"""explain=true: the plan instead of the data, exactly the key-design layer's plan, and no reads."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.partition_reader import DynamoPartitionReader, Page, PageRequest
from keydesign import Bucket, ShardMap, format_ts
from query.settings import QueryLimits
from tests.integration.query.conftest import HOUR, LAYOUT_KINDS, NOW, Store, StoreFactory, api_for
from tests.unit.query.apigw import entity_path

pytestmark = pytest.mark.integration

FROM, TO = NOW - 5 * HOUR - 60_000, NOW - HOUR + 60_000


class Counting:
    def __init__(self, inner: DynamoPartitionReader) -> None:
        self.inner = inner
        self.calls = 0

    def read_page(self, request: PageRequest) -> Page:
        self.calls += 1
        return self.inner.read_page(request)


def planned(plan: Any) -> list[dict[str, Any]]:
    return [
        {
            "table": p.table,
            "pk": p.pk,
            "sk_low": p.sk_low,
            "sk_high": p.sk_high,
            "from": format_ts(p.from_ms),
            "to": format_ts(p.to_ms),
            "time_filter": p.time_filter,
            "kind": p.kind,
        }
        for p in plan.partitions
    ]


def store_with_history(make_store: StoreFactory, kind: str) -> Store:
    shard_map = ShardMap.initial(Bucket.parse("1h"), 2).with_global(4, NOW - 3 * HOUR, now_ms=NOW - 4 * HOUR)
    return make_store(kind, shard_map=shard_map, table_period="day")


@pytest.mark.parametrize("kind", LAYOUT_KINDS)
def test_entity_readings_explain_the_key_design_plan_without_reading(make_store: StoreFactory, kind: str) -> None:
    store = store_with_history(make_store, kind)
    reader = Counting(DynamoPartitionReader(store.dynamodb))
    api = api_for(store, reader=reader)

    reply = api.get(
        entity_path("sensor-1", "readings"), from_=format_ts(FROM), to=format_ts(TO), explain=True, limit=50
    )

    plan = store.layout.plan_entity("sensor-1", FROM, TO, store.shard_map)
    body = reply.body
    assert reply.status == 200
    assert reader.calls == 0
    assert body["partitions"] == planned(plan)
    assert body["partition_count"] == len(plan.partitions)
    assert body["tables"] == ["readings-2026-11-22"]
    assert (body["layout"], body["bucket"], body["table_period"], body["dedupe"]) == (
        kind,
        "1h",
        "day",
        True,  # a reading may be in several blocks on every layout
    )
    assert body["minimum_read_units"] == 0.5 * len(plan.partitions)
    # 50 readings x 32 B of block nominal = 1,600 B: one 4 KB unit, half price when eventually consistent
    assert body["estimated_read_units"] == body["minimum_read_units"] + 0.5


def test_consistent_reads_are_estimated_at_full_price(make_store: StoreFactory) -> None:
    store = store_with_history(make_store, "hybrid")
    api = api_for(store)

    eventual = api.get(entity_path("sensor-1", "readings"), from_=format_ts(FROM), to=format_ts(TO), explain=True)
    strong = api.get(
        entity_path("sensor-1", "readings"), from_=format_ts(FROM), to=format_ts(TO), explain=True, consistent=True
    )

    assert strong.body["minimum_read_units"] == 2 * eventual.body["minimum_read_units"]


def test_cross_entity_reads_explain_every_shard_of_every_bucket(make_store: StoreFactory) -> None:
    store = store_with_history(make_store, "hybrid")
    api = api_for(store)

    reply = api.get("/readings", from_=format_ts(FROM), to=format_ts(TO), explain=True)

    plan = store.layout.plan_range(FROM, TO, store.shard_map)
    assert reply.body["partitions"] == planned(plan)
    # 2 shards for the three buckets before the change, 4 for the three after; the partial
    # first and last buckets filter on time
    assert reply.body["partition_count"] == 2 * 3 + 4 * 3
    assert [p["time_filter"] for p in reply.body["partitions"]].count(True) == 2 + 4


def test_latest_and_aggregates_explain_too(make_store: StoreFactory) -> None:
    store = store_with_history(make_store, "calculated")
    api = api_for(store, limits=QueryLimits(latest_lookback_ms=6 * HOUR, max_scan_items=1000))

    latest = api.get(entity_path("sensor-1", "latest"), explain=True)
    aggregates = api.get(
        entity_path("sensor-1", "aggregates"), from_=format_ts(FROM), to=format_ts(TO), interval="1h", explain=True
    )

    assert latest.body["route"] == "latest"
    assert latest.body["order"] == "desc"
    assert latest.body["from"] == format_ts(NOW - 6 * HOUR)
    assert aggregates.body["route"] == "aggregates"
    # the estimate of an aggregate is its ceiling: 1,000 readings x 32 B = 8 units of 4 KB, halved
    assert aggregates.body["estimated_read_units"] == aggregates.body["minimum_read_units"] + 4.0


def test_a_huge_plan_lists_its_first_thousand_partitions(make_store: StoreFactory) -> None:
    store = make_store("hybrid", shards=64)
    api = api_for(store)

    reply = api.get("/readings", from_=format_ts(NOW - 20 * HOUR), to=format_ts(NOW), explain=True)

    assert reply.body["partition_count"] == 64 * 20
    assert len(reply.body["partitions"]) == 1000
    assert reply.body["partitions_truncated"] is True
