"""The life of one per-period table, as pure functions of the clock.

A table holds the readings whose event time falls in its period
``[start, end)``. With ``now`` the run's clock it is, in order:

* ``upcoming``  its period has not begun: prebuilt, waiting for traffic;
* ``current``   its period holds ``now``: every on-time reading goes there;
* ``grace``     its period ended less than GRACE + DIAL_DOWN_DELAY ago: it keeps
                its full setup while late readings still arrive at full rate
                (and writes already accepted land during DIAL_DOWN_DELAY);
* ``cold``      closed: it sheds what costs money idle (provisioned capacity,
                alarms, mapping, Contributor Insights) but stays writable, for
                readings up to MAX_AGE old may still arrive;
* ``expired``   past :meth:`Lifecycle.expires_at`: its newest reading is older
                than RETENTION and no reading can reach it any more (MAX_AGE
                plus DIAL_DOWN_DELAY after its end): exported if configured,
                then dropped.

A cold table's steps fall due at known times, so a run looks at a cold table
only then (:meth:`Lifecycle.closing`, :meth:`Lifecycle.class_review_due`), not
on every run: that is what keeps a run's work bounded with hundreds of tables.

Nothing here calls AWS, so every rule is tested on its own, including the one
that matters most: :meth:`Lifecycle.check_deletable`, which refuses to let a
current, future or still-writable table go, whatever the caller thinks.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from keydesign import Layout, TablePeriod
from keydesign.periods import period_of_table
from keydesign.timefmt import MAX_TS_MS
from rotator.settings import RotatorSettings

HOUR_MS = 3_600_000
DAY_MS = 86_400_000
#: How long a closed table is watched before its table class is decided: a day of
#: its reads and writes as a closed table (and DynamoDB refreshes TableSizeBytes
#: about every six hours, so its size is known by then).
CLASS_REVIEW_AFTER_MS = DAY_MS
#: A table's export is asked for this long after the moment it shows (the table as it was when it stopped
#: taking writes): point-in-time recovery reaches to about 5 minutes before the current time.
EXPORT_LAG_MS = 10 * 60_000
#: An expired table still there this long after its horizon cannot be retired (no ownership tags, an
#: export that kept failing, a table stuck outside ACTIVE): it is counted in TablesOverdue (alarmed)
#: and looked at in turn, no longer first.
OVERDUE_AFTER_MS = DAY_MS


class Phase(StrEnum):
    UPCOMING = "upcoming"
    CURRENT = "current"
    GRACE = "grace"
    COLD = "cold"
    EXPIRED = "expired"

    @property
    def open(self) -> bool:
        """The table is set up in full: full capacity, TTL, PITR, mapping, alarms, Contributor Insights."""
        return self in (Phase.UPCOMING, Phase.CURRENT, Phase.GRACE)


class DeletionRefused(Exception):  # noqa: N818 - reads as the outcome
    """A table was about to be dropped that must not be."""

    def __init__(self, table: str, reason: str) -> None:
        self.reason = reason
        super().__init__(f"refusing to delete {table}: {reason}")


@dataclass(frozen=True, slots=True)
class PeriodTable:
    """One period's table: its name and the half-open period ``[start_ms, end_ms)``."""

    name: str
    label: str
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """When each table is built, closed, dialled down and dropped."""

    layout: Layout
    period: TablePeriod
    prebuild_periods: int
    grace_ms: int
    dial_down_delay_ms: int
    retention_ms: int
    #: How old a reading ingest still takes (MAX_AGE): a closed table takes writes until then.
    max_age_ms: int

    def __post_init__(self) -> None:
        if self.layout.table_period != self.period:
            raise ValueError("the lifecycle's period must be the layout's table period")
        if self.grace_ms + self.dial_down_delay_ms >= self.retention_ms:
            raise ValueError("grace plus dial-down delay must be shorter than retention")
        if self.max_age_ms > self.retention_ms:
            raise ValueError("max age must not exceed retention")

    @classmethod
    def from_settings(cls, settings: RotatorSettings) -> Lifecycle:
        return cls(
            layout=settings.layout,
            period=settings.period,
            prebuild_periods=settings.prebuild_periods,
            grace_ms=settings.grace_ms,
            dial_down_delay_ms=settings.dial_down_delay_ms,
            retention_ms=settings.retention_ms,
            max_age_ms=settings.max_age_ms,
        )

    # -- naming ---------------------------------------------------------------

    def table(self, ts_ms: int) -> PeriodTable:
        """The table holding event time ``ts_ms``."""
        start = self.period.start(ts_ms)
        return PeriodTable(
            name=self.layout.table_for(start),
            label=self.period.label(start),
            start_ms=start,
            end_ms=self.period.next_start(start),
        )

    def parse(self, name: str) -> PeriodTable | None:
        """The table ``name`` stands for, or None when it is not exactly
        ``<prefix>-<label>`` for a real period of this layout.

        The key-design layer builds names and reads them back
        (:func:`keydesign.periods.period_of_table`): ``readings-2026-11-22-old``,
        ``readings-2026-02-30`` or an hourly name under a daily layout are not ours.
        """
        start = period_of_table(self.layout.table_prefix, self.period, name)
        return None if start is None else self.table(start)

    # -- the clock ------------------------------------------------------------

    def phase(self, table: PeriodTable, now_ms: int) -> Phase:
        current = self.period.start(now_ms)
        if table.start_ms > current:
            return Phase.UPCOMING
        if table.start_ms == current:
            return Phase.CURRENT
        if now_ms < self.dial_down_at(table):
            return Phase.GRACE
        if now_ms < self.expires_at(table):
            return Phase.COLD
        return Phase.EXPIRED

    def closes_at(self, table: PeriodTable) -> int:
        """When ingest stops taking readings for this period."""
        return table.end_ms + self.grace_ms

    def dial_down_at(self, table: PeriodTable) -> int:
        """When the table closes: no reading accepted within GRACE can still be on its way."""
        return table.end_ms + self.grace_ms + self.dial_down_delay_ms

    def last_write_at(self, table: PeriodTable) -> int:
        """When no reading can reach the table any more: ingest takes a reading up to MAX_AGE
        old (the newest a table holds is just before its end), and a write it accepted may
        land DIAL_DOWN_DELAY later (which covers ingest's timeout)."""
        return table.end_ms + self.max_age_ms + self.dial_down_delay_ms

    def expires_at(self, table: PeriodTable) -> int:
        """When the table may be exported and dropped: its newest reading has been kept for
        RETENTION, and no write can still land (an export started earlier could miss one)."""
        return max(table.end_ms + self.retention_ms, self.last_write_at(table))

    def export_at(self, table: PeriodTable) -> int:
        """When the table's export may be asked for. It shows the table as it was at
        :meth:`last_write_at` (its ExportTime), when it had every reading it will ever hold and TTL
        had deleted none of them yet (none expires before ``start + RETENTION``)."""
        return self.last_write_at(table) + EXPORT_LAG_MS

    def export_due(self, table: PeriodTable, now_ms: int) -> bool:
        """The export is started in the period after :meth:`export_at` (and, if that window was
        missed, by the run that finds the table expired)."""
        start = self.export_at(table)
        return start <= now_ms < start + (table.end_ms - table.start_ms) and now_ms < self.expires_at(table)

    def overdue(self, table: PeriodTable, now_ms: int) -> bool:
        """Expired for :data:`OVERDUE_AFTER_MS` and still there: something keeps it from being retired."""
        return now_ms >= self.expires_at(table) + OVERDUE_AFTER_MS

    def closing(self, table: PeriodTable, now_ms: int) -> bool:
        """The table closed less than one of its periods ago: the runs of that window shed
        what it no longer needs (one period is a handful of runs whatever the period)."""
        closed = self.dial_down_at(table)
        return closed <= now_ms < closed + (table.end_ms - table.start_ms)

    def class_review_at(self, table: PeriodTable) -> int:
        """When a closed table's table class is decided, on its first day of closed traffic."""
        return self.dial_down_at(table) + CLASS_REVIEW_AFTER_MS

    def class_review_due(self, table: PeriodTable, now_ms: int) -> bool:
        review = self.class_review_at(table)
        return review <= now_ms < review + (table.end_ms - table.start_ms) and now_ms < self.expires_at(table)

    def wanted(self, now_ms: int) -> list[PeriodTable]:
        """Tables that must exist now, most urgent first: the current period's,
        the next ``prebuild_periods``, then earlier ones still taking late readings."""
        current = self.table(now_ms)
        tables = [current]
        for _ in range(self.prebuild_periods):
            if tables[-1].end_ms > MAX_TS_MS:
                break
            tables.append(self.table(tables[-1].end_ms))
        earlier = current
        while earlier.start_ms > 0:
            earlier = self.table(earlier.start_ms - 1)
            if now_ms >= self.closes_at(earlier):
                break
            tables.append(earlier)
        return tables

    def check_deletable(self, table: PeriodTable, now_ms: int) -> None:
        """Raise :class:`DeletionRefused` unless ``table`` is past retention.

        Each condition is checked on its own, although the last implies the
        others under valid settings: this is the guard that holds when
        everything else is wrong.
        """
        if table.start_ms >= self.period.start(now_ms):
            raise DeletionRefused(table.name, "it is the current or a future period's table")
        if now_ms < self.closes_at(table):
            raise DeletionRefused(table.name, "its period still takes late readings")
        if now_ms < self.dial_down_at(table):
            raise DeletionRefused(table.name, "readings accepted in its grace window may still be landing")
        if now_ms < table.end_ms + self.retention_ms:
            raise DeletionRefused(table.name, "it holds readings younger than the retention period")
        if now_ms < self.last_write_at(table):
            raise DeletionRefused(table.name, "readings up to MAX_AGE old may still be written to it")
