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
from keydesign import Layout, ShardMap, parse_duration, shards_for, write_units
from keydesign.shardmap import MAX_GLOBAL_SHARDS

# The seed workload the default shard count is sized for: 50,000 writes/s of
# 500-byte items (1 WCU each), with every partition key kept at 50% of its
# 1,000 WCU/s limit so a burst or an uneven hash has room.
SEED_PEAK_WRITES_PER_S = 50_000
SEED_ITEM_BYTES = 500
SEED_KEY_UTILISATION = 0.5

#: Every context key this stack reads, with its default. ``None`` means "not set".
DEFAULTS: Mapping[str, object] = {
    "stack_name": "TimeSeriesIngest",
    "layout": "hybrid",
    "shards": shards_for(SEED_PEAK_WRITES_PER_S * write_units(SEED_ITEM_BYTES), SEED_KEY_UTILISATION),
    "bucket": "1h",
    "table_prefix": "timeseries-readings",
    "control_table": "timeseries-control",
    "table_period": None,
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
    "hot_split_threshold_wcu": 500,
    "shard_map_cache_ttl_s": 60,
    "alarm_email": None,
    "api_stage": "v1",
    "api_throttle_rate": 100,
    "api_throttle_burst": 200,
    "log_retention_days": 30,
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


class ConfigError(KeyDesignConfigError):
    """A context value is not acceptable. ``field`` is the context key, ``reason`` says why."""


class LambdaEnv(StrEnum):
    """Names of the environment variables the Lambdas read: the one place the stack spells them.

    They match what ``functions/adapters/settings.py`` parses at cold start
    (durations such as ``RETENTION`` and ``SHARD_MAP_CACHE_TTL`` in
    ``parse_duration`` form, e.g. ``30d``, ``60s``).
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
#: The control table: the shard map and its history. Never expires, never streamed.
CONTROL_SCHEMA = TableSchema(partition_key="pk", sort_key="sk", ttl_attribute=None, stream_view=None)

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
        return cls(
            stack_name=_matching(
                raw, "stack_name", _STACK_NAME, "must start with a letter and hold 1-128 letters, digits or '-'"
            ),
            layout_kind=layout.kind,
            shards=_integer(raw, "shards", 1, MAX_GLOBAL_SHARDS),
            bucket=layout.bucket.spec,
            table_period=layout.table_period.name if layout.table_period else None,
            retention=retention,
            retention_ms=retention_ms,
            storage=_storage(raw, layout),
            stream=stream,
            ingest=_ingest(raw, stream),
            api=ApiConfig(
                stage=_matching(raw, "api_stage", _API_STAGE, "must be 1-128 letters, digits, '_' or '-'"),
                throttle_rate=_number(raw, "api_throttle_rate"),
                throttle_burst=_integer(raw, "api_throttle_burst", 1, None),
            ),
            hot_split_threshold_wcu=_integer(raw, "hot_split_threshold_wcu", 1, PARTITION_WCU - 1),
            shard_map_cache_ttl_s=_integer(raw, "shard_map_cache_ttl_s", 1, 3_600),
            alarm_email=_alarm_email(raw),
            log_retention_days=_log_retention(raw),
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

        ``rejects_queue_url`` is a deploy-time value (a CDK token in the stack, a
        moto URL locally), so the caller passes it. Variables without a value are
        left out rather than set to an empty string: ``TABLE_PERIOD`` is present
        only with per-period tables, ``READINGS_TABLE`` only with the fixed table.
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
        if self.storage.readings_table_name is not None:
            env[LambdaEnv.READINGS_TABLE] = self.storage.readings_table_name
        if self.storage.warm_writes_per_s is not None:
            env[LambdaEnv.WARM_WRITES_PER_S] = str(self.storage.warm_writes_per_s)
        if rejects_queue_url is not None:
            env[LambdaEnv.REJECTS_QUEUE_URL] = rejects_queue_url
        return {str(k): v for k, v in env.items()}


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
