"""The simulator's aggregated counts agree with the key-design layer keying every reading one by one.

Shared keys (hybrid base keys, one-key entities) must agree exactly, second by
second. An entity's own keys (sub-shards, suffixes) are chosen per write by a
hash or a draw, so the split of its writes over them agrees in distribution:
every (second, entity) total is exact, the key sets are the same, and each key's
total lies within sampling tolerance of the brute-force run's.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import numpy.typing as npt
import pytest

from keydesign import Layout, ShardMap, parse_timestamp, write_units
from simulator import HotEntity, LayoutSpec, ReadPattern, Simulation, SimWorkload
from simulator.engine import SimulationResult
from simulator.keyspace import Probes, build_key_table
from tests.unit.simulator.reference import brute_force_writes
from tests.unit.simulator.workloads import HOT, START, quick_detector, small_workload
from tsctl import seed

NO_READS = ReadPattern((HOT,), (60_000,), None)


def layout_of(result: SimulationResult, label: str) -> tuple[Layout, ShardMap]:
    run = result.layout(label)
    layout = Layout.from_settings(kind=run.spec.kind, bucket=result.bucket, table_prefix="readings")
    return layout, run.shard_map


def owners(layout: Layout, shard_map: ShardMap, names: list[str], bucket_starts: set[int]) -> dict[str, str | None]:
    """Each key's entity when the key is that entity's own (sub-shard, suffix); None for a shared key."""
    out: dict[str, str | None] = {}
    probes = Probes(names)
    for start in bucket_starts:
        table = build_key_table(layout, shard_map, probes, start)
        for index, name in enumerate(names):
            keys = table.entity_keys(index)
            for key in keys:
                out[key] = name if len(keys) > 1 else None
    return out


def assert_agree(result: SimulationResult, label: str) -> None:
    assert result.recorded is not None and result.entity_counts is not None
    layout, shard_map = layout_of(result, label)
    simulated = result.recorded[label]
    brute = brute_force_writes(layout, shard_map, result.entity_counts, seed=11)
    # Same keys, and the same writes in all
    assert {pk for _, pk in simulated} == {pk for _, pk in brute}
    assert sum(simulated.values()) == sum(brute.values()) == sum(result.entity_counts.values())
    names = list(result.workload.names)
    buckets = {layout.bucket.start(t) for t, _ in simulated}
    own = owners(layout, shard_map, names, buckets)
    per_key_sim: Counter[str] = Counter()
    per_key_brute: Counter[str] = Counter()
    per_entity_second_sim: Counter[tuple[int, str]] = Counter()
    per_entity_second_brute: Counter[tuple[int, str]] = Counter()
    for source, per_key, per_entity in (
        (simulated, per_key_sim, per_entity_second_sim),
        (brute, per_key_brute, per_entity_second_brute),
    ):
        for (second, pk), writes in source.items():
            per_key[pk] += writes
            owner = own[pk]
            if owner is None:
                continue
            per_entity[(second, owner)] += writes
    # A shared key takes exactly the same writes in every second
    for (second, pk), writes in brute.items():
        if own[pk] is None:
            assert simulated[(second, pk)] == writes, (second, pk)
    # An entity's own keys: the same writes per second in all, split within sampling tolerance
    assert per_entity_second_sim == per_entity_second_brute
    entity_totals: dict[str, int] = defaultdict(int)
    for pk, writes in per_key_brute.items():
        if own[pk] is not None:
            entity_totals[str(own[pk])] += writes
    for pk, owner in own.items():
        if owner is None or pk not in per_key_brute:
            continue
        ways = sum(1 for o in own.values() if o == owner and o is not None) or 1
        n = entity_totals[owner]
        sigma = math.sqrt(2 * n * (1 / ways) * (1 - 1 / ways)) if ways > 1 else 0.0
        assert abs(per_key_sim[pk] - per_key_brute[pk]) <= 5 * sigma + 1, (pk, per_key_sim[pk], per_key_brute[pk])


def test_hybrid_with_a_fixed_map_keys_every_write_as_key_for_does() -> None:
    result = Simulation(small_workload(), [LayoutSpec("hybrid", 4)], bucket="1m", reads=NO_READS, record=True).run()
    assert_agree(result, "hybrid:4")
    # Every key is a shared base key: agreement is exact second by second
    layout, shard_map = layout_of(result, "hybrid:4")
    assert result.recorded is not None and result.entity_counts is not None
    assert result.recorded["hybrid:4"] == brute_force_writes(layout, shard_map, result.entity_counts)


def test_adaptive_hybrid_agrees_before_and_after_its_split() -> None:
    result = Simulation(
        small_workload(),
        [LayoutSpec("hybrid", 4, adaptive=True)],
        bucket="1m",
        adaptive=quick_detector(),
        reads=NO_READS,
        record=True,
    ).run()
    run = result.layout("adaptive:4")
    # The detector split the hot sensor into 3 sub-shards from 06:59 (240 WCU/s at a 100 WCU/s budget)
    assert run.shard_map.entity_shards_at(HOT, parse_timestamp("2026-11-22T06:59:00Z")) == 3
    assert run.shard_map.entity_shards_at(HOT, START) is None
    assert_agree(result, "adaptive:4")


@pytest.mark.parametrize("kind", ["calculated", "random"])
def test_suffix_layouts_agree_in_distribution(kind: str) -> None:
    result = Simulation(
        small_workload(arrivals="poisson"), [LayoutSpec(kind, 3)], bucket="1m", reads=NO_READS, record=True
    ).run()  # type: ignore[arg-type]
    assert_agree(result, f"{kind}:3")


class FixedCounts:
    """The writes of one given second, as a count source."""

    def __init__(self, row: list[int]) -> None:
        self._row = row

    def counts(self, first_s: int, seconds: int) -> npt.NDArray[np.int64]:
        assert (first_s, seconds) == (0, 1)
        return np.array([self._row], dtype=np.int64)


def test_one_second_of_the_seed_generator_loads_every_key_as_tsctl_seed_does() -> None:
    # Given one second of the seed's own generator (tsctl.seed.one_second), counted per sensor
    start = parse_timestamp("2026-11-22T06:00:00Z")
    readings = seed.one_second(start)
    per_sensor = Counter(r.entity_id for r in readings)
    workload = SimWorkload(
        rate=seed.GLOBAL_RATE,
        entities=seed.SENSORS,
        item_bytes=seed.ITEM_BYTES,
        start_ms=start,
        duration_s=1,
        hot=(HotEntity(seed.HOT_SENSOR, float(seed.HOT_RATE)),),
    )
    assert set(workload.names) == {seed.sensor_name(i) for i in range(seed.SENSORS)}
    # When the simulator distributes those exact counts under the seed's N=16 and the plan's N=96
    result = Simulation(
        workload,
        [LayoutSpec("hybrid", 16), LayoutSpec("hybrid", 96)],
        reads=ReadPattern((seed.HOT_SENSOR,), (3_600_000,), None),
        record=True,
        counts=FixedCounts([per_sensor[name] for name in workload.names]),
    ).run()
    # Then every partition key carries exactly the write units seed.key_load adds up reading by reading
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    assert result.recorded is not None
    for label, shards in (("hybrid:16", 16), ("hybrid:96", 96)):
        expected = seed.key_load(label, layout, ShardMap.initial(layout.bucket, shards), readings).per_key
        wcu = write_units(workload.item_bytes)
        simulated = Counter({pk: writes * wcu for (_, pk), writes in result.recorded[label].items()})
        assert simulated == expected
