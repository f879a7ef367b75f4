"""PutRecords with retries of the failed records only; the summary adds up."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

import pytest

from doubles.clocks import ManualClock
from local_runtime.faults import FaultInjectingKinesis, FaultPlan, service_error
from producer.packing import PackedRecord, Packer
from producer.publisher import Publisher, publish
from producer.sources import SourceItem
from producer.synthetic import Workload, generate


class FakeStream:
    """PutRecords that fails the records whose partition key is in ``refuse`` ``times`` times."""

    def __init__(self, refuse: set[str] | None = None, times: int = 1) -> None:
        self.refuse = refuse or set()
        self.times = times
        self.calls: list[list[Mapping[str, Any]]] = []
        self.stored: list[bytes] = []
        self._failed: dict[str, int] = {}

    def put_records(self, **kwargs: Any) -> Mapping[str, Any]:
        records = kwargs["Records"]
        assert len(records) <= 500
        self.calls.append(records)
        out: list[dict[str, Any]] = []
        failed = 0
        for record in records:
            key = record["PartitionKey"]
            if key in self.refuse and self._failed.get(key, 0) < self.times:
                self._failed[key] = self._failed.get(key, 0) + 1
                out.append({"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "Rate exceeded"})
                failed += 1
            else:
                self.stored.append(record["Data"])
                out.append({"SequenceNumber": str(len(self.stored)), "ShardId": "shardId-000000000000"})
        return {"FailedRecordCount": failed, "Records": out}


def _records(keys: list[str]) -> list[PackedRecord]:
    return [PackedRecord(k, json.dumps([{"n": i}]).encode(), 1) for i, k in enumerate(keys)]


def _publisher(api: Any, clock: ManualClock[float], **kwargs: Any) -> Publisher:
    return Publisher(api, "readings", clock=clock, sleep=clock.sleep, rng=random.Random(2), **kwargs)


def test_only_the_failed_records_are_sent_again() -> None:
    stream = FakeStream(refuse={"b", "d"})
    clock = ManualClock(0.0)
    publisher = _publisher(stream, clock)
    publisher.send(_records(["a", "b", "c", "d"]))
    assert [[r["PartitionKey"] for r in call] for call in stream.calls] == [["a", "b", "c", "d"], ["b", "d"]]
    assert publisher.summary.records_sent == 4 and publisher.summary.records_retried == 2
    assert publisher.summary.errors == {"ProvisionedThroughputExceededException": 2}
    assert len(clock.sleeps) == 1 and 0 <= clock.sleeps[0] <= 0.1


def test_records_failing_every_attempt_are_counted_failed() -> None:
    stream = FakeStream(refuse={"b"}, times=100)
    publisher = _publisher(stream, ManualClock(0.0), max_attempts=3)
    unsent = publisher.send(_records(["a", "b"]))
    assert len(stream.calls) == 3
    assert [r.partition_key for r in unsent] == ["b"]  # handed back, so a redrive keeps its message
    assert (publisher.summary.records_sent, publisher.summary.records_failed) == (1, 1)
    assert "gave up after 3 attempts" in (publisher.summary.failure or "")


def test_refused_records_are_retried_after_injected_backoff_sleeps_then_handed_back_and_reported() -> None:
    # Given a stream that refuses one record on every call, and a publisher allowed 4 attempts
    stream = FakeStream(refuse={"b"}, times=100)
    clock = ManualClock(0.0)
    publisher = _publisher(stream, clock, max_attempts=4)
    # When the batch is sent
    unsent = publisher.send(_records(["a", "b", "c"]))
    # Then the refused record alone was sent again, after a backoff on the injected sleep before each retry
    # (full jitter under 100 ms, 200 ms, 400 ms) and none after the last attempt: no real time passed
    assert [[r["PartitionKey"] for r in call] for call in stream.calls] == [["a", "b", "c"], ["b"], ["b"], ["b"]]
    assert len(clock.sleeps) == 3 and all(0 <= s <= 0.1 * 2**i for i, s in enumerate(clock.sleeps))
    # And it is handed back and reported, never lost: sent + failed = every record
    assert [r.partition_key for r in unsent] == ["b"]
    summary = publisher.summary
    assert (summary.records_sent, summary.records_failed, summary.records_retried) == (2, 1, 3)
    assert summary.errors == {"ProvisionedThroughputExceededException": 4}
    assert summary.failure == "ProvisionedThroughputExceededException; gave up after 4 attempts"


def test_a_throttled_call_is_retried_whole_and_a_missing_stream_fails_at_once() -> None:
    clock = ManualClock(0.0)
    faulty = FaultInjectingKinesis(FakeStream(), FaultPlan(throttle_first=2))
    publisher = _publisher(faulty, clock)
    publisher.send(_records(["a", "b"]))
    assert faulty.counters.calls == 3 and publisher.summary.records_sent == 2

    class Missing:
        calls = 0

        def put_records(self, **kwargs: Any) -> Any:
            Missing.calls += 1
            raise service_error("ResourceNotFoundException", "PutRecords", "Stream readings not found")

    publisher = _publisher(Missing(), clock)
    publisher.send(_records(["a", "b"]))
    assert Missing.calls == 1 and publisher.summary.records_failed == 2
    assert publisher.summary.failure == "ResourceNotFoundException: Stream readings not found"


def test_client_side_jitter_delays_each_call() -> None:
    clock = ManualClock(0.0)
    publisher = _publisher(FakeStream(), clock, jitter_ms=50)
    publisher.send(_records(["a"]))
    publisher.send(_records(["b"]))
    assert len(clock.sleeps) == 2 and all(0 <= s <= 0.05 for s in clock.sleeps)


def test_a_stream_arn_is_sent_as_stream_arn() -> None:
    seen: list[dict[str, Any]] = []

    class Spy(FakeStream):
        def put_records(self, **kwargs: Any) -> Mapping[str, Any]:
            seen.append(kwargs)
            return super().put_records(**kwargs)

    arn = "arn:aws:kinesis:eu-west-1:123456789012:stream/readings"
    Publisher(Spy(), arn).send(_records(["a"]))
    assert seen[0]["StreamARN"] == arn and "StreamName" not in seen[0]


def test_publish_conserves_readings_through_partial_failures() -> None:
    clock = ManualClock(0.0)
    stream = FakeStream()
    faulty = FaultInjectingKinesis(stream, FaultPlan(partial_rate=0.5, partial_fraction=0.3, seed=4))
    workload = Workload(
        entities=40, rate=3_000, hot=(("sensor-alpha-001", 2_000),), duration_s=2, start_ms=1_795_000_000_000
    )
    summary = publish(generate(workload), _publisher(faulty, clock), Packer(max_record_bytes=8_192), clock=clock)
    assert summary.readings_in == workload.total == 10_000
    assert summary.readings_sent == 10_000 and summary.readings_failed == 0
    assert summary.records_retried == faulty.counters.held_back > 0
    delivered = [r for data in stream.stored for r in json.loads(data)]
    assert sorted(r["event_id"] for r in delivered) == sorted(f"w0-{n}" for n in range(10_000))
    assert summary.readings_sent / summary.records_sent > 20  # packing: many readings per record


def test_invalid_readings_are_counted_not_sent() -> None:
    items = [
        SourceItem(1, {"entity_id": "a", "timestamp": 1_795_000_000_000, "measures": {"t": 1}}),
        SourceItem(2, {"entity_id": "a#b", "timestamp": 1_795_000_000_000, "measures": {"t": 1}}),
        SourceItem(3, None, "line 3: not JSON"),
    ]
    stream = FakeStream()
    summary = publish(items, _publisher(stream, ManualClock(0.0)), Packer())
    assert (summary.readings_in, summary.readings_sent, summary.readings_invalid) == (3, 1, 2)
    assert summary.invalid_examples[0].startswith("line 2: entity_id:")
    unchecked = publish(items[:2], _publisher(FakeStream(), ManualClock(0.0)), Packer(), validate=False)
    assert unchecked.readings_sent == 2
    # A reading no Kinesis record can hold is counted invalid too, with its line, and the rest still go
    huge = SourceItem(4, {"entity_id": "a", "timestamp": 1_795_000_000_000, "measures": {"t": 1}, "x": "y" * 2**20})
    oversize = publish([huge, items[0]], _publisher(FakeStream(), ManualClock(0.0)), Packer(), validate=False)
    assert (oversize.readings_sent, oversize.readings_invalid) == (1, 1)
    (example,) = oversize.invalid_examples
    assert example.startswith("line 4: a reading of") and example.endswith("does not fit in a 1 MiB Kinesis record")


def test_pacing_sends_at_the_rate_of_the_workload() -> None:
    clock = ManualClock(0.0)
    workload = Workload(entities=5, rate=100, duration_s=3, start_ms=1_795_000_000_000)
    summary = publish(
        generate(workload), _publisher(FakeStream(), clock), Packer(), pace=True, clock=clock, sleep=clock.sleep
    )
    assert summary.readings_sent == 300
    assert 2.9 <= summary.elapsed_s <= 3.1


def test_a_slow_paced_stream_is_sent_every_linger_not_when_a_call_is_full() -> None:
    # Given 10 readings a second for 3 s, paced, with a 250 ms linger
    clock, stream = ManualClock(0.0), FakeStream()
    workload = Workload(entities=5, rate=10, duration_s=3, start_ms=1_795_000_000_000)
    publisher = _publisher(stream, clock)
    publish(generate(workload), publisher, Packer(), pace=True, linger_ms=250, clock=clock, sleep=clock.sleep)
    # Then they go out in a call about every quarter second, not in one call at the end
    assert publisher.summary.readings_sent == 30 and len(stream.calls) >= 10


@pytest.mark.parametrize("attempts", [0, -1])
def test_max_attempts_must_be_positive(attempts: int) -> None:
    with pytest.raises(ValueError):
        Publisher(FakeStream(), "s", max_attempts=attempts)
