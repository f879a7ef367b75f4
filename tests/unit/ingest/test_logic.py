"""The ingest logic with in-memory fakes: blocks, attribution, collapse, poison blocks, conservation."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.kinesis_stream_event import KinesisStreamRecord
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.batch_writer import BatchWriter
from adapters.shard_map_source import StaticShardMap
from adapters.table_builds import ASK_EVERY_MS, TableBuilds
from doubles.clocks import ManualClock
from doubles.memory_dynamo import MemoryDynamo
from doubles.memory_sqs import MemorySQS
from ingest.logic import BatchOutcome, Ingestor, RecordNotIngested
from ingest.rejects import RejectsPublisher
from keydesign import Layout, ShardMap, decode_block
from local_runtime.faults import FaultInjectingDynamoDB, FaultPlan
from tests.unit.ingest.kinesis_events import as_json, batch, kinesis_event, parsed, reading
from tests.unit.ingest.stored import block_of, stored_readings

NOW = 1_795_000_000_000
QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/rejects"


def _ingestor(
    dynamodb: Any,
    sqs: Any | None = None,
    *,
    kind: str = "hybrid",
    clock: ManualClock[float] | None = None,
    concurrency: int = 4,
    period: str | None = None,
    max_age_ms: int = 7 * 86_400_000,
    max_future_ms: int = 300_000,
    table_builds: TableBuilds | None = None,
) -> Ingestor:
    clock = clock or ManualClock(0.0)
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings", table_period=period)
    return Ingestor(
        layout=layout,
        shard_maps=StaticShardMap(ShardMap.initial(layout.bucket, 4)),
        writer=BatchWriter(dynamodb, concurrency=concurrency, clock=clock, sleep=clock.sleep, rng=random.Random(3)),
        rejects=RejectsPublisher(sqs or MemorySQS(), QUEUE, sleep=clock.sleep),
        retention_ms=30 * 86_400_000,
        max_future_ms=max_future_ms,
        max_age_ms=max_age_ms,
        prebuild_periods=2,
        deadline_margin_ms=2_000,
        clock=clock,
        wall_clock_ms=lambda: NOW,
        rng=random.Random(5),
        table_builds=table_builds,
    )


def _conserved(outcome: BatchOutcome) -> None:
    for record in outcome.records:
        assert record.readings == record.written + record.rejected + record.retry


def test_a_batch_is_stored_as_one_block_per_entity_with_the_largest_sequence_number_as_version() -> None:
    # Given two records with readings of two entities, a few seconds apart
    dynamodb = MemoryDynamo(tables={"readings"})
    payloads = [
        as_json([reading("s-a", NOW - 5_000, "a1"), reading("s-b", NOW - 4_000, "b1")]),
        as_json([reading("s-a", NOW - 3_000, "a2")]),
    ]
    records = batch(payloads)
    # When they are ingested
    outcome = _ingestor(dynamodb).ingest(records, 60_000)
    # Then each entity's readings are one block, whose version is the last record that fed it
    blocks = {item["sk"]["S"].split("#")[0]: item for item in dynamodb.items()}
    assert sorted(blocks) == ["s-a", "s-b"]
    assert [r.event_id for r in block_of(blocks["s-a"])] == ["a1", "a2"]
    assert [(r.event_id, r.measures) for r in block_of(blocks["s-b"])] == [("b1", {"temp": 21.5})]
    versions = {e: decode_block(e, blocks[e]["b"]["B"])[0].version for e in blocks}
    assert versions == {"s-a": records[1].version, "s-b": records[0].version}
    assert outcome.written == 3 and outcome.blocks == 2 and outcome.readings_stored == 3
    assert outcome.write_units == 2  # two small blocks: one write unit each


def test_a_duplicate_whose_surviving_block_fails_fails_every_record_it_came_from() -> None:
    # Given the same reading in records 0 and 2, and DynamoDB that never takes its block
    same = as_json(reading("sensor-d", NOW - 1000, "same"))
    other = as_json(reading("sensor-o", NOW - 1000, "other"))

    class RefuseSame(MemoryDynamo):
        def batch_write_item(self, **kwargs: Any) -> Any:
            held = [r for rs in kwargs["RequestItems"].values() for r in rs if _entity(r) == "sensor-d"]
            kept = {t: [r for r in rs if _entity(r) != "sensor-d"] for t, rs in kwargs["RequestItems"].items()}
            response = dict(super().batch_write_item(RequestItems={t: rs for t, rs in kept.items() if rs}))
            if held:
                response["UnprocessedItems"] = {"readings": held}
            return response

    clock = ManualClock(0.0)
    outcome = _ingestor(RefuseSame(tables={"readings"}), clock=clock).ingest(batch([same, other, same]), 5_000)

    # Then both records that carried it are redelivered, not just the one whose copy won
    assert [r.failed for r in outcome.records] == [True, False, True]
    assert outcome.duplicates == 1
    _conserved(outcome)


def _entity(request: dict[str, Any]) -> str:
    return str(request["PutRequest"]["Item"]["sk"]["S"]).split("#")[0]


def test_a_block_dynamodb_refuses_becomes_a_reject_for_every_reading_that_made_it() -> None:
    sqs = MemorySQS()
    dynamodb = MemoryDynamo(
        tables={"readings"}, refuse=lambda item: "poison" if item["sk"]["S"].startswith("p#") else None
    )
    payloads = [as_json([reading("p", NOW - 1, "x"), reading("s", NOW - 2, "ok")]), as_json(reading("p", NOW - 1, "x"))]
    outcome = _ingestor(dynamodb, sqs).ingest(batch(payloads), 60_000)
    assert [(r.written, r.rejected, r.retry) for r in outcome.records] == [(1, 1, 0), (0, 1, 0)]
    bodies = [json.loads(m["MessageBody"]) for m in sqs.messages]
    assert [(b["field"], b["source"]["index"]) for b in bodies] == [("item", 0), ("item", None)]
    assert all("poison" in b["reason"] for b in bodies)
    assert [r.event_id for r in stored_readings(dynamodb.items())] == ["ok"]


def test_settle_raises_for_exactly_the_records_to_redeliver() -> None:
    event = kinesis_event([as_json(reading("s", NOW - 1, "a")), b"junk"])
    outcome = _ingestor(MemoryDynamo(tables={"other"})).ingest(parsed(event), 60_000)
    first, second = (KinesisStreamRecord(r) for r in event["Records"])
    with pytest.raises(RecordNotIngested, match="ResourceNotFoundException"):
        outcome.settle(first)
    assert outcome.settle(second) == second.kinesis.sequence_number
    stranger = KinesisStreamRecord(kinesis_event([b"x"], first_position=9)["Records"][0])
    with pytest.raises(RecordNotIngested, match="not part of the ingested batch"):
        outcome.settle(stranger)


@pytest.mark.parametrize("kind", ["random", "calculated", "hybrid"])
def test_every_layout_writes_every_reading(kind: str) -> None:
    dynamodb = MemoryDynamo(tables={"readings"}, record_calls=True)
    payloads = [as_json([reading(f"s-{e}", NOW - 10_000 + i, f"{e}-{i}") for i in range(30)]) for e in range(5)]
    outcome = _ingestor(dynamodb, kind=kind).ingest(batch(payloads), 60_000)
    assert outcome.written == 150 == len(stored_readings(dynamodb.items(), kind))  # type: ignore[arg-type]
    assert len(dynamodb.items()) == 5 and len(dynamodb.calls) == 1


def test_table_period_routes_by_event_time_and_sets_the_retention_ttl_too() -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="day")
    today, yesterday = layout.table_for(NOW), layout.table_for(NOW - 86_400_000)
    dynamodb = MemoryDynamo(tables={today, yesterday})
    payloads = [as_json([reading("s", NOW - 1, "t"), reading("s", NOW - 86_400_000, "y")])]
    # A reading a day old is within MAX_AGE (7 days): yesterday's table takes it.
    ingestor = _ingestor(dynamodb, period="day")
    outcome = ingestor.ingest(batch(payloads), 60_000)
    assert outcome.written == 2
    assert [[r.event_id for r in stored_readings(dynamodb.items(t))] for t in (today, yesterday)] == [["t"], ["y"]]
    # And each block expires RETENTION after its newest reading, so retention is exact to the reading
    # rather than to its table's period (a table is dropped only RETENTION after the period ends).
    retention_s = 30 * 86_400  # _ingestor keeps 30 days
    (t,), (y,) = dynamodb.items(today), dynamodb.items(yesterday)
    assert int(t["ttl"]["N"]) == (NOW - 1) // 1000 + retention_s
    assert int(y["ttl"]["N"]) == (NOW - 86_400_000) // 1000 + retention_s


def test_readings_up_to_max_age_old_are_written_to_closed_tables_and_the_rest_rejected_with_the_reason() -> None:
    # Given hourly tables, MAX_AGE 3 days and two periods prebuilt ahead
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="hour")
    hour, day = 3_600_000, 86_400_000
    current = NOW - NOW % hour
    days_late = NOW - 3 * day + 60_000  # closed long ago (its grace was 2 h), still within MAX_AGE
    too_old = NOW - 3 * day - 1
    unbuilt = current + 3 * hour  # the rotator builds only current + 2
    tables = {layout.table_for(t) for t in (days_late, current)}
    dynamodb, sqs = MemoryDynamo(tables=tables), MemorySQS()
    ingestor = _ingestor(dynamodb, sqs, period="hour", max_age_ms=3 * day, max_future_ms=4 * hour)
    payloads = [as_json([reading("s", t, f"e{t}") for t in (too_old, days_late, current, unbuilt)])]
    # When ingested
    outcome = ingestor.ingest(batch(payloads), 60_000)
    # Then the days-late and current readings are written, the others rejected with why
    assert outcome.written == 2
    assert [r.event_id for r in stored_readings(dynamodb.items(layout.table_for(days_late)))] == [f"e{days_late}"]
    assert outcome.rejected == 2
    reasons = [json.loads(m["MessageBody"])["reason"] for m in sqs.messages]
    assert any("is older than the accepted age" in r for r in reasons)
    assert any("is not built yet" in r for r in reasons)
    assert not outcome.failed_records


class FakeRotator:
    """Lambda's Invoke, answered by building the tables asked for in the in-memory DynamoDB (or not)."""

    def __init__(self, dynamodb: MemoryDynamo, *, builds: bool = True) -> None:
        self.dynamodb = dynamodb
        self.builds = builds
        self.requests: list[dict[str, Any]] = []

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        assert kwargs["InvocationType"] == "Event"
        request = json.loads(kwargs["Payload"])
        self.requests.append(request)
        if self.builds:
            assert self.dynamodb.tables is not None, "the rotator builds in a DynamoDB that names its tables"
            self.dynamodb.tables.update(request["build"])
        return {"StatusCode": 202}


def test_a_late_reading_whose_period_never_had_a_table_is_handed_back_and_its_table_asked_for() -> None:
    # Given hourly tables, and a backfill two days old whose hour has no table (older than the deployment)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="hour")
    old = NOW - 2 * 86_400_000
    current_table = layout.table_for(NOW)
    dynamodb = MemoryDynamo(tables={current_table})
    rotator = FakeRotator(dynamodb, builds=False)
    clock = ManualClock(0.0)
    ingestor = _ingestor(dynamodb, period="hour", clock=clock, table_builds=TableBuilds(rotator, "rot", clock=clock))
    records = batch([as_json([reading("s", NOW, "now")]), as_json([reading("s", old, "old")])])
    # When ingested, twice before the rotator has built it
    first = ingestor.ingest(records, 60_000)
    second = ingestor.ingest(records, 60_000)
    # Then the on-time reading is written, the old one handed back (not rejected) with the reason,
    # and the rotator asked once for its table (a container asks again only after ASK_EVERY_MS)
    assert (first.written, first.rejected, first.retry) == (1, 0, 1)
    (failed,) = first.failed_records
    assert failed.reason == f"table {layout.table_for(old)} does not exist yet; the rotator is asked to build it"
    assert second.retry == 1
    assert rotator.requests == [{"build": [layout.table_for(old)]}]
    # When the rotator builds it and the record is delivered again
    rotator.builds = True
    clock.sleep(ASK_EVERY_MS / 1000)
    third = ingestor.ingest(records, 60_000)
    # Then it is asked again (the table was still missing) and this time the reading is stored
    assert third.retry == 1 and len(rotator.requests) == 2
    fourth = ingestor.ingest(records, 60_000)
    assert (fourth.written, fourth.retry) == (2, 0)
    assert [r.event_id for r in stored_readings(dynamodb.items(layout.table_for(old)))] == ["old"]


def test_without_a_rotator_to_ask_a_missing_table_is_handed_back_as_before() -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="hour")
    dynamodb = MemoryDynamo(tables={layout.table_for(NOW)})
    outcome = _ingestor(dynamodb, period="hour").ingest(batch([as_json([reading("s", NOW - 86_400_000)])]), 60_000)
    (failed,) = outcome.failed_records
    assert failed.reason is not None and failed.reason.startswith("ResourceNotFoundException")


def test_a_batch_of_10000_readings_of_100_entities_is_100_blocks_in_4_calls() -> None:
    dynamodb = MemoryDynamo(tables={"readings"})
    payloads = [as_json([reading(f"s-{r}", NOW - 60_000 + i, f"{r}-{i}") for i in range(100)]) for r in range(100)]
    outcome = _ingestor(dynamodb).ingest(batch(payloads), 60_000)
    assert outcome.written == 10_000 == len(stored_readings(dynamodb.items()))
    assert outcome.blocks == 100 and outcome.write.calls == 4


# -- the conservation property ---------------------------------------------------

_valid = st.builds(
    lambda e, dt, ev, t: reading(f"sensor-{e}", NOW - dt, f"ev-{ev}", temp=t),
    st.integers(0, 5),
    st.integers(0, 3_600_000),
    st.integers(0, 40),  # few ids: duplicates across and inside records happen
    st.floats(-50, 50, allow_nan=False),
)
_invalid = st.sampled_from(
    [
        {"entity_id": "x"},
        {"entity_id": "a#b", "timestamp": NOW, "measures": {"t": 1}},
        {"entity_id": "x", "timestamp": NOW + 86_400_000, "measures": {"t": 1}},
        "text",
        7,
    ]
)
_payload = st.one_of(
    st.lists(st.one_of(_valid, _invalid), min_size=0, max_size=30).map(as_json),
    _valid.map(as_json),
    st.sampled_from([b"{broken", b"\xff\xfe", b"null"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    payloads=st.lists(_payload, min_size=1, max_size=12),
    plan=st.builds(
        FaultPlan,
        throttle_rate=st.sampled_from([0.0, 0.3, 1.0]),
        partial_rate=st.sampled_from([0.0, 0.5]),
        partial_fraction=st.sampled_from([0.2, 1.0]),
        seed=st.integers(0, 1000),
    ),
    budget_ms=st.sampled_from([2_500, 10_000]),
)
def test_conservation_every_reading_is_written_rejected_or_handed_back(
    payloads: list[bytes], plan: FaultPlan, budget_ms: int
) -> None:
    dynamodb = MemoryDynamo(tables={"readings"})
    sqs = MemorySQS()
    clock = ManualClock(0.0)
    ingestor = _ingestor(FaultInjectingDynamoDB(dynamodb, plan, sleep=clock.sleep), sqs, clock=clock, concurrency=1)
    try:
        outcome = ingestor.ingest(batch(payloads), budget_ms)
    finally:
        ingestor.close()
    _conserved(outcome)
    # rejects on the queue are exactly the rejected readings, each with a reason
    assert len(sqs.messages) == outcome.rejected
    assert all(json.loads(m["MessageBody"])["reason"] for m in sqs.messages)
    # every block in the table is one counted as written, and holds readings counted as written
    assert len(dynamodb.items()) == len(outcome.write.written) <= outcome.written
    assert len(stored_readings(dynamodb.items())) == outcome.readings_stored <= outcome.written
    # the clock never ran past the budget
    assert clock() <= budget_ms / 1000


def test_handing_back_is_idempotent_when_the_failed_records_are_redelivered() -> None:
    dynamodb = MemoryDynamo(tables={"readings"})
    clock = ManualClock(0.0)
    faulty = FaultInjectingDynamoDB(dynamodb, FaultPlan(throttle_rate=0.8, seed=11), sleep=clock.sleep)
    payloads = [as_json([reading(f"s-{r}", NOW - 5000 + i, f"{r}-{i}") for i in range(4)]) for r in range(100)]
    records = batch(payloads)
    first = _ingestor(faulty, clock=clock, concurrency=1).ingest(records, 2_600)
    failed = {r.sequence_number for r in first.records if r.failed}
    assert failed, "the scenario needs some records handed back"
    redelivered = [r for r in records if r.sequence_number in failed]
    second = _ingestor(dynamodb).ingest(redelivered, 60_000)
    assert not any(r.failed for r in second.records)
    assert len(stored_readings(dynamodb.items())) == 400
    assert len(dynamodb.items()) == 100  # a block per record's entity: nothing stored twice


def test_ingest_honours_the_remaining_time_on_a_real_clock() -> None:
    # With the real clock and throttling forever, the batch returns within the budget less the margin.
    dynamodb = FaultInjectingDynamoDB(MemoryDynamo(tables={"readings"}), FaultPlan(throttle_rate=1.0))
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    ingestor = Ingestor(
        layout=layout,
        shard_maps=StaticShardMap(ShardMap.initial(layout.bucket, 4)),
        writer=BatchWriter(dynamodb, concurrency=2),
        rejects=RejectsPublisher(MemorySQS(), QUEUE),
        retention_ms=86_400_000,
        max_future_ms=None,
        max_age_ms=None,
        deadline_margin_ms=200,
    )
    started = time.monotonic()
    outcome = ingestor.ingest(batch([as_json(reading("s", NOW, "a"))]), 700)
    elapsed = time.monotonic() - started
    ingestor.close()
    assert outcome.records[0].failed
    assert elapsed < 0.7
