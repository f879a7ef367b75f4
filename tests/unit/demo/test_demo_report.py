"""The demo's report, fed by hand with blocks as ingest packs them: accounting, cost, split, load, placement."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from demo.report import (
    HOT_SENSOR,
    NOT_RUN,
    SPARSE_WRITE_UNITS_BOUND,
    Baseline,
    Block,
    DemoFacts,
    Item,
    build_report,
    compaction_section,
    cost,
    hot_keys_section,
    newest_copies,
    partition_load,
    placement_check,
    render,
    write_cost,
)
from demo.scenario import invalid_readings
from infra.config import Context
from keydesign import InvalidInput, Reading, ShardMap, item_size, parse_timestamp, ttl_for, write_units
from keydesign.legacy import legacy_item
from keydesign.writetier import WriteTier

CONFIG = Context.parse({"bucket": "1m", "shards": 8})
LAYOUT = CONFIG.layout()
T0 = parse_timestamp("2026-11-22T07:00:00Z", "t")
BOUNDARY = T0 + 120_000
INITIAL = ShardMap.initial(LAYOUT.bucket, 8)
SPLIT = INITIAL.with_entity(HOT_SENSOR, 3, BOUNDARY, now_ms=T0 + 30_000)


def reading(entity: str, event: str, ts: int, temp: float = 21.5) -> dict[str, Any]:
    return {"entity_id": entity, "event_id": event, "timestamp": ts, "measures": {"temp": temp}}


def blocks(published: list[dict[str, Any]], shard_map: ShardMap = SPLIT, version: int = 1) -> list[Block]:
    """The blocks ingest writes for ``published`` in one batch of ``version`` under ``shard_map``."""
    packed = LAYOUT.pack([(Reading.parse(r), version) for r in published], shard_map, retention_ms=CONFIG.retention_ms)
    return [Block("t", b.key.pk, b.write_units, b.size, version, b.readings) for b in packed]


def stored_map(shard_map: ShardMap, reason: str = "") -> dict[str, Any]:
    """The control table's shard-map item, deserialised."""
    return {"pk": "shard_map", "map": json.dumps(shard_map.to_dict()), "updated_at": "x", "reason": reason}


def scenario(hot: int = 40, cold: int = 10) -> list[tuple[str, dict[str, Any]]]:
    """Published readings before and after the boundary (hot sensor and others), by phase."""
    before = [reading(HOT_SENSOR, f"h{n}", T0 + n) for n in range(hot)]
    before += [reading(f"sensor-{n:06d}", f"c{n}", T0 + n) for n in range(cold)]
    after = [reading(HOT_SENSOR, f"H{n}", BOUNDARY + n) for n in range(hot)]
    after += [reading(f"sensor-{n:06d}", f"C{n}", BOUNDARY + n) for n in range(cold)]
    return [("before the split", r) for r in before] + [("after the split", r) for r in after]


LEDGER = scenario()
PUBLISHED = [r for _, r in LEDGER]


def facts(**overrides: Any) -> DemoFacts:
    arguments: dict[str, Any] = {
        "published": len(LEDGER) + 2,
        "failed_to_publish": 0,
        "ledger": LEDGER,
        "blocks": blocks(PUBLISHED),
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
                    "hot_keys": [["0003#2026-11-22T07:00", 12.4]],
                    "splits": [[HOT_SENSOR, 1, 3, "2026-11-22T07:02:00.000Z"]],
                },
            },
        ],
        "alerts": [{"Subject": f"Hot entity {HOT_SENSOR}: 12 WCU/s", "Message": '{"action": "split", "to_shards": 3}'}],
        "boundary_ms": BOUNDARY,
        "queries": {"api_url": "http://127.0.0.1:1/v1", "all_equal": True, "checks": []},
        "timings": {"total": 12.3},
    }
    return DemoFacts(**{**arguments, **overrides})


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
    assert [(p["phase"], p["readings"], p["sensor_alpha_001_readings"]) for p in readings["phases"]] == [
        ("before the split", 50, 40),
        ("after the split", 50, 40),
    ]
    assert r["checks"] == dict.fromkeys(r["checks"], True)
    assert r["ok"] is True
    assert render(r).splitlines()[-1].startswith("OK")


def test_a_missing_reading_is_lost_and_fails_the_demo() -> None:
    r = report(published=103)
    assert r["readings"]["lost"] == 1
    assert r["checks"]["nothing_lost"] is False and r["ok"] is False
    assert "FAILED: nothing lost" in render(r)


def test_copies_of_a_reading_in_several_blocks_are_read_once_the_newest_and_are_no_duplicate() -> None:
    # Given a batch redelivered regrouped: the same readings again, a later version, one of them corrected
    again = [reading(HOT_SENSOR, "h0", T0, temp=99.0), *PUBLISHED[1:5]]
    r = report(blocks=[*blocks(PUBLISHED), *blocks(again, version=2)])
    # Then each is counted once, as readers return it, and the copies are counted as such
    assert (r["readings"]["written"], r["readings"]["duplicates"], r["readings"]["lost"]) == (100, 0, 0)
    assert r["readings"]["copies_in_older_blocks"] == 5
    assert r["ok"] is True


def test_one_reading_stored_under_another_time_is_a_duplicate_and_misplaced() -> None:
    # Given the first reading stored a second time, a minute later (another identity, another bucket)
    moved = [{**PUBLISHED[0], "timestamp": PUBLISHED[0]["timestamp"] + 60_000}]
    wrong = [replace(b, pk="0000#2026-11-22T07:01") for b in blocks(moved, INITIAL)]
    r = report(blocks=[*blocks(PUBLISHED), *wrong])
    assert r["readings"]["duplicates"] == 1 and r["readings"]["lost"] == 0
    assert r["checks"]["no_duplicates"] is False and r["ok"] is False
    # and the copy sits where the key design would not put it
    assert r["placement"]["misplaced"] == 1


def test_a_reading_in_an_export_and_a_table_is_a_duplicate_and_one_only_exported_is_not_lost() -> None:
    exported = Reading.parse(PUBLISHED[0])
    r = report(exported={"old-table": [exported]})
    assert r["readings"]["duplicates"] == 1
    r = report(blocks=blocks(PUBLISHED[1:]), exported={"old-table": [exported]})
    assert (r["readings"]["exported_then_dropped"], r["readings"]["lost"], r["readings"]["duplicates"]) == (1, 0, 0)


def test_cost_per_reading_is_the_blocks_beside_one_item_per_reading() -> None:
    # Given the hot sensor's 80 readings, in blocks
    hot = [b for b in blocks(PUBLISHED) if b.readings[0].entity_id == HOT_SENSOR]
    baseline = Baseline(LAYOUT, INITIAL, CONFIG.retention_ms)
    figures = cost(hot, baseline)
    # Then the blocks' write units and bytes (plus 100 a block) are divided among the readings they hold
    assert figures["readings"] == 80 and figures["blocks"] == len(hot)
    assert figures["write_units_per_reading"] == round(sum(b.write_units for b in hot) / 80, 4)
    assert figures["billed_bytes_per_reading"] == round(sum(b.size + 100 for b in hot) / 80, 1)
    # And one item per reading would have been a write unit each, and its size plus 100 bytes each
    first = legacy_item(hot[0].readings[0], LAYOUT, INITIAL, ttl_for(hot[0].readings[0], CONFIG.retention_ms))
    assert first["sk"] == f"{HOT_SENSOR}#2026-11-22T07:00:00.000Z#h0"
    assert figures["one_item_per_reading"]["write_units_per_reading"] == 1.0 == write_units(item_size(first))
    assert figures["one_item_per_reading"]["billed_bytes_per_reading"] > 100 + 100
    assert figures["write_units_per_reading"] < 0.1
    # And by name in the report, for every reading and the hot sensor's
    assert report()["cost_per_reading"][HOT_SENSOR] == figures
    assert cost([], baseline) == {"readings": 0}


def test_the_shard_map_change_is_read_from_the_maps_before_and_after() -> None:
    changes = report()["shard_map_changes"]
    assert changes["changes"] == [
        {"entity": HOT_SENSOR, "from_sub_shards": 1, "to_sub_shards": 3, "effective_from": "2026-11-22T07:02:00.000Z"}
    ]
    assert changes["hot_entity_split"] is True
    assert changes["before"]["entities"] == {}
    assert changes["after"]["entities"][HOT_SENSOR] == [{"effective_from": "2026-11-22T07:02:00.000Z", "shards": 3}]
    assert changes["after"]["reason"] == "split"


def test_without_a_split_the_after_split_steps_say_not_run_and_the_demo_fails() -> None:
    r = report(blocks=blocks(PUBLISHED, INITIAL), map_after=stored_map(INITIAL), boundary_ms=None, windows=[])
    assert r["shard_map_changes"]["hot_entity_split"] is False
    for name in ("partition_load_after_split", "hot_sensor_after_split"):
        assert r[name]["status"] == NOT_RUN
    assert r["checks"]["hot_entity_split"] is False and r["ok"] is False
    assert r["placement"]["misplaced"] == 0  # the initial map put everything where it is


def test_load_is_split_at_the_boundary_and_the_hot_sensor_moves_to_its_sub_shards() -> None:
    r = report()
    before, after = r["partition_load_before_split"], r["partition_load_after_split"]
    assert before["hot_sensor_keys"] == LAYOUT.partitions_of(HOT_SENSOR, T0, INITIAL)
    assert all(f"#{HOT_SENSOR}#" in key for key in after["hot_sensor_keys"])
    hot = r["hot_sensor_after_split"]
    assert hot["readings"] == 40 and hot["off_sub_shard_keys"] == 0
    assert 1 <= hot["sub_shard_keys"] <= 3 and sum(hot["readings_per_sub_shard_key"].values()) == 40


def test_a_post_split_block_on_the_base_key_is_reported() -> None:
    late = [reading(HOT_SENSOR, "late", BOUNDARY + 5)]
    wrong = blocks(late, INITIAL)  # keyed with the old map after the boundary
    r = report(blocks=[*blocks(PUBLISHED), *wrong], ledger=[*LEDGER, ("late", late[0])], published=len(LEDGER) + 3)
    assert r["hot_sensor_after_split"]["off_sub_shard_keys"] == 1
    assert r["checks"]["post_split_readings_on_sub_shards"] is False
    assert r["checks"]["every_reading_where_the_key_design_puts_it"] is False
    assert r["placement"]["examples"] == [{"event_id": "late", "stored_pk": wrong[0].pk}]


def test_partition_load_is_each_blocks_write_units_at_the_second_of_its_first_reading() -> None:
    def block(pk: str, entity: str, second: int, units: int = 1) -> Block:
        first = Reading.parse(reading(entity, f"{pk}{second}", T0 + second * 1000 + 250))
        return Block("t", pk, units, 100 * units, 1, (first,))

    load = partition_load(
        [block("hot", HOT_SENSOR, s % 2) for s in range(6)] + [block("cold", "s-1", 0), block("big", "s-2", 0, 3)]
    )
    assert load["partition_keys"] == 3
    assert (load["hottest_key"], load["hottest_peak_wcu_per_s"]) == ("big", 3)
    assert load["hot_sensor_keys"] == ["hot"] and load["hot_sensor_peak_wcu_per_s"] == 3
    assert load["keys_over_1000_wcu_per_s"] == 0
    assert [t["pk"] for t in load["top"]] == ["big", "hot", "cold"]
    assert partition_load([]) == {"partition_keys": 0}
    crowded = partition_load([block("one", HOT_SENSOR, 0, 400) for _ in range(3)])
    assert crowded["keys_over_1000_wcu_per_s"] == 1


def test_hot_keys_come_from_the_judged_windows_and_the_alerts() -> None:
    section = hot_keys_section(facts().windows, facts().alerts)
    assert section["windows_judged"] == 2 and section["windows_with_hot_keys"] == 1
    assert section["hot_keys_detected"] == ["0003#2026-11-22T07:00"]
    assert section["first_detection"]["splits"] == [[HOT_SENSOR, 1, 3, "2026-11-22T07:02:00.000Z"]]
    assert section["alerts"] == [{"subject": f"Hot entity {HOT_SENSOR}: 12 WCU/s", "action": "split", "to_shards": 3}]


@pytest.mark.parametrize(
    ("rollups", "verdict"), [({"through": "2026-11-22T07:05:00.000Z", "late": 0}, True), ({"status": "not run"}, False)]
)
def test_rollups_that_did_not_catch_up_fail_the_demo(rollups: dict[str, Any], verdict: bool) -> None:
    r = report(rollups={"runs": 1, "failed_runs": 0, "recomputed": {}, **rollups})
    assert r["checks"]["rollups_applied"] is verdict and r["ok"] is verdict
    assert ("rollups: applied through 2026-11-22T07:05" in render(r)) is verdict


def test_the_summary_says_how_far_fleet_totals_and_fresh_minute_totals_reach() -> None:
    reach = {"totals_through": "2026-11-22T07:00:00.000Z", "minute_totals_through": "2026-11-22T07:40:00.000Z"}
    r = report(rollups={"runs": 1, "failed_runs": 0, "recomputed": {}, "through": "2026-11-22T07:45:00.000Z", **reach})
    line = next(line for line in render(r).splitlines() if line.startswith("rollups:"))
    assert line == (
        "rollups: applied through 2026-11-22T07:45:00.000Z; totals through 2026-11-22T07:00:00.000Z; "
        "minute totals through 2026-11-22T07:40:00.000Z"
    )


@pytest.mark.parametrize(
    ("overrides", "check"),
    [
        ({"drained": False}, "stream_drained"),
        ({"queries": {"all_equal": False, "checks": []}}, "queries_equal_to_published"),
    ],
)
def test_a_stream_not_drained_or_a_query_that_differs_fails_the_demo(overrides: dict[str, Any], check: str) -> None:
    r = report(**overrides)
    assert r["checks"][check] is False and r["ok"] is False


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


def test_each_agent_formats_readings_are_accounted_for_and_its_bad_reading_found_by_its_measure() -> None:
    # Given two formats' readings in the ledger (as ingest stores them), one format's all stored, the other's
    # missing one, and each format's bad reading rejected (its measure bad_<format> in the payload or reason)
    influx = [reading("influx-1", f"i{n}", T0 + 1000 * n) for n in range(3)]
    otlp = [reading("otlp-json-1", f"o{n}", T0 + 1000 * n) for n in range(3)]
    ledger = [*LEDGER, *(("agent format influx", r) for r in influx), *(("agent format otlp_json", r) for r in otlp)]
    rejects = [
        {"reject_id": "a", "field": "entity_id", "reason": "line 1: no tag", "payload": "env bad_influx=1i 1"},
        {"reject_id": "b", "field": "entity_id", "reason": "metrics[0] (bad_otlp_json) data point 0: no attribute"},
    ]
    r = report(ledger=ledger, blocks=blocks([*PUBLISHED, *influx, *otlp[:2]]), rejects=rejects, published=107)
    # Then each format says what was published, written and rejected, and the check fails on the missing one
    formats = r["agent_formats"]["formats"]
    assert {f: (a["published"], a["written"], a["rejected"]) for f, a in formats.items()} == {
        "influx": (3, 3, 1),
        "otlp_json": (3, 2, 1),
    }
    assert formats["influx"]["reject_reasons"] == ["entity_id: line 1: no tag"]
    assert r["checks"]["every_agent_format_stored_and_its_bad_reading_rejected"] is False
    whole = report(ledger=ledger, blocks=blocks([*PUBLISHED, *influx, *otlp]), rejects=rejects, published=108)
    assert whole["checks"]["every_agent_format_stored_and_its_bad_reading_rejected"] is True
    assert "agents' formats: influx 3/3 stored, otlp_json 3/3 stored" in render(whole)
    # Without readings through an agent's format the section says so and adds no check
    assert report()["agent_formats"]["status"] == NOT_RUN
    assert "every_agent_format_stored_and_its_bad_reading_rejected" not in report()["checks"]


def one(entity: str, ts: int, event: str) -> Reading:
    return Reading.parse(reading(entity, event, ts))


HOUR = "2026-11-22T07:00"
SPARSE = [one(f"sparse-000{n}", T0 + 1_000 * n, f"s{n}") for n in (1, 2, 3)]
DENSE = one("sensor-000001", T0 + 5, "d1")
HISTORY = one("sensor-000002", T0 - 3_600_000, "old")  # before the story: in the tiers, in no shape


def tiers_and_shapes(compacted_units: int) -> tuple[list[Block], list[Item], list[Item]]:
    """A group item of three sparse readings, a dense sensor's and one of the history (1 unit, 400 bytes
    billed); each sparse reading again in a compacted block; a dense mark; rollup marks, a rollup, a total
    and the shard map in the control table."""
    blocks = [Block("t", f"w#0001#{HOUR}", 1, 400, 5, (*SPARSE, DENSE, HISTORY))]
    blocks += [Block("t", f"0003#{HOUR}#c", compacted_units, 100, 5, (r,)) for r in SPARSE]
    marks = [Item(f"w#0001#{HOUR}", "!dense#sensor-000001", 50)]
    control = [
        Item("rollmark#p#2026-11-22T07:01#3", "60000#2026-11-22T07:00:00.000Z#sparse-0001", 80),
        Item("rollup#p#60000#2026-11-22T07:00:00.000Z#5", "sparse-0002", 120),
        Item("rollmark#p#start", "2026-11-22T07:00:00.000Z", 40),
        Item("rollall#p#60000#2026-11-21T00:00:00.000Z", "2026-11-22T07:00:00.000Z", 90),
        Item("shard_map", "shard_map", 2_000),
    ]
    return blocks, marks, control


def test_write_cost_is_every_stored_item_by_tier_and_each_shapes_share_of_the_story() -> None:
    blocks, marks, control = tiers_and_shapes(compacted_units=1)
    figures = write_cost(
        facts(blocks=blocks, dense_marks=marks, control=control, story_from_ms=T0), newest_copies(blocks)
    )
    # Then each tier holds its items once, over every stored reading (5)
    tiers = figures["tiers"]
    assert figures["readings"] == 5
    assert (
        tiers["group items"]["items"],
        tiers["group items"]["write_units"],
        tiers["group items"]["billed_bytes"],
    ) == (1, 1, 500)
    assert (tiers["compacted blocks"]["write_units"], tiers["compacted blocks"]["billed_bytes"]) == (3, 600)
    assert (tiers["dense marks"]["items"], tiers["rollup items"]["items"], tiers["control items"]["items"]) == (1, 4, 1)
    assert tiers["rollup items"]["write_units"] == 4 and tiers["control items"]["write_units"] == 2
    assert tiers["entity blocks"] == {"items": 0, "write_units": 0, "billed_bytes": 0} | {
        "write_units_per_reading": 0.0, "billed_bytes_per_reading": 0.0}  # fmt: skip
    # And the sparse fleet pays 3/5 of the group item, its compacted blocks, its rollup mark and rollup
    sparse = figures["shapes"]["sparse fleet"]
    assert sparse["readings"] == 3
    assert sparse["by_tier"]["group items"] == {"write_units_per_reading": 0.2, "billed_bytes_per_reading": 100.0}
    assert sparse["by_tier"]["compacted blocks"] == {"write_units_per_reading": 1.0, "billed_bytes_per_reading": 200.0}
    assert sparse["by_tier"]["rollup items"] == {"write_units_per_reading": 0.6667, "billed_bytes_per_reading": 133.3}
    assert sparse["reading_tiers"]["write_units_per_reading"] == 1.2
    assert sparse["write_units_per_reading"] == round((0.6 + 3 + 2) / 3, 4)
    # And the dense sensors their share of the group item and their dense mark; the total, the start item
    # and the shard map are no shape's; the history reading is in no shape
    dense = figures["shapes"]["dense sensors"]
    assert dense["readings"] == 1 and dense["by_tier"]["dense marks"]["write_units_per_reading"] == 1.0
    assert dense["write_units_per_reading"] == 1.2 and set(figures["shapes"]) == {"sparse fleet", "dense sensors"}


@pytest.mark.parametrize(("compacted_units", "verdict"), [(0, True), (1, False)])
def test_the_sparse_fleet_must_stay_under_its_write_units_bound(compacted_units: int, verdict: bool) -> None:
    # (0 units: what a compacted block of many readings would come to, a reading's share of it)
    blocks, marks, control = tiers_and_shapes(compacted_units)
    r = report(blocks=[*blocks, *facts().blocks], dense_marks=marks, control=control, story_from_ms=T0)
    assert (r["write_cost"]["shapes"]["sparse fleet"]["reading_tiers"]["write_units_per_reading"] < 0.8) is verdict
    assert r["checks"]["sparse_fleet_under_the_write_units_bound"] is verdict
    assert r["write_cost"]["sparse_fleet_bound_write_units_per_reading"] == SPARSE_WRITE_UNITS_BOUND
    assert "sparse fleet: 3 readings" in render(r)


def test_a_write_tier_reading_of_a_compacted_hour_missing_from_the_compacted_blocks_fails_its_check() -> None:
    blocks, _, _ = tiers_and_shapes(compacted_units=1)
    run = {"runs": 1, "through": "2026-11-22T08:00:00.000Z", "compacted_blocks_written": 3, "readings_compacted": 3}
    # The history reading's hour (06:00) is compacted too, and its reading is in no compacted block
    section, compacted = compaction_section(run, blocks)
    assert (section["write_tier_readings_due"], section["of_them_compacted"], compacted) == (5, 3, False)
    history = Block("t", "0001#2026-11-22T06:00#c", 1, 100, 5, (HISTORY, DENSE))
    section, compacted = compaction_section(run, [*blocks, history])
    assert (section["of_them_compacted"], compacted) == (5, True)
    # And a reading whose newest copy is an entity block's (a redelivery written as a block) is not due
    newer = Block("t", "0001#2026-11-22T06:00", 1, 100, 6, (HISTORY,))
    section, compacted = compaction_section(run, [*blocks, newer])
    assert (section["write_tier_readings_due"], section["of_them_compacted"], compacted) == (4, 3, False)
    older = Block("t", "0001#2026-11-22T06:00", 1, 100, 4, (HISTORY,))
    assert compaction_section(run, [*blocks, older])[0]["write_tier_readings_due"] == 5
    # And an hour past the watermark is not due yet; a step that did not run fails the check
    assert compaction_section({**run, "through": "2026-11-22T07:00:00.000Z"}, blocks)[0]["write_tier_readings_due"] == 1
    assert compaction_section({"status": NOT_RUN, "reason": "x"}, blocks) == ({"status": NOT_RUN, "reason": "x"}, False)


def test_a_reading_in_its_groups_cluster_block_is_where_the_key_design_puts_it_and_in_anothers_is_not() -> None:
    # Given a sparse reading compacted into its group's cluster partition of the hour, and a copy of it
    # (another event) in another group's
    tier = WriteTier(4)
    at = T0 + 30_000
    mine, stray = Reading.parse(reading("sparse-0001", "e1", at)), Reading.parse(reading("sparse-0001", "e2", at))
    group = tier.group_of("sparse-0001")
    home = tier.cluster_pk(group, LAYOUT.cluster_span(at))
    elsewhere = tier.cluster_pk((group + 1) % 4, LAYOUT.cluster_span(at))
    stored = [(1, mine, Block("t", home, 1, 100, 1, (mine,))), (1, stray, Block("t", elsewhere, 1, 100, 1, (stray,)))]
    ledger = [reading("sparse-0001", "e1", at), reading("sparse-0001", "e2", at)]
    # Then the placement check takes the first and names the second
    got = placement_check(stored, ledger, LAYOUT, INITIAL, tier)
    assert (got["checked"], got["misplaced"]) == (2, 1)
    assert got["examples"] == [{"event_id": "e2", "stored_pk": elsewhere}]
