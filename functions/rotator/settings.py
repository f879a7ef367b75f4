"""Settings of the rotator Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings` (LAYOUT, SHARDS, BUCKET,
TABLE_PREFIX, TABLE_PERIOD, RETENTION, ...); ``TABLE_PERIOD`` is required here.
A missing or malformed value raises :class:`SettingsError` naming the variable.

================================  ==========================================================  ================
variable                          meaning                                                     default
================================  ==========================================================  ================
``PREBUILD_PERIODS``              tables built ahead of the current period (1..366)           2
``GRACE``                         late readings accepted after a period ends                  2h
``DIAL_DOWN_DELAY``               extra wait after GRACE before capacity is dialled down      15m
``BILLING_MODE``                  PAY_PER_REQUEST or PROVISIONED, for new tables              PAY_PER_REQUEST
``WRITE_CAPACITY``                WCU of a new provisioned table                              planner
``READ_CAPACITY``                 RCU of a new provisioned table                              100
``MIN_WRITE_CAPACITY``            WCU of a cold (dialled-down) table                          1
``OLD_READ_CAPACITY``             RCU of a cold table                                         10
``WARM_WRITES_PER_S``             on-demand warm throughput of a new table (writes/s)         planner or none
``PEAK_WRITES_PER_S``             planner input: peak readings per second                     none
``ITEM_BYTES``                    planner input: stored item size in bytes                    500
``TARGET_UTILISATION_PERCENT``    planner: peak as a share of what is provisioned (20..100)   70
``POINT_IN_TIME_RECOVERY``        enable PITR on new tables (forced on with EXPORT_BUCKET)    true
``DELETION_PROTECTION``           create tables deletion-protected (lifted just before drop)  true
``TABLE_TAGS``                    JSON object of extra tags for tables and alarms             {}
``EXPORT_BUCKET``                 S3 bucket for the export made before a table is dropped    none (no export)
``EXPORT_PREFIX``                 key prefix of those exports (``<prefix>/<table>``)          dynamodb-exports
``EXPORT_BUCKET_OWNER``           12-digit account owning the bucket, if another account      none
``HOTKEYS_FUNCTION_ARN``          hot-key Lambda fed by every table's stream                  none (no mapping)
``HOTKEYS_BATCH_SIZE``            stream batch size (1..10,000)                               1000
``HOTKEYS_BATCHING_WINDOW_S``     batching window in seconds (0..300)                         1
``HOTKEYS_MAX_RETRIES``           retries of a failing batch (0..10,000)                      5
``HOTKEYS_MAX_RECORD_AGE_S``      oldest record sent to the function (60..604,800)            3600
``HOTKEYS_PARALLELIZATION``       concurrent batches per stream shard (1..10)                 1
``HOTKEYS_TUMBLING_WINDOW_S``     tumbling window in seconds (0..900), for windowed state     none
``HOTKEYS_ON_FAILURE_ARN``        SQS queue, SNS topic or S3 bucket ARN for dropped batches   none
``ALARMS``                        create the per-table throttling and error alarms            true
``ALARM_TOPIC_ARN``               SNS topic the alarms notify (ALARM and OK)                  none
``ALARM_THRESHOLD``               events in one minute that count as a breaching minute       1
``ALARM_EVALUATION_MINUTES``      minutes looked at                                           5
``ALARM_DATAPOINTS``              breaching minutes among them that raise the alarm           3
``MAX_DELETES_PER_RUN``           tables one run may drop (0 = never drop)                    2
``DRY_RUN``                       report only, change nothing (an event can ask for it too)   false
``ALLOW_NOW_OVERRIDE``            let a live run take ``now`` from its event (tests, local)   false
``DEADLINE_MARGIN_MS``            time kept back from the Lambda timeout                      10000
================================  ==========================================================  ================

"planner": when ``WRITE_CAPACITY`` (provisioned) or ``WARM_WRITES_PER_S``
(on-demand) is not set and ``PEAK_WRITES_PER_S`` is, the figure is the
planner's peak WCU (``keydesign.plan_capacity``) divided by the target
utilisation. A provisioned table without either is refused.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

from adapters.settings import CommonSettings, SettingsError, duration_ms, integer
from keydesign import InvalidInput, TablePeriod, Workload, plan_capacity

BillingMode = Literal["PAY_PER_REQUEST", "PROVISIONED"]

#: A new on-demand table can already take this many writes/s: warm throughput
#: at or below it changes nothing, so it is not requested.
ON_DEMAND_INITIAL_WRITES_PER_S = 4_000
#: DynamoDB's default per-table provisioned quota; higher needs a quota increase.
DEFAULT_TABLE_WCU_QUOTA = 40_000
#: Tags the rotator puts on every table it creates, and reads before it dials a
#: table down or drops it: a table without them was not created by this rotator.
MANAGED_BY_TAG = "timeseries:managed-by"
MANAGED_BY_VALUE = "rotator"
PREFIX_TAG = "timeseries:table-prefix"
PERIOD_TAG = "timeseries:period"
_RESERVED_TAGS = frozenset({MANAGED_BY_TAG, PREFIX_TAG, PERIOD_TAG})
_MAX_TAGS = 50

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_ACCOUNT = re.compile(r"^\d{12}$")
_FUNCTION_ARN = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9$_-]+)?$")
_DESTINATION_ARN = re.compile(r"^arn:aws[a-z-]*:(sqs|sns|s3):[a-z0-9-]*:\d{0,12}:?[A-Za-z0-9._-]+$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$")
_TAG_TEXT = re.compile(r"^[\w\s.:/=+\-@]*$", re.UNICODE)


@dataclass(frozen=True, slots=True)
class MappingSettings:
    """How each table's stream feeds the hot-key Lambda."""

    function_arn: str
    batch_size: int
    batching_window_s: int
    max_retries: int
    max_record_age_s: int
    parallelization: int
    tumbling_window_s: int | None
    on_failure_arn: str | None


@dataclass(frozen=True, slots=True)
class AlarmSettings:
    """The three alarms every table gets."""

    topic_arn: str | None
    threshold: int
    evaluation_minutes: int
    datapoints: int


@dataclass(frozen=True, slots=True)
class ExportSettings:
    bucket: str
    prefix: str
    bucket_owner: str | None

    def prefix_for(self, table: str) -> str:
        return f"{self.prefix}/{table}" if self.prefix else table


@dataclass(frozen=True, slots=True)
class CapacitySettings:
    """Capacity of new tables and of cold ones."""

    billing_mode: BillingMode
    write_capacity: int | None
    read_capacity: int
    min_write_capacity: int
    old_read_capacity: int
    warm_writes_per_s: int | None


@dataclass(frozen=True, slots=True)
class RotatorSettings:
    common: CommonSettings
    period: TablePeriod
    prebuild_periods: int
    grace_ms: int
    dial_down_delay_ms: int
    capacity: CapacitySettings
    point_in_time_recovery: bool
    deletion_protection: bool
    table_tags: dict[str, str]
    export: ExportSettings | None
    mapping: MappingSettings | None
    alarms: AlarmSettings | None
    max_deletes_per_run: int
    dry_run: bool
    allow_now_override: bool
    deadline_margin_ms: int
    notes: tuple[str, ...] = field(default=())

    @property
    def table_prefix(self) -> str:
        return self.common.layout.table_prefix

    @property
    def retention_ms(self) -> int:
        return self.common.retention_ms

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RotatorSettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        period = common.layout.table_period
        if period is None:
            raise SettingsError(
                "TABLE_PERIOD",
                "is required by the rotator (hour, day, week or month): with one table there is nothing to rotate",
            )
        grace = duration_ms(env, "GRACE", "2h")
        delay = duration_ms(env, "DIAL_DOWN_DELAY", "15m")
        if grace + delay >= common.retention_ms:
            raise SettingsError(
                "GRACE",
                "GRACE plus DIAL_DOWN_DELAY must be shorter than RETENTION: a table would be due for dropping "
                "while it still takes late readings",
            )
        notes: list[str] = []
        export = _export(env)
        return cls(
            common=common,
            period=period,
            prebuild_periods=integer(env, "PREBUILD_PERIODS", 2, 1, 366),
            grace_ms=grace,
            dial_down_delay_ms=delay,
            capacity=_capacity(env, notes),
            # An export reads the table's point-in-time backup, so a bucket forces PITR on.
            point_in_time_recovery=boolean(env, "POINT_IN_TIME_RECOVERY", True) or export is not None,
            deletion_protection=boolean(env, "DELETION_PROTECTION", True),
            table_tags=_tags(env),
            export=export,
            mapping=_mapping(env),
            alarms=_alarms(env),
            max_deletes_per_run=integer(env, "MAX_DELETES_PER_RUN", 2, 0, 100),
            dry_run=boolean(env, "DRY_RUN", False),
            allow_now_override=boolean(env, "ALLOW_NOW_OVERRIDE", False),
            deadline_margin_ms=integer(env, "DEADLINE_MARGIN_MS", 10_000, 0, 600_000),
            notes=tuple(notes),
        )


def boolean(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in ("true", "false"):
        raise SettingsError(name, f"{env[name]!r} is not true or false")
    return raw == "true"


def _optional(env: Mapping[str, str], name: str) -> str | None:
    return env.get(name, "").strip() or None


def _matching(env: Mapping[str, str], name: str, pattern: re.Pattern[str], what: str) -> str | None:
    value = _optional(env, name)
    if value is not None and not pattern.match(value):
        raise SettingsError(name, f"{value!r} is not {what}")
    return value


def _capacity(env: Mapping[str, str], notes: list[str]) -> CapacitySettings:
    mode = (env.get("BILLING_MODE", "").strip() or "PAY_PER_REQUEST").upper()
    if mode not in ("PAY_PER_REQUEST", "PROVISIONED"):
        raise SettingsError("BILLING_MODE", f"{env['BILLING_MODE']!r} is not PAY_PER_REQUEST or PROVISIONED")
    planned = _planned_write_units(env)
    write: int | None = None
    warm: int | None = None
    if mode == "PROVISIONED":
        if env.get("WRITE_CAPACITY", "").strip():
            write = integer(env, "WRITE_CAPACITY", None, 1, 1_000_000)
        elif planned is not None:
            write = planned
        else:
            raise SettingsError(
                "WRITE_CAPACITY",
                "is required with BILLING_MODE=PROVISIONED unless PEAK_WRITES_PER_S lets the planner size it",
            )
        if write > DEFAULT_TABLE_WCU_QUOTA:
            notes.append(
                f"WRITE_CAPACITY {write:,} is above DynamoDB's default per-table quota of "
                f"{DEFAULT_TABLE_WCU_QUOTA:,} WCU: table creation fails unless the quota was raised"
            )
    else:
        raw_warm = env.get("WARM_WRITES_PER_S", "").strip()
        warm = integer(env, "WARM_WRITES_PER_S", None, 1, 10_000_000) if raw_warm else planned
        if warm is not None and warm <= ON_DEMAND_INITIAL_WRITES_PER_S:
            notes.append(
                f"warm throughput {warm:,} writes/s is within the {ON_DEMAND_INITIAL_WRITES_PER_S:,} a new "
                "on-demand table already takes: not requested"
            )
            warm = None
    read = integer(env, "READ_CAPACITY", 100, 1, 1_000_000)
    min_write = integer(env, "MIN_WRITE_CAPACITY", 1, 1, 1_000_000)
    old_read = integer(env, "OLD_READ_CAPACITY", 10, 1, 1_000_000)
    if write is not None and min_write > write:
        raise SettingsError(
            "MIN_WRITE_CAPACITY", f"{min_write:,} is above the write capacity of a new table ({write:,})"
        )
    return CapacitySettings(
        billing_mode=cast(BillingMode, mode),
        write_capacity=write,
        read_capacity=read,
        min_write_capacity=min_write,
        old_read_capacity=old_read,
        warm_writes_per_s=warm,
    )


def _planned_write_units(env: Mapping[str, str]) -> int | None:
    """Write units a new table needs for PEAK_WRITES_PER_S, at the target utilisation."""
    raw_peak = env.get("PEAK_WRITES_PER_S", "").strip()
    if not raw_peak:
        return None
    peak = integer(env, "PEAK_WRITES_PER_S", None, 1, 10_000_000)
    item_bytes = integer(env, "ITEM_BYTES", 500, 1, 400 * 1024)
    target = integer(env, "TARGET_UTILISATION_PERCENT", 70, 20, 100)
    try:
        plan = plan_capacity(Workload(peak_writes_per_s=float(peak), item_bytes=item_bytes))
    except InvalidInput as exc:  # pragma: no cover - the bounds above already hold
        raise SettingsError("PEAK_WRITES_PER_S", exc.reason) from None
    return max(1, math.ceil(plan.peak_wcu * 100 / target))


def _tags(env: Mapping[str, str]) -> dict[str, str]:
    raw = env.get("TABLE_TAGS", "").strip()
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SettingsError("TABLE_TAGS", f"is not JSON ({exc.msg}); expected an object of strings") from None
    if not isinstance(parsed, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()):
        raise SettingsError("TABLE_TAGS", 'must be a JSON object of strings, e.g. {"team": "iot"}')
    tags = cast(dict[str, str], parsed)
    if len(tags) + len(_RESERVED_TAGS) > _MAX_TAGS:
        raise SettingsError("TABLE_TAGS", f"holds {len(tags)} tags; at most {_MAX_TAGS - len(_RESERVED_TAGS)} fit")
    for key, value in tags.items():
        if key in _RESERVED_TAGS:
            raise SettingsError("TABLE_TAGS", f"{key!r} is set by the rotator itself")
        if not 1 <= len(key) <= 128 or key.lower().startswith("aws:") or not _TAG_TEXT.match(key):
            raise SettingsError("TABLE_TAGS", f"{key!r} is not a tag key (1-128 characters, not 'aws:...')")
        if len(value) > 256 or not _TAG_TEXT.match(value):
            raise SettingsError("TABLE_TAGS", f"the value of {key!r} is not a tag value (0-256 characters)")
    return dict(tags)


def _export(env: Mapping[str, str]) -> ExportSettings | None:
    bucket = _matching(env, "EXPORT_BUCKET", _BUCKET, "an S3 bucket name")
    if bucket is None:
        return None
    prefix = env.get("EXPORT_PREFIX", "dynamodb-exports").strip().strip("/")
    if len(prefix) > 768:
        raise SettingsError("EXPORT_PREFIX", "is longer than 768 characters")
    owner = _matching(env, "EXPORT_BUCKET_OWNER", _ACCOUNT, "a 12-digit AWS account id")
    return ExportSettings(bucket=bucket, prefix=prefix, bucket_owner=owner)


def _mapping(env: Mapping[str, str]) -> MappingSettings | None:
    function_arn = _matching(env, "HOTKEYS_FUNCTION_ARN", _FUNCTION_ARN, "a Lambda function ARN")
    if function_arn is None:
        return None
    tumbling = env.get("HOTKEYS_TUMBLING_WINDOW_S", "").strip()
    return MappingSettings(
        function_arn=function_arn,
        batch_size=integer(env, "HOTKEYS_BATCH_SIZE", 1_000, 1, 10_000),
        batching_window_s=integer(env, "HOTKEYS_BATCHING_WINDOW_S", 1, 0, 300),
        # No -1 (retry forever) and no -1 age: the point is that a poison batch cannot block a shard.
        max_retries=integer(env, "HOTKEYS_MAX_RETRIES", 5, 0, 10_000),
        max_record_age_s=integer(env, "HOTKEYS_MAX_RECORD_AGE_S", 3_600, 60, 604_800),
        parallelization=integer(env, "HOTKEYS_PARALLELIZATION", 1, 1, 10),
        tumbling_window_s=integer(env, "HOTKEYS_TUMBLING_WINDOW_S", None, 0, 900) if tumbling else None,
        on_failure_arn=_matching(env, "HOTKEYS_ON_FAILURE_ARN", _DESTINATION_ARN, "an SQS, SNS or S3 ARN"),
    )


def _alarms(env: Mapping[str, str]) -> AlarmSettings | None:
    topic = _matching(env, "ALARM_TOPIC_ARN", _TOPIC_ARN, "an SNS topic ARN")
    if not boolean(env, "ALARMS", True):
        return None
    evaluation = integer(env, "ALARM_EVALUATION_MINUTES", 5, 1, 1_440)
    datapoints = integer(env, "ALARM_DATAPOINTS", 3, 1, 1_440)
    if datapoints > evaluation:
        raise SettingsError("ALARM_DATAPOINTS", f"{datapoints} is above ALARM_EVALUATION_MINUTES ({evaluation})")
    return AlarmSettings(
        topic_arn=topic,
        threshold=integer(env, "ALARM_THRESHOLD", 1, 1, 1_000_000_000),
        evaluation_minutes=evaluation,
        datapoints=datapoints,
    )
