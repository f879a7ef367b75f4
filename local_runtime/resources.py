"""The local resources, built from the configuration the CDK stack is built from.

Table names, key schemas, TTL and stream settings come from
:class:`infra.config.Context` and :data:`infra.config.READINGS_SCHEMA` /
:data:`infra.config.CONTROL_SCHEMA` (the objects ``infra/storage.py`` builds
its tables from); the stream, queues and topic from the same configuration.
``tests/integration/local_runtime/test_provisioning_matches_stack.py``
compares what is created here with the synthesized template, so the two
cannot drift apart.

The stack lets CloudFormation name the stream, the queues, the topic and the
cursor-signing secret; locally they need names, derived from the stack name
(:class:`ResourceNames`). With per-period tables the rotator builds every
readings table, as in AWS (the stack creates none), and with ``export_bucket``
set local mode creates that bucket (an operator names theirs).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.occupancy import OccupancyStore
from infra.config import CONTROL_SCHEMA, READINGS_SCHEMA, Context, TableSchema
from keydesign.periods import table_head
from local_runtime.environment import assert_loopback

#: SQS's maximum retention, as the stack sets on the rejects queue (``infra.ingestion.REJECTS_RETENTION``).
QUEUE_RETENTION_S = 14 * 24 * 3600


@dataclass(frozen=True, slots=True)
class TableDefinition:
    """One table: the CreateTable request and the TTL attribute to enable after it."""

    name: str
    schema: TableSchema
    billing_mode: str
    provisioned: tuple[int, int] | None = None  # (read, write) units when PROVISIONED

    def create_request(self) -> dict[str, Any]:
        schema = self.schema
        request: dict[str, Any] = {
            "TableName": self.name,
            "AttributeDefinitions": [
                {"AttributeName": schema.partition_key, "AttributeType": "S"},
                {"AttributeName": schema.sort_key, "AttributeType": "S"},
            ],
            "KeySchema": [
                {"AttributeName": schema.partition_key, "KeyType": "HASH"},
                {"AttributeName": schema.sort_key, "KeyType": "RANGE"},
            ],
            "BillingMode": self.billing_mode,
        }
        if self.provisioned is not None:
            read, write = self.provisioned
            request["ProvisionedThroughput"] = {"ReadCapacityUnits": read, "WriteCapacityUnits": write}
        if schema.stream_view is not None:
            request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": schema.stream_view}
        return request


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Every name local mode creates."""

    readings_tables: tuple[str, ...]
    control_table: str
    stream: str
    rejects_queue: str
    ingest_failures_queue: str
    hotkeys_failures_queue: str
    alarm_topic: str
    cursor_secret: str

    @classmethod
    def for_config(cls, config: Context, now_ms: int) -> ResourceNames:
        stack = config.stack_name
        return cls(
            readings_tables=readings_tables(config, now_ms),
            control_table=config.control_table,
            stream=f"{stack}-readings",
            rejects_queue=f"{stack}-rejects",
            ingest_failures_queue=f"{stack}-ingest-failures",
            hotkeys_failures_queue=f"{stack}-hotkeys-failures",
            alarm_topic=f"{stack}-hot-keys",
            cursor_secret=f"{stack}-cursor-key",
        )


def readings_tables(config: Context, now_ms: int) -> tuple[str, ...]:
    """The fixed readings table; with per-period tables, the current period's and the next one's.

    The next one exists before its period starts because a reading is routed
    by its event time, and producers' clocks run a little ahead; in AWS the
    rotator pre-builds it the same way.
    """
    if config.readings_table_name is not None:
        return (config.readings_table_name,)
    layout = config.layout()
    period = layout.table_period
    assert period is not None  # noqa: S101 - no fixed table means a table period
    return (layout.table_for(now_ms), layout.table_for(period.next_start(now_ms)))


def existing_readings_tables(dynamodb: Any, config: Context) -> tuple[str, ...]:
    """The readings tables that exist now: the fixed one, or every period's."""
    if config.readings_table_name is not None:
        return (config.readings_table_name,)
    prefix = table_head(config.table_prefix)
    pages = dynamodb.get_paginator("list_tables").paginate()
    return tuple(sorted(t for page in pages for t in page.get("TableNames", []) if t.startswith(prefix)))


def table_definitions(config: Context, names: ResourceNames) -> list[TableDefinition]:
    """The readings table(s) with the configured billing, and the control table (always on demand, as the stack)."""
    billing = config.billing_mode
    provisioned = (config.read_capacity_min, config.write_capacity_min) if billing == "PROVISIONED" else None
    tables = [TableDefinition(name, READINGS_SCHEMA, billing, provisioned) for name in names.readings_tables]
    tables.append(TableDefinition(names.control_table, CONTROL_SCHEMA, "PAY_PER_REQUEST"))
    return tables


@dataclass(frozen=True, slots=True)
class Resources:
    """What was provisioned: names, and the ARNs and URLs the handlers and clients need."""

    names: ResourceNames
    stream_arn: str
    rejects_queue_url: str
    ingest_failures_queue_url: str
    ingest_failures_queue_arn: str
    alarm_topic_arn: str
    table_stream_arns: Mapping[str, str] = field(default_factory=dict)
    hotkeys_failures_queue_url: str = ""
    hotkeys_failures_queue_arn: str = ""
    #: The cursor-signing key in the local Secrets Manager (None when no secretsmanager client was given).
    cursor_secret_arn: str | None = None


def provision(
    config: Context,
    names: ResourceNames,
    *,
    dynamodb: Any,
    kinesis: Any,
    sqs: Any,
    sns: Any,
    secretsmanager: Any = None,
    s3: Any = None,
    cursor_secret: str | None = None,
    export_bucket: str | None = None,
) -> Resources:
    """Create everything on a (moto) endpoint with the given boto3 clients; ``cursor_secret`` is the value
    of the cursor-signing secret (random when None)."""
    for client in (dynamodb, kinesis, sqs, sns, secretsmanager, s3):
        if client is not None:
            assert_loopback(str(client.meta.endpoint_url))
    stream_arns = {}
    for table in table_definitions(config, names):
        if (arn := create_table(dynamodb, table)) is not None:
            stream_arns[table.name] = arn
    rejects_url = _create_queue(sqs, names.rejects_queue)
    failures_url = _create_queue(sqs, names.ingest_failures_queue)
    hot_failures_url = _create_queue(sqs, names.hotkeys_failures_queue)
    secret_arn = None
    if secretsmanager is not None:
        # The stack generates the key in Secrets Manager and gives the query function its ARN;
        # moto plays Secrets Manager, so the handler reads it the way it does in AWS.
        value = cursor_secret if cursor_secret is not None else secrets.token_urlsafe(48)
        secret_arn = str(secretsmanager.create_secret(Name=names.cursor_secret, SecretString=value)["ARN"])
    if export_bucket is not None:
        location = {"LocationConstraint": s3.meta.region_name}
        s3.create_bucket(Bucket=export_bucket, CreateBucketConfiguration=location)
    # A fresh local stack holds no reading written without its occupancy record, so reads may prune
    # from the start. (In AWS the first ingest batch sets the marker about 20 min ahead: containers of
    # the previous code may still be writing; docs/query.md.)
    OccupancyStore(dynamodb, names.control_table, config.table_prefix).mark_since(0)
    return Resources(
        names=names,
        stream_arn=_create_stream(kinesis, config, names.stream),
        rejects_queue_url=rejects_url,
        ingest_failures_queue_url=failures_url,
        ingest_failures_queue_arn=_queue_arn(sqs, failures_url),
        alarm_topic_arn=str(sns.create_topic(Name=names.alarm_topic)["TopicArn"]),
        table_stream_arns=stream_arns,
        hotkeys_failures_queue_url=hot_failures_url,
        hotkeys_failures_queue_arn=_queue_arn(sqs, hot_failures_url),
        cursor_secret_arn=secret_arn,
    )


def create_table(dynamodb: Any, table: TableDefinition) -> str | None:
    """Create ``table`` (and its TTL); return its stream ARN, if it has a stream."""
    description = dynamodb.create_table(**table.create_request())["TableDescription"]
    dynamodb.get_waiter("table_exists").wait(TableName=table.name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    if table.schema.ttl_attribute is not None:
        dynamodb.update_time_to_live(
            TableName=table.name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": table.schema.ttl_attribute},
        )
    arn = description.get("LatestStreamArn")
    return str(arn) if arn else None


def _create_stream(kinesis: Any, config: Context, name: str) -> str:
    if config.kinesis_mode == "on_demand":
        kinesis.create_stream(StreamName=name, StreamModeDetails={"StreamMode": "ON_DEMAND"})
    else:
        kinesis.create_stream(StreamName=name, ShardCount=config.kinesis_shards)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    if (hours := config.kinesis_retention_hours) > 24:
        kinesis.increase_stream_retention_period(StreamName=name, RetentionPeriodHours=hours)
    return str(kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"])


def _create_queue(sqs: Any, name: str) -> str:
    retention = {"MessageRetentionPeriod": str(QUEUE_RETENTION_S)}
    return str(sqs.create_queue(QueueName=name, Attributes=retention)["QueueUrl"])


def _queue_arn(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])
