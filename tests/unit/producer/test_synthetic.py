"""The synthetic workload: counts, skew, hot entities, order, determinism, validity."""

from __future__ import annotations

from collections import Counter

import pytest

from keydesign import Reading
from producer.synthetic import Workload, generate


def test_counts_follow_rates_and_duration() -> None:
    workload = Workload(
        entities=50, rate=200, hot=(("sensor-alpha-001", 2_000),), duration_s=3, start_ms=1_795_000_000_000
    )
    readings = [r for _, r in generate(workload)]
    assert len(readings) == workload.total == 200 * 3 + 2_000 * 3
    assert Counter(r["entity_id"] for r in readings)["sensor-alpha-001"] == 6_000


def test_readings_come_in_event_time_order_within_the_duration() -> None:
    workload = Workload(entities=10, rate=100, hot=(("hot-1", 250),), duration_s=2, start_ms=1_795_000_000_000)
    pairs = list(generate(workload))
    offsets = [o for o, _ in pairs]
    assert offsets == sorted(offsets)
    assert all(0 <= o < 2 for o in offsets)
    assert all(r["timestamp"] == 1_795_000_000_000 + int(o * 1000) for o, r in pairs)


def test_zipf_skews_traffic_to_the_top_ranks() -> None:
    uniform = Counter(r["entity_id"] for _, r in generate(Workload(entities=100, rate=20_000, duration_s=1, seed=3)))
    skewed = Counter(r["entity_id"] for _, r in generate(Workload(entities=100, rate=20_000, zipf=1.2, duration_s=1)))
    top = Workload().entity(1)
    assert uniform[top] / 20_000 == pytest.approx(0.01, abs=0.005)
    # H(100, 1.2) ~ 3.65: the top entity takes about 27%
    assert skewed[top] / 20_000 == pytest.approx(1 / 3.65, abs=0.03)
    assert skewed.most_common(1)[0][0] == top


def test_the_same_seed_gives_the_same_readings_and_event_ids_are_unique() -> None:
    workload = Workload(entities=20, rate=500, duration_s=1, seed=42, start_ms=1_795_000_000_000)
    first, second = list(generate(workload)), list(generate(workload))
    assert first == second
    ids = [r["event_id"] for _, r in first]
    assert len(set(ids)) == len(ids)


def test_every_generated_reading_is_valid() -> None:
    workload = Workload(
        entities=5, rate=300, hot=(("sensor-alpha-001", 100),), duration_s=1, start_ms=1_795_000_000_000
    )
    for _, reading in generate(workload):
        Reading.parse(reading)


@pytest.mark.parametrize(
    "kwargs",
    [{"entities": 0}, {"rate": -1}, {"hot": (("h", 0),)}, {"duration_s": 0}, {"zipf": -0.5}],
)
def test_impossible_workloads_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        Workload(**kwargs)  # type: ignore[arg-type]
