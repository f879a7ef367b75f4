"""cdk-nag (AwsSolutions, Serverless), CDK's own annotations, and cfn-lint on the synthesized templates.

cdk-nag 3 is a policy-validation plugin, not an aspect: it reports violations
(errors and warnings alike) instead of adding annotations, and it honours
``Validations.of(scope).acknowledge(...)``. ``validate_scope`` runs a pack over
the construct tree and returns that report, which is what these tests assert on.
"""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk import App, Stack, Validations
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match
from cdk_nag import AwsSolutionsChecks, ServerlessChecks
from cfnlint.api import ManualArgs, lint_file

from tests.infra.conftest import VARIANTS, Synthesized

pytestmark = pytest.mark.infra

PERIOD_TABLES = "arn:<AWS::Partition>:dynamodb:<AWS::Region>:<AWS::AccountId>:table/timeseries-readings-*"
_TERMINAL_QUEUE = ("AwsSolutions-SQS3", "Serverless-SQSRedrivePolicy")
_EVERY_STACK = {
    # Queues that are themselves the last stop (rejects, failed batches): alarmed, not redriven.
    *(
        (queue, rule)
        for queue in (
            "Ingestion/RejectsQueue",
            "Ingestion/FailureQueue",
            "HotKeys/FailureQueue",
            "Rollups/FailureQueue",
        )
        for rule in _TERMINAL_QUEUE
    ),
    # X-Ray takes no resource; stream- and API-invoked functions are never invoked asynchronously.
    *(
        (f"{fn}/Role", "AwsSolutions-IAM5[Resource::*]")
        for fn in ("Ingestion/Ingest", "Api/Query", "HotKeys/Detector", "Rollups/Rollup")
    ),
    *((f"{fn}/Function", "Serverless-LambdaDLQ") for fn in ("Ingestion/Ingest", "Api/Query", "HotKeys/Detector")),
    # The cursor key's rotation function: GetRandomPassword and X-Ray take no resource; Secrets Manager
    # invokes it synchronously.
    ("Api/CursorKeyRotation/Role", "AwsSolutions-IAM5[Resource::*]"),
    ("Api/CursorKeyRotation/Function", "Serverless-LambdaDLQ"),
    ("Api/RestApi", "AwsSolutions-APIG3"),
    ("Api/RestApi", "AwsSolutions-COG4"),
    # CDK warns on every SnapStart function, published or not: this one publishes a version per deployment.
    ("Api/Query/Function", "@aws-cdk/aws-lambda:snapStartRequirePublish"),
}
_API_LOGGING_ROLE = (
    "Api/RestApi/CloudWatchRole",
    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]",
)
# What the rotation adds: its failure queue, and the per-period tables named by pattern.
_ROTATION = {("Rotation/FailureQueue", rule) for rule in _TERMINAL_QUEUE} | {
    # The per-period tables exist only at run time: named by pattern.
    ("Ingestion/Ingest/Role", f"AwsSolutions-IAM5[Resource::{PERIOD_TABLES}]"),
    ("Api/Query/Role", f"AwsSolutions-IAM5[Resource::{PERIOD_TABLES}]"),
    ("HotKeys/Detector/Role", f"AwsSolutions-IAM5[Resource::{PERIOD_TABLES}/stream/*]"),
    ("Rollups/Rollup/Role", f"AwsSolutions-IAM5[Resource::{PERIOD_TABLES}]"),
    ("Rotation/Rotator/Role", "AwsSolutions-IAM5[Resource::*]"),
    ("Rotation/Rotator/Role", f"AwsSolutions-IAM5[Resource::{PERIOD_TABLES}]"),
    (
        "Rotation/Rotator/Role",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:"
        "alarm:timeseries-readings-*]",
    ),
    (
        "Rotation/Rotator/Role",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:lambda:<AWS::Region>:<AWS::AccountId>:"
        "event-source-mapping:*]",
    ),
}
#: Every acknowledgement the infra code makes, per variant. Adding one means
#: changing this list, so a new suppression is always a visible, reviewed change.
EXPECTED_ACKNOWLEDGEMENTS = {
    "default": _EVERY_STACK | {_API_LOGGING_ROLE} | _ROTATION,
    "single": _EVERY_STACK | {_API_LOGGING_ROLE},
    "provisioned": _EVERY_STACK
    | {("Alerts/Topic/ops@example.com", "Serverless-SNSRedrivePolicy")}
    | {("Ingestion/IotRuleFailureQueue", rule) for rule in _TERMINAL_QUEUE},
    "periodic": _EVERY_STACK
    | {_API_LOGGING_ROLE}
    | _ROTATION
    | {
        # Exports (only with an export bucket) get their ids when started.
        ("Rotation/Rotator/Role", f"AwsSolutions-IAM5[Resource::{PERIOD_TABLES}/export/*]"),
        (
            "Rotation/Rotator/Role",
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:s3:::timeseries-exports-example/dynamodb-exports/*]",
        ),
    },
}
#: cfn-lint rules not applied, each with why. W3005 flags the DependsOn CDK puts
#: on every function for its role: the role's policy must be attached before the
#: function can run, and CDK expresses that as a dependency on the role construct
#: (role and policy). The entry for the role repeats the Fn::GetAtt: redundant, harmless.
LINT_IGNORED = ["W3005"]
# Regions with different resource support, so a property missing in one shows up.
LINT_REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2"]


def _describe(report: Any) -> str:
    lines = []
    for violation in report.violations:
        paths = ", ".join(r.construct_path or "?" for r in violation.violating_resources)
        lines.append(f"{violation.severity} {violation.rule_name}: {violation.description} [{paths}]")
    return "\n".join(lines)


@pytest.mark.parametrize("pack", [AwsSolutionsChecks, ServerlessChecks], ids=["AwsSolutions", "Serverless"])
def test_nag_pack_reports_no_unacknowledged_errors_or_warnings(synthesized: Synthesized, pack: type) -> None:
    # When the pack runs over every stack variant in the app
    report = pack(verbose=True).validate_scope(synthesized.app)
    # Then nothing is reported: errors and warnings both fail
    assert report.success, "\n" + _describe(report)
    assert list(report.violations) == []


def test_the_acknowledged_rules_do_fire_on_a_queue_without_the_acknowledgements() -> None:
    # Guards the test above against packs that silently check nothing: the
    # rejects queue's settings, minus the acknowledgements, are flagged by both.
    stack = Stack(App(), "Unacknowledged")
    sqs.Queue(stack, "Queue", encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True)
    solutions = AwsSolutionsChecks().validate_scope(stack)
    serverless = ServerlessChecks().validate_scope(stack)
    assert {v.rule_name for v in solutions.violations} == {"AwsSolutions-SQS3"}
    assert {v.rule_name for v in serverless.violations} == {"Serverless-SQSRedrivePolicy"}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_acknowledgement_is_expected_and_gives_a_real_reason(synthesized: Synthesized, variant: str) -> None:
    stack = synthesized.stacks[variant]
    found: set[tuple[str, str]] = set()
    for construct in stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type != Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                continue
            relative = construct.node.path.removeprefix(f"{stack.node.path}/")
            for stored_id, reason in entry.data.items():
                rule_id = stored_id.split("::", 1)[-1]  # CDK stores "Annotation::<id>"
                found.add((relative, rule_id))
                assert rule_id.startswith(("AwsSolutions-", "Serverless-", "@aws-cdk/")), rule_id
                assert len(reason.split()) >= 15, f"{rule_id} on {relative}: reason too thin: {reason!r}"
    assert found == EXPECTED_ACKNOWLEDGEMENTS[variant]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cdk_itself_reports_no_warnings_or_errors(synthesized: Synthesized, variant: str) -> None:
    annotations = Annotations.from_stack(synthesized.stacks[variant])
    assert annotations.find_error("*", Match.any_value()) == []
    assert annotations.find_warning("*", Match.any_value()) == []


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cfn_lint_finds_nothing_in_the_template(synthesized: Synthesized, variant: str) -> None:
    matches = lint_file(
        synthesized.template_file(variant), config=ManualArgs(regions=LINT_REGIONS, ignore_checks=LINT_IGNORED)
    )
    assert [str(m) for m in matches] == []
