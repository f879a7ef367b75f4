"""The seed scenario (tsctl.seed: 50,000 writes/s, 10,000 sensors, sensor-alpha-001 at 2,000/s, 500 B).

Twelve simulated minutes at full rate, from 06:51 so that a split decided in
the first window (judged at 06:52:30) takes effect at 07:00, the first hourly
boundary after now + cache TTL (60 s) + margin (360 s). About two seconds.
"""

from __future__ import annotations

import pytest

from keydesign import Layout, earliest_change_boundary, parse_timestamp, plan_capacity
from simulator import LayoutSpec, ReadPattern, Simulation, SimWorkload
from simulator.engine import SimulationResult, default_shards
from tsctl import seed
from tsctl.commands.simulate import parse_hot

START = parse_timestamp("2026-11-22T06:51:00Z")
BOUNDARY = parse_timestamp("2026-11-22T07:00:00Z")


@pytest.fixture(scope="module")
def seed_run() -> SimulationResult:
    workload = SimWorkload(
        rate=seed.GLOBAL_RATE,
        entities=seed.SENSORS,
        item_bytes=seed.ITEM_BYTES,
        start_ms=START,
        duration_s=12 * 60,
        hot=parse_hot(None, none=False),
    )
    n, _ = default_shards(workload, 0.5)
    layouts = [LayoutSpec("hybrid", 16), LayoutSpec("hybrid", n), LayoutSpec("hybrid", n, adaptive=True)]
    return Simulation(workload, layouts, reads=ReadPattern((seed.HOT_SENSOR,), (3_600_000,), 3_600_000)).run()


def test_the_planned_n_is_the_capacity_plans() -> None:
    plan = plan_capacity(seed.workload())
    workload = SimWorkload(
        rate=seed.GLOBAL_RATE,
        entities=seed.SENSORS,
        item_bytes=seed.ITEM_BYTES,
        start_ms=START,
        duration_s=1,
        hot=parse_hot(None, none=False),
    )
    assert default_shards(workload, 0.5) == (plan.global_shards, plan.entity_shards[seed.HOT_SENSOR]) == (96, 4)


def test_the_seed_articles_hybrid_with_16_shards_throttles_every_key(seed_run: SimulationResult) -> None:
    run = seed_run.layout("hybrid:16")
    # 50,000 / 16 = 3,125 WCU/s per key on average: three times a key's 1,000
    assert 3_000 < run.writes.mean_wcu < 3_250
    assert run.writes.throttled_key_seconds == 16 * 12 * 60  # every key, every second
    assert run.writes.p99_wcu > 1_000


def test_a_correctly_sized_hybrid_throttles_only_the_hot_sensor(seed_run: SimulationResult) -> None:
    run = seed_run.layout("hybrid:96")
    assert run.writes.throttled_key_seconds > 0
    # Every throttled key is the base key the hot sensor writes to, and it is most of that key's load
    assert run.throttled_entities == {seed.HOT_SENSOR}
    assert all(k.top_writer_share > 0.7 for k in run.writes.throttled_keys)
    assert {k.key[:4] for k in run.writes.throttled_keys} == {run.writes.hottest_key[:4]}
    # The other 95 keys carry their ~500 WCU/s share, nowhere near the limit
    assert run.writes.throttled_key_seconds == 12 * 60


def test_the_adaptive_layout_throttles_nothing_after_the_split_boundary(seed_run: SimulationResult) -> None:
    run = seed_run.layout("adaptive:96")
    splits = [c for c in run.changes if c.kind == "split"]
    assert len(splits) == 1 and splits[0].entity == seed.HOT_SENSOR and splits[0].applied
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    # Decided on the first window and applied at the first boundary every writer has seen
    assert splits[0].decided_at_ms == START + 90_000
    assert splits[0].effective_from_ms == earliest_change_boundary(layout.bucket, START + 90_000, 60_000, 360_000)
    assert run.first_change_ms == BOUNDARY
    assert run.shard_map.entity_shards_at(seed.HOT_SENSOR, BOUNDARY) == splits[0].to_shards >= 5
    # Before the boundary the hot sensor's key throttles as in the fixed layout; from it on, nothing does
    assert run.writes.throttled_key_seconds == (BOUNDARY - START) // 1000
    assert run.throttled_key_seconds_after_change == 0
    assert run.hottest_wcu_after_change is not None and run.hottest_wcu_after_change < 1_000
    assert run.per_second_max_wcu[(BOUNDARY - START) // 1000 :].max() < 1_000
