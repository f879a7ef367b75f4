"""Read costs: the partitions each query reads (the key-design layer's plan) and the read units it pays.

Reads are issued at the end of the run over the last 1 h, 3 h and 24 h (by
default) for one entity, and over the last hour for every entity. The plan
is ``Layout.plan_entity`` / ``Layout.plan_range`` with the layout's final
shard map (which holds its whole history, so a read across a split plans
both sides of it). Its partition count is the fan-out; each partition query
reads the blocks of its range, is paged at 1 MB and pays ``read_units`` per
page (eventually consistent unless asked otherwise).

Blocks in a partition come from the simulated blocks for the part of the read
inside the run. A read reaching further back than the run assumes that every
entity wrote at its mean rate over the run, in blocks of its mean bytes per
reading, spread evenly over the keys the layout gave it then: the fan-out is
exact either way, the read units for the part before the run are an estimate.

A cross-entity read of a partial bucket cannot express the time range in the
key condition (``time_filter``): it reads the whole partition and filters, and
pays for every block read. ``blocks_read`` counts those, ``readings_returned``
what the range holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np
import numpy.typing as npt

from keydesign import InvalidInput, Layout, ShardMap, read_units
from keydesign.layouts import PartitionQuery
from keydesign.periods import DAY_MS, HOUR_MS

from .keyspace import KeyTable, build_key_table, entity_keys
from .workload import SimWorkload

Ints = npt.NDArray[np.int64]
#: A Query returns at most 1 MB of items read per call.
QUERY_PAGE_BYTES = 1024 * 1024


def duration_label(ms: int) -> str:
    """``1h``, ``24h``, ``90m``, ``45s``: hours rather than days, as reads are usually asked for."""
    for unit, size in (("h", HOUR_MS), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class ReadPattern:
    """Which reads to cost: single-entity reads of each window, and one cross-entity read."""

    entities: tuple[str, ...]
    windows_ms: tuple[int, ...] = (HOUR_MS, 3 * HOUR_MS, DAY_MS)
    cross_window_ms: int | None = HOUR_MS
    consistent: bool = False

    @classmethod
    def default(cls, workload: SimWorkload) -> ReadPattern:
        """The first hot entity (else the most active one), 1 h / 3 h / 24 h, and the last hour of everyone."""
        return cls((workload.hot[0].entity_id if workload.hot else workload.names[0],))

    def validate(self, workload: SimWorkload) -> None:
        for entity in self.entities:
            workload.index_of(entity)
        windows = [("reads", w) for w in self.windows_ms]
        if self.cross_window_ms is not None:
            windows.append(("cross_window", self.cross_window_ms))
        for name, window in windows:
            if window < 1000 or window % 1000 or window > workload.end_ms:
                raise InvalidInput(name, f"{window} ms: a read window is whole seconds, at least 1 s, after 1970")

    def to_dict(self) -> dict[str, object]:
        return {
            "entities": list(self.entities),
            "windows": [duration_label(w) for w in self.windows_ms],
            "cross_window": duration_label(self.cross_window_ms) if self.cross_window_ms is not None else None,
            "consistent": self.consistent,
        }


@dataclass(frozen=True, slots=True)
class ReadFigure:
    """What one read costs under one layout; ``not_applicable`` says why a layout cannot serve it."""

    layout: str
    read: str
    entity: str | None
    window_ms: int
    partitions: int | None = None
    queries: int | None = None
    blocks_read: int | None = None
    readings_returned: int | None = None
    read_units: float | None = None
    not_applicable: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "read": self.read,
            "entity": self.entity,
            "window": duration_label(self.window_ms),
            "partitions": self.partitions,
            "queries": self.queries,
            "blocks_read": self.blocks_read,
            "readings_returned": self.readings_returned,
            "read_units": self.read_units,
            "not_applicable": self.not_applicable,
        }


@dataclass(slots=True)
class ReadContext:
    """One layout at the end of the run, as the reads need it."""

    layout: Layout
    shard_map: ShardMap
    workload: SimWorkload
    tables: Mapping[int, KeyTable]
    #: Per bucket: (blocks, units, bytes, readings) x keys.
    key_totals: Mapping[int, Ints]
    #: Per tracked entity and key: (blocks, units, bytes, readings) x seconds.
    tracked: Mapping[str, Mapping[str, Ints]]
    entity_rates: npt.NDArray[np.float64]
    bytes_per_reading: npt.NDArray[np.float64]
    writes_per_second: Ints
    _buckets: dict[int, tuple[dict[str, int], npt.NDArray[np.float64]]] = field(default_factory=dict)

    def bucket_keys(self, bucket_start: int) -> tuple[dict[str, int], npt.NDArray[np.float64]]:
        """A bucket's keys (name -> index) and the mean writes/s on each, every entity at its mean rate. Its key
        table is the run's, or one built from the final map for a bucket before the run."""
        if bucket_start not in self._buckets:
            table = self.tables.get(bucket_start) or build_key_table(
                self.layout, self.shard_map, self.workload.names, bucket_start
            )
            single = table.single_key_entities()
            rates: npt.NDArray[np.float64] = np.bincount(
                table.first[single], weights=self.entity_rates[single], minlength=table.keys
            ).astype(np.float64)
            for ways, entities in table.multi_key_groups().items():
                for entity in entities.tolist():
                    first = int(table.first[entity])
                    rates[first : first + ways] += self.entity_rates[entity] / ways
            self._buckets[bucket_start] = ({name: i for i, name in enumerate(table.names)}, rates)
        return self._buckets[bucket_start]


def query_cost(total_bytes: int, *, consistent: bool) -> tuple[int, float]:
    """(Query calls, read units) to read ``total_bytes`` from one partition, 1 MB a page."""
    full, rest = divmod(total_bytes, QUERY_PAGE_BYTES)
    pages = full + (1 if rest or not full else 0)
    units = full * read_units(QUERY_PAGE_BYTES, consistent=consistent)
    if rest or not full:
        units += read_units(rest, consistent=consistent)
    return pages, units


def measure_reads(ctx: ReadContext, pattern: ReadPattern, label: str) -> tuple[ReadFigure, ...]:
    figures = [
        _entity_read(ctx, pattern, label, entity, window)
        for entity in pattern.entities
        for window in pattern.windows_ms
    ]
    if pattern.cross_window_ms is not None:
        figures.append(_cross_read(ctx, pattern, label, pattern.cross_window_ms))
    return tuple(figures)


def _entity_read(ctx: ReadContext, pattern: ReadPattern, label: str, entity: str, window: int) -> ReadFigure:
    workload, layout = ctx.workload, ctx.layout
    start, end = workload.start_ms, workload.end_ms
    plan = layout.plan_entity(entity, end - window, end, ctx.shard_map)
    index = workload.index_of(entity)
    rate = float(ctx.entity_rates[index])
    tracks = ctx.tracked.get(entity, {})

    @cache
    def keys_in(bucket_start: int) -> tuple[str, ...]:
        table = ctx.tables.get(bucket_start)
        return (
            table.entity_keys(index) if table is not None else entity_keys(layout, ctx.shard_map, entity, bucket_start)
        )

    tracked = sum((t.sum(axis=1) for t in tracks.values()), np.zeros(4, dtype=np.int64))
    per_block = tracked[3] / tracked[0] if tracked[0] else 1.0  # readings per block over the run
    per_reading = float(ctx.bytes_per_reading[index])

    def blocks_and_bytes(part: PartitionQuery) -> tuple[float, float]:
        blocks = size = 0.0
        for bucket_start in layout.bucket.starts(part.from_ms, part.to_ms):
            low, high = max(part.from_ms, bucket_start), min(part.to_ms, bucket_start + layout.bucket.width_ms)
            before = min(high, start)
            if before > low:
                keys = keys_in(bucket_start)
                if part.pk in keys:
                    readings = rate * (before - low) / 1000 / len(keys)
                    blocks, size = blocks + readings / per_block, size + readings * per_reading
            run_low, run_high = max(low, start), min(high, end)
            track = tracks.get(part.pk)
            if run_high > run_low and track is not None:
                written = track[:, (run_low - start) // 1000 : (run_high - start) // 1000].sum(axis=1)
                blocks, size = blocks + float(written[0]), size + float(written[2])
        return blocks, size

    found = [blocks_and_bytes(part) for part in plan.partitions]
    read = ReadFigure(label, f"{entity}, last {duration_label(window)}", entity, window)
    return _costed(read, found, _returned(ctx, index, end - window), pattern.consistent)


def _costed(read: ReadFigure, found: list[tuple[float, float]], returned: float, consistent: bool) -> ReadFigure:
    """``read`` costed: its partitions hold ``found`` (blocks, bytes) each, one Query paging through each."""
    costs = [query_cost(round(size), consistent=consistent) for _, size in found]
    return replace(
        read,
        partitions=len(found),
        queries=sum(pages for pages, _ in costs),
        blocks_read=sum(round(blocks) for blocks, _ in found),
        readings_returned=round(returned),
        read_units=sum(units for _, units in costs),
    )


def _returned(ctx: ReadContext, index: int, low: int) -> float:
    """Readings of entity ``index`` from ``low`` to the end of the run (its mean rate before the run)."""
    start = ctx.workload.start_ms
    name = ctx.workload.names[index]
    tracked = sum(
        float(track[3, max(0, (low - start) // 1000) :].sum()) for track in ctx.tracked.get(name, {}).values()
    )
    return float(ctx.entity_rates[index]) * max(0, start - low) / 1000 + tracked


def _cross_read(ctx: ReadContext, pattern: ReadPattern, label: str, window: int) -> ReadFigure:
    workload, layout = ctx.workload, ctx.layout
    start, end = workload.start_ms, workload.end_ms
    name = f"all entities, last {duration_label(window)}"
    try:
        plan = layout.plan_range(end - window, end, ctx.shard_map)
    except InvalidInput as exc:
        reason = (
            f"{exc.reason}: the entity leads the partition key, so finding every entity's readings "
            "is a Scan of the whole table"
        )
        return ReadFigure(label, name, None, window, not_applicable=reason)
    width = layout.bucket.width_ms
    rates = ctx.entity_rates
    per_reading = float((rates * ctx.bytes_per_reading).sum() / rates.sum()) if rates.sum() else 0.0
    totals = sum((t.sum(axis=1) for t in ctx.key_totals.values()), np.zeros(4, dtype=np.int64))
    per_block = totals[3] / totals[0] if totals[0] else 1.0

    def blocks_and_bytes(part: PartitionQuery) -> tuple[float, float]:
        bucket_start = layout.bucket.start(part.from_ms)
        ids, key_rates = ctx.bucket_keys(bucket_start)
        key = ids.get(part.pk)
        blocks = size = 0.0
        if key is not None:
            before = min(bucket_start + width, start)
            if before > bucket_start:
                readings = float(key_rates[key]) * (before - bucket_start) / 1000
                blocks, size = readings / per_block, readings * per_reading
            run_totals = ctx.key_totals.get(bucket_start)
            if run_totals is not None:
                blocks, size = blocks + float(run_totals[0, key]), size + float(run_totals[2, key])
        # A partial bucket is read whole and filtered once decoded: every block read is paid for.
        return blocks, size

    mean_rate = float(ctx.writes_per_second.mean()) if ctx.writes_per_second.size else 0.0
    low = end - window
    returned = mean_rate * max(0, start - low) / 1000
    returned += float(ctx.writes_per_second[max(0, (low - start) // 1000) :].sum())
    found = [blocks_and_bytes(part) for part in plan.partitions]
    return _costed(ReadFigure(label, name, None, window), found, returned, pattern.consistent)
