"""The deployment in parts (``tsctl plan``'s month): what ingest, compaction and the rollup function write,
read and keep, with the write tier on, priced part by part (issue 38)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

import pytest

from keydesign import Reading, Workload, plan_capacity
from keydesign.capacity import (
    COMPACTION_MS_PER_READING,
    KEEP_S,
    PARTS,
    SAMPLE_READING,
    CapacityPlan,
    Kind,
    PartCost,
    PartRates,
    deployment_rates,
    item_sizes,
)
from keydesign.items import item_size, write_units
from keydesign.rollup import GroupPartial
from keydesign.tiering import compact_hour, repack_slice
from keydesign.writetier import REPACK_MS, SUBGROUPS, WriteTier

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


def _group_hour_units(groups: int, entities: int, interval_ms: int, sample: Reading) -> float:
    """Write units a reading of one group's hour of ``entities`` / ``groups`` entities, each every ``interval_ms``
    from a random phase, as the real :func:`keydesign.tiering.compact_hour` packs them into cluster blocks."""
    rng, hour = random.Random(5), 1_795_305_600_000
    decimals = {k: len(repr(v).split(".")[1]) for k, v in sample.measures.items()}  # each measure's precision
    readings = []
    for n in range(entities // groups):
        for ts in range(hour + rng.randrange(interval_ms), hour + 3_600_000, interval_ms):
            measures = {k: round(v * (1 + rng.gauss(0, 0.01)), decimals[k]) for k, v in sample.measures.items()}
            readings.append(Reading.parse({"entity_id": f"device-{n:07d}", "timestamp": ts, "measures": measures}))
    pk = WriteTier(groups).cluster_pk(groups - 1, hour)
    made = compact_hour(hour, [(1, readings)], table="t", pk=pk, retention_ms=90 * 86_400_000)
    return sum(b.write_units for b in made) / len(readings)


def test_seed_003_costs_under_1000_a_month_on_demand_with_the_re_pack_compaction_and_rollups_included() -> None:
    plan = plan_capacity(SEED_003)
    parts = _parts(plan)
    # the target, every part counted (docs/decisions.md, "Compacted blocks of several entities")
    assert plan.monthly_ondemand.total < 1_000
    # every reading goes to group items (0.039 a batch); each group's hour becomes cluster blocks, a few
    # devices' hours each: as the real compact_hour packs a simulated group's hour, within 5%
    assert plan.write_tier is not None and plan.write_tier.dense_readings_per_s == 0
    groups = plan.write_tier.groups
    real = _group_hour_units(groups, 1_000_000, 259_000, SEED_003.sample)
    assert parts["compacted blocks"].write_units_per_reading == pytest.approx(real, rel=0.05)
    assert parts["compacted blocks"].write_units_per_reading < 0.015  # one device's hour a block was 0.072
    # a partial per group-hour; the hour's 60 minutes, the hour and the day of compaction's part of the totals
    sizes = item_sizes(lambda rng: {"value": 21.53}, "device-0000001", "readings", lambda k, m: ())
    partial = sizes.partial(3858 / groups * 60, 60)
    assert _wu_per_s(plan, "group partials", SEED_003) == pytest.approx(groups / 3_600 * write_units(partial))
    # (and the re-pack's fresh part of each minute: 5 a slice)
    assert _wu_per_s(plan, "compaction's totals", SEED_003) == pytest.approx(
        (62 / 3_600 + 5 / 300) * write_units(sizes.total)
    )
    # no per-entity rollups, no marks: a compaction-owned device's compacted blocks are its figures
    assert parts["marks and rollups (rollup-owned)"].usd(0) == 0
    assert _wu_per_s(plan, "rollup totals and state", SEED_003) == pytest.approx(1 / 60)  # its state
    # compaction reads each group's hour once, and runs as a Lambda
    assert parts["compaction's reads and state"].read_units_per_reading > 0
    assert parts["compaction Lambda"].usd(0) > 0
    # the targets: at most 0.15 write units and 40 billed bytes a reading
    assert sum(p.write_units_per_reading for p in plan.parts) < 0.15
    assert sum(p.bytes_at_rest_per_reading for p in plan.parts) < 40


def test_the_sparse_fleet_is_packed_and_compacted_into_cluster_blocks() -> None:
    plan = plan_capacity(SPARSE)
    parts = _parts(plan)
    # a sensor's hour is 60 readings; the clusters of a group's hour, as the real compact_hour packs them (5%);
    # group items kept 4 days of the 30
    assert plan.write_tier is not None
    real = _group_hour_units(plan.write_tier.groups, 10_000, 60_000, SPARSE.sample)
    assert parts["compacted blocks"].write_units_per_reading == pytest.approx(real, rel=0.05)
    group = parts["group items"]
    assert group.bytes_at_rest_per_reading == pytest.approx(plan.write_tier.group_item_bytes_per_reading * 4 / 30)
    assert parts["entities' own blocks"].usd(0) == parts["marks and rollups (rollup-owned)"].usd(0) == 0
    assert sum(p.write_units_per_reading for p in plan.parts) < 0.15
    assert sum(p.bytes_at_rest_per_reading for p in plan.parts) < 40
    assert plan.monthly_ondemand.total < 100


def test_a_dense_fleet_writes_no_group_items_and_keeps_todays_rollups() -> None:
    plan = plan_capacity(DENSE)
    parts = _parts(plan)
    assert plan.write_tier is not None and plan.write_tier.sparse_readings_per_s == 0
    for part in ("group items", "compacted blocks", "sub-items (re-pack)", "group partials", "compaction's totals"):
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


# -- the re-pack's sub-items ------------------------------------------------------------------


def test_the_re_pack_is_priced_for_a_sparse_fleet_and_absent_without_the_write_tier() -> None:
    for workload in (SEED_003, SPARSE):
        subs = _parts(plan_capacity(workload))["sub-items (re-pack)"]
        assert subs.write_units_per_reading > 0 and subs.bytes_at_rest_per_reading > 0 and subs.usd(0) > 0
    # blocks of one reading of a given size: no write tier, no part of it (a dense fleet's is 0: above)
    blocks_only = plan_capacity(Workload(peak_writes_per_s=10_000 / 60, item_bytes=184))
    assert "sub-items (re-pack)" not in _parts(blocks_only)


def _slice_write_units(sample: Reading, groups: int, slices: int) -> float:
    """Write units a reading of the sub-items :func:`repack_slice` puts for ``slices`` simulated slices of one
    group of seed 003's fleet at G ``groups``: its readings of a slice (3,858 a second over ``groups``), one each
    of distinct devices, at random times, measured like ``sample``'s (1% noise), with its kind of event id."""
    rng = random.Random(3)
    start = sample.ts_ms - sample.ts_ms % REPACK_MS
    per_slice = round(3858 / groups * REPACK_MS / 1000)
    units = 0
    for _ in range(slices):
        readings = []
        for device in rng.sample(range(10**7), per_slice):
            raw = {
                "entity_id": f"device-{device:07d}",
                "timestamp": start + rng.randrange(REPACK_MS),
                "measures": {"value": round(rng.gauss(21.53, 0.2153), 2)},
            }
            if not sample.derived_id:
                raw["event_id"] = f"{rng.getrandbits(48):012x}"
            readings.append(Reading.parse(raw))
        subs = repack_slice(
            WriteTier(groups), 0, start, [(1, readings)], table="readings", retention_ms=90 * 86_400_000
        )
        assert sum(len(s.readings) for s in subs) == per_slice  # every reading, once
        units += sum(s.write_units for s in subs)
    return units / (slices * per_slice)


WITH_EVENT_IDS = Reading.parse({**SEED_003.sample.to_json(), "event_id": "0a1b2c3d4e5f"})


@pytest.mark.parametrize("sample", [SEED_003.sample, WITH_EVENT_IDS], ids=["derived ids", "event ids"])
@pytest.mark.parametrize("groups", [512, 1_024])
def test_the_sub_items_write_units_agree_with_repack_slice(sample: Reading, groups: int) -> None:
    # 71 or 141 readings a sub-group and slice: at G 1,024 without event ids a sub-item sits on 1 KB, where
    # one of the mean count alone would be 10% off; every count weighed by its chance comes within 3%
    workload = Workload(
        peak_writes_per_s=3858, entities=1_000_000, retention_days=90, sample=sample, write_tier_groups=groups
    )
    priced = _parts(plan_capacity(workload))["sub-items (re-pack)"].write_units_per_reading
    assert priced == pytest.approx(_slice_write_units(sample, groups, slices=6), rel=0.03)


def test_the_re_pack_reads_each_slice_once_puts_its_state_a_step_and_takes_compactions_cpu_again() -> None:
    groups, rate = 512, 3858.0
    kinds = [Kind(1_000_000, rate / 1_000_000, 1.0, 249.0, sparse=True)]
    put = rate * 20.0  # group items' bytes a second (item + 100)

    def rates(sub: Callable[[int], Sequence[int]] | None) -> dict[str, PartRates]:
        sizes = item_sizes(lambda rng: {"value": 21.53}, "device-0000001", "readings", lambda k, m: (500,), sub)
        return deployment_rates(kinds, sizes, groups=groups, group_items=(rate * 0.03, put), retention_s=86_400)

    without, with_subs = rates(None), rates(lambda m: (700,))
    assert without["sub-items (re-pack)"] == without["slice partials (re-pack)"] == PartRates()
    slices = groups / (REPACK_MS / 1000)  # each group's 12 slices an hour, a second
    # every sub-group of a slice holds readings (141 on average): a sub-item of 700 B, a write unit
    subs = with_subs["sub-items (re-pack)"]
    assert subs.wu == pytest.approx(slices * SUBGROUPS)
    assert subs.at_rest == pytest.approx(slices * SUBGROUPS * 800 * KEEP_S)
    # each group's slice of items read once, strongly consistent (a unit per 4 KB), and its hour's dense marks
    # (none: a unit); the state put once a step of 16 groups
    slice_bytes = put / groups * REPACK_MS / 1000
    reads, before = with_subs["compaction's reads and state"], without["compaction's reads and state"]
    assert reads.ru - before.ru == pytest.approx(slices * (math.ceil(slice_bytes / 4096) + 1))
    assert reads.wu - before.wu == pytest.approx(math.ceil(groups / 16) / (REPACK_MS / 1000))
    # the Lambda: compaction's CPU a reading once more, and the re-pack's calls; no call of its own
    lam, lam_before = with_subs["compaction Lambda"], without["compaction Lambda"]
    assert lam.gb_s - lam_before.gb_s > rate * COMPACTION_MS_PER_READING / 1000
    assert lam.requests == lam_before.requests


def test_the_re_pack_puts_a_slice_partial_a_group_and_slice_as_large_as_a_real_one() -> None:
    plan = plan_capacity(SEED_003)
    assert plan.write_tier is not None
    groups = plan.write_tier.groups
    # a group's slice of seed 003 (3,858 readings a second over G), each of a device of its own, as the re-pack
    # puts its partial: within 10% of the model's (figures of a few readings a minute: the sums' text)
    rng = random.Random(4)
    start = SAMPLE_READING.ts_ms - SAMPLE_READING.ts_ms % REPACK_MS
    readings = [
        Reading.parse(
            {
                "entity_id": f"device-{n:07d}",
                "timestamp": start + rng.randrange(REPACK_MS),
                "measures": {"value": round(rng.gauss(21.53, 0.2153), 2)},
            }
        )
        for n in range(round(3858 / groups * REPACK_MS / 1000))
    ]
    hour = start - start % 3_600_000
    real = GroupPartial.of(hour, groups - 1, groups, readings, 60_000, slice_ms=start)
    sizes = item_sizes(lambda rng: {"value": 21.53}, "device-0000001", "readings", lambda k, m: ())
    model = sizes.partial(3858 / groups * 60, 5)
    assert model == pytest.approx(item_size(real.item("readings", 1)), rel=0.1)
    # one a group and slice, kept as the group items are; read back once a slice, after its last group
    part = _parts(plan)["slice partials (re-pack)"]
    assert _wu_per_s(plan, "slice partials (re-pack)", SEED_003) == pytest.approx(groups / 300 * write_units(model))
    assert 0 < part.bytes_at_rest_per_reading < 0.1
    assert 0 < part.read_units_per_reading < part.write_units_per_reading and part.usd(0) < 10
