"""The demo driver: the seed scenario, scaled to one machine and compressed in time, through the real code path.

:func:`run_demo` starts the whole local system (ingest, the query API, the
hot-key detector; the rotator too with a table period, as by default) and
plays the seed scenario's story end to end:

0. **The rotator's history** (with a table period). The rotator's clock starts
   hours in the past and replays them at a few thousand times real speed, one
   run every 15 minutes of that time, until it meets the wall clock; ingest
   runs on the same clock, and a trickle of readings stamped with it lands in
   each hour's table. So the rotator builds tables ahead, dials down closed
   ones, exports and drops those past retention, all within seconds; then a
   few readings of a dropped hour are published, and ingest must refuse them.
1. **Before the split.** Thousands of sensors publish in real time (event
   time = the wall clock), ``sensor-alpha-001`` far above the others, through
   the producer library to Kinesis; ingest writes them. The hot sensor's key
   runs hot in wall-clock terms too, which is what the detector measures (its
   stream records' ``ApproximateCreationDateTime`` is the write time).
2. **The detector splits it.** The other sensors keep reporting at a trickle
   (a window is judged only once the stream has moved past it); the demo
   awaits the shard map in the control table showing the entity's change,
   then the wall clock passing the change's ``effective_from`` boundary.
3. **After the split.** The same traffic again, with event times after the
   boundary: the hot sensor's readings land on its new sub-shard keys.
4. **Accounting.** Once ingest and the detector have drained their streams,
   everything is counted from the outside: a scan of the tables, the rejects
   and on-failure queues, the control table (judged windows, the shard map
   before and after), the hot-key topic (an SQS queue subscribed to it); and
   queries through the local HTTP API are compared with what was published
   (:mod:`local_runtime.query_checks`).

The report (:mod:`local_runtime.demo_report`) goes to ``<out>/report.json``,
the picture of partition load to ``<out>/partition-load.png``, progress to
stderr. Time is compressed by configuration (:data:`DEMO_CONTEXT`,
:data:`DEMO_HOT_KEYS_ENVIRONMENT`): see docs/local.md for why each value.

``python -m local_runtime.demo --help`` (or ``tsctl demo``) runs it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO, TypeVar, cast

from boto3.dynamodb.types import TypeDeserializer

from infra.config import AppConfig, load_cdk_json_context
from keydesign import format_ts, parse_timestamp
from local_runtime import query_checks
from local_runtime.demo_report import (
    HOT_SENSOR,
    NOT_RUN,
    DemoFacts,
    Phase,
    StoredMap,
    build_report,
    partition_load,
    render,
)
from local_runtime.demo_rotation import RotationFacts, draw_table_writes, table_writes
from local_runtime.faults import LocalFaults
from local_runtime.load_chart import chart_data, draw
from local_runtime.scheduler import ReplayClock
from local_runtime.system import LocalOptions, LocalSystem
from producer import Packer, Publisher, PublishSummary, Workload, generate, kinesis_client, publish

__all__ = [
    "DEMO_CONTEXT",
    "DEMO_HOT_KEYS_ENVIRONMENT",
    "DEMO_ROTATION_CONTEXT",
    "HOT_SENSOR",
    "NOT_RUN",
    "DemoOptions",
    "build_report",
    "demo_config",
    "invalid_readings",
    "main",
    "partition_load",
    "render",
    "run_demo",
]

REPO_ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")

#: cdk.json overrides that compress the demo's time (every one a stack setting; see docs/local.md).
DEMO_CONTEXT: Mapping[str, object] = {
    # A split takes effect at a bucket boundary: the next minute instead of the next hour.
    "bucket": "1m",
    # Writers and readers see a changed shard map within 5 s instead of 60.
    "shard_map_cache_ttl_s": 5,
    # Readings may be at most 5 s ahead of the clock (published in real time, none is): the
    # detector's change margin must cover it (see DEMO_HOT_KEYS_ENVIRONMENT).
    "max_future": "5s",
    # Sized for what one machine ingests (~2,000 readings/s), as 100 is for the seed's 50,000/s:
    # the other sensors' keys stay far below the split threshold.
    "shards": 8,
}
#: cdk.json overrides that compress the rotation's time, on top of DEMO_CONTEXT when there is a
#: table period (as by default): the demo replays five hours of hourly tables (DemoOptions.history_s).
DEMO_ROTATION_CONTEXT: Mapping[str, object] = {
    # Tables past retention within the replayed hours (grace 2h + dial-down delay must stay under it).
    "retention": "3h",
    # The least ingest's 120 s timeout allows: a closed table is dialled down 2h02m after its hour ends.
    "dial_down_delay": "2m",
    # On-demand tables cost nothing idle, so the rotator has nothing to dial down on them: provisioned
    # tables show that step. The rotator's planner sizes each new table for 2,500 readings/s at 70%.
    "billing_mode": "PROVISIONED",
    "peak_writes_per_s": 2_500,
    # Each table is exported to S3 (moto's) before it is dropped; local mode creates the bucket.
    "export_bucket": "timeseries-demo-exports",
}
#: The hot-key function's own variables (its settings module's; not stack configuration).
DEMO_HOT_KEYS_ENVIRONMENT: Mapping[str, str] = {
    # Load measured over 5 s windows (they must divide the 1 min bucket), judged 5 s after they end.
    "HOT_WINDOW": "5s",
    "HOT_WINDOW_GRACE": "5s",
    # A change applies at the first bucket boundary after now + cache TTL (5 s) + this margin:
    # 15-75 s after it is decided instead of ~7 min. The settings refuse less than MAX_FUTURE (5 s).
    "HOT_CHANGE_MARGIN": "10s",
    # A scale-down needs this many quiet windows in a row (5 min): none while the demo runs,
    # so the map shows the split alone.
    "HOT_SCALE_DOWN_WINDOWS": "60",
}


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """The scenario. Rates are readings per second of event time, published in real time."""

    sensors: int = 2_000
    base_rate: float = 400.0
    hot_rate: float = 1_200.0
    #: Seconds of traffic before the split, and after it.
    hot_phase_s: float = 10.0
    split_phase_s: float = 5.0
    #: Readings/s the other sensors keep sending while the demo waits for the split.
    trickle_rate: float = 20.0
    #: Readings that break a rule (each kind in turn) and records that are not JSON at all.
    invalid_readings: int = 50
    garbage_records: int = 5
    seed: int = 7
    faults: LocalFaults = field(default_factory=LocalFaults)
    out_dir: Path = Path("out/demo")
    #: cdk.json overrides on top of :data:`DEMO_CONTEXT`, and hot-key variables on top of its own.
    context: Mapping[str, object] = field(default_factory=dict)
    hotkeys_environment: Mapping[str, str] = field(default_factory=dict)
    #: The rotator's history replayed before the story (seconds of the past), at least how long each
    #: replayed run takes in real time, and the readings per (real) second stamped with that clock.
    history_s: float = 5 * 3600.0
    history_pace_s: float = 0.4
    history_rate: float = 40.0
    #: Readings published for a period whose table the rotator dropped (ingest must refuse them).
    refused_readings: int = 3
    #: How long to wait for the detector's split, and for the streams to drain.
    split_timeout_s: float = 240.0
    timeout_s: float = 300.0
    picture: bool = True

    @classmethod
    def quick(cls, **overrides: Any) -> DemoOptions:
        """A smaller scenario (a test's, or ``--quick``): 300 sensors, the hot sensor at 900/s."""
        base: dict[str, Any] = {
            "sensors": 300,
            "base_rate": 150.0,
            "hot_rate": 900.0,
            "hot_phase_s": 10.0,
            "split_phase_s": 4.0,
            "trickle_rate": 10.0,
            "invalid_readings": 10,
            "garbage_records": 2,
            "history_pace_s": 0.2,
            "history_rate": 25.0,
        }
        return cls(**{**base, **overrides})


def demo_config(context: Mapping[str, object] | None = None) -> AppConfig:
    """cdk.json with the demo's compressed time (and, with a table period, its rotation settings)
    and then ``context`` on top."""
    base = {**load_cdk_json_context(REPO_ROOT / "cdk.json"), **DEMO_CONTEXT}
    plain = AppConfig.from_context({**base, **(context or {})})
    if plain.table_period is None:
        return plain
    return AppConfig.from_context({**base, **DEMO_ROTATION_CONTEXT, **(context or {})})


def run_demo(
    options: DemoOptions | None = None,
    *,
    progress: TextIO | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the demo; write ``<out_dir>/report.json`` (plus ``extra`` sections) and the picture; return
    the report (``report["ok"]`` says if every check passed)."""
    options = options or DemoOptions()
    say = _Say(progress or sys.stderr)
    config = demo_config(options.context)
    hot_env = {**DEMO_HOT_KEYS_ENVIRONMENT, **options.hotkeys_environment}
    options.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    say(f"starting the local system (faults: {options.faults.describe()})")
    rotates = config.table_period is not None
    local = LocalOptions(
        faults=options.faults,
        function_log=options.out_dir / "functions.log",
        hotkeys_environment=hot_env,
        rotator_replay_s=options.history_s if rotates else None,
        rotator_replay_pace_s=options.history_pace_s,
    )
    with LocalSystem(config, local) as system:
        run = _DemoRun(system, options, say, started)
        facts = run.execute()
    facts.timings = {**facts.timings, "total": time.monotonic() - started}

    if options.picture and facts.stored:
        facts.picture = _draw(facts, config, options.out_dir / "partition-load.png")
    if options.picture and facts.rotation is not None:
        facts.rotation_picture = _draw_tables(facts.rotation, options.out_dir / "table-writes.png")
    report = build_report(
        scenario=_scenario(options),
        config=config,
        facts=facts,
        settings=_settings(hot_env, rotating=config.table_period is not None),
    )
    report.update(extra or {})
    path = options.out_dir / "report.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    say(f"report: {path} ({'OK' if report['ok'] else 'FAILED'}) in {facts.timings['total']:.0f} s")
    return report


class _DemoRun:
    """One run against a started system: the steps of the module docstring, in order."""

    def __init__(self, system: LocalSystem, options: DemoOptions, say: _Say, started: float) -> None:
        self.system = system
        self.options = options
        self.say = say
        self.started = started
        self.endpoints = system.endpoints
        self.dynamodb = system.client("dynamodb")
        self.sqs = system.client("sqs")
        self.ledger: list[dict[str, Any]] = []
        self.story_from_ms: int | None = None
        self.refused: dict[str, Any] = {}
        self.caught_up_after_s: float | None = None
        self.phases: list[Phase] = []
        self.summaries: list[PublishSummary] = []
        self.extra_published = 0
        self.timings: dict[str, float] = {"start": time.monotonic() - started}
        self._lock = threading.Lock()

    def execute(self) -> DemoFacts:
        e = self.endpoints
        self.say(f"moto on {e.endpoint_url}; stream {e.stream_name}; tables {', '.join(e.readings_tables)}")
        self.say(f"query API on {e.api_url}; functions {', '.join(e.functions)}")
        alerts_url = self._subscribe_to_alerts()
        clock = self.system.clock
        if isinstance(clock, ReplayClock):
            self._history(clock)
        self.story_from_ms = _now_ms()
        first, map_before = self._before_the_split()
        split = self._await_split()
        boundary = _hot_boundary(split) if split is not None else None
        self._after_the_split(first)

        mark = time.monotonic()
        drained = _wait_drained(self.system, self.options.timeout_s, self.say)
        self.timings["drain"] = time.monotonic() - mark
        self.say("streams drained" if drained else "the streams did NOT drain in time")
        facts = self._count(drained, alerts_url)
        facts.map_before = map_before
        facts.boundary_ms = boundary
        facts.story_from_ms = self.story_from_ms if isinstance(clock, ReplayClock) else None
        mark = time.monotonic()
        facts.queries = self._queries(boundary) if e.api_url else None
        self.timings["queries"] = time.monotonic() - mark
        facts.runtime = self.system.stats()
        facts.timings = dict(self.timings)
        return facts

    def _history(self, clock: ReplayClock) -> None:
        """Step 0: the rotator replays its history on the replay clock while readings stamped with
        that clock land in each hour's table; then readings of a dropped hour, which ingest refuses."""
        o, say = self.options, self.say
        mark = time.monotonic()
        every = self.system.config.rotation_interval_minutes()
        say(
            f"rotation: replaying {o.history_s / 3600:g} h of {self.system.config.table_period} tables, the "
            f"rotator every {every} min of that time (a run at least every {o.history_pace_s:g} s), "
            f"{o.history_rate:g} readings/s stamped with the replayed clock"
        )
        stop = threading.Event()
        history = _InThread(lambda: self._publish_history(clock, stop, spread_ms=every * 60_000))
        try:
            wait_for(clock.caught_up, o.history_s / (every * 60) * 10 + 120, interval_s=0.2)
        finally:
            stop.set()
            history.result(60)
        self.caught_up_after_s = time.monotonic() - mark
        self.timings["rotation_history"] = self.caught_up_after_s
        runs = list(self.system.rotations)
        dropped = [t for run in runs for t in (run.get("summary") or {}).get("deleted", [])]
        say(
            f"  caught up with the wall clock after {self.caught_up_after_s:.0f} s: {len(runs)} rotator runs; "
            f"tables now {', '.join(self.system.readings_tables())}; dropped {', '.join(dropped) or 'none'}"
        )
        if dropped:
            self._publish_for_dropped(dropped[0], runs)

    def _publish_history(self, clock: ReplayClock, stop: threading.Event, *, spread_ms: int) -> None:
        """A trickle of readings stamped with the replayed clock, less up to ``spread_ms`` so they
        spread over each step (never ahead of it: ingest would refuse a reading from its future),
        sent every quarter second: the replay moves on only once ingest has taken what was sent."""
        o = self.options
        e = self.endpoints
        publisher = Publisher(kinesis_client(endpoint_url=e.endpoint_url, region=e.region), e.stream_name)
        seen = _PhaseLedger("rotation history (replayed time)")
        rng = random.Random(o.seed + 3)
        per_send = max(1, round(o.history_rate / 4))
        n = 0
        while not stop.is_set() and not clock.caught_up():
            chunk = []
            for _ in range(per_send):
                reading = {
                    "entity_id": f"sensor-{rng.randrange(1, o.sensors + 1):06d}",
                    "event_id": f"history-{n}",
                    "timestamp": clock.now_ms() - rng.randrange(spread_ms),
                    "measures": {"temp": round(rng.uniform(15, 30), 2), "rh": round(rng.uniform(30, 60), 1)},
                }
                chunk.append((0.0, reading))
                seen.add(reading)
                n += 1
            publish(chunk, publisher, Packer())  # sent now: the last batch is drained at the end
            stop.wait(0.25)
        with self._lock:
            self.summaries.append(publisher.summary)
            self.ledger.extend(seen.readings)
            if seen.readings:
                self.phases.append(seen.phase())

    def _publish_for_dropped(self, table: str, runs: list[dict[str, Any]]) -> None:
        """Readings of the hour whose table the rotator dropped: ingest must refuse each, with its reason."""
        layout = self.system.config.layout()
        period = layout.table_period
        assert period is not None  # noqa: S101 - only with a table period
        low = min(int(r["now_ms"]) for r in runs) - self.system.config.retention_ms - 2 * period.nominal_ms
        start = next((s for s in period.starts(low, _now_ms()) if layout.table_for(s) == table), None)
        if start is None:
            return
        ids = [f"dropped-period-{n}" for n in range(self.options.refused_readings)]
        readings = [
            {"entity_id": "sensor-000001", "event_id": i, "timestamp": start + 1_800_000 + n, "measures": {"temp": 1.0}}
            for n, i in enumerate(ids)
        ]
        e = self.endpoints
        kinesis = kinesis_client(endpoint_url=e.endpoint_url, region=e.region)
        summary = publish([(0.0, r) for r in readings], Publisher(kinesis, e.stream_name), Packer(), validate=False)
        with self._lock:
            self.summaries.append(summary)
        self.refused = {"table": table, "event_ids": ids}
        self.say(f"  published {summary.readings_sent} readings of {format_ts(start)}, whose table {table} is gone")

    def _before_the_split(self) -> tuple[Workload, StoredMap | None]:
        """Phase 1, in real time, and the shard map as ingest first stores it (before any change)."""
        o = self.options
        mark = time.monotonic()
        first = Workload(
            entities=o.sensors,
            rate=o.base_rate,
            hot=((HOT_SENSOR, o.hot_rate),),
            duration_s=o.hot_phase_s,
            seed=o.seed,
            start_ms=_now_ms(),
        )
        self.say(
            f"phase 1 (before the split): {first.total:,} readings over {o.hot_phase_s:g} s in real time: "
            f"{o.sensors:,} sensors at {o.base_rate:,.0f}/s in all, {HOT_SENSOR} at {o.hot_rate:,.0f}/s"
        )
        publisher = _InThread(lambda: self._publish("before the split", generate(first)))
        map_before = wait_for(self._read_map, o.hot_phase_s + 60)
        publisher.result(o.hot_phase_s + 120)
        self._publish_rule_breakers()
        self.timings["phase_1"] = time.monotonic() - mark
        return first, map_before

    def _await_split(self) -> StoredMap | None:
        """The map once it splits the hot sensor, then the wall clock past the split's boundary;
        the other sensors keep reporting meanwhile (a window is judged once the stream passed it)."""
        o, say = self.options, self.say
        mark = time.monotonic()
        trickle = _Trickle(self, o.trickle_rate, o.sensors, o.seed + 2)
        trickle.start()
        say(f"waiting for the hot-key detector to split {HOT_SENSOR} (the others trickle at {o.trickle_rate:g}/s)")
        try:
            split = wait_for(self._split_scheduled, o.split_timeout_s, on_tick=self._waiting_note, tick_s=15)
            if split is None:
                say(f"no split of {HOT_SENSOR} within {o.split_timeout_s:.0f} s")
                return None
            boundary = _hot_boundary(split)
            self.timings["detection"] = time.monotonic() - mark
            shards = split.shard_map.entity_history[HOT_SENSOR][-1].shards
            say(
                f"split scheduled after {self.timings['detection']:.0f} s: {HOT_SENSOR} -> {shards} sub-shards from "
                f"{format_ts(boundary)}; waiting {max(0.0, (boundary - _now_ms()) / 1000):.0f} s for the wall clock "
                "to pass it"
            )
            waited = time.monotonic()
            wait_for(lambda: _now_ms() >= boundary + 500 or None, (boundary - _now_ms()) / 1000 + 30)
            self.timings["boundary_wait"] = time.monotonic() - waited
            return split
        finally:
            trickle.stop()
            self.timings["split"] = time.monotonic() - mark

    def _after_the_split(self, first: Workload) -> None:
        """Phase 2: the same traffic, every event time after the boundary (the clock has passed it)."""
        o = self.options
        mark = time.monotonic()
        second = replace(first, duration_s=o.split_phase_s, seed=o.seed + 1, start_ms=_now_ms())
        self.say(f"phase 2 (after the split): {second.total:,} readings over {o.split_phase_s:g} s in real time")
        self._publish("after the split", generate(second))
        self.timings["phase_2"] = time.monotonic() - mark

    def _count(self, drained: bool, alerts_url: str) -> DemoFacts:
        """Everything from the outside: tables, queues, the control table, the alerts."""
        e = self.endpoints
        mark = time.monotonic()
        self.say("counting what was stored, rejected and skipped; reading the control table")
        hot_skipped = _drain_queue(self.sqs, e.hotkeys_failures_queue_url) if e.hotkeys_failures_queue_url else []
        rotators = [s for s in self.system.schedules if s.name.endswith("-rotator")]
        if rotators:
            # A last look at every table, on the wall clock, before the scan: a table it drops
            # is then read back from its export, never half in both.
            rotators[0].run_once()
        by_table = _scan_tables(self.dynamodb, self.system.readings_tables())
        rejects = _drain_queue(self.sqs, e.rejects_queue_url)
        rotation = self._rotation(by_table, rejects)
        facts = DemoFacts(
            published=sum(s.readings_sent for s in self.summaries) + self.extra_published,
            failed_to_publish=sum(s.readings_failed for s in self.summaries),
            phases=list(self.phases),
            ledger=self.ledger,
            stored=[item for items in by_table.values() for item in items],
            rejects=rejects,
            skipped=_drain_queue(self.sqs, e.ingest_failures_queue_url),
            hot_keys_skipped=hot_skipped,
            drained=drained,
            map_after=self._read_map(),
            windows=self._judged_windows(),
            alerts=[_alert(m) for m in _drain_queue(self.sqs, alerts_url)],
            rotation=rotation,
            exported=[i for items in (rotation.exported_by_table.values() if rotation else ()) for i in items],
        )
        self.timings["verify"] = time.monotonic() - mark
        return facts

    # -- publishing -------------------------------------------------------------------------------

    def _publish(self, name: str, items: Iterable[tuple[float, dict[str, Any]]], *, quiet: bool = False) -> None:
        e = self.endpoints
        kinesis = kinesis_client(endpoint_url=e.endpoint_url, region=e.region)
        seen = _PhaseLedger(name)

        def recorded() -> Iterator[tuple[float, dict[str, Any]]]:
            for offset, reading in items:
                seen.add(reading)
                yield offset, reading

        def note(summary: PublishSummary, final: bool) -> None:
            if not quiet and (final or summary.elapsed_s - seen.noted_s >= 5):
                seen.noted_s = summary.elapsed_s
                self.say(f"  {name}: sent {summary.readings_sent:,} readings in {summary.records_sent:,} records")

        summary = publish(recorded(), Publisher(kinesis, e.stream_name), Packer(), pace=True, progress=note)
        with self._lock:
            self.summaries.append(summary)
            self.ledger.extend(seen.readings)
            if seen.readings:
                self.phases.append(seen.phase())

    def _publish_rule_breakers(self) -> None:
        e = self.endpoints
        kinesis = kinesis_client(endpoint_url=e.endpoint_url, region=e.region)
        items = [(0.0, reading) for reading in invalid_readings(self.options.invalid_readings, _now_ms())]
        summary = publish(items, Publisher(kinesis, e.stream_name), Packer(), validate=False)
        garbage = _publish_garbage(kinesis, e.stream_name, self.options.garbage_records)
        with self._lock:
            self.summaries.append(summary)
            self.extra_published += garbage
        self.say(f"  and {summary.readings_sent} readings that break a rule, {garbage} records that are not JSON")

    # -- watching the control table ------------------------------------------------------------------

    def _read_map(self) -> StoredMap | None:
        # Imported here: adapters.observability sets Powertools' service name at its first import,
        # which must be the functions' (it is, once the system has imported the ingest handler).
        from adapters.shard_map_store import SHARD_MAP_KEY  # noqa: PLC0415

        item = self.dynamodb.get_item(
            TableName=self.endpoints.control_table, Key=dict(SHARD_MAP_KEY), ConsistentRead=True
        ).get("Item")
        return StoredMap.from_item(_plain(item)) if item else None

    def _split_scheduled(self) -> StoredMap | None:
        stored = self._read_map()
        if stored is None:
            return None
        history = stored.shard_map.entity_history.get(HOT_SENSOR, ())
        return stored if history and history[-1].shards > 1 else None

    def _waiting_note(self, waited_s: float) -> None:
        mappings = self.system.stats()["event_source_mappings"]
        hot = [m for name, m in mappings.items() if name.endswith(tuple(self.system.readings_tables()))]
        invocations = sum(m["invocations"] for m in hot)
        records = sum(m["records_received"] for m in hot)
        judged = len(self._judged_windows())
        self.say(
            f"  {waited_s:.0f} s: the detector has had {invocations:,} invocations for {records:,} stream records "
            f"and judged {judged} windows"
        )

    def _judged_windows(self) -> list[dict[str, Any]]:
        windows = []
        request: dict[str, Any] = {
            "TableName": self.endpoints.control_table,
            "FilterExpression": "begins_with(pk, :close)",
            "ExpressionAttributeValues": {":close": {"S": "close#"}},
            "ConsistentRead": True,
        }
        for page in self.dynamodb.get_paginator("scan").paginate(**request):
            for raw in page.get("Items", []):
                item = _plain(raw)
                if item.get("state") != "done":
                    continue
                try:
                    summary = json.loads(str(item.get("summary", "{}")))
                except ValueError:
                    summary = {}
                windows.append({"window": str(item["pk"]).removeprefix("close#"), "summary": summary})
        return windows

    def _subscribe_to_alerts(self) -> str:
        """An SQS queue on the hot-key topic, as an operator's e-mail subscription would be."""
        url = str(self.sqs.create_queue(QueueName=f"{self.system.config.stack_name}-demo-alerts")["QueueUrl"])
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.system.client("sns").subscribe(TopicArn=self.endpoints.alarm_topic_arn, Protocol="sqs", Endpoint=arn)
        return url

    # -- queries --------------------------------------------------------------------------------------

    def _queries(self, boundary: int | None) -> dict[str, Any]:
        api_url = self.endpoints.api_url
        assert api_url is not None  # noqa: S101 - the caller checked
        client = query_checks.ApiClient(api_url)
        hot = [r for r in self.ledger if r["entity_id"] == HOT_SENSOR]
        low = min(r["timestamp"] for r in hot)
        high = max(r["timestamp"] for r in hot)
        from_ms, to_ms = low - low % 1000, high - high % 1000 + 1000
        bucket = self.system.config.layout().bucket
        middle = boundary if boundary is not None else (from_ms + to_ms) // 2
        self.say(f"querying through {api_url}: {HOT_SENSOR}'s {len(hot):,} readings page by page, latest, ...")
        checks = [query_checks.check_entity_range(client, self.ledger, HOT_SENSOR, from_ms, to_ms)]
        checks.append(query_checks.check_latest(client, self.ledger, HOT_SENSOR))
        checks.append(
            query_checks.check_aggregates(
                client, self.ledger, HOT_SENSOR, from_ms, to_ms, interval="1m", interval_ms=60_000
            )
        )
        checks.append(query_checks.check_range_page(client, self.ledger, middle - 20_000, middle + 20_000, bucket))
        for check in checks:
            verdict = "equal" if check.difference is None else f"DIFFERENT: {check.difference}"
            self.say(f"  {check.name}: {check.summary}; {verdict}")
        return query_checks.summarise(client, checks)

    def _rotation(
        self, by_table: Mapping[str, list[dict[str, Any]]], rejects: list[dict[str, Any]]
    ) -> RotationFacts | None:
        """What the rotator did (its runs, and one more run now), and what it left: the tables'
        capacity, and each dropped table's readings read back from its export."""
        runs = [s for s in self.system.schedules if s.name.endswith("-rotator")]
        if not runs:
            return None
        schedule = runs[0]
        config = self.system.config
        history = list(self.system.rotations)
        dropped = sorted({t for run in history for t in (run.get("summary") or {}).get("deleted", [])})
        clock = self.system.clock
        return RotationFacts(
            layout=config.layout(),
            retention_ms=config.retention_ms,
            prebuild_periods=config.rotation.prebuild_periods,
            runs=history,
            failures=schedule.failures,
            every_s=config.rotation_interval_minutes() * 60.0,
            clock={
                "replayed_hours": round(self.options.history_s / 3600, 2) if isinstance(clock, ReplayClock) else 0,
                "replay_pace_s": self.options.history_pace_s,
                "caught_up_after_s": round(self.caught_up_after_s, 1) if self.caught_up_after_s else None,
            },
            tables_now={name: _capacity(self.dynamodb, name) for name in by_table},
            stored_by_table=by_table,
            exported_by_table={name: self._read_export(name) for name in dropped},
            export_bucket=config.rotation.export_bucket,
            refused=self.refused,
            rejects=rejects,
        )

    def _read_export(self, table: str) -> list[dict[str, Any]]:
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
                        items.append(_plain(json.loads(line)["Item"]))
        return items


# -- helpers ------------------------------------------------------------------------------------------


def wait_for(
    condition: Callable[[], T | None],
    timeout_s: float,
    *,
    interval_s: float = 0.5,
    on_tick: Callable[[float], None] | None = None,
    tick_s: float = 10.0,
) -> T | None:
    """``condition()`` once it returns something other than None (or False), polled every ``interval_s``;
    None after ``timeout_s``. ``on_tick(waited_s)`` every ``tick_s`` while waiting."""
    started = time.monotonic()
    last_tick = started
    pause = threading.Event()
    while True:
        value = condition()
        if value is not None and value is not False:
            return value
        now = time.monotonic()
        if now - started >= timeout_s:
            return None
        if on_tick is not None and now - last_tick >= tick_s:
            last_tick = now
            on_tick(now - started)
        pause.wait(min(interval_s, max(0.0, timeout_s - (now - started))))


class _InThread:
    """Runs ``target`` in a thread; :meth:`result` joins it and re-raises what it raised."""

    def __init__(self, target: Callable[[], None]) -> None:
        self._error: BaseException | None = None

        def run() -> None:
            try:
                target()
            except BaseException as exc:  # re-raised in the caller's thread
                self._error = exc

        self._thread = threading.Thread(target=run, name="demo-publisher", daemon=True)
        self._thread.start()

    def result(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"publishing did not finish within {timeout_s:.0f} s")
        if self._error is not None:
            raise self._error


class _Trickle:
    """The other sensors keep reporting (paced, a few readings a second) until stopped."""

    def __init__(self, run: _DemoRun, rate: float, sensors: int, seed: int) -> None:
        self._run = run
        self._rate = max(rate, 0.1)
        self._sensors = sensors
        self._seed = seed
        self._stop = threading.Event()
        self._thread: _InThread | None = None

    def start(self) -> None:
        self._thread = _InThread(lambda: self._run._publish("waiting for the split", self._readings(), quiet=True))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.result(60)

    def _readings(self) -> Iterator[tuple[float, dict[str, Any]]]:
        rng = random.Random(self._seed)
        start = _now_ms()
        n = 0
        while not self._stop.is_set():
            offset = n / self._rate
            yield (
                offset,
                {
                    "entity_id": f"sensor-{rng.randrange(1, self._sensors + 1):06d}",
                    "event_id": f"trickle-{self._seed}-{n}",
                    "timestamp": start + int(offset * 1000),
                    "measures": {"temp": round(rng.uniform(15, 30), 2), "rh": round(rng.uniform(30, 60), 1)},
                },
            )
            n += 1


class _PhaseLedger:
    def __init__(self, name: str) -> None:
        self.name = name
        self.readings: list[dict[str, Any]] = []
        self.noted_s = 0.0

    def add(self, reading: dict[str, Any]) -> None:
        self.readings.append(reading)

    def phase(self) -> Phase:
        times = [int(r["timestamp"]) for r in self.readings]
        return Phase(
            name=self.name,
            from_ms=min(times),
            to_ms=max(times) + 1,
            readings=len(self.readings),
            hot_readings=sum(1 for r in self.readings if r["entity_id"] == HOT_SENSOR),
        )


def _hot_boundary(stored: StoredMap) -> int:
    return stored.shard_map.entity_history[HOT_SENSOR][-1].effective_from_ms


def _now_ms() -> int:
    return int(time.time() * 1000)


def _scenario(options: DemoOptions) -> dict[str, Any]:
    return {
        "sensors": options.sensors,
        "base_readings_per_s": options.base_rate,
        "hot_sensor": HOT_SENSOR,
        "hot_sensor_readings_per_s": options.hot_rate,
        "before_split_s": options.hot_phase_s,
        "after_split_s": options.split_phase_s,
        "trickle_readings_per_s": options.trickle_rate,
        "invalid_readings": options.invalid_readings,
        "garbage_records": options.garbage_records,
        "faults": options.faults.describe(),
        "published_in_real_time": True,
    }


def _settings(hot_env: Mapping[str, str], *, rotating: bool = False) -> dict[str, Any]:
    """The hot-key variables the demo compresses time with (every one is in DEMO_HOT_KEYS_ENVIRONMENT),
    and the rotation's overrides when it rotates."""
    return {
        **({"rotation_context_overrides": dict(DEMO_ROTATION_CONTEXT)} if rotating else {}),
        "hot_window": hot_env["HOT_WINDOW"],
        "hot_window_grace": hot_env["HOT_WINDOW_GRACE"],
        "hot_change_margin": hot_env["HOT_CHANGE_MARGIN"],
        "hot_scale_down_windows": int(hot_env["HOT_SCALE_DOWN_WINDOWS"]),
        "context_overrides": dict(DEMO_CONTEXT),
        "hot_keys_environment": dict(hot_env),
    }


def _draw(facts: DemoFacts, config: AppConfig, path: Path) -> dict[str, Any]:
    story = facts.story_from_ms
    chart = chart_data(
        [i for i in facts.stored if story is None or parse_timestamp(str(i["t"]), "t") >= story],
        layout_kind=config.layout().kind,
        threshold_wcu=config.hot_split_threshold_wcu,
        boundary_ms=facts.boundary_ms,
    )
    if chart is None:
        return {}
    split = f"; {HOT_SENSOR} split at {format_ts(facts.boundary_ms)}" if facts.boundary_ms is not None else ""
    draw(chart, path, title=f"Write units per event-time second, hottest partition keys{split}")
    return {"path": str(path), **chart.as_dict()}


def _draw_tables(rotation: RotationFacts, path: Path) -> dict[str, Any]:
    by_table = {**rotation.exported_by_table, **rotation.stored_by_table}
    caught_up = None
    if rotation.runs and rotation.clock.get("caught_up_after_s") is not None:
        # The first run on the wall clock is the first after the catch-up.
        replayed = [int(r["now_ms"]) for r in rotation.runs]
        caught_up = max(replayed[:-1], default=None)
    chart = table_writes(by_table, runs=rotation.runs, caught_up_ms=caught_up)
    if chart is None:
        return {}
    draw_table_writes(chart, path, title="Readings per table over event time, and what the rotator did to each")
    return {"path": str(path), **chart.as_dict()}


# -- publishing what ingest must reject --------------------------------------------


def invalid_readings(count: int, now_ms: int) -> list[dict[str, Any]]:
    """Readings that each break one rule, the kinds in turn."""
    kinds: list[Callable[[int], dict[str, Any]]] = [
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms, "measures": {"temp": "warm"}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "measures": {"temp": 1.0}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms + 86_400_000, "measures": {"temp": 1.0}},
        lambda n: {"entity_id": "", "timestamp": now_ms, "measures": {"temp": 1.0}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms, "measures": {"temp": 1.0}, "colour": "red"},
    ]
    return [kinds[n % len(kinds)](n) for n in range(count)]


def _publish_garbage(kinesis: Any, stream: str, count: int) -> int:
    """Records that are not JSON: each is one unit ingest must reject."""
    if count <= 0:
        return 0
    records = [{"Data": f"not json {n} \x00".encode(), "PartitionKey": f"garbage-{n}"} for n in range(count)]
    response = kinesis.put_records(StreamName=stream, Records=records)
    return count - int(response.get("FailedRecordCount", 0))


# -- looking at the system from the outside ---------------------------------------------


def _wait_drained(system: LocalSystem, timeout_s: float, say: _Say) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if system.wait_until_idle(min(10.0, remaining)):
            return True
        stats = system.stats()["event_source_mappings"]
        for name, s in stats.items():
            say(
                f"  {name}: {s.get('invocations', 0):,} invocations, "
                f"{s.get('records_succeeded', 0):,}/{s.get('records_received', 0):,} records done, "
                f"{s.get('function_errors', 0):,} errors, {s.get('bisections', 0):,} bisections"
            )


_DESERIALIZE = cast(Callable[[Any], Any], TypeDeserializer().deserialize)


def _plain(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _DESERIALIZE(v) for k, v in raw.items()}


def _scan_tables(dynamodb: Any, tables: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Every item of each table, by table."""
    out: dict[str, list[dict[str, Any]]] = {}
    for table in tables:
        items = out.setdefault(table, [])
        for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            items.extend(_plain(raw) for raw in page.get("Items", []))
    return out


def _capacity(dynamodb: Any, table: str) -> dict[str, Any]:
    """A table's billing and capacity as DescribeTable gives them."""
    try:
        description = dynamodb.describe_table(TableName=table)["Table"]
    except dynamodb.exceptions.ResourceNotFoundException:
        return {"billing": None, "write_units": None, "read_units": None, "warm_write_units": None}
    billing = description.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED")
    throughput = description.get("ProvisionedThroughput", {})
    warm = description.get("WarmThroughput", {})
    return {
        "billing": billing,
        "write_units": throughput.get("WriteCapacityUnits"),
        "read_units": throughput.get("ReadCapacityUnits"),
        "warm_write_units": warm.get("WriteUnitsPerSecond"),
    }


def _drain_queue(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
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


def _alert(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """An SNS notification as SQS receives it (the envelope): its subject and JSON body."""
    try:
        body = json.loads(str(envelope.get("Message", "{}")))
    except ValueError:
        body = {"text": str(envelope.get("Message"))[:500]}
    return {"subject": envelope.get("Subject"), "body": body if isinstance(body, dict) else {"value": body}}


class _Say:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def __call__(self, text: str) -> None:
        with self._lock:
            self.stream.write(f"[demo] {text}\n")
            self.stream.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m local_runtime.demo", description=(__doc__ or "").split("\n\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        options = options_from(args)
    except ValueError as exc:
        parser.error(str(exc))
    report = run_demo(options)
    print(render(report))
    return 0 if report["ok"] else 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (``tsctl demo`` takes the same)."""
    defaults = DemoOptions()
    parser.add_argument("--quick", action="store_true", help="a smaller scenario: 300 sensors, the hot one at 900/s")
    parser.add_argument(
        "--faults",
        default="",
        help='inject faults, e.g. "throttle=2,rate=0.05,partial=3,fraction=0.5,invoke_errors=0.1"',
    )
    parser.add_argument("--sensors", type=int, default=None, help=f"sensors (default {defaults.sensors:,})")
    parser.add_argument("--hot-rate", type=float, default=None, help=f"readings/s of {HOT_SENSOR}")
    parser.add_argument("--out", type=Path, default=defaults.out_dir, help="where report.json and the picture go")
    parser.add_argument("--seed", type=int, default=defaults.seed)


def options_from(args: argparse.Namespace) -> DemoOptions:
    """DemoOptions from parsed arguments; ValueError naming what is wrong."""
    try:
        faults = LocalFaults.parse(args.faults)
    except ValueError as exc:
        raise ValueError(f"--faults: {exc}") from None
    overrides: dict[str, Any] = {"faults": faults, "out_dir": args.out, "seed": args.seed}
    if args.sensors is not None:
        if args.sensors < 1:
            raise ValueError("--sensors: must be at least 1")
        overrides["sensors"] = args.sensors
    if args.hot_rate is not None:
        if not math.isfinite(args.hot_rate) or args.hot_rate <= 0:
            raise ValueError("--hot-rate: must be above 0")
        overrides["hot_rate"] = args.hot_rate
    return DemoOptions.quick(**overrides) if args.quick else DemoOptions(**overrides)


if __name__ == "__main__":
    sys.exit(main())
