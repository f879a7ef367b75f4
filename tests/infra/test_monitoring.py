"""Alerts and monitoring: the topic, an alarm on everything that can fail quietly, and the dashboard."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

import pytest

from infra.config import LambdaFunction
from keydesign.writetier import KEEP_MS
from rotator.lifecycle import Lifecycle
from rotator.settings import RotatorSettings
from rotator.specs import alarm_requests
from tests.infra.conftest import VARIANTS, Synthesized
from tests.infra.template_queries import Synth, render

pytestmark = pytest.mark.infra


def _alarms(synth: Synth) -> list[Mapping[str, Any]]:
    return [a["Properties"] for a in synth.of_type("AWS::CloudWatch::Alarm").values()]


def _alarms_on(synth: Synth, metric: str, dimension: str, value: Any) -> list[Mapping[str, Any]]:
    return [
        a
        for a in _alarms(synth)
        if a.get("MetricName") == metric and {"Name": dimension, "Value": value} in a.get("Dimensions", [])
    ]


def _custom_alarm(synth: Synth, metric: str, service: str) -> Mapping[str, Any]:
    (alarm,) = [
        a
        for a in _alarms(synth)
        if a.get("Namespace") == "TimeSeries"
        and a.get("MetricName") == metric
        and a.get("Dimensions") == [{"Name": "service", "Value": service}]
    ]
    return alarm


# -- the alerts topic ----------------------------------------------------------------------


ALARM_ARN = "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:"
CLOUDWATCH = {"Service": "cloudwatch.amazonaws.com"}


def _cloudwatch_grants(statements: list[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Per action CloudWatch is allowed, the alarm ARN patterns it is allowed for (each statement
    must hold it to this account's alarms by both aws:SourceAccount and aws:SourceArn)."""
    found: dict[str, set[str]] = {}
    for statement in statements:
        if statement.get("Principal") != CLOUDWATCH:
            continue
        assert statement["Effect"] == "Allow"
        condition = statement["Condition"]
        assert set(condition) == {"StringEquals", "ArnLike"}, condition
        assert condition["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            found.setdefault(action, set()).add(render(condition["ArnLike"]["aws:SourceArn"]))
    return found


def _alarm_patterns(synth: Synth) -> tuple[set[str], set[str]]:
    """The alarm ARN patterns CloudWatch may publish to the topic for, and use its key for."""
    (policy,) = synth.of_type("AWS::SNS::TopicPolicy").values()
    topic = _cloudwatch_grants(policy["Properties"]["PolicyDocument"]["Statement"])
    (key,) = synth.of_type("AWS::KMS::Key").values()
    key_grants = _cloudwatch_grants(key["Properties"]["KeyPolicy"]["Statement"])
    assert set(topic) == {"sns:Publish"}
    assert set(key_grants) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    assert key_grants["kms:Decrypt"] == key_grants["kms:GenerateDataKey*"]
    return topic["sns:Publish"], key_grants["kms:Decrypt"]


def test_the_alerts_topic_is_encrypted_with_a_rotated_key_and_refuses_plain_http(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    (topic,) = synth.of_type("AWS::SNS::Topic").values()
    assert topic["Properties"]["KmsMasterKeyId"] == synth.resolve(synth.stack.alerts.key.key_arn)
    (key,) = synth.of_type("AWS::KMS::Key").values()
    assert key["Properties"]["EnableKeyRotation"] is True
    (policy,) = synth.of_type("AWS::SNS::TopicPolicy").values()
    (deny,) = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_cloudwatch_may_publish_for_this_stacks_alarms_and_the_rotators_and_no_others(synth: Synth) -> None:
    # A topic policy replaces SNS's default one: without an Allow, every alarm action fails with
    # "... is not authorized to perform: SNS:Publish". The topic's key must let CloudWatch in alike.
    config = synth.config
    publish, key = _alarm_patterns(synth)
    expected = {f"{ALARM_ARN}{config.stack_name}-*"}
    if config.table_period is not None:
        expected.add(f"{ALARM_ARN}{config.table_prefix}-*")
    assert publish == key == expected
    # And every alarm the stack makes is one of those
    names = [a["AlarmName"] for a in _alarms(synth)]
    assert names and all(any(fnmatch.fnmatchcase(ALARM_ARN + n, p) for p in publish) for n in names)


def test_the_rotators_per_table_alarms_are_allowed_to_publish(synthesized: Synthesized) -> None:
    # Given the alarms the rotator puts on a period table (named by its own code, for its own settings)
    synth = synthesized.synth("default")
    environment = synth.concrete_environment(LambdaFunction.ROTATOR)
    settings = RotatorSettings.from_env(environment)
    table = Lifecycle.from_settings(settings).table(0)
    publish, _ = _alarm_patterns(synth)
    # Then each name falls under an allowed pattern (and a name outside the prefix would not)
    for name in (request["AlarmName"] for request in alarm_requests(settings, table)):
        assert any(fnmatch.fnmatchcase(ALARM_ARN + name, p) for p in publish), name
    assert not any(fnmatch.fnmatchcase(f"{ALARM_ARN}someone-else-write-throttles", p) for p in publish)


def test_the_alarm_email_is_subscribed_only_when_configured(synthesized: Synthesized) -> None:
    assert synthesized.synth("default").of_type("AWS::SNS::Subscription") == {}
    (subscription,) = synthesized.synth("provisioned").of_type("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "ops@example.com"


# -- alarms --------------------------------------------------------------------------------


def test_every_alarm_notifies_the_topic_on_alarm_and_on_ok(synth: Synth) -> None:
    topic = synth.resolve(synth.stack.alerts.topic.topic_arn)
    alarms = _alarms(synth)
    assert alarms
    for alarm in alarms:
        assert alarm["AlarmActions"] == [topic], alarm["AlarmName"]
        assert alarm["OKActions"] == [topic], alarm["AlarmName"]
        assert alarm["AlarmName"].startswith(f"{synth.config.stack_name}-")
        assert alarm["AlarmDescription"]


def test_every_queue_alarms_on_its_first_message(synth: Synth) -> None:
    queues = synth.of_type("AWS::SQS::Queue")
    assert queues
    for logical_id in queues:
        (alarm,) = _alarms_on(
            synth, "ApproximateNumberOfMessagesVisible", "QueueName", {"Fn::GetAtt": [logical_id, "QueueName"]}
        )
        assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
        assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == 1


def test_every_function_alarms_on_errors_and_throttles(synth: Synth) -> None:
    functions = synth.of_type("AWS::Lambda::Function")
    for logical_id in functions:
        for metric in ("Errors", "Throttles"):
            (alarm,) = _alarms_on(synth, metric, "FunctionName", {"Ref": logical_id})
            assert alarm["Namespace"] == "AWS/Lambda"
            assert alarm["Threshold"] == 1


def test_owned_tables_alarm_on_throttling_and_system_errors(synthesized: Synthesized) -> None:
    synth = synthesized.synth("single")
    tables = [synth.stack.storage.readings_table, synth.stack.storage.control_table]
    for table in tables:
        name = synth.resolve(table.table_name)
        for metric in ("WriteThrottleEvents", "ReadThrottleEvents"):
            (alarm,) = _alarms_on(synth, metric, "TableName", name)
            assert (alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"], alarm["Period"]) == (5, 3, 60)
        system_errors = [
            a
            for a in _alarms(synth)
            if "Metrics" in a
            and any(
                m.get("MetricStat", {}).get("Metric", {}).get("MetricName") == "SystemErrors"
                and {"Name": "TableName", "Value": name} in m["MetricStat"]["Metric"]["Dimensions"]
                for m in a["Metrics"]
            )
        ]
        assert len(system_errors) == 1, table


def test_the_mappings_alarm_on_their_own_iterator_age_and_the_stream_on_write_throttling(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("default")
    stream = synth.resolve(synth.stack.ingestion.stream.stream_name)
    # The ingest mapping's iterator age (Lambda's, by function), not the stream's GetRecords one, which a
    # replay reading records days old raises
    assert _alarms_on(synth, "GetRecords.IteratorAgeMilliseconds", "StreamName", stream) == []
    ingest = synth.function(LambdaFunction.INGEST)[0]
    (age,) = _alarms_on(synth, "IteratorAge", "FunctionName", {"Ref": ingest})
    assert (age["Namespace"], age["Statistic"]) == ("AWS/Lambda", "Maximum")
    assert age["Threshold"] == synth.config.iterator_age_alarm_s * 1000
    (throttles,) = _alarms_on(synth, "WriteProvisionedThroughputExceeded", "StreamName", stream)
    assert throttles["Threshold"] == 1
    hot_keys = synth.function(LambdaFunction.HOTKEYS)[0]
    (lag,) = _alarms_on(synth, "IteratorAge", "FunctionName", {"Ref": hot_keys})
    assert lag["Threshold"] == synth.config.iterator_age_alarm_s * 1000


def test_the_api_alarms_on_server_errors(synthesized: Synthesized) -> None:
    synth = synthesized.synth("default")
    alarms = [a for a in _alarms(synth) if a.get("MetricName") == "5XXError"]
    assert len(alarms) == 1
    assert alarms[0]["Namespace"] == "AWS/ApiGateway"


def test_rotation_alarms_on_an_unready_table_failing_runs_and_a_table_that_cannot_go(synthesized: Synthesized) -> None:
    synth = synthesized.synth("periodic")
    ready = _custom_alarm(synth, "PeriodsReady", "rotator")
    assert (ready["ComparisonOperator"], ready["Threshold"]) == ("LessThanThreshold", 2)
    assert ready["TreatMissingData"] == "breaching"  # no run for an hour is itself the problem
    errors = _custom_alarm(synth, "RotationErrors", "rotator")
    assert errors["EvaluationPeriods"] == errors["DatapointsToAlarm"] == 3
    assert errors["Period"] == synth.config.rotation_interval_minutes() * 60
    overdue = _custom_alarm(synth, "TablesOverdue", "rotator")
    assert (overdue["ComparisonOperator"], overdue["Threshold"]) == ("GreaterThanOrEqualToThreshold", 1)
    assert (overdue["Statistic"], overdue["Period"], overdue["EvaluationPeriods"]) == ("Maximum", 3600, 1)
    assert overdue["TreatMissingData"] == "notBreaching"  # no run at all is PeriodsReady's alarm
    assert [a for a in _alarms(synthesized.synth("single")) if a.get("MetricName") == "PeriodsReady"] == []
    assert [a for a in _alarms(synthesized.synth("single")) if a.get("MetricName") == "TablesOverdue"] == []


def test_ingest_alarms_on_the_first_reading_rejected_for_an_unexpected_error(synthesized: Synthesized) -> None:
    # A reading that raised while being validated is kept on the rejects queue, but it means a bug.
    alarm = _custom_alarm(synthesized.synth("default"), "ReadingsRejectedUnexpectedly", "ingest")
    assert (alarm["Threshold"], alarm["EvaluationPeriods"], alarm["Statistic"]) == (1, 1, "Sum")
    assert alarm["TreatMissingData"] == "notBreaching"


# -- dashboard -----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["default", "single", "periodic"])
def test_the_dashboard_shows_ingest_rate_rejects_hot_keys_iterator_age_and_throttles(
    synthesized: Synthesized, variant: str
) -> None:
    synth = synthesized.synth(variant)
    (dashboard,) = synth.of_type("AWS::CloudWatch::Dashboard").values()
    body = render(dashboard["Properties"]["DashboardBody"])
    for shown in (
        '"TimeSeries","ReadingsReceived","service","ingest"',
        '"ReadingsWritten"',
        '"ReadingsRejected"',
        '"TimeSeries","HotKeys","service","hotkeys"',
        '"HottestKeyWriteUnitsPerSecond"',
        '"IteratorAge"',
        '"WriteProvisionedThroughputExceeded"',
        '"ThrottledCalls"',
        '"ApproximateNumberOfMessagesVisible"',
    ):
        assert shown in body, shown
    assert ("WriteThrottleEvents" in body) is True
    assert ('"PeriodsReady"' in body) == (variant != "single")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_failure_queues_alarm_on_their_oldest_message_long_before_the_stream_forgets_it(
    synthesized: Synthesized, variant: str
) -> None:
    # A failure queue's message names records its stream keeps for a time only (tsctl replay reads them back),
    # and a replayed reading older than max_age by then is rejected: the shorter of the two counts
    synth = synthesized.synth(variant)
    stack = synth.stack
    config = synth.config
    kept_s = {
        # 72 h by default (max_age; the stream keeps 96 h): the alarm at 36 h
        stack.ingestion.failure_queue: min(config.kinesis_retention_hours * 3_600, config.max_age_ms // 1000),
        stack.hot_keys.failure_queue: 86_400,  # a DynamoDB stream keeps 24 h
    }
    (stream,) = synth.of_type("AWS::Kinesis::Stream").values()
    assert stream["Properties"]["RetentionPeriodHours"] == synth.config.kinesis_retention_hours
    for queue, kept in kept_s.items():
        (alarm,) = _alarms_on(synth, "ApproximateAgeOfOldestMessage", "QueueName", synth.resolve(queue.queue_name))
        assert alarm["Threshold"] == kept // 2 and alarm["Threshold"] < kept
    if variant == "default":
        (alarm,) = _alarms_on(
            synth, "ApproximateAgeOfOldestMessage", "QueueName", synth.resolve(stack.ingestion.failure_queue.queue_name)
        )
        assert alarm["Threshold"] == 36 * 3_600
        assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == 1


@pytest.mark.parametrize("variant", ["default", "single"])
def test_a_shard_map_fallback_in_any_function_that_reads_the_map_alarms(synthesized: Synthesized, variant: str) -> None:
    # A malformed stored map is worked around with the last good one: someone must know it
    synth = synthesized.synth(variant)
    (alarm,) = [a for a in _alarms(synth) if a["AlarmName"] == f"{synth.config.stack_name}-shard-map-fallbacks"]
    assert (alarm["Threshold"], alarm["EvaluationPeriods"], alarm["DatapointsToAlarm"]) == (1, 1, 1)
    assert alarm["TreatMissingData"] == "notBreaching"
    stats = [m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m]
    assert {(s["Metric"]["Namespace"], s["Metric"]["MetricName"], s["Stat"]) for s in stats} == {
        ("TimeSeries", "ShardMapFallbacks", "Sum")
    }
    services = {d["Value"] for s in stats for d in s["Metric"]["Dimensions"] if d["Name"] == "service"}
    with_rollups = synth.stack.rollups is not None
    with_compaction = synth.stack.compaction is not None
    assert services == {"ingest", "query", "hotkeys"} | ({"rollup"} if with_rollups else set()) | (
        {"compaction"} if with_compaction else set()
    )
    (summed,) = [m for m in alarm["Metrics"] if "Expression" in m]
    assert summed["Expression"] == f"SUM([{','.join(f'm{n}' for n in range(len(stats)))}])"


def test_a_rollup_interval_set_aside_alarms_at_once(synthesized: Synthesized) -> None:
    synth = synthesized.synth("single")
    (alarm,) = [a for a in _alarms(synth) if a.get("MetricName") == "RollupIntervalsSetAside"]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == 1
    assert alarm["AlarmName"] == f"{synth.config.stack_name}-rollup-set-aside"


def test_compaction_lag_alarms_hours_before_the_tier_expires_the_repack_lag_in_30_min_a_corrupt_item_at_once(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("single")
    (lag,) = [a for a in _alarms(synth) if a.get("MetricName") == "CompactionLagSeconds"]
    # 3 hours behind for two schedule periods: an hour is compacted about 70 minutes after it starts,
    # and its group items are kept 4 days
    assert (lag["Threshold"], lag["Statistic"], lag["Period"]) == (3 * 3600, "Maximum", 300)
    assert lag["EvaluationPeriods"] == lag["DatapointsToAlarm"] == 2
    assert lag["Threshold"] < KEEP_MS / 1000 / 10
    # The re-pack: 30 minutes behind for three periods (normal is 9 to 14 minutes); nothing is lost meanwhile
    (repack,) = [a for a in _alarms(synth) if a.get("MetricName") == "RepackLagSeconds"]
    assert (repack["Threshold"], repack["Statistic"], repack["Period"]) == (30 * 60, "Maximum", 300)
    assert repack["EvaluationPeriods"] == repack["DatapointsToAlarm"] == 3
    assert repack["AlarmName"] == f"{synth.config.stack_name}-repack-lag"
    (corrupt,) = [a for a in _alarms(synth) if a.get("MetricName") == "CompactionCorruptItems"]
    assert (corrupt["Threshold"], corrupt["EvaluationPeriods"]) == (1, 1)
    assert corrupt["AlarmName"] == f"{synth.config.stack_name}-compaction-corrupt-items"
    assert all(a["AlarmActions"] and a["OKActions"] for a in (lag, repack, corrupt))
