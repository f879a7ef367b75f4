"""The stack's configuration: cdk.json's context, typed and validated, and each function's environment.

Two steps. The context (``cdk.json``'s ``"context"`` object, with any ``-c
key=value`` overrides the CDK CLI merged in) is validated by one pydantic model,
:class:`Context`. Each function's environment is then rendered by that
function's own settings model (``functions/<function>/settings.py``) from the
context fields of the same names (:meth:`Context.function_environment`), and
parsed back with the same model, which the function uses at cold start too: a
rule between settings is written once, in the model that reads them, and a
context it refuses fails here, naming the cdk.json key.

This module is pure Python (no ``aws_cdk`` import) because the local runtime,
the CLI and the tests build the same configuration without synthesizing
anything. ``docs/configuration.md`` documents every key; :class:`Context` is
the one place the keys and their defaults live (``cdk.json`` restates the
defaults, and a test keeps it to them).
"""

from __future__ import annotations

import ast
import difflib
import inspect
import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from adapters.settings import (
    LOCAL_ONLY,
    CommonSettings,
    DurationMs,
    EnvSettings,
    Flag,
    SettingsError,
    matching,
    refusal,
)
from compaction.settings import CompactionSettings
from hotkeys.settings import HotKeySettings
from ingest.settings import IngestSettings
from keydesign import ConfigError as KeyDesignConfigError
from keydesign import Layout, Workload, plan_capacity, shards_for, write_units
from keydesign.items import MAX_ITEM_BYTES
from keydesign.periods import format_duration, table_head
from keydesign.writetier import MAX_GROUPS
from query.settings import QuerySettings
from rollup.settings import RollupSettings
from rotator.settings import BillingMode, ContributorInsights, RotatorSettings

# The seed workload the default shard count is sized for: 50,000 writes/s of
# 500-byte items (1 WCU each), with every partition key kept at 50% of its
# 1,000 WCU/s limit so a burst or an uneven hash has room.
SEED_PEAK_WRITES_PER_S = 50_000
SEED_ITEM_BYTES = 500
SEED_KEY_UTILISATION = 0.5
# ... and the rest of `make plan`'s seed workload: 10,000 sensors, one of them at 2,000/s.
SEED_ENTITIES = 10_000
SEED_HOT_ENTITIES: Mapping[str, float] = {"sensor-alpha-001": 2_000}
#: The table period the planner's 10 GB rule gives the seed workload: 100 partitions
#: (96 shards + 4 sub-shards) each written at 25 MB/s / 100 = 250 kB/s fill 95% of 10 GiB
#: in 11.3 h, so a day's table would outgrow them and an hour's does not (docs/decisions.md).
SEED_TABLE_PERIOD = plan_capacity(
    Workload(
        peak_writes_per_s=SEED_PEAK_WRITES_PER_S,
        item_bytes=SEED_ITEM_BYTES,
        entities=SEED_ENTITIES,
        hot_entities=dict(SEED_HOT_ENTITIES),
        utilisation=SEED_KEY_UTILISATION,
    )
).table_period

#: The public Powertools for AWS Lambda (Python) v3 layer the functions run with:
#: published by AWS in account 017000801446 of every commercial region, one
#: layer per Python version and architecture. It carries Powertools and its
#: extras (pydantic v2, for the settings and the query API's validation; its
#: aws-xray-sdk too, which no function imports: docs/decisions.md, tracing).
POWERTOOLS_LAYER_ACCOUNT = "017000801446"
POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python314-arm64"
#: The layer's version number, not Powertools' own: check which Powertools
#: release a version carries with ``aws lambda get-layer-version-by-arn``.
POWERTOOLS_LAYER_VERSION = 38
#: The namespace of every function's EMF metrics (POWERTOOLS_METRICS_NAMESPACE).
METRICS_NAMESPACE = "TimeSeries"

# CloudWatch Logs accepts only these retention periods (PutRetentionPolicy).
# fmt: off
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
)
# fmt: on

_OWN_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_API_STAGE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_S3_PREFIX = re.compile(r"^[A-Za-z0-9/_.-]{0,768}$")
_NULLS = frozenset({"", "null", "none"})

# Lambda event source mapping limits for a Kinesis source (CreateEventSourceMapping).
ESM_MAX_BATCH = 10_000
ESM_MAX_WINDOW_S = 300
ESM_MAX_PARALLELIZATION = 10
ESM_MAX_RETRIES = 10_000
ESM_MIN_RECORD_AGE_S = 60
ESM_MAX_RECORD_AGE_S = 604_800
# A DynamoDB stream keeps records for 24 hours.
DYNAMODB_STREAM_RETENTION_S = 86_400
# Lambda's memory range and longest timeout; API Gateway's integration timeout.
LAMBDA_MIN_MEMORY_MB = 128
LAMBDA_MAX_MEMORY_MB = 10_240
LAMBDA_MAX_TIMEOUT_S = 900
LAMBDA_MAX_NAME = 64
API_INTEGRATION_TIMEOUT_S = 29
DAY_MS = 86_400_000


class ConfigError(KeyDesignConfigError):
    """A context value is not acceptable. ``field`` is the context key, ``reason`` says why."""


class LambdaFunction(StrEnum):
    """The stack's six functions. The value is the service name: the function's
    package under ``functions/``, its ``POWERTOOLS_SERVICE_NAME`` and the suffix
    of its physical name (``<stack_name>-<value>``)."""

    INGEST = "ingest"
    QUERY = "query"
    HOTKEYS = "hotkeys"
    ROTATOR = "rotator"
    ROLLUP = "rollup"
    COMPACTION = "compaction"

    @property
    def handler(self) -> str:
        """The Lambda handler, relative to the ``functions/`` code root."""
        return f"{self.value}.handler.handler"

    @property
    def settings(self) -> type[CommonSettings]:
        """The model of the function's environment (``functions/<function>/settings.py``)."""
        models: dict[LambdaFunction, type[CommonSettings]] = {
            LambdaFunction.INGEST: IngestSettings,
            LambdaFunction.QUERY: QuerySettings,
            LambdaFunction.HOTKEYS: HotKeySettings,
            LambdaFunction.ROTATOR: RotatorSettings,
            LambdaFunction.ROLLUP: RollupSettings,
            LambdaFunction.COMPACTION: CompactionSettings,
        }
        return models[self]


@dataclass(frozen=True, slots=True)
class FunctionSizing:
    """Memory, timeout and reserved concurrency (None: draws on the account's pool) of one Lambda function."""

    memory_mb: int
    timeout_s: int
    reserved_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class FunctionWiring:
    """Deploy-time values a function's environment needs: CDK tokens in the stack, moto URLs and ARNs
    locally. Each is a setting of the same name; a function gets the ones its model has."""

    rejects_queue_url: str | None = None
    cursor_secret_arn: str | None = None
    alert_topic_arn: str | None = None
    hotkeys_function_arn: str | None = None
    hotkeys_on_failure_arn: str | None = None
    #: The rotator, which ingest asks to build a missing period table (name or ARN; per-period tables).
    rotator_function: str | None = None


#: What :meth:`Context.function_environment` checks a configuration with: a value for every wiring.
_PLACEHOLDERS = FunctionWiring(**{name: f"<{name}>" for name in FunctionWiring.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class TableSchema:
    """Key schema and stream of a table, for the stack and the local runtime alike (string keys)."""

    partition_key: str
    sort_key: str
    ttl_attribute: str | None
    stream_view: Literal["KEYS_ONLY"] | None


#: The readings table(s). The hot-key detector needs only the keys (the entity
#: and the shard are in them, whatever the layout) and each record's SizeBytes,
#: which every stream view type carries: KEYS_ONLY keeps records small.
READINGS_SCHEMA = TableSchema(partition_key="pk", sort_key="sk", ttl_attribute="ttl", stream_view="KEYS_ONLY")
#: The control table: the shard map and its history (never expires: the item
#: carries no ``expires_at``), plus the hot-key detector's window counters,
#: claims and alert cooldowns, which do carry ``expires_at`` (epoch seconds) and
#: are removed by TTL. Never streamed.
CONTROL_SCHEMA = TableSchema(partition_key="pk", sort_key="sk", ttl_attribute="expires_at", stream_view=None)


# -- the context: one field per cdk.json key --------------------------------------------
# Values may be JSON-typed (cdk.json) or strings (``-c key=value``); each type below
# takes both. "null", "none" and "" mean "not set" for the optional keys.


def _null(value: object) -> object:
    return None if value is None or (isinstance(value, str) and value.strip().lower() in _NULLS) else value


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, got {value!r}")
    return value.strip()


def _whole(value: object) -> int:
    # Parsed here, not by pydantic, so a bound's error shows the number (20,000), not the text given ('20000').
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value)
    ):
        return int(value)
    raise ValueError(f"must be a whole number, got {value!r}")


def _not_flag(value: object) -> object:
    # pydantic takes true as 1; a flag where a number belongs is a mistake.
    if isinstance(value, bool):
        raise ValueError(f"must be a number, got {value!r}")
    return value


def _within(low_ms: int, high_ms: int) -> AfterValidator:
    def check(value_ms: int) -> int:
        if not low_ms <= value_ms <= high_ms:
            raise ValueError(
                f"{format_duration(value_ms)} is outside {format_duration(low_ms)} to {format_duration(high_ms)}"
            )
        return value_ms

    return AfterValidator(check)


def _upper(value: object) -> object:
    return value.strip().upper() if isinstance(value, str) else value


def _lower(value: object) -> object:
    return value.strip().lower() if isinstance(value, str) else value


def _in(allowed: tuple[int, ...], what: str) -> AfterValidator:
    def check(value: int) -> int:
        if value not in allowed:
            raise ValueError(f"{value} is not {what}; use one of {', '.join(map(str, allowed))}")
        return value

    return AfterValidator(check)


#: AWS IoT Core's limits on a topic filter (message broker quotas): 256 bytes of UTF-8, 7 slashes.
IOT_TOPIC_MAX_BYTES = 256
IOT_TOPIC_MAX_LEVELS = 8
#: The IoT SQL version whose SELECT takes ``*`` beside other expressions and whole numbers as Int.
IOT_SQL_VERSION = "2016-03-23"


@dataclass(frozen=True, slots=True)
class IotTopicRule:
    """An AWS IoT Core topic rule putting every MQTT message on ``topic_filter`` into the stream as a reading.

    The device publishes a reading without ``entity_id`` (``timestamp``, ``measures``, optional
    ``event_id`` and ``dimensions``: docs/ingest.md, "The IoT Core topic rule"); the topic's level
    ``entity_level`` (1-based, IoT SQL's ``topic(n)``) is the entity. The rule's SELECT output
    is then the product's own JSON reading, which ingest reads like any other, and its partition
    key is the entity, so an entity's readings stay on one shard, in order.
    """

    topic_filter: str
    entity_level: int

    @property
    def sql(self) -> str:
        """The rule's statement (IoT SQL 2016-03-23): the payload's fields, plus the entity from the topic."""
        # The filter is checked to hold no quote (``parse_iot_topic_rule``): it cannot end the literal.
        return f"SELECT *, topic({self.entity_level}) AS entity_id FROM '{self.topic_filter}'"  # noqa: S608

    @property
    def partition_key(self) -> str:
        """The Kinesis action's partition key: a substitution template naming the entity's topic level."""
        return f"${{topic({self.entity_level})}}"

    def entity_of(self, topic: str) -> str:
        """The entity a message published on ``topic`` is stored under (what ``topic(n)`` gives)."""
        levels = topic.split("/")
        if len(levels) < self.entity_level:
            raise ValueError(f"topic {topic!r} has no level {self.entity_level}")
        return levels[self.entity_level - 1]

    def topic_for(self, entity_id: str) -> str:
        """A topic a device of ``entity_id`` publishes to: the filter with the entity at its level, every
        other ``+`` as ``data`` and a trailing ``#`` left out."""
        levels = self.topic_filter.split("/")
        levels[self.entity_level - 1] = entity_id
        topic = [level if level != "+" else "data" for level in levels if level != "#"]
        return "/".join(topic)


def parse_iot_topic_rule(value: object) -> IotTopicRule | None:
    """``iot_topic_rule``'s value (an object, its JSON text, or null) as a rule; ValueError says what is wrong."""
    if isinstance(value, IotTopicRule) or _null(value) is None:
        return value if isinstance(value, IotTopicRule) else None
    if isinstance(value, str):
        text = value
        try:
            value = json.loads(text)
        except ValueError:
            raise ValueError(
                f'must be a JSON object like {{"topic_filter": "sensors/+/readings", "entity_level": 2}}, '
                f"got {text[:80]!r}"
            ) from None
    if not isinstance(value, Mapping) or set(value) != {"topic_filter", "entity_level"}:
        raise ValueError(
            f'must be an object of exactly "topic_filter" and "entity_level" (or null), got {str(value)[:80]!r}'
        )
    topic_filter, level = value["topic_filter"], value["entity_level"]
    if not isinstance(topic_filter, str) or not topic_filter:
        raise ValueError(f"topic_filter must be a non-empty string, got {topic_filter!r}")
    if len(topic_filter.encode("utf-8")) > IOT_TOPIC_MAX_BYTES:
        raise ValueError(f"topic_filter is longer than AWS IoT's {IOT_TOPIC_MAX_BYTES} bytes")
    bad = next((c for c in topic_filter if c == "'" or ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise ValueError(f"topic_filter {topic_filter!r} holds {bad!r}, which a rule's FROM clause cannot quote")
    levels = topic_filter.split("/")
    if len(levels) > IOT_TOPIC_MAX_LEVELS:
        raise ValueError(f"topic_filter {topic_filter!r} has {len(levels)} levels; AWS IoT takes 7 slashes at most")
    for index, part in enumerate(levels):
        if ("+" in part and part != "+") or ("#" in part and (part != "#" or index != len(levels) - 1)):
            raise ValueError(
                f"topic_filter {topic_filter!r} is not an MQTT topic filter: '+' must be a whole level and '#' "
                "the whole last one"
            )
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= len(levels):
        raise ValueError(f"entity_level must be a level of the topic filter, 1 to {len(levels)}, got {level!r}")
    if levels[level - 1] != "+":
        raise ValueError(
            f"entity_level {level} of {topic_filter!r} is {levels[level - 1]!r}, not '+': the entity's level must "
            "be a single-level wildcard, or every device would be one entity"
        )
    return IotTopicRule(topic_filter, level)


Text = Annotated[str, BeforeValidator(_text)]
OptionalText = Annotated[Text | None, BeforeValidator(_null)]
Whole = Annotated[int, BeforeValidator(_whole)]
OptionalWhole = Annotated[Whole | None, BeforeValidator(_null)]
#: A duration written as text (``90s``, ``15m``, ``2h``, ``30d``), held in milliseconds as the functions hold it.
Duration = Annotated[DurationMs, BeforeValidator(_text)]


def key(default: object, *, low: int | None = None, high: int | None = None, alias: str | None = None) -> Any:
    """A context key with its default (the one place it lives) and, for numbers, AWS's bounds. ``alias``:
    the key, when the field is named as the functions' settings name it."""
    return Field(default, ge=low, le=high, alias=alias, validate_default=True)


class Context(BaseModel):
    """Every key of cdk.json's ``"context"`` this stack reads, with its default and AWS's limit.

    A bad value fails here, naming the key, instead of half-way through a deploy. The rules
    between keys the stack alone uses are the model validator; the functions' settings models
    hold the rest (see the module docstring). :data:`DEFAULTS` is derived from it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stack_name: Annotated[
        Text, matching(_STACK_NAME, "a stack name: a letter, then up to 127 letters, digits or '-'")
    ] = key("TimeSeriesIngest")
    layout_kind: Text = key("hybrid", alias="layout")
    shards: Whole = key(shards_for(SEED_PEAK_WRITES_PER_S * write_units(SEED_ITEM_BYTES), SEED_KEY_UTILISATION))
    bucket: Text = key("1h")
    table_prefix: Text = key("timeseries-readings")
    control_table: Annotated[Text, matching(_TABLE_NAME, "a table name: 3-255 letters, digits, '_', '.' or '-'")] = key(
        "timeseries-control"
    )
    table_period: OptionalText = key(SEED_TABLE_PERIOD)
    retention_ms: Duration = key("30d", alias="retention")
    billing_mode: Annotated[BillingMode, BeforeValidator(_upper)] = key("PAY_PER_REQUEST")
    read_capacity_min: Whole = key(100, low=1)
    read_capacity_max: Whole = key(12_000, low=1)
    write_capacity_min: Whole = key(1_000, low=1)
    write_capacity_max: Whole = key(40_000, low=1)
    # Application Auto Scaling's target-tracking range for DynamoDB.
    autoscaling_target_percent: Whole = key(70, low=20, high=90)
    warm_writes_per_s: OptionalWhole = key(None, low=1)
    deletion_protection: Flag = key(True)
    removal_policy: Annotated[Literal["retain", "destroy"], BeforeValidator(_lower)] = key("retain")
    point_in_time_recovery: Flag = key(True)
    contributor_insights: Annotated[ContributorInsights, BeforeValidator(_lower)] = key("throttled_keys")
    kinesis_mode: Annotated[Literal["on_demand", "provisioned"], BeforeValidator(_lower)] = key("on_demand")
    kinesis_shards: Whole = key(50, low=1)
    # Kinesis keeps records from 24 hours to 365 days. 96: a batch that failed on a Friday evening can
    # still be replayed on the Tuesday morning after a long weekend (docs/decisions.md weighs the cost).
    kinesis_retention_hours: Whole = key(96, low=24, high=8_760)
    ingest_batch_size: Whole = key(1_000, low=1, high=ESM_MAX_BATCH)
    ingest_batching_window_s: Whole = key(10, low=0, high=ESM_MAX_WINDOW_S)
    ingest_parallelization_factor: Whole = key(1, low=1, high=ESM_MAX_PARALLELIZATION)
    ingest_max_retries: Whole = key(5, low=-1, high=ESM_MAX_RETRIES)
    ingest_max_record_age_s: Whole = key(3_600, low=-1, high=ESM_MAX_RECORD_AGE_S)
    ingest_memory_mb: Whole = key(1_024, low=LAMBDA_MIN_MEMORY_MB, high=LAMBDA_MAX_MEMORY_MB)
    # Ingest keeps 2 s back for its response and retries writes until then: a short timeout leaves no
    # room to retry.
    ingest_timeout_s: Whole = key(120, low=10, high=LAMBDA_MAX_TIMEOUT_S)
    # A reservation is also a cap: unset, ingest draws on the account's unreserved pool.
    ingest_reserved_concurrency: OptionalWhole = key(None, low=1, high=10_000)
    max_future_ms: Annotated[Duration, _within(1_000, DAY_MS)] = key("5m", alias="max_future")
    # A long weekend's outage of a store-and-forward device; at most retention (a rule of the functions'
    # settings; the default is cut to a shorter retention).
    max_age: Duration = key("3d")
    rollups: OptionalText = key("1m,1h,1d")
    # The agents' formats ingest reads beside its JSON, and how their metrics become readings (ingest.settings,
    # which validates them; docs/ingest.md, "Agents").
    ingest_formats: Text = key("influx,telegraf_json,otlp_proto,otlp_json")
    entity_tags: Text = key("host,service.instance.id")
    influx_precision: Text = key("ns")
    telegraf_json_timestamp_units: Text = key("1s")
    # The write tier's groups (docs/writetier.md): `tsctl plan` prints the count for a workload. At least 1:
    # the tier is not turned off, since readers find a sparse entity's compacted history only through it.
    write_tier_groups: Whole = key(32, low=1, high=MAX_GROUPS)
    # How often the compaction function runs (EventBridge Scheduler); it works only once an hour has settled,
    # so a shorter period only shortens the lag after each hour (a local run may shorten it).
    compaction_every_minutes: Whole = key(5, low=1, high=60)
    split_threshold_wcu: Whole = key(500, alias="hot_split_threshold_wcu")
    shard_map_cache_ttl_s: Whole = key(60, low=1, high=3_600)
    item_bytes: Whole = key(SEED_ITEM_BYTES, low=1, high=MAX_ITEM_BYTES)
    hotkeys_batch_size: Whole = key(1_000, low=1, high=ESM_MAX_BATCH)
    hotkeys_batching_window_s: Whole = key(1, low=0, high=ESM_MAX_WINDOW_S)
    hotkeys_parallelization_factor: Whole = key(1, low=1, high=ESM_MAX_PARALLELIZATION)
    # No -1 (forever) for either: the point of both caps is that one poison
    # batch cannot hold a stream shard; and the stream keeps records 24 h.
    hotkeys_max_retries: Whole = key(5, low=0, high=ESM_MAX_RETRIES)
    hotkeys_max_record_age_s: Whole = key(3_600, low=ESM_MIN_RECORD_AGE_S, high=DYNAMODB_STREAM_RETENTION_S)
    hotkeys_reserved_concurrency: OptionalWhole = key(None, low=1, high=10_000)
    auto_apply_entity: Flag = key(True, alias="hot_auto_apply_entity")
    auto_apply_global: Flag = key(False, alias="hot_auto_apply_global")
    grace_ms: Duration = key("2h", alias="grace")
    prebuild_periods: Whole = key(2, low=1, high=366)
    dial_down_delay_ms: Duration = key("15m", alias="dial_down_delay")
    peak_writes_per_s: OptionalWhole = key(None, low=1, high=10_000_000)
    period_write_capacity: OptionalWhole = key(None, low=1, high=1_000_000)
    period_read_capacity: Whole = key(100, low=1, high=1_000_000)
    export_bucket: Annotated[OptionalText, matching(_BUCKET, "an S3 bucket name")] = key(None)
    export_prefix: Annotated[
        str,
        BeforeValidator(lambda v: str(v or "").strip().strip("/")),
        matching(_S3_PREFIX, "a key prefix: up to 768 letters, digits, '/', '_', '.' or '-'"),
    ] = key("dynamodb-exports")
    max_deletes_per_run: Whole = key(2, low=0, high=100)
    # Storage as a percentage of requests at which a closed table moves to Standard-IA (break-even: 42).
    infrequent_access_storage_percent: OptionalWhole = key(50, low=0, high=100_000)
    dry_run: Flag = key(False, alias="rotation_dry_run")
    alarm_email: Annotated[OptionalText, matching(_EMAIL, "an email address")] = key(None)
    iterator_age_alarm_s: Whole = key(60, low=1, high=ESM_MAX_RECORD_AGE_S)
    api_stage: Annotated[Text, matching(_API_STAGE, "a stage name: 1-128 letters, digits, '_' or '-'")] = key("v1")
    api_throttle_rate: Annotated[float, BeforeValidator(_not_flag), Field(gt=0, allow_inf_nan=False)] = key(100)
    api_throttle_burst: Whole = key(200, low=1)
    api_cloudwatch_role: Flag = key(True)
    # Secrets Manager rotates at most every 4 hours and at least every 1,000 days (in days here).
    api_cursor_key_rotation_days: Whole = key(30, low=1, high=1_000)
    query_memory_mb: Whole = key(1_024, low=LAMBDA_MIN_MEMORY_MB, high=LAMBDA_MAX_MEMORY_MB)
    # Under API Gateway's 29 s integration timeout, so a slow request ends
    # in the function (logged, traced) rather than as a bare 504.
    query_timeout_s: Whole = key(28, low=3, high=API_INTEGRATION_TIMEOUT_S - 1)
    # Caps how much of the account's concurrency readers can hold, so a
    # burst of slow reads cannot starve ingest of instances.
    query_reserved_concurrency: OptionalWhole = key(50, low=1, high=10_000)
    log_retention_days: Annotated[Whole, _in(LOG_RETENTION_DAYS, "a CloudWatch Logs retention")] = key(30, low=1)
    powertools_layer_version: Whole = key(POWERTOOLS_LAYER_VERSION, low=1)
    # Off by default: a deployment whose devices speak MQTT to AWS IoT Core turns it on.
    iot_topic_rule: Annotated[IotTopicRule | None, PlainValidator(parse_iot_topic_rule)] = key(None)

    _layout: Layout = PrivateAttr()

    @model_validator(mode="after")
    def _rules(self) -> Self:
        """Every function this configuration deploys must take its environment; then the rules between keys
        only the stack reads."""
        for function in self.functions():
            self.function_environment(function, _PLACEHOLDERS)
        self._layout = Layout.from_settings(
            kind=self.layout_kind, bucket=self.bucket, table_prefix=self.table_prefix, table_period=self.table_period
        )
        # Per-period tables are named "<table_prefix>-<label>": a control table in
        # that namespace could be taken for a readings table and dropped with it.
        prefix = self._layout.table_prefix
        _rule(
            self.control_table != prefix and not self.control_table.startswith(table_head(prefix)),
            "control_table",
            f"{self.control_table!r} must not equal table_prefix or start with '{table_head(prefix)}'",
        )
        _rule(
            not (self.removal_policy == "destroy" and self.deletion_protection),
            "removal_policy",
            "'destroy' cannot delete a table with deletion_protection true; set deletion_protection to false too",
        )
        for kind in ("read", "write"):
            low, high = getattr(self, f"{kind}_capacity_min"), getattr(self, f"{kind}_capacity_max")
            _rule(low <= high, f"{kind}_capacity_min", f"{low:,} is above {kind}_capacity_max {high:,}")
        age, hours = self.ingest_max_record_age_s, self.kinesis_retention_hours
        _rule(
            age == -1 or age >= ESM_MIN_RECORD_AGE_S,
            "ingest_max_record_age_s",
            f"must be -1 (no limit) or {ESM_MIN_RECORD_AGE_S:,} to {ESM_MAX_RECORD_AGE_S:,} seconds, got {age:,}",
        )
        _rule(
            age <= hours * 3600,
            "ingest_max_record_age_s",
            f"{age:,} s is longer than the stream keeps records (kinesis_retention_hours {hours} = {hours * 3600:,} s)",
        )
        longest = max(len(f.value) for f in self.functions())
        name = self.stack_name
        _rule(
            len(name) + 1 + longest <= LAMBDA_MAX_NAME,
            "stack_name",
            f"{name!r} is {len(name)} characters: the functions are named '<stack_name>-<function>' and Lambda "
            f"takes {LAMBDA_MAX_NAME} at most, so it may hold {LAMBDA_MAX_NAME - 1 - longest}",
        )
        stream_shards = self.kinesis_shards * self.ingest_parallelization_factor
        reserved = self.ingest_reserved_concurrency
        _rule(
            not (self.kinesis_mode == "provisioned" and reserved is not None and reserved < stream_shards),
            "ingest_reserved_concurrency",
            f"{reserved} is below kinesis_shards x ingest_parallelization_factor ({stream_shards}), the batches "
            "the stream hands ingest at once: the stream would fall behind",
        )
        _rule(
            self.table_period is None or self.dial_down_delay_ms >= self.ingest_timeout_s * 1_000,
            "dial_down_delay",
            f"{format_duration(self.dial_down_delay_ms)} is shorter than ingest_timeout_s ({self.ingest_timeout_s} s):"
            " a write ingest accepted just before grace ended could still be in flight when the table is dialled down",
        )
        return self

    # -- views for the rest of the code ------------------------------------

    def functions(self) -> list[LambdaFunction]:
        """The functions this configuration deploys: the rotator only with a table period, the rollup
        function only with rollups."""
        return [
            f
            for f in LambdaFunction
            if (f is not LambdaFunction.ROTATOR or self.table_period)
            and (f is not LambdaFunction.ROLLUP or self.rollups)
        ]

    def function_environment(
        self, function: LambdaFunction, wiring: FunctionWiring = FunctionWiring()
    ) -> dict[str, str]:
        """The whole environment of one function, rendered by its settings model from the context fields
        and ``wiring`` values its fields are named after (plus the few derived below), and parsed back
        with the same model: the one place the stack (and the local runtime) decides what each function
        is told. Values the function would default to anyway are still written, so a change of the
        configuration reaches it. Raises :class:`ConfigError` naming the key the function refuses (or
        the variable, for a missing wiring)."""
        model = function.settings
        derived = {
            "service_name": function.value,
            "metrics_namespace": METRICS_NAMESPACE,
            "shard_map_cache_ttl_ms": self.shard_map_cache_ttl_s * 1000,
            "max_age": self.max_age_ms,
            # A minute of marks (an hour of the write tier) is applied (compacted) once no ingest invocation
            # stamped in it (started in it) can still be writing.
            "settle_ms": (self.ingest_timeout_s + 60) * 1000,
        }
        values = {**{n: getattr(self, n) for n in type(self).model_fields}, **asdict(wiring), **derived}
        env = model.render(**{name: value for name, value in values.items() if name in model.model_fields})
        try:
            model.from_env(env)
        except SettingsError as exc:
            raise ConfigError(_key_of(model, exc.variable), exc.reason) from None
        return env

    def layout(self) -> Layout:
        """The key-design layout these settings describe."""
        return self._layout

    @property
    def readings_table_name(self) -> str | None:
        """The fixed readings table, or None when a table per period is rotated instead."""
        return self._layout.table_for(0) if self.table_period is None else None

    @property
    def max_age_ms(self) -> int:
        """``max_age``; its default (3 days) is cut to ``retention`` when that is shorter (a value set is refused)."""
        return self.max_age if "max_age" in self.model_fields_set else min(self.max_age, self.retention_ms)

    def sizing(self, function: LambdaFunction) -> FunctionSizing:
        """Memory, timeout and reserved concurrency of ``function``: ingest's and query's are configurable;
        the hot-key function's memory and timeout are fixed (one stream batch of keys is light work); the
        rotator's run is bounded inside its timeout (a few minutes, for hundreds of hourly tables to
        describe) and runs one at a time (two would only race each other over the same tables); a rollup
        run applies closed minutes until 5 s before its timeout, and the next (a minute later) goes on; a
        compaction run compacts settled hours until 5 s before its timeout, which ends before the next run
        is due (every ``compaction_every_minutes``, 4 minutes at most), one at a time."""
        return {
            LambdaFunction.INGEST: FunctionSizing(
                self.ingest_memory_mb, self.ingest_timeout_s, self.ingest_reserved_concurrency
            ),
            LambdaFunction.QUERY: FunctionSizing(
                self.query_memory_mb, self.query_timeout_s, self.query_reserved_concurrency
            ),
            LambdaFunction.HOTKEYS: FunctionSizing(512, 60, self.hotkeys_reserved_concurrency),
            LambdaFunction.ROTATOR: FunctionSizing(512, 300, 1),
            LambdaFunction.ROLLUP: FunctionSizing(1_024, 120, 1),
            LambdaFunction.COMPACTION: FunctionSizing(1_024, min(240, 60 * self.compaction_every_minutes - 20), 1),
        }[function]

    def rotation_interval_minutes(self) -> int:
        """How often the rotator runs: every 15 minutes for hourly tables, hourly otherwise.

        Either leaves many runs between a table being due (built ahead, dialled
        down after GRACE + DIAL_DOWN_DELAY, dropped after RETENTION) and the
        moment it matters, and a failed run is redone by the next one.
        """
        return 15 if self.table_period == "hour" else 60

    @classmethod
    def parse(cls, context: Mapping[str, object]) -> Context:
        """The context's own keys, validated; a misspelt one is refused with the nearest valid name.

        Values may be JSON-typed (from ``cdk.json``) or strings (``-c key=value``
        always passes strings); missing keys take :data:`DEFAULTS`. Our keys are
        snake_case identifiers. CDK's keys (feature flags such as "@aws-cdk/core:...",
        "aws:cdk:...", lookup caches "availability-zones:...", "acknowledged-issue-numbers")
        never are, so anything snake_case that is not a known key is a typo and is
        refused rather than silently ignored.
        """
        for name in context:
            if name not in DEFAULTS and _OWN_KEY.match(name):
                close = difflib.get_close_matches(name, list(DEFAULTS), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else "; see docs/configuration.md for the keys"
                raise ConfigError(name, f"is not a configuration key{hint}")
        try:
            return cls.model_validate({k: v for k, v in context.items() if k in DEFAULTS})
        except ValidationError as exc:
            raise refusal(exc, ConfigError) from None


#: Settings rendered from a key of another name (the rest are named as their key's field).
_RENDERED_FROM = {"shard_map_cache_ttl_ms": "shard_map_cache_ttl_s", "settle_ms": "ingest_timeout_s"}


def _key_of(model: type[EnvSettings], variable: str) -> str:
    """The cdk.json key a function's variable is rendered from (the variable itself for a wiring)."""
    name = next((n for n, field in model.model_fields.items() if field.alias == variable), "")
    field = Context.model_fields.get(_RENDERED_FROM.get(name, name))
    return (field.alias or _RENDERED_FROM.get(name, name)) if field is not None else variable


def _rule(holds: bool, key: str, reason: str) -> None:
    if not holds:
        raise ConfigError(key, reason)


#: Every context key this stack reads, with its default (``None``: not set).
DEFAULTS: Mapping[str, object] = {field.alias or name: field.default for name, field in Context.model_fields.items()}


def attribute_docs(model: type[EnvSettings]) -> dict[str, str]:
    """The docstring under each field of ``model`` and its bases (the settings models do not ask pydantic
    for them: reading every class's source at import costs each function's cold start tens of ms)."""
    docs: dict[str, str] = {}
    for cls in reversed([c for c in model.__mro__ if issubclass(c, EnvSettings)]):
        body = ast.parse(inspect.getsource(cls)).body[0]
        for stmt, after in itertools.pairwise(body.body if isinstance(body, ast.ClassDef) else []):
            target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
            if isinstance(target, ast.Name) and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                docs[target.id] = inspect.cleandoc(str(after.value.value))
    return docs


def environment_reference() -> str:
    """The variables every function reads, with defaults, bounds and meaning, from the settings
    models: docs/configuration.md holds this text (a test keeps the two equal)."""
    sections = [("Every function", CommonSettings, set(CommonSettings.model_fields))]
    sections += [(f"`{f.value}` adds", f.settings, set(f.settings.__annotations__)) for f in LambdaFunction]
    lines: list[str] = []
    for title, model, names in sections:
        docs = attribute_docs(model)
        lines += [f"{title}:", "", "| Variable | Default | Range | Meaning |", "|---|---|---|---|"]
        for name in (n for n in model.model_fields if n in names):
            field = model.model_fields[name]
            default = field.default
            shown = "(required)" if field.is_required() else "unset" if default is None else f"`{default}`"
            if isinstance(default, bool):
                shown = f"`{json.dumps(default)}`"
            bound = {a: getattr(m, a) for m in field.metadata for a in ("ge", "gt", "le", "lt") if hasattr(m, a)}
            low = f"{bound['ge']:,}" if "ge" in bound else f"> {bound['gt']}" if "gt" in bound else ""
            high = f"{bound['le']:,}" if "le" in bound else f"< {bound['lt']}" if "lt" in bound else ""
            span = f"{low}..{high}" if low and high else low or high
            meaning = " ".join(docs.get(name, "").split())
            local = "Local only: " if field.alias in LOCAL_ONLY else ""
            lines.append(f"| `{field.alias}` | {shown} | {span} | {local}{meaning} |")
        lines.append("")
    return "\n".join(lines)


def load_cdk_json_context(path: Path) -> dict[str, object]:
    """The ``"context"`` object of a ``cdk.json`` file (empty when it has none)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError("cdk.json", f"cannot read {path}: {exc}") from None
    context = document.get("context", {}) if isinstance(document, dict) else None
    if not isinstance(context, dict):
        raise ConfigError("cdk.json", f'{path}: "context" must be a JSON object')
    return context
