"""The rollup function: apply the marks of every closed slot, in slot order.

A slot (one minute of mark stamps) is closed once ``SETTLE`` has passed since
its end: ingest stamps a mark with its batch's start and puts it after the
batch's readings, inside one invocation, so SETTLE (longer than the ingest
function's timeout) guarantees that every mark of the slot is stored, and
every reading it stands for with it. For each closed slot, finest level first:

1. every marked interval of the finest level is recomputed from its raw
   partitions (strongly consistent reads) and put;
2. each interval of a coarser level that holds a recomputed one is recomputed
   from the finer rollups when the slot is its last or later, or else deferred:
   a mark for it is stamped with its last slot;
3. the total of every recomputed interval is recomputed from every entity's
   rollup of that interval and put.

The watermark ``through`` then moves past the slot: every reading stored
before it is in the rollup of every interval that ends by it. Every write is a put of a
recomputed value, so a slot applied twice (a run that failed half-way) gives
the same items. Marks of intervals that ended more than ``LATENESS`` before
their stamp are counted, not applied: their raw partitions may be in a table
the rotator has dropped (the readings themselves were stored like any other).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from adapters.batch_writer import BatchWriter
from adapters.clients import client
from adapters.observability import metrics
from adapters.partition_reader import DynamoPartitionReader, PageRequest, PartitionReader
from adapters.retry import Deadline
from adapters.rollup_store import ReadCount, RollupState, RollupStore
from adapters.shard_map_source import ShardMapSource
from adapters.shard_map_store import shard_map_source
from keydesign import Layout, format_ts
from keydesign.rollup import SLOT_MS, Figures, Granularities, Mark, floor_to
from rollup.settings import RollupSettings

#: Deferred marks a container remembers having written (one per entity and open coarse interval).
DEFERRED_ENTRIES = 1_000_000


@dataclass(slots=True)
class RunReport:
    """What one run did."""

    slots: int = 0
    marks: int = 0
    late: int = 0
    recomputed: dict[int, int] = field(default_factory=dict)
    totals: int = 0
    deferred: int = 0
    raw: ReadCount = field(default_factory=ReadCount)
    rollups: ReadCount = field(default_factory=ReadCount)
    through_ms: int = 0
    lag_ms: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "marks": self.marks,
            "late": self.late,
            "recomputed": {str(level): n for level, n in self.recomputed.items()},
            "totals": self.totals,
            "deferred": self.deferred,
            "raw_items_read": self.raw.items,
            "rollup_items_read": self.rollups.items,
            "through": format_ts(self.through_ms),
            "lag_ms": self.lag_ms,
        }


def emit(report: RunReport) -> None:
    """The run's metrics: RollupLagSeconds and RollupLateMarks carry the alarms."""
    count = MetricUnit.Count
    metrics.add_metric(name="RollupSlotsApplied", unit=count, value=report.slots)
    metrics.add_metric(name="RollupLateMarks", unit=count, value=report.late)
    metrics.add_metric(name="RollupIntervalsRecomputed", unit=count, value=sum(report.recomputed.values()))
    metrics.add_metric(name="RollupRawItemsRead", unit=count, value=report.raw.items)
    metrics.add_metric(name="RollupLagSeconds", unit=MetricUnit.Seconds, value=report.lag_ms / 1000)


class RollupRunner:
    """Applies closed slots until none is left or the deadline nears. One per container."""

    def __init__(
        self,
        *,
        layout: Layout,
        shard_maps: ShardMapSource,
        reader: PartitionReader,
        store: RollupStore,
        granularities: Granularities,
        lateness_ms: int,
        settle_ms: int,
        concurrency: int = 16,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._layout = layout
        self._shard_maps = shard_maps
        self._reader = reader
        self._store = store
        self._levels = granularities
        self._lateness_ms = lateness_ms
        self._settle_ms = settle_ms
        self._clock_ms = clock_ms
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rollup")
        self._deferred: set[Mark] = set()

    @classmethod
    def from_settings(cls, settings: RollupSettings, *, clock_ms: Callable[[], int] | None = None) -> RollupRunner:
        common = settings.common
        if common.granularities is None or common.control_table is None:  # the settings refuse both
            raise ValueError("rollups need ROLLUPS and CONTROL_TABLE")
        writer = BatchWriter(client("dynamodb", max_attempts=1), concurrency=settings.concurrency)
        store = RollupStore(
            client("dynamodb"), writer, common.control_table, common.layout.table_prefix, common.retention_ms
        )
        return cls(
            layout=common.layout,
            shard_maps=shard_map_source(common, bootstrap=False),
            reader=DynamoPartitionReader(pool=max(32, settings.concurrency)),
            store=store,
            granularities=common.granularities,
            lateness_ms=settings.lateness_ms,
            settle_ms=settings.settle_ms,
            concurrency=settings.concurrency,
            **({"clock_ms": clock_ms} if clock_ms is not None else {}),
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def closed_before(self, now_ms: int) -> int:
        """The end of the last closed slot at ``now_ms``."""
        return floor_to(now_ms - self._settle_ms, SLOT_MS)

    def run(self, deadline: Deadline) -> RunReport:
        now = self._clock_ms()
        target = self.closed_before(now)
        # A first run starts LATENESS back: older marks would be counted as late anyway.
        state = self._store.state(consistent=True) or RollupState(floor_to(target - self._lateness_ms, SLOT_MS))
        report = RunReport(through_ms=state.through_ms)
        slot = state.through_ms
        while slot < target and not deadline.expired():
            marks = self._store.marks(slot, report.rollups)
            late = [m for m in marks if m.start_ms + m.level + self._lateness_ms < m.slot_ms]
            self._apply(slot, [m for m in marks if m not in late], deadline, report)
            state = RollupState(
                slot + SLOT_MS,
                state.late + len(late),
                max((m.start_ms for m in late), default=state.last_late_ms),
            )
            self._store.save_state(state)
            report.slots += 1
            report.marks += len(marks)
            report.late += len(late)
            slot += SLOT_MS
        self._deferred = {m for m in self._deferred if m.slot_ms >= slot}
        report.through_ms = slot
        report.lag_ms = max(0, now - slot)
        return report

    def _apply(self, slot: int, marks: Iterable[Mark], deadline: Deadline, report: RunReport) -> None:
        todo: dict[int, set[tuple[int, str]]] = {level: set() for level in self._levels.levels}
        for mark in marks:
            if mark.level in todo:
                todo[mark.level].add((mark.start_ms, mark.entity))
        for level in self._levels.levels:
            intervals = sorted(todo[level])
            if not intervals:
                continue
            figures = list(self._pool.map(functools.partial(self._recompute, level, report=report), intervals))
            writes = [self._store.rollup_write(level, s, e, f) for (s, e), f in zip(intervals, figures, strict=True)]
            self._store.write(writes, deadline)
            report.recomputed[level] = report.recomputed.get(level, 0) + len(intervals)
            starts = sorted({start for start, _ in intervals})
            totals = list(self._pool.map(functools.partial(self._total, level, report=report), starts))
            self._store.write(
                [self._store.rollup_write(level, s, None, f) for s, f in zip(starts, totals, strict=True)], deadline
            )
            report.totals += len(starts)
            coarse = self._levels.coarser(level)
            if coarse is None:
                continue
            deferred: dict[Mark, None] = {}  # several fine intervals defer the same coarse one
            for start, entity in intervals:
                coarse_start = floor_to(start, coarse)
                # Recomputed in the interval's last slot (after that slot's finer changes), or now if it has passed.
                last_slot = coarse_start + coarse - SLOT_MS
                if last_slot <= slot:
                    todo[coarse].add((coarse_start, entity))
                else:
                    mark = Mark.of(last_slot, coarse, coarse_start, entity)
                    if mark not in self._deferred:
                        deferred[mark] = None
            self._store.write([self._store.mark_write(m) for m in deferred], deadline)
            self._deferred.update(deferred)
            report.deferred += len(deferred)

    def _recompute(self, level: int, interval: tuple[int, str], *, report: RunReport) -> Figures:
        start, entity = interval
        finer = self._levels.finer(level)
        if finer is not None:
            parts = self._store.entity_rollups(
                finer, range(start, start + level, finer), entity, report.rollups, consistent=True
            )
            return Figures.combined(parts.values())
        return self.raw_figures(entity, start, start + level, report.raw)

    def raw_figures(self, entity: str, from_ms: int, to_ms: int, cost: ReadCount) -> Figures:
        """``entity``'s readings in ``[from_ms, to_ms)``, read whole and consistently (expired ones left out)."""
        plan = self._layout.plan_entity(entity, from_ms, to_ms, self._shard_maps.current())
        seen: dict[str, dict[str, int | float]] = {}
        now_s = self._clock_ms() // 1000
        for partition in plan.partitions:
            request = PageRequest(partition, consistent=True, with_dimensions=False, now_epoch_s=now_s)
            while True:
                page = self._reader.read_page(request)
                cost.calls += 1
                cost.items += page.scanned
                cost.read_units += page.read_units
                for item in page.items:
                    seen[item.sk] = dict(item.measures)  # a copy in another partition (random layout) counts once
                if page.next_key is None:
                    break
                request = PageRequest(
                    partition, consistent=True, with_dimensions=False, now_epoch_s=now_s, start_key=page.next_key
                )
        figures = Figures()
        for measures in seen.values():
            figures.add(measures)
        return figures

    def _total(self, level: int, start: int, *, report: RunReport) -> Figures:
        return Figures.combined(self._store.interval_rollups(level, start, report.rollups).values())
