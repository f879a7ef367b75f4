"""Small workloads for the simulator's tests: seconds to run, not minutes."""

from __future__ import annotations

from hotkeys.detector import DetectorConfig
from keydesign import parse_timestamp
from simulator import AdaptiveSettings, HotEntity, SimWorkload

HOT = "sensor-alpha-001"
START = parse_timestamp("2026-11-22T06:58:00Z")


def small_workload(*, duration_s: int = 120, arrivals: str = "even", hot_rate: float = 400.0) -> SimWorkload:
    """40 sensors sharing 60 readings/s and one hot sensor at ``hot_rate``, from 06:58 (two minutes before 07:00).

    In 1 s batches each sensor writes a block of one or two readings a second (1 WCU), the hot one a block
    of 400 readings (3 WCU). The window is set, not the stack's 5 s default: the detector and reference
    tests reason about a block a second, and the brute-force reference packs each second as a batch."""
    return SimWorkload(
        rate=60.0 + hot_rate,
        entities=41,
        start_ms=START,
        duration_s=duration_s,
        hot=(HotEntity(HOT, hot_rate),),
        batching_window_s=1,
        arrivals="even" if arrivals == "even" else "poisson",
        seed=3,
    )


def quick_detector() -> AdaptiveSettings:
    """A detector that reacts within the small workload's minutes on 1-minute buckets, at its few WCU/s:
    a key over 1 WCU/s is hot, and a split sizes keys for 1 WCU/s."""
    return AdaptiveSettings(
        detector=DetectorConfig(
            window_ms=10_000, split_threshold_wcu=1, target_utilisation=0.001, counters_per_window=1_000
        ),
        grace_ms=2_000,
        cache_ttl_ms=5_000,
        margin_ms=5_000,
    )
