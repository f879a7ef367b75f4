"""The real ingest handler behind the emulated event source mapping, on the embedded moto server."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from typing import Any

import pytest

from adapters.settings import SettingsError
from doubles.memory_sqs import sqs_refusal
from infra.config import LambdaFunction
from local_runtime import LocalFaults
from local_runtime.environment import NotLoopbackError, assert_loopback
from tests.integration.local_runtime.conftest import (
    WAIT_S,
    event_ids,
    ingest_only,
    local_config,
    publish_readings,
    queue_messages,
    readings,
    stored,
)

pytestmark = pytest.mark.integration


def test_every_published_reading_is_written_exactly_once_or_rejected(running: Any) -> None:
    # Given the system running with the stack's configuration
    system = running()
    good = readings(1_200)
    bad = [{"entity_id": "sensor-x", "measures": {"temp": 1}}, {"entity_id": "", "timestamp": 1, "measures": {}}]
    # When good and bad readings are published and the stream has drained
    publish_readings(system, good)
    publish_readings(system, bad, validate=False)
    assert system.wait_until_idle(WAIT_S)
    # Then every good reading is in the table once, and every bad one is on the rejects queue with its reason
    items = stored(system)
    assert event_ids(items) == sorted(r["event_id"] for r in good)
    rejects = queue_messages(system, system.endpoints.rejects_queue_url)
    assert sorted(r["field"] for r in rejects) == ["entity_id", "timestamp"]
    stats = system.stats()["event_source_mappings"]["ingest"]
    assert stats["records_skipped"] == 0 and stats["function_errors"] == 0
    assert stats["records_succeeded"] == stats["records_received"] > 0


def test_throttling_unprocessed_items_and_failed_invocations_lose_and_duplicate_nothing(running: Any) -> None:
    # Given throttled and partly unprocessed writes, and a third of invocations failing after they ran
    faults = LocalFaults.parse("throttle=3,rate=0.1,partial=4,partial_rate=0.3,fraction=0.5,invoke_errors=0.35,seed=11")
    system = running(local_config(ingest_max_retries=20, ingest_batch_size=10), ingest_only(faults=faults))
    good = readings(1_500, prefix="f")
    # When readings are published (small records, so there are many batches to fail) and the stream drains
    publish_readings(system, good, record_bytes=1024)
    assert system.wait_until_idle(WAIT_S)
    # Then the table holds each reading exactly once
    items = stored(system)
    assert Counter(event_ids(items)) == Counter(r["event_id"] for r in good)
    # And the faults really happened: throttles, held-back items, failed invocations, bisections
    stats = system.stats()
    (writes,) = stats["write_faults"]
    assert writes["throttled"] >= 3 and writes["items_held_back"] > 0
    mapping = stats["event_source_mappings"]["ingest"]
    assert mapping["function_errors"] == stats["invocation_errors_injected"] > 0
    assert mapping["bisections"] > 0
    assert mapping["records_skipped"] == 0


def test_batches_given_up_on_go_to_the_on_failure_queue_with_their_sequence_range(running: Any) -> None:
    # Given every invocation failing and one retry allowed, without bisecting single records forever
    system = running(
        local_config(ingest_max_retries=1),
        ingest_only(faults=LocalFaults(invocation_error_fraction=1.0, seed=1)),
    )
    publish_readings(system, readings(300, prefix="d"), record_bytes=2048)
    # When the stream has drained
    assert system.wait_until_idle(WAIT_S)
    # Then every record was skipped to the on-failure queue, described like Lambda's Kinesis failure records
    messages = queue_messages(system, system.endpoints.ingest_failures_queue_url)
    mapping = system.stats()["event_source_mappings"]["ingest"]
    assert sum(m["KinesisBatchInfo"]["batchSize"] for m in messages) == mapping["records_received"]
    for message in messages:
        info = message["KinesisBatchInfo"]
        assert info["streamArn"] == system.endpoints.stream_arn
        assert info["shardId"].startswith("shardId-")
        assert int(info["startSequenceNumber"]) <= int(info["endSequenceNumber"])
        assert message["requestContext"]["condition"] == "RetryAttemptsExhausted"
        assert message["requestContext"]["approximateInvokeCount"] == 2
        assert message["requestContext"]["functionArn"].endswith(":function:TimeSeriesIngest-ingest")
        assert message["responseContext"]["functionError"] == "Unhandled"


def test_the_system_talks_only_to_loopback_and_stops_cleanly(running: Any) -> None:
    before = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    system = running()
    endpoints = system.endpoints
    assert assert_loopback(endpoints.endpoint_url)
    assert os.environ["AWS_ENDPOINT_URL"] == endpoints.endpoint_url
    assert assert_loopback(str(system.client("kinesis").meta.endpoint_url))
    for url in (endpoints.rejects_queue_url, endpoints.ingest_failures_queue_url):
        assert_loopback(url)
    with pytest.raises(NotLoopbackError):
        assert_loopback("https://sqs.eu-west-1.amazonaws.com/123456789012/q")
    assert [t for t in threading.enumerate() if t.name.startswith("ingest-")]
    system.stop()
    assert {k: v for k, v in os.environ.items() if k.startswith("AWS_")} == before
    assert not [t for t in threading.enumerate() if t.name.startswith(("ingest-", "rest-api", "schedule-"))]


def test_a_start_that_fails_stops_what_it_started(running: Any) -> None:
    # Given an ingest setting the handler refuses at import (an event time cannot lie "soon" ahead)
    before = os.environ.get("AWS_ENDPOINT_URL")
    # When the system starts, Then the start fails naming the variable
    with pytest.raises(SettingsError, match="MAX_FUTURE"):
        running(local_config(), ingest_only(environment={LambdaFunction.INGEST: {"MAX_FUTURE": "soon"}}))
    # And nothing is left behind: the environment is back, no poller runs
    assert os.environ.get("AWS_ENDPOINT_URL") == before
    assert not [t for t in threading.enumerate() if t.name.startswith("ingest-")]


POISON = {
    "measures.t": b'{"entity_id":"sensor-p","timestamp":%d,"measures":{"t":%s}}',  # 5,000 digits
    "measures.t\\x01": b'{"entity_id":"sensor-p","timestamp":%d,"measures":{"t\\u0001":1}}',
    "data": b'"\\udc80"',  # a whole record that is a JSON string holding a lone surrogate
    "measures.u": b'{"entity_id":"sensor-p","timestamp":%d,"measures":{"u":1e-400}}',
}


def test_poison_records_in_the_middle_of_a_batch_cost_no_good_reading(running: Any) -> None:
    # Given 200 one-reading records in one PutRecords call, four of them poison in the middle
    # (each of these once failed the whole invocation until the mapping gave up on the batch)
    system = running()
    good = readings(196, prefix="p")
    now = int(time.time() * 1000) - 30_000
    poison = [
        (text % (now, b"9" * 5_000) if b"%s" in text else text % now if b"%d" in text else text)
        for text in POISON.values()
    ]
    data = [json.dumps(r).encode() for r in good[:98]] + poison + [json.dumps(r).encode() for r in good[98:]]
    kinesis = system.client("kinesis")
    response = kinesis.put_records(
        StreamName=system.endpoints.stream_name,
        Records=[{"Data": d, "PartitionKey": "one-shard"} for d in data],
    )
    assert response["FailedRecordCount"] == 0
    # When the stream has drained
    assert system.wait_until_idle(WAIT_S)
    # Then every good reading is stored exactly once
    assert Counter(event_ids(stored(system))) == Counter(r["event_id"] for r in good)
    # And each poison reading is on the rejects queue with its reason, on a message SQS would take
    messages = system.client("sqs").receive_message(
        QueueUrl=system.endpoints.rejects_queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    )["Messages"]
    assert sorted(json.loads(m["Body"])["field"] for m in messages) == sorted(POISON)
    for message in messages:
        assert sqs_refusal({"MessageBody": message["Body"], "MessageAttributes": message["MessageAttributes"]}) is None
        assert json.loads(message["Body"])["reason"]
    # And the batch was never failed, bisected or given up on
    mapping = system.stats()["event_source_mappings"]["ingest"]
    assert mapping["function_errors"] == 0 and mapping["bisections"] == 0 and mapping["records_skipped"] == 0
    assert queue_messages(system, system.endpoints.ingest_failures_queue_url) == []
