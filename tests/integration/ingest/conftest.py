"""moto-backed AWS for the ingest integration tests: a readings table, a rejects queue,
and the handler module imported fresh against them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import boto3
import pytest

from keydesign import Layout, Reading, ShardMap
from tests.integration.mocked_aws import all_items, create_readings_table, fresh_handler, mocked_aws
from tests.unit.ingest.kinesis_events import REGION
from tests.unit.ingest.stored import stored_readings

TABLE = "readings"

pytestmark = pytest.mark.integration


@dataclass
class Aws:
    dynamodb: Any
    sqs: Any
    queue_url: str
    layout: Layout
    shard_map: ShardMap
    env: dict[str, str]

    def table_items(self, table: str = TABLE) -> list[dict[str, Any]]:
        return all_items(self.dynamodb, "scan", TableName=table, ConsistentRead=True)

    def rejects(self) -> list[dict[str, Any]]:
        """Every message on the rejects queue (received and deleted)."""
        out: list[dict[str, Any]] = []
        while True:
            page = self.sqs.receive_message(
                QueueUrl=self.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
            )
            messages = page.get("Messages", [])
            if not messages:
                return out
            for message in messages:
                out.append(json.loads(message["Body"]))
                self.sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"])

    def readings(self, table: str = TABLE) -> list[Reading]:
        """Every reading the table's blocks hold, once (the newest copy)."""
        return stored_readings(self.table_items(table))

    def query_entity(self, entity: str, from_ms: int, to_ms: int) -> list[Reading]:
        """An entity's readings in ``[from_ms, to_ms)``, read back through the key-design layer's
        query plan (every page), each once."""
        return [r for r in stored_readings(self._query_blocks(entity, from_ms, to_ms)) if from_ms <= r.ts_ms < to_ms]

    def _query_blocks(self, entity: str, from_ms: int, to_ms: int) -> list[dict[str, Any]]:
        plan = self.layout.plan_entity(entity, from_ms, to_ms, self.shard_map)
        found: list[dict[str, Any]] = []
        for part in plan.partitions:
            found += all_items(
                self.dynamodb,
                "query",
                TableName=part.table,
                KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
                ExpressionAttributeValues={
                    ":pk": {"S": part.pk},
                    ":lo": {"S": part.sk_low},
                    ":hi": {"S": part.sk_high},
                },
                ConsistentRead=True,
            )
        return found


def base_env(queue_url: str, **overrides: str) -> dict[str, str]:
    return {
        "LAYOUT": "hybrid",
        "SHARDS": "4",
        "BUCKET": "1h",
        "TABLE_PREFIX": TABLE,
        "RETENTION": "30d",
        "REJECTS_QUEUE_URL": queue_url,
        "MAX_AGE": "7d",
        **overrides,
    }


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    with mocked_aws(monkeypatch, REGION, service="ingest"):
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        create_readings_table(dynamodb, TABLE)
        sqs = boto3.client("sqs", region_name=REGION)
        queue_url = sqs.create_queue(QueueName="readings-rejects")["QueueUrl"]
        env = base_env(queue_url)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=TABLE)
        yield Aws(dynamodb, sqs, queue_url, layout, ShardMap.initial(layout.bucket, 4), env)


@pytest.fixture
def handler_module(aws: Aws) -> Iterator[ModuleType]:
    """``ingest.handler`` imported fresh (its settings and clients are made at import)."""
    with fresh_handler("ingest.handler", "INGESTOR") as module:
        yield module


def now_ms() -> int:
    return int(time.time() * 1000)
