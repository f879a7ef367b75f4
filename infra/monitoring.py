"""Monitoring: alarms on everything that can go wrong without anyone noticing, and one dashboard.

Every alarm notifies the alerts topic on ALARM and on OK. Missing data is not
breaching (a quiet system is a healthy one), except for the rotator's
``PeriodsReady``: no rotation run in an hour is itself the problem.

Per-period tables get their three alarms from the rotator when it creates
them (``<table>-write-throttles``, ``-read-throttles``, ``-system-errors``),
so here only the tables the stack owns are alarmed.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from aws_cdk import Duration, Stack
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import DYNAMODB_STREAM_RETENTION_S, METRICS_NAMESPACE, Context, LambdaFunction
from infra.lambdas import HelperFunction

ONE_MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
ONE_HOUR = Duration.hours(1)
#: "Sustained": breaching in 3 of the last 5 one-minute periods (as the rotator's per-table alarms).
SUSTAINED = (5, 3)
THROTTLE_EVENTS = ("WriteThrottleEvents", "ReadThrottleEvents")
AT_LEAST = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
#: The functions that read the shard map (and count ``ShardMapFallbacks`` when it is malformed).
SHARD_MAP_READERS = (
    LambdaFunction.INGEST,
    LambdaFunction.QUERY,
    LambdaFunction.HOTKEYS,
    LambdaFunction.ROLLUP,
    LambdaFunction.COMPACTION,
)


#: A table the stack owns, with the operations whose SystemErrors count for it.
WatchedTable = tuple[dynamodb.ITableV2, Sequence[dynamodb.Operation]]


class Monitoring(Construct):
    """The stack's alarms and its dashboard."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: Context,
        topic: sns.ITopic,
        tables: Mapping[str, WatchedTable],
        stream: kinesis.IStream,
        functions: Mapping[LambdaFunction | HelperFunction, lambda_.IFunction],
        queues: Mapping[str, sqs.IQueue],
        api: apigateway.RestApi,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        #: :func:`alarm` on this construct and the topic; the dashboard's status widget lists them all.
        self.alarm = functools.partial(alarm, self, topic)

        for name, (table, operations) in tables.items():
            for event in THROTTLE_EVENTS:
                self.alarm(
                    f"{name}-{event.removesuffix('ThrottleEvents').lower()}-throttles",
                    table.metric(event, statistic="Sum", period=ONE_MINUTE),
                    f"The {name} table throttles ({event}): a hot partition key or too little capacity",
                )
            self.alarm(
                f"{name}-system-errors",
                table.metric_system_errors_for_operations(operations=list(operations), period=ONE_MINUTE),
                f"DynamoDB answers 5xx (SystemErrors) on the {name} table",
            )
        behind_s = config.iterator_age_alarm_s
        # The ingest mapping's own iterator age, not the stream's GetRecords one: that is the oldest of every
        # reader's, and a replay (tsctl replay) reads records days old.
        self.alarm(
            "ingest-iterator-age",
            functions[LambdaFunction.INGEST].metric("IteratorAge", statistic="Maximum", period=ONE_MINUTE),
            f"Ingest is more than {behind_s} s behind the Kinesis stream",
            threshold=behind_s * 1_000,
        )
        self.alarm(
            "stream-write-throttles",
            stream.metric_write_provisioned_throughput_exceeded(statistic="Sum", period=ONE_MINUTE),
            "Producers are throttled by the Kinesis stream (WriteProvisionedThroughputExceeded): add shards",
        )
        for function, fn in functions.items():
            failures = (
                ("errors", fn.metric_errors, "failed invocations (whole batches or requests, not single readings)"),
                ("throttles", fn.metric_throttles, "is throttled: account concurrency is exhausted"),
            )
            for kind, metric, what in failures:
                self.alarm(
                    f"{function.value}-{kind}",
                    metric(statistic="Sum", period=FIVE_MINUTES),
                    f"The {function.value} function {what}",
                    periods=(1, 1),
                )
        self.alarm(
            "ingest-unexpected-rejects",
            custom_metric("ReadingsRejectedUnexpectedly", LambdaFunction.INGEST, period=FIVE_MINUTES),
            "Ingest rejected readings that raised while being validated: a bug (the payloads are "
            "on the rejects queue with field 'reading'; see the ingest function's error log)",
            periods=(1, 1),
        )
        readers = [f for f in SHARD_MAP_READERS if f in functions]
        self.alarm(
            "shard-map-fallbacks",
            cloudwatch.MathExpression(
                expression=f"SUM([{','.join(f'm{n}' for n in range(len(readers)))}])",
                using_metrics={
                    f"m{n}": custom_metric("ShardMapFallbacks", f, period=FIVE_MINUTES) for n, f in enumerate(readers)
                },
                label="ShardMapFallbacks",
                period=FIVE_MINUTES,
            ),
            "A function found the stored shard map malformed and works from the last good map it holds "
            "(a cold start fails instead). The hot-key detector replaces the map at its next judged window "
            "if it holds a good one at least as new; if this stays in ALARM, see docs/hotkeys.md (failures)",
            periods=(1, 1),
        )
        # DynamoDB streams publish no iterator age of their own; the mapping's is the one.
        self.alarm(
            "hotkeys-iterator-age",
            functions[LambdaFunction.HOTKEYS].metric("IteratorAge", statistic="Maximum", period=ONE_MINUTE),
            f"The hot-key detector is more than {behind_s} s behind the stream",
            threshold=behind_s * 1_000,
        )
        for name, queue in queues.items():
            self.alarm(
                f"{name}-not-empty",
                queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=ONE_MINUTE),
                f"The {name} queue holds messages: each is a reading, a batch or a run an operator should look at",
                periods=(1, 1),
            )
        # A failure queue's message names a range of its stream, readable (tsctl replay) only while the
        # stream keeps it, and a replayed reading older than max_age by then is rejected (its way back
        # publishes it anew, so a later correction may lose to it: docs/client.md): the age of the oldest
        # message is alarmed at half of the shorter, a day or more before.
        retention_s, max_age_s = config.kinesis_retention_hours * 3600, config.max_age_ms // 1000
        limits = {
            "ingest-failures": (
                min(retention_s, max_age_s),
                f"its stream forgets the records it names {retention_s // 3600} h after they arrived, and a reading "
                f"older than max_age ({max_age_s / 3600:g} h) when replayed is rejected",
            ),
            "hotkeys-failures": (
                DYNAMODB_STREAM_RETENTION_S,
                f"its stream forgets the records it names {DYNAMODB_STREAM_RETENTION_S // 3600} h after they arrived",
            ),
        }
        for name, (limit_s, why) in limits.items():
            if name in queues:
                self.alarm(
                    f"{name}-oldest-age",
                    queues[name].metric_approximate_age_of_oldest_message(statistic="Maximum", period=FIVE_MINUTES),
                    f"The oldest message of the {name} queue is {limit_s / 7200:g} h old: {why}; "
                    "replay them now (tsctl replay)",
                    threshold=limit_s // 2,
                    periods=(1, 1),
                )
        self.alarm(
            "api-5xx",
            api.metric_server_error(statistic="Sum", period=ONE_MINUTE),
            "The query API answers 5xx: a fault in the function or DynamoDB throttling after retries",
        )
        if config.table_period is not None:
            rotator = LambdaFunction.ROTATOR
            self.alarm(
                "rotation-periods-ready",
                custom_metric("PeriodsReady", rotator, statistic="Minimum", period=ONE_HOUR),
                "The next period's readings table is not ready (or the rotator has not run for an hour)",
                threshold=2,
                periods=(1, 1),
                comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
                # No run in an hour means no table is being built.
                missing=cloudwatch.TreatMissingData.BREACHING,
            )
            interval = Duration.minutes(config.rotation_interval_minutes())
            self.alarm(
                "rotation-errors",
                custom_metric("RotationErrors", rotator, period=interval),
                "Three rotation runs in a row reported errors (see the rotator's 'rotation run' log lines)",
                periods=(3, 3),
            )
            self.alarm(
                "rotation-tables-overdue",
                custom_metric("TablesOverdue", rotator, statistic="Maximum", period=ONE_HOUR),
                "A readings table is still there a day past its drop and cannot be retired (no ownership tags, "
                "an export given up or that no backup can show, a status other than ACTIVE): tables pile up "
                "toward the account's quota; see the rotator's 'rotation run' log lines (docs/rotation.md)",
                periods=(1, 1),
            )

        self.dashboard = self._dashboard(tables, stream, functions, queues, api)

    # -- dashboard -----------------------------------------------------------------------

    def _dashboard(
        self,
        tables: Mapping[str, WatchedTable],
        stream: kinesis.IStream,
        functions: Mapping[LambdaFunction | HelperFunction, lambda_.IFunction],
        queues: Mapping[str, sqs.IQueue],
        api: apigateway.RestApi,
    ) -> cloudwatch.Dashboard:
        config = self._config
        ingest = LambdaFunction.INGEST
        hot = LambdaFunction.HOTKEYS
        rows: list[list[cloudwatch.IWidget]] = [
            [
                _graph(
                    "Ingest rate (readings per minute)",
                    [
                        custom_metric(name, ingest)
                        for name in ("ReadingsReceived", "ReadingsWritten", "ReadingsRejected", "ReadingsHandedBack")
                    ]
                    + [stream.metric_incoming_records(statistic="Sum", period=ONE_MINUTE, label="Kinesis records in")],
                ),
                _graph(
                    "Rejects and failed batches (messages waiting)",
                    [
                        queue.metric_approximate_number_of_messages_visible(
                            statistic="Maximum", period=ONE_MINUTE, label=name
                        )
                        for name, queue in queues.items()
                    ],
                ),
            ],
            [
                _graph(
                    "Hot keys (per judged window)",
                    [custom_metric(name, hot) for name in ("HotKeys", "SplitsScheduled", "ScaleDownsScheduled")],
                    right=[custom_metric("HottestKeyWriteUnitsPerSecond", hot, statistic="Maximum")],
                ),
                _graph(
                    "Iterator age (ms)",
                    [
                        functions[ingest].metric(
                            "IteratorAge", statistic="Maximum", period=ONE_MINUTE, label="Kinesis (ingest)"
                        ),
                        functions[hot].metric(
                            "IteratorAge", statistic="Maximum", period=ONE_MINUTE, label="DynamoDB stream (hot keys)"
                        ),
                    ],
                ),
            ],
            [
                _graph(
                    "Throttles",
                    [
                        stream.metric_write_provisioned_throughput_exceeded(
                            statistic="Sum", period=ONE_MINUTE, label="Kinesis writes"
                        ),
                        custom_metric("ThrottledCalls", ingest),
                        *self._table_throttles(tables),
                        *(
                            fn.metric_throttles(statistic="Sum", period=ONE_MINUTE, label=f"{function.value} Lambda")
                            for function, fn in functions.items()
                        ),
                    ],
                ),
                _graph(
                    "Function errors",
                    [
                        fn.metric_errors(statistic="Sum", period=ONE_MINUTE, label=function.value)
                        for function, fn in functions.items()
                    ],
                ),
            ],
            [
                _graph(
                    "Query API",
                    [
                        api.metric_count(statistic="Sum", period=ONE_MINUTE),
                        api.metric_client_error(statistic="Sum", period=ONE_MINUTE),
                        api.metric_server_error(statistic="Sum", period=ONE_MINUTE),
                    ],
                    right=[api.metric_latency(statistic="p99", period=ONE_MINUTE)],
                ),
                cloudwatch.AlarmStatusWidget(title="Alarms", alarms=self._alarms(), width=12, height=6),
            ],
        ]
        if config.table_period is not None:
            rotator = LambdaFunction.ROTATOR
            rows.append(
                [
                    _graph(
                        "Rotation",
                        [
                            custom_metric(name, rotator, period=ONE_HOUR)
                            for name in ("TablesCreated", "TablesDialledDown", "TablesDeleted", "RotationErrors")
                        ],
                        right=[custom_metric("PeriodsReady", rotator, statistic="Minimum", period=ONE_HOUR)],
                    )
                ]
            )
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=config.stack_name)
        for row in rows:
            dashboard.add_widgets(*row)
        return dashboard

    def _alarms(self) -> list[cloudwatch.IAlarm]:
        return [child for child in self.node.children if isinstance(child, cloudwatch.Alarm)]

    def _table_throttles(self, tables: Mapping[str, WatchedTable]) -> list[cloudwatch.IMetric]:
        metrics: list[cloudwatch.IMetric] = [
            table.metric(event, statistic="Sum", period=ONE_MINUTE, label=f"{name} {event}")
            for name, (table, _) in tables.items()
            for event in THROTTLE_EVENTS
        ]
        if self._config.table_period is not None:
            # The per-period tables come and go: find them by name.
            prefix = self._config.table_prefix
            metrics.append(
                cloudwatch.MathExpression(
                    expression=(
                        f'SEARCH(\'{{AWS/DynamoDB,TableName}} MetricName="WriteThrottleEvents" "{prefix}"\', '
                        "'Sum', 60)"
                    ),
                    label="readings tables WriteThrottleEvents",
                    period=ONE_MINUTE,
                )
            )
        return metrics


def alarm(
    scope: Construct,
    topic: sns.ITopic,
    slug: str,
    metric: cloudwatch.IMetric,
    what: str,
    *,
    threshold: float = 1,
    periods: tuple[int, int] = SUSTAINED,
    comparison: cloudwatch.ComparisonOperator = AT_LEAST,
    missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
) -> cloudwatch.Alarm:
    """An alarm ``<stack>-<slug>`` on ``metric`` that notifies ``topic`` on ALARM and OK; ``what`` describes it.

    By default it raises on a metric at or above 1 in 3 of 5 periods, and a quiet metric is healthy.
    """
    evaluation, datapoints = periods
    made = cloudwatch.Alarm(
        scope,
        "".join(part.capitalize() for part in slug.split("-")) + "Alarm",
        alarm_name=f"{Stack.of(scope).stack_name}-{slug}",
        alarm_description=what,
        metric=metric,
        threshold=threshold,
        evaluation_periods=evaluation,
        datapoints_to_alarm=datapoints,
        comparison_operator=comparison,
        treat_missing_data=missing,
    )
    action = actions.SnsAction(topic)
    made.add_alarm_action(action)
    made.add_ok_action(action)
    return made


def custom_metric(
    name: str, function: LambdaFunction, *, statistic: str = "Sum", period: Duration = ONE_MINUTE
) -> cloudwatch.Metric:
    """One of the functions' own EMF metrics (Powertools: dimension ``service``)."""
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": function.value},
        statistic=statistic,
        period=period,
    )


def _graph(
    title: str, left: Sequence[cloudwatch.IMetric], *, right: Sequence[cloudwatch.IMetric] = ()
) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=list(left), right=list(right), width=12, height=6)
