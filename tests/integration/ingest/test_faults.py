"""Faults moto never produces, injected around the real (moto-backed) clients.

Each test checks the conservation rule (every reading written, rejected, or
in a record reported for redelivery) through ``invoke``, and then follows
Lambda's own retry semantics: redeliver from the lowest reported sequence
number onward, and check nothing ends up stored twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

import pytest

from adapters.clients import client
from doubles.clocks import ManualClock
from doubles.lambda_context import FakeLambdaContext
from ingest.logic import BatchOutcome, Ingestor
from ingest.settings import IngestSettings
from keydesign import Layout
from local_runtime.faults import FaultInjectingDynamoDB, FaultInjectingSQS, FaultPlan, service_error
from tests.integration.ingest.conftest import Aws, now_ms
from tests.integration.ingest.helpers import invoke
from tests.integration.mocked_aws import Invocation, create_readings_table, fresh_handler
from tests.unit.ingest.kinesis_events import as_json, kinesis_event, reading

pytestmark = pytest.mark.integration


def _use(handler_module: ModuleType, monkeypatch: pytest.MonkeyPatch, ingestor: Ingestor) -> None:
    """The handler the module's factory makes around ``ingestor`` (the local runtime's way)."""
    handler_module.INGESTOR.close()
    monkeypatch.setattr(handler_module, "INGESTOR", ingestor)
    monkeypatch.setattr(handler_module, "handler", handler_module.create_handler(ingestor))


def _batch(entities: int = 8, per_record: int = 30, start: int | None = None) -> tuple[dict[str, Any], int]:
    start = now_ms() - 600_000 if start is None else start
    payloads = [
        as_json([reading(f"sensor-{e:03d}", start + i, f"e{e}-{i}", temp=float(i)) for i in range(per_record)])
        for e in range(entities)
    ]
    return kinesis_event(payloads), entities * per_record


def _redeliver(event: dict[str, Any], first: Invocation[BatchOutcome]) -> dict[str, Any]:
    """What Lambda sends next: the batch from the lowest failed sequence number on."""
    failed = first.failed
    assert failed, "nothing to redeliver"
    lowest = min(failed, key=int)
    return {"Records": [r for r in event["Records"] if int(r["kinesis"]["sequenceNumber"]) >= int(lowest)]}


def test_unprocessed_items_on_the_first_calls_are_retried_until_written(
    aws: Aws, handler_module: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given DynamoDB hands back half of the items of the first 5 calls
    injector = FaultInjectingDynamoDB(client("dynamodb", max_attempts=1), FaultPlan(partial_first=5, seed=7))
    clock = ManualClock(0.0)
    settings = IngestSettings.from_env()
    _use(
        handler_module, monkeypatch, Ingestor.from_settings(settings, dynamodb=injector, clock=clock, sleep=clock.sleep)
    )
    event, total = _batch()

    # When the batch is ingested
    result = invoke(handler_module, event, capsys)

    # Then the faults happened, were retried with backoff, and every reading is stored once
    assert injector.counters.partial_calls == 5 and injector.counters.held_back > 0
    assert result.failed == []
    assert len(aws.readings()) == total
    assert result.metric("ItemsRetried") == injector.counters.held_back
    assert result.metric("BatchWriteCalls") == injector.counters.calls
    assert clock.sleeps and all(0 <= s <= 5.0 for s in clock.sleeps)


class HotPartitionThrottle:
    """DynamoDB with some partitions over their 1,000 WCU: their items come back
    unprocessed; a call made only of them fails with ProvisionedThroughputExceeded."""

    def __init__(self, inner: Any, hot_pks: set[str]) -> None:
        self.inner = inner
        self.hot_pks = hot_pks
        self.calls = 0

    def batch_write_item(self, **kwargs: Any) -> Mapping[str, Any]:
        self.calls += 1
        send: dict[str, list[Any]] = {}
        back: dict[str, list[Any]] = {}
        for table, requests in kwargs["RequestItems"].items():
            for request in requests:
                hot = request["PutRequest"]["Item"]["pk"]["S"] in self.hot_pks
                (back if hot else send).setdefault(table, []).append(request)
        if not send:
            raise service_error("ProvisionedThroughputExceededException", "BatchWriteItem")
        response = dict(self.inner.batch_write_item(**{**kwargs, "RequestItems": send}))
        response["UnprocessedItems"] = back
        return response


def test_throttled_until_time_runs_out_reports_exactly_the_affected_records(
    aws: Aws, handler_module: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given one hot partition that throttles every write for the whole invocation
    start = now_ms() - 600_000
    event, total = _batch(entities=8, start=start)
    hot_entity = "sensor-005"
    (hot_pk,) = aws.layout.partitions_of(hot_entity, start, aws.shard_map)
    hot_entities = {
        f"sensor-{e:03d}"
        for e in range(8)
        if aws.layout.partitions_of(f"sensor-{e:03d}", start, aws.shard_map) == [hot_pk]
    }
    assert hot_entity in hot_entities and len(hot_entities) < 8
    throttle = HotPartitionThrottle(client("dynamodb", max_attempts=1), {hot_pk})
    clock = ManualClock(0.0)
    settings = IngestSettings.from_env()
    _use(
        handler_module, monkeypatch, Ingestor.from_settings(settings, dynamodb=throttle, clock=clock, sleep=clock.sleep)
    )

    # When the batch is ingested with 10 s left (2 s kept back as the margin)
    result = invoke(handler_module, event, capsys, FakeLambdaContext(remaining_ms=10_000))

    # Then the retries stopped at the deadline, never after it, and before it only by a wait that
    # would have ended past it (full jitter draws up to RETRY_MAX_DELAY_MS, 5 s; the hot blocks are
    # one call's, so one retry loop decides) ...
    assert 8.0 - 5.0 < clock() <= 8.0
    # ... exactly the records of the hot entities are reported, with the reason
    hot_sequences = {
        r["kinesis"]["sequenceNumber"]
        for r, e in zip(event["Records"], range(8), strict=True)
        if f"sensor-{e:03d}" in hot_entities
    }
    assert set(result.failed) == hot_sequences
    assert all("time budget ran out" in (r.reason or "") for r in result.outcome.failed_records)
    assert result.metric("ThrottledCalls") >= 1
    assert {r.entity_id for r in aws.readings()} == {f"sensor-{e:03d}" for e in range(8)} - hot_entities

    # When the partition cools down and Lambda redelivers from the first failed record on
    _use(handler_module, monkeypatch, Ingestor.from_settings(settings))
    second = invoke(handler_module, _redeliver(event, result), capsys)

    # Then everything is stored, and nothing twice: a block per entity, the same blocks again
    assert second.failed == []
    assert len(aws.readings()) == total
    assert len(aws.table_items()) == 8


def test_every_call_throttled_with_no_time_left_hands_the_whole_batch_back(
    aws: Aws, handler_module: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    injector = FaultInjectingDynamoDB(client("dynamodb", max_attempts=1), FaultPlan(throttle_rate=1.0))
    clock = ManualClock(0.0)
    _use(
        handler_module,
        monkeypatch,
        Ingestor.from_settings(IngestSettings.from_env(), dynamodb=injector, clock=clock, sleep=clock.sleep),
    )
    event, total = _batch(entities=3)
    rejected_only = kinesis_event([b"not json"], first_position=3)["Records"]
    event["Records"].extend(rejected_only)

    result = invoke(handler_module, event, capsys, FakeLambdaContext(remaining_ms=4_000))

    # Every record with readings is handed back; the one whose only reading was rejected is done
    assert result.failed == [r["kinesis"]["sequenceNumber"] for r in event["Records"][:3]]
    assert aws.table_items() == []
    assert len(aws.rejects()) == 1
    assert injector.counters.throttled == injector.counters.calls > 3
    assert result.outcome.retry == total


def test_no_time_left_at_all_attempts_nothing_and_hands_everything_back(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    event, total = _batch(entities=2)
    result = invoke(handler_module, event, capsys, FakeLambdaContext(remaining_ms=1_500))
    assert len(result.failed) == 2
    assert result.metric("BatchWriteCalls") == 0
    assert aws.table_items() == []
    assert result.outcome.retry == total


def test_rejects_queue_down_hands_back_only_the_records_with_rejects(
    aws: Aws, handler_module: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given SQS fails every SendMessageBatch
    sqs = FaultInjectingSQS(client("sqs"), FaultPlan(throttle_rate=1.0, throttle_code="ServiceUnavailable"))
    clock = ManualClock(0.0)
    settings = IngestSettings.from_env()
    _use(handler_module, monkeypatch, Ingestor.from_settings(settings, sqs=sqs, clock=clock, sleep=clock.sleep))
    ts = now_ms() - 60_000
    payloads = [
        as_json([reading("sensor-a", ts, "a1")]),
        as_json([reading("sensor-b", ts, "b1"), {"entity_id": "sensor-b"}]),  # half valid
        as_json([reading("sensor-c", ts, "c1")]),
    ]
    event = kinesis_event(payloads)

    first = invoke(handler_module, event, capsys)

    # Then the valid readings are written, and only the record whose reject could not be queued is handed back
    assert first.failed == [event["Records"][1]["kinesis"]["sequenceNumber"]]
    assert sorted(r.event_id for r in aws.readings()) == ["a1", "b1", "c1"]
    assert aws.rejects() == []
    assert "reject not queued" in (first.outcome.failed_records[0].reason or "")
    assert sqs.counters.calls == 5  # retried with backoff, then given up

    # When SQS recovers and Lambda redelivers
    _use(handler_module, monkeypatch, Ingestor.from_settings(settings))
    second = invoke(handler_module, _redeliver(event, first), capsys)

    # Then the reject is queued once and the table is unchanged
    assert second.failed == []
    (reject,) = aws.rejects()
    assert reject["field"] == "timestamp" and reject["source"]["index"] == 1
    assert len(aws.readings()) == 3


def test_sqs_failing_some_entries_once_is_retried_transparently(
    aws: Aws, handler_module: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sqs = FaultInjectingSQS(client("sqs"), FaultPlan(partial_first=2, partial_fraction=0.5, seed=3))
    clock = ManualClock(0.0)
    _use(
        handler_module,
        monkeypatch,
        Ingestor.from_settings(IngestSettings.from_env(), sqs=sqs, clock=clock, sleep=clock.sleep),
    )
    payloads = [as_json([{"entity_id": f"bad-{i}", "timestamp": "yesterday"} for i in range(25)])]
    result = invoke(handler_module, kinesis_event(payloads), capsys)
    assert result.failed == []
    assert sqs.counters.held_back > 0
    rejects = aws.rejects()
    assert sorted(r["source"]["index"] for r in rejects) == list(range(25))


def test_a_missing_per_period_table_hands_its_readings_back(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given daily tables where today's exists and yesterday's does not (yet, or any more)
    monkeypatch.setenv("TABLE_PERIOD", "day")
    monkeypatch.setenv("GRACE", "2d")  # yesterday's period still takes late readings
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="day")
    now = now_ms()
    today, yesterday = layout.table_for(now), layout.table_for(now - 86_400_000)
    assert today != yesterday
    create_readings_table(aws.dynamodb, today)
    with fresh_handler("ingest.handler", "INGESTOR") as module:
        payloads = [
            as_json([reading("sensor-p", now - 1000 - i, f"t{i}") for i in range(30)]),
            as_json([reading("sensor-p", now - 86_400_000 - i, f"y{i}") for i in range(5)]),
        ]
        event = kinesis_event(payloads)
        result = invoke(module, event, capsys)

    # Then today's readings are written, each with its retention TTL (exact retention inside a table
    # dropped a period later), and yesterday's record is handed back
    assert result.failed == [event["Records"][1]["kinesis"]["sequenceNumber"]]
    (item,) = aws.table_items(today)  # today's 30 readings of the entity, within a second: one block
    assert len(aws.readings(today)) == 30 and "ttl" in item
    assert "ResourceNotFoundException" in (result.outcome.failed_records[0].reason or "")
