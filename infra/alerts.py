"""Alerts: the one SNS topic every notification goes to.

The hot-key detector publishes to it (a hot entity, a split it scheduled);
every CloudWatch alarm of the stack notifies it, and so do the per-table alarms
the rotator creates at run time. An operator subscribes once.

It is its own construct because three others feed it and the monitoring
construct (which is built last, once there is something to watch) cannot own
what the hot-key function needs when it is built.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.acknowledgements import acknowledge


class Alerts(Construct):
    """The alerts topic, encrypted with its own key, and the optional email subscription."""

    def __init__(
        self, scope: Construct, construct_id: str, *, email: str | None, removal_policy: RemovalPolicy
    ) -> None:
        super().__init__(scope, construct_id)

        # A customer managed key, not alias/aws/sns: CloudWatch alarms can only
        # publish to an encrypted topic whose key policy lets CloudWatch use the
        # key, and the AWS managed key's policy cannot be changed.
        self.key = kms.Key(
            self,
            "Key",
            description="Encrypts the alerts topic (hot keys, alarms)",
            enable_key_rotation=True,
            removal_policy=removal_policy,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublishToTheAlertsTopic",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="Time-series alerts",
            master_key=self.key,
            enforce_ssl=True,
        )
        if email is not None:
            subscription = self.topic.add_subscription(subscriptions.EmailSubscription(email))
            acknowledge(
                subscription,
                "Serverless-SNSRedrivePolicy",
                "This subscription is an operator's email address. A notification SNS still cannot deliver after its "
                "retries would land in a queue no one reads, whose own alarm would notify this same failing "
                "subscription; failed deliveries already show in the topic's NumberOfNotificationsFailed metric.",
            )

    def grant_publish(self, grantee: iam.IGrantable) -> None:
        """Publish to the topic: sns:Publish on it, and the key's data-key calls SNS makes for the publisher."""
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["sns:Publish"], resources=[self.topic.topic_arn])
        )
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(actions=["kms:GenerateDataKey", "kms:Decrypt"], resources=[self.key.key_arn])
        )
