"""Downsampling: per-interval statistics of every measure, built while streaming.

Readings arrive in time order, so one interval is open at a time and the next
interval's boundary is found by comparing fixed-width timestamp strings;
nothing but the running figures is kept.
"""

from __future__ import annotations

from collections.abc import Mapping

from keydesign import format_ts, parse_timestamp
from keydesign.rollup import Figures
from keydesign.rollup import Stat as Running
from keydesign.timefmt import MAX_TS_MS
from query.models import Interval
from query.params import Stat

#: Sorts after every timestamp: the end of an interval that reaches past year 9999.
_AFTER_ALL = "~"


class SeriesBuilder:
    """Accumulates readings (in ascending time order) into epoch-aligned intervals."""

    def __init__(self, interval_ms: int, stats: tuple[Stat, ...]) -> None:
        self._interval = interval_ms
        self._stats = stats
        self._done: list[Interval] = []
        self._start: str | None = None
        self._end = ""
        self._open = Figures()
        self.total = 0

    def add(self, ts: str, measures: Mapping[str, int | float]) -> None:
        if self._start is None or ts >= self._end:
            self._close()
            ms = parse_timestamp(ts, "t")
            start = ms - ms % self._interval
            end = start + self._interval
            self._start = format_ts(start)
            self._end = format_ts(end) if end <= MAX_TS_MS else _AFTER_ALL
        self._open.add(measures)
        self.total += 1

    def _close(self) -> None:
        figures = self._open
        if self._start is None or not figures.readings:
            return
        self._done.append(interval_of(self._start, figures.readings, figures.measures, self._stats))
        self._open = Figures()

    def intervals(self) -> list[Interval]:
        self._close()
        self._start = None
        return self._done


def interval_of(start: str, readings: int, measures: Mapping[str, Running], stats: tuple[Stat, ...]) -> Interval:
    """An interval of a series: per measure, in name order, the statistics ``stats`` of its running figures.
    The raw readings and the rollups both come here with :class:`keydesign.rollup.Stat`, whose sum is exact
    and rounded once, so the two sources give the same numbers for the same readings, in any order."""
    shown: dict[str, dict[Stat, int | float]] = {}
    for name, running in sorted(measures.items()):
        every: dict[Stat, int | float] = {
            "count": running.count,
            "min": running.low,
            "max": running.high,
            "avg": running.mean,
            "sum": running.total,
        }
        shown[name] = {stat: every[stat] for stat in stats}
    return Interval(start=start, readings=readings, measures=shown)
