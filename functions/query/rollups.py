"""Aggregates answered from rollups: which source serves a request, and the series read from them.

A rollup of granularity g serves an aggregate when the interval is a whole
multiple of g and ``from`` and ``to`` fall on g boundaries. It serves the
intervals that end by the rollup function's watermark (``through``: every
reading stored before it is in the rollups); the intervals after it are read
raw, per entity. Totals (every entity) are only ever read from rollups. An
interval the rollup function set aside (docs/rollups.md) carries its reason in
``set_aside``, its figures those of the parts that were not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from adapters.rollup_store import ReadCount, RollupState, RollupStore
from keydesign import format_ts
from keydesign.periods import format_duration
from keydesign.rollup import Figures, Granularities, floor_to
from query.aggregate import interval_of
from query.models import Interval
from query.params import ReadArgs, Stat, TimeRange


@dataclass(frozen=True, slots=True)
class Source:
    """Where an aggregate's figures come from: rollups of ``level`` for ``[from, split_ms)``, raw after."""

    level: int | None
    split_ms: int
    reason: str
    state: RollupState | None

    def name(self, window: TimeRange) -> Literal["raw", "rollups", "rollups+raw"]:
        if self.split_ms <= window.from_ms:
            return "raw"
        return "rollups" if self.split_ms >= window.to_ms else "rollups+raw"

    @property
    def through(self) -> str | None:
        return format_ts(self.state.through_ms) if self.state is not None else None


class RollupAnswers:
    """The query function's reads of rollups."""

    def __init__(self, store: RollupStore, levels: Granularities) -> None:
        self.store = store
        self.levels = levels

    def source(self, interval_ms: int, window: TimeRange, *, consistent: bool) -> Source:
        level = self.levels.serving(interval_ms, window.from_ms, window.to_ms)
        if level is None:
            spelled = ", ".join(format_duration(g) for g in self.levels.levels)
            why = f"the interval is not a multiple of a rollup granularity ({spelled}), or from/to are not on one"
            return Source(None, window.from_ms, why, None)
        state = self.store.state(consistent=consistent)
        if state is None:
            return Source(level, window.from_ms, "the rollup function has not run yet", None)
        split = max(window.from_ms, min(window.to_ms, floor_to(state.through_ms, interval_ms)))
        through, rollups = format_ts(state.through_ms), f"{format_duration(level)} rollups"
        if split >= window.to_ms:
            why = f"{rollups} tile the range and cover it (every reading stored before {through})"
        elif split > window.from_ms:
            why = f"{rollups} up to {format_ts(split)}; the intervals after the rollups' {through} raw"
        else:
            why = f"the range starts after the last interval the rollups cover ({through})"
        return Source(level, split, why, state)

    def series(  # noqa: PLR0917 - one caller, passing a request's own arguments
        self,
        entity: str | None,
        level: int,
        window: TimeRange,
        interval_ms: int,
        stats: tuple[Stat, ...],
        read: ReadArgs,
        cost: ReadCount,
    ) -> tuple[list[Interval], int]:
        """The intervals of ``window`` from ``entity``'s rollups (None: the totals), and readings counted."""
        from_ms, to_ms, consistent = window.from_ms, window.to_ms, read.consistent
        if to_ms <= from_ms:
            return [], 0
        if entity is None:
            found = self.store.totals(level, from_ms, to_ms, cost, consistent=consistent)
        else:
            found = self.store.entity_rollups(level, range(from_ms, to_ms, level), entity, cost, consistent=consistent)
        grouped: dict[int, list[Figures]] = {}
        for start, figures in sorted(found.items()):
            grouped.setdefault(floor_to(start, interval_ms), []).append(figures)
        out: list[Interval] = []
        readings = 0
        for start, parts in grouped.items():
            figures = Figures.combined(parts)
            if not figures.readings and figures.aside is None:
                continue
            readings += figures.readings
            wanted = read.measures
            measures = {name: m for name, m in figures.measures.items() if wanted is None or name in wanted}
            interval = interval_of(format_ts(start), figures.readings, measures, stats)
            out.append(interval if figures.aside is None else interval.model_copy(update={"set_aside": figures.aside}))
        return out, readings
