"""The write tier in the capacity arithmetic: G auto, the measured size of a group item, and what ingest
writes per reading with the write tier (tsctl plan prints these)."""

from __future__ import annotations

import pytest

from keydesign import InvalidInput, Reading, Workload, plan_capacity
from keydesign.blocks import MAX_BLOCK_ITEM_BYTES, MAX_BLOCK_READINGS
from keydesign.capacity import (
    GROUP_RECENT_BYTES,
    MIN_AUTO_GROUPS,
    SAMPLE_READING,
    GroupSizer,
    auto_groups,
    group_cuts,
    poisson_counts,
    poisson_fill,
)
from keydesign.items import write_units

SEED_003_READING = Reading.parse(
    {
        "entity_id": "device-0000001",
        "timestamp": SAMPLE_READING.ts_ms,
        "measures": {"value": 21.53},
        "event_id": "0a1b2c3d4e5f",
    }
)


def test_auto_groups_is_the_fewest_power_of_two_from_16_whose_ten_minutes_fit_64_kb() -> None:
    # 100 bytes a reading: 1,000 readings/s make 60 MB in 10 minutes, 64 KB a group from 916 groups
    assert auto_groups(1_000.0, 10.0, lambda m: 100 * m) == 1_024
    assert auto_groups(100.0, 10.0, lambda m: 100 * m) == 128
    assert auto_groups(0.0, 10.0, lambda m: 100 * m) == MIN_AUTO_GROUPS == 16  # nothing in the write tier
    assert auto_groups(1.0, 10.0, lambda m: 100 * m) == 16
    assert auto_groups(10**9, 10.0, lambda m: 100 * m) == 8_192  # the most a deployment may have (9,999)


def test_a_group_item_is_measured_by_the_real_encoder_and_cut_as_ingest_cuts_it() -> None:
    sizer = GroupSizer(SEED_003_READING, 10.0, retention_ms=30 * 86_400_000)
    one, forty = sizer.items(1), sizer.items(40)
    assert len(one) == len(forty) == 1 and 100 < one[0] < forty[0] < 40 * one[0]
    cut = sizer.items(2 * MAX_BLOCK_READINGS + 500)
    assert len(cut) >= 3 and all(size <= MAX_BLOCK_ITEM_BYTES for size in cut)
    assert sizer(2 * MAX_BLOCK_READINGS + 500) == sum(cut)


def test_seed_003_writes_a_group_item_per_group_per_batch_at_g_auto() -> None:
    plan = plan_capacity(Workload(peak_writes_per_s=3_858.0, entities=1_000_000, sample=SEED_003_READING))
    tier = plan.write_tier
    assert tier is not None and tier.auto and tier.dense_readings_per_s == 0
    # G auto: 1,024 for seed 003 (docs/decisions.md's design table); a group gets 37.7 readings a 10 s batch,
    # which span the window and the arrival lag: cut at 10 s, 1.3 items a batch of 29 readings
    assert tier.groups == 1_024
    cuts = group_cuts(3_858.0 / 1_024 * 10.0, 10.0)
    items = sum(cuts.values())
    assert 1.2 < items < 1.4 and tier.readings_per_item == pytest.approx(sum(m * n for m, n in cuts.items()) / items)
    assert round(tier.readings_per_item) == 29 and tier.items_per_s == pytest.approx(items * 1_024 / 10.0)
    # an item's write units are its own size's: some of them pass 1 KB
    sizer = GroupSizer(SEED_003_READING, 10.0, retention_ms=30 * 86_400_000)
    units = sum(n * write_units(sizer(m)) for m, n in cuts.items())
    assert tier.write_units_per_reading == pytest.approx(units * 1_024 / 10.0 / 3_858.0)
    assert tier.write_units_per_reading < 0.05 < plan.write_units_per_reading  # 1.0: blocks of one reading
    # its last 10 minutes stay within 64 KB
    assert 3_858.0 / tier.groups * 600 * tier.group_item_bytes_per_reading <= GROUP_RECENT_BYTES * 1.2


def test_dense_entities_keep_their_blocks_and_pay_a_mark_an_hour() -> None:
    workload = Workload(peak_writes_per_s=50_000.0, entities=10_000, hot_entities={"sensor-alpha-001": 2_000.0})
    plan = plan_capacity(workload)
    tier = plan.write_tier
    assert tier is not None and tier.sparse_readings_per_s == 0 and tier.items_per_s == 0
    assert tier.dense_marks_per_s == pytest.approx(10_000 / 3_600)
    assert tier.write_units_per_reading == pytest.approx(
        plan.write_units_per_reading + 10_000 / 3_600 / 50_000, abs=1e-4
    )


def test_a_given_group_count() -> None:
    sparse = Workload(peak_writes_per_s=10_000 / 60, entities=10_000, write_tier_groups=1_024)
    tier = plan_capacity(sparse).write_tier
    assert tier is not None and tier.groups == 1_024 and not tier.auto


@pytest.mark.parametrize("groups", [0, 10_000])
def test_a_group_count_outside_1_to_the_limit_is_refused_naming_it(groups: int) -> None:
    # the write tier is not turned off (readers find a sparse entity's compacted history only through it)
    with pytest.raises(InvalidInput) as caught:
        Workload(peak_writes_per_s=10.0, entities=10, write_tier_groups=groups).validate()
    assert caught.value.field == "write_tier_groups"


def test_a_groups_readings_of_a_batch_are_cut_at_10_s_as_ingest_cuts_them() -> None:
    # without the arrival lag a 10 s batch fits one item; with it, the tail goes to a second item
    def items(mean: float, batch_s: float, **lag: float) -> float:
        cuts = group_cuts(mean, batch_s, **lag)
        assert sum(m * n for m, n in cuts.items()) == pytest.approx(mean, rel=0.03)  # every reading, once
        return sum(cuts.values())

    occupied, _ = poisson_fill(40.0)
    assert items(40.0, 10.0, lag_s=0.0) == pytest.approx(occupied)
    assert items(40.0, 10.0) > 1.2
    # a 5 s batch with its lag never needs a second item; 20 s ones need two or three
    assert items(40.0, 5.0) == pytest.approx(occupied)
    assert 2.0 < items(80.0, 20.0) < 3.0
    # past 1,000 readings, cut by count too
    assert items(2_500.0, 5.0) == pytest.approx(3.0, abs=0.1)
    assert max(group_cuts(2_500.0, 5.0)) == MAX_BLOCK_READINGS


@pytest.mark.parametrize("mean", [0.1, 3.0, 70.6, 141.3, 480.0])
def test_poisson_counts_weigh_each_count_a_sub_group_may_hold(mean: float) -> None:
    counts = poisson_counts(mean)
    occupied, held = poisson_fill(mean)
    assert min(counts) >= 1 and sum(counts.values()) == pytest.approx(occupied, rel=1e-9)
    assert sum(k * p for k, p in counts.items()) == pytest.approx(held * occupied, rel=1e-9)


def test_poisson_counts_of_nothing_and_of_many() -> None:
    assert poisson_counts(0.0) == {}
    assert poisson_counts(2_000.4) == {2_000: 1.0}  # the spread is then a few percent of it


def test_the_plan_gives_a_sparse_fleet_day_buckets_and_a_dense_one_the_stacks_hour() -> None:
    def bucket(**workload: object) -> tuple[str | None, str]:
        plan = plan_capacity(Workload(**workload))  # type: ignore[arg-type]
        return plan.table_period, plan.bucket

    # seed 003 and the sparse fleet: the write tier carries every reading, daily tables: a device's
    # compacted day is one Query
    assert bucket(peak_writes_per_s=3_858.0, entities=1_000_000, sample=SEED_003_READING) == ("day", "1d")
    assert bucket(peak_writes_per_s=166.67, entities=10_000) == ("day", "1d")
    # the seed scenario: dense sensors and a hot one, whose split must not wait a day
    assert bucket(peak_writes_per_s=50_000.0, entities=10_000, hot_entities={"sensor-alpha-001": 2_000.0}) == (
        "hour",
        "1h",
    )
    assert bucket(peak_writes_per_s=50_000.0, entities=10_000)[1] == "1h"  # dense: no write tier to speak of
    assert bucket(peak_writes_per_s=600.0, item_bytes=180, utilisation=1.0) == ("day", "1h")  # no reading sample
    # a sparse fleet declared with a hot entity keeps the hour
    assert bucket(peak_writes_per_s=3_858.0, entities=1_000_000, hot_entities={"device-0000001": 1.0})[1] == "1h"
