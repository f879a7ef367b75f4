"""The demo's accounting: the running system seen from outside, as an operator would see it.

Nothing here takes the functions' word for anything: it scans the tables and decodes every block,
drains the rejects, on-failure and alert queues, reads the control table (the shard map, the windows
the detector judged), reads the exports of dropped tables back from S3 as ``tsctl archive`` does, runs
the rollup function, and compares queries through the local HTTP API with what was published.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from archives.export import S3Store
from archives.readings import read_readings
from infra.config import LambdaFunction
from keydesign import Reading, format_ts, parse_timestamp
from local_runtime import query_checks as q
from local_runtime.demo_report import HOT_SENSOR, Block, StoredMap
from local_runtime.system import LocalSystem

Say = Callable[[str], None]
MINUTE = 60_000


class Observer:
    """Reads the system from outside: every figure of the report comes from here or the ledger."""

    def __init__(self, system: LocalSystem) -> None:
        self.system = system
        self.endpoints = system.endpoints
        self.dynamodb = system.client("dynamodb")
        self.sqs = system.client("sqs")

    def subscribe_to_alerts(self) -> str:
        """An SQS queue on the hot-key topic, as an operator's e-mail subscription would be."""
        url = str(self.sqs.create_queue(QueueName=f"{self.system.config.stack_name}-demo-alerts")["QueueUrl"])
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.system.client("sns").subscribe(TopicArn=self.endpoints.alarm_topic_arn, Protocol="sqs", Endpoint=arn)
        return url

    def read_map(self) -> StoredMap | None:
        # Imported here: adapters.observability sets Powertools' service name at its first import,
        # which must be the functions' (it is, once the system has imported the ingest handler).
        from adapters.shard_map_store import SHARD_MAP_KEY  # noqa: PLC0415

        table = self.endpoints.control_table
        item = self.dynamodb.get_item(TableName=table, Key=dict(SHARD_MAP_KEY), ConsistentRead=True).get("Item")
        return StoredMap.from_item(plain(item)) if item else None

    def split_scheduled(self) -> StoredMap | None:
        """The stored map once it gives the hot sensor more than one sub-shard."""
        stored = self.read_map()
        history = stored.shard_map.entity_history.get(HOT_SENSOR, ()) if stored is not None else ()
        return stored if history and history[-1].shards > 1 else None

    def judged_windows(self) -> list[dict[str, Any]]:
        """The windows the detector closed (its ``close#`` items), with the summary it recorded."""
        scan = {"TableName": self.endpoints.control_table, "ConsistentRead": True}
        items = [plain(i) for page in self.dynamodb.get_paginator("scan").paginate(**scan) for i in page["Items"]]
        closed = [i for i in items if str(i["pk"]).startswith("close#") and i.get("state") == "done"]
        return [
            {"window": str(i["pk"]).removeprefix("close#"), "summary": json.loads(str(i.get("summary", "{}")))}
            for i in closed
        ]

    def wait_drained(self, timeout_s: float, say: Say) -> bool:
        """True once every event source mapping is idle; each one's progress every 10 s meanwhile."""
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            if self.system.wait_until_idle(min(10.0, remaining)):
                return True
            for name, s in self.system.stats()["event_source_mappings"].items():
                say(f"  {name}: {s['records_succeeded']:,} of {s['records_received']:,} records done")
        return False

    def blocks(self) -> list[Block]:
        """Every item of the readings tables, each a block, decoded."""
        layout, scans = self.system.config.layout(), self.dynamodb.get_paginator("scan")
        return [
            Block.from_item(table, item, layout)
            for table in self.system.readings_tables()
            for page in scans.paginate(TableName=table, ConsistentRead=True)
            for item in page["Items"]
        ]

    def read_export(self, table: str) -> list[Reading]:
        """A dropped table's readings from its export, as ``tsctl archive`` reads them (moto writes no manifest)."""
        config = self.system.config
        if config.export_bucket is None:
            return []
        store = S3Store(self.system.client("s3"), config.export_bucket, f"{config.export_prefix}/{table}/")
        return list(read_readings(store, without_manifest=True))

    def capacity(self, table: str) -> dict[str, Any]:
        """A table's billing, provisioned capacity and table class, as DescribeTable gives them."""
        try:
            d = self.dynamodb.describe_table(TableName=table)["Table"]
        except self.dynamodb.exceptions.ResourceNotFoundException:
            return {"billing": None}
        return {
            "billing": d.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED"),
            "write_units": d.get("ProvisionedThroughput", {}).get("WriteCapacityUnits"),
            "table_class": d.get("TableClassSummary", {}).get("TableClass", "STANDARD"),
        }

    def drain(self, queue_url: str | None) -> list[dict[str, Any]]:
        """Every message on the queue (received, not deleted: hidden for the visibility timeout)."""
        out: list[dict[str, Any]] = []
        for _ in range(100_000):  # bounded: at most a million messages
            page = (
                self.sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=3600)
                if queue_url
                else {}
            )
            if not page.get("Messages"):
                break
            for message in page["Messages"]:
                try:
                    out.append(json.loads(message["Body"]))
                except ValueError:
                    out.append({"unreadable": message["Body"][:200]})
        return out

    def alerts(self, queue_url: str) -> list[dict[str, Any]]:
        """The SNS notifications on the demo's queue: each one's subject and JSON body."""
        return [
            {"subject": m.get("Subject"), "body": json.loads(str(m.get("Message", "{}")))}
            for m in self.drain(queue_url)
        ]

    def roll_up(self, through_ms: int, say: Say) -> dict[str, Any] | None:
        """Run the rollup function (on its clock ahead of the wall clock) until its watermark passes
        ``through_ms``: with the streams drained no ingest invocation is still writing, so every minute it
        closes is closed in fact. Its last run's summary and the work of every run, or why not (None:
        rollups are off). A run can do its work and still fail (an injected invoke error after the
        handler ran): the next finds little left, and the failed run's figures are unseen."""
        schedule = self.system.schedule_of(LambdaFunction.ROLLUP)
        if schedule is None:
            return None
        say(f"running the rollup function until its watermark passes {format_ts(through_ms)}")
        summary = None
        work: dict[str, Any] = {"runs": 0, "failed_runs": 0, "steps": 0, "recomputed": {}, "raw_items_read": 0}
        for _ in range(20):  # bounded: each run applies some minutes or fails
            summary = schedule.run_once()
            work["runs"] += 1
            if summary is None:
                work["failed_runs"] += 1
                continue
            work["steps"] += summary["steps"]
            work["raw_items_read"] += summary["raw_items_read"]
            for level, count in summary["recomputed"].items():
                work["recomputed"][level] = work["recomputed"].get(level, 0) + count
            if parse_timestamp(summary["through"], "through") >= through_ms:
                say(f"rollups applied through {summary['through']} ({summary['late']} late mark(s) in the last run)")
                return {**summary, **work}
        return {"status": "not run", "reason": f"not through {format_ts(through_ms)} in 20 runs", "last": summary}

    def queries(self, ledger: Sequence[Mapping[str, Any]], boundary: int | None, say: Say) -> dict[str, Any]:
        """Through the HTTP API, each compared with the ledger: the hot sensor's range page by page, its
        latest reading and aggregates, a cross-entity page around the split; with rollups, the hot
        sensor's whole minutes and every entity's from them, and what reading the hot sensor raw costs."""
        client, bucket = q.ApiClient(str(self.endpoints.api_url)), self.system.config.layout().bucket
        hot = [r["timestamp"] for r in ledger if r["entity_id"] == HOT_SENSOR]
        low, high = min(hot) - min(hot) % 1000, max(hot) - max(hot) % 1000 + 1000
        middle = boundary if boundary is not None else (low + high) // 2
        say(f"querying through {client.base_url}: {HOT_SENSOR}'s {len(hot):,} readings page by page, latest, ...")
        checks = [
            q.check_readings(client, ledger, HOT_SENSOR, low, high, bucket=bucket),
            q.check_latest(client, ledger, HOT_SENSOR),
            q.check_aggregates(client, ledger, HOT_SENSOR, low, high, interval="1m", interval_ms=MINUTE),
            q.check_readings(client, ledger, None, middle - 20_000, middle + 20_000, bucket=bucket),
        ]
        if self.system.schedule_of(LambdaFunction.ROLLUP) is not None:
            low, high = low - low % MINUTE, high - high % MINUTE + MINUTE
            for entity, raw in ((HOT_SENSOR, "30s"), (None, None)):
                rolled = q.check_aggregates(
                    client, ledger, entity, low, high, interval="1m", interval_ms=MINUTE, rollups=True, raw_interval=raw
                )
                checks.append(rolled)
        for check in checks:
            say(
                f"  {check.name}: {check.summary}; "
                + ("equal" if check.difference is None else f"DIFFERENT: {check.difference}")
            )
        return q.summarise(client, checks)


_DESERIALIZE = TypeDeserializer().deserialize


def plain(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _DESERIALIZE(v) for k, v in raw.items()}
