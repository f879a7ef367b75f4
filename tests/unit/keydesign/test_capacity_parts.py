"""The deployment in parts (``tsctl plan``'s month): what ingest, compaction and the rollup function write,
read and keep, with the write tier on, priced part by part (issue 38)."""

from __future__ import annotations

import math

import pytest

from keydesign import Reading, Workload, plan_capacity
from keydesign.capacity import (
    PARTS,
    SAMPLE_READING,
    CapacityPlan,
    PartCost,
    item_sizes,
    sizer_for,
)
from keydesign.items import write_units

#: The issue's seed 003: 1 million devices, one reading each per ~259 s, kept 90 days.
SEED_003 = Workload(
    peak_writes_per_s=3858,
    entities=1_000_000,
    retention_days=90,
    sample=Reading.parse(
        {"entity_id": "device-0000001", "timestamp": SAMPLE_READING.ts_ms, "measures": {"value": 21.53}}
    ),
)
SPARSE = Workload(peak_writes_per_s=10_000 / 60, entities=10_000)
DENSE = Workload(peak_writes_per_s=50, entities=10)  # seed 000-like: ten sensors at 5 readings/s


def _parts(plan: CapacityPlan) -> dict[str, PartCost]:
    return {p.part: p for p in plan.parts}


def _wu_per_s(plan: CapacityPlan, part: str, workload: Workload) -> float:
    return _parts(plan)[part].write_units_per_reading * workload.peak_writes_per_s


@pytest.mark.parametrize("workload", [SEED_003, SPARSE, DENSE], ids=["seed 003", "sparse", "dense"])
def test_every_part_is_priced_and_the_parts_add_up_to_the_month(workload: Workload) -> None:
    plan = plan_capacity(workload)
    assert tuple(p.part for p in plan.parts) == PARTS
    for column, month in enumerate((plan.monthly_ondemand, plan.monthly_provisioned)):
        assert sum(p.usd(column) for p in plan.parts) == pytest.approx(month.total, abs=0.01)
    # the stored data is the parts' bytes at rest over the retention
    at_rest = sum(p.bytes_at_rest_per_reading for p in plan.parts) * workload.peak_writes_per_s
    assert plan.monthly_storage_gb == pytest.approx(at_rest * workload.retention_days * 86_400 / 1024**3, abs=0.1)


def test_seed_003_costs_under_1000_a_month_on_demand_compaction_and_rollups_included() -> None:
    plan = plan_capacity(SEED_003)
    parts = _parts(plan)
    assert plan.monthly_ondemand.total < 1_000
    # every reading goes to group items (0.039 a batch); each device-hour becomes one compacted block of its
    # ~14 readings, measured by compact_hour
    assert plan.write_tier is not None and plan.write_tier.dense_readings_per_s == 0
    per_hour = round(3_600 / 1_000_000 * 3858)
    block_units = sum(map(write_units, sizer_for(SEED_003).compacted(per_hour)))
    assert parts["compacted blocks"].write_units_per_reading == pytest.approx(1_000_000 / 3_600 * block_units / 3858)
    # a partial per group-hour; the hour's 60 minutes, the hour and the day of compaction's part of the totals
    groups = plan.write_tier.groups
    sizes = item_sizes(lambda rng: {"value": 21.53}, "device-0000001", "readings", lambda m: ())
    partial = sizes.partial(3858 / groups * 60)
    assert _wu_per_s(plan, "group partials", SEED_003) == pytest.approx(groups / 3_600 * write_units(partial))
    assert _wu_per_s(plan, "compaction's totals", SEED_003) == pytest.approx(62 / 3_600 * write_units(sizes.total))
    # no per-entity rollups, no marks: a compaction-owned device's compacted blocks are its figures
    assert parts["marks and rollups (rollup-owned)"].usd(0) == 0
    assert _wu_per_s(plan, "rollup totals and state", SEED_003) == pytest.approx(1 / 60)  # its state
    # compaction reads each group's hour once, and runs as a Lambda
    assert parts["compaction's reads and state"].read_units_per_reading > 0
    assert parts["compaction Lambda"].usd(0) > 0
    # the targets: at most 0.15 write units and 40 billed bytes a reading
    assert sum(p.write_units_per_reading for p in plan.parts) < 0.15
    assert sum(p.bytes_at_rest_per_reading for p in plan.parts) < 40


def test_the_sparse_fleet_is_packed_and_compacted_an_hour_a_block() -> None:
    plan = plan_capacity(SPARSE)
    parts = _parts(plan)
    # a sensor's hour: 60 readings in one compacted block; group items kept 4 days of the 30
    block_units = sum(map(write_units, sizer_for(SPARSE).compacted(60)))
    assert parts["compacted blocks"].write_units_per_reading == pytest.approx(block_units / 60)
    group = parts["group items"]
    assert plan.write_tier is not None
    assert group.bytes_at_rest_per_reading == pytest.approx(plan.write_tier.group_item_bytes_per_reading * 4 / 30)
    assert parts["entities' own blocks"].usd(0) == parts["marks and rollups (rollup-owned)"].usd(0) == 0
    assert sum(p.write_units_per_reading for p in plan.parts) < 0.15
    assert sum(p.bytes_at_rest_per_reading for p in plan.parts) < 40
    assert plan.monthly_ondemand.total < 100


def test_a_dense_fleet_writes_no_group_items_and_keeps_todays_rollups() -> None:
    plan = plan_capacity(DENSE)
    parts = _parts(plan)
    assert plan.write_tier is not None and plan.write_tier.sparse_readings_per_s == 0
    for part in ("group items", "compacted blocks", "group partials", "compaction's totals"):
        assert parts[part].usd(0) == 0, part
    assert parts["compaction's reads and state"].usd(0) == parts["compaction Lambda"].usd(0) == 0
    # its own blocks as the blocks' figures say; a dense mark per sensor-hour
    typical = plan.blocks_of("typical")
    assert parts["entities' own blocks"].write_units_per_reading == pytest.approx(typical.write_units_per_reading)
    assert _wu_per_s(plan, "dense marks", DENSE) == pytest.approx(10 / 3_600)
    # as today: a mark and a rollup per sensor-minute, -hour and -day; the minute's, hour's and day's totals
    # and the function's state every minute
    intervals = 10 * (1 / 60 + 1 / 3_600 + 1 / 86_400)
    assert _wu_per_s(plan, "marks and rollups (rollup-owned)", DENSE) == pytest.approx(2 * intervals)
    assert _wu_per_s(plan, "rollup totals and state", DENSE) == pytest.approx(4 / 60)
    assert parts["rollup Lambda"].usd(0) > 0
    assert math.isclose(sum(p.usd(0) for p in plan.parts), plan.monthly_ondemand.total, abs_tol=0.01)
