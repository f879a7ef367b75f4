"""Late data is stored, on moto, in the default hourly shape (MAX_AGE 3 days, 2 h of grace, 30 days kept):
a reading days late goes to its period's closed table, or, when that period never had one (the
deployment is younger than the reading), is handed back while the rotator is asked to build it, and
its redelivery is stored. No redeploy, no wider grace."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from ingest.logic import Ingestor
from ingest.settings import IngestSettings
from keydesign import Layout
from rotator.logic import Rotator
from rotator.request import RotationRequest
from rotator.settings import RotatorSettings
from tests.integration.ingest.conftest import Aws, aws, now_ms
from tests.unit.ingest.kinesis_events import REGION, as_json, batch, reading
from tests.unit.ingest.stored import stored_readings

pytestmark = pytest.mark.integration
__all__ = ["aws"]  # fixtures

HOUR, DAY = 3_600_000, 86_400_000
HOURLY = {"TABLE_PERIOD": "hour", "GRACE": "2h", "PREBUILD_PERIODS": "2", "RETENTION": "30d", "MAX_AGE": "3d"}


class RotatorByInvoke:
    """Lambda's Invoke of the rotator, run in this process as its handler would run it (asynchronously
    in AWS: here at once, the worst case for ingest being the redelivery that comes right after)."""

    def __init__(self, rotator: Rotator) -> None:
        self.rotator = rotator
        self.built: list[str] = []

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        request = RotationRequest.from_event(
            json.loads(kwargs["Payload"]), dry_run_default=False, allow_now_override=False
        )
        summary = self.rotator.build(request.build)
        self.built += summary.created
        return {"StatusCode": 202}


def test_readings_days_late_are_stored_whether_their_table_is_closed_or_was_never_built(aws: Aws) -> None:
    prefix = "readings"
    env = {**aws.env, **HOURLY, "TABLE_PREFIX": prefix, "ROTATOR_FUNCTION": "TimeSeriesIngest-rotator"}
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=prefix, table_period="hour")
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    rotator_env = {k: v for k, v in env.items() if k not in ("REJECTS_QUEUE_URL", "ROTATOR_FUNCTION")}
    # Given a deployment that started 36 hours ago: its rotator ran then, and runs now
    now = now_ms()
    started = now - 36 * HOUR
    clock = [started]
    rotator = Rotator(RotatorSettings.from_env(rotator_env), dynamodb=dynamodb, clock_ms=lambda: clock[0])
    rotator.run()
    clock[0] = now
    assert rotator.run().errors == []
    built_then = layout.table_for(started)
    assert built_then in dynamodb.list_tables()["TableNames"]  # closed 34 hours ago, still kept
    invoked = RotatorByInvoke(rotator)
    ingestor = Ingestor.from_settings(IngestSettings.from_env(env), lambda_client=invoked)
    try:
        # When a store-and-forward device sends readings 36 hours, 2 days and 4 days old, and one now
        closed = reading("s-1", started + 60_000, "closed")
        unbuilt = reading("s-2", now - 2 * DAY, "unbuilt")  # older than the deployment: its hour has no table
        too_old = reading("s-3", now - 4 * DAY, "too-old")
        records = batch([as_json(r) for r in (closed, unbuilt, too_old, reading("s-4", now, "now"))])
        first = ingestor.ingest(records, 60_000)
        # Then the reading of the closed table is stored, the one older than MAX_AGE is rejected with
        # the reason, and the one whose hour never had a table is handed back while its table is built
        assert (first.written, first.rejected, first.retry) == (2, 1, 1)
        assert invoked.built == [layout.table_for(now - 2 * DAY)]
        # And when the mapping delivers the handed-back record again, it is stored
        (failed,) = first.failed_records
        again = ingestor.ingest([r for r in records if r.sequence_number == failed.sequence_number], 60_000)
        assert (again.written, again.retry) == (1, 0)
    finally:
        ingestor.close()
    stored = {r.event_id for t in (built_then, layout.table_for(now - 2 * DAY)) for r in _readings(aws, t)}
    assert stored == {"closed", "unbuilt"}
    (rejected,) = aws.rejects()
    assert rejected["field"] == "timestamp" and "older than the accepted age" in rejected["reason"]
    # And the table built for it is closed: on-demand, TTL on; a scheduled run afterwards keeps it
    table = dynamodb.describe_table(TableName=layout.table_for(now - 2 * DAY))["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    ttl = dynamodb.describe_time_to_live(TableName=layout.table_for(now - 2 * DAY))["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "ENABLED"
    assert layout.table_for(now - 2 * DAY) not in rotator.run().deleted


def _readings(aws: Aws, table: str) -> list[Any]:
    return stored_readings(aws.table_items(table))
