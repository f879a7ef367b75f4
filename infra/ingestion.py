"""Ingestion: the Kinesis stream producers publish to, the ingest function that reads it, and its queues.

Two queues, for two different things: the rejects queue holds *readings* ingest
refused (malformed, out of the time window, too big), each with its reason and
payload; the failure queue holds the Lambda service's record of *batches* the
event source mapping gave up on (retries or record age exhausted), which point
back at the stream by shard and sequence numbers.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.acknowledgements import acknowledge, acknowledge_unscoped_actions
from infra.config import AppConfig, FunctionWiring, LambdaFunction
from infra.lambdas import LambdaRuntime, ServiceFunction

#: Why a function fed by an event source mapping has no dead-letter queue of its own.
STREAM_FUNCTION_DLQ_REASON = (
    "A function DLQ only receives failed asynchronous invocations, and this function is only ever invoked "
    "synchronously by its stream event source mapping. Failed batches go to the mapping's own on-failure SQS "
    "destination (with bisect, a retry cap and a maximum record age), which is alarmed."
)

#: SQS's maximum: operators get two weeks to inspect or replay a reject.
REJECTS_RETENTION = Duration.days(14)


def terminal_queue(scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy, holds: str) -> sqs.Queue:
    """An encrypted, TLS-only queue kept 14 days that is itself the end of the line.

    Nothing consumes it automatically, so a further dead-letter queue would only
    move the same messages one hop; its depth is alarmed instead.
    """
    queue = sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=REJECTS_RETENTION,
        removal_policy=removal_policy,
    )
    reason = (
        f"This queue is itself a terminal dead-letter destination: every message in it is {holds}. "
        "No consumer reads it automatically; operators inspect or replay messages by hand within the 14-day "
        "retention and an alarm fires on the first message, so a further DLQ would only move the same messages "
        "one hop."
    )
    Validations.of(queue).acknowledge(
        Acknowledgment(id="AwsSolutions-SQS3", reason=reason),
        Acknowledgment(id="Serverless-SQSRedrivePolicy", reason=reason),
    )
    return queue


class Ingestion(Construct):
    """The input stream, the ingest function and its mapping, the rejects and failure queues."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: AppConfig,
        runtime: LambdaRuntime,
        removal_policy: RemovalPolicy,
    ) -> None:
        super().__init__(scope, construct_id)
        stream_config, mapping = config.stream, config.ingest

        provisioned = stream_config.mode == "provisioned"
        self.stream = kinesis.Stream(
            self,
            "Stream",
            stream_mode=kinesis.StreamMode.PROVISIONED if provisioned else kinesis.StreamMode.ON_DEMAND,
            shard_count=stream_config.shards if provisioned else None,
            retention_period=Duration.hours(stream_config.retention_hours),
            # The AWS-managed key (alias/aws/kinesis): encrypted at rest with no
            # key policy to maintain and no per-producer kms:GenerateDataKey grant.
            encryption=kinesis.StreamEncryption.MANAGED,
            removal_policy=removal_policy,
        )

        # Ingest sends each reading it cannot accept (malformed, too old, too
        # big) here with the reason, and acknowledges the Kinesis record, so a
        # bad reading never blocks its shard.
        self.rejects_queue = terminal_queue(
            self, "RejectsQueue", removal_policy=removal_policy, holds="a reading that already failed validation"
        )
        # Where the mapping reports a batch it gave up on: the shard and the
        # sequence-number range, to replay from the stream while it keeps them.
        self.failure_queue = terminal_queue(
            self,
            "FailureQueue",
            removal_policy=removal_policy,
            holds="the record of a batch the event source mapping gave up on, to replay from the stream",
        )

        self.ingest = ServiceFunction(
            self,
            "Ingest",
            runtime=runtime,
            function=LambdaFunction.INGEST,
            function_name=f"{config.stack_name}-{LambdaFunction.INGEST.value}",
            description="Writes readings from the Kinesis stream into the readings table(s)",
            environment=config.function_environment(
                LambdaFunction.INGEST, FunctionWiring(rejects_queue_url=self.rejects_queue.queue_url)
            ),
            removal_policy=removal_policy,
        )
        self.function = self.ingest.function
        acknowledge_unscoped_actions(self.ingest.role)
        acknowledge(self.function, "Serverless-LambdaDLQ", STREAM_FUNCTION_DLQ_REASON)
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
                batch_size=mapping.batch_size,
                max_batching_window=Duration.seconds(mapping.batching_window_s),
                parallelization_factor=mapping.parallelization_factor,
                retry_attempts=mapping.max_retries if mapping.max_retries >= 0 else None,
                max_record_age=(Duration.seconds(mapping.max_record_age_s) if mapping.max_record_age_s >= 0 else None),
                bisect_batch_on_error=True,
                report_batch_item_failures=True,
                on_failure=sources.SqsDlq(self.failure_queue),
            )
        )
