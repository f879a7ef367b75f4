"""The query service: plan, fan out, merge, page, aggregate.

Layering: ``api`` (HTTP) -> this module -> ``adapters`` (DynamoDB, secrets) ->
``keydesign`` (every key, table name and plan). Nothing here builds a key:
plans come from :class:`keydesign.Layout`, and a resumed read narrows a
partition's block sort-key range with ``Layout.block_sk_from`` /
``block_sk_through`` at the last reading returned.

Ordering and resumption (see :mod:`query.merge` and :mod:`query.cursor`):

* per-entity reads are in time order (ties: event id), ascending or descending;
* cross-entity reads go bucket by bucket in time order and, inside a bucket,
  by entity id then time (the partitions' own order). Every reading of the
  range comes exactly once, and each entity's readings are in time order;
  a strict global time order would need a whole bucket in memory.

A page ends after ``limit`` readings; its cursor holds the last reading's
position, and the next page re-plans from there and skips everything at or
before it (a page may stop inside a block: the next one decodes it again and
resumes exactly there). A page also ends early, with what it found, when it
reaches the function's deadline (remaining time less ``RESPONSE_MARGIN``),
MAX_QUERY_CALLS Query calls, MAX_SCAN_ITEMS readings decoded, or the
response-size cap; its cursor then holds the merge's frontier, which may lie
past the last reading when the page ended in a run of empty partitions, so
those are not read again.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from adapters.clients import client
from adapters.observability import logger, metrics
from adapters.occupancy import OccupancyReader, OccupancyStore
from adapters.partition_reader import DynamoPartitionReader, Page, PageRequest, PartitionReader
from adapters.rollup_store import ReadCount, RollupStore
from adapters.secret_versions import read_secret
from adapters.settings import CommonSettings
from adapters.shard_map_source import ShardMapSource
from adapters.shard_map_store import shard_map_source
from keydesign import (
    InvalidInput,
    Layout,
    PartitionQuery,
    QueryPlan,
    ShardMap,
    format_ts,
    parse_timestamp,
    read_units,
    validate_entity_id,
)
from keydesign import Reading as DecodedReading
from keydesign.periods import format_duration
from query.aggregate import SeriesBuilder
from query.cursor import CursorCodec, CursorError, CursorKeys, binding
from query.errors import ScanLimitExceeded, UnsupportedByLayout
from query.merge import (
    POSITION_MAX_SK,
    POSITION_MIN_SK,
    STOP_DEADLINE,
    STOP_QUERY_CALLS,
    STOP_SCAN_ITEMS,
    MergeOptions,
    Merger,
    PartitionStream,
    Placement,
    Position,
    ReadStats,
    Submit,
    narrows,
)
from query.models import (
    AggregateSeries,
    CutShort,
    Explanation,
    Interval,
    LatestReading,
    PlannedPartition,
    ReadCost,
    Reading,
    ReadingsPage,
)
from query.occupancy_plan import OccupancyPlanner, PlanningCost
from query.params import STATS, Order, PageArgs, ReadArgs, Stat, TimeRange
from query.rollups import RollupAnswers, Source
from query.settings import QueryLimits, QuerySettings

#: Bytes of block ``explain`` assumes per reading: a reading with a few measures and a
#: dimension takes about 31 bytes in a block of ten (its share of the block's key, header
#: and compressed columns), 207 alone in a block, 7 in a block of a thousand
#: (tests/unit/query/test_explain_estimate.py).
NOMINAL_READING_BYTES = 32
#: The default read: every measure, eventually consistent, data rather than the plan.
ALL_MEASURES = ReadArgs()
#: A page ends before its share of the Lambda response (at most 6 MB) passes this.
MAX_PAGE_BYTES = 5_000_000
EXPLAIN_PARTITIONS = 1000
ENTITY_ORDERING = "time, then event id"
RANGE_ORDERING = "bucket by bucket in time order; within a bucket by entity id, then time, then event id"
#: What a merge's stop is called on a page cut short by it.
_CUT_SHORT: dict[str, CutShort] = {
    STOP_DEADLINE: "deadline",
    STOP_QUERY_CALLS: "query_calls",
    STOP_SCAN_ITEMS: "scan_items",
}


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class QueryService:
    """Answers the four reads. Every public method takes checked, typed values
    (``query.params`` parses the client's strings into them at the route)."""

    def __init__(
        self,
        *,
        layout: Layout,
        shard_maps: ShardMapSource,
        reader: PartitionReader,
        cursors: CursorCodec,
        limits: QueryLimits,
        clock_ms: Callable[[], int] = wall_clock_ms,
        occupancy: OccupancyReader | None = None,
        rollups: RollupAnswers | None = None,
        retention_ms: int | None = None,
    ) -> None:
        self._layout = layout
        self._retention_ms = retention_ms
        self._rollups = rollups
        self._planner = (
            OccupancyPlanner(layout, occupancy, concurrency=limits.concurrency) if occupancy is not None else None
        )
        self._shard_maps = shard_maps
        self._reader = reader
        self._cursors = cursors
        self._limits = limits
        self._clock_ms = clock_ms
        # A layout change makes old sort keys meaningless: cursors are bound to it.
        period = layout.table_period.name if layout.table_period is not None else None
        self._design = [layout.kind, layout.bucket.spec, layout.table_prefix, period]

    @classmethod
    def from_settings(cls, settings: QuerySettings) -> QueryService:
        common, limits = settings, QueryLimits()
        return cls(
            layout=common.layout,
            shard_maps=shard_map_source(common, bootstrap=False),
            reader=DynamoPartitionReader(pool=max(32, limits.concurrency)),
            cursors=CursorCodec(CursorKeys.from_source(settings.cursor_secret, read_secret)),
            limits=limits,
            occupancy=occupancy_reader(common),
            rollups=rollup_answers(common),
            retention_ms=common.retention_ms,
        )

    @property
    def limits(self) -> QueryLimits:
        """The bounds requests are checked against (the routes parse with them)."""
        return self._limits

    # -- routes ----------------------------------------------------------------

    def entity_readings(
        self, entity: str, page: PageArgs, read: ReadArgs = ALL_MEASURES, *, time_left_ms: int | None = None
    ) -> ReadingsPage | Explanation:
        """A page of one entity's readings, in time order."""
        return self._readings(entity, page, read, time_left_ms)

    def range_readings(
        self, page: PageArgs, read: ReadArgs = ALL_MEASURES, *, time_left_ms: int | None = None
    ) -> ReadingsPage | Explanation:
        """A page of every entity's readings, bucket by bucket."""
        if not self._layout.can.range_reads:
            raise UnsupportedByLayout(
                f"cross-entity reads need the hybrid layout; this deployment uses the {self._layout.kind} layout, "
                "whose partition keys hold the entity (read per entity with /entities/{entity_id}/readings)"
            )
        return self._readings(None, page, read, time_left_ms)

    def _readings(
        self, entity: str | None, page: PageArgs, read: ReadArgs, time_left_ms: int | None
    ) -> ReadingsPage | Explanation:
        """One skeleton for both paged reads: ``entity`` None is a cross-entity read."""
        route = "range_readings" if entity is None else "entity_readings"
        window = page.window
        shard_map = self._shard_maps.current()
        if read.explain:
            if entity is None:
                plan = self._layout.plan_range(window.from_ms, window.to_ms, shard_map)
            else:
                plan = self._layout.plan_entity(entity, window.from_ms, window.to_ms, shard_map)
            return self._explain(route, plan, order=page.order, consistent=read.consistent, items=page.limit)
        bound = self._binding(route, entity, window, page.order, read.measures)
        descending = page.order == "desc"
        after = self._cursors.decode(page.cursor, bound) if page.cursor is not None else None
        plan_from, plan_to = window.from_ms, window.to_ms
        if after is not None:
            plan_from, plan_to = self._resumed_range(after, window, descending=descending, entity=entity)
        if entity is None:
            partitions, beyond, planning = self._range_plan(
                plan_from, plan_to, shard_map, window, descending=descending, consistent=read.consistent
            )
        else:
            partitions, beyond, planning = self._entity_plan(
                entity, plan_from, plan_to, shard_map, descending=descending, consistent=read.consistent
            )
        now_s = self._clock_ms() // 1000
        template = _template(partitions, descending=descending, consistent=read.consistent, now_epoch_s=now_s)
        placement = self._placement(entity, now_s)
        return self._page(
            route,
            [_stream(p, template, after, placement) for p in partitions],
            entity=entity,
            page=page,
            read=read,
            bound=bound,
            deadline=self._deadline(time_left_ms),
            beyond=beyond,
            planning=planning,
        )

    def latest(
        self, entity: str, lookback_ms: int | None = None, read: ReadArgs = ALL_MEASURES
    ) -> LatestReading | Explanation:
        """The newest reading of ``entity`` in the last ``lookback_ms`` (default: LATEST_LOOKBACK)."""
        now = self._clock_ms()
        lookback_ms = self._limits.latest_lookback_ms if lookback_ms is None else lookback_ms
        window = TimeRange(max(0, now - lookback_ms), now + 1)
        plan = self._layout.plan_entity(entity, window.from_ms, window.to_ms, self._shard_maps.current())
        if read.explain:
            return self._explain("latest", plan, order="desc", consistent=read.consistent, items=1)
        template = PageRequest(plan.partitions[0], descending=True, consistent=read.consistent, now_epoch_s=now // 1000)
        placement = self._placement(entity, now // 1000)
        streams = [_stream(p, template, None, placement) for p in plan.partitions]
        stats = ReadStats()
        # Newest buckets open first; older ones only while nothing was found.
        options = MergeOptions(descending=True, target=1, window=self._limits.concurrency)
        with self._fanout(len(streams)) as submit:
            merged = iter(Merger(streams, submit, options, stats))
            try:
                found = list(itertools.islice(merged, 1))
            finally:
                _close(merged)
        self._record("latest", stats, len(found))
        return LatestReading(
            entity_id=entity,
            searched_from=format_ts(window.from_ms),
            searched_to=format_ts(now),
            reading=_reading(found[0][1], read.measures) if found else None,
            cost=_cost(stats),
        )

    def aggregates(
        self,
        entity: str,
        window: TimeRange,
        interval_ms: int,
        stats: tuple[Stat, ...] = STATS,
        read: ReadArgs = ALL_MEASURES,
        *,
        time_left_ms: int | None = None,
    ) -> AggregateSeries | Explanation:
        """count/min/max/avg/sum of ``entity``'s measures per ``interval_ms`` over ``window``, as one answer:
        from rollups where they serve the request, from the raw readings elsewhere."""
        source = self._source(interval_ms, window, consistent=read.consistent)
        raw_from = max(window.from_ms, source.split_ms)
        if read.explain:
            # The plan lists the raw part only (none when the rollups cover the range).
            if raw_from < window.to_ms:
                plan = self._layout.plan_entity(entity, raw_from, window.to_ms, self._shard_maps.current())
            else:
                plan = QueryPlan((), entity, raw_from, window.to_ms, dedupe=False)
            explained = self._explain(
                "aggregates", plan, order="asc", consistent=read.consistent, items=self._limits.max_scan_items
            )
            return explained.model_copy(update={"source": source.name(window), "source_reason": source.reason})
        counted = ReadStats()
        intervals: list[Interval] = []
        readings = 0
        if source.level is not None and raw_from > window.from_ms:
            rolled = ReadCount()
            intervals, readings = self._rollups_of(
                entity,
                source.level,
                TimeRange(window.from_ms, raw_from),
                interval_ms=interval_ms,
                stats=stats,
                read=read,
                cost=rolled,
            )
            counted.queries, counted.scanned, counted.read_units = rolled.calls, rolled.items, rolled.read_units
        if raw_from < window.to_ms:
            raw, total = self._raw_series(
                entity,
                window=TimeRange(raw_from, window.to_ms),
                interval_ms=interval_ms,
                stats=stats,
                read=read,
                counted=counted,
                time_left_ms=time_left_ms,
            )
            intervals += raw
            readings += total
        self._record("aggregates", counted, readings)
        return AggregateSeries(
            entity_id=entity,
            from_=format_ts(window.from_ms),
            to=format_ts(window.to_ms),
            interval=format_duration(interval_ms),
            stats=list(stats),
            intervals=intervals,
            readings=readings,
            source=source.name(window),
            rollups_through=source.through,
            reached=None,
            cost=_cost(counted),
        )

    def total_aggregates(
        self, window: TimeRange, interval_ms: int, stats: tuple[Stat, ...] = STATS, read: ReadArgs = ALL_MEASURES
    ) -> AggregateSeries:
        """Every entity's readings per ``interval_ms`` over ``window``, from the rollups' totals only."""
        source = self._source(interval_ms, window, consistent=read.consistent)
        if source.level is None:
            raise InvalidInput("interval", f"every-entity aggregates are read from rollups only: {source.reason}")
        rolled = ReadCount()
        answered = TimeRange(window.from_ms, source.split_ms)
        intervals, readings = self._rollups_of(
            None, source.level, answered, interval_ms=interval_ms, stats=stats, read=read, cost=rolled
        )
        counted = ReadStats(queries=rolled.calls, scanned=rolled.items, read_units=rolled.read_units)
        self._record("total_aggregates", counted, readings)
        return AggregateSeries(
            entity_id=None,
            from_=format_ts(window.from_ms),
            to=format_ts(window.to_ms),
            interval=format_duration(interval_ms),
            stats=list(stats),
            intervals=intervals,
            readings=readings,
            source="rollups",
            rollups_through=source.through,
            reached=format_ts(source.split_ms),
            cost=_cost(counted),
        )

    def _source(self, interval_ms: int, window: TimeRange, *, consistent: bool) -> Source:
        if self._rollups is None:
            return Source(None, window.from_ms, "rollups are off in this deployment (ROLLUPS unset)", None)
        return self._rollups.source(interval_ms, window, consistent=consistent)

    def _rollups_of(
        self,
        entity: str | None,
        level: int,
        window: TimeRange,
        *,
        interval_ms: int,
        stats: tuple[Stat, ...],
        read: ReadArgs,
        cost: ReadCount,
    ) -> tuple[list[Interval], int]:
        if self._rollups is None:
            raise RuntimeError("a rollup source without rollups")
        return self._rollups.series(
            entity,
            level,
            window.from_ms,
            window.to_ms,
            interval_ms=interval_ms,
            stats=stats,
            measures=read.measures,
            consistent=read.consistent,
            cost=cost,
        )

    def _raw_series(
        self,
        entity: str,
        *,
        window: TimeRange,
        interval_ms: int,
        stats: tuple[Stat, ...],
        read: ReadArgs,
        counted: ReadStats,
        time_left_ms: int | None,
    ) -> tuple[list[Interval], int]:
        """The intervals of ``window`` streamed from the raw readings (raises 413 past the budget)."""
        plan = self._layout.plan_entity(entity, window.from_ms, window.to_ms, self._shard_maps.current())
        partitions, planning = self._pruned(plan, consistent=read.consistent)
        now_s = self._clock_ms() // 1000
        template = _template(partitions, consistent=read.consistent, now_epoch_s=now_s)
        placement = self._placement(entity, now_s)
        streams = [_stream(p, template, None, placement) for p in partitions]
        counted.queries += planning.queries
        counted.read_units += planning.read_units
        deadline = self._deadline(time_left_ms)
        # Every partition will be read whole: keep the pipeline full.
        options = MergeOptions(
            window=self._limits.concurrency,
            read_ahead=True,
            prefetch=True,
            max_decoded=self._limits.max_scan_items,
            max_queries=self._limits.max_query_calls,
            deadline=deadline,
        )
        series = SeriesBuilder(interval_ms, stats)
        wanted = read.measures
        with self._fanout(len(streams), abandon=deadline is not None) as submit:
            merger = Merger(streams, submit, options, counted)
            for key, reading in merger:
                measures = reading.measures
                if wanted is not None:
                    measures = {name: measures[name] for name in wanted if name in measures}
                series.add(key.anchor, measures)
        if merger.stopped is not None:
            # An aggregate is one answer: a part of it would look like a whole.
            # Say how far the scan got, so the client can split the range there.
            reached = format_ts(_anchor_ms(merger.frontier) if merger.frontier is not None else window.from_ms)
            why = {
                STOP_DEADLINE: "ran out of time",
                STOP_QUERY_CALLS: f"used the {self._limits.max_query_calls} Query calls one request may make",
            }.get(merger.stopped, f"decoded the {self._limits.max_scan_items} readings one request may read")
            self._record("aggregates", counted, 0, cut_short=merger.stopped)
            raise ScanLimitExceeded(
                "to",
                f"the aggregate {why} after reading [{format_ts(window.from_ms)}, {reached}) of the range; "
                f"aggregate [from, {reached}) and [{reached}, to) separately",
            )
        return series.intervals(), series.total

    # -- machinery ---------------------------------------------------------------

    def _binding(
        self, route: str, entity: str | None, window: TimeRange, order: str, projection: tuple[str, ...] | None
    ) -> bytes:
        return binding(
            route=route,
            design=self._design,
            entity=entity,
            frm=window.from_ms,
            to=window.to_ms,
            order=order,
            measures=list(projection) if projection is not None else None,
        )

    def _page(
        self,
        route: str,
        streams: list[PartitionStream],
        *,
        entity: str | None,
        page: PageArgs,
        read: ReadArgs,
        bound: bytes,
        deadline: float | None,
        beyond: Position | None,
        planning: PlanningCost | None = None,
    ) -> ReadingsPage:
        stats = ReadStats()
        if planning is not None:
            # Occupancy reads are Query calls of this request too.
            stats.queries, stats.read_units = planning.queries, planning.read_units
        window, order, page_size = page.window, page.order, page.limit
        descending = order == "desc"
        options = MergeOptions(
            descending=descending,
            target=page_size + 1,
            window=self._limits.concurrency,
            max_decoded=self._limits.max_scan_items,
            max_queries=self._limits.max_query_calls,
            deadline=deadline,
        )
        found: list[tuple[Position, DecodedReading]] = []
        resume: Position | None = None
        cut_short: CutShort | None = None
        size = 0
        wanted = read.measures
        with self._fanout(len(streams), abandon=deadline is not None) as submit:
            merger = Merger(streams, submit, options, stats)
            merged = iter(merger)
            try:
                for key, item in merged:
                    # The item after a full page proves there is a next page. A page
                    # also ends before its body would outgrow a Lambda response.
                    item_size = _json_bytes(item, wanted)
                    if len(found) == page_size or (found and size + item_size > MAX_PAGE_BYTES):
                        resume = found[-1][0]
                        if len(found) < page_size:
                            cut_short = "response_size"
                        break
                    found.append((key, item))
                    size += item_size
            finally:
                _close(merged)
        if merger.stopped is not None:
            # Cut short by time, calls or decoding: resume at the frontier, past any
            # empty partitions this page already read.
            resume = merger.frontier
            cut_short = _CUT_SHORT[merger.stopped]
        elif resume is None and beyond is not None:
            # Every partition planned for this page was read, and the range goes on.
            resume = beyond
            if len(found) < page_size:
                cut_short = "query_calls"
        next_cursor = self._cursors.encode(bound, resume) if resume is not None else None
        if resume is None:
            reached_ms = window.from_ms if descending else window.to_ms
        else:
            reached_ms = self._reached_ms(resume, window, descending=descending, per_entity=entity is not None)
        self._record(route, stats, len(found), cut_short=cut_short)
        return ReadingsPage(
            entity_id=entity,
            from_=format_ts(window.from_ms),
            to=format_ts(window.to_ms),
            order=order,
            ordering=ENTITY_ORDERING if entity is not None else RANGE_ORDERING,
            count=len(found),
            items=[_reading(item, wanted, key.anchor if entity is not None else None) for key, item in found],
            next_cursor=next_cursor,
            complete=cut_short is None,
            cut_short_by=cut_short,
            reached=format_ts(reached_ms),
            cost=_cost(stats),
        )

    # -- plans, pruned by occupancy when the control table has it -----------------------

    def _entity_plan(
        self, entity: str, from_ms: int, to_ms: int, shard_map: ShardMap, *, descending: bool, consistent: bool
    ) -> tuple[Sequence[PartitionQuery], Position | None, PlanningCost]:
        """The partitions one entity page reads, where to resume if they end before the
        range does, and what reading occupancy cost."""
        planning = PlanningCost()
        occupancy = self._planner.occupancy(consistent=consistent) if self._planner else None
        if self._planner is None or occupancy is None:
            return self._layout.plan_entity(entity, from_ms, to_ms, shard_map).partitions, None, planning
        pruned = self._planner.entity_walk(
            occupancy,
            entity,
            from_ms,
            to_ms,
            shard_map,
            descending=descending,
            consistent=consistent,
            enough=self._limits.concurrency,
            cost=planning,
        )
        return pruned.partitions, pruned.beyond, planning

    def _range_plan(
        self, from_ms: int, to_ms: int, shard_map: ShardMap, window: TimeRange, *, descending: bool, consistent: bool
    ) -> tuple[Sequence[PartitionQuery], Position | None, PlanningCost]:
        """The partitions one cross-entity page reads (see :meth:`_entity_plan`)."""
        planning = PlanningCost()
        occupancy = self._planner.occupancy(consistent=consistent) if self._planner else None
        if self._planner is None or occupancy is None:
            plan, beyond = self._range_chunk(from_ms, to_ms, shard_map, window, descending=descending)
            return plan.partitions, beyond, planning
        pruned = self._planner.range_walk(
            occupancy,
            from_ms,
            to_ms,
            shard_map,
            window_from_ms=window.from_ms,
            descending=descending,
            consistent=consistent,
            enough=self._limits.max_query_calls + self._limits.concurrency,
            cost=planning,
        )
        return pruned.partitions, pruned.beyond, planning

    def _pruned(self, plan: QueryPlan, *, consistent: bool) -> tuple[Sequence[PartitionQuery], PlanningCost]:
        """Every partition of ``plan`` that may hold data (an aggregate reads them all)."""
        planning = PlanningCost()
        occupancy = self._planner.occupancy(consistent=consistent) if self._planner else None
        if self._planner is None or occupancy is None:
            return plan.partitions, planning
        return self._planner.entity_whole(occupancy, plan.partitions, consistent=consistent, cost=planning), planning

    def _range_chunk(
        self, from_ms: int, to_ms: int, shard_map: ShardMap, window: TimeRange, *, descending: bool
    ) -> tuple[QueryPlan, Position | None]:
        """The plan of the buckets of ``[from_ms, to_ms)`` nearest where the read
        starts that one page can reach (MAX_QUERY_CALLS plus a window of
        partitions), and the position to resume at when the page reads them all
        (None when they reach the end of the range). A 31-day plan on 100
        shards has 74,400 partitions; building them all costs a second of CPU
        for the few hundred a page may open."""
        bucket = self._layout.bucket
        width = bucket.width_ms
        first = bucket.start(to_ms - 1) if descending else bucket.start(from_ms)
        first_plan = self._layout.plan_range(max(from_ms, first), min(to_ms, first + width), shard_map)
        buckets = (self._limits.max_query_calls + self._limits.concurrency) // max(1, len(first_plan.partitions)) + 2
        if descending:
            low = first + width - buckets * width
            if low <= from_ms:
                return self._layout.plan_range(from_ms, to_ms, shard_map), None
            # Resume with the bucket below the chunk, which is still to be read.
            below = max(window.from_ms, low - width)
            return self._layout.plan_range(low, to_ms, shard_map), Position(_ts(below), POSITION_MAX_SK)
        high = first + buckets * width
        if high >= to_ms:
            return self._layout.plan_range(from_ms, to_ms, shard_map), None
        return self._layout.plan_range(from_ms, high, shard_map), Position(_ts(high), POSITION_MIN_SK)

    def _resumed_range(
        self, after: Position, window: TimeRange, *, descending: bool, entity: str | None
    ) -> tuple[int, int]:
        """The part of ``window`` a page resumed at ``after`` plans: partitions wholly
        before the cursor's anchor drop out. An anchor outside the range is refused."""
        anchor_ms = _anchor_ms(after)
        per_entity = entity is not None
        if per_entity:
            inside = window.from_ms <= anchor_ms < window.to_ms
        else:
            # A cross-entity anchor is where its bucket meets the range: 'from', or a bucket start.
            inside = anchor_ms == window.from_ms or (
                window.from_ms < anchor_ms < window.to_ms and self._layout.bucket.is_boundary(anchor_ms)
            )
        if not inside:
            raise CursorError("points outside the requested range")
        if not descending:
            return anchor_ms, window.to_ms
        return window.from_ms, self._reached_ms(after, window, descending=True, per_entity=per_entity)

    def _deadline(self, time_left_ms: int | None) -> float | None:
        """The monotonic instant a read stops at: the function's remaining time
        less what serializing and sending the answer needs. None outside Lambda."""
        if time_left_ms is None:
            return None
        return time.monotonic() + max(0, time_left_ms - self._limits.response_margin_ms) / 1000

    def _reached_ms(self, resume: Position, window: TimeRange, *, descending: bool, per_entity: bool) -> int:
        """The time a page cut at ``resume`` has read to (see ``ReadingsPage.reached``)."""
        anchor_ms = _anchor_ms(resume)
        if not descending:
            return anchor_ms
        if per_entity:
            # Everything after the anchor's instant has been returned.
            return min(window.to_ms, anchor_ms + 1)
        bucket = self._layout.bucket
        return min(window.to_ms, bucket.start(anchor_ms) + bucket.width_ms)

    def _placement(self, entity: str | None, now_s: int) -> Placement:
        """How this read's readings are ordered, and from when they are live at ``now_s``."""
        live_from = 0 if self._retention_ms is None else max(0, now_s * 1000 - self._retention_ms)
        return Placement(self._layout, entity, live_from)

    @contextmanager
    def _fanout(self, partitions: int, *, abandon: bool = False) -> Iterator[Submit]:
        """A bounded pool for one request; pending speculative reads are cancelled at the end.
        With ``abandon`` (a read under a deadline) calls still in flight are not
        waited for: their answers are no longer wanted, and waiting would pass the deadline."""
        pool = ThreadPoolExecutor(max_workers=max(1, min(self._limits.concurrency, partitions)))

        def submit(request: PageRequest) -> Future[Page]:
            return pool.submit(self._reader.read_page, request)

        try:
            yield submit
        finally:
            pool.shutdown(wait=not abandon, cancel_futures=True)

    def _explain(self, route: str, plan: QueryPlan, *, order: Order, consistent: bool, items: int) -> Explanation:
        per_query = read_units(0, consistent=consistent)
        minimum = len(plan.partitions) * per_query
        period = self._layout.table_period
        return Explanation(
            route=route,
            entity_id=plan.entity_id,
            from_=format_ts(plan.from_ms),
            to=format_ts(plan.to_ms),
            layout=self._layout.kind,
            bucket=self._layout.bucket.spec,
            table_period=period.name if period is not None else None,
            order=order,
            consistent=consistent,
            dedupe=True,  # every layout stores blocks: a reading read twice is returned once
            partition_count=len(plan.partitions),
            tables=list(plan.tables),
            partitions=[_planned(p) for p in plan.partitions[:EXPLAIN_PARTITIONS]],
            partitions_truncated=len(plan.partitions) > EXPLAIN_PARTITIONS,
            minimum_read_units=minimum,
            estimated_read_units=minimum + read_units(items * NOMINAL_READING_BYTES, consistent=consistent),
            nominal_item_bytes=NOMINAL_READING_BYTES,
            source=None,
            source_reason=None,
        )

    def _record(self, route: str, stats: ReadStats, returned: int, *, cut_short: str | None = None) -> None:
        if stats.missing_tables:
            # A dropped (past retention) or not-yet-created period table reads as empty.
            logger.warning("tables missing, read as empty", extra={"tables": sorted(stats.missing_tables)})
        logger.info(
            "read",
            extra={
                "route": route,
                "partitions_planned": stats.partitions_planned,
                "partitions_queried": stats.partitions_queried,
                "queries": stats.queries,
                "items_read": stats.scanned,
                "readings_decoded": stats.decoded,
                "items_returned": returned,
                "read_units": stats.read_units,
                "cut_short_by": cut_short,
            },
        )
        metrics.add_dimension(name="route", value=route)
        metrics.add_metric(name="QueryCalls", unit=MetricUnit.Count, value=stats.queries)
        metrics.add_metric(name="PartitionsQueried", unit=MetricUnit.Count, value=stats.partitions_queried)
        metrics.add_metric(name="ItemsRead", unit=MetricUnit.Count, value=stats.scanned)
        metrics.add_metric(name="ReadUnits", unit=MetricUnit.Count, value=stats.read_units)
        if cut_short is not None:
            metrics.add_metric(name="PagesCutShort", unit=MetricUnit.Count, value=1)


def occupancy_reader(common: CommonSettings) -> OccupancyReader | None:
    """The occupancy records in ``CONTROL_TABLE`` (none without a control table: nothing is pruned)."""
    if common.control_table is None:
        return None
    return OccupancyReader(OccupancyStore(client("dynamodb"), common.control_table, common.layout.table_prefix))


def rollup_answers(common: CommonSettings) -> RollupAnswers | None:
    """Reads of the rollups in ``CONTROL_TABLE`` (none when ROLLUPS is unset: every aggregate is read raw)."""
    if common.control_table is None or common.granularities is None:
        return None
    store = RollupStore(client("dynamodb"), None, common.control_table, common.layout.table_prefix, common.retention_ms)
    return RollupAnswers(store, common.granularities)


# -- streams -------------------------------------------------------------------------


def _template(partitions: Sequence[PartitionQuery], **options: Any) -> PageRequest:
    """The request every stream of a read starts from (a plan pruned to nothing has no
    stream, but the template still needs a partition to be built)."""
    first = partitions[0] if partitions else PartitionQuery("", "", None, None, 0, 1)
    return PageRequest(first, **options)


def _close(iterator: Iterator[Any]) -> None:
    """Stop a merge early (a generator left open would keep its streams alive)."""
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _json_bytes(reading: DecodedReading, measures: tuple[str, ...] | None) -> int:
    """An upper bound of the reading's share of the Lambda response: the JSON body
    is itself a string in the response document, so every quote and backslash
    is escaped twice (4 bytes) and a character outside ASCII costs up to 14
    (``\\ud83d\\udd25``). Ids and names are ASCII without quotes (ingest refuses others)."""
    size = 184 + len(reading.entity_id) + len(reading.event_id)  # with the 24-character timestamp
    size += sum(len(name) + 32 for name in reading.measures if measures is None or name in measures)
    for name, value in reading.dimensions.items():
        if value.isascii():
            size += len(name) + 10 + len(value) + 3 * (value.count('"') + value.count("\\"))
        else:
            size += len(name) + 10 + 14 * len(value)
    return size


@functools.lru_cache(maxsize=4096)
def _ts(ms: int) -> str:
    """format_ts, remembered: a long plan formats the same bucket bounds many times."""
    return format_ts(ms)


def _anchor_ms(position: Position) -> int:
    return parse_timestamp(position.anchor, "cursor")


def _resume_at(after: Position, entity: str | None) -> tuple[str, int]:
    """The entity and time of the reading at ``after`` (a reading's position, see ``narrows``):
    per entity, the read's entity and the anchor; across entities, the reading key's own."""
    if entity is not None:
        return entity, _anchor_ms(after)
    parts = after.sk.split("#")
    if len(parts) != 3:  # <entity>#<ts>#<event id>
        raise CursorError("carries an unreadable position")
    try:
        ts_ms = parse_timestamp(parts[1], "cursor")
        validate_entity_id(parts[0], "cursor")
    except InvalidInput:
        raise CursorError("carries an unreadable position") from None
    if format_ts(ts_ms) != parts[1]:
        raise CursorError("carries an unreadable position")
    return parts[0], ts_ms


def _stream(
    partition: PartitionQuery, template: PageRequest, after: Position | None, placement: Placement
) -> PartitionStream:
    """A partition's stream of readings in merge order: per entity by time, across entities by the
    partition's bucket (its start, as range-clipped) and then reading key."""
    first = _ts(partition.from_ms)
    edge = POSITION_MAX_SK if template.descending else POSITION_MIN_SK
    entity = placement.entity
    if entity is not None:
        last = _ts(partition.to_ms - 1)
        inside = after is not None and first <= after.anchor <= last
        anchor, open_key = None, Position(last if template.descending else first, edge)
    else:
        inside = after is not None and after.anchor == first
        anchor, open_key = first, Position(first, edge)
    sk_low = sk_high = lookback = None
    if after is not None and inside and narrows(after):
        # Resume inside this partition, in the blocks that may hold the reading at ``after``
        # (the reading itself and everything before it are skipped once decoded). Ascending,
        # those start up to a block's span before it: they are read first, in one Query.
        at_entity, at_ms = _resume_at(after, entity)
        if template.descending:
            sk_high = placement.layout.block_sk_through(at_entity, at_ms)
        else:
            sk_low = placement.layout.block_sk_from(at_entity, at_ms)
            lookback = placement.layout.block_sk_through(at_entity, at_ms)
    return PartitionStream(
        template,
        partition,
        placement=placement,
        open_key=open_key,
        after=after,
        anchor=anchor,
        sk_low=sk_low,
        sk_high=sk_high,
        lookback=lookback,
    )


# -- shapes --------------------------------------------------------------------------


def _reading(reading: DecodedReading, measures: tuple[str, ...] | None, ts: str | None = None) -> Reading:
    """The reading as the API returns it (``ts``: its timestamp, when the caller has it formatted)."""
    values = reading.measures
    return Reading(
        entity_id=reading.entity_id,
        event_id=reading.event_id,
        timestamp=ts or format_ts(reading.ts_ms),
        measures=dict(values) if measures is None else {name: values[name] for name in measures if name in values},
        dimensions=dict(reading.dimensions),
    )


def _cost(stats: ReadStats) -> ReadCost:
    return ReadCost(
        partitions_planned=stats.partitions_planned,
        partitions_queried=stats.partitions_queried,
        queries=stats.queries,
        items_read=stats.scanned,
        read_units=stats.read_units,
    )


def _planned(partition: PartitionQuery) -> PlannedPartition:
    return PlannedPartition(
        table=partition.table,
        pk=partition.pk,
        sk_low=partition.sk_low,
        sk_high=partition.sk_high,
        from_=format_ts(partition.from_ms),
        to=format_ts(partition.to_ms),
        time_filter=partition.time_filter,
    )
