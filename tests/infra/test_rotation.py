"""The rotator (only with a table period): its schedule, its failure queue, and what its role may do."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.config import Context, LambdaFunction
from infra.lambdas import schedule_expression
from infra.rotation import MANAGED_BY_TAG, MANAGED_BY_VALUE, PREFIX_TAG
from rotator import settings as rotator_settings
from tests.infra.conftest import Synthesized
from tests.infra.template_queries import grants, render

pytestmark = pytest.mark.infra

ACCOUNT_ARN = "arn:${AWS::Partition}:%s:${AWS::Region}:${AWS::AccountId}:%s"
PREFIX = "timeseries-readings"


def _rotator_schedules(synth: Any) -> list[Any]:
    """The schedules that run the rotator (the rollup function has one of its own)."""
    return [
        s for s in synth.of_type("AWS::Scheduler::Schedule").values() if "rotator" in s["Properties"]["Description"]
    ]


def test_the_rotator_and_its_schedule_exist_only_with_a_table_period(synthesized: Synthesized) -> None:
    assert _rotator_schedules(synthesized.synth("single")) == []
    assert synthesized.stacks["single"].rotation is None
    assert len(_rotator_schedules(synthesized.synth("periodic"))) == 1


def test_the_default_deployment_rotates_hourly_tables_every_quarter_hour(synthesized: Synthesized) -> None:
    # Given the shipped defaults: hourly tables, the period the planner's 10 GB rule gives the seed workload
    synth = synthesized.synth("default")
    assert synth.config.table_period == "hour"
    # Then the stack holds no readings table (the rotator builds them), the rotator and its schedule
    assert synth.stack.storage.readings_table is None
    rotation = synth.stack.rotation
    assert rotation is not None
    (schedule,) = _rotator_schedules(synth)
    properties = schedule["Properties"]
    assert properties["ScheduleExpression"] == "rate(15 minutes)"
    assert properties["State"] == "ENABLED"
    assert properties["Target"]["Arn"] == synth.resolve(rotation.function.function_arn)
    # And the rotator builds two periods ahead, sets every table up with TTL and its alarms, keeps 30 days
    env = synth.function(LambdaFunction.ROTATOR)[1]["Properties"]["Environment"]["Variables"]
    settings = (env["TABLE_PERIOD"], env["PREBUILD_PERIODS"], env["RETENTION"])
    assert settings == ("hour", "2", "30d")
    assert env["ALARM_TOPIC_ARN"] == synth.resolve(synth.stack.alerts.topic.topic_arn)


def test_the_schedule_runs_the_rotator_on_a_fixed_rate_with_a_dead_letter_queue(synthesized: Synthesized) -> None:
    synth = synthesized.synth("periodic")
    rotation = synth.stack.rotation
    (schedule,) = _rotator_schedules(synth)
    properties = schedule["Properties"]
    assert properties["ScheduleExpression"] == "rate(1 hour)"  # daily tables
    assert properties["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert properties["State"] == "ENABLED"
    target = properties["Target"]
    assert target["Arn"] == synth.resolve(rotation.function.function_arn)
    assert json.loads(target["Input"]) == {}  # a live run on the real clock
    assert target["DeadLetterConfig"] == {"Arn": synth.resolve(rotation.failure_queue.queue_arn)}
    assert target["RetryPolicy"]["MaximumEventAgeInSeconds"] == 3600
    # The schedule's role may invoke the rotator itself and reach its DLQ, nothing more.
    role_id = target["RoleArn"]["Fn::GetAtt"][0]
    assert grants(synth.statements_of_role(role_id)) == {
        ("lambda:InvokeFunction", render(synth.resolve(rotation.function.function_arn)), "{}"),
        ("sqs:SendMessage", render(synth.resolve(rotation.failure_queue.queue_arn)), "{}"),
    }
    trust = synth.resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "scheduler.amazonaws.com"}]


@pytest.mark.parametrize(("period", "expression"), [("hour", "rate(15 minutes)"), ("day", "rate(1 hour)")])
def test_hourly_tables_are_rotated_every_quarter_hour(period: str, expression: str) -> None:
    config = Context.parse({"table_period": period, "retention": "7d"})
    assert schedule_expression(config.rotation_interval_minutes()) == expression


def test_one_run_at_a_time_and_failed_runs_land_in_an_alarmed_queue(synthesized: Synthesized) -> None:
    synth = synthesized.synth("periodic")
    properties = synth.function(LambdaFunction.ROTATOR)[1]["Properties"]
    assert properties["ReservedConcurrentExecutions"] == 1
    assert properties["DeadLetterConfig"] == {"TargetArn": synth.resolve(synth.stack.rotation.failure_queue.queue_arn)}
    assert properties["Timeout"] == synth.config.sizing(LambdaFunction.ROTATOR).timeout_s


def test_the_tags_the_delete_condition_requires_are_the_ones_the_rotator_writes() -> None:
    assert (MANAGED_BY_TAG, MANAGED_BY_VALUE, PREFIX_TAG) == (
        rotator_settings.MANAGED_BY_TAG,
        rotator_settings.MANAGED_BY_VALUE,
        rotator_settings.PREFIX_TAG,
    )


def _ownership(condition: str, prefix: str = PREFIX) -> dict[str, str]:
    return {
        f"aws:{condition}/timeseries:managed-by": "rotator",
        f"aws:{condition}/timeseries:table-prefix": prefix,
    }


def _condition(condition: dict[str, object]) -> str:
    return json.dumps(condition, sort_keys=True)


def test_the_rotator_may_manage_only_its_prefixed_tables_alarms_and_hot_key_mappings(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("periodic")
    stack = synth.stack
    tables = ACCOUNT_ARN % ("dynamodb", f"table/{PREFIX}-*")
    hot_keys = _condition({"StringEquals": {"lambda:FunctionArn": synth.resolve(stack.hot_keys.function.function_arn)}})
    reads = ["DescribeTable", "ListTagsOfResource", "DescribeTimeToLive", "DescribeContinuousBackups"]
    reads.append("DescribeContributorInsights")
    # Every change to a table needs the ownership tags: setup (TTL, PITR, Contributor Insights), capacity,
    # billing mode, table class and deletion protection (UpdateTable), and dropping it
    changes = ["UpdateTable", "DeleteTable", "UpdateTimeToLive", "UpdateContinuousBackups"]
    changes.append("UpdateContributorInsights")
    owned = _condition({"StringEquals": _ownership("ResourceTag")})
    insights_service = "contributorinsights.dynamodb.amazonaws.com"
    expected = {
        ("xray:PutTraceSegments", "*", "{}"),
        ("xray:PutTelemetryRecords", "*", "{}"),
        ("logs:CreateLogStream", render(synth.resolve(stack.rotation.rotator.log_group.log_group_arn)), "{}"),
        ("logs:PutLogEvents", render(synth.resolve(stack.rotation.rotator.log_group.log_group_arn)), "{}"),
        # its own dead-letter queue
        ("sqs:SendMessage", render(synth.resolve(stack.rotation.failure_queue.queue_arn)), "{}"),
        ("dynamodb:ListTables", "*", "{}"),
        ("cloudwatch:DescribeAlarms", "*", "{}"),
        ("lambda:ListEventSourceMappings", "*", "{}"),
        # what a closed table consumed, for its table class
        ("cloudwatch:GetMetricData", "*", "{}"),
        *((f"dynamodb:{action}", tables, "{}") for action in reads),
        *((f"dynamodb:{action}", tables, owned) for action in changes),
        # DynamoDB makes Contributor Insights' service-linked role the first time, with the caller's permission
        (
            "iam:CreateServiceLinkedRole",
            "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/aws-service-role/"
            f"{insights_service}/AWSServiceRoleForDynamoDBCloudWatchContributorInsights",
            _condition({"StringEquals": {"iam:AWSServiceName": insights_service}}),
        ),
        # The ownership tags: written only by a CreateTable that carries them, and as TagResource only
        # on a table that carries them already, unchanged; changing or dropping a table needs them.
        ("dynamodb:CreateTable", tables, _condition({"StringEquals": _ownership("RequestTag")})),
        (
            "dynamodb:TagResource",
            tables,
            _condition({"StringEquals": {**_ownership("RequestTag"), **_ownership("ResourceTag")}}),
        ),
        # Exports, only because this variant has an export bucket.
        ("dynamodb:ListExports", "*", "{}"),
        ("dynamodb:ExportTableToPointInTime", tables, "{}"),
        ("dynamodb:DescribeExport", ACCOUNT_ARN % ("dynamodb", f"table/{PREFIX}-*/export/*"), "{}"),
        *(
            (f"cloudwatch:{action}", ACCOUNT_ARN % ("cloudwatch", f"alarm:{PREFIX}-*"), "{}")
            for action in ("PutMetricAlarm", "DeleteAlarms", "TagResource")
        ),
        ("lambda:CreateEventSourceMapping", "*", hot_keys),
        *(
            (f"lambda:{action}", ACCOUNT_ARN % ("lambda", "event-source-mapping:*"), hot_keys)
            for action in ("UpdateEventSourceMapping", "DeleteEventSourceMapping")
        ),
        *(
            (action, "arn:${AWS::Partition}:s3:::timeseries-exports-example/dynamodb-exports/*", "{}")
            for action in ("s3:AbortMultipartUpload", "s3:PutObject", "s3:PutObjectAcl")
        ),
    }
    statements = synth.role_statements(LambdaFunction.ROTATOR)
    assert grants(statements) == expected
    # And the ownership tags never come off, even if a later grant allowed untagging.
    keys = ["timeseries:managed-by", "timeseries:table-prefix"]
    assert grants(statements, "Deny") == {
        ("dynamodb:UntagResource", tables, _condition({"ForAnyValue:StringEquals": {"aws:TagKeys": keys}}))
    }


def test_no_action_that_can_take_a_table_away_or_claim_one_goes_without_the_ownership_tags(
    synthesized: Synthesized,
) -> None:
    # Given both rotating deployments (hourly tables without exports, daily tables with them)
    for variant in ("default", "periodic"):
        statements = synthesized.synth(variant).role_statements(LambdaFunction.ROTATOR)
        # Then every grant of an action that writes tags, changes a table's protection or drops it is conditioned
        for action, _, condition in grants(statements):
            if action.startswith(("dynamodb:Update", "dynamodb:Delete", "dynamodb:Tag")):
                assert _ownership("ResourceTag").items() <= json.loads(condition)["StringEquals"].items(), action
            if action in ("dynamodb:CreateTable", "dynamodb:TagResource"):
                assert _ownership("RequestTag").items() <= json.loads(condition)["StringEquals"].items(), action
            # And untagging is allowed nowhere
            assert action not in ("dynamodb:UntagResource", "dynamodb:*"), action


def test_every_change_the_rotator_makes_to_a_table_needs_the_ownership_tags(synthesized: Synthesized) -> None:
    # Any dynamodb action other than reading, listing, creating and exporting changes a table
    granted = grants(synthesized.synth("default").role_statements(LambdaFunction.ROTATOR))
    changing = {
        (action, condition)
        for action, _, condition in granted
        if action.startswith("dynamodb:")
        and not action.startswith(("dynamodb:Describe", "dynamodb:List", "dynamodb:CreateTable"))
    }
    assert {action for action, _ in changing} == {
        "dynamodb:TagResource",
        "dynamodb:UpdateTable",
        "dynamodb:DeleteTable",
        "dynamodb:UpdateTimeToLive",
        "dynamodb:UpdateContinuousBackups",
        "dynamodb:UpdateContributorInsights",
    }
    for action, condition in changing:
        assert _ownership("ResourceTag").items() <= json.loads(condition)["StringEquals"].items(), action


def test_without_contributor_insights_or_table_classes_the_rotator_is_granted_neither(
    synthesized: Synthesized,
) -> None:
    # Given per-period tables with Contributor Insights off and no table-class changes
    import aws_cdk as cdk  # noqa: PLC0415

    from infra.stack import TimeSeriesStack  # noqa: PLC0415
    from tests.infra.template_queries import Synth  # noqa: PLC0415

    context = {
        **synthesized.app.node.get_all_context(),
        "stack_name": "TimeSeriesPlainPeriods",
        "contributor_insights": "off",
        "infrequent_access_storage_percent": "null",
    }
    config = Context.parse(context)
    app = cdk.App(context=context)
    stack = TimeSeriesStack(app, config.stack_name, config=config)
    synth = Synth(stack=stack, config=config, template=cdk.assertions.Template.from_stack(stack).to_json())
    granted = {action for action, _, _ in grants(synth.role_statements(LambdaFunction.ROTATOR))}
    assert not granted & {
        "dynamodb:DescribeContributorInsights",
        "dynamodb:UpdateContributorInsights",
        "iam:CreateServiceLinkedRole",
        "cloudwatch:GetMetricData",
    }
    env = synth.environment(LambdaFunction.ROTATOR)
    assert env["CONTRIBUTOR_INSIGHTS"] == "off" and "INFREQUENT_ACCESS_STORAGE_PERCENT" not in env


def test_the_rotator_is_told_the_single_tables_contributor_insights_and_the_class_rule(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("default")
    env = synth.environment(LambdaFunction.ROTATOR)
    assert env["CONTRIBUTOR_INSIGHTS"] == synth.config.contributor_insights == "throttled_keys"
    assert env["INFREQUENT_ACCESS_STORAGE_PERCENT"] == "50"


def test_without_an_export_bucket_the_rotator_cannot_export(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    assert synth.config.export_bucket is None
    granted = {action for action, _, _ in grants(synth.role_statements(LambdaFunction.ROTATOR))}
    assert not granted & {"dynamodb:ExportTableToPointInTime", "dynamodb:ListExports", "dynamodb:DescribeExport"}
    assert not any(action.startswith("s3:") for action in granted)
