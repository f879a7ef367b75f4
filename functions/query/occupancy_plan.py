"""The partitions one page reads: its plan, pruned to the partitions that hold data by the occupancy records.

The key-design layer plans every partition that *can* hold a range's readings;
:mod:`keydesign.occupancy` says which of them provably hold none. This module
walks a read's range in its order, loads the occupancy of the days it reaches
(in batches that double, in parallel) and keeps the partitions that may hold
data, until it has as many as one page can use. The walk stops there and
returns the position to resume at, so an empty month costs a few dozen small
Queries and a busy day one, not one per day.

Without a control table, or before ingest has stored the ``since`` marker,
nothing is loaded and nothing is pruned. The write tier's partitions (group
items, compacted blocks) have no occupancy records: they are never pruned, and
a bucket without occupied block partitions still reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from adapters.occupancy import OccupancyReader
from keydesign import Layout, PartitionQuery, QueryPlan, ShardMap, format_ts
from keydesign.occupancy import Occupancy, common_prefix, days_of
from keydesign.periods import DAY_MS
from keydesign.writetier import CompactionState, WriteTier
from query.merge import POSITION_MAX_SK, POSITION_MIN_SK, Position, ReadStats
from query.settings import QueryLimits

#: Days loaded by the first batch of a walk; each further batch doubles, up to MAX_BATCH_DAYS.
FIRST_BATCH_DAYS = 1
MAX_BATCH_DAYS = 16

#: The partitions to read, and where to resume when they end before the range does.
PagePlan = tuple[Sequence[PartitionQuery], Position | None]


class OccupancyPlanner:
    """Plans pages, pruned with an :class:`OccupancyReader` when there is one; one per service, thread-safe.
    Occupancy reads are Query calls of the request: they count in its ``cost``."""

    def __init__(
        self, layout: Layout, reader: OccupancyReader | None, limits: QueryLimits, write_tier: WriteTier | None = None
    ) -> None:
        self._layout = layout
        self._reader = reader
        self._limits = limits
        self._write_tier = write_tier

    def plan_entity(
        self, entity: str, from_ms: int, to_ms: int, shard_map: ShardMap, *, through: CompactionState
    ) -> QueryPlan:
        """The layout's plan of one entity's readings, with the write tier at the compaction state ``through``."""
        tier, earlier = self._write_tier, through.earlier_for(self._write_tier)
        return self._layout.plan_entity(
            entity,
            from_ms,
            to_ms,
            shard_map,
            write_tier=tier,
            compacted_through_ms=through.through,
            earlier=earlier,
            repacked=(through.repack_from, through.repacked),
            clustered=through.clustered,
        )

    def plan_range(self, from_ms: int, to_ms: int, shard_map: ShardMap, *, through: CompactionState) -> QueryPlan:
        """The layout's plan of every entity's readings, with the write tier at the compaction state ``through``."""
        tier, earlier = self._write_tier, through.earlier_for(self._write_tier)
        return self._layout.plan_range(
            from_ms,
            to_ms,
            shard_map,
            write_tier=tier,
            compacted_through_ms=through.through,
            earlier=earlier,
            clustered=through.clustered,
        )

    def occupancy(self, *, consistent: bool) -> Occupancy | None:
        """What is known before any day is loaded; None when nothing may be pruned."""
        if self._reader is None:
            return None
        # A GetItem (at most one per cache period), not a Query: not counted in ``cost.queries``.
        since, _ = self._reader.since(consistent=consistent)
        return None if since is None else Occupancy(since)

    def load(self, occupancy: Occupancy, wants: dict[int, str], *, consistent: bool, cost: ReadStats) -> None:
        """Load the days of ``wants`` (day -> sort-key prefix) not yet known, in parallel."""
        reader = self._reader
        missing = [
            (day, prefix)
            for day, prefix in wants.items()
            if occupancy.needs(day) or (day in occupancy.days and not prefix.startswith(occupancy.days[day].prefix))
        ]
        if not missing or reader is None:  # no reader gives no occupancy to load into
            return
        with ThreadPoolExecutor(max_workers=min(max(1, self._limits.concurrency), len(missing))) as pool:
            reads = list(pool.map(lambda want: reader.day(want[0], want[1], consistent=consistent), missing))
        for (day, _), read in zip(missing, reads, strict=True):
            occupancy.days[day] = read.day
            cost.queries += read.queries
            cost.read_units += read.read_units

    def whole(self, plan: QueryPlan, *, consistent: bool, cost: ReadStats) -> Sequence[PartitionQuery]:
        """Every partition of ``plan`` that may hold data (aggregates read the whole range)."""
        occupancy = self.occupancy(consistent=consistent)
        if occupancy is None:
            return plan.partitions
        self.load(occupancy, _prefixes(plan.partitions), consistent=consistent, cost=cost)
        return tuple(occupancy.prune(plan.partitions))

    # -- per entity -------------------------------------------------------------------

    def entity_page(
        self,
        entity: str,
        from_ms: int,
        to_ms: int,
        shard_map: ShardMap,
        *,
        descending: bool,
        consistent: bool,
        cost: ReadStats,
        through: CompactionState,
    ) -> PagePlan:
        """The partitions of ``[from_ms, to_ms)`` that may hold the entity's readings,
        walked day by day in read order until at least a window's worth
        (``concurrency``) are found, or a batch of days in which every partition holds data."""
        occupancy = self.occupancy(consistent=consistent)
        if occupancy is None:
            return self.plan_entity(entity, from_ms, to_ms, shard_map, through=through).partitions, None
        days = days_of(from_ms, to_ms)
        if descending:
            days.reverse()
        kept: list[PartitionQuery] = []
        done, batch = 0, FIRST_BATCH_DAYS
        while done < len(days):
            chunk = days[done : done + batch]
            done += len(chunk)
            low, high = max(from_ms, min(chunk)), min(to_ms, max(chunk) + DAY_MS)
            parts = self.plan_entity(entity, low, high, shard_map, through=through).partitions
            self.load(occupancy, _prefixes(parts), consistent=consistent, cost=cost)
            found = occupancy.prune(parts)
            kept.extend(found)
            batch = min(MAX_BATCH_DAYS, batch * 2)
            # Enough for a page: a window's worth, or every partition of these days
            # (a busy entity on a layout with few partitions, such as 4 suffixes).
            # The write tier's partitions are always kept: they prove nothing of these days.
            blocks = sum(part.kind == "blocks" for part in parts)
            found_blocks = sum(part.kind == "blocks" for part in found)
            full = found_blocks > 0 and found_blocks == blocks
            if (len(kept) >= self._limits.concurrency or full) and done < len(days):
                kept.sort(key=lambda p: p.from_ms)
                if descending:
                    return tuple(kept), Position(format_ts(low - 1), POSITION_MAX_SK)
                return tuple(kept), Position(format_ts(high), POSITION_MIN_SK)
        kept.sort(key=lambda p: p.from_ms)
        return tuple(kept), None

    # -- every entity -------------------------------------------------------------------

    def range_page(
        self,
        from_ms: int,
        to_ms: int,
        shard_map: ShardMap,
        *,
        window_from_ms: int,
        descending: bool,
        consistent: bool,
        cost: ReadStats,
        through: CompactionState,
    ) -> PagePlan:
        """The partitions of the buckets of ``[from_ms, to_ms)`` that may hold data, bucket
        by bucket in read order until as many are found as one page can open
        (MAX_QUERY_CALLS plus a window). A bucket with no occupied partition is skipped
        without being planned. ``window_from_ms``: where the requested range starts."""
        occupancy = self.occupancy(consistent=consistent)
        if occupancy is None:
            return self._range_chunk(from_ms, to_ms, shard_map, window_from_ms, descending=descending, through=through)
        enough = self._limits.max_query_calls + self._limits.concurrency
        bucket = self._layout.bucket
        width = bucket.width_ms
        starts = list(bucket.starts(from_ms, to_ms))
        days = days_of(from_ms, to_ms)
        if descending:
            starts.reverse()
            days.reverse()
        kept: list[PartitionQuery] = []
        next_day, batch = 0, FIRST_BATCH_DAYS
        for index, start in enumerate(starts):
            seg_from, seg_to = max(from_ms, start), min(to_ms, start + width)
            needed = days_of(seg_from, seg_to)
            while next_day < len(days) and any(occupancy.needs(d) for d in needed):
                wave = days[next_day : next_day + batch]
                next_day += len(wave)
                batch = min(MAX_BATCH_DAYS, batch * 2)
                self.load(occupancy, dict.fromkeys(wave, ""), consistent=consistent, cost=cost)
            if not occupancy.bucket_may_hold(start, seg_from, seg_to) and self._write_tier is None:
                continue
            kept.extend(occupancy.prune(self.plan_range(seg_from, seg_to, shard_map, through=through).partitions))
            if len(kept) >= enough and index + 1 < len(starts):
                following = starts[index + 1]
                if descending:
                    # Resume with the bucket below, which is still to be read.
                    return tuple(kept), Position(format_ts(max(window_from_ms, following)), POSITION_MAX_SK)
                return tuple(kept), Position(format_ts(following), POSITION_MIN_SK)
        return tuple(kept), None

    def _range_chunk(
        self,
        from_ms: int,
        to_ms: int,
        shard_map: ShardMap,
        window_from_ms: int,
        *,
        descending: bool,
        through: CompactionState,
    ) -> PagePlan:
        """Unpruned, the plan of the buckets of ``[from_ms, to_ms)`` nearest where the read
        starts that one page can reach (MAX_QUERY_CALLS plus a window of
        partitions), and the position to resume at when the page reads them all
        (None when they reach the end of the range). A 31-day plan on 100
        shards has 74,400 partitions; building them all costs a second of CPU
        for the few hundred a page may open."""
        bucket = self._layout.bucket
        width = bucket.width_ms
        first = bucket.start(to_ms - 1) if descending else bucket.start(from_ms)

        def plan(low: int, high: int) -> Sequence[PartitionQuery]:
            return self.plan_range(low, high, shard_map, through=through).partitions

        first_plan = plan(max(from_ms, first), min(to_ms, first + width))
        buckets = (self._limits.max_query_calls + self._limits.concurrency) // max(1, len(first_plan)) + 2
        if descending:
            low = first + width - buckets * width
            if low <= from_ms:
                return plan(from_ms, to_ms), None
            # Resume with the bucket below the chunk, which is still to be read.
            below = Position(format_ts(max(window_from_ms, low - width)), POSITION_MAX_SK)
            return plan(low, to_ms), below
        high = first + buckets * width
        if high >= to_ms:
            return plan(from_ms, to_ms), None
        return plan(from_ms, high), Position(format_ts(high), POSITION_MIN_SK)


def _prefixes(partitions: Sequence[PartitionQuery]) -> dict[int, str]:
    """Per day the partitions touch, the sort-key prefix their occupancy shares."""
    by_day: dict[int, list[PartitionQuery]] = {}
    for part in partitions:
        if part.kind != "blocks":  # no occupancy is recorded for the write tier's partitions
            continue
        for day in days_of(part.from_ms, part.to_ms):
            by_day.setdefault(day, []).append(part)
    return {day: common_prefix(parts) for day, parts in by_day.items()}
