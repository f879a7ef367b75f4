"""What the four functions share: one code asset, the public Powertools layer, and one shape.

Every function gets the same shape from :class:`ServiceFunction`: the newest
Python runtime on arm64, Powertools from AWS's public layer, active tracing,
explicit memory and timeout, its own log group with the configured retention,
and its own role holding nothing but what the stack grants it (no AWS managed
policy, so nothing is granted that the stack does not spell out).

The code is ``functions/`` as it is: every third-party import is either in the
Lambda runtime (boto3, botocore) or in the Powertools layer (Powertools, its
aws-xray-sdk and pydantic v2), so nothing is bundled and synthesis needs no
Docker.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import POWERTOOLS_LAYER_ACCOUNT, POWERTOOLS_LAYER_NAME, LambdaConfig, LambdaFunction

#: The Lambda code root: the handlers import their packages from here.
FUNCTIONS_DIR = Path(__file__).resolve().parents[1] / "functions"
#: Never shipped: caches and anything test-shaped, so the asset hash changes only with the code.
ASSET_EXCLUDE = ["**/__pycache__", "**/*.pyc", "**/.mypy_cache", "**/.pytest_cache", "**/tests", "**/test_*.py"]
#: The newest Python runtime aws-cdk-lib offers that Powertools publishes a layer for.
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64

_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def log_retention(days: int) -> logs.RetentionDays:
    """The CDK enum member for a retention ``infra.config`` has already validated."""
    return _RETENTION[days]


def powertools_layer_arn(version: int) -> str:
    """The public Powertools layer in the deployment's region (commercial partition)."""
    return f"arn:aws:lambda:{Aws.REGION}:{POWERTOOLS_LAYER_ACCOUNT}:layer:{POWERTOOLS_LAYER_NAME}:{version}"


class LambdaRuntime(Construct):
    """The code asset and the Powertools layer, made once per stack and shared by every function."""

    def __init__(self, scope: Construct, construct_id: str, *, config: LambdaConfig) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        # One asset for the four functions: they share the key-design layer and
        # the adapters, and CDK uploads an asset once however many use it.
        self.code = lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=ASSET_EXCLUDE)
        self.powertools = lambda_.LayerVersion.from_layer_version_arn(
            self, "Powertools", powertools_layer_arn(config.powertools_layer_version)
        )


class ServiceFunction(Construct):
    """One of the four functions, with its own role and log group."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: LambdaRuntime,
        function: LambdaFunction,
        function_name: str,
        description: str,
        environment: Mapping[str, str],
        removal_policy: RemovalPolicy,
        reserved_concurrency: int | None = None,
        dead_letter_queue: sqs.IQueue | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        sizing = runtime.config.sizing(function)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Runs the {function.value} function; holds only what the stack grants it",
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=log_retention(runtime.config.log_retention_days),
            removal_policy=removal_policy,
        )
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=function_name,
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=function.handler,
            code=runtime.code,
            layers=[runtime.powertools],
            memory_size=sizing.memory_mb,
            timeout=Duration.seconds(sizing.timeout_s),
            environment=dict(environment),
            role=self.role,
            log_group=self.log_group,
            tracing=lambda_.Tracing.ACTIVE,
            reserved_concurrent_executions=(
                reserved_concurrency if reserved_concurrency is not None else sizing.reserved_concurrency
            ),
            dead_letter_queue=dead_letter_queue,
        )
        # Without an AWS managed policy the role needs the log group spelt out:
        # creating streams and putting events in this one group, nothing else.
        self.log_group.grant_write(self.role)
