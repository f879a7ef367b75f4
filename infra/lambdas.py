"""What the functions share: one code asset, the public Powertools layer, and one shape.

Every function gets the same shape from :class:`ServiceFunction`: the newest
Python runtime on arm64, Powertools from AWS's public layer, active tracing,
explicit memory and timeout, its own log group with the configured retention,
and its own role holding nothing but what the stack grants it (no AWS managed
policy, so nothing is granted that the stack does not spell out).

A function may run with SnapStart (``snap_start=True``; the query function does,
docs/decisions.md): each deployment that changes it publishes a version, whose
init Lambda snapshots, and an alias, ``live``, points at the newest one. Whatever
invokes the function must invoke the alias (``ServiceFunction.invoked``): the
unqualified function is ``$LATEST``, which SnapStart never covers. A replaced
version is deleted, since a version's snapshot is billed for as long as it exists.

The code is ``functions/`` as it is: every third-party import is either in the
Lambda runtime (boto3, botocore) or in the Powertools layer (Powertools and
pydantic v2), so nothing is bundled and synthesis needs no Docker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from aws_cdk import Acknowledgment, Aws, Duration, RemovalPolicy, Stack, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.acknowledgements import XRAY_REASON, acknowledge, acknowledge_wildcard
from infra.config import (
    LOG_RETENTION_DAYS,
    POWERTOOLS_LAYER_ACCOUNT,
    POWERTOOLS_LAYER_NAME,
    Context,
    FunctionSizing,
    FunctionWiring,
    LambdaFunction,
)

#: The Lambda code root: the handlers import their packages from here.
FUNCTIONS_DIR = Path(__file__).resolve().parents[1] / "functions"
#: Never shipped: caches and anything test-shaped, so the asset hash changes only with the code.
ASSET_EXCLUDE = ["**/__pycache__", "**/*.pyc", "**/.mypy_cache", "**/.pytest_cache", "**/tests", "**/test_*.py"]
#: The newest Python runtime aws-cdk-lib offers that Powertools publishes a layer for.
RUNTIME = lambda_.Runtime.PYTHON_3_14
ARCHITECTURE = lambda_.Architecture.ARM_64
#: The alias a SnapStart function is invoked through.
LIVE_ALIAS = "live"
#: A version replaced by the next deployment is deleted (CDK's default keeps it, and its snapshot's cache
#: would be billed for as long as it exists).
_DELETE_REPLACED_VERSIONS = lambda_.VersionOptions(removal_policy=RemovalPolicy.DESTROY)

#: The CDK enum member of each retention ``infra.config`` accepts, which CDK declares in the same order
#: (tests/infra/test_functions.py checks each one).
LOG_RETENTION = dict(
    zip(LOG_RETENTION_DAYS, [m for m in logs.RetentionDays if m is not logs.RetentionDays.INFINITE], strict=True)
)


def powertools_layer_arn(version: int) -> str:
    """The public Powertools layer in the deployment's region (commercial partition)."""
    return f"arn:aws:lambda:{Aws.REGION}:{POWERTOOLS_LAYER_ACCOUNT}:layer:{POWERTOOLS_LAYER_NAME}:{version}"


class LambdaRuntime(Construct):
    """The code asset and the Powertools layer, made once per stack and shared by every function, with the
    configuration and the removal policy of their queues and log groups."""

    def __init__(self, scope: Construct, construct_id: str, *, config: Context, removal_policy: RemovalPolicy) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        self.removal_policy = removal_policy
        # One asset for every function: they share the key-design layer and
        # the adapters, and CDK uploads an asset once however many use it.
        self.code = lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=ASSET_EXCLUDE)
        self.powertools = lambda_.LayerVersion.from_layer_version_arn(
            self, "Powertools", powertools_layer_arn(config.powertools_layer_version)
        )


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
        # SQS's maximum: operators get two weeks to inspect or replay a message.
        retention_period=Duration.days(14),
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


@dataclass(frozen=True, slots=True)
class HelperFunction:
    """A function beside the four of the data path (``LambdaFunction``), with a fixed size and no
    settings model: its package under ``functions/`` and its handler there."""

    value: str
    sizing: FunctionSizing

    @property
    def handler(self) -> str:
        return f"{self.value}.handler.handler"


class Invocation(Enum):
    """How a function is invoked, which decides where its failures go (and why it has no DLQ of its own)."""

    #: By a stream event source mapping, synchronously: a batch the mapping gives up on is
    #: recorded in the failure queue (its on-failure destination).
    STREAM = (
        "A function DLQ only receives failed asynchronous invocations, and this function is only ever invoked "
        "synchronously by its stream event source mapping. Failed batches go to the mapping's own on-failure SQS "
        "destination (with bisect, a retry cap and a maximum record age), which is alarmed."
    )
    #: By API Gateway's Lambda proxy integration: a failure is the caller's HTTP response.
    API = (
        "A function DLQ only receives failed asynchronous invocations, and this function is only invoked "
        "synchronously by API Gateway's Lambda proxy integration: a failure is the HTTP response the caller "
        "gets (and is logged, traced and alarmed on), with nothing left to redeliver."
    )
    #: By Secrets Manager, once per rotation step, synchronously.
    KEY_ROTATION = (
        "A function DLQ only receives failed asynchronous invocations, and Secrets Manager invokes this rotation "
        "function synchronously, one step at a time. A failed step fails that rotation: the secret keeps its "
        "AWSCURRENT version, Secrets Manager records the failure (RotationFailed) and rotates again on schedule."
    )
    #: Asynchronously, by a schedule: the failure queue is the function's dead-letter queue.
    SCHEDULE = None


class ServiceFunction(Construct):
    """One of the stack's functions, named ``<stack name>-<function>``, with its own role and log group.

    It makes the acknowledgements every function needs: X-Ray's unscoped actions on
    its role (plus the role's own list actions, ``unscoped_also``), and why it has no
    dead-letter queue of its own when it has none. A function invoked by a stream or a
    schedule gets a terminal failure queue beside it (``<scope>/FailureQueue``), which
    holds ``failures_hold``. Its environment is what the configuration tells ``function``
    with ``wiring`` (:meth:`Context.function_environment`); a helper function is told its name only.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: LambdaRuntime,
        function: LambdaFunction | HelperFunction,
        description: str,
        invocation: Invocation,
        wiring: FunctionWiring | None = None,
        failures_hold: str = "",
        unscoped_also: str = "",
        snap_start: bool = False,
    ) -> None:
        super().__init__(scope, construct_id)
        if isinstance(function, HelperFunction):
            sizing, environment = function.sizing, {"POWERTOOLS_SERVICE_NAME": function.value}
        else:
            sizing = runtime.config.sizing(function)
            environment = runtime.config.function_environment(function, wiring or FunctionWiring())
        self._failure_queue: sqs.Queue | None = None
        if invocation in (Invocation.STREAM, Invocation.SCHEDULE):
            self._failure_queue = terminal_queue(
                scope, "FailureQueue", removal_policy=runtime.removal_policy, holds=failures_hold
            )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Runs the {function.value} function; holds only what the stack grants it",
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            retention=LOG_RETENTION[runtime.config.log_retention_days],
            removal_policy=runtime.removal_policy,
        )
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=f"{Stack.of(self).stack_name}-{function.value}",
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=function.handler,
            code=runtime.code,
            layers=[runtime.powertools],
            memory_size=sizing.memory_mb,
            timeout=Duration.seconds(sizing.timeout_s),
            environment=environment,
            role=self.role,
            log_group=self.log_group,
            tracing=lambda_.Tracing.ACTIVE,
            reserved_concurrent_executions=sizing.reserved_concurrency,
            dead_letter_queue=self._failure_queue if invocation is Invocation.SCHEDULE else None,
            snap_start=lambda_.SnapStartConf.ON_PUBLISHED_VERSIONS if snap_start else None,
            current_version_options=_DELETE_REPLACED_VERSIONS if snap_start else None,
        )
        #: What invokers target: the ``live`` alias of the newest version with SnapStart, else the function.
        self.invoked: lambda_.IFunction = self.function
        if snap_start:
            self.invoked = lambda_.Alias(self, "Live", alias_name=LIVE_ALIAS, version=self.function.current_version)
            acknowledge(
                self.function,
                "Annotation::@aws-cdk/aws-lambda:snapStartRequirePublish",
                "The function publishes a version with every deployment that changes it (current_version) and is "
                f"invoked only through the '{LIVE_ALIAS}' alias of that version.",
            )
        # Without an AWS managed policy the role needs the log group spelt out:
        # creating streams and putting events in this one group, nothing else.
        self.log_group.grant_write(self.role)
        # The role's Resource::* finding: X-Ray, plus the role's own list actions.
        acknowledge_wildcard(self.role, "*", f"{XRAY_REASON} {unscoped_also}".strip())
        if invocation.value is not None:
            acknowledge(self.function, "Serverless-LambdaDLQ", invocation.value)

    @property
    def failure_queue(self) -> sqs.Queue:
        """The terminal queue of a stream or scheduled function."""
        if self._failure_queue is None:
            raise AttributeError("a function behind the API has no failure queue")
        return self._failure_queue


def schedule_expression(minutes: int) -> str:
    """EventBridge Scheduler's rate expression for a run every ``minutes`` (a unit of 1 is singular)."""
    if minutes == 60:
        return "rate(1 hour)"
    return "rate(1 minute)" if minutes == 1 else f"rate({minutes} minutes)"


def run_on_schedule(
    scope: Construct, *, runs: ServiceFunction, what: str, minutes: int, retries: int
) -> scheduler.CfnSchedule:
    """An EventBridge Scheduler schedule invoking ``runs`` with ``{}`` (a live run on the real clock)
    every ``minutes``, exactly on the rate; an invocation that fails ``retries`` times or is older than
    the period (superseded by the next run) goes to the function's failure queue.

    The L1 resource with a role of its own: the L2 target grants invoke on the function's every
    version and alias too ("<arn>:*"), and a schedule only ever invokes the function itself.
    """
    every = "minute" if minutes == 1 else f"{minutes} minutes"
    role = iam.Role(
        scope,
        "ScheduleRole",
        assumed_by=iam.ServicePrincipal(
            "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID}}
        ),
        description=f"Lets EventBridge Scheduler invoke the {what}",
    )
    role.add_to_policy(iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[runs.function.function_arn]))
    runs.failure_queue.grant(role, "sqs:SendMessage")
    return scheduler.CfnSchedule(
        scope,
        "Schedule",
        description=f"Runs the {what} every {every}",
        schedule_expression=schedule_expression(minutes),
        flexible_time_window=scheduler.CfnSchedule.FlexibleTimeWindowProperty(mode="OFF"),
        state="ENABLED",
        target=scheduler.CfnSchedule.TargetProperty(
            arn=runs.function.function_arn,
            role_arn=role.role_arn,
            input=json.dumps({}),
            dead_letter_config=scheduler.CfnSchedule.DeadLetterConfigProperty(arn=runs.failure_queue.queue_arn),
            retry_policy=scheduler.CfnSchedule.RetryPolicyProperty(
                maximum_retry_attempts=retries, maximum_event_age_in_seconds=60 * minutes
            ),
        ),
    )
