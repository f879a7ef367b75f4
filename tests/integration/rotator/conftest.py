"""moto-backed AWS for the rotator: the hot-key function, an SNS topic, a dead-letter
queue and an export bucket, plus helpers to build rotators on their own clients
(so fault hooks on one never touch another), a controllable clock, a record of
every call, and a snapshot of everything the rotator owns.

What moto cannot do is made here, on the client, with botocore event hooks
(``before-call`` raises the service's error, ``after-call`` edits the parsed
response), never by faking the rotator's own code:

* moto creates tables ACTIVE at once: a hook reports CREATING;
* moto keeps no capacity-decrease count: a hook reports one;
* moto accepts a second mapping between one stream and one function, which
  Lambda refuses with ResourceConflictException: :func:`lambda_conflict_rule`
  adds Lambda's rule back;
* moto ignores ExportTableToPointInTime's ClientToken (each call is a new export);
* moto implements no Contributor Insights and ignores UpdateTable's TableClass:
  :class:`AccountExtras` answers those calls and adds the class to DescribeTable,
  on every client a :class:`World` makes;
* moto reports no DynamoDB metrics and a TableSizeBytes of 0: tests that need
  them edit GetMetricData's and DescribeTable's answers.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError

from adapters.observability import metrics
from doubles.clocks import ManualClock
from keydesign import parse_timestamp
from rotator.logic import Rotator
from rotator.settings import RotatorSettings
from tests.integration.mocked_aws import mocked_aws

REGION = "eu-west-1"
PREFIX = "readings"
HOUR = 3_600_000
DAY = 24 * HOUR
MINUTE = 60_000

pytestmark = pytest.mark.integration

#: Calls that change nothing; every other operation is a change.
READ_ONLY = ("Describe", "List", "Get")


def at(text: str) -> int:
    """Epoch ms of an RFC 3339 time."""
    return parse_timestamp(text)


@dataclass
class Ticks:
    """A monotonic clock in seconds that only the test's sleeps move: a wait takes no time."""

    now_s: float = 0.0
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now_s += seconds


@dataclass
class CallLog:
    """Every operation a set of clients sent, in order."""

    operations: list[str] = field(default_factory=list)

    def hook(self, model: Any, **_: Any) -> None:
        self.operations.append(model.name)

    @property
    def changes(self) -> list[str]:
        return [op for op in self.operations if not op.startswith(READ_ONLY)]

    def clear(self) -> None:
        self.operations.clear()


@dataclass
class Clients:
    dynamodb: Any
    lambda_: Any
    cloudwatch: Any
    log: CallLog

    def all(self) -> list[Any]:
        return [self.dynamodb, self.lambda_, self.cloudwatch]

    def fail(
        self,
        operation: str,
        code: str,
        *,
        times: int = 1,
        when: Callable[[dict[str, Any]], bool] = lambda params: True,
        message: str = "injected",
    ) -> list[dict[str, Any]]:
        """Make the next ``times`` calls of ``operation`` (whose params satisfy ``when``)
        raise ``code``, before anything reaches moto. Returns the params of the calls failed."""
        failed: list[dict[str, Any]] = []

        def raise_error(params: dict[str, Any], model: Any, **_: Any) -> None:
            if len(failed) < times and when(params):
                failed.append(dict(params))
                raise ClientError({"Error": {"Code": code, "Message": message}}, model.name)

        for api in self.all():
            if operation in api.meta.service_model.operation_names:
                event = api.meta.service_model.service_id.hyphenize()
                api.meta.events.register(f"provide-client-params.{event}.{operation}", raise_error)
                return failed
        raise AssertionError(f"no client has {operation}")

    def edit(self, operation: str, editor: Callable[[dict[str, Any]], None]) -> None:
        """Let ``editor`` change every parsed response of ``operation`` (what moto cannot say)."""

        def after(parsed: dict[str, Any], **_: Any) -> None:
            editor(parsed)

        for api in self.all():
            if operation in api.meta.service_model.operation_names:
                event = api.meta.service_model.service_id.hyphenize()
                api.meta.events.register(f"after-call.{event}.{operation}", after)
                return
        raise AssertionError(f"no client has {operation}")


def lambda_conflict_rule(clients: Clients, lambda_: Any) -> None:
    """Lambda refuses a second mapping between the same stream and function; moto does not."""

    def refuse(params: dict[str, Any], model: Any, **_: Any) -> None:
        existing = lambda_.list_event_source_mappings(FunctionName=params["FunctionName"])["EventSourceMappings"]
        if any(m["EventSourceArn"] == params["EventSourceArn"] for m in existing):
            raise ClientError(
                {"Error": {"Code": "ResourceConflictException", "Message": "mapping already exists"}}, model.name
            )

    clients.lambda_.meta.events.register("provide-client-params.lambda.CreateEventSourceMapping", refuse)


@dataclass
class AccountExtras:
    """What moto does not keep for DynamoDB tables, kept here for every client of the account:
    each table's Contributor Insights (status, mode) and its table class once changed; and its
    creation time on the tests' clock (moto stamps the wall clock; a table made through a client
    without these extras, such as a foreign one, is described without one)."""

    insights: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    classes: dict[str, str] = field(default_factory=dict)
    created: dict[str, int] = field(default_factory=dict)
    #: The clock of the last rotator made: tables it creates are stamped with it.
    clock: Callable[[], int] | None = None

    def install(self, dynamodb: Any) -> None:
        events = dynamodb.meta.events
        events.register("before-call.dynamodb.DescribeContributorInsights", self._describe_insights)
        events.register("before-call.dynamodb.UpdateContributorInsights", self._update_insights)
        events.register("provide-client-params.dynamodb.UpdateTable", self._update_class)
        events.register("after-call.dynamodb.DescribeTable", self._describe_class)
        events.register("after-call.dynamodb.CreateTable", self._created)

    @staticmethod
    def _answer(parsed: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
        return AWSResponse("https://dynamodb.local/", 200, {}, None), parsed

    def _describe_insights(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        name = json.loads(params["body"])["TableName"]
        status, mode = self.insights.get(name, ("DISABLED", None))
        answer = {"TableName": name, "ContributorInsightsStatus": status}
        return self._answer({**answer, "ContributorInsightsMode": mode} if mode else answer)

    def _update_insights(self, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        body = json.loads(params["body"])
        name, enable = body["TableName"], body["ContributorInsightsAction"] == "ENABLE"
        # Enabled at once, as moto makes tables ACTIVE at once (DynamoDB passes through ENABLING).
        self.insights[name] = ("ENABLED", body.get("ContributorInsightsMode")) if enable else ("DISABLED", None)
        return self._answer({"TableName": name, "ContributorInsightsStatus": self.insights[name][0]})

    def _update_class(self, params: dict[str, Any], **_: Any) -> None:
        if "TableClass" in params:
            self.classes[params["TableName"]] = params["TableClass"]

    def _describe_class(self, parsed: dict[str, Any], **_: Any) -> None:
        table = parsed.get("Table")
        if table is not None and table["TableName"] in self.classes:
            table["TableClassSummary"] = {"TableClass": self.classes[table["TableName"]]}
        if table is not None:
            created = self.created.get(table["TableName"])
            table.pop("CreationDateTime", None)
            if created is not None:
                table["CreationDateTime"] = datetime.fromtimestamp(created / 1000, UTC)

    def _created(self, parsed: dict[str, Any], **_: Any) -> None:
        if self.clock is not None and "TableDescription" in parsed:
            self.created[parsed["TableDescription"]["TableName"]] = self.clock()


@dataclass
class World:
    """The moto account: what the rotator made, read back through plain clients."""

    dynamodb: Any
    lambda_: Any
    cloudwatch: Any
    s3: Any
    function_arn: str
    topic_arn: str
    dead_letter_arn: str
    bucket: str
    env: dict[str, str]
    extras: AccountExtras = field(default_factory=AccountExtras)

    def clients(self) -> Clients:
        log = CallLog()
        made = Clients(
            boto3.client("dynamodb", region_name=REGION),
            boto3.client("lambda", region_name=REGION),
            boto3.client("cloudwatch", region_name=REGION),
            log,
        )
        for api in made.all():
            api.meta.events.register("before-call.*.*", log.hook)
        self.extras.install(made.dynamodb)
        return made

    def settings(self, **overrides: str) -> RotatorSettings:
        return RotatorSettings.from_env({**self.env, **overrides})

    def rotator(
        self, clock: ManualClock[int], clients: Clients | None = None, *, ticks: Ticks | None = None, **overrides: str
    ) -> tuple[Rotator, Clients]:
        """A rotator on ``clock``; its run's time (and its waits) on ``ticks`` when given, else the real ones."""
        clients = clients or self.clients()
        self.extras.clock = clock
        rotator = Rotator(
            self.settings(**overrides),
            dynamodb=clients.dynamodb,
            lambda_client=clients.lambda_,
            cloudwatch=clients.cloudwatch,
            clock_ms=clock,
            **({"monotonic": ticks, "sleep": ticks.sleep} if ticks is not None else {}),
        )
        return rotator, clients

    # -- reading the world back -------------------------------------------------

    def table_names(self) -> list[str]:
        pages = self.dynamodb.get_paginator("list_tables").paginate()
        return sorted(name for page in pages for name in page["TableNames"])

    def ours(self) -> list[str]:
        return [n for n in self.table_names() if n.startswith(f"{PREFIX}-")]

    def table(self, name: str) -> dict[str, Any]:
        return self.dynamodb.describe_table(TableName=name)["Table"]

    def capacity(self, name: str) -> tuple[int, int]:
        throughput = self.table(name)["ProvisionedThroughput"]
        return throughput["WriteCapacityUnits"], throughput["ReadCapacityUnits"]

    def billing(self, name: str) -> str:
        return str(self.table(name)["BillingModeSummary"]["BillingMode"])

    def table_class(self, name: str) -> str:
        return self.extras.classes.get(name, "STANDARD")

    def insights(self, name: str) -> str | None:
        """The Contributor Insights mode of a table, None when off."""
        return self.extras.insights.get(name, ("DISABLED", None))[1]

    def tags(self, name: str) -> dict[str, str]:
        arn = self.table(name)["TableArn"]
        return {t["Key"]: t["Value"] for t in self.dynamodb.list_tags_of_resource(ResourceArn=arn)["Tags"]}

    def ttl(self, name: str) -> dict[str, Any]:
        return dict(self.dynamodb.describe_time_to_live(TableName=name)["TimeToLiveDescription"])

    def pitr(self, name: str) -> str:
        description = self.dynamodb.describe_continuous_backups(TableName=name)["ContinuousBackupsDescription"]
        return str(description["PointInTimeRecoveryDescription"]["PointInTimeRecoveryStatus"])

    def mappings(self) -> list[dict[str, Any]]:
        return list(self.lambda_.list_event_source_mappings(FunctionName=self.function_arn)["EventSourceMappings"])

    def mapped_tables(self) -> list[str]:
        """Tables whose current stream feeds the hot-key function (one entry per mapping)."""
        return sorted(m["EventSourceArn"].split(":table/")[1].split("/stream/")[0] for m in self.mappings())

    def alarms(self) -> list[dict[str, Any]]:
        return list(self.cloudwatch.describe_alarms()["MetricAlarms"])

    def alarm_names(self) -> list[str]:
        return sorted(a["AlarmName"] for a in self.alarms())

    def put_alarm_by_hand(self, name: str, metric: str, threshold: float, **extra: Any) -> None:
        """An alarm on a table's DynamoDB ``metric`` (a sum a minute over ``threshold``) that a person
        put, not the rotator."""
        self.cloudwatch.put_metric_alarm(
            AlarmName=name,
            Namespace="AWS/DynamoDB",
            MetricName=metric,
            Statistic="Sum",
            Period=60,
            EvaluationPeriods=1,
            Threshold=threshold,
            ComparisonOperator="GreaterThanOrEqualToThreshold",
            **extra,
        )

    def create_foreign(self, name: str, **extra: Any) -> None:
        """A table the rotator did not make (no tags)."""
        self.dynamodb.create_table(
            TableName=name,
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            **{"BillingMode": "PAY_PER_REQUEST", **extra},
        )


def _dummy_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def handler(event, context):\n    return None\n")
    return buffer.getvalue()


def base_env(function_arn: str, topic_arn: str, dead_letter_arn: str) -> dict[str, str]:
    return {
        "LAYOUT": "hybrid",
        "SHARDS": "4",
        "BUCKET": "1h",
        "TABLE_PREFIX": PREFIX,
        "TABLE_PERIOD": "day",
        "RETENTION": "7d",
        "PREBUILD_PERIODS": "2",
        "GRACE": "2h",
        "DIAL_DOWN_DELAY": "15m",
        "BILLING_MODE": "PROVISIONED",
        "WRITE_CAPACITY": "2000",
        "READ_CAPACITY": "100",
        "CONTRIBUTOR_INSIGHTS": "throttled_keys",
        "INFREQUENT_ACCESS_STORAGE_PERCENT": "50",
        "HOTKEYS_FUNCTION_ARN": function_arn,
        "HOTKEYS_ON_FAILURE_ARN": dead_letter_arn,
        "ALARM_TOPIC_ARN": topic_arn,
        "MAX_DELETES_PER_RUN": "2",
    }


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with mocked_aws(monkeypatch, REGION, service="rotator"):
        iam = boto3.client("iam", region_name=REGION)
        role = iam.create_role(RoleName="hotkeys", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        lambda_ = boto3.client("lambda", region_name=REGION)
        function_arn = lambda_.create_function(
            FunctionName="hotkeys",
            Runtime="python3.12",
            Role=role,
            Handler="handler.handler",
            Code={"ZipFile": _dummy_zip()},
        )["FunctionArn"]
        topic_arn = boto3.client("sns", region_name=REGION).create_topic(Name="alarms")["TopicArn"]
        sqs = boto3.client("sqs", region_name=REGION)
        queue_url = sqs.create_queue(QueueName="hotkeys-dlq")["QueueUrl"]
        dead_letter_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket="readings-archive", CreateBucketConfiguration={"LocationConstraint": REGION})
        metrics.clear_metrics()
        yield World(
            dynamodb=boto3.client("dynamodb", region_name=REGION),
            lambda_=lambda_,
            cloudwatch=boto3.client("cloudwatch", region_name=REGION),
            s3=s3,
            function_arn=function_arn,
            topic_arn=topic_arn,
            dead_letter_arn=dead_letter_arn,
            bucket="readings-archive",
            env=base_env(function_arn, topic_arn, dead_letter_arn),
        )
        metrics.clear_metrics()


def days(start: str, count: int) -> list[str]:
    """Table names of ``count`` consecutive days from ``start`` (YYYY-MM-DD)."""
    first = datetime.fromisoformat(start).replace(tzinfo=UTC)
    return [f"{PREFIX}-{datetime.fromtimestamp(first.timestamp() + i * 86_400, UTC):%Y-%m-%d}" for i in range(count)]
