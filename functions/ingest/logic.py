"""The ingest logic: one Kinesis batch in, every reading stored in a block, rejected or handed back.

The whole batch is worked at once, not record by record: a block holds the
readings of one entity, partition and bucket from every record of the batch.

1. decode and validate every record (parsed once at the edge, ``StreamRecord``);
   invalid readings become rejects;
2. pack the valid readings into blocks (``Layout.pack``): the last copy of a
   reading in the batch wins, and each block carries the largest sequence number
   of the records its readings came from as its version. With the write tier
   (``WRITE_TIER_GROUPS``), ``keydesign.tiering.pack_batch`` packs the readings
   of sparse entities whose re-pack slice (5 minutes) had not ended a grace
   (a minute) before the batch started into *group items* instead (per group and slice, many entities
   each), and the rest into blocks as before;
3. record the occupancy of the blocks' partitions, mark the intervals of the
   blocks' readings for the rollup function (not the group items': compaction
   owns those, docs/rollups.md) and put the dense marks the blocks need (write tier)
   and, with a container's first group items, the write tier's start item
   (compaction's first run starts at the earliest), then write the blocks and
   group items, 25 to a call, several calls in flight, while the rejects are
   sent to SQS;
4. ask the rotator for the table of a period that has none (a reading up to
   ``MAX_AGE`` old from before the deployment, or a backfill): its readings are
   handed back, and the redelivery finds the table;
5. attribute every item's outcome back to the readings it stands for, and so to
   their Kinesis records.

The result, :class:`BatchOutcome`, knows for each record whether all of its
readings are now safely somewhere (the table or the rejects queue). Its
:meth:`BatchOutcome.settle` is the record handler Powertools' batch processor
calls: it raises :class:`RecordNotIngested` for exactly the records that must
be redelivered, so the partial-batch response is Powertools' own.

Every reading is counted once in exactly one of ``written``, ``rejected`` and
``retry`` (its record is reported for redelivery): the conservation the
tests check on every batch.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord

from adapters.batch_writer import (
    BatchWriteApi,
    BatchWriter,
    PendingWrite,
    WriteReport,
    send_prebuilt_json,
    serialize_item,
)
from adapters.clients import client
from adapters.observability import logger, metrics
from adapters.occupancy import OccupancyRecorder, OccupancyStore
from adapters.retry import Clock, Deadline, Sleep
from adapters.rollup_store import MarkRecorder, RollupStore
from adapters.shard_map_source import ShardMapSource
from adapters.shard_map_store import ShardMapStore, shard_map_source
from adapters.start_items import StartRecorder, write_tier_starts
from adapters.table_builds import TableBuilds
from ingest.decoding import DEFAULT_FORMATS, Candidate, DecodedRecord, decode_record
from ingest.dense_marks import DenseMarkRecorder
from ingest.formats import Formats
from ingest.kinesis_records import StreamRecord
from ingest.rejects import Reject, RejectsPublisher, RejectsReport, SendMessageBatchApi
from ingest.settings import IngestSettings
from keydesign import Block, InvalidInput, Layout, Reading, ShardMap
from keydesign.occupancy import OccupancyRecord, day_of
from keydesign.tiering import BatchPacking, pack_batch
from keydesign.writetier import START_EVERY_MS, GroupItem, WriteTier, tier_stamp

#: What one batch writes: blocks and write-tier group items.
Item = Block | GroupItem

#: How BatchWriter reports a block whose table does not exist (the error code starts its reason).
MISSING_TABLE = "ResourceNotFoundException"


class RecordNotIngested(Exception):  # noqa: N818 - reads as the outcome it reports
    """A Kinesis record some of whose readings are not yet stored or rejected: redeliver it."""


@dataclass(slots=True)
class RecordOutcome:
    """What became of one Kinesis record's readings."""

    sequence_number: str
    readings: int = 0
    written: int = 0
    rejected: int = 0
    retry: int = 0
    reason: str | None = None

    @property
    def failed(self) -> bool:
        return self.retry > 0

    def hand_back(self, count: int, reason: str) -> None:
        self.retry += count
        if self.reason is None:
            self.reason = reason


@dataclass(slots=True)
class BatchOutcome:
    """The outcome of one batch; :meth:`settle` is the Powertools record handler.

    ``blocks`` and ``group_items`` count what was packed; ``write`` reports their writes by index
    (the blocks first, then the group items), and ``write_units`` and ``readings_stored`` add up the
    written ones (each reading once, however many copies of it the batch held);
    ``group_items_written`` and ``readings_in_write_tier`` the written group items.
    """

    records: list[RecordOutcome]
    duplicates: int = 0
    blocks: int = 0
    group_items: int = 0
    group_items_written: int = 0
    readings_in_write_tier: int = 0
    dense_marks: WriteReport = field(default_factory=WriteReport)
    write: WriteReport = field(default_factory=WriteReport)
    write_units: int = 0
    readings_stored: int = 0
    rejects: RejectsReport = field(default_factory=RejectsReport)
    reject_fields: Counter[str] = field(default_factory=Counter)
    aggregated_members: int = 0
    occupancy: WriteReport = field(default_factory=WriteReport)
    unexpected: int = 0
    max_arrival_lag_ms: int | None = None
    _by_sequence: dict[str, RecordOutcome] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._by_sequence = {r.sequence_number: r for r in self.records}

    @property
    def readings(self) -> int:
        return sum(r.readings for r in self.records)

    @property
    def written(self) -> int:
        return sum(r.written for r in self.records)

    @property
    def rejected(self) -> int:
        return sum(r.rejected for r in self.records)

    @property
    def retry(self) -> int:
        return sum(r.retry for r in self.records)

    @property
    def failed_records(self) -> list[RecordOutcome]:
        return [r for r in self.records if r.failed]

    def settle(self, record: KinesisStreamRecord) -> str:
        """Record handler for Powertools' BatchProcessor: raise for a record to redeliver."""
        sequence_number = record.kinesis.sequence_number
        outcome = self._by_sequence.get(sequence_number)
        if outcome is None:  # not seen by ingest(): never report success for it
            raise RecordNotIngested(f"record {sequence_number} was not part of the ingested batch")
        if outcome.failed:
            reason = outcome.reason or "not stored"
            raise RecordNotIngested(f"record {sequence_number}: {outcome.retry} reading(s) not yet stored ({reason})")
        return sequence_number


@dataclass(slots=True)
class _Batch:
    """A batch decoded and validated: the entries to pack (reading, version), the candidate each
    came from (same index), and the rejects so far with the record each belongs to."""

    decoded: list[DecodedRecord] = field(default_factory=list)
    entries: list[tuple[Reading, int]] = field(default_factory=list)
    origins: list[Candidate] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    reject_record: list[int] = field(default_factory=list)

    def reject_of(self, origin: Candidate, field_name: str, reason: str) -> Reject:
        """A reject of the reading ``origin`` holds, not yet counted among the rejects."""
        return self.decoded[origin.record].reject_of(
            origin.payload(), field_name, reason, origin.sub_sequence_number, origin.index
        )


@dataclass(kw_only=True, eq=False)
class Ingestor:
    """Ingests Kinesis batches. Thread-safe writers inside; one instance per container."""

    layout: Layout
    shard_maps: ShardMapSource
    writer: BatchWriter
    rejects: RejectsPublisher
    retention_ms: int
    max_future_ms: int | None
    max_age_ms: int | None
    prebuild_periods: int = 2
    deadline_margin_ms: int = 2_000
    clock: Clock = time.monotonic
    wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)
    rng: random.Random = field(default_factory=random.Random)
    occupancy: OccupancyRecorder | None = None
    rollup_marks: MarkRecorder | None = None
    table_builds: TableBuilds | None = None
    formats: Formats = DEFAULT_FORMATS
    write_tier: WriteTier | None = None
    dense_marks: DenseMarkRecorder | None = None
    #: The write tier's start items (``adapters.start_items``): put before a container's first group items.
    tier_start: StartRecorder | None = None

    def __post_init__(self) -> None:
        if self.write_tier is not None and self.dense_marks is None:
            self.dense_marks = DenseMarkRecorder(self.writer)

    @property
    def writable_ms(self) -> int:
        """A period's table takes readings while one of them may still be admitted: MAX_AGE after its end."""
        return self.retention_ms if self.max_age_ms is None else self.max_age_ms

    @classmethod
    def from_settings(
        cls,
        settings: IngestSettings,
        *,
        dynamodb: BatchWriteApi | None = None,
        sqs: SendMessageBatchApi | None = None,
        control: Any = None,
        lambda_client: Any = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> Ingestor:
        """Wire the adapters: the real DynamoDB and SQS clients unless others are given
        (a fake, or a fault injector around the real one), and the shard-map source. ``control``
        is the control table's client (shard map, occupancy marker, rollups), ``lambda_client`` the one that asks
        the rotator for missing tables (with ROTATOR_FUNCTION and per-period tables): real ones unless given."""
        # One attempt per botocore call: the writer does the retrying, so every
        # wait is jittered, counted, and bounded by the invocation's deadline. Its
        # requests come from serialize_item: botocore's validation walk is skipped.
        if dynamodb is None:
            dynamodb = client("dynamodb", max_attempts=1, validate=False)
            send_prebuilt_json(dynamodb)
        writer = BatchWriter(dynamodb, clock=clock, sleep=sleep)
        rejects = RejectsPublisher(sqs if sqs is not None else client("sqs"), settings.rejects_queue_url, sleep=sleep)
        occupancy = rollup_marks = tier_start = None
        if settings.control_table is not None:
            control = control if control is not None else client("dynamodb")
            # Records go through the writer (and any fault injector around it); only the
            # one-off marker uses the store's own client, with standard retries.
            store = OccupancyStore(control, settings.control_table, settings.layout.table_prefix)
            occupancy = OccupancyRecorder(store, max_future_ms=settings.max_future_ms)
            if settings.granularities is not None:
                rollups = RollupStore(
                    control, writer, settings.control_table, settings.layout.table_prefix, settings.retention_ms
                )
                rollup_marks = MarkRecorder(rollups, settings.granularities.finest)
            if settings.write_tier is not None:
                starts = write_tier_starts(settings.control_table, settings.layout.table_prefix)
                tier_start = StartRecorder(starts, START_EVERY_MS)
        table_builds = None
        if settings.rotator_function is not None and settings.table_period is not None:
            api = lambda_client if lambda_client is not None else client("lambda")
            table_builds = TableBuilds(api, settings.rotator_function, clock=clock)
        return cls(
            layout=settings.layout,
            shard_maps=shard_map_source(
                settings, bootstrap=True, store=ShardMapStore.from_settings(settings, control) if control else None
            ),
            occupancy=occupancy,
            rollup_marks=rollup_marks,
            writer=writer,
            rejects=rejects,
            retention_ms=settings.retention_ms,
            max_future_ms=settings.max_future_ms,
            max_age_ms=settings.max_age_ms,
            prebuild_periods=settings.prebuild_periods,
            clock=clock,
            wall_clock_ms=wall_clock_ms,
            table_builds=table_builds,
            formats=settings.formats,
            write_tier=settings.write_tier,
            tier_start=tier_start,
        )

    def close(self) -> None:
        self.writer.close()
        self.rejects.close()

    # -- the batch ---------------------------------------------------------------

    def ingest(self, records: Sequence[StreamRecord], remaining_ms: int) -> BatchOutcome:
        """Ingest one batch of Kinesis records within ``remaining_ms``."""
        deadline = Deadline.after_ms(remaining_ms - self.deadline_margin_ms, self.clock)
        now_ms = self.wall_clock_ms()
        outcome = BatchOutcome([RecordOutcome(r.sequence_number) for r in records])
        if records:
            logger.append_keys(
                shard_id=records[0].shard_id,
                first_sequence=records[0].sequence_number,
                last_sequence=records[-1].sequence_number,
                batch_records=len(records),
            )
        shard_map = self.shard_maps.current()
        # A map on another bucket grid is the deployment's fault, not the readings': the
        # invocation fails (and is retried) rather than rejecting every reading of the batch.
        self.layout.check_shard_map(shard_map)

        batch = self._validate(records, outcome, now_ms)
        # The batch starts at now_ms: a reading whose re-pack slice had ended by then is late (its own block).
        packing = self._pack(batch, shard_map, outcome, now_ms)
        blocks = packing.blocks
        items: list[Item] = [*blocks, *packing.group_items]
        outcome.blocks, outcome.group_items = len(blocks), len(packing.group_items)
        outcome.duplicates = len(batch.entries) - sum(len(i.readings) for i in items)
        # A partition's occupancy is recorded before its blocks are written, so a
        # reader never finds readings in a partition it was told is empty. (Group items
        # need none: readers query a group's partition whatever occupancy says.)
        blocked = self._record_occupancy(blocks, deadline, now_ms, outcome)
        blocked.update(self._mark_rollups(blocks, blocked, now_ms, deadline))
        blocked.update(self._mark_dense(packing, blocked, deadline, outcome))
        blocked.update(self._start_write_tier(len(blocks), len(packing.group_items), now_ms, deadline))
        order = [i for i in range(len(items)) if i not in blocked]
        chunks = self.writer.submit([_pending(items[i]) for i in order], deadline)
        outcome.rejects = self.rejects.publish(batch.rejects, deadline)  # while the blocks are written
        write = outcome.write = WriteReport(unwritten=blocked)
        for chunk in chunks:
            write.merge(chunk.result(), order)
        self._ask_for_tables(items, write)

        for index, record in enumerate(batch.reject_record):
            self._settle_reject(outcome, record, batch.rejects[index], index, outcome.rejects)
        late_rejects: list[Reject] = []
        late_record: list[int] = []
        for index, item in enumerate(items):
            origins = [batch.origins[e] for e in item.origins]
            if index in write.written:
                outcome.write_units += item.write_units
                outcome.readings_stored += len(item.readings)
                if index >= len(blocks):
                    outcome.group_items_written += 1
                    outcome.readings_in_write_tier += len(item.readings)
                for origin in origins:
                    outcome.records[origin.record].written += 1
            elif index in write.unwritten:
                for origin in origins:
                    outcome.records[origin.record].hand_back(1, write.unwritten[index])
            else:  # DynamoDB refused the item itself: every reading that made it is a reject
                reason = write.rejected[index]
                for origin in origins:
                    late_rejects.append(batch.reject_of(origin, "item", reason))
                    late_record.append(origin.record)
        if late_rejects:
            late = self.rejects.publish(late_rejects, deadline)
            for index, record in enumerate(late_record):
                self._settle_reject(outcome, record, late_rejects[index], index, late)
            outcome.rejects.calls += late.calls  # not merge(): its indexes are the late rejects'
            outcome.rejects.retried += late.retried
            outcome.rejects.truncated += late.truncated
        _emit(outcome)
        return outcome

    def _validate(self, records: Sequence[StreamRecord], outcome: BatchOutcome, now_ms: int) -> _Batch:
        """Decode and validate every record: the readings to pack, and the rejects."""
        batch = _Batch()
        for position, record in enumerate(records):
            decoded = decode_record(position, record, self.formats)
            batch.decoded.append(decoded)
            # Counted before validation: a candidate that fails it becomes a reject, not a second unit.
            outcome.records[position].readings = decoded.units
            outcome.aggregated_members += decoded.kpl_members
            for candidate in decoded.candidates:
                reading = self._reading(candidate, decoded, now_ms, outcome)
                if reading is not None:
                    batch.entries.append((reading, record.version))
                    batch.origins.append(candidate)
            decoded.fold_rejects(self.rejects.payload_limit)
            batch.rejects.extend(decoded.rejects)
            batch.reject_record.extend([position] * len(decoded.rejects))
        arrivals = [r.arrival_ms for r in records if r.arrival_ms is not None]
        if arrivals:  # the earliest arrival's lag is the batch's largest
            outcome.max_arrival_lag_ms = max(0, now_ms - min(arrivals))
        return batch

    def _reading(
        self, candidate: Candidate, decoded: DecodedRecord, now_ms: int, outcome: BatchOutcome
    ) -> Reading | None:
        """The reading a candidate holds, or None once it is rejected with the reason."""
        try:
            reading = Reading.parse(
                candidate.value, now_ms=now_ms, max_future_ms=self.max_future_ms, max_age_ms=self.max_age_ms
            )
            if self.layout.table_period is not None:
                # A table takes writes until MAX_AGE after its period ends (the rotator keeps it
                # writable that long, and builds a missing one on request); nothing is written
                # past the periods built ahead. Anything else is rejected with its reason.
                self.layout.table_period.check_admits(
                    reading.ts_ms, now_ms=now_ms, grace_ms=self.writable_ms, prebuilt=self.prebuild_periods
                )
        except InvalidInput as exc:
            decoded.reject_candidate(candidate, exc.field, exc.reason)
            return None
        except Exception as exc:
            decoded.reject_candidate(candidate, "reading", _unexpected(exc, outcome))
            return None
        return reading

    def _pack(self, batch: _Batch, shard_map: ShardMap, outcome: BatchOutcome, now_ms: int) -> BatchPacking:
        """The batch's blocks and group items. Should packing raise (a bug: validated readings always
        pack), each reading is packed alone to find the ones that make it raise; they are rejected, as a
        reading that raises while being validated is, and the rest are packed again."""

        def pack(entries: Sequence[tuple[Reading, int]]) -> BatchPacking:
            if self.write_tier is None:
                blocks = self.layout.pack(entries, shard_map, retention_ms=self.retention_ms, rng=self.rng)
                return BatchPacking(blocks, [], {})
            return pack_batch(
                entries,
                self.write_tier,
                self.layout,
                shard_map,
                batch_start_ms=now_ms,
                retention_ms=self.retention_ms,
                rng=self.rng,
            )

        try:
            return pack(batch.entries)
        except Exception:
            logger.exception("packing the batch raised; looking for the readings that make it raise")
        keep: list[int] = []
        for index, entry in enumerate(batch.entries):
            try:
                pack([entry])
            except Exception as exc:
                # One message each (not folded: the record's folds are made already). A bug, so rare.
                origin = batch.origins[index]
                batch.rejects.append(batch.reject_of(origin, "reading", _unexpected(exc, outcome)))
                batch.reject_record.append(origin.record)
            else:
                keep.append(index)
        batch.entries = [batch.entries[i] for i in keep]
        batch.origins = [batch.origins[i] for i in keep]
        return pack(batch.entries)

    def _record_occupancy(
        self, blocks: Sequence[Block], deadline: Deadline, now_ms: int, outcome: BatchOutcome
    ) -> dict[int, str]:
        """Write the occupancy records this container has not written yet; the
        blocks (by index) whose record could not be written, with the reason."""
        recorder = self.occupancy
        if recorder is None or not blocks:
            return {}
        recorder.ensure_marked(now_ms)
        records = occupancy_groups(self.layout, blocks)
        missing = recorder.unrecorded(records)
        if not missing:
            return {}
        store = recorder.store
        report = self.writer.write([store.pending_write(r, self.retention_ms) for r in missing], deadline)
        outcome.occupancy = report
        recorder.remember([missing[i] for i in sorted(report.written)])
        blocked: dict[int, str] = {}
        for position, record in enumerate(missing):
            if position in report.written:
                continue
            why = report.unwritten.get(position) or report.rejected.get(position) or "unknown"
            for index in records[record]:
                blocked[index] = f"occupancy not recorded: {why}"
        return blocked

    def _ask_for_tables(self, items: Sequence[Item], write: WriteReport) -> None:
        """Items whose table does not exist (or whose dense mark's, the same table) are handed back like
        any unwritten item; the rotator is asked to build their tables, so that the redelivery finds them
        (adapters.table_builds)."""
        if self.table_builds is None:
            return
        missing = {i: items[i].key.table for i, why in write.unwritten.items() if why.startswith(MISSING_TABLE)}
        if not missing:
            return
        asked = set(self.table_builds.request(missing.values()))
        if asked:
            metrics.add_metric(name="TableBuildsRequested", unit=MetricUnit.Count, value=len(asked))
            logger.info("asked the rotator to build missing tables", extra={"tables": sorted(asked)})
        for index, table in missing.items():
            write.unwritten[index] = f"table {table} does not exist yet; the rotator is asked to build it"

    def _mark_rollups(
        self, blocks: Sequence[Block], blocked: Mapping[int, str], now_ms: int, deadline: Deadline
    ) -> dict[int, str]:
        """Mark the intervals of the blocks about to be written for the rollup function, stamped with the
        batch's start (see rollup.logic), *before* the blocks: a block is stored only once its marks are, so
        an invocation stopped or slowed past its deadline between the two never leaves readings stored that
        no mark stands for. Returns the blocks (by index, the first of the batch's items) whose marks are not
        all written: they are not written either, and are handed back. A block whose write then fails leaves
        its marks behind, which costs the rollup function a recompute of an unchanged interval, never
        correctness. Group items get no marks: an entity-hour whose readings are all in group items is
        compaction's (its compacted block is its figures; docs/rollups.md), and one with blocks too (a dense
        mark) is re-marked by compaction; only the readings written as blocks (dense entities, late
        readings) are the rollup function's to recompute now."""
        if self.rollup_marks is None:
            return {}
        wanted = [(i, r.entity_id, r.ts_ms) for i, b in enumerate(blocks) if i not in blocked for r in b.readings]
        return {
            index: f"rollup mark not written: {why}"
            for index, why in self.rollup_marks.write(wanted, now_ms, deadline).items()
        }

    def _mark_dense(
        self, packing: BatchPacking, blocked: Mapping[int, str], deadline: Deadline, outcome: BatchOutcome
    ) -> dict[int, str]:
        """Put the dense marks of the blocks about to be written, before them (a block whose mark is not
        stored is not written, and is handed back): compaction reads a dense entity's blocks of an hour
        only if its mark is there. Returns those blocks (by index) with the reason."""
        if self.dense_marks is None or not packing.dense_marks:
            return {}
        wanted = {mark: [i for i in indexes if i not in blocked] for mark, indexes in packing.dense_marks.items()}
        result = self.dense_marks.write({m: i for m, i in wanted.items() if i}, deadline)
        outcome.dense_marks = result.report
        # A missing table keeps its error code first, so that the rotator is asked to build it.
        return {
            index: why if why.startswith(MISSING_TABLE) else f"dense mark not written: {why}"
            for index, why in result.blocked.items()
        }

    def _start_write_tier(self, first: int, count: int, now_ms: int, deadline: Deadline) -> dict[int, str]:
        """Put the write tier's start item this container owes (its first, or a day past its last), stamped
        with the hour of the batch's start less the slice rule's grace (``keydesign.writetier.tier_stamp``),
        *before* the group items: compaction's first run starts at the earliest start item
        (``compaction.logic``), and no group item of the batch lies in an earlier hour (a reading goes to the
        write tier only if its slice of its hour had not ended a grace before the batch started). Returns
        the group items (``count`` of them from index ``first``) when it could not be stored: they are not
        written, and are handed back with the reason."""
        stamp = tier_stamp(now_ms)
        if self.tier_start is None or not count or (start := self.tier_start.due(stamp)) is None:
            return {}
        report = self.writer.write([start], deadline)
        if 0 in report.written:
            self.tier_start.written(stamp)
            return {}
        why = f"write-tier start not written: {report.unwritten.get(0) or report.rejected.get(0) or 'unknown'}"
        return dict.fromkeys(range(first, first + count), why)

    def _settle_reject(
        self, outcome: BatchOutcome, record: int, reject: Reject, index: int, report: RejectsReport
    ) -> None:
        if index in report.sent:
            outcome.records[record].rejected += reject.readings
            outcome.reject_fields[reject.field] += reject.readings
        else:
            outcome.records[record].hand_back(
                reject.readings, f"reject not queued: {report.unsent.get(index, 'unknown')}"
            )


def _unexpected(exc: Exception, outcome: BatchOutcome) -> str:
    """Log a reading's unexpected exception and count it; the reason its reject gives.

    Nothing that raises here calls AWS: whatever raised, the reading's content made it raise.
    Handing its record back would fail the same way on every delivery until the mapping gave up
    on the whole batch; rejecting it keeps the reading (payload and all) and its neighbours."""
    logger.error("a reading raised while being validated or packed; it is rejected, not retried", exc_info=exc)
    outcome.unexpected += 1
    return f"could not be processed ({type(exc).__name__}); please report this with the payload"


def _pending(item: Item) -> PendingWrite:
    key = item.key
    return PendingWrite(key.table, key.pk, key.sk, serialize_item(item.item()))


def occupancy_groups(layout: Layout, blocks: Sequence[Block]) -> dict[OccupancyRecord, list[int]]:
    """The occupancy record of every (table, partition key, UTC day) the ``blocks`` are in, with the
    indexes of the blocks it stands for. A block lies in one bucket, and buckets divide a UTC day:
    all its readings are in the day of its first one."""
    # Grouped on a plain tuple first: most blocks of a batch share a few partitions.
    groups: dict[tuple[str, str, int], list[int]] = {}
    for index, block in enumerate(blocks):
        groups.setdefault((block.key.table, block.key.pk, day_of(block.first_ms)), []).append(index)
    prefix, bucket = layout.table_prefix, layout.bucket
    return {
        OccupancyRecord.of(prefix, bucket, table, pk, blocks[members[0]].first_ms): members
        for (table, pk, _), members in groups.items()
    }


def _emit(outcome: BatchOutcome) -> None:
    """Metrics (EMF, flushed by the handler's ``log_metrics``) and one summary log line."""
    count = MetricUnit.Count
    # Each total is a pass over the records: taken once.
    readings, written, rejected, retry = outcome.readings, outcome.written, outcome.rejected, outcome.retry
    failed = outcome.failed_records
    metrics.add_metric(name="RecordsReceived", unit=count, value=len(outcome.records))
    metrics.add_metric(name="ReadingsReceived", unit=count, value=readings)
    metrics.add_metric(name="ReadingsWritten", unit=count, value=written)
    metrics.add_metric(name="ReadingsRejected", unit=count, value=rejected)
    metrics.add_metric(name="ReadingsHandedBack", unit=count, value=retry)
    metrics.add_metric(name="RecordsFailed", unit=count, value=len(failed))
    metrics.add_metric(name="DuplicatesCollapsed", unit=count, value=outcome.duplicates)
    blocks_written = len(outcome.write.written) - outcome.group_items_written
    metrics.add_metric(name="BlocksWritten", unit=count, value=blocks_written)
    metrics.add_metric(name="WriteUnitsBilled", unit=count, value=outcome.write_units)
    if blocks_written:
        in_blocks = outcome.readings_stored - outcome.readings_in_write_tier
        metrics.add_metric(name="ReadingsPerBlock", unit=count, value=in_blocks / blocks_written)
    if outcome.group_items:  # the write tier is on, and the batch had readings for it
        metrics.add_metric(name="GroupItemsWritten", unit=count, value=outcome.group_items_written)
        metrics.add_metric(name="ReadingsInWriteTier", unit=count, value=outcome.readings_in_write_tier)
    if outcome.dense_marks.calls:
        metrics.add_metric(name="DenseMarksWritten", unit=count, value=len(outcome.dense_marks.written))
    metrics.add_metric(name="BatchWriteCalls", unit=count, value=outcome.write.calls)
    metrics.add_metric(name="ItemsRetried", unit=count, value=outcome.write.items_retried)
    metrics.add_metric(name="ThrottledCalls", unit=count, value=outcome.write.throttled_calls)
    metrics.add_metric(name="WriteCapacityConsumed", unit=count, value=outcome.write.consumed_wcu)
    metrics.add_metric(name="RejectCalls", unit=count, value=outcome.rejects.calls)
    metrics.add_metric(name="RejectsTruncated", unit=count, value=outcome.rejects.truncated)
    metrics.add_metric(name="KplMembers", unit=count, value=outcome.aggregated_members)
    metrics.add_metric(name="OccupancyRecordsWritten", unit=count, value=len(outcome.occupancy.written))
    if outcome.unexpected:
        metrics.add_metric(name="ReadingsRejectedUnexpectedly", unit=count, value=outcome.unexpected)
    if outcome.write.latencies_ms:
        latencies = sorted(outcome.write.latencies_ms)
        metrics.add_metric(name="WriteLatency", unit=MetricUnit.Milliseconds, value=latencies[len(latencies) // 2])
        metrics.add_metric(name="WriteLatencyMax", unit=MetricUnit.Milliseconds, value=latencies[-1])
    if outcome.max_arrival_lag_ms is not None:
        metrics.add_metric(name="ArrivalLag", unit=MetricUnit.Milliseconds, value=outcome.max_arrival_lag_ms)

    summary = {
        "records": len(outcome.records),
        "readings": readings,
        "written": written,
        "rejected": rejected,
        "handed_back": retry,
        "duplicates_collapsed": outcome.duplicates,
        "blocks": outcome.blocks,
        "blocks_written": blocks_written,
        "group_items": outcome.group_items,
        "group_items_written": outcome.group_items_written,
        "dense_marks_written": len(outcome.dense_marks.written),
        "write_units_billed": outcome.write_units,
        "batch_write_calls": outcome.write.calls,
        "items_retried": outcome.write.items_retried,
    }
    if rejected:
        logger.warning(
            "readings rejected to the rejects queue",
            extra={"reject_fields": dict(outcome.reject_fields.most_common(10))},
        )
    if failed:
        logger.warning(
            "records handed back for redelivery",
            extra={
                "failed_records": len(failed),
                "first_failed_sequence": failed[0].sequence_number,
                "first_reason": failed[0].reason,
            },
        )
    logger.info("batch ingested", extra=summary)
