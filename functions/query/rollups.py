"""Aggregates answered from rollups: which source serves a request, and the series read from them.

A rollup of granularity g serves an aggregate when the interval is a whole
multiple of g and ``from`` and ``to`` fall on g boundaries. It serves the
intervals that end by the rollups' watermark T; the intervals after it are read
raw, per entity. Totals (every entity) are only ever read from rollups. An
interval the rollup function set aside (docs/rollups.md) carries its reason in
``set_aside``, its figures those of the parts that were not.

Without the write tier T is the rollup function's ``through`` (every reading
stored before it is in the rollups). With it, an entity's hour is either the
rollup function's (its rollups) or compaction's (its unflagged compacted blocks,
and compaction's ``#c`` part of each total, :mod:`keydesign.rollup`), so T is
also no later than the state's ``totals_through`` (before it, every re-mark
compaction put has been applied): a total is its two items combined
(``RollupStore.totals``), an entity's interval its rollups plus the readings of
its unflagged compacted blocks (``readings`` of :meth:`RollupAnswers.series`,
read by ``query.logic``); the entity's rollups of an hour or less inside its
compaction-owned hours are not read (it has none there). Before the rollup
function has recorded a ``totals_through`` T is 0: nothing is served from rollups.

Fresh minute totals (docs/rollups.md): the finest level's totals of the hours compaction has not done
are served up to the state's ``fresh_through`` as the rollup function's item and the re-pack's fresh part
(``<start>#p``), when that window starts where ``totals_through`` ends.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

from adapters.rollup_store import ReadCount, RollupStore
from keydesign import Reading, format_ts
from keydesign.periods import format_duration
from keydesign.rollup import HOUR_MS, Figures, Granularities, floor_to
from query.aggregate import interval_of
from query.models import Interval
from query.params import ReadArgs, Stat, TimeRange


@dataclass(frozen=True, slots=True)
class Source:
    """Where an aggregate's figures come from: rollups of ``level`` for ``[from, split_ms)``, raw after.
    ``through_ms``: the rollups' watermark T (None: no rollup state), ``split_ms`` is T floored to the interval."""

    level: int | None
    split_ms: int
    reason: str
    through_ms: int | None
    #: Totals from this interval start on are the re-pack's fresh parts, not compaction's (None: none).
    fresh_from: int | None = None

    def name(self, window: TimeRange) -> Literal["raw", "rollups", "rollups+raw"]:
        if self.split_ms <= window.from_ms:
            return "raw"
        return "rollups" if self.split_ms >= window.to_ms else "rollups+raw"

    @property
    def through(self) -> str | None:
        return format_ts(self.through_ms) if self.through_ms is not None else None


class RollupAnswers:
    """The query function's reads of rollups."""

    def __init__(self, store: RollupStore, levels: Granularities) -> None:
        self.store = store
        self.levels = levels

    def source(
        self, interval_ms: int, window: TimeRange, *, consistent: bool, compacted: bool = False, totals: bool = False
    ) -> Source:
        """The source of an aggregate of ``interval_ms`` over ``window``; ``compacted``: the deployment has
        the write tier, so the rollups serve only before ``totals_through`` too, and ``totals`` (every
        entity's) of the finest level up to ``fresh_through`` when that window follows on."""
        level = self.levels.serving(interval_ms, window.from_ms, window.to_ms)
        if level is None:
            spelled = ", ".join(format_duration(g) for g in self.levels.levels)
            why = f"the interval is not a multiple of a rollup granularity ({spelled}), or from/to are not on one"
            return Source(None, window.from_ms, why, None)
        state = self.store.state(consistent=consistent)
        if state is None:
            return Source(level, window.from_ms, "the rollup function has not run yet", None)
        watermark = min(state.through_ms, state.totals_through) if compacted else state.through_ms
        fresh = compacted and totals and level == self.levels.finest and state.minute_totals_through > watermark
        if fresh:
            watermark = state.minute_totals_through
        split = max(window.from_ms, min(window.to_ms, floor_to(watermark, interval_ms)))
        through, rollups = format_ts(state.through_ms), f"{format_duration(level)} rollups"
        if compacted:
            through = f"the rollup function's {through}, compaction's totals {format_ts(state.totals_through)}"
            if fresh:
                through += f", fresh totals {format_ts(state.fresh_through)}"
        if split >= window.to_ms:
            why = f"{rollups} tile the range and cover it (every reading stored before {through})"
        elif split > window.from_ms:
            why = f"{rollups} up to {format_ts(split)}; the intervals after the rollups' {through} raw"
        else:
            why = f"the range starts after the last interval the rollups cover ({through})"
        return Source(level, split, why, watermark, state.fresh_from if fresh else None)

    def series(  # noqa: PLR0917 - one caller, passing a request's own arguments
        self,
        entity: str | None,
        level: int,
        window: TimeRange,
        interval_ms: int,
        stats: tuple[Stat, ...],
        read: ReadArgs,
        cost: ReadCount,
        readings: Iterable[Reading] = (),
        compacted_hours: Collection[int] = (),
        fresh_from: int | None = None,
    ) -> tuple[list[Interval], int]:
        """The intervals of ``window`` from ``entity``'s rollups (None: the totals) combined with
        ``readings`` (of ``window``: the entity's compaction-owned ones), and readings counted. The
        rollups of a level of an hour or less inside ``compacted_hours`` (the entity's hours that are
        compaction's: it has no rollup there) are not read."""
        from_ms, to_ms, consistent = window.from_ms, window.to_ms, read.consistent
        if to_ms <= from_ms:
            return [], 0
        if entity is None:
            found = self.store.totals(level, from_ms, to_ms, cost, consistent=consistent, fresh_from=fresh_from)
        else:
            starts: Iterable[int] = range(from_ms, to_ms, level)
            if compacted_hours and level <= HOUR_MS:
                starts = [s for s in starts if floor_to(s, HOUR_MS) not in compacted_hours]
            found = self.store.entity_rollups(level, starts, entity, cost, consistent=consistent)
        grouped: dict[int, list[Figures]] = {}
        for start, figures in found.items():
            grouped.setdefault(floor_to(start, interval_ms), []).append(figures)
        added: dict[int, Figures] = {}
        for reading in readings:
            added.setdefault(floor_to(reading.ts_ms, interval_ms), Figures()).add(reading.measures)
        for start, figures in added.items():
            grouped.setdefault(start, []).append(figures)
        out: list[Interval] = []
        counted = 0
        for start, parts in sorted(grouped.items()):
            figures = Figures.combined(parts)
            if not figures.readings and figures.aside is None:
                continue
            counted += figures.readings
            wanted = read.measures
            measures = {name: m for name, m in figures.measures.items() if wanted is None or name in wanted}
            interval = interval_of(format_ts(start), figures.readings, measures, stats)
            out.append(interval if figures.aside is None else interval.model_copy(update={"set_aside": figures.aside}))
        return out, counted
