"""DynamoDB control-plane access for the rotator, behind a small interface: :class:`DynamoTables`,
on a boto3 client (real, moto-backed, or wrapped by a test's fault hooks).

Outcomes that mean "someone already did it" are answered here, in one place,
because they are what makes two runs at once safe:

* CreateTable on an existing table (``ResourceInUseException``) -> ``None``;
* DeleteTable on a missing table (``ResourceNotFoundException``) -> ``False``;
* UpdateTimeToLive when TTL is already on, UpdateTable to what the table
  already has (``ValidationException``) -> done.

Every other ``ClientError`` propagates for the logic to classify (limit
exceeded, busy, or a real failure).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from botocore.exceptions import ClientError

from adapters.clients import deleted, error_code, error_message

#: Contributor Insights modes, as UpdateContributorInsights names them.
InsightsMode = Literal["THROTTLED_KEYS", "ACCESSED_AND_THROTTLED_KEYS"]
STANDARD = "STANDARD"
INFREQUENT_ACCESS = "STANDARD_INFREQUENT_ACCESS"


@dataclass(frozen=True, slots=True)
class TableState:
    """What DescribeTable says about a table, in the terms the rotator decides on."""

    arn: str
    status: str
    billing_mode: str
    read_units: int
    write_units: int
    warm_write_units: int | None
    stream_arn: str | None
    deletion_protection: bool
    table_class: str
    #: DynamoDB refreshes it about every six hours.
    size_bytes: int
    #: When the table was created (epoch ms; None if DescribeTable does not say).
    created_ms: int | None = None

    @property
    def provisioned(self) -> bool:
        return self.billing_mode == "PROVISIONED"

    @classmethod
    def from_description(cls, table: Mapping[str, Any]) -> TableState:
        throughput = table.get("ProvisionedThroughput") or {}
        # A table created on-demand has no BillingModeSummary in some responses; zero units says so too.
        mode = (table.get("BillingModeSummary") or {}).get("BillingMode") or (
            "PROVISIONED" if throughput.get("WriteCapacityUnits") else "PAY_PER_REQUEST"
        )
        stream = table.get("StreamSpecification") or {}
        warm = table.get("WarmThroughput") or {}
        return cls(
            arn=str(table["TableArn"]),
            status=str(table.get("TableStatus", "UNKNOWN")),
            billing_mode=str(mode),
            read_units=int(throughput.get("ReadCapacityUnits") or 0),
            write_units=int(throughput.get("WriteCapacityUnits") or 0),
            warm_write_units=int(warm["WriteUnitsPerSecond"]) if warm.get("WriteUnitsPerSecond") else None,
            stream_arn=str(table["LatestStreamArn"])
            if stream.get("StreamEnabled") and table.get("LatestStreamArn")
            else None,
            deletion_protection=bool(table.get("DeletionProtectionEnabled", False)),
            # A table never moved off the default class may carry no summary at all.
            table_class=str((table.get("TableClassSummary") or {}).get("TableClass") or STANDARD),
            size_bytes=int(table.get("TableSizeBytes") or 0),
            created_ms=int(created.timestamp() * 1000) if (created := table.get("CreationDateTime")) else None,
        )


@dataclass(frozen=True, slots=True)
class ExportState:
    """One point-in-time export of a table."""

    status: str  # IN_PROGRESS | COMPLETED | FAILED
    bucket: str | None
    prefix: str | None
    failure: str | None

    @classmethod
    def from_description(cls, export: Mapping[str, Any]) -> ExportState:
        failure = export.get("FailureCode")
        if failure and export.get("FailureMessage"):
            failure = f"{failure}: {export['FailureMessage']}"
        return cls(
            status=str(export.get("ExportStatus", "UNKNOWN")),
            bucket=export.get("S3Bucket"),
            prefix=export.get("S3Prefix"),
            failure=str(failure) if failure else None,
        )


class DynamoTables:
    """The DynamoDB calls the rotator makes, on a boto3 client."""

    def __init__(self, dynamodb: Any) -> None:
        self._dynamodb = dynamodb

    def list_names(self) -> list[str]:
        return [name for page in self._dynamodb.get_paginator("list_tables").paginate() for name in page["TableNames"]]

    def describe(self, name: str) -> TableState | None:
        """None when the table does not exist."""
        try:
            response = self._dynamodb.describe_table(TableName=name)
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise
        return TableState.from_description(response["Table"])

    def create(self, request: Mapping[str, Any]) -> TableState | None:
        try:
            response = self._dynamodb.create_table(**request)
        except ClientError as exc:
            if error_code(exc) == "ResourceInUseException":
                return None
            raise
        return TableState.from_description(response["TableDescription"])

    def ttl(self, name: str) -> tuple[str, str | None]:
        """TTL status (ENABLED, ENABLING, DISABLED, DISABLING) and attribute."""
        description = self._dynamodb.describe_time_to_live(TableName=name).get("TimeToLiveDescription", {})
        return str(description.get("TimeToLiveStatus", "DISABLED")), description.get("AttributeName")

    def enable_ttl(self, name: str, attribute: str) -> None:
        try:
            self._dynamodb.update_time_to_live(
                TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": attribute}
            )
        except ClientError as exc:
            if error_code(exc) == "ValidationException" and "already enabled" in error_message(exc).lower():
                return
            raise

    def pitr_enabled(self, name: str) -> bool:
        description = self._dynamodb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
        status = (description.get("PointInTimeRecoveryDescription") or {}).get("PointInTimeRecoveryStatus")
        return status == "ENABLED"

    def enable_pitr(self, name: str) -> None:
        self._dynamodb.update_continuous_backups(
            TableName=name, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )

    def update(self, name: str, changes: Mapping[str, Any]) -> None:
        try:
            self._dynamodb.update_table(TableName=name, **changes)
        except ClientError as exc:
            # Another run got there first: the table already has what we asked for.
            if error_code(exc) == "ValidationException" and "will not change" in error_message(exc).lower():
                return
            raise

    def insights(self, name: str) -> tuple[str, str | None]:
        """Contributor Insights status (ENABLED, ENABLING, DISABLED, DISABLING, FAILED) and mode."""
        described = self._dynamodb.describe_contributor_insights(TableName=name)
        return str(described.get("ContributorInsightsStatus", "DISABLED")), described.get("ContributorInsightsMode")

    def set_insights(self, name: str, mode: InsightsMode | None) -> None:
        if mode is None:
            self._dynamodb.update_contributor_insights(TableName=name, ContributorInsightsAction="DISABLE")
            return
        self._dynamodb.update_contributor_insights(
            TableName=name, ContributorInsightsAction="ENABLE", ContributorInsightsMode=mode
        )

    def tags(self, arn: str) -> dict[str, str]:
        pages = self._dynamodb.get_paginator("list_tags_of_resource").paginate(ResourceArn=arn)
        return {tag["Key"]: tag["Value"] for page in pages for tag in page.get("Tags", [])}

    def exports(self, arn: str, limit: int) -> tuple[list[ExportState], bool]:
        """The first ``limit`` exports of the table (one ListExports page, then one DescribeExport each:
        only the description names the bucket and prefix that say an export is ours), and whether there
        are more."""
        page = self._dynamodb.list_exports(TableArn=arn, MaxResults=limit)
        described = [
            ExportState.from_description(
                self._dynamodb.describe_export(ExportArn=summary["ExportArn"])["ExportDescription"]
            )
            for summary in page.get("ExportSummaries", [])[:limit]
        ]
        return described, bool(page.get("NextToken"))

    def start_export(self, request: Mapping[str, Any]) -> None:
        self._dynamodb.export_table_to_point_in_time(**request)

    def delete(self, name: str) -> bool:
        return deleted(lambda: self._dynamodb.delete_table(TableName=name))
