"""A failed batch's range read back from its stream, as the records of the event its mapping sent.

Reading starts AT_SEQUENCE_NUMBER the batch's first record and stops past its
last. A stream keeps records for a time only (Kinesis: the stream's retention;
a DynamoDB stream: 24 hours): what it no longer holds is reported as
:class:`Lost`, the range and the time it aged out (its first record's arrival
plus the retention), never silently skipped. The batch's first sequence number
is a record that existed, so a read that starts later than it means the
stream trimmed it. Empty pages end nothing (both streams answer them in the
middle of a shard): a read that stops before the range's last record (its cap
of calls, the shard's end, the stream's tip) says where and why
(:attr:`ReadBack.unread`), and its message is not deleted.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError

from adapters.clients import error_code
from keydesign import format_ts
from replay.failures import FailedBatch

#: A DynamoDB stream keeps records 24 hours; that cannot be changed.
DYNAMODB_STREAM_RETENTION_MS = 86_400_000
#: GetRecords calls one range may take (a range is at most one mapping batch: 10,000 records).
MAX_CALLS = 200


@dataclass(frozen=True, slots=True)
class Lost:
    """Records of a range the stream no longer holds: from ``first`` to just before ``until`` (None: to
    the end of the range), aged out at ``at_ms`` (None: unknown)."""

    first: str
    until: str | None
    at_ms: int | None
    why: str

    def describe(self) -> str:
        span = f"from {self.first} to the range's end" if self.until is None else f"from {self.first} to {self.until}"
        when = f" at {format_ts(self.at_ms)}" if self.at_ms is not None else ""
        return f"records {span} (exclusive) aged out of the stream{when}: {self.why}"


@dataclass(slots=True)
class ReadBack:
    """The range's records still held (the event records a mapping sends), what was lost, and whether the
    read stopped before the range's last record (an empty page proves nothing: Kinesis and DynamoDB
    streams both answer empty pages in the middle of a shard)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    lost: Lost | None = None
    #: The last sequence number read (None: none of the range).
    read_to: str | None = None
    #: Why the read stopped before the range's last record (None: it read the range to its end).
    unread: str | None = None

    def describe_unread(self, batch: FailedBatch) -> str | None:
        """The tail not read back, and why; None when the whole range was read."""
        if self.unread is None:
            return None
        start = f"after {self.read_to}" if self.read_to is not None else f"from {batch.first_sequence}"
        return f"records {start} to {batch.last_sequence} were not read back: {self.unread}"


class RangeReader(Protocol):
    def read(self, batch: FailedBatch) -> ReadBack: ...

    def kept_until(self, batch: FailedBatch) -> int | None:
        """When the stream forgets the batch's first record (epoch ms), if known."""


def _region(arn: str) -> str:
    parts = arn.split(":")
    return parts[3] if len(parts) > 3 else ""


class _StreamRanges:
    """The read shared by both streams: from the batch's first record, page by page, past its last.
    A stream names its own calls (:meth:`_iterator`, :meth:`_page`) and records."""

    #: The error code that says a sequence number is older than the stream's trim horizon.
    trimmed_code = ""
    #: Why records age out of this kind of stream.
    forgets = ""

    def kept_until(self, batch: FailedBatch) -> int | None:
        raise NotImplementedError

    def _iterator(self, batch: FailedBatch, kind: str) -> str:
        raise NotImplementedError

    def _page(self, iterator: str) -> tuple[list[Mapping[str, Any]], str | None, bool]:
        """One GetRecords: the records, the next iterator, and whether the shard has no more for now."""
        raise NotImplementedError

    def _sequence(self, record: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def _event_record(self, batch: FailedBatch, record: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def read(self, batch: FailedBatch) -> ReadBack:
        first, last = int(batch.first_sequence), int(batch.last_sequence)
        trimmed = False  # the range's first record is past the trim horizon
        try:
            iterator: str | None = self._iterator(batch, "AT_SEQUENCE_NUMBER")
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return ReadBack(lost=self._lost(batch, None, "the stream or its shard no longer exists"))
            if error_code(exc) != self.trimmed_code:
                raise
            trimmed = True
            iterator = self._iterator(batch, "TRIM_HORIZON")
        out = ReadBack()
        held: str | None = None  # the first record of the range read
        reached = capped = False  # read to the range's last record (or past it); stopped by the call cap
        stopped = ""  # why the read stopped short of the range's last record
        for _ in range(MAX_CALLS):
            if not iterator:
                stopped = "the shard ended before the range's last record"
                break
            try:
                records, iterator, drained = self._page(iterator)
            except ClientError as exc:
                if error_code(exc) != self.trimmed_code:
                    raise
                stopped = f"the stream trimmed the shard while it was read ({error_code(exc)})"
                break
            for record in records:
                sequence = self._sequence(record)
                if first <= int(sequence) <= last:
                    held = held or sequence
                    out.records.append(self._event_record(batch, record))
                    out.read_to = sequence
                if int(sequence) >= last:
                    reached = True
                    break
            if reached:
                break
            if drained:
                stopped = "the stream's tip was reached before the range's last record"
                break
        else:
            capped, stopped = True, f"the read stopped at its cap of {MAX_CALLS} GetRecords calls"
        # The range's records existed: a read past its first that did not find it means it was trimmed,
        # and one that found none of the range up to the shard's end or tip, or from the trim horizon on,
        # that all of it was. Only the call cap leaves a range unread of which no record was read.
        if held is None:
            if capped and not trimmed:
                out.unread = stopped
            else:
                out.lost = self._lost(batch, None, self.forgets)
        else:
            if int(held) > first:
                out.lost = self._lost(batch, held, self.forgets)
            if not reached:
                out.unread = stopped
        return out

    def _lost(self, batch: FailedBatch, until: str | None, why: str) -> Lost:
        return Lost(batch.first_sequence, until, self.kept_until(batch), why)


class KinesisRanges(_StreamRanges):
    """Ranges of a Kinesis data stream (a boto3 Kinesis client)."""

    trimmed_code = "InvalidArgumentException"
    forgets = "the stream keeps records for its retention only"

    def __init__(self, kinesis: Any) -> None:
        self._kinesis = kinesis
        self._retention: dict[str, int] = {}

    def retention_ms(self, stream_arn: str) -> int:
        if stream_arn not in self._retention:
            summary = self._kinesis.describe_stream_summary(StreamARN=stream_arn)["StreamDescriptionSummary"]
            self._retention[stream_arn] = int(summary["RetentionPeriodHours"]) * 3_600_000
        return self._retention[stream_arn]

    def kept_until(self, batch: FailedBatch) -> int | None:
        if batch.first_arrival_ms is None:
            return None
        try:
            return batch.first_arrival_ms + self.retention_ms(batch.stream_arn)
        except ClientError:
            return None

    def _iterator(self, batch: FailedBatch, kind: str) -> str:
        # Both names of the stream (Kinesis takes both when they agree; moto reads the name).
        params: dict[str, Any] = {
            "StreamARN": batch.stream_arn,
            "StreamName": batch.stream_arn.rsplit("/", 1)[-1],
            "ShardId": batch.shard_id,
            "ShardIteratorType": kind,
        }
        if kind == "AT_SEQUENCE_NUMBER":
            params["StartingSequenceNumber"] = batch.first_sequence
        return str(self._kinesis.get_shard_iterator(**params)["ShardIterator"])

    def _page(self, iterator: str) -> tuple[list[Mapping[str, Any]], str | None, bool]:
        page = self._kinesis.get_records(ShardIterator=iterator, Limit=10_000)
        records = page.get("Records", [])
        # Nothing returned at the stream's tip: nothing more to read.
        return records, page.get("NextShardIterator"), not records and page.get("MillisBehindLatest", 0) == 0

    def _sequence(self, record: Mapping[str, Any]) -> str:
        return str(record["SequenceNumber"])

    def _event_record(self, batch: FailedBatch, record: Mapping[str, Any]) -> dict[str, Any]:
        """A GetRecords record as the mapping hands it to the function (base64 data, epoch seconds)."""
        arrival = record.get("ApproximateArrivalTimestamp")
        return {
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "partitionKey": record["PartitionKey"],
                "sequenceNumber": record["SequenceNumber"],
                "data": base64.b64encode(record["Data"]).decode("ascii"),
                "approximateArrivalTimestamp": arrival.timestamp() if isinstance(arrival, datetime) else arrival,
            },
            "eventSource": "aws:kinesis",
            "eventVersion": "1.0",
            "eventID": f"{batch.shard_id}:{record['SequenceNumber']}",
            "eventName": "aws:kinesis:record",
            "invokeIdentityArn": "",
            "awsRegion": _region(batch.stream_arn),
            "eventSourceARN": batch.stream_arn,
        }


class DynamoStreamRanges(_StreamRanges):
    """Ranges of a DynamoDB stream (a boto3 DynamoDB Streams client)."""

    trimmed_code = "TrimmedDataAccessException"
    forgets = "a DynamoDB stream keeps records 24 hours"

    def __init__(self, streams: Any) -> None:
        self._streams = streams

    def kept_until(self, batch: FailedBatch) -> int | None:
        return None if batch.first_arrival_ms is None else batch.first_arrival_ms + DYNAMODB_STREAM_RETENTION_MS

    def _iterator(self, batch: FailedBatch, kind: str) -> str:
        params: dict[str, Any] = {"StreamArn": batch.stream_arn, "ShardId": batch.shard_id, "ShardIteratorType": kind}
        if kind == "AT_SEQUENCE_NUMBER":
            params["SequenceNumber"] = batch.first_sequence
        return str(self._streams.get_shard_iterator(**params)["ShardIterator"])

    def _page(self, iterator: str) -> tuple[list[Mapping[str, Any]], str | None, bool]:
        page = self._streams.get_records(ShardIterator=iterator, Limit=1_000)
        # An open shard answers empty pages at its tip, and closed ones in their middle too: they end
        # nothing (the range's last record exists); the shard's end or the call cap does.
        return page.get("Records", []), page.get("NextShardIterator"), False

    def _sequence(self, record: Mapping[str, Any]) -> str:
        return str(record["dynamodb"]["SequenceNumber"])

    def _event_record(self, batch: FailedBatch, record: Mapping[str, Any]) -> dict[str, Any]:
        """A GetRecords record as the mapping hands it to the function: epoch seconds, and the stream's ARN."""
        body = dict(record["dynamodb"])
        when = body.get("ApproximateCreationDateTime")
        if isinstance(when, datetime):
            body["ApproximateCreationDateTime"] = when.timestamp()
        return {**record, "dynamodb": body, "eventSourceARN": batch.stream_arn}
