"""Ingestion: the Kinesis stream producers publish to, the ingest function that reads it, and its queues.

With ``iot_topic_rule`` set, an AWS IoT Core topic rule puts every MQTT message on its topic
filter into the stream, already in the product's JSON (docs/ingest.md, "The IoT Core topic rule").

Two queues, for two different things: the rejects queue holds *readings* ingest
refused (malformed, out of the time window, too big), each with its reason and
payload; the failure queue holds the Lambda service's record of *batches* the
event source mapping gave up on (retries or record age exhausted), which point
back at the stream by shard and sequence numbers.
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_iot as iot
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import IOT_SQL_VERSION, FunctionWiring, IotTopicRule, LambdaFunction
from infra.lambdas import Invocation, LambdaRuntime, ServiceFunction, terminal_queue


class Ingestion(Construct):
    """The input stream, the ingest function and its mapping, the rejects and failure queues."""

    def __init__(self, scope: Construct, construct_id: str, *, runtime: LambdaRuntime) -> None:
        super().__init__(scope, construct_id)
        config = runtime.config
        provisioned = config.kinesis_mode == "provisioned"
        self.stream = kinesis.Stream(
            self,
            "Stream",
            stream_mode=kinesis.StreamMode.PROVISIONED if provisioned else kinesis.StreamMode.ON_DEMAND,
            shard_count=config.kinesis_shards if provisioned else None,
            retention_period=Duration.hours(config.kinesis_retention_hours),
            # The AWS-managed key (alias/aws/kinesis): encrypted at rest with no
            # key policy to maintain and no per-producer kms:GenerateDataKey grant.
            encryption=kinesis.StreamEncryption.MANAGED,
            removal_policy=runtime.removal_policy,
        )

        # Ingest sends each reading it cannot accept (malformed, too old, too
        # big) here with the reason, and acknowledges the Kinesis record, so a
        # bad reading never blocks its shard.
        self.rejects_queue = terminal_queue(
            self,
            "RejectsQueue",
            removal_policy=runtime.removal_policy,
            holds="a reading that already failed validation",
        )
        self.ingest = ServiceFunction(
            self,
            "Ingest",
            runtime=runtime,
            function=LambdaFunction.INGEST,
            description="Writes readings from the Kinesis stream into the readings table(s)",
            wiring=FunctionWiring(
                rejects_queue_url=self.rejects_queue.queue_url,
                # By name, as ServiceFunction names it: the rotator is built after ingest.
                rotator_function=f"{config.stack_name}-{LambdaFunction.ROTATOR.value}"
                if config.table_period is not None
                else None,
            ),
            # Where the mapping reports a batch it gave up on: the shard and the
            # sequence-number range, to replay from the stream while it keeps them.
            invocation=Invocation.STREAM,
            failures_hold="the record of a batch the event source mapping gave up on, to replay from the stream",
        )
        self.function = self.ingest.function
        self.failure_queue = self.ingest.failure_queue
        # SendMessageBatch is authorised by sqs:SendMessage; ingest needs nothing else of the queue.
        self.rejects_queue.grant(self.function, "sqs:SendMessage")

        # Without bisect, a retry cap, a maximum age, a failure destination and
        # partial batch responses, one poison record would hold its shard until
        # the stream expires it. -1 (no cap) is CloudFormation's default, so it
        # is left out rather than written.
        self.function.add_event_source(
            sources.KinesisEventSource(
                self.stream,
                starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                batch_size=config.ingest_batch_size,
                max_batching_window=Duration.seconds(config.ingest_batching_window_s),
                parallelization_factor=config.ingest_parallelization_factor,
                retry_attempts=config.ingest_max_retries if config.ingest_max_retries >= 0 else None,
                max_record_age=(
                    Duration.seconds(config.ingest_max_record_age_s) if config.ingest_max_record_age_s >= 0 else None
                ),
                bisect_batch_on_error=True,
                report_batch_item_failures=True,
                on_failure=sources.SqsDlq(self.failure_queue),
            )
        )

        self.iot_rule: iot.CfnTopicRule | None = None
        self.iot_failure_queue: sqs.Queue | None = None
        if config.iot_topic_rule is not None:
            self.iot_failure_queue = terminal_queue(
                self,
                "IotRuleFailureQueue",
                removal_policy=runtime.removal_policy,
                holds="an MQTT message the IoT Core topic rule could not put into the stream, with its payload",
            )
            self.iot_rule = self._iot_rule(config.iot_topic_rule, self.iot_failure_queue)

    def _iot_rule(self, rule: IotTopicRule, failures: sqs.Queue) -> iot.CfnTopicRule:
        """The IoT Core topic rule into the stream. Its role may put records on this stream and nothing else
        (``kinesis:PutRecord``: the one call the Kinesis action makes); a message the action fails to put (the
        stream throttled, say) goes whole to ``failures`` (the rule's error action, the payload base64, with
        its own role that may only send there), never dropped. Only IoT Core of this account assumes either."""
        role = self._iot_role("IotRuleRole", "put matched MQTT messages into the ingest stream")
        role.add_to_policy(iam.PolicyStatement(actions=["kinesis:PutRecord"], resources=[self.stream.stream_arn]))
        error_role = self._iot_role("IotRuleErrorRole", "keep a message it could not put into the stream")
        error_role.add_to_policy(iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[failures.queue_arn]))
        return iot.CfnTopicRule(
            self,
            "IotTopicRule",
            topic_rule_payload=iot.CfnTopicRule.TopicRulePayloadProperty(
                sql=rule.sql,
                aws_iot_sql_version=IOT_SQL_VERSION,
                rule_disabled=False,
                description=f"Readings published on {rule.topic_filter}, entity from topic level {rule.entity_level}",
                actions=[
                    iot.CfnTopicRule.ActionProperty(
                        kinesis=iot.CfnTopicRule.KinesisActionProperty(
                            stream_name=self.stream.stream_name,
                            partition_key=rule.partition_key,
                            role_arn=role.role_arn,
                        )
                    )
                ],
                error_action=iot.CfnTopicRule.ActionProperty(
                    sqs=iot.CfnTopicRule.SqsActionProperty(
                        queue_url=failures.queue_url, role_arn=error_role.role_arn, use_base64=True
                    )
                ),
            ),
        )

    def _iot_role(self, construct_id: str, to: str) -> iam.Role:
        return iam.Role(
            self,
            construct_id,
            assumed_by=iam.ServicePrincipal(
                "iot.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}}
            ),
            description=f"Lets the IoT Core topic rule {to}",
        )
