"""CloudWatch alarms of the rotated tables, behind a small interface.

PutMetricAlarm creates or replaces, and DeleteAlarms ignores names that do not
exist, so both are safe to repeat and to race.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: DeleteAlarms takes at most this many names per call.
DELETE_BATCH = 100


@dataclass(frozen=True, slots=True)
class ExistingAlarm:
    name: str
    description: str


class AlarmApi(Protocol):
    """The CloudWatch calls the rotator makes."""

    def list(self, name_prefix: str) -> dict[str, ExistingAlarm]: ...

    def put(self, request: Mapping[str, Any]) -> None: ...

    def delete(self, names: Sequence[str]) -> None: ...


class CloudWatchAlarms:
    """:class:`AlarmApi` on a boto3 CloudWatch client."""

    def __init__(self, cloudwatch: Any) -> None:
        self._cloudwatch = cloudwatch

    def list(self, name_prefix: str) -> dict[str, ExistingAlarm]:
        found: dict[str, ExistingAlarm] = {}
        paginator = self._cloudwatch.get_paginator("describe_alarms")
        for page in paginator.paginate(AlarmNamePrefix=name_prefix, AlarmTypes=["MetricAlarm"]):
            for alarm in page.get("MetricAlarms", []):
                found[alarm["AlarmName"]] = ExistingAlarm(alarm["AlarmName"], alarm.get("AlarmDescription", ""))
        return found

    def put(self, request: Mapping[str, Any]) -> None:
        self._cloudwatch.put_metric_alarm(**request)

    def delete(self, names: Sequence[str]) -> None:
        for start in range(0, len(names), DELETE_BATCH):
            self._cloudwatch.delete_alarms(AlarmNames=list(names[start : start + DELETE_BATCH]))
