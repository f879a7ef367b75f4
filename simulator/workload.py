"""The simulated workload and its write counts, second by second and entity by entity.

A workload is a peak global rate shared by ``entities`` entities: the hot
entities write at their own rates during their burst windows, and the rest
of the global rate (the *background*) is spread over the other entities by a
Zipf law of exponent ``zipf`` (0 is uniform; the entity of rank k gets weight
1/k^s). Outside its bursts a hot entity writes like a typical entity (the
mean background rate per entity). The global rate is therefore reached when
every hot entity is bursting, which is how ``keydesign.plan_capacity`` reads a
peak rate with hot entities.

Per second and per entity the number of writes is a count:

* ``poisson``: independent arrivals, the count is Poisson(rate);
* ``even``: evenly spaced arrivals, the count is the number of multiples of
  1/rate in the second (with a random phase per entity), so every entity
  writes exactly its rate on average and the per-second count never varies by
  more than one.

Background entities are named ``sensor-{rank:05d}``, as ``tsctl.seed.sensor_name``
names them. Every reading has the shape of ``sample`` (the planner's default: three
measures, no event id), and ingest batches them every ``batching_window_s``
(:mod:`.blocks` packs each batch into blocks; by default the planner's window, cdk.json's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from keydesign import Ingest, InvalidInput, Reading, validate_entity_id
from keydesign.capacity import SAMPLE_READING

Arrivals = Literal["poisson", "even"]
ARRIVALS: tuple[Arrivals, ...] = ("poisson", "even")
#: More entities than this make one second's counts too large to keep in memory per chunk.
MAX_ENTITIES = 200_000
#: A week of seconds: longer runs are better split.
MAX_DURATION_S = 7 * 86_400

Counts = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Burst:
    """A burst window ``[from_s, to_s)`` in seconds from the start of the run."""

    from_s: int
    to_s: int


@dataclass(frozen=True, slots=True)
class HotEntity:
    """An entity with its own rate (writes/s) during its bursts; no bursts means the whole run."""

    entity_id: str
    rate: float
    bursts: tuple[Burst, ...] = ()

    def active(self, second: int) -> bool:
        return not self.bursts or any(b.from_s <= second < b.to_s for b in self.bursts)


@dataclass(frozen=True, slots=True)
class SimWorkload:
    """What to simulate. Rates are readings per second, each shaped like ``sample``; ingest's
    ``MaximumBatchingWindowInSeconds`` is ``batching_window_s``."""

    rate: float
    entities: int
    start_ms: int
    duration_s: int
    sample: Reading = SAMPLE_READING
    batching_window_s: int = round(Ingest().batching_window_s)
    zipf: float = 0.0
    hot: tuple[HotEntity, ...] = ()
    arrivals: Arrivals = "poisson"
    seed: int = 7
    _names: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.validate()
        names = tuple(f"sensor-{k:05d}" for k in range(1, self.background_entities + 1))
        clash = {h.entity_id for h in self.hot}.intersection(names)
        if clash:
            raise InvalidInput(f"hot.{sorted(clash)[0]}", "is also the name of a background entity")
        object.__setattr__(self, "_names", (*names, *(h.entity_id for h in self.hot)))

    def validate(self) -> None:
        """Raise :class:`InvalidInput` naming the first impossible figure."""
        finite = math.isfinite
        hot_total = sum(h.rate for h in self.hot)
        checks: list[tuple[str, bool, str]] = [
            ("rate", finite(self.rate) and self.rate > 0, "must be above 0 writes/s"),
            ("entities", 1 <= self.entities <= MAX_ENTITIES, f"must be 1 to {MAX_ENTITIES:,}"),
            ("batching_window", 0 <= self.batching_window_s <= 300, "must be 0 to 300 s (Lambda's limit)"),
            ("zipf", finite(self.zipf) and self.zipf >= 0, "must be 0 (uniform) or more"),
            ("duration", 1 <= self.duration_s <= MAX_DURATION_S, f"must be 1 s to {MAX_DURATION_S // 86_400} days"),
            ("start", self.start_ms >= 0 and self.start_ms % 1000 == 0, "must be a whole second after 1970"),
            ("arrivals", self.arrivals in ARRIVALS, f"must be one of {', '.join(ARRIVALS)}"),
            ("hot", len(self.hot) <= self.entities, "more hot entities than entities"),
            ("hot", hot_total <= self.rate + 1e-9, f"hot rates add up to {hot_total:,.0f}/s, above the global rate"),
        ]
        for name, ok, reason in checks:
            if not ok:
                raise InvalidInput(name, reason)
        if self.background_entities == 0 and self.background_rate > 1e-9:
            raise InvalidInput("entities", "every entity is hot, so nothing writes the rest of the global rate")
        seen: set[str] = set()
        for hot in self.hot:
            validate_entity_id(hot.entity_id, "hot")
            if not finite(hot.rate) or hot.rate <= 0:
                raise InvalidInput(f"hot.{hot.entity_id}", "the rate must be above 0 writes/s")
            if hot.entity_id in seen:
                raise InvalidInput(f"hot.{hot.entity_id}", "is given twice")
            seen.add(hot.entity_id)
            for burst in hot.bursts:
                if not 0 <= burst.from_s < burst.to_s <= self.duration_s:
                    raise InvalidInput(
                        f"hot.{hot.entity_id}", f"burst {burst.from_s}s-{burst.to_s}s is not inside the run"
                    )

    # -- shape ----------------------------------------------------------------

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.duration_s * 1000

    @property
    def background_entities(self) -> int:
        return self.entities - len(self.hot)

    @property
    def background_rate(self) -> float:
        """Writes/s of the entities that are not hot."""
        return max(0.0, self.rate - sum(h.rate for h in self.hot))

    @property
    def names(self) -> tuple[str, ...]:
        """Entity ids by index: background entities by rank, then the hot ones."""
        return self._names

    def index_of(self, entity_id: str) -> int:
        try:
            return self._names.index(entity_id)
        except ValueError:
            raise InvalidInput("entity", f"{entity_id!r} is not an entity of the workload") from None

    def background_rates(self) -> Floats:
        """Writes/s of each background entity (Zipf weights over the background rate)."""
        count = self.background_entities
        if count == 0:
            return np.zeros(0)
        weights: Floats = 1.0 / np.arange(1, count + 1, dtype=np.float64) ** self.zipf
        rates: Floats = self.background_rate * weights / weights.sum()
        return rates

    @property
    def typical_rate(self) -> float:
        """A hot entity's rate outside its bursts: the mean background rate per entity."""
        count = self.background_entities
        return self.background_rate / count if count else 0.0

    def peak_entity_rate(self) -> float:
        """The highest rate any single entity writes at."""
        background = self.background_rates()
        top = float(background.max()) if background.size else 0.0
        return max([top, *(h.rate for h in self.hot)])

    def rates(self, first_s: int, seconds: int) -> Floats:
        """Writes/s of every entity in each second ``first_s .. first_s + seconds - 1`` of the run."""
        background = self.background_rates()
        out = np.empty((seconds, self.entities), dtype=np.float64)
        out[:, : background.size] = background
        for i, hot in enumerate(self.hot):
            column = background.size + i
            out[:, column] = [
                hot.rate if hot.active(s) else self.typical_rate for s in range(first_s, first_s + seconds)
            ]
        return out

    def to_dict(self) -> dict[str, object]:
        return {
            "rate": self.rate,
            "entities": self.entities,
            "background_rate": round(self.background_rate, 3),
            "zipf": self.zipf,
            "sample": self.sample.to_json(),
            "batching_window_s": self.batching_window_s,
            "start_ms": self.start_ms,
            "duration_s": self.duration_s,
            "arrivals": self.arrivals,
            "seed": self.seed,
            "hot": [
                {"entity": h.entity_id, "rate": h.rate, "bursts": [[b.from_s, b.to_s] for b in h.bursts] or "whole run"}
                for h in self.hot
            ],
        }


class CountProvider(Protocol):
    def counts(self, first_s: int, seconds: int) -> Counts:
        """Writes per (second, entity) for seconds ``first_s .. first_s + seconds - 1`` of the run."""
        ...


class CountSource:
    """Writes per (second, entity), one chunk of seconds at a time, in order."""

    def __init__(self, workload: SimWorkload) -> None:
        self._workload = workload
        self._rng = np.random.default_rng([workload.seed, 1])
        # Even arrivals: the running expected count and a phase per entity.
        self._phase = np.random.default_rng([workload.seed, 2]).random(workload.entities)
        self._expected = np.zeros(workload.entities, dtype=np.float64)
        self._next_s = 0

    def counts(self, first_s: int, seconds: int) -> Counts:
        """The counts of seconds ``first_s .. first_s + seconds - 1``: shape (seconds, entities)."""
        if first_s != self._next_s:
            raise ValueError(f"counts must be drawn in order: expected second {self._next_s}, got {first_s}")
        self._next_s = first_s + seconds
        rates = self._workload.rates(first_s, seconds)
        if self._workload.arrivals == "poisson":
            return self._rng.poisson(rates).astype(np.int64)
        cumulative = self._expected + np.cumsum(rates, axis=0)
        previous = np.vstack([self._expected[None, :], cumulative[:-1]])
        self._expected = cumulative[-1].copy()
        counts = np.floor(cumulative + self._phase) - np.floor(previous + self._phase)
        return counts.astype(np.int64)
