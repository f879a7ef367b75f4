"""Alerts: the one SNS topic every notification goes to.

The hot-key detector publishes to it (a hot entity, a split it scheduled);
every CloudWatch alarm of the stack notifies it, and so do the per-table alarms
the rotator creates at run time. An operator subscribes once.

A topic policy replaces SNS's default one, and ``enforce_ssl`` makes one (its
Deny of plain HTTP), so CloudWatch may publish only what a statement here
allows: :func:`allow_alarms` lets the alarms of this account whose names start
with a prefix publish (``aws:SourceAccount``, ``aws:SourceArn``), and use the
topic's key under the same conditions. The stack's own alarms are all named
``<stack name>-...``; the rotator's per-table ones ``<table prefix>-...``
(infra/rotation.py allows those). docs/deploy.md says how to prove delivery.

It is its own construct because three others feed it and the monitoring
construct (which is built last, once there is something to watch) cannot own
what the hot-key function needs when it is built.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
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
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="Time-series alerts",
            master_key=self.key,
            enforce_ssl=True,
        )
        # Every alarm the stack itself makes is named "<stack name>-<slug>".
        allow_alarms(self.topic, alarm_prefix=f"{Stack.of(self).stack_name}-", sid="StackAlarms")
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


def allow_alarms(topic: sns.ITopic, *, alarm_prefix: str, sid: str) -> None:
    """Let this account's CloudWatch alarms named ``<alarm_prefix>*`` notify ``topic``: sns:Publish
    in the topic policy and the data-key calls SNS makes for them in its key's policy, both held to
    those alarms by ``aws:SourceAccount`` and ``aws:SourceArn``. ``sid`` names both statements."""
    stack = Stack.of(topic)
    alarms = stack.format_arn(
        service="cloudwatch",
        resource="alarm",
        resource_name=f"{alarm_prefix}*",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    cloudwatch = iam.ServicePrincipal("cloudwatch.amazonaws.com")
    only_these = {"StringEquals": {"aws:SourceAccount": stack.account}, "ArnLike": {"aws:SourceArn": alarms}}
    topic.add_to_resource_policy(
        iam.PolicyStatement(
            sid=f"{sid}Publish",
            principals=[cloudwatch],
            actions=["sns:Publish"],
            resources=[topic.topic_arn],
            conditions=only_these,
        )
    )
    if topic.master_key is not None:
        topic.master_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"{sid}UseTheTopicKey",
                principals=[cloudwatch],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions=only_these,
            )
        )
