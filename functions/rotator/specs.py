"""What each resource the rotator owns should look like: request parameters, built from settings.

Pure: the logic compares these with what exists and sends them; the tests
read them to know what to expect. The table's key schema, stream and TTL are
the stack's (``infra.config.READINGS_SCHEMA``): string ``pk``/``sk``, a
``KEYS_ONLY`` stream (the hot-key detector needs only keys and sizes) and TTL
on ``ttl``. Encryption is the stack's too: the AWS-managed KMS key.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, cast

from rotator.lifecycle import PeriodTable
from rotator.settings import MANAGED_BY_TAG, MANAGED_BY_VALUE, PERIOD_TAG, PREFIX_TAG, RotatorSettings
from rotator.tables import InsightsMode

PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "ttl"
STREAM_VIEW = "KEYS_ONLY"
#: Marks an alarm as the rotator's: orphan alarms are removed only with it.
ALARM_MARKER = "Managed by the table rotator"
#: Operations whose SystemErrors count for a table (the ones this product calls).
SYSTEM_ERROR_OPERATIONS = ("BatchWriteItem", "PutItem", "GetItem", "Query", "Scan")
#: An alarm fires when ALARM_DATAPOINTS of ALARM_EVALUATION_MINUTES minutes each see ALARM_THRESHOLD events.
ALARM_THRESHOLD = 1
ALARM_EVALUATION_MINUTES = 5
ALARM_DATAPOINTS = 3


def managed_tags(settings: RotatorSettings, table: PeriodTable) -> dict[str, str]:
    """Every tag a table of ours carries: the three that mark it as ours."""
    return {MANAGED_BY_TAG: MANAGED_BY_VALUE, PREFIX_TAG: settings.table_prefix, PERIOD_TAG: table.label}


def is_managed(tags: dict[str, str], settings: RotatorSettings) -> bool:
    """True when the tags say this rotator (this prefix) created the table."""
    return tags.get(MANAGED_BY_TAG) == MANAGED_BY_VALUE and tags.get(PREFIX_TAG) == settings.table_prefix


def create_table_request(settings: RotatorSettings, table: PeriodTable, *, closed: bool = False) -> dict[str, Any]:
    """CreateTable parameters for ``table``. A ``closed`` one (built for late readings after its period
    closed) is on-demand with no warm throughput, as every closed table is: it takes a trickle."""
    capacity = settings.capacity
    request: dict[str, Any] = {
        "TableName": table.name,
        "AttributeDefinitions": [
            {"AttributeName": PARTITION_KEY, "AttributeType": "S"},
            {"AttributeName": SORT_KEY, "AttributeType": "S"},
        ],
        "KeySchema": [
            {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "BillingMode": "PAY_PER_REQUEST" if closed else capacity.billing_mode,
        "StreamSpecification": {"StreamEnabled": True, "StreamViewType": STREAM_VIEW},
        "SSESpecification": {"Enabled": True, "SSEType": "KMS"},
        "TableClass": "STANDARD",
        "DeletionProtectionEnabled": settings.deletion_protection,
        "Tags": [{"Key": k, "Value": v} for k, v in sorted(managed_tags(settings, table).items())],
    }
    if closed:
        return request
    if capacity.billing_mode == "PROVISIONED":
        request["ProvisionedThroughput"] = {
            "ReadCapacityUnits": capacity.read_capacity,
            "WriteCapacityUnits": capacity.write_capacity,
        }
    elif capacity.warm_writes_per_s is not None:
        # A fresh on-demand table takes ~4,000 writes/s; the period's traffic arrives all at once.
        request["WarmThroughput"] = {"WriteUnitsPerSecond": capacity.warm_writes_per_s}
    return request


def insights_mode(settings: RotatorSettings) -> InsightsMode | None:
    """The Contributor Insights mode of an open table (None: off), as UpdateContributorInsights names it."""
    mode = settings.contributor_insights
    return None if mode == "off" else cast(InsightsMode, mode.upper())


# -- the stream mapping ----------------------------------------------------------


def mapping_settings(settings: RotatorSettings) -> dict[str, Any]:
    """The mapping parameters that are the same for every table (create and update alike).

    Bisect, a retry cap, a record-age cap, an on-failure destination and
    partial batch responses: without them one poison record blocks a stream
    shard until its records expire (24 hours).
    """
    params: dict[str, Any] = {
        "BatchSize": settings.hotkeys_batch_size,
        "MaximumBatchingWindowInSeconds": settings.hotkeys_batching_window_s,
        "BisectBatchOnFunctionError": True,
        "MaximumRetryAttempts": settings.hotkeys_max_retries,
        "MaximumRecordAgeInSeconds": settings.hotkeys_max_record_age_s,
        "ParallelizationFactor": settings.hotkeys_parallelization_factor,
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
    }
    if settings.hotkeys_on_failure_arn:
        params["DestinationConfig"] = {"OnFailure": {"Destination": settings.hotkeys_on_failure_arn}}
    return params


def create_mapping_request(settings: RotatorSettings, stream_arn: str) -> dict[str, Any]:
    """CreateEventSourceMapping parameters for one table's stream.

    TRIM_HORIZON: the mapping may be made after the first writes (a table set
    up on the run after it was created), and none of them may be skipped.
    """
    return {
        "EventSourceArn": stream_arn,
        "FunctionName": settings.hotkeys_function_arn,
        "StartingPosition": "TRIM_HORIZON",
        "Enabled": True,
        **mapping_settings(settings),
    }


def mapping_drift(settings: RotatorSettings, existing: dict[str, Any]) -> dict[str, Any]:
    """UpdateEventSourceMapping parameters that would bring ``existing`` to the configuration
    (empty when it already matches). An on-failure destination left unconfigured is left as it is."""
    changes: dict[str, Any] = {}
    for name, want in mapping_settings(settings).items():
        have = existing.get(name)
        if name == "DestinationConfig":
            have = {"OnFailure": {"Destination": (have or {}).get("OnFailure", {}).get("Destination")}}
        if name == "FunctionResponseTypes":
            have = sorted(have or [])
        if have != want:
            changes[name] = want
    return changes


# -- alarms ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlarmKind:
    suffix: str
    metric: str
    what: str


ALARM_KINDS = (
    AlarmKind("write-throttles", "WriteThrottleEvents", "write throttle events"),
    AlarmKind("read-throttles", "ReadThrottleEvents", "read throttle events"),
    AlarmKind("system-errors", "SystemErrors", "system errors (5xx)"),
)


def table_of_alarm(alarm_name: str) -> str | None:
    """The table an alarm named by :func:`alarm_requests` belongs to, or None."""
    for kind in ALARM_KINDS:
        tail = f"-{kind.suffix}"
        if alarm_name.endswith(tail):
            return alarm_name[: -len(tail)]
    return None


def alarm_requests(settings: RotatorSettings, table: PeriodTable) -> list[dict[str, Any]]:
    """PutMetricAlarm parameters of the three alarms of an open table (a closed one has none:
    nothing writes to it at a rate that could throttle, and reads of old data are watched by
    the API's own 5xx alarm).

    The description carries a fingerprint of the request, so a run sees from
    DescribeAlarms alone whether an alarm is as configured, and rewrites only
    the ones that are not.
    """
    tags = [{"Key": k, "Value": v} for k, v in sorted(managed_tags(settings, table).items())]
    requests = []
    for kind in ALARM_KINDS:
        request = _alarm(settings.alert_topic_arn, table.name, kind)
        fingerprint = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:16]
        request["AlarmDescription"] = (
            f"{ALARM_MARKER}: {kind.what} on {table.name} reached {ALARM_THRESHOLD} a minute in "
            f"{ALARM_DATAPOINTS} of {ALARM_EVALUATION_MINUTES} minutes. spec={fingerprint}"
        )
        request["Tags"] = tags
        requests.append(request)
    return requests


def _alarm(topic_arn: str | None, table: str, kind: AlarmKind) -> dict[str, Any]:
    actions = [topic_arn] if topic_arn else []
    request: dict[str, Any] = {
        "AlarmName": f"{table}-{kind.suffix}",
        "ActionsEnabled": bool(actions),
        "AlarmActions": actions,
        "OKActions": actions,
        "EvaluationPeriods": ALARM_EVALUATION_MINUTES,
        "DatapointsToAlarm": ALARM_DATAPOINTS,
        "Threshold": float(ALARM_THRESHOLD),
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": "notBreaching",
    }
    if kind.metric != "SystemErrors":
        request.update(
            Namespace="AWS/DynamoDB",
            MetricName=kind.metric,
            Dimensions=[{"Name": "TableName", "Value": table}],
            Statistic="Sum",
            Period=60,
        )
        return request
    # SystemErrors is published per (TableName, Operation) only: sum the operations.
    metrics: list[dict[str, Any]] = [
        {
            "Id": f"m{index}",
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/DynamoDB",
                    "MetricName": "SystemErrors",
                    "Dimensions": [{"Name": "TableName", "Value": table}, {"Name": "Operation", "Value": operation}],
                },
                "Period": 60,
                "Stat": "Sum",
            },
            "ReturnData": False,
        }
        for index, operation in enumerate(SYSTEM_ERROR_OPERATIONS)
    ]
    metrics.append({"Id": "errors", "Expression": "SUM(METRICS())", "Label": "SystemErrors", "ReturnData": True})
    request["Metrics"] = metrics
    return request


def export_client_token(table_arn: str, bucket: str, prefix: str, failed_before: int) -> str:
    """ExportTableToPointInTime's idempotency token: two runs starting the same
    export at once get one export; a new attempt after a failure gets a new token."""
    digest = hashlib.sha256(f"{table_arn}|{bucket}|{prefix}|{failed_before}".encode()).hexdigest()
    return digest[:36]
