"""Layouts: where a reading is written, and which partitions a query must read.

``random``      PK ``<entity>#<r>``, r uniform in [0, n); SK ``<ts>#<event_id>``.
                Redelivery can land a copy in another partition, so reads of
                this layout dedupe by sort key (``QueryPlan.dedupe``).
``calculated``  PK ``<entity>#<h>``, h = stable_hash(event_id) mod n; same SK.
``hybrid``      PK ``<shard>#<bucket>``, shard = stable_hash(entity) mod N,
                SK ``<entity>#<ts>#<event_id>``. An entity with k > 1 sub-shards
                in a bucket writes to its own partitions
                ``<shard>#<bucket>#<entity>#<sub>``, sub = stable_hash(event_id) mod k.

n is the entity's own count from the shard map, or the global N. Shards are
zero-padded to 4 digits (hybrid) so keys have a fixed shape. Time ranges are
half-open: ``[from_ms, to_ms)``.
"""

from __future__ import annotations

import itertools
import random as _random
import re
from dataclasses import dataclass
from typing import Literal

from .errors import ConfigError, InvalidInput, KeyDesignError
from .hashing import shard_of
from .model import Reading, validate_entity_id
from .periods import Bucket, TablePeriod
from .shardmap import ShardMap
from .timefmt import MAX_TS_MS, format_ts

LayoutKind = Literal["random", "calculated", "hybrid"]
LAYOUTS: tuple[LayoutKind, ...] = ("random", "calculated", "hybrid")

#: Sorts after every character allowed in an event id: closes an SK range.
SK_HIGH = "~"
_TABLE_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


@dataclass(frozen=True, slots=True)
class LayoutCapabilities:
    """What a layout can do: callers ask this rather than compare layout names.

    ``shared_partitions``: entities share N base partitions keyed by shard and
    time bucket (an entity without its own count writes to one of them), so
    every reading of a bucket is in N known partitions: cross-entity range
    reads are Queries, and a crowded base key calls for a larger global N.
    Otherwise the partition key holds the entity, which writes to its own n
    (the global N unless it has its own count) and has no time bucket.
    ``dedupe``: a redelivered reading can land in another partition (random
    suffix), so reads drop copies by sort key.
    """

    shared_partitions: bool
    dedupe: bool

    @property
    def range_reads(self) -> bool:
        """Reads of every entity in a time range are possible without a Scan."""
        return self.shared_partitions

    @property
    def time_buckets(self) -> bool:
        """Partition keys hold a time bucket."""
        return self.shared_partitions


CAPABILITIES: dict[LayoutKind, LayoutCapabilities] = {
    "random": LayoutCapabilities(shared_partitions=False, dedupe=True),
    "calculated": LayoutCapabilities(shared_partitions=False, dedupe=False),
    "hybrid": LayoutCapabilities(shared_partitions=True, dedupe=False),
}


@dataclass(frozen=True, slots=True)
class ItemKey:
    """Where one reading is stored."""

    table: str
    pk: str
    sk: str


@dataclass(frozen=True, slots=True)
class PartitionQuery:
    """One Query: a partition key, an inclusive sort-key range, and the time range it serves.

    ``sk_low``/``sk_high`` are None for a whole partition. ``time_filter`` is
    True when the key condition cannot express the time range (cross-entity
    reads of a partial bucket), so the reader must filter on the ``ts`` attribute.
    """

    table: str
    pk: str
    sk_low: str | None
    sk_high: str | None
    from_ms: int
    to_ms: int
    time_filter: bool = False


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """Every partition a read must query, and how to combine them."""

    partitions: tuple[PartitionQuery, ...]
    entity_id: str | None
    from_ms: int
    to_ms: int
    dedupe: bool

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(sorted({p.table for p in self.partitions}))


@dataclass(frozen=True, slots=True)
class Layout:
    """A key layout: the kind, the bucket grid, and table naming."""

    kind: LayoutKind
    bucket: Bucket
    table_prefix: str
    table_period: TablePeriod | None = None

    @classmethod
    def from_settings(cls, *, kind: str, bucket: str, table_prefix: str, table_period: str | None = None) -> Layout:
        """Validate settings (as they come from configuration) into a Layout."""
        if kind not in LAYOUTS:
            raise ConfigError("layout", f"{kind!r} is not one of {', '.join(LAYOUTS)}")
        parsed_bucket = Bucket.parse(bucket)
        period = TablePeriod.parse(table_period) if table_period else None
        if period is not None:
            period.check_nests(parsed_bucket)
        _check_table_prefix(table_prefix, period)
        return cls(kind, parsed_bucket, table_prefix, period)

    @property
    def can(self) -> LayoutCapabilities:
        """What this layout supports (range reads, dedupe, time buckets...)."""
        return CAPABILITIES[self.kind]

    # -- tables ---------------------------------------------------------------

    def table_for(self, ts_ms: int) -> str:
        """The table that holds readings with event time ``ts_ms``."""
        if self.table_period is None:
            return self.table_prefix
        return f"{self.table_prefix}-{self.table_period.label(ts_ms)}"

    # -- writing -------------------------------------------------------------

    def check_shard_map(self, shard_map: ShardMap) -> None:
        """Refuse a map built on another bucket grid: its changes could fall
        inside one of this layout's buckets, and plans would miss readings."""
        if shard_map.bucket is not self.bucket and shard_map.bucket != self.bucket:
            raise ConfigError(
                "shard_map.bucket",
                f"the shard map uses {shard_map.bucket.spec} buckets but the layout uses {self.bucket.spec}",
            )

    def key_for(self, reading: Reading, shard_map: ShardMap, rng: _random.Random | None = None) -> ItemKey:
        """The key of ``reading``. Deterministic except for the ``random`` layout."""
        self.check_shard_map(shard_map)
        ts = reading.ts_ms
        table = self.table_for(ts)
        stamp = format_ts(ts)
        if self.can.shared_partitions:
            base = shard_of(reading.entity_id, shard_map.global_shards_at(ts))
            label = self.bucket.label(self.bucket.start(ts))
            subs = shard_map.entity_shards_at(reading.entity_id, ts) or 1
            if subs == 1:
                pk = f"{base:04d}#{label}"
            else:
                pk = f"{base:04d}#{label}#{reading.entity_id}#{shard_of(reading.event_id, subs):03d}"
            return ItemKey(table, pk, f"{reading.entity_id}#{stamp}#{reading.event_id}")
        count = self._suffix_count(shard_map, reading.entity_id, ts)
        suffix = (rng or _random).randrange(count) if self.kind == "random" else shard_of(reading.event_id, count)
        return ItemKey(table, f"{reading.entity_id}#{suffix}", f"{stamp}#{reading.event_id}")

    def _suffix_count(self, shard_map: ShardMap, entity_id: str, ts_ms: int) -> int:
        own = shard_map.entity_shards_at(entity_id, ts_ms)
        return own if own is not None else shard_map.global_shards_at(ts_ms)

    # -- reading -------------------------------------------------------------

    def plan_entity(self, entity_id: str, from_ms: int, to_ms: int, shard_map: ShardMap) -> QueryPlan:
        """Every (table, PK, SK range) that can hold readings of ``entity_id`` in
        ``[from_ms, to_ms)``, and nothing else."""
        validate_entity_id(entity_id)
        self.check_shard_map(shard_map)
        _check_range(from_ms, to_ms)
        parts: list[PartitionQuery] = []
        for seg_from, seg_to in self._segments(entity_id, from_ms, to_ms, shard_map):
            table = self.table_for(seg_from)
            if self.can.shared_partitions:
                low = f"{entity_id}#{format_ts(seg_from)}"
                high = f"{entity_id}#{format_ts(seg_to - 1)}#{SK_HIGH}"
                for pk in self._hybrid_pks(entity_id, seg_from, shard_map):
                    parts.append(PartitionQuery(table, pk, low, high, seg_from, seg_to))
            else:
                low, high = format_ts(seg_from), f"{format_ts(seg_to - 1)}#{SK_HIGH}"
                for suffix in range(self._suffix_count(shard_map, entity_id, seg_from)):
                    parts.append(PartitionQuery(table, f"{entity_id}#{suffix}", low, high, seg_from, seg_to))
        if not self.can.time_buckets:
            parts = _merge_adjacent(parts)
        return QueryPlan(tuple(parts), entity_id, from_ms, to_ms, dedupe=self.can.dedupe)

    def plan_range(self, from_ms: int, to_ms: int, shard_map: ShardMap) -> QueryPlan:
        """Every partition of every bucket in ``[from_ms, to_ms)``: a cross-entity read.

        Only the hybrid layout can answer this with queries; the other layouts
        put the entity in the partition key, so finding all entities is a Scan.
        """
        if not self.can.range_reads:
            raise InvalidInput(
                "layout", f"cross-entity range reads need the hybrid layout; the {self.kind} layout has no time buckets"
            )
        self.check_shard_map(shard_map)
        _check_range(from_ms, to_ms)
        parts: list[PartitionQuery] = []
        for start in self.bucket.starts(from_ms, to_ms):
            seg_from, seg_to = max(from_ms, start), min(to_ms, start + self.bucket.width_ms)
            partial = seg_from != start or seg_to != start + self.bucket.width_ms
            table, label = self.table_for(start), self.bucket.label(start)
            for shard in range(shard_map.global_shards_at(start)):
                parts.append(PartitionQuery(table, f"{shard:04d}#{label}", None, None, seg_from, seg_to, partial))
            for entity_id, subs in shard_map.split_entities_at(start):
                if subs > 1:
                    for pk in self._hybrid_pks(entity_id, start, shard_map):
                        parts.append(PartitionQuery(table, pk, None, None, seg_from, seg_to, partial))
        return QueryPlan(tuple(parts), None, from_ms, to_ms, dedupe=False)

    def _hybrid_pks(self, entity_id: str, bucket_start: int, shard_map: ShardMap) -> list[str]:
        base = shard_of(entity_id, shard_map.global_shards_at(bucket_start))
        label = self.bucket.label(self.bucket.start(bucket_start))
        subs = shard_map.entity_shards_at(entity_id, bucket_start) or 1
        if subs == 1:
            return [f"{base:04d}#{label}"]
        return [f"{base:04d}#{label}#{entity_id}#{sub:03d}" for sub in range(subs)]

    def _segments(self, entity_id: str, from_ms: int, to_ms: int, shard_map: ShardMap) -> list[tuple[int, int]]:
        """Split the range where the partitions can change: at buckets (hybrid),
        at shard-map changes, and at table periods."""
        cuts = {from_ms, to_ms, *shard_map.change_points(entity_id, from_ms, to_ms)}
        if self.can.time_buckets:
            cuts.update(s for s in self.bucket.starts(from_ms, to_ms) if s > from_ms)
        if self.table_period is not None:
            cuts.update(s for s in self.table_period.starts(from_ms, to_ms) if s > from_ms)
        ordered = sorted(cuts)
        return list(itertools.pairwise(ordered))


# -- reading keys back (stream records, metrics) ------------------------------------

_STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z"
_LABEL = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}"
_HYBRID_PK = re.compile(rf"^(\d{{4}})#({_LABEL})(?:#([^#]+)#(\d{{3}}))?\Z")
_HYBRID_SK = re.compile(rf"^([^#]+)#{_STAMP}#[^#]+\Z")
_SUFFIX_PK = re.compile(r"^([^#]+)#(\d{1,4})\Z")
_SUFFIX_SK = re.compile(rf"^{_STAMP}#[^#]+\Z")


@dataclass(frozen=True, slots=True)
class KeyParts:
    """What a stored key says: whose reading it is, and whether its partition
    key is shared with other entities (a hybrid base shard) or the entity's own."""

    entity: str
    shared: bool


def parse_keys(pk: str, sk: str, layout_kind: LayoutKind) -> KeyParts | None:
    """The entity of a readings-table key, and whether its partition key is shared; None if not ours."""
    if CAPABILITIES[layout_kind].shared_partitions:
        pk_match, sk_match = _HYBRID_PK.match(pk), _HYBRID_SK.match(sk)
        if pk_match is None or sk_match is None:
            return None
        entity = sk_match.group(1)
        own = pk_match.group(3)
        if own is not None and own != entity:
            return None
        shared = own is None
    else:
        pk_match, sk_match = _SUFFIX_PK.match(pk), _SUFFIX_SK.match(sk)
        if pk_match is None or sk_match is None:
            return None
        entity, shared = pk_match.group(1), False
    try:
        validate_entity_id(entity)
    except KeyDesignError:
        return None
    return KeyParts(entity, shared)


def key_family(partition_key: str, layout_kind: LayoutKind) -> str:
    """The partition key without its time bucket: the same name in every bucket.

    ``0042#2026-11-22T06:00`` -> ``0042``; ``0042#2026-11-22T06:00#sensor-1#003``
    -> ``0042#sensor-1#003``. Keys of the other layouts have no bucket and are
    returned as they are. Metric dimensions and alert cooldowns use it, so one
    hot shard stays one series and one alert across buckets.
    """
    if CAPABILITIES[layout_kind].time_buckets:
        match = _HYBRID_PK.match(partition_key)
        if match is not None:
            shard, _, entity, sub = match.groups()
            return shard if entity is None else f"{shard}#{entity}#{sub}"
    return partition_key


def _merge_adjacent(parts: list[PartitionQuery]) -> list[PartitionQuery]:
    """Join queries of one partition over touching time segments into one query."""
    merged: dict[tuple[str, str], list[PartitionQuery]] = {}
    for part in parts:
        runs = merged.setdefault((part.table, part.pk), [])
        if runs and runs[-1].to_ms == part.from_ms:
            last = runs[-1]
            runs[-1] = PartitionQuery(last.table, last.pk, last.sk_low, part.sk_high, last.from_ms, part.to_ms)
        else:
            runs.append(part)
    return [p for runs in merged.values() for p in runs]


def _check_range(from_ms: int, to_ms: int) -> None:
    # Both ends are checked on their own: a 'from' past 9999 (or a 'to' before
    # 1970) must be refused as input, not crash format_ts in the message below.
    if from_ms < 0 or from_ms > MAX_TS_MS:
        raise InvalidInput("from", "the range must lie between 1970 and 9999")
    if to_ms < 1 or to_ms > MAX_TS_MS + 1:
        raise InvalidInput("to", "the range must lie between 1970 and 9999")
    if from_ms >= to_ms:
        raise InvalidInput(
            "from", f"must precede 'to' ({format_ts(from_ms)} is not before {format_ts(min(to_ms, MAX_TS_MS))})"
        )


def _check_table_prefix(prefix: str, period: TablePeriod | None) -> None:
    longest_suffix = 14 if period is not None else 0  # "-2026-11-22-06"
    if not prefix or len(prefix) + longest_suffix > 255 or not set(prefix) <= _TABLE_PREFIX_CHARS:
        raise ConfigError(
            "table_prefix",
            f"{prefix!r} must be 1-{255 - longest_suffix} characters of letters, digits, '_', '.' or '-'",
        )
    if period is None and len(prefix) < 3:
        raise ConfigError("table_prefix", "a DynamoDB table name needs at least 3 characters")
