"""The rejects publisher: message shape, truncation, SQS limits, retries."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

import pytest

from adapters.retry import Deadline
from doubles.clocks import ManualClock
from doubles.memory_sqs import MemorySQS
from ingest.rejects import MAX_REQUEST_BYTES, Reject, RejectsPublisher, reject_message
from local_runtime.faults import FaultInjectingSQS, FaultPlan, service_error

QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/readings-rejects"


def _reject(payload: bytes = b'{"entity_id":1}', index: int | None = 0, field: str = "entity_id") -> Reject:
    return Reject(payload, field, "must be a string, got int", "shardId-000000000001", "4965", None, index, "pk", "arn")


def _publisher(api: Any, clock: ManualClock[float], queue: str = QUEUE, **kwargs: Any) -> RejectsPublisher:
    return RejectsPublisher(
        api,
        queue,
        sleep=clock.sleep,
        rng=random.Random(4),
        wall_clock_ms=lambda: 1_795_000_000_000,
        **kwargs,
    )


def test_a_reject_message_says_what_where_and_why() -> None:
    body, truncated = reject_message(_reject(), payload_limit=1024, rejected_at_ms=1_795_000_000_000)
    message = json.loads(body)
    assert not truncated
    assert message == {
        "type": "reading-rejected",
        "version": 1,
        "reject_id": "shardId-000000000001/4965/-/0",
        "field": "entity_id",
        "reason": "must be a string, got int",
        "source": {
            "stream_arn": "arn",
            "shard_id": "shardId-000000000001",
            "sequence_number": "4965",
            "sub_sequence_number": None,
            "index": 0,
            "partition_key": "pk",
        },
        "readings": 1,
        "payload": '{"entity_id":1}',
        "payload_base64": None,
        "payload_bytes": 15,
        "payload_sha256": hashlib.sha256(b'{"entity_id":1}').hexdigest(),
        "payload_truncated": False,
        "rejected_at": "2026-11-18T11:06:40.000Z",
    }


def test_a_huge_payload_is_cut_with_a_note_and_the_message_stays_within_sqs_limits() -> None:
    huge = ("é" * 600_000).encode("utf-8")  # 1.2 MB that doubles again as \u escapes
    body, truncated = reject_message(_reject(huge), payload_limit=65_536, rejected_at_ms=0)
    message = json.loads(body)
    assert truncated and message["payload_truncated"] is True
    assert message["payload_bytes"] == len(huge)
    assert body.isascii()
    assert len(body) <= MAX_REQUEST_BYTES - 512
    assert huge.decode("utf-8").startswith(message["payload"])


def test_binary_payloads_travel_as_base64() -> None:
    body, _ = reject_message(_reject(b"\xff\x00\xfe"), payload_limit=1024, rejected_at_ms=0)
    message = json.loads(body)
    assert message["payload"] is None and message["payload_base64"] == "/wD+"


def test_batches_hold_at_most_10_entries_and_256_kib() -> None:
    clock = ManualClock(0.0)
    sqs = MemorySQS()
    rejects = [_reject(index=i) for i in range(23)] + [_reject(b"x" * 100_000, index=100 + i) for i in range(5)]
    report = _publisher(sqs, clock, payload_limit=120_000).publish(rejects, Deadline.never())
    assert report.sent == set(range(28)) and not report.unsent
    # 10 + 10 small ones, then 3 small and 2 of ~100 KB, then 2 and 1 big ones by size
    assert [len(c) for c in sqs.calls] == [10, 10, 5, 2, 1]
    assert all(sum(len(e["MessageBody"]) + 512 for e in call) <= MAX_REQUEST_BYTES for call in sqs.calls)
    assert len(sqs.messages) == 28


def test_entries_sqs_fails_are_retried_and_sender_faults_are_not() -> None:
    clock = ManualClock(0.0)

    class Picky(MemorySQS):
        def send_message_batch(self, **kwargs: Any) -> Any:
            response = dict(super().send_message_batch(**kwargs))
            if len(self.calls) == 1:
                response["Failed"] = [
                    {"Id": "0", "SenderFault": True, "Code": "InvalidMessageContents", "Message": "no"},
                    {"Id": "1", "SenderFault": False, "Code": "InternalError", "Message": "later"},
                ]
            return response

    sqs = Picky()
    report = _publisher(sqs, clock).publish([_reject(index=i) for i in range(3)], Deadline.never())
    assert report.sent == {1, 2}
    assert report.unsent == {0: "SQS refused the message: InvalidMessageContents: no"}
    assert report.retried == 1 and report.calls == 2


def test_a_permanent_error_is_not_retried() -> None:
    class Gone:
        calls = 0

        def send_message_batch(self, **kwargs: Any) -> Any:
            Gone.calls += 1
            raise service_error("AWS.SimpleQueueService.NonExistentQueue", "SendMessageBatch")

    report = _publisher(Gone(), ManualClock(0.0)).publish([_reject()], Deadline.never())
    assert Gone.calls == 1 and "NonExistentQueue" in report.unsent[0]


def test_a_failing_queue_is_retried_a_bounded_number_of_times_then_handed_back() -> None:
    clock = ManualClock(0.0)
    sqs = FaultInjectingSQS(MemorySQS(), FaultPlan(throttle_rate=1.0, throttle_code="ServiceUnavailable"))
    report = _publisher(sqs, clock).publish([_reject(index=i) for i in range(12)], Deadline.never())
    assert set(report.unsent) == set(range(12))
    assert sqs.counters.calls == 10  # two batches, five attempts each
    assert "gave up after 5 attempts" in report.unsent[0]


def test_fifo_queues_get_a_group_and_a_stable_deduplication_id() -> None:
    sqs = MemorySQS()
    publisher = _publisher(sqs, ManualClock(0.0), queue=QUEUE + ".fifo")
    publisher.publish([_reject()], Deadline.never())
    publisher.publish([_reject()], Deadline.never())
    first, second = sqs.messages
    assert first["MessageGroupId"] == "shardId-000000000001"
    assert first["MessageDeduplicationId"] == second["MessageDeduplicationId"]
    assert len(first["MessageDeduplicationId"]) == 64


def test_no_time_left_sends_nothing() -> None:
    clock = ManualClock(0.0)
    sqs = MemorySQS()
    report = _publisher(sqs, clock).publish([_reject()], Deadline.after_ms(0, clock))
    assert sqs.calls == [] and 0 in report.unsent


@pytest.mark.parametrize("limit", [0, 200_000])
def test_the_payload_limit_is_checked(limit: int) -> None:
    with pytest.raises(ValueError, match="payload_limit"):
        RejectsPublisher(MemorySQS(), QUEUE, payload_limit=limit)
