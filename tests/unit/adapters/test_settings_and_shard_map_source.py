"""Cold-start settings and the shard-map cache shared by every handler."""

from __future__ import annotations

import pytest

from adapters.settings import CommonSettings, SettingsError
from adapters.shard_map_source import CachedShardMap, StaticShardMap
from doubles.clocks import ManualClock
from keydesign import Bucket, ShardMap

VALID = {"TABLE_PREFIX": "readings", "SHARDS": "100"}


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"SHARDS": "100"}, "TABLE_PREFIX"),
        ({"TABLE_PREFIX": "readings"}, "SHARDS"),
        ({**VALID, "SHARDS": "many"}, "SHARDS"),
        ({**VALID, "SHARDS": "0"}, "SHARDS"),
        ({**VALID, "SHARDS": "10000"}, "SHARDS"),
        ({**VALID, "LAYOUT": "sharded"}, "LAYOUT"),
        ({**VALID, "BUCKET": "7m"}, "BUCKET"),
        ({**VALID, "TABLE_PERIOD": "year"}, "TABLE_PERIOD"),
        ({**VALID, "TABLE_PREFIX": "bad name!"}, "TABLE_PREFIX"),
        ({**VALID, "RETENTION": "forever"}, "RETENTION"),
        ({**VALID, "SHARD_MAP_CACHE_TTL": "1 minute"}, "SHARD_MAP_CACHE_TTL"),
    ],
)
def test_a_bad_variable_is_named(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as exc:
        CommonSettings.from_env(env)
    assert exc.value.variable == variable
    assert str(exc.value).startswith(f"environment variable {variable}:")


def test_cache_reloads_only_after_its_ttl() -> None:
    # Given a loader that returns a new map version on every call
    bucket = Bucket.parse("1h")
    calls: list[int] = []

    def loader() -> ShardMap:
        calls.append(1)
        return ShardMap(bucket, ShardMap.initial(bucket, len(calls)).global_history, version=len(calls))

    clock = ManualClock(0.0)
    cache = CachedShardMap(loader, ttl_ms=60_000, clock=clock)
    # When read repeatedly within the TTL, then it loads once
    assert cache.current().version == 1
    clock.now = 59.9
    assert cache.current().version == 1
    # When the TTL has passed, then it loads again
    clock.now = 60.0
    assert cache.current().version == 2
    assert len(calls) == 2


def test_cache_never_serves_an_expired_map_when_the_refresh_fails() -> None:
    bucket = Bucket.parse("1h")
    state = {"fail": False}

    def loader() -> ShardMap:
        if state["fail"]:
            raise ConnectionError("control table unreachable")
        return ShardMap.initial(bucket, 4)

    clock = ManualClock(0.0)
    cache = CachedShardMap(loader, ttl_ms=1_000, clock=clock)
    assert cache.current().global_shards_at(0) == 4
    state["fail"] = True
    clock.now = 0.5
    assert cache.current().global_shards_at(0) == 4  # still within its TTL
    clock.now = 1.0
    with pytest.raises(ConnectionError):
        cache.current()


def test_static_source_returns_its_map() -> None:
    shard_map = ShardMap.initial(Bucket.parse("1h"), 8)
    assert StaticShardMap(shard_map).current() is shard_map


def test_render_writes_exactly_the_given_settings_under_their_variables() -> None:
    env = CommonSettings.render(shards=64, retention_ms=7 * 86_400_000, table_period=None, control_table="control")
    assert env == {"SHARDS": "64", "RETENTION": "7d", "CONTROL_TABLE": "control"}
    assert CommonSettings.from_env({**env, "TABLE_PREFIX": "readings"}).retention_ms == 7 * 86_400_000


def test_render_refuses_a_setting_the_model_does_not_have() -> None:
    with pytest.raises(TypeError, match="shard_count"):
        CommonSettings.render(shard_count=64)
