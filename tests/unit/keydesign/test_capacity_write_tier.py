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
    # G auto: 1,024 for seed 003 (docs/decisions.md's design table); a group gets 37.7 readings a 10 s batch
    assert tier.groups == 1_024
    occupied, held = poisson_fill(3_858.0 / 1_024 * 10.0)
    assert tier.readings_per_item == round(held) == 38
    assert tier.items_per_s == pytest.approx(occupied * 1_024 / 10.0)
    assert tier.write_units_per_reading == pytest.approx(
        tier.items_per_s * write_units(round(tier.item_bytes)) / 3_858.0
    )
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


def test_a_given_group_count_or_none_at_all() -> None:
    sparse = Workload(peak_writes_per_s=10_000 / 60, entities=10_000, write_tier_groups=1_024)
    tier = plan_capacity(sparse).write_tier
    assert tier is not None and tier.groups == 1_024 and not tier.auto
    assert plan_capacity(Workload(peak_writes_per_s=10.0, entities=10, write_tier_groups=0)).write_tier is None


def test_a_group_count_past_the_limit_is_refused_naming_it() -> None:
    with pytest.raises(InvalidInput) as caught:
        Workload(peak_writes_per_s=10.0, entities=10, write_tier_groups=10_000).validate()
    assert caught.value.field == "write_tier_groups"
