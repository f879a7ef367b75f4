"""The seed scenario (tsctl.seed: 50,000 readings/s of three measures, 10,000 sensors, sensor-alpha-001 at
2,000/s), stored in blocks of 1 s ingest batches.

Twelve simulated minutes at full rate, from 06:51. One reading an item, the seed article's N=16 ran every
key at 3,125 WCU/s, three times a key's limit, and the hot sensor alone needed four keys. In blocks the whole
fleet writes about 10,000 WCU/s and the hot sensor two blocks of 1,000 readings a second.
"""

from __future__ import annotations

import pytest

from keydesign import parse_timestamp, plan_capacity
from simulator import LayoutSpec, ReadPattern, Simulation, SimWorkload
from simulator.engine import SimulationResult, default_shards
from tsctl import seed
from tsctl.commands.simulate import parse_hot

START = parse_timestamp("2026-11-22T06:51:00Z")


def seed_workload(duration_s: int) -> SimWorkload:
    return SimWorkload(
        rate=seed.GLOBAL_RATE,
        entities=seed.SENSORS,
        start_ms=START,
        duration_s=duration_s,
        hot=parse_hot(None, none=False),
    )


@pytest.fixture(scope="module")
def seed_run() -> SimulationResult:
    workload = seed_workload(12 * 60)
    n, _ = default_shards(workload, 0.5)
    layouts = [LayoutSpec("hybrid", 16), LayoutSpec("hybrid", n), LayoutSpec("hybrid", n, adaptive=True)]
    return Simulation(workload, layouts, reads=ReadPattern((seed.HOT_SENSOR,), (3_600_000,), 3_600_000)).run()


def test_the_planned_n_is_the_capacity_plans() -> None:
    plan = plan_capacity(seed.workload())
    # 9,999 sensors writing a block a second each: 10,000 WCU/s at 500 a key; the hot sensor needs no suffixes
    assert default_shards(seed_workload(1), 0.5) == (plan.global_shards, 1) == (20, 1)


def test_in_blocks_the_seed_articles_16_shards_throttle_nothing(seed_run: SimulationResult) -> None:
    run = seed_run.layout("hybrid:16")
    # ~10,000 WCU/s over 16 keys: about 625 each, under a key's 1,000
    assert 600 < run.writes.mean_wcu < 650
    assert run.writes.throttled_key_seconds == 0
    assert run.writes.hottest_wcu < 1_000


def test_the_planned_hybrid_keeps_every_key_near_its_budget(seed_run: SimulationResult) -> None:
    run = seed_run.layout("hybrid:20")
    assert 480 < run.writes.mean_wcu < 520 and run.writes.hottest_wcu < 600
    assert run.writes.throttled_key_seconds == 0


def test_the_detector_splits_nothing_and_recommends_more_base_keys(seed_run: SimulationResult) -> None:
    run = seed_run.layout("adaptive:20")
    # sensor-alpha-001 writes two 6-unit blocks a second: nowhere near the 500 WCU/s threshold
    assert [c for c in run.changes if c.kind != "global"] == []
    # The hash spreads 9,999 sensors over 20 keys unevenly: some base keys pass 500 WCU/s, and a larger N
    # is recommended, not applied (HOT_AUTO_APPLY_GLOBAL is off by default)
    recommended = [c for c in run.changes if c.kind == "global"]
    assert recommended and not any(c.applied for c in recommended)
    assert run.shard_map.global_history[-1].shards == 20
