"""Capacity arithmetic and item sizes, checked against figures worked out by hand."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pytest

from keydesign import (
    InvalidInput,
    Layout,
    Prices,
    Reading,
    ShardMap,
    Workload,
    build_item,
    item_size,
    plan_capacity,
    shards_for,
)
from keydesign import read_units as read_units_for
from keydesign import write_units as write_units_for
from keydesign.capacity import PARTITION_WCU, choose_period, fill_hours, key_load
from keydesign.items import MAX_ITEM_BYTES, number_size, ttl_for, value_size
from keydesign.layouts import LAYOUTS, ItemKey
from keydesign.model import DIMENSION_VALUE_MAX, ENTITY_ID_MAX, EVENT_ID_MAX, MAX_DIMENSIONS, MAX_MEASURES

# -- the 10 GB rule and the AWS guide's worked example --------------------------------


def test_600_readings_a_second_of_180_bytes_fill_a_partition_in_about_26_hours() -> None:
    # 10 GiB = 10,737,418,240 B; less 5% headroom = 10,200,547,328 B.
    # 600/s x 180 B = 108,000 B/s  ->  10,200,547,328 / 108,000 = 94,449.5 s = 26.24 h.
    # The guide says "around 26 or 27 hours", so it puts a new table in service every day.
    hours = fill_hours(600 * 180, 0.05)
    assert hours == pytest.approx(26.236, abs=0.001)
    assert 26 < hours < 27
    plan = plan_capacity(Workload(peak_writes_per_s=600, item_bytes=180, utilisation=1.0))
    assert plan.global_shards == 1  # 600 WCU fits one key at 100%
    assert plan.fill_hours == 26.24
    assert plan.table_period == "day"


@pytest.mark.parametrize(
    ("hours", "period"),
    [
        (0.99, None),
        (1, "hour"),
        (23.99, "hour"),
        (24, "day"),
        (167.9, "day"),
        (168, "week"),
        (743, "week"),
        (744, "month"),
    ],
)
def test_the_longest_period_that_fills_no_partition_is_chosen(hours: float, period: str | None) -> None:
    # A month counts as 31 days = 744 h, so no month ever overfills.
    assert choose_period(hours) == period


# -- shards ---------------------------------------------------------------------------


def test_50000_writes_of_500_bytes_need_100_shards_at_half_utilisation() -> None:
    # 500 B -> 1 WCU per write; 50,000 WCU/s / (1,000 WCU x 0.5) = 100 keys.
    plan = plan_capacity(Workload(peak_writes_per_s=50_000, item_bytes=500))
    assert plan.wcu_per_item == 1
    assert plan.peak_wcu == 50_000
    assert plan.key_budget_wcu == 500
    assert plan.global_shards == 100
    assert plan.load_per_shard_wcu == 500
    # The same rate of 1,500-byte items is 2 WCU each: twice the keys.
    assert plan_capacity(Workload(peak_writes_per_s=50_000, item_bytes=1_500)).global_shards == 200


def test_the_seed_designs_n_16_overloads_every_key_three_times() -> None:
    # 50,000 writes/s / 16 keys = 3,125 WCU/s on each key; a key takes 1,000.
    load = key_load(50_000, 16, 500)
    assert load == 3_125
    assert 3 * PARTITION_WCU < load < 4 * PARTITION_WCU


def test_a_2000_writes_per_second_sensor_needs_4_sub_shards_at_half_utilisation() -> None:
    # 2,000 WCU/s / 500 WCU/s per key = 4.
    assert shards_for(2_000, 0.5) == 4
    plan = plan_capacity(Workload(peak_writes_per_s=50_000, item_bytes=500, hot_entities={"sensor-hot": 2_000}))
    assert plan.entity_shards == {"sensor-hot": 4}
    assert plan.global_shards == 96  # the other 48,000 WCU/s over 500-WCU keys


@pytest.mark.parametrize(
    ("wcu", "utilisation", "keys"),
    [
        (0, 0.5, 1),
        (1, 0.5, 1),
        (500, 0.5, 1),
        (501, 0.5, 2),
        (1_000, 1.0, 1),
        (1_001, 1.0, 2),
        (3 * 1000 * 0.55, 0.55, 3),
    ],
)
def test_shards_for_rounds_up_to_whole_keys(wcu: float, utilisation: float, keys: int) -> None:
    # 3 x 1000 x 0.55 is 1650.0000000000002 in floating point, a ratio of
    # 3.0000000000000004 keys: a rounding error must not cost a fourth key.
    assert shards_for(wcu, utilisation) == keys


def test_a_warm_entity_that_would_overload_its_shared_shard_is_split_in_two() -> None:
    # 1,000 writes/s, 400 of them from "warm": the other 600 need 2 keys of 300 each,
    # and warm (400) on one of them would make 700 > 500: so warm gets 2 sub-shards.
    plan = plan_capacity(Workload(peak_writes_per_s=1_000, item_bytes=500, hot_entities={"warm": 400}))
    assert plan.global_shards == 2
    assert plan.load_per_shard_wcu == 300
    assert plan.entity_shards == {"warm": 2}
    assert any("warm" in note for note in plan.notes)


# -- cost -----------------------------------------------------------------------------


def test_monthly_cost_of_a_simple_workload_matches_the_hand_calculation() -> None:
    # 100 writes/s of 500 B (1 WCU each), 10 reads/s of 20 items, kept 30 days; default prices.
    # A month is 730 h = 2,628,000 s.
    #   on-demand writes: 100 x 2,628,000 = 262.8 M WRU x $0.625/M          = $164.25
    #   reads: 20 x 500 B = 10,000 B -> ceil(10,000/4,096) = 3 RCU, eventually
    #     consistent 1.5 RRU; 10 x 1.5 x 2,628,000 = 39.42 M x $0.125/M     = $4.9275
    #   storage: 100 x (500 + 100 overhead) B x 30 x 86,400 s = 155.52e9 B
    #     = 144.84 GiB x $0.25                                               = $36.21
    #   on-demand total                                                      = $205.39
    #   provisioned: 100 WCU x 730 h x $0.00065 = $47.45; 15 RCU x 730 x $0.00013
    #     = $1.4235; plus storage                                            = $85.08
    workload = Workload(peak_writes_per_s=100, item_bytes=500, reads_per_s=10, items_per_read=20, retention_days=30)
    plan = plan_capacity(workload)
    assert plan.monthly_storage_gb == 144.8
    assert plan.monthly_cost_ondemand == 205.39
    assert plan.monthly_cost_provisioned == 85.08
    # 100 x 500 B/s on one partition: 10,200,547,328 / 50,000 / 3,600 = 56.67 h -> daily tables.
    assert plan.fill_hours == 56.67
    assert plan.table_period == "day"
    # The seed's pre-November-2024 on-demand write price doubles the write line: +$164.25.
    old = plan_capacity(workload, Prices(ondemand_write_per_million=1.25))
    assert old.monthly_cost_ondemand == pytest.approx(205.39 + 164.25, abs=0.01)


def test_average_rate_drives_cost_and_peak_drives_shards() -> None:
    # Peak 1,000/s needs 2 keys; an average of 100/s costs as the workload above without reads.
    plan = plan_capacity(Workload(peak_writes_per_s=1_000, avg_writes_per_s=100, item_bytes=500))
    assert plan.global_shards == 2
    assert plan.monthly_cost_ondemand == pytest.approx(164.25 + 36.21, abs=0.01)
    # provisioned for the peak: 1,000 WCU x 730 h x $0.00065 = $474.50, plus storage
    assert plan.monthly_cost_provisioned == pytest.approx(474.50 + 36.21, abs=0.01)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"peak_writes_per_s": 0}, "peak_writes_per_s"),
        ({"peak_writes_per_s": -5}, "peak_writes_per_s"),
        ({"peak_writes_per_s": math.nan}, "peak_writes_per_s"),
        ({"peak_writes_per_s": math.inf}, "peak_writes_per_s"),
        ({"item_bytes": 0}, "item_bytes"),
        ({"item_bytes": 400 * 1024 + 1}, "item_bytes"),
        ({"entities": 0}, "entities"),
        ({"utilisation": 0}, "utilisation"),
        ({"utilisation": 1.01}, "utilisation"),
        ({"utilisation": math.nan}, "utilisation"),
        ({"partition_headroom": -0.01}, "partition_headroom"),
        ({"partition_headroom": 1}, "partition_headroom"),
        ({"reads_per_s": -1}, "reads_per_s"),
        ({"reads_per_s": math.inf}, "reads_per_s"),
        ({"items_per_read": 0}, "items_per_read"),
        ({"items_per_read": math.inf}, "items_per_read"),
        ({"retention_days": 0}, "retention_days"),
        ({"retention_days": math.inf}, "retention_days"),
        ({"avg_writes_per_s": 0}, "avg_writes_per_s"),
        ({"avg_writes_per_s": 1_001}, "avg_writes_per_s"),
        ({"hot_entities": {"sensor-hot": 0}}, "hot_entities.sensor-hot"),
        ({"hot_entities": {"sensor-hot": 1_001}}, "hot_entities.sensor-hot"),
    ],
)
def test_impossible_workloads_are_refused_naming_the_figure(changes: dict[str, object], field: str) -> None:
    workload = Workload(**{"peak_writes_per_s": 1_000, "item_bytes": 500, **changes})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput) as caught:
        workload.validate()
    assert caught.value.field == field
    with pytest.raises(InvalidInput):
        plan_capacity(workload)


# -- item size, write units, read units ------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("sensor-1", 8),
        ("", 0),
        ("né", 3),  # é is 2 bytes in UTF-8
        ("€", 3),
        ("😀", 4),
        (21.5, 3),  # 3 significant digits -> ceil(3/2) + 1
        (40, 2),  # trailing zero trimmed: 1 digit
        (100, 2),
        (10**37, 2),
        (123456, 4),
        (-7, 2),
        (0.001, 2),
        (12345.6789, 6),  # 9 digits -> 5 + 1
        (Decimal("1.50"), 2),
        (True, 1),
        (None, 1),
        (b"abc", 3),
        ({}, 3),
        ({"temp": 21.5, "rh": 40}, 16),  # 3 + (4 + 3 + 1) + (2 + 2 + 1)
        ({"a": {"b": 1}}, 12),  # 3 + (1 + [3 + (1 + 2 + 1)] + 1)
        ({"ü": 1}, 8),  # 3 + (2-byte name + 2 + 1)
        (["a", 1], 8),  # 3 + (1 + 1) + (2 + 1)
    ],
    ids=repr,
)
def test_value_sizes_follow_dynamodbs_rules(value: object, size: int) -> None:
    assert value_size(value) == size


def test_number_size_counts_significant_digits_only() -> None:
    assert number_size(1_234_500_000) == number_size(12345) == 4
    assert number_size(0.000012345) == 4


def test_the_size_of_a_stored_reading_matches_a_hand_count() -> None:
    reading = Reading.parse(
        {
            "entity_id": "sensor-1",
            "event_id": "ev-1",
            "timestamp": "2026-11-22T06:57:51.123Z",
            "measures": {"temp": 21.5},
            "dimensions": {"site": "p7"},
        }
    )
    key = ItemKey("readings", "0003#2026-11-22T06:00", "sensor-1#2026-11-22T06:57:51.123Z#ev-1")
    item = build_item(reading, key, ttl_epoch_s=1_797_922_671)
    # pk  2 + 21          = 23      e  1 + 8   = 9     i  1 + 4 = 5
    # sk  2 + 38          = 40      t  1 + 24  = 25
    # m   1 + 3 + (4 + 3 + 1)  = 12
    # d   1 + 3 + (4 + 2 + 1)  = 11
    # ttl 3 + (10 digits -> 6) = 9                         total 134
    assert item_size(item) == 134
    assert write_units_for(item_size(item)) == 1
    # Without dimensions and TTL, neither attribute is stored or counted.
    plain = Reading(reading.entity_id, reading.event_id, reading.ts_ms, reading.measures)
    bare = build_item(plain, key)
    assert set(bare) == {"pk", "sk", "e", "t", "i", "m"}
    assert item_size(bare) == 134 - 11 - 9
    # Attribute names are counted in UTF-8 too.
    assert item_size({"ü": "x", "pk": ""}) == 2 + 1 + 2


@pytest.mark.parametrize("kind", LAYOUTS)
def test_the_largest_valid_reading_is_far_under_dynamodbs_item_limit(kind: str) -> None:
    """Ingest does not size items (it was a tenth of its per-reading CPU): the reading limits keep
    every item under a fifth of DynamoDB's 400 KB. Raising a limit far enough fails this test."""
    name = "n" * 63
    reading = Reading.parse(
        {
            "entity_id": "e" * ENTITY_ID_MAX,
            "event_id": "v" * EVENT_ID_MAX,
            "timestamp": "2026-11-22T06:57:51.123Z",
            "measures": {f"{name}{i:02d}"[-64:]: -1.2345678901234567e-100 for i in range(MAX_MEASURES)},
            "dimensions": {f"{name}{i:02d}"[-64:]: "\U0001d11e" * DIMENSION_VALUE_MAX for i in range(MAX_DIMENSIONS)},
        }
    )
    assert len(reading.measures) == MAX_MEASURES and len(reading.dimensions) == MAX_DIMENSIONS
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings", table_period="day")
    key = layout.key_for(reading, ShardMap.initial(layout.bucket, 9_999), random.Random(1))
    size = item_size(build_item(reading, key, ttl_epoch_s=9_999_999_999))
    assert 50_000 < size < MAX_ITEM_BYTES // 5


def test_ttl_is_event_time_plus_retention_in_epoch_seconds() -> None:
    reading = Reading.parse({"entity_id": "s", "timestamp": "2026-11-22T06:57:51.999Z", "measures": {"v": 1}})
    assert ttl_for(reading, 30 * 86_400_000) == 1_795_330_671 + 30 * 86_400


@pytest.mark.parametrize(
    ("size", "units"), [(0, 1), (1, 1), (1_024, 1), (1_025, 2), (2_048, 2), (2_049, 3), (400 * 1024, 400)]
)
def test_write_units_are_whole_kilobytes_rounded_up(size: int, units: int) -> None:
    assert write_units_for(size) == units


@pytest.mark.parametrize(
    ("size", "eventual", "strong"),
    [(0, 0.5, 1.0), (1, 0.5, 1.0), (4_096, 0.5, 1.0), (4_097, 1.0, 2.0), (1_000_000, 122.5, 245.0)],
)
def test_read_units_are_4kb_rounded_up_and_eventual_reads_cost_half(size: int, eventual: float, strong: float) -> None:
    assert read_units_for(size) == eventual
    assert read_units_for(size, consistent=True) == strong
