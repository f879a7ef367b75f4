"""Ingestion: the Kinesis data stream producers publish to, and the rejects queue.

The ingest Lambda and its event source mapping join this construct when their
code lands; the stream and the queue are real resources today (producers and
the local runtime already use them).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import StreamConfig

#: SQS's maximum: operators get two weeks to inspect or replay a reject.
REJECTS_RETENTION = Duration.days(14)


class Ingestion(Construct):
    """The input stream and the terminal queue for readings that fail validation."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: StreamConfig, removal_policy: RemovalPolicy
    ) -> None:
        super().__init__(scope, construct_id)

        provisioned = config.mode == "provisioned"
        self.stream = kinesis.Stream(
            self,
            "Stream",
            stream_mode=kinesis.StreamMode.PROVISIONED if provisioned else kinesis.StreamMode.ON_DEMAND,
            shard_count=config.shards if provisioned else None,
            retention_period=Duration.hours(config.retention_hours),
            # The AWS-managed key (alias/aws/kinesis): encrypted at rest with no
            # key policy to maintain and no per-producer kms:GenerateDataKey grant.
            encryption=kinesis.StreamEncryption.MANAGED,
            removal_policy=removal_policy,
        )

        # Ingest sends each reading it cannot accept (malformed, too old, too
        # big) here with the reason, and acknowledges the Kinesis record, so a
        # bad reading never blocks its shard. Messages are readings that
        # already failed; nothing consumes the queue automatically.
        self.rejects_queue = sqs.Queue(
            self,
            "RejectsQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=REJECTS_RETENTION,
            removal_policy=removal_policy,
        )
        terminal = (
            "The rejects queue is itself the terminal dead-letter destination of ingest: every message in it is a "
            "reading that already failed validation. No consumer reads it automatically; operators inspect or replay "
            "messages by hand within the 14-day retention, so a further DLQ would only move the same messages one hop."
        )
        Validations.of(self.rejects_queue).acknowledge(
            Acknowledgment(id="AwsSolutions-SQS3", reason=terminal),
            Acknowledgment(id="Serverless-SQSRedrivePolicy", reason=terminal),
        )
