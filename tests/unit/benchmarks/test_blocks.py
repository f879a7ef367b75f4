"""The blocks cost benchmark's core on tiny workloads: its arithmetic against Layout.pack and item_size."""

from __future__ import annotations

import random

import pytest

from benchmarks import blocks
from benchmarks.blocks import HOT_SENSOR, SEED_000, Deployment, Fleet, account, arrivals, form_batches, old_item
from keydesign import Reading, item_size, write_units

DEPLOYMENT = Deployment.defaults()
TINY = Fleet("tiny", 40, 200.0, blocks._weather, hot=((HOT_SENSOR, 300.0),))


def test_the_old_item_is_the_one_ingest_wrote_before_blocks() -> None:
    reading = Reading.parse(
        {"entity_id": "sensor-00042", "timestamp": "2026-11-22T06:10:00.250Z", "measures": {"temperature": 21.5}}
    )
    item = old_item(reading, DEPLOYMENT)
    assert list(item) == ["pk", "sk", "e", "t", "i", "m", "ttl"]
    assert item["sk"] == f"sensor-00042#2026-11-22T06:10:00.250Z#{reading.event_id}"
    assert item["ttl"] == (reading.ts_ms + 30 * 86_400_000) // 1000
    # DynamoDB's rules by hand: each name, then its value (a map: 3 + name, value and 1 per entry; a number:
    # 1 + half its significant digits: 21.5 -> 3, ttl 1797919800 -> 1.7979198e9 -> 5)
    by_hand = {"pk": 2 + 21, "sk": 2 + 56, "e": 1 + 12, "t": 1 + 24, "i": 1 + 18, "m": 1 + 3 + 11 + 3 + 1, "ttl": 3 + 5}
    assert item["ttl"] == 1_797_919_800 and item_size(item) == sum(by_hand.values()) == 165


def test_the_tallies_are_layout_pack_and_item_size_of_the_same_batches() -> None:
    # Given a tiny fleet's batches at a 2-second window
    readings = arrivals(TINY, [HOT_SENSOR, *map(TINY.sensor, range(40))], 9_000, DEPLOYMENT, seed=5)
    batches = form_batches(TINY, readings, DEPLOYMENT, window_s=2, duration_ms=9_000)
    outcome = account(TINY, batches, DEPLOYMENT)

    # Then blocks cost what Layout.pack says of each batch, and items what item_size says of each reading
    units = size = count = items = item_bytes = 0
    for batch in batches:
        entries = list(zip((a.reading for a in batch.arrivals), batch.sequences, strict=True))
        for block in DEPLOYMENT.layout.pack(entries, DEPLOYMENT.shard_map, retention_ms=DEPLOYMENT.retention_ms):
            units, size, count = units + block.write_units, size + block.size + 100, count + 1
        for arrival in batch.arrivals:
            items += write_units(item_size(old_item(arrival.reading, DEPLOYMENT)))
            item_bytes += item_size(old_item(arrival.reading, DEPLOYMENT)) + 100
    tallies = outcome.tallies.values()
    assert sum(t.block_units for t in tallies) == units and sum(t.block_bytes for t in tallies) == size
    assert sum(t.blocks for t in tallies) == count
    assert sum(t.item_units for t in tallies) == items == sum(t.readings for t in tallies)
    assert sum(t.item_bytes for t in tallies) == item_bytes
    # every reading of a batch arrived while it was open, and every counted batch is whole
    for batch in batches:
        assert all(batch.opens_ms <= a.at_ms < batch.closes_ms for a in batch.arrivals)
        assert batch.opens_ms >= blocks.JITTER_MS and batch.closes_ms <= 9_000
        assert batch.closes_ms - batch.opens_ms == pytest.approx(2_000)
    # the 5/s sensors' blocks hold about a window's worth of readings each (two seconds: 10, give or take jitter)
    fleet = outcome.tallies["fleet"].per_reading()
    assert 8 <= fleet["readings_per_block"] <= 12


def test_a_window_shorter_than_a_poll_gathers_a_second() -> None:
    assert blocks.batch_ms(TINY, DEPLOYMENT, 0, 0, 180.0) == blocks.POLL_MS
    # a shard carrying 2,000 readings/s of 180 bytes fills Lambda's 6 MB payload in 13 s, before a 20 s window
    hot_shard = DEPLOYMENT.kinesis_shard(HOT_SENSOR)
    hot_only = Fleet("hot", 1, 1e12, blocks._weather, hot=((HOT_SENSOR, 2_000.0),))
    assert blocks.batch_ms(hot_only, DEPLOYMENT, hot_shard, 20, 180.0) == pytest.approx(
        blocks.PAYLOAD_BYTES / (2_000 * 180) * 1_000, rel=1e-3
    )


def test_figures_per_reading_do_not_depend_on_how_many_sensors_are_simulated() -> None:
    def fleet_figures(sensors: int) -> dict[str, float]:
        chosen = random.Random(sensors).sample(range(SEED_000.sensors), sensors)
        readings = arrivals(SEED_000, map(SEED_000.sensor, chosen), 14_000, DEPLOYMENT, seed=sensors)
        batches = form_batches(SEED_000, readings, DEPLOYMENT, window_s=5, duration_ms=14_000)
        return account(SEED_000, batches, DEPLOYMENT).tallies["fleet"].per_reading()

    small, large = fleet_figures(40), fleet_figures(160)
    for name in ("block_wu_per_reading", "block_bytes_per_reading", "item_bytes_per_reading"):
        assert small[name] == pytest.approx(large[name], rel=0.03), name
