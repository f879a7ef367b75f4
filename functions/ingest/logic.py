"""The ingest logic: one Kinesis batch in, every reading written, rejected or handed back.

The whole batch is worked at once, not record by record, because the unit of
a DynamoDB write (25 items) is not the unit of a Kinesis record (one reading
or hundreds):

1. decode and validate every record; invalid readings become rejects;
2. key every valid reading, collapse duplicate keys (last one wins: the same
   reading twice, or a producer's update of it), size-check the items;
3. write all items in chunks of 25 across records, several chunks in flight,
   while the rejects are sent to SQS;
4. attribute every outcome back to the Kinesis record it came from.

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
    MAX_BATCH_ITEMS,
    BatchWriteApi,
    BatchWriter,
    PendingWrite,
    UnstorableValue,
    WriteHandle,
    WriteReport,
    send_prebuilt_json,
    serialize_item,
)
from adapters.clients import client
from adapters.kinesis_records import sequence_number_of, shard_id_of
from adapters.observability import logger, metrics, tracer
from adapters.occupancy import OccupancyRecorder, OccupancyStore
from adapters.rejects import Reject, RejectsPublisher, RejectsReport, SendMessageBatchApi
from adapters.retry import Backoff, Clock, Deadline, Sleep
from adapters.rollup_store import MarkRecorder, RollupStore
from adapters.shard_map_source import ShardMapSource
from adapters.shard_map_store import ShardMapStore, shard_map_source
from ingest.decoding import Candidate, DecodedRecord, decode_record
from ingest.settings import IngestSettings
from keydesign import InvalidInput, Layout, Reading, ShardMap, build_item, ttl_for
from keydesign.occupancy import OccupancyRecord, day_of


class RecordNotIngested(Exception):  # noqa: N818 - reads as the outcome it reports
    """A Kinesis record some of whose readings are not yet stored or rejected: redeliver it."""

    def __init__(self, sequence_number: str, pending: int, reason: str) -> None:
        self.sequence_number = sequence_number
        self.pending = pending
        self.reason = reason
        super().__init__(f"record {sequence_number}: {pending} reading(s) not yet stored ({reason})")


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
    """The outcome of one batch; :meth:`settle` is the Powertools record handler."""

    records: list[RecordOutcome]
    shard_id: str = "unknown"
    duplicates: int = 0
    items: int = 0
    write: WriteReport = field(default_factory=WriteReport)
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
            raise RecordNotIngested(sequence_number, 1, "the record was not part of the ingested batch")
        if outcome.failed:
            raise RecordNotIngested(sequence_number, outcome.retry, outcome.reason or "not stored")
        return sequence_number


@dataclass(slots=True)
class _Write:
    """A distinct item, and every candidate that collapsed into it (the last one wins)."""

    pending: PendingWrite
    origins: list[Candidate]
    ts_ms: int
    entity: str


@dataclass(slots=True)
class _Flight:
    """A batch's distinct writes, sent a segment at a time while the rest is still being keyed.

    A key seen again after its write was sent is held in ``again`` (the last one wins there too)
    and written once every write sent before it is done: an earlier value in flight never lands
    after a later one.
    """

    distinct: list[_Write] = field(default_factory=list)
    index: dict[tuple[str, str, str], int] = field(default_factory=dict)
    again: dict[tuple[str, str, str], _Write] = field(default_factory=dict)
    sent: int = 0
    sends: list[tuple[list[int], WriteHandle]] = field(default_factory=list)
    report: WriteReport = field(default_factory=WriteReport)

    def add(self, identity: tuple[str, str, str], write: _Write) -> bool:
        """Take one reading's write; True when its key was already in the batch."""
        at = self.index.get(identity)
        if at is None:
            self.index[identity] = len(self.distinct)
            self.distinct.append(write)
            return False
        existing = self.distinct[at] if at >= self.sent else self.again.get(identity)
        if existing is None:
            self.again[identity] = write
        else:
            existing.pending = write.pending  # the last one wins
            existing.origins.extend(write.origins)
        return True


class Ingestor:
    """Ingests Kinesis batches. Thread-safe writers inside; one instance per container."""

    def __init__(
        self,
        *,
        layout: Layout,
        shard_maps: ShardMapSource,
        writer: BatchWriter,
        rejects: RejectsPublisher,
        retention_ms: int,
        max_future_ms: int | None,
        max_age_ms: int | None,
        grace_ms: int = 7_200_000,
        prebuild_periods: int = 2,
        deadline_margin_ms: int = 2_000,
        clock: Clock = time.monotonic,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        rng: random.Random | None = None,
        occupancy: OccupancyRecorder | None = None,
        rollup_marks: MarkRecorder | None = None,
        segment_items: int | None = None,
    ) -> None:
        self._layout = layout
        # Writes start once this many distinct items are keyed: enough for every writer thread.
        self._segment = segment_items or MAX_BATCH_ITEMS * writer.concurrency
        self._occupancy = occupancy
        self._rollup_marks = rollup_marks
        self._shard_maps = shard_maps
        self._writer = writer
        self._rejects = rejects
        self._retention_ms = retention_ms
        self._max_future_ms = max_future_ms
        self._max_age_ms = max_age_ms
        self._grace_ms = grace_ms
        self._prebuild_periods = prebuild_periods
        self._margin_ms = deadline_margin_ms
        self._clock = clock
        self._wall_clock_ms = wall_clock_ms
        self._rng = rng or random.Random()

    @classmethod
    def from_settings(
        cls,
        settings: IngestSettings,
        *,
        dynamodb: BatchWriteApi | None = None,
        sqs: SendMessageBatchApi | None = None,
        control: Any = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> Ingestor:
        """Wire the adapters: the real DynamoDB and SQS clients unless others are given
        (a fake, or a fault injector around the real one), and the shard-map source. ``control``
        is the control table's client (shard map, occupancy marker, rollups): a real one unless given."""
        common = settings.common
        backoff = Backoff(settings.retry_base_ms, settings.retry_max_delay_ms)
        # One attempt per botocore call: the writer does the retrying, so every
        # wait is jittered, counted, and bounded by the invocation's deadline. Its
        # requests come from serialize_item: botocore's validation walk is skipped.
        if dynamodb is None:
            dynamodb = client("dynamodb", max_attempts=1, validate=False)
            send_prebuilt_json(dynamodb)
        writer = BatchWriter(
            dynamodb,
            concurrency=settings.write_concurrency,
            backoff=backoff,
            clock=clock,
            sleep=sleep,
        )
        rejects = RejectsPublisher(
            sqs if sqs is not None else client("sqs"),
            settings.rejects_queue_url,
            payload_limit=settings.reject_payload_bytes,
            concurrency=settings.reject_concurrency,
            sleep=sleep,
        )
        occupancy = None
        if common.control_table is not None and control is None:
            control = client("dynamodb")
        if common.control_table is not None:
            # Records go through the writer (and any fault injector around it); only the
            # one-off marker uses the store's own client, with standard retries.
            store = OccupancyStore(control, common.control_table, common.layout.table_prefix)
            occupancy = OccupancyRecorder(store, max_future_ms=settings.max_future_ms)
        rollup_marks = None
        if common.control_table is not None and common.granularities is not None:
            rollups = RollupStore(
                control, writer, common.control_table, common.layout.table_prefix, common.retention_ms
            )
            rollup_marks = MarkRecorder(rollups, common.granularities.finest)
        return cls(
            layout=common.layout,
            shard_maps=shard_map_source(
                common, bootstrap=True, store=ShardMapStore.from_settings(common, control) if control else None
            ),
            occupancy=occupancy,
            rollup_marks=rollup_marks,
            writer=writer,
            rejects=rejects,
            retention_ms=common.retention_ms,
            max_future_ms=settings.max_future_ms,
            max_age_ms=settings.max_age_ms,
            grace_ms=common.grace_ms,
            prebuild_periods=common.prebuild_periods,
            deadline_margin_ms=settings.deadline_margin_ms,
            clock=clock,
            wall_clock_ms=wall_clock_ms,
        )

    def close(self) -> None:
        self._writer.close()
        self._rejects.close()

    # -- the batch ---------------------------------------------------------------

    @tracer.capture_method(capture_response=False)
    def ingest(self, records: Sequence[Mapping[str, Any]], remaining_ms: int) -> BatchOutcome:
        """Ingest one batch of Lambda Kinesis event records within ``remaining_ms``."""
        deadline = Deadline.after_ms(remaining_ms - self._margin_ms, self._clock)
        now_ms = self._wall_clock_ms()
        outcome = BatchOutcome([RecordOutcome(sequence_number_of(raw)) for raw in records])
        if records:
            outcome.shard_id = shard_id_of(records[0])
            logger.append_keys(
                shard_id=outcome.shard_id,
                first_sequence=outcome.records[0].sequence_number,
                last_sequence=outcome.records[-1].sequence_number,
                batch_records=len(records),
            )
        shard_map = self._shard_maps.current()

        flight = _Flight()
        rejects, reject_record = self._decode(records, outcome, shard_map, now_ms, flight=flight, deadline=deadline)
        self._send(flight, deadline, now_ms, outcome)
        outcome.rejects = self._rejects.publish(rejects, deadline)
        outcome.write = self._wait(flight, deadline, now_ms, outcome)
        distinct = flight.distinct
        outcome.items = len(distinct)
        self._mark_rollups(distinct, outcome.write, now_ms, deadline)

        for index, record in enumerate(reject_record):
            self._settle_reject(outcome, record, rejects[index], index, outcome.rejects)
        late_rejects: list[Reject] = []
        late_record: list[int] = []
        for index, group in enumerate(w.origins for w in distinct):
            if index in outcome.write.written:
                for origin in group:
                    outcome.records[origin.record].written += 1
            elif index in outcome.write.unwritten:
                for origin in group:
                    outcome.records[origin.record].hand_back(1, outcome.write.unwritten[index])
            else:  # DynamoDB refused the item itself: every reading that made it is a reject
                reason = outcome.write.rejected[index]
                for origin in group:
                    late_rejects.append(_reject_of(origin, outcome.records[origin.record], "item", reason, records))
                    late_record.append(origin.record)
        if late_rejects:
            late = self._rejects.publish(late_rejects, deadline)
            for index, record in enumerate(late_record):
                self._settle_reject(outcome, record, late_rejects[index], index, late)
            outcome.rejects.calls += late.calls  # not merge(): its indexes are the late rejects'
            outcome.rejects.retried += late.retried
            outcome.rejects.truncated += late.truncated
        _emit(outcome)
        return outcome

    def _decode(
        self,
        records: Sequence[Mapping[str, Any]],
        outcome: BatchOutcome,
        shard_map: ShardMap,
        now_ms: int,
        *,
        flight: _Flight,
        deadline: Deadline,
    ) -> tuple[list[Reject], list[int]]:
        """Decode, validate and key every record into ``flight``, sending each full segment as it
        fills (its round trips overlap the keying of the next); the rejects and their records."""
        rejects: list[Reject] = []
        reject_record: list[int] = []
        earliest: float | None = None  # the earliest arrival, whose lag is the batch's largest
        for position, raw in enumerate(records):
            record = outcome.records[position]
            decoded = decode_record(position, raw, shard_id_of(raw), record.sequence_number)
            arrival = raw["kinesis"].get("approximateArrivalTimestamp")
            if isinstance(arrival, int | float) and (earliest is None or arrival < earliest):
                earliest = arrival
            # Counted before keying: a candidate that fails validation becomes a reject, not a second unit.
            record.readings = decoded.units
            outcome.aggregated_members += decoded.kpl_members
            for candidate in decoded.candidates:
                self._key(
                    candidate=candidate,
                    decoded=decoded,
                    shard_map=shard_map,
                    now_ms=now_ms,
                    flight=flight,
                    outcome=outcome,
                )
            decoded.fold_rejects(self._rejects.payload_limit)
            for reject in decoded.rejects:
                rejects.append(reject)
                reject_record.append(position)
            if len(flight.distinct) - flight.sent >= self._segment:
                self._send(flight, deadline, now_ms, outcome, whole=True)

        if earliest is not None:
            outcome.max_arrival_lag_ms = max(0, now_ms - round(float(earliest) * 1000))
        return rejects, reject_record

    def _send(
        self, flight: _Flight, deadline: Deadline, now_ms: int, outcome: BatchOutcome, *, whole: bool = False
    ) -> None:
        """Start writing the writes not sent yet (``whole``: full calls of 25 only, the rest waits
        for more), once their partitions' occupancy is recorded."""
        start = flight.sent
        end = start + (len(flight.distinct) - start) // MAX_BATCH_ITEMS * MAX_BATCH_ITEMS if whole else None
        segment = flight.distinct[start:end]
        flight.sent = start + len(segment)
        if not segment:
            return
        # A partition's occupancy is recorded before its readings are written, so a
        # reader never finds readings in a partition it was told is empty.
        blocked = self._record_occupancy(segment, deadline, now_ms, outcome) if self._occupancy else {}
        for index, why in blocked.items():
            flight.report.unwritten[start + index] = why
        order = [start + i for i in range(len(segment)) if i not in blocked]
        flight.sends.append((order, self._writer.submit([flight.distinct[i].pending for i in order], deadline)))

    def _wait(self, flight: _Flight, deadline: Deadline, now_ms: int, outcome: BatchOutcome) -> WriteReport:
        """Every write's outcome, by index in ``flight.distinct``; the keys seen again after their
        write was sent are written last, after every write sent before them is done."""
        report = flight.report
        for again in (False, True):
            if again:
                if not flight.again:
                    break
                for identity, write in flight.again.items():
                    flight.index[identity] = len(flight.distinct)
                    flight.distinct.append(write)
                flight.again = {}
                self._send(flight, deadline, now_ms, outcome)
            for order, handle in flight.sends:
                report.merge(handle.wait(), order)
            flight.sends.clear()
        return report

    def _key(
        self,
        candidate: Candidate,
        *,
        decoded: DecodedRecord,
        shard_map: ShardMap,
        now_ms: int,
        flight: _Flight,
        outcome: BatchOutcome,
    ) -> None:
        try:
            reading = Reading.parse(
                candidate.value, now_ms=now_ms, max_future_ms=self._max_future_ms, max_age_ms=self._max_age_ms
            )
            if self._layout.table_period is not None:
                # Only tables the rotator has built and not yet closed take writes;
                # anything else is rejected with its reason, not retried forever.
                self._layout.table_period.check_admits(
                    reading.ts_ms, now_ms=now_ms, grace_ms=self._grace_ms, prebuilt=self._prebuild_periods
                )
            key = self._layout.key_for(reading, shard_map, self._rng)
            # Per-period tables carry it too: dropping a table keeps a reading up to a period
            # past RETENTION; the TTL (and reads, which filter expired items) make retention exact.
            ttl = ttl_for(reading, self._retention_ms)
            # No size check: the reading limits (keydesign.model) keep an item under a fifth of
            # DynamoDB's 400 KB; a keydesign test builds the largest valid reading to hold it there.
            low_level = serialize_item(build_item(reading, key, ttl))
        except InvalidInput as exc:
            decoded.reject_candidate(candidate, exc.field, exc.reason)
            return
        except UnstorableValue as exc:
            decoded.reject_candidate(candidate, exc.path, exc.reason)
            return
        except Exception as exc:
            # Nothing here calls AWS: whatever raised, the reading's content made it raise. Handing
            # its record back would fail the same way on every delivery until the mapping gave up on
            # the whole batch; rejecting it keeps the reading (payload and all) and its neighbours.
            logger.exception("a reading raised while being validated; it is rejected, not retried")
            outcome.unexpected += 1
            reason = f"could not be processed ({type(exc).__name__}); please report this with the payload"
            decoded.reject_candidate(candidate, "reading", reason)
            return
        pending = PendingWrite(key.table, key.pk, key.sk, low_level)
        if flight.add((key.table, key.pk, key.sk), _Write(pending, [candidate], reading.ts_ms, reading.entity_id)):
            outcome.duplicates += 1

    def _record_occupancy(
        self, distinct: Sequence[_Write], deadline: Deadline, now_ms: int, outcome: BatchOutcome
    ) -> dict[int, str]:
        """Write the occupancy records this container has not written yet; the
        writes (by index) whose record could not be written, with the reason."""
        recorder = self._occupancy
        if recorder is None or not distinct:
            return {}
        recorder.ensure_marked(now_ms)
        records = occupancy_groups(self._layout, [(w.pending.table, w.pending.pk, w.ts_ms) for w in distinct])
        missing = recorder.unrecorded(records)
        if not missing:
            return {}
        store = recorder.store
        report = self._writer.write([store.pending_write(r, self._retention_ms) for r in missing], deadline)
        done = outcome.occupancy  # every index is in one of its three: the records so far
        base = len(done.written) + len(done.unwritten) + len(done.rejected)
        done.merge(report, range(base, base + len(missing)))
        recorder.remember([missing[i] for i in sorted(report.written)])
        blocked: dict[int, str] = {}
        for position, record in enumerate(missing):
            if position in report.written:
                continue
            why = report.unwritten.get(position) or report.rejected.get(position) or "unknown"
            for index in records[record]:
                blocked[index] = f"occupancy not recorded: {why}"
        return blocked

    def _mark_rollups(self, distinct: Sequence[_Write], write: WriteReport, now_ms: int, deadline: Deadline) -> None:
        """Mark the written readings' intervals for the rollup function: after the readings, stamped
        with the batch's start (see rollup.logic). A reading whose mark is not written is handed back."""
        if self._rollup_marks is None:
            return
        written = [(i, distinct[i].entity, distinct[i].ts_ms) for i in sorted(write.written)]
        for index, why in self._rollup_marks.write(written, now_ms, deadline).items():
            write.written.discard(index)
            write.unwritten[index] = f"rollup mark not written: {why}"

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


def occupancy_groups(layout: Layout, writes: Sequence[tuple[str, str, int]]) -> dict[OccupancyRecord, list[int]]:
    """The occupancy record of every (table, partition key, UTC day) among ``writes``
    (table, partition key, event time), with the indexes of the writes it stands for."""
    # Grouped on a plain tuple first: most items of a batch share a few partitions.
    groups: dict[tuple[str, str, int], list[int]] = {}
    for index, (table, pk, ts_ms) in enumerate(writes):
        groups.setdefault((table, pk, day_of(ts_ms)), []).append(index)
    prefix, bucket = layout.table_prefix, layout.bucket
    return {
        OccupancyRecord.of(prefix, bucket, table, pk, writes[members[0]][2]): members
        for (table, pk, _), members in groups.items()
    }


def _reject_of(
    origin: Candidate, record: RecordOutcome, field_name: str, reason: str, records: Sequence[Mapping[str, Any]]
) -> Reject:
    raw = records[origin.record]
    kinesis = raw.get("kinesis") or {}
    return Reject(
        payload=origin.payload(),
        field=field_name,
        reason=reason,
        shard_id=shard_id_of(raw),
        sequence_number=record.sequence_number,
        sub_sequence_number=origin.sub_sequence_number,
        index=origin.index,
        partition_key=str(kinesis.get("partitionKey", "")),
        stream_arn=str(raw.get("eventSourceARN", "")),
    )


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
    metrics.add_metric(name="ItemsWritten", unit=count, value=len(outcome.write.written))
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
