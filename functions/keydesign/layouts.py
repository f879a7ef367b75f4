"""Layouts: where a block of readings is written, and which partitions a query must read.

Readings are stored in blocks (:mod:`keydesign.blocks`): the readings of one entity
in one partition and one bucket that one ingest batch holds. The layout chooses
the block's partition key:

``random``      PK ``<entity>#<r>``, r uniform in [0, n), drawn per block.
``calculated``  PK ``<entity>#<h>``, h = stable_hash(block id) mod n: the same block
                (a redelivered batch) always lands in the same partition.
``hybrid``      PK ``<shard>#<bucket>``, shard = stable_hash(entity) mod N. An entity
                with k > 1 sub-shards in a bucket writes to its own partitions
                ``<shard>#<bucket>#<entity>#<sub>``, sub = stable_hash(block id) mod k.

The sort key is the block's (see :mod:`keydesign.blocks`): ``<first ts>#<id>#<units>``,
behind ``<entity>#`` in the hybrid layout. A reading's *position* in merged reads is
the sort key a reading alone would have had: ``<entity>#<ts>#<event id>`` (hybrid) or
``<ts>#<event id>`` (:meth:`Layout.reading_key`).

n is the entity's own count from the shard map, or the global N. Shards are
zero-padded to 4 digits (hybrid) so keys have a fixed shape. Time ranges are
half-open: ``[from_ms, to_ms)``.
"""

from __future__ import annotations

import itertools
import random as _random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from .blocks import (
    BLOCK_ID_DIGITS,
    HIGH,
    MAX_BLOCK_ITEM_BYTES,
    MAX_BLOCK_SPAN_MS,
    Encoded,
    EncodedItem,
    ItemKey,
    body_estimate,
    cut_runs,
    encode_block,
    keyed_item,
    last_copies,
)
from .errors import ConfigError, InvalidInput, KeyDesignError
from .hashing import shard_of
from .model import Reading, validate_entity_id
from .periods import DAY_MS, Bucket, TablePeriod, period_table
from .shardmap import ShardMap
from .timefmt import MAX_TS_MS, format_ts
from .writetier import (
    MAX_COMPACTED_SPAN_MS,
    REPACK_MS,
    SLICE_MS,
    Clustered,
    EarlierGroups,
    WriteTier,
    cluster_of,
    cluster_prefix,
    clustered_tiers,
    compacted_pk,
    earlier_tiers,
    repack_start,
    slice_start,
    sub_group_of,
    sub_prefix,
)

LayoutKind = Literal["random", "calculated", "hybrid"]
#: What a partition holds: blocks (of one entity each; the hybrid base partition: of many), the
#: write tier's group items (``keydesign.writetier``), its sub-items (a sub-group's re-packed slice
#: each: an entity's read is its sub-group's sort keys), its cluster blocks (a cluster's compacted hour
#: each: an entity's read is its cluster's sort keys), or the compacted blocks of hours compacted before
#: cluster blocks (one entity's hour each).
PartitionKind = Literal["blocks", "group", "sub", "cluster", "compacted"]
_SPAN_LIMITS: dict[PartitionKind, int] = {
    "compacted": MAX_COMPACTED_SPAN_MS,
    "cluster": MAX_COMPACTED_SPAN_MS,
    "sub": REPACK_MS,
}
#: The kinds whose items hold many entities' readings (block format 4), keyed without an entity.
GROUPED_KINDS: frozenset[PartitionKind] = frozenset({"group", "sub", "cluster"})
#: The kinds of a compacted hour: cluster blocks, or the per-entity compacted blocks of hours before them.
COMPACTED_KINDS: frozenset[PartitionKind] = frozenset({"cluster", "compacted"})
LAYOUTS: tuple[LayoutKind, ...] = ("random", "calculated", "hybrid")

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
    """

    shared_partitions: bool

    @property
    def range_reads(self) -> bool:
        """Reads of every entity in a time range are possible without a Scan."""
        return self.shared_partitions


CAPABILITIES: dict[LayoutKind, LayoutCapabilities] = {
    "random": LayoutCapabilities(shared_partitions=False),
    "calculated": LayoutCapabilities(shared_partitions=False),
    "hybrid": LayoutCapabilities(shared_partitions=True),
}


@dataclass(frozen=True, slots=True)
class Block(EncodedItem):
    """One block, ready to write: its key, its readings and the entries they came from.

    ``origins`` are the indexes (in what :meth:`Layout.pack` was given) of every entry
    the block stands for: its readings, and the earlier copies of them in the same
    batch that they replaced. ``write_units`` is what a put of :meth:`item` is billed.
    """

    entity_id: str


@dataclass(frozen=True, slots=True)
class PartitionQuery:
    """One Query: a partition key, an inclusive range of block sort keys, and the time range it serves.

    ``kind`` says what the partition holds (blocks, group items or compacted blocks).
    ``sk_low``/``sk_high`` are None for a whole partition. The blocks in the sort-key
    range are every block that may hold a reading of ``[from_ms, to_ms)``; they may hold
    readings outside it too, which the reader drops once decoded. ``time_filter`` is True
    when the range cuts a whole-partition read (cross-entity reads of a partial bucket).
    """

    table: str
    pk: str
    sk_low: str | None
    sk_high: str | None
    from_ms: int
    to_ms: int
    time_filter: bool = False
    kind: PartitionKind = "blocks"

    @property
    def span_limit_ms(self) -> int:
        """How far past its first reading an item of this partition may hold readings."""
        return _SPAN_LIMITS.get(self.kind, MAX_BLOCK_SPAN_MS)


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """Every partition a read must query, and how to combine them.

    ``dedupe``: a reading can be stored in two blocks (a regrouped redelivery, a correction),
    so reads keep one copy of each reading, the newest version's: every layout's reads do.
    """

    partitions: tuple[PartitionQuery, ...]
    entity_id: str | None
    from_ms: int
    to_ms: int
    dedupe: bool = True

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
        """What this layout supports (shared partitions, range reads)."""
        return CAPABILITIES[self.kind]

    # -- tables ---------------------------------------------------------------

    def table_for(self, ts_ms: int) -> str:
        """The table that holds readings with event time ``ts_ms``."""
        if self.table_period is None:
            return self.table_prefix
        return period_table(self.table_prefix, self.table_period, ts_ms)

    # -- writing -------------------------------------------------------------

    def check_shard_map(self, shard_map: ShardMap) -> None:
        """Refuse a map built on another bucket grid: its changes could fall
        inside one of this layout's buckets, and plans would miss readings."""
        if shard_map.bucket is not self.bucket and shard_map.bucket != self.bucket:
            raise ConfigError(
                "shard_map.bucket",
                f"the shard map uses {shard_map.bucket.spec} buckets but the layout uses {self.bucket.spec}",
            )

    def pack(
        self,
        entries: Sequence[tuple[Reading, int]],
        shard_map: ShardMap,
        *,
        retention_ms: int | None = None,
        rng: _random.Random | None = None,
    ) -> list[Block]:
        """The blocks that store ``entries`` (reading, version), in the order given.

        Readings are grouped by entity and bucket (so by partition key too), and a group
        is cut into blocks of at most :data:`MAX_BLOCK_SPAN_MS`, :data:`MAX_BLOCK_READINGS`
        and :data:`MAX_BLOCK_ITEM_BYTES`. Two entries of one reading (same entity, time and
        event id) are stored once: the later one wins. The result depends only on the
        entries (and ``rng`` for the random layout): a redelivered batch makes the same blocks.
        ``retention_ms`` sets each block's ``ttl`` to its newest reading's expiry.
        """
        self.check_shard_map(shard_map)
        winners, replaced = last_copies(entries)
        width = self.bucket.width_ms
        groups: dict[tuple[str, int], list[tuple[int, str, int]]] = {}
        for (entity, ts, event_id), index in winners.items():
            groups.setdefault((entity, ts - ts % width), []).append((ts, event_id, index))

        def cut(entity: str, bucket_start: int, run: list[int]) -> list[Block]:
            """``run`` (entry indexes, in time order) as one block, or halves of it while one is too large."""
            readings = tuple(entries[i][0] for i in run)
            encoded = encode_block(readings, max(entries[i][1] for i in run))
            pk = self._block_pk(entity, bucket_start, encoded.block_id, shard_map, rng)
            stem = self.block_sk_stem(entity, encoded)
            ttl = (encoded.last_ms + retention_ms) // 1000 if retention_ms is not None else None
            item, size, units = keyed_item(pk, stem, encoded.payload, ttl)
            if size > MAX_BLOCK_ITEM_BYTES and len(run) > 1:
                half = len(run) // 2
                return cut(entity, bucket_start, run[:half]) + cut(entity, bucket_start, run[half:])
            origins = tuple(sorted(j for i in run for j in (i, *replaced.get(i, ()))))
            key = ItemKey(self.table_for(bucket_start), pk, str(item["sk"]))
            return [Block(key, readings, origins, encoded, size, units, ttl, entity_id=entity)]

        blocks: list[Block] = []
        for (entity, bucket_start), members in groups.items():
            members.sort()
            for run in cut_runs(members, [body_estimate(entries[index][0]) for _, _, index in members]):
                blocks.extend(cut(entity, bucket_start, run))
        return blocks

    def _block_pk(
        self, entity: str, bucket_start: int, block_id: str, shard_map: ShardMap, rng: _random.Random | None
    ) -> str:
        """The one partition key of :meth:`partitions_of` that this block goes to."""
        base = self.hybrid_base(entity, bucket_start, shard_map)
        if base is not None:
            subs = shard_map.entity_shards_at(entity, bucket_start) or 1
            return base if subs == 1 else f"{base}#{entity}#{shard_of(block_id, subs):03d}"
        count = self._suffix_count(shard_map, entity, bucket_start)
        suffix = (rng or _random).randrange(count) if self.kind == "random" else shard_of(block_id, count)
        return f"{entity}#{suffix}"

    def hybrid_base(self, entity_id: str, bucket_start: int, shard_map: ShardMap) -> str | None:
        """The base partition ``<shard>#<bucket>`` of ``entity_id`` in the bucket starting at
        ``bucket_start`` (hybrid), shared by its shard's entities; None in the other layouts. Beside it
        lie the entity's compacted blocks (:func:`keydesign.writetier.compacted_pk`)."""
        if not self.can.shared_partitions:
            return None
        return f"{shard_of(entity_id, shard_map.global_shards_at(bucket_start)):04d}#{self.bucket.label(bucket_start)}"

    def block_sk_stem(self, entity_id: str, encoded: Encoded) -> str:
        """A block's sort key before ``#<write units>``: ``[<entity>#]<first ts>#<block id>``."""
        return f"{self._sk_prefix(entity_id)}{format_ts(encoded.first_ms)}#{encoded.block_id}"

    def partitions_of(self, entity_id: str, ts_ms: int, shard_map: ShardMap) -> list[str]:
        """Every partition key a block of ``entity_id`` holding ``ts_ms`` can have."""
        start = self.bucket.start(ts_ms)
        base = self.hybrid_base(entity_id, start, shard_map)
        if base is None:
            return [f"{entity_id}#{s}" for s in range(self._suffix_count(shard_map, entity_id, start))]
        subs = shard_map.entity_shards_at(entity_id, start) or 1
        return [base] if subs == 1 else [f"{base}#{entity_id}#{sub:03d}" for sub in range(subs)]

    # -- positions: the order reads return readings in ------------------------------------

    def reading_key(self, entity_id: str, ts: str, event_id: str) -> str:
        """A reading's position inside its partition's order: ``<entity>#<ts>#<event id>``
        (hybrid) or ``<ts>#<event id>``. Reads merge and resume by it."""
        if self.can.shared_partitions:
            return f"{entity_id}#{ts}#{event_id}"
        return f"{ts}#{event_id}"

    def block_sk_from(self, entity_id: str, ts_ms: int, kind: PartitionKind = "blocks") -> str:
        """The lowest sort key of an item of a ``kind`` partition that may hold a reading of
        ``entity_id`` at or after ``ts_ms``. A block starts at most a span before its readings, and
        in their bucket; a group item, a span before them and in their hour (it holds other
        entities too: no entity prefix); a sub-item, in their slice, behind the entity's sub-group; a
        cluster block, in their hour, behind the entity's cluster; a compacted block, in their hour (and,
        hybrid, their bucket, whose partition it is in)."""
        if kind == "group":
            return format_ts(max(slice_start(ts_ms), ts_ms - MAX_BLOCK_SPAN_MS + 1))
        if kind == "sub":
            return f"{sub_prefix(sub_group_of(entity_id))}{format_ts(repack_start(ts_ms))}"
        if kind == "cluster":
            return f"{cluster_prefix(cluster_of(entity_id))}{format_ts(slice_start(ts_ms))}"
        if kind == "compacted":
            floor = slice_start(ts_ms)
            if self.can.shared_partitions:
                floor = max(floor, self.bucket.start(ts_ms))
        else:
            floor = max(self.bucket.start(ts_ms), ts_ms - MAX_BLOCK_SPAN_MS + 1)
        return f"{self._sk_prefix(entity_id)}{format_ts(floor)}"

    def block_sk_through(self, entity_id: str, ts_ms: int, kind: PartitionKind = "blocks") -> str:
        """The highest sort key of an item of a ``kind`` partition that may hold a reading of
        ``entity_id`` at or before ``ts_ms``."""
        if kind == "group":
            prefix = ""
        elif kind == "sub":
            prefix = sub_prefix(sub_group_of(entity_id))
        elif kind == "cluster":
            prefix = cluster_prefix(cluster_of(entity_id))
        else:
            prefix = self._sk_prefix(entity_id)
        return f"{prefix}{format_ts(ts_ms)}#{HIGH}"

    def sk_entity_prefixed(self, kind: PartitionKind) -> bool:
        """Whether the sort keys of a ``kind`` partition start with ``<entity>#``: blocks and compacted
        blocks of the hybrid layout (their partitions hold many entities); never a group item, a
        sub-item or a cluster block (their sort keys start with their time, sub-group or cluster)."""
        return self.can.shared_partitions and kind not in GROUPED_KINDS

    def cluster_span(self, ts_ms: int) -> int:
        """The start of the span of the cluster partitions (:meth:`keydesign.writetier.WriteTier.cluster_pk`)
        holding ``ts_ms``: the hybrid layout's bucket, an hour at least (a cross-entity read reads a bucket's
        cluster partitions whole); else its day, within its table (an hourly table: its hour). A device's
        compacted hours of a span are one Query."""
        if self.can.shared_partitions:
            return self.bucket.start(ts_ms) if self.bucket.width_ms >= SLICE_MS else slice_start(ts_ms)
        day = ts_ms - ts_ms % DAY_MS
        return day if self.table_period is None else max(day, self.table_period.start(ts_ms))

    def compacted_partition(self, entity_id: str, ts_ms: int, shard_map: ShardMap) -> str:
        """The partition of ``entity_id``'s compacted blocks holding ``ts_ms``
        (:func:`keydesign.writetier.compacted_pk`): beside the entity's hybrid base partition
        ``<shard>#<bucket>`` (its sub-shards too write there), or ``<entity>#c``."""
        return compacted_pk(entity_id, self.hybrid_base(entity_id, self.bucket.start(ts_ms), shard_map))

    def _sk_prefix(self, entity_id: str) -> str:
        return f"{entity_id}#" if self.can.shared_partitions else ""

    def _suffix_count(self, shard_map: ShardMap, entity_id: str, ts_ms: int) -> int:
        own = shard_map.entity_shards_at(entity_id, ts_ms)
        return own if own is not None else shard_map.global_shards_at(ts_ms)

    # -- reading -------------------------------------------------------------

    def plan_entity(
        self,
        entity_id: str,
        from_ms: int,
        to_ms: int,
        shard_map: ShardMap,
        *,
        write_tier: WriteTier | None = None,
        compacted_through_ms: int = 0,
        earlier: Sequence[EarlierGroups] = (),
        repacked: tuple[int, int] = (0, 0),
        clustered: Sequence[Clustered] = (),
    ) -> QueryPlan:
        """Every (table, PK, SK range) that can hold readings of ``entity_id`` in
        ``[from_ms, to_ms)``, and nothing else.

        With a ``write_tier`` the range is also cut at hours (its slices), and each hour adds one
        partition to its blocks ones: when the hour ended by ``compacted_through_ms`` (the compaction
        watermark), its group's cluster partition under each G the hour was compacted under (the state's
        ``clustered``: :func:`keydesign.writetier.clustered_tiers`; the entity's cluster's sort keys), or
        its compacted partition for an hour compacted before cluster blocks; else its group's partition of the hour,
        and its group's under each ``earlier`` group count that may hold the hour
        (:meth:`keydesign.writetier.CompactionState.earlier_for`). Of such an hour, the part within
        ``repacked`` (the state's ``repack_from``/``repacked``: slices re-packed into sub-items) is read
        from the same groups' sub-item partitions instead, the entity's sub-group's sort keys."""
        validate_entity_id(entity_id)
        self.check_shard_map(shard_map)
        _check_range(from_ms, to_ms)
        parts: list[PartitionQuery] = []
        for seg_from, seg_to in self._segments(entity_id, from_ms, to_ms, shard_map, hours=write_tier is not None):
            table = self.table_for(seg_from)
            low, high = self.block_sk_from(entity_id, seg_from), self.block_sk_through(entity_id, seg_to - 1)
            for pk in self.partitions_of(entity_id, seg_from, shard_map):
                parts.append(PartitionQuery(table, pk, low, high, seg_from, seg_to))
            if write_tier is None:
                continue
            hour = slice_start(seg_from)
            if hour + SLICE_MS <= compacted_through_ms:
                kind: PartitionKind = "compacted"
                pks = [self.compacted_partition(entity_id, seg_from, shard_map)]
                tiers = clustered_tiers(clustered, hour)
                if tiers is not None:
                    kind = "cluster"
                    clusters: dict[int, WriteTier] = {}  # a group number once, in the tiers' order
                    for t in tiers:
                        clusters.setdefault(t.group_of(entity_id), t)
                    pks = [t.cluster_pk(g, self.cluster_span(seg_from)) for g, t in clusters.items()]
            else:
                tiers = [write_tier, *earlier_tiers(earlier, hour)]  # two G's may put it in one group
                groups: dict[int, WriteTier] = {}  # a group number once, in the tiers' order
                for t in tiers:
                    groups.setdefault(t.group_of(entity_id), t)
                for kind, (part_from, part_to) in _repacked_parts(seg_from, seg_to, repacked):
                    low = self.block_sk_from(entity_id, part_from, kind)
                    high = self.block_sk_through(entity_id, part_to - 1, kind)
                    pks = [(t.sub_pk if kind == "sub" else t.group_pk)(g, seg_from) for g, t in groups.items()]
                    parts.extend(PartitionQuery(table, pk, low, high, part_from, part_to, kind=kind) for pk in pks)
                continue
            low = self.block_sk_from(entity_id, seg_from, kind)
            high = self.block_sk_through(entity_id, seg_to - 1, kind)
            parts.extend(PartitionQuery(table, pk, low, high, seg_from, seg_to, kind=kind) for pk in pks)
        if not self.can.shared_partitions or write_tier is not None:
            # a partition over touching segments (the write tier's hours of a longer bucket, a cluster partition's
            # hours of a day or a bucket): one Query of them
            parts = merge_adjacent(parts)
        return QueryPlan(tuple(parts), entity_id, from_ms, to_ms)

    def plan_range(
        self,
        from_ms: int,
        to_ms: int,
        shard_map: ShardMap,
        *,
        write_tier: WriteTier | None = None,
        compacted_through_ms: int = 0,
        earlier: Sequence[EarlierGroups] = (),
        clustered: Sequence[Clustered] = (),
    ) -> QueryPlan:
        """Every partition of every bucket in ``[from_ms, to_ms)``: a cross-entity read.

        Only the hybrid layout can answer this with queries; the other layouts
        put the entity in the partition key, so finding all entities is a Scan.

        With a ``write_tier``, a bucket also reads, of each of its hours that ended by ``compacted_through_ms``,
        every cluster partition of the widest G it was compacted under (``clustered``; whole, its time
        filtered), or for hours compacted before cluster blocks the compacted partition of every shard
        (``<shard>#<bucket>#c``), and every
        group's partition of each of its later hours (of the largest G that may hold the hour: the
        deployed one or an ``earlier`` one), within the bucket's time. Every partition of
        a bucket serves the bucket's part of the range (``from_ms``, the cross-entity read's
        anchor): a group partition holds only its hour, its sort-key range says which part.
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
            shards = shard_map.global_shards_at(start)
            for shard in range(shards):
                parts.append(PartitionQuery(table, f"{shard:04d}#{label}", None, None, seg_from, seg_to, partial))
            for entity_id, subs in shard_map.split_entities_at(start):
                if subs > 1:
                    for pk in self.partitions_of(entity_id, start, shard_map):
                        parts.append(PartitionQuery(table, pk, None, None, seg_from, seg_to, partial))
            if write_tier is None:
                continue
            hours = range(slice_start(seg_from), seg_to, SLICE_MS)
            compacted = [(h, clustered_tiers(clustered, h)) for h in hours if h + SLICE_MS <= compacted_through_ms]
            if any(tiers is None for _, tiers in compacted):
                for shard in range(shards):
                    pk = compacted_pk("", f"{shard:04d}#{label}")
                    parts.append(PartitionQuery(table, pk, None, None, seg_from, seg_to, partial, "compacted"))
            # the bucket's cluster partitions (an hour or more: the bucket's, or its hour's), whole, once each
            spans: dict[int, WriteTier] = {}
            for hour, tiers in compacted:
                if tiers is not None:
                    widest = max(tiers, key=lambda t: t.groups)
                    held = spans.setdefault(self.cluster_span(hour), widest)
                    spans[self.cluster_span(hour)] = max(held, widest, key=lambda t: t.groups)
            for span, widest in spans.items():
                for group in range(widest.groups):
                    pk = widest.cluster_pk(group, span)
                    parts.append(PartitionQuery(table, pk, None, None, seg_from, seg_to, True, "cluster"))
            for hour in hours:
                if hour + SLICE_MS <= compacted_through_ms:
                    continue
                low = format_ts(max(hour, seg_from - MAX_BLOCK_SPAN_MS + 1))
                high = f"{format_ts(min(seg_to, hour + SLICE_MS) - 1)}#{HIGH}"
                # every G's group partitions are among the largest one's (w#<group>#<hour>, group < G)
                widest = max([write_tier, *earlier_tiers(earlier, hour)], key=lambda t: t.groups)
                for group in range(widest.groups):
                    pk = widest.group_pk(group, hour)
                    parts.append(PartitionQuery(table, pk, low, high, seg_from, seg_to, True, "group"))
        return QueryPlan(tuple(parts), None, from_ms, to_ms)

    def _segments(
        self, entity_id: str, from_ms: int, to_ms: int, shard_map: ShardMap, *, hours: bool
    ) -> list[tuple[int, int]]:
        """Split the range where the partitions can change: at buckets (hybrid),
        at shard-map changes, at table periods, and at hours (``hours``: the write tier's slices)."""
        cuts = {from_ms, to_ms, *shard_map.change_points(entity_id, from_ms, to_ms)}
        if hours:
            cuts.update(range(slice_start(from_ms) + SLICE_MS, to_ms, SLICE_MS))
        if self.can.shared_partitions:
            cuts.update(s for s in self.bucket.starts(from_ms, to_ms) if s > from_ms)
        if self.table_period is not None:
            cuts.update(s for s in self.table_period.starts(from_ms, to_ms) if s > from_ms)
        ordered = sorted(cuts)
        return list(itertools.pairwise(ordered))


# -- reading keys back (stream records, metrics) ------------------------------------

_STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z"
_LABEL = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}"
_HYBRID_PK = re.compile(rf"^(\d{{4}})#({_LABEL})(?:#([^#]+)#(\d{{3}}))?\Z")
_HYBRID_SK = re.compile(rf"^([^#]+)#{_STAMP}#[0-9a-f]{{{BLOCK_ID_DIGITS}}}#([1-9]\d{{0,2}})\Z")
_SUFFIX_PK = re.compile(r"^([^#]+)#(\d{1,4})\Z")
_SUFFIX_SK = re.compile(rf"^{_STAMP}#[0-9a-f]{{{BLOCK_ID_DIGITS}}}#([1-9]\d{{0,2}})\Z")


@dataclass(frozen=True, slots=True)
class KeyParts:
    """What a stored block's key says: whose readings it holds, whether its partition
    key is shared with other entities (a hybrid base shard) or the entity's own, and
    the write units a put of it is billed."""

    entity: str
    shared: bool
    write_units: int


def parse_keys(pk: str, sk: str, layout_kind: LayoutKind) -> KeyParts | None:
    """The entity of a readings-table key, and whether its partition key is shared; None if not ours."""
    found = entity_keys(pk, sk, layout_kind, _HYBRID_SK, _SUFFIX_SK)
    if found is None:
        return None
    entity, shared, sk_match = found
    return KeyParts(entity, shared, int(sk_match.groups()[-1]))


def entity_keys(
    pk: str, sk: str, layout_kind: LayoutKind, hybrid_sk: re.Pattern[str], suffix_sk: re.Pattern[str]
) -> tuple[str, bool, re.Match[str]] | None:
    """The entity of a key whose sort key matches ``hybrid_sk`` (its first group the entity) or
    ``suffix_sk``, as ``layout_kind`` has it, whether its partition key is shared, and the sort
    key's match; None if the key is not one."""
    if CAPABILITIES[layout_kind].shared_partitions:
        pk_match, sk_match = _HYBRID_PK.match(pk), hybrid_sk.match(sk)
        if pk_match is None or sk_match is None:
            return None
        entity, own = sk_match.group(1), pk_match.group(3)
        if own is not None and own != entity:
            return None
        shared = own is None
    else:
        pk_match, sk_match = _SUFFIX_PK.match(pk), suffix_sk.match(sk)
        if pk_match is None or sk_match is None:
            return None
        entity, shared = pk_match.group(1), False
    try:
        validate_entity_id(entity)
    except KeyDesignError:
        return None
    return entity, shared, sk_match


def key_family(partition_key: str, layout_kind: LayoutKind) -> str:
    """The partition key without its time bucket: the same name in every bucket.

    ``0042#2026-11-22T06:00`` -> ``0042``; ``0042#2026-11-22T06:00#sensor-1#003``
    -> ``0042#sensor-1#003``. Keys of the other layouts have no bucket and are
    returned as they are. Metric dimensions and alert cooldowns use it, so one
    hot shard stays one series and one alert across buckets.
    """
    if CAPABILITIES[layout_kind].shared_partitions:
        match = _HYBRID_PK.match(partition_key)
        if match is not None:
            shard, _, entity, sub = match.groups()
            return shard if entity is None else f"{shard}#{entity}#{sub}"
    return partition_key


def _repacked_parts(from_ms: int, to_ms: int, repacked: tuple[int, int]) -> list[tuple[PartitionKind, tuple[int, int]]]:
    """``[from_ms, to_ms)`` (in an uncompacted hour) cut at the re-packed range ``[low, high)``: its part
    inside it read from sub-items, the parts before and after it from group items."""
    low, high = max(from_ms, repacked[0]), min(to_ms, repacked[1])
    if low >= high:
        return [("group", (from_ms, to_ms))]
    pieces: list[tuple[PartitionKind, tuple[int, int]]] = [("sub", (low, high))]
    if from_ms < low:
        pieces.insert(0, ("group", (from_ms, low)))
    if high < to_ms:
        pieces.append(("group", (high, to_ms)))
    return pieces


def merge_adjacent(parts: list[PartitionQuery]) -> list[PartitionQuery]:
    """Join queries of one partition over touching time segments into one query."""
    merged: dict[tuple[str, str], list[PartitionQuery]] = {}
    for part in parts:
        runs = merged.setdefault((part.table, part.pk), [])
        if runs and runs[-1].to_ms == part.from_ms:
            last = runs[-1]
            runs[-1] = replace(last, sk_high=part.sk_high, to_ms=part.to_ms)
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
