"""What local mode provisions is what the stack deploys: compared with the synthesized template.

Each configuration variant is synthesized (offline, like ``tests/infra``) and
provisioned on the embedded moto server from the same :class:`Context`;
key schemas, attribute types, TTL attribute, stream view type, billing mode,
table names, the stream's mode, shards and retention, the rejects queue's
retention and, once the stack has them, the event source mappings' settings
must agree. A change on either side that the other does not follow fails here.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import boto3
import pytest

from infra.config import Context, load_cdk_json_context
from local_runtime.event_source_mapping import MappingConfig
from local_runtime.moto_server import EmbeddedMoto
from local_runtime.resources import QUEUE_RETENTION_S, ResourceNames, Resources, provision

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[3]
REGION = "eu-west-1"
NOW_MS = int(time.time() * 1000)

VARIANTS: Mapping[str, Mapping[str, object]] = {
    # One readings table (the shipped default is hourly tables: "periodic" covers that shape)
    "single": {"table_period": "null"},
    "provisioned": {
        "stack_name": "LocalProvisioned",
        "table_period": "null",
        "billing_mode": "PROVISIONED",
        "deletion_protection": "false",
        "removal_policy": "destroy",
        "kinesis_mode": "provisioned",
        "kinesis_shards": "3",
        "kinesis_retention_hours": "48",
        "ingest_batch_size": "250",
        "ingest_max_retries": "2",
    },
    "periodic": {"stack_name": "LocalPeriodic", "table_period": "day", "bucket": "15m"},
}


@dataclass(frozen=True)
class Variant:
    config: Context
    template: Mapping[str, Any]

    def resources_of(self, kind: str) -> dict[str, Mapping[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == kind}

    def source_type(self, mapping: Mapping[str, Any]) -> str | None:
        """The resource type an event source mapping reads (its ``Fn::GetAtt`` target)."""
        arn = mapping["Properties"].get("EventSourceArn")
        if isinstance(arn, Mapping) and "Fn::GetAtt" in arn:
            return str(self.template["Resources"][arn["Fn::GetAtt"][0]]["Type"])
        return None

    def mappings_of(self, source_type: str) -> list[Mapping[str, Any]]:
        """The properties of the event source mappings that read a resource of ``source_type``."""
        return [
            m["Properties"]
            for m in self.resources_of("AWS::Lambda::EventSourceMapping").values()
            if self.source_type(m) == source_type
        ]


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Variant]:
    os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
    import aws_cdk as cdk  # noqa: PLC0415 - after the environment above
    from aws_cdk.assertions import Template  # noqa: PLC0415

    from infra.stack import TimeSeriesStack  # noqa: PLC0415

    context = load_cdk_json_context(REPO_ROOT / "cdk.json")
    app = cdk.App(context=context, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    built: dict[str, tuple[Context, Any]] = {}
    for name, overrides in VARIANTS.items():
        config = Context.parse({**app.node.get_all_context(), **overrides})
        built[name] = (config, TimeSeriesStack(app, config.stack_name, config=config))
    app.synth()
    return {name: Variant(config, Template.from_stack(stack).to_json()) for name, (config, stack) in built.items()}


@pytest.fixture(scope="module")
def moto() -> Iterator[EmbeddedMoto]:
    with EmbeddedMoto() as server:
        yield server


def client(service: str, endpoint: str) -> Any:
    return boto3.client(
        service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local"
    )


def clients(endpoint: str) -> dict[str, Any]:
    return {service: client(service, endpoint) for service in ("dynamodb", "kinesis", "sqs", "sns")}


def reset(moto: EmbeddedMoto) -> None:
    """Forget every resource moto holds (all services, all regions)."""
    request = urllib.request.Request(f"{moto.endpoint_url}/moto-api/reset", data=b"", method="POST")  # noqa: S310
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - a loopback URL, checked
        response.read()


def provisioned(moto: EmbeddedMoto, config: Context) -> tuple[Resources, dict[str, Any]]:
    reset(moto)
    aws = clients(moto.endpoint_url)
    names = ResourceNames.for_config(config, NOW_MS)
    return provision(config, names, **aws), aws


class Provisioned(NamedTuple):
    """A variant's template beside what local mode provisioned from its configuration."""

    variant: Variant
    resources: Resources
    aws: dict[str, Any]


@pytest.fixture(params=list(VARIANTS))
def each_variant(request: pytest.FixtureRequest, variants: dict[str, Variant], moto: EmbeddedMoto) -> Provisioned:
    """Each variant in turn, provisioned afresh."""
    v = variants[request.param]
    return Provisioned(v, *provisioned(moto, v.config))


def local_table(dynamodb: Any, name: str) -> dict[str, Any]:
    table = dynamodb.describe_table(TableName=name)["Table"]
    ttl = dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"]
    return {
        "KeySchema": table["KeySchema"],
        "AttributeDefinitions": sorted(table["AttributeDefinitions"], key=lambda a: a["AttributeName"]),
        "BillingMode": table.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED"),
        "StreamViewType": (table.get("StreamSpecification") or {}).get("StreamViewType"),
        "TtlAttribute": ttl.get("AttributeName") if ttl.get("TimeToLiveStatus") == "ENABLED" else None,
    }


def template_table(properties: Mapping[str, Any]) -> dict[str, Any]:
    ttl = properties.get("TimeToLiveSpecification") or {}
    return {
        "KeySchema": properties["KeySchema"],
        "AttributeDefinitions": sorted(properties["AttributeDefinitions"], key=lambda a: a["AttributeName"]),
        "BillingMode": properties.get("BillingMode", "PROVISIONED"),
        "StreamViewType": (properties.get("StreamSpecification") or {}).get("StreamViewType"),
        "TtlAttribute": ttl.get("AttributeName") if ttl.get("Enabled") else None,
    }


def test_every_table_of_the_stack_is_provisioned_with_the_same_definition(each_variant: Provisioned) -> None:
    # Given the synthesized template and what local mode provisions from the same configuration
    v, resources, aws = each_variant
    stack_tables = {
        p["Properties"]["TableName"]: p["Properties"] for p in v.resources_of("AWS::DynamoDB::GlobalTable").values()
    }
    local_names = {*resources.names.readings_tables, resources.names.control_table}
    # Then every table the stack names exists locally, defined the same way
    assert stack_tables, "the template has no tables"
    assert set(stack_tables) <= local_names
    for name, properties in stack_tables.items():
        assert local_table(aws["dynamodb"], name) == template_table(properties), name
    # And the only tables the stack does not create are the rotator's per-period tables
    assert local_names - set(stack_tables) == (set(resources.names.readings_tables) if v.config.table_period else set())


def test_per_period_tables_take_the_fixed_tables_definition(variants: dict[str, Variant], moto: EmbeddedMoto) -> None:
    periodic = variants["periodic"]
    resources, aws = provisioned(moto, periodic.config)
    layout = periodic.config.layout()
    expected_names = {layout.table_for(NOW_MS), layout.table_for(layout.table_period.next_start(NOW_MS))}  # type: ignore[union-attr]
    assert set(resources.names.readings_tables) == expected_names
    default_tables = variants["single"].resources_of("AWS::DynamoDB::GlobalTable").values()
    fixed = next(
        p["Properties"]
        for p in default_tables
        if p["Properties"]["TableName"] == variants["single"].config.readings_table_name
    )
    for name in expected_names:
        assert local_table(aws["dynamodb"], name) == template_table(fixed)
        assert name in resources.table_stream_arns


def test_the_stream_has_the_stacks_mode_shards_and_retention(each_variant: Provisioned) -> None:
    v, resources, aws = each_variant
    (stream,) = v.resources_of("AWS::Kinesis::Stream").values()
    properties = stream["Properties"]
    summary = aws["kinesis"].describe_stream_summary(StreamName=resources.names.stream)["StreamDescriptionSummary"]
    assert summary["StreamModeDetails"]["StreamMode"] == properties["StreamModeDetails"]["StreamMode"]
    assert summary["RetentionPeriodHours"] == properties["RetentionPeriodHours"]
    if "ShardCount" in properties:
        assert summary["OpenShardCount"] == properties["ShardCount"]
    if "Name" in properties:  # the stack lets CloudFormation name it today
        assert resources.names.stream == properties["Name"]


def test_the_rejects_queue_keeps_messages_as_long_as_the_stacks(each_variant: Provisioned) -> None:
    v, resources, aws = each_variant
    (rejects,) = [q for logical, q in v.resources_of("AWS::SQS::Queue").items() if "Rejects" in logical]
    attributes = aws["sqs"].get_queue_attributes(QueueUrl=resources.rejects_queue_url, AttributeNames=["All"])
    assert int(attributes["Attributes"]["MessageRetentionPeriod"]) == rejects["Properties"]["MessageRetentionPeriod"]
    assert rejects["Properties"]["MessageRetentionPeriod"] == QUEUE_RETENTION_S


def assert_emulated_as(properties: Mapping[str, Any], emulated: MappingConfig) -> None:
    """The stack's event source mapping (its ``properties``) has the settings local mode emulates it with."""
    assert properties["BatchSize"] == emulated.batch_size
    assert properties.get("MaximumBatchingWindowInSeconds", 0) == emulated.batching_window_s
    assert properties["MaximumRetryAttempts"] == emulated.max_retries
    assert properties["MaximumRecordAgeInSeconds"] == emulated.max_record_age_s
    assert properties["BisectBatchOnFunctionError"] is emulated.bisect_on_error
    assert "ReportBatchItemFailures" in properties.get("FunctionResponseTypes", [])
    assert properties["StartingPosition"] == str(emulated.starting_position)
    assert properties["DestinationConfig"]["OnFailure"]["Destination"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_emulated_event_source_mapping_has_the_stacks_settings(variant: str, variants: dict[str, Variant]) -> None:
    v = variants[variant]
    mappings = v.mappings_of("AWS::Kinesis::Stream")
    assert len(mappings) == 1, "the stack reads the ingest stream with exactly one mapping"
    assert_emulated_as(mappings[0], MappingConfig.for_stream(v.config, "ingest"))


@pytest.mark.parametrize("variant", ["single", "provisioned"])
def test_the_emulated_hot_key_mapping_has_the_stacks_settings(variant: str, variants: dict[str, Variant]) -> None:
    # Given the stack's mapping of the readings table's stream (one table: the stack makes it itself)
    v = variants[variant]
    (properties,) = v.mappings_of("AWS::DynamoDB::GlobalTable")
    # Then local mode's hot-key mapping has the same settings
    assert_emulated_as(properties, MappingConfig.for_stream(v.config, "hotkeys"))


def test_the_hot_key_and_cursor_resources_exist_locally(variants: dict[str, Variant], moto: EmbeddedMoto) -> None:
    # The stack has a failure queue for the hot-key mappings and a cursor-signing secret; so does local mode
    v = variants["single"]
    assert [k for k in v.resources_of("AWS::SQS::Queue") if "HotKeys" in k]
    assert v.resources_of("AWS::SecretsManager::Secret")
    reset(moto)
    aws = clients(moto.endpoint_url)
    secrets = client("secretsmanager", moto.endpoint_url)
    names = ResourceNames.for_config(v.config, NOW_MS)
    resources = provision(v.config, names, **aws, secretsmanager=secrets, cursor_secret="k" * 40)
    assert resources.hotkeys_failures_queue_arn.endswith(f":{names.hotkeys_failures_queue}")
    assert resources.cursor_secret_arn is not None
    assert secrets.get_secret_value(SecretId=resources.cursor_secret_arn)["SecretString"] == "k" * 40
