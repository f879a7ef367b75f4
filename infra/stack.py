"""The stack: it only composes the constructs and publishes what operators need."""

from __future__ import annotations

from aws_cdk import CfnOutput, RemovalPolicy, Stack
from constructs import Construct

from infra.config import AppConfig
from infra.ingestion import Ingestion
from infra.storage import Storage

_REMOVAL = {"retain": RemovalPolicy.RETAIN, "destroy": RemovalPolicy.DESTROY}


class TimeSeriesStack(Stack):
    """Write-sharded time-series ingestion. Environment-agnostic: no account or region lookups."""

    def __init__(self, scope: Construct, construct_id: str, *, config: AppConfig) -> None:
        retention = f"one table per {config.table_period}" if config.table_period else "TTL on one table"
        super().__init__(
            scope,
            construct_id,
            stack_name=config.stack_name,
            description=(
                f"Write-sharded time-series ingestion: {config.layout_kind} layout, {config.shards} shards, "
                f"{config.bucket} buckets, {retention}, {config.retention} retention"
            ),
        )
        self.config = config
        removal_policy = _REMOVAL[config.storage.removal_policy]

        self.storage = Storage(self, "Storage", config=config.storage, removal_policy=removal_policy)
        self.ingestion = Ingestion(self, "Ingestion", config=config.stream, removal_policy=removal_policy)

        # Plain outputs, not CloudFormation exports: an export pins its value for
        # as long as another stack imports it, which would block every rename.
        if self.storage.readings_table is not None:
            CfnOutput(
                self,
                "ReadingsTableName",
                value=self.storage.readings_table.table_name,
                description="The readings table (one table, TTL retention)",
            )
        CfnOutput(
            self,
            "TablePrefix",
            value=config.storage.table_prefix,
            description=(
                "Readings tables are named <prefix>-<period label> and created by the rotator"
                if config.table_period
                else "The readings table's name: the layout's table prefix"
            ),
        )
        CfnOutput(
            self,
            "ControlTableName",
            value=self.storage.control_table.table_name,
            description="The control table holding the shard map",
        )
        CfnOutput(
            self,
            "IngestStreamName",
            value=self.ingestion.stream.stream_name,
            description="The Kinesis data stream producers publish readings to",
        )
        CfnOutput(
            self,
            "RejectsQueueUrl",
            value=self.ingestion.rejects_queue.queue_url,
            description="The SQS queue holding readings ingest rejected, each with its reason",
        )
