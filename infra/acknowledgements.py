"""cdk-nag findings the stack acknowledges, spelt the way cdk-nag 3 reports them.

cdk-nag 3 reports one finding per wildcard (``AwsSolutions-IAM5[Resource::...]``)
and each must be acknowledged on its own, with the resource written as cdk-nag
renders it: pseudo parameters as ``<AWS::Region>``. Every acknowledgement is
made next to the grant that causes it, with the reason; ``tests/infra`` pins
the full list.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

#: X-Ray takes no resource-level permissions; every function traces (Tracing.ACTIVE).
XRAY_REASON = (
    "xray:PutTraceSegments and xray:PutTelemetryRecords, which active tracing needs, do not support resource-level "
    "permissions: AWS documents '*' as their only resource."
)


def account_arn(service: str, resource: str) -> str:
    """An ARN in this stack's partition, region and account, as cdk-nag prints it."""
    return f"arn:<AWS::Partition>:{service}:<AWS::Region>:<AWS::AccountId>:{resource}"


def acknowledge_wildcard(scope: IConstruct, resource: str, reason: str) -> None:
    """Acknowledge AwsSolutions-IAM5 for one wildcard resource in the policies under ``scope``."""
    Validations.of(scope).acknowledge(Acknowledgment(id=f"AwsSolutions-IAM5[Resource::{resource}]", reason=reason))


def acknowledge(scope: IConstruct, rule: str, reason: str) -> None:
    """Acknowledge one rule (or one granular finding) on ``scope`` and everything under it."""
    Validations.of(scope).acknowledge(Acknowledgment(id=rule, reason=reason))
