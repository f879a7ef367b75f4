"""``tsctl replay`` on moto: failed batches read back from their streams and put through the function again.

The ingest function runs in-process behind an :class:`replay.invoker.Invoker` (what a boto3 Lambda
client is in AWS); its readings land in moto's DynamoDB. Lambda's on-failure records are written to
the queues as Lambda writes them. Where moto cannot do what the stream does (trim records), a botocore
hook changes only the client's answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from doubles.lambda_context import FakeLambdaContext
from hotkeys.records import Observation, parse_record
from keydesign import Layout, Reading, ShardMap, decode_block, format_ts
from keydesign.layouts import parse_keys
from producer.redrive import MessageQueue
from replay.failures import FailedBatch
from replay.invoker import InvocationFailed
from replay.runner import Outcome, peek, replay
from replay.sources import DynamoStreamRanges, KinesisRanges
from tests.integration.ingest.conftest import Aws, aws, handler_module
from tests.unit.ingest.kinesis_events import REGION, as_json, reading
from tsctl.cli import main

pytestmark = pytest.mark.integration
__all__ = ["aws", "handler_module"]  # fixtures

STREAM = "readings-in"
HOUR = 3_600_000
FUNCTION = "arn:aws:lambda:eu-west-1:123456789012:function:TimeSeriesIngest-ingest"
#: The one shard of a moto table's stream (moto's DescribeStream answers 404 in-process; Lambda's record names it).
MOTO_STREAM_SHARD = "shardId-00000001541626099285-f35f62ef"


class InProcess:
    """The ingest function invoked in this process, as Lambda would run it."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.calls: list[tuple[str, Mapping[str, Any]]] = []

    def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
        self.calls.append((function, event))
        return dict(self.module.handler(dict(event), FakeLambdaContext()))


class Stream:
    """A moto Kinesis stream of one shard, and the failure queue of its mapping."""

    def __init__(self, aws: Aws) -> None:
        self.kinesis = boto3.client("kinesis", region_name=REGION)
        self.kinesis.create_stream(StreamName=STREAM, ShardCount=1)
        summary = self.kinesis.describe_stream_summary(StreamName=STREAM)["StreamDescriptionSummary"]
        self.arn = summary["StreamARN"]
        self.shard = self.kinesis.list_shards(StreamName=STREAM)["Shards"][0]["ShardId"]
        self.sqs = aws.sqs
        self.queue_url = aws.sqs.create_queue(QueueName="ingest-failures")["QueueUrl"]

    def publish(self, *readings: dict[str, Any]) -> list[str]:
        return [
            self.kinesis.put_record(StreamName=STREAM, Data=as_json(r), PartitionKey=r["entity_id"])["SequenceNumber"]
            for r in readings
        ]

    def gave_up_on(self, first: str, last: str, size: int, *, arrived: int) -> None:
        """What Lambda sends the on-failure destination for a batch it gave up on."""
        body = {
            "requestContext": {"requestId": "r-1", "functionArn": FUNCTION, "condition": "RetryAttemptsExhausted"},
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": format_ts(arrived + 60_000),
            "KinesisBatchInfo": {
                "shardId": self.shard,
                "startSequenceNumber": first,
                "endSequenceNumber": last,
                "approximateArrivalOfFirstRecord": format_ts(arrived),
                "approximateArrivalOfLastRecord": format_ts(arrived),
                "batchSize": size,
                "streamArn": self.arn,
            },
        }
        self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(body))

    def queue(self) -> MessageQueue[FailedBatch]:
        return MessageQueue(self.sqs, self.queue_url, FailedBatch.parse, wait_s=0)

    def depth(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])


@pytest.fixture
def stream(aws: Aws) -> Iterator[Stream]:
    yield Stream(aws)


def run(stream: Stream, invoker: Any, **options: Any) -> list[Outcome]:
    readers = {"kinesis": KinesisRanges(stream.kinesis)}
    return replay(stream.queue(), readers, invoker, function_for=lambda b: b.function_arn, **options)  # type: ignore[arg-type]


def versions(aws: Aws) -> dict[str, set[int]]:
    """Event id -> the versions of the blocks holding a copy of it."""
    out: dict[str, set[int]] = {}
    for item in aws.table_items():
        parts = parse_keys(item["pk"]["S"], item["sk"]["S"], "hybrid")
        assert parts is not None
        header, readings = decode_block(parts.entity, item["b"]["B"])
        for r in readings:
            out.setdefault(r.event_id, set()).add(header.version)
    return out


def test_a_failed_batch_is_stored_with_its_original_versions_and_its_message_deleted(
    aws: Aws, stream: Stream, handler_module: ModuleType
) -> None:
    # Given four readings published, and the mapping's record of a batch of the middle two it gave up on
    now = int(datetime.now(UTC).timestamp() * 1000)
    # (of four entities: a block holds one entity's readings, and carries the largest sequence number of them)
    sequences = stream.publish(*(reading(f"s-{n}", now - 1_000 * n, f"e{n}", temp=float(n)) for n in range(4)))
    stream.gave_up_on(sequences[1], sequences[2], 2, arrived=now)
    invoker = InProcess(handler_module)
    # When replayed
    (outcome,) = run(stream, invoker)
    # Then the two readings are stored, each in a block whose version is its own record's sequence number
    # (the mapping's, not a new one: a correction published later still wins), and the message is gone
    assert outcome.deleted and outcome.records == 2 and outcome.failed == [] and outcome.lost is None
    assert versions(aws) == {"e1": {int(sequences[1])}, "e2": {int(sequences[2])}}
    assert [f for f, _ in invoker.calls] == [FUNCTION]
    assert stream.depth() == 0
    # And replaying the same batch again (a message delivered twice) changes nothing
    stream.gave_up_on(sequences[1], sequences[2], 2, arrived=now)
    (again,) = run(stream, invoker)
    assert again.deleted and versions(aws) == {"e1": {int(sequences[1])}, "e2": {int(sequences[2])}}


def test_a_replay_does_not_beat_a_correction_published_after_the_original(
    aws: Aws, stream: Stream, handler_module: ModuleType
) -> None:
    # Given a reading whose batch failed, then a correction of it (same identity, new value), stored
    now = int(datetime.now(UTC).timestamp() * 1000)
    (original,) = stream.publish(reading("s-1", now - 5_000, "e", temp=1.0))
    (correction,) = stream.publish(reading("s-1", now - 5_000, "e", temp=2.0))
    handler_module.handler(
        {"Records": KinesisRanges(stream.kinesis).read(_batch(stream, correction, correction, now)).records},
        FakeLambdaContext(),
    )
    stream.gave_up_on(original, original, 1, arrived=now)
    # When the failed original is replayed
    (outcome,) = run(stream, InProcess(handler_module))
    # Then both copies are stored and readers return the correction: the original keeps its older version
    assert outcome.deleted
    assert versions(aws)["e"] == {int(original), int(correction)}
    (stored,) = aws.readings()
    assert stored.measures == {"temp": 2.0}


def test_a_record_the_function_hands_back_keeps_the_message(
    aws: Aws, stream: Stream, handler_module: ModuleType
) -> None:
    now = int(datetime.now(UTC).timestamp() * 1000)
    sequences = stream.publish(*(reading("s-1", now - n, f"e{n}") for n in range(3)))
    stream.gave_up_on(sequences[0], sequences[2], 3, arrived=now)
    real = InProcess(handler_module)

    class HandsBack:
        def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
            real.invoke(function, event)  # stores them, but reports the last not stored (a throttled write)
            return {"batchItemFailures": [{"itemIdentifier": sequences[2]}]}

    (outcome,) = run(stream, HandsBack())
    assert not outcome.deleted and outcome.failed == [sequences[2]]
    assert outcome.kept_because is not None and "not stored yet" in outcome.kept_because
    assert stream.depth() == 1  # released: visible again at once, for the next replay

    class Fails:
        def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
            raise InvocationFailed("Unhandled: boom")

    (failed,) = run(stream, Fails())
    assert not failed.deleted and len(failed.failed) == 3 and failed.error == "Unhandled: boom"
    assert stream.depth() == 1
    # And the next replay, with the function healthy, finishes it
    (done,) = run(stream, real)
    assert done.deleted and stream.depth() == 0


def test_a_replayed_reading_older_than_max_age_is_rejected_with_its_payload_not_stored(
    aws: Aws, stream: Stream, handler_module: ModuleType
) -> None:
    # Given a batch whose reading was within MAX_AGE (7 days here) when it arrived, replayed after it aged past
    now = int(datetime.now(UTC).timestamp() * 1000)
    (only,) = stream.publish(reading("s-1", now - 8 * 24 * HOUR, "old", temp=1.0))
    stream.gave_up_on(only, only, 1, arrived=now - 2 * 24 * HOUR)
    (outcome,) = run(stream, InProcess(handler_module))
    # Then ingest judges its age at the replay: rejected (done: the message is deleted), onto the rejects
    # queue with its payload, whose way back publishes it anew (docs/client.md)
    assert outcome.deleted and outcome.failed == []
    (reject,) = aws.rejects()
    assert reject["field"] == "timestamp" and "older than the accepted age" in reject["reason"]
    assert aws.table_items() == []


def test_what_aged_out_is_named_with_the_time_it_was_lost_and_kept_unless_dropped(
    aws: Aws, stream: Stream, handler_module: ModuleType
) -> None:
    # Given a batch of three records whose first aged out (the stream trimmed it: moto never does, so
    # its GetRecords answer loses it), the stream keeping 24 hours
    now = int(datetime.now(UTC).timestamp() * 1000)
    sequences = stream.publish(*(reading("s-1", now - n, f"e{n}") for n in range(3)))
    arrived = now - 30 * HOUR
    stream.gave_up_on(sequences[0], sequences[2], 3, arrived=arrived)

    def trim(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Records"] = [r for r in parsed["Records"] if r["SequenceNumber"] != sequences[0]]

    stream.kinesis.meta.events.register("after-call.kinesis.GetRecords", trim)
    # When listed: the stream held it until 24 h after its first record arrived, 6 hours ago
    (status,) = peek(stream.queue(), {"kinesis": KinesisRanges(stream.kinesis)}, 10)
    assert status.kept_until_ms == arrived + 24 * HOUR and status.aged_out(now)
    # When replayed: the two records still held are stored; the lost one is named, and the message kept
    (outcome,) = run(stream, InProcess(handler_module))
    assert outcome.records == 2 and outcome.failed == [] and not outcome.deleted
    assert outcome.lost is not None
    assert (outcome.lost.first, outcome.lost.until, outcome.lost.at_ms) == (
        sequences[0],
        sequences[1],
        arrived + 24 * HOUR,
    )
    assert f"aged out of the stream at {format_ts(arrived + 24 * HOUR)}" in (outcome.kept_because or "")
    assert sorted(versions(aws)) == ["e1", "e2"]
    # And once the operator has read it, --drop-lost deletes the message
    (dropped,) = run(stream, InProcess(handler_module), drop_lost=True)
    assert dropped.deleted and stream.depth() == 0


def test_a_batch_of_a_stream_that_no_longer_exists_is_lost_whole(stream: Stream) -> None:
    now = int(datetime.now(UTC).timestamp() * 1000)
    (only,) = stream.publish(reading("s-1", now, "e"))
    stream.gave_up_on(only, only, 1, arrived=now)
    stream.kinesis.delete_stream(StreamName=STREAM)
    (outcome,) = run(stream, None, dry_run=True)
    assert outcome.records == 0 and outcome.lost is not None and outcome.lost.until is None
    assert "no longer exists" in outcome.lost.why
    assert stream.depth() == 1  # a dry run deletes nothing


def test_an_unreadable_message_is_kept_and_said_so(stream: Stream) -> None:
    stream.sqs.send_message(QueueUrl=stream.queue_url, MessageBody="not json")
    stream.sqs.send_message(QueueUrl=stream.queue_url, MessageBody=json.dumps({"KinesisBatchInfo": {"shardId": "x"}}))
    outcomes = run(stream, None, dry_run=True)
    assert sorted(o.kept_because or "" for o in outcomes) == [
        "unreadable: KinesisBatchInfo names no sequence range ('' to '')",
        "unreadable: the body is not a JSON object",
    ]
    assert stream.depth() == 2


# -- the hot-key detector's DynamoDB stream ---------------------------------------------------------


class FakeStreams:
    """A DynamoDB Streams client holding one shard's records as boto3's GetRecords returns them
    (moto's in-process DynamoDB Streams answers GetShardIterator with 404)."""

    def __init__(self, records: list[dict[str, Any]], *, trimmed: bool = False) -> None:
        self.records = records
        self.trimmed = trimmed

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        if self.trimmed and params["ShardIteratorType"] == "AT_SEQUENCE_NUMBER":
            raise ClientError({"Error": {"Code": "TrimmedDataAccessException", "Message": "t"}}, "GetShardIterator")
        at = params.get("SequenceNumber")
        first = next((i for i, r in enumerate(self.records) if r["dynamodb"]["SequenceNumber"] == at), 0)
        return {"ShardIterator": str(len(self.records) if self.trimmed else first)}

    def get_records(self, **params: Any) -> dict[str, Any]:
        start = int(params["ShardIterator"])
        page = self.records[start : start + 2]  # small pages: the range spans several
        return {"Records": page, "NextShardIterator": str(start + len(page))}


def stream_record(n: int, when: datetime) -> dict[str, Any]:
    """A KEYS_ONLY stream record of a block's put, as boto3's GetRecords gives it."""
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    reading_ = Reading(entity_id="s-1", event_id=f"e{n}", ts_ms=int(when.timestamp() * 1000), measures={"t": 1.0})
    (block,) = layout.pack([(reading_, 1_000 + n)], ShardMap.initial(layout.bucket, 4), retention_ms=86_400_000)
    return {
        "eventID": f"id-{n}",
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": {
            "ApproximateCreationDateTime": when,
            "Keys": {"pk": {"S": block.key.pk}, "sk": {"S": block.key.sk}},
            "SequenceNumber": str(1_000 + n),
            "SizeBytes": 90,
            "StreamViewType": "KEYS_ONLY",
        },
    }


def test_a_hot_key_batch_is_read_back_from_the_dynamodb_stream_as_the_detector_reads_it() -> None:
    # Given a readings table's stream holding five records, and the record of a batch of the middle three
    now = int(datetime.now(UTC).timestamp()) * 1000
    records = [stream_record(n, datetime.fromtimestamp(now / 1000, UTC)) for n in range(5)]
    stream_arn = f"arn:aws:dynamodb:{REGION}:123456789012:table/readings/stream/2026-11-22T00:00:00.000"
    body = {
        "requestContext": {"functionArn": "arn:aws:lambda:eu-west-1:123456789012:function:x-hotkeys"},
        "timestamp": format_ts(now),
        "DDBStreamBatchInfo": {
            "shardId": "shardId-1",
            "startSequenceNumber": "1001",
            "endSequenceNumber": "1003",
            "approximateArrivalOfFirstRecord": format_ts(now),
            "approximateArrivalOfLastRecord": format_ts(now),
            "batchSize": 3,
            "streamArn": stream_arn,
        },
    }
    batch = FailedBatch.parse({"MessageId": "m", "ReceiptHandle": "h", "Body": json.dumps(body)})
    # When its range is read back
    read = DynamoStreamRanges(FakeStreams(records)).read(batch)
    # Then it holds the three records, shaped as the mapping sends them (epoch seconds, the stream's ARN):
    # the detector counts each
    assert read.lost is None
    assert [r["dynamodb"]["SequenceNumber"] for r in read.records] == ["1001", "1002", "1003"]
    observed = [parse_record(r, layout_kind="hybrid", table_prefix="readings") for r in read.records]
    assert all(isinstance(o, Observation) for o in observed), observed
    assert read.records[0]["dynamodb"]["ApproximateCreationDateTime"] == now / 1000
    assert read.records[0]["eventSourceARN"] == stream_arn
    # And a range the stream trimmed is named lost, with when: 24 hours after its first record arrived
    lost = DynamoStreamRanges(FakeStreams(records, trimmed=True)).read(batch).lost
    assert lost is not None and lost.until is None and lost.at_ms == now + 24 * HOUR


def _batch(stream: Stream, first: str, last: str, now: int) -> FailedBatch:
    body = {
        "KinesisBatchInfo": {
            "shardId": stream.shard,
            "startSequenceNumber": first,
            "endSequenceNumber": last,
            "approximateArrivalOfFirstRecord": format_ts(now),
            "batchSize": 1,
            "streamArn": stream.arn,
        }
    }
    return FailedBatch.parse({"MessageId": "m", "ReceiptHandle": "h", "Body": json.dumps(body)})


def test_tsctl_replay_lists_and_dry_runs_a_queue(stream: Stream, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a failed batch of two records that arrived an hour ago (moto's streams keep 24 hours)
    now = int(datetime.now(UTC).timestamp() * 1000)
    first, last = stream.publish(reading("s-1", now, "a"), reading("s-2", now, "b"))
    stream.gave_up_on(first, last, 2, arrived=now - HOUR)
    where = ["--ingest-queue-url", stream.queue_url, "--queue", "ingest", "--region", REGION]
    # When listed
    assert main(["replay", "list", *where, "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["ingest"]
    # Then it names the range, and until when the stream holds it
    assert (listed["first_sequence"], listed["last_sequence"], listed["aged_out"]) == (first, last, False)
    assert listed["stream_keeps_it_until"] == format_ts(now - HOUR + 24 * HOUR)
    # And a dry run reads the range back and leaves the message
    assert main(["replay", "run", *where, "--dry-run"]) == 0
    assert "2 record(s) still in the stream" in capsys.readouterr().out
    assert stream.depth() == 1
    # And a run whose Invoke fails (no such function) reports that message kept, with why, and exits 1
    assert main(["replay", "run", *where, "--ingest-function", "missing"]) == 1
    err = capsys.readouterr().err
    assert "kept: 2 record(s) not stored yet" in err and "not invoked: " in err and "ResourceNotFound" in err
    assert "ingest: 0 message(s) put through and deleted, 1 kept" in err
    assert stream.depth() == 1
