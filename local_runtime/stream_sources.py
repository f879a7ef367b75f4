"""Stream shards read the way Lambda's event source mapping reads them, into Lambda-shaped records.

A :class:`StreamSource` lists a stream's shards, opens iterators and reads
records; each record comes back as a :class:`SourceRecord` holding exactly
what Lambda puts in ``event["Records"]``:

* Kinesis: ``kinesis.{kinesisSchemaVersion, partitionKey, sequenceNumber,
  data (base64), approximateArrivalTimestamp}``, ``eventSource: aws:kinesis``,
  ``eventID: <shardId>:<sequenceNumber>``, ``eventName``, ``eventVersion``,
  ``invokeIdentityArn``, ``awsRegion``, ``eventSourceARN``;
* DynamoDB Streams: ``eventID``, ``eventName`` (INSERT/MODIFY/REMOVE),
  ``eventVersion``, ``eventSource: aws:dynamodb``, ``awsRegion``,
  ``dynamodb.{ApproximateCreationDateTime (epoch seconds), Keys,
  SequenceNumber, SizeBytes, StreamViewType, NewImage/OldImage}``,
  ``userIdentity`` when the service wrote it (TTL), ``eventSourceARN``.

The sources are thin: the batching, retry and failure semantics live in
:mod:`local_runtime.event_source_mapping`, which only sees this interface (the
unit tests give it an in-memory source).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from local_runtime.environment import ACCOUNT_ID


class StartingPosition(StrEnum):
    TRIM_HORIZON = "TRIM_HORIZON"
    LATEST = "LATEST"


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """One record as it goes into a Lambda event, with what the mapping needs to know about it."""

    sequence_number: str
    #: Kinesis: approximate arrival; DynamoDB: approximate creation. Epoch seconds.
    arrival_s: float
    event_record: Mapping[str, Any]
    #: Bytes the record takes in the event's JSON (for the 6 MB payload limit).
    size: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    records: list[SourceRecord]
    #: None once a closed shard has been read to its end.
    next_iterator: str | None
    behind_ms: int | None = None


class StreamSource(Protocol):
    """A stream the mapping polls: Kinesis or DynamoDB Streams (or a fake)."""

    @property
    def arn(self) -> str: ...

    #: ``KinesisBatchInfo`` or ``DDBStreamBatchInfo``: the key of the on-failure record.
    @property
    def batch_info_key(self) -> str: ...

    def shard_ids(self) -> list[str]: ...

    def iterator(self, shard_id: str, position: StartingPosition, after_sequence: str | None) -> str: ...

    def read(self, shard_id: str, iterator: str, limit: int) -> ReadResult: ...


def record_size(event_record: Mapping[str, Any]) -> int:
    return len(json.dumps(event_record, separators=(",", ":"))) + 1


def _epoch_s(value: Any) -> float:
    if isinstance(value, datetime):
        return value.timestamp()
    return float(value)


class _Shards:
    """What both streams' APIs share: shard iterators, and GetRecords up to the service's largest limit."""

    #: The largest ``Limit`` GetRecords accepts, and the name of a sequence number in GetShardIterator.
    max_read_limit: int
    sequence_parameter: str

    def __init__(self, client: Any, stream_arn: str, stream: Mapping[str, str], region: str) -> None:
        self._client = client
        self.arn = stream_arn
        self._stream = stream  # how a request names the stream
        self._region = region

    def iterator(self, shard_id: str, position: StartingPosition, after_sequence: str | None) -> str:
        kwargs: dict[str, Any] = {**self._stream, "ShardId": shard_id, "ShardIteratorType": str(position)}
        if after_sequence is not None:
            kwargs.update({"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", self.sequence_parameter: after_sequence})
        return str(self._client.get_shard_iterator(**kwargs)["ShardIterator"])

    def _get_records(self, iterator: str, limit: int) -> Any:
        return self._client.get_records(ShardIterator=iterator, Limit=min(limit, self.max_read_limit))


class KinesisSource(_Shards):
    """A Kinesis data stream, read with GetShardIterator and GetRecords."""

    batch_info_key = "KinesisBatchInfo"
    max_read_limit = 10_000
    sequence_parameter = "StartingSequenceNumber"

    def __init__(self, client: Any, stream_arn: str, *, region: str, function_name: str) -> None:
        super().__init__(client, stream_arn, {"StreamName": stream_arn.rsplit("/", 1)[-1]}, region)
        self._role = f"arn:aws:iam::{ACCOUNT_ID}:role/{function_name}-role"

    def shard_ids(self) -> list[str]:
        shards: list[str] = []
        kwargs: dict[str, Any] = dict(self._stream)
        while True:
            page = self._client.list_shards(**kwargs)
            shards.extend(s["ShardId"] for s in page.get("Shards", []))
            token = page.get("NextToken")
            if not token:
                return shards
            kwargs = {"NextToken": token}

    def read(self, shard_id: str, iterator: str, limit: int) -> ReadResult:
        page = self._get_records(iterator, limit)
        records = [self._event_record(shard_id, r) for r in page.get("Records", [])]
        behind = page.get("MillisBehindLatest")
        return ReadResult(records, page.get("NextShardIterator"), int(behind) if behind is not None else None)

    def _event_record(self, shard_id: str, raw: Mapping[str, Any]) -> SourceRecord:
        sequence = str(raw["SequenceNumber"])
        arrival = _epoch_s(raw["ApproximateArrivalTimestamp"])
        record = {
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "partitionKey": raw["PartitionKey"],
                "sequenceNumber": sequence,
                "data": base64.b64encode(raw["Data"]).decode("ascii"),
                "approximateArrivalTimestamp": arrival,
            },
            "eventSource": "aws:kinesis",
            "eventVersion": "1.0",
            "eventID": f"{shard_id}:{sequence}",
            "eventName": "aws:kinesis:record",
            "invokeIdentityArn": self._role,
            "awsRegion": self._region,
            "eventSourceARN": self.arn,
        }
        return SourceRecord(sequence, arrival, record, record_size(record))


class DynamoDBStreamSource(_Shards):
    """A table's DynamoDB stream, read with the ``dynamodbstreams`` API."""

    batch_info_key = "DDBStreamBatchInfo"
    max_read_limit = 1_000
    sequence_parameter = "SequenceNumber"

    def __init__(self, client: Any, stream_arn: str, *, region: str) -> None:
        super().__init__(client, stream_arn, {"StreamArn": stream_arn}, region)

    def shard_ids(self) -> list[str]:
        shards: list[str] = []
        kwargs: dict[str, Any] = dict(self._stream)
        while True:
            description = self._client.describe_stream(**kwargs)["StreamDescription"]
            shards.extend(s["ShardId"] for s in description.get("Shards", []))
            last = description.get("LastEvaluatedShardId")
            if not last:
                return shards
            kwargs = {**self._stream, "ExclusiveStartShardId": last}

    def read(self, shard_id: str, iterator: str, limit: int) -> ReadResult:
        page = self._get_records(iterator, limit)
        return ReadResult([self._event_record(r) for r in page.get("Records", [])], page.get("NextShardIterator"))

    def _event_record(self, raw: Mapping[str, Any]) -> SourceRecord:
        change = dict(raw["dynamodb"])
        created = _epoch_s(change.get("ApproximateCreationDateTime", 0))
        # Lambda delivers whole epoch seconds; boto3 parsed it into a datetime.
        change["ApproximateCreationDateTime"] = int(created)
        for image in ("Keys", "NewImage", "OldImage"):
            if image in change:
                change[image] = _json_safe(change[image])
        record: dict[str, Any] = {
            "eventID": raw["eventID"],
            "eventName": raw["eventName"],
            "eventVersion": raw.get("eventVersion", "1.1"),
            "eventSource": "aws:dynamodb",
            "awsRegion": self._region,
            "dynamodb": change,
            "eventSourceARN": self.arn,
        }
        if "userIdentity" in raw:
            record["userIdentity"] = dict(raw["userIdentity"])
        sequence = str(change["SequenceNumber"])
        return SourceRecord(sequence, created, record, record_size(record))


def _json_safe(value: Any) -> Any:
    """DynamoDB JSON as the low-level client returns it, with binary values base64 as on the wire."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | set | tuple):
        return [_json_safe(v) for v in value]
    return value
