"""Occupancy: which partitions hold readings, so plans can skip the empty ones.

Ingest records every partition it writes to, per UTC day of the readings'
event time, in the control table, *before* it writes the readings::

    pk = "occupancy#<table prefix>#<YYYY-MM-DD>"    one item collection per day
    sk = "<table>#<readings partition key>"          one item per occupied partition
    bucket = <bucket start, epoch ms>                lets a cross-entity read skip whole buckets
    expires_at = end of the day + retention + 1 day  the control table's TTL attribute:
                                                     outlives every reading it stands for

Readers load a day with one Query (per-entity reads narrow it with
``begins_with`` on the common prefix of their partitions) and keep a
partition only if it may hold data (:meth:`Occupancy.may_hold`).

Data written before recording started is never skipped: ingest stores a
marker ``pk = "occupancy#since"``, ``sk = <table prefix>`` with ``since`` =
the moment from which every reading's partition is known to be recorded
(:func:`recording_since`), written once with ``attribute_not_exists`` so it
never moves. Partitions whose time range starts before it are read unpruned,
and without a marker nothing is pruned.
"""

from __future__ import annotations

import os.path
from collections.abc import Iterable
from dataclasses import dataclass, field

from .layouts import PartitionQuery
from .periods import DAY_MS, Bucket
from .timefmt import format_ts

#: The control-table partition key of the ``since`` markers.
SINCE_PK = "occupancy#since"
#: Lambda's longest timeout. After the first container that records occupancy
#: starts, a container of the previous code (which did not) can still be
#: writing for at most this long.
MAX_WRITER_OVERLAP_MS = 15 * 60_000
#: Occupancy records outlive the last reading of their day by this much, so a
#: reader never sees a reading whose record TTL has already removed.
TTL_SLACK_MS = DAY_MS


def day_of(ts_ms: int) -> int:
    """The UTC day (its start, epoch ms) that holds ``ts_ms``."""
    return ts_ms - ts_ms % DAY_MS


def days_of(from_ms: int, to_ms: int) -> list[int]:
    """The UTC days (starts) that ``[from_ms, to_ms)`` touches, in time order."""
    if to_ms <= from_ms:
        return []
    return list(range(day_of(from_ms), day_of(to_ms - 1) + 1, DAY_MS))


def day_pk(table_prefix: str, day_ms: int) -> str:
    """The control-table partition key that holds the occupancy of one day."""
    return f"occupancy#{table_prefix}#{format_ts(day_ms)[:10]}"


def partition_sk(table: str, partition_key: str) -> str:
    """The sort key of one occupied partition (table names never hold '#')."""
    return f"{table}#{partition_key}"


def recording_since(first_recording_ms: int, max_future_ms: int) -> int:
    """From which event time on every reading's partition is recorded.

    A writer of the previous code may still run for ``MAX_WRITER_OVERLAP_MS``
    after the first recording writer started, and it accepts event times up to
    ``max_future_ms`` past its clock.
    """
    return first_recording_ms + MAX_WRITER_OVERLAP_MS + max_future_ms


def occupancy_ttl(day_ms: int, retention_ms: int) -> int:
    """TTL (epoch seconds) of a day's occupancy record: past every reading of that day."""
    return (day_ms + DAY_MS + retention_ms + TTL_SLACK_MS) // 1000


@dataclass(frozen=True, slots=True)
class OccupancyRecord:
    """One occupied partition on one day, as ingest writes it."""

    table_prefix: str
    day_ms: int
    table: str
    partition_key: str
    bucket_ms: int

    @classmethod
    def of(cls, table_prefix: str, bucket: Bucket, table: str, partition_key: str, ts_ms: int) -> OccupancyRecord:
        return cls(table_prefix, day_of(ts_ms), table, partition_key, bucket.start(ts_ms))

    def item(self, retention_ms: int) -> dict[str, object]:
        """The control-table item (plain Python values)."""
        return {
            "pk": day_pk(self.table_prefix, self.day_ms),
            "sk": partition_sk(self.table, self.partition_key),
            "bucket": self.bucket_ms,
            # The control table's TTL attribute (infra.config.CONTROL_SCHEMA), not the readings' "ttl".
            "expires_at": occupancy_ttl(self.day_ms, retention_ms),
        }


def common_prefix(partitions: Iterable[PartitionQuery]) -> str:
    """The longest sort-key prefix shared by the occupancy of ``partitions``:
    what a per-entity read asks for with ``begins_with`` (``readings#0042#2026-11-22T``)."""
    # Character by character, not by path: begins_with wants exactly that prefix.
    return os.path.commonprefix([partition_sk(p.table, p.pk) for p in partitions])  # noqa: RUF071


@dataclass(frozen=True, slots=True)
class DayOccupancy:
    """What the control table says about one day: occupied partitions (sort keys)
    under ``prefix`` and the buckets they belong to."""

    prefix: str
    partitions: frozenset[str]
    buckets: frozenset[int]


@dataclass(slots=True)
class Occupancy:
    """What a reader knows: the ``since`` marker and the days it has loaded.

    ``since_ms`` None means recording never started: nothing may be pruned.
    A day not loaded, or loaded under a prefix that does not cover a
    partition, prunes nothing either: only a record's absence from a loaded
    day proves a partition empty.
    """

    since_ms: int | None
    days: dict[int, DayOccupancy] = field(default_factory=dict)

    def needs(self, day_ms: int) -> bool:
        """Whether pruning in ``day_ms`` needs the day loaded (days wholly before
        ``since`` are read unpruned, so they are never loaded)."""
        return self.since_ms is not None and day_ms >= day_of(self.since_ms) and day_ms not in self.days

    def may_hold(self, partition: PartitionQuery) -> bool:
        """False only when ``partition`` provably holds no reading. Only block partitions have
        occupancy records: the write tier's (group items, compacted blocks) may always hold some."""
        if self.since_ms is None or partition.from_ms < self.since_ms or partition.kind != "blocks":
            return True
        sk = partition_sk(partition.table, partition.pk)
        for day in days_of(partition.from_ms, partition.to_ms):
            known = self.days.get(day)
            if known is None or not sk.startswith(known.prefix) or sk in known.partitions:
                return True
        return False

    def bucket_may_hold(self, bucket_start: int, seg_from: int, seg_to: int) -> bool:
        """False only when no partition of the bucket starting at ``bucket_start``
        holds a reading in ``[seg_from, seg_to)``: a whole bucket skipped unplanned."""
        if self.since_ms is None or seg_from < self.since_ms:
            return True
        for day in days_of(seg_from, seg_to):
            known = self.days.get(day)
            if known is None or known.prefix or bucket_start in known.buckets:
                return True
        return False

    def prune(self, partitions: Iterable[PartitionQuery]) -> list[PartitionQuery]:
        return [p for p in partitions if self.may_hold(p)]
