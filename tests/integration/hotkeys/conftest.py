"""moto-backed AWS for the hot-key tests: the readings table (with its stream), the control
table, an SNS topic with an SQS queue subscribed to read the notifications back, and
helpers to build monitors on a simulated clock and to invoke the real handler."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

from doubles.lambda_context import FakeLambdaContext
from hotkeys.control_table import ControlTable
from hotkeys.logic import BatchOutcome, HotKeyMonitor
from hotkeys.settings import HotKeySettings
from keydesign import Layout
from tests.integration.mocked_aws import (
    Invocation,
    all_items,
    create_readings_table,
    fresh_handler,
    invoke_spying,
    mocked_aws,
)
from tests.unit.hotkeys.stream_events import REGION, TABLE

CONTROL = "control"
#: Hot-key windows of a second on minute buckets, seen at once (no cache, no allowance for the future),
#: so that a test walks window after window in simulated seconds.
SECOND_WINDOWS = {
    "BUCKET": "1m",
    "HOT_WINDOW": "1s",
    "HOT_WINDOW_GRACE": "1s",
    "SHARD_MAP_CACHE_TTL": "1s",
    "MAX_FUTURE": "0s",
}


@dataclass
class Aws:
    dynamodb: Any
    sns: Any
    sqs: Any
    topic_arn: str
    queue_url: str
    env: dict[str, str]
    monitors: list[HotKeyMonitor] = field(default_factory=list)

    def configure(self, monkeypatch: pytest.MonkeyPatch, settings: Mapping[str, str]) -> Aws:
        """``settings`` set in the environment (which a handler reads at import) and in :attr:`env`."""
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        self.env.update(settings)
        return self

    @property
    def layout(self) -> Layout:
        return HotKeySettings.from_env(self.env).layout

    def settings(self, **overrides: str) -> HotKeySettings:
        return HotKeySettings.from_env({**self.env, **overrides})

    def monitor(self, clock: Callable[[], int], *, dynamodb: Any = None, sns: Any = None, **env: str) -> HotKeyMonitor:
        """A monitor as one Lambda container would build it, on ``clock``."""
        monitor = HotKeyMonitor(self.settings(**env), dynamodb=dynamodb, sns=sns, clock_ms=clock)
        self.monitors.append(monitor)
        return monitor

    def counters(self) -> ControlTable:
        """The control table's window counters, read as the judging invocation reads them."""
        return ControlTable(self.dynamodb, CONTROL)

    def notifications(self) -> list[dict[str, Any]]:
        """Every SNS message delivered so far (read and deleted from the subscribed queue)."""
        out: list[dict[str, Any]] = []
        while True:
            page = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            messages = page.get("Messages", [])
            if not messages:
                return out
            for message in messages:
                envelope = json.loads(message["Body"])
                out.append({"subject": envelope.get("Subject"), "body": json.loads(envelope["Message"])})
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def control_items(self, pk_prefix: str) -> list[dict[str, Any]]:
        items = all_items(self.dynamodb, "scan", TableName=CONTROL, ConsistentRead=True)
        return [i for i in items if i["pk"]["S"].startswith(pk_prefix)]


def base_env(topic_arn: str) -> dict[str, str]:
    return {
        "LAYOUT": "hybrid",
        "SHARDS": "4",
        "BUCKET": "1h",
        "TABLE_PREFIX": TABLE,
        "CONTROL_TABLE": CONTROL,
        "SHARD_MAP_CACHE_TTL": "60s",
        "HOT_WINDOW": "60s",
        "HOT_WINDOW_GRACE": "30s",
        "HOT_ALERT_TOPIC_ARN": topic_arn,
    }


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    with mocked_aws(monkeypatch, REGION, service="hotkeys"):
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        create_readings_table(dynamodb, TABLE, stream=True)
        create_readings_table(dynamodb, CONTROL)
        sns = boto3.client("sns", region_name=REGION)
        sqs = boto3.client("sqs", region_name=REGION)
        topic_arn = sns.create_topic(Name="hot-keys")["TopicArn"]
        queue_url = sqs.create_queue(QueueName="hot-key-inbox")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
        state = Aws(dynamodb, sns, sqs, topic_arn, queue_url, {}).configure(monkeypatch, base_env(topic_arn))
        yield state
        for monitor in state.monitors:
            monitor.close()


@pytest.fixture
def handler_module(aws: Aws) -> Iterator[ModuleType]:
    """``hotkeys.handler`` imported fresh (its settings and clients are made at import)."""
    with fresh_handler("hotkeys.handler", "MONITOR") as module:
        yield module


def invoke(
    module: ModuleType,
    event: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monitor: HotKeyMonitor | None = None,
) -> Invocation[BatchOutcome]:
    """Call ``module.handler`` as Lambda would (with ``monitor`` standing in for the container's)."""
    previous = module.MONITOR
    module.MONITOR = monitor or previous
    try:
        return invoke_spying(module.handler, event, FakeLambdaContext(), capsys, logic=module.MONITOR, method="process")
    finally:
        module.MONITOR = previous


def run(monitor: HotKeyMonitor, event: dict[str, Any]) -> tuple[dict[str, Any], BatchOutcome]:
    """The handler's path without its decorators: process, then Powertools' partial response."""
    outcome = monitor.process(event["Records"])
    processor = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
    response = process_partial_response(
        event=event,
        record_handler=outcome.settle,
        processor=processor,
        context=FakeLambdaContext(),  # type: ignore[arg-type]
    )
    return dict(response), outcome
