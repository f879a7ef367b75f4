"""The query API: IAM on every method, request validation, access logging, throttling, tracing, the cursor key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.secret_versions import MIN_SECRET_CHARS
from infra.api import ACCESS_LOG_FORMAT, CURSOR_ROTATION, app_methods
from infra.config import API_INTEGRATION_TIMEOUT_S, LambdaFunction
from infra.lambdas import LIVE_ALIAS
from tests.infra.conftest import Synthesized
from tests.infra.template_queries import grants, render

pytestmark = pytest.mark.infra

OPENAPI = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
#: The runtimes SnapStart supports for Python: 3.12 and later (Lambda's documentation).
SNAPSTART_RUNTIMES = ("python3.12", "python3.13", "python3.14")


def _documented() -> dict[tuple[str, str], dict[str, bool]]:
    """(method, path) -> query parameter -> required, as docs/openapi.json (generated from the app) has them."""
    spec = json.loads(OPENAPI.read_text(encoding="utf-8"))
    return {
        (method.upper(), path): {p["name"]: p["required"] for p in operation["parameters"] if p["in"] == "query"}
        for path, operations in spec["paths"].items()
        for method, operation in operations.items()
    }


def test_the_routes_are_the_ones_the_function_serves() -> None:
    # docs/openapi.json is generated from functions/query/api.py (a unit test keeps it fresh).
    query = ".querystring."
    served = {(method, path): {n: r for n, r in params.items() if query in n} for method, path, params in app_methods()}
    assert served == {
        route: {f"method.request{query}{name}": required for name, required in params.items()}
        for route, params in _documented().items()
    }
    for _, path, params in app_methods():
        # Every {name} of the path is a parameter the gateway requires, and the only path parameters.
        assert {n: r for n, r in params.items() if ".path." in n} == {
            f"method.request.path.{name}": True for name in _path_names(path)
        }


def _path_names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]


def test_every_method_requires_iam_and_validates_its_parameters(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    methods = synth.of_type("AWS::ApiGateway::Method")
    assert sorted(m["Properties"]["HttpMethod"] for m in methods.values()) == sorted(m for m, _ in _documented())
    (validator_id,) = synth.of_type("AWS::ApiGateway::RequestValidator")
    validator = synth.resources[validator_id]["Properties"]
    assert validator["ValidateRequestParameters"] is True
    alias = synth.logical_id(synth.stack.api.query.invoked)
    for method in methods.values():
        properties = method["Properties"]
        assert properties["AuthorizationType"] == "AWS_IAM"
        assert properties["RequestValidatorId"] == {"Ref": validator_id}
        assert properties["Integration"]["Type"] == "AWS_PROXY"
        # the alias of the published version, which SnapStart restores; never the unqualified function
        assert render(properties["Integration"]["Uri"]).endswith(f"/functions/${{{alias}}}/invocations")
    required = sorted(
        name
        for method in methods.values()
        for name, is_required in method["Properties"]["RequestParameters"].items()
        if is_required
    )
    # Every path parameter and every required query parameter of the app's routes, and nothing else.
    expected = sorted(
        [f"method.request.path.{name}" for _, path in _documented() for name in _path_names(path)]
        + [f"method.request.querystring.{n}" for query in _documented().values() for n, req in query.items() if req]
    )
    assert required == expected
    assert "method.request.querystring.from" in required


def test_a_missing_parameter_is_answered_in_the_functions_error_shape(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    (response,) = synth.of_type("AWS::ApiGateway::GatewayResponse").values()
    assert response["Properties"]["ResponseType"] == "BAD_REQUEST_PARAMETERS"
    body = response["Properties"]["ResponseTemplates"]["application/json"]
    assert set(json.loads(body.replace("$context.error.validationErrorString", "x"))) == {"error", "parameter"}


def test_the_stage_is_throttled_traced_and_access_logged_as_json(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    config = synth.config
    (stage,) = synth.of_type("AWS::ApiGateway::Stage").values()
    properties = stage["Properties"]
    assert properties["StageName"] == config.api_stage
    assert properties["TracingEnabled"] is True
    (settings,) = properties["MethodSettings"]
    assert (settings["HttpMethod"], settings["ResourcePath"]) == ("*", "/*")
    assert settings["ThrottlingRateLimit"] == config.api_throttle_rate
    assert settings["ThrottlingBurstLimit"] == config.api_throttle_burst
    assert settings["LoggingLevel"] == "ERROR"
    assert settings["DataTraceEnabled"] is False
    access = properties["AccessLogSetting"]
    assert synth.logical_id(synth.stack.api.access_logs) in render(access["DestinationArn"])
    fields = json.loads(access["Format"])
    assert fields["requestId"] == "$context.requestId"  # API Gateway requires it in every format
    assert fields["userArn"] == "$context.identity.userArn"
    assert access["Format"] == ACCESS_LOG_FORMAT
    (rest_api,) = synth.of_type("AWS::ApiGateway::RestApi").values()
    assert rest_api["Properties"]["EndpointConfiguration"] == {"Types": ["REGIONAL"]}


def test_api_gateway_gets_its_logging_role_only_when_configured(synthesized: Synthesized) -> None:
    assert len(synthesized.synth("default").of_type("AWS::ApiGateway::Account")) == 1
    account = next(iter(synthesized.synth("default").of_type("AWS::ApiGateway::Account").values()))
    assert account["DeletionPolicy"] == "Retain"  # other APIs in the account may use it
    assert synthesized.synth("provisioned").of_type("AWS::ApiGateway::Account") == {}


def test_the_query_function_times_out_before_the_integration(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    timeout = synth.function(LambdaFunction.QUERY)[1]["Properties"]["Timeout"]
    assert timeout < API_INTEGRATION_TIMEOUT_S
    for method in synth.of_type("AWS::ApiGateway::Method").values():
        assert method["Properties"]["Integration"]["TimeoutInMillis"] == API_INTEGRATION_TIMEOUT_S * 1000


def test_the_query_function_reserves_its_concurrency_and_ingest_draws_on_the_rest(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    query = synth.function(LambdaFunction.QUERY)[1]["Properties"]
    ingest = synth.function(LambdaFunction.INGEST)[1]["Properties"]
    assert query["ReservedConcurrentExecutions"] == synth.config.query_reserved_concurrency == 50
    assert "ReservedConcurrentExecutions" not in ingest


def test_each_reserved_concurrency_is_a_setting_and_the_scheduled_functions_run_alone(synthesized: Synthesized) -> None:
    # Given the defaults: only the query function (and the scheduled functions, always) reserved
    default = synthesized.synth("default")
    reserved = {f: default.function(f)[1]["Properties"].get("ReservedConcurrentExecutions") for f in LambdaFunction}
    assert reserved == {
        LambdaFunction.INGEST: None,
        LambdaFunction.QUERY: 50,
        LambdaFunction.HOTKEYS: None,
        LambdaFunction.ROTATOR: 1,
        LambdaFunction.ROLLUP: 1,
        LambdaFunction.COMPACTION: 1,
    }
    # When ingest and the hot-key detector are reserved too (an 8-shard provisioned stream)
    provisioned = synthesized.synth("provisioned")
    properties = {f: provisioned.function(f)[1]["Properties"] for f in (LambdaFunction.INGEST, LambdaFunction.HOTKEYS)}
    # Then each gets its own setting
    assert properties[LambdaFunction.INGEST]["ReservedConcurrentExecutions"] == 8
    assert properties[LambdaFunction.HOTKEYS]["ReservedConcurrentExecutions"] == 4


def test_the_cursor_key_is_a_generated_secret_long_enough_for_the_function(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    (secret,) = synth.of_type("AWS::SecretsManager::Secret").values()
    generated = secret["Properties"]["GenerateSecretString"]
    assert generated["PasswordLength"] >= MIN_SECRET_CHARS
    assert generated["ExcludePunctuation"] is True
    assert "SecretString" not in secret["Properties"]  # the value never appears in the template


def test_the_cursor_key_rotates_on_schedule_through_its_own_function(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    api = synth.stack.api
    secret = synth.resolve(api.cursor_key.secret_arn)
    function_id, function = synth.function(CURSOR_ROTATION)
    # The schedule: every api_cursor_key_rotation_days, by the rotation function
    (schedule,) = synth.of_type("AWS::SecretsManager::RotationSchedule").values()
    assert schedule["Properties"] == {
        "SecretId": secret,
        "RotationLambdaARN": {"Fn::GetAtt": [function_id, "Arn"]},
        "RotationRules": {"ScheduleExpression": f"rate({synth.config.api_cursor_key_rotation_days} days)"},
    }
    assert function["Properties"]["Handler"] == "cursor_rotation.handler.handler"
    # Only this account's Secrets Manager may invoke it
    (permission,) = [
        p["Properties"]
        for p in synth.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [function_id, "Arn"]}
    ]
    assert (permission["Principal"], permission["SourceAccount"]) == (
        "secretsmanager.amazonaws.com",
        {"Ref": "AWS::AccountId"},
    )
    # And its role reaches this secret only, with the four calls a rotation makes (the key generator takes no
    # resource); the query function may only read it
    secret_text = render(secret)
    assert grants(synth.role_statements(CURSOR_ROTATION)) == {
        *(
            (f"secretsmanager:{action}", secret_text, "{}")
            for action in ("DescribeSecret", "GetSecretValue", "PutSecretValue", "UpdateSecretVersionStage")
        ),
        ("secretsmanager:GetRandomPassword", "*", "{}"),
        ("xray:PutTraceSegments", "*", "{}"),
        ("xray:PutTelemetryRecords", "*", "{}"),
        *(
            (action, render(synth.resolve(api.cursor_rotation.log_group.log_group_arn)), "{}")
            for action in ("logs:CreateLogStream", "logs:PutLogEvents")
        ),
    }
    query_secret_grants = {
        g for g in grants(synth.role_statements(LambdaFunction.QUERY)) if g[0].startswith("secretsmanager:")
    }
    assert query_secret_grants == {("secretsmanager:GetSecretValue", secret_text, "{}")}


def test_only_the_api_may_invoke_the_query_function_and_only_through_its_alias(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    function_id = synth.function(LambdaFunction.QUERY)[0]
    alias = synth.logical_id(synth.stack.api.query.invoked)
    permissions = [
        p["Properties"]
        for p in synth.of_type("AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Ref": alias}
    ]
    assert len(permissions) == len(app_methods())  # one per method, no test-invoke permissions
    # None on the unqualified function ($LATEST, which SnapStart does not cover) nor on a version
    targets = {render(p["Properties"]["FunctionName"]) for p in synth.of_type("AWS::Lambda::Permission").values()}
    assert not any(function_id in target for target in targets)
    stage = synth.logical_id(synth.stack.api.rest_api.deployment_stage)
    for permission in permissions:
        assert permission["Principal"] == "apigateway.amazonaws.com"
        assert f"${{{stage}}}/GET/" in render(permission["SourceArn"])


def test_the_query_function_runs_with_snapstart_through_the_live_alias_of_its_newest_version(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("default")
    function_id, function = synth.function(LambdaFunction.QUERY)
    assert function["Properties"]["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    assert function["Properties"]["Runtime"] in SNAPSTART_RUNTIMES
    # SnapStart's incompatibilities: provisioned concurrency, EFS, ephemeral storage above 512 MB
    assert "FileSystemConfigs" not in function["Properties"]
    assert function["Properties"].get("EphemeralStorage", {"Size": 512})["Size"] <= 512
    (version_id, version), *others = synth.of_type("AWS::Lambda::Version").items()
    assert others == [] and version["Properties"]["FunctionName"] == {"Ref": function_id}
    # A replaced version is deleted: its snapshot is billed for as long as it exists
    assert (version["DeletionPolicy"], version["UpdateReplacePolicy"]) == ("Delete", "Delete")
    # The alias follows the newest version, with no provisioned concurrency (SnapStart refuses it)
    (alias,) = [a["Properties"] for a in synth.of_type("AWS::Lambda::Alias").values()]
    assert alias == {
        "FunctionName": {"Ref": function_id},
        "FunctionVersion": {"Fn::GetAtt": [version_id, "Version"]},
        "Name": LIVE_ALIAS,
    }
    # Only the query function: the others would pay the snapshot's charges for no one waiting (docs/decisions.md)
    snap = {k for k, v in synth.of_type("AWS::Lambda::Function").items() if "SnapStart" in v["Properties"]}
    assert snap == {function_id}
