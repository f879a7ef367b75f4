"""The real handler, against moto: mixed and hostile batches, partial batch responses, real stream shapes."""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections import Counter
from types import ModuleType
from typing import Any

import boto3
import pytest
from boto3.dynamodb.types import TypeSerializer
from botocore.exceptions import ClientError

from adapters.observability import logger
from adapters.settings import SettingsError
from adapters.shard_map_store import SHARD_MAP_KEY
from adapters.stream_events import NotAStreamEvent
from doubles.lambda_context import FakeLambdaContext
from keydesign import Reading, ShardMap, format_ts
from tests.integration.hotkeys.conftest import CONTROL, Aws, invoke
from tests.unit.hotkeys.stream_events import REGION, TABLE, item_record, stream_arn, stream_event, stream_record

pytestmark = pytest.mark.integration


def items_for(aws: Aws, entities: list[str], per_entity: int, now_ms: int) -> list[dict[str, object]]:
    """Blocks of ``per_entity`` readings of each entity (each reading its own ingest batch: one block each)."""
    layout = aws.layout
    shard_map = ShardMap.initial(layout.bucket, 4)
    return [
        block.item()
        for entity in entities
        for i in range(per_entity)
        for block in layout.pack([(Reading(entity, f"{entity}-ev-{i}", now_ms - 1_000 + i, {"v": 1.0}), 1)], shard_map)
    ]


def entity_counters(aws: Aws) -> Counter[str]:
    """Writes per entity in every run the control table holds."""
    writes: Counter[str] = Counter()
    for item in aws.control_items("load#"):
        for entity, (_, counted, _, _) in json.loads(item["load"]["S"])["e"].items():
            writes[entity] += counted
    return writes


def test_a_mixed_batch_counts_only_user_writes_and_raises_no_alarm(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given inserts of three sensors, an update, a user delete, a TTL delete,
    # another table's records, another key schema and garbage
    now = time.time()
    items = items_for(aws, ["sensor-0001", "sensor-0002", "sensor-0003"], 3, int(now * 1000))
    records: list[Any] = [item_record(i, approx_s=now) for i in items]
    records += [
        item_record(items[0], approx_s=now, event_name="MODIFY"),
        item_record(items[3], approx_s=now, event_name="REMOVE"),
        item_record(items[6], approx_s=now, event_name="REMOVE", ttl=True),
        stream_record("", "", approx_s=now, keys={"id": {"S": "order-1"}}),
        item_record(items[1], approx_s=now, table="orders"),
        None,
        "garbage",
        {"eventName": "INSERT", "dynamodb": {"Keys": "pk"}},
    ]
    # When the handler gets the batch
    invocation = invoke(handler_module, stream_event(records), capsys)
    # Then nothing is reported failed (skipped records are not retryable)
    assert invocation.failed == []
    # And only the user writes are counted: 9 inserts, 1 update, 1 user delete
    assert invocation.metric("RecordsCounted") == 11
    assert invocation.metric("UserDeletesCounted") == 1
    assert invocation.metric("TtlDeletesIgnored") == 1
    assert invocation.metric("ForeignRecordsSkipped") == 2
    assert invocation.metric("MalformedRecordsSkipped") == 3
    assert entity_counters(aws) == {"sensor-0001": 4, "sensor-0002": 4, "sensor-0003": 3}
    # And no alarm: no notification, and the map is the bootstrapped one
    assert aws.notifications() == []
    stored = aws.dynamodb.get_item(TableName=CONTROL, Key=dict(SHARD_MAP_KEY))["Item"]
    assert stored["version"] == {"N": "0"}


def test_a_batch_of_nothing_but_garbage_is_handled(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    invocation = invoke(handler_module, stream_event([1, [], {"Records": []}, {"dynamodb": None}]), capsys)
    assert invocation.failed == []
    assert invocation.metric("MalformedRecordsSkipped") == 4
    assert aws.control_items("load#") == []


class FailingRunPut:
    """Wraps the DynamoDB client: putting a run of one window is throttled (after retries)."""

    def __init__(self, inner: Any, window_ms: int) -> None:
        self.inner = inner
        self.prefix = f"load#{format_ts(window_ms)}#"
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put_item(self, **kwargs: Any) -> Any:
        if kwargs["Item"]["pk"]["S"].startswith(self.prefix):
            self.refused += 1
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"}}, "PutItem"
            )
        return self.inner.put_item(**kwargs)


def test_a_run_that_cannot_be_stored_reports_exactly_its_records(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch over two one-minute windows, and the second window's run throttled
    now = time.time()
    minute = int(now // 60 * 60)
    items = items_for(aws, ["sensor-0001", "sensor-0003", "sensor-0002"], 3, int(now * 1000))
    records = [item_record(i, approx_s=minute - 30) for i in items[:6]]
    records += [item_record(i, approx_s=minute + 1) for i in items[6:]]
    faulty = FailingRunPut(aws.dynamodb, minute * 1000)
    monitor = aws.monitor(lambda: int(now * 1000), dynamodb=faulty)
    # When the batch is processed
    invocation = invoke(handler_module, stream_event(records), capsys, monitor=monitor)
    # Then exactly the second window's records are reported for redelivery
    expected = [r["dynamodb"]["SequenceNumber"] for r in records[6:]]
    assert invocation.failed == expected
    assert faulty.refused == 1
    assert invocation.metric("CounterWriteFailures") == 1
    assert invocation.metric("RecordsFailed") == 3
    # And when Lambda redelivers from the first failed record, with the fault gone,
    # every sensor is counted exactly once
    healthy = aws.monitor(lambda: int(now * 1000))
    again = invoke(handler_module, stream_event(records[6:]), capsys, monitor=healthy)
    assert again.failed == []
    assert entity_counters(aws) == {"sensor-0001": 3, "sensor-0002": 3, "sensor-0003": 3}


def test_an_unreadable_shard_map_fails_the_countable_records_and_counts_nothing(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a malformed map in the control table
    aws.dynamodb.put_item(TableName=CONTROL, Item={**SHARD_MAP_KEY, "map": {"S": "{oops"}, "version": {"N": "3"}})
    now = time.time()
    items = items_for(aws, ["sensor-0001"], 2, int(now * 1000))
    records: list[Any] = [item_record(i, approx_s=now) for i in items] + ["garbage"]
    # When a batch arrives, its countable records are handed back and nothing is counted
    invocation = invoke(handler_module, stream_event(records), capsys)
    assert invocation.failed == [r["dynamodb"]["SequenceNumber"] for r in records[:2]]
    assert aws.control_items("load#") == []
    assert invocation.metric("RecordsFailed") == 2
    assert any(r.getMessage().startswith("shard map unavailable") for r in caplog.records)
    # And once the map is repaired, the redelivered batch is counted once
    aws.dynamodb.delete_item(TableName=CONTROL, Key=dict(SHARD_MAP_KEY))
    fresh = aws.monitor(lambda: int(now * 1000))
    assert invoke(handler_module, stream_event(records), capsys, monitor=fresh).failed == []
    assert entity_counters(aws) == {"sensor-0001": 2}


def test_records_read_from_a_real_stream_are_counted(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given blocks written to the readings table (one of 500 readings, several KB), and its KEYS_ONLY
    # stream read back as Lambda would
    now = time.time()
    items = items_for(aws, ["sensor-0001", "sensor-0002"], 3, int(now * 1000))
    (big,) = aws.layout.pack(
        [
            (Reading("sensor-0002", f"big-{i}", int(now * 1000) - 2_000 + i, {"v": i * 1.37, "w": i % 7}), 1)
            for i in range(500)
        ],
        ShardMap.initial(aws.layout.bucket, 4),
    )
    assert big.write_units > 1
    for item in [*items, big.item()]:
        aws.dynamodb.put_item(TableName=TABLE, Item={k: TypeSerializer().serialize(v) for k, v in item.items()})
    records = _lambda_records_from_stream(aws)
    assert len(records) == 7
    # When the handler gets them
    invocation = invoke(handler_module, stream_event(records), capsys)
    # Then all are counted, each block with the write units its put was billed
    assert invocation.failed == []
    assert invocation.metric("RecordsCounted") == 7
    assert entity_counters(aws) == {"sensor-0001": 3, "sensor-0002": 4}
    units: Counter[str] = Counter()
    for item in aws.control_items("load#"):
        for entity, (wcu, _, _, _) in json.loads(item["load"]["S"])["e"].items():
            units[entity] += wcu
    assert units == {"sensor-0001": 3, "sensor-0002": 3 + big.write_units}


def _lambda_records_from_stream(aws: Aws) -> list[dict[str, Any]]:
    """GetRecords output, reshaped the way Lambda's event source mapping delivers it."""
    arn = aws.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
    # botocore addresses DynamoDB Streams by account-specific hosts that moto does not route.
    streams = boto3.client(
        "dynamodbstreams", region_name=REGION, endpoint_url=f"https://streams.dynamodb.{REGION}.amazonaws.com"
    )
    out: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON")
        page = streams.get_records(ShardIterator=iterator["ShardIterator"])
        for record in page["Records"]:
            body = dict(record["dynamodb"])
            body["ApproximateCreationDateTime"] = body["ApproximateCreationDateTime"].timestamp()
            out.append({**record, "dynamodb": body, "eventSourceARN": arn})
    assert all(r["eventSourceARN"] != stream_arn("other") for r in out)
    return out


def test_a_bad_environment_fails_the_cold_start_naming_the_variable(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOT_WINDOW", "7m")
    sys.modules.pop("hotkeys.handler", None)
    with pytest.raises(SettingsError, match="HOT_WINDOW"):
        importlib.import_module("hotkeys.handler")
    sys.modules.pop("hotkeys.handler", None)


@pytest.mark.parametrize("event", [{}, [], {"Records": None}, {"records": []}], ids=repr)
def test_an_event_no_stream_sends_fails_with_one_clear_logged_error(
    handler_module: ModuleType, monkeypatch: pytest.MonkeyPatch, event: Any
) -> None:
    # Given an event without a Records list (a hand-made invocation, a wrong trigger)
    errors: list[str] = []
    monkeypatch.setattr(logger, "error", lambda message, **_: errors.append(message))
    # When the handler gets it, Then it fails naming what is wrong, before any record is read
    with pytest.raises(NotAStreamEvent, match="Records"):
        handler_module.handler(event, FakeLambdaContext())
    assert errors == ["not a DynamoDB stream event; no load was counted"]
