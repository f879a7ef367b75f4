"""Settings of the rotator Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings`; ``TABLE_PERIOD`` is
required here. docs/configuration.md lists every variable (from the model).

"planner": when ``WRITE_CAPACITY`` (provisioned) or ``WARM_WRITES_PER_S``
(on-demand) is not set and ``PEAK_WRITES_PER_S`` is, the figure is the
planner's peak WCU (``keydesign.plan_capacity``) divided by the target
utilisation. A provisioned table without either is refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Self, cast

from pydantic import PrivateAttr, model_validator

from adapters.settings import CommonSettings, DurationMs, Flag, env
from keydesign import TablePeriod, Workload, plan_capacity
from keydesign.periods import format_duration

BillingMode = Literal["PAY_PER_REQUEST", "PROVISIONED"]
ContributorInsights = Literal["throttled_keys", "accessed_and_throttled_keys", "off"]

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
#: Time kept back from the Lambda timeout: the run stops starting work this long before it.
DEADLINE_MARGIN_MS = 10_000


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
    billing_mode: BillingMode = env("BILLING_MODE", "PAY_PER_REQUEST")
    """PAY_PER_REQUEST or PROVISIONED, for new tables."""
    period_write_capacity: int | None = env("WRITE_CAPACITY", None, ge=1)
    """WCU of a new provisioned table; unset: the planner's, from PEAK_WRITES_PER_S."""
    period_read_capacity: int = env("READ_CAPACITY", 100, ge=1)
    """RCU of a new provisioned table."""
    warm_writes_per_s: int | None = env("WARM_WRITES_PER_S", None, ge=1)
    """On-demand warm throughput of a new table (writes/s); unset: the planner's, if any."""
    peak_writes_per_s: int | None = env("PEAK_WRITES_PER_S", None, ge=1)
    """Planner input: peak readings per second."""
    item_bytes: int = env("ITEM_BYTES", 500, ge=1)
    """Planner input: stored item size in bytes."""
    autoscaling_target_percent: int = env("TARGET_UTILISATION_PERCENT", 70, ge=1, le=100)
    """Planner: peak as a share of what is provisioned."""
    point_in_time_recovery: Flag = env("POINT_IN_TIME_RECOVERY", True)
    """Enable PITR on new tables (forced on with EXPORT_BUCKET)."""
    deletion_protection: Flag = env("DELETION_PROTECTION", True)
    """Create tables deletion-protected (lifted just before drop)."""
    contributor_insights: ContributorInsights = env("CONTRIBUTOR_INSIGHTS", "off")
    """Contributor Insights mode of open tables (off once a table closes)."""
    infrequent_access_storage_percent: int | None = env("INFREQUENT_ACCESS_STORAGE_PERCENT", None, ge=0)
    """A closed table moves to Standard-IA once its storage costs at least this percent of its requests
    (docs/rotation.md); unset: never."""
    export_bucket: str | None = env("EXPORT_BUCKET", None)
    """S3 bucket for the export made before a table is dropped."""
    export_prefix: str = env("EXPORT_PREFIX", "dynamodb-exports")
    """Key prefix of those exports (`<prefix>/<table>`)."""
    hotkeys_function_arn: str | None = env("HOTKEYS_FUNCTION_ARN", None)
    """Hot-key Lambda fed by every table's stream; unset: no mapping."""
    hotkeys_batch_size: int = env("HOTKEYS_BATCH_SIZE", 1_000)
    """Stream batch size."""
    hotkeys_batching_window_s: int = env("HOTKEYS_BATCHING_WINDOW_S", 1)
    """Batching window in seconds."""
    hotkeys_max_retries: int = env("HOTKEYS_MAX_RETRIES", 5)
    """Retries of a failing batch."""
    hotkeys_max_record_age_s: int = env("HOTKEYS_MAX_RECORD_AGE_S", 3_600)
    """Oldest record sent to the function."""
    hotkeys_parallelization_factor: int = env("HOTKEYS_PARALLELIZATION", 1)
    """Concurrent batches per stream shard."""
    hotkeys_on_failure_arn: str | None = env("HOTKEYS_ON_FAILURE_ARN", None)
    """SQS queue, SNS topic or S3 bucket ARN for dropped batches."""
    alert_topic_arn: str | None = env("ALARM_TOPIC_ARN", None)
    """SNS topic the per-table alarms notify (ALARM and OK); unset: alarms without actions."""
    max_deletes_per_run: int = env("MAX_DELETES_PER_RUN", 2, ge=0)
    """Tables one run may drop (0 = never drop)."""
    dry_run: Flag = env("DRY_RUN", False)
    """Report only, change nothing (an event can ask for it too)."""
    allow_now_override: Flag = env("ALLOW_NOW_OVERRIDE", False)
    """Let a live run take `now` from its event (tests, local)."""
    _capacity: CapacitySettings = PrivateAttr()
    _notes: tuple[str, ...] = PrivateAttr()

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
            f"grace ({format_duration(self.grace_ms)}) plus dial_down_delay "
            f"({format_duration(self.dial_down_delay_ms)}) must be shorter than retention "
            f"({format_duration(self.retention_ms)}): a table would be due for dropping while it still takes "
            "late readings",
        )
        self._capacity, self._notes = self._plan_capacity()
        return self

    def _plan_capacity(self) -> tuple[CapacitySettings, tuple[str, ...]]:
        planned = None
        if self.peak_writes_per_s is not None:
            plan = plan_capacity(Workload(peak_writes_per_s=float(self.peak_writes_per_s), item_bytes=self.item_bytes))
            planned = max(1, math.ceil(plan.peak_wcu * 100 / self.autoscaling_target_percent))
        notes: list[str] = []
        write = warm = None
        if self.billing_mode == "PROVISIONED":
            write = self.period_write_capacity if self.period_write_capacity is not None else planned
            self.check(
                write is not None,
                "period_write_capacity",
                "is required with billing_mode PROVISIONED and a table_period, unless peak_writes_per_s lets the "
                "rotator size new tables",
            )
            if cast(int, write) > DEFAULT_TABLE_WCU_QUOTA:
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
        return CapacitySettings(self.billing_mode, write, self.period_read_capacity, warm), tuple(notes)

    @property
    def capacity(self) -> CapacitySettings:
        """Capacity of new tables and of cold ones."""
        return self._capacity

    @property
    def notes(self) -> tuple[str, ...]:
        return self._notes

    @property
    def period(self) -> TablePeriod:
        return cast(TablePeriod, self.layout.table_period)  # the validator requires TABLE_PERIOD

    @property
    def pitr_enabled(self) -> bool:
        # An export reads the table's point-in-time backup, so a bucket forces PITR on.
        return self.point_in_time_recovery or self.export_bucket is not None

    def export_prefix_for(self, table: str) -> str:
        prefix = self.export_prefix.strip("/")
        return f"{prefix}/{table}" if prefix else table
