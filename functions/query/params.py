"""Request parameters, from the strings a query string carries to checked, typed values.

The routes (``query.api``) parse here and hand :class:`QueryService` the typed
values (:class:`PageArgs`, :class:`ReadArgs`, a :class:`TimeRange`...). Every
function raises :class:`keydesign.InvalidInput` naming the parameter as the
client spelt it (``from``, ``to``, ``measures``...), so the error mapper can
answer 400 without knowing which check failed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

from keydesign import ConfigError, InvalidInput, format_ts, parse_duration
from keydesign.periods import format_duration
from keydesign.timefmt import parse_instant

Order = Literal["asc", "desc"]
Stat = Literal["count", "min", "max", "avg", "sum"]
STATS: tuple[Stat, ...] = ("count", "min", "max", "avg", "sum")
MAX_PROJECTED_MEASURES = 100
#: Most intervals one aggregate may span (``(to - from) / interval``).
MAX_INTERVALS = 10_000
MIN_INTERVAL_MS = 1_000

_MEASURE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")


@dataclass(frozen=True, slots=True)
class TimeRange:
    """A half-open range ``[from_ms, to_ms)``."""

    from_ms: int
    to_ms: int


@dataclass(frozen=True, slots=True)
class PageArgs:
    """Which page of a time range to read: ``limit`` items in ``order``, after ``cursor``."""

    window: TimeRange
    limit: int
    cursor: str | None = None
    order: Order = "asc"


@dataclass(frozen=True, slots=True)
class ReadArgs:
    """How to read, on every route: measures to project (None: all), consistency, plan only."""

    measures: tuple[str, ...] | None = None
    consistent: bool = False
    explain: bool = False


def parse_time(raw: str, name: str) -> int:
    """An instant as RFC 3339 with offset, or whole epoch milliseconds."""
    try:
        return parse_instant(raw, name)
    except InvalidInput as exc:
        if " " in raw and ("+" not in raw):
            # A '+' offset sent unencoded arrives as a space.
            raise InvalidInput(name, f"{exc.reason} (send a '+' in a query string as %2B)") from None
        raise


def parse_range(from_raw: str, to_raw: str, max_range_ms: int) -> TimeRange:
    """``[from, to)``: ``from`` strictly before ``to``, at most ``max_range_ms`` wide."""
    from_ms = parse_time(from_raw, "from")
    to_ms = parse_time(to_raw, "to")
    if from_ms >= to_ms:
        raise InvalidInput("from", f"must be before 'to' ({format_ts(from_ms)} is not before {format_ts(to_ms)})")
    if to_ms - from_ms > max_range_ms:
        raise InvalidInput(
            "to",
            f"the range spans {format_duration(to_ms - from_ms)}; one request may span at most "
            f"{format_duration(max_range_ms)} (split the range)",
        )
    return TimeRange(from_ms, to_ms)


def parse_limit(value: int, max_limit: int) -> int:
    if not 1 <= value <= max_limit:
        raise InvalidInput("limit", f"must be between 1 and {max_limit}, got {value}")
    return value


def parse_measures(raw: str | None) -> tuple[str, ...] | None:
    """Comma-separated measure names to project, in order, repeats dropped; None: every measure."""
    if raw is None:
        return None
    names: list[str] = []
    for part in raw.split(","):
        name = part.strip()
        if not name:
            raise InvalidInput("measures", "must be a comma-separated list of measure names, with no empty entries")
        if _MEASURE.match(name) is None:
            raise InvalidInput(
                "measures",
                f"{name[:70]!r} is not a measure name (1-64 letters, digits or _, not starting with a digit)",
            )
        if name not in names:
            names.append(name)
    if len(names) > MAX_PROJECTED_MEASURES:
        raise InvalidInput("measures", f"names {len(names)} measures; the maximum is {MAX_PROJECTED_MEASURES}")
    return tuple(names)


def parse_stats(raw: str | None) -> tuple[Stat, ...]:
    """Comma-separated statistics among count, min, max, avg, sum; default: all of them."""
    if raw is None:
        return STATS
    wanted = {part.strip() for part in raw.split(",")}
    unknown = sorted(wanted - set(STATS))
    if unknown:
        raise InvalidInput("stats", f"{unknown[0][:40]!r} is not a statistic; choose from {', '.join(STATS)}")
    return tuple(s for s in STATS if s in wanted)


def parse_duration_param(raw: str, name: str) -> int:
    """A duration such as ``90s``, ``15m``, ``2h``, ``7d``."""
    try:
        return parse_duration(raw, name)
    except ConfigError as exc:
        raise InvalidInput(name, exc.reason) from None


def parse_interval(raw: str, window: TimeRange) -> int:
    """An aggregation interval: at least 1s, and at most ``MAX_INTERVALS`` of them over the range."""
    interval = parse_duration_param(raw, "interval")
    if interval < MIN_INTERVAL_MS:
        raise InvalidInput("interval", f"must be at least {format_duration(MIN_INTERVAL_MS)}")
    first = window.from_ms - window.from_ms % interval
    count = math.ceil((window.to_ms - first) / interval)
    if count > MAX_INTERVALS:
        raise InvalidInput(
            "interval",
            f"{format_duration(interval)} cuts the range into {count} intervals; the maximum is {MAX_INTERVALS} "
            "(choose a longer interval or a narrower range)",
        )
    return interval


def parse_lookback(raw: str | None, maximum_ms: int) -> int:
    if raw is None:
        return maximum_ms
    lookback = parse_duration_param(raw, "lookback")
    if not 0 < lookback <= maximum_ms:
        raise InvalidInput("lookback", f"must be longer than 0 and at most {format_duration(maximum_ms)}")
    return lookback
