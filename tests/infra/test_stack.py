"""Template assertions on the synthesized stacks: properties, never logical IDs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aws_cdk import Token
from aws_cdk.assertions import Match, Template

from infra.config import CONTROL_SCHEMA, READINGS_SCHEMA
from keydesign import Reading, ShardMap
from tests.infra.conftest import Synthesized

pytestmark = pytest.mark.infra

GLOBAL_TABLE = "AWS::DynamoDB::GlobalTable"


def _table(template: Template, name: str) -> dict[str, Any]:
    """The one GlobalTable whose TableName is ``name`` (its whole resource dict)."""
    found = template.find_resources(GLOBAL_TABLE, {"Properties": {"TableName": name}})
    assert len(found) == 1, f"expected one table named {name}, found {len(found)}"
    return next(iter(found.values()))


# -- the shipped defaults -------------------------------------------------------


def test_readings_table_has_the_key_design_schema_ttl_and_a_keys_only_stream(synthesized: Synthesized) -> None:
    # Given the default configuration
    template = synthesized.templates["single"]
    # Then the readings table is keyed pk/sk (strings), expires on ttl, and
    # streams keys only, on demand and encrypted with the AWS-managed key
    template.has_resource_properties(
        GLOBAL_TABLE,
        {
            "TableName": "timeseries-readings",
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": Match.array_equals(
                [{"AttributeName": "pk", "AttributeType": "S"}, {"AttributeName": "sk", "AttributeType": "S"}]
            ),
            "TimeToLiveSpecification": {"AttributeName": "ttl", "Enabled": True},
            "StreamSpecification": {"StreamViewType": "KEYS_ONLY"},
            "BillingMode": "PAY_PER_REQUEST",
            "SSESpecification": {"SSEEnabled": True, "SSEType": "KMS"},
            "WarmThroughput": Match.absent(),
        },
    )


def test_readings_table_is_protected_recoverable_and_watched_for_throttled_keys(synthesized: Synthesized) -> None:
    template = synthesized.templates["single"]
    template.has_resource(
        GLOBAL_TABLE,
        {
            "Properties": Match.object_like(
                {
                    "TableName": "timeseries-readings",
                    "Replicas": [
                        Match.object_like(
                            {
                                "DeletionProtectionEnabled": True,
                                "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                                "ContributorInsightsSpecification": {"Enabled": True, "Mode": "THROTTLED_KEYS"},
                            }
                        )
                    ],
                }
            ),
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
        },
    )


def test_stored_items_carry_exactly_the_attributes_the_table_declares(synthesized: Synthesized) -> None:
    # Given a block built by the key-design layer under the configured layout
    config = synthesized.configs["single"]
    layout = config.layout()
    reading = Reading.parse({"entity_id": "sensor-1", "timestamp": "2026-11-22T06:00:00Z", "measures": {"t": 21.5}})
    shard_map = ShardMap.initial(layout.bucket, config.shards)
    (block,) = layout.pack([(reading, 1)], shard_map, retention_ms=config.retention_ms)
    item = block.item()
    # When the table's schema is read back from the template
    table = _table(synthesized.templates["single"], block.key.table)["Properties"]
    # Then the table is keyed as the shared schema says
    assert [k["AttributeName"] for k in table["KeySchema"]] == [READINGS_SCHEMA.partition_key, READINGS_SCHEMA.sort_key]
    assert table["TimeToLiveSpecification"]["AttributeName"] == READINGS_SCHEMA.ttl_attribute
    # and every key attribute is in the item with the declared type, and so is the TTL
    for attribute in table["AttributeDefinitions"]:
        assert attribute["AttributeType"] == "S"
        assert isinstance(item[attribute["AttributeName"]], str)
    ttl_name = table["TimeToLiveSpecification"]["AttributeName"]
    assert isinstance(item[ttl_name], int)
    assert item[ttl_name] == reading.ts_ms // 1000 + 30 * 86_400


def test_control_table_is_on_demand_recoverable_unstreamed_and_expires_detector_items(
    synthesized: Synthesized,
) -> None:
    control = _table(synthesized.templates["default"], "timeseries-control")
    properties = control["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert [k["AttributeName"] for k in properties["KeySchema"]] == ["pk", "sk"]
    assert "StreamSpecification" not in properties
    # Counters, claims and cooldowns of the hot-key detector carry expires_at; the shard map never does.
    assert properties["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    assert properties["TimeToLiveSpecification"]["AttributeName"] == CONTROL_SCHEMA.ttl_attribute
    (replica,) = properties["Replicas"]
    assert replica["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert replica["DeletionProtectionEnabled"] is True
    assert control["DeletionPolicy"] == "Retain"


def test_the_hot_key_detector_writes_expires_at_in_epoch_seconds() -> None:
    # The attribute the table expires on is the one the detector's items carry.
    source = (Path(__file__).resolve().parents[2] / "functions" / "hotkeys" / "control_table.py").read_text()
    assert f'"{CONTROL_SCHEMA.ttl_attribute}"' in source


def test_ingest_stream_is_on_demand_and_encrypted_with_the_aws_managed_key(synthesized: Synthesized) -> None:
    template = synthesized.templates["default"]
    template.resource_count_is("AWS::Kinesis::Stream", 1)
    template.has_resource_properties(
        "AWS::Kinesis::Stream",
        {
            "StreamModeDetails": {"StreamMode": "ON_DEMAND"},
            "ShardCount": Match.absent(),
            "RetentionPeriodHours": 96,  # a weekend's failures can still be replayed (docs/decisions.md)
            "StreamEncryption": {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"},
        },
    )


def test_rejects_queue_is_encrypted_keeps_messages_two_weeks_and_refuses_plain_http(
    synthesized: Synthesized,
) -> None:
    synth = synthesized.synth("default")
    rejects = synth.resources[synth.logical_id(synth.stack.ingestion.rejects_queue)]
    assert rejects["Properties"]["SqsManagedSseEnabled"] is True
    assert rejects["Properties"]["MessageRetentionPeriod"] == 14 * 86_400
    synthesized.templates["default"].has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": synth.logical_id(synth.stack.ingestion.rejects_queue)}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "sqs:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_outputs_name_every_resource_an_operator_or_producer_needs(synthesized: Synthesized) -> None:
    outputs = synthesized.templates["single"].find_outputs("*")
    assert set(outputs) == {
        "ReadingsTableName",
        "TablePrefix",
        "ControlTableName",
        "IngestStreamName",
        "RejectsQueueUrl",
        # what `tsctl replay` reads and invokes
        "IngestFailureQueueUrl",
        "HotKeysFailureQueueUrl",
        "IngestFunctionName",
        "HotKeysFunctionName",
        "ApiUrl",
        "AlertsTopicArn",
        "DashboardName",
    }
    assert outputs["TablePrefix"]["Value"] == "timeseries-readings"
    assert "Export" not in str(outputs)


def test_stack_is_environment_agnostic(synthesized: Synthesized) -> None:
    stack = synthesized.stacks["default"]
    assert Token.is_unresolved(stack.account)
    assert Token.is_unresolved(stack.region)
    artifact = synthesized.app.synth().get_stack_artifact(stack.artifact_id)
    assert artifact.environment.account == "unknown-account"
    assert artifact.environment.region == "unknown-region"


def test_tables_are_global_table_resources_with_autoscaling_built_in(synthesized: Synthesized) -> None:
    # On-demand billing needs no Application Auto Scaling; the autoscaling of a
    # provisioned table lives inside the GlobalTable resource itself.
    template = synthesized.templates["default"]
    template.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 0)
    template.resource_count_is("AWS::DynamoDB::Table", 0)


# -- provisioned capacity, destroy on delete ------------------------------------


def test_provisioned_billing_autoscales_reads_and_writes_to_the_configured_bounds(synthesized: Synthesized) -> None:
    template = synthesized.templates["provisioned"]
    template.has_resource_properties(
        GLOBAL_TABLE,
        {
            "TableName": "timeseries-readings",
            "BillingMode": "PROVISIONED",
            "WriteProvisionedThroughputSettings": {
                "WriteCapacityAutoScalingSettings": {
                    "MinCapacity": 2000,
                    "MaxCapacity": 30000,
                    "TargetTrackingScalingPolicyConfiguration": {"TargetValue": 60},
                }
            },
            "Replicas": [
                Match.object_like(
                    {
                        "ReadProvisionedThroughputSettings": {
                            "ReadCapacityAutoScalingSettings": {
                                "MinCapacity": 50,
                                "MaxCapacity": 5000,
                                "TargetTrackingScalingPolicyConfiguration": {"TargetValue": 60},
                            }
                        },
                        "DeletionProtectionEnabled": False,
                        "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": False},
                        "ContributorInsightsSpecification": Match.absent(),
                    }
                )
            ],
            "WarmThroughput": {"WriteUnitsPerSecond": 20000},
        },
    )


def test_control_table_stays_on_demand_and_recoverable_when_readings_are_provisioned(
    synthesized: Synthesized,
) -> None:
    properties = _table(synthesized.templates["provisioned"], "timeseries-control")["Properties"]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["Replicas"][0]["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_destroy_removal_policy_applies_to_every_stateful_resource(synthesized: Synthesized) -> None:
    template = synthesized.templates["provisioned"]
    for resource_type in (
        GLOBAL_TABLE,
        "AWS::Kinesis::Stream",
        "AWS::SQS::Queue",
        "AWS::Logs::LogGroup",
        "AWS::SecretsManager::Secret",
        "AWS::KMS::Key",
    ):
        resources = template.find_resources(resource_type)
        assert resources, resource_type
        for resource in resources.values():
            assert resource["DeletionPolicy"] == "Delete", resource_type
            assert resource["UpdateReplacePolicy"] == "Delete", resource_type


def test_provisioned_stream_has_the_configured_shards_and_retention(synthesized: Synthesized) -> None:
    synthesized.templates["provisioned"].has_resource_properties(
        "AWS::Kinesis::Stream",
        {"StreamModeDetails": {"StreamMode": "PROVISIONED"}, "ShardCount": 8, "RetentionPeriodHours": 48},
    )


# -- one table per period --------------------------------------------------------


def test_table_period_leaves_the_readings_tables_to_the_rotator(synthesized: Synthesized) -> None:
    # Given table_period=day, the stack owns only the control table
    template = synthesized.templates["periodic"]
    template.resource_count_is(GLOBAL_TABLE, 1)
    _table(template, "timeseries-control")
    # and tells operators the prefix instead of a table name
    outputs = template.find_outputs("*")
    assert "ReadingsTableName" not in outputs
    assert outputs["TablePrefix"]["Value"] == "timeseries-readings"
    assert synthesized.stacks["periodic"].storage.readings_table is None
