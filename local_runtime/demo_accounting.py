"""The demo's accounting: the running system seen from outside, as an operator would see it.

Nothing here takes the functions' word for anything: it scans the tables,
drains the rejects, on-failure and alert queues, reads the control table (the
shard map, the windows the detector judged) and the exports of dropped tables,
and compares queries through the local HTTP API with what was published
(:mod:`local_runtime.query_checks`). :mod:`local_runtime.demo_report` turns
these facts into the report's checks.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from boto3.dynamodb.types import TypeDeserializer

from keydesign import format_ts, parse_timestamp
from local_runtime import query_checks
from local_runtime.demo_report import HOT_SENSOR, DemoFacts, StoredMap
from local_runtime.demo_rotation import RotationFacts
from local_runtime.scheduler import ReplayClock
from local_runtime.system import LocalSystem

if TYPE_CHECKING:
    from local_runtime.demo_scenario import Scenario

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

    # -- the control table -------------------------------------------------------------------------------

    def read_map(self) -> StoredMap | None:
        # Imported here: adapters.observability sets Powertools' service name at its first import,
        # which must be the functions' (it is, once the system has imported the ingest handler).
        from adapters.shard_map_store import SHARD_MAP_KEY  # noqa: PLC0415

        item = self.dynamodb.get_item(
            TableName=self.endpoints.control_table, Key=dict(SHARD_MAP_KEY), ConsistentRead=True
        ).get("Item")
        return StoredMap.from_item(plain(item)) if item else None

    def split_scheduled(self) -> StoredMap | None:
        """The stored map once it gives the hot sensor more than one sub-shard."""
        stored = self.read_map()
        if stored is None:
            return None
        history = stored.shard_map.entity_history.get(HOT_SENSOR, ())
        return stored if history and history[-1].shards > 1 else None

    def detector_progress(self) -> str:
        mappings = self.system.stats()["event_source_mappings"]
        hot = [m for name, m in mappings.items() if name.endswith(tuple(self.system.readings_tables()))]
        invocations = sum(m["invocations"] for m in hot)
        records = sum(m["records_received"] for m in hot)
        return (
            f"the detector has had {invocations:,} invocations for {records:,} stream records "
            f"and judged {len(self.judged_windows())} windows"
        )

    def judged_windows(self) -> list[dict[str, Any]]:
        windows = []
        request: dict[str, Any] = {
            "TableName": self.endpoints.control_table,
            "FilterExpression": "begins_with(pk, :close)",
            "ExpressionAttributeValues": {":close": {"S": "close#"}},
            "ConsistentRead": True,
        }
        for page in self.dynamodb.get_paginator("scan").paginate(**request):
            for raw in page.get("Items", []):
                item = plain(raw)
                if item.get("state") != "done":
                    continue
                try:
                    summary = json.loads(str(item.get("summary", "{}")))
                except ValueError:
                    summary = {}
                windows.append({"window": str(item["pk"]).removeprefix("close#"), "summary": summary})
        return windows

    # -- once the traffic is over --------------------------------------------------------------------------

    def wait_drained(self, timeout_s: float, say: Say) -> bool:
        """True once every event source mapping is idle; progress every 10 s meanwhile."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self.system.wait_until_idle(min(10.0, remaining)):
                return True
            for name, s in self.system.stats()["event_source_mappings"].items():
                say(
                    f"  {name}: {s.get('invocations', 0):,} invocations, "
                    f"{s.get('records_succeeded', 0):,}/{s.get('records_received', 0):,} records done, "
                    f"{s.get('function_errors', 0):,} errors, {s.get('bisections', 0):,} bisections"
                )

    def count(self, scenario: Scenario, drained: bool, alerts_url: str) -> DemoFacts:
        """Everything from the outside: tables, queues, the control table, the alerts."""
        e = self.endpoints
        hot_skipped = drain_queue(self.sqs, e.hotkeys_failures_queue_url) if e.hotkeys_failures_queue_url else []
        rotators = [s for s in self.system.schedules if s.name.endswith("-rotator")]
        if rotators:
            # A last look at every table, on the wall clock, before the scan: a table it drops
            # is then read back from its export, never half in both.
            rotators[0].run_once()
        by_table = scan_tables(self.dynamodb, self.system.readings_tables())
        rejects = drain_queue(self.sqs, e.rejects_queue_url)
        rotation = self.rotation(scenario, by_table, rejects)
        return DemoFacts(
            published=sum(s.readings_sent for s in scenario.summaries) + scenario.extra_published,
            failed_to_publish=sum(s.readings_failed for s in scenario.summaries),
            phases=list(scenario.phases),
            ledger=scenario.ledger,
            stored=[item for items in by_table.values() for item in items],
            rejects=rejects,
            skipped=drain_queue(self.sqs, e.ingest_failures_queue_url),
            hot_keys_skipped=hot_skipped,
            drained=drained,
            map_after=self.read_map(),
            windows=self.judged_windows(),
            alerts=[alert(m) for m in drain_queue(self.sqs, alerts_url)],
            rotation=rotation,
            exported=[i for items in (rotation.exported_by_table.values() if rotation else ()) for i in items],
        )

    def roll_up(self, through_ms: int, say: Say) -> dict[str, Any] | None:
        """Run the rollup function (on its clock ahead of the wall clock) until its watermark passes
        ``through_ms``: with the streams drained, no ingest invocation is still writing, so every minute
        it closes is closed in fact. Its last run's summary, or why not (None: rollups are off)."""
        schedule = self.system.rollup_schedule()
        if schedule is None:
            return None
        say(f"running the rollup function until its watermark passes {format_ts(through_ms)}")
        summary = None
        # Summed over the runs: a run can do the work and still fail (an injected invoke error, after
        # the handler ran), and the next one then finds little left; a failed run's figures are unseen.
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
                return {**cast("dict[str, Any]", summary), **work}
        say(f"the rollup function did not reach {format_ts(through_ms)} in 20 runs: {summary}")
        return {"status": "not run", "reason": f"not through {format_ts(through_ms)} in 20 runs", "last": summary}

    def queries(self, ledger: Sequence[Mapping[str, Any]], boundary: int | None, say: Say) -> dict[str, Any]:
        """The hot sensor's range page by page, its latest reading and aggregates, and a cross-entity
        page around the split, through the HTTP API, each compared with the ledger. With rollups: the
        hot sensor's whole minutes and every entity's (``GET /aggregates``) from rollups, compared with
        the ledger, and what reading the hot sensor's raw costs."""
        api_url = self.endpoints.api_url
        assert api_url is not None  # noqa: S101 - the caller checked
        client = query_checks.ApiClient(api_url)
        hot = [r for r in ledger if r["entity_id"] == HOT_SENSOR]
        low = min(r["timestamp"] for r in hot)
        high = max(r["timestamp"] for r in hot)
        from_ms, to_ms = low - low % 1000, high - high % 1000 + 1000
        bucket = self.system.config.layout().bucket
        middle = boundary if boundary is not None else (from_ms + to_ms) // 2
        say(f"querying through {api_url}: {HOT_SENSOR}'s {len(hot):,} readings page by page, latest, ...")
        checks = [
            query_checks.check_entity_range(client, ledger, HOT_SENSOR, from_ms, to_ms),
            query_checks.check_latest(client, ledger, HOT_SENSOR),
            query_checks.check_aggregates(
                client, ledger, HOT_SENSOR, from_ms, to_ms, interval="1m", interval_ms=60_000
            ),
            query_checks.check_range_page(client, ledger, middle - 20_000, middle + 20_000, bucket),
        ]
        if self.system.rollup_schedule() is not None:
            low, high = low - low % MINUTE, high - high % MINUTE + MINUTE
            checks += [
                query_checks.check_rollups(
                    client, ledger, HOT_SENSOR, low, high, interval="1m", interval_ms=MINUTE, raw_interval="30s"
                ),
                query_checks.check_rollups(client, ledger, None, low, high, interval="1m", interval_ms=MINUTE),
            ]
        for check in checks:
            verdict = "equal" if check.difference is None else f"DIFFERENT: {check.difference}"
            say(f"  {check.name}: {check.summary}; {verdict}")
        return query_checks.summarise(client, checks)

    # -- the rotator ---------------------------------------------------------------------------------------

    def rotation(
        self, scenario: Scenario, by_table: Mapping[str, list[dict[str, Any]]], rejects: list[dict[str, Any]]
    ) -> RotationFacts | None:
        """What the rotator did (its runs, and one more run now), and what it left: the tables'
        capacity, and each dropped table's readings read back from its export."""
        runs = [s for s in self.system.schedules if s.name.endswith("-rotator")]
        if not runs:
            return None
        config = self.system.config
        history = list(self.system.rotations)
        dropped = sorted({t for run in history for t in (run.get("summary") or {}).get("deleted", [])})
        options = scenario.options
        return RotationFacts(
            layout=config.layout(),
            retention_ms=config.retention_ms,
            prebuild_periods=config.rotation.prebuild_periods,
            runs=history,
            failures=runs[0].failures,
            every_s=config.rotation_interval_minutes() * 60.0,
            clock={
                "replayed_hours": round(options.history_s / 3600, 2)
                if isinstance(self.system.clock, ReplayClock)
                else 0,
                "replay_pace_s": options.history_pace_s,
                "caught_up_after_s": round(scenario.caught_up_after_s, 1) if scenario.caught_up_after_s else None,
            },
            tables_now={name: capacity(self.dynamodb, name) for name in by_table},
            stored_by_table=by_table,
            exported_by_table={name: self.read_export(name) for name in dropped},
            export_bucket=config.rotation.export_bucket,
            refused=scenario.refused,
            rejects=rejects,
        )

    def read_export(self, table: str) -> list[dict[str, Any]]:
        """The readings of a dropped table's export: DynamoDB JSON lines, gzipped, under its prefix."""
        rotation = self.system.config.rotation
        if rotation.export_bucket is None:
            return []
        s3 = self.system.client("s3")
        prefix = f"{rotation.export_prefix}/{table}/"
        items: list[dict[str, Any]] = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=rotation.export_bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                if not obj["Key"].endswith(".gz"):
                    continue
                body = s3.get_object(Bucket=rotation.export_bucket, Key=obj["Key"])["Body"].read()
                for line in gzip.decompress(body).decode("utf-8").splitlines():
                    if line.strip():
                        items.append(plain(json.loads(line)["Item"]))
        return items


_DESERIALIZE = cast(Callable[[Any], Any], TypeDeserializer().deserialize)


def plain(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _DESERIALIZE(v) for k, v in raw.items()}


def scan_tables(dynamodb: Any, tables: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Every item of each table, by table."""
    out: dict[str, list[dict[str, Any]]] = {}
    for table in tables:
        items = out.setdefault(table, [])
        for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            items.extend(plain(raw) for raw in page.get("Items", []))
    return out


def capacity(dynamodb: Any, table: str) -> dict[str, Any]:
    """A table's billing and capacity as DescribeTable gives them."""
    try:
        description = dynamodb.describe_table(TableName=table)["Table"]
    except dynamodb.exceptions.ResourceNotFoundException:
        return {"billing": None, "write_units": None, "read_units": None, "warm_write_units": None}
    throughput = description.get("ProvisionedThroughput", {})
    return {
        "billing": description.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED"),
        "write_units": throughput.get("WriteCapacityUnits"),
        "read_units": throughput.get("ReadCapacityUnits"),
        "warm_write_units": description.get("WarmThroughput", {}).get("WriteUnitsPerSecond"),
    }


def drain_queue(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Every message on the queue (received, not deleted: hidden for the visibility timeout)."""
    out: list[dict[str, Any]] = []
    for _ in range(100_000):  # bounded: at most a million messages
        page = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=3600)
        messages = page.get("Messages", [])
        if not messages:
            return out
        for message in messages:
            try:
                out.append(json.loads(message["Body"]))
            except ValueError:
                out.append({"unreadable": message["Body"][:200]})
    return out


def alert(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """An SNS notification as SQS receives it (the envelope): its subject and JSON body."""
    try:
        body = json.loads(str(envelope.get("Message", "{}")))
    except ValueError:
        body = {"text": str(envelope.get("Message"))[:500]}
    return {"subject": envelope.get("Subject"), "body": body if isinstance(body, dict) else {"value": body}}
