"""The IoT Core topic rule (cdk.json ``iot_topic_rule``): absent by default; with the key, a rule whose SQL
turns an MQTT message into the product's reading, into this stream, keyed by the entity's topic level, through
a role that may only put records on this stream."""

from __future__ import annotations

import json

import pytest

from infra.config import ConfigError, Context, IotTopicRule
from tests.infra.conftest import VARIANTS, Synthesized
from tests.infra.template_queries import grants, render

pytestmark = pytest.mark.infra

RULE = "AWS::IoT::TopicRule"


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v != "provisioned"])
def test_no_rule_and_no_role_for_it_without_the_key(synthesized: Synthesized, variant: str) -> None:
    synth = synthesized.synth(variant)
    assert synth.config.iot_topic_rule is None
    assert synth.of_type(RULE) == {}
    principals = [
        json.dumps(role["Properties"]["AssumeRolePolicyDocument"]) for role in synth.of_type("AWS::IAM::Role").values()
    ]
    assert not [p for p in principals if "iot.amazonaws.com" in p]
    assert "IotTopicRuleName" not in synth.template["Outputs"]
    assert synth.stack.ingestion.iot_failure_queue is None


def test_the_rule_puts_each_message_as_a_reading_keyed_by_the_entity_level(synthesized: Synthesized) -> None:
    synth = synthesized.synth("provisioned")
    (rule,) = synth.of_type(RULE).values()
    payload = rule["Properties"]["TopicRulePayload"]
    assert payload["Sql"] == "SELECT *, topic(3) AS entity_id FROM 'fleet/+/+/readings'"
    assert payload["AwsIotSqlVersion"] == "2016-03-23"
    assert payload["RuleDisabled"] is False
    (action,) = payload["Actions"]
    assert set(action) == {"Kinesis"}
    kinesis = action["Kinesis"]
    assert kinesis["PartitionKey"] == "${topic(3)}"
    assert kinesis["StreamName"] == synth.resolve(synth.stack.ingestion.stream.stream_name)
    rule_id = synth.stack.get_logical_id(synth.stack.ingestion.iot_rule)
    assert synth.template["Outputs"]["IotTopicRuleName"]["Value"] == {"Ref": synth.resolve(rule_id)}


def test_a_message_the_rule_cannot_put_goes_whole_to_an_alarmed_queue_through_a_role_that_may_only_send_there(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("provisioned")
    queue = synth.stack.ingestion.iot_failure_queue
    (rule,) = synth.of_type(RULE).values()
    error = rule["Properties"]["TopicRulePayload"]["ErrorAction"]
    assert set(error) == {"Sqs"}
    assert error["Sqs"]["QueueUrl"] == synth.resolve(queue.queue_url)
    assert error["Sqs"]["UseBase64"] is True
    role_id = error["Sqs"]["RoleArn"]["Fn::GetAtt"][0]
    assert grants(synth.statements_of_role(role_id)) == {
        ("sqs:SendMessage", render(synth.resolve(queue.queue_arn)), "{}")
    }
    trust = synth.resources[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "iot.amazonaws.com"}]
    queue_name = synth.resolve(queue.queue_name)
    alarms = [
        a["Properties"]
        for a in synth.of_type("AWS::CloudWatch::Alarm").values()
        if a["Properties"].get("Dimensions") == [{"Name": "QueueName", "Value": queue_name}]
    ]
    assert [a["MetricName"] for a in alarms] == ["ApproximateNumberOfMessagesVisible"]
    assert synth.template["Outputs"]["IotRuleFailureQueueUrl"]["Value"] == synth.resolve(queue.queue_url)


def test_the_rules_role_may_only_put_records_on_this_stream_and_only_iot_of_this_account_assumes_it(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("provisioned")
    (rule,) = synth.of_type(RULE).values()
    role_id = rule["Properties"]["TopicRulePayload"]["Actions"][0]["Kinesis"]["RoleArn"]["Fn::GetAtt"][0]
    stream_arn = render(synth.resolve(synth.stack.ingestion.stream.stream_arn))
    assert grants(synth.statements_of_role(role_id)) == {("kinesis:PutRecord", stream_arn, "{}")}
    assert grants(synth.statements_of_role(role_id), effect="Deny") == set()
    role = synth.resources[role_id]["Properties"]
    assert role.get("ManagedPolicyArns") is None and role.get("Policies") is None
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "iot.amazonaws.com"}
    assert trust["Action"] == "sts:AssumeRole"
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}


# -- the key ---------------------------------------------------------------------------


def test_the_key_takes_an_object_from_cdk_json_and_its_text_from_dash_c() -> None:
    value = {"topic_filter": "sensors/+/readings", "entity_level": 2}
    rule = IotTopicRule("sensors/+/readings", 2)
    assert Context.parse({"iot_topic_rule": value}).iot_topic_rule == rule
    assert Context.parse({"iot_topic_rule": json.dumps(value)}).iot_topic_rule == rule
    assert Context.parse({"iot_topic_rule": "null"}).iot_topic_rule is None
    assert Context.parse({}).iot_topic_rule is None
    assert rule.sql == "SELECT *, topic(2) AS entity_id FROM 'sensors/+/readings'"
    assert rule.partition_key == "${topic(2)}"
    assert rule.topic_for("pump-7") == "sensors/pump-7/readings"
    assert rule.entity_of("sensors/pump-7/readings") == "pump-7"
    assert IotTopicRule("$aws/things/+/shadow/#", 3).topic_for("pump-7") == "$aws/things/pump-7/shadow"


BAD_RULES = [
    ("sensors/+/readings", "must be a JSON object like"),
    ({"topic_filter": "sensors/+/readings"}, 'exactly "topic_filter" and "entity_level"'),
    ({"topic_filter": "sensors/+/readings", "entity_level": 2, "x": 1}, 'exactly "topic_filter"'),
    ({"topic_filter": "", "entity_level": 1}, "non-empty"),
    ({"topic_filter": "s/" + "x" * 256, "entity_level": 1}, "256 bytes"),
    ({"topic_filter": "a/b/c/d/e/f/g/h/+", "entity_level": 9}, "7 slashes"),
    ({"topic_filter": "sensors/+/x'y", "entity_level": 2}, "cannot quote"),
    ({"topic_filter": "sensors/+\n", "entity_level": 2}, "cannot quote"),
    ({"topic_filter": "sensors/dev+/readings", "entity_level": 2}, "'+' must be a whole level"),
    ({"topic_filter": "sensors/#/readings", "entity_level": 2}, "'#' the whole last one"),
    ({"topic_filter": "sensors/+/readings", "entity_level": 0}, "1 to 3"),
    ({"topic_filter": "sensors/+/readings", "entity_level": 4}, "1 to 3"),
    ({"topic_filter": "sensors/+/readings", "entity_level": "2"}, "1 to 3"),
    ({"topic_filter": "sensors/+/readings", "entity_level": True}, "1 to 3"),
    ({"topic_filter": "sensors/+/readings", "entity_level": 1}, "'sensors', not '+'"),
    ({"topic_filter": "sensors/+/#", "entity_level": 3}, "'#', not '+'"),
]


@pytest.mark.parametrize(("value", "says"), BAD_RULES, ids=[json.dumps(v) for v, _ in BAD_RULES])
def test_a_bad_rule_is_refused_naming_the_key_and_what_is_wrong(value: object, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Context.parse({"iot_topic_rule": value})
    assert caught.value.field == "iot_topic_rule"
    assert says in caught.value.reason
