"""Blocks in bulk (simulator.blocks) against Layout.pack on generated readings: the same blocks, units and bytes."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from keydesign import Layout, ShardMap, stable_hash
from keydesign.capacity import SAMPLE_READING, BlockSizer
from simulator import HotEntity, SimWorkload
from simulator.blocks import Batcher, BlockTable
from simulator.workload import CountSource
from tests.unit.simulator.reference import readings_of
from tests.unit.simulator.workloads import HOT, START

LAYOUT = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
SHARD_MAP = ShardMap.initial(LAYOUT.bucket, 4)


def pack(readings: list) -> list:  # type: ignore[type-arg]
    return LAYOUT.pack([(r, 10**55) for r in readings], SHARD_MAP, retention_ms=30 * 86_400_000)


@pytest.fixture(scope="module")
def table() -> BlockTable:
    return BlockTable.measure(BlockSizer(SAMPLE_READING, retention_ms=30 * 86_400_000), entity=HOT, rate=400.0)


@pytest.mark.parametrize("readings", [1, 2, 7, 45, 170, 400, 613, 999, 1_000])
def test_a_runs_blocks_are_what_pack_makes_of_that_many_readings(table: BlockTable, readings: int) -> None:
    # Given a run of readings as a sensor sends them (not the planner's representative ones)
    blocks = pack(readings_of(HOT, START, readings, random.Random(readings)))
    # Then the table, measured on a grid and interpolated, has the same blocks and units, bytes within 3%
    assert table.blocks[readings] == len(blocks)
    assert table.units[readings] == sum(b.write_units for b in blocks)
    assert table.bytes[readings] == pytest.approx(sum(b.size for b in blocks), rel=0.03)


def batches_by_pack(workload: SimWorkload, counts: np.ndarray, batch_s: int) -> Counter[tuple[int, str]]:
    """Write units per (second, entity) when each entity's readings of a batch are packed at the batch's end.

    A batch of ``batch_s`` seconds ends where the entity's clock says (its stable hash mod ``batch_s``), and
    the last second of the run ends them all; Layout.pack cuts the runs itself."""
    rng = random.Random(4)
    pending: dict[str, list] = {}  # type: ignore[type-arg]
    units: Counter[tuple[int, str]] = Counter()
    seconds = counts.shape[0]
    for second in range(seconds):
        for index, entity in enumerate(workload.names):
            pending.setdefault(entity, []).extend(
                readings_of(entity, START + second * 1000, int(counts[second, index]), rng)
            )
            ends = (second - stable_hash(entity) % batch_s) % batch_s == batch_s - 1 or second == seconds - 1
            if ends and pending[entity]:
                units[(second, entity)] += sum(b.write_units for b in pack(pending[entity]))
                pending[entity] = []
    return units


@pytest.mark.parametrize(("batch_s", "rate"), [(1, 5.0), (5, 5.0), (30, 2.0)])
def test_the_batcher_writes_each_batch_as_pack_does(batch_s: int, rate: float) -> None:
    # Given 12 sensors and a hot one, their readings drawn second by second for 70 s
    workload = SimWorkload(
        rate=12 * rate + 300, entities=13, start_ms=START, duration_s=70, hot=(HotEntity(HOT, 300.0),), seed=2
    )
    counts = CountSource(workload).counts(0, 70)
    sizer = BlockSizer(SAMPLE_READING, retention_ms=30 * 86_400_000)
    tables = [BlockTable.measure(sizer, entity=None, rate=rate), BlockTable.measure(sizer, entity=HOT, rate=300.0)]
    table_of = np.array([0] * 12 + [1], dtype=np.int64)
    # When the batcher turns them into blocks, in chunks, closing everything at the end
    batcher = Batcher(workload.names, batch_s, tables, table_of)
    parts = [batcher.step(first, counts[first : first + 10], close=first == 60) for first in range(0, 70, 10)]
    units = np.vstack([p.units for p in parts])
    readings = np.vstack([p.readings for p in parts])
    # Then every reading is written once, and each batch costs what Layout.pack makes of it, in its last second
    assert readings.sum() == counts.sum()
    simulated = Counter(
        {(int(s), workload.names[e]): int(units[s, e]) for s, e in zip(*np.nonzero(units), strict=True)}
    )
    packed = batches_by_pack(workload, counts, batch_s)
    assert set(simulated) == set(packed)
    if batch_s <= 10:
        assert simulated == packed
    else:
        # Past 10 s pack starts a run at a reading and the batcher at a batch's 10th second: a unit either way
        assert all(abs(simulated[k] - packed[k]) <= max(1, 0.05 * packed[k]) for k in packed)
        assert sum(simulated.values()) == pytest.approx(sum(packed.values()), rel=0.03)


def test_a_batch_is_cut_into_runs_of_10_seconds_and_1000_readings() -> None:
    # One entity writing 150 readings/s in 30 s batches: three 10 s runs of 1,500 = 1,000 + 500 each
    tables = [BlockTable.measure(BlockSizer(SAMPLE_READING), entity=None, rate=150.0)]
    batcher = Batcher(["sensor-00001"], 30, tables, np.zeros(1, dtype=np.int64))
    emitted = batcher.step(0, np.full((60, 1), 150, dtype=np.int64), close=False)
    # Its batches end in one second each, on its own clock; the first whole one holds 30 s of readings
    ends = np.flatnonzero(emitted.readings[:, 0])
    assert ends.size == 2 and ends[1] - ends[0] == 30
    assert emitted.readings[ends[1], 0] == 4_500
    assert emitted.blocks[ends[1], 0] == 6
    assert emitted.units[ends[1], 0] == 3 * (tables[0].units[1_000] + tables[0].units[500])
    assert ends[1] % 30 == (stable_hash("sensor-00001") + 29) % 30
