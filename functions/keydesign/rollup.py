"""Rollups: per-interval figures of every measure, per entity and across entities.

Everything lives in the control table (its TTL attribute ``expires_at``)::

    mark     pk = "rollmark#<prefix>#<slot>#<m>"        slot: the minute a change was stamped in
             sk = "<granularity ms>#<interval start>#<entity>"
    minute   pk = "rollmark#<prefix>#minutes#<hour>"    the marked-minutes index: a slot with marks
             sk = "<slot>"
    rollup   pk = "rollup#<prefix>#<granularity ms>#<interval start>#<r>"   one entity's interval
             sk = "<entity>"
    total    pk = "rollall#<prefix>#<granularity ms>#<period start>"        every entity's interval
             sk = "<interval start>"
    state    pk = "rollstate", sk = "<prefix>"                              the rollup function's watermark
    partial  pk = "rollgrp#<prefix>#<hour>", sk = "<group>"               compaction: a group's hour
    fleet    pk = "rollall#...", sk = "<interval start>#c"                   compaction's part of a total
    redo     pk = "compactredo#<prefix>", sk = "<hour>#<group>#<entity>"  an hour compaction must redo

Each (entity, hour) has one owner of its figures (docs/rollups.md). An entity that wrote blocks in
the hour (its readings are marked; ``rollup.logic``) is the rollup function's: per-entity minute,
hour and day rollups and the totals item ``<interval start>``. An entity whose readings of the hour
are all in the write tier is compaction's: no per-entity rollup, its compacted block of the hour is
its figures, and its group's *partial* holds the group's figures per finest interval of the hour;
compaction puts the sum of every group's partial as the totals item ``<interval start>#c``. A total
is the two items combined, disjoint by ownership.

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
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .errors import ConfigError
from .hashing import shard_of
from .periods import DAY_MS, format_duration, parse_duration
from .timefmt import format_ts, parse_timestamp
from .writetier import REPACK_MS

#: Marks are grouped by the minute they were stamped in: the rollup function's unit of progress.
SLOT_MS = 60_000
MARK_SHARDS = 32
ROLLUP_SHARDS = 32
TOTAL_PERIOD_INTERVALS = 1000
STATE_PK = "rollstate"
PARTIAL_PREFIX = "rollgrp#"
REDO_PREFIX = "compactredo#"
#: The sort key suffix of compaction's part of a total (``<interval start>#c``).
FLEET_PART = "#c"
#: The sort key suffix of the re-pack's *fresh* part of a finest total, from the slice partials of an hour
#: compaction has not done yet (``<interval start>#p``; docs/rollups.md, "Fresh minute totals").
FRESH_PART = "#p"
#: The partition keys each side may touch, as IAM ``dynamodb:LeadingKeys`` patterns.
MARK_KEYS = ("rollmark#*",)
READ_KEYS = ("rollup#*", "rollall#*", STATE_PK)
#: What compaction writes in the control table: partials, its parts of totals, re-marks; it reads
#: and deletes redo requests (the rollup function puts them).
COMPACTION_KEYS = (f"{PARTIAL_PREFIX}*", "rollall#*", "rollmark#*", f"{REDO_PREFIX}*")
REDO_KEYS = (f"{REDO_PREFIX}*",)
#: The rollup function reads a slice partial's pairs left out (a late mark's hold, docs/rollups.md).
PARTIAL_KEYS = (f"{PARTIAL_PREFIX}*",)
#: An hour: the write tier's slice, the span of a partial.
HOUR_MS = 3_600_000
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

    def check_hour_aligned(self, field_name: str = "granularities") -> None:
        """Refuse levels that neither divide an hour nor are whole hours: compaction's partials hold a
        group's hour per finest interval, and its totals are combined from them hour by hour."""
        for level in self.levels:
            if HOUR_MS % level and level % HOUR_MS:
                raise ConfigError(
                    field_name, f"{format_duration(level)} neither divides an hour nor is a whole number of hours"
                )

    def within_hour(self) -> tuple[int, ...]:
        """The levels of an hour or less (compaction's totals of them come from the partials)."""
        return tuple(level for level in self.levels if level <= HOUR_MS)

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


def minute_key(prefix: str, slot_ms: int) -> tuple[str, str]:
    """The marked-minutes index item of ``slot_ms``: whoever writes marks stamped in a slot puts it in
    the same write, so a slot absent from its hour's partition (one Query) has no mark, and the rollup
    function skips its MARK_SHARDS Queries. Under the marks' key family (``rollmark#*``): no other grant."""
    slot = floor_to(slot_ms, SLOT_MS)
    return f"rollmark#{prefix}#minutes#{format_ts(floor_to(slot, HOUR_MS))}", format_ts(slot)


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


def total_sk(start_ms: int, *, fleet_part: bool = False, fresh: bool = False) -> str:
    """The sort key of a total: the rollup function's item, compaction's part (``#c``) or the re-pack's
    fresh part (``#p``)."""
    return format_ts(start_ms) + (FLEET_PART if fleet_part else FRESH_PART if fresh else "")


def parse_total_sk(sk: str) -> tuple[int, bool]:
    """The interval start of a total's sort key, and whether it is compaction's part."""
    return parse_timestamp(sk.removesuffix(FLEET_PART).removesuffix(FRESH_PART), "sk"), sk.endswith(FLEET_PART)


def total_part(sk: str) -> str:
    """Which part of a total a sort key holds: ``""`` (the rollup function's), :data:`FLEET_PART` or
    :data:`FRESH_PART`."""
    return sk[-2:] if sk[-2:] in (FLEET_PART, FRESH_PART) else ""


def total_pks(prefix: str, level: int, from_ms: int, to_ms: int) -> list[str]:
    """The partitions holding the totals of ``[from_ms, to_ms)``, in time order."""
    period = level * TOTAL_PERIOD_INTERVALS
    return [total_pk(prefix, level, p) for p in range(floor_to(from_ms, period), to_ms, period)]


def rollup_ttl(end_ms: int, retention_ms: int) -> int:
    """TTL (epoch s) of a rollup or mark of an interval ending at ``end_ms``: past its readings'."""
    return (end_ms + retention_ms + TTL_SLACK_MS) // 1000


def _dyadic(value: int | float) -> tuple[int, int]:
    """``value`` exactly as ``units * 2**exponent``: every int and every finite float is one."""
    if type(value) is int:
        return value, 0
    units, divisor = value.as_integer_ratio()
    return units, 1 - divisor.bit_length()  # divisor is 2**-exponent


def _lower(value: int | float, held: int | float) -> bool:
    """Whether ``value`` replaces ``held`` as a minimum: smaller, or equal and first in a fixed order
    (a float before an int, -0.0 before 0.0), so the minimum and its type never depend on the order."""
    if value != held:
        return value < held
    return (type(value) is not float, math.copysign(1, value)) < (type(held) is not float, math.copysign(1, held))


def _higher(value: int | float, held: int | float) -> bool:
    """The same for a maximum: larger, or equal and a float before an int, 0.0 before -0.0."""
    if value != held:
        return value > held
    return (type(value) is float, math.copysign(1, value)) > (type(held) is float, math.copysign(1, held))


@dataclass(slots=True)
class Stat:
    """One measure's figures over an interval.

    The sum is kept exactly, as ``units * 2**exponent`` (every int and every float is such a
    number), so it is the same whatever order the readings, or the finer intervals holding them,
    are added in; :attr:`total` rounds it to a float once (the nearest, ``math.fsum``'s answer), or
    gives it as an int when every term was one. Equal minima or maxima of two types keep the float.
    """

    count: int
    low: int | float
    high: int | float
    units: int = 0
    exponent: int = 0
    floats: bool = False

    @classmethod
    def of(cls, value: int | float) -> Stat:
        units, exponent = _dyadic(value)
        return cls(1, value, value, units, exponent, type(value) is float)

    def add(self, value: int | float) -> None:
        # Inlined (_dyadic, _add_exact): this runs for every measure of every reading a raw aggregate reads.
        self.count += 1
        if isinstance(value, float):
            self.floats = True
            units, divisor = value.as_integer_ratio()
            exponent = 1 - divisor.bit_length()
        else:
            units, exponent = value, 0
        if exponent >= self.exponent:
            self.units += units << (exponent - self.exponent)
        else:
            self.units = (self.units << (self.exponent - exponent)) + units
            self.exponent = exponent
        if value < self.low or (value == self.low and _lower(value, self.low)):
            self.low = value
        if value > self.high or (value == self.high and _higher(value, self.high)):
            self.high = value

    def merge(self, other: Stat) -> None:
        self.count += other.count
        self._add_exact(other.units, other.exponent)
        self.floats = self.floats or other.floats
        if _lower(other.low, self.low):
            self.low = other.low
        if _higher(other.high, self.high):
            self.high = other.high

    def copy(self) -> Stat:
        return Stat(self.count, self.low, self.high, self.units, self.exponent, self.floats)

    def _add_exact(self, units: int, exponent: int) -> None:
        if exponent >= self.exponent:
            self.units += units << (exponent - self.exponent)
        else:
            self.units = (self.units << (self.exponent - exponent)) + units
            self.exponent = exponent

    @property
    def total(self) -> int | float:
        """The sum: exact as an int when every term was an int, else the float nearest the exact sum."""
        return self._over(1)

    @property
    def mean(self) -> int | float:
        """The sum over the count, rounded once (a float)."""
        return float(self._over(self.count))

    def _over(self, divisor: int) -> int | float:
        if self.exponent >= 0:
            whole = self.units << self.exponent
            return whole / divisor if self.floats or divisor != 1 else whole
        return self.units / (divisor << -self.exponent)  # int / int rounds once, to the nearest float

    @property
    def sum_text(self) -> str:
        """The exact sum as decimal text: digits alone for a sum of ints, with a point for one of floats."""
        if self.exponent >= 0:
            whole = str(self.units << self.exponent)
            return f"{whole}.0" if self.floats else whole
        places = -self.exponent
        digits = str(abs(self.units) * 5**places).rjust(places + 1, "0")
        fraction = digits[-places:].rstrip("0") or "0"
        return f"{'-' if self.units < 0 else ''}{digits[:-places]}.{fraction}"

    @classmethod
    def stored(cls, count: int, total: object, low: object, high: object) -> Stat:
        """A stat as an item holds it: the sum as exact text (older items: a number), the minimum and
        maximum as their text (older items: numbers, which DynamoDB may give back as ``3`` for ``3.0``)."""
        if isinstance(total, str) and _INTEGER.fullmatch(total) is None:
            units, divisor = Decimal(total).as_integer_ratio()
            if divisor & (divisor - 1):
                raise ValueError(f"the sum {total[:40]!r} is not a sum of floats")
            return cls(count, _number(low), _number(high), units, 1 - divisor.bit_length(), True)
        value = _number(total)
        units, exponent = _dyadic(value)
        return cls(count, _number(low), _number(high), units, exponent, type(value) is float)


_INTEGER = re.compile(r"-?\d+")


@dataclass(slots=True)
class Figures:
    """Readings counted and every measure's figures, over one interval (of one entity, or of all).
    ``aside``: why this interval's figures could not be computed or stored (rollup function: a block
    that does not decode, an item DynamoDB refuses); an interval combined from one is set aside too."""

    readings: int = 0
    measures: dict[str, Stat] = field(default_factory=dict)
    aside: str | None = None

    def add(self, measures: Mapping[str, int | float]) -> None:
        self.readings += 1
        for name, value in measures.items():
            stat = self.measures.get(name)
            if stat is None:
                self.measures[name] = Stat.of(value)
            else:
                stat.add(value)

    def merge(self, other: Figures) -> None:
        self.readings += other.readings
        if other.aside is not None and (self.aside is None or other.aside < self.aside):
            self.aside = other.aside  # the same reason, whatever the order
        for name, stat in other.measures.items():
            mine = self.measures.get(name)
            if mine is None:
                self.measures[name] = stat.copy()
            else:
                mine.merge(stat)

    @classmethod
    def combined(cls, parts: Iterable[Figures]) -> Figures:
        out = cls()
        for part in parts:
            out.merge(part)
        return out

    @classmethod
    def set_aside(cls, reason: str) -> Figures:
        return cls(aside=reason[:_REASON_CHARS])

    def item(self) -> dict[str, object]:
        """The figures as item attributes (plain Python values): the sum as exact text, the minimum and
        maximum as the text of their value (``3.0`` stays a float), so nothing is out of DynamoDB's
        number range or precision; a set-aside interval holds its reason too (with the figures of the
        parts that were not set aside, if any)."""
        item: dict[str, object] = {
            "n": self.readings,
            "m": {
                k: {"c": s.count, "s": s.sum_text, "lo": repr(s.low), "hi": repr(s.high)}
                for k, s in self.measures.items()
            },
        }
        if self.aside is not None:
            item["aside"] = self.aside
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, object]) -> Figures:
        measures: Mapping[str, Any] = item.get("m") or {}  # type: ignore[assignment]
        aside = item.get("aside")
        return cls(
            int(item["n"]),  # type: ignore[call-overload]
            {k: Stat.stored(int(v["c"]), v["s"], v["lo"], v["hi"]) for k, v in measures.items()},
            aside if isinstance(aside, str) else None,
        )


#: A set-aside interval's reason is cut to this many characters (it names a block, or DynamoDB's refusal).
_REASON_CHARS = 1_000


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


# -- compaction's figures: group partials and redo requests ---------------------------------------


def partial_pk(prefix: str, hour_ms: int, *, slices: bool = False) -> str:
    """The partition of every group's partial of one hour (one Query reads them all), or with ``slices``
    of every group's slice partials of the hour (sort key ``<slice start>#<group>``)."""
    return f"{PARTIAL_PREFIX}{prefix}#{format_ts(floor_to(hour_ms, HOUR_MS))}" + ("#s" if slices else "")


@dataclass(slots=True)
class GroupPartial:
    """One group's figures of one hour over its compaction-owned entities (those whose readings of
    the hour are all in the write tier), per finest interval of the hour (``intervals``, by start;
    an interval without readings is absent). ``groups``: the G the group number is one of;
    ``others``: the other G's whose group items the hour held (a change of G), which a redo of the
    hour must know when the compaction state has forgotten them. With ``slice_ms``, a *slice partial*:
    the re-pack's, of one slice of an hour compaction has not done (docs/rollups.md, "Fresh minute
    totals"); ``hour_ms`` is the slice's hour, and ``left_out`` the (entity, finest interval start) pairs
    the partial leaves to the rollup function (:func:`slice_owned`)."""

    hour_ms: int
    group: int
    groups: int
    intervals: dict[int, Figures] = field(default_factory=dict)
    others: tuple[int, ...] = ()
    slice_ms: int | None = None
    left_out: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def of(  # noqa: PLR0917 - the partial's fields, in order
        cls,
        hour_ms: int,
        group: int,
        groups: int,
        readings: Iterable[Any],
        finest: int,
        others: Iterable[int] = (),
        *,
        slice_ms: int | None = None,
    ) -> GroupPartial:
        """The partial of ``readings`` (each with ``ts_ms`` and ``measures``), all in the hour (or the
        re-pack slice at ``slice_ms``)."""
        partial = cls(hour_ms, group, groups, others=tuple(sorted(set(others))), slice_ms=slice_ms)
        low, high = (hour_ms, hour_ms + HOUR_MS) if slice_ms is None else (slice_ms, slice_ms + REPACK_MS)
        for reading in readings:
            if not low <= reading.ts_ms < high:
                where = "hour" if slice_ms is None else "re-pack slice"
                raise ValueError(f"a reading at {format_ts(reading.ts_ms)} is not in the {where} {format_ts(low)}")
            start = floor_to(reading.ts_ms, min(finest, HOUR_MS))
            partial.intervals.setdefault(start, Figures()).add(reading.measures)
        return partial

    def key(self, prefix: str) -> tuple[str, str]:
        if self.slice_ms is not None:
            return partial_pk(prefix, self.hour_ms, slices=True), f"{format_ts(self.slice_ms)}#{self.group:04d}"
        return partial_pk(prefix, self.hour_ms), f"{self.group:04d}"

    def item(self, prefix: str, expires_at: int) -> dict[str, object]:
        pk, sk = self.key(prefix)
        item: dict[str, object] = {
            "pk": pk,
            "sk": sk,
            "G": self.groups,
            "f": {format_ts(start): figures.item() for start, figures in sorted(self.intervals.items())},
            "expires_at": expires_at,
        }
        if self.others:
            item["O"] = ",".join(map(str, self.others))
        if self.left_out:
            item["X"] = ",".join(f"{start}#{entity}" for entity, start in sorted(self.left_out))
        return item

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> GroupPartial:
        """A stored partial (plain values); a malformed one raises ValueError naming the field."""
        try:
            pk, sk = str(item["pk"]), str(item["sk"])
            slice_ms = parse_timestamp(sk.split("#", 1)[0], "sk") if pk.endswith("#s") else None
            hour = parse_timestamp(pk.removesuffix("#s").rsplit("#", 1)[1], "pk")
            intervals = {parse_timestamp(k, "f"): Figures.from_item(v) for k, v in (item.get("f") or {}).items()}
            others = tuple(int(g) for g in str(item.get("O") or "").split(",") if g)
            group = int(sk.rsplit("#", 1)[-1])
            pairs = (pair.split("#", 1) for pair in str(item.get("X") or "").split(",") if pair)
            left_out = frozenset((entity, int(start)) for start, entity in pairs)
            return cls(hour, group, int(item["G"]), intervals, others, slice_ms, left_out)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"a malformed group partial {item.get('pk')!r} / {item.get('sk')!r}: {exc}") from exc


def fleet_parts(partials: Iterable[GroupPartial], levels: Granularities, hour_ms: int) -> dict[int, dict[int, Figures]]:
    """Compaction's parts of the totals of one hour, for each level of an hour or less: every
    interval of the hour (an empty one too, so a part that lost its readings is put empty)."""
    finest: dict[int, Figures] = {}
    for partial in partials:
        for start, figures in partial.intervals.items():
            finest.setdefault(start, Figures()).merge(figures)
    out: dict[int, dict[int, Figures]] = {}
    for level in levels.within_hour():
        intervals = {start: Figures() for start in range(hour_ms, hour_ms + HOUR_MS, level)}
        for start, figures in finest.items():
            intervals[floor_to(start, level)].merge(figures)
        out[level] = intervals
    return out


def fresh_parts(partials: Iterable[GroupPartial]) -> dict[int, Figures]:
    """The re-pack's fresh parts of the finest totals of one slice, from every group's slice partial
    of it: the merged figures of each finest interval holding a reading."""
    out: dict[int, Figures] = {}
    for partial in partials:
        for start, figures in partial.intervals.items():
            out.setdefault(start, Figures()).merge(figures)
    return out


def slice_owned(readings: Iterable[Any], blocked: Iterable[Any], finest: int) -> tuple[list[Any], set[tuple[str, int]]]:
    """The readings a slice partial counts, and the (entity, finest interval start) pairs it leaves out:
    ``readings`` (a re-pack slice's, whose newest copy is a group item's) but those of an entity in an
    interval where ``blocked`` (the slice's block readings the re-pack read) holds a reading of it. Ingest
    marked every block reading, so the rollup function counts those pairs from raw, both tiers (the
    re-pack marks them again, once the slice's group items are final); every other pair is the partial's."""
    taken = {(reading.entity_id, floor_to(reading.ts_ms, finest)) for reading in blocked}
    return [r for r in readings if (r.entity_id, floor_to(r.ts_ms, finest)) not in taken], taken


def redo_pk(prefix: str) -> str:
    return f"{REDO_PREFIX}{prefix}"


@dataclass(frozen=True, slots=True, order=True)
class RedoRequest:
    """Compaction must redo ``group``'s ``hour``: ``entity`` wrote a block in it after compaction had
    counted the entity's readings of the hour in the group's partial (a late reading). The redo puts
    a dense mark for the entity, so the hour becomes the rollup function's: compaction leaves the
    entity out of the partial and re-marks its minutes (docs/rollups.md)."""

    hour_ms: int
    group: int
    entity: str

    def key(self, prefix: str) -> tuple[str, str]:
        return redo_pk(prefix), f"{format_ts(self.hour_ms)}#{self.group:04d}#{self.entity}"

    @classmethod
    def parse(cls, sk: str) -> RedoRequest:
        hour, group, entity = sk.split("#", 2)
        return cls(parse_timestamp(hour, "sk"), int(group), entity)


def remark_starts(readings: Iterable[Any], finest: int) -> list[int]:
    """The finest intervals holding ``readings`` (each with ``ts_ms``), ascending: the minutes
    compaction re-marks of an entity whose hour is the rollup function's."""
    return sorted({floor_to(reading.ts_ms, finest) for reading in readings})
