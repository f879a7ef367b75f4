"""Ingestion: the Kinesis stream producers publish to, the ingest function that reads it, and its queues.

Two queues, for two different things: the rejects queue holds *readings* ingest
refused (malformed, out of the time window, too big), each with its reason and
payload; the failure queue holds the Lambda service's record of *batches* the
event source mapping gave up on (retries or record age exhausted), which point
back at the stream by shard and sequence numbers.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from constructs import Construct

from infra.config import Context, FunctionWiring, LambdaFunction
from infra.lambdas import Invocation, LambdaRuntime, ServiceFunction, terminal_queue


class Ingestion(Construct):
    """The input stream, the ingest function and its mapping, the rejects and failure queues."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Context,
        runtime: LambdaRuntime,
    ) -> None:
        super().__init__(scope, construct_id)
        removal_policy = runtime.removal_policy
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
            removal_policy=removal_policy,
        )

        # Ingest sends each reading it cannot accept (malformed, too old, too
        # big) here with the reason, and acknowledges the Kinesis record, so a
        # bad reading never blocks its shard.
        self.rejects_queue = terminal_queue(
            self, "RejectsQueue", removal_policy=removal_policy, holds="a reading that already failed validation"
        )
        self.ingest = ServiceFunction(
            self,
            "Ingest",
            runtime=runtime,
            function=LambdaFunction.INGEST,
            description="Writes readings from the Kinesis stream into the readings table(s)",
            environment=config.function_environment(
                LambdaFunction.INGEST,
                FunctionWiring(
                    rejects_queue_url=self.rejects_queue.queue_url,
                    # By name, as ServiceFunction names it: the rotator is built after ingest.
                    rotator_function=f"{config.stack_name}-{LambdaFunction.ROTATOR.value}"
                    if config.table_period is not None
                    else None,
                ),
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
