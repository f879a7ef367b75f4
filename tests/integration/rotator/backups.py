"""DynamoDB's TTL at its most eager and its point-in-time backups, on the test's clock, for moto (which has
neither: it never deletes an expired item, and it exports a table as it is, whatever ExportTime says).

* :meth:`Backups.sweep` deletes every item whose ``ttl`` has passed, at the first moment DynamoDB may
  (it usually takes hours to days, but nothing promises that);
* every write the test makes (:meth:`Backups.put`) and every delete the sweeper makes is journaled with its
  time, so the table as it was at any moment can be rebuilt (:meth:`Backups.as_of`);
* an ExportTableToPointInTime through a hooked client exports the table as it was at its ``ExportTime``
  (as it is now, without one), after DynamoDB's checks of that time: point-in-time recovery on since then, within
  its 35-day window, and no later than 5 minutes ago (``InvalidExportTimeException`` otherwise).
  moto's export runs in a thread: the table is set to that moment's items until it has COMPLETED, then put
  back as it is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError

from doubles.clocks import ManualClock
from tests.integration.rotator.conftest import DAY, MINUTE

PITR_DAYS = 35
#: LatestRestorableDateTime trails the clock by about this much.
PITR_LAG_MS = 5 * MINUTE


def _key(item: dict[str, Any]) -> tuple[str, str]:
    return item["pk"]["S"], item["sk"]["S"]


@dataclass
class Backups:
    dynamodb: Any  # a plain client: what this fake does is not the rotator's
    clock: ManualClock[int]
    #: Per table: (time, item or None for a delete, key), in order.
    journal: dict[str, list[tuple[int, dict[str, Any] | None, tuple[str, str]]]] = field(default_factory=dict)
    #: When point-in-time recovery went on, per table (test clock).
    pitr_since: dict[str, int] = field(default_factory=dict)
    swept: int = 0

    def install(self, dynamodb: Any) -> None:
        """Point-in-time exports on ``dynamodb`` (the rotator's client)."""
        events = dynamodb.meta.events
        events.register("provide-client-params.dynamodb.ExportTableToPointInTime", self._before_export)
        events.register("after-call.dynamodb.ExportTableToPointInTime", self._after_export)
        events.register("provide-client-params.dynamodb.UpdateContinuousBackups", self._pitr_on)

    def put(self, table: str, item: dict[str, Any]) -> None:
        self.dynamodb.put_item(TableName=table, Item=item)
        self.journal.setdefault(table, []).append((self.clock(), item, _key(item)))

    def items(self, table: str) -> list[dict[str, Any]]:
        pages = self.dynamodb.get_paginator("scan").paginate(TableName=table)
        return [item for page in pages for item in page["Items"]]

    def sweep(self) -> None:
        """Delete every expired item of every table whose TTL is on, now."""
        now_s = self.clock() / 1000
        for table in self.dynamodb.list_tables()["TableNames"]:
            ttl = self.dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
            if ttl.get("TimeToLiveStatus") != "ENABLED":
                continue
            attribute = ttl["AttributeName"]
            for item in self.items(table):
                if attribute in item and float(item[attribute]["N"]) <= now_s:
                    pk, sk = _key(item)
                    self.dynamodb.delete_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": sk}})
                    self.journal.setdefault(table, []).append((self.clock(), None, (pk, sk)))
                    self.swept += 1

    def as_of(self, table: str, at_ms: int) -> list[dict[str, Any]]:
        """The table's items at ``at_ms``, rebuilt from the journal."""
        items: dict[tuple[str, str], dict[str, Any]] = {}
        for when, item, key in self.journal.get(table, []):
            if when > at_ms:
                break
            if item is None:
                items.pop(key, None)
            else:
                items[key] = item
        return list(items.values())

    # -- the export ---------------------------------------------------------------------

    def _pitr_on(self, params: dict[str, Any], **_: Any) -> None:
        if params["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"]:
            self.pitr_since.setdefault(params["TableName"], self.clock())

    _exporting: tuple[str, list[dict[str, Any]]] | None = None

    def _before_export(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        table = params["TableArn"].split(":table/")[1]
        now = self.clock()
        export_time: datetime | None = params.get("ExportTime")
        at_ms = now if export_time is None else int(export_time.timestamp() * 1000)
        since = self.pitr_since.get(table)
        if since is None:  # off: moto refuses, as DynamoDB does (PointInTimeRecoveryUnavailableException)
            return
        if export_time is not None and not max(since, now - PITR_DAYS * DAY) <= at_ms <= now - PITR_LAG_MS:
            raise ClientError(
                {"Error": {"Code": "InvalidExportTimeException", "Message": "ExportTime is outside the PITR window"}},
                model.name,
            )
        current = self.items(table)
        self._replace(table, current, self.as_of(table, at_ms))
        self._exporting = (table, current)

    def _after_export(self, parsed: dict[str, Any], **_: Any) -> None:
        if self._exporting is None:
            return
        table, current = self._exporting
        self._exporting = None
        arn = parsed["ExportDescription"]["ExportArn"]
        deadline = time.monotonic() + 30
        while self.dynamodb.describe_export(ExportArn=arn)["ExportDescription"]["ExportStatus"] == "IN_PROGRESS":
            assert time.monotonic() < deadline, "moto's export did not complete"
            time.sleep(0.01)
        self._replace(table, self.items(table), current)

    def _replace(self, table: str, now: list[dict[str, Any]], then: list[dict[str, Any]]) -> None:
        for item in now:
            pk, sk = _key(item)
            self.dynamodb.delete_item(TableName=table, Key={"pk": {"S": pk}, "sk": {"S": sk}})
        for item in then:
            self.dynamodb.put_item(TableName=table, Item=item)
