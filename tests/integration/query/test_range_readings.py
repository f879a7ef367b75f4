"""GET /readings (cross-entity, hybrid layout) on moto: every shard of every bucket, exact paging."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from keydesign import Bucket, ShardMap, format_ts
from tests.integration.query.conftest import (
    HOUR,
    NOW,
    Store,
    api_for,
    pages,
    reading,
    shared_store,
    summary,
    summary_of,
)

pytestmark = pytest.mark.integration

START = NOW - 6 * HOUR
SPLIT = NOW - 3 * HOUR
ENTITIES = ["a", "a-1", "b.7", "sensor-hot", "z/9", "Q"]


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    """One for the whole module: its tests only read it."""
    # Given four base shards becoming six, and one entity split into three partitions of its own
    bucket = Bucket.parse("1h")
    shard_map = (
        ShardMap.initial(bucket, 4)
        .with_global(6, NOW - 4 * HOUR, now_ms=START)
        .with_entity("sensor-hot", 3, SPLIT, now_ms=START)
    )
    with shared_store("hybrid", shard_map=shard_map) as made:
        for n in range(90):
            entity = ENTITIES[n % len(ENTITIES)]
            made.write(
                reading(entity, START + n * 233_333, f"e{n:03d}", v=float(n)),
                ttl=NOW // 1000 - 1 if n % 17 == 3 else None,
            )
        for k in range(4):  # several readings of several entities in one millisecond
            made.write(reading(ENTITIES[k], SPLIT + 5, f"same-ms-{k}"))
        yield made


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("limit", [1, 3, 7, 1000])
def test_pages_concatenate_to_every_reading_once_in_the_documented_order(store: Store, limit: int, order: str) -> None:
    # Given a range that starts and ends inside buckets (partial buckets are filtered on time)
    from_ms, to_ms = START + 20 * 60_000, NOW - 10 * 60_000
    api = api_for(store)

    items, bodies = pages(api, "/readings", from_=format_ts(from_ms), to=format_ts(to_ms), limit=limit, order=order)

    # Then the pages hold each live reading exactly once: bucket by bucket, then entity, then time
    expected = summary_of(store.expected_range(from_ms, to_ms))
    assert summary(items) == (expected if order == "asc" else expected[::-1])
    assert all(b["entity_id"] is None and b["ordering"].startswith("bucket by bucket") for b in bodies)


def test_each_entity_comes_in_time_order_across_pages(store: Store) -> None:
    api = api_for(store)

    items, _ = pages(api, "/readings", from_=format_ts(START), to=format_ts(NOW), limit=5)

    for entity in ENTITIES:
        times = [i["timestamp"] for i in items if i["entity_id"] == entity]
        assert times == sorted(times)
        assert len(times) == len(store.expected(entity, START, NOW))


def test_a_page_fans_out_to_every_shard_of_a_bucket(store: Store) -> None:
    api = api_for(store)

    reply = api.get("/readings", from_=format_ts(SPLIT), to=format_ts(SPLIT + HOUR), limit=1000)

    # six base shards plus the split entity's three partitions, one bucket
    assert reply.body["cost"]["partitions_planned"] == 9
    assert reply.body["cost"]["partitions_queried"] == 9
    assert summary(reply.body["items"]) == summary_of(store.expected_range(SPLIT, SPLIT + HOUR))
