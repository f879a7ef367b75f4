"""The brute-force reference: every reading built, and each second's batch packed by ``Layout.pack``.

What the engine must agree with. Given the readings per (second, entity) the engine
drew, it builds every reading (three noisy measures, as the planner's sample reading
has, spread over the second), packs each second's readings as one ingest batch (1 s
batches, the window the small workloads set) with the key-design layer, and counts write
units per (second, partition key). Only small workloads: this is the slow way.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from keydesign import Block, Layout, Reading, ShardMap


def readings_of(entity: str, second_ms: int, count: int, rng: random.Random) -> list[Reading]:
    """``count`` readings of ``entity`` spread over the second from ``second_ms``, as a sensor sends them."""
    return [
        Reading.parse(
            {
                "entity_id": entity,
                "timestamp": second_ms + i * 1000 // count,
                "measures": {
                    "temp": round(rng.gauss(21.5, 0.3), 2),
                    "rh": round(rng.gauss(45.0, 0.5), 1),
                    "pressure": round(rng.gauss(1013.25, 8.0), 2),
                },
            }
        )
        for i in range(count)
    ]


def packed_seconds(
    layout: Layout,
    map_at: Callable[[int], ShardMap],
    entity_counts: Mapping[tuple[int, str], int],
    *,
    seed: int = 0,
) -> Iterator[tuple[int, list[Block]]]:
    """Each second's blocks, the second's readings packed as one batch with the map ``map_at(second)``."""
    rng = random.Random(seed)
    by_second: dict[int, list[Reading]] = {}
    for (second_ms, entity), count in sorted(entity_counts.items()):
        by_second.setdefault(second_ms, []).extend(readings_of(entity, second_ms, count, rng))
    for second_ms in sorted(by_second):
        batch = [(r, 10**55) for r in by_second[second_ms]]
        yield second_ms, layout.pack(batch, map_at(second_ms), retention_ms=30 * 86_400_000, rng=rng)


def brute_force_units(
    layout: Layout, shard_map: ShardMap, entity_counts: Mapping[tuple[int, str], int], *, seed: int = 0
) -> Counter[tuple[int, str]]:
    """Write units per (second, partition key) when every second's readings are packed as ingest packs them."""
    units: Counter[tuple[int, str]] = Counter()
    for second_ms, blocks in packed_seconds(layout, lambda _: shard_map, entity_counts, seed=seed):
        for block in blocks:
            units[(second_ms, block.key.pk)] += block.write_units
    return units
