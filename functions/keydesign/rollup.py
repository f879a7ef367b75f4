"""Rollups: per-interval figures of every measure, per entity and across entities.

Everything lives in the control table (its TTL attribute ``expires_at``)::

    mark     pk = "rollmark#<prefix>#<slot>#<m>"        slot: the minute a change was stamped in
             sk = "<granularity ms>#<interval start>#<entity>"
    rollup   pk = "rollup#<prefix>#<granularity ms>#<interval start>#<r>"   one entity's interval
             sk = "<entity>"
    total    pk = "rollall#<prefix>#<granularity ms>#<period start>"        every entity's interval
             sk = "<interval start>"
    state    pk = "rollstate", sk = "<prefix>"                              the rollup function's watermark

``m = shard_of(entity, MARK_SHARDS)`` and ``r = shard_of(entity, ROLLUP_SHARDS)``
spread one minute's marks and one interval's rollups over a few keys; a
total's period holds ``TOTAL_PERIOD_INTERVALS`` intervals, so a range of totals
is one or two Query calls. A mark says "recompute this interval of this entity
once slot ``slot`` is closed": ingest stamps it with the batch's start, after
the readings are written; the rollup function stamps the coarser intervals it
defers with the slot in which they close. Figures are recomputed from their
source (raw readings, or the finer rollups) and written with a plain put, so
a mark seen twice, a redelivered reading or a correction changes nothing but
the answer being right.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .hashing import shard_of
from .periods import DAY_MS, parse_duration
from .timefmt import format_ts, parse_timestamp

#: Marks are grouped by the minute they were stamped in: the rollup function's unit of progress.
SLOT_MS = 60_000
MARK_SHARDS = 32
ROLLUP_SHARDS = 32
TOTAL_PERIOD_INTERVALS = 1000
STATE_PK = "rollstate"
#: The partition keys each side may touch, as IAM ``dynamodb:LeadingKeys`` patterns.
MARK_KEYS = ("rollmark#*",)
READ_KEYS = ("rollup#*", "rollall#*", STATE_PK)
#: Rollups and marks outlive the readings they stand for by this much.
TTL_SLACK_MS = DAY_MS


def floor_to(ts_ms: int, size_ms: int) -> int:
    return ts_ms - ts_ms % size_ms


@dataclass(frozen=True, slots=True)
class Granularities:
    """The rollup interval lengths, finest first; each divides the next (``1m,1h,1d``)."""

    levels: tuple[int, ...]

    @classmethod
    def parse(cls, spec: str, field_name: str = "granularities") -> Granularities:
        levels = tuple(parse_duration(part, field_name) for part in spec.split(",") if part.strip())
        if not levels:
            raise ConfigError(field_name, "names no granularity")
        if levels[0] % SLOT_MS:
            raise ConfigError(field_name, "the finest granularity must be a whole number of minutes")
        for fine, coarse in itertools.pairwise(levels):
            if coarse <= fine or coarse % fine:
                raise ConfigError(field_name, f"{spec!r}: each granularity must be a multiple of the one before")
        return cls(levels)

    @property
    def finest(self) -> int:
        return self.levels[0]

    def coarser(self, level: int) -> int | None:
        index = self.levels.index(level)
        return self.levels[index + 1] if index + 1 < len(self.levels) else None

    def finer(self, level: int) -> int | None:
        index = self.levels.index(level)
        return self.levels[index - 1] if index else None

    def serving(self, interval_ms: int, from_ms: int, to_ms: int) -> int | None:
        """The coarsest granularity that tiles ``interval_ms`` and ``[from_ms, to_ms)`` exactly, if any."""
        for level in reversed(self.levels):
            if interval_ms % level == 0 and from_ms % level == 0 and to_ms % level == 0:
                return level
        return None


def mark_pk(prefix: str, slot_ms: int, shard: int) -> str:
    return f"rollmark#{prefix}#{format_ts(slot_ms)}#{shard}"


def mark_pks(prefix: str, slot_ms: int) -> list[str]:
    """Every partition key of one slot's marks."""
    return [mark_pk(prefix, slot_ms, shard) for shard in range(MARK_SHARDS)]


@dataclass(frozen=True, slots=True, order=True)
class Mark:
    """Recompute ``entity``'s interval ``[start_ms, start_ms + level)`` once ``slot_ms`` is closed."""

    slot_ms: int
    level: int
    start_ms: int
    entity: str

    @classmethod
    def of(cls, stamp_ms: int, level: int, ts_ms: int, entity: str) -> Mark:
        return cls(floor_to(stamp_ms, SLOT_MS), level, floor_to(ts_ms, level), entity)

    @classmethod
    def parse(cls, slot_ms: int, sk: str) -> Mark:
        level, start, entity = sk.split("#", 2)
        return cls(slot_ms, int(level), parse_timestamp(start, "sk"), entity)

    def key(self, prefix: str) -> tuple[str, str]:
        pk = mark_pk(prefix, self.slot_ms, shard_of(self.entity, MARK_SHARDS))
        return pk, f"{self.level}#{format_ts(self.start_ms)}#{self.entity}"


def rollup_key(prefix: str, level: int, start_ms: int, entity: str) -> tuple[str, str]:
    return rollup_pk(prefix, level, start_ms, shard_of(entity, ROLLUP_SHARDS)), entity


def rollup_pk(prefix: str, level: int, start_ms: int, shard: int) -> str:
    return f"rollup#{prefix}#{level}#{format_ts(start_ms)}#{shard}"


def total_pk(prefix: str, level: int, start_ms: int) -> str:
    return f"rollall#{prefix}#{level}#{format_ts(floor_to(start_ms, level * TOTAL_PERIOD_INTERVALS))}"


def total_pks(prefix: str, level: int, from_ms: int, to_ms: int) -> list[str]:
    """The partitions holding the totals of ``[from_ms, to_ms)``, in time order."""
    period = level * TOTAL_PERIOD_INTERVALS
    return [total_pk(prefix, level, p) for p in range(floor_to(from_ms, period), to_ms, period)]


def rollup_ttl(end_ms: int, retention_ms: int) -> int:
    """TTL (epoch s) of a rollup or mark of an interval ending at ``end_ms``: past its readings'."""
    return (end_ms + retention_ms + TTL_SLACK_MS) // 1000


@dataclass(slots=True)
class Stat:
    """One measure's figures over an interval."""

    count: int
    total: int | float
    low: int | float
    high: int | float

    def add(self, value: int | float) -> None:
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)

    def merge(self, other: Stat) -> None:
        self.count += other.count
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)


@dataclass(slots=True)
class Figures:
    """Readings counted and every measure's figures, over one interval (of one entity, or of all)."""

    readings: int = 0
    measures: dict[str, Stat] = field(default_factory=dict)

    def add(self, measures: Mapping[str, int | float]) -> None:
        self.readings += 1
        for name, value in measures.items():
            stat = self.measures.get(name)
            if stat is None:
                self.measures[name] = Stat(1, value, value, value)
            else:
                stat.add(value)

    def merge(self, other: Figures) -> None:
        self.readings += other.readings
        for name, stat in other.measures.items():
            mine = self.measures.get(name)
            if mine is None:
                self.measures[name] = Stat(stat.count, stat.total, stat.low, stat.high)
            else:
                mine.merge(stat)

    @classmethod
    def combined(cls, parts: Iterable[Figures]) -> Figures:
        out = cls()
        for part in parts:
            out.merge(part)
        return out

    def item(self) -> dict[str, object]:
        """The figures as item attributes (plain Python values)."""
        return {
            "n": self.readings,
            "m": {k: {"c": s.count, "s": s.total, "lo": s.low, "hi": s.high} for k, s in self.measures.items()},
        }

    @classmethod
    def from_item(cls, item: Mapping[str, object]) -> Figures:
        measures: Mapping[str, Any] = item.get("m") or {}  # type: ignore[assignment]
        return cls(
            int(item["n"]),  # type: ignore[call-overload]
            {k: Stat(int(v["c"]), _number(v["s"]), _number(v["lo"]), _number(v["hi"])) for k, v in measures.items()},
        )


def _number(value: object) -> int | float:
    if isinstance(value, int | float):
        return value
    text = str(value)
    try:
        return int(text)
    except ValueError:
        return float(text)


def hottest_rollup_keys(entities: int) -> tuple[float, float]:
    """The rollup key load of ``entities`` writing continuously, whatever their rates: ingest's marks on
    the hottest mark key (WCU/s, one mark per entity-minute over MARK_SHARDS keys), and the most puts one
    rollup run makes on one key (a minute's rollups over ROLLUP_SHARDS keys, or every entity's deferred
    hour mark over MARK_SHARDS keys, at once)."""
    return entities / MARK_SHARDS / (SLOT_MS / 1000), entities / min(MARK_SHARDS, ROLLUP_SHARDS)
