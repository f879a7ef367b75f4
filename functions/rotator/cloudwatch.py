"""CloudWatch for the rotator, behind a small interface: the alarms of the rotated tables, and
what tables consumed.

PutMetricAlarm creates or replaces, and DeleteAlarms ignores names that do not
exist, so both are safe to repeat and to race. One GetMetricData call answers for
up to 250 tables (two queries each, 500 per call), so the rotator's table-class
decisions cost one call per run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rotator.table_class import Usage

#: DeleteAlarms takes at most this many names per call.
DELETE_BATCH = 100
#: GetMetricData takes at most this many queries per call.
QUERIES_PER_CALL = 500
_METRICS = (("r", "ConsumedReadCapacityUnits"), ("w", "ConsumedWriteCapacityUnits"))


class CloudWatch:
    """The CloudWatch calls the rotator makes, on a boto3 client."""

    def __init__(self, cloudwatch: Any) -> None:
        self._cloudwatch = cloudwatch

    def alarms(self, name_prefix: str) -> dict[str, str]:
        """The description of every metric alarm whose name starts with ``name_prefix``, by name."""
        paginator = self._cloudwatch.get_paginator("describe_alarms")
        pages = paginator.paginate(AlarmNamePrefix=name_prefix, AlarmTypes=["MetricAlarm"])
        return {a["AlarmName"]: a.get("AlarmDescription", "") for page in pages for a in page.get("MetricAlarms", [])}

    def put_alarm(self, request: Mapping[str, Any]) -> None:
        self._cloudwatch.put_metric_alarm(**request)

    def delete_alarms(self, names: Sequence[str]) -> None:
        for start in range(0, len(names), DELETE_BATCH):
            self._cloudwatch.delete_alarms(AlarmNames=list(names[start : start + DELETE_BATCH]))

    def consumed(self, tables: Sequence[str], start_ms: int, end_ms: int) -> dict[str, Usage]:
        """Read and write units each table consumed in ``[start_ms, end_ms)`` (0 without data points)."""
        window_s = max(60, (end_ms - start_ms) // 1000 // 60 * 60)  # a multiple of 60 s, as CloudWatch asks
        sums: dict[str, float] = {}
        queries = [
            {
                "Id": f"{kind}{index}",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "AWS/DynamoDB",
                        "MetricName": metric,
                        "Dimensions": [{"Name": "TableName", "Value": table}],
                    },
                    "Period": window_s,
                    "Stat": "Sum",
                },
            }
            for index, table in enumerate(tables)
            for kind, metric in _METRICS
        ]
        for first in range(0, len(queries), QUERIES_PER_CALL):
            pages = self._cloudwatch.get_paginator("get_metric_data").paginate(
                MetricDataQueries=queries[first : first + QUERIES_PER_CALL],
                StartTime=datetime.fromtimestamp(start_ms / 1000, UTC),
                EndTime=datetime.fromtimestamp(end_ms / 1000, UTC),
            )
            for page in pages:
                for result in page.get("MetricDataResults", []):
                    sums[result["Id"]] = sums.get(result["Id"], 0.0) + float(sum(result.get("Values", [])))
        return {
            table: Usage(sums.get(f"r{index}", 0.0), sums.get(f"w{index}", 0.0), end_ms - start_ms)
            for index, table in enumerate(tables)
        }
