"""The write-tier design table's arithmetic: its encoder against the real one, Query units, batches, groups."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest

from benchmarks import write_tier as wt
from benchmarks.blocks import SEED_000, SEED_003, SPARSE, START_MS, Fleet
from keydesign import Reading
from keydesign.blocks import encode_block
from keydesign.capacity import GROUP_RECENT_BYTES, poisson_fill
from tsctl.cli import main


@pytest.mark.parametrize(("fleet", "count"), [(SEED_003, 1), (SEED_000, 25), (SPARSE, 1), (SEED_003, 7)])
def test_the_read_tier_encoder_writes_what_encode_block_writes(fleet: wt.Fleet, count: int) -> None:
    rng = random.Random(count)
    entity = fleet.sensor(3)
    step = 9_000 // count  # within a block's 10 s
    readings = [wt._reading(fleet, entity, START_MS + step * i + rng.randrange(step), rng) for i in range(count)]
    assert wt.entity_payload(readings) == encode_block(readings, wt.VERSION).payload


def test_a_group_item_of_many_entities_packs_smaller_per_reading_than_blocks_of_one() -> None:
    one = wt.entity_item_bytes(SEED_003, 1)
    many = wt.group_item_bytes(SEED_003, 40, 10_000)
    assert many / 40 < one / 4
    assert wt.group_payload([Reading.parse({"entity_id": "a", "timestamp": START_MS, "measures": {"v": 1}})])


def test_query_units_round_each_call_up_to_4_kb_at_half_a_unit() -> None:
    assert wt.query_units(0) == 0.5
    assert wt.query_units(4_096) == 0.5
    assert wt.query_units(4_097) == 1.0
    assert wt.query_units(8_000, calls=2) == 1.0
    assert wt.query_units(40_960) == 5.0
    assert wt.pages(0, 5) == 5
    assert wt.pages(3 * 1_048_576, 1) == 3
    assert wt.pages(3 * 1_048_576, 3) == 3


@pytest.mark.parametrize("mean", [0.01, 0.5, 1.0, 7.5, 200.0])
def test_a_poisson_group_holds_its_mean_over_occupied_batches(mean: float) -> None:
    occupied, held = poisson_fill(mean)
    assert occupied * held == pytest.approx(mean)
    assert held >= 1.0 and held >= mean


def test_a_batch_lasts_the_window_unless_the_payload_fills_first() -> None:
    reading = 180.0
    assert wt.Stream(shards=50, window_s=0).batch_s(SEED_003, reading) == 1.0
    assert wt.Stream(shards=50, window_s=10).batch_s(SEED_003, reading) == 10.0
    one_shard = wt.Stream(shards=1, window_s=300).batch_s(SEED_000, reading)
    assert one_shard == pytest.approx(wt.blocks.PAYLOAD_BYTES / (52_000 * reading))


def test_auto_groups_is_the_fewest_whose_uncompacted_readings_fit() -> None:
    rate, batch, span = SEED_003.fleet_rate, 10.0, 600.0

    def uncompacted(groups: int) -> float:
        _, held = poisson_fill(rate / groups * batch)
        readings = max(1, round(held))
        return rate / groups * span * wt.group_item_bytes(SEED_003, readings, 10_000) / readings

    groups = wt.auto_groups(SEED_003, rate, batch, span)
    assert uncompacted(groups) <= GROUP_RECENT_BYTES < uncompacted(groups // 2)
    assert wt.auto_groups(SEED_003, 0.0, batch, span) == 16


def _parts(fleet: wt.Fleet, block_bytes: float) -> list[wt.Part]:
    return [wt.Part(fleet.sensors, fleet.interval_ms / 1_000, 1.0, block_bytes, 1.0)]


def test_today_counts_a_mark_and_a_rollup_per_entity_minute_hour_and_day() -> None:
    interval = SEED_003.interval_ms / 1_000
    figures = wt.evaluate(SEED_003, wt.Design("today", wt.Stream()), _parts(SEED_003, 267.8), 130.0)
    expected = 1 + 2 * (1 + interval / 3_600 + interval / 86_400) + 4 / 60 / SEED_003.fleet_rate
    assert figures["wu_per_reading"] == pytest.approx(expected)
    assert figures["blocks_wu_per_reading"] == 1.0
    assert figures["pass_s_per_minute"] > 60  # one raw Query per entity-minute: the rollups fall behind


def test_more_groups_cost_fewer_read_units_for_one_device_and_more_fleet_queries() -> None:
    figures = [
        wt.evaluate(SEED_003, wt.Design("g", wt.Stream(window_s=10), g, wt.HOUR), _parts(SEED_003, 267.8), 130.0)
        for g in (64, 256, 1024)
    ]
    for fewer, more in itertools.pairwise(figures):
        assert more["ru_last_10_min"] < fewer["ru_last_10_min"]
        assert more["ru_latest"] <= fewer["ru_latest"]
        assert more["fleet_hour_queries"] > fewer["fleet_hour_queries"]
        assert more["wu_per_reading"] >= fewer["wu_per_reading"]
    assert all(math.isfinite(f["compaction_lag_s"]) and f["compaction_lag_s"] > wt.HOUR for f in figures)


def test_rollups_from_compaction_write_a_partial_per_group_hour_and_no_rollup_per_entity() -> None:
    interval = SEED_003.interval_ms / 1_000
    costs = wt.rollups_from_compaction(SEED_003, _parts(SEED_003, 267.8), 130.0)
    figures = costs.figures()
    rate = SEED_003.fleet_rate
    assert costs.groups == wt.auto_groups(SEED_003, rate, 10.0)
    # the model tsctl plan prices with (keydesign.capacity.deployment_rates), with this module's items
    assert wt.ROLLUP_PARTS[0] == "group items" and "day rollups (compaction)" not in wt.ROLLUP_PARTS
    partial = wt._sizes(SEED_003).partial(rate / costs.groups * wt.MINUTE, 60)
    assert figures["wu: group partials"] == pytest.approx(costs.groups / wt.HOUR * math.ceil(partial / 1024) / rate)
    per_block = wt.HOUR / interval  # a device's hour in one compacted block
    block_wu = math.ceil(wt.entity_item_bytes(SEED_003, round(per_block)) / 1024)
    assert figures["wu: compacted blocks"] == pytest.approx(block_wu / per_block)
    # no reading of a sparse fleet is marked, and no entity has rollups of its own: its blocks are its figures
    assert figures["wu: marks and rollups (rollup-owned)"] == 0.0
    assert figures["wu: rollup totals and state"] == pytest.approx(1 / wt.MINUTE / rate)
    assert figures["wu: compaction's totals"] == pytest.approx(62 / wt.HOUR / rate)  # 60 minutes, the hour, the day
    assert figures["wu_per_reading"] == pytest.approx(sum(figures[f"wu: {p}"] for p in wt.ROLLUP_PARTS))
    assert figures["billed_bytes_per_reading"] == pytest.approx(sum(figures[f"B: {p}"] for p in wt.ROLLUP_PARTS))
    # a device's hours of a day: its 24 compacted hours, a Query each; totals wait for the hour's compaction
    assert figures["ru_hours_of_day"] == 24 * 0.5
    assert figures["totals_lag_s"] > wt.HOUR + wt.SETTLE_S


def test_dense_entities_keep_their_marks_and_the_rollup_function() -> None:
    dense = [wt.Part(10, 0.1, 0.03, 17.0, 100.0)]  # ten sensors at 10 readings a second: dense at any window
    figures = wt.rollups_from_compaction(SEED_000, dense, 130.0).figures()
    rate = dense[0].rate
    intervals = 10 * (1 / wt.MINUTE + 1 / wt.HOUR + 1 / wt.DAY)  # entity-minutes, hours and days per second
    assert figures["wu: marks and rollups (rollup-owned)"] == pytest.approx(2 * intervals / rate)
    assert figures["wu: entities' own blocks"] == pytest.approx(0.03)
    assert figures["wu: group items"] == figures["wu: compacted blocks"] == figures["wu: group partials"] == 0.0
    assert figures["wu: rollup totals and state"] == pytest.approx(4 / wt.MINUTE / rate)
    assert figures["groups"] == 0 and figures["ru_hours_of_day"] == 24 * 0.5
    assert figures["totals_lag_s"] < wt.HOUR


def test_todays_aggregate_reads_are_half_a_unit_a_rollup_item() -> None:
    reads = wt.today_rollup_reads(SEED_003)
    assert reads["ru_hours_of_day"] == 12.0 and reads["ru_days_of_month"] == 15.0
    assert reads["ru_fleet_minutes_of_hour"] == wt.query_units(60 * wt.total_item_bytes(SEED_003))


SEED_003_READING = {"entity_id": "device-0000001", "measures": {"value": 21.53}, "event_id": "0a1b2c3d4e5f"}


def plan(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["plan", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "fleet", "groups"),
    [
        (["--peak-writes", "166.6667", "--entities", "10000"], SPARSE, 32),
        (
            ["--peak-writes", "3858", "--entities", "1000000", "--reading", json.dumps(SEED_003_READING)],
            SEED_003,
            1_024,
        ),
    ],
)
def test_plan_prints_the_write_tiers_g_auto_the_design_table_measured(
    argv: list[str], fleet: Fleet, groups: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # The write tier's G for a workload is the one the write-tier benchmark computes for it (its design table)
    tier = json.loads(plan(capsys, *argv, "--json"))["plan"]["write_tier"]
    assert tier["auto"] and tier["groups"] == groups
    assert wt.auto_groups(fleet, fleet.fleet_rate, 10.0) == groups
    text = plan(capsys, *argv)
    assert "groups G (auto)" in text and "group items/s" in text


def test_re_packing_settled_slices_reads_less_of_the_uncompacted_hour_for_more_writes() -> None:
    table = wt.repack_table(quick=True)
    for fleet, rows in table.items():
        for groups in {int(name.rsplit(" ", 1)[1]) for name in rows}:
            built = rows[f"built, G {groups}"]
            for minutes, subs in itertools.product((5, 10), (8, 16, 32)):
                repacked = rows[f"re-pack {minutes} min into {subs}, G {groups}"]
                assert repacked["wu_per_reading"] > built["wu_per_reading"], (fleet, minutes, subs)
                assert repacked["billed_bytes_per_reading"] > built["billed_bytes_per_reading"]
                assert repacked["ru_last_24_h"] < built["ru_last_24_h"] / 2, (fleet, groups, minutes, subs)
                assert repacked["ru_latest"] == built["ru_latest"]  # the newest slice is still the group's items
            # a shorter slice leaves less of the hour to read whole
            assert (
                rows[f"re-pack 5 min into 16, G {groups}"]["ru_last_24_h"]
                < rows[f"re-pack 10 min into 16, G {groups}"]["ru_last_24_h"]
            )


def test_the_uncompacted_stretch_reads_the_group_whole_only_for_the_newest_slice() -> None:
    group, sub = 8_192.0, 256.0  # bytes a second: a group's items, one of its sub-groups' items
    assert wt._uncompacted_reads(group, 3_600, 3_600, sub) == wt.query_units(group * 3_600, 2)
    assert wt._uncompacted_reads(group, 3_600, 480, sub) == wt.query_units(group * 480, 2) + wt.query_units(
        sub * 3_120, 2
    )
