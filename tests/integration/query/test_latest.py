"""GET /entities/{id}/latest on moto: backwards through empty buckets, bounded by the lookback."""

from __future__ import annotations

import pytest

from keydesign import Bucket, ShardMap, format_ts
from query.settings import QueryLimits
from tests.integration.query.conftest import HOUR, LAYOUT_KINDS, NOW, StoreFactory, api_for, reading
from tests.unit.query.apigw import entity_path

pytestmark = pytest.mark.integration

DAY = 24 * HOUR
LIMITS = QueryLimits(latest_lookback_ms=7 * DAY)


@pytest.mark.parametrize("kind", LAYOUT_KINDS)
def test_the_latest_reading_is_found_behind_empty_buckets(make_store: StoreFactory, kind: str) -> None:
    # Given readings up to 30 hours ago, a later one of another entity, and nothing since
    store = make_store(kind)
    for n in range(10):
        store.write(reading("sensor-1", NOW - 40 * HOUR + n * HOUR, f"e{n}", temp=float(n)))
    store.write(reading("sensor-2", NOW - 1000, "other"))
    api = api_for(store, limits=LIMITS)

    reply = api.get(entity_path("sensor-1", "latest"))

    assert reply.status == 200
    assert reply.body["reading"]["event_id"] == "e9"
    assert reply.body["reading"]["timestamp"] == format_ts(NOW - 31 * HOUR)
    assert reply.body["searched_from"] == format_ts(NOW - 7 * DAY)
    if kind == "hybrid":
        # Walked backwards in batches of 1, 2, 4, 8, 16, 16 buckets (six round trips, not 32):
        # at most one batch of the concurrency window is read past the bucket that held it.
        assert 32 <= reply.body["cost"]["partitions_queried"] <= 32 + LIMITS.concurrency
        assert reply.body["cost"]["partitions_planned"] == 7 * 24 + 1


def test_the_newest_of_several_partitions_wins(make_store: StoreFactory) -> None:
    store = make_store("random", shards=8)
    for n in range(40):
        store.write(reading("sensor-1", NOW - HOUR + n * 1000, f"e{n:02d}"))
    store.write(reading("sensor-1", NOW - HOUR + 39 * 1000, "e39-twin"))

    reply = api_for(store, limits=LIMITS).get(entity_path("sensor-1", "latest"))

    assert reply.body["reading"]["event_id"] == "e39-twin"  # same millisecond: the larger event id


def test_an_expired_latest_reading_is_skipped(make_store: StoreFactory) -> None:
    store = make_store("hybrid")
    store.write(reading("sensor-1", NOW - 3 * HOUR, "live"))
    store.write(reading("sensor-1", NOW - HOUR, "expired"), ttl=NOW // 1000 - 5)

    reply = api_for(store, limits=LIMITS).get(entity_path("sensor-1", "latest"))

    assert reply.body["reading"]["event_id"] == "live"


def test_nothing_within_the_lookback_is_a_null_reading(make_store: StoreFactory) -> None:
    store = make_store("hybrid")
    store.write(reading("sensor-1", NOW - 8 * DAY, "too-old"))
    store.write(reading("sensor-1", NOW + HOUR, "future"))
    api = api_for(store, limits=LIMITS)

    default = api.get(entity_path("sensor-1", "latest"))
    narrow = api.get(entity_path("sensor-1", "latest"), lookback="2h")

    assert default.status == narrow.status == 200
    assert default.body["reading"] is None
    assert narrow.body["reading"] is None
    assert narrow.body["searched_from"] == format_ts(NOW - 2 * HOUR)
    assert narrow.body["searched_to"] == format_ts(NOW)


def test_a_lookback_beyond_the_setting_is_refused(make_store: StoreFactory) -> None:
    reply = api_for(make_store("hybrid"), limits=LIMITS).get(entity_path("sensor-1", "latest"), lookback="8d")

    assert reply.status == 400
    assert reply.body["parameter"] == "lookback"
    assert "7d" in reply.body["error"]


def test_latest_follows_a_split_entity_into_its_own_partitions(make_store: StoreFactory) -> None:
    split_at = NOW - 2 * HOUR
    shard_map = ShardMap.initial(Bucket.parse("1h"), 4).with_entity("sensor-1", 5, split_at, now_ms=split_at - 1)
    store = make_store("hybrid", shard_map=shard_map)
    for n in range(12):
        store.write(reading("sensor-1", split_at - 2 * HOUR + n * 17 * 60_000, f"e{n:02d}", temp=float(n)))

    reply = api_for(store, limits=LIMITS).get(entity_path("sensor-1", "latest"), measures="temp")

    assert reply.body["reading"]["event_id"] == "e11"
    assert reply.body["reading"]["measures"] == {"temp": 11.0}
