"""Hot keys: the detector on the readings table's DynamoDB stream, and the queue for batches it gives up on.

With one readings table the stack maps the table's stream to the function
here. With a table per period the tables appear at run time, so the rotator
maps each new table's stream with the same settings (``HOTKEYS_*`` in its
environment, from the same configuration) and the same failure queue.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import FunctionWiring, LambdaFunction
from infra.lambdas import Invocation, LambdaRuntime, ServiceFunction


class HotKeys(Construct):
    """The hot-key function, its failure queue, and (one readings table) its stream mapping."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: LambdaRuntime,
        readings_table: dynamodb.ITable | None,
        alerts_topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        config = runtime.config

        self.detector = ServiceFunction(
            self,
            "Detector",
            runtime=runtime,
            function=LambdaFunction.HOTKEYS,
            description="Measures write load per partition key and entity from the readings stream; splits hot ones",
            wiring=FunctionWiring(alert_topic_arn=alerts_topic.topic_arn),
            invocation=Invocation.STREAM,
            failures_hold="the record of a stream batch the hot-key mapping gave up on (its load went uncounted)",
        )
        self.function = self.detector.function
        self.failure_queue = self.detector.failure_queue
        # Lambda sends a failed batch's record to the destination with the
        # function's role, also for the mappings the rotator creates at run time.
        self.failure_queue.grant(self.function, "sqs:SendMessage")

        if readings_table is not None:
            self.function.add_event_source(
                sources.DynamoEventSource(
                    readings_table,
                    # TRIM_HORIZON: every write since the stream began counts.
                    starting_position=lambda_.StartingPosition.TRIM_HORIZON,
                    batch_size=config.hotkeys_batch_size,
                    max_batching_window=Duration.seconds(config.hotkeys_batching_window_s),
                    parallelization_factor=config.hotkeys_parallelization_factor,
                    retry_attempts=config.hotkeys_max_retries,
                    max_record_age=Duration.seconds(config.hotkeys_max_record_age_s),
                    bisect_batch_on_error=True,
                    report_batch_item_failures=True,
                    on_failure=sources.SqsDlq(self.failure_queue),
                )
            )
