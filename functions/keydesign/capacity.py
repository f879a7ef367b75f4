"""Capacity arithmetic with blocks: write units and bytes per reading, shards, table period, monthly cost.

Readings are stored in blocks (:mod:`keydesign.blocks`), so what a reading costs
depends on how many readings share its block: an entity's readings in one ingest
batch, in one bucket, cut as :meth:`keydesign.Layout.pack` cuts them (a span under
10 s, at most 1,000 readings and 64 KB). The planner works that out in four steps,
and prices the deployment in a fifth:

1. **The batch.** The ingest function is invoked per Kinesis shard (and per
   parallel batcher of a shard) every ``max(batching window, 1 s)``: the window
   is the event source mapping's ``MaximumBatchingWindowInSeconds`` and Lambda
   polls a shard once a second. A batch closes earlier when it would exceed
   ``batch_size`` records or Lambda's 6 MB payload (record data is base64 in it,
   4/3 of its bytes). Every reading of an entity goes to one shard (the producer's
   ``group`` and ``entity`` partition keys), so an entity writing ``r`` readings/s
   puts ``n = r x T`` readings in a batch of ``T`` seconds.
2. **The blocks.** Those ``n`` readings form ``ceil(T / 10 s)`` runs (a block spans
   under 10 s), each cut into blocks of at most 1,000 readings and 64 KB. ``n`` at or
   under 1 gives blocks of one reading: a sparse fleet (one reading per entity per
   minute) stores every reading alone, as in a one-item-per-reading design.
3. **The bytes.** A block's size is measured, not guessed: ``m`` representative
   readings (:func:`representative_readings`: the sample reading's entity, measures
   and dimensions, its measures with 1% Gaussian noise at the sample's precision, an
   event id only if the sample has one of its own) go through ``Layout.pack`` (the
   hybrid layout, 1-hour buckets, ``ttl`` set) and the resulting items are sized by
   DynamoDB's rules. A caller who knows its readings' compressed size passes
   ``reading_bytes`` instead. DynamoDB bills the item's bytes plus 100 per item for
   storage; a put costs ``ceil(bytes / 1 KB)`` write units.
4. **The fleet.** Hot entities at their own rates, the other entities sharing the
   rest of the peak evenly; the hybrid layout's N and sub-shards follow from their
   write units, and the cost from the average rate.
5. **The month in parts.** With the write tier on (always, G auto or given), what the
   deployment writes, reads and keeps, part by part (:func:`deployment_rates`, "the
   deployment in parts" below): ingest's group items, dense blocks and dense marks;
   compaction's blocks, the re-pack's sub-items, group partials, its part of the totals, its reads
   and its Lambda;
   the rollup function's marks and rollups of rollup-owned entities, its totals and state,
   its Lambda; the queries, the stream and the ingest Lambda.

Limits used (DynamoDB documentation): one partition key takes at most 1,000 write
units/s and 3,000 read units/s; a physical partition holds 10 GB (taken as 10 GiB);
a write unit is 1 KB, a read unit 4 KB. Kinesis: a shard takes 1 MB/s and 1,000
records/s.

Default prices (:class:`Prices`) are AWS's published us-east-1 list prices:
DynamoDB Standard table class as of November 2024 (on-demand $0.625 per million
write request units and $0.125 per million read request units; provisioned
$0.00065 per WCU-hour and $0.00013 per RCU-hour; storage $0.25 per GB-month).
Kinesis Data Streams on-demand (the stack's default mode): $0.08 per GB of data in
(each record rounded up to 1 KB), $0.04 per GB read (by the ingest function, the
one consumer), $0.04 per stream-hour; provisioned: $0.015 per shard-hour and
$0.014 per million PUT payload units (25 KB each). Lambda on arm64 (the stack's
architecture): $0.0000133334 per GB-second and $0.20 per million requests.
Not counted: the hot-key function on the table's stream, the API, late readings' redo and
re-marks, free tiers. Prices differ by region and change: pass your own.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Literal

from .blocks import MAX_BLOCK_ITEM_BYTES, MAX_BLOCK_READINGS, MAX_BLOCK_SPAN_MS, encode_group, keyed_item, read_header
from .errors import InvalidInput
from .items import READ_UNIT_BYTES, item_size, write_units
from .layouts import Block, Layout
from .model import Reading, derive_event_id
from .periods import PERIODS
from .rollup import MARK_SHARDS, Figures, GroupPartial, Mark, rollup_pk, total_pk, total_sk
from .shardmap import ShardMap
from .tiering import compact_hour
from .timefmt import parse_timestamp
from .writetier import (
    CLUSTERS,
    DENSE_READINGS,
    KEEP_MS,
    MAX_GROUPS,
    REPACK_MS,
    SLICE_MS,
    SUBGROUPS,
    WriteTier,
    cluster_of,
    dense_mark_sk,
    group_sk_stem,
    sub_sk_stem,
    tier_ttl,
)

PARTITION_WCU = 1_000
PARTITION_BYTES = 10 * 1024**3
#: Bytes DynamoDB adds to each item for storage billing (index overhead).
STORAGE_OVERHEAD_BYTES = 100
HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
#: Lambda polls each Kinesis shard once a second: a batch is at least this long.
POLL_INTERVAL_S = 1.0
#: Lambda's synchronous payload, which a batch's records (base64, 4/3 of their bytes) must fit.
LAMBDA_PAYLOAD_BYTES = 6 * 1024 * 1024
SHARD_BYTES_PER_S = 1024 * 1024
SHARD_RECORDS_PER_S = 1_000
KINESIS_BILLING_KB = 1024
PUT_PAYLOAD_UNIT_BYTES = 25 * 1024
#: What a Kinesis sequence number takes as a block's version (56 digits, as Kinesis issues them).
_VERSION = 10**55
#: Where representative readings start: a bucket boundary, so a run of them stays in one bucket.
_REFERENCE_MS = parse_timestamp("2026-01-01T00:00:00Z")
_NOISE = 0.01

#: A typical reading when the caller gives none: the seed scenario's three measures, no event id.
SAMPLE_READING = Reading.parse(
    {
        "entity_id": "sensor-00001",
        "timestamp": _REFERENCE_MS,
        "measures": {"temp": 21.53, "rh": 45.2, "pressure": 1013.25},
    }
)


@dataclass(frozen=True, slots=True)
class Prices:
    """List prices in USD; the defaults are us-east-1 (DynamoDB as of November 2024; see the module)."""

    ondemand_write_per_million: float = 0.625
    ondemand_read_per_million: float = 0.125
    provisioned_wcu_hour: float = 0.00065
    provisioned_rcu_hour: float = 0.00013
    storage_gb_month: float = 0.25
    kinesis_gb_in: float = 0.08
    kinesis_gb_out: float = 0.04
    kinesis_stream_hour: float = 0.04
    kinesis_shard_hour: float = 0.015
    kinesis_put_units_per_million: float = 0.014
    lambda_gb_second: float = 0.0000133334
    lambda_requests_per_million: float = 0.20


@dataclass(frozen=True, slots=True)
class Ingest:
    """How readings reach the table: the Kinesis stream and the ingest function (defaults: cdk.json's).

    ``batching_window_s`` is ``MaximumBatchingWindowInSeconds``; ``shards`` the stream's
    (cdk.json's ``kinesis_shards``; an on-demand stream picks its own: more shards mean
    more invocations, not other blocks, unless a batch reaches 6 MB). ``record_bytes`` is what
    the producer packs readings into (64 KB: its default). ``ms_per_reading`` is the
    ingest function's billed time per reading: 0.14 ms is the wall clock per reading
    the ``ingest-network`` benchmark measured at 5 ms a call, before blocks
    (docs/benchmarks.md); pass your own. These defaults are the ones every tool
    (``tsctl plan``, ``preview``, ``simulate``) starts from; a test holds the
    window equal to cdk.json's ``ingest_batching_window_s``.
    """

    batching_window_s: float = 10.0
    shards: int = 50
    parallelization: int = 1
    batch_size: int = 1_000
    record_bytes: int = 64 * 1024
    kinesis_mode: Literal["on_demand", "provisioned"] = "on_demand"
    memory_mb: int = 1_024
    ms_per_reading: float = 0.14

    def validate(self) -> None:
        finite = math.isfinite
        checks: list[tuple[str, bool, str]] = [
            ("batching_window_s", 0 <= self.batching_window_s <= 300, "must be 0 to 300 s (Lambda's limit)"),
            ("shards", self.shards >= 1, "must be at least 1"),
            ("parallelization", 1 <= self.parallelization <= 10, "must be 1 to 10 (Lambda's limit)"),
            ("batch_size", 1 <= self.batch_size <= 10_000, "must be 1 to 10,000 records (Lambda's limit)"),
            ("record_bytes", 1 <= self.record_bytes <= 1024 * 1024, "must be 1 .. 1,048,576 (Kinesis's record limit)"),
            ("kinesis_mode", self.kinesis_mode in ("on_demand", "provisioned"), "must be on_demand or provisioned"),
            ("memory_mb", 128 <= self.memory_mb <= 10_240, "must be 128 to 10,240 MB (Lambda's range)"),
            ("ms_per_reading", finite(self.ms_per_reading) and self.ms_per_reading >= 0, "must not be negative"),
        ]
        for name, ok, reason in checks:
            if not ok:
                raise InvalidInput(f"ingest.{name}", reason)


@dataclass(frozen=True, slots=True)
class Workload:
    """A described workload. Rates are readings per second.

    ``entities`` (all of them, hot ones included) is what tells how many readings share
    a block; ``sample`` is a typical reading (default :data:`SAMPLE_READING`) and
    ``reading_bytes`` overrides the compressed bytes a reading adds to a block.
    ``item_bytes`` describes every block as holding one reading of that many bytes: the
    bound for a fleet too sparse to share blocks, and what a caller that knows nothing of
    batching (no ``entities``) gets. ``write_tier_groups`` is the write tier's G (None: G auto,
    :func:`auto_groups`; it is not turned off).
    """

    peak_writes_per_s: float
    entities: int | None = None
    hot_entities: dict[str, float] = field(default_factory=dict)
    avg_writes_per_s: float | None = None
    sample: Reading = SAMPLE_READING
    reading_bytes: float | None = None
    item_bytes: int | None = None
    ingest: Ingest = Ingest()
    reads_per_s: float = 0.0
    readings_per_read: float = 1.0
    retention_days: float = 30.0
    utilisation: float = 0.5
    partition_headroom: float = 0.05
    write_tier_groups: int | None = None

    def validate(self) -> None:
        """Raise :class:`InvalidInput` naming the first impossible figure."""
        # Infinity passes the comparisons below and then breaks math.ceil in plan_capacity.
        finite = math.isfinite
        checks: list[tuple[str, bool, str]] = [
            ("peak_writes_per_s", finite(self.peak_writes_per_s) and self.peak_writes_per_s > 0, "must be above 0"),
            ("entities", self.entities is None or self.entities >= 1, "must be at least 1"),
            (
                "entities",
                self.entities is not None or self.item_bytes is not None,
                "is needed to know how many readings share a block (or give item_bytes: one reading a block)",
            ),
            (
                "entities",
                self.entities is None
                or self.entities > len(self.hot_entities)
                or (self.entities == len(self.hot_entities) and self.typical()[0] == 0),
                "must count the hot entities and at least one more to write the rest of the peak",
            ),
            (
                "item_bytes",
                self.item_bytes is None or 1 <= self.item_bytes <= 400 * 1024,
                "must be 1 .. 409,600 bytes (DynamoDB's item limit)",
            ),
            (
                "reading_bytes",
                self.reading_bytes is None or (finite(self.reading_bytes) and 0 < self.reading_bytes <= 400 * 1024),
                "must be above 0 and at most 409,600 bytes",
            ),
            ("utilisation", 0 < self.utilisation <= 1, "must be in (0, 1]"),
            ("partition_headroom", 0 <= self.partition_headroom < 1, "must be in [0, 1)"),
            ("reads_per_s", finite(self.reads_per_s) and self.reads_per_s >= 0, "must not be negative"),
            ("readings_per_read", finite(self.readings_per_read) and self.readings_per_read > 0, "must be above 0"),
            ("retention_days", finite(self.retention_days) and self.retention_days > 0, "must be above 0"),
            (
                "write_tier_groups",
                self.write_tier_groups is None or 1 <= self.write_tier_groups <= MAX_GROUPS,
                f"must be 1 to {MAX_GROUPS:,} (the write tier is not turned off)",
            ),
        ]
        if self.avg_writes_per_s is not None:
            checks.append(
                ("avg_writes_per_s", 0 < self.avg_writes_per_s <= self.peak_writes_per_s, "must be in (0, peak]")
            )
        for entity, rate in self.hot_entities.items():
            checks.append((f"hot_entities.{entity}", 0 < rate <= self.peak_writes_per_s, "must be in (0, peak]"))
        for name, ok, reason in checks:
            if not ok:
                raise InvalidInput(name, reason)
        self.ingest.validate()

    def typical(self) -> tuple[float, int]:
        """(readings/s of an entity that is not hot, how many there are) at the peak: the rest of the
        peak shared evenly. Without ``entities`` the rest counts as one entity (``item_bytes`` then
        makes every block one reading, whatever the rate)."""
        spread = max(self.peak_writes_per_s - sum(self.hot_entities.values()), 0.0)
        if self.entities is None:
            return spread, 1
        others = self.entities - len(self.hot_entities)
        return (spread / others if others else 0.0), others


# -- representative readings and the blocks they make ----------------------------------------


def representative_readings(
    sample: Reading, count: int, step_ms: float, *, entity: str | None = None, offset_ms: float = 0.0, seed: int = 0
) -> list[Reading]:
    """``count`` readings like ``sample``, ``step_ms`` apart from ``offset_ms`` past a bucket boundary: its
    entity (or ``entity``), measure names and dimensions; each measure with 1% Gaussian noise (drawn from
    ``seed``) at the sample's precision; derived event ids when the sample's is derived, else random hex ids
    of its length."""
    rng = random.Random(seed)
    name = entity or sample.entity_id
    derived = sample.derived_id
    dimensions = dict(sample.dimensions)
    out: list[Reading] = []
    for i in range(count):
        ts = _REFERENCE_MS + int(offset_ms + i * step_ms)
        measures = {key: _jitter(value, rng) for key, value in sample.measures.items()}
        if derived:
            event_id = derive_event_id(name, ts, measures, dimensions)
        else:
            event_id = "".join(rng.choice("0123456789abcdef") for _ in sample.event_id)
        out.append(Reading(name, event_id, ts, measures, dimensions))
    return out


def _jitter(value: int | float, rng: random.Random) -> int | float:
    if isinstance(value, int):
        return value + round(rng.gauss(0.0, max(1.0, abs(value) * _NOISE)))
    text = repr(value)
    if "e" in text or "E" in text or "." not in text:
        return float(f"{value * (1 + rng.gauss(0.0, _NOISE)):.6g}")
    decimals = len(text.split(".")[1])
    return round(value + rng.gauss(0.0, max(abs(value) * _NOISE, 10.0**-decimals)), decimals)


def _numbering(entity: str) -> tuple[str, int]:
    """``entity`` without its trailing digits, and the width (at least 7) of the number that names its
    siblings: ``f"{stem}{n:0{width}d}"``."""
    stem = entity.rstrip("0123456789")
    return stem, max(len(entity) - len(stem), 7)


def _cluster_mates(entity: str, count: int) -> list[str]:
    """``count`` entity ids named like ``entity`` (its digits replaced) that share one cluster
    (:func:`keydesign.writetier.cluster_of`), so their hour is compacted into one cluster's blocks."""
    stem, width = _numbering(entity)
    names = (f"{stem}{n:0{width}d}" for n in itertools.count())
    return list(itertools.islice((name for name in names if cluster_of(name) == 0), count))


class BlockSizer:
    """Item bytes of the blocks one run of readings becomes, measured by ``Layout.pack``.

    A *run* is what one batch holds of one entity within a span: at most
    :data:`MAX_BLOCK_READINGS` readings, which ``pack`` halves while a block exceeds
    :data:`MAX_BLOCK_ITEM_BYTES`. Results are cached per (entity, readings, step).
    """

    def __init__(self, sample: Reading, *, reading_bytes: float | None = None, retention_ms: int | None = None) -> None:
        self._sample = sample
        self._reading_bytes = reading_bytes
        self._retention_ms = retention_ms
        self._layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
        self._map = ShardMap.initial(self._layout.bucket, 1)
        self._cache: dict[tuple[str, int, float], tuple[int, ...]] = {}

    def run(self, readings: int, *, entity: str | None = None, rate: float = 1.0) -> tuple[int, ...]:
        """Item sizes of the blocks a run of ``readings`` (1 .. 1,000) of ``entity`` at ``rate`` readings/s makes."""
        # Readings a run holds lie within a span: space them closer when the rate would spread them wider.
        step = min(1000.0 / rate, (MAX_BLOCK_SPAN_MS - 1) / readings) if rate > 0 else 1.0
        key = (entity or self._sample.entity_id, readings, round(step, 3))
        sizes = self._cache.get(key)
        if sizes is None:
            sizes = self._cache[key] = self._measure(key[0], readings, step)
        return sizes

    def compacted(self, entities: int, readings: int) -> tuple[int, ...]:
        """Item sizes of the cluster blocks of a cluster's hour holding ``entities`` entities of ``readings``
        readings each, each entity's spread evenly over the hour from a random phase, as
        :func:`keydesign.tiering.compact_hour` writes them (cut by the block limits; with ``reading_bytes``,
        runs of at most MAX_BLOCK_READINGS sized as :meth:`run` sizes them). An hour of more than a block's
        readings is measured a block's worth at a time (the cluster's entities, as many readings each as
        fill a block), repeated: encoding every reading of a busy cluster's hour for every count of entities
        the plan weighs took a minute a plan."""
        key = (f"cluster#{entities}", readings, 0.0)
        sizes = self._cache.get(key)
        if sizes is None:
            total = entities * readings
            if self._reading_bytes is not None:
                full, rest = divmod(total, MAX_BLOCK_READINGS)
                sizes = self.run(MAX_BLOCK_READINGS) * full + (self.run(rest) if rest else ())
            elif total > MAX_BLOCK_READINGS and readings > 1:
                each = max(1, MAX_BLOCK_READINGS // entities)  # a block's worth of the cluster's readings
                repeats, rest = divmod(readings, each)
                sizes = self.compacted(entities, each) * repeats + (self.compacted(entities, rest) if rest else ())
            else:
                step, phases = SLICE_MS / readings, random.Random(entities)
                batch = [
                    reading
                    for n, name in enumerate(_cluster_mates(self._sample.entity_id, entities))
                    for reading in representative_readings(
                        self._sample, readings, step, entity=name, offset_ms=phases.random() * step, seed=n
                    )
                ]
                made = compact_hour(_REFERENCE_MS, [(_VERSION, batch)], table="readings", pk="c#0000#2026-01-01T00:00",
                                    retention_ms=self._retention_ms)  # fmt: skip
                sizes = tuple(b.size for b in made)
            self._cache[key] = sizes
        return sizes

    def _measure(self, entity: str, readings: int, step: float) -> tuple[int, ...]:
        if self._reading_bytes is None:
            batch = representative_readings(self._sample, readings, step, entity=entity)
            return tuple(b.size for b in self._pack(batch))
        # A given compressed size: one packed reading gives the keys and the payload's header.
        (one,) = self._pack(representative_readings(self._sample, 1, step, entity=entity))
        head = read_header(one.encoded.payload).body_at
        fixed = one.size - len(one.encoded.payload) + head
        per_reading = self._reading_bytes
        return split_sizes(readings, lambda m: fixed + math.ceil(m * per_reading))

    def _pack(self, readings: list[Reading]) -> list[Block]:
        return self._layout.pack([(r, _VERSION) for r in readings], self._map, retention_ms=self._retention_ms)


def split_sizes(readings: int, size_of: Callable[[int], int]) -> tuple[int, ...]:
    """Sizes of the blocks of a run of ``readings``, a block of ``m`` readings taking ``size_of(m)`` bytes,
    halved as ``Layout.pack`` halves a block over 64 KB."""
    size = size_of(readings)
    if size <= MAX_BLOCK_ITEM_BYTES or readings == 1:
        return (size,)
    half = readings // 2
    return split_sizes(half, size_of) + split_sizes(readings - half, size_of)


#: The name :class:`EntityBlocks` gives every entity that is not hot.
TYPICAL = "typical"


@dataclass(frozen=True, slots=True)
class EntityBlocks:
    """What one entity (or each entity that is not hot: :data:`TYPICAL`) writes, in blocks.

    ``readings_per_batch`` is its rate times the batch length; ``readings_per_block`` the
    mean a block holds (1: a sparse entity, each reading alone); ``burst_wcu`` the write
    units of one batch, all put in the second the batch is written.
    """

    entity: str
    readings_per_s: float
    readings_per_batch: float
    readings_per_block: float
    block_bytes: float
    write_units_per_block: float
    write_units_per_reading: float
    item_bytes_per_reading: float
    bytes_stored_per_reading: float
    wcu: float
    burst_wcu: float


def entity_blocks(
    name: str, rate: float, batch_s: float, sizer: BlockSizer, *, item_bytes: int | None = None
) -> EntityBlocks:
    """The blocks an entity writing ``rate`` readings/s makes with batches of ``batch_s`` seconds.

    A batch holds ``rate x batch_s`` readings in ``ceil(batch_s / 10 s)`` runs (a mean: 4.8
    readings a second make one block a second); a run of ``m`` readings is ``m // 1000``
    runs of 1,000 and one of the rest, each packed. With ``item_bytes`` every block is one
    reading of that size.
    """
    per_batch = rate * batch_s
    sizes: tuple[int, ...]
    if item_bytes is not None:
        per_run, sizes = 1.0, (item_bytes,)
    else:
        runs = max(1, math.ceil(batch_s * 1000 / MAX_BLOCK_SPAN_MS - 1e-9))
        per_run = max(1.0, per_batch / runs)
        full, rest = divmod(max(1, round(per_run)), MAX_BLOCK_READINGS)
        entity = None if name == TYPICAL else name
        sizes = sizer.run(MAX_BLOCK_READINGS, entity=entity, rate=rate) * full
        if rest:
            sizes += sizer.run(rest, entity=entity, rate=rate)
    units = sum(write_units(s) for s in sizes)
    return EntityBlocks(
        entity=name,
        readings_per_s=rate,
        readings_per_batch=per_batch,
        readings_per_block=per_run / len(sizes),
        block_bytes=sum(sizes) / len(sizes),
        write_units_per_block=units / len(sizes),
        write_units_per_reading=units / per_run,
        item_bytes_per_reading=sum(sizes) / per_run,
        bytes_stored_per_reading=sum(s + STORAGE_OVERHEAD_BYTES for s in sizes) / per_run,
        wcu=rate / per_run * units,
        burst_wcu=max(1.0, per_batch / per_run) * units,
    )


# -- the stream and the ingest function ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StreamFigures:
    """Kinesis and the ingest function at a rate of readings/s."""

    reading_json_bytes: int
    readings_per_record: int
    record_bytes: int
    records_per_s: float
    shards: int
    shards_needed: int
    batch_s: float
    invocations_per_s: float
    readings_per_invocation: float
    gb_in_per_month: float


def stream_figures(workload: Workload, readings_per_s: float) -> StreamFigures:
    """Records, shards, batch length and invocations for ``readings_per_s`` (see the module)."""
    ingest = workload.ingest
    sample = workload.sample
    sent = sample.to_json()
    if sample.derived_id:
        del sent["event_id"]  # a producer sends none; ingest derives it
    json_bytes = len(json.dumps(sent, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    per_record = max(1, (ingest.record_bytes - 1) // (json_bytes + 1))  # "[a,b]": one byte per reading, one more
    record_bytes = per_record * (json_bytes + 1) + 1
    records = readings_per_s / per_record
    bytes_s = records * record_bytes
    needed = max(1, math.ceil(bytes_s / SHARD_BYTES_PER_S - 1e-9), math.ceil(records / SHARD_RECORDS_PER_S - 1e-9))
    batchers = ingest.shards * ingest.parallelization
    batch = max(ingest.batching_window_s, POLL_INTERVAL_S)
    per_batcher_records = records / batchers
    if per_batcher_records > 0:
        batch = min(
            batch,
            ingest.batch_size / per_batcher_records,
            LAMBDA_PAYLOAD_BYTES * 3 / 4 / (per_batcher_records * record_bytes),
        )
    billed_kb = math.ceil(record_bytes / KINESIS_BILLING_KB)
    return StreamFigures(
        reading_json_bytes=json_bytes,
        readings_per_record=per_record,
        record_bytes=record_bytes,
        records_per_s=records,
        shards=ingest.shards,
        shards_needed=needed,
        batch_s=batch,
        invocations_per_s=batchers / batch,
        readings_per_invocation=readings_per_s / (batchers / batch),
        gb_in_per_month=records * billed_kb * KINESIS_BILLING_KB * SECONDS_PER_MONTH / 1024**3,
    )


# -- the plan --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MonthlyCost:
    """USD a month, by kind (the sums of the parts' :class:`PartCost`)."""

    writes: float
    reads: float
    storage: float
    stream: float
    ingest_lambda: float
    compaction_lambda: float = 0.0
    rollup_lambda: float = 0.0

    @property
    def total(self) -> float:
        return round(sum(float(getattr(self, f.name)) for f in fields(self)), 2)

    @classmethod
    def of(cls, parts: Sequence[PartCost], column: int) -> MonthlyCost:
        """The ``parts`` summed by kind, on-demand (``column`` 0) or provisioned (1)."""
        return cls(**{kind: sum(getattr(p, kind)[column] for p in parts) for kind in COST_KINDS})

    def to_dict(self) -> dict[str, float]:
        return {**{k: round(v, 2) for k, v in asdict(self).items()}, "total": self.total}


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """What :func:`plan_capacity` recommends, with the figures behind it (rates at the peak)."""

    write_units_per_reading: float
    bytes_stored_per_reading: float
    blocks: tuple[EntityBlocks, ...]
    peak_wcu: float
    key_budget_wcu: float
    global_shards: int
    load_per_shard_wcu: float
    entity_shards: dict[str, int]
    hottest_key_wcu: float
    hottest_key: str
    fill_hours: float
    table_period: str | None
    #: The hybrid layout's bucket (cdk.json ``bucket``): :func:`choose_bucket`.
    bucket: str
    stream: StreamFigures
    monthly_storage_gb: float
    monthly_ondemand: MonthlyCost
    monthly_provisioned: MonthlyCost
    notes: list[str]
    write_tier: WriteTierFigures | None = None
    parts: tuple[PartCost, ...] = ()

    def blocks_of(self, entity: str) -> EntityBlocks:
        """The blocks of a hot entity, or of a typical one."""
        return next((b for b in self.blocks if b.entity == entity), self.blocks[0])

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["monthly_ondemand"] = self.monthly_ondemand.to_dict()
        out["monthly_provisioned"] = self.monthly_provisioned.to_dict()
        return out


def shards_for(wcu: float, utilisation: float) -> int:
    """Partition keys needed so that ``wcu`` runs each key at or under ``utilisation`` of 1,000 WCU."""
    return max(1, math.ceil(wcu / (PARTITION_WCU * utilisation) - 1e-9))


def fill_hours(bytes_per_s: float, headroom: float) -> float:
    """Hours until a partition written at ``bytes_per_s`` fills 10 GiB less ``headroom``."""
    return PARTITION_BYTES * (1 - headroom) / bytes_per_s / 3600


def choose_period(hours: float) -> str | None:
    """The longest table period that fills no partition: a month counts as 31 days."""
    lengths = {"hour": 1, "day": 24, "week": 168, "month": 744}
    fitting = [p for p in PERIODS if lengths[p] <= hours]
    return fitting[-1] if fitting else None


#: The stack's bucket (cdk.json ``bucket``), and the one :func:`choose_bucket` gives a sparse fleet.
DEFAULT_BUCKET, SPARSE_BUCKET = "1h", "1d"


def choose_bucket(period: str | None, tier: WriteTierFigures | None, workload: Workload) -> tuple[str, list[str]]:
    """The hybrid bucket, and a note if it is not the stack's: a day when the write tier carries most
    readings, no hot entity is declared and tables last a day or longer; else the stack's hour.
    Compaction's cluster partitions span a bucket (``keydesign.Layout.cluster_span``), so a device's
    compacted day is then one Query, not one an hour (docs/benchmarks.md, "read-budget"). The price: a
    split waits for the next day (a shard-map change takes effect at a bucket boundary), and a
    cross-entity read of an hour reads its day's partitions."""
    sparse = tier is not None and tier.sparse_readings_per_s > tier.dense_readings_per_s
    if sparse and not workload.hot_entities and period is not None and period != "hour":
        return SPARSE_BUCKET, [
            f"bucket {SPARSE_BUCKET}: a device's compacted hours of a day are one Query, not 24; a split of a "
            "hot entity would take effect at the next day, and a cross-entity read of an hour reads its day's "
            "partitions (docs/writetier.md)"
        ]
    return DEFAULT_BUCKET, []


def fleet_blocks(
    workload: Workload, batch_s: float, sizer: BlockSizer, *, scale: float = 1.0
) -> tuple[EntityBlocks, ...]:
    """The typical entity's blocks, then each hot entity's, with every rate times ``scale``."""
    rate, _ = workload.typical()
    item = workload.item_bytes
    typical = entity_blocks(TYPICAL, rate * scale, batch_s, sizer, item_bytes=item)
    hot = [entity_blocks(e, r * scale, batch_s, sizer, item_bytes=item) for e, r in workload.hot_entities.items()]
    return (typical, *hot)


def sizer_for(workload: Workload) -> BlockSizer:
    """The block sizer of ``workload``'s readings (its sample, its compressed size, its retention)."""
    retention_ms = round(workload.retention_days * 86_400_000)
    return BlockSizer(workload.sample, reading_bytes=workload.reading_bytes, retention_ms=retention_ms)


def _totals(workload: Workload, blocks: tuple[EntityBlocks, ...]) -> tuple[float, float, float]:
    """(WCU/s, item bytes/s, stored bytes/s) of the fleet: the typical entity times how many there are."""
    _, count = workload.typical()
    weights = [count] + [1] * (len(blocks) - 1)
    return (
        sum(w * b.wcu for w, b in zip(weights, blocks, strict=True)),
        sum(w * b.readings_per_s * b.item_bytes_per_reading for w, b in zip(weights, blocks, strict=True)),
        sum(w * b.readings_per_s * b.bytes_stored_per_reading for w, b in zip(weights, blocks, strict=True)),
    )


def plan_capacity(workload: Workload, prices: Prices | None = None) -> CapacityPlan:
    """Size the hybrid layout (global N, hot-entity sub-shards), the table period and the monthly cost."""
    workload.validate()
    prices = prices or Prices()
    notes: list[str] = []
    budget = PARTITION_WCU * workload.utilisation
    sizer = sizer_for(workload)

    stream = stream_figures(workload, workload.peak_writes_per_s)
    blocks = fleet_blocks(workload, stream.batch_s, sizer)
    typical, hot = blocks[0], {b.entity: b for b in blocks[1:]}
    peak_wcu, _, _ = _totals(workload, blocks)
    spread_wcu = peak_wcu - sum(b.wcu for b in hot.values())

    # The hot entities get their own partitions; the rest is spread by hash.
    entity_shards = {e: shards_for(b.wcu, workload.utilisation) for e, b in hot.items()}
    global_shards = shards_for(spread_wcu, workload.utilisation)
    load_per_shard = spread_wcu / global_shards
    # The hash already spreads the other entities unevenly, by about load / sqrt(entities per key):
    # an entity writing less than that changes nothing the utilisation target does not absorb.
    _, others = workload.typical()
    noise = load_per_shard / math.sqrt(others / global_shards) if workload.entities and others else 0.0
    for entity, subs in entity_shards.items():
        if subs == 1 and hot[entity].wcu + load_per_shard > budget and hot[entity].wcu > noise:
            entity_shards[entity] = 2
            notes.append(f"{entity}: split in 2 so it does not push its base shard over the budget")
    entity_shards = {e: s for e, s in entity_shards.items() if s > 1}
    hottest_key, hottest_wcu = "a base shard", load_per_shard
    for entity, b in hot.items():
        subs = entity_shards.get(entity, 1)
        wcu = b.wcu / subs if subs > 1 else b.wcu + load_per_shard
        if wcu > hottest_wcu:
            hottest_key = f"a sub-shard of {entity}" if subs > 1 else f"the base shard of {entity}"
            hottest_wcu = wcu
        if b.burst_wcu / subs > PARTITION_WCU:
            notes.append(
                f"{entity}: one batch puts {b.burst_wcu:,.0f} write units in one second, over a key's "
                f"{PARTITION_WCU:,} WCU/s even on {subs} key(s); a shorter batching window spreads them"
            )
    if typical.wcu > budget:
        notes.append(
            f"a typical entity writes {typical.wcu:.0f} WCU/s, over the {budget:.0f} WCU/s key budget: "
            "every entity needs sub-shards; consider the calculated layout"
        )
    if stream.shards_needed > stream.shards:
        notes.append(f"the stream needs at least {stream.shards_needed} shards (1 MB/s and 1,000 records/s each)")
    if workload.item_bytes is not None:
        notes.append(f"item_bytes given: every block is taken to hold one reading of {workload.item_bytes:,} B")
    elif typical.readings_per_batch <= 1:
        notes.append(
            f"a typical entity sends {typical.readings_per_batch:.2g} readings a batch ({stream.batch_s:g} s): "
            "on its own, blocks of one reading, a whole write unit and 100 B of overhead each (the blocks' "
            "figures); the write tier packs them (the parts)"
        )

    # The average rate: what the month costs.
    scale = (workload.avg_writes_per_s or workload.peak_writes_per_s) / workload.peak_writes_per_s
    avg_readings = workload.peak_writes_per_s * scale
    avg_stream = stream_figures(workload, avg_readings)
    avg_blocks = blocks if scale == 1 else fleet_blocks(workload, avg_stream.batch_s, sizer, scale=scale)
    _, avg_item_bytes, avg_stored = _totals(workload, avg_blocks)

    # Table period: the guide's 10 GB rule, per physical partition.
    partitions = max(1, math.ceil(peak_wcu / PARTITION_WCU), global_shards + sum(entity_shards.values()))
    hours = fill_hours(avg_item_bytes / partitions, workload.partition_headroom)
    period = choose_period(hours)
    if period is None:
        notes.append(f"one partition fills in {hours:.2f} h: even hourly tables would split; shard further")

    write_tier = (
        write_tier_figures(workload, stream.batch_s, blocks, groups=workload.write_tier_groups)
        if workload.item_bytes is None
        else None
    )
    bucket, why = choose_bucket(period, write_tier, workload)
    rates = _deployment(workload, avg_stream.batch_s, avg_blocks, sizer, write_tier.groups if write_tier else None)
    parts = _priced(
        workload, prices, rates, typical=typical, stream=avg_stream, peak_scale=1 / scale, readings=avg_readings
    )
    return CapacityPlan(
        write_units_per_reading=round(peak_wcu / workload.peak_writes_per_s, 4),
        bytes_stored_per_reading=round(avg_stored / avg_readings, 1),
        blocks=blocks,
        peak_wcu=round(peak_wcu, 1),
        key_budget_wcu=budget,
        global_shards=global_shards,
        load_per_shard_wcu=round(load_per_shard, 1),
        entity_shards=entity_shards,
        hottest_key_wcu=round(hottest_wcu, 1),
        hottest_key=hottest_key,
        fill_hours=round(hours, 2),
        table_period=period,
        bucket=bucket,
        stream=stream,
        monthly_storage_gb=round(sum(r.at_rest for r in rates.values()) / 1024**3, 1),
        monthly_ondemand=MonthlyCost.of(parts, 0),
        monthly_provisioned=MonthlyCost.of(parts, 1),
        notes=[*notes, *why],
        write_tier=write_tier,
        parts=parts,
    )


@dataclass(frozen=True, slots=True)
class PartCost:
    """One part of the month: per reading (at the average rate) its write units, read units and bytes at
    rest over the retention; USD a month by kind, each (on-demand, provisioned)."""

    part: str
    write_units_per_reading: float
    read_units_per_reading: float
    bytes_at_rest_per_reading: float
    writes: tuple[float, float] = (0.0, 0.0)
    reads: tuple[float, float] = (0.0, 0.0)
    storage: tuple[float, float] = (0.0, 0.0)
    stream: tuple[float, float] = (0.0, 0.0)
    ingest_lambda: tuple[float, float] = (0.0, 0.0)
    compaction_lambda: tuple[float, float] = (0.0, 0.0)
    rollup_lambda: tuple[float, float] = (0.0, 0.0)

    def usd(self, column: int) -> float:
        """The part's month on-demand (column 0) or provisioned (1)."""
        return sum(float(getattr(self, kind)[column]) for kind in COST_KINDS)


COST_KINDS = tuple(f.name for f in fields(MonthlyCost))


def _deployment(
    workload: Workload, batch_s: float, blocks: tuple[EntityBlocks, ...], sizer: BlockSizer, groups: int | None
) -> dict[str, PartRates]:
    """:func:`deployment_rates` of ``workload`` at batches of ``batch_s``, its entities' ``blocks``, the write
    tier's ``groups``; None (``item_bytes`` given: blocks of one reading of that size): the blocks alone."""
    retention_s = workload.retention_days * 86_400
    if groups is None:
        wcu, _, stored = _totals(workload, blocks)
        return {"entities' own blocks": PartRates(wu=wcu, at_rest=stored * retention_s)}
    _, count = workload.typical()
    kinds = [
        Kind(w, b.readings_per_s, b.write_units_per_reading, b.bytes_stored_per_reading, sparse)
        for w, b in zip([count] + [1] * (len(blocks) - 1), blocks, strict=True)
        for sparse in [b.readings_per_batch < DENSE_READINGS]
        if b.readings_per_s > 0
    ]
    tier = write_tier_figures(workload, batch_s, blocks, groups=groups)
    sparse_rate = tier.sparse_readings_per_s
    sample = workload.sample
    retention_ms = round(workload.retention_days * 86_400_000)
    subs = GroupSizer(sample, REPACK_S, retention_ms=retention_ms, span_limit_ms=REPACK_MS)
    sizes = item_sizes(
        lambda rng: {key: _jitter(value, rng) for key, value in sample.measures.items()},
        sample.entity_id,
        "readings",
        sizer.compacted,
        subs.items,
    )
    return deployment_rates(
        kinds,
        sizes,
        groups=groups,
        group_items=(sparse_rate * tier.group_write_units_per_reading, sparse_rate * tier.group_item_bytes_per_reading),
        retention_s=retention_s,
    )


def _priced(
    workload: Workload,
    prices: Prices,
    rates: dict[str, PartRates],
    *,
    typical: EntityBlocks,
    stream: StreamFigures,
    peak_scale: float,
    readings: float,
) -> tuple[PartCost, ...]:
    """Every part priced; ingest's writes provisioned at the peak (``peak_scale`` times the average), the
    rest at their average rate (compaction and the rollup function spread over the hour and minute)."""
    retention_s = workload.retention_days * 86_400
    month_m = SECONDS_PER_MONTH / 1e6
    out = []
    for name, rate in rates.items():
        storage = rate.at_rest / 1024**3 * prices.storage_gb_month
        provisioned_wcu = rate.wu * (peak_scale if name in INGEST_PARTS else 1.0)
        writes = rate.wu * month_m * prices.ondemand_write_per_million
        reads = rate.ru * month_m * prices.ondemand_read_per_million
        function = rate.gb_s * SECONDS_PER_MONTH * prices.lambda_gb_second
        function += rate.requests * month_m * prices.lambda_requests_per_million
        kind = {"compaction Lambda": "compaction_lambda", "rollup Lambda": "rollup_lambda"}.get(name)
        out.append(
            PartCost(
                name,
                rate.wu / readings,
                rate.ru / readings,
                rate.at_rest / (readings * retention_s),
                writes=(writes, provisioned_wcu * HOURS_PER_MONTH * prices.provisioned_wcu_hour),
                reads=(reads, rate.ru * HOURS_PER_MONTH * prices.provisioned_rcu_hour),
                storage=(storage, storage),
                **({kind: (function, function)} if kind else {}),
            )
        )
    # A query of one entity's readings: its blocks, and one more that the range cuts at an edge.
    blocks_read = workload.readings_per_read / typical.readings_per_block + 1
    read_units_each = max(1, math.ceil(blocks_read * typical.block_bytes / READ_UNIT_BYTES)) / 2
    query_units = workload.reads_per_s * read_units_each
    ingest = workload.ingest
    gb_seconds = readings * ingest.ms_per_reading / 1000 * ingest.memory_mb / 1024 * SECONDS_PER_MONTH
    function = (
        stream.invocations_per_s * month_m * prices.lambda_requests_per_million + gb_seconds * prices.lambda_gb_second
    )
    out += [
        PartCost(
            "queries",
            0.0,
            query_units / readings,
            0.0,
            reads=(
                query_units * month_m * prices.ondemand_read_per_million,
                math.ceil(query_units) * HOURS_PER_MONTH * prices.provisioned_rcu_hour,
            ),
        ),
        PartCost("stream", 0.0, 0.0, 0.0, stream=(_stream_cost(workload, stream, prices),) * 2),
        PartCost("ingest Lambda", 0.0, 0.0, 0.0, ingest_lambda=(function, function)),
    ]
    return tuple(out)


def _stream_cost(workload: Workload, stream: StreamFigures, prices: Prices) -> float:
    if workload.ingest.kinesis_mode == "on_demand":
        return (
            stream.gb_in_per_month * (prices.kinesis_gb_in + prices.kinesis_gb_out)
            + HOURS_PER_MONTH * prices.kinesis_stream_hour
        )
    units = stream.records_per_s * math.ceil(stream.record_bytes / PUT_PAYLOAD_UNIT_BYTES) * SECONDS_PER_MONTH
    return (
        stream.shards * HOURS_PER_MONTH * prices.kinesis_shard_hour + units / 1e6 * prices.kinesis_put_units_per_million
    )


# -- the write tier (keydesign.writetier) ----------------------------------------------------

#: G auto keeps a group's last :data:`RECENT_S` of items within this: 8 read units (eventually
#: consistent) for a device's latest reading or its last 10 minutes, whatever compaction has done.
GROUP_RECENT_BYTES = 64 * 1024
RECENT_S = 600
#: G auto is a power of two of at least this many groups.
MIN_AUTO_GROUPS = 16


def poisson_fill(mean: float) -> tuple[float, float]:
    """(items per group per batch, readings per item) when a group gets ``mean`` readings a batch on
    average, the readings of its many sparse entities arriving independently (Poisson): a batch
    holds a group's item with probability ``1 - e^-mean``, and then ``mean / (1 - e^-mean)`` readings."""
    occupied = -math.expm1(-mean)
    return occupied, (mean / occupied if occupied else 1.0)


def poisson_counts(mean: float) -> dict[int, float]:
    """The probability of each count of readings from 1 on when ``mean`` are expected (Poisson), over the
    counts within 6 standard deviations and 10 of it (the rest weigh under 1e-8); above 500, the mean alone
    (a standard deviation is then under 5% of it)."""
    if mean > 500:
        return {round(mean): 1.0}
    if mean <= 0:
        return {}
    spread = 6 * math.sqrt(mean) + 10
    low, high = max(1, math.floor(mean - spread)), math.ceil(mean + spread)
    return {k: math.exp(k * math.log(mean) - mean - math.lgamma(k + 1)) for k in range(low, high + 1)}


#: How long after its event time a reading reaches Kinesis (the producer's linger, PutRecords): up to a second,
#: as ``benchmarks.blocks`` simulates it. A batch's readings then span its window and this much, and a group's
#: readings of a batch are cut at 10 s from their first one more often than the window alone would say.
ARRIVAL_LAG_S = 1.0
#: Batches :func:`group_cuts` simulates: this many, fewer when they are large (about 200,000 readings in all).
_CUT_TRIALS = 4_000
_CUT_READINGS = 200_000


def group_cuts(mean: float, batch_s: float, *, lag_s: float = ARRIVAL_LAG_S) -> dict[int, float]:
    """How many items of each count of readings a group writes a batch, on average, when it gets ``mean``
    readings a batch (Poisson), arriving evenly over the batch's ``batch_s`` seconds, each up to ``lag_s``
    after its event time, cut as ingest cuts them: a new item 10 s after an item's first reading, or at
    MAX_BLOCK_READINGS. Simulated (seeded: the same on every call); the item's 64 KB is the caller's
    (:meth:`GroupSizer.items`)."""
    rng = random.Random(0)
    counts: Counter[int] = Counter()
    trials = max(100, min(_CUT_TRIALS, round(_CUT_READINGS / max(mean, 1.0))))
    for _ in range(trials):
        count = _poisson(rng, mean)
        if not count:
            continue
        times = sorted(rng.uniform(0, batch_s * 1000) - rng.uniform(0, lag_s * 1000) for _ in range(count))
        first, held = times[0], 0
        for ts in times:
            if ts - first >= MAX_BLOCK_SPAN_MS or held == MAX_BLOCK_READINGS:
                counts[held] += 1
                first, held = ts, 0
            held += 1
        counts[held] += 1
    return {readings: items / trials for readings, items in sorted(counts.items())}


def _poisson(rng: random.Random, mean: float) -> int:
    if mean > 500:  # the normal approximation: exact enough, and a bounded number of draws
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def auto_groups(sparse_rate: float, batch_s: float, item_bytes: Callable[[int], int], span_s: float = RECENT_S) -> int:
    """The fewest groups (a power of two, :data:`MIN_AUTO_GROUPS` at least) whose items of ``span_s`` hold at
    most :data:`GROUP_RECENT_BYTES`, when entities that write to the write tier send ``sparse_rate``
    readings/s in batches of ``batch_s`` and an item of ``m`` readings is ``item_bytes(m)`` bytes; the
    largest power of two under MAX_GROUPS if none does."""
    groups = MIN_AUTO_GROUPS
    while sparse_rate > 0 and groups * 2 <= MAX_GROUPS:
        _, held = poisson_fill(sparse_rate / groups * batch_s)
        readings = max(1, round(held))
        if sparse_rate / groups * span_s * item_bytes(readings) / readings <= GROUP_RECENT_BYTES:
            return groups
        groups *= 2
    return groups


class GroupSizer:
    """Item bytes of a write-tier group item of ``m`` readings of distinct entities, measured: readings
    like the sample (its measures jittered, its dimensions, its kind of event id) of ``m`` entities named
    like the sample's, at random times over a batch, encoded by :func:`keydesign.blocks.encode_group`
    and keyed as ingest keys them. ``m`` readings make items of MAX_BLOCK_READINGS and the rest, each
    halved while over MAX_BLOCK_ITEM_BYTES, as ingest cuts them (:meth:`items`); called, the sizer gives
    their total bytes. Results are cached per item.

    ``span_limit_ms`` :data:`~keydesign.writetier.REPACK_MS` sizes the re-pack's sub-items instead: cut
    alike, their readings over up to ``batch_s`` (a re-pack slice, 300 s), keyed as
    :func:`keydesign.tiering.repack_slice` keys them (``s#<group>#<hour>`` / ``<sub>#<first ts>#...``)."""

    def __init__(
        self,
        sample: Reading,
        batch_s: float,
        *,
        retention_ms: int | None = None,
        span_limit_ms: int = MAX_BLOCK_SPAN_MS,
    ) -> None:
        self._sample = sample
        self._batch_ms = max(1, min(round(batch_s * 1000), span_limit_ms - 1))
        self._span_limit_ms = span_limit_ms
        self._retention_ms = retention_ms
        self._cache: dict[int, int] = {}

    def __call__(self, readings: int) -> int:
        return sum(self.items(readings))

    def items(self, readings: int) -> tuple[int, ...]:
        """The sizes of the items ``readings`` readings of a group and batch make."""
        full, rest = divmod(readings, MAX_BLOCK_READINGS)
        return split_sizes(MAX_BLOCK_READINGS, self._size) * full + (split_sizes(rest, self._size) if rest else ())

    def _size(self, readings: int) -> int:
        size = self._cache.get(readings)
        if size is None:
            size = self._cache[readings] = self._measure(readings)
        return size

    def _measure(self, count: int) -> int:
        rng = random.Random(count)
        sample = self._sample
        derived = sample.derived_id
        stem, width = _numbering(sample.entity_id)
        readings = []
        for number in rng.sample(range(10**width), count):
            entity = f"{stem}{number:0{width}d}"
            ts = _REFERENCE_MS + rng.randrange(self._batch_ms)
            measures = {key: _jitter(value, rng) for key, value in sample.measures.items()}
            event_id = (
                derive_event_id(entity, ts, measures, sample.dimensions)
                if derived
                else "".join(rng.choice("0123456789abcdef") for _ in sample.event_id)
            )
            readings.append(Reading(entity, event_id, ts, measures, dict(sample.dimensions)))
        readings.sort(key=lambda r: (r.ts_ms, r.entity_id, r.event_id))
        encoded = encode_group(readings, _VERSION, span_limit_ms=self._span_limit_ms)
        ttl = tier_ttl(_REFERENCE_MS, encoded.last_ms, self._retention_ms)
        if self._span_limit_ms == REPACK_MS:
            pk, stem = WriteTier(1).sub_pk(0, _REFERENCE_MS), sub_sk_stem(SUBGROUPS - 1, encoded)
        else:
            pk, stem = WriteTier(1).group_pk(0, _REFERENCE_MS), group_sk_stem(encoded)
        return keyed_item(pk, stem, encoded.payload, ttl)[1]


@dataclass(frozen=True, slots=True)
class WriteTierFigures:
    """What ingest writes with the write tier on (``groups`` groups; ``auto``: :func:`auto_groups` chose it).

    Entities with fewer than DENSE_READINGS readings a batch are *sparse*: their readings go to group
    items (``readings_per_item`` each on average, ``item_bytes`` big; :func:`group_cuts`, and the G search
    :func:`auto_groups` as the design table does it, an item a batch); the others keep their blocks and
    put a dense mark an hour. ``write_units_per_reading`` counts every write ingest makes for the readings
    (group items, dense blocks, dense marks; not the rollup marks, unchanged); ``group_item_bytes_per_reading``
    is what a reading takes in a group item (item + 100 B), kept ``KEEP_MS`` past its hour.
    """

    groups: int
    auto: bool
    sparse_readings_per_s: float
    dense_readings_per_s: float
    readings_per_item: float
    item_bytes: float
    items_per_s: float
    write_units_per_reading: float
    group_write_units_per_reading: float
    group_item_bytes_per_reading: float
    dense_marks_per_s: float


def write_tier_figures(
    workload: Workload, batch_s: float, blocks: tuple[EntityBlocks, ...], *, groups: int | None = None
) -> WriteTierFigures:
    """The write tier's figures for ``workload`` at batches of ``batch_s`` (``groups`` None: G auto)."""
    _, count = workload.typical()
    weights = [count] + [1] * (len(blocks) - 1)
    sparse = [(w, b) for w, b in zip(weights, blocks, strict=True) if b.readings_per_batch < DENSE_READINGS]
    dense = [(w, b) for w, b in zip(weights, blocks, strict=True) if b.readings_per_batch >= DENSE_READINGS]
    sparse_rate = sum(w * b.readings_per_s for w, b in sparse)
    dense_rate = sum(w * b.readings_per_s for w, b in dense)
    retention_ms = round(workload.retention_days * 86_400_000)
    sizer = GroupSizer(workload.sample, batch_s, retention_ms=retention_ms)
    chosen = groups if groups is not None else auto_groups(sparse_rate, batch_s, sizer)
    # per batch of a group: items, their readings, write units and billed bytes
    items = readings = units = stored = 0.0
    if sparse_rate:
        for count, per_batch in group_cuts(sparse_rate / chosen * batch_s, batch_s).items():
            sizes = sizer.items(count)
            items += per_batch * len(sizes)
            readings += per_batch * count
            units += per_batch * sum(write_units(s) for s in sizes)
            stored += per_batch * sum(s + STORAGE_OVERHEAD_BYTES for s in sizes)
    batches_per_s = chosen / batch_s
    marks = sum(w for w, _ in dense) / 3600  # a dense mark per dense entity and hour
    return WriteTierFigures(
        groups=chosen,
        auto=groups is None,
        sparse_readings_per_s=sparse_rate,
        dense_readings_per_s=dense_rate,
        readings_per_item=readings / items if items else 0.0,
        item_bytes=(stored / items - STORAGE_OVERHEAD_BYTES) if items else 0.0,
        items_per_s=items * batches_per_s,
        write_units_per_reading=(units * batches_per_s + sum(w * b.wcu for w, b in dense) + marks)
        / (sparse_rate + dense_rate),
        group_write_units_per_reading=units / readings if readings else 0.0,
        group_item_bytes_per_reading=stored / readings if readings else 0.0,
        dense_marks_per_s=marks,
    )


# -- the deployment in parts ------------------------------------------------------------------
#
# What the deployment writes, reads and stores with the write tier on (docs/writetier.md, docs/rollups.md):
# ingest puts group items (entities under DENSE_READINGS a batch), dense entities' own blocks and a dense mark
# per dense entity-hour; compaction re-packs each group's settled 5-minute slices (reads the slice's items once,
# strongly consistent, and puts a sub-item per sub-group with readings), reads each group's hour once and puts
# a compacted block per entity-hour (cut by the block limits), a group partial per group-hour and its part of the fleet
# totals (each finest interval and the hour, and the day recombined, every hour); a compaction-owned entity
# has no rollup item of its own (its compacted blocks are its figures). The rollup function keeps the
# rollup-owned (dense) entities as before: a mark and a rollup per entity-minute, -hour and -day, the totals
# and its state every minute. Shared with ``benchmarks.write_tier`` (its design table prices the same parts).

#: The scheduled functions as the stack sizes them (infra/config.py): memory, how often they run, and the
#: calls they make, :data:`CALL_S` each, :data:`IN_FLIGHT` at a time (compaction's CONCURRENCY).
FUNCTION_MEMORY_MB = 1_024
COMPACTION_EVERY_S = 300
ROLLUP_EVERY_S = 60
CALL_S = 0.010
IN_FLIGHT = 16
BATCH_WRITE = 25
PAGE_BYTES = 1024 * 1024
#: CPU a reading takes, measured (docs/benchmarks.md): compaction decodes it from a group item, encodes it
#: in a block and adds it to a partial (the ``compaction`` benchmark: 7.76 s for 217,021 readings); the rollup
#: function decodes a block reading and adds it to a minute (the ``rollups`` keep-up run: 14.2 s for a minute
#: of 3 million readings, 6.9 s of it its 11,094 calls).
COMPACTION_MS_PER_READING = 0.036
ROLLUP_MS_PER_READING = 0.0024
#: The rollup levels priced: the stack's default ``1m,1h,1d``.
MINUTE_S, HOUR_S, DAY_S = 60, 3_600, 86_400
LEVELS_S = (MINUTE_S, HOUR_S, DAY_S)
KEEP_S = KEEP_MS / 1000
REPACK_S = REPACK_MS / 1000

#: The parts, in the order they are printed; ``ingest``'s are put at the peak's rate (provisioned capacity).
PARTS = (
    "group items",
    "entities' own blocks",
    "dense marks",
    "compacted blocks",
    "sub-items (re-pack)",
    "slice partials (re-pack)",
    "group partials",
    "compaction's totals",
    "compaction's reads and state",
    "compaction Lambda",
    "marks and rollups (rollup-owned)",
    "rollup totals and state",
    "rollup Lambda",
    "queries",
    "stream",
    "ingest Lambda",
)
INGEST_PARTS = frozenset({"group items", "entities' own blocks", "dense marks"})


@dataclass(frozen=True, slots=True)
class Kind:
    """Entities alike: how many, each one's readings/s, what its own blocks cost a reading (write units,
    billed bytes: item + 100), and whether it is sparse (under DENSE_READINGS a batch: group items)."""

    entities: float
    rate: float
    block_wu: float
    block_bytes: float
    sparse: bool

    @property
    def readings(self) -> float:
        return self.entities * self.rate

    def intervals(self, size_s: float) -> float:
        """Entity-intervals of ``size_s`` holding readings, per second."""
        return self.entities * min(self.rate, 1 / size_s)


@dataclass(frozen=True, slots=True)
class ItemSizes:
    """Bytes of what the parts are made of: ``compacted(k, m)`` the cluster blocks of a cluster's hour of
    ``k`` entities of ``m`` readings each, ``partial(r)`` a group partial of a group getting ``r`` readings a
    minute (``partial(r, REPACK_S // MINUTE_S)``: the re-pack's slice partial), a fleet total, an entity's
    rollup, a rollup mark and a dense mark; ``sub(m)`` the sub-items of a sub-group's ``m`` readings of a
    re-pack slice (None: the re-pack is not priced, as ``benchmarks.write_tier``'s design tables price it
    apart)."""

    compacted: Callable[[int, int], Sequence[int]]
    partial: Callable[[float, int], int]
    total: int
    rollup: int
    mark: int
    dense_mark: int
    sub: Callable[[int], Sequence[int]] | None = None


@dataclass(slots=True)
class PartRates:
    """One part, per second on average: write units, read units (strongly consistent: a unit per 4 KB),
    bytes at rest (item + 100, steady state), Lambda GB-seconds and requests."""

    wu: float = 0.0
    ru: float = 0.0
    at_rest: float = 0.0
    gb_s: float = 0.0
    requests: float = 0.0


def item_sizes(
    measures: Callable[[random.Random], dict[str, int | float]],
    entity: str,
    prefix: str,
    compacted: Callable[[int, int], Sequence[int]],
    sub: Callable[[int], Sequence[int]] | None = None,
) -> ItemSizes:
    """The items' sizes, ``compacted`` and ``sub`` given (:meth:`BlockSizer.compacted`, :meth:`GroupSizer.items`
    at the re-pack's span), the others measured: figures of readings whose measures ``measures(rng)`` draws,
    keyed as the stack keys them (``prefix``: the table's)."""

    def figures(count: int, seed: int) -> Figures:
        rng, out = random.Random(seed), Figures()
        for _ in range(max(1, min(count, 20))):  # the sums' text, not the count, sets the size
            out.add(measures(rng))
        return out

    def partial(per_minute: float, minutes: int) -> int:
        group = GroupPartial(_REFERENCE_MS, 0, MAX_GROUPS, slice_ms=_REFERENCE_MS if minutes < 60 else None)
        for minute in range(minutes):
            group.intervals[_REFERENCE_MS + minute * 60_000] = figures(round(per_minute), minute)
        return item_size(group.item(prefix, 1))

    start = _REFERENCE_MS
    total = {"pk": total_pk(prefix, 60_000, start), "sk": total_sk(start, fleet_part=True), "ttl": 1}
    rollup = {"pk": rollup_pk(prefix, 60_000, start, 31), "sk": entity, "ttl": 1}
    pk, sk = Mark.of(start, 60_000, start, entity).key(prefix)
    return ItemSizes(
        compacted=compacted,
        partial=partial,
        total=item_size({**total, **figures(1_000, 2).item()}),
        rollup=item_size({**rollup, **figures(5, 0).item()}),
        mark=item_size({"pk": pk, "sk": sk, "ttl": 1}),
        dense_mark=item_size({"pk": WriteTier(1).group_pk(0, start), "sk": dense_mark_sk(entity), "ttl": 1}),
        sub=sub,
    )


def deployment_rates(
    kinds: Sequence[Kind],
    sizes: ItemSizes,
    *,
    groups: int,
    group_items: tuple[float, float],
    retention_s: float,
) -> dict[str, PartRates]:
    """DynamoDB's and the scheduled functions' parts of the deployment (see above), per second, for entities
    ``kinds`` with the write tier's ``groups`` (0: no write tier) whose group items take ``group_items``
    (write units/s, bytes/s put: item + 100 each)."""
    parts = {name: PartRates() for name in PARTS[: PARTS.index("rollup Lambda") + 1]}
    sparse = [k for k in kinds if k.sparse]
    dense = [k for k in kinds if not k.sparse]
    gb = FUNCTION_MEMORY_MB / 1024
    for kind in dense:
        own = parts["entities' own blocks"]
        own.wu += kind.readings * kind.block_wu
        own.at_rest += kind.readings * kind.block_bytes * retention_s
        if groups:  # a dense mark per entity-hour, in its group's partition of the hour
            marks = parts["dense marks"]
            marks.wu += kind.intervals(HOUR_S)
            marks.at_rest += kind.intervals(HOUR_S) * (sizes.dense_mark + STORAGE_OVERHEAD_BYTES) * KEEP_S
    sparse_rate = sum(k.readings for k in sparse)
    if groups and sparse_rate:
        calls = _compaction(parts, sparse, sizes, groups=groups, group_items=group_items, retention_s=retention_s)
        # the re-pack handles each reading once more: the CPU a reading is compaction's (it decodes a group
        # item and encodes one), not measured for the re-pack on its own
        passes = 1
        if sizes.sub is not None:
            calls += _repack(
                parts, sparse_rate, sizes.sub, dense_mark=sizes.dense_mark, groups=groups, put=group_items[1]
            )
            calls += _fresh_totals(parts, sparse_rate, sizes, groups=groups, retention_s=retention_s)
            passes = 2
        parts["compaction Lambda"] = PartRates(
            gb_s=gb * (passes * sparse_rate * COMPACTION_MS_PER_READING / 1000 + calls * CALL_S / IN_FLIGHT),
            requests=1 / COMPACTION_EVERY_S,
        )
    # the rollup function: every minute its state, the hour's marked-minutes index and, in a minute with
    # marks (rollup-owned entities write every minute), the mark shards; rollup-owned entities as before
    owned = parts["marks and rollups (rollup-owned)"]
    control_reads = 2 + (MARK_SHARDS if dense else 0)
    calls = (control_reads + 1) / MINUTE_S
    for kind in dense:
        for level in LEVELS_S:
            intervals = kind.intervals(level)
            owned.wu += 2 * intervals  # a mark and a rollup
            owned.at_rest += intervals * (sizes.rollup + sizes.mark + 2 * STORAGE_OVERHEAD_BYTES) * retention_s
            # the interval recomputed from its source: its raw minute, or the finer level's rollups
            source = kind.rate * MINUTE_S * kind.block_bytes if level == MINUTE_S else 60 * sizes.rollup
            owned.ru += intervals * math.ceil(source / READ_UNIT_BYTES)
            calls += intervals * (1 + 2 / BATCH_WRITE)
    totals = parts["rollup totals and state"]
    totals.wu = 1 / MINUTE_S  # its state
    totals.ru = control_reads / MINUTE_S
    if dense:  # each minute the totals of the minute, hour and day, from every rollup-owned entity's rollups
        entities = sum(k.entities for k in dense)
        totals.wu += 3 / MINUTE_S
        totals.at_rest = sum(1 / level for level in LEVELS_S) * (sizes.total + STORAGE_OVERHEAD_BYTES) * retention_s
        totals.ru += len(LEVELS_S) * math.ceil(entities * sizes.rollup / READ_UNIT_BYTES) / MINUTE_S
    dense_rate = sum(k.readings for k in dense)
    parts["rollup Lambda"] = PartRates(
        gb_s=gb * (dense_rate * ROLLUP_MS_PER_READING / 1000 + calls * CALL_S / IN_FLIGHT), requests=1 / ROLLUP_EVERY_S
    )
    return parts


def _compaction(
    parts: dict[str, PartRates],
    sparse: Sequence[Kind],
    sizes: ItemSizes,
    *,
    groups: int,
    group_items: tuple[float, float],
    retention_s: float,
) -> float:
    """Put the group items and what compaction makes of them in ``parts``; return its calls a second."""
    units, put = group_items
    tier = parts["group items"]
    tier.wu, tier.at_rest = units, put * KEEP_S
    # each group's hour read once (its items and dense marks), 1 MB pages
    group_hour = (put + parts["dense marks"].wu * (sizes.dense_mark + STORAGE_OVERHEAD_BYTES)) / groups * HOUR_S
    reads = parts["compaction's reads and state"]
    reads.ru = groups * math.ceil(group_hour / READ_UNIT_BYTES) / HOUR_S
    calls = groups * math.ceil(group_hour / PAGE_BYTES) / HOUR_S
    blocks = parts["compacted blocks"]
    clusters = groups * CLUSTERS / HOUR_S  # cluster-hours a second
    for kind in sparse:
        # the entities of a cluster's hour with readings (Poisson), each with an hour of readings
        per_cluster = kind.intervals(HOUR_S) / clusters
        readings = max(1, round(kind.rate * HOUR_S))
        for count, chance in poisson_counts(per_cluster).items():
            made = sizes.compacted(count, readings)
            blocks.wu += clusters * chance * sum(write_units(size) for size in made)
            blocks.at_rest += clusters * chance * sum(size + STORAGE_OVERHEAD_BYTES for size in made) * retention_s
            calls += clusters * chance * len(made) / BATCH_WRITE
    sparse_rate = sum(k.readings for k in sparse)
    partial = sizes.partial(sparse_rate / groups * MINUTE_S, 60)
    partials = parts["group partials"]
    partials.wu = groups / HOUR_S * write_units(partial)
    partials.at_rest = groups / HOUR_S * (partial + STORAGE_OVERHEAD_BYTES) * KEEP_S
    # the hour's partials read back (one Query), its 60 minutes and hour put, the day recombined from its
    # hours' parts (one Query) and put: every hour
    totals = parts["compaction's totals"]
    totals.wu = 62 / HOUR_S * write_units(sizes.total)
    totals.at_rest = (61 / HOUR_S + 1 / DAY_S) * (sizes.total + STORAGE_OVERHEAD_BYTES) * retention_s
    totals.ru = (math.ceil(groups * partial / READ_UNIT_BYTES) + math.ceil(24 * sizes.total / READ_UNIT_BYTES)) / HOUR_S
    calls += (groups / BATCH_WRITE + math.ceil(groups * partial / PAGE_BYTES) + 62 / BATCH_WRITE + 1) / HOUR_S
    # its watermark: a put a step (IN_FLIGHT groups), a consistent read a run
    steps = math.ceil(groups / IN_FLIGHT)
    reads.wu = steps / HOUR_S
    reads.ru += 1 / COMPACTION_EVERY_S
    return calls + steps / HOUR_S + 1 / COMPACTION_EVERY_S


def _fresh_totals(
    parts: dict[str, PartRates], sparse_rate: float, sizes: ItemSizes, *, groups: int, retention_s: float
) -> float:
    """Put the re-pack's slice partials in ``parts``, and the fresh parts of the minute totals in compaction's
    totals (docs/rollups.md, "Fresh minute totals"); return their calls a second. Every settled slice of every
    group: a slice partial of its minutes, kept as the group items are (the left-out pairs of a dense entity's
    minutes, and their re-marks, are not priced: a fleet the write tier carries has none). After a slice's last
    group: the slice's partials read back (one Query, consistent, 1 MB pages) and a fresh part of each of its
    minutes put, kept as the totals are. The rollup function reads a slice partial only for a reading late
    past its slice, which is not priced either."""
    slices, minutes = groups / REPACK_S, int(REPACK_S // MINUTE_S)
    partial = sizes.partial(sparse_rate / groups * MINUTE_S, minutes)
    own = parts["slice partials (re-pack)"]
    own.wu = slices * write_units(partial)
    own.at_rest = slices * (partial + STORAGE_OVERHEAD_BYTES) * KEEP_S
    own.ru = math.ceil(groups * partial / READ_UNIT_BYTES) / REPACK_S
    totals = parts["compaction's totals"]
    totals.wu += minutes / REPACK_S * write_units(sizes.total)
    totals.at_rest += minutes / REPACK_S * (sizes.total + STORAGE_OVERHEAD_BYTES) * retention_s
    read_back = math.ceil(groups * partial / PAGE_BYTES) + math.ceil(minutes / BATCH_WRITE)
    return slices / BATCH_WRITE + read_back / REPACK_S


def _repack(
    parts: dict[str, PartRates],
    sparse_rate: float,
    sub: Callable[[int], Sequence[int]],
    *,
    dense_mark: int,
    groups: int,
    put: float,
) -> float:
    """Put the re-pack's sub-items in ``parts`` and its reads and state in compaction's, for group items put
    at ``put`` bytes/s (item + 100 each), ``sub(m)`` the sub-items of a sub-group's ``m`` readings of a slice
    and ``dense_mark`` a dense mark's bytes; return its calls a second.

    Every settled slice of every group: each sub-group holding readings of it makes a sub-item of them (or
    its halves), kept as the group items are; none is late (the slice rule). Each count of readings a
    sub-group may hold is weighed by its probability (:func:`poisson_counts`), not the mean count alone
    (:func:`poisson_fill`): seed 003's sub-item at G = 1,024 (71 readings) sits on the 1 KB of a write unit,
    where the mean's size is 10% off what :func:`keydesign.tiering.repack_slice` puts. The slice's items are
    read once (one Query, 1 MB pages) and the hour's dense marks (one Query, a unit at least); sub-items are
    put 25 a call, the state once a step of IN_FLIGHT groups."""
    slices = groups / REPACK_S  # group-slices re-packed a second
    items = units = stored = 0.0  # a sub-group's, a slice
    for count, chance in poisson_counts(sparse_rate / groups * REPACK_S / SUBGROUPS).items():
        made = sub(count)
        items += chance * len(made)
        units += chance * sum(write_units(size) for size in made)
        stored += chance * sum(size + STORAGE_OVERHEAD_BYTES for size in made)
    subs = parts["sub-items (re-pack)"]
    subs.wu = slices * SUBGROUPS * units
    subs.at_rest = slices * SUBGROUPS * stored * KEEP_S
    group_slice = put / groups * REPACK_S
    marks_hour = parts["dense marks"].wu * (dense_mark + STORAGE_OVERHEAD_BYTES) / groups * HOUR_S
    reads = parts["compaction's reads and state"]
    reads.ru += slices * (math.ceil(group_slice / READ_UNIT_BYTES) + max(1, math.ceil(marks_hour / READ_UNIT_BYTES)))
    steps = math.ceil(groups / IN_FLIGHT) / REPACK_S
    reads.wu += steps
    pages = math.ceil(group_slice / PAGE_BYTES) + max(1, math.ceil(marks_hour / PAGE_BYTES))
    return slices * (pages + SUBGROUPS * items / BATCH_WRITE) + steps
