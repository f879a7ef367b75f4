"""The fault injector itself: it must really do what it says, or the fault tests prove nothing."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from doubles.memory_dynamo import MemoryDynamo
from doubles.memory_sqs import MemorySQS
from local_runtime.faults import FaultInjectingDynamoDB, FaultInjectingKinesis, FaultInjectingSQS, FaultPlan


def _request(count: int) -> dict[str, Any]:
    return {"readings": [{"PutRequest": {"Item": {"pk": {"S": "p"}, "sk": {"S": str(i)}}}} for i in range(count)]}


def test_the_first_calls_throttle_with_the_services_own_error() -> None:
    inner = MemoryDynamo(tables={"readings"}, record_calls=True)
    faulty = FaultInjectingDynamoDB(inner, FaultPlan(throttle_first=2))
    for _ in range(2):
        with pytest.raises(ClientError) as caught:
            faulty.batch_write_item(RequestItems=_request(3))
        assert caught.value.response["Error"]["Code"] == "ProvisionedThroughputExceededException"
    assert inner.calls == []
    faulty.batch_write_item(RequestItems=_request(3))
    assert len(inner.items()) == 3
    assert faulty.counters.calls == 3 and faulty.counters.throttled == 2


def test_held_back_items_never_reach_the_inner_client_and_come_back_unprocessed() -> None:
    inner = MemoryDynamo(tables={"readings"})
    faulty = FaultInjectingDynamoDB(inner, FaultPlan(partial_first=1, partial_fraction=0.4, seed=1))
    response = faulty.batch_write_item(RequestItems=_request(10))
    unprocessed = response["UnprocessedItems"]["readings"]
    assert len(unprocessed) == 4 == faulty.counters.held_back
    written = {k[1] for k in inner.table("readings")}
    assert written.isdisjoint({u["PutRequest"]["Item"]["sk"]["S"] for u in unprocessed})
    assert len(written) == 6


def test_kinesis_partial_failures_keep_the_record_order() -> None:
    class Stream:
        def put_records(self, **kwargs: Any) -> Any:
            return {
                "FailedRecordCount": 0,
                "Records": [{"SequenceNumber": r["Data"].decode(), "ShardId": "s"} for r in kwargs["Records"]],
            }

    faulty = FaultInjectingKinesis(Stream(), FaultPlan(partial_first=1, partial_fraction=0.5, seed=5))
    records = [{"Data": str(i).encode(), "PartitionKey": "k"} for i in range(6)]
    response = faulty.put_records(StreamName="s", Records=records)
    assert response["FailedRecordCount"] == 3
    for i, result in enumerate(response["Records"]):
        assert result.get("SequenceNumber") in (None, str(i))


def test_sqs_failed_entries_are_reported_by_id() -> None:
    inner = MemorySQS()
    faulty = FaultInjectingSQS(inner, FaultPlan(partial_first=1, partial_fraction=0.5, seed=2))
    entries = [{"Id": str(i), "MessageBody": "m"} for i in range(4)]
    response = faulty.send_message_batch(QueueUrl="q", Entries=entries)
    failed = {f["Id"] for f in response["Failed"]}
    assert len(failed) == 2 and len(inner.messages) == 2
    assert failed.isdisjoint({m["Id"] for m in inner.messages})


def test_a_plan_parses_from_a_spec_string() -> None:
    plan = FaultPlan.parse(
        "throttle=2, partial=3, fraction=0.25, rate=0.1, code=ThrottlingException, latency=5, seed=9"
    )
    assert plan == FaultPlan(
        throttle_first=2,
        partial_first=3,
        partial_fraction=0.25,
        throttle_rate=0.1,
        throttle_code="ThrottlingException",
        latency_ms=5.0,
        seed=9,
    )
    assert FaultPlan.parse("") == FaultPlan()


@pytest.mark.parametrize("spec", ["throttle", "explode=1", "rate=lots", "rate=2", "throttle=-1"])
def test_a_bad_spec_is_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="fault"):
        FaultPlan.parse(spec)
