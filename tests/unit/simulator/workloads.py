"""Small workloads for the simulator's tests: seconds to run, not minutes."""

from __future__ import annotations

from hotkeys.detector import DetectorConfig
from keydesign import parse_timestamp
from simulator import AdaptiveSettings, HotEntity, SimWorkload

HOT = "sensor-alpha-001"
START = parse_timestamp("2026-11-22T06:58:00Z")


def small_workload(*, duration_s: int = 120, arrivals: str = "even", hot_rate: float = 240.0) -> SimWorkload:
    """40 sensors sharing 60 writes/s and one hot sensor at ``hot_rate``, from 06:58 (two minutes before 07:00)."""
    return SimWorkload(
        rate=60.0 + hot_rate,
        entities=41,
        item_bytes=500,
        start_ms=START,
        duration_s=duration_s,
        hot=(HotEntity(HOT, hot_rate),),
        arrivals="even" if arrivals == "even" else "poisson",
        seed=3,
    )


def quick_detector() -> AdaptiveSettings:
    """A detector that reacts within the small workload's minutes on 1-minute buckets."""
    return AdaptiveSettings(
        detector=DetectorConfig(
            window_ms=10_000, split_threshold_wcu=100, target_utilisation=0.1, counters_per_window=10
        ),
        grace_ms=2_000,
        cache_ttl_ms=5_000,
        margin_ms=5_000,
    )
