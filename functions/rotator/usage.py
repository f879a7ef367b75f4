"""What tables consumed, from CloudWatch, behind a small interface.

One GetMetricData call answers for up to 250 tables (two queries each, 500 per
call), so the rotator's table-class decisions cost one call per run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from rotator.table_class import Usage

#: GetMetricData takes at most this many queries per call.
QUERIES_PER_CALL = 500
_METRICS = (("r", "ConsumedReadCapacityUnits"), ("w", "ConsumedWriteCapacityUnits"))


class UsageApi(Protocol):
    """The CloudWatch reads the rotator makes for table classes."""

    def consumed(self, tables: Sequence[str], start_ms: int, end_ms: int) -> dict[str, Usage]:
        """Read and write units each table consumed in ``[start_ms, end_ms)`` (0 without data points)."""


class CloudWatchUsage:
    """:class:`UsageApi` on a boto3 CloudWatch client."""

    def __init__(self, cloudwatch: Any) -> None:
        self._cloudwatch = cloudwatch

    def consumed(self, tables: Sequence[str], start_ms: int, end_ms: int) -> dict[str, Usage]:
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
            kwargs: dict[str, Any] = {
                "MetricDataQueries": queries[first : first + QUERIES_PER_CALL],
                "StartTime": datetime.fromtimestamp(start_ms / 1000, UTC),
                "EndTime": datetime.fromtimestamp(end_ms / 1000, UTC),
            }
            while True:
                page = self._cloudwatch.get_metric_data(**kwargs)
                for result in page.get("MetricDataResults", []):
                    sums[result["Id"]] = sums.get(result["Id"], 0.0) + float(sum(result.get("Values", [])))
                if not page.get("NextToken"):
                    break
                kwargs["NextToken"] = page["NextToken"]
        return {
            table: Usage(sums.get(f"r{index}", 0.0), sums.get(f"w{index}", 0.0), end_ms - start_ms)
            for index, table in enumerate(tables)
        }
