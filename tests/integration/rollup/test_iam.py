"""IAM conformance of the rollup function (tests/integration/iam_conformance.py)."""

from __future__ import annotations

import pytest

from adapters.batch_writer import BatchWriter
from adapters.retry import Deadline
from adapters.rollup_store import MarkRecorder, RollupStore
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
    settings = RollupSettings.from_env(ENV)
    clock = [NOW]
    # When it runs at NOW (the minute is recomputed from raw, its hour deferred) and 10 minutes later
    # (the hour is closed: recomputed from the minutes)
    with recording("rollup") as called:
        runner = RollupRunner.from_settings(settings, clock_ms=lambda: clock[0])
        try:
            first = runner.run(Deadline.never())
            clock[0] = NOW + 10 * MINUTE
            second = runner.run(Deadline.never())
        finally:
            runner.close()
    assert first.recomputed.get(MINUTE) == 2, first.summary()
    assert second.recomputed.get(HOUR) == 2, second.summary()
    # Then every action it called is granted, and everything granted is called or is the service's own
    assert_conforms(
        "rollup",
        called,
        not_called={"sqs:SendMessage": "Lambda sends a failed asynchronous invocation to the function's failure queue"},
    )
