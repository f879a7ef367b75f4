"""Settings of the rotator Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings`; ``TABLE_PERIOD`` is
required here. docs/configuration.md lists every variable (from the model).

"planner": when ``WRITE_CAPACITY`` (provisioned) or ``WARM_WRITES_PER_S``
(on-demand) is not set and ``PEAK_WRITES_PER_S`` is, the figure is the
planner's peak WCU (``keydesign.plan_capacity``) divided by the target
utilisation. A provisioned table without either is refused.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Literal, Self, cast

from pydantic import BeforeValidator, model_validator

from adapters.settings import CommonSettings, DurationMs, Flag, deadline_margin, env, matching
from keydesign import TablePeriod, Workload, plan_capacity

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
    """Capacity of new tables (a closed table is on-demand, whatever it was made with)."""

    billing_mode: BillingMode
    write_capacity: int | None
    read_capacity: int
    warm_writes_per_s: int | None


class RotatorSettings(CommonSettings):
    dial_down_delay_ms: DurationMs = env("DIAL_DOWN_DELAY", "15m")
    """Extra wait after GRACE before a table is closed (covers ingest's timeout)."""
    billing_mode: str = env("BILLING_MODE", "PAY_PER_REQUEST")
    """PAY_PER_REQUEST or PROVISIONED, for new tables."""
    write_capacity: int | None = env("WRITE_CAPACITY", None, ge=1, le=1_000_000)
    """WCU of a new provisioned table; unset: the planner's, from PEAK_WRITES_PER_S."""
    read_capacity: int = env("READ_CAPACITY", 100, ge=1, le=1_000_000)
    """RCU of a new provisioned table."""
    warm_writes_per_s: int | None = env("WARM_WRITES_PER_S", None, ge=1, le=10_000_000)
    """On-demand warm throughput of a new table (writes/s); unset: the planner's, if any."""
    peak_writes_per_s: int | None = env("PEAK_WRITES_PER_S", None, ge=1, le=10_000_000)
    """Planner input: peak readings per second."""
    item_bytes: int = env("ITEM_BYTES", 500, ge=1, le=400 * 1024)
    """Planner input: stored item size in bytes."""
    target_utilisation_percent: int = env("TARGET_UTILISATION_PERCENT", 70, ge=20, le=100)
    """Planner: peak as a share of what is provisioned."""
    point_in_time_recovery_setting: Flag = env("POINT_IN_TIME_RECOVERY", True)
    """Enable PITR on new tables (forced on with EXPORT_BUCKET)."""
    deletion_protection: Flag = env("DELETION_PROTECTION", True)
    """Create tables deletion-protected (lifted just before drop)."""
    contributor_insights: Literal["throttled_keys", "accessed_and_throttled_keys", "off"] = env(
        "CONTRIBUTOR_INSIGHTS", "off"
    )
    """Contributor Insights mode of open tables (off once a table closes)."""
    infrequent_access_storage_percent: int | None = env("INFREQUENT_ACCESS_STORAGE_PERCENT", None, ge=0, le=100_000)
    """A closed table moves to Standard-IA once its storage costs at least this percent of its requests
    (docs/rotation.md); unset: never."""
    table_tags_json: str | None = env("TABLE_TAGS", None)
    """JSON object of extra tags for tables and alarms."""
    export_bucket: Annotated[str, matching(_BUCKET, "an S3 bucket name")] | None = env("EXPORT_BUCKET", None)
    """S3 bucket for the export made before a table is dropped."""
    export_prefix: Annotated[str, BeforeValidator(lambda v: str(v).strip("/"))] = env(
        "EXPORT_PREFIX", "dynamodb-exports", max_length=768
    )
    """Key prefix of those exports (`<prefix>/<table>`)."""
    export_bucket_owner: Annotated[str, matching(_ACCOUNT, "a 12-digit AWS account id")] | None = env(
        "EXPORT_BUCKET_OWNER", None
    )
    """12-digit account owning the bucket, if another account."""
    hotkeys_function_arn: Annotated[str, matching(_FUNCTION_ARN, "a Lambda function ARN")] | None = env(
        "HOTKEYS_FUNCTION_ARN", None
    )
    """Hot-key Lambda fed by every table's stream; unset: no mapping."""
    hotkeys_batch_size: int = env("HOTKEYS_BATCH_SIZE", 1_000, ge=1, le=10_000)
    """Stream batch size."""
    hotkeys_batching_window_s: int = env("HOTKEYS_BATCHING_WINDOW_S", 1, ge=0, le=300)
    """Batching window in seconds."""
    # No -1 (retry forever) and no -1 age: the point is that a poison batch cannot block a shard.
    hotkeys_max_retries: int = env("HOTKEYS_MAX_RETRIES", 5, ge=0, le=10_000)
    """Retries of a failing batch."""
    hotkeys_max_record_age_s: int = env("HOTKEYS_MAX_RECORD_AGE_S", 3_600, ge=60, le=604_800)
    """Oldest record sent to the function."""
    hotkeys_parallelization: int = env("HOTKEYS_PARALLELIZATION", 1, ge=1, le=10)
    """Concurrent batches per stream shard."""
    hotkeys_tumbling_window_s: int | None = env("HOTKEYS_TUMBLING_WINDOW_S", None, ge=0, le=900)
    """Tumbling window in seconds, for windowed state."""
    hotkeys_on_failure_arn: Annotated[str, matching(_DESTINATION_ARN, "an SQS, SNS or S3 ARN")] | None = env(
        "HOTKEYS_ON_FAILURE_ARN", None
    )
    """SQS queue, SNS topic or S3 bucket ARN for dropped batches."""
    alarms_on: Flag = env("ALARMS", True)
    """Create the per-table throttling and error alarms."""
    alarm_topic_arn: Annotated[str, matching(_TOPIC_ARN, "an SNS topic ARN")] | None = env("ALARM_TOPIC_ARN", None)
    """SNS topic the alarms notify (ALARM and OK)."""
    alarm_threshold: int = env("ALARM_THRESHOLD", 1, ge=1, le=1_000_000_000)
    """Events in one minute that count as a breaching minute."""
    alarm_evaluation_minutes: int = env("ALARM_EVALUATION_MINUTES", 5, ge=1, le=1_440)
    """Minutes looked at."""
    alarm_datapoints: int = env("ALARM_DATAPOINTS", 3, ge=1, le=1_440)
    """Breaching minutes among them that raise the alarm."""
    max_deletes_per_run: int = env("MAX_DELETES_PER_RUN", 2, ge=0, le=100)
    """Tables one run may drop (0 = never drop)."""
    dry_run: Flag = env("DRY_RUN", False)
    """Report only, change nothing (an event can ask for it too)."""
    allow_now_override: Flag = env("ALLOW_NOW_OVERRIDE", False)
    """Let a live run take `now` from its event (tests, local)."""
    deadline_margin_ms: int = deadline_margin(10_000, most_ms=600_000)

    @model_validator(mode="after")
    def _rules(self) -> Self:
        self.check(
            self.table_period is not None,
            "table_period",
            "is required by the rotator (hour, day, week or month): with one table there is nothing to rotate",
        )
        self.check(
            self.grace_ms + self.dial_down_delay_ms < self.retention_ms,
            "grace_ms",
            "GRACE plus DIAL_DOWN_DELAY must be shorter than RETENTION: a table would be due for dropping "
            "while it still takes late readings",
        )
        self.check(
            self.billing_mode.upper() in ("PAY_PER_REQUEST", "PROVISIONED"),
            "billing_mode",
            f"{self.billing_mode!r} is not PAY_PER_REQUEST or PROVISIONED",
        )
        self.check(
            self.alarm_datapoints <= self.alarm_evaluation_minutes,
            "alarm_datapoints",
            f"{self.alarm_datapoints} is above ALARM_EVALUATION_MINUTES ({self.alarm_evaluation_minutes})",
        )
        self.capacity  # noqa: B018 - built here so a bad combination fails at cold start
        self.table_tags  # noqa: B018
        return self

    @property
    def period(self) -> TablePeriod:
        return cast(TablePeriod, self.layout.table_period)  # the validator requires TABLE_PERIOD

    @property
    def point_in_time_recovery(self) -> bool:
        # An export reads the table's point-in-time backup, so a bucket forces PITR on.
        return self.point_in_time_recovery_setting or self.export_bucket is not None

    @property
    def export(self) -> ExportSettings | None:
        return None if self.export_bucket is None else self.view(ExportSettings, "export_")

    @property
    def mapping(self) -> MappingSettings | None:
        return None if self.hotkeys_function_arn is None else self.view(MappingSettings, "hotkeys_")

    @property
    def alarms(self) -> AlarmSettings | None:
        return self.view(AlarmSettings, "alarm_") if self.alarms_on else None

    @cached_property
    def _capacity_and_notes(self) -> tuple[CapacitySettings, tuple[str, ...]]:
        mode = cast(BillingMode, self.billing_mode.upper())
        planned = self._planned_write_units()
        notes: list[str] = []
        write: int | None = None
        warm: int | None = None
        if mode == "PROVISIONED":
            write = self.write_capacity if self.write_capacity is not None else planned
            if write is None:
                raise self.invalid(
                    "write_capacity",
                    "is required with BILLING_MODE=PROVISIONED unless PEAK_WRITES_PER_S lets the planner size it",
                )
            if write > DEFAULT_TABLE_WCU_QUOTA:
                notes.append(
                    f"WRITE_CAPACITY {write:,} is above DynamoDB's default per-table quota of "
                    f"{DEFAULT_TABLE_WCU_QUOTA:,} WCU: table creation fails unless the quota was raised"
                )
        else:
            warm = self.warm_writes_per_s if self.warm_writes_per_s is not None else planned
            if warm is not None and warm <= ON_DEMAND_INITIAL_WRITES_PER_S:
                notes.append(
                    f"warm throughput {warm:,} writes/s is within the {ON_DEMAND_INITIAL_WRITES_PER_S:,} a new "
                    "on-demand table already takes: not requested"
                )
                warm = None
        capacity = CapacitySettings(mode, write, self.read_capacity, warm)
        return capacity, tuple(notes)

    @property
    def capacity(self) -> CapacitySettings:
        """Capacity of new tables and of cold ones."""
        return self._capacity_and_notes[0]

    @property
    def notes(self) -> tuple[str, ...]:
        return self._capacity_and_notes[1]

    def _planned_write_units(self) -> int | None:
        """Write units a new table needs for PEAK_WRITES_PER_S, at the target utilisation."""
        if self.peak_writes_per_s is None:
            return None
        plan = plan_capacity(Workload(peak_writes_per_s=float(self.peak_writes_per_s), item_bytes=self.item_bytes))
        return max(1, math.ceil(plan.peak_wcu * 100 / self.target_utilisation_percent))

    @cached_property
    def table_tags(self) -> dict[str, str]:
        if self.table_tags_json is None:
            return {}
        try:
            parsed = json.loads(self.table_tags_json)
        except json.JSONDecodeError as exc:
            raise self.invalid("table_tags_json", f"is not JSON ({exc.msg}); expected an object of strings") from None
        self.check(
            isinstance(parsed, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()),
            "table_tags_json",
            'must be a JSON object of strings, e.g. {"team": "iot"}',
        )
        tags = cast(dict[str, str], parsed)
        room = _MAX_TAGS - len(_RESERVED_TAGS)
        self.check(len(tags) <= room, "table_tags_json", f"holds {len(tags)} tags; at most {room} fit")
        for key, value in tags.items():
            self.check(key not in _RESERVED_TAGS, "table_tags_json", f"{key!r} is set by the rotator itself")
            self.check(
                1 <= len(key) <= 128 and not key.lower().startswith("aws:") and bool(_TAG_TEXT.match(key)),
                "table_tags_json",
                f"{key!r} is not a tag key (1-128 characters, not 'aws:...')",
            )
            self.check(
                len(value) <= 256 and bool(_TAG_TEXT.match(value)),
                "table_tags_json",
                f"the value of {key!r} is not a tag value (0-256 characters)",
            )
        return dict(tags)
