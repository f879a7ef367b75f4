"""The demo's scenario and its compressed time: :class:`DemoOptions` (what ``tsctl demo`` and the tests
choose) and the cdk.json overrides it runs with (docs/local.md, "Compressed time")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.config import Context, load_cdk_json_context
from local_runtime.faults import LocalFaults

REPO_ROOT = Path(__file__).resolve().parents[1]

#: cdk.json overrides that compress the demo's time: every one a stack setting; docs/local.md ("Compressed
#: time") says why each value.
DEMO_CONTEXT: Mapping[str, object] = {
    "bucket": "1m",  # a split takes effect at the next minute boundary, not the next hour
    "shard_map_cache_ttl_s": 5,  # writers and readers see a changed shard map within 5 s instead of 60
    "max_future": "5s",  # readings are published in real time: the change margin must cover it
    "shards": 8,  # sized for what one machine ingests, as 100 is for the seed's 50,000 readings/s
    "hot_split_threshold_wcu": 8,  # blocks keep one machine's hot key near 20 WCU/s, far below 500
}
#: On top of DEMO_CONTEXT with a table period (as by default): five replayed hours of hourly tables.
DEMO_ROTATION_CONTEXT: Mapping[str, object] = {
    "retention": "3h",  # tables past retention within the replayed hours (grace 2h + dial-down under it)
    "dial_down_delay": "2m",
    "max_age": "3h",  # late readings stored as long as they are kept; a dropped hour's refused
    "billing_mode": "PROVISIONED",  # sized by the rotator's planner: closed tables have capacity to shed
    "peak_writes_per_s": 2_500,
    "export_bucket": "timeseries-demo-exports",  # each table exported (to moto's S3) before it is dropped
}
#: The hot-key function's own variables (its settings module's, not stack configuration): 5 s windows
#: judged 5 s after they end; a change applies 15-75 s after it is decided instead of ~7 min; no
#: scale-down while the demo runs.
DEMO_HOT_KEYS_ENVIRONMENT: Mapping[str, str] = {
    "HOT_WINDOW": "5s",
    "HOT_WINDOW_GRACE": "5s",
    "HOT_CHANGE_MARGIN": "10s",
    "HOT_SCALE_DOWN_WINDOWS": "60",
}


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """The scenario. Rates are readings per second of event time, published in real time."""

    sensors: int = 80  # each reports 5 times a second, as the seed's 10,000 do
    base_rate: float = 400.0
    hot_rate: float = 1_200.0
    hot_phase_s: float = 10.0  # seconds of traffic before the split, and after it
    split_phase_s: float = 5.0
    trickle_rate: float = 20.0  # what the other sensors send while the demo waits for the split
    invalid_readings: int = 50  # readings that break a rule (each kind in turn), and records not JSON at all
    garbage_records: int = 5
    seed: int = 7
    faults: LocalFaults = field(default_factory=LocalFaults)
    out_dir: Path = Path("out/demo")
    context: Mapping[str, object] = field(default_factory=dict)  # cdk.json overrides on top of DEMO_CONTEXT
    #: The rotator's history replayed before the story (seconds of the past), at least how long each
    #: replayed run takes in real time, and the readings per (real) second stamped with that clock.
    history_s: float = 5 * 3600.0
    history_pace_s: float = 0.4
    history_rate: float = 40.0
    refused_readings: int = 3  # published for a period whose table the rotator dropped (ingest must refuse them)
    split_timeout_s: float = 240.0  # how long to wait for the detector's split, and for the streams to drain
    timeout_s: float = 300.0
    #: The sparse fleet, published while the demo awaits the split: this many entities, a reading each every
    #: ``sparse_period_s`` for ``sparse_s``; and how many of them the aggregates are checked for one by one.
    sparse_entities: int = 256
    sparse_period_s: float = 15.0
    sparse_s: float = 60.0
    sparse_aggregate_entities: int = 3

    @classmethod
    def quick(cls, **overrides: Any) -> DemoOptions:
        """A smaller scenario (a test's, or ``--quick``): 30 sensors, the hot sensor at 900/s, the sparse
        fleet's 4 readings each over 30 s instead of 60."""
        base = {"sensors": 30, "base_rate": 150.0, "hot_rate": 900.0, "split_phase_s": 4.0, "trickle_rate": 10.0}
        more = {"invalid_readings": 10, "garbage_records": 2, "history_pace_s": 0.2, "history_rate": 25.0}
        # Each sparse entity still sends 4 readings, at most 2 an ingest batch (far under DENSE_READINGS):
        # group items, then one compacted block each, as in the full scenario, in half its real time.
        more |= {"sparse_period_s": 7.5, "sparse_s": 30.0}
        return cls(**{**base, **more, **overrides})


def demo_config(context: Mapping[str, object] | None = None) -> Context:
    """cdk.json with the demo's compressed time (and, with a table period, its rotation settings) and
    then ``context`` on top."""
    base = {**load_cdk_json_context(REPO_ROOT / "cdk.json"), **DEMO_CONTEXT}
    if (plain := Context.parse({**base, **(context or {})})).table_period is None:
        return plain
    return Context.parse({**base, **DEMO_ROTATION_CONTEXT, **(context or {})})
