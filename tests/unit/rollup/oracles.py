"""Oracles of the rollup tests: the marks a batch must write, and figures equal up to float rounding."""

from __future__ import annotations

from collections.abc import Iterable

from keydesign.rollup import Figures, Mark


def marks_of(stamp_ms: int, level: int, readings: Iterable[tuple[str, int]]) -> list[Mark]:
    """The marks a batch stamped at ``stamp_ms`` writes for its readings (entity, event time):
    one per entity and finest interval, whatever the number of readings."""
    return sorted({Mark.of(stamp_ms, level, ts_ms, entity) for entity, ts_ms in readings})


def same_figures(ours: Figures, other: Figures) -> bool:
    """Equal figures, exactly: counts, minima and maxima (and their types), and sums (exact, so their
    rounding is the same whatever order the readings were added in)."""
    if ours.readings != other.readings or ours.measures.keys() != other.measures.keys():
        return False
    for name, mine in ours.measures.items():
        theirs = other.measures[name]
        shown = [(s.count, s.low, s.high, s.total, s.mean) for s in (mine, theirs)]
        if shown[0] != shown[1] or [type(v) for v in shown[0]] != [type(v) for v in shown[1]]:
            return False
        if (mine.units << max(0, mine.exponent - theirs.exponent)) != (
            theirs.units << max(0, theirs.exponent - mine.exponent)
        ):
            return False
    return ours.aside == other.aside
