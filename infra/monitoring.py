"""Monitoring: alarms on everything that can go wrong without anyone noticing, and one dashboard.

Every alarm notifies the alerts topic on ALARM and on OK. Missing data is not
breaching (a quiet system is a healthy one), except for the rotator's
``PeriodsReady``: no rotation run in an hour is itself the problem.

Per-period tables get their three alarms from the rotator when it creates
them (``<table>-write-throttles``, ``-read-throttles``, ``-system-errors``),
so here only the tables the stack owns are alarmed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_kinesis as kinesis
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import METRICS_NAMESPACE, AppConfig, LambdaFunction
from infra.lambdas import HelperFunction

ONE_MINUTE = Duration.minutes(1)
FIVE_MINUTES = Duration.minutes(5)
ONE_HOUR = Duration.hours(1)
#: "Sustained": breaching in 3 of the last 5 one-minute periods (as the rotator's per-table alarms).
SUSTAINED = (5, 3)
AT_LEAST = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD


@dataclass(frozen=True, slots=True)
class WatchedTable:
    """A table the stack owns, with the operations whose SystemErrors count for it."""

    table: dynamodb.ITableV2
    operations: tuple[dynamodb.Operation, ...]


class Monitoring(Construct):
    """The stack's alarms and its dashboard."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: AppConfig,
        topic: sns.ITopic,
        tables: Mapping[str, WatchedTable],
        stream: kinesis.IStream,
        functions: Mapping[LambdaFunction | HelperFunction, lambda_.IFunction],
        queues: Mapping[str, sqs.IQueue],
        api: apigateway.RestApi,
    ) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self._action = actions.SnsAction(topic)
        self.alarms: list[cloudwatch.Alarm] = []

        for name, watched in tables.items():
            self._table_alarms(name, watched)
        self._stream_alarms(stream)
        for function, fn in functions.items():
            self._function_alarms(function, fn)
        for name, queue in queues.items():
            self._alarm(
                f"{name}-not-empty",
                queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=ONE_MINUTE),
                threshold=1,
                periods=(1, 1),
                what=f"The {name} queue holds messages: each is a reading, a batch or a run an operator should look at",
            )
        self._alarm(
            "api-5xx",
            api.metric_server_error(statistic="Sum", period=ONE_MINUTE),
            threshold=1,
            periods=SUSTAINED,
            what="The query API answers 5xx: a fault in the function or DynamoDB throttling after retries",
        )
        if config.table_period is not None:
            self._rotation_alarms()

        self.dashboard = self._dashboard(tables, stream, functions, queues, api)

    # -- alarms --------------------------------------------------------------------------

    def _table_alarms(self, name: str, watched: WatchedTable) -> None:
        table = watched.table
        for event in ("WriteThrottleEvents", "ReadThrottleEvents"):
            self._alarm(
                f"{name}-{'write' if event.startswith('Write') else 'read'}-throttles",
                table.metric(event, statistic="Sum", period=ONE_MINUTE),
                threshold=1,
                periods=SUSTAINED,
                what=f"The {name} table throttles ({event}): a hot partition key or too little capacity",
            )
        self._alarm(
            f"{name}-system-errors",
            table.metric_system_errors_for_operations(operations=list(watched.operations), period=ONE_MINUTE),
            threshold=1,
            periods=SUSTAINED,
            what=f"DynamoDB answers 5xx (SystemErrors) on the {name} table",
        )

    def _stream_alarms(self, stream: kinesis.IStream) -> None:
        age_ms = self._config.iterator_age_alarm_s * 1_000
        self._alarm(
            "stream-iterator-age",
            stream.metric_get_records_iterator_age_milliseconds(statistic="Maximum", period=ONE_MINUTE),
            threshold=age_ms,
            periods=SUSTAINED,
            what=f"Ingest is more than {self._config.iterator_age_alarm_s} s behind the Kinesis stream",
        )
        self._alarm(
            "stream-write-throttles",
            stream.metric_write_provisioned_throughput_exceeded(statistic="Sum", period=ONE_MINUTE),
            threshold=1,
            periods=SUSTAINED,
            what="Producers are throttled by the Kinesis stream (WriteProvisionedThroughputExceeded): add shards",
        )

    def _function_alarms(self, function: LambdaFunction | HelperFunction, fn: lambda_.IFunction) -> None:
        name = function.value
        self._alarm(
            f"{name}-errors",
            fn.metric_errors(statistic="Sum", period=FIVE_MINUTES),
            threshold=1,
            periods=(1, 1),
            what=f"The {name} function failed invocations (whole batches or requests, not single readings)",
        )
        self._alarm(
            f"{name}-throttles",
            fn.metric_throttles(statistic="Sum", period=FIVE_MINUTES),
            threshold=1,
            periods=(1, 1),
            what=f"The {name} function is throttled: account concurrency is exhausted",
        )
        if function is LambdaFunction.INGEST:
            self._alarm(
                "ingest-unexpected-rejects",
                _custom("ReadingsRejectedUnexpectedly", function, statistic="Sum", period=FIVE_MINUTES),
                threshold=1,
                periods=(1, 1),
                what="Ingest rejected readings that raised while being validated: a bug (the payloads are "
                "on the rejects queue with field 'reading'; see the ingest function's error log)",
            )
        if function is LambdaFunction.HOTKEYS:
            # DynamoDB streams publish no iterator age of their own; the mapping's is the one.
            self._alarm(
                "hotkeys-iterator-age",
                fn.metric("IteratorAge", statistic="Maximum", period=ONE_MINUTE),
                threshold=self._config.iterator_age_alarm_s * 1_000,
                periods=SUSTAINED,
                what=f"The hot-key detector is more than {self._config.iterator_age_alarm_s} s behind the stream",
            )

    def _rotation_alarms(self) -> None:
        interval = Duration.minutes(self._config.rotation_interval_minutes())
        self._alarm(
            "rotation-periods-ready",
            _custom("PeriodsReady", LambdaFunction.ROTATOR, statistic="Minimum", period=ONE_HOUR),
            threshold=2,
            periods=(1, 1),
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            # No run in an hour means no table is being built.
            missing=cloudwatch.TreatMissingData.BREACHING,
            what="The next period's readings table is not ready (or the rotator has not run for an hour)",
        )
        self._alarm(
            "rotation-errors",
            _custom("RotationErrors", LambdaFunction.ROTATOR, statistic="Sum", period=interval),
            threshold=1,
            periods=(3, 3),
            what="Three rotation runs in a row reported errors (see the rotator's 'rotation run' log lines)",
        )

    def _alarm(
        self,
        slug: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        periods: tuple[int, int],
        what: str,
        comparison: cloudwatch.ComparisonOperator = AT_LEAST,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        evaluation, datapoints = periods
        alarm = cloudwatch.Alarm(
            self,
            _construct_id(slug),
            alarm_name=f"{self._config.stack_name}-{slug}",
            alarm_description=what,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation,
            datapoints_to_alarm=datapoints,
            comparison_operator=comparison,
            treat_missing_data=missing,
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        self.alarms.append(alarm)
        return alarm

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
                        _custom(name, ingest, statistic="Sum", period=ONE_MINUTE)
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
                    [
                        _custom("HotKeys", hot, statistic="Sum", period=ONE_MINUTE),
                        _custom("SplitsScheduled", hot, statistic="Sum", period=ONE_MINUTE),
                        _custom("ScaleDownsScheduled", hot, statistic="Sum", period=ONE_MINUTE),
                    ],
                    right=[_custom("HottestKeyWriteUnitsPerSecond", hot, statistic="Maximum", period=ONE_MINUTE)],
                ),
                _graph(
                    "Iterator age (ms)",
                    [
                        stream.metric_get_records_iterator_age_milliseconds(
                            statistic="Maximum", period=ONE_MINUTE, label="Kinesis (ingest)"
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
                        _custom("ThrottledCalls", ingest, statistic="Sum", period=ONE_MINUTE),
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
                cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=12, height=6),
            ],
        ]
        if config.table_period is not None:
            rotator = LambdaFunction.ROTATOR
            rows.append(
                [
                    _graph(
                        "Rotation",
                        [
                            _custom(name, rotator, statistic="Sum", period=ONE_HOUR)
                            for name in ("TablesCreated", "TablesDialledDown", "TablesDeleted", "RotationErrors")
                        ],
                        right=[_custom("PeriodsReady", rotator, statistic="Minimum", period=ONE_HOUR)],
                    )
                ]
            )
        dashboard = cloudwatch.Dashboard(self, "Dashboard", dashboard_name=config.stack_name)
        for row in rows:
            dashboard.add_widgets(*row)
        return dashboard

    def _table_throttles(self, tables: Mapping[str, WatchedTable]) -> list[cloudwatch.IMetric]:
        metrics: list[cloudwatch.IMetric] = []
        for name, watched in tables.items():
            for event in ("WriteThrottleEvents", "ReadThrottleEvents"):
                metrics.append(watched.table.metric(event, statistic="Sum", period=ONE_MINUTE, label=f"{name} {event}"))
        if self._config.table_period is not None:
            # The per-period tables come and go: find them by name.
            prefix = self._config.storage.table_prefix
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


def _custom(name: str, function: LambdaFunction, *, statistic: str, period: Duration) -> cloudwatch.Metric:
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


def _construct_id(slug: str) -> str:
    return "".join(part.capitalize() for part in slug.split("-")) + "Alarm"
