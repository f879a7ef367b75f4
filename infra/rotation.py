"""Rotation: the rotator function and its schedule (only with a table period).

The rotator builds each period's table ahead of time, maps its stream to the
hot-key function, puts three alarms and Contributor Insights on it, closes it
after its grace period (on-demand, no alarms, mapping or Contributor Insights;
later maybe Standard-IA), and exports and drops it past retention. Every table
it may touch is named ``<table_prefix>-<label>``, so its permissions are scoped
to that name pattern; and every change to a table (its setup, capacity, class,
deletion protection, or dropping it) also requires the ownership tags, which
the role can write only on a table it is creating (docs/rotation.md, "Who may
drop a table").
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.acknowledgements import account_arn, acknowledge_wildcard
from infra.alerts import allow_alarms
from infra.config import Context, FunctionWiring, LambdaFunction
from infra.lambdas import Invocation, LambdaRuntime, ServiceFunction, run_on_schedule
from keydesign.periods import table_head
from rotator.settings import MANAGED_BY_TAG, MANAGED_BY_VALUE, PREFIX_TAG

#: What a run may read of any table of its prefix. Every change needs the ownership tags.
TABLE_READS = (
    "dynamodb:DescribeTable",
    "dynamodb:ListTagsOfResource",
    "dynamodb:DescribeTimeToLive",
    "dynamodb:DescribeContinuousBackups",
)
#: What a run may change on the tables that carry its ownership tags (and only on those).
TABLE_CHANGES = (
    "dynamodb:UpdateTable",
    "dynamodb:DeleteTable",
    "dynamodb:UpdateTimeToLive",
    "dynamodb:UpdateContinuousBackups",
)
#: Enabling Contributor Insights makes DynamoDB create this role the first time, with the caller's permission.
INSIGHTS_SERVICE = "contributorinsights.dynamodb.amazonaws.com"
INSIGHTS_ROLE = f"role/aws-service-role/{INSIGHTS_SERVICE}/AWSServiceRoleForDynamoDBCloudWatchContributorInsights"
ALARM_ACTIONS = ("cloudwatch:PutMetricAlarm", "cloudwatch:DeleteAlarms", "cloudwatch:TagResource")
#: Writing an export (DynamoDB writes it with the caller's permissions); only with an export bucket.
EXPORT_ACTIONS = ("s3:AbortMultipartUpload", "s3:PutObject", "s3:PutObjectAcl")


class Rotation(Construct):
    """The rotator, a schedule that runs it, and the queue for runs that could not be delivered or failed."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: LambdaRuntime,
        hot_keys_function: lambda_.IFunction,
        hot_keys_failure_queue: sqs.IQueue,
        alerts_topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        config = runtime.config
        prefix = config.table_prefix

        self.rotator = ServiceFunction(
            self,
            "Rotator",
            runtime=runtime,
            function=LambdaFunction.ROTATOR,
            description=f"Creates, tends, exports and drops the {table_head(prefix)}<{config.table_period}> tables",
            wiring=FunctionWiring(
                alert_topic_arn=alerts_topic.topic_arn,
                hotkeys_function_arn=hot_keys_function.function_arn,
                hotkeys_on_failure_arn=hot_keys_failure_queue.queue_arn,
            ),
            # The scheduler invokes asynchronously: a run that still fails after Lambda's two retries,
            # or that the scheduler could not deliver, lands in the failure queue (and is alarmed).
            # Each run is complete in itself and the next one redoes whatever is left, so nothing
            # there needs replaying: the queue is there to be alarmed on.
            invocation=Invocation.SCHEDULE,
            failures_hold=(
                "a rotation run that failed or could not be delivered (the next scheduled run redoes its work)"
            ),
            unscoped_also=(
                "dynamodb:ListTables, dynamodb:ListExports (with an export bucket), cloudwatch:DescribeAlarms and "
                "lambda:ListEventSourceMappings are list calls that take no resource; so is "
                "cloudwatch:GetMetricData (a closed table's consumed capacity, for its table class); "
                "lambda:CreateEventSourceMapping takes none either and is held to the hot-key function by the "
                "lambda:FunctionArn condition."
            ),
        )
        self.failure_queue = self.rotator.failure_queue
        self.function = self.rotator.function
        self._grant(config, prefix, hot_keys_function)
        # The per-table alarms are "<table>-<kind>", and every table is "<prefix>-<period label>".
        allow_alarms(alerts_topic, alarm_prefix=table_head(prefix), sid="TableAlarms")
        # Two retries (Lambda's own for an asynchronous call); a run older than the interval is
        # superseded by the next one.
        self.schedule = run_on_schedule(
            self,
            runs=self.rotator,
            what="table rotator",
            minutes=config.rotation_interval_minutes(),
            retries=2,
        )

    def _grant(self, config: Context, prefix: str, hot_keys_function: lambda_.IFunction) -> None:
        stack, head = Stack.of(self), table_head(prefix)
        tables = stack.format_arn(service="dynamodb", resource="table", resource_name=f"{head}*")
        alarms = stack.format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"{head}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        mappings = stack.format_arn(
            service="lambda",
            resource="event-source-mapping",
            resource_name="*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        only_hot_keys = {"StringEquals": {"lambda:FunctionArn": hot_keys_function.function_arn}}
        ownership = {MANAGED_BY_TAG: MANAGED_BY_VALUE, PREFIX_TAG: prefix}
        requested = {f"aws:RequestTag/{key}": value for key, value in ownership.items()}
        carried = {f"aws:ResourceTag/{key}": value for key, value in ownership.items()}
        insights = config.contributor_insights != "off"
        reads = [*TABLE_READS, *(["dynamodb:DescribeContributorInsights"] if insights else [])]
        changes = [*TABLE_CHANGES, *(["dynamodb:UpdateContributorInsights"] if insights else [])]
        statements = [
            # Listing names no table: these three cannot be scoped to a resource.
            iam.PolicyStatement(
                actions=["dynamodb:ListTables", "cloudwatch:DescribeAlarms"],
                resources=["*"],
            ),
            iam.PolicyStatement(actions=reads, resources=[tables]),
            # The ownership tags are written only by a CreateTable that carries them...
            iam.PolicyStatement(
                actions=["dynamodb:CreateTable"], resources=[tables], conditions={"StringEquals": requested}
            ),
            # ...whose tags DynamoDB authorises as TagResource too. Tagging needs a table that carries
            # them already (a table being created carries its request's tags), and must restate them
            # unchanged: the role cannot adopt someone else's table by tagging it.
            iam.PolicyStatement(
                actions=["dynamodb:TagResource"],
                resources=[tables],
                conditions={"StringEquals": {**requested, **carried}},
            ),
            # Only the rotator's own tables can be changed (setup, capacity, class, deletion protection) or dropped.
            iam.PolicyStatement(actions=changes, resources=[tables], conditions={"StringEquals": carried}),
            # UntagResource is granted nowhere; this keeps the ownership tags on even if it ever is.
            iam.PolicyStatement(
                effect=iam.Effect.DENY,
                actions=["dynamodb:UntagResource"],
                resources=[tables],
                conditions={"ForAnyValue:StringEquals": {"aws:TagKeys": sorted(ownership)}},
            ),
            iam.PolicyStatement(actions=list(ALARM_ACTIONS), resources=[alarms]),
            # Stream mappings: only ever to the hot-key function.
            iam.PolicyStatement(actions=["lambda:ListEventSourceMappings"], resources=["*"]),
            iam.PolicyStatement(actions=["lambda:CreateEventSourceMapping"], resources=["*"], conditions=only_hot_keys),
            iam.PolicyStatement(
                actions=["lambda:UpdateEventSourceMapping", "lambda:DeleteEventSourceMapping"],
                resources=[mappings],
                conditions=only_hot_keys,
            ),
        ]
        if insights:
            statements.append(
                iam.PolicyStatement(
                    actions=["iam:CreateServiceLinkedRole"],
                    resources=[stack.format_arn(service="iam", region="", resource=INSIGHTS_ROLE)],
                    conditions={"StringEquals": {"iam:AWSServiceName": INSIGHTS_SERVICE}},
                )
            )
        if config.infrequent_access_storage_percent is not None:
            # Consumed capacity of the closed tables whose class is reviewed; metrics take no resource.
            statements.append(iam.PolicyStatement(actions=["cloudwatch:GetMetricData"], resources=["*"]))
        if config.export_bucket is not None:  # without one the rotator never exports, lists or describes one
            key_prefix = f"{config.export_prefix}/" if config.export_prefix else ""
            exports = stack.format_arn(service="dynamodb", resource="table", resource_name=f"{head}*/export/*")
            statements += [
                iam.PolicyStatement(actions=["dynamodb:ListExports"], resources=["*"]),
                iam.PolicyStatement(actions=["dynamodb:ExportTableToPointInTime"], resources=[tables]),
                iam.PolicyStatement(actions=["dynamodb:DescribeExport"], resources=[exports]),
                iam.PolicyStatement(
                    actions=list(EXPORT_ACTIONS),
                    resources=[f"arn:{stack.partition}:s3:::{config.export_bucket}/{key_prefix}*"],
                ),
            ]
            acknowledge_wildcard(
                self.rotator.role,
                account_arn("dynamodb", f"table/{head}*/export/*"),
                f"Exports get an id only when started; DescribeExport is limited to exports of the '{head}*' tables.",
            )
            acknowledge_wildcard(
                self.rotator.role,
                f"arn:<AWS::Partition>:s3:::{config.export_bucket}/{key_prefix}*",
                "DynamoDB writes an export as many objects under '<prefix>/<table>/AWSDynamoDB/<export id>/', names "
                "it chooses when the export runs; the pattern admits only the configured bucket and prefix.",
            )
        for statement in statements:
            self.function.add_to_role_policy(statement)
        self._acknowledge(head)

    def _acknowledge(self, head: str) -> None:
        role = self.rotator.role
        runtime_tables = (
            f"The rotator's whole job is the per-period tables named '{head}<period label>', which it creates at "
            "run time, so they cannot be named in advance; the configuration keeps every other table of the stack "
            "out of that namespace, and UpdateTable and DeleteTable further require the ownership tags, which the role "
            "can write only while creating a table."
        )
        acknowledge_wildcard(role, account_arn("dynamodb", f"table/{head}*"), runtime_tables)
        acknowledge_wildcard(
            role,
            account_arn("cloudwatch", f"alarm:{head}*"),
            f"Each per-period table gets three alarms named '<table>-<kind>', created and deleted with the table at "
            f"run time; the pattern admits only alarms of the '{head}*' tables.",
        )
        acknowledge_wildcard(
            role,
            account_arn("lambda", "event-source-mapping:*"),
            "Event source mappings are identified by a UUID Lambda assigns when the rotator creates one; update and "
            "delete are held to mappings of the hot-key function by the lambda:FunctionArn condition.",
        )
