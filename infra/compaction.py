"""Compaction: the compaction function, the schedule that runs it, its grants and alarms.

Ingest writes the write tier (group items, dense marks) into the readings tables; the
compaction function reads each settled hour of it once and writes the compacted blocks beside
them, and moves its watermark, the one item it keeps in the control table (``compactstate``,
``keydesign.writetier.STATE_PK``). With rollups it also writes its part of them in the control
table (group partials, its parts of the totals, re-marks) and reads and deletes the redo requests
the rollup function puts: those keys (``keydesign.rollup.COMPACTION_KEYS``), the state and the write
tier's start items ingest writes (``keydesign.writetier.START_KEYS``, queried by a first run) are the
only control-table keys it may touch besides reading the shard map (``dynamodb:LeadingKeys``).
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import LambdaFunction
from infra.lambdas import Invocation, LambdaRuntime, ServiceFunction, run_on_schedule
from infra.monitoring import alarm, custom_metric
from infra.storage import Storage
from keydesign.periods import format_duration
from keydesign.rollup import COMPACTION_KEYS
from keydesign.writetier import KEEP_MS, START_KEYS, STATE_PK

#: The write tier is this far behind (CompactionLagSeconds: now minus the end of the last hour compacted)
#: before the lag alarm fires. Normal is an hour, its settle time and a schedule period (about 70 minutes);
#: group items expire KEEP_MS (4 days) after their hour, and an hour not compacted by then loses readings.
LAG_ALARM_S = 3 * 3_600
#: The re-pack is this far behind (RepackLagSeconds: now minus the later of the re-pack's and compaction's
#: watermarks) before its alarm fires. Normal is 9 to 14 minutes (a slice, the grace, the settle time and a
#: schedule period). Nothing is lost while it lags: readers read the group items of the slices it has not
#: re-packed, at up to a few read units more per device read (docs/writetier.md).
REPACK_LAG_ALARM_S = 30 * 60
#: On compaction's rollup keys: puts (BatchWriteItem), the hour's partials, totals and redo requests
#: (Query), a handled redo request (DeleteItem).
COMPACTION_ACTIONS = ("dynamodb:BatchWriteItem", "dynamodb:Query", "dynamodb:DeleteItem")


class Compaction(Construct):
    """The compaction function and its schedule."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        runtime: LambdaRuntime,
        storage: Storage,
        alerts_topic: sns.ITopic,
    ) -> None:
        super().__init__(scope, construct_id)
        config = runtime.config
        every = config.compaction_every_minutes
        self.compaction = ServiceFunction(
            self,
            "Compaction",
            runtime=runtime,
            function=LambdaFunction.COMPACTION,
            description=f"Compacts each settled hour of the write tier ({config.write_tier_groups} groups) into blocks",
            invocation=Invocation.SCHEDULE,
            failures_hold="a compaction run that failed or could not be delivered (the next run starts from its state)",
        )
        self.function = self.compaction.function
        self.failure_queue = self.compaction.failure_queue
        storage.grant_readings_query(self.function)
        storage.grant_readings_write(self.function)
        storage.grant_shard_map_read(self.function)
        storage.grant_control_keys(self.function, ["dynamodb:GetItem", "dynamodb:PutItem"], [STATE_PK])
        storage.grant_control_keys(self.function, ["dynamodb:Query"], START_KEYS)
        if config.rollups:
            storage.grant_control_keys(self.function, list(COMPACTION_ACTIONS), COMPACTION_KEYS)
        # A run the next one would repeat is superseded by it.
        self.schedule = run_on_schedule(
            self,
            runs=self.compaction,
            what="compaction function",
            minutes=every,
            retries=0,
        )
        period = Duration.minutes(every)
        self.lag = custom_metric("CompactionLagSeconds", LambdaFunction.COMPACTION, statistic="Maximum", period=period)
        self.repack_lag = custom_metric(
            "RepackLagSeconds", LambdaFunction.COMPACTION, statistic="Maximum", period=period
        )
        self.corrupt = custom_metric("CompactionCorruptItems", LambdaFunction.COMPACTION, period=period)
        self.compacted = custom_metric("ReadingsCompacted", LambdaFunction.COMPACTION, period=period)
        # No data is a stopped function: its Errors alarm and the failure queue cover that.
        alarm(
            self,
            alerts_topic,
            "compaction-lag",
            self.lag,
            f"The write tier is more than {LAG_ALARM_S // 3600} hours behind: its group items expire "
            f"{format_duration(KEEP_MS)} after their hour, and readings of an hour not compacted by then are lost; "
            "see the compaction function's errors and log (docs/writetier.md)",
            threshold=LAG_ALARM_S,
            periods=(2, 2),
        )
        alarm(
            self,
            alerts_topic,
            "repack-lag",
            self.repack_lag,
            f"The re-pack of the newest hour is more than {REPACK_LAG_ALARM_S // 60} minutes behind: no reading is "
            "lost, but reads of one device in the slices not re-packed read its group's items (more read units); "
            "see the compaction function's errors and log (docs/writetier.md)",
            threshold=REPACK_LAG_ALARM_S,
            periods=(3, 3),
        )
        # Once is enough: a corrupt item is counted each time its hour is compacted, which is once.
        alarm(
            self,
            alerts_topic,
            "compaction-corrupt-items",
            self.corrupt,
            "A write-tier item did not decode (or a dense mark named no entity) and was left in place; the "
            "compaction function's log names its table, key and reason (docs/writetier.md)",
            periods=(1, 1),
        )

    def widgets(self) -> list[cloudwatch.IWidget]:
        """The dashboard row: the lags, and readings compacted beside corrupt items."""
        return [
            cloudwatch.GraphWidget(
                title="Compaction and re-pack lag (s)", left=[self.lag, self.repack_lag], width=12, height=6
            ),
            cloudwatch.GraphWidget(
                title="Readings compacted, corrupt items",
                left=[self.compacted],
                right=[self.corrupt],
                width=12,
                height=6,
            ),
        ]
