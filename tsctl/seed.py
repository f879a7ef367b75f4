"""The seed scenario: 10,000 sensors at 50,000 readings/s, sensor-alpha-001 bursting to 2,000/s.

One simulated second of that traffic is pushed through the key-design layer
to measure the write load every partition key would take under a given
layout and shard map. It computes; it does not estimate.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from keydesign import Layout, Reading, ShardMap, Workload, build_item, item_size, write_units
from keydesign.capacity import PARTITION_WCU

GLOBAL_RATE = 50_000
SENSORS = 10_000
HOT_SENSOR = "sensor-alpha-001"
HOT_RATE = 2_000
ITEM_BYTES = 500


@dataclass(frozen=True, slots=True)
class KeyLoad:
    """Write units per second on every partition key during one second."""

    label: str
    per_key: Counter[str]
    readings: int

    @property
    def hottest(self) -> tuple[str, int]:
        return self.per_key.most_common(1)[0]

    @property
    def mean(self) -> float:
        return sum(self.per_key.values()) / len(self.per_key)

    @property
    def over_limit(self) -> int:
        return sum(1 for v in self.per_key.values() if v > PARTITION_WCU)

    def summary(self) -> dict[str, object]:
        key, wcu = self.hottest
        return {
            "design": self.label,
            "partition_keys": len(self.per_key),
            "hottest_key": key,
            "hottest_wcu": wcu,
            "mean_wcu": round(self.mean, 1),
            "keys_over_1000": self.over_limit,
        }


def sensor_name(i: int) -> str:
    return HOT_SENSOR if i == 0 else f"sensor-{i:05d}"


def one_second(start_ms: int, seed: int = 7) -> list[Reading]:
    """50,000 readings in the second from ``start_ms``: 2,000 from the hot sensor,
    the rest spread evenly over the other 9,999 sensors."""
    rng = random.Random(seed)
    readings = []
    # Two dimensions bring the stored item to about ITEM_BYTES (one write unit).
    dims = {"site": "plant-7/" + "x" * 180, "note": "y" * 180}
    for n in range(GLOBAL_RATE):
        sensor = sensor_name(0) if n < HOT_RATE else sensor_name(1 + n % (SENSORS - 1))
        readings.append(
            Reading.parse(
                {
                    "entity_id": sensor,
                    "event_id": f"{sensor}-{n}",
                    "timestamp": start_ms + rng.randrange(1000),
                    "measures": {"temp": round(rng.uniform(15, 30), 2)},
                    "dimensions": dims,
                }
            )
        )
    return readings


def workload() -> Workload:
    return Workload(
        peak_writes_per_s=GLOBAL_RATE,
        item_bytes=ITEM_BYTES,
        entities=SENSORS,
        hot_entities={HOT_SENSOR: HOT_RATE},
    )


def key_load(label: str, layout: Layout, shard_map: ShardMap, readings: list[Reading]) -> KeyLoad:
    counts: Counter[str] = Counter()
    for reading in readings:
        key = layout.key_for(reading, shard_map)
        counts[key.pk] += write_units(item_size(build_item(reading, key)))
    return KeyLoad(label, counts, len(readings))
