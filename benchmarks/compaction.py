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
hottest key is the cluster partition (``c#<group>#<hour>``, one a group) that took the most write units
in the step, over the step's time.

The re-pack (docs/writetier.md, "Re-packing settled slices") is measured the same way, by the same
function on the same step of group items: with the clock 35 minutes into the hour and the re-pack at its
start, a run re-packs the hour's 7 settled 5-minute slices into sub-items (16 sub-groups a group) and
compacts nothing; its write units per reading re-packed are the sub-items' cost.

Run: ``python -m benchmarks compaction`` (harness) or ``PYTHONPATH=functions:. python -m benchmarks.compaction``;
the clusters table below: ``python -m benchmarks compaction-clusters``, or its markdown with
``PYTHONPATH=functions:. python -m benchmarks.compaction clusters``.

``compaction-clusters`` is the design table that chose cluster blocks: what compacted blocks cost when
each holds the hour of a *cluster* of a group's entities (``(stable_hash >> 32) mod K``, K clusters a
group, block format 5, as :func:`keydesign.tiering.compact_hour` writes them at K = ``CLUSTERS``, 256)
against one entity's hour each (block format 3, what compaction wrote before). Per fleet shape and K:
write units and billed bytes at rest per reading, a device's compacted hour (bytes of its cluster's blocks,
read units of the one Query that reads them) and the CPU of decoding one device's readings from its
cluster's blocks against from its own block (side by side, alternating). docs/decisions.md ("Compacted
blocks of several entities") reads it.
"""

from __future__ import annotations

import json
import random
import sys
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
from keydesign.blocks import (
    body_estimate,
    cut_runs,
    decode_block,
    decode_group,
    encode_block,
    encode_cluster,
    encode_group,
    keyed_item,
)
from keydesign.hashing import stable_hash
from keydesign.items import read_units
from keydesign.rollup import Granularities
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    CLUSTERS,
    MAX_COMPACTED_SPAN_MS,
    REPACK_MS,
    SLICE_MS,
    CompactionState,
    WriteTier,
    group_sk_stem,
    tier_settle,
)

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
    # Cluster blocks go to c#<group>#<hour>: the write units of the hottest group's, in the step
    hottest = max(
        sum(int(sk.rsplit("#", 1)[1]) for sk in rows)
        for (_, pk), rows in db.partitions.items()
        if pk.startswith(CLUSTER_PK_PREFIX)
    )
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


#: The fleet shapes of the clusters table: devices a group (at the G `tsctl plan` gives, or the design table's)
#: and each device's interval. Seed 003 at G auto (512) and 1,024; the sparse fleet (10,000 sensors once a
#: minute) at 32.
CLUSTER_SHAPES = (
    ("seed 003, G 512", DEVICES // 512, INTERVAL_MS),
    ("seed 003, G 1,024", DEVICES // GROUPS, INTERVAL_MS),
    ("sparse fleet, G 32", 10_000 // 32, 60_000),
)
CLUSTER_COUNTS = (64, 128, 256, 512)
#: Every compacted block's version and expiry in the table (they do not change a block's size).
VERSION, TTL_S = SEQUENCE_BASE + 10**6, 1_800_000_000


def _group_hour(devices: int, interval_ms: int, rng: random.Random) -> dict[str, list[Reading]]:
    """One group's hour of readings: ``devices`` devices, each every ``interval_ms`` from a random offset."""
    out: dict[str, list[Reading]] = {}
    for device in range(devices):
        entity = f"device-0007{device:04d}"
        ts = H + rng.randrange(interval_ms)
        readings = out[entity] = []
        while ts < H + SLICE_MS:
            value = round(rng.uniform(0, 40), 2)
            readings.append(Reading.parse({"entity_id": entity, "timestamp": ts, "measures": {"value": value}}))
            ts += interval_ms
    return {entity: readings for entity, readings in out.items() if readings}


def cluster_blocks(hour: dict[str, list[Reading]], clusters: int) -> dict[int, list[tuple[int, int, bytes]]]:
    """Per cluster of ``hour``'s entities, its blocks (size, write units, payload): its readings in time order,
    cut by the block limits over an hour's span (as compacted blocks are), each run one format 5 block."""
    members: dict[int, list[Reading]] = {}
    for entity, readings in hour.items():
        members.setdefault((stable_hash(entity) >> 32) % clusters, []).extend(readings)
    out: dict[int, list[tuple[int, int, bytes]]] = {}
    for cluster, readings in members.items():
        readings.sort(key=lambda r: (r.ts_ms, r.entity_id, r.event_id))
        keys = [(r.ts_ms, (r.entity_id, r.event_id), i) for i, r in enumerate(readings)]
        for run in cut_runs(keys, list(map(body_estimate, readings)), span_limit_ms=MAX_COMPACTED_SPAN_MS):
            encoded = encode_cluster([readings[i] for i in run], VERSION, span_limit_ms=MAX_COMPACTED_SPAN_MS)
            stem = f"{cluster:03d}#{group_sk_stem(encoded)}"
            _, size, units = keyed_item(WriteTier(8).cluster_pk(7, H), stem, encoded.payload, TTL_S)
            out.setdefault(cluster, []).append((size, units, encoded.payload))
    return out


def entity_blocks(hour: dict[str, list[Reading]]) -> dict[str, tuple[int, int, bytes]]:
    """Per entity of ``hour``, its hour as one compacted block (size, write units, payload): block format 3
    keyed as the hybrid layout's compacted blocks were (``<shard>#<hour>#c`` / ``<entity>#<first ts>#...``),
    what compaction wrote before cluster blocks (an hour of a sparse device is far under the block limits)."""
    out: dict[str, tuple[int, int, bytes]] = {}
    for entity, readings in hour.items():
        encoded = encode_block(readings, VERSION, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        stem = f"{entity}#{group_sk_stem(encoded)}"
        _, size, units = keyed_item("0042#2026-11-22T06:00#c", stem, encoded.payload, TTL_S)
        out[entity] = (size, units, encoded.payload)
    return out


def _decode_ratio(hour: dict[str, list[Reading]], clusters: dict[int, list[tuple[int, int, bytes]]], k: int) -> float:
    """CPU of decoding each of 200 devices' readings from its cluster's blocks over decoding its own compacted
    block (before cluster blocks), the two alternating over 6 rounds."""
    entities = list(hour)[:200]
    own = {entity: payload for entity, (_, _, payload) in entity_blocks({e: hour[e] for e in entities}).items()}
    mine = {e: [payload for _, _, payload in clusters[(stable_hash(e) >> 32) % k]] for e in entities}
    spent = [0.0, 0.0]
    for round_ in range(6):
        for side in (0, 1) if round_ % 2 == 0 else (1, 0):
            started = time.process_time()
            for e in entities:
                if side == 0:
                    decode_block(e, own[e], span_limit_ms=MAX_COMPACTED_SPAN_MS)
                else:
                    for payload in mine[e]:
                        decode_group(payload, e, span_limit_ms=MAX_COMPACTED_SPAN_MS)
            spent[side] += time.process_time() - started
    return spent[1] / spent[0]


def cluster_table(quick: bool = False) -> dict[str, dict[str, dict[str, float]]]:
    """Per fleet shape, today's compacted blocks (one entity's hour) against clusters of K a group."""
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name, devices, interval_ms in CLUSTER_SHAPES[:1] if quick else CLUSTER_SHAPES:
        hour = _group_hour(devices // 8 if quick else devices, interval_ms, random.Random(3))
        readings = sum(map(len, hour.values()))
        own = entity_blocks(hour)
        rows = {
            "one entity's hour (before clusters)": {
                "blocks": len(own),
                "write_units_per_reading": sum(units for _, units, _ in own.values()) / readings,
                "billed_bytes_per_reading": sum(size + 100 for size, _, _ in own.values()) / readings,
                "device_hour_bytes": sum(size for size, _, _ in own.values()) / len(own),
                "device_hour_read_units": sum(read_units(size) for size, _, _ in own.values()) / len(own),
                "decode_cpu_ratio": 1.0,
            }
        }
        for k in (CLUSTERS,) if quick else CLUSTER_COUNTS:
            blocks = cluster_blocks(hour, k)
            every = [b for bs in blocks.values() for b in bs]
            hours = [sum(size for size, _, _ in blocks[(stable_hash(e) >> 32) % k]) for e in hour]
            rows[f"clusters, K = {k}"] = {
                "blocks": len(every),
                "entities_per_cluster": len(hour) / k,
                "write_units_per_reading": sum(units for _, units, _ in every) / readings,
                "billed_bytes_per_reading": sum(size + 100 for size, _, _ in every) / readings,
                "device_hour_bytes": sum(hours) / len(hours),
                "device_hour_read_units": sum(map(read_units, hours)) / len(hours),
                "decode_cpu_ratio": _decode_ratio(hour, blocks, k),
            }
        table[name] = rows
    return table


def cluster_markdown(table: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = [
        "| fleet | compacted blocks | entities a cluster | write units / reading | billed bytes / reading "
        "| a device's compacted hour: bytes (read units) | decode CPU, x today |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for fleet, rows in table.items():
        for name, row in rows.items():
            per = f"{row['entities_per_cluster']:.1f}" if "entities_per_cluster" in row else "1"
            lines.append(
                f"| {fleet} | {name} | {per} | {row['write_units_per_reading']:.4f} "
                f"| {row['billed_bytes_per_reading']:.1f} | {row['device_hour_bytes']:.0f} "
                f"({row['device_hour_read_units']:g}) | {row['decode_cpu_ratio']:.2f} |"
            )
    return "\n".join(lines)


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


@benchmark(
    "compaction-clusters",
    "a design table: compacted blocks of one entity's hour (today) against clusters of a group's entities",
)
def compaction_clusters(quick: bool) -> Result:
    table = cluster_table(quick=quick)
    result = Result(
        params={"clusters": [CLUSTERS] if quick else list(CLUSTER_COUNTS)},
        method=(
            "one group's hour per fleet shape; an entity's hour as one format 3 block against clusters of K a "
            "group as format 5 blocks cut by the block limits over an hour; sizes and units by DynamoDB's rules"
        ),
    )
    for fleet, rows in table.items():
        for name, row in rows.items():
            result.add(f"{fleet}, {name}: write units", round(row["write_units_per_reading"], 4), "WU / reading")
            result.add(f"{fleet}, {name}: a device's hour", row["device_hour_read_units"], "RU")
    return result


if __name__ == "__main__":
    if sys.argv[1:] == ["clusters"]:
        print(cluster_markdown(cluster_table()))
    else:
        print(json.dumps(run(), indent=2))
