"""The seed scenario (tsctl.seed: 50,000 readings/s of three measures, 10,000 sensors, sensor-alpha-001 at
2,000/s), stored in blocks of ingest batches of 5 s (the stack's window before the write tier's 10 s; the
figures below are the 5 s run's, so the window is set here).

Twelve simulated minutes at full rate, from 06:51. One reading an item, the seed article's N=16 ran every
key at 3,125 WCU/s, three times a key's limit, and the hot sensor alone needed four keys. In blocks the whole
fleet writes about 2,000 WCU/s (a block of 24 readings per sensor every 5 s) and the hot sensor ten blocks
of 1,000 readings every 5 s.
"""

from __future__ import annotations

import pytest

from keydesign import parse_timestamp, plan_capacity
from simulator import LayoutSpec, ReadPattern, Simulation, SimWorkload
from simulator.engine import SimulationResult, default_shards
from tsctl import seed
from tsctl.commands.simulate import parse_hot

START = parse_timestamp("2026-11-22T06:51:00Z")
WINDOW_S = 5


def seed_workload(duration_s: int) -> SimWorkload:
    return SimWorkload(
        rate=seed.GLOBAL_RATE,
        entities=seed.SENSORS,
        start_ms=START,
        duration_s=duration_s,
        hot=parse_hot(None, none=False),
        batching_window_s=WINDOW_S,
    )


@pytest.fixture(scope="module")
def seed_run() -> SimulationResult:
    workload = seed_workload(12 * 60)
    n, _ = default_shards(workload, 0.5)
    assert n == 4  # the test above
    layouts = [LayoutSpec("hybrid", 16), LayoutSpec("hybrid", n), LayoutSpec("hybrid", n, adaptive=True)]
    return Simulation(workload, layouts, reads=ReadPattern((seed.HOT_SENSOR,), (3_600_000,), 3_600_000)).run()


def test_the_planned_n_is_the_capacity_plans() -> None:
    plan = plan_capacity(seed.workload(WINDOW_S))
    # 9,999 sensors writing a one-unit block every 5 s each: 2,000 WCU/s at 500 a key; the hot sensor's
    # 12 WCU/s need no suffixes
    assert default_shards(seed_workload(1), 0.5) == (plan.global_shards, 1) == (4, 1)


def test_in_blocks_the_seed_articles_16_shards_throttle_nothing(seed_run: SimulationResult) -> None:
    run = seed_run.layout("hybrid:16")
    # ~2,000 WCU/s over 16 keys: about 125 each (127.1 measured), under a key's 1,000 even in the second
    # a bucket boundary closes every batch at once (650 WCU, the test below)
    assert 120 < run.writes.mean_wcu < 135
    assert run.writes.throttled_key_seconds == 0
    assert run.writes.hottest_wcu < 1_000


def test_the_planned_hybrid_keeps_every_key_near_its_budget_but_where_every_batch_closes(
    seed_run: SimulationResult,
) -> None:
    run = seed_run.layout("hybrid:4")
    # ~2,000 WCU/s over 4 keys: about 500 each (508.5 measured), 548 at the 99th percentile
    assert 480 < run.writes.mean_wcu < 520 and run.writes.p99_wcu < 600
    # The simulator ends every entity's batch at a bucket boundary and at the run's end (each entity's
    # batches otherwise end on its own clock), so in those two seconds each key takes a whole window's
    # writes at once: 5 x ~500 WCU. Each of the 4 keys of each bucket is over 1,000 in that one second only.
    throttled = run.writes.throttled_keys
    assert run.writes.throttled_key_seconds == len(throttled) == 8
    assert {t.seconds for t in throttled} == {1}
    assert run.writes.hottest_at_ms == parse_timestamp("2026-11-22T06:59:59Z")


def test_the_detector_splits_nothing_and_recommends_more_base_keys(seed_run: SimulationResult) -> None:
    run = seed_run.layout("adaptive:4")
    # sensor-alpha-001 writes ten 6-unit blocks every 5 s, 12 WCU/s: nowhere near the 500 WCU/s threshold
    assert [c for c in run.changes if c.kind != "global"] == []
    # The hash spreads 9,999 sensors over 4 keys unevenly: some base keys pass 500 WCU/s, and a larger N
    # is recommended, not applied (HOT_AUTO_APPLY_GLOBAL is off by default)
    recommended = [c for c in run.changes if c.kind == "global"]
    assert recommended and not any(c.applied for c in recommended)
    assert run.shard_map.global_history[-1].shards == 4
