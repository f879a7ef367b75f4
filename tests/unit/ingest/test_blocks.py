"""Blocks under redelivery and regrouping: readers always find the last published copy of each
reading, once, and the same batch delivered again writes the very same items."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from doubles.clocks import ManualClock
from doubles.memory_dynamo import MemoryDynamo
from doubles.memory_sqs import MemorySQS
from ingest.kinesis_records import StreamRecord
from ingest.logic import Ingestor
from keydesign import Layout, Reading
from local_runtime.faults import FaultInjectingDynamoDB, FaultPlan
from tests.unit.ingest.kinesis_events import as_json, batch
from tests.unit.ingest.stored import stored_readings
from tests.unit.ingest.test_logic import NOW, _conserved, _ingestor

HOUR = 3_600_000
# Readings from 15 s before the current hour to 15 s into it: blocks are cut at the bucket (and,
# with hourly tables, the table) boundary, and by their 10 s span.
FIRST_MS = NOW - NOW % HOUR - 15_000
LAYOUTS = [("random", None), ("calculated", None), ("hybrid", None), ("hybrid", "hour"), ("calculated", "hour")]

# (entity, second, event id or None for a derived one, value): few of each, so the same reading
# (entity, time, event id) comes again inside a record, across records and, with a new value, as a
# correction. The seconds straddle the hour (at 15) and lie more than a block's span apart (0, 30).
_SECONDS = st.sampled_from([0, 1, 9, 14, 15, 16, 24, 30])
_reading = st.tuples(st.integers(0, 1), _SECONDS, st.none() | st.integers(0, 2), st.integers(0, 3))
_record = st.lists(_reading | st.just(None), min_size=1, max_size=8)  # None: an element that is no reading


def _payload(rows: list[tuple[int, int, int | None, int] | None]) -> bytes:
    elements: list[dict[str, Any]] = []
    for row in rows:
        if row is None:
            elements.append({"entity_id": "s-0", "measures": {"v": 1}})  # no timestamp: rejected
            continue
        entity, second, event_id, value = row
        element: dict[str, Any] = {"entity_id": f"s-{entity}", "timestamp": FIRST_MS + second * 1_000}
        element["measures"] = {"v": value, "w": value / 4}
        if event_id is not None:
            element["event_id"] = f"e-{event_id}"
        elements.append(element)
    return as_json(elements)


def _last_copies(payloads: list[bytes]) -> list[Reading]:
    """The oracle: every valid reading's last published copy, in (entity, time, event id) order."""
    last: dict[tuple[str, int, str], Reading] = {}
    for payload in payloads:
        for element in json.loads(payload):
            if "timestamp" in element:
                reading = Reading.parse(element)
                last[(reading.entity_id, reading.ts_ms, reading.event_id)] = reading
    return [last[key] for key in sorted(last)]


def _deliver(ingestor: Ingestor, records: list[StreamRecord]) -> None:
    """Deliver ``records`` until every one is settled, as Lambda retries: from the first failed record on."""
    while records:
        outcome = ingestor.ingest(records, 60_000)
        _conserved(outcome)
        failed = [i for i, r in enumerate(outcome.records) if r.failed]
        records = records[failed[0] :] if failed else []


def _items(dynamodb: MemoryDynamo) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(table, pk, sk): item for (table, pk), rows in dynamodb.partitions.items() for sk, item in rows.items()}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# A correction in the second half: the first half alone stores the old value, at a lower version.
@example(records=[[(0, 0, 0, 1)], [(0, 0, 0, 2)]], layout=("hybrid", None), split=0.5, faults=None)
@given(
    records=st.lists(_record, min_size=1, max_size=8),
    layout=st.sampled_from(LAYOUTS),
    split=st.floats(0, 1),
    faults=st.sampled_from([None, FaultPlan(throttle_rate=0.3, partial_rate=0.5, seed=3)]),
)
def test_any_regrouping_of_a_batch_keeps_the_last_copy_of_each_reading_and_redelivery_changes_nothing(
    records: list[list[tuple[int, int, int | None, int] | None]],
    layout: tuple[str, str | None],
    split: float,
    faults: FaultPlan | None,
) -> None:
    kind, period = layout
    tables = {Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings", table_period=period).table_for(t)
              for t in (FIRST_MS, NOW)}  # fmt: skip
    dynamodb = MemoryDynamo(tables=tables)
    clock = ManualClock(0.0)
    writes: Any = dynamodb if faults is None else FaultInjectingDynamoDB(dynamodb, faults, sleep=clock.sleep)
    ingestor = _ingestor(writes, MemorySQS(), kind=kind, period=period, clock=clock, concurrency=1)
    payloads = [_payload(rows) for rows in records]
    delivered = batch(payloads)
    try:
        # Given a batch with duplicates and corrections, delivered (under faults: until it all got through)
        _deliver(ingestor, delivered)
        first = _items(dynamodb)
        # When the very same batch is delivered again
        _deliver(ingestor, delivered)
        # Then the table's items are the same, byte for byte (the random layout draws a partition
        # for each block: the same blocks, maybe in other partitions)
        again = _items(dynamodb)
        if kind == "random":
            assert {(t, sk, i["b"]["B"]) for (t, _, sk), i in again.items()} == {
                (t, sk, i["b"]["B"]) for (t, _, sk), i in first.items()
            }
        else:
            assert again == first
        # When it comes again regrouped: cut in two, each half delivered on its own (as bisecting does)
        cut = round(split * len(delivered))
        for part in (delivered[:cut], delivered[cut:]):
            _deliver(ingestor, part)
    finally:
        ingestor.close()
    # Then reading every block and keeping each reading's newest version gives the last published copy,
    # in whichever order the blocks are read (a tie of versions is only ever between equal copies)
    stored = dynamodb.items()
    expected = _last_copies(payloads)
    assert stored_readings(stored, kind) == expected  # type: ignore[arg-type]
    assert stored_readings(reversed(stored), kind) == expected  # type: ignore[arg-type]
