"""Oracles of the rollup tests: the marks a batch must write, and figures equal up to float rounding."""

from __future__ import annotations

import math
from collections.abc import Iterable

from keydesign.rollup import Figures, Mark


def marks_of(stamp_ms: int, level: int, readings: Iterable[tuple[str, int]]) -> list[Mark]:
    """The marks a batch stamped at ``stamp_ms`` writes for its readings (entity, event time):
    one per entity and finest interval, whatever the number of readings."""
    return sorted({Mark.of(stamp_ms, level, ts_ms, entity) for entity, ts_ms in readings})


def same_figures(ours: Figures, other: Figures, rel_tol: float = 1e-9) -> bool:
    """Equal counts, minima and maxima; equal sums (within float rounding when a sum is a float)."""
    if ours.readings != other.readings or ours.measures.keys() != other.measures.keys():
        return False
    for name, mine in ours.measures.items():
        theirs = other.measures[name]
        if (mine.count, mine.low, mine.high) != (theirs.count, theirs.low, theirs.high):
            return False
        if not math.isclose(mine.total, theirs.total, rel_tol=rel_tol, abs_tol=1e-9):
            return False
    return True
