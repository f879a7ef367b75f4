"""The stack's configuration: typed, frozen and validated, built from CDK context.

The context is ``cdk.json``'s ``"context"`` object, with any ``-c key=value``
overrides the CDK CLI merged in. This module is pure Python (no ``aws_cdk``
import) because the local runtime, the CLI and the tests build the same
configuration without synthesizing anything.

Every value is checked against the limit AWS itself enforces, so a bad value
fails here, naming the context key, instead of half-way through a deploy.
``docs/configuration.md`` documents every key; the :class:`Context` model is
the one place the keys and their defaults live (``cdk.json`` restates the
defaults, and a test keeps it to them).
"""

from __future__ import annotations

import ast
import difflib
import inspect
import itertools
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, Self, TypeVar, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from adapters.settings import CommonSettings, Flag, matching
from hotkeys.settings import HotKeySettings
from ingest.settings import IngestSettings
from keydesign import ConfigError as KeyDesignConfigError
from keydesign import Layout, ShardMap, Workload, parse_duration, plan_capacity, shards_for, write_units
from keydesign.items import MAX_ITEM_BYTES
from keydesign.rollup import Granularities
from keydesign.shardmap import MAX_GLOBAL_SHARDS
from query.settings import QuerySettings
from rollup.settings import RollupSettings
from rotator.settings import RotatorSettings

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


Group = TypeVar("Group")


class ConfigError(KeyDesignConfigError):
    """A context value is not acceptable. ``field`` is the context key, ``reason`` says why."""


class LambdaFunction(StrEnum):
    """The stack's four functions. The value is the service name: the function's
    package under ``functions/``, its ``POWERTOOLS_SERVICE_NAME`` and the suffix
    of its physical name (``<stack_name>-<value>``)."""

    INGEST = "ingest"
    QUERY = "query"
    HOTKEYS = "hotkeys"
    ROTATOR = "rotator"
    ROLLUP = "rollup"

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
        }
        return models[self]


@dataclass(frozen=True, slots=True)
class FunctionWiring:
    """Deploy-time values a function's environment needs: CDK tokens in the stack,
    moto URLs and ARNs locally. Each function needs only some of them."""

    rejects_queue_url: str | None = None
    cursor_secret_arn: str | None = None
    alert_topic_arn: str | None = None
    hotkeys_function_arn: str | None = None
    hotkeys_failure_destination_arn: str | None = None
    #: The rotator, which ingest asks to build a missing period table (name or ARN; per-period tables).
    rotator_function: str | None = None


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
    #: Days between rotations of the cursor-signing key.
    cursor_key_rotation_days: int


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
    #: Memory and timeout fixed: one stream batch of keys is light work.
    hotkeys: FunctionSizing
    #: Fixed: the run is bounded by DEADLINE_MARGIN_MS inside its timeout (a few minutes,
    #: for hundreds of hourly tables to describe), and runs are one at a time (two would
    #: only race each other over the same tables).
    rotator: FunctionSizing = FunctionSizing(memory_mb=512, timeout_s=300, reserved_concurrency=1)
    #: A run applies closed minutes until 5 s before its timeout; the next run (a minute later) goes on.
    rollup: FunctionSizing = FunctionSizing(memory_mb=1_024, timeout_s=120, reserved_concurrency=1)

    def sizing(self, function: LambdaFunction) -> FunctionSizing:
        """The size of ``function``: the field named after it."""
        sizing: FunctionSizing = getattr(self, function.value)
        return sizing


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
    infrequent_access_storage_percent: int | None


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
    #: Every key as validated: what the groups above do not gather is read from here.
    context: Context

    @classmethod
    def from_context(cls, context: Mapping[str, object]) -> AppConfig:
        """Validate CDK context into a config; missing keys take :data:`DEFAULTS`.

        Values may be JSON-typed (from ``cdk.json``) or strings (``-c key=value``
        always passes strings). Raises :class:`ConfigError` naming the first bad key.
        """
        c = Context.parse(context)
        layout = c._layout
        # The keys AppConfig keeps as they are, under their own names (bucket and period: as the layout spells them).
        same = {f.name for f in fields(cls)} & set(Context.model_fields) - {"bucket", "table_period"}
        return cls(
            **{name: getattr(c, name) for name in same},
            layout_kind=layout.kind,
            bucket=layout.bucket.spec,
            table_period=layout.table_period.name if layout.table_period else None,
            retention_ms=parse_duration(c.retention, "retention"),
            storage=StorageConfig(
                table_prefix=layout.table_prefix,
                readings_table_name=layout.table_for(0) if layout.table_period is None else None,
                control_table_name=c.control_table,
                billing_mode=cast(BillingMode, c.billing_mode),
                capacity=ProvisionedCapacity(
                    c.read_capacity_min,
                    c.read_capacity_max,
                    c.write_capacity_min,
                    c.write_capacity_max,
                    c.autoscaling_target_percent,
                ),
                warm_writes_per_s=c.warm_writes_per_s,
                deletion_protection=c.deletion_protection,
                removal_policy=cast(RemovalPolicy, c.removal_policy),
                point_in_time_recovery=c.point_in_time_recovery,
                contributor_insights=cast(ContributorInsights, c.contributor_insights),
            ),
            stream=_group(StreamConfig, c, "kinesis_"),
            ingest=_group(IngestConfig, c, "ingest_"),
            api=_group(ApiConfig, c, "api_"),
            lambdas=LambdaConfig(
                powertools_layer_version=c.powertools_layer_version,
                log_retention_days=c.log_retention_days,
                ingest=FunctionSizing(c.ingest_memory_mb, c.ingest_timeout_s, c.ingest_reserved_concurrency),
                query=FunctionSizing(c.query_memory_mb, c.query_timeout_s, c.query_reserved_concurrency),
                hotkeys=FunctionSizing(512, 60, c.hotkeys_reserved_concurrency),
            ),
            hot_keys=_group(HotKeysConfig, c, "hotkeys_", "hot_"),
            rotation=_group(RotationConfig, c, "", "rotation_"),
            context=c,
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

    def function_environment(self, function: LambdaFunction, wiring: FunctionWiring) -> dict[str, str]:
        """The whole environment of one function, rendered by its settings model: the one
        place the stack (and the local runtime) decides what each function is told.

        Values the function would default to anyway are still written when the
        configuration owns them (so a change here reaches the function), and left
        out when it does not (the function's default is the documented one).
        Raises ``ValueError`` when ``wiring`` lacks a value the function requires,
        or for the rotator without a table period.
        """
        own: dict[LambdaFunction, Callable[[], dict[str, object]]] = {
            LambdaFunction.INGEST: lambda: {
                "rejects_queue_url": _needed(wiring.rejects_queue_url, "rejects_queue_url", function),
                "max_future_ms": parse_duration(self.max_future, "max_future"),
                "rotator_function": wiring.rotator_function if self.table_period is not None else None,
            },
            LambdaFunction.QUERY: lambda: {
                "cursor_secret_arn": _needed(wiring.cursor_secret_arn, "cursor_secret_arn", function)
            },
            LambdaFunction.HOTKEYS: lambda: self._hot_keys_settings(wiring),
            LambdaFunction.ROTATOR: lambda: self._rotator_settings(wiring),
            LambdaFunction.ROLLUP: lambda: {
                # A minute of marks is applied once no ingest invocation stamped in it can still be writing.
                "settle_ms": (self.lambdas.ingest.timeout_s + 60) * 1000,
            },
        }
        periodic = self.table_period is not None
        return function.settings.render(
            service_name=function.value,
            metrics_namespace=METRICS_NAMESPACE,
            layout_kind=self.layout_kind,
            shards=self.shards,
            bucket=self.bucket,
            table_prefix=self.storage.table_prefix,
            table_period=self.table_period,
            retention_ms=self.retention_ms,
            readings_table=self.storage.readings_table_name,
            control_table=self.storage.control_table_name,
            shard_map_cache_ttl_ms=self.shard_map_cache_ttl_s * 1000,
            grace_ms=parse_duration(self.rotation.grace, "grace") if periodic else None,
            # Ingest and the rotator must agree on both: ingest writes a reading up to MAX_AGE old to a
            # table the rotator keeps writable (or builds) that long, and refuses one past the tables
            # built ahead. The rollup function applies a late reading's mark up to MAX_AGE too.
            prebuild_periods=self.rotation.prebuild_periods if periodic else None,
            max_age=self.context.max_age_ms,
            # Ingest marks, the rollup function applies, the query function reads: one value for all three.
            rollups=self.context.rollups or None,
            **own[function](),
        )

    def _hot_keys_settings(self, wiring: FunctionWiring) -> dict[str, object]:
        hot = self.hot_keys
        return {
            "split_threshold_wcu": self.hot_split_threshold_wcu,
            "alert_topic_arn": _needed(wiring.alert_topic_arn, "alert_topic_arn", LambdaFunction.HOTKEYS),
            "auto_apply_entity": hot.auto_apply_entity,
            "auto_apply_global": hot.auto_apply_global,
            # A key over the threshold carries at least threshold/1,000 of its
            # stream shard's writes, so it is among a batch's top 1,000/threshold:
            # the detector refuses fewer counters than that.
            "counters_per_window": max(
                HOT_COUNTERS_PER_WINDOW, math.ceil(PARTITION_WCU / self.hot_split_threshold_wcu)
            ),
            # The change margin's default is MAX_FUTURE + 60 s: the detector reads ingest's value.
            "max_future_ms": parse_duration(self.max_future, "max_future"),
        }

    def _rotator_settings(self, wiring: FunctionWiring) -> dict[str, object]:
        if self.table_period is None:
            raise ValueError("the rotator runs only with a table_period: with one table there is nothing to rotate")
        rotation, hot, storage = self.rotation, self.hot_keys, self.storage
        rotator = LambdaFunction.ROTATOR
        return {
            "dial_down_delay_ms": parse_duration(rotation.dial_down_delay, "dial_down_delay"),
            "billing_mode": storage.billing_mode,
            "write_capacity": rotation.period_write_capacity,
            "read_capacity": rotation.period_read_capacity,
            "warm_writes_per_s": storage.warm_writes_per_s,
            "peak_writes_per_s": rotation.peak_writes_per_s,
            "item_bytes": self.item_bytes,
            "target_utilisation_percent": storage.capacity.target_percent,
            "point_in_time_recovery_setting": storage.point_in_time_recovery,
            "deletion_protection": storage.deletion_protection,
            # Open period tables get what the single table gets; closed ones shed it.
            "contributor_insights": storage.contributor_insights,
            "infrequent_access_storage_percent": rotation.infrequent_access_storage_percent,
            "export_bucket": rotation.export_bucket,
            "export_prefix": rotation.export_prefix,
            "hotkeys_function_arn": _needed(wiring.hotkeys_function_arn, "hotkeys_function_arn", rotator),
            "hotkeys_batch_size": hot.batch_size,
            "hotkeys_batching_window_s": hot.batching_window_s,
            "hotkeys_parallelization": hot.parallelization_factor,
            "hotkeys_max_retries": hot.max_retries,
            "hotkeys_max_record_age_s": hot.max_record_age_s,
            "hotkeys_on_failure_arn": _needed(
                wiring.hotkeys_failure_destination_arn, "hotkeys_failure_destination_arn", rotator
            ),
            "alarms_on": True,
            "alarm_topic_arn": _needed(wiring.alert_topic_arn, "alert_topic_arn", rotator),
            "max_deletes_per_run": rotation.max_deletes_per_run,
            "dry_run": rotation.dry_run,
        }

    def rotation_interval_minutes(self) -> int:
        """How often the rotator runs: every 15 minutes for hourly tables, hourly otherwise.

        Either leaves many runs between a table being due (built ahead, dialled
        down after GRACE + DIAL_DOWN_DELAY, dropped after RETENTION) and the
        moment it matters, and a failed run is redone by the next one.
        """
        return 15 if self.table_period == "hour" else 60


def attribute_docs(model: type) -> dict[str, str]:
    """The docstring under each field of ``model`` and its bases (the settings models do not ask pydantic
    for them: reading every class's source at import costs each function's cold start tens of ms)."""
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__[:-1]):
        try:
            body = ast.parse(inspect.getsource(cls)).body[0]
        except (OSError, TypeError, IndexError):
            continue
        statements = body.body if isinstance(body, ast.ClassDef) else []
        for stmt, after in itertools.pairwise(statements):
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
            meaning = " ".join((field.description or docs.get(name, "")).split())
            lines.append(f"| `{field.alias}` | {shown} | {span} | {meaning} |")
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


def _needed(value: str | None, name: str, function: LambdaFunction) -> str:
    if not value:
        raise ValueError(f"the {function.value} function's environment needs FunctionWiring.{name}")
    return value


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
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if (isinstance(value, float) and value.is_integer()) or (
        isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value)
    ):
        return int(value)
    raise ValueError(f"must be a whole number, got {value!r}")


def _positive_number(value: object) -> float:
    number: float | None = None
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number <= 0:
        raise ValueError(f"must be a number above 0, got {value!r}")
    return number


def _duration(low_ms: int, high_ms: int | None = None) -> AfterValidator:
    def check(text: str) -> str:
        try:
            value_ms = parse_duration(text, "duration")
        except KeyDesignConfigError as exc:
            raise ValueError(exc.reason) from None
        if value_ms < low_ms or (high_ms is not None and value_ms > high_ms):
            bounds = f"from {low_ms // 1000:,} s" + (f" to {high_ms // 1000:,} s" if high_ms is not None else " up")
            raise ValueError(f"{text} is outside {bounds}")
        return text

    return AfterValidator(check)


def _one_of(*allowed: str) -> BeforeValidator:
    def check(value: object) -> str:
        text = value.strip() if isinstance(value, str) else value
        if isinstance(text, str):
            text = text.upper() if allowed[0].isupper() else text.lower()
        if text not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
        return text

    return BeforeValidator(check)


def _in(allowed: tuple[int, ...], what: str) -> AfterValidator:
    def check(value: int) -> int:
        if value not in allowed:
            raise ValueError(f"{value} is not {what}; use one of {', '.join(map(str, allowed))}")
        return value

    return AfterValidator(check)


Text = Annotated[str, BeforeValidator(_text)]
OptionalText = Annotated[Text | None, BeforeValidator(_null)]
Whole = Annotated[int, BeforeValidator(_whole)]
OptionalWhole = Annotated[Whole | None, BeforeValidator(_null)]
Duration = Annotated[Text, _duration(0)]


def key(default: object, *, low: int | None = None, high: int | None = None) -> Any:
    """A context key with its default (the one place it lives) and, for numbers, AWS's bounds."""
    return Field(default, ge=low, le=high, validate_default=True)


class Context(BaseModel):
    """Every key of cdk.json's ``"context"`` this stack reads, with its default and AWS's limit.

    A bad value fails here, naming the key, instead of half-way through a deploy;
    the cross-field rules are the model validator. :data:`DEFAULTS` is derived from it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    stack_name: Annotated[
        Text, matching(_STACK_NAME, "a stack name: a letter, then up to 127 letters, digits or '-'")
    ] = key("TimeSeriesIngest")
    layout: Text = key("hybrid")
    shards: Whole = key(
        shards_for(SEED_PEAK_WRITES_PER_S * write_units(SEED_ITEM_BYTES), SEED_KEY_UTILISATION),
        low=1,
        high=MAX_GLOBAL_SHARDS,
    )
    bucket: Text = key("1h")
    table_prefix: Text = key("timeseries-readings")
    control_table: Annotated[Text, matching(_TABLE_NAME, "a table name: 3-255 letters, digits, '_', '.' or '-'")] = key(
        "timeseries-control"
    )
    table_period: OptionalText = key(SEED_TABLE_PERIOD)
    retention: Duration = key("30d")
    billing_mode: Annotated[str, _one_of("PAY_PER_REQUEST", "PROVISIONED")] = key("PAY_PER_REQUEST")
    read_capacity_min: Whole = key(100, low=1)
    read_capacity_max: Whole = key(12_000, low=1)
    write_capacity_min: Whole = key(1_000, low=1)
    write_capacity_max: Whole = key(40_000, low=1)
    # Application Auto Scaling's target-tracking range for DynamoDB.
    autoscaling_target_percent: Whole = key(70, low=20, high=90)
    warm_writes_per_s: OptionalWhole = key(None, low=1)
    deletion_protection: Flag = key(True)
    removal_policy: Annotated[str, _one_of("retain", "destroy")] = key("retain")
    point_in_time_recovery: Flag = key(True)
    contributor_insights: Annotated[str, _one_of("throttled_keys", "accessed_and_throttled_keys", "off")] = key(
        "throttled_keys"
    )
    kinesis_mode: Annotated[str, _one_of("on_demand", "provisioned")] = key("on_demand")
    kinesis_shards: Whole = key(50, low=1)
    # Kinesis keeps records from 24 hours to 365 days. 96: a batch that failed on a Friday evening can
    # still be replayed on the Tuesday morning after a long weekend (docs/decisions.md weighs the cost).
    kinesis_retention_hours: Whole = key(96, low=24, high=8_760)
    ingest_batch_size: Whole = key(1_000, low=1, high=ESM_MAX_BATCH)
    ingest_batching_window_s: Whole = key(5, low=0, high=ESM_MAX_WINDOW_S)
    ingest_parallelization_factor: Whole = key(1, low=1, high=ESM_MAX_PARALLELIZATION)
    ingest_max_retries: Whole = key(5, low=-1, high=ESM_MAX_RETRIES)
    ingest_max_record_age_s: Whole = key(3_600, low=-1, high=ESM_MAX_RECORD_AGE_S)
    ingest_memory_mb: Whole = key(1_024, low=LAMBDA_MIN_MEMORY_MB, high=LAMBDA_MAX_MEMORY_MB)
    # Ingest keeps DEADLINE_MARGIN_MS (2 s) back for its response and retries
    # writes until then: a short timeout leaves no room to retry.
    ingest_timeout_s: Whole = key(120, low=10, high=LAMBDA_MAX_TIMEOUT_S)
    # A reservation is also a cap: unset, ingest draws on the account's unreserved pool.
    ingest_reserved_concurrency: OptionalWhole = key(None, low=1, high=10_000)
    max_future: Annotated[Text, _duration(1_000, DAY_MS)] = key("5m")
    # A long weekend's outage of a store-and-forward device; at most retention (a rule below; the default is
    # cut to a shorter retention).
    max_age: Duration = key("3d")
    rollups: OptionalText = key("1m,1h,1d")
    hot_split_threshold_wcu: Whole = key(500, low=1, high=PARTITION_WCU - 1)
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
    hot_auto_apply_entity: Flag = key(True)
    hot_auto_apply_global: Flag = key(False)
    grace: Duration = key("2h")
    prebuild_periods: Whole = key(2, low=1, high=366)
    dial_down_delay: Duration = key("15m")
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
    rotation_dry_run: Flag = key(False)
    alarm_email: Annotated[OptionalText, matching(_EMAIL, "an email address")] = key(None)
    iterator_age_alarm_s: Whole = key(60, low=1, high=ESM_MAX_RECORD_AGE_S)
    api_stage: Annotated[Text, matching(_API_STAGE, "a stage name: 1-128 letters, digits, '_' or '-'")] = key("v1")
    api_throttle_rate: Annotated[float, BeforeValidator(_positive_number)] = key(100)
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

    @model_validator(mode="after")
    def _rules(self) -> Self:
        """The rules between keys; the rotator applies the rotation ones at cold start too."""
        try:
            layout = Layout.from_settings(
                kind=self.layout, bucket=self.bucket, table_prefix=self.table_prefix, table_period=self.table_period
            )
        except KeyDesignConfigError as exc:  # the key-design layer names fields as our keys do
            raise ConfigError(exc.field, exc.reason) from None
        period, prefix = layout.table_period, layout.table_prefix
        retention_ms = parse_duration(self.retention, "retention")
        _rule(retention_ms > 0, "retention", "must be longer than zero")
        _rule(
            "max_age" not in self.model_fields_set or parse_duration(self.max_age, "max_age") <= retention_ms,
            "max_age",
            f"{self.max_age} is longer than retention ({self.retention}): such a reading would be stored already "
            "expired, or routed to a table already dropped",
        )
        _rule(
            period is None or retention_ms >= period.nominal_ms,
            "retention",
            f"{self.retention} is shorter than one {period and period.name} table period: the table being written "
            "would already be due for dropping",
        )
        # Per-period tables are named "<table_prefix>-<label>": a control table in
        # that namespace could be taken for a readings table and dropped with it.
        _rule(
            self.control_table != prefix and not self.control_table.startswith(f"{prefix}-"),
            "control_table",
            f"{self.control_table!r} must not equal table_prefix or start with '{prefix}-'",
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
        longest = max(len(f.value) for f in LambdaFunction)
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
            f"{self.ingest_reserved_concurrency} is below kinesis_shards x ingest_parallelization_factor "
            f"({stream_shards}), the batches the stream hands ingest at once: the stream would fall behind",
        )
        if period is not None:
            self._rotation_rules(period.name, period.nominal_ms, retention_ms)
        if self.rollups:
            self._rollup_rules()
        self._layout = layout
        return self

    def _rollup_rules(self) -> None:
        try:
            Granularities.parse(self.rollups or "", "rollups")
        except KeyDesignConfigError as exc:
            raise ConfigError("rollups", exc.reason) from None

    def _rotation_rules(self, period: str, period_ms: int, retention_ms: int) -> None:
        _rule(
            parse_duration(self.max_future, "max_future") <= period_ms,
            "max_future",
            f"{self.max_future} is longer than one {period} table period: a reading that far ahead would be "
            "routed to a table the rotator has not built yet",
        )
        grace_ms, delay_ms = parse_duration(self.grace, "grace"), parse_duration(self.dial_down_delay, "delay")
        _rule(
            grace_ms + delay_ms < retention_ms,
            "grace",
            f"grace ({self.grace}) plus dial_down_delay ({self.dial_down_delay}) must be shorter than retention "
            f"({self.retention}): a table would be due for dropping while it still takes late readings",
        )
        _rule(
            delay_ms >= self.ingest_timeout_s * 1_000,
            "dial_down_delay",
            f"{self.dial_down_delay} is shorter than ingest_timeout_s ({self.ingest_timeout_s} s): a write ingest "
            "accepted just before GRACE ended could still be in flight when the table is dialled down",
        )
        _rule(
            not (
                self.billing_mode == "PROVISIONED"
                and self.period_write_capacity is None
                and self.peak_writes_per_s is None
            ),
            "period_write_capacity",
            "is required with billing_mode PROVISIONED and a table_period, unless peak_writes_per_s lets the "
            "rotator size new tables",
        )

    _layout: Layout = PrivateAttr()

    @property
    def max_age_ms(self) -> int:
        """``max_age``; its default (3 days) is cut to ``retention`` when that is shorter (a value set is refused)."""
        return min(parse_duration(self.max_age, "max_age"), parse_duration(self.retention, "retention"))

    @classmethod
    def parse(cls, context: Mapping[str, object]) -> Context:
        """The context's own keys, validated; a misspelt one is refused with the nearest valid name.

        Our keys are snake_case identifiers. CDK's keys (feature flags such as
        "@aws-cdk/core:...", "aws:cdk:...", lookup caches "availability-zones:...",
        "acknowledged-issue-numbers") never are, so anything snake_case that is not
        a known key is a typo and is refused rather than silently ignored.
        """
        for name in context:
            if name not in cls.model_fields and _OWN_KEY.match(name):
                close = difflib.get_close_matches(name, list(cls.model_fields), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else "; see docs/configuration.md for the keys"
                raise ConfigError(name, f"is not a configuration key{hint}")
        try:
            return cls.model_validate({k: v for k, v in context.items() if k in cls.model_fields})
        except ValidationError as exc:
            raise _config_error(exc) from None


def _group(cls: type[Group], c: Context, *prefixes: str) -> Group:
    """The dataclass ``cls`` from the context keys named as its fields, after the first of ``prefixes`` that fits."""
    names = {f.name: next(p + f.name for p in prefixes if p + f.name in Context.model_fields) for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{name: getattr(c, key) for name, key in names.items()})


def _rule(holds: bool, key: str, reason: str) -> None:
    if not holds:
        raise ConfigError(key, reason)


def _config_error(exc: ValidationError) -> ConfigError:
    error = exc.errors(include_url=False)[0]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, ConfigError):
        return cause
    name = str(error["loc"][0])
    if error["type"] in ("greater_than_equal", "less_than_equal"):
        field = Context.model_fields[name]
        low = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
        high = next((m.le for m in field.metadata if hasattr(m, "le")), None)
        bounds = f"from {low:,} to {high:,}" if high is not None else f"at least {low:,}"
        return ConfigError(name, f"must be {bounds}, got {error['input']:,}")
    return ConfigError(name, str(cause) if cause is not None else error["msg"])


#: Every context key this stack reads, with its default (``None``: not set).
DEFAULTS: Mapping[str, object] = {name: field.default for name, field in Context.model_fields.items()}
