"""The adaptive layout is the hot-key detector's logic, in simulated time."""

from __future__ import annotations

from dataclasses import replace

from hotkeys.detector import Observation, apply_decisions, decide
from keydesign import Layout, ShardMap, earliest_change_boundary, parse_timestamp
from keydesign.layouts import parse_keys
from simulator import Burst, HotEntity, LayoutSpec, ReadPattern, Simulation
from simulator.adaptive import LoadTracker
from tests.unit.simulator.reference import packed_seconds
from tests.unit.simulator.workloads import HOT, quick_detector, small_workload

NO_READS = ReadPattern((HOT,), (60_000,), None)


def test_the_shard_map_is_the_one_the_detector_reaches_block_by_block() -> None:
    # Given the small workload under the adaptive layout (aggregated observations)
    settings = quick_detector()
    result = Simulation(
        small_workload(),
        [LayoutSpec("hybrid", 4, adaptive=True)],
        bucket="1m",
        adaptive=settings,
        reads=NO_READS,
        record=True,
    ).run()
    assert result.entity_counts is not None
    # When the same readings are packed second by second with the map of the moment, and every block
    # is observed as the hot-key Lambda sees it on the stream (its keys; its write units in its sort key)
    layout = Layout.from_settings(kind="hybrid", bucket="1m", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 4)
    tracker = LoadTracker(settings.detector)

    def judged_until(second: int) -> ShardMap:
        nonlocal shard_map
        for closed in tracker.close_until(second, settings.grace_ms):
            change_from = earliest_change_boundary(layout.bucket, second, settings.cache_ttl_ms, settings.margin_ms)
            decisions = decide(
                closed.load,
                shard_map,
                layout_kind="hybrid",
                config=settings.detector,
                change_from_ms=change_from,
                history=closed.history,
            )
            shard_map = apply_decisions(
                shard_map, decisions, layout_kind="hybrid", now_ms=second, change_from_ms=change_from
            )
        return shard_map

    for second, blocks in packed_seconds(layout, judged_until, result.entity_counts):
        for block in blocks:
            parts = parse_keys(block.key.pk, block.key.sk, "hybrid")
            assert parts is not None and parts.write_units == block.write_units
            tracker.observe(
                Observation(
                    partition_key=block.key.pk,
                    entity=parts.entity,
                    write_units=parts.write_units,
                    approx_time_ms=second,
                    event_name="INSERT",
                    shared_key=parts.shared,
                )
            )
    # Then the simulator's map is that map: same splits, same boundaries
    assert result.layout("adaptive:4").shard_map.to_dict() == shard_map.to_dict()
    assert shard_map.entity_history[HOT][0].shards == 3


def test_changes_wait_for_the_cache_ttl_and_margin() -> None:
    settings = replace(quick_detector(), margin_ms=65_000)
    result = Simulation(
        small_workload(), [LayoutSpec("hybrid", 4, adaptive=True)], bucket="1m", adaptive=settings, reads=NO_READS
    ).run()
    run = result.layout("adaptive:4")
    (split,) = [c for c in run.changes if c.kind == "split"]
    # Decided at 06:58:12 (first window + 2 s grace); 06:58:12 + 5 s TTL + 65 s margin is past 06:59
    assert split.decided_at_ms == parse_timestamp("2026-11-22T06:58:12Z")
    assert split.effective_from_ms == parse_timestamp("2026-11-22T07:00:00Z")
    assert split.effective_from_ms >= split.decided_at_ms + settings.cache_ttl_ms + settings.margin_ms
    assert run.first_change_ms == split.effective_from_ms and run.throttled_key_seconds_after_change is None


def test_a_burst_that_ends_is_scaled_back_down_after_quiet_windows() -> None:
    settings = quick_detector()
    settings = replace(settings, detector=replace(settings.detector, scale_down_windows=3))
    workload = replace(
        small_workload(duration_s=300), hot=(HotEntity(HOT, 400.0, (Burst(0, 120),)),)
    )  # bursting 06:58-07:00, then a typical sensor: a block of one or two readings a second, 1 WCU/s
    result = Simulation(
        workload, [LayoutSpec("hybrid", 4, adaptive=True)], bucket="1m", adaptive=settings, reads=NO_READS
    ).run()
    run = result.layout("adaptive:4")
    # (the crowded base keys get a larger global N recommended, not applied: see below)
    kinds = [(c.kind, c.from_shards, c.to_shards) for c in run.changes if c.kind != "global"]
    # 1 WCU/s at 80% of the 1 WCU/s budget still needs 2 keys
    assert kinds == [("split", 1, 3), ("scale_down", 3, 2)]
    down = next(c for c in run.changes if c.kind == "scale_down")
    assert down.decided_at_ms > parse_timestamp("2026-11-22T07:00:30Z")  # three quiet windows judged
    assert run.shard_map.entity_shards_at(HOT, down.effective_from_ms) == 2
    assert run.shard_map.entity_shards_at(HOT, parse_timestamp("2026-11-22T06:59:30Z")) == 3


def test_a_crowded_base_key_gets_a_recommendation_not_a_change() -> None:
    # Given 40 quiet sensors on one base key, a block a second each: 40 times the 1 WCU/s threshold
    crowded = replace(small_workload(hot_rate=0.001), rate=300.0)
    result = Simulation(
        crowded, [LayoutSpec("hybrid", 1, adaptive=True)], bucket="1m", adaptive=quick_detector(), reads=NO_READS
    ).run()
    run = result.layout("adaptive:1")
    recommended = [c for c in run.changes if c.kind == "global"]
    assert recommended and not any(c.applied for c in recommended)
    assert recommended[0].to_shards > 1
    assert run.shard_map.global_history[-1].shards == 1
