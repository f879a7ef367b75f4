"""The demo driver: the seed scenario, scaled to one machine and compressed in time, through the real code path.

:func:`run_demo` starts the whole local system and plays the story docs/local.md
("The demo") tells, step by step: the rotator's replayed history (with a table
period, as by default), the hot sensor before its split, the detector's split,
the traffic after it, and the accounting. The story's traffic is
:mod:`local_runtime.demo_scenario`, the counting from outside
:mod:`local_runtime.demo_accounting`, the checks :mod:`local_runtime.demo_report`,
the summary and pictures :mod:`local_runtime.demo_presentation`. Time is
compressed by configuration (:data:`DEMO_CONTEXT`,
:data:`DEMO_HOT_KEYS_ENVIRONMENT`); docs/local.md says why each value.

``python -m local_runtime.demo --help`` (or ``tsctl demo``) runs it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from infra.config import AppConfig, load_cdk_json_context
from local_runtime.demo_accounting import Observer
from local_runtime.demo_presentation import draw_pictures, render
from local_runtime.demo_report import HOT_SENSOR, DemoFacts, build_report
from local_runtime.demo_scenario import Scenario, hot_boundary, now_ms
from local_runtime.faults import LocalFaults
from local_runtime.scheduler import ReplayClock
from local_runtime.system import LocalOptions, LocalSystem

__all__ = [
    "DEMO_CONTEXT",
    "DEMO_HOT_KEYS_ENVIRONMENT",
    "DEMO_ROTATION_CONTEXT",
    "HOT_SENSOR",
    "DemoOptions",
    "demo_config",
    "main",
    "render",
    "run_demo",
]

REPO_ROOT = Path(__file__).resolve().parents[1]

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
#: How far back the rollup function's first (and only) run starts: the demo's span from its start to
#: that run on a loaded machine, with margin. Each minute costs the run a Query per mark key (32) and
#: the recomputes of its marks (the replayed history's included), so no further.
ROLLUP_LATENESS = "20m"
DAY_S = 86_400.0
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
        # The rollup function runs once the streams drain (Observer.roll_up), on a clock a minute past
        # its settle time ahead, so the minute just ingested is closed; no scheduled run before that.
        rollups=True,
        rollup_every_s=DAY_S,
        rollup_environment={"ROLLUP_LATENESS": ROLLUP_LATENESS},
    )
    # Settle (ingest's timeout + 5 s locally) and a minute more.
    local = replace(local, rollup_ahead_s=math.ceil(local.ingest_timeout_s) + 5 + 65)
    with LocalSystem(config, local) as system:
        facts = _play(system, options, say, started)
    facts.timings = {**facts.timings, "total": time.monotonic() - started}
    if options.picture:
        draw_pictures(facts, config, options.out_dir)
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


def _play(system: LocalSystem, options: DemoOptions, say: _Say, started: float) -> DemoFacts:
    """The demo's steps, in order, against a started system."""
    timings = {"start": time.monotonic() - started}
    e = system.endpoints
    say(f"moto on {e.endpoint_url}; stream {e.stream_name}; tables {', '.join(e.readings_tables)}")
    say(f"query API on {e.api_url}; functions {', '.join(e.functions)}")
    observer = Observer(system)
    scenario = Scenario(system, options, observer, say)
    alerts_url = observer.subscribe_to_alerts()
    clock = system.clock
    if isinstance(clock, ReplayClock):
        scenario.history(clock)
    story_from_ms = now_ms()
    first, map_before = scenario.before_the_split()
    split = scenario.await_split()
    boundary = hot_boundary(split) if split is not None else None
    scenario.after_the_split(first)

    mark = time.monotonic()
    drained = observer.wait_drained(options.timeout_s, say)
    timings["drain"] = time.monotonic() - mark
    say("streams drained" if drained else "the streams did NOT drain in time")
    mark = time.monotonic()
    say("counting what was stored, rejected and skipped; reading the control table")
    facts = observer.count(scenario, drained, alerts_url)
    timings["verify"] = time.monotonic() - mark
    facts.map_before = map_before
    facts.boundary_ms = boundary
    facts.story_from_ms = story_from_ms if isinstance(clock, ReplayClock) else None
    mark = time.monotonic()
    facts.rollups = observer.roll_up(now_ms(), say)
    timings["rollups"] = time.monotonic() - mark
    mark = time.monotonic()
    facts.queries = observer.queries(scenario.ledger, boundary, say) if e.api_url else None
    timings["queries"] = time.monotonic() - mark
    facts.runtime = system.stats()
    facts.timings = {**timings, **scenario.timings}
    return facts


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
