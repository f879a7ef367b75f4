"""Time buckets (inside a partition key) and table periods (one table each).

A *bucket* is a fixed slice of UTC time (``15m``, ``1h``, ``1d``...) aligned to
midnight UTC. Its label is the fixed-width start time ``YYYY-MM-DDTHH:MM``.

A *table period* (``hour``, ``day``, ``week``, ``month``) decides which table
holds a reading when retention is done by dropping whole tables. Weeks are ISO
weeks (Monday 00:00 UTC). Buckets must nest inside periods, so no bucket ever
straddles two tables.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from .errors import ConfigError, InvalidInput
from .timefmt import MAX_TS_MS, format_ts, from_datetime, to_datetime

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000

_BUCKET_RE = re.compile(r"^(\d{1,4})([mhd])$")
_UNIT_MS = {"m": MINUTE_MS, "h": HOUR_MS, "d": DAY_MS}


@dataclass(frozen=True, slots=True)
class Bucket:
    """A bucket granularity such as ``15m``: a whole divisor of a day."""

    spec: str
    width_ms: int

    @classmethod
    def parse(cls, spec: str) -> Bucket:
        """Parse ``Nm`` (N divides 60), ``Nh`` (N divides 24) or ``1d``."""
        match = _BUCKET_RE.match(str(spec).strip())
        if match is None:
            raise ConfigError("bucket", f"{spec!r} is not a granularity like '15m', '1h' or '1d'")
        count, unit = int(match.group(1)), match.group(2)
        allowed = {"m": 60, "h": 24, "d": 1}[unit]
        if count < 1 or allowed % count != 0:
            raise ConfigError(
                "bucket",
                f"{spec!r} must divide {'an hour' if unit == 'm' else 'a day'} evenly "
                f"(minutes: divisors of 60, hours: divisors of 24, days: 1)",
            )
        return cls(spec=f"{count}{unit}", width_ms=count * _UNIT_MS[unit])

    def start(self, ts_ms: int) -> int:
        """Start (epoch ms) of the bucket holding ``ts_ms``."""
        return ts_ms - ts_ms % self.width_ms

    def label(self, start_ms: int) -> str:
        """Fixed-width label ``YYYY-MM-DDTHH:MM`` of the bucket starting at ``start_ms``."""
        return _minute_label(start_ms)

    def is_boundary(self, ts_ms: int) -> bool:
        """True when ``ts_ms`` is the first instant of a bucket."""
        return ts_ms % self.width_ms == 0

    def next_boundary(self, ts_ms: int) -> int:
        """The first bucket boundary at or after ``ts_ms``."""
        return ts_ms if self.is_boundary(ts_ms) else self.start(ts_ms) + self.width_ms

    def starts(self, from_ms: int, to_ms: int) -> Iterator[int]:
        """Starts of every bucket that intersects the half-open range ``[from_ms, to_ms)``."""
        start = self.start(from_ms)
        while start < to_ms:
            yield start
            start += self.width_ms


@lru_cache(maxsize=4_096)
def _minute_label(start_ms: int) -> str:
    # Every reading of a bucket needs the same label: format it once.
    return f"{to_datetime(start_ms):%Y-%m-%dT%H:%M}"


PERIODS = ("hour", "day", "week", "month")
_NOMINAL_MS = {"hour": HOUR_MS, "day": DAY_MS, "week": 7 * DAY_MS, "month": 28 * DAY_MS}


@dataclass(frozen=True, slots=True)
class TablePeriod:
    """One table per ``hour``, ``day``, ``week`` (ISO, Monday) or ``month`` (UTC)."""

    name: str

    @classmethod
    def parse(cls, name: str) -> TablePeriod:
        if name not in PERIODS:
            raise ConfigError("table_period", f"{name!r} is not one of {', '.join(PERIODS)}")
        return cls(name)

    @property
    def nominal_ms(self) -> int:
        """Shortest length of one period (a month counts as 28 days)."""
        return _NOMINAL_MS[self.name]

    def start(self, ts_ms: int) -> int:
        """Start (epoch ms) of the period holding ``ts_ms``."""
        if self.name == "week":
            return ts_ms - ts_ms % DAY_MS - to_datetime(ts_ms).weekday() * DAY_MS
        if self.name == "month":
            dt = to_datetime(ts_ms)
            return from_datetime(datetime(dt.year, dt.month, 1, tzinfo=UTC))
        return ts_ms - ts_ms % _NOMINAL_MS[self.name]  # an hour or a day: aligned to the epoch

    def next_start(self, ts_ms: int) -> int:
        """Start of the period after the one holding ``ts_ms``."""
        start = self.start(ts_ms)
        if self.name == "month":
            # Count the month's days rather than build the next month's datetime:
            # after December 9999 that would be year 10000, which datetime refuses.
            dt = to_datetime(start)
            return start + calendar.monthrange(dt.year, dt.month)[1] * DAY_MS
        return start + _NOMINAL_MS[self.name]

    def label(self, ts_ms: int) -> str:
        """Label of the period holding ``ts_ms``: ``2026-11-22-06``, ``2026-11-22``,
        ``2026-W47`` or ``2026-11``. Labels are valid in DynamoDB table names."""
        return _period_label(self.name, self.start(ts_ms))

    def starts(self, from_ms: int, to_ms: int) -> Iterator[int]:
        """Starts of every period that intersects ``[from_ms, to_ms)``."""
        start = self.start(from_ms)
        while start < to_ms:
            yield start
            start = self.next_start(start)

    def check_admits(self, ts_ms: int, *, now_ms: int, grace_ms: int, prebuilt: int) -> None:
        """Raise :class:`InvalidInput` on ``timestamp`` unless a reading at ``ts_ms``
        may be written now: its period's table must exist and still take writes.

        A period takes writes until ``grace_ms`` after it ends (late readings);
        the rotator builds the ``prebuilt`` periods after the current one ahead
        of time, so anything later has no table yet.
        """
        low, high = _admitted(self, now_ms, grace_ms, prebuilt)  # once a batch: ingest's now is the batch's
        if ts_ms < low:
            closes = self.next_start(ts_ms) + grace_ms
            raise InvalidInput(
                "timestamp",
                f"period {self.label(ts_ms)} closed at {format_ts(closes)} (its end plus the grace window); "
                "its table no longer takes writes",
            )
        if ts_ms >= high:
            raise InvalidInput("timestamp", f"the table for period {self.label(ts_ms)} is not built yet")

    def check_nests(self, bucket: Bucket) -> None:
        """Raise :class:`ConfigError` unless every bucket lies inside one period."""
        # Buckets divide a day and are aligned to midnight; days nest in weeks
        # and months, so only the hour period can be split by a bucket.
        if self.name == "hour" and HOUR_MS % bucket.width_ms != 0:
            raise ConfigError("bucket", f"bucket {bucket.spec} does not fit inside an hourly table period")


def table_head(prefix: str) -> str:
    """What the name of every period table of ``prefix`` begins with: ``<prefix>-``. A name that begins
    so but :func:`period_of_table` refuses only looks like one of them."""
    return f"{prefix}-"


def period_table(prefix: str, period: TablePeriod, ts_ms: int) -> str:
    """The name of the table of ``prefix`` that holds the period of ``ts_ms``: ``<prefix>-<label>``."""
    return table_head(prefix) + period.label(ts_ms)


#: The label of each period as strptime reads it; a week's is read with its Monday ("-1") added.
_LABELS = {"hour": "%Y-%m-%d-%H", "day": "%Y-%m-%d", "week": "%G-W%V-%u", "month": "%Y-%m"}


def period_of_table(prefix: str, period: TablePeriod, name: str) -> int | None:
    """The start of the period whose table of ``prefix`` is ``name``: the inverse of :func:`period_table`.

    None unless ``name`` is exactly what :func:`period_table` builds for a period that starts by
    9999-12-31: ``readings-2026-11-22-old``, ``readings-2026-02-30``, ``readings-2026-11-22-6`` or an
    hourly name under daily periods are not (the parse is checked by building the name again)."""
    head = table_head(prefix)
    if not name.startswith(head):
        return None
    label = name[len(head) :] + ("-1" if period.name == "week" else "")
    try:
        start = from_datetime(datetime.strptime(label, _LABELS[period.name]).replace(tzinfo=UTC))
    except ValueError:  # 2026-02-30, week 54, hour 24...
        return None
    if start > MAX_TS_MS or period_table(prefix, period, start) != name:
        return None
    return start


def parse_duration(spec: str, field: str) -> int:
    """Parse ``90s``, ``15m``, ``2h``, ``30d`` into milliseconds."""
    match = re.match(r"^(\d{1,7})([smhd])$", str(spec).strip())
    if match is None:
        raise ConfigError(field, f"{spec!r} is not a duration like '90s', '15m', '2h' or '30d'")
    unit_ms = {"s": 1000, **_UNIT_MS}[match.group(2)]
    return int(match.group(1)) * unit_ms


@lru_cache(maxsize=64)
def _period_label(name: str, start_ms: int) -> str:
    # Every reading of a period names the same table: format it once (datetime formatting was a
    # tenth of keying a reading).
    dt = to_datetime(start_ms)
    if name == "hour":
        return f"{dt:%Y-%m-%d-%H}"
    if name == "day":
        return f"{dt:%Y-%m-%d}"
    if name == "week":
        iso = dt.isocalendar()
        return f"{iso.year:04d}-W{iso.week:02d}"
    return f"{dt:%Y-%m}"


@lru_cache(maxsize=8)
def _admitted(period: TablePeriod, now_ms: int, grace_ms: int, prebuilt: int) -> tuple[int, int]:
    """``[low, high)``: the event times whose table takes writes at ``now_ms``. A period's table
    takes them until ``grace_ms`` after it ends, so up from the start of the period holding
    ``now_ms - grace_ms``; the last table built is ``prebuilt`` periods after the current one."""
    last = period.start(now_ms)
    for _ in range(prebuilt):
        last = period.next_start(last)
    return period.start(now_ms - grace_ms), period.next_start(last)


def format_duration(ms: int) -> str:
    """``ms`` as :func:`parse_duration` reads it, in the largest unit that holds it exactly
    (``7200000`` -> ``2h``); ``1500ms`` when none does."""
    for unit, size in (("d", DAY_MS), ("h", HOUR_MS), ("m", MINUTE_MS), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
