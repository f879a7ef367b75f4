"""The query API: a REST API in front of the query function, and the key that signs its cursors.

Every method requires IAM (SigV4) authorization: a caller needs an AWS
principal allowed ``execute-api:Invoke`` on the stage. The function validates
every parameter itself (``functions/query``); the gateway checks the required
ones before anything is invoked, and answers in the same ``{"error", "parameter"}``
shape the function uses.
"""

from __future__ import annotations

import json

from aws_cdk import Acknowledgment, Aws, Duration, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from cursor_rotation.logic import KEY_LENGTH as CURSOR_KEY_LENGTH
from infra.acknowledgements import acknowledge
from infra.config import FunctionSizing, FunctionWiring, LambdaFunction
from infra.lambdas import LOG_RETENTION, HelperFunction, Invocation, LambdaRuntime, ServiceFunction
from query.openapi import document as openapi_document

#: Rotates the cursor-signing key (``functions/cursor_rotation``): a few Secrets Manager calls per step.
CURSOR_ROTATION = HelperFunction("cursor_rotation", FunctionSizing(memory_mb=256, timeout_s=30))


#: Where API Gateway finds each kind of parameter the OpenAPI document declares.
_SOURCES = {"path": "path", "query": "querystring"}


def app_methods() -> list[tuple[str, str, dict[str, bool]]]:
    """``(method, path, request parameter -> required)`` of every route the query function serves, read from
    its own OpenAPI document (``query.openapi``), so a route added to the app reaches the gateway with nothing
    restated here."""
    return [
        (
            method.upper(),
            path,
            {
                f"method.request.{_SOURCES[p['in']]}.{p['name']}": bool(p.get("required", False))
                for p in operation.get("parameters", [])
                if p["in"] in _SOURCES
            },
        )
        for path, operations in openapi_document()["paths"].items()
        for method, operation in operations.items()
    ]


#: One JSON object per request: who called (the SigV4 principal), what, and how it went.
ACCESS_LOG_FORMAT = json.dumps(
    {
        "requestId": "$context.requestId",
        "extendedRequestId": "$context.extendedRequestId",
        "requestTime": "$context.requestTime",
        "caller": "$context.identity.caller",
        "userArn": "$context.identity.userArn",
        "accountId": "$context.identity.accountId",
        "sourceIp": "$context.identity.sourceIp",
        "userAgent": "$context.identity.userAgent",
        "httpMethod": "$context.httpMethod",
        "resourcePath": "$context.resourcePath",
        "path": "$context.path",
        "status": "$context.status",
        "responseLength": "$context.responseLength",
        "responseLatency": "$context.responseLatency",
        "integrationLatency": "$context.integrationLatency",
        "integrationStatus": "$context.integrationStatus",
        "errorMessage": "$context.error.message",
        "xrayTraceId": "$context.xrayTraceId",
    },
    separators=(",", ":"),
)


class QueryApi(Construct):
    """The REST API, its stage and access log, the query function and the cursor key."""

    def __init__(self, scope: Construct, construct_id: str, *, runtime: LambdaRuntime) -> None:
        super().__init__(scope, construct_id)
        config = runtime.config

        self.cursor_key = secretsmanager.Secret(
            self,
            "CursorKey",
            description=(
                "Signs the query API's pagination cursors (HMAC-SHA256); cursors signed with the previous version "
                "stay valid until the next rotation"
            ),
            generate_secret_string=secretsmanager.SecretStringGenerator(
                password_length=CURSOR_KEY_LENGTH, exclude_punctuation=True
            ),
            removal_policy=runtime.removal_policy,
        )
        self.cursor_rotation = ServiceFunction(
            self,
            "CursorKeyRotation",
            runtime=runtime,
            function=CURSOR_ROTATION,
            description="Rotates the query API's cursor-signing key (Secrets Manager's four rotation steps)",
            invocation=Invocation.KEY_ROTATION,
            unscoped_also=(
                "secretsmanager:GetRandomPassword takes no resource: it generates the new key and touches no secret."
            ),
        )
        # The L2 schedule grants Secrets Manager invoke on the function, and the function DescribeSecret,
        # GetSecretValue, PutSecretValue and UpdateSecretVersionStage on this secret only.
        self.cursor_key.add_rotation_schedule(
            "Rotation",
            rotation_lambda=self.cursor_rotation.function,
            automatically_after=Duration.days(config.api_cursor_key_rotation_days),
        )
        # Its invoke permission names no account: hold it to this one's Secrets Manager (confused deputy).
        for child in self.cursor_rotation.function.node.children:
            if isinstance(child, lambda_.CfnPermission) and child.principal == "secretsmanager.amazonaws.com":
                child.source_account = Aws.ACCOUNT_ID

        self.query = ServiceFunction(
            self,
            "Query",
            runtime=runtime,
            function=LambdaFunction.QUERY,
            description="Answers the query API: readings, latest, aggregates",
            wiring=FunctionWiring(cursor_secret_arn=self.cursor_key.secret_arn),
            invocation=Invocation.API,
            snap_start=True,
        )
        self.function = self.query.function
        # GetSecretValue (AWSCURRENT and AWSPREVIOUS) on this secret only: grant_read would add DescribeSecret,
        # which the code never calls.
        self.function.add_to_role_policy(
            iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[self.cursor_key.secret_arn])
        )

        self.access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=LOG_RETENTION[config.log_retention_days],
            removal_policy=runtime.removal_policy,
        )
        self.rest_api = apigateway.RestApi(
            self,
            "RestApi",
            rest_api_name=f"{config.stack_name}-query",
            description="Time-series readings: per entity, latest, aggregates, and across entities (SigV4)",
            endpoint_types=[apigateway.EndpointType.REGIONAL],
            # API Gateway writes access and execution logs with an account-wide
            # role (one per account and region). Kept when the stack goes: other
            # APIs in the account may rely on it.
            cloud_watch_role=config.api_cloudwatch_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN if config.api_cloudwatch_role else None,
            default_method_options=apigateway.MethodOptions(authorization_type=apigateway.AuthorizationType.IAM),
            deploy_options=apigateway.StageOptions(
                stage_name=config.api_stage,
                throttling_rate_limit=config.api_throttle_rate,
                throttling_burst_limit=config.api_throttle_burst,
                tracing_enabled=True,
                logging_level=apigateway.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,  # request bodies and headers stay out of the logs
                access_log_destination=apigateway.LogGroupLogDestination(self.access_logs),
                access_log_format=apigateway.AccessLogFormat.custom(ACCESS_LOG_FORMAT),
            ),
        )
        # The stack publishes the URL as ApiUrl; drop RestApi's own output (its key is a hash).
        self.rest_api.node.try_remove_child("Endpoint")
        self.validator = self.rest_api.add_request_validator(
            "ParameterValidator", validate_request_parameters=True, validate_request_body=True
        )
        # A missing required parameter is answered by the gateway; keep the function's error shape.
        self.rest_api.add_gateway_response(
            "BadRequestParameters",
            type=apigateway.ResponseType.BAD_REQUEST_PARAMETERS,
            templates={"application/json": '{"error": "$context.error.validationErrorString", "parameter": null}'},
        )

        # The alias, not the function: only a published version is restored from its snapshot. The
        # integration's invoke permissions are made on the alias too.
        integration = apigateway.LambdaIntegration(
            self.query.invoked, proxy=True, allow_test_invoke=False, timeout=Duration.seconds(29)
        )
        for method, path, parameters in app_methods():
            self.rest_api.root.resource_for_path(path).add_method(
                method,
                integration,
                authorization_type=apigateway.AuthorizationType.IAM,
                request_validator=self.validator,
                request_parameters=parameters,
            )

        reason_waf = (
            "Every method requires SigV4 (IAM) authorization, so only principals of this account, or ones it trusts, "
            "reach the function at all; stage throttling caps the rate. A WAF web ACL would add cost per request "
            "and per rule without a threat the IAM check leaves open; attach one to the stage if the API is ever "
            "exposed to untrusted callers."
        )
        reason_cognito = (
            "The API is called by services and operators holding AWS credentials, not by end users: IAM (SigV4) "
            "authorization is the authorizer on every method, and a Cognito user pool would add a second identity "
            "system with nothing to authenticate."
        )
        Validations.of(self.rest_api).acknowledge(
            Acknowledgment(id="AwsSolutions-APIG3", reason=reason_waf),
            Acknowledgment(id="AwsSolutions-COG4", reason=reason_cognito),
        )
        cloudwatch_role = self.rest_api.node.try_find_child("CloudWatchRole")
        if cloudwatch_role is not None:
            acknowledge(
                cloudwatch_role,
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonAPIGatewayPushToCloudWatchLogs]",
                "This is API Gateway's account-level logging role, assumable only by apigateway.amazonaws.com. "
                "AWS maintains AmazonAPIGatewayPushToCloudWatchLogs for exactly this purpose, and the role must "
                "write to log groups API Gateway creates itself for execution logs, whose names are not known here.",
            )
