"""The demo's accounting, fed by hand: lost, duplicates, rejects by reason, load per partition."""

from __future__ import annotations

from typing import Any

import pytest

from infra.config import AppConfig
from keydesign import InvalidInput, Reading
from local_runtime.demo import HOT_SENSOR, NOT_RUN, DemoOptions, build_report, invalid_readings, partition_load, render

CONFIG = AppConfig.from_context({})


def item(pk: str, entity: str, event: str, second: int = 0) -> dict[str, Any]:
    return {
        "pk": pk,
        "sk": f"{entity}#{event}",
        "e": entity,
        "i": event,
        "t": f"2026-11-22T07:00:{second:02d}.000Z",
        "m": {"temp": 21},
    }


def reject(reject_id: str, field: str) -> dict[str, Any]:
    return {"reject_id": reject_id, "field": field, "reason": f"bad {field}"}


def report(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "options": DemoOptions(),
        "config": CONFIG,
        "published": 5,
        "failed_to_publish": 0,
        "stored": [item("a", "s-1", "e1"), item("a", "s-2", "e2"), item("b", "s-3", "e3")],
        "rejects": [reject("r1", "timestamp"), reject("r2", "data"), reject("r1", "timestamp")],
        "skipped": [],
        "drained": True,
        "runtime": {},
        "timings": {"total": 1.234},
        "event_time": (1_795_330_800_000, 1_795_330_806_000),
    }
    arguments.update(overrides)
    return build_report(**arguments)


def test_everything_accounted_for_is_ok() -> None:
    r = report()
    # A reject redelivered (same reject_id) counts once
    assert r["readings"] == {
        "published": 5,
        "failed_to_publish": 0,
        "written": 3,
        "rejected": 2,
        "lost": 0,
        "duplicates": 0,
        "stream_drained": True,
    }
    assert r["reject_messages"] == 3
    assert [(x["field"], x["count"]) for x in r["rejected_by_reason"]] == [("timestamp", 1), ("data", 1)]
    assert r["ok"] is True
    assert "OK" in render(r)


def test_a_missing_reading_is_lost_and_fails_the_demo() -> None:
    r = report(published=6)
    assert r["readings"]["lost"] == 1
    assert r["ok"] is False
    assert "FAILED" in render(r)


def test_a_reading_stored_twice_is_a_duplicate() -> None:
    stored = [item("a", "s-1", "e1"), item("b", "s-1", "e1"), item("a", "s-2", "e2"), item("b", "s-3", "e3")]
    r = report(stored=stored)
    assert r["readings"]["duplicates"] == 1
    assert r["readings"]["lost"] == 0
    assert r["ok"] is False


def test_a_stream_that_did_not_drain_fails_the_demo() -> None:
    assert report(drained=False)["ok"] is False


def test_skipped_batches_are_reported_with_their_records() -> None:
    skipped = [
        {"requestContext": {"condition": "RetryAttemptsExhausted"}, "KinesisBatchInfo": {"batchSize": 3}},
        {"requestContext": {"condition": "RecordAgeExceeded"}, "KinesisBatchInfo": {"batchSize": 2}},
    ]
    r = report(skipped=skipped)
    assert r["skipped_by_event_source"] == {
        "batches": 2,
        "records": 5,
        "conditions": {"RetryAttemptsExhausted": 1, "RecordAgeExceeded": 1},
    }


def test_steps_of_components_not_yet_wired_say_not_run_instead_of_numbers() -> None:
    r = report()
    for name in ("hot_keys", "shard_map_changes", "partition_load_after_split", "queries", "partition_load_picture"):
        assert r[name]["status"] == NOT_RUN
        assert set(r[name]) == {"status", "reason"}


def test_partition_load_is_write_units_per_partition_per_event_second() -> None:
    items = [item("hot", HOT_SENSOR, f"h{n}", second=n % 2) for n in range(6)]
    items += [item("cold", "s-1", "c1", second=0), {**item("big", "s-2", "b1"), "d": {"x": "y" * 3000}}]
    load = partition_load(items)
    assert load["partition_keys"] == 3
    assert (load["hottest_key"], load["hottest_peak_wcu_per_s"]) == ("big", 3)
    assert load["hot_sensor_keys"] == ["hot"] and load["hot_sensor_peak_wcu_per_s"] == 3
    assert load["keys_over_1000_wcu_per_s"] == 0
    assert [t["pk"] for t in load["top"]] == ["big", "hot", "cold"]
    assert partition_load([]) == {"partition_keys": 0}


def test_every_invalid_reading_really_is_invalid() -> None:
    for reading in invalid_readings(10, 1_795_330_800_000):
        with pytest.raises(InvalidInput):
            Reading.parse(reading, now_ms=1_795_330_800_000, max_future_ms=300_000)
