"""The seed scenario: 10,000 sensors at 50,000 readings/s, sensor-alpha-001 bursting to 2,000/s.

Each reading carries three measures and no event id (ingest derives one, and a
block stores none). One batching window of that traffic is one ingest batch
(the window is ``keydesign.Ingest``'s default, cdk.json's: 10 s): packed into
blocks by the key-design layer (``Layout.pack``, as ingest packs them), it
gives the write units every partition key takes under a layout and shard map,
spread over the window's seconds as the batches of successive windows spread
them. It computes; it does not estimate.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from keydesign import Block, Ingest, Layout, Reading, ShardMap, Workload
from keydesign.capacity import PARTITION_WCU, SAMPLE_READING

GLOBAL_RATE = 50_000
SENSORS = 10_000
HOT_SENSOR = "sensor-alpha-001"
HOT_RATE = 2_000
#: A Kinesis sequence number's size, as the version of every block (56 digits).
VERSION = 10**55
RETENTION_MS = 30 * 86_400_000


@dataclass(frozen=True, slots=True)
class KeyLoad:
    """The write units one ingest batch of ``seconds`` puts on every partition key, and its blocks.

    A batch every ``seconds`` puts ``per_key[k]`` units on key ``k`` each time: ``per_key[k] / seconds``
    write units per second, the rate a key's 1,000 WCU/s limit is measured against.
    """

    label: str
    per_key: Counter[str]
    blocks: tuple[Block, ...]
    seconds: float

    def summary(self) -> dict[str, object]:
        wcu = {key: units / self.seconds for key, units in self.per_key.items()}
        hottest = max(wcu, key=wcu.__getitem__)
        return {
            "design": self.label,
            "partition_keys": len(wcu),
            "blocks": len(self.blocks),
            "hottest_key": hottest,
            "hottest_wcu": round(wcu[hottest], 1),
            "mean_wcu": round(sum(wcu.values()) / len(wcu), 1),
            "keys_over_1000": sum(1 for w in wcu.values() if w > PARTITION_WCU),
        }


def sensor_name(i: int) -> str:
    return HOT_SENSOR if i == 0 else f"sensor-{i:05d}"


def traffic(start_ms: int, seconds: int, seed: int = 7) -> list[Reading]:
    """The ``seconds`` from ``start_ms``: each second 50,000 readings, 2,000 from the hot sensor and
    the rest spread evenly over the other 9,999 sensors, each with three noisy measures."""
    rng = random.Random(seed)
    names = [sensor_name(i) for i in range(SENSORS)]
    readings = []
    for n in range(GLOBAL_RATE * seconds):
        second, i = divmod(n, GLOBAL_RATE)
        readings.append(
            Reading.parse(
                {
                    "entity_id": names[0] if i < HOT_RATE else names[1 + i % (SENSORS - 1)],
                    "timestamp": start_ms + 1000 * second + rng.randrange(1000),
                    "measures": {
                        "temp": round(rng.gauss(21.5, 0.3), 2),
                        "rh": round(rng.gauss(45.0, 0.5), 1),
                        "pressure": round(rng.gauss(1013.25, 8.0), 2),
                    },
                }
            )
        )
    return readings


def workload(batching_window_s: float = Ingest().batching_window_s) -> Workload:
    return Workload(
        peak_writes_per_s=GLOBAL_RATE,
        entities=SENSORS,
        hot_entities={HOT_SENSOR: HOT_RATE},
        sample=SAMPLE_READING,  # three measures, no event id
        ingest=Ingest(batching_window_s=batching_window_s),
    )


def key_load(label: str, layout: Layout, shard_map: ShardMap, readings: list[Reading], seconds: float) -> KeyLoad:
    """``readings`` as one ingest batch of ``seconds``: packed into blocks, write units summed per partition key."""
    blocks = layout.pack([(r, VERSION) for r in readings], shard_map, retention_ms=RETENTION_MS)
    counts: Counter[str] = Counter()
    for block in blocks:
        counts[block.key.pk] += block.write_units
    return KeyLoad(label, counts, tuple(blocks), seconds)
