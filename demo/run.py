"""The demo (``tsctl demo``): the seed scenario, scaled to one machine and compressed in time, through the
real code path. :func:`run_demo` plays the story docs/local.md ("The demo") tells, its traffic from
:mod:`demo.scenario`, then counts from outside (:class:`Observer`) for :mod:`demo.report` to judge."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO, TypeVar

from boto3.dynamodb.types import TypeDeserializer

from archives.export import S3Store
from archives.readings import read_readings
from client import QueryClient
from demo import query_checks as q
from demo.options import DEMO_CONTEXT, DEMO_HOT_KEYS_ENVIRONMENT, DEMO_ROTATION_CONTEXT, DemoOptions, demo_config
from demo.report import (
    HOT_SENSOR,
    SPARSE_PHASE,
    Block,
    DemoFacts,
    Item,
    build_report,
    draw_pictures,
    shard_map,
)
from demo.scenario import Scenario, now_ms
from infra.config import LambdaFunction
from keydesign import Reading, format_ts, parse_timestamp
from keydesign.rollup import STATE_PK, redo_pk
from keydesign.writetier import DENSE_MARK_PREFIX, GRACE_MS, SLICE_MS, state_key
from local_runtime.options import LocalOptions
from local_runtime.scheduler import ReplayClock
from local_runtime.system import LocalSystem
from rotator.tables import DynamoTables

T = TypeVar("T")
Say = Callable[[str], None]
MINUTE = 60_000


def run_demo(
    options: DemoOptions | None = None, *, progress: TextIO | None = None, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Run the demo; write ``<out_dir>/report.json`` (plus ``extra`` sections) and the pictures; return
    the report (``report["ok"]`` says if every check passed)."""
    options, stream, lock = options or DemoOptions(), progress or sys.stderr, threading.Lock()

    def say(text: str) -> None:
        with lock:
            stream.write(f"[demo] {text}\n")
            stream.flush()

    config, started = demo_config(options.context), time.monotonic()
    rotates = config.table_period is not None
    options.out_dir.mkdir(parents=True, exist_ok=True)
    say(f"starting the local system (faults: {options.faults.describe()})")
    settle_s = config.ingest_timeout_s + 5  # ROLLUP_SETTLE and COMPACTION_SETTLE locally (app_functions)
    # Compaction runs once the streams drain (Observer.compact), on a clock an hour, the slice rule's grace
    # and its settle time ahead, so the hour just written has settled (no scheduled runs before). Compacting
    # the current hour is safe then: with the streams drained and nothing more published, no reading of it
    # is still to come.
    compaction_ahead_s = (SLICE_MS + GRACE_MS) / 1000 + settle_s + 5
    local = LocalOptions(
        faults=options.faults,
        function_log=options.out_dir / "functions.log",
        environment={LambdaFunction.HOTKEYS: dict(DEMO_HOT_KEYS_ENVIRONMENT)},
        rotator_replay_s=options.history_s if rotates else None,
        rotator_replay_pace_s=options.history_pace_s,
        # The rollup function runs after compaction (Observer.roll_up), on a clock further ahead by its own
        # settle time and two minutes: so it closes the minutes of compaction's clock too (where compaction
        # stamps the marks it leaves for it) and every hour compaction closed; none before.
        rollups=True,
        rollup_every_s=86_400.0,
        rollup_ahead_s=compaction_ahead_s + settle_s + 120,
        compaction=True,
        compaction_every_s=86_400.0,
        compaction_ahead_s=compaction_ahead_s,
    )
    with LocalSystem(config, local) as system:
        facts = _play(system, options, say, {"start": time.monotonic() - started})
    facts.timings = {**facts.timings, "total": time.monotonic() - started}
    draw_pictures(facts, config, options.out_dir)
    settings = {
        **({"rotation_context_overrides": dict(DEMO_ROTATION_CONTEXT)} if rotates else {}),
        "hot_split_threshold_note": f"lowered to {config.split_threshold_wcu} WCU/s for the demo (stack: 500)",
        **{name.lower(): value for name, value in DEMO_HOT_KEYS_ENVIRONMENT.items()},
        "context_overrides": dict(DEMO_CONTEXT),
    }
    published: tuple[str, ...] = ("sensors", "base_rate", "hot_rate", "hot_phase_s", "split_phase_s", "trickle_rate")
    published += ("sparse_entities", "sparse_period_s", "sparse_s")
    scenario = {
        **{name: getattr(options, name) for name in (*published, "invalid_readings", "garbage_records")},
        "hot_sensor": HOT_SENSOR,
        "faults": options.faults.describe(),
        "published_in_real_time": True,
    }
    built = {**build_report(scenario=scenario, config=config, facts=facts, settings=settings), **(extra or {})}
    # The report returned is the one on disk, as JSON reads it back: a tuple in a section (the rotator's
    # refusals and failures hold some, on a slow machine) would otherwise compare unequal to its list.
    text = json.dumps(built, indent=2) + "\n"
    report: dict[str, Any] = json.loads(text)
    path = options.out_dir / "report.json"
    path.write_text(text, encoding="utf-8")
    say(f"report: {path} ({'OK' if report['ok'] else 'FAILED'}) in {facts.timings['total']:.0f} s")
    return report


def _play(system: LocalSystem, options: DemoOptions, say: Say, timings: dict[str, float]) -> DemoFacts:
    """The demo's steps, in order, against a started system; each step's duration in ``timings``."""

    def timed(name: str, step: Callable[[], T]) -> T:
        mark = time.monotonic()
        try:
            return step()
        finally:
            timings[name] = time.monotonic() - mark

    e, clock = system.endpoints, system.clock
    say(f"moto on {e.endpoint_url}; stream {e.stream_name}; query API on {e.api_url}")
    observer, scenario = Observer(system), Scenario(system, options, say)
    alerts_url = observer.subscribe_to_alerts()
    if isinstance(clock, ReplayClock):
        timed("rotation_history", lambda: scenario.history(clock))
    story_from_ms = now_ms()
    first, map_before = timed("phase_1", lambda: scenario.before_the_split(observer.read_map))

    def scheduled() -> int | None:
        history = shard_map(item).entity_history.get(HOT_SENSOR, ()) if (item := observer.read_map()) else ()
        return history[-1].effective_from_ms if history and history[-1].shards > 1 else None

    progress = lambda: f"the detector has judged {len(observer.judged_windows())} windows"  # noqa: E731
    sparse = scenario.sparse_fleet()  # in the background: a minute of it, while the demo awaits the split
    boundary = timed("split", lambda: scenario.await_split(scheduled, progress))
    timed("phase_2", lambda: scenario.after_the_split(first))
    timed("agents", scenario.agents)
    timed("sparse_fleet", lambda: sparse.result(options.sparse_s + 120))  # what is left of its minute
    drained = timed("drain", lambda: observer.wait_drained(options.timeout_s, say))
    say("streams drained; counting what was stored, rejected and skipped" if drained else "the streams did NOT drain")
    # The end of the last hour the story wrote to: compaction and the rollups must pass it.
    story_end = max(r["timestamp"] for _, r in scenario.ledger) // SLICE_MS * SLICE_MS + SLICE_MS
    compaction = timed("compaction", lambda: observer.compact(story_end, say))

    def count() -> DemoFacts:
        hot_skipped = observer.drain(e.hotkeys_failures_queue_url)
        rotation, rotator = None, system.schedule_of(LambdaFunction.ROTATOR)
        if rotator is not None:
            # A last look at every table, on the wall clock, before the scan: a table it drops is then
            # read back from its export, never half in both.
            rotator.run_once()
        (blocks, dense_marks), runs = observer.blocks(), list(system.rotations)
        if rotator is not None:
            tables = sorted({b.table for b in blocks} | set(system.readings_tables()))
            capacity = {name: observer.capacity(name) for name in tables}
            rotation = {"runs": runs, "failures": rotator.failures, "clock": scenario.replay, "capacity": capacity}
            rotation["refused"] = scenario.refused
        dropped = sorted({t for run in runs for t in (run.get("summary") or {}).get("deleted", [])})
        return DemoFacts(
            published=sum(s.readings_sent for s in scenario.summaries) + scenario.garbage_published,
            failed_to_publish=sum(s.readings_failed for s in scenario.summaries),
            ledger=list(scenario.ledger),
            blocks=blocks,
            rejects=observer.drain(e.rejects_queue_url),
            skipped=observer.drain(e.ingest_failures_queue_url),
            drained=drained,
            hot_keys_skipped=hot_skipped,
            map_before=map_before,
            map_after=observer.read_map(),
            windows=observer.judged_windows(),
            alerts=observer.drain(alerts_url),
            boundary_ms=boundary,
            rotation=rotation,
            exported={table: observer.read_export(table) for table in dropped},
            story_from_ms=story_from_ms,
            dense_marks=dense_marks,
            compaction=compaction,
        )

    facts = timed("verify", count)
    facts.rollups = timed("rollups", lambda: observer.roll_up_and_redo(story_end, say))
    facts.control = observer.control_items()
    checked = options.sparse_aggregate_entities
    facts.queries = timed("queries", lambda: observer.queries(facts.ledger, boundary, say, sparse_checked=checked))
    facts.runtime, facts.timings = system.stats(), timings
    return facts


class Observer:
    """Reads the system from outside, as an operator would, taking no function's word for anything:
    every figure of the report comes from here or the ledger."""

    def __init__(self, system: LocalSystem) -> None:
        self.system, self.endpoints = system, system.endpoints
        self.dynamodb, self.sqs = system.client("dynamodb"), system.client("sqs")

    def subscribe_to_alerts(self) -> str:
        """An SQS queue on the hot-key topic, as an operator's e-mail subscription would be."""
        url = str(self.sqs.create_queue(QueueName=f"{self.system.config.stack_name}-demo-alerts")["QueueUrl"])
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.system.client("sns").subscribe(TopicArn=self.endpoints.alarm_topic_arn, Protocol="sqs", Endpoint=arn)
        return url

    def read_map(self) -> dict[str, Any] | None:
        """The control table's shard-map item, deserialised."""
        # Imported here: adapters.observability sets Powertools' service name at its first import,
        # which must be the functions' (it is, once the system has imported the ingest handler).
        from adapters.shard_map_store import SHARD_MAP_KEY  # noqa: PLC0415

        table = self.endpoints.control_table
        item = self.dynamodb.get_item(TableName=table, Key=dict(SHARD_MAP_KEY), ConsistentRead=True).get("Item")
        return _plain(item) if item else None

    def judged_windows(self) -> list[dict[str, Any]]:
        """The windows the detector closed (its ``close#`` items), with the summary it recorded."""
        scan = {"TableName": self.endpoints.control_table, "ConsistentRead": True}
        items = [_plain(i) for page in self.dynamodb.get_paginator("scan").paginate(**scan) for i in page["Items"]]
        return [
            {"window": str(i["pk"]).removeprefix("close#"), "summary": json.loads(str(i.get("summary", "{}")))}
            for i in items
            if str(i["pk"]).startswith("close#") and i.get("state") == "done"
        ]

    def wait_drained(self, timeout_s: float, say: Say) -> bool:
        """True once every event source mapping is idle; each one's progress every 10 s meanwhile. Publishing
        has stopped: a batching window open now would gather nothing more, so it is not waited out."""
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            if self.system.wait_until_idle(min(10.0, remaining), flush=True):
                return True
            for name, s in self.system.stats()["event_source_mappings"].items():
                say(f"  {name}: {s['records_succeeded']:,} of {s['records_received']:,} records done")
        return False

    def blocks(self) -> tuple[list[Block], list[Item]]:
        """Every item of the readings tables holding readings (blocks, group items, compacted blocks),
        decoded; and the dense marks."""
        layout, scans = self.system.config.layout(), self.dynamodb.get_paginator("scan")
        blocks, marks = [], []
        for table in self.system.readings_tables():
            for page in scans.paginate(TableName=table, ConsistentRead=True):
                for item in page["Items"]:
                    if item["sk"]["S"].startswith(DENSE_MARK_PREFIX):
                        marks.append(Item.from_item(item))
                    elif (block := Block.from_item(table, item, layout)) is not None:
                        blocks.append(block)
        return blocks, marks

    def control_items(self) -> list[Item]:
        """Every item of the control table (rollup marks, rollups and totals among them), sized."""
        scan = {"TableName": self.endpoints.control_table, "ConsistentRead": True}
        pages = self.dynamodb.get_paginator("scan").paginate(**scan)
        return [Item.from_item(item) for page in pages for item in page["Items"]]

    def _state(self, key: Mapping[str, str]) -> dict[str, Any]:
        """A state item of the control table (the compaction or the rollup function's watermark), or {}."""
        get = {"TableName": self.endpoints.control_table, "Key": {k: {"S": v} for k, v in key.items()}}
        return _plain(self.dynamodb.get_item(**get, ConsistentRead=True).get("Item") or {})

    def compact(self, through_ms: int, say: Say) -> dict[str, Any] | None:
        """Run the compaction function (its clock ahead of the wall clock) until its watermark, as its state
        item in the control table says, passes ``through_ms``: with the streams drained, every hour it closes is
        closed in fact. Its last run's summary and the work of every run."""
        if (schedule := self.system.schedule_of(LambdaFunction.COMPACTION)) is None:
            return None
        say(f"running compaction until its watermark passes {format_ts(through_ms)}")
        key, summary = state_key(self.system.config.layout().table_prefix), None
        work: dict[str, Any] = {"runs": 0, "failed_runs": 0, "hours": 0, "compacted_blocks_written": 0}
        work |= {"readings_compacted": 0, "group_items_read": 0, "queries": 0}
        for _ in range(10):  # bounded: each run compacts hours or fails
            work["runs"] += 1
            if (summary := schedule.run_once()) is None:
                work["failed_runs"] += 1
            else:
                for name in ("hours", "compacted_blocks_written", "readings_compacted", "group_items_read", "queries"):
                    work[name] += summary[name]
            if int((state := self._state(key)).get("through", 0)) >= through_ms:
                through = format_ts(int(state["through"]))
                say(f"  compacted through {through}: {work['compacted_blocks_written']:,} compacted blocks")
                return {**work, "through": through, "last_run": summary}
        return {"status": "not run", "reason": f"not through {format_ts(through_ms)} in 10 runs", "last": summary}

    def read_export(self, table: str) -> list[Reading]:
        """A dropped table's readings from its export, as ``tsctl archive`` reads them (moto writes no manifest)."""
        if (bucket := self.system.config.export_bucket) is None:
            return []
        store = S3Store(self.system.client("s3"), bucket, f"{self.system.config.export_prefix}/{table}/")
        return list(read_readings(store, without_manifest=True))

    def capacity(self, table: str) -> dict[str, Any]:
        """A table's billing, provisioned capacity and table class, as the rotator reads DescribeTable."""
        if (state := DynamoTables(self.dynamodb).describe(table)) is None:
            return {"billing": None}
        return {"billing": state.billing_mode, "write_units": state.write_units, "table_class": state.table_class}

    def drain(self, queue_url: str | None) -> list[dict[str, Any]]:
        """Every message on the queue (received, not deleted: hidden for the visibility timeout)."""
        out: list[dict[str, Any]] = []
        for _ in range(100_000 if queue_url else 0):  # bounded: at most a million messages
            receive = {"QueueUrl": queue_url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 3600}
            if not (messages := self.sqs.receive_message(**receive).get("Messages")):
                break
            for message in messages:
                try:
                    out.append(json.loads(message["Body"]))
                except ValueError:
                    out.append({"unreadable": message["Body"][:200]})
        return out

    def roll_up(self, through_ms: int, say: Say) -> dict[str, Any] | None:
        """Run the rollup function (its clock ahead of the wall clock) until its watermark passes ``through_ms``,
        and its totals' watermark (``totals_through`` of its state item, where it keeps one) too: with the
        streams drained, every minute it closes is closed in fact. Its last run's summary and the work
        of every run (a run can do its work and still fail: an injected invoke error; its figures are unseen).
        The totals' watermark moves once the function's own has passed the minute compaction moved its
        watermark in (its clock is set ahead of compaction's for that), and should it still lag, the
        function's clock is moved on by its settle time and a minute before the next run."""
        if (schedule := self.system.schedule_of(LambdaFunction.ROLLUP)) is None:
            return None
        say(f"running the rollup function until its watermark passes {format_ts(through_ms)}")
        summary = None
        work: dict[str, Any] = {"runs": 0, "failed_runs": 0, "steps": 0, "recomputed": Counter(), "raw_items_read": 0}
        for _ in range(20):  # bounded: each run applies some minutes or fails
            work["runs"] += 1
            if (summary := schedule.run_once()) is None:
                work["failed_runs"] += 1
                continue
            work["steps"] += summary["steps"]
            work["raw_items_read"] += summary["raw_items_read"]
            work["recomputed"].update(summary["recomputed"])
            if parse_timestamp(summary["through"], "through") < through_ms:
                continue
            totals = self.rollup_totals_through()
            if totals is None or totals >= through_ms:
                say(f"rollups applied through {summary['through']} ({summary['late']} late mark(s) in the last run)")
                return {**summary, **work, **({"totals_through": format_ts(totals)} if totals is not None else {})}
            self.system.functions.rollup_clock_moved_ms += self.system.config.ingest_timeout_s * 1000 + 65_000
        return {"status": "not run", "reason": f"not through {format_ts(through_ms)} in 20 runs", "last": summary}

    def roll_up_and_redo(self, through_ms: int, say: Say) -> dict[str, Any] | None:
        """:meth:`roll_up`; then, while the rollup function has asked compaction to redo an hour (a late
        reading of an entity compaction had counted: docs/rollups.md, "Two owners"), a compaction run (it
        runs every 5 minutes in the stack) and the rollup function again, so the figures checked are the
        settled ones, not the minutes between the two functions."""
        summary = self.roll_up(through_ms, say)
        schedule = self.system.schedule_of(LambdaFunction.COMPACTION)
        redone = 0
        for _ in range(3):  # bounded: a redo asks for no other
            asked = self.redo_requests()
            if not asked or schedule is None or summary is None:
                break
            say(f"compaction redoes {asked} hour(s) the rollup function asked for; the rollup function again")
            # Both on one clock, as in the stack (their re-marks' minutes must still be open: the rollup
            # function runs ahead of compaction here), then the rollup function's moved on past them.
            options, functions = self.system.options, self.system.functions
            ahead_ms = int((options.rollup_ahead_s - options.compaction_ahead_s) * 1000)
            functions.compaction_clock_moved_ms = ahead_ms + functions.rollup_clock_moved_ms
            schedule.run_once()
            functions.rollup_clock_moved_ms += self.system.config.ingest_timeout_s * 1000 + 65_000
            redone += asked
            again = self.roll_up(through_ms, say)
            if again is None or "runs" not in again:
                return again
            for name in ("runs", "failed_runs", "steps", "raw_items_read"):
                again[name] += summary.get(name, 0)
            again["recomputed"] = again["recomputed"] + summary.get("recomputed", Counter())
            summary = again
        return None if summary is None else {**summary, "redo_requests": redone}

    def redo_requests(self) -> int:
        """The redo requests waiting in the control table."""
        pk = redo_pk(self.system.config.layout().table_prefix)
        response = self.dynamodb.query(
            TableName=self.endpoints.control_table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            Select="COUNT",
        )
        return int(response.get("Count", 0))

    def rollup_totals_through(self) -> int | None:
        """The rollup function's totals watermark (``totals_through`` in its state item), None where it keeps none."""
        value = self._state({"pk": STATE_PK, "sk": self.system.config.layout().table_prefix}).get("totals_through")
        return None if value is None else int(value)

    def queries(
        self,
        published: Sequence[tuple[str, Mapping[str, Any]]],
        boundary: int | None,
        say: Say,
        *,
        sparse_checked: int = 3,
    ) -> dict[str, Any] | None:
        """The hot sensor's range page by page, latest and aggregates, a cross-entity page around the split; with
        rollups, the hot sensor's whole minutes and every entity's from them, beside the hot sensor's raw read;
        then the sparse fleet (after compaction: its hours read from compacted blocks): each entity's readings
        from the fleet's first minute,
        and from rollups every entity's figures over its hours and a few of its entities' one by one."""
        if not self.endpoints.api_url:
            return None
        client, bucket = QueryClient(str(self.endpoints.api_url)), self.system.config.layout().bucket
        ledger = [r for _, r in published]
        hot = [r["timestamp"] for r in ledger if r["entity_id"] == HOT_SENSOR]
        low, high = min(hot) - min(hot) % 1000, max(hot) - max(hot) % 1000 + 1000
        middle = boundary if boundary is not None else (low + high) // 2
        say(f"querying through {client.api_url}: {HOT_SENSOR}'s {len(hot):,} readings page by page, latest, ...")
        checks = [
            q.check_readings(client, ledger, HOT_SENSOR, low, high, bucket=bucket),
            q.check_latest(client, ledger, HOT_SENSOR),
            q.check_aggregates(client, ledger, HOT_SENSOR, low, high, interval="1m"),
            q.check_readings(client, ledger, None, middle - 20_000, middle + 20_000, bucket=bucket),
        ]
        rollups = self.system.schedule_of(LambdaFunction.ROLLUP) is not None
        if rollups:
            low, high = low - low % MINUTE, high - high % MINUTE + MINUTE
            per_minute: dict[str, Any] = {"interval": "1m", "rollups": True}
            for entity, raw in ((HOT_SENSOR, "30s"), (None, None)):
                checks.append(q.check_aggregates(client, ledger, entity, low, high, **per_minute, raw_interval=raw))
        if sparse := [r for phase, r in published if phase == SPARSE_PHASE]:
            entities = sorted({str(r["entity_id"]) for r in sparse})
            first, last = min(r["timestamp"] for r in sparse), max(r["timestamp"] for r in sparse)
            hours = (first - first % SLICE_MS, last - last % SLICE_MS + SLICE_MS)
            say(f"  and the sparse fleet: each of its {len(entities):,} entities' readings, its hours' aggregates")
            # From the fleet's first minute, not its hour's start: each minute before it is one more (empty) 1-minute
            # bucket Query for each of the entities, up to an hour's worth by where in the hour the story runs.
            since = first - first % MINUTE
            each = q.check_each_entity(client, sparse, entities, since, last + 1, bucket=bucket, name=SPARSE_PHASE)
            checks.append(each)
            if rollups:
                checks.append(q.check_aggregates(client, ledger, None, *hours, interval="1h", rollups=True))
                for entity in entities[:: max(1, len(entities) // max(1, sparse_checked))][:sparse_checked]:
                    checks.append(q.check_aggregates(client, sparse, entity, *hours, interval="1h", rollups=True))
        results = [c.as_dict() for c in checks]
        for c in results:
            say(f"  {c['name']}: {c['summary']}; " + ("equal" if c["equal"] else f"DIFFERENT: {c['difference']}"))
        return {
            "api_url": client.api_url,
            "signed": False,
            "all_equal": all(c["equal"] for c in results),
            "checks": results,
        }


_DESERIALIZE = TypeDeserializer().deserialize


def _plain(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _DESERIALIZE(v) for k, v in raw.items()}
