"""A synthetic workload: many entities at a base rate with Zipf skew, plus hot entities.

The base stream emits ``rate`` readings per second spread evenly in time; each
picks its entity from ``entities`` by a Zipf law of exponent ``zipf`` (0 is
uniform; 1 gives the top entity about 1/H(n) of the traffic; the entity of
rank k gets weight 1/k^s). Each hot entity adds its own stream at its own
rate (the seed's ``sensor-alpha-001=2000`` is a sensor bursting to 2,000
readings/s). Streams are merged in event-time order.

Everything is deterministic for a given ``seed``; event ids are unique, so
every generated reading is a distinct item.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Workload:
    """What to generate. Rates are readings per second; times are milliseconds."""

    entities: int = 100
    rate: float = 100.0
    zipf: float = 0.0
    hot: tuple[tuple[str, float], ...] = ()
    duration_s: float = 10.0
    seed: int = 0
    start_ms: int = 0

    def __post_init__(self) -> None:
        if self.entities < 1:
            raise ValueError("entities must be at least 1")
        if self.rate < 0 or any(r <= 0 for _, r in self.hot):
            raise ValueError("rates must be positive (the base rate may be 0 with hot entities)")
        if self.duration_s <= 0:
            raise ValueError("duration must be positive")
        if self.zipf < 0:
            raise ValueError("zipf skew must be 0 (uniform) or more")

    @property
    def total(self) -> int:
        """Readings the workload generates in all."""
        return _count(self.rate, self.duration_s) + sum(_count(r, self.duration_s) for _, r in self.hot)

    def entity(self, rank: int) -> str:
        """Name of the entity of popularity rank ``rank`` (1 = most popular)."""
        return f"sensor-{rank:06d}"


def _count(rate: float, duration_s: float) -> int:
    return math.floor(rate * duration_s + 1e-9)


def generate(workload: Workload) -> Iterator[tuple[float, dict[str, Any]]]:
    """Yield ``(offset_s, reading)`` in event-time order; ``offset_s`` is seconds since the start."""
    rng = random.Random(workload.seed)
    weights = [1.0 / (k**workload.zipf) for k in range(1, workload.entities + 1)]
    cumulative = list(itertools.accumulate(weights))
    ranks = range(1, workload.entities + 1)
    counter = itertools.count()

    def base() -> Iterator[tuple[float, int, str]]:
        for i in range(_count(workload.rate, workload.duration_s)):
            rank = rng.choices(ranks, cum_weights=cumulative)[0]
            yield i / workload.rate, 0, workload.entity(rank)

    def hot(position: int, entity: str, rate: float) -> Iterator[tuple[float, int, str]]:
        for i in range(_count(rate, workload.duration_s)):
            yield i / rate, position, entity

    streams = [base(), *(hot(i + 1, e, r) for i, (e, r) in enumerate(workload.hot))]
    for offset, _, entity in heapq.merge(*streams):
        n = next(counter)
        reading: dict[str, Any] = {
            "entity_id": entity,
            "event_id": f"w{workload.seed}-{n}",
            "timestamp": workload.start_ms + int(offset * 1000),
            "measures": {
                "temp": round(20.0 + 5.0 * math.sin(offset / 60.0) + rng.gauss(0.0, 0.5), 2),
                "rh": round(min(100.0, max(0.0, 45.0 + rng.gauss(0.0, 3.0))), 1),
            },
        }
        yield offset, reading
