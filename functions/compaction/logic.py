"""The compaction function: each settled hour of the write tier, compacted into cluster blocks;
each settled slice of the newest hour, re-packed into sub-items first.

An hour (a re-pack slice) is *settled* once the slice rule's grace and ``SETTLE`` (longer than ingest's
timeout) have passed since it ended (:func:`keydesign.writetier.tier_settle`): a reading goes to the write
tier only if its slice had not ended a grace before its batch started
(:func:`keydesign.writetier.in_write_tier`), and a batch is written within ingest's timeout, so by
then every group item of the slice and every dense mark of the hour is stored and no other will be.

Each run first *re-packs* the slices due (:meth:`keydesign.writetier.CompactionState.repack_next`:
the settled slices of the newest hour not yet compacted), one at a time, in steps of ``CONCURRENCY``
groups: per group partition it reads the slice's items (their sort keys: an item lies in one slice)
and the hour's dense marks, the blocks of the dense-marked entities with readings in the slice, and
puts the sub-items :func:`keydesign.tiering.repack_slice` makes (``s#<group>#<hour>``, one Query of
a device's sub-group for readers). Once a slice's every group is stored, the state records it
(``repacked``); a slice cut short is done again whole by the next run (the same puts). An error stops
the re-pack only (kept for the handler); the hours are compacted all the same.

For each group of a settled hour, compaction

1. reads the group's partition of the hour (``w#<group>#<hour>`` in the hour's table; strongly
   consistent, every page; a table that does not exist reads as empty): its group items and its
   dense marks;
2. reads the blocks of the hour of each dense-marked entity that has readings in the group items
   (the block partitions of its plan; strongly consistent);
3. puts the cluster blocks :func:`keydesign.tiering.compact_hour` makes of them (``c#<group>#<hour>``,
   a cluster of the group's entities' hour each); a dense-marked entity (its hour is the rollup
   function's) is named in the ``r`` string set of the blocks holding it (it is *flagged*);
4. with rollups (``ROLLUPS``), puts in the same write, in the control table, the group's *partial*
   (:class:`keydesign.rollup.GroupPartial`: figures per finest interval over the readings of its
   unflagged entities) and a *re-mark* (an ordinary rollup mark, stamped with the minute it is
   written in) of each finest interval holding a flagged entity's readings, so the rollup function
   recomputes those from raw (both tiers).

After the hour's last group, and before the watermark moves past it, compaction reads back every
group's partial of the hour (one Query) and puts its part of each total (``<start>#c`` beside the
rollup function's ``<start>``, :func:`keydesign.rollup.fleet_parts`): every interval of each level of
an hour or less within the hour (an empty one too), then for each coarser level the interval holding
the hour, combined from the next finer level's parts in it (read after those are stored).

At the start of each run compaction *redoes* the hours the rollup function asks it to
(:class:`keydesign.rollup.RedoRequest`: a late reading made an entity's hour the rollup function's
after compaction had counted it in its group's partial): up to ``REDO_LIMIT`` requests of hours
already compacted, an hour at a time while time allows. Per (hour, group) it puts the entities' dense
marks (the items ingest puts), compacts the group again (reading them back), and puts only the
cluster blocks holding those entities (now flagged; one stored before and not made again is put again
with them flagged; an hour compacted before cluster blocks has its per-entity blocks put again flagged),
the partial without them and their re-marks; then the hour's parts of the totals; then deletes the
requests. A redo that fails leaves its requests for the next run (whose new hours are compacted all
the same); requests of an hour not yet compacted wait for it; those of an hour whose group items are
expiring cannot be done and are logged and deleted.

Groups are compacted in steps of up to ``CONCURRENCY`` groups, read side by side. After each step
the state item (``keydesign.writetier.state_key`` in the control table) records the next group of
the hour (``group``); after the hour's last group, its watermark ``through`` moves to the hour's
end (with the hour's G's in ``clustered`` when they change), and readers read the hour from the cluster
blocks from then on. A step whose items (blocks,
partials, re-marks; the hour's parts of the totals) are not all stored (throttled until the
deadline, or refused) stops the run before the state moves (the handler raises its error once the
run's metrics are out), so the next run does it again: compacting the same copies makes the same
items (a partial, a part of a total, a re-mark is recomputed from its source), and every write is a
put, so nothing is lost and nothing is stored twice (docs/writetier.md has the one exception). A
step starts only if it fits before the deadline (judged by the longest this container has taken),
and a run goes on until no settled hour is left: after downtime, as many hours as its time allows.

The groups of an hour are those of the largest G whose ingest may have written it: the deployed
one, or an earlier one the state recorded when it changed (``CompactionState.changed_to``; a
smaller G's partitions are among a larger one's), so a change of ``WRITE_TIER_GROUPS`` compacts
every reading written under either.

A first run (no state) starts at the earliest hour a group item that is still stored, or that an
ingest container may yet write, can lie in, not days back (:meth:`CompactionRunner._first_hour`). A group
item that does not decode (or lies outside its hour), a dense mark that names no entity, and a
block of a dense-marked entity that does not decode are *corrupt*: logged with their table and key
and the reason, counted (``CompactionCorruptItems``, alarmed), and left where they are; the rest of
the group is compacted. Nothing is deleted but handled redo requests: group items and partials
expire ``KEEP_MS`` after their hour, parts of totals and re-marks as rollups do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from adapters.batch_writer import BatchWriter, PendingWrite, serialize_item
from adapters.clients import client
from adapters.compaction_state import plain
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
from adapters.rollup_store import ReadCount, RollupStore
from adapters.shard_map_source import ShardMapSource
from adapters.shard_map_store import shard_map_source
from adapters.start_items import write_tier_starts
from compaction.settings import CompactionSettings
from keydesign import (
    BlockError,
    KeyDesignError,
    Layout,
    PartitionQuery,
    Reading,
    ShardMap,
    format_ts,
    validate_entity_id,
)
from keydesign.blocks import HIGH, block_item, decode_group
from keydesign.layouts import COMPACTED_KINDS
from keydesign.periods import format_duration
from keydesign.rollup import (
    HOUR_MS,
    Figures,
    Granularities,
    GroupPartial,
    Mark,
    RedoRequest,
    fleet_parts,
    floor_to,
    fresh_parts,
    remark_starts,
    slice_owned,
)
from keydesign.tiering import CompactedBlock, compact_hour, repack_slice
from keydesign.writetier import (
    DENSE_MARK_PREFIX,
    KEEP_MS,
    REPACK_MS,
    ROLLUP_OWNED,
    SLICE_MS,
    CompactionState,
    DenseMark,
    SubItem,
    WriteTier,
    dense_mark_sk,
    hour_tiers,
    slice_start,
    state_key,
    tier_for_hour,
    tier_settle,
    tier_ttl,
)

#: Groups compacted side by side in a step (and the writes in flight for them).
CONCURRENCY = 16
#: What a step is assumed to take before this container has timed one.
FIRST_STEP_S = 1.0
#: The most redo requests a run reads (and handles, time allowing); the rest wait for the next run.
REDO_LIMIT = 1_000


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class StateStore:
    """The compaction state item of one table prefix in the control table, and the write tier's start items."""

    def __init__(self, dynamodb: Any, table: str, prefix: str) -> None:
        self._db = dynamodb
        self._table = table
        self._key = state_key(prefix)
        self._starts = write_tier_starts(table, prefix)

    def first_start(self) -> int | None:
        """The earliest hour in which an ingest container wrote its first group items, if a start item of
        one is stored (consistent)."""
        return self._starts.first(self._db)

    def load(self) -> CompactionState | None:
        key = {name: {"S": value} for name, value in self._key.items()}
        raw = self._db.get_item(TableName=self._table, Key=key, ConsistentRead=True).get("Item")
        return None if raw is None else CompactionState.from_item(plain(raw))

    def save(self, state: CompactionState) -> None:
        self._db.put_item(TableName=self._table, Item=serialize_item({**self._key, **state.item()}))


@dataclass(slots=True)
class GroupWork:
    """What compacting one group's hour read and made."""

    calls: int = 0
    read_units: float = 0.0
    group_items: int = 0
    dense_marks: int = 0
    blocks_read: int = 0
    corrupt: list[str] = field(default_factory=list)
    compacted: list[CompactedBlock] = field(default_factory=list)
    #: With rollups: the group's figures over its unflagged compacted blocks, and the finest intervals
    #: (entity, start) holding the readings of its flagged ones (re-marked for the rollup function).
    partial: GroupPartial | None = None
    remarks: list[tuple[str, int]] = field(default_factory=list)
    #: What re-packing the group's slice made.
    subs: list[SubItem] = field(default_factory=list)


@dataclass(slots=True)
class RunReport:
    hours: int = 0
    steps: int = 0
    groups: int = 0
    calls: int = 0
    read_units: float = 0.0
    group_items: int = 0
    dense_marks: int = 0
    blocks_read: int = 0
    compacted_blocks: int = 0
    readings_compacted: int = 0
    write_units: int = 0
    partials: int = 0
    remarks: int = 0
    fleet_parts: int = 0
    #: Slice partials and fresh parts of finest totals the re-pack put (docs/rollups.md, "Fresh minute totals").
    slice_partials: int = 0
    fresh_parts: int = 0
    #: Redo requests handled (deleted), and those left for hours not yet compacted.
    redos: int = 0
    redos_waiting: int = 0
    #: Redo requests of hours whose group items are expiring: they cannot be done (logged, deleted).
    redos_expired: int = 0
    #: Corrupt items left in place: ``table pk sk: reason``.
    corrupt: list[str] = field(default_factory=list)
    through_ms: int = 0
    lag_ms: int = 0
    #: The re-pack: slices re-packed (every group of each), sub-items put, and its watermark (the end of
    #: the last slice re-packed, or compaction's when later) and lag.
    slices_repacked: int = 0
    sub_items: int = 0
    repacked_ms: int = 0
    repack_lag_ms: int = 0
    #: What stopped the run early (a step not stored, a failed read): the handler raises it once the
    #: metrics are out, so the lag is reported by a failing run too.
    error: Exception | None = None

    def add(self, work: GroupWork) -> None:
        self.groups += 1
        self._add_reads(work)
        self.compacted_blocks += len(work.compacted)
        self.readings_compacted += sum(len(b.readings) for b in work.compacted)
        self.write_units += sum(b.write_units for b in work.compacted)

    def add_repacked(self, work: GroupWork) -> None:
        self._add_reads(work)
        self.sub_items += len(work.subs)
        self.write_units += sum(s.write_units for s in work.subs)

    def _add_reads(self, work: GroupWork) -> None:
        self.calls += work.calls
        self.read_units += work.read_units
        self.group_items += work.group_items
        self.dense_marks += work.dense_marks
        self.blocks_read += work.blocks_read
        self.corrupt += work.corrupt

    def summary(self) -> dict[str, Any]:
        return {
            "hours": self.hours,
            "steps": self.steps,
            "groups": self.groups,
            "queries": self.calls,
            "group_items_read": self.group_items,
            "dense_marks": self.dense_marks,
            "blocks_read": self.blocks_read,
            "compacted_blocks_written": self.compacted_blocks,
            "readings_compacted": self.readings_compacted,
            "write_units": self.write_units,
            "partials_written": self.partials,
            "remarks_written": self.remarks,
            "fleet_parts_written": self.fleet_parts,
            "slice_partials_written": self.slice_partials,
            "fresh_parts_written": self.fresh_parts,
            "redos": self.redos,
            "redos_waiting": self.redos_waiting,
            "redos_expired": self.redos_expired,
            "corrupt_items": len(self.corrupt),
            "through": format_ts(self.through_ms),
            "lag_ms": self.lag_ms,
            "slices_repacked": self.slices_repacked,
            "sub_items_written": self.sub_items,
            "repacked": format_ts(self.repacked_ms),
            "repack_lag_ms": self.repack_lag_ms,
            "error": None if self.error is None else str(self.error),
        }


def emit(report: RunReport) -> None:
    """The run's metrics: CompactionLagSeconds and CompactionCorruptItems carry the alarms."""
    count = MetricUnit.Count
    metrics.add_metric(name="CompactionLagSeconds", unit=MetricUnit.Seconds, value=report.lag_ms / 1000)
    metrics.add_metric(name="RepackLagSeconds", unit=MetricUnit.Seconds, value=report.repack_lag_ms / 1000)
    metrics.add_metric(name="SlicesRepacked", unit=count, value=report.slices_repacked)
    metrics.add_metric(name="SubItemsWritten", unit=count, value=report.sub_items)
    metrics.add_metric(name="HoursCompacted", unit=count, value=report.hours)
    metrics.add_metric(name="GroupItemsRead", unit=count, value=report.group_items)
    metrics.add_metric(name="CompactedBlocksWritten", unit=count, value=report.compacted_blocks)
    metrics.add_metric(name="ReadingsCompacted", unit=count, value=report.readings_compacted)
    metrics.add_metric(name="CompactionCorruptItems", unit=count, value=len(report.corrupt))
    metrics.add_metric(name="CompactionRedos", unit=count, value=report.redos)
    metrics.add_metric(name="PartialsWritten", unit=count, value=report.partials)
    metrics.add_metric(name="RemarksWritten", unit=count, value=report.remarks)


class StepNotStored(RuntimeError):  # noqa: N818 - reads as the condition
    """Some compacted blocks of a step were not stored: the run stops, the next one redoes the step."""


class CompactionRunner:
    """Compacts settled hours until none is left or the deadline nears. One per container."""

    def __init__(
        self,
        *,
        layout: Layout,
        tier: WriteTier,
        shard_maps: ShardMapSource,
        reader: PartitionReader,
        writer: BatchWriter,
        state: StateStore,
        retention_ms: int,
        settle_ms: int,
        max_future_ms: int,
        rollups: RollupStore | None = None,
        levels: Granularities | None = None,
        concurrency: int = CONCURRENCY,
        clock_ms: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        if (rollups is None) != (levels is None):
            raise ValueError("compaction's rollups need both the rollup store and the granularities")
        self._layout = layout
        self._rollups = rollups
        self._levels = levels
        self._tier = tier
        self._shard_maps = shard_maps
        self._reader = reader
        self._writer = writer
        self._state = state
        self._retention_ms = retention_ms
        #: Also how long after its stamp a re-mark must be stored (the rollup function's settle time).
        self._settle_ms = settle_ms
        #: How long after its end a slice or an hour of the write tier is re-packed or compacted.
        self._tier_settle_ms = tier_settle(settle_ms)
        #: How far past a run that notices a change of G the earlier G's group items may lie.
        self._reach_ms = settle_ms + max_future_ms
        self._step_groups = concurrency
        self._clock_ms = clock_ms
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="compaction")
        self._longest_step_s = FIRST_STEP_S

    @classmethod
    def from_settings(
        cls, settings: CompactionSettings, *, clock_ms: Callable[[], int] = _wall_clock_ms
    ) -> CompactionRunner:
        if settings.write_tier is None or settings.control_table is None:  # the settings refuse both
            raise ValueError("compaction needs WRITE_TIER_GROUPS and CONTROL_TABLE")
        writer = BatchWriter(client("dynamodb", max_attempts=1), concurrency=CONCURRENCY)
        prefix = settings.layout.table_prefix
        rollups = None  # without rollups compaction puts no partials, parts of totals or re-marks
        if settings.granularities is not None:
            rollups = RollupStore(client("dynamodb"), writer, settings.control_table, prefix, settings.retention_ms)
        return cls(
            layout=settings.layout,
            tier=settings.write_tier,
            shard_maps=shard_map_source(settings, bootstrap=False),
            reader=DynamoPartitionReader(pool=max(32, CONCURRENCY)),
            writer=writer,
            state=StateStore(client("dynamodb"), settings.control_table, prefix),
            rollups=rollups,
            levels=settings.granularities,
            retention_ms=settings.retention_ms,
            settle_ms=settings.settle_ms,
            max_future_ms=settings.max_future_ms,
            clock_ms=clock_ms,
        )

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._writer.close()

    def run(self, deadline: Deadline) -> RunReport:
        now = self._clock_ms()
        stored = self._state.load()
        if stored is None:
            state = CompactionState(self._first_hour(now), self._tier.groups, remarked_at=0)
        else:
            state = stored.changed_to(self._tier.groups, now, self._reach_ms)
            if stored.groups not in (None, state.groups):
                logger.info(
                    "write_tier_groups changed: the uncompacted hours are compacted under both",
                    extra={"groups": state.groups, "earlier": state.item().get("previous")},
                )
        if state != stored:
            self._state.save(state)
        report = RunReport(through_ms=state.through)
        state = self._repack(state, now, deadline, report)
        try:
            self._redos(state, now, deadline, report)
        except Exception as exc:  # the requests stay for the next run; new hours are compacted all the same
            logger.exception("compaction redo stopped; its requests are left for the next run")
            report.error = exc
        try:
            self._hours(state, now, deadline, report)
        except Exception as exc:  # kept for the handler, which raises it once the metrics are out
            logger.exception("compaction run stopped; the next run goes on from the last step stored")
            report.error = exc
        report.lag_ms = max(0, now - report.through_ms)
        report.repacked_ms = max(report.repacked_ms, report.through_ms)
        report.repack_lag_ms = max(0, now - report.repacked_ms)
        return report

    def _repack(self, state: CompactionState, now: int, deadline: Deadline, report: RunReport) -> CompactionState:
        """Re-pack each slice due (:meth:`CompactionState.repack_next`) into sub-items, while time allows,
        in steps of groups as the hours are compacted (the group partitions of the hour's largest G: each
        is re-packed under its own number, whatever G wrote its items). After each step the state records
        the next group (``repack_group``), and once every group of the slice is stored, the slice
        (``repacked``). A step not stored (a write throttled past the deadline, or refused) is done again
        by the next run: the same group items make the same sub-items, each a put. Returns the state as
        stored; an error is kept in the report, and compaction goes on."""
        report.repacked_ms = state.repacked
        try:
            if not state.repacked and state.repack_next(now, self._tier_settle_ms) is not None:
                # A first re-pack (a new deployment, or one just upgraded to it): from the hour after those an
                # ingest of the version before may still write (its late readings went to group items after
                # their slice had ended), as a change of G reaches (``CompactionState.changed_to``).
                first = slice_start(now + self._reach_ms) + SLICE_MS
                state = replace(state, repack_from=first, repacked=first)
                self._state.save(state)
            elif state.repack_from < state.repacked and not state.repacked_at and self._fresh_level() is not None:
                # Re-packed by code that put no slice partials: the fresh totals start at its next slice.
                state = replace(state, repack_from=state.repacked)
                self._state.save(state)
            settle = self._tier_settle_ms
            while (start := state.repack_next(now, settle)) is not None and self._time_for_a_step(deadline):
                state = state.repack_starting(start)
                tier = tier_for_hour(self._tier, state, slice_start(start))
                shard_map = self._shard_maps.current()
                group = state.repack_group
                while group < tier.groups:
                    if not self._time_for_a_step(deadline):
                        return state
                    started = deadline.clock()
                    step = range(group, min(tier.groups, group + self._step_groups))
                    self._repack_step(start, tier, step, shard_map, deadline, report)
                    self._longest_step_s = max(self._longest_step_s, deadline.clock() - started)
                    group = step.stop
                    if group < tier.groups:  # a run cut short goes on from here
                        state = replace(state, repack_group=group)
                        self._state.save(state)
                self._fresh(start, deadline, report)
                state = replace(state.repack_advanced(), repacked_at=self._clock_ms())
                self._state.save(state)
                report.slices_repacked += 1
                report.repacked_ms = state.repacked
        except Exception as exc:  # the slice is done again by the next run; the hours are compacted all the same
            logger.exception("re-pack stopped; the next run goes on from the last slice stored")
            report.error = exc
        return state

    def _repack_step(  # noqa: PLR0917 - the slice's loop passes what it holds
        self, start: int, tier: WriteTier, groups: range, shard_map: ShardMap, deadline: Deadline, report: RunReport
    ) -> None:
        """Re-pack ``groups`` of the slice at ``start``: read them side by side, then put every sub-item."""
        done = list(self._pool.map(lambda group: self._repack_group(start, tier, group, shard_map), groups))
        subs = [s for work in done for s in work.subs]
        writes = [PendingWrite(s.key.table, s.key.pk, s.key.sk, serialize_item(s.item())) for s in subs]
        partials = [w.partial for w in done if w.partial is not None and (w.partial.intervals or w.partial.left_out)]
        marks: list[PendingWrite] = []
        stamp = self._clock_ms()
        if self._rollups is not None and self._levels is not None:  # partials are made only with rollups
            writes += [self._rollups.partial_write(partial) for partial in partials]
            # The pairs a partial leaves out marked again, so the rollup function recomputes them from the
            # slice's final group items (a group item may have come after it applied the block's mark).
            finest = self._levels.finest
            wanted = sorted({Mark.of(stamp, finest, at, entity) for w in done for entity, at in w.remarks})
            marks = self._rollups.marks_writes(wanted)
        what = f"the sub-items of groups {groups.start}-{groups.stop - 1} of {format_ts(start)}"
        self._write([*writes, *marks], deadline, what)
        if marks and self._clock_ms() - stamp >= self._settle_ms:  # as _put: the slot may have been applied
            raise StepNotStored(f"the re-marks of {what} were stored SETTLE or more after their stamp; redone")
        for work in done:
            report.add_repacked(work)
        report.slice_partials += len(partials)
        report.remarks += sum(len(w.remarks) for w in done)

    def _repack_group(self, start: int, tier: WriteTier, group: int, shard_map: ShardMap) -> GroupWork:
        """Read one group partition's items of the re-pack slice at ``start`` (its sort keys: an item lies
        in one slice), its dense marks of the hour, and the blocks of its dense-marked entities with
        readings in the slice, and re-pack them (:func:`keydesign.tiering.repack_slice`)."""
        hour, end = slice_start(start), start + REPACK_MS
        table, pk = self._layout.table_for(hour), tier.group_pk(group, hour)
        marks = PartitionQuery(
            table, pk, DENSE_MARK_PREFIX, f"{DENSE_MARK_PREFIX}{HIGH}", hour, hour + SLICE_MS, kind="group"
        )
        items = PartitionQuery(table, pk, format_ts(start), f"{format_ts(end - 1)}#{HIGH}", start, end, kind="group")
        work = GroupWork()
        copies, dense = self._tier_copies([marks, items], start, end, work)
        present = {reading.entity_id for _, readings in copies for reading in readings}
        blocks = self._dense_copies([e for e in dense if e in present], start, end, shard_map, work)
        work.subs = repack_slice(tier, group, start, copies, blocks, table=table, retention_ms=self._retention_ms)
        if (finest := self._fresh_level()) is not None:
            blocked = [r for _, readings in blocks for r in readings if start <= r.ts_ms < end]
            owned, left_out = slice_owned([r for sub in work.subs for r in sub.readings], blocked, finest)
            work.partial = GroupPartial.of(hour, group, tier.groups, owned, finest, slice_ms=start)
            work.partial.left_out = frozenset(left_out)
            work.remarks = sorted(left_out)
        return work

    def _fresh_level(self) -> int | None:
        """The finest rollup level, when the re-pack puts slice partials and fresh parts of its totals:
        with rollups whose finest level divides a re-pack slice (docs/rollups.md, "Fresh minute totals")."""
        if self._rollups is None or self._levels is None or REPACK_MS % self._levels.finest:
            return None
        return self._levels.finest

    def _fresh(self, start: int, deadline: Deadline, report: RunReport) -> None:
        """The re-pack's fresh parts of the finest totals of the slice at ``start``, from every group's
        slice partial of it (read back whole), put before the slice counts as re-packed."""
        level = self._fresh_level()
        if level is None or self._rollups is None:
            return
        cost = ReadCount()
        parts = fresh_parts(self._rollups.slice_partials(slice_start(start), start, cost))
        report.calls += cost.calls
        report.read_units += cost.read_units
        writes = [self._rollups.fleet_part_write(level, s, f, fresh=True) for s, f in sorted(parts.items())]
        self._write(writes, deadline, f"the fresh parts of the totals of the slice at {format_ts(start)}")
        report.fresh_parts += len(writes)

    def _first_hour(self, now: int) -> int:
        """Where a first run (no state) starts: the earliest hour a group item that is still stored, or that
        ingest may yet write, can lie in. Every ingest container stores a start item, stamped with the hour
        of its batch's start less the grace (``tier_stamp``), before its first group items (and again each
        ``START_EVERY_MS``), and a group item never lies in an hour before that (``in_write_tier``); a start
        item outlives the group items it covers (``START_KEEP_MS``). So every group item stored now has a
        start item of its hour or earlier stored now, and the run starts at the earliest, ``first``. Once a
        group item could be expired (``KEEP_MS`` after its hour) there is no need to go back further: never
        before the hour of now - ``KEEP_MS``, whatever ``first`` says, as before start items existed.

        The read may miss a container that stores its start item after it (one starting now, or one whose
        batch is in flight): its batch started less than ingest's timeout ago, so after now - ``SETTLE``,
        and is stamped a grace earlier (``keydesign.writetier.tier_stamp``): in the hour ``target`` or
        later. So the run starts at ``target`` when that is earlier than
        ``first`` or no start item is stored (a new deployment whose ingest has not written yet): that hour
        has not settled, and is compacted once it has. A new deployment so compacts the hours since its
        start, not 96 empty hours of every group."""
        target = slice_start(now - self._tier_settle_ms)
        first = self._state.first_start()
        start = target if first is None else min(slice_start(first), target)
        return max(start, slice_start(now - KEEP_MS))

    def _hours(self, state: CompactionState, now: int, deadline: Deadline, report: RunReport) -> None:
        """Compact settled hours from ``state`` on, step by step, while time allows; ``report.through_ms``
        follows the watermark stored. An hour's groups are those of the largest G whose ingest may have
        written it, the deployed one or an earlier one (``CompactionState.earlier_for``): a smaller G's
        partitions are among them (``w#<group>#<hour>``, group < G). The cursor names that G."""
        while state.through + SLICE_MS + self._tier_settle_ms <= now and self._time_for_a_step(deadline):
            hour = state.through
            tier = tier_for_hour(self._tier, state, hour)
            others = hour_tiers(self._tier, state, hour, tier)
            cursor = state.group_tier or self._tier.groups  # 0: an item from before the cursor named its G
            group = state.group if cursor == tier.groups else 0
            while group < tier.groups and self._time_for_a_step(deadline):
                step = range(group, min(tier.groups, group + self._step_groups))
                started = deadline.clock()  # timed on the deadline's clock, which judges the next step
                remarked = self._step(hour, tier, others, step, deadline, report)
                if remarked is not None:  # recorded before the cursor moves past the step that put them
                    state = state.remarked(remarked)
                self._longest_step_s = max(self._longest_step_s, deadline.clock() - started)
                group = step.stop
                report.steps += 1
                if group < tier.groups:  # progress inside the hour: a run cut short goes on from here
                    self._state.save(replace(state, group=group, group_tier=tier.groups))
            if group < tier.groups:
                return
            self._fleet(hour, deadline, report, redo=False)
            groups = (tier.groups, *(t.groups for t in others))
            state = state.advanced(self._clock_ms(), groups, self._retention_ms)
            if state.remarked_at is None:  # an item from before it was recorded: its re-marks, by advanced_at
                state = state.remarked(0)
            self._state.save(state)
            report.through_ms = state.through
            report.hours += 1

    def _time_for_a_step(self, deadline: Deadline) -> bool:
        """Room before the deadline for one more step, judged by the longest this container has taken."""
        return deadline.allows_sleep(1.5 * self._longest_step_s)

    def _step(  # noqa: PLR0917 - the hour's loop passes what it holds
        self,
        hour: int,
        tier: WriteTier,
        others: Sequence[WriteTier],
        groups: range,
        deadline: Deadline,
        report: RunReport,
    ) -> int | None:
        """Compact ``groups`` of ``tier`` of ``hour``: read them side by side, then put every block they make.
        Returns the stamp of the re-marks put (None: none)."""
        shard_map = self._shard_maps.current()
        done = list(self._pool.map(lambda group: self._group(hour, tier, group, shard_map, others), groups))
        what = f"groups {groups.start}-{groups.stop - 1} of {format_ts(hour)}"
        remarked = self._put(done, deadline, report, what)
        for work in done:
            report.add(work)
        return remarked

    def _put(
        self,
        done: Sequence[GroupWork],
        deadline: Deadline,
        report: RunReport,
        what: str,
        *,
        entities: Collection[str] | None = None,
        more: Sequence[PendingWrite] = (),
    ) -> int | None:
        """Put in one write what compacting ``done`` made: the compacted blocks (of ``entities`` only,
        when given), ``more``, and with rollups each group's partial and the re-marks (of ``entities``
        only), stamped with the minute they are written in. All stored, or StepNotStored. Returns the
        re-marks' stamp (None: no re-mark)."""
        blocks = [b for work in done for b in work.compacted if entities is None or b.entities & set(entities)]
        writes = [PendingWrite(b.table, b.pk, b.sk, serialize_item(b.item())) for b in blocks]
        writes += more
        partials: list[PendingWrite] = []
        marks: list[PendingWrite] = []
        wanted: set[Mark] = set()
        stamp = 0
        if self._rollups is not None and self._levels is not None:
            stamp, finest = self._clock_ms(), self._levels.finest
            # An empty partial is not put in a first pass (absent: no readings; a new deployment's first run
            # goes over days of empty hours); a redo puts it, over the one it replaces.
            partials = [
                self._rollups.partial_write(work.partial)
                for work in done
                if work.partial is not None and (work.partial.intervals or entities is not None)
            ]
            wanted = {
                Mark.of(stamp, finest, start, entity)
                for work in done
                for entity, start in work.remarks
                if entities is None or entity in entities
            }
            marks = self._rollups.marks_writes(sorted(wanted))  # with their minute's index item
        self._write([*writes, *partials, *marks], deadline, what)
        if marks and self._clock_ms() - stamp >= self._settle_ms:
            # The rollup function applies a slot SETTLE after it ends: a re-mark stored later may have
            # missed its slot. The state has not moved, so the next run puts it again, stamped anew.
            raise StepNotStored(f"the re-marks of {what} were stored SETTLE or more after their stamp; redone")
        report.partials += len(partials)
        report.remarks += len(wanted)
        return stamp if wanted else None

    def _write(self, writes: Sequence[PendingWrite], deadline: Deadline, what: str) -> None:
        """Put every item of ``writes``, or raise StepNotStored naming the first that was not stored."""
        outcome = self._writer.write(writes, deadline)
        failed = {**outcome.unwritten, **outcome.rejected}
        if failed:
            index, why = min(failed.items())
            first = writes[index]
            raise StepNotStored(
                f"{len(failed)} of {len(writes)} items of {what} not stored (first: table {first.table} "
                f"{first.pk} / {first.sk}: {why}); the next run does them again"
            )

    def _group(
        self, hour: int, tier: WriteTier, group: int, shard_map: ShardMap, others: Sequence[WriteTier] = ()
    ) -> GroupWork:
        """Read one group's hour (its items and dense marks, the dense entities' blocks) and compact it.
        ``others``: the other write tiers whose group items the hour may hold (a change of G). An entity
        whose group under one of them is another partition may have readings of the hour in two
        partitions, each compacted in its own pass: its hour is the rollup function's, like a dense
        entity's (flagged, out of the partial, re-marked), so it is counted once, from raw."""
        end = hour + SLICE_MS
        work = GroupWork()
        partition = PartitionQuery(
            self._layout.table_for(hour), tier.group_pk(group, hour), None, None, hour, end, kind="group"
        )
        items, dense = self._tier_copies([partition], hour, end, work)
        present = {reading.entity_id for _, readings in items for reading in readings}
        blocks = self._dense_copies([e for e in dense if e in present], hour, end, shard_map, work)
        split = {e for e in present if any(t.group_of(e) != tier.group_of(e) for t in others)}
        work.compacted = compact_hour(
            hour,
            items,
            blocks,
            table=partition.table,
            pk=tier.cluster_pk(group, self._layout.cluster_span(hour)),
            retention_ms=self._retention_ms,
            dense=[*dense, *split],
        )
        if self._levels is not None:
            finest = self._levels.finest
            owned = [r for block in work.compacted for r in block.owned_readings()]
            work.partial = GroupPartial.of(hour, group, tier.groups, owned, finest, [t.groups for t in others])
            flagged: dict[str, list[Reading]] = {}
            for block in work.compacted:
                for reading in block.readings:
                    if reading.entity_id in block.rollups:
                        flagged.setdefault(reading.entity_id, []).append(reading)
            work.remarks = sorted(
                (entity, start) for entity, readings in flagged.items() for start in remark_starts(readings, finest)
            )
        return work

    def _tier_copies(
        self, partitions: Sequence[PartitionQuery], start: int, end: int, work: GroupWork
    ) -> tuple[list[tuple[int, Sequence[Reading]]], list[str]]:
        """The decoded group items (version, readings) and the dense-marked entities of ``partitions`` (a
        group partition, or ranges of it), each read whole; every item's readings must lie in
        ``[start, end)``, its hour or re-pack slice (else it is corrupt)."""
        items: list[tuple[int, Sequence[Reading]]] = []
        dense: list[str] = []
        for partition in partitions:
            for stored in self._read(partition, work):
                if stored.sk.startswith(DENSE_MARK_PREFIX):
                    entity = stored.sk.removeprefix(DENSE_MARK_PREFIX)
                    try:
                        validate_entity_id(entity)
                    except KeyDesignError as exc:
                        self._corrupt(work, partition, stored, f"a dense mark of no entity: {exc.reason}")
                        continue
                    work.dense_marks += 1
                    dense.append(entity)
                    continue
                work.group_items += 1
                try:
                    if stored.legacy is not None:
                        raise BlockError("b", "an item of one reading (the format before blocks), not a group item")
                    header, readings = decode_group(stored.payload)
                    if header.first_ms < start or header.last_ms >= end:
                        where = "hour of its partition" if end - start == SLICE_MS else "re-pack slice of its sort key"
                        raise BlockError("b", f"its readings do not lie in the {where} ({format_ts(start)})")
                except BlockError as exc:
                    self._corrupt(work, partition, stored, exc.reason)
                    continue
                items.append((header.version, readings))
        return items, dense

    def _dense_copies(
        self, entities: Sequence[str], start: int, end: int, shard_map: ShardMap, work: GroupWork
    ) -> list[tuple[int, Sequence[Reading]]]:
        """The decoded blocks of ``entities`` (dense-marked, with readings in the group items: an entity
        dense in every batch has nothing to compact and costs no read) that may hold readings of
        ``[start, end)``."""
        blocks: list[tuple[int, Sequence[Reading]]] = []
        for entity in entities:
            for part in self._layout.plan_entity(entity, start, end, shard_map).partitions:
                if part.kind != "blocks":
                    continue
                for stored in self._read(part, work):
                    work.blocks_read += 1
                    try:
                        header = header_of(part, stored)
                        if header.last_ms >= start and header.first_ms < end:
                            blocks.append((header.version, decode(part, stored, entity)[1]))
                    except CorruptBlock as exc:
                        self._corrupt(work, part, stored, exc.reason)
        return blocks

    # -- compaction's part of the rollups --------------------------------------------------------

    def _fleet(self, hour: int, deadline: Deadline, report: RunReport, *, redo: bool) -> None:
        """Compaction's parts of the totals of ``hour``: each interval of each level of an hour or less,
        from every group's partial of the hour (read back whole); then each coarser level's interval
        holding the hour, from the next finer level's parts in it (read after those are stored). An hour
        without partials has no parts in a first pass (absent: no readings); a redo puts them, empty or
        not, over the ones they replace."""
        if self._rollups is None or self._levels is None:
            return
        cost = ReadCount()
        partials = self._rollups.partials(hour, cost)
        report.calls += cost.calls
        report.read_units += cost.read_units
        if not partials and not redo:
            return
        cost = ReadCount()
        parts = fleet_parts(partials, self._levels, hour)
        writes = [self._rollups.fleet_part_write(level, s, f) for level, part in parts.items() for s, f in part.items()]
        self._write(writes, deadline, f"compaction's parts of the totals of {format_ts(hour)}")
        written = len(writes)
        for level in self._levels.levels:
            finer = self._levels.finer(level)
            if level <= HOUR_MS or finer is None:
                continue
            start = floor_to(hour, level)
            figures = Figures.combined(self._rollups.fleet_parts_of(finer, start, start + level, cost).values())
            what = f"compaction's part of the total of {format_ts(start)} ({format_duration(level)})"
            self._write([self._rollups.fleet_part_write(level, start, figures)], deadline, what)
            written += 1
        report.fleet_parts += written
        report.calls += cost.calls
        report.read_units += cost.read_units

    def _redos(self, state: CompactionState, now: int, deadline: Deadline, report: RunReport) -> None:
        """Redo the hours the rollup function asked for: a late reading made an entity's hour the rollup
        function's after compaction had counted the entity in its group's partial. Up to REDO_LIMIT
        requests, an hour at a time while time allows; each hour's requests are deleted once its groups
        and its parts of the totals are stored. Requests of an hour not yet compacted are left; those
        of an hour whose group items may be expiring (within an hour of ``KEEP_MS`` after it) cannot be
        done: logged as errors and deleted (the rollup function asks only within ``MAX_AGE``, less)."""
        if self._rollups is None:
            return
        cost = ReadCount()
        try:
            requests = self._rollups.redo_requests(REDO_LIMIT, cost)
            hours: dict[int, list[RedoRequest]] = {}
            expired = [r for r in requests if r.hour_ms + KEEP_MS <= now]
            if expired:
                logger.error(
                    "redo requests of hours whose group items are expiring cannot be done; deleted",
                    extra={"requests": [r.key(self._rollups.prefix)[1] for r in expired]},
                )
                self._rollups.redo_done(expired)
                report.redos_expired += len(expired)
            for request in requests:
                if request.hour_ms + KEEP_MS <= now:
                    continue
                if request.hour_ms < state.through:
                    hours.setdefault(request.hour_ms, []).append(request)
                else:
                    report.redos_waiting += 1
            if report.redos_waiting:
                logger.info(
                    "redo requests of hours not yet compacted are left",
                    extra={"requests": report.redos_waiting, "through": format_ts(state.through)},
                )
            shard_map = self._shard_maps.current()
            for hour, asked in sorted(hours.items()):
                if not self._time_for_a_step(deadline):
                    return
                # The hour's G: the one it was compacted with (its partials say, even once the state has
                # forgotten an earlier G), else the one compaction would use now. The request's group (the
                # rollup function's view of G) and the entity's group under the hour's G are both redone:
                # under a change of G the entity's readings of the hour may lie in either partition.
                partials = self._rollups.partials(hour, cost)
                compacted_with = [p.groups for p in partials]
                tier = WriteTier(max(compacted_with)) if compacted_with else tier_for_hour(self._tier, state, hour)
                # the other G's of the hour: as the partials recorded them (the state may have forgotten)
                others = sorted(
                    {g for p in partials for g in p.others}
                    | {t.groups for t in hour_tiers(self._tier, state, hour, tier)}
                )
                groups: dict[int, set[str]] = {}
                for request in asked:
                    for group in {request.group, tier.group_of(request.entity)} & set(range(tier.groups)):
                        groups.setdefault(group, set()).add(request.entity)
                for group, entities in sorted(groups.items()):
                    if not self._time_for_a_step(deadline):
                        return
                    others_tiers = [WriteTier(g) for g in others]
                    self._redo(hour, tier, group, entities, shard_map, others_tiers, state, deadline, report)
                self._fleet(hour, deadline, report, redo=True)
                self._rollups.redo_done(asked)
                report.redos += len(asked)
        finally:
            report.calls += cost.calls
            report.read_units += cost.read_units

    def _redo(  # noqa: PLR0917 - one caller, the redo loop
        self,
        hour: int,
        tier: WriteTier,
        group: int,
        entities: set[str],
        shard_map: ShardMap,
        others: Sequence[WriteTier],
        state: CompactionState,
        deadline: Deadline,
        report: RunReport,
    ) -> None:
        """Make ``entities``' hour in ``group`` the rollup function's: put their dense marks (the items
        ingest puts), compact the group again (reading them back), and put the cluster blocks holding
        them, now flagged, the group's partial without them, and their re-marks. A stored block of theirs
        not made again (its version or readings changed) is put again with them flagged: a cluster block
        with them added to its ``r`` set, an hour's per-entity compacted block (an hour compacted before
        cluster blocks: ``state.clustered`` says) with ``r`` = 1."""
        what = f"the redo of group {group} of {format_ts(hour)} ({', '.join(sorted(entities))})"
        ttl = tier_ttl(hour, hour + SLICE_MS - 1, self._retention_ms)
        table = self._layout.table_for(hour)
        marks = [DenseMark(table, tier.group_pk(group, hour), dense_mark_sk(e), ttl) for e in sorted(entities)]
        self._write([PendingWrite(m.table, m.pk, m.sk, serialize_item(m.item())) for m in marks], deadline, what)
        work = self._group(hour, tier, group, shard_map, others)
        made = {(b.table, b.pk, b.sk) for b in work.compacted}
        # per stored block not made again: (partition, block, the entities to flag in it)
        stale: dict[tuple[str, str, str], tuple[PartitionQuery, StoredBlock, set[str]]] = {}
        for entity in sorted(entities):
            plan = self._layout.plan_entity(
                entity,
                hour,
                hour + SLICE_MS,
                shard_map,
                write_tier=tier,
                compacted_through_ms=hour + SLICE_MS,
                clustered=state.clustered,
            )
            for part in (p for p in plan.partitions if p.kind in COMPACTED_KINDS):
                for stored in self._read(part, work):
                    key = (part.table, part.pk, stored.sk)
                    if stored.owned_by_rollups(entity) or key in made:
                        continue
                    try:
                        if part.kind == "cluster" and not decode(part, stored, entity)[1]:
                            continue  # another entity's block of the cluster
                    except CorruptBlock as exc:
                        self._corrupt(work, part, stored, exc.reason)
                        continue
                    stale.setdefault(key, (part, stored, set()))[2].add(entity)
        rewrites: list[PendingWrite] = []
        for part, stored, flagged in stale.values():
            try:
                last_ms = header_of(part, stored).last_ms
            except CorruptBlock as exc:
                self._corrupt(work, part, stored, exc.reason)
                continue
            ttl_s = (last_ms + self._retention_ms) // 1000
            item = block_item(part.pk, stored.sk, stored.payload, ttl_s)
            item[ROLLUP_OWNED] = {*stored.rollup_entities, *flagged} if part.kind == "cluster" else 1
            rewrites.append(PendingWrite(part.table, part.pk, stored.sk, serialize_item(item)))
        self._put([work], deadline, report, what, entities=entities, more=rewrites)
        report.calls += work.calls
        report.read_units += work.read_units
        report.corrupt += work.corrupt
        report.compacted_blocks += sum(1 for b in work.compacted if b.entities & entities)

    def _read(self, partition: PartitionQuery, work: GroupWork) -> list[StoredBlock]:
        """Every item of ``partition``, strongly consistent (each page in turn)."""
        request = PageRequest(partition, consistent=True)
        items: list[StoredBlock] = []
        while True:
            page = self._reader.read_page(request)
            work.calls += 1
            work.read_units += page.read_units
            items += page.blocks
            if page.next_key is None:
                return items
            request = replace(request, start_key=page.next_key)

    @staticmethod
    def _corrupt(work: GroupWork, partition: PartitionQuery, stored: StoredBlock, reason: str) -> None:
        """Count and log a corrupt item, which is left where it is."""
        where = f"table {partition.table} {partition.pk} / {stored.sk}"
        work.corrupt.append(f"{where}: {reason}")
        logger.error(
            "corrupt write-tier item left in place",
            extra={"table": partition.table, "pk": partition.pk, "sk": stored.sk, "reason": reason},
        )
