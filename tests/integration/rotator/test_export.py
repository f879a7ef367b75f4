"""Past retention, with EXPORT_BUCKET set: export to S3 first, drop only on a later run
that finds the export COMPLETED. moto runs ExportTableToPointInTime (and needs PITR,
as DynamoDB does); what it cannot report (an export still running or failed) is
edited into DescribeExport's response."""

from __future__ import annotations

from typing import Any

import pytest

from rotator.logic import EXPORT_ATTEMPTS, EXPORTS_LOOKED_AT
from tests.integration.rotator.conftest import HOUR, Clients, World
from tests.integration.rotator.test_faults import prepared

pytestmark = pytest.mark.integration

EXPORT = {"EXPORT_BUCKET": "readings-archive", "EXPORT_PREFIX": "exports"}
OLD = "readings-2026-11-22"


def record_exports(clients: Clients) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(dict(params))

    clients.dynamodb.meta.events.register("provide-client-params.dynamodb.ExportTableToPointInTime", record)
    return calls


def exported_keys(world: World) -> list[str]:
    listed = world.s3.list_objects_v2(Bucket="readings-archive", Prefix=f"exports/{OLD}/")
    return [o["Key"] for o in listed.get("Contents", [])]


def test_an_expired_table_is_exported_and_dropped_on_a_later_run(world: World) -> None:
    rotator, clients, _ = prepared(world, **EXPORT)
    exports = record_exports(clients)

    # When the table expires, the run starts its export and keeps the table
    first = rotator.run()
    assert first.errors == []
    assert first.exports_started == [OLD] and first.deleted == []
    assert OLD in world.ours()
    assert len(exports) == 1
    request = exports[0]
    assert (request["S3Bucket"], request["S3Prefix"], request["ExportFormat"]) == (
        "readings-archive",
        f"exports/{OLD}",
        "DYNAMODB_JSON",
    )
    assert request["TableArn"] == world.table(OLD)["TableArn"] and request["ClientToken"]
    assert exported_keys(world), "the export wrote its data under the table's prefix"

    # Then the next run finds it COMPLETED and drops the table (its mapping and alarms went when it closed)
    second = rotator.run()
    assert second.exported == [OLD] and second.deleted == [OLD]
    assert OLD not in world.ours() and OLD not in world.mapped_tables()
    assert not [a for a in world.alarm_names() if a.startswith(f"{OLD}-")]
    assert len(exports) == 1, "no second export"

    clients.log.clear()
    assert rotator.run().changes == 0 and clients.log.changes == []


def test_an_export_in_progress_holds_the_drop(world: World) -> None:
    rotator, clients, _ = prepared(world, **EXPORT)
    rotator.run()

    def running(parsed: dict[str, Any]) -> None:
        parsed["ExportDescription"]["ExportStatus"] = "IN_PROGRESS"

    clients.edit("DescribeExport", running)
    summary = rotator.run()
    assert summary.deleted == [] and summary.exports_started == [] and summary.errors == []
    assert "in progress" in " ".join(s.reason for s in summary.skipped if s.table == OLD)
    assert OLD in world.ours()


def test_a_failed_export_is_reported_and_tried_again_with_a_new_token(world: World) -> None:
    rotator, clients, _ = prepared(world, **EXPORT)
    exports = record_exports(clients)
    rotator.run()
    failing = [True]

    def failed(parsed: dict[str, Any]) -> None:
        if failing[0]:
            parsed["ExportDescription"].update(
                ExportStatus="FAILED", FailureCode="S3AccessDenied", FailureMessage="denied"
            )

    clients.edit("DescribeExport", failed)
    second = rotator.run()
    assert [(e.table, e.code) for e in second.errors] == [(OLD, "ExportFailed")]
    assert "S3AccessDenied: denied" in second.errors[0].message
    assert second.exports_started == [OLD] and second.deleted == []
    assert len(exports) == 2 and exports[0]["ClientToken"] != exports[1]["ClientToken"]

    failing[0] = False
    third = rotator.run()
    assert third.deleted == [OLD] and third.errors == []


def test_an_export_that_keeps_failing_is_given_up_with_an_error_and_the_table_kept(world: World) -> None:
    rotator, clients, clock = prepared(world, **EXPORT)
    exports = record_exports(clients)

    def failed(parsed: dict[str, Any]) -> None:
        parsed["ExportDescription"].update(ExportStatus="FAILED", FailureCode="S3AccessDenied", FailureMessage="no")

    clients.edit("DescribeExport", failed)
    listed: list[dict[str, Any]] = []
    clients.dynamodb.meta.events.register(
        "provide-client-params.dynamodb.ListExports", lambda params, **_: listed.append(dict(params))
    )
    # Given the export fails every time: the first run starts it, the next two start it again
    codes = [[e.code for e in rotator.run().errors if e.table == OLD] for _ in range(3)]
    assert codes == [[], ["ExportFailed"], ["ExportFailed"]] and len(exports) == 3
    # Then after EXPORT_ATTEMPTS failures no new export is started, every run says so, and the table stays
    for _ in range(3):
        clock.advance(HOUR)
        summary = rotator.run()
        assert [e.code for e in summary.errors if e.table == OLD] == ["ExportAbandoned"]
        assert "export it by hand" in summary.errors[0].message
    assert len(exports) == EXPORT_ATTEMPTS and OLD in world.ours()
    # And each run looked at one page of at most EXPORTS_LOOKED_AT exports
    assert {p["MaxResults"] for p in listed} == {EXPORTS_LOOKED_AT} and len(listed) == 6


def test_a_dry_run_reports_the_export_and_starts_none(world: World) -> None:
    rotator, clients, _ = prepared(world, **EXPORT)
    exports = record_exports(clients)
    summary = rotator.run(dry_run=True)
    assert summary.exports_started == [OLD] and summary.deleted == []
    assert exports == [] and exported_keys(world) == []
