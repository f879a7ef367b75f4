"""Occupancy keys and the pruning rule: only a loaded day's silence proves a partition empty."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from keydesign import PartitionQuery, Reading, format_ts, parse_timestamp, ttl_for
from keydesign.occupancy import (
    DayOccupancy,
    Occupancy,
    common_prefix,
    day_of,
    day_pk,
    days_of,
    occupancy_ttl,
    partition_sk,
    recording_since,
)

DAY = 86_400_000
T0 = parse_timestamp("2026-11-22T00:00:00Z")


def test_days_are_utc_days_and_a_range_touches_each_once() -> None:
    assert day_of(T0 + DAY - 1) == T0 and day_of(T0 + DAY) == T0 + DAY
    assert days_of(T0 - 1, T0 + 1) == [T0 - DAY, T0]
    assert days_of(T0, T0 + DAY) == [T0]
    assert days_of(T0, T0) == []
    assert day_pk("readings", T0) == "occupancy#readings#2026-11-22"


@given(st.integers(0, DAY - 1), st.integers(DAY, 400 * DAY))
def test_a_record_outlives_every_reading_of_its_day(offset: int, retention: int) -> None:
    reading = Reading.parse({"entity_id": "e", "timestamp": format_ts(T0 + offset), "measures": {"v": 1}})
    assert occupancy_ttl(T0, retention) > ttl_for(reading, retention)


def test_the_marker_leaves_room_for_old_writers_and_future_readings() -> None:
    assert recording_since(T0, 300_000) == T0 + 15 * 60_000 + 300_000


def part(pk: str, from_ms: int, to_ms: int, table: str = "readings") -> PartitionQuery:
    return PartitionQuery(table, pk, None, None, from_ms, to_ms)


def test_only_a_loaded_day_without_the_partition_prunes_it() -> None:
    occupancy = Occupancy(since_ms=T0 - DAY)
    hour = part("0001#2026-11-22T05:00", T0 + 5 * 3_600_000, T0 + 6 * 3_600_000)
    assert occupancy.may_hold(hour)  # the day is not loaded
    occupancy.days[T0] = DayOccupancy("", frozenset({partition_sk("readings", "0002#2026-11-22T05:00")}), frozenset())
    assert not occupancy.may_hold(hour)
    occupancy.days[T0] = DayOccupancy("", frozenset({partition_sk("readings", hour.pk)}), frozenset())
    assert occupancy.may_hold(hour)
    # A day loaded under another entity's prefix says nothing about this partition
    occupancy.days[T0] = DayOccupancy("readings#0002#", frozenset(), frozenset())
    assert occupancy.may_hold(hour)


def test_nothing_before_the_marker_and_nothing_without_one_is_pruned() -> None:
    empty = DayOccupancy("", frozenset(), frozenset())
    early = part("0001#2026-11-22T05:00", T0 + 5 * 3_600_000, T0 + 6 * 3_600_000)
    assert Occupancy(since_ms=None, days={T0: empty}).may_hold(early)
    assert Occupancy(since_ms=T0 + 6 * 3_600_000, days={T0: empty}).may_hold(early)
    assert not Occupancy(since_ms=T0 + 5 * 3_600_000, days={T0: empty}).may_hold(early)


def test_a_partition_over_several_days_is_kept_if_any_day_names_it() -> None:
    long = part("sensor-1#0", T0, T0 + 3 * DAY)
    named = DayOccupancy("", frozenset({partition_sk("readings", long.pk)}), frozenset())
    empty = DayOccupancy("", frozenset(), frozenset())
    occupancy = Occupancy(since_ms=0, days={T0: empty, T0 + DAY: named, T0 + 2 * DAY: empty})
    assert occupancy.may_hold(long)
    occupancy.days[T0 + DAY] = empty
    assert not occupancy.may_hold(long)


def test_a_bucket_is_skipped_only_when_every_loaded_day_lacks_it() -> None:
    bucket = T0 + 5 * 3_600_000
    occupancy = Occupancy(since_ms=0, days={T0: DayOccupancy("", frozenset({"x"}), frozenset({bucket}))})
    assert occupancy.bucket_may_hold(bucket, bucket, bucket + 3_600_000)
    assert not occupancy.bucket_may_hold(bucket + 3_600_000, bucket + 3_600_000, bucket + 7_200_000)
    assert occupancy.bucket_may_hold(T0 + DAY, T0 + DAY, T0 + DAY + 3_600_000)  # not loaded


def test_the_common_prefix_narrows_a_day_to_one_entitys_partitions() -> None:
    parts = [part(f"0042#2026-11-22T{h:02d}:00", T0, T0 + 1) for h in range(24)]
    assert common_prefix(parts) == "readings#0042#2026-11-22T"
    assert common_prefix([part("sensor-1#0", 0, 1), part("sensor-1#3", 0, 1)]) == "readings#sensor-1#"
    assert common_prefix([]) == ""


def test_the_write_tiers_partitions_are_never_pruned() -> None:
    # Given a loaded day whose occupancy holds no record (ingest records block partitions only)
    occupancy = Occupancy(since_ms=T0 - DAY)
    occupancy.days[T0] = DayOccupancy("", frozenset(), frozenset())
    hour = (T0 + 5 * 3_600_000, T0 + 6 * 3_600_000)
    blocks = part("0001#2026-11-22T05:00", *hour)
    group = PartitionQuery("readings", "w#0003#2026-11-22T05:00", None, None, *hour, kind="group")
    compacted = PartitionQuery("readings", "0001#2026-11-22T05:00#c", None, None, *hour, kind="compacted")
    # Then the blocks partition is pruned, the group items' and compacted blocks' are read
    assert occupancy.prune([blocks, group, compacted]) == [group, compacted]
