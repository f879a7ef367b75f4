"""Storage: the readings table (when there is one fixed table) and the control table.

Key schemas come from ``infra.config`` (``READINGS_SCHEMA``, ``CONTROL_SCHEMA``),
which the local runtime uses too.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from infra.config import CONTROL_SCHEMA, READINGS_SCHEMA, StorageConfig, TableSchema

_STREAM_VIEWS = {"KEYS_ONLY": dynamodb.StreamViewType.KEYS_ONLY}
_INSIGHTS = {
    "throttled_keys": dynamodb.ContributorInsightsMode.THROTTLED_KEYS,
    "accessed_and_throttled_keys": dynamodb.ContributorInsightsMode.ACCESSED_AND_THROTTLED_KEYS,
}


class Storage(Construct):
    """The DynamoDB tables the stack owns.

    ``readings_table`` is None when ``table_period`` is set: the rotator then
    creates, pre-warms and drops one ``<table_prefix>-<period>`` table per
    period at run time. CloudFormation must not own those tables (a stack
    update would fight the rotator over them), so this construct creates no
    readings table at all in that mode.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: StorageConfig, removal_policy: RemovalPolicy
    ) -> None:
        super().__init__(scope, construct_id)

        self.readings_table: dynamodb.TableV2 | None
        if config.readings_table_name is None:
            self.readings_table = None
        else:
            self.readings_table = self._readings_table(config, config.readings_table_name, removal_policy)

        # The shard map's history is what tells a reader which partitions hold a
        # bucket: without it old readings cannot be found. So it is always
        # point-in-time recoverable, whatever the readings table does. Its
        # traffic is a read per writer per cache TTL: on-demand costs cents.
        self.control_table = dynamodb.TableV2(
            self,
            "ControlTable",
            table_name=config.control_table_name,
            **_schema(CONTROL_SCHEMA),
            billing=dynamodb.Billing.on_demand(),
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=config.deletion_protection,
            removal_policy=removal_policy,
        )

    def _readings_table(self, config: StorageConfig, name: str, removal_policy: RemovalPolicy) -> dynamodb.TableV2:
        insights = _INSIGHTS.get(config.contributor_insights)
        warm = (
            dynamodb.WarmThroughput(write_units_per_second=config.warm_writes_per_s)
            if config.warm_writes_per_s is not None
            else None
        )
        return dynamodb.TableV2(
            self,
            "ReadingsTable",
            # The physical name is the layout's table name: the Lambdas derive it
            # from TABLE_PREFIX through the key-design layer, never from a lookup.
            table_name=name,
            **_schema(READINGS_SCHEMA),
            billing=_billing(config),
            warm_throughput=warm,
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=config.point_in_time_recovery
            ),
            contributor_insights_specification=(
                dynamodb.ContributorInsightsSpecification(enabled=True, mode=insights) if insights else None
            ),
            deletion_protection=config.deletion_protection,
            removal_policy=removal_policy,
        )


def _schema(schema: TableSchema) -> dict[str, Any]:
    """TableV2 keyword arguments for the key schema, TTL and stream."""
    return {
        "partition_key": dynamodb.Attribute(name=schema.partition_key, type=dynamodb.AttributeType.STRING),
        "sort_key": dynamodb.Attribute(name=schema.sort_key, type=dynamodb.AttributeType.STRING),
        "time_to_live_attribute": schema.ttl_attribute,
        "dynamo_stream": _STREAM_VIEWS[schema.stream_view] if schema.stream_view else None,
    }


def _billing(config: StorageConfig) -> dynamodb.Billing:
    if config.billing_mode == "PAY_PER_REQUEST":
        return dynamodb.Billing.on_demand()
    capacity = config.capacity
    # TableV2 (AWS::DynamoDB::GlobalTable) only accepts autoscaled write
    # capacity; reads scale the same way so one target governs both.
    return dynamodb.Billing.provisioned(
        read_capacity=dynamodb.Capacity.autoscaled(
            min_capacity=capacity.read_min,
            max_capacity=capacity.read_max,
            target_utilization_percent=capacity.target_percent,
        ),
        write_capacity=dynamodb.Capacity.autoscaled(
            min_capacity=capacity.write_min,
            max_capacity=capacity.write_max,
            target_utilization_percent=capacity.target_percent,
        ),
    )
