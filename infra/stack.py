"""The stack: it only composes the constructs, grants, and publishes what operators need.

Every grant is made here, where both ends are in view: which function may do
what to which table, queue or topic reads top to bottom in this file.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.alerts import Alerts
from infra.api import CURSOR_ROTATION, QueryApi
from infra.compaction import Compaction
from infra.config import Context, LambdaFunction
from infra.hot_keys import HotKeys
from infra.ingestion import Ingestion
from infra.lambdas import HelperFunction, LambdaRuntime
from infra.monitoring import Monitoring, WatchedTable
from infra.rollups import Rollups
from infra.rotation import Rotation
from infra.storage import OCCUPANCY_PARTITIONS, SHARD_MAP_PARTITION, Storage
from keydesign.periods import format_duration
from keydesign.rollup import MARK_KEYS, READ_KEYS
from keydesign.writetier import START_KEYS as COMPACTION_START_KEYS
from keydesign.writetier import STATE_PK as COMPACTION_STATE_PK

_REMOVAL = {"retain": RemovalPolicy.RETAIN, "destroy": RemovalPolicy.DESTROY}
Op = dynamodb.Operation
#: The operations whose SystemErrors count, per table the stack owns (the ones the functions call).
READINGS_OPERATIONS = (Op.BATCH_WRITE_ITEM, Op.QUERY)
CONTROL_OPERATIONS = (Op.GET_ITEM, Op.PUT_ITEM, Op.UPDATE_ITEM, Op.DELETE_ITEM, Op.QUERY, Op.BATCH_GET_ITEM)


class TimeSeriesStack(Stack):
    """Write-sharded time-series ingestion. Environment-agnostic: no account or region lookups."""

    def __init__(self, scope: Construct, construct_id: str, *, config: Context) -> None:
        retention = f"one table per {config.table_period}" if config.table_period else "TTL on one table"
        super().__init__(
            scope,
            construct_id,
            stack_name=config.stack_name,
            description=(
                f"Write-sharded time-series ingestion: {config.layout_kind} layout, {config.shards} shards, "
                f"{config.bucket} buckets, {retention}, {format_duration(config.retention_ms)} retention"
            ),
        )
        self.config = config
        removal_policy = _REMOVAL[config.removal_policy]

        runtime = LambdaRuntime(self, "Lambda", config=config, removal_policy=removal_policy)
        self.storage = Storage(self, "Storage", config=config, removal_policy=removal_policy)
        self.alerts = Alerts(self, "Alerts", email=config.alarm_email, removal_policy=removal_policy)

        # Kinesis -> ingest -> readings table(s); ingest reads (and first stores) the shard map, and
        # writes occupancy records (BatchWriteItem) and their marker (a conditional PutItem).
        self.ingestion = Ingestion(self, "Ingestion", runtime=runtime)
        ingest = self.ingestion.function
        self.storage.grant_readings_write(ingest)
        self.storage.grant_control_keys(ingest, ["dynamodb:GetItem", "dynamodb:PutItem"], [SHARD_MAP_PARTITION])
        self.storage.grant_control_keys(ingest, ["dynamodb:BatchWriteItem", "dynamodb:PutItem"], [OCCUPANCY_PARTITIONS])
        # the write tier's start items (a container's first group items; compaction's first run starts there)
        self.storage.grant_control_keys(ingest, ["dynamodb:BatchWriteItem"], COMPACTION_START_KEYS)

        # API -> query -> readings table(s); the query function only reads the shard map, and a day's
        # occupancy (Query) and its marker (GetItem).
        self.api = QueryApi(self, "Api", runtime=runtime)
        self.storage.grant_readings_query(self.api.function)
        self.storage.grant_shard_map_read(self.api.function)
        self.storage.grant_control_keys(
            self.api.function, ["dynamodb:Query", "dynamodb:GetItem"], [OCCUPANCY_PARTITIONS]
        )
        # plans read the compaction watermark (adapters.compaction_state)
        self.storage.grant_control_keys(self.api.function, ["dynamodb:GetItem"], [COMPACTION_STATE_PK])

        # Readings stream -> hot keys -> shard map and counters in the control table, alerts to the topic.
        self.hot_keys = HotKeys(
            self,
            "HotKeys",
            runtime=runtime,
            readings_table=self.storage.readings_table,
            alerts_topic=self.alerts.topic,
        )
        self.storage.grant_control_table_use(self.hot_keys.function)
        if self.storage.readings_table is None:
            self.storage.grant_readings_stream_read(self.hot_keys.function)
        self.alerts.grant_publish(self.hot_keys.function)

        # Scheduler -> rotator -> per-period tables, their stream mappings and alarms.
        self.rotation: Rotation | None = None
        if config.table_period is not None:
            self.rotation = Rotation(
                self,
                "Rotation",
                runtime=runtime,
                hot_keys_function=self.hot_keys.function,
                hot_keys_failure_queue=self.hot_keys.failure_queue,
                alerts_topic=self.alerts.topic,
            )
            # Ingest asks the rotator to build a missing table a late reading needs (adapters.table_builds).
            # The function itself, not grant_invoke's "<arn>:*" too: ingest never names a version or alias.
            self.ingestion.function.add_to_role_policy(
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.rotation.function.function_arn])
            )

        self._scheduled_passes(config, runtime)

        functions: dict[LambdaFunction | HelperFunction, lambda_.IFunction] = {
            LambdaFunction.INGEST: self.ingestion.function,
            LambdaFunction.QUERY: self.api.function,
            LambdaFunction.HOTKEYS: self.hot_keys.function,
            CURSOR_ROTATION: self.api.cursor_rotation.function,
        }
        queues = {
            "rejects": self.ingestion.rejects_queue,
            "ingest-failures": self.ingestion.failure_queue,
            "hotkeys-failures": self.hot_keys.failure_queue,
        }
        tables: dict[str, WatchedTable] = {"control": (self.storage.control_table, CONTROL_OPERATIONS)}
        if self.storage.readings_table is not None:
            tables = {"readings": (self.storage.readings_table, READINGS_OPERATIONS), **tables}
        if self.ingestion.iot_failure_queue is not None:
            queues["iot-rule-failures"] = self.ingestion.iot_failure_queue
        if self.rotation is not None:
            functions[LambdaFunction.ROTATOR] = self.rotation.function
            queues["rotation-failures"] = self.rotation.failure_queue
        scheduled = {LambdaFunction.ROLLUP: self.rollups, LambdaFunction.COMPACTION: self.compaction}
        for function, part in scheduled.items():
            if part is not None:
                functions[function] = part.function
                queues[f"{function.value}-failures"] = part.failure_queue
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            config=config,
            topic=self.alerts.topic,
            tables=tables,
            stream=self.ingestion.stream,
            functions=functions,
            queues=queues,
            api=self.api.rest_api,
        )
        for part in scheduled.values():
            if part is not None:
                self.monitoring.dashboard.add_widgets(*part.widgets())

        self._outputs()

    def _scheduled_passes(self, config: Context, runtime: LambdaRuntime) -> None:
        """The functions a schedule runs over what ingest wrote: the rollups and the compaction."""
        # Scheduler -> rollup function: ingest marks what changed, it recomputes, the API reads the rollups.
        self.rollups: Rollups | None = None
        if config.rollups:
            self.rollups = Rollups(
                self,
                "Rollups",
                runtime=runtime,
                storage=self.storage,
                alerts_topic=self.alerts.topic,
            )
            self.storage.grant_control_keys(self.ingestion.function, ["dynamodb:BatchWriteItem"], MARK_KEYS)
            # its raw reads plan both tiers at the compaction watermark
            self.storage.grant_control_keys(self.rollups.function, ["dynamodb:GetItem"], [COMPACTION_STATE_PK])
            self.storage.grant_control_keys(
                self.api.function,
                ["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"],
                READ_KEYS,
            )

        # Scheduler -> compaction function: ingest writes the write tier, it compacts each settled hour.
        self.compaction = Compaction(
            self, "Compaction", runtime=runtime, storage=self.storage, alerts_topic=self.alerts.topic
        )

    def _outputs(self) -> None:
        # Plain outputs, not CloudFormation exports: an export pins its value for
        # as long as another stack imports it, which would block every rename.
        periodic = self.config.table_period is not None
        outputs = {
            "TablePrefix": (
                self.config.table_prefix,
                "Readings tables are named <prefix>-<period label> and created by the rotator"
                if periodic
                else "The readings table's name: the layout's table prefix",
            ),
            "ControlTableName": (self.storage.control_table.table_name, "The control table holding the shard map"),
            "IngestStreamName": (
                self.ingestion.stream.stream_name,
                "The Kinesis data stream producers publish readings to",
            ),
            "RejectsQueueUrl": (
                self.ingestion.rejects_queue.queue_url,
                "The SQS queue holding readings ingest rejected, each with its reason",
            ),
            # tsctl replay: the batches the stream mappings gave up on, and the functions to put them through.
            "IngestFailureQueueUrl": (
                self.ingestion.failure_queue.queue_url,
                "The SQS queue holding the Kinesis batches the ingest mapping gave up on (tsctl replay)",
            ),
            "HotKeysFailureQueueUrl": (
                self.hot_keys.failure_queue.queue_url,
                "The SQS queue holding the DynamoDB stream batches the hot-key mappings gave up on (tsctl replay)",
            ),
            "IngestFunctionName": (self.ingestion.function.function_name, "The ingest function (tsctl replay)"),
            "HotKeysFunctionName": (self.hot_keys.function.function_name, "The hot-key function (tsctl replay)"),
            "ApiUrl": (
                self.api.rest_api.url,
                "The query API's stage URL; every request must be SigV4-signed (service execute-api)",
            ),
            "AlertsTopicArn": (self.alerts.topic.topic_arn, "Hot-key notifications and every alarm; subscribe to it"),
            "DashboardName": (
                self.monitoring.dashboard.dashboard_name,
                "The CloudWatch dashboard: ingest rate, rejects, hot keys, iterator age, throttles",
            ),
        }
        if self.ingestion.iot_rule is not None and self.ingestion.iot_failure_queue is not None:
            outputs["IotTopicRuleName"] = (
                self.ingestion.iot_rule.ref,
                "The IoT Core topic rule putting MQTT readings into the stream (cdk.json iot_topic_rule)",
            )
            outputs["IotRuleFailureQueueUrl"] = (
                self.ingestion.iot_failure_queue.queue_url,
                "The SQS queue holding MQTT messages the IoT Core rule could not put into the stream (payload base64)",
            )
        if self.storage.readings_table is not None:
            table = (self.storage.readings_table.table_name, "The readings table (one table, TTL retention)")
            outputs = {"ReadingsTableName": table, **outputs}
        for name, (value, description) in outputs.items():
            CfnOutput(self, name, value=value, description=description)
