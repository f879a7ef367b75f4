"""The demo's report, fed by hand: accounting, the split, partition load, placement, the checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.config import AppConfig
from keydesign import InvalidInput, Reading, ShardMap, build_item, parse_timestamp
from local_runtime.demo_presentation import render
from local_runtime.demo_report import (
    HOT_SENSOR,
    NOT_RUN,
    DemoFacts,
    Phase,
    StoredMap,
    build_report,
    hot_keys_section,
    hot_sensor_after_split,
    partition_load,
    placement_check,
)
from local_runtime.demo_scenario import invalid_readings

CONFIG = AppConfig.from_context({"bucket": "1m", "shards": 8})
LAYOUT = CONFIG.layout()
T0 = parse_timestamp("2026-11-22T07:00:00Z", "t")
BOUNDARY = T0 + 120_000
INITIAL = ShardMap.initial(LAYOUT.bucket, 8)
SPLIT = INITIAL.with_entity(HOT_SENSOR, 3, BOUNDARY, now_ms=T0 + 30_000)


def reading(entity: str, event: str, ts: int) -> dict[str, Any]:
    return {"entity_id": entity, "event_id": event, "timestamp": ts, "measures": {"temp": 21.5}}


def stored_item(published: dict[str, Any], shard_map: ShardMap = SPLIT) -> dict[str, Any]:
    """The item ingest would write for ``published`` under ``shard_map``."""
    parsed = Reading.parse(published)
    return build_item(parsed, LAYOUT.key_for(parsed, shard_map))


def stored_map(shard_map: ShardMap, reason: str = "") -> StoredMap:
    return StoredMap.from_item({"map": json.dumps(shard_map.to_dict()), "updated_at": "x", "reason": reason})


def scenario(hot: int = 40, cold: int = 10) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Published readings before and after the boundary (hot sensor and others) and their stored items."""
    ledger = [reading(HOT_SENSOR, f"h{n}", T0 + n) for n in range(hot)]
    ledger += [reading(HOT_SENSOR, f"H{n}", BOUNDARY + n) for n in range(hot)]
    ledger += [reading(f"sensor-{n:06d}", f"c{n}", T0 + n) for n in range(cold)]
    ledger += [reading(f"sensor-{n:06d}", f"C{n}", BOUNDARY + n) for n in range(cold)]
    return ledger, [stored_item(r) for r in ledger]


def facts(**overrides: Any) -> DemoFacts:
    ledger, stored = scenario()
    arguments: dict[str, Any] = {
        "published": len(ledger) + 2,
        "failed_to_publish": 0,
        "phases": [
            Phase("before the split", T0, T0 + 40, 50, 40),
            Phase("after the split", BOUNDARY, BOUNDARY + 40, 50, 40),
        ],
        "ledger": ledger,
        "stored": stored,
        "rejects": [reject("r1", "timestamp"), reject("r2", "data"), reject("r1", "timestamp")],
        "skipped": [],
        "drained": True,
        "map_before": stored_map(INITIAL),
        "map_after": stored_map(SPLIT, reason="split"),
        "windows": [
            {"window": "2026-11-22T07:00:05.000Z", "summary": {"hot_keys": [], "splits": []}},
            {
                "window": "2026-11-22T07:00:10.000Z",
                "summary": {
                    "hot_keys": [["0003#2026-11-22T07:00", 812.4]],
                    "splits": [[HOT_SENSOR, 1, 3, "2026-11-22T07:02:00.000Z"]],
                },
            },
        ],
        "alerts": [{"subject": f"Hot entity {HOT_SENSOR}: 812 WCU/s", "body": {"action": "split", "to_shards": 3}}],
        "boundary_ms": BOUNDARY,
        "queries": {"api_url": "http://127.0.0.1:1/v1", "all_equal": True, "checks": []},
        "timings": {"total": 12.3},
    }
    arguments.update(overrides)
    return DemoFacts(**arguments)


def reject(reject_id: str, field: str) -> dict[str, Any]:
    return {"reject_id": reject_id, "field": field, "reason": f"bad {field}"}


def report(**overrides: Any) -> dict[str, Any]:
    return build_report(scenario={"sensors": 10, "faults": "none"}, config=CONFIG, facts=facts(**overrides))


def test_everything_accounted_for_and_split_is_ok() -> None:
    r = report()
    # A reject redelivered (same reject_id) counts once
    readings = r["readings"]
    assert {k: readings[k] for k in ("published", "written", "rejected", "lost", "duplicates")} == {
        "published": 102,
        "written": 100,
        "rejected": 2,
        "lost": 0,
        "duplicates": 0,
    }
    assert r["reject_messages"] == 3
    assert [(x["field"], x["count"]) for x in r["rejected_by_reason"]] == [("timestamp", 1), ("data", 1)]
    assert r["checks"] == dict.fromkeys(r["checks"], True)
    assert r["ok"] is True
    assert render(r).splitlines()[-1].startswith("OK")


def test_a_missing_reading_is_lost_and_fails_the_demo() -> None:
    r = report(published=103)
    assert r["readings"]["lost"] == 1
    assert r["checks"]["nothing_lost"] is False and r["ok"] is False
    assert "FAILED: nothing lost" in render(r)


def test_a_reading_stored_twice_is_a_duplicate() -> None:
    ledger, stored = scenario()
    r = report(stored=[*stored, {**stored[0], "pk": "0000#elsewhere"}], published=len(ledger) + 2)
    assert r["readings"]["duplicates"] == 1
    assert r["readings"]["lost"] == 0
    assert r["ok"] is False
    # and the copy sits where the key design would not put it
    assert r["placement"]["misplaced"] == 1


@pytest.mark.parametrize(
    ("rollups", "verdict"), [({"through": "2026-11-22T07:05:00.000Z", "late": 0}, True), ({"status": "not run"}, False)]
)
def test_rollups_that_did_not_catch_up_fail_the_demo(rollups: dict[str, Any], verdict: bool) -> None:
    r = report(rollups=rollups)
    assert r["checks"]["rollups_applied"] is verdict and r["ok"] is verdict
    assert ("rollups: applied through 2026-11-22T07:05" in render(r)) is verdict


def test_a_stream_that_did_not_drain_fails_the_demo() -> None:
    assert report(drained=False)["checks"]["stream_drained"] is False


def test_a_query_answer_that_differs_fails_the_demo() -> None:
    r = report(queries={"all_equal": False, "checks": []})
    assert r["checks"]["queries_equal_to_published"] is False and r["ok"] is False


def test_the_shard_map_change_is_read_from_the_maps_before_and_after() -> None:
    changes = report()["shard_map_changes"]
    assert changes["changes"] == [
        {"entity": HOT_SENSOR, "from_sub_shards": 1, "to_sub_shards": 3, "effective_from": "2026-11-22T07:02:00.000Z"}
    ]
    assert changes["hot_entity_split"] is True
    assert changes["before"]["entities"] == {}
    assert changes["after"]["entities"][HOT_SENSOR] == [{"sub_shards": 3, "effective_from": "2026-11-22T07:02:00.000Z"}]
    assert changes["after"]["reason"] == "split"


def test_without_a_split_the_after_split_steps_say_not_run_and_the_demo_fails() -> None:
    ledger, _ = scenario()
    stored = [stored_item(r, INITIAL) for r in ledger]
    r = report(stored=stored, map_after=stored_map(INITIAL), boundary_ms=None, windows=[], alerts=[])
    assert r["shard_map_changes"]["hot_entity_split"] is False
    for name in ("partition_load_after_split", "hot_sensor_after_split"):
        assert r[name]["status"] == NOT_RUN
    assert r["checks"]["hot_entity_split"] is False and r["ok"] is False
    assert r["placement"]["misplaced"] == 0  # the initial map put everything where it is


def test_load_is_split_at_the_boundary_and_the_hot_sensor_moves_to_its_sub_shards() -> None:
    r = report()
    before, after = r["partition_load_before_split"], r["partition_load_after_split"]
    assert before["hot_sensor_peak_wcu_per_s"] >= 40  # 40 readings in one second on one key (plus any neighbour)
    assert all(f"#{HOT_SENSOR}#" in key for key in after["hot_sensor_keys"])
    hot = r["hot_sensor_after_split"]
    assert hot["readings"] == 40 and hot["off_sub_shard_keys"] == 0
    assert 1 <= hot["sub_shard_keys"] <= 3
    assert sum(hot["readings_per_sub_shard_key"].values()) == 40


def test_a_post_split_reading_on_the_base_key_is_reported() -> None:
    ledger, stored = scenario()
    late = reading(HOT_SENSOR, "late", BOUNDARY + 5)
    wrong = stored_item(late, INITIAL)  # keyed with the old map after the boundary
    result = hot_sensor_after_split([wrong], LAYOUT)
    assert result["off_sub_shard_keys"] == 1
    assert placement_check([wrong], [late], LAYOUT, SPLIT)["misplaced"] == 1
    r = report(stored=[*stored, wrong], ledger=[*ledger, late], published=len(ledger) + 3)
    assert r["checks"]["post_split_readings_on_sub_shards"] is False
    assert r["checks"]["every_reading_where_the_key_design_puts_it"] is False


def test_partition_load_is_write_units_per_partition_per_event_second() -> None:
    def item(pk: str, entity: str, event: str, second: int = 0) -> dict[str, Any]:
        return {
            "pk": pk,
            "sk": f"{entity}#{event}",
            "e": entity,
            "i": event,
            "t": f"2026-11-22T07:00:{second:02d}.000Z",
        }

    items = [item("hot", HOT_SENSOR, f"h{n}", second=n % 2) for n in range(6)]
    items += [item("cold", "s-1", "c1", second=0), {**item("big", "s-2", "b1"), "d": {"x": "y" * 3000}}]
    load = partition_load(items)
    assert load["partition_keys"] == 3
    assert (load["hottest_key"], load["hottest_peak_wcu_per_s"]) == ("big", 3)
    assert load["hot_sensor_keys"] == ["hot"] and load["hot_sensor_peak_wcu_per_s"] == 3
    assert load["keys_over_1000_wcu_per_s"] == 0
    assert [t["pk"] for t in load["top"]] == ["big", "hot", "cold"]
    assert partition_load([]) == {"partition_keys": 0}


def test_a_key_over_1000_wcu_after_the_split_fails_the_demo() -> None:
    hot = [reading(HOT_SENSOR, f"x{n}", BOUNDARY + 500) for n in range(1_001)]
    ledger, stored = scenario()
    crowded = [{**stored_item(r), "pk": "0001#2026-11-22T07:02"} for r in hot]  # all on one key
    r = report(stored=[*stored, *crowded], ledger=[*ledger, *hot], published=len(ledger) + len(hot) + 2)
    assert r["partition_load_after_split"]["keys_over_1000_wcu_per_s"] == 1
    assert r["checks"]["no_key_over_1000_wcu_after_split"] is False


def test_hot_keys_come_from_the_judged_windows_and_the_alerts() -> None:
    section = hot_keys_section(facts().windows, facts().alerts)
    assert section["windows_judged"] == 2 and section["windows_with_hot_keys"] == 1
    assert section["hot_keys_detected"] == ["0003#2026-11-22T07:00"]
    assert section["first_detection"]["splits"][0]["to_shards"] == 3
    assert section["alerts"] == [{"subject": f"Hot entity {HOT_SENSOR}: 812 WCU/s", "action": "split", "to_shards": 3}]


def test_steps_not_run_say_why_instead_of_giving_numbers() -> None:
    r = report(queries=None, map_after=None, picture=None)
    for name in ("queries", "shard_map_changes", "placement", "partition_load_picture", "rotation"):
        assert r[name]["status"] == NOT_RUN
        assert set(r[name]) == {"status", "reason"}
    assert "rotation: not run (no table_period" in render(r)


def test_skipped_batches_are_reported_with_their_records() -> None:
    skipped = [
        {"requestContext": {"condition": "RetryAttemptsExhausted"}, "KinesisBatchInfo": {"batchSize": 3}},
        {"requestContext": {"condition": "RecordAgeExceeded"}, "DDBStreamBatchInfo": {"batchSize": 2}},
    ]
    r = report(skipped=skipped[:1], hot_keys_skipped=skipped[1:])
    assert r["skipped_by_event_source"] == {"batches": 1, "records": 3, "conditions": {"RetryAttemptsExhausted": 1}}
    assert r["hot_key_batches_skipped"] == {"batches": 1, "records": 2, "conditions": {"RecordAgeExceeded": 1}}


def test_every_invalid_reading_really_is_invalid() -> None:
    for bad in invalid_readings(10, 1_795_330_800_000):
        with pytest.raises(InvalidInput):
            Reading.parse(bad, now_ms=1_795_330_800_000, max_future_ms=5_000)
