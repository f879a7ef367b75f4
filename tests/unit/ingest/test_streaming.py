"""Writes start while the batch is still being keyed: nothing is lost, and a later value of a key
is never overtaken by an earlier one still in flight."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import logic
from ingest.decoding import decode_record
from local_runtime.faults import FaultInjectingDynamoDB, FaultPlan
from tests.unit.ingest.fakes import FakeDynamoDB, FakeSQS
from tests.unit.ingest.kinesis_events import FakeClock, as_json, kinesis_event, reading
from tests.unit.ingest.test_logic import NOW, _conserved, _ingestor

# (entity, event id, value): few entities and ids, so keys repeat within and across records
_reading = st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 10**6))


def _payload(rows: list[tuple[int, int, int]]) -> bytes:
    return as_json([reading(f"s-{e}", NOW - 60_000 + i, f"{e}-{i}", v=v) for e, i, v in rows])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(st.lists(_reading, min_size=1, max_size=30), min_size=1, max_size=12),
    plan=st.builds(
        FaultPlan,
        throttle_rate=st.sampled_from([0.0, 0.2]),
        partial_rate=st.sampled_from([0.0, 0.5]),
        partial_fraction=st.sampled_from([0.2, 1.0]),
        seed=st.integers(0, 1000),
    ),
    concurrency=st.integers(1, 4),
    segment=st.sampled_from([1, 25, 50]),
)
def test_duplicates_across_segments_keep_the_last_value_under_faults(
    records: list[list[tuple[int, int, int]]], plan: FaultPlan, concurrency: int, segment: int
) -> None:
    # Given records whose readings repeat keys across segments, DynamoDB throttling and
    # handing back unprocessed items, and segments small enough to be sent mid-batch
    dynamodb = FakeDynamoDB()
    clock = FakeClock()
    faulty = FaultInjectingDynamoDB(dynamodb, plan, sleep=clock.sleep)
    ingestor = _ingestor(faulty, FakeSQS(), clock=clock, concurrency=concurrency, segment_items=segment)
    try:
        # When the batch is ingested
        outcome = ingestor.ingest(kinesis_event([_payload(r) for r in records])["Records"], 10_000)
    finally:
        ingestor.close()
    # Then every reading is written, rejected or handed back, once
    _conserved(outcome)
    stored = {item["i"]["S"]: int(item["m"]["M"]["v"]["N"]) for item in dynamodb.items()}
    last: dict[str, tuple[int, int]] = {}  # event id -> (record, value) of its last occurrence
    for position, rows in enumerate(records):
        for e, i, v in rows:
            last[f"{e}-{i}"] = (position, v)
    for event_id, (position, value) in last.items():
        if not outcome.records[position].failed:
            # a key whose last reading counts as stored holds that reading: no earlier one landed after it
            assert stored.get(event_id) == value, event_id
    # and nothing is in the table that the batch did not send
    assert set(stored) <= set(last)


class _SlowFirst(FakeDynamoDB):
    """Holds the first call a while; records when each call starts and ends."""

    def __init__(self) -> None:
        super().__init__()
        self.spans: list[tuple[float, float, set[str]]] = []
        self._first = threading.Event()

    def batch_write_item(self, **kwargs: Any) -> Any:
        started = time.monotonic()
        if not self._first.is_set():
            self._first.set()
            time.sleep(0.2)
        response = super().batch_write_item(**kwargs)
        ids = {r["PutRequest"]["Item"]["i"]["S"] for rs in kwargs["RequestItems"].values() for r in rs}
        self.spans.append((started, time.monotonic(), ids))
        return response


def test_a_later_value_waits_for_the_earlier_write_of_its_key() -> None:
    # Given 25 readings (one full call, sent at once) and then the first of them again with a new value
    first = [reading("s-1", NOW - 1_000 + i, f"id-{i}", v=1) for i in range(25)]
    again = reading("s-1", NOW - 1_000, "id-0", v=2)
    dynamodb = _SlowFirst()
    ingestor = _ingestor(dynamodb, concurrency=4, segment_items=25)
    try:
        outcome = ingestor.ingest(kinesis_event([as_json(first), json.dumps(again).encode()])["Records"], 60_000)
    finally:
        ingestor.close()
    # Then both are written, the later value last: its call started after the slow first call ended
    assert outcome.written == 26 and not outcome.failed_records
    assert outcome.duplicates == 1
    (old,) = [s for s in dynamodb.spans if "id-0" in s[2] and len(s[2]) == 25]
    (new,) = [s for s in dynamodb.spans if s[2] == {"id-0"}]
    assert new[0] >= old[1]
    (item,) = [i for i in dynamodb.items() if i["i"]["S"] == "id-0"]
    assert item["m"]["M"]["v"]["N"] == "2"


def test_writes_start_before_the_batch_is_keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a batch of 8 segments' worth of readings, and a note of when each record is decoded
    decoded: list[float] = []

    def noting(*args: Any) -> Any:
        decoded.append(time.monotonic())
        return decode_record(*args)

    monkeypatch.setattr(logic, "decode_record", noting)
    dynamodb = _SlowFirst()
    payloads = [as_json([reading(f"s-{r}", NOW - 5_000 + i, f"{r}-{i}") for i in range(50)]) for r in range(8)]
    ingestor = _ingestor(dynamodb, concurrency=2, segment_items=50)
    try:
        outcome = ingestor.ingest(kinesis_event(payloads)["Records"], 60_000)
    finally:
        ingestor.close()
    # Then all are written in full calls, the first of them begun before the last record was decoded
    assert outcome.written == 400 and outcome.write.calls == 16
    assert min(start for start, _, _ in dynamodb.spans) < decoded[-1]
