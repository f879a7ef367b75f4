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
before it is in the rollup of every interval that ends by it. An interval that
cannot be computed (a block of its readings does not decode) or stored
(DynamoDB refuses the item) is *set aside*: put with its reason in place of its
figures (every interval combined from it says so too), logged, and counted
(``RollupIntervalsSetAside``, alarmed); the slot's other intervals, and the
watermark, go on. The slot's work
is planned as steps of at most 4 x concurrency intervals, and the state records
how many steps of the current slot are done, so a run cut short by its
deadline loses at most one step. Every write is a put of a recomputed value,
so a step applied twice (a run that failed half-way) gives the same items.
Marks of intervals that ended more than ``LATENESS`` (``MAX_AGE``) before their
stamp are counted, not applied: ingest stores no reading that old, so only a
clock that disagrees makes one. A first run starts at the deployment's first
marks (:meth:`RollupRunner._first_state`), not ``LATENESS`` back. A slot's
MARK_SHARDS keys are read only if the marked-minutes index holds it
(:meth:`RollupRunner._marks`): every mark writer puts its slot's index item
with its marks, so an empty minute costs no mark Query.

Beside compaction (the write tier; docs/rollups.md): each (entity, hour) has one
owner. Ingest marks only the readings it writes as blocks (dense entities, late
readings); an entity-hour whose readings are all in group items is compaction's,
whose compacted blocks and group partials are its figures and its part of the
totals (``<start>#c``). The rollup function plans each slot with the compaction
watermark ``w`` as stored when the slot's step 0 is planned (a consistent read,
kept in the state with ``step``, so a resumed slot plans the same steps). A
finest mark stamped after its hour H ended (a late reading's block) is *pending*
while H >= ``w``: compaction may yet read the entity's group items of H without
it, so the mark is re-stamped into the next slot (``RollupPendingMarks``), and
nothing is recomputed. Once H < ``w`` the minute is recomputed, and a last step of
the slot checks the entity's compacted blocks of H: an unflagged one means
compaction counted the entity-hour, which the minute's rollup now counts again,
so a redo request (``keydesign.rollup.RedoRequest``) asks compaction to hand the
hour over (``RollupRedosRequested``). A pending mark is judged by ``LATENESS`` like
any other: one re-stamped past it (compaction stalled for ``MAX_AGE``) is counted late.

``totals_through``: totals before it are whole (both parts). Compaction stamps its
re-marks with its clock and records, with its watermark, when it last moved it
(``CompactionState.advanced_at``): every re-mark of an hour before the watermark
is stamped by then. So when a slot is done and ``through`` has passed the minute
of ``advanced_at``, every such re-mark is applied, and ``totals_through`` moves to
the watermark (read, consistent, as the slot ends; ``TotalsLagSeconds`` is how far
it trails the clock). Without the write tier there is no compaction's part:
``totals_through`` is ``through``.
"""

from __future__ import annotations

import bisect
import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from aws_lambda_powertools.metrics import MetricUnit

from adapters.batch_writer import BatchWriter
from adapters.clients import client
from adapters.compaction_state import NOTHING_COMPACTED, CachedWatermark, PlanningWatermark, state_through
from adapters.observability import logger, metrics
from adapters.partition_reader import (
    CorruptBlock,
    DynamoPartitionReader,
    PageRequest,
    PartitionReader,
    StoredBlock,
    decode,
    header_of,
)
from adapters.retry import Deadline
from adapters.rollup_store import ReadCount, RollupState, RollupStore
from adapters.shard_map_source import ShardMapSource
from adapters.shard_map_store import shard_map_source
from keydesign import BlockError, Layout, PartitionQuery, Reading, format_ts
from keydesign.blocks import keep_newest
from keydesign.layouts import COMPACTED_KINDS
from keydesign.periods import DAY_MS, format_duration
from keydesign.rollup import HOUR_MS, SLOT_MS, Figures, Granularities, Mark, RedoRequest, floor_to
from keydesign.writetier import GRACE_MS, KEEP_MS, REPACK_MS, CompactionState, WriteTier, repack_start, tier_for_hour
from rollup.settings import RollupSettings

#: A run of one entity's marked finest intervals read in one pass: neighbours at most RUN_GAP intervals
#: apart, RUN_SPAN intervals in all (an hour of minutes; the unmarked ones between are read, not used).
RUN_GAP = 5
RUN_SPAN = 60
#: Intervals recomputed at once (and the writes and reads in flight for them).
CONCURRENCY = 16
#: What a step is assumed to take before this container has timed one: a container that has only
#: applied empty minutes would otherwise start a step at its deadline, and its writes be refused.
FIRST_STEP_S = 1.0
#: A state written before the marked-minutes index trusts it from the start of the coarsest interval
#: after the one holding this far ahead of its first run: more than MAX_FUTURE (a day at most) and a deploy.
UPGRADE_REACH_MS = 2 * DAY_MS


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a slot's work: recompute and put ``intervals`` (start, entity) of ``level``; or put
    the totals of their starts (entity ""); or defer them (a mark in each coarse interval's last slot);
    or re-stamp pending late marks into the next slot (``pending``); or check who owns the entity-hours
    (start: the hour) of late marks recomputed, asking compaction to redo the ones it counted (``owners``)."""

    kind: Literal["rollups", "totals", "defer", "pending", "owners"]
    level: int
    intervals: tuple[tuple[int, str], ...]


@dataclass(slots=True)
class RunReport:
    slots: int = 0
    steps: int = 0
    marks: int = 0
    late: int = 0
    recomputed: dict[int, int] = field(default_factory=dict)
    totals: int = 0
    deferred: int = 0
    #: Late marks whose hour compaction had not done: re-stamped into the next slot.
    pending: int = 0
    #: Redo requests put: late readings of entity-hours compaction had counted.
    redos: int = 0
    #: Totals are whole before this (0: not yet known), and how far it trails the wall clock.
    totals_through_ms: int = 0
    totals_lag_ms: int = 0
    #: The finest totals are served to this (fresh totals, docs/rollups.md), and how far it trails the clock.
    minute_totals_through_ms: int = 0
    minute_totals_lag_ms: int = 0
    #: Intervals set aside (``level start entity: reason``): a block that does not decode, a rollup refused.
    set_aside: list[str] = field(default_factory=list)
    raw: ReadCount = field(default_factory=ReadCount)
    rollups: ReadCount = field(default_factory=ReadCount)
    through_ms: int = 0
    lag_ms: int = 0

    def totals_from(self, state: RollupState, now: int) -> None:
        """How far the totals reach in ``state`` (the finest ones with fresh totals), and their lag at ``now``."""
        self.totals_through_ms = state.totals_through
        self.totals_lag_ms = max(0, now - state.totals_through)
        self.minute_totals_through_ms = state.minute_totals_through
        self.minute_totals_lag_ms = max(0, now - self.minute_totals_through_ms)

    def summary(self) -> dict[str, Any]:
        return {
            "slots": self.slots,
            "steps": self.steps,
            "marks": self.marks,
            "late": self.late,
            "recomputed": {str(level): n for level, n in self.recomputed.items()},
            "totals": self.totals,
            "deferred": self.deferred,
            "pending": self.pending,
            "redos": self.redos,
            "set_aside": len(self.set_aside),
            "raw_items_read": self.raw.items,
            "rollup_items_read": self.rollups.items,
            "through": format_ts(self.through_ms),
            "lag_ms": self.lag_ms,
            "totals_through": format_ts(self.totals_through_ms),
            "totals_lag_ms": self.totals_lag_ms,
            "minute_totals_through": format_ts(self.minute_totals_through_ms),
            "minute_totals_lag_ms": self.minute_totals_lag_ms,
        }


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _chunks(items: Sequence[tuple[int, str]], size: int) -> list[tuple[tuple[int, str], ...]]:
    return [tuple(items[i : i + size]) for i in range(0, len(items), size)]


def emit(report: RunReport) -> None:
    """The run's metrics: RollupLagSeconds, RollupLateMarks and RollupIntervalsSetAside carry the alarms."""
    count = MetricUnit.Count
    metrics.add_metric(name="RollupSlotsApplied", unit=count, value=report.slots)
    metrics.add_metric(name="RollupLateMarks", unit=count, value=report.late)
    metrics.add_metric(name="RollupIntervalsSetAside", unit=count, value=len(report.set_aside))
    metrics.add_metric(name="RollupIntervalsRecomputed", unit=count, value=sum(report.recomputed.values()))
    metrics.add_metric(name="RollupRawItemsRead", unit=count, value=report.raw.items)
    metrics.add_metric(name="RollupLagSeconds", unit=MetricUnit.Seconds, value=report.lag_ms / 1000)
    metrics.add_metric(name="RollupPendingMarks", unit=count, value=report.pending)
    metrics.add_metric(name="RollupRedosRequested", unit=count, value=report.redos)
    if report.totals_through_ms:  # none before the first pair is passed (a new deployment's first minutes)
        metrics.add_metric(name="TotalsLagSeconds", unit=MetricUnit.Seconds, value=report.totals_lag_ms / 1000)
        lag = report.minute_totals_lag_ms / 1000
        metrics.add_metric(name="MinuteTotalsLagSeconds", unit=MetricUnit.Seconds, value=lag)


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
        concurrency: int = CONCURRENCY,
        clock_ms: Callable[[], int] = _wall_clock_ms,
        write_tier: WriteTier | None = None,
        watermark: PlanningWatermark = NOTHING_COMPACTED,
    ) -> None:
        self._layout = layout
        self._write_tier = write_tier
        self._watermark = watermark
        self._shard_maps = shard_maps
        self._reader = reader
        self._store = store
        self._levels = granularities
        self._lateness_ms = lateness_ms
        self._settle_ms = settle_ms
        self._clock_ms = clock_ms
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rollup")
        self._chunk = 4 * concurrency
        self._longest_step_s = FIRST_STEP_S
        self._deferred: set[Mark] = set()
        #: The marked-minutes index of the hours this run has read (hour -> its slots with marks).
        self._marked: dict[int, set[int]] = {}

    @classmethod
    def from_settings(cls, settings: RollupSettings, *, clock_ms: Callable[[], int] = _wall_clock_ms) -> RollupRunner:
        if settings.granularities is None or settings.control_table is None:  # the settings refuse both
            raise ValueError("rollups need ROLLUPS and CONTROL_TABLE")
        writer = BatchWriter(client("dynamodb", max_attempts=1), concurrency=CONCURRENCY)
        store = RollupStore(
            client("dynamodb"), writer, settings.control_table, settings.layout.table_prefix, settings.retention_ms
        )
        prefix, ttl = settings.layout.table_prefix, settings.shard_map_cache_ttl_ms
        watermark: PlanningWatermark = NOTHING_COMPACTED  # without the write tier nothing is compacted
        if settings.write_tier is not None:
            watermark = CachedWatermark(client("dynamodb"), settings.control_table, prefix, ttl)
        return cls(
            layout=settings.layout,
            shard_maps=shard_map_source(settings, bootstrap=False),
            reader=DynamoPartitionReader(pool=max(32, CONCURRENCY)),
            store=store,
            granularities=settings.granularities,
            lateness_ms=settings.max_age_ms,
            settle_ms=settings.settle_ms,
            clock_ms=clock_ms,
            write_tier=settings.write_tier,
            watermark=watermark,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def run(self, deadline: Deadline) -> RunReport:
        now = self._clock_ms()
        target = floor_to(now - self._settle_ms, SLOT_MS)  # the end of the last closed slot
        state = self._store.state(consistent=True)
        if state is None:
            state = self._totals(self._first_state(target))
            self._store.save_state(state)
        elif state.indexed_from is None:  # written by a rollup function older than the index
            state = replace(state, indexed_from=self._upgraded_from(now))
            self._store.save_state(state)
        report = RunReport(through_ms=state.through_ms)
        slot = state.through_ms
        self._marked = {}
        while slot < target and self._time_for_a_step(deadline):
            planned = state
            if state.step == 0:  # planned now: with the compaction watermark as stored now, kept with the steps
                compaction = self._watermark.consistent()
                planned = self._fresh(replace(state, w=compaction.through), compaction)
            marks = self._marks(slot, planned, report)
            planned = self._held(planned, marks, report)
            if planned != state:  # the new w, holds and fresh window stored before any of the slot's figures change
                state = planned
                self._store.save_state(state)
            late = [m for m in marks if self._late(m, state.w)]
            steps = self._plan(slot, [m for m in marks if m not in late], state.w)
            while state.step < len(steps) and self._time_for_a_step(deadline):
                started = deadline.clock()  # timed on the deadline's clock, which judges the next step
                self._do(slot, steps[state.step], deadline, report)
                self._longest_step_s = max(self._longest_step_s, deadline.clock() - started)
                state = replace(state, step=state.step + 1)
                report.steps += 1
                if state.step < len(steps):  # progress inside the slot: a run cut short goes on from here
                    self._store.save_state(state)
            if state.step < len(steps):
                break
            state = self._slot_done(state, slot, late)
            self._store.save_state(state)
            report.slots += 1
            report.marks += len(marks)
            report.late += len(late)
            slot += SLOT_MS
        if state.step == 0 and (moved := self._totals(state)) != state:  # a run with no slot to apply too
            state = moved
            self._store.save_state(state)
        self._deferred = {m for m in self._deferred if m.slot_ms >= slot}
        report.through_ms = slot
        report.lag_ms = max(0, now - slot)
        report.totals_from(state, now)
        return report

    def _marks(self, slot: int, state: RollupState, report: RunReport) -> list[Mark]:
        """The slot's marks: its MARK_SHARDS keys, read only if the marked-minutes index holds the slot
        (from ``state.indexed_from`` on; before it every slot's keys are read).

        The index of the slot's hour is read once a run (one consistent Query) and kept for the run
        only. That is enough: every slot a run applies is before its ``target``, so closed when the run
        started, and every index item of a closed slot is stored by then, as its marks are. Ingest puts
        a minute's item in the write of its first marks stamped in it, and none of them counts as
        written (their readings are handed back) until the item is stored, all within its invocation,
        so before SETTLE has passed since the slot ended; compaction puts its re-marks' items in their
        write, all stored within SETTLE of their stamp or the step is redone and stamped anew; and the
        marks this function defers or re-stamps go into later slots with their items, which
        :meth:`_write_marks` adds to the index this run holds."""
        if slot < (state.indexed_from or 0):
            return self._store.marks(slot, report.rollups, self._pool.map)
        hour = floor_to(slot, HOUR_MS)
        if hour not in self._marked:
            self._marked[hour] = self._store.marked_minutes(hour, report.rollups)
        if slot not in self._marked[hour]:
            return []
        return self._store.marks(slot, report.rollups, self._pool.map)

    def _upgraded_from(self, now: int) -> int:
        """Where the marked-minutes index can be trusted, for a state written before it: past every mark
        code without the index may still write. Ingest's and compaction's were stamped by their last
        invocations (the deploy, which came before this run, and each function's timeout: minutes); the
        rollup function's own deferred marks, by its last run, lie at most in the last slot of the
        coarsest interval holding a reading MAX_FUTURE (a day at most) ahead. So the start of the
        coarsest interval after the one holding ``now`` + UPGRADE_REACH_MS; until then every slot's
        mark keys are read, as before the index."""
        coarsest = self._levels.levels[-1]
        return floor_to(now + UPGRADE_REACH_MS, coarsest) + coarsest

    def _late(self, mark: Mark, w: int) -> bool:
        """Whether ``mark``'s interval ended more than LATENESS before its stamp: counted, not applied.
        A mark of an hour compaction has done (before ``w``) may be compaction's re-mark, stamped when it
        compacted the hour (an hour and more after it) or redid it: its reach is the group items' keep
        (``KEEP_MS``), within which compaction re-marks, whatever LATENESS is."""
        end = mark.start_ms + mark.level
        if end + self._lateness_ms >= mark.slot_ms:
            return False
        compacted = self._write_tier is not None and floor_to(mark.start_ms, HOUR_MS) + HOUR_MS <= w
        return not (compacted and end + KEEP_MS >= mark.slot_ms)

    def _slot_done(self, state: RollupState, slot: int, late: Sequence[Mark]) -> RollupState:
        """The state once ``slot`` is applied, ``totals_through`` moved as :meth:`_totals` says."""
        return self._totals(
            replace(
                state,
                through_ms=slot + SLOT_MS,
                late=state.late + len(late),
                last_late_ms=max((m.start_ms for m in late), default=state.last_late_ms),
                step=0,
            )
        )

    def _totals(self, state: RollupState) -> RollupState:
        """``state`` with ``totals_through`` at the compaction watermark once ``through`` has passed the
        minute compaction last moved it in (``advanced_at``): every re-mark compaction put for the hours
        before it is stamped by then, so is applied. Without the write tier, totals are whole up to
        ``through``. Never back."""
        if self._write_tier is None:
            return replace(state, totals_through=state.through_ms)
        compaction = self._watermark.consistent()
        # Every slot after compaction last moved is planned with its watermark, so its re-marks are applied;
        # or sooner, the hours before the last slot's w, once every re-mark compaction has put is applied.
        whole = compaction.through if state.through_ms > floor_to(compaction.advanced_at, SLOT_MS) else 0
        if compaction.remarked_at is not None and state.through_ms > floor_to(compaction.remarked_at, SLOT_MS):
            whole = max(whole, min(state.w, compaction.through))
        if whole > state.totals_through:
            state = replace(state, totals_through=whole)
        return self._fresh(state, compaction)

    def _fresh(self, state: RollupState, compaction: CompactionState) -> RollupState:
        """``state`` with the window of fresh finest totals (docs/rollups.md, "Fresh minute totals"): from the
        slot's planned ``w`` (a slot applies compaction's re-marks of an hour only once planned with a ``w`` past
        it) and the re-pack's first slice, to the end of the last slice re-packed before the rollup function's
        ``through`` (a slice partial leaves out the (entity, minute) pairs of the blocks the re-pack read, whose
        marks were stored before it read them: once their slot is applied each is counted, or holds its slice;
        until then, no further than the window already served), and before every held slice. Holds of hours
        before ``w`` are dropped. Empty (both 0) when the finest level does not divide a re-pack slice, or the
        compaction state is from code that put no slice partials (no ``repacked_at``)."""
        holds = tuple(h for h in state.holds if floor_to(h, HOUR_MS) >= state.w)
        if REPACK_MS % self._levels.finest or not compaction.repacked_at:
            return state.holding(holds, 0, 0)
        end = compaction.repacked
        if state.through_ms <= floor_to(compaction.repacked_at, SLOT_MS):
            end = min(end, state.fresh_through)
        return state.holding(holds, max(compaction.repack_from, state.w), end)

    def _held(self, state: RollupState, marks: Iterable[Mark], report: RunReport) -> RollupState:
        """``state`` with the re-pack slices held by ``marks`` (a slot's, before any is applied). A finest mark
        of an hour compaction has not done (from the slot's ``w`` on), stamped a grace or more after its
        re-packed slice ended, is a reading late past its slice (the stamp is its batch's start minute, and
        ``in_write_tier`` sends exactly those to blocks), a re-mark or a pending mark. Unless the slice's
        partial left that (entity, interval) out (the re-pack read a block of it: the rollup function counts
        it, and the re-pack re-marked it), the partial may count the entity's older copies there, so no fresh
        total is served from that slice on until compaction has done its hour. A slice not re-packed yet
        needs no hold: its re-pack will read the block, stored with its mark. A pending mark (stamped after
        its hour, which compaction has not done) always holds its slice: it is not applied, so the rollup
        function's figures lack what it stands for."""
        if self._write_tier is None:
            return state
        late = [
            mark
            for mark in marks
            if mark.level == self._levels.finest
            and mark.slot_ms >= repack_start(mark.start_ms) + REPACK_MS + GRACE_MS
            and floor_to(mark.start_ms, HOUR_MS) >= state.w
            and repack_start(mark.start_ms) not in state.holds
        ]
        if not late:  # nearly every slot: no read
            return state
        held = {repack_start(m.start_ms) for m in late if m.slot_ms >= floor_to(m.start_ms, HOUR_MS) + HOUR_MS}
        compaction = self._watermark.consistent()
        candidates = {
            (mark.entity, mark.start_ms)
            for mark in late
            if compaction.repack_from <= repack_start(mark.start_ms) < compaction.repacked
        }
        for entity, start in sorted(candidates, key=lambda c: c[1]):
            at, hour = repack_start(start), floor_to(start, HOUR_MS)
            if at in held:
                continue
            group = tier_for_hour(self._write_tier, compaction, hour).group_of(entity)
            partial = self._store.slice_partial(hour, at, group, report.rollups)
            if partial is None or (entity, start) not in partial.left_out:
                held.add(at)
        if not held:
            return state
        return state.holding(tuple(sorted(held | set(state.holds))), state.fresh_from, state.fresh_through)

    def _first_state(self, target: int) -> RollupState:
        """Where a first run starts: the minute of the earliest marks (every ingest container writes the
        minute of its first marks with them), else ``target``: a container that writes its first marks
        after this read stamps them later than ``target`` (SETTLE is longer than ingest's timeout). Never
        further back than LATENESS, past which a mark is counted, not applied, anyway. So a new deployment
        starts at its own start, not LATENESS (MAX_AGE: days of minutes, 32 Queries each) back."""
        first = self._store.first_start(ReadCount())
        start = max(target if first is None else min(first, target), floor_to(target - self._lateness_ms, SLOT_MS))
        return RollupState(start, indexed_from=start)  # every mark writer of a new deployment keeps the index

    def _time_for_a_step(self, deadline: Deadline) -> bool:
        """Room before the deadline for one more step, judged by the longest this container has taken."""
        return deadline.allows_sleep(1.5 * self._longest_step_s)

    def _plan(self, slot: int, marks: Iterable[Mark], w: int) -> list[Step]:
        """The slot's work as steps of at most ``chunk`` intervals each. It depends only on the slot's
        marks (closed, so fixed) and the compaction watermark ``w`` it was planned with (kept in the
        state), hence a run that stopped after step k can go on at step k.

        With the write tier, a finest mark stamped after its hour H ended (a late reading's block) is
        *pending* while H >= ``w``: compaction may yet read the entity's group items of H without the
        block, so it is re-stamped into the next slot, not applied. Once H < ``w`` it is applied, and a
        last step checks the entity's compacted blocks of H (``owners``)."""
        todo: dict[int, set[tuple[int, str]]] = {level: set() for level in self._levels.levels}
        pending: set[tuple[int, str]] = set()
        owners: set[tuple[int, str]] = set()
        finest = self._levels.finest
        for mark in marks:
            if mark.level not in todo:
                continue
            hour = floor_to(mark.start_ms, HOUR_MS)
            if self._write_tier is not None and mark.level == finest and mark.slot_ms >= hour + HOUR_MS:
                if hour >= w:
                    pending.add((mark.start_ms, mark.entity))
                    continue
                owners.add((hour, mark.entity))
            todo[mark.level].add((mark.start_ms, mark.entity))
        steps: list[Step] = []
        for level in self._levels.levels:
            # By entity, then time: neighbouring minutes of one entity are read together (_recompute).
            intervals = sorted(todo[level], key=lambda i: (i[1], i[0]))
            if not intervals:
                continue
            steps += [Step("rollups", level, c) for c in _chunks(intervals, self._chunk)]
            starts = sorted({(start, "") for start, _ in intervals})
            steps += [Step("totals", level, c) for c in _chunks(starts, self._chunk)]
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
                    deferred[Mark.of(last_slot, coarse, coarse_start, entity)] = None
            if deferred:
                steps.append(Step("defer", coarse, tuple((m.start_ms, m.entity) for m in deferred)))
        steps += [Step("pending", finest, c) for c in _chunks(sorted(pending), self._chunk)]
        steps += [Step("owners", HOUR_MS, c) for c in _chunks(sorted(owners, key=lambda i: (i[1], i[0])), self._chunk)]
        return steps

    def _do(self, slot: int, step: Step, deadline: Deadline, report: RunReport) -> None:
        level = step.level
        if step.kind == "rollups":
            figures = self._recompute(level, step.intervals, report)
            self._put(level, [(s, e, figures[s, e]) for s, e in step.intervals], deadline, report)
            report.recomputed[level] = report.recomputed.get(level, 0) + len(step.intervals)
        elif step.kind == "totals":
            starts = [start for start, _ in step.intervals]
            totals = self._pool.map(functools.partial(self._total, level, report=report), starts)
            self._put(level, [(s, None, f) for s, f in zip(starts, totals, strict=True)], deadline, report)
            report.totals += len(starts)
        elif step.kind == "defer":  # a mark for each coarse interval, in its last slot
            marks = [Mark.of(s + level - SLOT_MS, level, s, e) for s, e in step.intervals]
            marks = [m for m in marks if m not in self._deferred]
            self._write_marks(marks, deadline)
            self._deferred.update(marks)
            report.deferred += len(marks)
        elif step.kind == "pending":  # each mark again, in the next slot
            self._write_marks([Mark.of(slot + SLOT_MS, level, s, e) for s, e in step.intervals], deadline)
            report.pending += len(step.intervals)
        elif self._write_tier is not None:  # owners: planned only with the write tier
            tier = self._write_tier
            counted = self._pool.map(functools.partial(self._compaction_counted, tier, cost=report.raw), step.intervals)
            compaction = self._watermark.state()  # the groups compaction works each hour with
            requests = [
                RedoRequest(hour, tier_for_hour(tier, compaction, hour).group_of(entity), entity)
                for (hour, entity), yes in zip(step.intervals, counted, strict=True)
                if yes
            ]
            refused = self._store.write([self._store.redo_write(r) for r in requests], deadline)
            if refused:
                raise RuntimeError(f"DynamoDB refused {len(refused)} redo requests: {next(iter(refused.values()))}")
            report.redos += len(requests)

    def _write_marks(self, marks: Sequence[Mark], deadline: Deadline) -> None:
        """Put ``marks`` (of later slots) with their slots' index items, and add those slots to the index
        this run holds: a slot of an hour it has read is applied by this run too."""
        refused = self._store.write(self._store.marks_writes(marks), deadline)
        if refused:
            raise RuntimeError(f"DynamoDB refused {len(refused)} rollup marks: {next(iter(refused.values()))}")
        for mark in marks:
            self._marked.get(floor_to(mark.slot_ms, HOUR_MS), set()).add(mark.slot_ms)

    def _compaction_counted(self, tier: WriteTier, interval: tuple[int, str], *, cost: ReadCount) -> bool:
        """Whether compaction counted ``entity``'s readings of ``hour``: its compacted blocks of the hour
        are unflagged (the entity-hour was compaction's). One flagged block makes the hour the rollup
        function's, whatever else is stored: a redo leaves the block it replaced (another version,
        another sort key), as the query function reads it too. Consistent: a compacted block written
        before the watermark passed the hour is seen."""
        hour, entity = interval
        # which G's the hour was compacted under (into cluster blocks), not a state cached before it was
        compaction = state_through(self._watermark, hour + HOUR_MS)
        plan = self._layout.plan_entity(
            entity,
            hour,
            hour + HOUR_MS,
            self._shard_maps.current(),
            write_tier=tier,
            compacted_through_ms=hour + HOUR_MS,
            clustered=compaction.clustered,
        )
        counted = False
        for partition in (p for p in plan.partitions if p.kind in COMPACTED_KINDS):
            for block in self._blocks(partition, cost):
                header = header_of(partition, block)
                if header.last_ms >= hour and header.first_ms < hour + HOUR_MS:
                    if block.owned_by_rollups(entity):
                        return False
                    # a cluster block counts the entity only if it holds the entity's readings
                    counted = counted or partition.kind == "compacted" or bool(decode(partition, block, entity)[1])
        return counted

    def _blocks(self, partition: PartitionQuery, cost: ReadCount) -> Iterator[StoredBlock]:
        """Every stored item of ``partition`` (strongly consistent, expired ones left out), page by page,
        each page's calls, items and read units counted in ``cost``."""
        request = PageRequest(partition, consistent=True, now_epoch_s=self._clock_ms() // 1000)
        while True:
            page = self._reader.read_page(request)
            cost.calls += 1
            cost.items += page.scanned
            cost.read_units += page.read_units
            yield from page.blocks
            if page.next_key is None:
                return
            request = replace(request, start_key=page.next_key)

    def _put(
        self,
        level: int,
        entries: Sequence[tuple[int, str | None, Figures]],
        deadline: Deadline,
        report: RunReport,
    ) -> None:
        """Put each interval's figures (entity None: a total). One DynamoDB refuses is put as set aside,
        with the reason, and the others go on: one interval never stops the watermark. (Figures are
        stored as text, within every rule of DynamoDB's numbers, so only a fault refuses one.)"""
        refused = self._store.write([self._store.rollup_write(level, *entry) for entry in entries], deadline)
        if not refused:
            return
        again = []
        for index, why in sorted(refused.items()):
            start, entity, _ = entries[index]
            aside = self._aside(report, level, start, entity, why)
            again.append(self._store.rollup_write(level, start, entity, aside))
        if self._store.write(again, deadline):
            raise RuntimeError(f"DynamoDB refused set-aside rollups too: {next(iter(refused.values()))}")

    @staticmethod
    def _aside(report: RunReport, level: int, start: int, entity: str | None, why: str) -> Figures:
        """The figures of an interval set aside for ``why``: logged, counted (RollupIntervalsSetAside)."""
        where = f"{format_duration(level)} {format_ts(start)} {entity if entity is not None else '(every entity)'}"
        report.set_aside.append(f"{where}: {why}")  # list.append: safe from the pool's threads
        logger.error("rollup interval set aside", extra={"interval": where, "reason": why})
        return Figures.set_aside(why)

    def _recompute(
        self, level: int, intervals: Sequence[tuple[int, str]], report: RunReport
    ) -> dict[tuple[int, str], Figures]:
        """Each interval's figures: a coarse one from its finer rollups, a finest one from raw, where
        one read per partition covers a run of an entity's neighbouring intervals (a backfill of an
        hour costs one read per partition, not sixty). An interval whose raw readings hold a block
        that does not decode is set aside; the run's other intervals are read one by one to find it."""
        finer = self._levels.finer(level)
        if finer is not None:

            def combined(interval: tuple[int, str]) -> Figures:
                start, entity = interval
                parts = self._store.entity_rollups(
                    finer, range(start, start + level, finer), entity, report.rollups, consistent=True
                )
                return Figures.combined(parts.values())

            return dict(zip(intervals, self._pool.map(combined, intervals), strict=True))
        runs: list[tuple[str, list[int]]] = []
        for start, entity in intervals:  # sorted by entity, then start
            last = runs[-1] if runs else ("", [])
            if last[0] == entity and start - last[1][-1] <= RUN_GAP * level and start - last[1][0] < RUN_SPAN * level:
                last[1].append(start)
            else:
                runs.append((entity, [start]))

        def read(run: tuple[str, list[int]]) -> dict[int, Figures]:
            entity, starts = run
            try:
                return self.raw_figures(entity, starts, level, report.raw)
            except (CorruptBlock, BlockError) as exc:
                if len(starts) > 1:
                    return {s: f for start in starts for s, f in read((entity, [start])).items()}
                return {starts[0]: self._aside(report, level, starts[0], entity, str(exc))}

        return {
            (start, entity): f
            for (entity, _), figures in zip(runs, self._pool.map(read, runs), strict=True)
            for start, f in figures.items()
        }

    def raw_figures(self, entity: str, starts: Sequence[int], level: int, cost: ReadCount) -> dict[int, Figures]:
        """``entity``'s figures in each interval ``[start, start + level)`` of ``starts`` (ascending), read
        whole and consistently in one pass over ``[starts[0], starts[-1] + level)`` (expired blocks left out:
        the intervals recomputed are at most LATENESS old, far younger than retention).

        Every block is decoded (a block that does not is raised as ``CorruptBlock``: the caller sets
        the interval aside rather than put a rollup with a hole in it), and a reading stored in several blocks (a
        redelivery, a correction) counts once, as the block of the highest version has it, so the
        rollups equal what raw reads return. With the write tier the plan holds its partitions too (group
        items or sub-items, compacted blocks, at the compaction state): their readings count the same way."""
        compaction = self._watermark.state()
        plan = self._layout.plan_entity(
            entity,
            starts[0],
            starts[-1] + level,
            self._shard_maps.current(),
            write_tier=self._write_tier,
            compacted_through_ms=compaction.through,
            earlier=compaction.earlier_for(self._write_tier),
            repacked=(compaction.repack_from, compaction.repacked),
            clustered=compaction.clustered,
        )
        copies: dict[tuple[str, int, str], tuple[int, Reading]] = {}
        for partition in plan.partitions:
            for block in self._blocks(partition, cost):
                header = header_of(partition, block)  # a block wholly outside the range is not decoded
                if header.last_ms >= partition.from_ms and header.first_ms < partition.to_ms:
                    keep_newest(copies, header.version, decode(partition, block, entity)[1])
        figures = {start: Figures() for start in starts}
        for _, reading in copies.values():
            at = bisect.bisect_right(starts, reading.ts_ms) - 1
            if at >= 0 and reading.ts_ms < starts[at] + level:  # a minute between the run's marked ones is skipped
                figures[starts[at]].add(reading.measures)
        return figures

    def _total(self, level: int, start: int, *, report: RunReport) -> Figures:
        return Figures.combined(self._store.interval_rollups(level, start, report.rollups).values())
