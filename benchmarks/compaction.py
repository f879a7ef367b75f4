"""The compaction pass at seed 003's scale: how long compacting an hour of its readings takes.

Seed 003 is 1,000,000 devices, one measure, a reading every 259 s (13.9 readings a device an hour),
with G = 1,024 groups (docs/decisions.md, "The write tier": 977 devices a group). The real
compaction function (:class:`compaction.logic.CompactionRunner`, 16 groups a step, 16 writes in
flight) compacts one step's worth of that hour, 16 groups of 977 devices, from group items written
as ingest writes them (one item per group per 10 s batching window, block format 4), in
:class:`doubles.memory_dynamo.MemoryDynamo` (DynamoDB's item-size and unit rules), every call
answering after 10 ms (the rollups' keep-up benchmark's latency), with its part of the rollups
(``ROLLUPS`` 1m,1h,1d): a partial per group in the step's write, and, as the step ends the hour
here, the hour's parts of the totals (two Query calls, 62 puts; counted in each of the 64 steps
when scaled, an overestimate). The hour is 64 such steps:
its time is the step's times 64, and *per minute of readings* is that over 60 (it keeps up when
under 60 s). CPU time is the process's (this machine's core, not a Lambda's share of one). The
hottest key is the compacted partition (``<shard>#<hour>#c``, 100 shards) that took the most write
units in the step, over the step's time.

The re-pack (docs/writetier.md, "Re-packing settled slices") is measured the same way, by the same
function on the same step of group items: with the clock 35 minutes into the hour and the re-pack at its
start, a run re-packs the hour's 7 settled 5-minute slices into sub-items (16 sub-groups a group) and
compacts nothing; its write units per reading re-packed are the sub-items' cost.

Run: ``python -m benchmarks compaction`` (harness) or ``PYTHONPATH=functions:. python -m benchmarks.compaction``.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

from adapters.batch_writer import BatchWriter, serialize_item
from adapters.partition_reader import DynamoPartitionReader
from adapters.retry import Deadline
from adapters.rollup_store import RollupStore
from adapters.shard_map_source import StaticShardMap
from benchmarks.harness import Result, benchmark
from benchmarks.query_fanout import Slow
from compaction.logic import CompactionRunner, StateStore
from doubles.memory_dynamo import SEQUENCE_BASE, MemoryDynamo
from keydesign import Layout, Reading, ShardMap, parse_timestamp
from keydesign.blocks import encode_group, keyed_item
from keydesign.rollup import Granularities
from keydesign.writetier import REPACK_MS, SLICE_MS, CompactionState, WriteTier, group_sk_stem, tier_settle

H = parse_timestamp("2026-11-22T06:00:00Z")
DAY = 86_400_000
#: Seed 003: devices, their interval, and the groups the design table chose for them.
DEVICES, INTERVAL_MS, GROUPS = 1_000_000, 259_000, 1_024
WINDOW_MS = 10_000
STEP_GROUPS = 16
LAYOUT = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="hour")
SHARD_MAPS = StaticShardMap(ShardMap.initial(LAYOUT.bucket, 100))
ROLLUPS = Granularities.parse("1m,1h,1d")
SETTLE_MS = 180_000
#: The part of the hour the re-pack measurement re-packs: its first 7 slices.
REPACKED_MS = 35 * 60_000


def _hour(db: MemoryDynamo, tier: WriteTier, devices_per_group: int, rng: random.Random) -> list[int]:
    """Store every group's hour H as ingest would: per group, one item per 10 s window. Returns the readings'
    times."""
    table = LAYOUT.table_for(H)
    stamps: list[int] = []
    for group in range(tier.groups):
        windows: dict[int, list[Reading]] = {}
        for device in range(devices_per_group):
            entity = f"device-{group:04d}{device:04d}"
            ts = H + rng.randrange(INTERVAL_MS)
            while ts < H + SLICE_MS:
                value = round(rng.uniform(0, 40), 2)
                reading = Reading.parse({"entity_id": entity, "timestamp": ts, "measures": {"value": value}})
                windows.setdefault(ts // WINDOW_MS, []).append(reading)
                ts += INTERVAL_MS
        for window, readings in windows.items():
            readings.sort(key=lambda r: (r.ts_ms, r.entity_id, r.event_id))
            encoded = encode_group(readings, SEQUENCE_BASE + window)
            item, _, _ = keyed_item(tier.group_pk(group, H), group_sk_stem(encoded), encoded.payload, None)
            db.put_item(TableName=table, Item=serialize_item(item))
            stamps += (r.ts_ms for r in readings)
    return stamps


def _runner(db: MemoryDynamo, tier: WriteTier, slow: Slow, now_ms: int) -> CompactionRunner:
    writer = BatchWriter(slow, concurrency=STEP_GROUPS)
    return CompactionRunner(
        layout=LAYOUT, tier=tier, shard_maps=SHARD_MAPS, reader=DynamoPartitionReader(slow),
        writer=writer, state=StateStore(db, "control", LAYOUT.table_prefix),
        rollups=RollupStore(slow, writer, "control", LAYOUT.table_prefix, 90 * DAY), levels=ROLLUPS,
        retention_ms=90 * DAY, settle_ms=SETTLE_MS, max_future_ms=300_000, concurrency=STEP_GROUPS,
        clock_ms=lambda: now_ms,
    )  # fmt: skip


def repack(groups: int, devices_per_group: int, latency_ms: float = 10.0) -> dict[str, Any]:
    """Re-pack the settled slices of 35 minutes of an hour of seed 003's ``groups`` groups (one step a slice),
    every DynamoDB call taking ``latency_ms``: the sub-items' write units per reading re-packed."""
    db = MemoryDynamo(page_items=1_000)
    tier = WriteTier(groups)
    stamps = _hour(db, tier, devices_per_group, random.Random(3))
    through = H + REPACKED_MS
    held = sum(ts < through for ts in stamps)
    StateStore(db, "control", LAYOUT.table_prefix).save(CompactionState(H, groups, repack_from=H, repacked=H))
    slow = Slow(db, latency_ms)
    runner = _runner(db, tier, slow, through + tier_settle(SETTLE_MS))
    started, cpu = time.perf_counter(), time.process_time()
    report = runner.run(Deadline.never())
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    runner.close()
    assert report.slices_repacked == REPACKED_MS // REPACK_MS and report.hours == 0, report.summary()
    return {
        "slices": report.slices_repacked,
        "readings_repacked": held,
        "sub_items": report.sub_items,
        "sub_item_write_units_per_reading": report.write_units / held,
        "seconds_per_slice": seconds / report.slices_repacked,
        "cpu_seconds_per_slice": cpu_seconds / report.slices_repacked,
    }


def one_step(groups: int, devices_per_group: int, latency_ms: float = 10.0) -> dict[str, Any]:
    """Compact ``groups`` groups (one step) of an hour of seed 003, every DynamoDB call taking ``latency_ms``."""
    db = MemoryDynamo(page_items=1_000)
    tier = WriteTier(groups)
    readings = len(_hour(db, tier, devices_per_group, random.Random(3)))
    StateStore(db, "control", LAYOUT.table_prefix).save(CompactionState(H))
    slow = Slow(db, latency_ms)
    runner = _runner(db, tier, slow, H + SLICE_MS + 240_000)
    started, cpu = time.perf_counter(), time.process_time()
    report = runner.run(Deadline.never())
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    runner.close()
    assert report.hours == 1 and report.steps == 1 and report.readings_compacted == readings, report.summary()
    assert report.partials == groups and report.remarks == 0, report.summary()
    hour_s = seconds * GROUPS / groups
    # Compacted blocks go to <shard>#<bucket>#c: the write units of the hottest shard's, in the step
    hottest = max(units for prefix, units in db.write_units.items() if prefix.isdigit())
    return {
        "groups": groups,
        "devices_per_group": devices_per_group,
        "latency_ms": latency_ms,
        "readings": readings,
        "group_items": report.group_items,
        "calls": slow.calls,
        "compacted_blocks": report.compacted_blocks,
        "partials": report.partials,
        "fleet_parts": report.fleet_parts,
        "compacted_write_units_per_reading": report.write_units / readings,
        "step_seconds": seconds,
        "step_cpu_seconds": cpu_seconds,
        "hottest_compacted_partition_wcu_per_s": hottest / seconds,
        "seed_003_hour_seconds": hour_s,
        "seed_003_seconds_per_minute_of_readings": hour_s / 60,
    }


def run(quick: bool = False) -> dict[str, Any]:
    groups, devices = (4, 100) if quick else (STEP_GROUPS, DEVICES // GROUPS)
    return {**one_step(groups, devices), "repack": repack(groups, devices)}


def to_result(figures: dict[str, Any]) -> Result:
    result = Result(
        params={k: figures[k] for k in ("groups", "devices_per_group", "latency_ms")},
        method=(
            "the real compaction function over group items written as ingest writes them (one per group per 10 s), "
            "in memory with DynamoDB's item-size and unit rules, every call 10 ms, 16 groups a step and 16 writes "
            "in flight; seed 003's hour is 64 such steps (G = 1,024)"
        ),
    )
    note = f"{figures['groups']} groups x {figures['devices_per_group']} devices, {figures['latency_ms']:g} ms a call"
    result.add("one step compacted", round(figures["step_seconds"], 2), "s", note)
    result.add("one step's CPU", round(figures["step_cpu_seconds"], 2), "s")
    result.add("readings in the step", figures["readings"], "readings")
    result.add("DynamoDB calls in the step", figures["calls"], "calls")
    result.add("compacted write units", round(figures["compacted_write_units_per_reading"], 4), "WU / reading")
    result.add(
        "hottest compacted partition", round(figures["hottest_compacted_partition_wcu_per_s"], 1), "WCU/s", "of 1,000"
    )
    result.add("seed 003: an hour compacted", round(figures["seed_003_hour_seconds"], 1), "s", "64 steps")
    result.add(
        "seed 003: per minute of readings",
        round(figures["seed_003_seconds_per_minute_of_readings"], 2),
        "s",
        "keeps up under 60",
    )
    sub = figures["repack"]
    result.add(
        "re-pack: sub-item write units",
        round(sub["sub_item_write_units_per_reading"], 4),
        "WU / reading",
        f"{sub['sub_items']} sub-items for {sub['readings_repacked']:,} readings in {sub['slices']} slices",
    )
    result.add("re-pack: a slice of the step", round(sub["seconds_per_slice"], 2), "s")
    return result


@benchmark("compaction", "the compaction pass: one step of seed 003's hour (16 groups) at 10 ms a call")
def compaction(quick: bool) -> Result:
    return to_result(run(quick=quick))


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
