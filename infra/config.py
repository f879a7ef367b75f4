"""The stack's configuration: typed, frozen and validated, built from CDK context.

The context is ``cdk.json``'s ``"context"`` object, with any ``-c key=value``
overrides the CDK CLI merged in. This module is pure Python (no ``aws_cdk``
import) because the local runtime, the CLI and the tests build the same
configuration without synthesizing anything.

Every value is checked against the limit AWS itself enforces, so a bad value
fails here, naming the context key, instead of half-way through a deploy.
``docs/configuration.md`` documents every key; ``DEFAULTS`` is the one place
the defaults live (``cdk.json`` restates them, and a test keeps the two equal).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal, cast

from keydesign import ConfigError as KeyDesignConfigError
from keydesign import Layout, ShardMap, Workload, parse_duration, plan_capacity, shards_for, write_units
from keydesign.items import MAX_ITEM_BYTES
from keydesign.shardmap import MAX_GLOBAL_SHARDS

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
#: extras (aws-xray-sdk for Tracer, pydantic v2 for the query API's validation).
POWERTOOLS_LAYER_ACCOUNT = "017000801446"
POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python314-arm64"
#: The layer's version number, not Powertools' own: check which Powertools
#: release a version carries with ``aws lambda get-layer-version-by-arn``.
POWERTOOLS_LAYER_VERSION = 38
#: The namespace of every function's EMF metrics (POWERTOOLS_METRICS_NAMESPACE).
METRICS_NAMESPACE = "TimeSeries"

#: Every context key this stack reads, with its default. ``None`` means "not set".
DEFAULTS: Mapping[str, object] = {
    "stack_name": "TimeSeriesIngest",
    "layout": "hybrid",
    "shards": shards_for(SEED_PEAK_WRITES_PER_S * write_units(SEED_ITEM_BYTES), SEED_KEY_UTILISATION),
    "bucket": "1h",
    "table_prefix": "timeseries-readings",
    "control_table": "timeseries-control",
    "table_period": SEED_TABLE_PERIOD,
    "retention": "30d",
    "billing_mode": "PAY_PER_REQUEST",
    "read_capacity_min": 100,
    "read_capacity_max": 12_000,
    "write_capacity_min": 1_000,
    "write_capacity_max": 40_000,
    "autoscaling_target_percent": 70,
    "warm_writes_per_s": None,
    "deletion_protection": True,
    "removal_policy": "retain",
    "point_in_time_recovery": True,
    "contributor_insights": "throttled_keys",
    "kinesis_mode": "on_demand",
    "kinesis_shards": 50,
    "kinesis_retention_hours": 24,
    "ingest_batch_size": 1_000,
    "ingest_batching_window_s": 1,
    "ingest_parallelization_factor": 1,
    "ingest_max_retries": 5,
    "ingest_max_record_age_s": 3_600,
    "ingest_memory_mb": 1_024,
    "ingest_timeout_s": 120,
    "max_future": "5m",
    "hot_split_threshold_wcu": 500,
    "shard_map_cache_ttl_s": 60,
    "item_bytes": SEED_ITEM_BYTES,
    "hotkeys_batch_size": 1_000,
    "hotkeys_batching_window_s": 1,
    "hotkeys_parallelization_factor": 1,
    "hotkeys_max_retries": 5,
    "hotkeys_max_record_age_s": 3_600,
    "hot_auto_apply_entity": True,
    "hot_auto_apply_global": False,
    "grace": "2h",
    "prebuild_periods": 2,
    "dial_down_delay": "15m",
    "peak_writes_per_s": None,
    "period_write_capacity": None,
    "period_read_capacity": 100,
    "export_bucket": None,
    "export_prefix": "dynamodb-exports",
    "max_deletes_per_run": 2,
    "rotation_dry_run": False,
    "alarm_email": None,
    "iterator_age_alarm_s": 60,
    "api_stage": "v1",
    "api_throttle_rate": 100,
    "api_throttle_burst": 200,
    "api_cloudwatch_role": True,
    "query_memory_mb": 1_024,
    "query_timeout_s": 28,
    "query_reserved_concurrency": 50,
    "log_retention_days": 30,
    "powertools_layer_version": POWERTOOLS_LAYER_VERSION,
}

# CloudWatch Logs accepts only these retention periods (PutRetentionPolicy).
# fmt: off
LOG_RETENTION_DAYS = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
)
# fmt: on

# Our own keys are snake_case identifiers. CDK's keys (feature flags such as
# "@aws-cdk/core:...", "aws:cdk:...", lookup caches "availability-zones:...",
# "acknowledged-issue-numbers") never are, so anything snake_case that is not
# a known key is a typo and is refused rather than silently ignored.
_OWN_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")
_TABLE_NAME = re.compile(r"^[A-Za-z0-9_.-]{3,255}$")
_API_STAGE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_S3_PREFIX = re.compile(r"^[A-Za-z0-9/_.-]*$")
_NULLS = frozenset({"", "null", "none"})

# Lambda event source mapping limits for a Kinesis source (CreateEventSourceMapping).
ESM_MAX_BATCH = 10_000
ESM_MAX_WINDOW_S = 300
ESM_MAX_PARALLELIZATION = 10
ESM_MAX_RETRIES = 10_000
ESM_MIN_RECORD_AGE_S = 60
ESM_MAX_RECORD_AGE_S = 604_800
# One partition key takes 1,000 WCU/s; a split decided at or past that is too late.
PARTITION_WCU = 1_000
# A DynamoDB stream keeps records for 24 hours.
DYNAMODB_STREAM_RETENTION_S = 86_400
# Lambda's memory range and longest timeout; API Gateway's integration timeout.
LAMBDA_MIN_MEMORY_MB = 128
LAMBDA_MAX_MEMORY_MB = 10_240
LAMBDA_MAX_TIMEOUT_S = 900
LAMBDA_MAX_NAME = 64
API_INTEGRATION_TIMEOUT_S = 29
# The hot-key detector's own default for counters a batch adds per window.
HOT_COUNTERS_PER_WINDOW = 25
DAY_MS = 86_400_000


class ConfigError(KeyDesignConfigError):
    """A context value is not acceptable. ``field`` is the context key, ``reason`` says why."""


class LambdaEnv(StrEnum):
    """Names of the environment variables the Lambdas read: the one place the stack spells them.

    They match what ``functions/adapters/settings.py`` and each function's
    ``settings.py`` parse at cold start (durations such as ``RETENTION`` and
    ``SHARD_MAP_CACHE_TTL`` in ``parse_duration`` form, e.g. ``30d``, ``60s``);
    ``tests/infra/test_config.py`` feeds :meth:`AppConfig.function_environment`
    through those parsers.
    """

    LAYOUT = "LAYOUT"
    SHARDS = "SHARDS"
    BUCKET = "BUCKET"
    TABLE_PREFIX = "TABLE_PREFIX"
    TABLE_PERIOD = "TABLE_PERIOD"
    RETENTION = "RETENTION"
    READINGS_TABLE = "READINGS_TABLE"
    CONTROL_TABLE = "CONTROL_TABLE"
    REJECTS_QUEUE_URL = "REJECTS_QUEUE_URL"
    HOT_SPLIT_THRESHOLD_WCU = "HOT_SPLIT_THRESHOLD_WCU"
    SHARD_MAP_CACHE_TTL = "SHARD_MAP_CACHE_TTL"
    WARM_WRITES_PER_S = "WARM_WRITES_PER_S"
    GRACE = "GRACE"
    PREBUILD_PERIODS = "PREBUILD_PERIODS"
    # Powertools, every function
    POWERTOOLS_SERVICE_NAME = "POWERTOOLS_SERVICE_NAME"
    POWERTOOLS_METRICS_NAMESPACE = "POWERTOOLS_METRICS_NAMESPACE"
    # ingest (and hotkeys, which must cover it)
    MAX_FUTURE = "MAX_FUTURE"
    # query
    CURSOR_SECRET_ARN = "CURSOR_SECRET_ARN"  # noqa: S105 - the variable's name, not a secret
    # hotkeys
    HOT_ALERT_TOPIC_ARN = "HOT_ALERT_TOPIC_ARN"
    HOT_AUTO_APPLY_ENTITY = "HOT_AUTO_APPLY_ENTITY"
    HOT_AUTO_APPLY_GLOBAL = "HOT_AUTO_APPLY_GLOBAL"
    HOT_ASSUMED_ITEM_BYTES = "HOT_ASSUMED_ITEM_BYTES"
    HOT_COUNTERS_PER_WINDOW = "HOT_COUNTERS_PER_WINDOW"
    # rotator
    DIAL_DOWN_DELAY = "DIAL_DOWN_DELAY"
    BILLING_MODE = "BILLING_MODE"
    WRITE_CAPACITY = "WRITE_CAPACITY"
    READ_CAPACITY = "READ_CAPACITY"
    PEAK_WRITES_PER_S = "PEAK_WRITES_PER_S"
    ITEM_BYTES = "ITEM_BYTES"
    TARGET_UTILISATION_PERCENT = "TARGET_UTILISATION_PERCENT"
    POINT_IN_TIME_RECOVERY = "POINT_IN_TIME_RECOVERY"
    DELETION_PROTECTION = "DELETION_PROTECTION"
    EXPORT_BUCKET = "EXPORT_BUCKET"
    EXPORT_PREFIX = "EXPORT_PREFIX"
    HOTKEYS_FUNCTION_ARN = "HOTKEYS_FUNCTION_ARN"
    HOTKEYS_BATCH_SIZE = "HOTKEYS_BATCH_SIZE"
    HOTKEYS_BATCHING_WINDOW_S = "HOTKEYS_BATCHING_WINDOW_S"
    HOTKEYS_PARALLELIZATION = "HOTKEYS_PARALLELIZATION"
    HOTKEYS_MAX_RETRIES = "HOTKEYS_MAX_RETRIES"
    HOTKEYS_MAX_RECORD_AGE_S = "HOTKEYS_MAX_RECORD_AGE_S"
    HOTKEYS_ON_FAILURE_ARN = "HOTKEYS_ON_FAILURE_ARN"
    ALARMS = "ALARMS"
    ALARM_TOPIC_ARN = "ALARM_TOPIC_ARN"
    MAX_DELETES_PER_RUN = "MAX_DELETES_PER_RUN"
    DRY_RUN = "DRY_RUN"


class LambdaFunction(StrEnum):
    """The stack's four functions. The value is the service name: the function's
    package under ``functions/``, its ``POWERTOOLS_SERVICE_NAME`` and the suffix
    of its physical name (``<stack_name>-<value>``)."""

    INGEST = "ingest"
    QUERY = "query"
    HOTKEYS = "hotkeys"
    ROTATOR = "rotator"

    @property
    def handler(self) -> str:
        """The Lambda handler, relative to the ``functions/`` code root."""
        return f"{self.value}.handler.handler"


@dataclass(frozen=True, slots=True)
class FunctionWiring:
    """Deploy-time values a function's environment needs: CDK tokens in the stack,
    moto URLs and ARNs locally. Each function needs only some of them."""

    rejects_queue_url: str | None = None
    cursor_secret_arn: str | None = None
    alert_topic_arn: str | None = None
    hotkeys_function_arn: str | None = None
    hotkeys_failure_destination_arn: str | None = None


@dataclass(frozen=True, slots=True)
class TableSchema:
    """Key schema and stream of a table, for the stack and the local runtime alike.

    Attribute names are the ones ``keydesign.items.build_item`` writes; both
    key attributes are strings.
    """

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

BillingMode = Literal["PAY_PER_REQUEST", "PROVISIONED"]
RemovalPolicy = Literal["retain", "destroy"]
ContributorInsights = Literal["throttled_keys", "accessed_and_throttled_keys", "off"]
KinesisMode = Literal["on_demand", "provisioned"]


@dataclass(frozen=True, slots=True)
class ProvisionedCapacity:
    """Autoscaling bounds of a provisioned table (used only when billing is PROVISIONED)."""

    read_min: int
    read_max: int
    write_min: int
    write_max: int
    target_percent: int


@dataclass(frozen=True, slots=True)
class StorageConfig:
    """What the Storage construct needs: table names and table settings."""

    table_prefix: str
    #: The fixed readings table, or None when a table per period is rotated instead.
    readings_table_name: str | None
    control_table_name: str
    billing_mode: BillingMode
    capacity: ProvisionedCapacity
    warm_writes_per_s: int | None
    deletion_protection: bool
    removal_policy: RemovalPolicy
    point_in_time_recovery: bool
    contributor_insights: ContributorInsights


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """The Kinesis data stream producers publish to."""

    mode: KinesisMode
    shards: int
    retention_hours: int


@dataclass(frozen=True, slots=True)
class IngestConfig:
    """The ingest Lambda's Kinesis event source mapping."""

    batch_size: int
    batching_window_s: int
    parallelization_factor: int
    max_retries: int
    max_record_age_s: int


@dataclass(frozen=True, slots=True)
class ApiConfig:
    """The query REST API's stage and its default method throttling."""

    stage: str
    throttle_rate: float
    throttle_burst: int
    #: Create API Gateway's account-wide CloudWatch Logs role (one per account and region).
    cloudwatch_role: bool


@dataclass(frozen=True, slots=True)
class FunctionSizing:
    """Memory, timeout and reserved concurrency (None: draws on the account's pool) of one Lambda function."""

    memory_mb: int
    timeout_s: int
    reserved_concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class LambdaConfig:
    """What every function shares (runtime layer, log retention) and the sizes that are configurable."""

    powertools_layer_version: int
    log_retention_days: int
    ingest: FunctionSizing
    query: FunctionSizing
    #: Fixed: one stream batch of keys is light work, and the rotator's run is
    #: bounded by DEADLINE_MARGIN_MS inside its timeout (a few minutes, for
    #: hundreds of hourly tables to describe).
    hotkeys: FunctionSizing = FunctionSizing(memory_mb=512, timeout_s=60)
    rotator: FunctionSizing = FunctionSizing(memory_mb=512, timeout_s=300)

    def sizing(self, function: LambdaFunction) -> FunctionSizing:
        return {
            LambdaFunction.INGEST: self.ingest,
            LambdaFunction.QUERY: self.query,
            LambdaFunction.HOTKEYS: self.hotkeys,
            LambdaFunction.ROTATOR: self.rotator,
        }[function]


@dataclass(frozen=True, slots=True)
class HotKeysConfig:
    """The hot-key function: its DynamoDB stream mapping(s) and what it may change on its own."""

    batch_size: int
    batching_window_s: int
    parallelization_factor: int
    max_retries: int
    max_record_age_s: int
    auto_apply_entity: bool
    auto_apply_global: bool


@dataclass(frozen=True, slots=True)
class RotationConfig:
    """Per-period tables: the rotator's settings, and the two ingest shares with it."""

    grace: str
    prebuild_periods: int
    dial_down_delay: str
    peak_writes_per_s: int | None
    period_write_capacity: int | None
    period_read_capacity: int
    export_bucket: str | None
    export_prefix: str
    max_deletes_per_run: int
    dry_run: bool


@dataclass(frozen=True, slots=True)
class AppConfig:
    """The whole, validated configuration. Build it with :meth:`from_context`."""

    stack_name: str
    layout_kind: str
    shards: int
    bucket: str
    table_period: str | None
    retention: str
    retention_ms: int
    storage: StorageConfig
    stream: StreamConfig
    ingest: IngestConfig
    api: ApiConfig
    hot_split_threshold_wcu: int
    shard_map_cache_ttl_s: int
    alarm_email: str | None
    log_retention_days: int
    max_future: str
    item_bytes: int
    iterator_age_alarm_s: int
    lambdas: LambdaConfig
    hot_keys: HotKeysConfig
    rotation: RotationConfig

    @classmethod
    def from_context(cls, context: Mapping[str, object]) -> AppConfig:
        """Validate CDK context into a config; missing keys take :data:`DEFAULTS`.

        Values may be JSON-typed (from ``cdk.json``) or strings (``-c key=value``
        always passes strings). Raises :class:`ConfigError` naming the first bad key.
        """
        _refuse_unknown_keys(context)
        raw = {**DEFAULTS, **{k: v for k, v in context.items() if k in DEFAULTS}}
        layout = _layout(raw)
        retention, retention_ms = _retention(raw, layout)
        stream = _stream(raw)
        storage = _storage(raw, layout)
        lambdas = _lambdas(raw)
        return cls(
            stack_name=_stack_name(raw),
            layout_kind=layout.kind,
            shards=_integer(raw, "shards", 1, MAX_GLOBAL_SHARDS),
            bucket=layout.bucket.spec,
            table_period=layout.table_period.name if layout.table_period else None,
            retention=retention,
            retention_ms=retention_ms,
            storage=storage,
            stream=stream,
            ingest=_ingest(raw, stream),
            api=ApiConfig(
                stage=_matching(raw, "api_stage", _API_STAGE, "must be 1-128 letters, digits, '_' or '-'"),
                throttle_rate=_number(raw, "api_throttle_rate"),
                throttle_burst=_integer(raw, "api_throttle_burst", 1, None),
                cloudwatch_role=_boolean(raw, "api_cloudwatch_role"),
            ),
            hot_split_threshold_wcu=_integer(raw, "hot_split_threshold_wcu", 1, PARTITION_WCU - 1),
            shard_map_cache_ttl_s=_integer(raw, "shard_map_cache_ttl_s", 1, 3_600),
            alarm_email=_alarm_email(raw),
            log_retention_days=lambdas.log_retention_days,
            max_future=_max_future(raw, layout),
            item_bytes=_integer(raw, "item_bytes", 1, MAX_ITEM_BYTES),
            iterator_age_alarm_s=_integer(raw, "iterator_age_alarm_s", 1, ESM_MAX_RECORD_AGE_S),
            lambdas=lambdas,
            hot_keys=_hot_keys(raw),
            rotation=_rotation(raw, layout, retention_ms, storage, lambdas),
        )

    # -- views for the rest of the code ------------------------------------

    def layout(self) -> Layout:
        """The key-design layout these settings describe."""
        return Layout.from_settings(
            kind=self.layout_kind,
            bucket=self.bucket,
            table_prefix=self.storage.table_prefix,
            table_period=self.table_period,
        )

    def initial_shard_map(self) -> ShardMap:
        """The shard map a fresh deployment starts with: global N = ``shards`` since the epoch."""
        return ShardMap.initial(self.layout().bucket, self.shards)

    def to_lambda_environment(self, *, rejects_queue_url: str | None = None) -> dict[str, str]:
        """Environment variables every Lambda reads to rebuild the layout and find its tables.

        The part every function shares; :meth:`function_environment` adds each
        function's own. ``rejects_queue_url`` is a deploy-time value (a CDK token
        in the stack, a moto URL locally), so the caller passes it. Variables
        without a value are left out rather than set to an empty string:
        ``TABLE_PERIOD``, ``GRACE`` and ``PREBUILD_PERIODS`` are present only with
        per-period tables, ``READINGS_TABLE`` only with the fixed table.
        """
        env: dict[str, str] = {
            LambdaEnv.LAYOUT: self.layout_kind,
            LambdaEnv.SHARDS: str(self.shards),
            LambdaEnv.BUCKET: self.bucket,
            LambdaEnv.TABLE_PREFIX: self.storage.table_prefix,
            LambdaEnv.RETENTION: self.retention,
            LambdaEnv.CONTROL_TABLE: self.storage.control_table_name,
            LambdaEnv.HOT_SPLIT_THRESHOLD_WCU: str(self.hot_split_threshold_wcu),
            LambdaEnv.SHARD_MAP_CACHE_TTL: f"{self.shard_map_cache_ttl_s}s",
        }
        if self.table_period is not None:
            env[LambdaEnv.TABLE_PERIOD] = self.table_period
            # Ingest and the rotator must agree on both: ingest refuses a reading
            # whose table the rotator has retired or not built yet.
            env[LambdaEnv.GRACE] = self.rotation.grace
            env[LambdaEnv.PREBUILD_PERIODS] = str(self.rotation.prebuild_periods)
        if self.storage.readings_table_name is not None:
            env[LambdaEnv.READINGS_TABLE] = self.storage.readings_table_name
        if self.storage.warm_writes_per_s is not None:
            env[LambdaEnv.WARM_WRITES_PER_S] = str(self.storage.warm_writes_per_s)
        if rejects_queue_url is not None:
            env[LambdaEnv.REJECTS_QUEUE_URL] = rejects_queue_url
        return {str(k): v for k, v in env.items()}

    def function_environment(self, function: LambdaFunction, wiring: FunctionWiring) -> dict[str, str]:
        """The whole environment of one function: the one place the stack (and the
        local runtime) spells what each function is told.

        The shared variables of :meth:`to_lambda_environment`, Powertools' two,
        and the function's own. Values the function would default to anyway are
        still written when the configuration owns them (so a change here reaches
        the function), and left out when it does not (the function's default is
        the documented one). Raises ``ValueError`` when ``wiring`` lacks a value
        the function requires, or for the rotator without a table period.
        """
        env: dict[str, str] = self.to_lambda_environment(
            rejects_queue_url=_needed(wiring.rejects_queue_url, "rejects_queue_url", function)
            if function is LambdaFunction.INGEST
            else None
        )
        env[LambdaEnv.POWERTOOLS_SERVICE_NAME] = function.value
        env[LambdaEnv.POWERTOOLS_METRICS_NAMESPACE] = METRICS_NAMESPACE
        if function is LambdaFunction.INGEST:
            env[LambdaEnv.MAX_FUTURE] = self.max_future
        elif function is LambdaFunction.QUERY:
            env[LambdaEnv.CURSOR_SECRET_ARN] = _needed(wiring.cursor_secret_arn, "cursor_secret_arn", function)
        elif function is LambdaFunction.HOTKEYS:
            env.update(self._hot_keys_environment(wiring))
        else:
            env.update(self._rotator_environment(wiring))
        return {str(k): v for k, v in env.items()}

    def _hot_keys_environment(self, wiring: FunctionWiring) -> dict[str, str]:
        hot = self.hot_keys
        return {
            LambdaEnv.HOT_ALERT_TOPIC_ARN: _needed(wiring.alert_topic_arn, "alert_topic_arn", LambdaFunction.HOTKEYS),
            LambdaEnv.HOT_AUTO_APPLY_ENTITY: _flag(hot.auto_apply_entity),
            LambdaEnv.HOT_AUTO_APPLY_GLOBAL: _flag(hot.auto_apply_global),
            # The stream is KEYS_ONLY: its SizeBytes is the keys' size, so the
            # stored item's size is what a write costs (at least).
            LambdaEnv.HOT_ASSUMED_ITEM_BYTES: str(self.item_bytes),
            # A key over the threshold carries at least threshold/1,000 of its
            # stream shard's writes, so it is among a batch's top 1,000/threshold:
            # the detector refuses fewer counters than that.
            LambdaEnv.HOT_COUNTERS_PER_WINDOW: str(
                max(HOT_COUNTERS_PER_WINDOW, math.ceil(PARTITION_WCU / self.hot_split_threshold_wcu))
            ),
            # The change margin's default is MAX_FUTURE + 60 s: the detector reads ingest's value.
            LambdaEnv.MAX_FUTURE: self.max_future,
        }

    def _rotator_environment(self, wiring: FunctionWiring) -> dict[str, str]:
        if self.table_period is None:
            raise ValueError("the rotator runs only with a table_period: with one table there is nothing to rotate")
        rotation, hot, storage = self.rotation, self.hot_keys, self.storage
        env: dict[str, str] = {
            LambdaEnv.DIAL_DOWN_DELAY: rotation.dial_down_delay,
            LambdaEnv.BILLING_MODE: storage.billing_mode,
            LambdaEnv.READ_CAPACITY: str(rotation.period_read_capacity),
            LambdaEnv.ITEM_BYTES: str(self.item_bytes),
            LambdaEnv.TARGET_UTILISATION_PERCENT: str(storage.capacity.target_percent),
            LambdaEnv.POINT_IN_TIME_RECOVERY: _flag(storage.point_in_time_recovery),
            LambdaEnv.DELETION_PROTECTION: _flag(storage.deletion_protection),
            LambdaEnv.EXPORT_PREFIX: rotation.export_prefix,
            LambdaEnv.HOTKEYS_FUNCTION_ARN: _needed(
                wiring.hotkeys_function_arn, "hotkeys_function_arn", LambdaFunction.ROTATOR
            ),
            LambdaEnv.HOTKEYS_BATCH_SIZE: str(hot.batch_size),
            LambdaEnv.HOTKEYS_BATCHING_WINDOW_S: str(hot.batching_window_s),
            LambdaEnv.HOTKEYS_PARALLELIZATION: str(hot.parallelization_factor),
            LambdaEnv.HOTKEYS_MAX_RETRIES: str(hot.max_retries),
            LambdaEnv.HOTKEYS_MAX_RECORD_AGE_S: str(hot.max_record_age_s),
            LambdaEnv.HOTKEYS_ON_FAILURE_ARN: _needed(
                wiring.hotkeys_failure_destination_arn, "hotkeys_failure_destination_arn", LambdaFunction.ROTATOR
            ),
            LambdaEnv.ALARMS: "true",
            LambdaEnv.ALARM_TOPIC_ARN: _needed(wiring.alert_topic_arn, "alert_topic_arn", LambdaFunction.ROTATOR),
            LambdaEnv.MAX_DELETES_PER_RUN: str(rotation.max_deletes_per_run),
            LambdaEnv.DRY_RUN: _flag(rotation.dry_run),
        }
        if rotation.period_write_capacity is not None:
            env[LambdaEnv.WRITE_CAPACITY] = str(rotation.period_write_capacity)
        if rotation.peak_writes_per_s is not None:
            env[LambdaEnv.PEAK_WRITES_PER_S] = str(rotation.peak_writes_per_s)
        if rotation.export_bucket is not None:
            env[LambdaEnv.EXPORT_BUCKET] = rotation.export_bucket
        return env

    def rotation_interval_minutes(self) -> int:
        """How often the rotator runs: every 15 minutes for hourly tables, hourly otherwise.

        Either leaves many runs between a table being due (built ahead, dialled
        down after GRACE + DIAL_DOWN_DELAY, dropped after RETENTION) and the
        moment it matters, and a failed run is redone by the next one.
        """
        return 15 if self.table_period == "hour" else 60


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


# -- groups of keys, each validated together ------------------------------------


def _layout(raw: Mapping[str, object]) -> Layout:
    try:
        return Layout.from_settings(
            kind=_string(raw, "layout"),
            bucket=_string(raw, "bucket"),
            table_prefix=_string(raw, "table_prefix"),
            table_period=_optional_string(raw, "table_period"),
        )
    except ConfigError:
        raise
    except KeyDesignConfigError as exc:  # the key-design layer names fields as our keys do
        raise ConfigError(exc.field, exc.reason) from None


def _retention(raw: Mapping[str, object], layout: Layout) -> tuple[str, int]:
    retention = _string(raw, "retention")
    try:
        retention_ms = parse_duration(retention, "retention")
    except KeyDesignConfigError as exc:
        raise ConfigError("retention", exc.reason) from None
    if retention_ms <= 0:
        raise ConfigError("retention", "must be longer than zero")
    period = layout.table_period
    if period is not None and retention_ms < period.nominal_ms:
        raise ConfigError(
            "retention",
            f"{retention} is shorter than one {period.name} table period: the table being written "
            "would already be due for dropping",
        )
    return retention, retention_ms


def _storage(raw: Mapping[str, object], layout: Layout) -> StorageConfig:
    control_table = _matching(raw, "control_table", _TABLE_NAME, "must be 3-255 letters, digits, '_', '.' or '-'")
    if control_table == layout.table_prefix or control_table.startswith(f"{layout.table_prefix}-"):
        # Per-period tables are named "<table_prefix>-<label>": a control table in
        # that namespace could be taken for a readings table and dropped with it.
        raise ConfigError(
            "control_table", f"{control_table!r} must not equal table_prefix or start with '{layout.table_prefix}-'"
        )

    removal_policy = cast(RemovalPolicy, _choice(raw, "removal_policy", ("retain", "destroy")))
    deletion_protection = _boolean(raw, "deletion_protection")
    if removal_policy == "destroy" and deletion_protection:
        raise ConfigError(
            "removal_policy",
            "'destroy' cannot delete a table with deletion_protection true; set deletion_protection to false too",
        )

    capacity = ProvisionedCapacity(
        read_min=_integer(raw, "read_capacity_min", 1, None),
        read_max=_integer(raw, "read_capacity_max", 1, None),
        write_min=_integer(raw, "write_capacity_min", 1, None),
        write_max=_integer(raw, "write_capacity_max", 1, None),
        # Application Auto Scaling's target-tracking range for DynamoDB.
        target_percent=_integer(raw, "autoscaling_target_percent", 20, 90),
    )
    if capacity.read_min > capacity.read_max:
        raise ConfigError(
            "read_capacity_min", f"{capacity.read_min:,} is above read_capacity_max {capacity.read_max:,}"
        )
    if capacity.write_min > capacity.write_max:
        raise ConfigError(
            "write_capacity_min", f"{capacity.write_min:,} is above write_capacity_max {capacity.write_max:,}"
        )

    return StorageConfig(
        table_prefix=layout.table_prefix,
        readings_table_name=layout.table_for(0) if layout.table_period is None else None,
        control_table_name=control_table,
        billing_mode=cast(BillingMode, _choice(raw, "billing_mode", ("PAY_PER_REQUEST", "PROVISIONED"), upper=True)),
        capacity=capacity,
        warm_writes_per_s=_optional_integer(raw, "warm_writes_per_s", 1, None),
        deletion_protection=deletion_protection,
        removal_policy=removal_policy,
        point_in_time_recovery=_boolean(raw, "point_in_time_recovery"),
        contributor_insights=cast(
            ContributorInsights,
            _choice(raw, "contributor_insights", ("throttled_keys", "accessed_and_throttled_keys", "off")),
        ),
    )


def _stream(raw: Mapping[str, object]) -> StreamConfig:
    return StreamConfig(
        mode=cast(KinesisMode, _choice(raw, "kinesis_mode", ("on_demand", "provisioned"))),
        shards=_integer(raw, "kinesis_shards", 1, None),
        # Kinesis keeps records from 24 hours to 365 days.
        retention_hours=_integer(raw, "kinesis_retention_hours", 24, 8_760),
    )


def _ingest(raw: Mapping[str, object], stream: StreamConfig) -> IngestConfig:
    ingest = IngestConfig(
        batch_size=_integer(raw, "ingest_batch_size", 1, ESM_MAX_BATCH),
        batching_window_s=_integer(raw, "ingest_batching_window_s", 0, ESM_MAX_WINDOW_S),
        parallelization_factor=_integer(raw, "ingest_parallelization_factor", 1, ESM_MAX_PARALLELIZATION),
        max_retries=_integer(raw, "ingest_max_retries", -1, ESM_MAX_RETRIES),
        max_record_age_s=_integer(raw, "ingest_max_record_age_s", -1, ESM_MAX_RECORD_AGE_S),
    )
    age = ingest.max_record_age_s
    if age != -1 and age < ESM_MIN_RECORD_AGE_S:
        raise ConfigError(
            "ingest_max_record_age_s",
            f"must be -1 (no limit) or {ESM_MIN_RECORD_AGE_S:,} to {ESM_MAX_RECORD_AGE_S:,} seconds, got {age:,}",
        )
    if age > stream.retention_hours * 3600:
        raise ConfigError(
            "ingest_max_record_age_s",
            f"{age:,} s is longer than the stream keeps records (kinesis_retention_hours "
            f"{stream.retention_hours} = {stream.retention_hours * 3600:,} s)",
        )
    return ingest


def _alarm_email(raw: Mapping[str, object]) -> str | None:
    email = _optional_string(raw, "alarm_email")
    if email is not None and not _EMAIL.match(email):
        raise ConfigError("alarm_email", f"{email!r} is not an email address")
    return email


def _log_retention(raw: Mapping[str, object]) -> int:
    days = _integer(raw, "log_retention_days", 1, None)
    if days not in LOG_RETENTION_DAYS:
        allowed = ", ".join(map(str, LOG_RETENTION_DAYS))
        raise ConfigError("log_retention_days", f"{days} is not a CloudWatch Logs retention; use one of {allowed}")
    return days


def _stack_name(raw: Mapping[str, object]) -> str:
    name = _matching(raw, "stack_name", _STACK_NAME, "must start with a letter and hold 1-128 letters, digits or '-'")
    longest = max(len(f.value) for f in LambdaFunction)
    if len(name) + 1 + longest > LAMBDA_MAX_NAME:
        raise ConfigError(
            "stack_name",
            f"{name!r} is {len(name)} characters: the functions are named '<stack_name>-<function>' and Lambda "
            f"takes {LAMBDA_MAX_NAME} at most, so it may hold {LAMBDA_MAX_NAME - 1 - longest}",
        )
    return name


def _lambdas(raw: Mapping[str, object]) -> LambdaConfig:
    return LambdaConfig(
        powertools_layer_version=_integer(raw, "powertools_layer_version", 1, None),
        log_retention_days=_log_retention(raw),
        ingest=FunctionSizing(
            memory_mb=_integer(raw, "ingest_memory_mb", LAMBDA_MIN_MEMORY_MB, LAMBDA_MAX_MEMORY_MB),
            # Ingest keeps DEADLINE_MARGIN_MS (2 s) back for its response and
            # retries writes until then: a short timeout leaves no room to retry.
            timeout_s=_integer(raw, "ingest_timeout_s", 10, LAMBDA_MAX_TIMEOUT_S),
        ),
        query=FunctionSizing(
            memory_mb=_integer(raw, "query_memory_mb", LAMBDA_MIN_MEMORY_MB, LAMBDA_MAX_MEMORY_MB),
            # Under API Gateway's 29 s integration timeout, so a slow request ends
            # in the function (logged, traced) rather than as a bare 504.
            timeout_s=_integer(raw, "query_timeout_s", 3, API_INTEGRATION_TIMEOUT_S - 1),
            # Caps how much of the account's concurrency readers can hold, so a
            # burst of slow reads cannot starve ingest of instances.
            reserved_concurrency=_optional_integer(raw, "query_reserved_concurrency", 1, 10_000),
        ),
    )


def _max_future(raw: Mapping[str, object], layout: Layout) -> str:
    max_future, max_future_ms = _duration(raw, "max_future", low_ms=1_000, high_ms=DAY_MS)
    period = layout.table_period
    if period is not None and max_future_ms > period.nominal_ms:
        raise ConfigError(
            "max_future",
            f"{max_future} is longer than one {period.name} table period: a reading that far ahead would be "
            "routed to a table the rotator has not built yet",
        )
    return max_future


def _hot_keys(raw: Mapping[str, object]) -> HotKeysConfig:
    return HotKeysConfig(
        batch_size=_integer(raw, "hotkeys_batch_size", 1, ESM_MAX_BATCH),
        batching_window_s=_integer(raw, "hotkeys_batching_window_s", 0, ESM_MAX_WINDOW_S),
        parallelization_factor=_integer(raw, "hotkeys_parallelization_factor", 1, ESM_MAX_PARALLELIZATION),
        # No -1 (forever) for either: the point of both caps is that one poison
        # batch cannot hold a stream shard; and the stream keeps records 24 h.
        max_retries=_integer(raw, "hotkeys_max_retries", 0, ESM_MAX_RETRIES),
        max_record_age_s=_integer(raw, "hotkeys_max_record_age_s", ESM_MIN_RECORD_AGE_S, DYNAMODB_STREAM_RETENTION_S),
        auto_apply_entity=_boolean(raw, "hot_auto_apply_entity"),
        auto_apply_global=_boolean(raw, "hot_auto_apply_global"),
    )


def _rotation(
    raw: Mapping[str, object], layout: Layout, retention_ms: int, storage: StorageConfig, lambdas: LambdaConfig
) -> RotationConfig:
    grace, grace_ms = _duration(raw, "grace", low_ms=0, high_ms=None)
    dial_down_delay, delay_ms = _duration(raw, "dial_down_delay", low_ms=0, high_ms=None)
    rotation = RotationConfig(
        grace=grace,
        prebuild_periods=_integer(raw, "prebuild_periods", 1, 366),
        dial_down_delay=dial_down_delay,
        peak_writes_per_s=_optional_integer(raw, "peak_writes_per_s", 1, 10_000_000),
        period_write_capacity=_optional_integer(raw, "period_write_capacity", 1, 1_000_000),
        period_read_capacity=_integer(raw, "period_read_capacity", 1, 1_000_000),
        export_bucket=_export_bucket(raw),
        export_prefix=_export_prefix(raw),
        max_deletes_per_run=_integer(raw, "max_deletes_per_run", 0, 100),
        dry_run=_boolean(raw, "rotation_dry_run"),
    )
    if layout.table_period is None:
        return rotation
    # The same rules the rotator applies at cold start, caught here instead of
    # in a deployed function that fails every run.
    if grace_ms + delay_ms >= retention_ms:
        raise ConfigError(
            "grace",
            f"grace ({grace}) plus dial_down_delay ({dial_down_delay}) must be shorter than retention "
            f"({raw['retention']}): a table would be due for dropping while it still takes late readings",
        )
    if delay_ms < lambdas.ingest.timeout_s * 1_000:
        raise ConfigError(
            "dial_down_delay",
            f"{dial_down_delay} is shorter than ingest_timeout_s ({lambdas.ingest.timeout_s} s): a write ingest "
            "accepted just before GRACE ended could still be in flight when the table is dialled down",
        )
    needs_capacity = rotation.period_write_capacity is None and rotation.peak_writes_per_s is None
    if storage.billing_mode == "PROVISIONED" and needs_capacity:
        raise ConfigError(
            "period_write_capacity",
            "is required with billing_mode PROVISIONED and a table_period, unless peak_writes_per_s lets the "
            "rotator size new tables",
        )
    return rotation


def _export_bucket(raw: Mapping[str, object]) -> str | None:
    bucket = _optional_string(raw, "export_bucket")
    if bucket is not None and not _BUCKET.match(bucket):
        raise ConfigError("export_bucket", f"{bucket!r} is not an S3 bucket name")
    return bucket


def _export_prefix(raw: Mapping[str, object]) -> str:
    prefix = str(raw["export_prefix"] or "").strip().strip("/")
    if len(prefix) > 768 or not _S3_PREFIX.match(prefix):
        raise ConfigError("export_prefix", f"{prefix[:80]!r} must be up to 768 letters, digits, '/', '_', '.' or '-'")
    return prefix


def _duration(raw: Mapping[str, object], key: str, *, low_ms: int, high_ms: int | None) -> tuple[str, int]:
    text = _string(raw, key)
    try:
        value_ms = parse_duration(text, key)
    except KeyDesignConfigError as exc:
        raise ConfigError(key, exc.reason) from None
    if value_ms < low_ms or (high_ms is not None and value_ms > high_ms):
        bounds = f"from {low_ms // 1000:,} s" + (f" to {high_ms // 1000:,} s" if high_ms is not None else " up")
        raise ConfigError(key, f"{text} is outside {bounds}")
    return text, value_ms


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _needed(value: str | None, name: str, function: LambdaFunction) -> str:
    if not value:
        raise ValueError(f"the {function.value} function's environment needs FunctionWiring.{name}")
    return value


# -- value parsing: JSON values from cdk.json, strings from -c key=value --------


def _refuse_unknown_keys(context: Mapping[str, object]) -> None:
    for key in context:
        if key not in DEFAULTS and _OWN_KEY.match(key):
            close = difflib.get_close_matches(key, list(DEFAULTS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "; see docs/configuration.md for the keys"
            raise ConfigError(key, f"is not a configuration key{hint}")


def _string(raw: Mapping[str, object], key: str) -> str:
    value = raw[key]
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(key, f"must be a non-empty string, got {value!r}")
    return value.strip()


def _matching(raw: Mapping[str, object], key: str, pattern: re.Pattern[str], rule: str) -> str:
    value = _string(raw, key)
    if not pattern.match(value):
        raise ConfigError(key, f"{value!r} {rule}")
    return value


def _optional_string(raw: Mapping[str, object], key: str) -> str | None:
    value = raw[key]
    if value is None or (isinstance(value, str) and value.strip().lower() in _NULLS):
        return None
    return _string(raw, key)


def _boolean(raw: Mapping[str, object], key: str) -> bool:
    value = raw[key]
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ConfigError(key, f"must be true or false, got {value!r}")


def _integer(raw: Mapping[str, object], key: str, low: int, high: int | None) -> int:
    value = raw[key]
    number: int | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int):
        number = value
    elif (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value)
    ):
        number = int(value)
    if number is None:
        raise ConfigError(key, f"must be a whole number, got {value!r}")
    if number < low or (high is not None and number > high):
        bounds = f"from {low:,} to {high:,}" if high is not None else f"at least {low:,}"
        raise ConfigError(key, f"must be {bounds}, got {number:,}")
    return number


def _optional_integer(raw: Mapping[str, object], key: str, low: int, high: int | None) -> int | None:
    value = raw[key]
    if value is None or (isinstance(value, str) and value.strip().lower() in _NULLS):
        return None
    return _integer(raw, key, low, high)


def _number(raw: Mapping[str, object], key: str) -> float:
    value = raw[key]
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number <= 0:
        raise ConfigError(key, f"must be a number above 0, got {value!r}")
    return number


def _choice(raw: Mapping[str, object], key: str, allowed: tuple[str, ...], *, upper: bool = False) -> str:
    value = raw[key]
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str):
        text = text.upper() if upper else text.lower()
    if text not in allowed:
        raise ConfigError(key, f"{value!r} is not one of {', '.join(allowed)}")
    return text
