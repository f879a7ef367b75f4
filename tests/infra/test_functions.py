"""The six Lambda functions: runtime and shape, environment, one least-privilege role each, stream mappings."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template

from adapters.settings import LOCAL_ONLY, CommonSettings
from adapters.shard_map_store import SHARD_MAP_KEY
from compaction.settings import CompactionSettings
from hotkeys.settings import HotKeySettings
from infra.api import CURSOR_ROTATION
from infra.config import LOG_RETENTION_DAYS, LambdaFunction
from infra.lambdas import FUNCTIONS_DIR, LOG_RETENTION
from infra.storage import SHARD_MAP_PARTITION
from ingest.settings import IngestSettings
from keydesign.writetier import STATE_PK
from query.settings import QuerySettings
from rollup.settings import RollupSettings
from rotator.settings import RotatorSettings
from tests.infra.conftest import VARIANTS, Synthesized
from tests.infra.template_queries import Synth, grants, render, walk

pytestmark = pytest.mark.infra

ALL = tuple(LambdaFunction)
WITHOUT_ROTATOR = tuple(f for f in LambdaFunction if f is not LambdaFunction.ROTATOR)
XRAY = {("xray:PutTraceSegments", "*", "{}"), ("xray:PutTelemetryRecords", "*", "{}")}
NO_CONDITION = "{}"


def _functions(synth: Synth) -> tuple[LambdaFunction, ...]:
    return ALL if synth.config.table_period else WITHOUT_ROTATOR


def _triples(synth: Synth, actions: list[str], resource: Any, condition: dict[str, Any] | None = None) -> set[Any]:
    text = render(synth.resolve(resource))
    cond = json.dumps(synth.resolve(condition) if condition else {}, sort_keys=True)
    return {(action, text, cond) for action in actions}


def _traced_and_logged(synth: Synth, function: Any) -> set[Any]:
    """What every function may do: send X-Ray its traces, and write to its own log group."""
    return XRAY | _triples(synth, ["logs:CreateLogStream", "logs:PutLogEvents"], function.log_group.log_group_arn)


def _shard_map_only(synth: Synth) -> dict[str, Any]:
    return {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [SHARD_MAP_PARTITION]}}


def _occupancy_only(synth: Synth) -> dict[str, Any]:
    return {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["occupancy#*"]}}


def _keys_only(*keys: str) -> dict[str, Any]:
    return {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(keys)}}


def _key_is(key: str) -> dict[str, Any]:
    return {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [key]}}


ROLLUP_READS = ("rollup#*", "rollall#*", "rollstate")


# -- shape -------------------------------------------------------------------------------


def test_every_function_runs_python_3_14_on_arm64_with_the_public_powertools_layer(synth: Synth) -> None:
    functions = synth.of_type("AWS::Lambda::Function")
    assert len(functions) == len(_functions(synth)) + 1  # and the cursor key's rotation function
    version = synth.config.powertools_layer_version
    for function in (*_functions(synth), CURSOR_ROTATION):
        _, resource = synth.function(function)
        properties = resource["Properties"]
        sizing = CURSOR_ROTATION.sizing if function is CURSOR_ROTATION else synth.config.sizing(function)
        assert properties["Runtime"] == "python3.14"
        assert properties["Architectures"] == ["arm64"]
        assert properties["Handler"] == f"{function.value}.handler.handler"
        assert (properties["MemorySize"], properties["Timeout"]) == (sizing.memory_mb, sizing.timeout_s)
        assert properties["TracingConfig"] == {"Mode": "Active"}
        (layer,) = properties["Layers"]
        assert render(layer) == (
            f"arn:aws:lambda:${{AWS::Region}}:017000801446:layer:AWSLambdaPowertoolsPythonV3-python314-arm64:{version}"
        )


def test_every_function_logs_to_its_own_log_group_with_the_configured_retention(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    groups = synth.of_type("AWS::Logs::LogGroup")
    seen = set()
    for function in _functions(synth):
        group_ref = synth.function(function)[1]["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert groups[group_ref]["Properties"]["RetentionInDays"] == 30
        seen.add(group_ref)
    assert len(seen) == len(_functions(synth))


def test_every_accepted_log_retention_is_written_as_that_many_days() -> None:
    # One stack, one log group per accepted value: a single synth instead of one per value.
    stack = cdk.Stack(cdk.App(), "Retention")
    for days in LOG_RETENTION_DAYS:
        logs.LogGroup(stack, f"Logs{days}", retention=LOG_RETENTION[days])
    resources = Template.from_stack(stack).to_json()["Resources"]
    # Each logical id is the construct id plus a hash: Logs<days><8 hex digits>
    written = {int(name[len("Logs") : -8]): group["Properties"]["RetentionInDays"] for name, group in resources.items()}
    assert written == {days: days for days in LOG_RETENTION_DAYS}


def test_the_handler_modules_exist_in_the_code_asset() -> None:
    # The asset is functions/ itself: each handler must be a module there.
    for function in ALL:
        module = function.handler.rsplit(".", 1)[0]
        assert (FUNCTIONS_DIR / (module.replace(".", "/") + ".py")).is_file(), module


def test_no_role_has_a_managed_policy_or_a_wildcard_action(synth: Synth) -> None:
    for function in _functions(synth):
        role_id = synth.function(function)[1]["Properties"]["Role"]["Fn::GetAtt"][0]
        assert "ManagedPolicyArns" not in synth.resources[role_id]["Properties"], function
    for policy in synth.of_type("AWS::IAM::Policy").values():
        for action, _, _ in grants(policy["Properties"]["PolicyDocument"]["Statement"]):
            assert "*" not in action, action


# -- environment ------------------------------------------------------------------------


def test_each_function_gets_the_environment_the_config_builds_and_its_settings_parse_it(synth: Synth) -> None:
    config = synth.config
    for function in _functions(synth):
        # Given the environment as deployed (tokens replaced by plausible values)
        env = synth.concrete_environment(function)
        # Then the function's own settings parser accepts it at cold start
        common = CommonSettings.from_env(env)
        assert common.layout == config.layout()
        assert common.shards == config.shards
        assert common.control_table == config.control_table
        assert env["POWERTOOLS_SERVICE_NAME"] == function.value
        assert env["POWERTOOLS_METRICS_NAMESPACE"] == "TimeSeries"
        {
            LambdaFunction.INGEST: IngestSettings.from_env,
            LambdaFunction.QUERY: QuerySettings.from_env,
            LambdaFunction.HOTKEYS: HotKeySettings.from_env,
            LambdaFunction.ROTATOR: RotatorSettings.from_env,
            LambdaFunction.ROLLUP: RollupSettings.from_env,
            LambdaFunction.COMPACTION: CompactionSettings.from_env,
        }[function](env)


def test_every_variable_a_function_reads_is_rendered_by_the_stack_or_declared_local_only(
    synthesized: Synthesized,
) -> None:
    # Given every variable the functions' settings models read
    read = {name for function in LambdaFunction for name in function.settings.variables().values()}
    # and every variable the synthesized stacks render (the defaults, one table, and the optional keys set)
    synths = [synthesized.synth(variant) for variant in VARIANTS]
    rendered = {name for synth in synths for function in _functions(synth) for name in synth.environment(function)}
    # Then each is either set by the stack or one of the few only the local runtime sets, and never both
    assert sorted(read - rendered - LOCAL_ONLY) == []
    assert read >= LOCAL_ONLY and not LOCAL_ONLY & rendered


def test_deploy_time_values_point_at_the_right_resources(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    stack = synth.stack
    assert synth.environment(LambdaFunction.INGEST)["REJECTS_QUEUE_URL"] == synth.resolve(
        stack.ingestion.rejects_queue.queue_url
    )
    assert synth.environment(LambdaFunction.QUERY)["CURSOR_SECRET_ARN"] == synth.resolve(
        stack.api.cursor_key.secret_arn
    )
    assert synth.environment(LambdaFunction.HOTKEYS)["HOT_ALERT_TOPIC_ARN"] == synth.resolve(
        stack.alerts.topic.topic_arn
    )


def test_the_rotator_maps_new_tables_to_the_hot_key_function_with_the_stack_settings(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("periodic")
    stack = synth.stack
    env = synth.environment(LambdaFunction.ROTATOR)
    assert env["HOTKEYS_FUNCTION_ARN"] == synth.resolve(stack.hot_keys.function.function_arn)
    assert env["HOTKEYS_ON_FAILURE_ARN"] == synth.resolve(stack.hot_keys.failure_queue.queue_arn)
    assert env["ALARM_TOPIC_ARN"] == synth.resolve(stack.alerts.topic.topic_arn)
    # and the settings it derives are the ones the stack gives its own mapping
    settings = RotatorSettings.from_env(synth.concrete_environment(LambdaFunction.ROTATOR))
    config = synth.config
    assert (settings.hotkeys_batch_size, settings.hotkeys_max_retries, settings.hotkeys_max_record_age_s) == (
        config.hotkeys_batch_size,
        config.hotkeys_max_retries,
        config.hotkeys_max_record_age_s,
    )
    assert settings.export_bucket == "timeseries-exports-example"
    assert settings.alert_topic_arn is not None
    # Ingest and the rotator agree on the late-reading window and the tables built ahead.
    ingest = IngestSettings.from_env(synth.concrete_environment(LambdaFunction.INGEST))
    assert (ingest.grace_ms, ingest.prebuild_periods) == (settings.grace_ms, settings.prebuild_periods)


def test_a_low_split_threshold_raises_the_counters_the_detector_keeps(synthesized: Synthesized) -> None:
    # hot_split_threshold_wcu=10: a hot key is among a batch's top 1,000/10 = 100
    synth = synthesized.synth("provisioned")
    settings = HotKeySettings.from_env(synth.concrete_environment(LambdaFunction.HOTKEYS))
    assert settings.detector.split_threshold_wcu == 10
    assert settings.detector.counters_per_window == 100


# -- one least-privilege role each ----------------------------------------------------------


def test_the_shard_map_condition_names_the_key_the_store_uses() -> None:
    assert SHARD_MAP_KEY["pk"] == {"S": SHARD_MAP_PARTITION}


def test_ingest_may_write_readings_send_rejects_read_its_stream_and_bootstrap_the_shard_map(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("single")
    stack = synth.stack
    expected = (
        _traced_and_logged(synth, stack.ingestion.ingest)
        | _triples(synth, ["dynamodb:BatchWriteItem"], stack.storage.readings_table.table_arn)
        | _triples(
            synth,
            ["dynamodb:GetItem", "dynamodb:PutItem"],
            stack.storage.control_table.table_arn,
            _shard_map_only(synth),
        )
        | _triples(
            synth,
            ["dynamodb:BatchWriteItem", "dynamodb:PutItem"],
            stack.storage.control_table.table_arn,
            _occupancy_only(synth),
        )
        | _triples(synth, ["dynamodb:BatchWriteItem"], stack.storage.control_table.table_arn, _keys_only("rollmark#*"))
        # the write tier's start items (keydesign.writetier.tier_start_pk), with a container's first group items
        | _triples(
            synth, ["dynamodb:BatchWriteItem"], stack.storage.control_table.table_arn, _keys_only("compactstart#*")
        )
        | _triples(synth, ["sqs:SendMessage"], stack.ingestion.rejects_queue.queue_arn)
        # the mapping's on-failure destination, as CDK grants it
        | _triples(
            synth,
            ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
            stack.ingestion.failure_queue.queue_arn,
        )
        # what the Kinesis event source mapping reads with, on this stream only
        | _triples(
            synth,
            [
                "kinesis:DescribeStream",
                "kinesis:DescribeStreamConsumer",
                "kinesis:DescribeStreamSummary",
                "kinesis:GetRecords",
                "kinesis:GetShardIterator",
                "kinesis:ListShards",
                "kinesis:ListStreams",
                "kinesis:SubscribeToShard",
            ],
            stack.ingestion.stream.stream_arn,
        )
    )
    assert grants(synth.role_statements(LambdaFunction.INGEST)) == expected


def test_query_may_only_query_readings_read_the_shard_map_and_its_cursor_key(synthesized: Synthesized) -> None:
    synth = synthesized.synth("single")
    stack = synth.stack
    expected = (
        _traced_and_logged(synth, stack.api.query)
        | _triples(synth, ["dynamodb:Query"], stack.storage.readings_table.table_arn)
        | _triples(synth, ["dynamodb:GetItem"], stack.storage.control_table.table_arn, _shard_map_only(synth))
        | _triples(
            synth, ["dynamodb:Query", "dynamodb:GetItem"], stack.storage.control_table.table_arn, _occupancy_only(synth)
        )
        | _triples(
            synth,
            ["dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query"],
            stack.storage.control_table.table_arn,
            _keys_only(*ROLLUP_READS),
        )
        | _triples(synth, ["secretsmanager:GetSecretValue"], stack.api.cursor_key.secret_arn)
        # the write tier's compaction watermark (keydesign.writetier.state_key), read through a cache
        | _triples(synth, ["dynamodb:GetItem"], stack.storage.control_table.table_arn, _key_is(STATE_PK))
    )
    assert grants(synth.role_statements(LambdaFunction.QUERY)) == expected


def test_the_rollup_function_may_query_readings_and_touch_only_rollup_items_in_the_control_table(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("single")
    stack = synth.stack
    rollups = stack.rollups
    assert rollups is not None
    control = stack.storage.control_table.table_arn
    expected = (
        _traced_and_logged(synth, rollups.rollup)
        | _triples(synth, ["dynamodb:Query"], stack.storage.readings_table.table_arn)
        | _triples(synth, ["dynamodb:GetItem"], control, _shard_map_only(synth))
        | _triples(
            synth,
            [
                "dynamodb:Query",
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:PutItem",
                "dynamodb:BatchWriteItem",
            ],
            control,
            _keys_only("rollmark#*", *ROLLUP_READS),
        )
        # its schedule's dead-letter queue is the function's own (asynchronous invocation)
        | _triples(synth, ["sqs:SendMessage"], rollups.failure_queue.queue_arn)
        # the write tier's compaction watermark: raw reads plan both tiers at it, and each slot is planned with it
        | _triples(synth, ["dynamodb:GetItem"], control, _key_is(STATE_PK))
        # redo requests for compaction, and nothing else there (its compacted blocks are Queried in the readings
        # tables, above)
        | _triples(synth, ["dynamodb:BatchWriteItem"], control, _keys_only("compactredo#*"))
        # a mark late past its re-pack slice: whether the slice's partial left its minute out (fresh totals)
        | _triples(synth, ["dynamodb:GetItem"], control, _keys_only("rollgrp#*"))
    )
    assert grants(synth.role_statements(LambdaFunction.ROLLUP)) == expected
    (schedule,) = [
        s for s in synth.of_type("AWS::Scheduler::Schedule").values() if "rollup" in s["Properties"]["Description"]
    ]
    assert schedule["Properties"]["ScheduleExpression"] == "rate(1 minute)"


def test_the_compaction_function_may_query_and_write_readings_and_touch_only_its_keys_in_the_control_table(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("single")
    stack = synth.stack
    compaction = stack.compaction
    control = stack.storage.control_table.table_arn
    expected = (
        _traced_and_logged(synth, compaction.compaction)
        | _triples(synth, ["dynamodb:Query", "dynamodb:BatchWriteItem"], stack.storage.readings_table.table_arn)
        | _triples(synth, ["dynamodb:GetItem"], control, _shard_map_only(synth))
        | _triples(
            synth,
            ["dynamodb:GetItem", "dynamodb:PutItem"],
            control,
            {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["compactstate"]}},
        )
        # the write tier's start items ingest writes: a first run starts at the earliest
        | _triples(synth, ["dynamodb:Query"], control, _keys_only("compactstart#*"))
        | _triples(
            synth,
            ["dynamodb:BatchWriteItem", "dynamodb:Query", "dynamodb:DeleteItem"],
            control,
            _keys_only("rollgrp#*", "rollall#*", "rollmark#*", "compactredo#*"),
        )
        | _triples(synth, ["sqs:SendMessage"], compaction.failure_queue.queue_arn)
    )
    assert grants(synth.role_statements(LambdaFunction.COMPACTION)) == expected
    (schedule,) = [
        s for s in synth.of_type("AWS::Scheduler::Schedule").values() if "compaction" in s["Properties"]["Description"]
    ]
    assert schedule["Properties"]["ScheduleExpression"] == "rate(5 minutes)"


def test_hot_keys_may_use_the_control_table_read_the_stream_and_publish_alerts(synthesized: Synthesized) -> None:
    synth = synthesized.synth("single")
    stack = synth.stack
    control = [
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
    ]
    stream = ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:ListStreams"]
    expected = (
        _traced_and_logged(synth, stack.hot_keys.detector)
        | _triples(synth, control, stack.storage.control_table.table_arn)
        | _triples(synth, stream, stack.storage.readings_table.table_stream_arn)
        | _triples(
            synth,
            ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
            stack.hot_keys.failure_queue.queue_arn,
        )
        | _triples(synth, ["sns:Publish"], stack.alerts.topic.topic_arn)
        | _triples(synth, ["kms:GenerateDataKey", "kms:Decrypt"], stack.alerts.key.key_arn)
    )
    assert grants(synth.role_statements(LambdaFunction.HOTKEYS)) == expected


def test_with_per_period_tables_the_functions_reach_exactly_the_prefixed_tables(synthesized: Synthesized) -> None:
    synth = synthesized.synth("periodic")
    tables = "arn:${AWS::Partition}:dynamodb:${AWS::Region}:${AWS::AccountId}:table/timeseries-readings-*"
    ingest = grants(synth.role_statements(LambdaFunction.INGEST))
    query = grants(synth.role_statements(LambdaFunction.QUERY))
    hot = grants(synth.role_statements(LambdaFunction.HOTKEYS))
    assert ("dynamodb:BatchWriteItem", tables, NO_CONDITION) in ingest
    assert ("dynamodb:Query", tables, NO_CONDITION) in query
    for action in ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"):
        assert (action, f"{tables}/stream/*", NO_CONDITION) in hot
    # The control table cannot match the pattern (the config refuses it), so
    # nothing but the readings tables is reachable through it.
    assert not synth.config.control_table.startswith("timeseries-readings-")
    # The periodic hot-key function has no mapping of its own: the rotator makes them.
    assert synth.mappings_of(LambdaFunction.HOTKEYS) == []
    assert ("sqs:SendMessage", render(synth.resolve(synth.stack.hot_keys.failure_queue.queue_arn)), NO_CONDITION) in hot


@pytest.mark.parametrize("variant", ["periodic", "single"])
def test_ingest_may_invoke_the_rotator_it_names_and_nothing_else(synthesized: Synthesized, variant: str) -> None:
    # With per-period tables ingest asks the rotator for a missing table: it names it and may invoke it
    # (the function alone, no "<arn>:*"); with one table there is no rotator to ask
    synth = synthesized.synth(variant)
    invokes = [g for g in grants(synth.role_statements(LambdaFunction.INGEST)) if g[0].startswith("lambda:")]
    environment = synth.environment(LambdaFunction.INGEST)
    if synth.stack.rotation is None:
        assert invokes == [] and "ROTATOR_FUNCTION" not in environment
        return
    rotator = synth.stack.rotation.function
    assert invokes == [("lambda:InvokeFunction", render(synth.resolve(rotator.function_arn)), NO_CONDITION)]
    assert environment["ROTATOR_FUNCTION"] == f"{synth.config.stack_name}-rotator"
    assert synth.function(LambdaFunction.ROTATOR)[1]["Properties"]["FunctionName"] == environment["ROTATOR_FUNCTION"]


# -- stream mappings --------------------------------------------------------------------------


def test_the_ingest_mapping_has_the_whole_failure_plan(synth: Synth) -> None:
    (mapping,) = synth.mappings_of(LambdaFunction.INGEST)
    config = synth.config
    assert mapping["EventSourceArn"] == synth.resolve(synth.stack.ingestion.stream.stream_arn)
    assert mapping["StartingPosition"] == "TRIM_HORIZON"
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert mapping["BatchSize"] == config.ingest_batch_size
    assert mapping["MaximumBatchingWindowInSeconds"] == config.ingest_batching_window_s
    assert mapping["ParallelizationFactor"] == config.ingest_parallelization_factor
    assert mapping["DestinationConfig"] == {
        "OnFailure": {"Destination": synth.resolve(synth.stack.ingestion.failure_queue.queue_arn)}
    }
    # -1 (no cap) is CloudFormation's default: written only when capped
    assert mapping.get("MaximumRetryAttempts", -1) == config.ingest_max_retries
    assert mapping.get("MaximumRecordAgeInSeconds", -1) == config.ingest_max_record_age_s


def test_uncapped_retries_and_age_are_left_to_cloudformations_default(synthesized: Synthesized) -> None:
    (mapping,) = synthesized.synth("provisioned").mappings_of(LambdaFunction.INGEST)
    assert "MaximumRetryAttempts" not in mapping
    assert "MaximumRecordAgeInSeconds" not in mapping


def test_the_hot_key_mapping_reads_the_readings_stream_with_its_own_failure_queue(synthesized: Synthesized) -> None:
    synth = synthesized.synth("single")
    (mapping,) = synth.mappings_of(LambdaFunction.HOTKEYS)
    config = synth.config
    assert mapping["EventSourceArn"] == synth.resolve(synth.stack.storage.readings_table.table_stream_arn)
    assert mapping["StartingPosition"] == "TRIM_HORIZON"
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["BisectBatchOnFunctionError"] is True
    assert (mapping["BatchSize"], mapping["MaximumRetryAttempts"], mapping["MaximumRecordAgeInSeconds"]) == (
        config.hotkeys_batch_size,
        config.hotkeys_max_retries,
        config.hotkeys_max_record_age_s,
    )
    destination = mapping["DestinationConfig"]["OnFailure"]["Destination"]
    assert destination == synth.resolve(synth.stack.hot_keys.failure_queue.queue_arn)
    assert destination != synth.resolve(synth.stack.ingestion.failure_queue.queue_arn)


def test_every_queue_is_encrypted_and_refuses_plain_http(synthesized: Synthesized) -> None:
    synth = synthesized.synth("periodic")
    queues = synth.of_type("AWS::SQS::Queue")
    # rejects, ingest failures, hot-key failures, rotation failures, rollup failures, compaction failures
    assert len(queues) == 6
    policies = synth.of_type("AWS::SQS::QueuePolicy").values()
    for logical_id, queue in queues.items():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True
        denies = [
            statement
            for policy in policies
            if {"Ref": logical_id} in policy["Properties"]["Queues"]
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
            if statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        ]
        assert denies, logical_id


def test_no_function_environment_value_is_empty(synthesized: Synthesized) -> None:
    synth = synthesized.synth("periodic")
    for function in _functions(synth):
        for value in walk(synth.environment(function)):
            assert value != "", function
