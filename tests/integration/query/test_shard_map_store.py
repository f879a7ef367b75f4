"""With CONTROL_TABLE set, the query Lambda plans with the stored shard map (read, never written)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.observability import metrics
from adapters.shard_map_store import SHARD_MAP_KEY, ShardMapStore
from keydesign import Bucket, ShardMap, format_ts
from query.api import create_app
from query.logic import QueryService
from query.settings import QuerySettings
from tests.integration.mocked_aws import create_readings_table
from tests.integration.query.conftest import HOUR, NOW, PREFIX, StoreFactory, reading
from tests.unit.query.apigw import ApiClient, entity_path

pytestmark = pytest.mark.integration

START = NOW - 6 * HOUR
SPLIT = NOW - 3 * HOUR
CONTROL = "control"
ENV = {"LAYOUT": "hybrid", "SHARDS": "4", "BUCKET": "1h", "TABLE_PREFIX": PREFIX, "CURSOR_SECRET": "c" * 40}


def api(env: dict[str, str]) -> ApiClient:
    return ApiClient(create_app(QueryService.from_settings(QuerySettings.from_env(env))).resolve)


def test_a_split_recorded_in_the_store_is_followed(make_store: StoreFactory) -> None:
    # Given the hot-key detector split an entity at SPLIT, and readings written under that map
    initial = ShardMap.initial(Bucket.parse("1h"), 4)
    split = initial.with_entity("sensor-hot", 3, SPLIT, now_ms=START)
    store = make_store("hybrid", shard_map=split)
    create_readings_table(store.dynamodb, CONTROL)
    ShardMapStore(store.dynamodb, CONTROL, initial, clock_ms=lambda: START).apply(
        lambda m: m.with_entity("sensor-hot", 3, SPLIT, now_ms=START), reason="test: hot entity"
    )
    for n in range(36):
        store.write(reading("sensor-hot", START + n * 600_000, f"e{n:02d}"))
    params: dict[str, Any] = {"from_": format_ts(START), "to": format_ts(NOW), "limit": 1000}
    path = entity_path("sensor-hot", "readings")

    # When it is read with the store, and (for contrast) with only the configured SHARDS
    with_store = api({**ENV, "CONTROL_TABLE": CONTROL}).get(path, **params)
    static = api(ENV).get(path, **params)

    # Then the store's map finds every reading; the static map misses those after the split
    assert [i["event_id"] for i in with_store.body["items"]] == [f"e{n:02d}" for n in range(36)]
    assert static.body["count"] == 18


def test_without_a_stored_map_the_initial_one_is_used_and_nothing_is_written(make_store: StoreFactory) -> None:
    store = make_store("hybrid")
    create_readings_table(store.dynamodb, CONTROL)
    store.write(reading("sensor-1", NOW - HOUR, "e1"))

    reply = api({**ENV, "CONTROL_TABLE": CONTROL}).get(
        entity_path("sensor-1", "readings"), from_=format_ts(NOW - 2 * HOUR), to=format_ts(NOW)
    )

    assert [i["event_id"] for i in reply.body["items"]] == ["e1"]
    assert store.dynamodb.scan(TableName=CONTROL)["Count"] == 0


def test_a_warm_function_answers_from_its_last_good_map_when_the_stored_one_breaks(make_store: StoreFactory) -> None:
    # Given readings written under a split, and a query function (re-reading the map on every request) that has read it
    initial = ShardMap.initial(Bucket.parse("1h"), 4)
    store = make_store("hybrid", shard_map=initial.with_entity("sensor-hot", 3, SPLIT, now_ms=START))
    create_readings_table(store.dynamodb, CONTROL)
    ShardMapStore(store.dynamodb, CONTROL, initial, clock_ms=lambda: START).apply(
        lambda m: m.with_entity("sensor-hot", 3, SPLIT, now_ms=START), reason="test: hot entity"
    )
    for n in range(36):
        store.write(reading("sensor-hot", START + n * 600_000, f"e{n:02d}"))
    env = {**ENV, "CONTROL_TABLE": CONTROL, "SHARD_MAP_CACHE_TTL": "0s"}
    emitted: list[dict[str, Any]] = []
    app = create_app(QueryService.from_settings(QuerySettings.from_env(env)))

    def resolve(event: dict[str, Any], context: Any) -> dict[str, Any]:
        answer = app.resolve(event, context)
        emitted.append(metrics.serialize_metric_set())
        return answer

    warm = ApiClient(resolve)
    params: dict[str, Any] = {"from_": format_ts(START), "to": format_ts(NOW), "limit": 1000}
    path = entity_path("sensor-hot", "readings")
    assert warm.get(path, **params).body["count"] == 36
    # When the stored map breaks (its head's JSON cut short)
    head = store.dynamodb.get_item(TableName=CONTROL, Key=dict(SHARD_MAP_KEY))["Item"]
    store.dynamodb.put_item(TableName=CONTROL, Item={**head, "map": {"S": head["map"]["S"][:20]}})
    # Then the warm function still finds every reading, with the map it read last, and says so (alarmed)
    reply = warm.get(path, **params)
    assert reply.status == 200 and [i["event_id"] for i in reply.body["items"]] == [f"e{n:02d}" for n in range(36)]
    assert "ShardMapFallbacks" in emitted[-1] and "ShardMapFallbacks" not in emitted[0]
    # And a cold one, with no good map to fall back on, fails the request rather than plan with a guess
    assert api(env).get(path, **params).status == 500
