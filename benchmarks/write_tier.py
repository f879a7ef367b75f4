"""The write tier's design table (issue 38, first step): what each candidate design costs, before building one.

Candidates, each for seed 000, seed 003 and the sparse fleet (:mod:`benchmarks.blocks`' workloads):

* **today**: ingest writes one block per entity per batch (``Layout.pack``), one rollup mark per entity-minute,
  and the rollup function puts every entity's minute, hour and day rollups (and the deferred hour and day marks);
* **write tier**: ingest writes what one invocation receives of a *group* of entities (``hash(entity) mod G``,
  the producer's partition key, so a group lives in one stream shard) as one compressed item keyed
  ``group#slice``; an entity with at least ``DENSE_PER_BATCH`` readings in a batch keeps writing its own blocks
  as today. Every ``slice`` a compaction pass reads each group's closed slice once and writes one read-tier
  block per entity spanning the slice (``+1d``: an hourly pass, and a daily one that rewrites the day's hour
  blocks as one day block, the hour blocks expiring by TTL), and the rollups in the same pass: per entity only
  at the levels where an entity-interval's readings take more than one read unit in blocks (below that,
  reading the block is cheaper than reading a rollup item), and the fleet-wide totals; no marks;
* **write tier only**: no read tier; readers read the groups' items.

How it is measured:

* **Bytes are encoded, not guessed.** Today's blocks come from :mod:`benchmarks.blocks`' simulation (the real
  ``Layout.pack`` on simulated Lambda batches; the same figures as docs/benchmarks.md). Read-tier blocks span
  more than ``encode_block`` allows (10 s), so :func:`entity_payload` writes the *same format* (header, CRC-32,
  DEFLATE of the same columns) without the span and count limits; a test holds it byte-equal to
  ``encode_block`` where both apply. The write tier's cross-entity item is a **model**
  (:func:`group_payload`): the readings sorted by entity, an entity column and a count column ahead of the
  same time/measure/event-id columns, DEFLATEd together, with the same header. Items are sized by
  ``keydesign.item_size`` with keys of the lengths they would have; a put costs ``write_units(size)``;
  storage is size + 100 bytes per item.
* **Batches** from the stream settings: a shard's batch lasts ``max(window, 1 s)`` unless its records reach
  the batch size (readings packed 64 KB a record, as the producer does) or Lambda's 6 MB payload first; a
  group's readings in a batch are ``rate / G x batch``, Poisson: a group item holds ``m / (1 - e^-m)`` readings
  on average, ``1 - e^-m`` items a batch.
* **Reads** are DynamoDB's Query accounting, eventually consistent: per Query call the items' bytes rounded up
  to 4 KB, half a unit per 4 KB; pages of 1 MB. *Day*: one device's finished (compacted) day. *Latest*: the
  device's group items read newest first until its reading is found: a live device sends every interval, so at
  most one interval of its group (the write tier is kept for days, whatever compaction has done); a dense entity
  reads its newest block. *Last 10 minutes*: the group's items of 10 minutes (dense: its blocks). *Fleet hour*:
  Query calls for every reading of a recent hour (today: the hybrid layout's N partitions; write tier: each
  group's slice partitions).
* **Rollup writes.** Today: 1 mark + 1 minute rollup per entity-minute, a deferred mark + a rollup per
  entity-hour and per entity-day, 3 totals and the state per minute (2.04 write units per entity-minute at the
  seed against the 2.05 the ``rollups`` benchmark measures with the real code). Compaction: per entity only the
  levels above, once per closed interval; totals once per slice and level; the state once per pass.
* **Compaction lag**: the slice, the settle time (ingest's timeout + 60 s, as the rollups wait) and the pass at
  16 calls in flight, 10 ms a call (each group-slice partition's pages, a BatchWriteItem per 25 items; the
  day merge one Query per entity). Today: the rollup function's minute, one raw Query per entity-minute.
  *Seconds per minute* is the pass's time for one minute of readings: it keeps up if under 60.

Run: ``python -m benchmarks write-tier`` (harness; ``--quick`` simulates a smaller sample). Rollups computed by
the compaction pass (:func:`rollups_from_compaction`, docs/decisions.md "Rollups from the compaction pass"):
``python -m benchmarks write-tier-rollups``, or ``python -m benchmarks.write_tier rollups`` for its markdown. Re-packing
settled slices for the uncompacted hour's reads (:func:`repack_table`): ``python -m benchmarks write-tier-repack``, or
``python -m benchmarks.write_tier repack``.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import blocks
from benchmarks.blocks import SEED_000, SEED_003, SPARSE, START_MS, Deployment, Fleet
from benchmarks.harness import Result, benchmark
from keydesign import Reading, capacity, item_size, write_units
from keydesign.blocks import CODEC_DEFLATE, CODEC_RAW, FORMAT, block_item
from keydesign.capacity import RECENT_S, SECONDS_PER_MONTH, Prices, poisson_fill
from keydesign.model import derive_event_id
from keydesign.varints import write_varint

MINUTE, HOUR, DAY = 60, 3_600, 86_400
FLEETS = (SEED_000, SEED_003, SPARSE)
#: An entity with this many readings in a batch writes its own blocks (as today) rather than into its group's item.
DENSE_PER_BATCH = 8
#: A write-tier item holds at most this much (bounded decoding, as a block): more readings make more items.
MAX_ITEM_BYTES = 64 * 1024
READ_UNIT, PAGE_BYTES, OVERHEAD = 4_096, 1_048_576, 100
#: The write tier is kept this long (TTL a day past its slice, and DynamoDB's deletion within about two days).
WRITE_TIER_KEPT_S = 3 * DAY
RETENTION_S = 30 * DAY
CALL_S, IN_FLIGHT, SETTLE_S, BATCH_WRITE = 0.010, 16, 180, 25
RECORD_BYTES = 64 * 1024
HYBRID_N = 100
VERSION = blocks.SEQUENCE_BASE
AUTO = -1
# The automatic group count (keydesign.capacity.auto_groups, shared with `tsctl plan`) keeps a group's last
# 10 minutes within GROUP_RECENT_BYTES: 8 read units (eventually consistent) for a device's latest reading or
# last 10 minutes, whatever compaction has done. (Bounding a whole uncompacted hour instead asks for tens of
# thousands of groups at seed 003: a group's items then hold a reading or two, and their keys and headers
# alone fill the bound.)
#: --quick simulates 22 s of seed 000 (the hot sensor's readings are most of the time): windows up to 10 s fit.
QUICK_WINDOW_S = 10
PRICES = Prices()


@dataclass(frozen=True, slots=True)
class Stream:
    """Stream and batch settings: shards, ``MaximumBatchingWindowInSeconds``, ``BatchSize`` (records)."""

    shards: int = 50
    window_s: int = 5
    batch_size: int = 1_000
    mode: str = "on_demand"

    def batch_s(self, fleet: Fleet, reading_bytes: float) -> float:
        """How long a shard's batch gathers (the shards share the fleet evenly)."""
        per_shard = (fleet.fleet_rate + sum(r for _, r in fleet.hot)) / self.shards
        payload_s = blocks.PAYLOAD_BYTES / (per_shard * reading_bytes)
        records_s = self.batch_size * max(1, RECORD_BYTES // int(reading_bytes)) / per_shard
        return min(max(self.window_s, 1.0), payload_s, records_s)


@dataclass(frozen=True, slots=True)
class Design:
    name: str
    stream: Stream
    groups: int = 0  # 0: today (no write tier); AUTO: chosen from the fleet's rate (:func:`auto_groups`)
    slice_s: int = 0
    day_merge: bool = False
    read_tier: bool = True


# -- encoding ----------------------------------------------------------------------------------------------


def _header(count: int, first: int, span: int, stored: bytes, codec: int) -> bytes:
    head = bytearray([FORMAT, codec])
    for number in (count, first, span):
        write_varint(number, head)
    version = VERSION.to_bytes((VERSION.bit_length() + 7) // 8, "big")
    head += bytes([len(version)]) + version
    return bytes(head) + zlib.crc32(stored, zlib.crc32(head)).to_bytes(4, "big")


def _pack(columns: list[object], count: int, first: int, span: int) -> bytes:
    while columns[-1] is None:
        columns.pop()
    body = json.dumps(columns, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflated = packer.compress(body) + packer.flush()
    codec, stored = (CODEC_DEFLATE, deflated) if len(deflated) < len(body) else (CODEC_RAW, body)
    return _header(count, first, span, stored, codec) + stored


def _ids(readings: Sequence[Reading]) -> list[str | None] | None:
    ids = [
        None if r.event_id == derive_event_id(r.entity_id, r.ts_ms, r.measures, r.dimensions) else r.event_id
        for r in readings
    ]
    return ids if any(ids) else None


def _measures(readings: Sequence[Reading]) -> dict[str, list[Any]]:
    names = sorted(readings[0].measures)
    if any(sorted(r.measures) != names or r.dimensions for r in readings):
        raise ValueError("the model encodes readings that all carry the same measures and no dimensions")
    return {name: [r.measures[name] for r in readings] for name in names}


def entity_payload(readings: Sequence[Reading]) -> bytes:
    """A block of one entity's ``readings`` (sorted, distinct) in block format 3, without the span and count
    limits: what ``encode_block`` writes for the same readings where both apply."""
    first = readings[0].ts_ms
    deltas = [b.ts_ms - a.ts_ms for a, b in itertools.pairwise(readings)]
    columns: list[object] = [[0, *deltas], _measures(readings), _ids(readings)]
    return _pack(columns, len(readings), first, readings[-1].ts_ms - first)


def group_payload(readings: Sequence[Reading]) -> bytes:
    """The model of a write-tier item: several entities' readings, by entity then time, in one DEFLATE body."""
    ordered = sorted(readings, key=lambda r: (r.entity_id, r.ts_ms, r.event_id))
    entities = sorted({r.entity_id for r in ordered})
    counts = [sum(1 for r in ordered if r.entity_id == e) for e in entities]
    first = min(r.ts_ms for r in ordered)
    deltas = [r.ts_ms - first for r in ordered]
    columns: list[object] = [entities, counts, deltas, _measures(ordered), _ids(ordered)]
    return _pack(columns, len(ordered), first, max(r.ts_ms for r in ordered) - first)


def _reading(fleet: Fleet, entity: str, ts_ms: int, rng: random.Random) -> Reading:
    raw: dict[str, Any] = {"entity_id": entity, "timestamp": ts_ms, "measures": fleet.measures(rng)}
    if fleet.with_event_id:
        raw["event_id"] = f"{rng.getrandbits(48):012x}"
    return Reading.parse(raw)


@functools.cache
def group_item_bytes(fleet: Fleet, readings: int, batch_ms: int) -> int:
    """Item size of a write-tier item holding ``readings`` of distinct random entities of ``fleet``."""
    rng = random.Random(readings)
    entities = rng.sample(range(fleet.sensors), readings)
    batch = [_reading(fleet, fleet.sensor(e), START_MS + rng.randrange(batch_ms), rng) for e in entities]
    item = block_item(f"w#{0:04d}#{START_MS // 1000}", f"{START_MS}#{0:02d}#{VERSION}", group_payload(batch), 1)
    return item_size(item)


@functools.cache
def entity_item_bytes(fleet: Fleet, readings: int) -> int:
    """Item size of a read-tier block holding ``readings`` consecutive readings of one entity of ``fleet``."""
    rng = random.Random(readings)
    entity = fleet.sensor(rng.randrange(fleet.sensors))
    step = fleet.interval_ms
    batch = [_reading(fleet, entity, START_MS + int(i * step + rng.uniform(0, 50)), rng) for i in range(readings)]
    sk = f"{entity}#{START_MS}#{'0' * 12}#9"
    return item_size(block_item(f"r#{0:03d}#{START_MS // 86_400_000}", sk, entity_payload(batch), 1))


# -- arithmetic --------------------------------------------------------------------------------------------


def query_units(total_bytes: float, calls: int = 1) -> float:
    """Eventually consistent read units of ``calls`` Queries sharing ``total_bytes`` evenly (4 KB per call)."""
    per_call = total_bytes / calls
    return calls * max(1, math.ceil(per_call / READ_UNIT)) * 0.5


def pages(total_bytes: float, partitions: int) -> int:
    """Query calls reading ``total_bytes`` spread over ``partitions`` (1 MB pages, one call at least each)."""
    return partitions * max(1, math.ceil(total_bytes / partitions / PAGE_BYTES))


def per_interval(interval_s: float, size_s: float) -> float:
    """Entity-intervals of ``size_s`` holding readings, per reading, for an entity sending every ``interval_s``."""
    return min(1.0, interval_s / size_s)


def auto_groups(fleet: Fleet, sparse_rate: float, batch_s: float, span_s: float = RECENT_S) -> int:
    """G auto (:func:`keydesign.capacity.auto_groups`) with this module's model of a group item's bytes."""
    return capacity.auto_groups(sparse_rate, batch_s, lambda m: group_item_bytes(fleet, m, int(batch_s * 1000)), span_s)


def pass_seconds(calls: float) -> float:
    return calls * CALL_S / IN_FLIGHT


@dataclass(slots=True)
class Part:
    """One kind of entity in a fleet: how many, each one's interval, and its blocks today."""

    entities: int
    interval_s: float
    block_wu: float  # per reading, today's blocks at this window
    block_bytes: float  # billed per reading
    readings_per_block: float

    @property
    def rate(self) -> float:
        return self.entities / self.interval_s


def sample_of(fleet: Fleet, quick: bool) -> tuple[dict[str, list[blocks.Arrival]], int]:
    """A sample of the fleet's readings, when they reach Kinesis (:func:`benchmarks.blocks.arrivals`), its span."""
    deployment = Deployment.defaults()
    if fleet is SEED_000:  # sensor-alpha-001 and the fleet sensors of its partition
        entities, duration = blocks.seed_000_sample(deployment)[: 20 if quick else None], 22_000 if quick else 42_000
    else:
        step = fleet.sensors // (200 if quick else 1_000)
        entities, duration = list(map(fleet.sensor, range(0, fleet.sensors, step))), 600_000
    return blocks.arrivals(fleet, entities, duration, deployment, 3), duration


def parts_of(fleet: Fleet, window_s: int, sample: tuple[dict[str, list[blocks.Arrival]], int]) -> list[Part]:
    """The fleet's kinds of entity with today's block costs, from :mod:`benchmarks.blocks`' simulation."""
    deployment = Deployment.defaults()
    readings, duration = sample
    batches = blocks.form_batches(fleet, readings, deployment, window_s=window_s, duration_ms=duration)
    tallies = blocks.account(fleet, batches, deployment).tallies
    out = []
    hot = dict(fleet.hot)
    for name, tally in tallies.items():
        figures = tally.per_reading()
        count, interval = (1, 1 / hot[name]) if name in hot else (fleet.sensors, fleet.interval_ms / 1000)
        out.append(Part(count, interval, figures["block_wu_per_reading"], figures["block_bytes_per_reading"],
                        figures["readings_per_block"]))  # fmt: skip
    return out


@dataclass(slots=True)
class Costs:
    """What a design costs a fleet: write units, billed bytes and the pass's calls per second; reads per read."""

    rate: float
    batch_s: float
    wu: float = 0.0
    billed: float = 0.0
    day: float = 0.0
    last_day: float = 0.0  # the last 24 h, the newest slice and its settle not yet compacted
    latest: float = 0.0
    recent: float = 0.0
    fleet_hour_calls: int = 0
    pass_calls: float = 0.0  # per slice (today: per minute)
    lag_s: float = 0.0
    seconds_per_minute: float = 0.0
    groups: int = 0
    #: Today's per-entity blocks alone, per second (docs/benchmarks.md's ``blocks`` figures, for the cross-check).
    block_wu: float = 0.0
    block_billed: float = 0.0

    def figures(self) -> dict[str, float]:
        dollars = SECONDS_PER_MONTH * self.wu / 1e6 * PRICES.ondemand_write_per_million
        dollars += RETENTION_S * self.billed / 1e9 * PRICES.storage_gb_month  # the retention's readings at rest
        return {
            "wu_per_reading": self.wu / self.rate,
            "billed_bytes_per_reading": self.billed / self.rate,
            "ru_device_day": self.day,
            "ru_last_24_h": self.last_day,
            "ru_latest": self.latest,
            "ru_last_10_min": self.recent,
            "fleet_hour_queries": self.fleet_hour_calls,
            "compaction_lag_s": self.lag_s,
            "pass_s_per_minute": self.seconds_per_minute,
            "batch_s": self.batch_s,
            "groups": self.groups,
            "dynamodb_usd_month": dollars,
            "blocks_wu_per_reading": self.block_wu / self.rate,
            "blocks_billed_bytes_per_reading": self.block_billed / self.rate,
        }


def evaluate(fleet: Fleet, design: Design, parts: list[Part], reading_json: float) -> dict[str, float]:
    """The design's figures for ``fleet`` (see the module); reads are of its most numerous kind of entity."""
    batch = design.stream.batch_s(fleet, reading_json)
    costs = Costs(sum(p.rate for p in parts), batch)
    typical = max(parts, key=lambda p: p.entities)
    sparse = [p for p in parts if p.interval_s * DENSE_PER_BATCH > batch] if design.groups else []
    dense = [p for p in parts if p not in sparse]
    read_bytes = {id(p): p.block_bytes for p in dense}
    if dense:
        _blocks(costs, dense, typical)
    if not design.groups:
        _today_rollups(costs, fleet, parts)
        return costs.figures()
    group_bytes_per_s = 0.0
    if sparse:
        group_bytes_per_s = _write_tier(costs, fleet, design, sparse, typical)
        read_bytes |= {id(p): group_bytes_per_s * costs.groups / sum(p.rate for p in sparse) for p in sparse}
        if design.read_tier:
            _read_tier(costs, fleet, design, sparse, typical=typical, read_bytes=read_bytes)
            costs.pass_calls += costs.groups * pages(group_bytes_per_s * design.slice_s, 1)
    for part in dense:  # the pass reads each dense entity's blocks of the slice for its rollups
        slice_bytes = design.slice_s / part.interval_s * part.block_bytes
        costs.pass_calls += part.entities * math.ceil(slice_bytes / PAGE_BYTES)
    _compaction_rollups(costs, fleet, design.slice_s, parts, read_bytes)
    costs.seconds_per_minute = pass_seconds(costs.pass_calls) * MINUTE / design.slice_s
    costs.lag_s = design.slice_s + SETTLE_S + pass_seconds(costs.pass_calls)
    if sparse and design.read_tier and typical in sparse:  # compacted up to the lag, the rest in the write tier
        costs.last_day = costs.day + query_units(
            group_bytes_per_s * costs.lag_s, math.ceil(costs.lag_s / design.slice_s) + 1
        )
    return costs.figures()


def _blocks(costs: Costs, dense: list[Part], typical: Part) -> None:
    """Today's per-entity blocks, read in the hybrid layout (1-hour buckets, N partitions)."""
    hour_bytes = 0.0
    for part in dense:
        costs.wu += part.rate * part.block_wu
        costs.billed += part.rate * part.block_bytes
        costs.block_wu += part.rate * part.block_wu
        costs.block_billed += part.rate * part.block_bytes
        item = part.block_bytes * part.readings_per_block - OVERHEAD
        hour_bytes += part.rate * HOUR * item / part.readings_per_block
        if part is typical:
            costs.day = costs.last_day = 24 * query_units(item * HOUR / part.interval_s / part.readings_per_block)
            costs.latest = query_units(item)
            costs.recent = query_units(item * max(1.0, 600 / part.interval_s / part.readings_per_block))
    costs.fleet_hour_calls += pages(hour_bytes, HYBRID_N)


def _today_rollups(costs: Costs, fleet: Fleet, parts: list[Part]) -> None:
    """Marks per entity-minute; the rollup function's rollups, deferred marks, totals and state."""
    entity_minutes = sum(p.rate * per_interval(p.interval_s, MINUTE) for p in parts)
    entity_hours = sum(p.rate * per_interval(p.interval_s, HOUR) for p in parts)
    entity_days = sum(p.rate * per_interval(p.interval_s, DAY) for p in parts)
    costs.wu += 2 * (entity_minutes + entity_hours + entity_days) + 4 / MINUTE
    # marks and rollups both outlive the readings (keydesign.rollup.rollup_ttl)
    item_bytes = _sizes(fleet).rollup + _sizes(fleet).mark + 2 * OVERHEAD
    costs.billed += (entity_minutes + entity_hours + entity_days) * item_bytes
    # one raw Query per entity-minute, its rollup and hour mark in BatchWriteItems, the 32 mark keys
    costs.seconds_per_minute = pass_seconds(entity_minutes * MINUTE * (1 + 2 / BATCH_WRITE) + 32)
    costs.lag_s = SETTLE_S + MINUTE + costs.seconds_per_minute


def _write_tier(costs: Costs, fleet: Fleet, design: Design, sparse: list[Part], typical: Part) -> float:
    """The group items; reads of a sparse entity from them. Returns a group's bytes per second."""
    sparse_rate = sum(p.rate for p in sparse)
    batch = costs.batch_s
    groups = design.groups
    if groups == AUTO:
        groups = auto_groups(fleet, sparse_rate, batch)
    costs.groups = groups
    occupied, held = poisson_fill(sparse_rate / groups * batch)
    readings = max(1, round(held))
    size = group_item_bytes(fleet, readings, int(batch * 1000))
    items = math.ceil(size / MAX_ITEM_BYTES)
    costs.wu += occupied * groups / batch * items * write_units(math.ceil(size / items))
    kept = WRITE_TIER_KEPT_S if design.read_tier else RETENTION_S
    costs.billed += occupied * groups / batch * (size + OVERHEAD) * kept / RETENTION_S
    group_bytes_per_s = sparse_rate / groups * size / readings
    partition_s = design.slice_s if design.read_tier else HOUR  # the write tier's pk: group#slice
    costs.fleet_hour_calls += groups * pages(group_bytes_per_s * HOUR, max(1, HOUR // partition_s))
    if typical in sparse:
        costs.latest = query_units(group_bytes_per_s * typical.interval_s)
        costs.recent = query_units(group_bytes_per_s * 600, math.ceil(600 / partition_s) + 1)
        costs.day = costs.last_day = query_units(group_bytes_per_s * DAY, DAY // partition_s)
    return group_bytes_per_s


def _read_tier(
    costs: Costs, fleet: Fleet, design: Design, sparse: list[Part], *, typical: Part, read_bytes: dict[int, float]
) -> None:
    """Per entity per slice a block of its readings in the slice (one per reading if it sends less often);
    with the day merge, a day block per entity-day too, the slice blocks expiring with the write tier."""
    slice_s = design.slice_s
    for part in sparse:
        per_block = max(1.0, slice_s / part.interval_s)
        slice_item = entity_item_bytes(fleet, round(per_block))
        read_bytes[id(part)] = (slice_item + OVERHEAD) / per_block
        blocks_per_s = part.rate / per_block
        costs.wu += blocks_per_s * write_units(slice_item)
        costs.pass_calls += blocks_per_s * slice_s / BATCH_WRITE
        life = WRITE_TIER_KEPT_S if design.day_merge else RETENTION_S
        costs.billed += blocks_per_s * (slice_item + OVERHEAD) * life / RETENTION_S
        day_bytes = slice_item * DAY / part.interval_s / per_block
        if design.day_merge:
            day_bytes = entity_item_bytes(fleet, round(DAY / part.interval_s))
            read_bytes[id(part)] = (day_bytes + OVERHEAD) * part.interval_s / DAY
            costs.wu += part.entities / DAY * write_units(day_bytes)
            costs.billed += part.entities / DAY * (day_bytes + OVERHEAD)
            costs.pass_calls += part.entities / DAY * slice_s * (1 + 1 / BATCH_WRITE)  # a Query and a put each
        if part is typical:
            costs.day = query_units(day_bytes)


def _compaction_rollups(
    costs: Costs, fleet: Fleet, slice_s: int, parts: list[Part], read_bytes: dict[int, float]
) -> None:
    """Per entity at the levels whose interval's readings take more than a read unit; totals; the state."""
    rollup_b = _sizes(fleet).rollup + OVERHEAD
    for part in parts:
        for level in (MINUTE, HOUR, DAY):
            if level / part.interval_s * read_bytes[id(part)] > READ_UNIT:
                rate = part.rate * per_interval(part.interval_s, level)
                costs.wu += rate
                costs.billed += rate * rollup_b
                costs.pass_calls += rate * slice_s / BATCH_WRITE
    costs.wu += (slice_s / MINUTE + 3) / slice_s


# -- rollups from the compaction pass (issue 38, second step) ---------------------------------------------
#
# The design docs/decisions.md chose ("Rollups from the compaction pass"), as built (docs/rollups.md), priced by
# the model ``tsctl plan`` prices the deployment with (:func:`keydesign.capacity.deployment_rates`: one model)
# with this module's items (its group-item model, its read-tier blocks, its fleets' measures): ingest marks
# only the readings it writes to blocks (dense entities, late readings); compaction writes, per group and hour,
# a *group partial* (the group's figures per minute over the readings it compacted), and every hour its part
# of the fleet totals (the hour's minutes and hour, the day recombined); a write-tier entity has no rollup item
# of its own (the model had a day rollup per entity-day before the build: dropped), its compacted blocks are
# its figures. The rollup function keeps the marked (block) entity-intervals, their totals and its state.

#: The parts priced here: DynamoDB's and the scheduled functions' (tsctl plan adds the stream, ingest, queries),
#: but the re-pack's sub-items: :func:`repack_table` prices the re-pack its own way (its ``ItemSizes`` has no
#: ``sub``, so ``deployment_rates`` leaves the re-pack out here).
ROLLUP_PARTS = tuple(
    p for p in capacity.PARTS[: capacity.PARTS.index("rollup Lambda") + 1] if p != "sub-items (re-pack)"
)


def total_item_bytes(fleet: Fleet) -> int:
    """A fleet total of an interval (a ``rollall#`` item; compaction's part adds ``#c`` to its sk)."""
    return _sizes(fleet).total


@functools.cache
def _sizes(fleet: Fleet) -> capacity.ItemSizes:
    # the compacted blocks of this design table: one entity's hour each (as built then; cluster blocks, which
    # pack several entities' hours, came after it: the ``compaction-clusters`` table)
    return capacity.item_sizes(
        fleet.measures,
        fleet.sensor(fleet.sensors - 1),
        "readings",
        lambda entities, m: (entity_item_bytes(fleet, m),) * entities,
    )


@dataclass(slots=True)
class RollupCosts:
    """Write units and billed bytes per second by part (:data:`ROLLUP_PARTS`), and the reads it leaves."""

    rate: float
    wu: dict[str, float]
    billed: dict[str, float]
    ru_hours_of_day: float  # one device's hourly aggregates over a finished day
    ru_days_of_month: float  # its day-level aggregate over 30 days
    ru_fleet_minutes: float  # GET /aggregates, per minute over an hour
    totals_lag_s: float  # how far GET /aggregates trails the clock
    pass_s_per_minute: float  # compaction's time per minute of readings, or the rollup function's
    groups: int

    def figures(self) -> dict[str, float]:
        out = {
            "wu_per_reading": sum(self.wu.values()) / self.rate,
            "billed_bytes_per_reading": sum(self.billed.values()) / self.rate,
            "ru_hours_of_day": self.ru_hours_of_day,
            "ru_days_of_month": self.ru_days_of_month,
            "ru_fleet_minutes_of_hour": self.ru_fleet_minutes,
            "totals_lag_s": self.totals_lag_s,
            "pass_s_per_minute": self.pass_s_per_minute,
            "groups": self.groups,
        }
        for part in ROLLUP_PARTS:
            out[f"wu: {part}"] = self.wu[part] / self.rate
            out[f"B: {part}"] = self.billed[part] / self.rate
        return out


def today_rollup_reads(fleet: Fleet) -> dict[str, float]:
    """Today's aggregate routes: an entity's hour rollups of a day and day rollups of 30 days (BatchGetItem,
    each item half a unit eventually consistent), the fleet's 60 minute totals in one ``rollall#`` Query."""
    return {
        "ru_hours_of_day": 24 * 0.5,
        "ru_days_of_month": 30 * 0.5,
        "ru_fleet_minutes_of_hour": query_units(60 * total_item_bytes(fleet)),
    }


def _group_items(fleet: Fleet, sparse_rate: float, groups: int, batch_s: float) -> tuple[float, float]:
    """Group items per second as ingest cuts them (:func:`keydesign.capacity.group_cuts`, 10 s of span):
    write units and bytes put (item + 100 each)."""
    units = stored = 0.0
    batch_ms = int(batch_s * 1000)
    for count, per_batch in capacity.group_cuts(sparse_rate / groups * batch_s, batch_s).items():
        size = group_item_bytes(fleet, count, batch_ms)
        items = math.ceil(size / MAX_ITEM_BYTES)
        units += per_batch * items * write_units(math.ceil(size / items))
        stored += per_batch * (size + items * OVERHEAD)
    per_s = groups / batch_s
    return units * per_s, stored * per_s


def rollups_from_compaction(
    fleet: Fleet, parts: list[Part], reading_json: float, window_s: int = 10, groups: int = AUTO
) -> RollupCosts:
    """The built design's costs for ``fleet`` (see above): every write, its bytes at rest, the reads."""
    batch = Stream(window_s=window_s).batch_s(fleet, reading_json)
    typical = max(parts, key=lambda p: p.entities)
    sparse = [p for p in parts if p.interval_s * DENSE_PER_BATCH > batch]
    sparse_rate = sum(p.rate for p in sparse)
    if groups == AUTO:
        groups = auto_groups(fleet, sparse_rate, batch) if sparse else 0
    kinds = [capacity.Kind(p.entities, 1 / p.interval_s, p.block_wu, p.block_bytes, p in sparse) for p in parts]
    rates = capacity.deployment_rates(
        kinds,
        _sizes(fleet),
        groups=groups,
        group_items=_group_items(fleet, sparse_rate, groups, batch) if sparse else (0.0, 0.0),
        retention_s=RETENTION_S,
    )
    seconds = {name: rates[name].gb_s / (capacity.FUNCTION_MEMORY_MB / 1024) for name in ROLLUP_PARTS}
    # a compaction-owned device's hours of a day, days of a month: its compacted blocks, a Query an hour bucket
    block = entity_item_bytes(fleet, round(max(1.0, HOUR / typical.interval_s)))
    hours_of_day, days_of_month = (24 * query_units(block), 30 * 24 * query_units(block))
    if typical not in sparse:
        hours_of_day, days_of_month = 24 * 0.5, 30 * 0.5
    totals_per_minute = (1 if len(sparse) < len(parts) else 0) + (1 if sparse else 0)  # the function's, compaction's
    compaction_s = seconds["compaction Lambda"] * HOUR  # a second's readings take this long, an hour's
    return RollupCosts(
        rate=sum(p.rate for p in parts),
        wu={name: rates[name].wu for name in ROLLUP_PARTS},
        billed={name: rates[name].at_rest / RETENTION_S for name in ROLLUP_PARTS},
        ru_hours_of_day=hours_of_day,
        ru_days_of_month=days_of_month,
        ru_fleet_minutes=query_units(60 * totals_per_minute * total_item_bytes(fleet)),
        totals_lag_s=HOUR + SETTLE_S + compaction_s if sparse else SETTLE_S + MINUTE + seconds["rollup Lambda"] * 60,
        pass_s_per_minute=max(compaction_s / (HOUR / MINUTE), seconds["rollup Lambda"] * MINUTE),
        groups=groups,
    )


def rollups_table(quick: bool = False) -> dict[str, dict[str, dict[str, float]]]:
    """Per fleet: today (window 5 s: every write, :func:`evaluate`, and today's routes' reads) beside rollups
    from compaction (window 10 s)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for fleet in FLEETS:
        rng = random.Random(0)
        typical = [_reading(fleet, fleet.sensor(i), START_MS, rng) for i in range(200)]
        reading_json = sum(len(json.dumps(r.to_json())) + 1 for r in typical) / len(typical)
        sample = sample_of(fleet, quick)
        today = evaluate(fleet, Design("today", Stream(window_s=5)), parts_of(fleet, 5, sample), reading_json)
        out[fleet.name] = {
            "today, window 5 s": {
                "wu_per_reading": today["wu_per_reading"],
                "billed_bytes_per_reading": today["billed_bytes_per_reading"],
                **today_rollup_reads(fleet),
                "totals_lag_s": today["compaction_lag_s"],
                "pass_s_per_minute": today["pass_s_per_minute"],
                "groups": 0,
            },
            "rollups from compaction, window 10 s": rollups_from_compaction(
                fleet, parts_of(fleet, 10, sample), reading_json
            ).figures(),
        }
    return out


#: The write cost per reading that the rollups and re-pack tables open with: ``(key, title, digits)``.
WRITE_COST_COLUMNS = (
    ("wu_per_reading", "WU / reading, every write", 4),
    ("billed_bytes_per_reading", "billed B / reading at rest", 1),
)
ROLLUP_COLUMNS = (
    *WRITE_COST_COLUMNS,
    ("ru_hours_of_day", "RU: a device's hourly aggregates of a day", 1),
    ("ru_days_of_month", "RU: its daily aggregates of 30 days", 1),
    ("ru_fleet_minutes_of_hour", "RU: fleet totals per minute of an hour", 1),
    ("totals_lag_s", "GET /aggregates lag (s)", 0),
    ("pass_s_per_minute", "pass s per minute of readings (worst hour)", 1),
    ("groups", "G", 0),
)


def rollups_markdown(table: dict[str, dict[str, dict[str, float]]]) -> str:
    """The comparison, and the chosen design's write units and bytes per reading by part."""
    lines = [fleet_table(table, ROLLUP_COLUMNS)]
    lines += ["", "| part | " + " | ".join(f"{fleet} WU / B" for fleet in table) + " |"]
    lines.append("|" + " --- |" * (len(table) + 1))
    for part in ROLLUP_PARTS:
        cells = []
        for rows in table.values():
            f = rows["rollups from compaction, window 10 s"]
            cells.append(f"{f[f'wu: {part}']:.4f} / {f[f'B: {part}']:.1f}")
        lines.append(f"| {part} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- re-packing settled slices (issue 38, the uncompacted hour's reads) -----------------------------------------
#
# Built, a device's last 24 hours read its group's whole uncompacted stretch of items (up to compaction's lag,
# about 64 minutes): 54.5 read units at seed 003 with G = 1,024 (`read-budget`), against the target's 10. The
# candidate priced here: every R minutes a pass *re-packs* each group's settled R-minute slice of group items
# into S sub-items, one per sub-group of its entities (``hash2(entity) mod S``), in a partition per group and
# hour with the sort key ``<sub>#<slice>``, so a device's re-packed part of the hour is one Query of its
# sub-group. Only the newest slice and its settle are then read whole from the group's items. A reading late
# past its slice (not its hour) goes to a block as late readings do now (1 write unit, and a mark and a minute
# rollup: 3), since a settled slice's items must never change. Sub-items are kept a day past their hour (the
# compacted blocks serve from then on), plus TTL's deletion lag: 3 days at rest. The hourly compaction is as
# built (it may read the sub-items instead of the group items: the same bytes). Not counted: the re-pack's own
# reads (each group item read once more; seed 003: about $4 a month) and its Lambda time.

REPACK_KEPT_S = 3 * DAY


def _uncompacted_reads(group_bytes_per_s: float, lag_s: float, raw_s: float, sub_bytes_per_s: float) -> float:
    """Read units for the uncompacted stretch of a device's last 24 h: ``raw_s`` of its group's items (two hour
    partitions at most) and the rest of ``lag_s`` from its sub-group's items (two Queries at most)."""
    raw = query_units(group_bytes_per_s * raw_s, 2)
    return raw + (query_units(sub_bytes_per_s * (lag_s - raw_s), 2) if lag_s > raw_s else 0.0)


def repack_table(quick: bool = False) -> dict[str, dict[str, dict[str, float]]]:
    """Per sparse fleet: the built design at several G, and with settled slices re-packed every R minutes into
    S sub-items: every write, bytes at rest, and a device's reads while its newest hour is uncompacted."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    grid = {SEED_003.name: (512, 1024, 2048), SPARSE.name: (16, 32, 64)}
    for fleet in (SEED_003, SPARSE):
        rng = random.Random(0)
        typical_readings = [_reading(fleet, fleet.sensor(i), START_MS, rng) for i in range(200)]
        reading_json = sum(len(json.dumps(r.to_json())) + 1 for r in typical_readings) / len(typical_readings)
        parts = parts_of(fleet, 10, sample_of(fleet, quick))
        batch = Stream(window_s=10).batch_s(fleet, reading_json)
        typical = max(parts, key=lambda p: p.entities)
        rate = sum(p.rate for p in parts)  # both fleets are sparse through and through: every reading in groups
        day = query_units(entity_item_bytes(fleet, round(HOUR / typical.interval_s)) * 24)
        rows: dict[str, dict[str, float]] = out.setdefault(fleet.name, {})
        for groups in grid[fleet.name]:
            built = rollups_from_compaction(fleet, parts, reading_json, groups=groups)
            wu, billed = sum(built.wu.values()), sum(built.billed.values())
            _, stored = _group_items(fleet, rate, groups, batch)
            items_per_s = sum(capacity.group_cuts(rate / groups * batch, batch).values()) * groups / batch
            group_bps = (stored - items_per_s * OVERHEAD) / groups  # a group's item bytes a second
            lag = built.totals_lag_s
            base = {
                "wu_per_reading": wu / rate,
                "billed_bytes_per_reading": billed / rate,
                "ru_last_24_h": day + _uncompacted_reads(group_bps, lag, lag, 0.0),
                "ru_latest": query_units(group_bps * typical.interval_s),
                "ru_last_10_min": query_units(group_bps * RECENT_S, 2),
                "groups": groups,
            }
            rows[f"built, G {groups}"] = base
            for minutes, subs in itertools.product((5, 10), (8, 16, 32)):
                slice_s = minutes * MINUTE
                held = rate / groups * slice_s / subs
                occupied, per_item = capacity.poisson_fill(held)
                size = group_item_bytes(fleet, max(1, round(per_item)), slice_s * 1000)
                subs_per_s = groups * subs * occupied / slice_s
                late = rate * capacity.ARRIVAL_LAG_S / 2 / slice_s  # readings a second late past their slice
                raw_s = slice_s + SETTLE_S
                rows[f"re-pack {minutes} min into {subs}, G {groups}"] = {
                    **base,
                    "wu_per_reading": (wu + subs_per_s * write_units(size) + 3 * late) / rate,
                    "billed_bytes_per_reading": (billed + subs_per_s * (size + OVERHEAD) * REPACK_KEPT_S / RETENTION_S)
                    / rate,
                    "ru_last_24_h": day + _uncompacted_reads(group_bps, lag, raw_s, subs_per_s * size / groups / subs),
                    "ru_last_10_min": query_units(group_bps * raw_s, 2)
                    + query_units(size * max(0.0, RECENT_S - raw_s) / slice_s, 1),
                }
    return out


REPACK_COLUMNS = (
    *WRITE_COST_COLUMNS,
    ("ru_last_24_h", "RU: a device's last 24 h, newest hour uncompacted", 1),
    ("ru_latest", "RU: latest", 1),
    ("ru_last_10_min", "RU: last 10 min", 1),
)


def fleet_table(table: dict[str, dict[str, dict[str, float]]], columns: Sequence[tuple[str, str, int]]) -> str:
    """A markdown row per fleet and design, a column per ``(key, title, digits)``."""
    heads = ["fleet", "design", *(title for _, title, _ in columns)]
    lines = ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for fleet, rows in table.items():
        for name, f in rows.items():
            cells = [f"{f[key]:,.{digits}f}" for key, _, digits in columns]
            lines.append(f"| {fleet} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def add_fleet_rows(
    result: Result, table: dict[str, dict[str, dict[str, float]]], columns: Sequence[tuple[str, str, int]]
) -> None:
    """Each figure of ``table`` as a result, named by fleet, design and column."""
    for fleet, rows in table.items():
        for name, f in rows.items():
            for key, title, digits in columns:
                result.add(f"{fleet}, {name}: {title}", round(f[key], digits + 1), "")


def designs() -> list[Design]:
    """The candidates: today at two windows; the write tier over groups, slices, read spans and windows."""
    out = [Design(f"today, window {w} s", Stream(window_s=w)) for w in (5, 10, 20)]
    for window in (5, 10):
        for groups in (50, 256, 1024):
            for slice_s, merge in ((5 * MINUTE, False), (15 * MINUTE, False), (HOUR, False), (HOUR, True)):
                span = "1 d" if merge else f"{slice_s // MINUTE} min"
                name = f"G {groups}, slice {slice_s // MINUTE} min, read span {span}, window {window} s"
                out.append(Design(name, Stream(window_s=window), groups, slice_s, merge))
    for window, groups in ((10, 4096), (20, 1024), (20, 4096)):
        name = f"G {groups}, slice 60 min, read span 60 min, window {window} s"
        out.append(Design(name, Stream(window_s=window), groups, HOUR))
    for window in (10, 20):
        for merge in (False, True):
            span = "1 d" if merge else "60 min"
            name = f"G auto, slice 60 min, read span {span}, window {window} s"
            out.append(Design(name, Stream(window_s=window), AUTO, HOUR, merge))
    out += [
        Design(f"G {g}, write tier only, window 10 s", Stream(window_s=10), g, HOUR, read_tier=False)
        for g in (256, 1024)
    ]
    return out


def run(quick: bool = False) -> dict[str, Any]:
    table: dict[str, dict[str, dict[str, float]]] = {}
    candidates = [d for d in designs() if not quick or d.stream.window_s <= QUICK_WINDOW_S]
    for fleet in FLEETS:
        rng = random.Random(0)
        typical = [_reading(fleet, fleet.sensor(i), START_MS, rng) for i in range(200)]
        reading_json = sum(len(json.dumps(r.to_json())) + 1 for r in typical) / len(typical)
        sample = sample_of(fleet, quick)
        by_window = {w: parts_of(fleet, w, sample) for w in sorted({d.stream.window_s for d in candidates})}
        for design in candidates:
            row = table.setdefault(design.name, {})
            row[fleet.name] = evaluate(fleet, design, by_window[design.stream.window_s], reading_json)
    return {"quick": quick, "designs": [_describe(d) for d in candidates], "table": table}


def _describe(design: Design) -> dict[str, Any]:
    s = design.stream
    return {
        "name": design.name,
        "stream": {"mode": s.mode, "shards": s.shards, "window_s": s.window_s, "batch_size": s.batch_size},
        "groups": design.groups,
        "slice_s": design.slice_s,
        "day_merge": design.day_merge,
        "read_tier": design.read_tier,
    }


COLUMNS = (
    ("wu_per_reading", "write units / reading", "WU", 4),
    ("billed_bytes_per_reading", "billed bytes / reading at rest", "B", 1),
    ("ru_device_day", "read units, one device's day", "RU", 1),
    ("ru_last_24_h", "read units, its last 24 h, newest slice uncompacted", "RU", 1),
    ("ru_latest", "read units, latest reading", "RU", 1),
    ("ru_last_10_min", "read units, last 10 min", "RU", 1),
    ("fleet_hour_queries", "Query calls, fleet-wide hour", "calls", 0),
    ("compaction_lag_s", "compaction (rollup) lag", "s", 0),
    ("pass_s_per_minute", "pass seconds per minute of readings", "s", 1),
    ("dynamodb_usd_month", "DynamoDB writes + storage, $/month on-demand", "USD", 0),
    ("groups", "G", "groups", 0),
)


def markdown(figures: dict[str, Any]) -> str:
    """One table per fleet, a row per design."""
    lines = []
    heads = ["design", *(title for _, title, _, _ in COLUMNS)]
    for fleet in FLEETS:
        lines += ["", f"**{fleet.name}**", "", "| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
        for name, row in figures["table"].items():
            f = row[fleet.name]
            cells = [f"{f[key]:,.{digits}f}" for key, _, _, digits in COLUMNS]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def to_result(figures: dict[str, Any]) -> Result:
    result = Result(
        params={
            "designs": figures["designs"],
            "dense_per_batch": DENSE_PER_BATCH,
            "call_ms": CALL_S * 1000,
            "in_flight": IN_FLIGHT,
            "write_tier_kept_s": WRITE_TIER_KEPT_S,
        },
        method=(
            "today's blocks from the blocks simulation (Layout.pack on simulated Lambda batches); read-tier blocks "
            "in block format 3 without the span limit (byte-equal to encode_block where both apply); write-tier "
            "items a model (several entities' columns DEFLATEd together); items sized by keydesign.item_size; "
            "Query units eventually consistent, 4 KB rounding per call; rollup writes counted per entity-interval"
        ),
    )
    for name, row in figures["table"].items():
        for fleet, f in row.items():
            for key, title, unit, digits in COLUMNS:
                result.add(f"{fleet}, {name}: {title}", round(f[key], digits + 1), unit)
    return result


@benchmark("write-tier", "the write tier's candidate designs: writes, bytes, reads and lag per reading (issue 38)")
def write_tier_table(quick: bool) -> Result:
    return to_result(run(quick))


@benchmark(
    "write-tier-rollups",
    "rollups from the compaction pass against today's: every write, bytes at rest, aggregate reads (issue 38)",
)
def write_tier_rollups(quick: bool) -> Result:
    result = Result(
        params={
            "window_s": {"today": 5, "rollups from compaction": 10},
            "keep_s": capacity.KEEP_S,
            "call_ms": CALL_S * 1000,
        },
        method=(
            "the write-tier table's model (same fleets, encoders, item sizes); group items cut as ingest cuts them "
            "(keydesign.capacity.group_cuts); group partials and totals sized by keydesign.item_size; no late readings"
        ),
    )
    add_fleet_rows(result, rollups_table(quick), ROLLUP_COLUMNS)
    return result


@benchmark(
    "write-tier-repack",
    "the built write tier against re-packing each group's settled slices into sub-group items: every write, "
    "bytes at rest, a device's reads while its newest hour is uncompacted (issue 38)",
)
def write_tier_repack(quick: bool) -> Result:
    result = Result(
        params={"repack_kept_s": REPACK_KEPT_S, "window_s": 10, "late_readings_cost_wu": 3},
        method=(
            "the write-tier-rollups model (rollups_from_compaction at a given G) plus sub-items sized by the "
            "group-item model; group items cut as ingest cuts them; Query units eventually consistent"
        ),
    )
    add_fleet_rows(result, repack_table(quick), REPACK_COLUMNS)
    return result


if __name__ == "__main__":
    import sys

    what = sys.argv[1:2]
    if what == ["rollups"]:
        print(rollups_markdown(rollups_table()))
    elif what == ["repack"]:
        print(fleet_table(repack_table(), REPACK_COLUMNS))
    else:
        print(markdown(run()))
