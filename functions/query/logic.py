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

import dataclasses
import functools
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_all
from contextlib import closing, contextmanager
from typing import Any, NoReturn

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import TypeAdapter

from adapters.clients import client
from adapters.compaction_state import NOTHING_COMPACTED, CachedWatermark, PlanningWatermark, state_through
from adapters.observability import logger, metrics
from adapters.occupancy import OccupancyReader, OccupancyStore
from adapters.partition_reader import DynamoPartitionReader, Page, PageRequest, PartitionReader, decode, header_of
from adapters.rollup_store import ReadCount, RollupStore
from adapters.secret_versions import read_secret
from adapters.shard_map_source import ShardMapSource
from adapters.shard_map_store import shard_map_source
from keydesign import (
    InvalidInput,
    Layout,
    PartitionQuery,
    QueryPlan,
    format_ts,
    parse_timestamp,
    read_units,
    validate_entity_id,
)
from keydesign import Reading as DecodedReading
from keydesign.blocks import keep_newest
from keydesign.layouts import COMPACTED_KINDS, merge_adjacent
from keydesign.periods import DAY_MS, format_duration
from keydesign.writetier import SLICE_MS, WriteTier, slice_start
from query.aggregate import SeriesBuilder
from query.cursor import CursorCodec, CursorError, CursorKeys, binding, canonical_ms
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
    Stop,
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
from query.occupancy_plan import OccupancyPlanner
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
        write_tier: WriteTier | None = None,
        watermark: PlanningWatermark = NOTHING_COMPACTED,
    ) -> None:
        self._layout = layout
        self._retention_ms = retention_ms
        self._rollups = rollups
        self._write_tier = write_tier
        self._planner = OccupancyPlanner(layout, occupancy, limits, write_tier)
        self._watermark = watermark
        self._shard_maps = shard_maps
        self._reader = reader
        self._cursors = cursors
        #: The bounds requests are checked against (the routes parse with them).
        self.limits = limits
        self._clock_ms = clock_ms
        # A layout change makes old sort keys meaningless: cursors are bound to it.
        period = layout.table_period.name if layout.table_period is not None else None
        self._design = [layout.kind, layout.bucket.spec, layout.table_prefix, period]
        self._pool: ThreadPoolExecutor | None = None  # started by the first request that reads (_fanout)

    @classmethod
    def from_settings(cls, settings: QuerySettings) -> QueryService:
        """The service of the deployment: occupancy and rollups are read from ``CONTROL_TABLE`` (without
        one nothing is pruned; without ROLLUPS as well, every aggregate is read raw)."""
        limits = QueryLimits()
        control, prefix = settings.control_table, settings.layout.table_prefix
        occupancy = rollups = None
        watermark: PlanningWatermark = NOTHING_COMPACTED
        if control is not None:
            occupancy = OccupancyReader(OccupancyStore(client("dynamodb"), control, prefix))
            if settings.write_tier is not None:
                watermark = CachedWatermark(client("dynamodb"), control, prefix, settings.shard_map_cache_ttl_ms)
            if settings.granularities is not None:
                store = RollupStore(client("dynamodb"), None, control, prefix, settings.retention_ms)
                rollups = RollupAnswers(store, settings.granularities)
        return cls(
            layout=settings.layout,
            shard_maps=shard_map_source(settings, bootstrap=False),
            reader=DynamoPartitionReader(pool=max(32, limits.concurrency)),
            cursors=CursorCodec(CursorKeys.from_source(settings.cursor_secret, read_secret)),
            limits=limits,
            occupancy=occupancy,
            rollups=rollups,
            retention_ms=settings.retention_ms,
            write_tier=settings.write_tier,
            watermark=watermark,
        )

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
        through = self._watermark.state()
        if read.explain:
            if entity is None:
                plan = self._planner.plan_range(window.from_ms, window.to_ms, shard_map, through=through)
            else:
                plan = self._planner.plan_entity(entity, window.from_ms, window.to_ms, shard_map, through=through)
            return self._explain(route, plan, order=page.order, consistent=read.consistent, items=page.limit)
        bound = self._binding(route, entity, window, page.order, read.measures)
        descending = page.order == "desc"
        after = self._cursors.decode(page.cursor, bound) if page.cursor is not None else None
        plan_from, plan_to = window.from_ms, window.to_ms
        if after is not None:
            plan_from, plan_to = self._resumed_range(after, window, descending=descending, entity=entity)
        stats = ReadStats()  # occupancy reads are Query calls of this request too
        if entity is None:
            partitions, beyond = self._planner.range_page(
                plan_from,
                plan_to,
                shard_map,
                window_from_ms=window.from_ms,
                descending=descending,
                consistent=read.consistent,
                cost=stats,
                through=through,
            )
        else:
            partitions, beyond = self._planner.entity_page(
                entity,
                plan_from,
                plan_to,
                shard_map,
                descending=descending,
                consistent=read.consistent,
                cost=stats,
                through=through,
            )
        streams = self._streams(entity, partitions, after, self._clock_ms(), descending, read.consistent)
        return self._page(
            route,
            streams,
            stats,
            entity=entity,
            page=page,
            read=read,
            bound=bound,
            deadline=self._deadline(time_left_ms),
            beyond=beyond,
            after=after,
        )

    def latest(
        self, entity: str, lookback_ms: int | None = None, read: ReadArgs = ALL_MEASURES
    ) -> LatestReading | Explanation:
        """The newest reading of ``entity`` in the last ``lookback_ms`` (default: LATEST_LOOKBACK)."""
        now = self._clock_ms()
        lookback_ms = self.limits.latest_lookback_ms if lookback_ms is None else lookback_ms
        window = TimeRange(max(0, now - lookback_ms), now + 1)
        if read.explain:
            plan = self._plan_entity(entity, window.from_ms, window.to_ms)
            return self._explain("latest", plan, order="desc", consistent=read.consistent, items=1)
        stats, found = ReadStats(), None
        # Newest buckets open first; older ones only while nothing was found. With the write tier the
        # lookback is planned a UTC day at a time, newest first: such a plan costs CPU by the hours it
        # spans (a week's was most of the request's), and a reading in the newest day ends the search
        # there. A day boundary splits no bucket, hourly or daily table or cluster partition; a partition
        # that spans days (a random or calculated layout's) is read a day at a time, one Query a day searched.
        options = MergeOptions(descending=True, target=1, window=self.limits.concurrency)
        high = window.to_ms
        while found is None and high > window.from_ms:
            low = window.from_ms if self._write_tier is None else max(window.from_ms, (high - 1) // DAY_MS * DAY_MS)
            plan = self._plan_entity(entity, low, high)
            streams = self._streams(entity, plan.partitions, None, now, True, read.consistent)
            with self._fanout() as submit, closing(iter(Merger(streams, submit, options, stats))) as merged:
                found = next(merged, None)
            high = low
        self._record("latest", stats, int(found is not None))
        return LatestReading(
            entity_id=entity,
            searched_from=format_ts(window.from_ms),
            searched_to=format_ts(now),
            reading=Reading.model_validate(_reading(found[1], read.measures)) if found else None,
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
        from rollups where they serve the request (with the write tier, combined with the readings of the
        entity's unflagged compacted blocks: its hours that are compaction's), from the raw readings elsewhere."""
        source = self._source(interval_ms, window, consistent=read.consistent)
        if read.explain:
            # The plan lists the raw part only (none when the rollups cover the range).
            raw_from = max(window.from_ms, source.split_ms)
            if raw_from < window.to_ms:
                plan = self._plan_entity(entity, raw_from, window.to_ms)
            else:
                plan = QueryPlan((), entity, raw_from, window.to_ms, dedupe=False)
            explained = self._explain(
                "aggregates", plan, order="asc", consistent=read.consistent, items=self.limits.max_scan_items
            )
            return explained.model_copy(update={"source": source.name(window), "source_reason": source.reason})
        return self._series(entity, window, interval_ms, stats, read, source, time_left_ms)

    def total_aggregates(
        self, window: TimeRange, interval_ms: int, stats: tuple[Stat, ...] = STATS, read: ReadArgs = ALL_MEASURES
    ) -> AggregateSeries:
        """Every entity's readings per ``interval_ms`` over ``window``, from the rollups' totals only (each the
        rollup function's item and compaction's part combined), up to the rollups' watermark."""
        source = self._source(interval_ms, window, consistent=read.consistent, totals=True)
        if source.level is None:
            raise InvalidInput("interval", f"every-entity aggregates are read from rollups only: {source.reason}")
        return self._series(None, window, interval_ms, stats, read, source, None)

    def _source(self, interval_ms: int, window: TimeRange, *, consistent: bool, totals: bool = False) -> Source:
        if self._rollups is None:
            return Source(None, window.from_ms, "rollups are off in this deployment (ROLLUPS unset)", None)
        compacted = self._write_tier is not None
        return self._rollups.source(interval_ms, window, consistent=consistent, compacted=compacted, totals=totals)

    def _series(  # noqa: PLR0917 - the two aggregate routes' own arguments
        self,
        entity: str | None,
        window: TimeRange,
        interval_ms: int,
        stats: tuple[Stat, ...],
        read: ReadArgs,
        source: Source,
        time_left_ms: int | None,
    ) -> AggregateSeries:
        """The series from the rollups up to ``source.split_ms`` (for one entity, with the readings of its
        compaction-owned hours) and, for one entity, from the raw readings after it (every entity: the
        rollups' totals only, ``reached`` saying how far)."""
        rolled = ReadCount()
        counted = ReadStats()
        intervals: list[Interval] = []
        readings = 0
        raw_from = max(window.from_ms, source.split_ms)
        deadline = self._deadline(time_left_ms)
        if self._rollups is not None and source.level is not None:
            rolled_part = TimeRange(window.from_ms, raw_from)
            compacted: list[DecodedReading] = []
            hours: set[int] = set()
            if entity is not None:
                compacted, hours = self._compacted(entity, rolled_part, read, counted, deadline)
            intervals, readings = self._rollups.series(
                entity, source.level, rolled_part, interval_ms, stats, read, rolled, compacted, hours, source.fresh_from
            )
        counted.queries += rolled.calls
        counted.scanned += rolled.items
        counted.read_units += rolled.read_units
        if entity is not None and raw_from < window.to_ms:
            raw, total = self._raw_series(
                entity, TimeRange(raw_from, window.to_ms), interval_ms, stats, read, counted, deadline
            )
            intervals += raw
            readings += total
        self._record("aggregates" if entity is not None else "total_aggregates", counted, readings)
        return AggregateSeries(
            entity_id=entity,
            from_=format_ts(window.from_ms),
            to=format_ts(window.to_ms),
            interval=format_duration(interval_ms),
            stats=list(stats),
            intervals=intervals,
            readings=readings,
            source=source.name(window) if entity is not None else "rollups",
            rollups_through=source.through,
            reached=format_ts(source.split_ms) if entity is None else None,
            cost=_cost(counted),
        )

    def _raw_series(  # noqa: PLR0917 - called once, by _series
        self,
        entity: str,
        window: TimeRange,
        interval_ms: int,
        stats: tuple[Stat, ...],
        read: ReadArgs,
        counted: ReadStats,
        deadline: float | None,
    ) -> tuple[list[Interval], int]:
        """The intervals of ``window`` streamed from the raw readings (raises 413 past the budget: MAX_QUERY_CALLS
        Query calls of its own, and the readings decoded, of which the request's compacted reads have decoded
        ``counted.decoded``)."""
        plan = self._plan_entity(entity, window.from_ms, window.to_ms)
        partitions = self._planner.whole(plan, consistent=read.consistent, cost=counted)
        streams = self._streams(entity, partitions, None, self._clock_ms(), False, read.consistent)
        # Every partition will be read whole: keep the pipeline full.
        options = self._budget(deadline, read_ahead=True, prefetch=True)
        series = SeriesBuilder(interval_ms, stats)
        wanted = read.measures
        with self._fanout(abandon=deadline is not None) as submit:
            merger = Merger(streams, submit, options, counted)
            for key, reading in merger:
                measures = reading.measures
                if wanted is not None:
                    measures = {name: measures[name] for name in wanted if name in measures}
                series.add(key.anchor, measures)
        if merger.stopped is not None:
            # An aggregate is one answer: a part of it would look like a whole.
            # Say how far the scan got, so the client can split the range there.
            reached = _anchor_ms(merger.frontier) if merger.frontier is not None else window.from_ms
            self._cut_short(merger.stopped, window.from_ms, reached, counted)
        return series.intervals(), series.total

    def _cut_short(
        self, stopped: Stop, from_ms: int, reached_ms: int, counted: ReadStats, *, compacted: bool = False
    ) -> NoReturn:
        """Refuse an aggregate whose reads (of ``compacted`` hours) stopped at ``reached_ms`` (413), saying where
        to split it."""
        limits = self.limits
        calls = (
            f"{limits.max_compacted_calls} Query calls of compacted hours"
            if compacted
            else f"{limits.max_query_calls} Query calls"
        )
        why = {
            STOP_DEADLINE: "ran out of time",
            STOP_QUERY_CALLS: f"used the {calls} one request may make",
        }.get(stopped, f"decoded the {self.limits.max_scan_items} readings one request may read")
        self._record("aggregates", counted, 0, cut_short=stopped)
        reached = format_ts(reached_ms)
        raise ScanLimitExceeded(
            "to",
            f"the aggregate {why} after reading [{format_ts(from_ms)}, {reached}) of the range; "
            f"aggregate [from, {reached}) and [{reached}, to) separately",
        )

    def _compacted(
        self, entity: str, window: TimeRange, read: ReadArgs, counted: ReadStats, deadline: float | None
    ) -> tuple[list[DecodedReading], set[int]]:
        """``entity``'s readings of ``window`` that its rollups do not hold, and the hours they are in (its
        hours that are compaction's): those of its unflagged compacted blocks, each once, its newest copy
        winning among the compacted blocks. An hour with a flagged block (``StoredBlock.rollups``: the
        entity's hour became the rollup function's, maybe after it was compacted unflagged) is left out
        whole: its rollups hold it. The reads count in the request's cost (``counted``) and decoding budget,
        their Query calls in MAX_COMPACTED_CALLS (one small Query per cluster partition: an hour's, with 1-hour
        buckets, so MAX_QUERY_CALLS would refuse more than about 8 days); raises 413 past either."""
        if self._write_tier is None or window.to_ms <= window.from_ms:
            return [], set()
        compacted_through = slice_start(window.to_ms - 1) + SLICE_MS  # every hour the window touches
        # the G's each hour was compacted under (into cluster blocks); the rollups' state may be newer than the
        # cache. Not for now's hour, which compaction cannot have reached: a window up to now would read the
        # state again on every request
        state = state_through(self._watermark, min(compacted_through, slice_start(self._clock_ms())))
        plan = self._layout.plan_entity(
            entity,
            window.from_ms,
            window.to_ms,
            self._shard_maps.current(),
            write_tier=self._write_tier,
            compacted_through_ms=compacted_through,
            clustered=state.clustered,
        )
        partitions = merge_adjacent([p for p in plan.partitions if p.kind in COMPACTED_KINDS])
        found, owned = self._compacted_blocks(entity, window, partitions, read, counted, deadline)
        copies: dict[tuple[str, int, str], tuple[int, DecodedReading]] = {}
        hours: set[int] = set()
        for hour, version, readings in found:
            if hour not in owned:
                keep_newest(copies, version, readings)
                hours.add(hour)
        return [r for _, r in copies.values() if window.from_ms <= r.ts_ms < window.to_ms], hours

    def _compacted_blocks(  # noqa: PLR0917 - called once, by _compacted
        self,
        entity: str,
        window: TimeRange,
        partitions: Sequence[PartitionQuery],
        read: ReadArgs,
        counted: ReadStats,
        deadline: float | None,
    ) -> tuple[list[tuple[int, int, list[DecodedReading]]], set[int]]:
        """Read ``partitions`` (``entity``'s cluster or compacted blocks, a window of them at once): the hour,
        version and readings of each block of ``window`` holding ``entity``'s readings unflagged, and the hours
        of the blocks that flag them (``StoredBlock.owned_by_rollups``). A cluster block that does not hold
        the entity's readings says nothing of its hour."""
        counted.partitions_planned += len(partitions)
        now_s = self._clock_ms() // 1000
        requests = deque(PageRequest(p, consistent=read.consistent, now_epoch_s=now_s) for p in partitions)
        limits = self.limits
        found: list[tuple[int, int, list[DecodedReading]]] = []  # (hour, version, readings) of unflagged blocks
        owned: set[int] = set()  # the hours of a flagged block: the rollup function's
        started = 0
        stop: Stop | None = None
        with self._fanout(abandon=deadline is not None) as submit:
            inflight: deque[tuple[PageRequest, Future[Page]]] = deque()
            while requests or inflight:
                while requests and len(inflight) < limits.concurrency and started < limits.max_compacted_calls:
                    request = requests.popleft()
                    inflight.append((request, submit(request)))
                    started += 1
                if not inflight:
                    stop = STOP_QUERY_CALLS
                    break
                request, future = inflight.popleft()
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    page = future.result(timeout=wait)
                except FutureTimeout:
                    requests.appendleft(request)
                    stop = STOP_DEADLINE
                    break
                counted.queries += 1
                counted.partitions_queried += request.start_key is None
                counted.scanned += page.scanned
                counted.read_units += page.read_units
                if page.table_missing:
                    counted.missing_tables.add(request.partition.table)
                if page.next_key is not None:
                    requests.appendleft(dataclasses.replace(request, start_key=page.next_key))
                for block in page.blocks:
                    header = header_of(request.partition, block)
                    if block.owned_by_rollups(entity):
                        owned.add(slice_start(header.first_ms))
                    elif header.first_ms < window.to_ms and header.last_ms >= window.from_ms:
                        header, readings = decode(request.partition, block, entity)
                        counted.decoded += header.count
                        if readings:
                            found.append((slice_start(header.first_ms), header.version, readings))
                if counted.decoded >= limits.max_scan_items and (requests or inflight):
                    stop = STOP_SCAN_ITEMS
                    requests.extend(r for r, _ in inflight)
                    break
        if stop is not None:
            reached = min(r.partition.from_ms for r in requests)
            self._cut_short(stop, window.from_ms, reached, counted, compacted=True)
        return found, owned

    # -- machinery ---------------------------------------------------------------

    def _plan_entity(self, entity: str, from_ms: int, to_ms: int) -> QueryPlan:
        """The whole plan of ``entity``'s readings in ``[from_ms, to_ms)``, both tiers at the current watermark."""
        through = self._watermark.state()
        return self._planner.plan_entity(entity, from_ms, to_ms, self._shard_maps.current(), through=through)

    def _page(
        self,
        route: str,
        streams: list[PartitionStream],
        stats: ReadStats,
        *,
        entity: str | None,
        page: PageArgs,
        read: ReadArgs,
        bound: bytes,
        deadline: float | None,
        beyond: Position | None,
        after: Position | None,
    ) -> ReadingsPage:
        window, order, page_size = page.window, page.order, page.limit
        descending = order == "desc"
        options = self._budget(deadline, descending=descending, target=page_size + 1)
        found: list[tuple[Position, DecodedReading]] = []
        resume: Position | None = None
        cut_short: CutShort | None = None
        size = 0
        wanted = read.measures
        with self._fanout(abandon=deadline is not None) as submit:
            merger = Merger(streams, submit, options, stats, start=after)
            with closing(iter(merger)) as merged:
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
        if merger.stopped is not None:
            # Cut short by time, calls or decoding: resume at the frontier, past any
            # empty partitions this page already read.
            resume = merger.frontier
            cut_short = merger.stopped
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
            items=_READINGS.validate_python(
                [_reading(item, wanted, key.anchor if entity is not None else None) for key, item in found]
            ),
            next_cursor=next_cursor,
            complete=cut_short is None,
            cut_short_by=cut_short,
            reached=format_ts(reached_ms),
            cost=_cost(stats),
        )

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

    def _budget(self, deadline: float | None, **options: Any) -> MergeOptions:
        """A merge bounded as one request's reads are: a window of partitions fetched at once,
        MAX_SCAN_ITEMS readings decoded, MAX_QUERY_CALLS Query calls, and ``deadline``."""
        limits = self.limits
        return MergeOptions(
            window=limits.concurrency,
            max_decoded=limits.max_scan_items,
            max_queries=limits.max_query_calls,
            deadline=deadline,
            **options,
        )

    def _deadline(self, time_left_ms: int | None) -> float | None:
        """The monotonic instant a read stops at: the function's remaining time
        less what serializing and sending the answer needs. None outside Lambda."""
        if time_left_ms is None:
            return None
        return time.monotonic() + max(0, time_left_ms - self.limits.response_margin_ms) / 1000

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

    def _streams(  # noqa: PLR0917 - one call per read, each passing all of them
        self,
        entity: str | None,
        partitions: Sequence[PartitionQuery],
        after: Position | None,
        now_ms: int,
        descending: bool,
        consistent: bool,
    ) -> list[PartitionStream]:
        """The merge's streams of a read's partitions: one request template, readings placed in the
        read's order and live from retention at ``now_ms`` (a plan pruned to nothing has none)."""
        if not partitions:
            return []
        now_s = now_ms // 1000
        template = PageRequest(partitions[0], descending=descending, consistent=consistent, now_epoch_s=now_s)
        live_from = 0 if self._retention_ms is None else max(0, now_s * 1000 - self._retention_ms)
        placement = Placement(self._layout, entity, live_from)
        return [_stream(p, template, after, placement) for p in partitions]

    @contextmanager
    def _fanout(self, *, abandon: bool = False) -> Iterator[Submit]:
        """One request's calls, on the service's pool of QUERY_CONCURRENCY threads, which outlives the
        request (a pool started for each request cost a dense page 6 to 11% of its CPU, starting its
        threads); the request's calls not started yet are cancelled at its end, the others waited for.
        With ``abandon`` (a read under a deadline) calls still in flight are not waited for: their answers
        are no longer wanted, and waiting would pass the deadline. They keep their threads, so the next
        request starts a pool of its own."""
        pool = self._pool
        if pool is None:
            pool = self._pool = ThreadPoolExecutor(max(1, self.limits.concurrency), thread_name_prefix="query")
        futures: list[Future[Page]] = []

        def submit(request: PageRequest) -> Future[Page]:
            future = pool.submit(self._reader.read_page, request)
            futures.append(future)
            return future

        try:
            yield submit
        finally:
            started = [future for future in futures if not future.cancel()]
            if not abandon:
                wait_all(started)
            elif not all(future.done() for future in started) and self._pool is pool:
                self._pool = None  # the old pool's threads end once their calls return and it is collected

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


# -- streams -------------------------------------------------------------------------


def _json_bytes(reading: DecodedReading, measures: tuple[str, ...] | None) -> int:
    """An upper bound of the reading's share of the Lambda response: the JSON body
    is itself a string in the response document, so every quote and backslash
    is escaped twice (4 bytes) and a character outside ASCII costs up to 14
    (``\\ud83d\\udd25``). Ids and names are ASCII without quotes (ingest refuses others)."""
    size = 184 + len(reading.entity_id) + len(reading.event_id)  # with the 24-character timestamp
    names = reading.measures
    if measures is None:
        size += sum(map(len, names)) + 32 * len(names)
    else:
        size += sum(len(name) + 32 for name in names if name in measures)
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
        validate_entity_id(parts[0], "cursor")
    except InvalidInput:
        raise CursorError("carries an unreadable position") from None
    return parts[0], canonical_ms(parts[1])


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
    if after is not None and inside and narrows(after) and not placement.reads_whole(partition):
        # Resume inside this partition, in the blocks that may hold the reading at ``after``
        # (the reading itself and everything before it are skipped once decoded). Ascending,
        # those start up to a block's span before it: they are read first, in one Query.
        # (A group partition read across entities is read whole: its items are in time order.)
        at_entity, at_ms = _resume_at(after, entity)
        layout, kind = placement.layout, partition.kind
        if template.descending:
            sk_high = layout.block_sk_through(at_entity, at_ms, kind)
        else:
            sk_low = layout.block_sk_from(at_entity, at_ms, kind)
            lookback = layout.block_sk_through(at_entity, at_ms, kind)
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


#: A page's readings validated in one call: a model built per reading costs a Python
#: ``__init__`` each, more than the validation itself.
_READINGS = TypeAdapter(list[Reading])


def _reading(reading: DecodedReading, measures: tuple[str, ...] | None, ts: str | None = None) -> dict[str, object]:
    """The fields of the reading as the API returns it, for :class:`Reading` to validate (``ts``: its
    timestamp, when the caller has it formatted). Validation copies the measures and dimensions."""
    values = reading.measures
    return {
        "entity_id": reading.entity_id,
        "event_id": reading.event_id,
        "timestamp": ts or format_ts(reading.ts_ms),
        "measures": values if measures is None else {name: values[name] for name in measures if name in values},
        "dimensions": reading.dimensions,
    }


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
        kind=partition.kind,
    )
