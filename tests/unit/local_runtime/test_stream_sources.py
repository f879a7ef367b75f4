"""Service records become the records Lambda puts in its events (checked against Powertools' parsers)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes import DynamoDBStreamEvent, KinesisStreamEvent

from local_runtime.stream_sources import DynamoDBStreamSource, KinesisSource, StartingPosition

REGION = "eu-west-1"
KINESIS_ARN = f"arn:aws:kinesis:{REGION}:123456789012:stream/readings"
TABLE_STREAM_ARN = f"arn:aws:dynamodb:{REGION}:123456789012:table/readings/stream/2026-11-22T07:00:00.000"
ARRIVAL = datetime(2026, 11, 22, 7, 30, 1, 250_000, tzinfo=UTC)


class FakeKinesisClient:
    def __init__(self) -> None:
        self.iterator_requests: list[dict[str, Any]] = []

    def list_shards(self, **kwargs: Any) -> dict[str, Any]:
        if "NextToken" in kwargs:
            return {"Shards": [{"ShardId": "shardId-000000000002"}]}
        return {"Shards": [{"ShardId": "shardId-000000000000"}, {"ShardId": "shardId-000000000001"}], "NextToken": "t"}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        self.iterator_requests.append(kwargs)
        return {"ShardIterator": "it-1"}

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        return {
            "Records": [
                {
                    "SequenceNumber": "49600000000000000000000000000000000000000000000000000001",
                    "ApproximateArrivalTimestamp": ARRIVAL,
                    "Data": b'[{"entity_id":"s-1"}]',
                    "PartitionKey": "g7",
                }
            ],
            "NextShardIterator": "it-2",
            "MillisBehindLatest": 1500,
        }


class FakeStreamsClient:
    def describe_stream(self, **kwargs: Any) -> dict[str, Any]:
        return {"StreamDescription": {"Shards": [{"ShardId": "shardId-00000001"}]}}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, Any]:
        return {"ShardIterator": "dd-it"}

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        return {
            "Records": [
                {
                    "eventID": "e1",
                    "eventName": "INSERT",
                    "eventVersion": "1.1",
                    "eventSource": "aws:dynamodb",
                    "awsRegion": "us-east-1",  # moto always says us-east-1
                    "dynamodb": {
                        "ApproximateCreationDateTime": ARRIVAL,
                        "Keys": {"pk": {"S": "0007#2026-11-22T07"}, "sk": {"S": "s-1#2026"}, "b": {"B": b"\x00\x01"}},
                        "SequenceNumber": "1100000000017454423009",
                        "SizeBytes": 187,
                        "StreamViewType": "KEYS_ONLY",
                    },
                },
                {
                    "eventID": "e2",
                    "eventName": "REMOVE",
                    "eventSource": "aws:dynamodb",
                    "dynamodb": {
                        "ApproximateCreationDateTime": ARRIVAL,
                        "Keys": {"pk": {"S": "p"}, "sk": {"S": "s"}},
                        "SequenceNumber": "1100000000017454423010",
                        "SizeBytes": 40,
                        "StreamViewType": "KEYS_ONLY",
                    },
                    "userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"},
                },
            ],
            "NextShardIterator": "dd-it-2",
        }


def test_kinesis_records_are_shaped_like_lambdas_and_parse_with_powertools() -> None:
    source = KinesisSource(FakeKinesisClient(), KINESIS_ARN, region=REGION, function_name="ingest")
    result = source.read("shardId-000000000001", "it-1", 100)
    (record,) = result.records
    assert (result.next_iterator, result.behind_ms) == ("it-2", 1500)
    raw = record.event_record
    assert raw["eventID"] == f"shardId-000000000001:{record.sequence_number}"
    assert (raw["eventSource"], raw["eventName"], raw["awsRegion"], raw["eventSourceARN"]) == (
        "aws:kinesis",
        "aws:kinesis:record",
        REGION,
        KINESIS_ARN,
    )
    assert raw["kinesis"]["approximateArrivalTimestamp"] == ARRIVAL.timestamp()
    assert record.arrival_s == ARRIVAL.timestamp()
    assert record.size == len(json.dumps(raw, separators=(",", ":"))) + 1

    event = KinesisStreamEvent({"Records": [raw]})
    parsed = next(event.records)
    assert parsed.kinesis.data_as_bytes() == b'[{"entity_id":"s-1"}]'
    assert parsed.kinesis.partition_key == "g7"
    assert parsed.kinesis.sequence_number == record.sequence_number


def test_kinesis_shards_are_listed_across_pages_and_iterators_resume_after_a_sequence_number() -> None:
    client = FakeKinesisClient()
    source = KinesisSource(client, KINESIS_ARN, region=REGION, function_name="ingest")
    assert source.shard_ids() == ["shardId-000000000000", "shardId-000000000001", "shardId-000000000002"]
    source.iterator("shardId-000000000000", StartingPosition.LATEST, None)
    source.iterator("shardId-000000000000", StartingPosition.TRIM_HORIZON, "42")
    assert client.iterator_requests == [
        {"StreamName": "readings", "ShardId": "shardId-000000000000", "ShardIteratorType": "LATEST"},
        {
            "StreamName": "readings",
            "ShardId": "shardId-000000000000",
            "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
            "StartingSequenceNumber": "42",
        },
    ]


def test_dynamodb_stream_records_are_shaped_like_lambdas_and_parse_with_powertools() -> None:
    source = DynamoDBStreamSource(FakeStreamsClient(), TABLE_STREAM_ARN, region=REGION)
    insert, remove = source.read("shardId-00000001", "dd-it", 1000).records
    raw = insert.event_record
    assert raw["awsRegion"] == REGION
    assert raw["eventSourceARN"] == TABLE_STREAM_ARN
    assert raw["dynamodb"]["ApproximateCreationDateTime"] == int(ARRIVAL.timestamp())
    assert raw["dynamodb"]["Keys"]["b"] == {"B": base64.b64encode(b"\x00\x01").decode()}
    assert "userIdentity" not in raw
    assert remove.event_record["userIdentity"]["principalId"] == "dynamodb.amazonaws.com"
    json.dumps(raw)  # the event is JSON, as Lambda sends it

    event = DynamoDBStreamEvent({"Records": [raw, remove.event_record]})
    first, second = list(event.records)
    assert first.dynamodb is not None and second.dynamodb is not None
    assert first.dynamodb.sequence_number == "1100000000017454423009"
    assert first.dynamodb.size_bytes == 187
    assert first.dynamodb.keys["pk"] == "0007#2026-11-22T07"
    assert second.event_name is not None and second.event_name.name == "REMOVE"
    assert source.shard_ids() == ["shardId-00000001"]
