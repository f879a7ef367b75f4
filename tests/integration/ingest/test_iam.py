"""IAM conformance of the ingest function (tests/integration/iam_conformance.py)."""

from __future__ import annotations

import boto3
import pytest

from ingest.logic import Ingestor
from ingest.settings import IngestSettings
from tests.integration.iam_conformance import FAILURE_DESTINATION, assert_conforms, iam_action, recording
from tests.integration.ingest.conftest import REGION, Aws, now_ms
from tests.integration.ingest.helpers import invoke
from tests.integration.mocked_aws import create_readings_table, fresh_handler
from tests.unit.ingest.kinesis_events import as_json, batch, kinesis_event, reading

pytestmark = pytest.mark.integration


def test_every_call_ingest_makes_is_granted_to_its_role(
    aws: Aws, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a cold start as deployed (the shard map and occupancy in the control table)
    create_readings_table(aws.dynamodb, "control")  # the same string pk and sk
    monkeypatch.setenv("CONTROL_TABLE", "control")
    # And a batch with good readings and a bad one
    ts = now_ms() - 60_000
    payloads = [as_json(reading(f"sensor-{n}", ts + n, f"e{n}")) for n in range(30)] + [b"not json"]
    with recording("ingest") as called:
        with fresh_handler("ingest.handler", "INGESTOR") as module:
            result = invoke(module, kinesis_event(payloads), capsys)
        # And, with hourly tables, a reading two days old whose hour has no table: the rotator is asked
        hourly = {**aws.env, "TABLE_PERIOD": "hour", "MAX_AGE": "3d", "ROTATOR_FUNCTION": "TimeSeriesIngest-rotator"}
        late = Ingestor.from_settings(IngestSettings.from_env(hourly))
        try:
            asked = late.ingest(batch([as_json(reading("sensor-1", now_ms() - 2 * 86_400_000, "old"))]), 60_000)
        finally:
            late.close()
    assert result.outcome.written == 30 and result.outcome.rejected == 1
    assert asked.retry == 1
    # Then every action it called is granted, and everything granted is called or is the service's own
    assert_conforms(
        "ingest",
        called,
        not_called={
            **ESM_KINESIS,
            **FAILURE_DESTINATION,
        },
    )


#: Read by the event source mapping with the function's role, never by its code.
ESM_KINESIS = {
    f"kinesis:{action}": "the Kinesis event source mapping reads the stream with the function's role"
    for action in (
        "DescribeStream",
        "DescribeStreamConsumer",
        "DescribeStreamSummary",
        "GetRecords",
        "GetShardIterator",
        "ListShards",
        "ListStreams",
        "SubscribeToShard",
    )
}


def test_the_check_fails_on_a_missing_grant_and_on_an_unexercised_one() -> None:
    with pytest.raises(AssertionError, match=r"calls \['dynamodb:DeleteTable'\], which its role does not grant"):
        assert_conforms("ingest", {"dynamodb:BatchWriteItem", "dynamodb:DeleteTable"}, not_called={})
    with pytest.raises(AssertionError, match="no test exercises them"):
        assert_conforms("ingest", {"dynamodb:BatchWriteItem"}, not_called={})


def test_calls_are_named_as_iam_names_them_and_the_tests_own_calls_do_not_count(aws: Aws) -> None:
    assert iam_action(boto3.client("cloudwatch", region_name=REGION), "PutMetricData") == "cloudwatch:PutMetricData"
    assert iam_action(aws.sqs, "SendMessageBatch") == "sqs:SendMessage"
    assert iam_action(aws.dynamodb, "BatchWriteItem") == "dynamodb:BatchWriteItem"
    with recording("ingest") as called:
        aws.dynamodb.list_tables()
    assert called == set()
