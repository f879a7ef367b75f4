"""What the rotator asks AWS for: tables, stream mappings, alarms and export tokens."""

from __future__ import annotations

import pytest

from keydesign import parse_timestamp
from rotator.lifecycle import Lifecycle, PeriodTable
from rotator.settings import RotatorSettings
from rotator.specs import (
    ALARM_MARKER,
    alarm_requests,
    create_mapping_request,
    create_table_request,
    export_client_token,
    insights_mode,
    is_managed,
    managed_tags,
    mapping_drift,
    table_of_alarm,
)

FUNCTION = "arn:aws:lambda:eu-west-1:123456789012:function:hotkeys"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:alarms"
DLQ = "arn:aws:sqs:eu-west-1:123456789012:hotkeys-dlq"
BASE = {
    "SHARDS": "8",
    "TABLE_PREFIX": "readings",
    "TABLE_PERIOD": "day",
    "HOTKEYS_FUNCTION_ARN": FUNCTION,
    "HOTKEYS_ON_FAILURE_ARN": DLQ,
    "ALARM_TOPIC_ARN": TOPIC,
}


def settings(**overrides: str) -> RotatorSettings:
    return RotatorSettings.from_env({**BASE, **overrides})


def table(s: RotatorSettings, day: str = "2026-11-22") -> PeriodTable:
    return Lifecycle.from_settings(s).table(parse_timestamp(f"{day}T00:00:00Z"))


def test_a_provisioned_table_has_the_stack_schema_and_the_configured_capacity() -> None:
    s = settings(BILLING_MODE="PROVISIONED", WRITE_CAPACITY="2000", READ_CAPACITY="100")
    request = create_table_request(s, table(s))
    assert request["TableName"] == "readings-2026-11-22"
    assert request["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert {a["AttributeName"]: a["AttributeType"] for a in request["AttributeDefinitions"]} == {"pk": "S", "sk": "S"}
    assert request["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}
    assert request["SSESpecification"] == {"Enabled": True, "SSEType": "KMS"}
    assert request["DeletionProtectionEnabled"] is True
    assert request["BillingMode"] == "PROVISIONED"
    assert request["ProvisionedThroughput"] == {"ReadCapacityUnits": 100, "WriteCapacityUnits": 2000}
    assert "WarmThroughput" not in request
    tags = {t["Key"]: t["Value"] for t in request["Tags"]}
    assert tags == {
        "timeseries:managed-by": "rotator",
        "timeseries:table-prefix": "readings",
        "timeseries:period": "2026-11-22",
    }


def test_an_on_demand_table_is_pre_warmed_only_above_what_a_new_table_takes() -> None:
    warm = settings(WARM_WRITES_PER_S="20000")
    request = create_table_request(warm, table(warm))
    assert request["BillingMode"] == "PAY_PER_REQUEST"
    assert request["WarmThroughput"] == {"WriteUnitsPerSecond": 20000}
    assert "ProvisionedThroughput" not in request
    cold = settings()
    assert "WarmThroughput" not in create_table_request(cold, table(cold))


def test_the_managed_tags_identify_this_rotator_only() -> None:
    s = settings()
    tags = managed_tags(s, table(s))
    assert is_managed(tags, s)
    assert not is_managed({**tags, "timeseries:table-prefix": "other"}, s)
    assert not is_managed({"team": "iot"}, s)


def test_the_stream_mapping_cannot_be_blocked_by_a_poison_record() -> None:
    request = create_mapping_request(settings(), "arn:aws:dynamodb:eu-west-1:1:table/readings-2026-11-22/stream/x")
    assert request["FunctionName"] == FUNCTION
    assert request["StartingPosition"] == "TRIM_HORIZON"
    assert request["BisectBatchOnFunctionError"] is True
    assert request["MaximumRetryAttempts"] == 5
    assert request["MaximumRecordAgeInSeconds"] == 3600
    assert request["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert request["DestinationConfig"] == {"OnFailure": {"Destination": DLQ}}


def test_a_mapping_without_a_destination_asks_for_none() -> None:
    s = RotatorSettings.from_env({k: v for k, v in BASE.items() if k != "HOTKEYS_ON_FAILURE_ARN"})
    assert "DestinationConfig" not in create_mapping_request(s, "arn")


def test_mapping_drift_lists_only_what_differs() -> None:
    s = settings()
    current = create_mapping_request(s, "arn")
    assert mapping_drift(s, current) == {}
    drifted = {**current, "BisectBatchOnFunctionError": False, "MaximumRetryAttempts": -1}
    drifted["DestinationConfig"] = {"OnFailure": {}}
    drifted["FunctionResponseTypes"] = []
    assert mapping_drift(s, drifted) == {
        "BisectBatchOnFunctionError": True,
        "MaximumRetryAttempts": 5,
        "DestinationConfig": {"OnFailure": {"Destination": DLQ}},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
    }


def test_three_alarms_per_table_notify_the_topic() -> None:
    s = settings()
    requests = alarm_requests(s, table(s))
    assert [r["AlarmName"] for r in requests] == [
        "readings-2026-11-22-write-throttles",
        "readings-2026-11-22-read-throttles",
        "readings-2026-11-22-system-errors",
    ]
    for request in requests:
        assert request["AlarmActions"] == request["OKActions"] == [TOPIC]
        assert request["ActionsEnabled"] is True
        assert (request["EvaluationPeriods"], request["DatapointsToAlarm"], request["Threshold"]) == (5, 3, 1.0)
        assert request["TreatMissingData"] == "notBreaching"
        assert request["AlarmDescription"].startswith(ALARM_MARKER)
    writes, reads, errors = requests
    assert (writes["MetricName"], reads["MetricName"]) == ("WriteThrottleEvents", "ReadThrottleEvents")
    assert writes["Dimensions"] == [{"Name": "TableName", "Value": "readings-2026-11-22"}]
    # SystemErrors exists only per (table, operation): the alarm sums the operations.
    operations = [
        {d["Name"]: d["Value"] for d in m["MetricStat"]["Metric"]["Dimensions"]}
        for m in errors["Metrics"]
        if "MetricStat" in m
    ]
    assert {o["TableName"] for o in operations} == {"readings-2026-11-22"}
    assert {o["Operation"] for o in operations} >= {"BatchWriteItem", "Query"}
    assert errors["Metrics"][-1] == {
        "Id": "errors",
        "Expression": "SUM(METRICS())",
        "Label": "SystemErrors",
        "ReturnData": True,
    }


def test_an_alarm_description_changes_with_its_configuration() -> None:
    a = settings()
    b = RotatorSettings.from_env({k: v for k, v in BASE.items() if k != "ALARM_TOPIC_ARN"})
    assert alarm_requests(a, table(a))[0]["AlarmDescription"] != alarm_requests(b, table(b))[0]["AlarmDescription"]
    assert alarm_requests(a, table(a)) == alarm_requests(a, table(a))


def test_alarms_without_a_topic_have_no_actions() -> None:
    s = RotatorSettings.from_env({k: v for k, v in BASE.items() if k != "ALARM_TOPIC_ARN"})
    request = alarm_requests(s, table(s))[0]
    assert (request["AlarmActions"], request["ActionsEnabled"]) == ([], False)


@pytest.mark.parametrize(
    ("alarm", "table_name"),
    [
        ("readings-2026-11-22-write-throttles", "readings-2026-11-22"),
        ("readings-2026-11-22-system-errors", "readings-2026-11-22"),
        ("readings-2026-11-22-latency", None),
    ],
)
def test_the_table_of_an_alarm(alarm: str, table_name: str | None) -> None:
    assert table_of_alarm(alarm) == table_name


def test_export_tokens_are_shared_by_concurrent_runs_and_new_after_a_failure() -> None:
    arn = "arn:aws:dynamodb:eu-west-1:1:table/readings-2026-11-22"
    first = export_client_token(arn, "archive", "p/readings-2026-11-22", 0)
    assert first == export_client_token(arn, "archive", "p/readings-2026-11-22", 0)
    assert first != export_client_token(arn, "archive", "p/readings-2026-11-22", 1)
    assert 1 <= len(first) <= 64


@pytest.mark.parametrize(
    ("setting", "mode"),
    [
        ("off", None),
        ("throttled_keys", "THROTTLED_KEYS"),
        ("accessed_and_throttled_keys", "ACCESSED_AND_THROTTLED_KEYS"),
    ],
)
def test_contributor_insights_of_an_open_table_is_the_single_tables_mode(setting: str, mode: str | None) -> None:
    assert insights_mode(settings(CONTRIBUTOR_INSIGHTS=setting)) == mode
