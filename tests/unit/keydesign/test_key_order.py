"""Keys sort as time: fixed-width timestamps, bucket labels and table labels."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from keydesign import Bucket, Layout, ShardMap, TablePeriod, format_ts, parse_timestamp
from keydesign.timefmt import MAX_TS_MS, MIN_TS_MS

from .strategies import BUCKETS, DAY, ENTITIES, PERIODS, PROPERTY, event_ids, layouts, reading

instants = st.integers(MIN_TS_MS, MAX_TS_MS)


@PROPERTY
@given(layout=layouts(), entity_id=st.sampled_from(ENTITIES), data=st.data())
def test_blocks_and_positions_of_one_entity_in_one_partition_sort_by_time(
    layout: Layout, entity_id: str, data: st.DataObject
) -> None:
    # Given one partition per entity and bucket (N = 1, no sub-shards), two readings
    # of one entity in the same bucket (hybrid) or anywhere (random, calculated)
    shard_map = ShardMap.initial(layout.bucket, 1)
    first_ts = data.draw(st.integers(parse_timestamp("2020-01-01T00:00:00Z"), parse_timestamp("2030-01-01T00:00:00Z")))
    if layout.kind == "hybrid":
        start = layout.bucket.start(first_ts)
        second_ts = data.draw(st.integers(start, start + layout.bucket.width_ms - 1))
    else:
        second_ts = data.draw(st.integers(first_ts - 3 * DAY, first_ts + 3 * DAY))
    if layout.table_period is not None:
        # Readings in different tables are never compared by one Query.
        second_ts = max(
            min(second_ts, layout.table_period.next_start(first_ts) - 1), layout.table_period.start(first_ts)
        )
    first = reading(entity_id, first_ts, data.draw(event_ids))
    second = reading(entity_id, second_ts, data.draw(event_ids))
    # When each is stored in a block of its own
    (block_a,) = layout.pack([(first, 1)], shard_map, rng=random.Random(1))
    (block_b,) = layout.pack([(second, 1)], shard_map, rng=random.Random(1))
    # Then they share a partition, and blocks sort by their first reading's time
    assert (block_a.key.table, block_a.key.pk) == (block_b.key.table, block_b.key.pk)
    if first.ts_ms != second.ts_ms:
        assert (block_a.key.sk < block_b.key.sk) == (first.ts_ms < second.ts_ms)
    # ... and the readings' positions sort as (time, event id)
    key_a = layout.reading_key(entity_id, first.ts, first.event_id)
    key_b = layout.reading_key(entity_id, second.ts, second.event_id)
    assert (key_a < key_b) == ((first.ts_ms, first.event_id) < (second.ts_ms, second.event_id))
    assert (key_a == key_b) == ((first.ts_ms, first.event_id) == (second.ts_ms, second.event_id))


@PROPERTY
@given(a=instants, b=instants)
def test_format_ts_is_fixed_width_and_sorts_as_time(a: int, b: int) -> None:
    text_a, text_b = format_ts(a), format_ts(b)
    assert len(text_a) == len(text_b) == 24
    assert (text_a < text_b) == (a < b)
    assert parse_timestamp(text_a) == a


def test_format_ts_covers_the_supported_range_and_nothing_more() -> None:
    assert format_ts(MIN_TS_MS) == "1970-01-01T00:00:00.000Z"
    assert format_ts(MAX_TS_MS) == "9999-12-31T23:59:59.999Z"
    assert format_ts(parse_timestamp("2026-11-22T06:57:51.123Z")) == "2026-11-22T06:57:51.123Z"
    for outside in (MIN_TS_MS - 1, MAX_TS_MS + 1):
        try:
            format_ts(outside)
        except ValueError:
            continue
        raise AssertionError(f"format_ts accepted {outside}")


@PROPERTY
@given(spec=st.sampled_from(BUCKETS), a=instants, b=instants)
def test_bucket_labels_are_fixed_width_and_sort_as_time(spec: str, a: int, b: int) -> None:
    bucket = Bucket.parse(spec)
    start_a, start_b = bucket.start(a), bucket.start(b)
    label_a, label_b = bucket.label(start_a), bucket.label(start_b)
    assert len(label_a) == len(label_b) == 16
    assert (label_a < label_b) == (start_a < start_b)
    # The label names the bucket's first minute.
    assert parse_timestamp(label_a + ":00Z") == start_a
    assert start_a <= a < start_a + bucket.width_ms


@PROPERTY
@given(name=st.sampled_from([p for p in PERIODS if p]), a=instants, b=instants)
def test_table_labels_sort_as_time(name: str, a: int, b: int) -> None:
    period = TablePeriod.parse(name)
    label_a, label_b = period.label(a), period.label(b)
    assert len(label_a) == len(label_b)
    assert (label_a < label_b) == (period.start(a) < period.start(b))
    assert (label_a == label_b) == (period.start(a) == period.start(b))
