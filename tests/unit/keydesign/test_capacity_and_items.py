"""Capacity arithmetic with blocks, and item sizes, checked against Layout.pack and figures worked out by hand."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pytest

from keydesign import (
    Ingest,
    InvalidInput,
    Layout,
    Prices,
    Reading,
    ShardMap,
    Workload,
    plan_capacity,
    shards_for,
)
from keydesign import read_units as read_units_for
from keydesign import write_units as write_units_for
from keydesign.blocks import MAX_BLOCK_ITEM_BYTES
from keydesign.capacity import (
    HOURS_PER_MONTH,
    SAMPLE_READING,
    SECONDS_PER_MONTH,
    BlockSizer,
    choose_period,
    fill_hours,
    stream_figures,
)
from keydesign.items import MAX_ITEM_BYTES, number_size, ttl_for, value_size
from keydesign.layouts import LAYOUTS
from keydesign.model import DIMENSION_VALUE_MAX, ENTITY_ID_MAX, EVENT_ID_MAX, MAX_DIMENSIONS, MAX_MEASURES
from keydesign.timefmt import parse_timestamp

HOUR = parse_timestamp("2026-11-22T06:00:00Z")
RETENTION_MS = 30 * 86_400_000


#: A 5 s batching window (the stack's was 5 s when these were worked out by hand; it is 10 s now).
FIVE_S = Ingest(batching_window_s=5)


def sensor_batch(rates: dict[str, float], seconds: float, *, dimensions: dict[str, str] | None = None) -> list[Reading]:
    """What one ingest batch of ``seconds`` holds: each entity's readings evenly spaced, three noisy
    measures as a sensor sends them (not the planner's representative readings), no event ids."""
    rng = random.Random(5)
    out = []
    for entity, rate in rates.items():
        count = round(rate * seconds)
        for i in range(count):
            raw = {
                "entity_id": entity,
                "timestamp": HOUR + i * round(seconds * 1000) // count,
                "measures": {
                    "temp": round(21.5 + rng.gauss(0, 0.3), 2),
                    "rh": round(45 + rng.gauss(0, 0.5), 1),
                    "pressure": round(1013.25 + rng.gauss(0, 8), 2),
                },
            }
            if dimensions:
                raw["dimensions"] = dimensions
            out.append(Reading.parse(raw))
    return out


def packed(readings: list[Reading]) -> tuple[float, float]:
    """(write units, stored bytes) per reading when Layout.pack stores ``readings`` as ingest does."""
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    blocks = layout.pack([(r, 10**55) for r in readings], ShardMap.initial(layout.bucket, 4), retention_ms=RETENTION_MS)
    assert sum(len(b.readings) for b in blocks) == len(readings)
    units = sum(b.write_units for b in blocks)
    stored = sum(b.size + 100 for b in blocks)
    return units / len(readings), stored / len(readings)


def fleet(entities: int, rate: float, hot: dict[str, float]) -> dict[str, float]:
    return {**{f"sensor-{i:05d}": rate for i in range(1, entities - len(hot) + 1)}, **hot}


# -- blocks: the planner against Layout.pack -------------------------------------------------------


@pytest.mark.parametrize(
    ("window_s", "rate", "hot"),
    [
        (1, 5.0, {"sensor-alpha-001": 400.0}),  # a few readings a block; the hot sensor's 400
        (5, 5.0, {"sensor-alpha-001": 400.0}),  # 25 a block; 2,000 of the hot sensor make two blocks of 1,000
        (30, 2.0, {}),  # a 30 s batch is three 10 s spans: three blocks of 20
        (1, 1 / 60, {}),  # a sparse fleet: one reading a block
    ],
)
def test_the_planners_write_units_and_bytes_per_reading_are_what_layout_pack_gives(
    window_s: int, rate: float, hot: dict[str, float]
) -> None:
    # Given a fleet of 200 entities and one ingest batch of it, generated as sensors send it
    rates = fleet(200, rate, hot)
    readings = sensor_batch(rates, window_s if rate * window_s >= 1 else 1 / rate)
    # When the planner sizes the same workload
    plan = plan_capacity(
        Workload(
            peak_writes_per_s=sum(rates.values()),
            entities=200,
            hot_entities=hot,
            ingest=Ingest(batching_window_s=window_s),
        )
    )
    # Then its write units and stored bytes per reading are Layout.pack's on that batch
    units, stored = packed(readings)
    assert plan.write_units_per_reading == pytest.approx(units, rel=0.02)
    assert plan.bytes_stored_per_reading == pytest.approx(stored, rel=0.03)


def test_a_hot_entity_s_blocks_hold_1000_readings_and_cost_what_pack_says() -> None:
    # 2,000 readings/s in batches of a 5 s window (the stack's is 10 s): ten blocks of 1,000 a batch
    plan = plan_capacity(
        Workload(peak_writes_per_s=2_000, entities=1, hot_entities={"sensor-alpha-001": 2_000}, ingest=FIVE_S)
    )
    hot = plan.blocks_of("sensor-alpha-001")
    units, _ = packed(sensor_batch({"sensor-alpha-001": 2_000}, 5))
    assert hot.readings_per_block == 1_000 and hot.readings_per_batch == 10_000
    assert hot.wcu == pytest.approx(units * 2_000, rel=0.1)
    assert hot.wcu < 20  # it was 2,000 WCU/s one item per reading
    # ... all ten put when the batch lands: 10 blocks of 6 write units in one second
    assert hot.burst_wcu == 10 * hot.write_units_per_block == 60


def test_a_sparse_fleet_stores_every_reading_alone_and_says_so() -> None:
    # 10,000 sensors reporting once a minute: a batch holds a sixtieth of a reading of each
    plan = plan_capacity(Workload(peak_writes_per_s=10_000 / 60, entities=10_000))
    typical = plan.blocks_of("typical")
    assert typical.readings_per_block == 1 and typical.write_units_per_reading == 1
    assert plan.write_units_per_reading == 1
    assert any("blocks of one reading" in note for note in plan.notes)
    # ... while the same sensors every second share nothing either, but every five seconds do
    denser = plan_capacity(Workload(peak_writes_per_s=10_000, entities=10_000, ingest=Ingest(batching_window_s=5)))
    assert denser.blocks_of("typical").readings_per_block == 5
    assert denser.write_units_per_reading == pytest.approx(1 / 5)


def test_blocks_over_64_kb_are_halved_as_pack_halves_them() -> None:
    # Readings that send 128-character event ids (random, as a UUID is): 64 bytes of entropy each
    sample = Reading.parse(
        {"entity_id": "sensor-alpha-001", "timestamp": HOUR, "event_id": "f" * 128,
         "measures": {"temp": 21.53, "rh": 45.2, "pressure": 1013.25}}
    )  # fmt: skip
    sizer = BlockSizer(sample, retention_ms=RETENTION_MS)
    # A run of 1,000 compresses past 64 KB: it becomes blocks of 500, each under it
    sizes = sizer.run(1_000, rate=1_000)
    assert len(sizes) == 2 and all(s <= MAX_BLOCK_ITEM_BYTES for s in sizes)
    assert sum(sizes) > MAX_BLOCK_ITEM_BYTES
    # ... as Layout.pack makes them from readings a producer sends
    readings = sensor_batch({"sensor-alpha-001": 1_000}, 1)
    ids = random.Random(2)
    sent = [
        Reading(r.entity_id, "".join(ids.choice("0123456789abcdef") for _ in range(128)), r.ts_ms, r.measures, {})
        for r in readings
    ]
    units, _ = packed(sent)
    assert units * 1_000 == pytest.approx(sum(write_units_for(s) for s in sizes), rel=0.05)


def test_a_given_compressed_size_replaces_the_measured_one() -> None:
    # 10 bytes a reading: a block of m readings is its keys and header plus 10 m bytes
    sizer = BlockSizer(SAMPLE_READING, reading_bytes=10, retention_ms=RETENTION_MS)
    (one,) = sizer.run(1)
    (hundred,) = sizer.run(100)
    assert hundred - one == 990
    # 64 KB holds about 6,500 such readings: 1,000 fit one block; at 100 bytes each they do not
    assert len(sizer.run(1_000)) == 1
    assert len(BlockSizer(SAMPLE_READING, reading_bytes=100).run(1_000)) == 2


# -- the batch and the stream ----------------------------------------------------------------------


def test_a_batch_lasts_the_window_at_least_a_poll_and_stops_at_6_mb() -> None:
    # Lambda polls a shard once a second: a window of 0 still makes 1 s batches
    assert (
        stream_figures(
            Workload(peak_writes_per_s=1_000, entities=10, ingest=Ingest(batching_window_s=0)), 1_000
        ).batch_s
        == 1
    )
    # 50,000 readings/s of 122 bytes packed 532 to a 64 KB record, on 50 shards: 94 records/s, 123 kB/s a shard
    seed = Workload(peak_writes_per_s=50_000, entities=10_000, ingest=Ingest(batching_window_s=10))
    stream = stream_figures(seed, 50_000)
    assert (stream.reading_json_bytes, stream.readings_per_record, stream.record_bytes) == (122, 532, 65_437)
    assert stream.batch_s == 10 and stream.invocations_per_s == 5 and stream.readings_per_invocation == 10_000
    # On 6 shards each batch reaches Lambda's 6 MB (base64: 4.5 MiB of records) in 4.6 s
    crowded = stream_figures(
        Workload(peak_writes_per_s=50_000, entities=10_000, ingest=Ingest(batching_window_s=10, shards=6)), 50_000
    )
    assert crowded.batch_s == pytest.approx(6 * 1024**2 * 3 / 4 / (50_000 / 532 / 6 * 65_437))
    assert crowded.shards_needed == 6
    # ... and a batch of one reading per record stops at 1,000 records
    single = Ingest(batching_window_s=10, record_bytes=100, shards=50)
    assert stream_figures(Workload(peak_writes_per_s=50_000, entities=10_000, ingest=single), 50_000).batch_s == 1


def test_a_longer_window_makes_larger_blocks_and_fewer_invocations() -> None:
    plans = {
        w: plan_capacity(
            Workload(peak_writes_per_s=50_000, entities=10_000, hot_entities={"sensor-alpha-001": 2_000},
                     ingest=Ingest(batching_window_s=w))
        )
        for w in (1, 5, 10)
    }  # fmt: skip
    per_block = [plans[w].blocks_of("typical").readings_per_block for w in (1, 5, 10)]
    assert per_block == pytest.approx([48_000 / 9_999 * w for w in (1, 5, 10)])
    assert plans[1].write_units_per_reading > plans[5].write_units_per_reading > plans[10].write_units_per_reading
    assert [plans[w].stream.invocations_per_s for w in (1, 5, 10)] == [50, 10, 5]
    # The hot sensor's batch of 20,000 readings (10 s) is 20 blocks written in one second
    hot = plans[10].blocks_of("sensor-alpha-001")
    assert hot.burst_wcu == pytest.approx(20 * hot.write_units_per_block)


# -- shards ----------------------------------------------------------------------------------------


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


def test_one_reading_a_block_of_500_bytes_needs_100_shards_at_half_utilisation() -> None:
    # 500 B -> 1 WCU per block; 50,000 WCU/s / (1,000 WCU x 0.5) = 100 keys.
    plan = plan_capacity(Workload(peak_writes_per_s=50_000, item_bytes=500))
    assert plan.write_units_per_reading == 1
    assert plan.peak_wcu == 50_000
    assert plan.key_budget_wcu == 500
    assert plan.global_shards == 100
    assert plan.load_per_shard_wcu == 500
    # The same rate of 1,500-byte blocks is 2 WCU each: twice the keys.
    assert plan_capacity(Workload(peak_writes_per_s=50_000, item_bytes=1_500)).global_shards == 200


def test_the_seed_scenario_in_blocks_needs_a_25th_of_the_keys() -> None:
    # 9,999 sensors at 4.8/s in batches of a 5 s window: a block of 24 readings every 5 s each,
    # one write unit, so 0.2 WCU/s a sensor
    plan = plan_capacity(
        Workload(peak_writes_per_s=50_000, entities=10_000, hot_entities={"sensor-alpha-001": 2_000}, ingest=FIVE_S)
    )
    typical = plan.blocks_of("typical")
    assert typical.readings_per_block == pytest.approx(24.0, abs=0.01) and typical.write_units_per_block == 1
    assert plan.peak_wcu == pytest.approx(9_999 / 5 + plan.blocks_of("sensor-alpha-001").wcu, abs=0.5)
    # 2,000 WCU/s at 500 a key: 4 keys, where one reading an item needed 100
    assert plan.global_shards == 4
    # sensor-alpha-001 writes ten blocks of 1,000 a batch, 12 WCU/s; its base key already carries
    # 2,000 / 4 = 500 from the fleet, so the planner gives it 2 sub-shards of its own
    assert plan.entity_shards == {"sensor-alpha-001": 2}
    assert plan.hottest_key == "a base shard" and plan.load_per_shard_wcu == 500
    # The seed article's N=16 takes 50,000 / 16 = 3,125 WCU/s a key one reading an item; in blocks, 126
    assert plan.peak_wcu / 16 == pytest.approx(125.7, abs=0.1)


def test_a_2000_writes_per_second_sensor_of_single_reading_blocks_needs_4_sub_shards() -> None:
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


# -- cost ------------------------------------------------------------------------------------------


def test_monthly_cost_of_a_simple_workload_matches_the_hand_calculation() -> None:
    # 100 writes/s in blocks of one 500 B reading (1 WCU each), 10 reads/s of 20 readings, kept 30 days.
    # A month is 730 h = 2,628,000 s.
    #   on-demand writes: 100 x 2,628,000 = 262.8 M WRU x $0.625/M          = $164.25
    #   reads: 21 blocks (20 and the one the range cuts) x 500 B = 10,500 B -> 3 RCU,
    #     eventually consistent 1.5 RRU; 10 x 1.5 x 2,628,000 = 39.42 M x $0.125/M = $4.9275
    #   storage: 100 x (500 + 100 overhead) B x 30 x 86,400 s = 155.52e9 B
    #     = 144.84 GiB x $0.25                                               = $36.21
    #   provisioned: 100 WCU x 730 h x $0.00065 = $47.45; 15 RCU x 730 x $0.00013 = $1.4235
    workload = Workload(
        peak_writes_per_s=100, item_bytes=500, reads_per_s=10, readings_per_read=20, retention_days=30, ingest=FIVE_S
    )
    plan = plan_capacity(workload)
    assert plan.monthly_storage_gb == 144.8
    on, prov = plan.monthly_ondemand.to_dict(), plan.monthly_provisioned.to_dict()
    assert (on["writes"], on["reads"], on["storage"]) == (164.25, 4.93, 36.21)
    assert (prov["writes"], prov["reads"]) == (47.45, 1.42)
    # Kinesis on demand: 100 readings/s of 122 B, 532 to a 65,437 B record = 0.188 records/s of 64 KB billed
    #   0.188 x 64 KB x 2,628,000 s = 29.7 GiB in, the same read: x ($0.08 + $0.04); and 730 stream-hours x $0.04
    records = 100 / 532
    gb = records * 64 * 1024 * SECONDS_PER_MONTH / 1024**3
    assert on["stream"] == pytest.approx(gb * 0.12 + HOURS_PER_MONTH * 0.04, abs=0.01)
    # Lambda: 50 shards, a batch each per 5 s window = 10 requests/s x $0.20/M; 100 x 0.14 ms x 1 GB x $0.0000133334
    requests = 50 / 5 * SECONDS_PER_MONTH / 1e6 * 0.20
    compute = 100 * 0.14 / 1000 * 1 * SECONDS_PER_MONTH * 0.0000133334
    assert on["ingest_lambda"] == pytest.approx(requests + compute, abs=0.01)
    assert on["total"] == pytest.approx(sum(v for k, v in on.items() if k != "total"), abs=0.04)
    assert prov["stream"] == on["stream"] and prov["ingest_lambda"] == on["ingest_lambda"]
    # 100 x 500 B/s on one partition: 10,200,547,328 / 50,000 / 3,600 = 56.67 h -> daily tables.
    assert plan.fill_hours == 56.67
    assert plan.table_period == "day"
    # The seed's pre-November-2024 on-demand write price doubles the write line: +$164.25.
    old = plan_capacity(workload, Prices(ondemand_write_per_million=1.25))
    assert old.monthly_ondemand.total == pytest.approx(on["total"] + 164.25, abs=0.01)


def test_a_provisioned_stream_costs_shard_hours_and_put_payload_units() -> None:
    # 10 shards x 730 h x $0.015 = $109.50; a 64 KB record is 3 PUT payload units of 25 KB
    ingest = Ingest(kinesis_mode="provisioned", shards=10)
    plan = plan_capacity(Workload(peak_writes_per_s=100, item_bytes=500, ingest=ingest))
    units = 100 / 532 * 3 * SECONDS_PER_MONTH / 1e6 * 0.014
    assert plan.monthly_ondemand.stream == pytest.approx(10 * 730 * 0.015 + units)


def test_average_rate_drives_cost_and_peak_drives_shards() -> None:
    # Peak 1,000/s needs 2 keys; an average of 100/s costs as the workload above without reads.
    plan = plan_capacity(Workload(peak_writes_per_s=1_000, avg_writes_per_s=100, item_bytes=500))
    assert plan.global_shards == 2
    assert plan.monthly_ondemand.writes + plan.monthly_ondemand.storage == pytest.approx(164.25 + 36.21, abs=0.01)
    # provisioned for the peak: 1,000 WCU x 730 h x $0.00065 = $474.50
    assert plan.monthly_provisioned.writes == pytest.approx(474.50, abs=0.01)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"peak_writes_per_s": 0}, "peak_writes_per_s"),
        ({"peak_writes_per_s": -5}, "peak_writes_per_s"),
        ({"peak_writes_per_s": math.nan}, "peak_writes_per_s"),
        ({"peak_writes_per_s": math.inf}, "peak_writes_per_s"),
        ({"item_bytes": None, "entities": None}, "entities"),
        ({"item_bytes": 0}, "item_bytes"),
        ({"item_bytes": 400 * 1024 + 1}, "item_bytes"),
        ({"reading_bytes": 0}, "reading_bytes"),
        ({"reading_bytes": math.nan}, "reading_bytes"),
        ({"entities": 0}, "entities"),
        ({"entities": 1, "hot_entities": {"a": 10, "b": 10}}, "entities"),
        ({"utilisation": 0}, "utilisation"),
        ({"utilisation": 1.01}, "utilisation"),
        ({"utilisation": math.nan}, "utilisation"),
        ({"partition_headroom": -0.01}, "partition_headroom"),
        ({"partition_headroom": 1}, "partition_headroom"),
        ({"reads_per_s": -1}, "reads_per_s"),
        ({"reads_per_s": math.inf}, "reads_per_s"),
        ({"readings_per_read": 0}, "readings_per_read"),
        ({"readings_per_read": math.inf}, "readings_per_read"),
        ({"retention_days": 0}, "retention_days"),
        ({"retention_days": math.inf}, "retention_days"),
        ({"avg_writes_per_s": 0}, "avg_writes_per_s"),
        ({"avg_writes_per_s": 1_001}, "avg_writes_per_s"),
        ({"hot_entities": {"sensor-hot": 0}}, "hot_entities.sensor-hot"),
        ({"hot_entities": {"sensor-hot": 1_001}}, "hot_entities.sensor-hot"),
        ({"ingest": Ingest(batching_window_s=301)}, "ingest.batching_window_s"),
        ({"ingest": Ingest(shards=0)}, "ingest.shards"),
        ({"ingest": Ingest(batch_size=10_001)}, "ingest.batch_size"),
        ({"ingest": Ingest(ms_per_reading=-1)}, "ingest.ms_per_reading"),
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


@pytest.mark.parametrize("kind", LAYOUTS)
def test_the_largest_valid_reading_alone_in_a_block_is_far_under_dynamodbs_item_limit(kind: str) -> None:
    """A block of one reading cannot be halved: the reading limits keep it under a fifth of DynamoDB's
    400 KB, even when nothing in it compresses. Raising a limit far enough fails this test."""
    rng = random.Random(1)
    name = "n" * 63

    def noise(length: int) -> str:
        return "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(length))  # 3 UTF-8 bytes each

    reading = Reading.parse(
        {
            "entity_id": "e" * ENTITY_ID_MAX,
            "event_id": "v" * EVENT_ID_MAX,
            "timestamp": "2026-11-22T06:57:51.123Z",
            "measures": {f"{name}{i:02d}"[-64:]: -rng.random() * 1e-100 for i in range(MAX_MEASURES)},
            "dimensions": {f"{name}{i:02d}"[-64:]: noise(DIMENSION_VALUE_MAX) for i in range(MAX_DIMENSIONS)},
        }
    )
    assert len(reading.measures) == MAX_MEASURES and len(reading.dimensions) == MAX_DIMENSIONS
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings", table_period="day")
    (block,) = layout.pack([(reading, 10**127)], ShardMap.initial(layout.bucket, 9_999), retention_ms=RETENTION_MS)
    assert 30_000 < block.size < MAX_ITEM_BYTES // 5


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
