"""Rollups: the rollup function, the schedule that runs it every minute, its grants and alarms.

Ingest marks what changed, the rollup function recomputes it (and asks compaction
to redo an entity-hour a late reading took from it) and the query
function reads the results, all in the control table; each may reach only its
own partition keys there (``dynamodb:LeadingKeys``, patterns from
``keydesign.rollup``), so none of them can touch the shard map through a rollup grant.
"""

from __future__ import annotations

from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.config import LambdaFunction
from infra.lambdas import Invocation, LambdaRuntime, ServiceFunction, run_on_schedule
from infra.monitoring import alarm, custom_metric
from infra.storage import Storage
from keydesign.rollup import MARK_KEYS, PARTIAL_KEYS, READ_KEYS, REDO_KEYS

#: Control-table actions of the rollup function: read marks, rollups and state; put rollups, deferred marks, state.
ROLLUP_ACTIONS = (
    "dynamodb:Query",
    "dynamodb:GetItem",
    "dynamodb:BatchGetItem",
    "dynamodb:PutItem",
    "dynamodb:BatchWriteItem",
)
#: The rollups are this far behind (RollupLagSeconds) before the lag alarm fires: ten missed runs.
LAG_ALARM_S = 600


class Rollups(Construct):
    """The rollup function and its every-minute schedule."""

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
        self.rollup = ServiceFunction(
            self,
            "Rollup",
            runtime=runtime,
            function=LambdaFunction.ROLLUP,
            description=f"Recomputes the {config.rollups} rollups of what ingest marked, every minute",
            invocation=Invocation.SCHEDULE,
            failures_hold="a rollup run that failed or could not be delivered (the next run starts from the watermark)",
        )
        self.function = self.rollup.function
        self.failure_queue = self.rollup.failure_queue
        storage.grant_readings_query(self.function)
        storage.grant_shard_map_read(self.function)
        storage.grant_control_keys(self.function, list(ROLLUP_ACTIONS), (*MARK_KEYS, *READ_KEYS))
        # A late reading of an entity-hour compaction counted: a redo request for compaction (docs/rollups.md).
        storage.grant_control_keys(self.function, ["dynamodb:BatchWriteItem"], REDO_KEYS)
        # A mark late past its re-pack slice: does the slice's partial leave its minute out? (fresh totals)
        storage.grant_control_keys(self.function, ["dynamodb:GetItem"], PARTIAL_KEYS)
        # A run older than a minute is superseded by the next one.
        self.schedule = run_on_schedule(
            self,
            runs=self.rollup,
            what="rollup function",
            minutes=1,
            retries=0,
        )
        self.lag = custom_metric("RollupLagSeconds", LambdaFunction.ROLLUP, statistic="Maximum")
        self.late = custom_metric("RollupLateMarks", LambdaFunction.ROLLUP)
        self.set_aside = custom_metric("RollupIntervalsSetAside", LambdaFunction.ROLLUP)
        # No data is a stopped function: its Errors alarm and the failure queue cover that.
        alarm(
            self,
            alerts_topic,
            "rollup-lag",
            self.lag,
            "The rollups are more than 10 minutes behind",
            threshold=LAG_ALARM_S,
            periods=(3, 3),
        )
        alarm(
            self,
            alerts_topic,
            "rollup-late-marks",
            self.late,
            "Marks older than max_age were not applied (ingest admits no such reading: clocks disagree, or "
            "an ingest of another max_age); their intervals' rollups are stale (raw data is kept)",
            periods=(3, 3),
        )
        # Once is enough: an interval is set aside once, and stays so until its readings are sent again.
        alarm(
            self,
            alerts_topic,
            "rollup-set-aside",
            self.set_aside,
            "A rollup interval was set aside: a block of its readings does not decode, or DynamoDB refused its "
            "item; the API marks it (set_aside) and the rollup function's log names it and the reason",
            periods=(1, 1),
        )

    def widgets(self) -> list[cloudwatch.IWidget]:
        """The dashboard row: lag, late marks and intervals set aside."""
        return [
            cloudwatch.GraphWidget(title="Rollup lag (s)", left=[self.lag], width=12, height=6),
            cloudwatch.GraphWidget(
                title="Rollup late marks, intervals set aside", left=[self.late, self.set_aside], width=12, height=6
            ),
        ]
