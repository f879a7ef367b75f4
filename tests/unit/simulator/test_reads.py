"""Read fan-out is the key-design layer's plan; read units follow DynamoDB's 4 KB units and 1 MB pages."""

from __future__ import annotations

import pytest

from keydesign import Layout, ShardMap, parse_timestamp, read_units
from simulator import LayoutSpec, ReadPattern, Simulation
from simulator.engine import SimulationResult
from simulator.reads import QUERY_PAGE_BYTES, duration_label, query_cost
from tests.unit.simulator.reference import packed_seconds
from tests.unit.simulator.workloads import HOT, START, quick_detector, small_workload

END = parse_timestamp("2026-11-22T07:00:00Z")
READS = ReadPattern((HOT, "sensor-00001"), (60_000, 90_000, 3 * 3_600_000), 90_000)


@pytest.fixture(scope="module")
def result() -> SimulationResult:
    layouts = [
        LayoutSpec("random", 3),
        LayoutSpec("calculated", 3),
        LayoutSpec("hybrid", 4),
        LayoutSpec("hybrid", 4, adaptive=True),
    ]
    return Simulation(small_workload(), layouts, bucket="1m", adaptive=quick_detector(), reads=READS, record=True).run()


def test_query_cost_pages_at_one_megabyte_and_rounds_each_page_to_4_kb() -> None:
    assert query_cost(0, consistent=False) == (1, 0.5)  # an empty Query still costs its minimum
    assert query_cost(4096, consistent=False) == (1, 0.5)
    assert query_cost(4097, consistent=True) == (1, 2.0)
    assert query_cost(QUERY_PAGE_BYTES, consistent=False) == (1, read_units(QUERY_PAGE_BYTES))
    assert query_cost(QUERY_PAGE_BYTES + 1, consistent=False) == (2, 128.5)


def test_fan_out_is_the_plan_of_the_key_design_layer(result: SimulationResult) -> None:
    for run in result.layouts:
        layout = Layout.from_settings(kind=run.spec.kind, bucket="1m", table_prefix="readings")
        for read in run.reads:
            if read.entity is None:
                continue
            plan = layout.plan_entity(read.entity, END - read.window_ms, END, run.shard_map)
            assert read.partitions == len(plan.partitions), (run.spec.label, read.read)
        cross = run.reads[-1]
        if run.spec.kind == "hybrid":
            assert cross.partitions == len(layout.plan_range(END - 90_000, END, run.shard_map).partitions)


def test_the_split_shows_in_the_hot_sensors_fan_out(result: SimulationResult) -> None:
    # The adaptive layout split the hot sensor into 3 from 06:59: the last minute reads its 3 sub-shards,
    # the last 90 s also its base key of the 06:58 bucket
    reads = {r.read: r for r in result.layout("adaptive:4").reads}
    assert reads[f"{HOT}, last 1m"].partitions == 3
    assert reads[f"{HOT}, last 90s"].partitions == 4
    fixed = {r.read: r for r in result.layout("hybrid:4").reads}
    assert fixed[f"{HOT}, last 1m"].partitions == 1
    # random and calculated read every suffix, whatever the window: no buckets
    for label in ("random:3", "calculated:3"):
        assert {r.partitions for r in result.layout(label).reads if r.entity is not None} == {3}


def test_cross_entity_reads_are_not_applicable_without_buckets(result: SimulationResult) -> None:
    for label in ("random:3", "calculated:3"):
        cross = result.layout(label).reads[-1]
        assert cross.partitions is None and cross.read_units is None
        assert cross.not_applicable is not None
        assert "need the hybrid layout" in cross.not_applicable and "Scan" in cross.not_applicable


def test_read_units_count_the_blocks_the_run_wrote(result: SimulationResult) -> None:
    assert result.entity_counts is not None
    last_minute = {(t, e): n for (t, e), n in result.entity_counts.items() if e == HOT and t >= END - 60_000}
    read = next(r for r in result.layout("hybrid:4").reads if r.read == f"{HOT}, last 1m")
    # One partition: a block a second (1 s batches of 400 readings), read whole
    layout = Layout.from_settings(kind="hybrid", bucket="1m", table_prefix="readings")
    blocks = [b for _, packed in packed_seconds(layout, lambda _: ShardMap.initial(layout.bucket, 4), last_minute)
              for b in packed]  # fmt: skip
    assert read.blocks_read == len(blocks) == 60
    assert read.readings_returned == sum(last_minute.values())
    assert read.read_units == pytest.approx(query_cost(sum(b.size for b in blocks), consistent=False)[1], abs=0.5)
    # The same blocks under any layout: only their spread over partitions (and so the rounding) differs
    for run in result.layouts:
        same = next(r for r in run.reads if r.read == f"{HOT}, last 1m")
        assert same.blocks_read == 60 and same.readings_returned == read.readings_returned


def test_a_partial_bucket_is_read_whole(result: SimulationResult) -> None:
    assert result.entity_counts is not None
    # Every entity writes a block in every second it sends a reading (1 s batches, under 1,000 readings)
    every_block = sum(1 for n in result.entity_counts.values() if n)
    last_90s = sum(n for (t, _), n in result.entity_counts.items() if t >= END - 90_000)
    cross = result.layout("hybrid:4").reads[-1]
    # The 06:58 bucket is half in the range: its partitions are read whole and filtered once decoded
    assert cross.blocks_read == every_block
    assert cross.readings_returned == last_90s < sum(result.entity_counts.values())


def test_reads_before_the_run_use_each_entitys_mean_rate(result: SimulationResult) -> None:
    read = next(r for r in result.layout("hybrid:4").reads if r.read == f"{HOT}, last 3h")
    # 2 minutes simulated (120 blocks), 178 minutes before them at the run's mean rate: 90 times the run's
    assert read.blocks_read == pytest.approx(120 * 90, abs=2)
    assert read.partitions == 180  # one partition per 1-minute bucket


def test_duration_labels() -> None:
    assert [duration_label(ms) for ms in (90_000, 60_000, 3_600_000, 86_400_000, 1_500)] == [
        "90s",
        "1m",
        "1h",
        "24h",
        "1500ms",
    ]
    assert START < END
