"""The brute-force reference: one reading and one ``Layout.key_for`` per write.

What the engine must agree with. Given the writes per (second, entity) the
engine drew, it builds every reading (unique event ids, spread over the
second), keys each one with the key-design layer and counts writes per
(second, partition key). Only small workloads: this is the slow way.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping

from keydesign import Layout, Reading, ShardMap


def brute_force_writes(
    layout: Layout, shard_map: ShardMap, entity_counts: Mapping[tuple[int, str], int], *, seed: int = 0
) -> Counter[tuple[int, str]]:
    """Writes per (second, partition key) when every write of ``entity_counts`` is keyed one by one."""
    rng = random.Random(seed)
    writes: Counter[tuple[int, str]] = Counter()
    for (second_ms, entity), count in sorted(entity_counts.items()):
        for i in range(count):
            reading = Reading.parse(
                {
                    "entity_id": entity,
                    "event_id": f"{entity}-{second_ms}-{i}",
                    "timestamp": second_ms + i * 1000 // count,
                    "measures": {"v": i},
                }
            )
            writes[(second_ms, layout.key_for(reading, shard_map, rng).pk)] += 1
    return writes
