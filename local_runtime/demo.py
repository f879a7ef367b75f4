"""The demo driver: the seed scenario, scaled to one machine and compressed in time, through the real code path.

:func:`run_demo` starts the whole local system and plays the story docs/local.md ("The demo") tells,
step by step: the rotator's replayed history (with a table period, as by default), the hot sensor before
its split, the detector's split, the traffic after it, and the accounting. The story's traffic is
:mod:`local_runtime.demo_scenario`, the counting from outside :mod:`local_runtime.demo_accounting`, the
checks :mod:`local_runtime.demo_report`, the summary and pictures :mod:`local_runtime.demo_presentation`.
Time is compressed by configuration (:data:`DEMO_CONTEXT`, :data:`DEMO_HOT_KEYS_ENVIRONMENT`), and the
hot-key threshold lowered; docs/local.md says why each value.

``tsctl demo`` (``make demo``) runs it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from infra.config import Context, LambdaFunction, load_cdk_json_context
from local_runtime.demo_accounting import Observer
from local_runtime.demo_presentation import draw_pictures
from local_runtime.demo_report import HOT_SENSOR, DemoFacts, RotationFacts, build_report
from local_runtime.demo_scenario import Scenario, now_ms
from local_runtime.faults import LocalFaults
from local_runtime.scheduler import ReplayClock
from local_runtime.system import LocalOptions, LocalSystem

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]

#: cdk.json overrides that compress the demo's time (every one a stack setting; see docs/local.md).
DEMO_CONTEXT: Mapping[str, object] = {
    # A split takes effect at a bucket boundary: the next minute instead of the next hour.
    "bucket": "1m",
    # Writers and readers see a changed shard map within 5 s instead of 60.
    "shard_map_cache_ttl_s": 5,
    # Readings are published in real time, none more than 5 s ahead: the change margin must cover it.
    "max_future": "5s",
    # Sized for what one machine ingests, as 100 is for the seed's 50,000 readings/s.
    "shards": 8,
    # Lowered from 500: blocks pack the hot sensor's 1,200 readings/s into ~20 write units a second,
    # and one machine cannot push a key anywhere near 1,000 (the other keys stay near 2).
    "hot_split_threshold_wcu": 8,
}
#: cdk.json overrides for the rotation, on top of DEMO_CONTEXT when there is a table period (as by
#: default): the demo replays five hours of hourly tables (DemoOptions.history_s).
DEMO_ROTATION_CONTEXT: Mapping[str, object] = {
    # Tables past retention within the replayed hours (grace 2h + dial-down delay must stay under it).
    "retention": "3h",
    "dial_down_delay": "2m",
    # Late readings are stored as long as they are kept (cdk.json's 3d would outlast the 3h): the
    # replayed hours' readings lag the fast clock; a dropped hour's are refused with the reason.
    "max_age": "3h",
    # Provisioned tables, sized by the rotator's planner for 2,500 readings/s: closed ones have
    # something to shed.
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
    # A change applies at the first bucket boundary after now + cache TTL (5 s) + this margin: 15-75 s
    # after it is decided instead of ~7 min. The settings refuse less than MAX_FUTURE (5 s).
    "HOT_CHANGE_MARGIN": "10s",
    # A scale-down needs this many quiet windows in a row (5 min): none while the demo runs.
    "HOT_SCALE_DOWN_WINDOWS": "60",
}


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """The scenario. Rates are readings per second of event time, published in real time."""

    #: The fleet: each sensor reports 5 times a second, as the seed's 10,000 do.
    sensors: int = 80
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
    #: cdk.json overrides on top of :data:`DEMO_CONTEXT`.
    context: Mapping[str, object] = field(default_factory=dict)
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

    @classmethod
    def quick(cls, **overrides: Any) -> DemoOptions:
        """A smaller scenario (a test's, or ``--quick``): 30 sensors, the hot sensor at 900/s."""
        base: dict[str, Any] = {
            "sensors": 30,
            "base_rate": 150.0,
            "hot_rate": 900.0,
            "split_phase_s": 4.0,
            "trickle_rate": 10.0,
            "invalid_readings": 10,
            "garbage_records": 2,
            "history_pace_s": 0.2,
            "history_rate": 25.0,
        }
        return cls(**{**base, **overrides})


def demo_config(context: Mapping[str, object] | None = None) -> Context:
    """cdk.json with the demo's compressed time (and, with a table period, its rotation settings) and
    then ``context`` on top."""
    base = {**load_cdk_json_context(REPO_ROOT / "cdk.json"), **DEMO_CONTEXT}
    plain = Context.parse({**base, **(context or {})})
    if plain.table_period is None:
        return plain
    return Context.parse({**base, **DEMO_ROTATION_CONTEXT, **(context or {})})


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

    config = demo_config(options.context)
    hot_env = dict(DEMO_HOT_KEYS_ENVIRONMENT)
    options.out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say(f"starting the local system (faults: {options.faults.describe()})")
    rotates = config.table_period is not None
    local = LocalOptions(
        faults=options.faults,
        function_log=options.out_dir / "functions.log",
        environment={LambdaFunction.HOTKEYS: hot_env},
        rotator_replay_s=options.history_s if rotates else None,
        rotator_replay_pace_s=options.history_pace_s,
        # The rollup function runs once the streams drain (Observer.roll_up), on a clock ahead by its settle
        # time (ingest's timeout + 5 s) and a minute, so the minute just ingested is closed; none before.
        rollups=True,
        rollup_every_s=86_400.0,
        rollup_ahead_s=config.ingest_timeout_s + 5 + 65,
    )
    with LocalSystem(config, local) as system:
        facts = _play(system, options, say, {"start": time.monotonic() - started})
    facts.timings = {**facts.timings, "total": time.monotonic() - started}
    draw_pictures(facts, config, options.out_dir)
    settings = {
        **({"rotation_context_overrides": dict(DEMO_ROTATION_CONTEXT)} if rotates else {}),
        "hot_split_threshold_note": f"lowered to {config.split_threshold_wcu} WCU/s for the demo (stack: 500)",
        **{name.lower(): value for name, value in hot_env.items()},
        "context_overrides": dict(DEMO_CONTEXT),
    }
    published = ("sensors", "base_rate", "hot_rate", "hot_phase_s", "split_phase_s", "trickle_rate", "invalid_readings")
    scenario = {
        **{name: getattr(options, name) for name in (*published, "garbage_records")},
        "hot_sensor": HOT_SENSOR,
        "faults": options.faults.describe(),
        "published_in_real_time": True,
    }
    report = {**build_report(scenario=scenario, config=config, facts=facts, settings=settings), **(extra or {})}
    path = options.out_dir / "report.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    say(f"report: {path} ({'OK' if report['ok'] else 'FAILED'}) in {facts.timings['total']:.0f} s")
    return report


def _play(
    system: LocalSystem, options: DemoOptions, say: Callable[[str], None], timings: dict[str, float]
) -> DemoFacts:
    """The demo's steps, in order, against a started system; each step's duration in ``timings``."""

    def timed(name: str, step: Callable[[], T]) -> T:
        mark = time.monotonic()
        try:
            return step()
        finally:
            timings[name] = time.monotonic() - mark

    e = system.endpoints
    say(f"moto on {e.endpoint_url}; stream {e.stream_name}; query API on {e.api_url}")
    observer, scenario = Observer(system), Scenario(system, options, say)
    alerts_url = observer.subscribe_to_alerts()
    clock = system.clock
    if isinstance(clock, ReplayClock):
        timed("rotation_history", lambda: scenario.history(clock))
    story_from_ms = now_ms()
    first, map_before = timed("phase_1", lambda: scenario.before_the_split(observer.read_map))

    def scheduled() -> int | None:
        split = observer.split_scheduled()
        return split.shard_map.entity_history[HOT_SENSOR][-1].effective_from_ms if split is not None else None

    progress = lambda: f"the detector has judged {len(observer.judged_windows())} windows"  # noqa: E731
    boundary = timed("split", lambda: scenario.await_split(scheduled, progress))
    timed("phase_2", lambda: scenario.after_the_split(first))
    drained = timed("drain", lambda: observer.wait_drained(options.timeout_s, say))
    say("streams drained; counting what was stored, rejected and skipped" if drained else "the streams did NOT drain")

    def count() -> DemoFacts:
        hot_skipped = observer.drain(e.hotkeys_failures_queue_url)
        rotator = system.schedule_of(LambdaFunction.ROTATOR)
        if rotator is not None:
            # A last look at every table, on the wall clock, before the scan: a table it drops is then
            # read back from its export, never half in both.
            rotator.run_once()
        blocks, runs = observer.blocks(), list(system.rotations)
        dropped = sorted({t for run in runs for t in (run.get("summary") or {}).get("deleted", [])})
        rotation = None
        if rotator is not None:
            tables = sorted({b.table for b in blocks} | set(system.readings_tables()))
            replayed = round(options.history_s / 3600, 2) if isinstance(clock, ReplayClock) else 0
            caught_up = round(scenario.caught_up_after_s, 1) if scenario.caught_up_after_s else None
            rotation = RotationFacts(
                runs=runs,
                failures=rotator.failures,
                clock={
                    "replayed_hours": replayed,
                    "replay_pace_s": options.history_pace_s,
                    "caught_up_after_s": caught_up,
                },
                capacity={name: observer.capacity(name) for name in tables},
                refused=scenario.refused,
            )
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
            alerts=observer.alerts(alerts_url),
            boundary_ms=boundary,
            rotation=rotation,
            exported={table: observer.read_export(table) for table in dropped},
            story_from_ms=story_from_ms if isinstance(clock, ReplayClock) else None,
        )

    facts = timed("verify", count)
    facts.rollups = timed("rollups", lambda: observer.roll_up(now_ms(), say))
    ledger = [r for _, r in facts.ledger]
    facts.queries = timed("queries", lambda: observer.queries(ledger, boundary, say)) if e.api_url else None
    facts.runtime, facts.timings = system.stats(), timings
    return facts
