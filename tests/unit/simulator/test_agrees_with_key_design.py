"""The simulator's blocks, in bulk, agree with the key-design layer packing every reading.

Shared keys (hybrid base keys, one-key entities) must agree second by second: the
same blocks, so the same write units. An entity's own keys (sub-shards, suffixes)
are chosen per block by a hash or a draw, so the split of its blocks over them
agrees in distribution: every (second, entity) total is the same, the key sets are
the same, and each key's total lies within sampling tolerance of the brute-force
run's.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict

import numpy as np
import numpy.typing as npt
import pytest

from keydesign import Layout, ShardMap, parse_timestamp
from simulator import HotEntity, LayoutSpec, ReadPattern, Simulation, SimWorkload
from simulator.engine import SimulationResult, default_shards
from simulator.keyspace import build_key_table
from tests.unit.simulator.reference import brute_force_units
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
    for start in bucket_starts:
        table = build_key_table(layout, shard_map, names, start)
        for index, name in enumerate(names):
            keys = table.entity_keys(index)
            for key in keys:
                out[key] = name if len(keys) > 1 else None
    return out


def assert_agree(result: SimulationResult, label: str) -> Counter[tuple[int, str]]:
    """Check the simulator's write units against the brute force's; return the brute force's."""
    assert result.recorded is not None and result.entity_counts is not None
    layout, shard_map = layout_of(result, label)
    simulated = result.recorded[label]
    brute = brute_force_units(layout, shard_map, result.entity_counts, seed=11)
    # Same keys, and the same write units in all
    assert {pk for _, pk in simulated} == {pk for _, pk in brute}
    assert sum(simulated.values()) == sum(brute.values())
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
        for (second, pk), units in source.items():
            per_key[pk] += units
            owner = own[pk]
            if owner is not None:
                per_entity[(second, owner)] += units
    # A shared key takes exactly the same write units in every second
    for (second, pk), units in brute.items():
        if own[pk] is None:
            assert simulated[(second, pk)] == units, (second, pk)
    # An entity's own keys: the same units per second in all, split within sampling tolerance
    assert per_entity_second_sim == per_entity_second_brute
    entity_totals: dict[str, int] = defaultdict(int)
    for pk, units in per_key_brute.items():
        if own[pk] is not None:
            entity_totals[str(own[pk])] += units
    for pk, owner in own.items():
        if owner is None or pk not in per_key_brute:
            continue
        ways = sum(1 for o in own.values() if o == owner and o is not None) or 1
        n = entity_totals[owner]
        sigma = math.sqrt(2 * n * (1 / ways) * (1 - 1 / ways)) if ways > 1 else 0.0
        # A block carries several units: the spread of a key's total grows with them
        unit = max(1, n // max(1, sum(1 for (_, e) in per_entity_second_brute if e == owner)))
        assert abs(per_key_sim[pk] - per_key_brute[pk]) <= 5 * sigma * math.sqrt(unit) + unit, pk
    return brute


def test_hybrid_with_a_fixed_map_packs_every_second_as_layout_pack_does() -> None:
    result = Simulation(small_workload(), [LayoutSpec("hybrid", 4)], bucket="1m", reads=NO_READS, record=True).run()
    brute = assert_agree(result, "hybrid:4")
    # Every key is a shared base key: agreement is exact second by second
    assert result.recorded is not None
    assert result.recorded["hybrid:4"] == brute


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
    # The detector split the hot sensor into 3 sub-shards from 06:59 (a block of 400 readings a second: 3 WCU/s,
    # at a 1 WCU/s budget)
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
    """The readings of one given second, as a count source."""

    def __init__(self, row: list[int]) -> None:
        self._row = row

    def counts(self, first_s: int, seconds: int) -> npt.NDArray[np.int64]:
        assert (first_s, seconds) == (0, 1)
        return np.array([self._row], dtype=np.int64)


def test_one_second_of_the_seed_generator_loads_every_key_as_tsctl_seed_packs_it() -> None:
    # Given one second of the seed's own generator (tsctl.seed.traffic), counted per sensor, as a 1 s batch:
    # the simulator ends each entity's batches on its own clock (its hash mod the window), so only a
    # one-second window makes every entity's batch this one second, as seed.key_load packs it
    start = parse_timestamp("2026-11-22T06:00:00Z")
    readings = seed.traffic(start, 1)
    per_sensor = Counter(r.entity_id for r in readings)
    workload = SimWorkload(
        rate=seed.GLOBAL_RATE,
        entities=seed.SENSORS,
        start_ms=start,
        duration_s=1,
        batching_window_s=1,
        hot=(HotEntity(seed.HOT_SENSOR, float(seed.HOT_RATE)),),
    )
    assert set(workload.names) == {seed.sensor_name(i) for i in range(seed.SENSORS)}
    planned, _ = default_shards(workload, 0.5)
    # When the simulator packs those exact counts in bulk under the seed's N=16 and the plan's N
    result = Simulation(
        workload,
        [LayoutSpec("hybrid", 16), LayoutSpec("hybrid", planned)],
        reads=ReadPattern((seed.HOT_SENSOR,), (3_600_000,), None),
        record=True,
        counts=FixedCounts([per_sensor[name] for name in workload.names]),
    ).run()
    # Then every partition key carries the write units seed.key_load packs reading by reading
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    assert result.recorded is not None
    for shards in (16, planned):
        expected = seed.key_load("", layout, ShardMap.initial(layout.bucket, shards), readings, 1).per_key
        simulated = Counter({pk: units for (_, pk), units in result.recorded[f"hybrid:{shards}"].items()})
        assert simulated == expected
