"""The seed scenario in memory, at production settings, the way the workload simulator drives the detector.

Hourly buckets, writers caching the map for 60 s, a 6-minute change margin,
10-second windows: sensor-alpha-001 bursts to 2,000 writes/s among 100 quiet
sensors. Every reading is stored as a block of its own (as if each reached
ingest in a batch of its own: the most write units blocks can cost, one per
reading), keyed with the map the writer holds. The detector sees each write as
the stream would: its keys, the write units its sort key carries, its time.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hotkeys.detector import DetectorConfig, Observation, apply_decisions, decide
from keydesign import Layout, Reading, ShardMap, earliest_change_boundary, parse_timestamp
from keydesign.layouts import parse_keys
from simulator.adaptive import LoadTracker

LAYOUT = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
CONFIG = DetectorConfig(window_ms=10_000)
CACHE_TTL_MS = 60_000
MARGIN_MS = 360_000
HOT = "sensor-alpha-001"
SENSORS = [f"sensor-{i:04d}" for i in range(100)]


def test_the_hot_sensor_is_split_at_the_next_boundary_and_no_reading_is_lost() -> None:
    store = ShardMap.initial(LAYOUT.bucket, 8)  # the control table's map
    writer_map, writer_loaded = store, -CACHE_TTL_MS  # one writer's cached copy
    tracker = LoadTracker(CONFIG)
    table: dict[str, list[str]] = defaultdict(list)  # pk -> sort keys written
    written: list[str] = []
    decided_at: list[int] = []
    start = parse_timestamp("2026-11-22T06:58:00Z")
    boundary = parse_timestamp("2026-11-22T08:00:00Z")
    seconds = [*range(start, start + 15_000, 1000), *range(boundary - 5_000, boundary + 10_000, 1000)]
    per_key_rate: dict[int, Counter[str]] = defaultdict(Counter)

    for second in seconds:
        if second - writer_loaded >= CACHE_TTL_MS:
            writer_map, writer_loaded = store, second
        batch = [(HOT, i) for i in range(2000)] + [(s, 0) for s in SENSORS]
        for n, (entity, i) in enumerate(batch):
            t = second + n * 1000 // len(batch)
            reading = Reading(entity, f"{entity}-{t}-{i}", t, {"v": 1.5})
            (block,) = LAYOUT.pack([(reading, 1)], writer_map)
            pk, sk = block.key.pk, block.key.sk
            table[pk].append(sk)
            written.append(sk)
            parts = parse_keys(pk, sk, "hybrid")
            assert parts is not None and parts.write_units == block.write_units == 1
            per_key_rate[second][pk] += parts.write_units
            tracker.observe(
                Observation(
                    partition_key=pk,
                    entity=entity,
                    write_units=parts.write_units,
                    approx_time_ms=t,
                    event_name="INSERT",
                    shared_key=parts.shared,
                )
            )
        now = second + 1000
        for closed in tracker.close_until(now, grace_ms=2_000):
            change_from = earliest_change_boundary(LAYOUT.bucket, now, CACHE_TTL_MS, MARGIN_MS)
            decisions = decide(
                closed.load,
                store,
                layout_kind="hybrid",
                config=CONFIG,
                change_from_ms=change_from,
                history=closed.history,
            )
            if decisions.has_changes:
                decided_at.append(now)
            store = apply_decisions(store, decisions, layout_kind="hybrid", now_ms=now, change_from_ms=change_from)

    # Before the split the hot sensor's partition key runs over 1,000 WCU/s
    before = [max(per_key_rate[s].values()) for s in seconds if s < boundary]
    assert min(before) > 1_000
    # It was split once, early, to ceil(2,000 / 400) = 5 sub-shards from 08:00 (the next boundary
    # after now + cache TTL + margin), with no global change
    assert len(decided_at) == 1 and decided_at[0] < start + 15_000
    assert store.entity_history[HOT][0].effective_from_ms == boundary
    assert store.entity_shards_at(HOT, boundary) == 5
    assert store.global_history == ShardMap.initial(LAYOUT.bucket, 8).global_history
    # After the boundary no partition key exceeds the threshold
    after = [max(per_key_rate[s].values()) for s in seconds if s >= boundary]
    assert max(after) <= CONFIG.split_threshold_wcu
    # Every reading, before and after, is found by the plan over the whole range exactly once
    plan = LAYOUT.plan_entity(HOT, start, boundary + 10_000, store)
    found = [
        sk
        for part in plan.partitions
        for sk in table.get(part.pk, [])
        if part.sk_low is not None and part.sk_high is not None and part.sk_low <= sk <= part.sk_high
    ]
    expected = [sk for sk in written if sk.startswith(f"{HOT}#")]
    assert len(found) == len(expected) == len(set(found))
    assert set(found) == set(expected)
