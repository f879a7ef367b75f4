"""Storage: the readings table (when there is one fixed table) and the control table.

Key schemas come from ``infra.config`` (``READINGS_SCHEMA``, ``CONTROL_SCHEMA``),
which the local runtime uses too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.acknowledgements import account_arn, acknowledge_wildcard
from infra.config import CONTROL_SCHEMA, READINGS_SCHEMA, Context, TableSchema
from keydesign.periods import table_head

#: The partition key of the shard-map item (``adapters.shard_map_store``): the
#: only control-table item ingest and query touch.
SHARD_MAP_PARTITION = "shardmap"
#: Partition keys of the occupancy records and their marker (keydesign.occupancy).
OCCUPANCY_PARTITIONS = "occupancy#*"
#: What the hot-key detector does on the control table: the shard map
#: (conditional puts), window counters (ADD), claims, cooldowns, and reading
#: a window's counters back (Query, BatchGetItem).
HOT_KEY_CONTROL_ACTIONS = (
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
    "dynamodb:DeleteItem",
    "dynamodb:Query",
    "dynamodb:BatchGetItem",
)
#: Reading a table's stream, as the event source mapping does for the fixed table
#: (CDK's TableV2.grant_stream_read scopes all four to the stream, as here).
STREAM_READ_ACTIONS = (
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
)

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

    def __init__(self, scope: Construct, construct_id: str, *, config: Context, removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, construct_id)
        self._head = table_head(config.table_prefix)

        name = config.readings_table_name
        self.readings_table = None if name is None else self._readings_table(config, name, removal_policy)

        # The shard map's history is what tells a reader which partitions hold a
        # bucket: without it old readings cannot be found. So it is always
        # point-in-time recoverable, whatever the readings table does. Its
        # traffic is a read per writer per cache TTL plus the hot-key detector's
        # counters: on demand. TTL (``expires_at``) removes expired counters,
        # claims and cooldowns; the shard map item carries no ``expires_at``.
        self.control_table = dynamodb.TableV2(
            self,
            "ControlTable",
            table_name=config.control_table,
            **_schema(CONTROL_SCHEMA),
            billing=dynamodb.Billing.on_demand(),
            encryption=dynamodb.TableEncryptionV2.aws_managed_key(),
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=config.deletion_protection,
            removal_policy=removal_policy,
        )

    # -- grants: each names the actions one function's code calls, on the tables it calls them on

    def readings_table_arns(self) -> list[str]:
        """The fixed readings table, or every ``<prefix>-*`` table the rotator may create."""
        if self.readings_table is not None:
            return [self.readings_table.table_arn]
        return [self._prefixed_arn("*")]

    def grant_readings_write(self, grantee: iam.IGrantable) -> None:
        """Ingest: BatchWriteItem, nothing else (no reads, no deletes)."""
        self._allow(grantee, ["dynamodb:BatchWriteItem"], self.readings_table_arns())
        self._acknowledge_period_tables(grantee, "*", "writes readings to the table of each reading's period")

    def grant_readings_query(self, grantee: iam.IGrantable) -> None:
        """The query API: Query, nothing else (no Scan, no GetItem)."""
        self._allow(grantee, ["dynamodb:Query"], self.readings_table_arns())
        self._acknowledge_period_tables(grantee, "*", "queries the tables of the periods a request's range covers")

    def grant_readings_stream_read(self, grantee: iam.IGrantable) -> None:
        """The hot-key detector on the per-period tables' streams, which appear at run time.

        (On the fixed table, its event source mapping grants the same on that table's stream.)
        """
        self._allow(grantee, list(STREAM_READ_ACTIONS), [self._prefixed_arn("*/stream/*")])
        self._acknowledge_period_tables(
            grantee, "*/stream/*", "reads the stream of every period's table (the rotator maps each one to it)"
        )

    def grant_shard_map_read(self, grantee: iam.IGrantable) -> None:
        """The query API reads the shard map item and nothing else in the control table."""
        self.grant_control_keys(grantee, ["dynamodb:GetItem"], [SHARD_MAP_PARTITION])

    def grant_control_keys(self, grantee: iam.IGrantable, actions: list[str], keys: Sequence[str]) -> None:
        """``actions`` on the control table's items whose partition key is one of ``keys`` (``*`` patterns
        among them, or exact keys), and on no other item: never the shard map, counters or claims by accident."""
        match = "ForAllValues:StringLike" if any("*" in key for key in keys) else "ForAllValues:StringEquals"
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=actions,
                resources=[self.control_table.table_arn],
                conditions={match: {"dynamodb:LeadingKeys": list(keys)}},
            )
        )

    def grant_control_table_use(self, grantee: iam.IGrantable) -> None:
        """The hot-key detector: shard map, counters, claims and cooldowns (many partition keys)."""
        self._allow(grantee, list(HOT_KEY_CONTROL_ACTIONS), [self.control_table.table_arn])

    def _acknowledge_period_tables(self, grantee: iam.IGrantable, suffix: str, does: str) -> None:
        if self.readings_table is not None or not isinstance(grantee.grant_principal, Construct):
            return
        acknowledge_wildcard(
            grantee.grant_principal,
            account_arn("dynamodb", f"table/{self._head}{suffix}"),
            f"With a table period the rotator creates one readings table per period at run time, named "
            f"'{self._head}<period label>'; this function {does}, so it cannot name them in advance. The pattern "
            "matches only those tables: the configuration refuses a control table name inside that namespace.",
        )

    @staticmethod
    def _allow(grantee: iam.IGrantable, actions: list[str], resources: list[str]) -> None:
        grantee.grant_principal.add_to_principal_policy(iam.PolicyStatement(actions=actions, resources=resources))

    def _prefixed_arn(self, suffix: str) -> str:
        return Stack.of(self).format_arn(service="dynamodb", resource="table", resource_name=f"{self._head}{suffix}")

    def _readings_table(self, config: Context, name: str, removal_policy: RemovalPolicy) -> dynamodb.TableV2:
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


def _billing(config: Context) -> dynamodb.Billing:
    if config.billing_mode == "PAY_PER_REQUEST":
        return dynamodb.Billing.on_demand()
    target = config.autoscaling_target_percent
    # TableV2 (AWS::DynamoDB::GlobalTable) only accepts autoscaled write
    # capacity; reads scale the same way so one target governs both.
    return dynamodb.Billing.provisioned(
        read_capacity=dynamodb.Capacity.autoscaled(
            min_capacity=config.read_capacity_min,
            max_capacity=config.read_capacity_max,
            target_utilization_percent=target,
        ),
        write_capacity=dynamodb.Capacity.autoscaled(
            min_capacity=config.write_capacity_min,
            max_capacity=config.write_capacity_max,
            target_utilization_percent=target,
        ),
    )
