"""The simulation: per-second reading counts -> batches -> blocks -> partition keys -> load, for several layouts.

Per chunk of seconds (a few tens of seconds; never across a bucket boundary
or a detector window), the workload's counts ``C[second, entity]`` are drawn
once and turned into the blocks each entity's ingest batches write, second by
second (:mod:`.blocks`: the same arithmetic as ``Layout.pack``, on arrays).
Every layout then distributes the same blocks over its own keys
(:mod:`.keyspace`):

* an entity with one key in the bucket puts all its blocks there;
* an entity with k keys of its own spreads them uniformly: each *block* picks a
  key independently (a random suffix, or the hash of its block id, which is as
  uniform), so the split of a second's blocks is multinomial; each key takes
  the write units and bytes of the blocks it got (in proportion, when one
  second's blocks differ in size). It is drawn per chunk; layouts that split
  the same entities the same number of ways (for example ``random:4`` and
  ``calculated:4``) share one draw, so they show the same figures: they differ
  on redelivery and reads, not on load.

The load of key k in second t is the write units of the blocks written to it
then. A key-second over 1,000 WCU is throttled. Adaptive layouts advance the
hot-key detector before each chunk, so a change it schedules applies from its
boundary on (see :mod:`.adaptive`).

Cost grows with seconds x (entities + keys), not with readings: an hour of
50,000 readings/s is a few thousand array steps over 10,000 entities and their
keys, not 180 million readings packed.
"""

from __future__ import annotations

import math
import time
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from keydesign import Ingest, InvalidInput, Layout, ShardMap, Workload, plan_capacity, shards_for
from keydesign.capacity import PARTITION_WCU, TYPICAL, entity_blocks, sizer_for, stream_figures
from keydesign.layouts import CAPABILITIES, LAYOUTS, LayoutKind
from keydesign.shardmap import MAX_ENTITY_SHARDS, MAX_GLOBAL_SHARDS

from .adaptive import AdaptiveSettings, DetectorDriver, MapChange
from .blocks import Batcher, BlockTable, Emitted
from .keyspace import KeyTable, build_key_table
from .reads import ReadContext, ReadFigure, ReadPattern, measure_reads
from .workload import CountProvider, CountSource, SimWorkload

Ints = npt.NDArray[np.int64]
#: Cells (seconds x keys) one chunk may hold in memory per layout.
MAX_CHUNK_CELLS = 4_000_000
TABLE_PREFIX = "readings"


# -- layouts ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LayoutSpec:
    """A layout to simulate: the kind, the global N (hybrid) or suffix count, and whether it adapts."""

    kind: LayoutKind
    shards: int
    adaptive: bool = False
    shard_map: ShardMap | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        return f"{'adaptive' if self.adaptive else self.kind}:{self.shards}"


def planner_workload(workload: SimWorkload, utilisation: float = 0.5) -> Workload:
    """``workload`` as the capacity planner describes it (its peak, with every hot entity bursting)."""
    return Workload(
        peak_writes_per_s=workload.rate,
        entities=workload.entities,
        hot_entities={h.entity_id: h.rate for h in workload.hot},
        sample=workload.sample,
        ingest=Ingest(batching_window_s=workload.batching_window_s),
        utilisation=utilisation,
    )


def default_shards(workload: SimWorkload, utilisation: float) -> tuple[int, int]:
    """(global N of the hybrid layout from ``plan_capacity``, suffixes the hottest entity's blocks need)."""
    described = planner_workload(workload, utilisation)
    plan = plan_capacity(described)
    # With a Zipf skew the top background entity writes more than the plan's typical one.
    top = entity_blocks(TYPICAL, workload.peak_entity_rate(), plan.stream.batch_s, sizer_for(described))
    return plan.global_shards, shards_for(max(top.wcu, *(b.wcu for b in plan.blocks)), utilisation)


def parse_layout_spec(text: str, *, hybrid_shards: int, suffixes: int) -> LayoutSpec:
    """``random[:n]``, ``calculated[:n]``, ``hybrid[:N]`` or ``adaptive[:N]`` (hybrid, detector-driven).

    Without a count, hybrid layouts take ``hybrid_shards`` (the capacity plan's N) and
    random/calculated take ``suffixes`` (what the hottest entity needs).
    """
    name, sep, count = text.strip().partition(":")
    kinds = (*LAYOUTS, "adaptive")
    if name not in kinds:
        raise InvalidInput("layouts", f"{name!r} is not one of {', '.join(kinds)} (with an optional :N)")
    kind: LayoutKind = "hybrid" if name == "adaptive" else next(k for k in LAYOUTS if k == name)
    shared = CAPABILITIES[kind].shared_partitions
    limit = MAX_GLOBAL_SHARDS if shared else MAX_ENTITY_SHARDS
    if sep:
        if not count.isdigit() or not 1 <= int(count) <= limit:
            raise InvalidInput("layouts", f"{text!r}: the count must be a whole number from 1 to {limit}")
        shards = int(count)
    else:
        shards = hybrid_shards if shared else suffixes
    return LayoutSpec(kind, min(shards, limit), adaptive=name == "adaptive")


# -- results ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ThrottledKey:
    """A key that went over 1,000 WCU/s for ``seconds`` seconds, and who wrote most to it."""

    key: str
    bucket_start_ms: int
    seconds: int
    top_writer: str
    top_writer_share: float


@dataclass(frozen=True, slots=True)
class WriteFigures:
    """The write load of one layout over the run. Loads are WCU/s per partition key per second.

    ``p99_wcu``, ``mean_wcu`` and ``imbalance`` (hottest / mean) are over the
    key-seconds that took at least one write.
    """

    keys_written: int
    total_wcu: int
    hottest_wcu: int
    hottest_key: str
    hottest_at_ms: int
    p99_wcu: int
    mean_wcu: float
    imbalance: float
    throttled_key_seconds: int
    throttled_wcu: int
    throttled_keys: tuple[ThrottledKey, ...]

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["mean_wcu"], out["imbalance"] = round(self.mean_wcu, 2), round(self.imbalance, 2)
        out["throttled_keys"] = [
            {**t, "top_writer_share": round(t["top_writer_share"], 3)} for t in out["throttled_keys"]
        ]
        return out


@dataclass(frozen=True, slots=True)
class LayoutResult:
    spec: LayoutSpec
    writes: WriteFigures
    reads: tuple[ReadFigure, ...]
    changes: tuple[MapChange, ...]
    shard_map: ShardMap
    first_change_ms: int | None
    throttled_key_seconds_after_change: int | None
    hottest_wcu_after_change: int | None
    per_second_max_wcu: Ints

    def to_dict(self) -> dict[str, object]:
        per_minute = [
            int(self.per_second_max_wcu[i : i + 60].max()) for i in range(0, self.per_second_max_wcu.size, 60)
        ]
        return {
            "layout": self.spec.label,
            "kind": self.spec.kind,
            "shards": self.spec.shards,
            "adaptive": self.spec.adaptive,
            "writes": self.writes.to_dict(),
            "hottest_wcu_per_minute": per_minute,
            "changes": [c.to_dict() for c in self.changes],
            "first_change_ms": self.first_change_ms,
            "throttled_key_seconds_after_change": self.throttled_key_seconds_after_change,
            "hottest_wcu_after_change": self.hottest_wcu_after_change,
            "reads": [r.to_dict() for r in self.reads],
            "shard_map": self.shard_map.to_dict(),
        }


@dataclass(slots=True)
class SimulationResult:
    workload: SimWorkload
    bucket: str
    adaptive: AdaptiveSettings
    reads: ReadPattern
    layouts: list[LayoutResult]
    wall_seconds: float
    simulated_writes: int
    chunk_seconds: int
    batch_seconds: int
    #: With ``record=True`` only (small runs, tests): write units per (second, key) per layout, and readings
    #: per (second, entity).
    recorded: dict[str, Counter[tuple[int, str]]] | None = None
    entity_counts: Counter[tuple[int, str]] | None = None

    def layout(self, label: str) -> LayoutResult:
        for result in self.layouts:
            if result.spec.label == label:
                return result
        raise KeyError(label)

    def to_dict(self) -> dict[str, object]:
        return {
            "workload": self.workload.to_dict(),
            "bucket": self.bucket,
            "detector": self.adaptive.to_dict(),
            "reads": self.reads.to_dict(),
            "layouts": [r.to_dict() for r in self.layouts],
            "run": {
                "wall_seconds": round(self.wall_seconds, 2),
                "simulated_writes": self.simulated_writes,
                "chunk_seconds": self.chunk_seconds,
                "batch_seconds": self.batch_seconds,
            },
        }


# -- the run ----------------------------------------------------------------------------


class _Splitter:
    """Multinomial splits of counts over k keys, drawn once per chunk per (k, entities)."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._rngs: dict[tuple[int, int, int], np.random.Generator] = {}
        self._chunk: dict[tuple[int, int, int], Ints] = {}

    def new_chunk(self) -> None:
        self._chunk.clear()

    def split(self, counts: Ints, ways: int, entities: Ints) -> Ints:
        """``counts`` (seconds x m) split ``ways`` ways uniformly: (seconds x m x ways)."""
        key = (ways, zlib.crc32(entities.tobytes()), entities.size)
        cached = self._chunk.get(key)
        if cached is not None:
            return cached
        rng = self._rngs.get(key)
        if rng is None:
            rng = self._rngs[key] = np.random.default_rng([self._seed, 3, ways, key[1]])
        flat = counts.ravel()
        # One uniform draw per write, counted per (cell, way): exact, and cheaper than k-1 binomial passes.
        owner = np.repeat(np.arange(flat.size, dtype=np.int64), flat)
        pick = rng.integers(0, ways, size=owner.size)
        out = np.bincount(owner * ways + pick, minlength=flat.size * ways).astype(np.int64)
        result = out.reshape(*counts.shape, ways)
        self._chunk[key] = result
        return result


def _share(totals: Ints, parts: Ints, blocks: Ints) -> Ints:
    """``totals`` (seconds x m: units, bytes or readings of the blocks) over the ways the blocks went
    (``parts``: seconds x m x ways), in proportion to blocks; the rounding goes to the busiest way."""
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(blocks[..., None] > 0, totals[..., None] * parts // np.maximum(blocks, 1)[..., None], 0)
    rest = totals - share.sum(axis=-1)
    busiest = parts.argmax(axis=-1)[..., None]
    np.put_along_axis(share, busiest, np.take_along_axis(share, busiest, axis=-1) + rest[..., None], axis=-1)
    return share.astype(np.int64)


class _WriteStats:
    """Write units per key-second over the run: the hottest, the histogram, what throttled."""

    def __init__(self, start_ms: int, duration_s: int) -> None:
        self.start_ms = start_ms
        self.max_per_second = np.zeros(duration_s, dtype=np.int64)
        self.throttled_per_second = np.zeros(duration_s, dtype=np.int64)
        self.histogram = np.zeros(1, dtype=np.int64)  # active key-seconds by write units
        self.total_units = 0
        self.throttled_wcu = 0
        self.hottest = (0, "", 0)
        self.throttled_by_key: Counter[tuple[int, str]] = Counter()

    def add(self, chunk_ms: int, load: Ints, table: KeyTable) -> None:
        offset = (chunk_ms - self.start_ms) // 1000
        seconds = load.shape[0]
        row_max = load.max(axis=1) if load.shape[1] else np.zeros(seconds, dtype=np.int64)
        self.max_per_second[offset : offset + seconds] = row_max
        if row_max.size and row_max.max() > self.hottest[0]:
            row = int(row_max.argmax())
            column = int(load[row].argmax())
            self.hottest = (int(load[row, column]), table.names[column], chunk_ms + row * 1000)
        active = load[load > 0]
        counts = np.bincount(active)
        if counts.size > self.histogram.size:
            counts[: self.histogram.size] += self.histogram
            self.histogram = counts
        else:
            self.histogram[: counts.size] += counts
        self.total_units += int(active.sum())
        over = load > PARTITION_WCU
        self.throttled_per_second[offset : offset + seconds] = over.sum(axis=1)
        if over.any():
            self.throttled_wcu += int((load[over] - PARTITION_WCU).sum())
            for column in np.flatnonzero(over.any(axis=0)).tolist():
                self.throttled_by_key[(table.bucket_start_ms, table.names[column])] += int(over[:, column].sum())

    def percentile(self, q: float) -> int:
        """The load (WCU/s) at or under which a share ``q`` of the active key-seconds lie."""
        cumulative = np.cumsum(self.histogram)
        if cumulative[-1] == 0:
            return 0
        return int(np.searchsorted(cumulative, q * cumulative[-1]))

    @property
    def active_key_seconds(self) -> int:
        return int(self.histogram.sum())


#: Per key (or per tracked entity's key), what its blocks hold: blocks, write units, bytes, readings.
BLOCKS, UNITS, BYTES, READINGS = range(4)


class _LayoutRun:
    """One layout through the run: its key tables, its map (fixed or adaptive), its load and figures."""

    def __init__(self, spec: LayoutSpec, sim: Simulation) -> None:
        self.spec = spec
        self.sim = sim
        workload = sim.workload
        self.layout = Layout.from_settings(kind=spec.kind, bucket=sim.bucket, table_prefix=TABLE_PREFIX)
        initial = spec.shard_map if spec.shard_map is not None else ShardMap.initial(self.layout.bucket, spec.shards)
        self.layout.check_shard_map(initial)
        self.fixed_map = initial
        self.driver: DetectorDriver | None = None
        if spec.adaptive:
            sim.adaptive.validate(self.layout)
            self.driver = DetectorDriver(self.layout, initial, sim.adaptive)
        self.tables: dict[int, KeyTable] = {}
        #: Per bucket: (blocks, units, bytes, readings) x keys.
        self.key_totals: dict[int, Ints] = {}
        self.stats = _WriteStats(workload.start_ms, workload.duration_s)
        #: Per tracked entity and key: (blocks, units, bytes, readings) x seconds of the run.
        self.tracked: dict[str, dict[str, Ints]] = {e: {} for e in sim.reads.entities}
        self.window_units: Ints | None = None
        self.window_multi: dict[int, Ints] = {}
        self.recorded: Counter[tuple[int, str]] | None = Counter() if sim.record else None

    @property
    def shard_map(self) -> ShardMap:
        return self.driver.shard_map if self.driver is not None else self.fixed_map

    def table(self, bucket_start: int) -> KeyTable:
        table = self.tables.get(bucket_start)
        if table is None:
            table = self.tables[bucket_start] = build_key_table(
                self.layout, self.shard_map, self.sim.workload.names, bucket_start
            )
            self.key_totals[bucket_start] = np.zeros((4, table.keys), dtype=np.int64)
        return table

    def process(self, chunk_ms: int, emitted: Emitted) -> None:
        sim = self.sim
        table = self.table(self.layout.bucket.start(chunk_ms))
        columns = (emitted.blocks, emitted.units, emitted.bytes, emitted.readings)
        seconds, keys = emitted.units.shape[0], table.keys
        # Write units per key-second (the load); blocks, bytes and readings per key only in all (reads need no more).
        load = np.zeros((seconds, keys), dtype=np.int64)
        totals = np.zeros((4, keys), dtype=np.int64)
        single = table.single_key_entities()
        if single.size:
            cells = (np.arange(seconds, dtype=np.int64)[:, None] * keys + table.first[single][None, :]).ravel()
            spread = np.bincount(cells, weights=emitted.units[:, single].ravel(), minlength=seconds * keys)
            load += spread.astype(np.int64).reshape(seconds, keys)
            for column, values in enumerate(columns):
                sums = values[:, single].sum(axis=0)
                totals[column] += np.bincount(table.first[single], weights=sums, minlength=keys).astype(np.int64)
        splits: dict[int, tuple[Ints, Ints]] = {}
        for ways, entities in table.multi_key_groups().items():
            blocks = emitted.blocks[:, entities]
            parts = sim.splitter.split(blocks, ways, entities)
            shares = np.stack([parts, *(_share(v[:, entities], parts, blocks) for v in columns[1:])])
            ids = (table.first[entities][:, None] + np.arange(ways, dtype=np.int64)[None, :]).ravel()
            load[:, ids] += shares[UNITS].reshape(seconds, -1)
            totals[:, ids] += shares.sum(axis=1).reshape(4, -1)
            splits[ways] = (entities, shares)
        self.stats.add(chunk_ms, load, table)
        self.key_totals[table.bucket_start_ms] += totals
        self._track_reads(chunk_ms, columns, table, splits)
        if self.driver is not None:
            self._observe(chunk_ms, emitted.units, table, splits)
        if self.recorded is not None:
            for row, column in zip(*np.nonzero(load), strict=True):
                self.recorded[(chunk_ms + int(row) * 1000, table.names[column])] += int(load[row, column])

    def _entity_parts(self, entity: int, splits: dict[int, tuple[Ints, Ints]]) -> Ints:
        """(blocks, units, bytes, readings) x seconds x ways of an entity with several keys."""
        for entities, shares in splits.values():
            position = np.flatnonzero(entities == entity)
            if position.size:
                return shares[:, :, int(position[0]), :]
        raise AssertionError(f"entity {entity} has several keys but no split")

    def _track_reads(
        self, chunk_ms: int, columns: tuple[Ints, ...], table: KeyTable, splits: dict[int, tuple[Ints, Ints]]
    ) -> None:
        offset = (chunk_ms - self.sim.workload.start_ms) // 1000
        seconds = columns[0].shape[0]
        for name, tracks in self.tracked.items():
            entity = self.sim.index[name]
            keys = table.entity_keys(entity)
            if len(keys) == 1:
                parts = np.stack([c[:, entity : entity + 1] for c in columns])
            else:
                parts = self._entity_parts(entity, splits)
            for j, pk in enumerate(keys):
                track = tracks.get(pk)
                if track is None:
                    track = tracks[pk] = np.zeros((4, self.sim.workload.duration_s), dtype=np.int64)
                track[:, offset : offset + seconds] += parts[:, :, j]

    def _observe(self, chunk_ms: int, units: Ints, table: KeyTable, splits: dict[int, tuple[Ints, Ints]]) -> None:
        driver = self.driver
        if driver is None:
            return
        window = self.sim.adaptive.detector.window_ms
        if self.window_units is None:
            self.window_units = np.zeros(units.shape[1], dtype=np.int64)
        self.window_units += units.sum(axis=0)
        for entities, shares in splits.values():
            for position, entity in enumerate(entities.tolist()):
                acc = self.window_multi.get(entity)
                self.window_multi[entity] = shares[UNITS, :, position, :].sum(axis=0) + (0 if acc is None else acc)
        chunk_end = chunk_ms + units.shape[0] * 1000
        if chunk_end % window:
            return
        window_start = chunk_end - window
        names = self.sim.workload.names
        written = self.window_units
        for entity in np.flatnonzero((written > 0) & (table.count == 1)).tolist():
            key = int(table.first[entity])
            driver.observe(
                window_start, table.names[key], names[entity], int(written[entity]), shared=bool(table.shared[key])
            )
        for entity, per_key in self.window_multi.items():
            first = int(table.first[entity])
            for j, n in enumerate(per_key.tolist()):
                if n:
                    key = first + j
                    driver.observe(window_start, table.names[key], names[entity], n, shared=bool(table.shared[key]))
        self.window_units = None
        self.window_multi = {}

    # -- figures ----------------------------------------------------------------------------

    def result(self, reads: tuple[ReadFigure, ...]) -> LayoutResult:
        stats = self.stats
        keys_written: set[str] = set()
        for bucket, totals in self.key_totals.items():
            names = self.tables[bucket].names
            keys_written.update(names[i] for i in np.flatnonzero(totals[BLOCKS]).tolist())
        throttled = tuple(
            self._throttled_key(bucket, key, seconds)
            for (bucket, key), seconds in sorted(stats.throttled_by_key.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        mean = stats.total_units / stats.active_key_seconds if stats.active_key_seconds else 0.0
        hottest, hottest_key, hottest_at = stats.hottest
        writes = WriteFigures(
            keys_written=len(keys_written),
            total_wcu=stats.total_units,
            hottest_wcu=hottest,
            hottest_key=hottest_key,
            hottest_at_ms=hottest_at,
            p99_wcu=stats.percentile(0.99),
            mean_wcu=mean,
            imbalance=hottest / mean if mean else 0.0,
            throttled_key_seconds=int(stats.throttled_per_second.sum()),
            throttled_wcu=stats.throttled_wcu,
            throttled_keys=throttled,
        )
        first_change = self.driver.first_effective_ms() if self.driver is not None else None
        after_throttled = after_hottest = None
        start, end = self.sim.workload.start_ms, self.sim.workload.end_ms
        if first_change is not None and first_change < end:
            offset = max(0, (first_change - start) // 1000)
            after_throttled = int(stats.throttled_per_second[offset:].sum())
            after_hottest = int(stats.max_per_second[offset:].max())
        return LayoutResult(
            spec=self.spec,
            writes=writes,
            reads=reads,
            changes=tuple(self.driver.changes) if self.driver is not None else (),
            shard_map=self.shard_map,
            first_change_ms=first_change,
            throttled_key_seconds_after_change=after_throttled,
            hottest_wcu_after_change=after_hottest,
            per_second_max_wcu=stats.max_per_second,
        )

    def _throttled_key(self, bucket: int, key: str, seconds: int) -> ThrottledKey:
        table = self.tables[bucket]
        key_id = table.names.index(key)
        owners = np.flatnonzero((table.count > 1) & (table.first <= key_id) & (table.first + table.count > key_id))
        if owners.size:  # an entity's own key (sub-shard or suffix): it is the only writer
            return ThrottledKey(key, bucket, seconds, self.sim.workload.names[int(owners[0])], 1.0)
        entity_units = self.sim.bucket_entity_units[bucket]
        writers = np.flatnonzero((table.first == key_id) & (table.count == 1))
        top = int(writers[int(entity_units[writers].argmax())])
        total = int(self.key_totals[bucket][UNITS, key_id])
        share = int(entity_units[top]) / total if total else 0.0
        return ThrottledKey(key, bucket, seconds, self.sim.workload.names[top], share)

    def read_context(self) -> ReadContext:
        return ReadContext(
            layout=self.layout,
            shard_map=self.shard_map,
            workload=self.sim.workload,
            tables=self.tables,
            key_totals=self.key_totals,
            tracked=self.tracked,
            entity_rates=self.sim.mean_rates(),
            bytes_per_reading=self.sim.bytes_per_reading(),
            writes_per_second=self.sim.writes_per_second,
        )


class Simulation:
    """Runs ``layouts`` over ``workload`` side by side (same readings, same blocks for every layout)."""

    def __init__(
        self,
        workload: SimWorkload,
        layouts: Sequence[LayoutSpec],
        *,
        bucket: str = "1h",
        adaptive: AdaptiveSettings | None = None,
        reads: ReadPattern | None = None,
        record: bool = False,
        counts: CountProvider | None = None,
    ) -> None:
        if not layouts:
            raise InvalidInput("layouts", "name at least one layout")
        labels = [s.label for s in layouts]
        if len(set(labels)) != len(labels):
            raise InvalidInput("layouts", f"{sorted(label for label in labels if labels.count(label) > 1)[0]} twice")
        self.workload = workload
        self.bucket = bucket
        self.adaptive = adaptive or AdaptiveSettings()
        self.reads = reads or ReadPattern.default(workload)
        self.reads.validate(workload)
        self.record = record
        self.count_source: CountProvider = counts if counts is not None else CountSource(workload)
        self.index = {name: i for i, name in enumerate(workload.names)}
        self.splitter = _Splitter(workload.seed)
        self.batcher = _batcher(workload)
        self.writes_per_second = np.zeros(workload.duration_s, dtype=np.int64)
        self.entity_writes = np.zeros(workload.entities, dtype=np.int64)
        self.entity_bytes = np.zeros(workload.entities, dtype=np.int64)
        self.bucket_entity_units: defaultdict[int, Ints] = defaultdict(
            lambda: np.zeros(workload.entities, dtype=np.int64)
        )
        self.runs = [_LayoutRun(spec, self) for spec in layouts]
        self.chunk_seconds = self._chunk_seconds()

    def _chunk_seconds(self) -> int:
        """Chunks never cross a bucket, a detector window or a judging instant (window end + grace)."""
        bucket_s = self.runs[0].layout.bucket.width_ms // 1000
        step = math.gcd(bucket_s, 60)
        if any(r.driver is not None for r in self.runs):
            step = math.gcd(step, math.gcd(self.adaptive.detector.window_ms // 1000, self.adaptive.grace_ms // 1000))
        widest = max(self._keys_estimate(r.spec) for r in self.runs) + self.workload.entities
        while step > 1 and step * widest * 4 > MAX_CHUNK_CELLS:
            step = max(d for d in range(1, step) if step % d == 0)
        return step

    def _keys_estimate(self, spec: LayoutSpec) -> int:
        if CAPABILITIES[spec.kind].shared_partitions:
            return spec.shards + 64 * max(1, len(self.workload.hot))  # base keys and a few splits
        return self.workload.entities * spec.shards

    def mean_rates(self) -> npt.NDArray[np.float64]:
        """Each entity's mean readings/s over the run."""
        return self.entity_writes / self.workload.duration_s

    def bytes_per_reading(self) -> npt.NDArray[np.float64]:
        """Each entity's block bytes per reading over the run (0 for one that wrote nothing)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.entity_writes > 0, self.entity_bytes / np.maximum(self.entity_writes, 1), 0.0)

    def run(self) -> SimulationResult:
        started = time.perf_counter()
        workload = self.workload
        source = self.count_source
        step_ms = self.chunk_seconds * 1000
        bucket = self.runs[0].layout.bucket
        chunk_ms = workload.start_ms
        entity_counts: Counter[tuple[int, str]] | None = Counter() if self.record else None
        while chunk_ms < workload.end_ms:
            chunk_end = min(workload.end_ms, (chunk_ms // step_ms + 1) * step_ms)
            for run in self.runs:
                if run.driver is not None:
                    run.driver.advance(chunk_ms)
            first_s = (chunk_ms - workload.start_ms) // 1000
            seconds = (chunk_end - chunk_ms) // 1000
            counts = source.counts(first_s, seconds)
            # A bucket boundary (or the run's end) closes every batch: a block never straddles a bucket.
            close = chunk_end == workload.end_ms or bucket.is_boundary(chunk_end)
            emitted = self.batcher.step(first_s, counts, close=close)
            self.entity_writes += counts.sum(axis=0)
            self.entity_bytes += emitted.bytes.sum(axis=0)
            self.writes_per_second[first_s : first_s + seconds] = counts.sum(axis=1)
            self.bucket_entity_units[bucket.start(chunk_ms)] += emitted.units.sum(axis=0)
            if entity_counts is not None:
                for row, column in zip(*np.nonzero(counts), strict=True):
                    entity_counts[(chunk_ms + int(row) * 1000, workload.names[column])] += int(counts[row, column])
            self.splitter.new_chunk()
            for run in self.runs:
                run.process(chunk_ms, emitted)
            chunk_ms = chunk_end
        results = [run.result(measure_reads(run.read_context(), self.reads, run.spec.label)) for run in self.runs]
        return SimulationResult(
            workload=workload,
            bucket=bucket.spec,
            adaptive=self.adaptive,
            reads=self.reads,
            layouts=results,
            wall_seconds=time.perf_counter() - started,
            simulated_writes=int(self.entity_writes.sum()),
            chunk_seconds=self.chunk_seconds,
            batch_seconds=self.batcher.batch_s,
            recorded={r.spec.label: r.recorded for r in self.runs if r.recorded is not None} if self.record else None,
            entity_counts=entity_counts,
        )


def _batcher(workload: SimWorkload) -> Batcher:
    """The batcher of ``workload``: block tables measured for its typical entity and each hot one; its
    batches last the planner's batch length, in whole seconds."""
    described = planner_workload(workload)
    sizer = sizer_for(described)
    tables = [BlockTable.measure(sizer, entity=None, rate=max(workload.typical_rate, 1e-3))]
    table_of = np.zeros(workload.entities, dtype=np.int64)
    for i, hot in enumerate(workload.hot):
        tables.append(BlockTable.measure(sizer, entity=hot.entity_id, rate=hot.rate))
        table_of[workload.background_entities + i] = i + 1
    return Batcher(workload.names, max(1, round(stream_figures(described, workload.rate).batch_s)), tables, table_of)
