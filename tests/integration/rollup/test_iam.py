"""IAM conformance of the rollup function (tests/integration/iam_conformance.py)."""

from __future__ import annotations

import pytest

from adapters.batch_writer import BatchWriter, serialize_item
from adapters.retry import Deadline
from adapters.rollup_store import MarkRecorder, RollupStore
from doubles.tier_items import TierWriter
from keydesign.rollup import Mark
from keydesign.writetier import WriteTier, state_key
from rollup.logic import RollupRunner
from rollup.settings import RollupSettings
from tests.integration.iam_conformance import assert_conforms, recording
from tests.integration.mocked_aws import create_readings_table
from tests.integration.query.conftest import HOUR, NOW, PREFIX, StoreFactory, dynamodb, make_store, reading

pytestmark = pytest.mark.integration
__all__ = ["dynamodb", "make_store"]  # fixtures

MINUTE = 60_000
ENV = {
    "LAYOUT": "hybrid",
    "SHARDS": "4",
    "BUCKET": "1h",
    "TABLE_PREFIX": PREFIX,
    "CONTROL_TABLE": "control",
    "ROLLUPS": "1m,1h,1d",
    "WRITE_TIER_GROUPS": "4",  # as cdk.json deploys it: the raw reads plan both tiers
    "POWERTOOLS_SERVICE_NAME": "rollup",
    "POWERTOOLS_METRICS_NAMESPACE": "TimeSeries",
}


def test_every_call_the_rollup_function_makes_is_granted_to_its_role(make_store: StoreFactory) -> None:
    # Given readings of two entities in the minute 10 minutes before NOW (an hour boundary), and the
    # marks ingest wrote for them
    store = make_store("hybrid")
    create_readings_table(store.dynamodb, "control")  # the same string pk and sk
    stamp = NOW - 10 * MINUTE
    written = [reading(entity, stamp + n * 1_000, f"e{n}", v=float(n)) for entity in ("s-1", "s-2") for n in range(3)]
    for r in written:
        store.write(r)
    marks_store = RollupStore(store.dynamodb, BatchWriter(store.dynamodb, concurrency=1), "control", PREFIX, HOUR)
    unwritten = MarkRecorder(marks_store, MINUTE).write(
        [(n, r.entity_id, r.ts_ms) for n, r in enumerate(written)], stamp, Deadline.never()
    )
    assert unwritten == {}
    # and an entity whose hour before NOW compaction counted (a group-item reading, compacted, unflagged; the
    # watermark at NOW), then a late reading of that hour: a block, marked a minute after NOW
    hour = NOW - HOUR
    tier = TierWriter(store.layout, WriteTier(4), store.shard_map, 30 * 24 * HOUR)
    tier.ingest([(reading("s-3", hour + MINUTE, "g", v=1.0), 1)], hour + MINUTE)
    for table, item in tier.compact(hour):
        store.dynamodb.put_item(TableName=table, Item=serialize_item(item))
    compaction = {**state_key(PREFIX), "through": NOW, "groups": 4, "clustered": f"4@{hour}"}
    store.dynamodb.put_item(TableName="control", Item=serialize_item(compaction))
    store.write(reading("s-3", hour + 30 * MINUTE, "late", v=2.0))
    marks_store.write(
        marks_store.marks_writes([Mark.of(NOW + MINUTE, MINUTE, hour + 30 * MINUTE, "s-3")]), Deadline.never()
    )
    settings = RollupSettings.from_env(ENV)
    clock = [NOW]
    # When it runs at NOW (the minute is recomputed from raw, its hour deferred) and 10 minutes later
    # (the hour is closed: recomputed from the minutes; the late mark recomputed, and a redo request put)
    with recording("rollup") as called:
        runner = RollupRunner.from_settings(settings, clock_ms=lambda: clock[0])
        try:
            first = runner.run(Deadline.never())
            clock[0] = NOW + 10 * MINUTE
            second = runner.run(Deadline.never())
        finally:
            runner.close()
    assert first.recomputed.get(MINUTE) == 2, first.summary()
    assert second.recomputed.get(HOUR) == 3, second.summary()  # s-1's, s-2's, and s-3's hour before
    assert second.redos == 1, second.summary()  # the late reading's entity-hour was compaction's
    # Then every action it called is granted, and everything granted is called or is the service's own
    assert_conforms(
        "rollup",
        called,
        not_called={"sqs:SendMessage": "Lambda sends a failed asynchronous invocation to the function's failure queue"},
    )
