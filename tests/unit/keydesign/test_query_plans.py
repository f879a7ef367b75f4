"""Query plans against blocks: the invariant the whole product rests on.

Every accepted reading is in a block that every query whose range covers it reads,
whatever the layout, bucket, table period and shard-map history; and plans are minimal:
no partition that cannot hold the entity, no block that cannot hold the range, nothing twice.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import Block, InvalidInput, Layout, PartitionQuery, QueryPlan, ShardMap, shard_of
from keydesign.blocks import BLOCK_ID_DIGITS, MAX_BLOCK_SPAN_MS
from keydesign.layouts import ItemKey
from keydesign.timefmt import MAX_TS_MS, format_ts, parse_timestamp

from .strategies import (
    MAX_GLOBAL,
    PROBE_EVENT_IDS,
    PROPERTY,
    Scenario,
    probe_partitions,
    probe_reaches,
    reading,
    scenarios,
)

LOWEST_ID = "0" * BLOCK_ID_DIGITS
HIGHEST_ID = "f" * BLOCK_ID_DIGITS


def covers(part: PartitionQuery, key: ItemKey, ts_ms: int) -> bool:
    """True when running ``part`` reads the block at ``key`` and keeps its reading at ``ts_ms``."""
    return (
        part.table == key.table
        and part.pk == key.pk
        and (part.sk_low is None or part.sk_low <= key.sk)
        and (part.sk_high is None or key.sk <= part.sk_high)
        and part.from_ms <= ts_ms < part.to_ms
    )


def stored(scenario: Scenario) -> list[Block]:
    """The scenario's readings packed as one batch (several may share a block)."""
    entries = [(q.reading, i) for i, q in enumerate(scenario.queries)]
    return scenario.layout.pack(entries, scenario.shard_map, rng=random.Random(0))


def block_key(layout: Layout, key: ItemKey, entity_id: str, first_ms: int, block_id: str) -> ItemKey:
    """``key`` with the sort key of a block of ``entity_id`` starting at ``first_ms``."""
    prefix = f"{entity_id}#" if layout.can.shared_partitions else ""
    return replace(key, sk=f"{prefix}{format_ts(first_ms)}#{block_id}#1")


def extreme_keys(layout: Layout, shard_map: ShardMap, block: Block, ts_ms: int) -> Iterator[ItemKey]:
    """Every partition a block holding ``ts_ms`` could have been given (another block id would
    have put it in another calculated suffix or sub-shard), with the earliest and the latest start
    such a block can have: a span before ``ts_ms`` within its bucket, or ``ts_ms`` itself."""
    earliest = max(layout.bucket.start(ts_ms), ts_ms - MAX_BLOCK_SPAN_MS + 1)
    for pk in layout.partitions_of(block.entity_id, ts_ms, shard_map):
        for first, block_id in ((earliest, LOWEST_ID), (ts_ms, HIGHEST_ID)):
            yield block_key(layout, replace(block.key, pk=pk), block.entity_id, first, block_id)


def assert_no_overlaps(plan: QueryPlan) -> None:
    runs: dict[tuple[str, str], list[PartitionQuery]] = defaultdict(list)
    for part in plan.partitions:
        runs[(part.table, part.pk)].append(part)
    for key, parts in runs.items():
        ordered = sorted(parts, key=lambda p: p.from_ms)
        for first, second in itertools.pairwise(ordered):
            assert first.to_ms <= second.from_ms, f"{key} is queried twice for the same time"


def assert_within_range(plan: QueryPlan, layout: Layout, from_ms: int, to_ms: int) -> None:
    assert (plan.from_ms, plan.to_ms) == (from_ms, to_ms)
    assert plan.partitions, "a non-empty range has at least one partition to read"
    for part in plan.partitions:
        assert from_ms <= part.from_ms < part.to_ms <= to_ms
        # A query never spans two tables: its table holds both ends of its range.
        assert part.table == layout.table_for(part.from_ms) == layout.table_for(part.to_ms - 1)


def checkpoints(scenario: Scenario, entity_id: str | None, from_ms: int, to_ms: int) -> set[int]:
    """Instants where the partitions of ``entity_id`` can change, either side, within the range."""
    shard_map, layout = scenario.shard_map, scenario.layout
    histories = [shard_map.global_history]
    if entity_id is None:
        histories.extend(shard_map.entity_history.values())
    elif entity_id in shard_map.entity_history:
        histories.append(shard_map.entity_history[entity_id])
    edges = {c.effective_from_ms for h in histories for c in h}
    if layout.table_period is not None:
        edges.update(layout.table_period.starts(from_ms, to_ms))
    points = {from_ms, to_ms - 1} | {e + d for e in edges for d in (-1, 0)}
    return {t for t in points if from_ms <= t < to_ms}


# -- the central invariant ---------------------------------------------------------


def test_probe_blocks_reach_every_partition() -> None:
    """The minimality checks rely on the probe blocks reaching every calculated suffix and sub-shard."""
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    for count in range(1, MAX_GLOBAL + 1):
        shard_map = ShardMap.initial(layout.bucket, count)
        reached = probe_partitions(layout, shard_map, "sensor-a", T0)
        assert {pk for _, pk in reached} == {f"sensor-a#{s}" for s in range(count)}
    assert len(PROBE_EVENT_IDS) * 4 >= 256


@PROPERTY
@given(scenario=scenarios())
def test_every_reading_is_found_by_every_entity_query_covering_it(scenario: Scenario) -> None:
    # Given a layout, a shard map with a history of changes, and readings packed into blocks
    layout, shard_map = scenario.layout, scenario.shard_map
    blocks = stored(scenario)
    ranges = [(q.reading.entity_id, q.from_ms, q.to_ms) for q in scenario.queries]
    # ... queried over generated ranges and over the tightest range [ts, ts + 1)
    ranges += [(q.reading.entity_id, q.reading.ts_ms, q.reading.ts_ms + 1) for q in scenario.queries]
    for entity_id, from_ms, to_ms in ranges:
        # When the entity's plan is made
        plan = layout.plan_entity(entity_id, from_ms, to_ms, shard_map)
        # Then the block of every covered reading is read, and so would be any block that reading
        # could have been in (any suffix or sub-shard, starting as early or as late as a block can)
        for block in blocks:
            for item in block.readings:
                if item.entity_id != entity_id or not from_ms <= item.ts_ms < to_ms:
                    continue
                assert any(covers(p, block.key, item.ts_ms) for p in plan.partitions), (block.key, item)
                for key in extreme_keys(layout, shard_map, block, item.ts_ms):
                    assert any(covers(p, key, item.ts_ms) for p in plan.partitions), (key, item)
        assert plan.dedupe is True


@PROPERTY
@given(scenario=scenarios(kinds=("hybrid",)))
def test_every_reading_is_found_by_every_range_query_covering_it(scenario: Scenario) -> None:
    # Given a hybrid layout, a shard map history and readings of several entities, in blocks
    layout, shard_map = scenario.layout, scenario.shard_map
    blocks = stored(scenario)
    for query in scenario.queries:
        # When a cross-entity plan is made for a range
        plan = layout.plan_range(query.from_ms, query.to_ms, shard_map)
        # Then every block holding a reading in that range is in one of its whole partitions
        for block in blocks:
            for item in block.readings:
                if not query.from_ms <= item.ts_ms < query.to_ms:
                    continue
                hits = [p for p in plan.partitions if (p.table, p.pk) == (block.key.table, block.key.pk)]
                assert any(p.from_ms <= item.ts_ms < p.to_ms for p in hits), (block.key, item)
                assert all(p.sk_low is None and p.sk_high is None for p in hits)
        assert plan.entity_id is None
        assert plan.dedupe is True


# -- minimality ---------------------------------------------------------------------


@PROPERTY
@given(scenario=scenarios(), data=st.data())
def test_entity_plans_hold_exactly_the_partitions_the_entity_can_use(scenario: Scenario, data: st.DataObject) -> None:
    layout, shard_map = scenario.layout, scenario.shard_map
    reach: dict[tuple[str, int], set[tuple[str, str]]] = {}

    def reachable(entity_id: str, ts_ms: int) -> set[tuple[str, str]]:
        if (entity_id, ts_ms) not in reach:
            reach[entity_id, ts_ms] = probe_partitions(layout, shard_map, entity_id, ts_ms)
        return reach[entity_id, ts_ms]

    for query in scenario.queries:
        entity_id = query.reading.entity_id
        # When the plan for an entity and range is made
        plan = layout.plan_entity(entity_id, query.from_ms, query.to_ms, shard_map)
        # Then nothing lies outside the range or is read twice
        assert_within_range(plan, layout, query.from_ms, query.to_ms)
        assert_no_overlaps(plan)
        for part in plan.partitions:
            # ... every partition can hold the entity, at the start and the end of its time
            assert probe_reaches(layout, shard_map, entity_id, part.from_ms, (part.table, part.pk)), part
            assert probe_reaches(layout, shard_map, entity_id, part.to_ms - 1, (part.table, part.pk)), part
            # ... its sort-key range takes a block that starts a span before its time (or at its
            # bucket's start), and excludes a block that starts earlier or at its end
            key = ItemKey(part.table, part.pk, "")
            earliest = max(layout.bucket.start(part.from_ms), part.from_ms - MAX_BLOCK_SPAN_MS + 1)
            assert covers(part, block_key(layout, key, entity_id, earliest, LOWEST_ID), part.from_ms)
            assert covers(part, block_key(layout, key, entity_id, part.to_ms - 1, HIGHEST_ID), part.to_ms - 1)
            if earliest > 0:
                too_early = block_key(layout, key, entity_id, earliest - 1, HIGHEST_ID)
                assert part.sk_low is not None and too_early.sk < part.sk_low
            if part.to_ms <= MAX_TS_MS:
                too_late = block_key(layout, key, entity_id, part.to_ms, LOWEST_ID)
                assert part.sk_high is not None and too_late.sk > part.sk_high
        # And at each instant where partitions can change (and a few anywhere), the plan
        # reads exactly the partitions some block of the entity could be written to
        extra = data.draw(st.lists(st.integers(query.from_ms, query.to_ms - 1), max_size=3))
        for ts in checkpoints(scenario, entity_id, query.from_ms, query.to_ms) | set(extra):
            planned = {(p.table, p.pk) for p in plan.partitions if p.from_ms <= ts < p.to_ms}
            assert planned == reachable(entity_id, ts), ts
            assert planned == {(layout.table_for(ts), pk) for pk in layout.partitions_of(entity_id, ts, shard_map)}


@PROPERTY
@given(scenario=scenarios(kinds=("hybrid",)))
def test_range_plans_read_every_shard_of_every_bucket_and_nothing_else(scenario: Scenario) -> None:
    layout, shard_map, bucket = scenario.layout, scenario.shard_map, scenario.layout.bucket
    for query in scenario.queries:
        # When a cross-entity plan is made
        plan = layout.plan_range(query.from_ms, query.to_ms, shard_map)
        # Then it stays in the range, reads nothing twice, and keeps each query in one bucket
        assert_within_range(plan, layout, query.from_ms, query.to_ms)
        assert_no_overlaps(plan)
        by_bucket: dict[int, set[str]] = defaultdict(set)
        for part in plan.partitions:
            start = bucket.start(part.from_ms)
            assert bucket.start(part.to_ms - 1) == start
            whole = (part.from_ms, part.to_ms) == (start, start + bucket.width_ms)
            assert part.time_filter is not whole, "filter on time exactly when the bucket is cut"
            by_bucket[start].add(part.pk)
            shard, label, *split = part.pk.split("#")
            assert label == bucket.label(start)
            assert int(shard) < shard_map.global_shards_at(start)
            if split:
                # ... a dedicated partition only for an entity split in that bucket
                entity_id, _sub = split
                assert (shard_map.entity_shards_at(entity_id, start) or 1) > 1
                assert probe_reaches(layout, shard_map, entity_id, part.from_ms, (part.table, part.pk)), part
        # ... and every global shard of every bucket the range touches
        assert sorted(by_bucket) == list(bucket.starts(query.from_ms, query.to_ms))
        for start, pks in by_bucket.items():
            label = bucket.label(start)
            assert {f"{s:04d}#{label}" for s in range(shard_map.global_shards_at(start))} <= pks


# -- worked examples -------------------------------------------------------------------

T0 = parse_timestamp("2026-11-22T06:00:00Z")
HOUR = 3_600_000


def test_a_hot_entity_split_at_a_future_boundary_is_read_from_both_layouts() -> None:
    # Given a 1h hybrid layout with N=4, and sensor-a given 3 sub-shards from 08:00
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    base = ShardMap.initial(layout.bucket, 4)
    split = base.with_entity("sensor-a", 3, T0 + 2 * HOUR, now_ms=T0 + 10)
    shard = shard_of("sensor-a", 4)
    # When readings are written before and after the split, and 06:30-08:30 is planned
    early, late = layout.pack(
        [(reading("sensor-a", T0 + HOUR + 5, "ev-1"), 1), (reading("sensor-a", T0 + 2 * HOUR + 5, "ev-2"), 1)], split
    )
    plan = layout.plan_entity("sensor-a", T0 + HOUR // 2, T0 + 2 * HOUR + HOUR // 2, split)
    # Then the early block kept the shared partition; the late one went to its own, by its block id
    assert early.key.pk == f"{shard:04d}#2026-11-22T07:00"
    assert late.key.pk == f"{shard:04d}#2026-11-22T08:00#sensor-a#{shard_of(late.encoded.block_id, 3):03d}"
    assert [(p.pk, p.from_ms, p.to_ms) for p in plan.partitions] == [
        (f"{shard:04d}#2026-11-22T06:00", T0 + HOUR // 2, T0 + HOUR),
        (f"{shard:04d}#2026-11-22T07:00", T0 + HOUR, T0 + 2 * HOUR),
        *[
            (f"{shard:04d}#2026-11-22T08:00#sensor-a#{s:03d}", T0 + 2 * HOUR, T0 + 2 * HOUR + HOUR // 2)
            for s in range(3)
        ],
    ]
    # ... a block that starts up to a span before 06:30 may hold readings after it
    assert plan.partitions[0].sk_low == "sensor-a#2026-11-22T06:29:50.001Z"
    assert plan.partitions[0].sk_high == "sensor-a#2026-11-22T06:59:59.999Z#~"
    # ... but never one of the previous bucket
    assert plan.partitions[1].sk_low == "sensor-a#2026-11-22T07:00:00.000Z"


def test_calculated_plans_merge_a_partition_across_a_table_boundary_only_within_one_table() -> None:
    # Given a calculated layout with daily tables and 2 suffixes, 4 from the next day
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings", table_period="day")
    day = parse_timestamp("2026-11-22T00:00:00Z")
    shard_map = ShardMap.initial(layout.bucket, 2).with_global(4, day + 24 * HOUR, now_ms=day)
    # When the last hour of one day and the first of the next are planned
    plan = layout.plan_entity("sensor-a", day + 23 * HOUR, day + 25 * HOUR, shard_map)
    # Then each table is queried on its own, with that day's suffixes
    assert [(p.table, p.pk) for p in plan.partitions] == [
        ("readings-2026-11-22", "sensor-a#0"),
        ("readings-2026-11-22", "sensor-a#1"),
        ("readings-2026-11-23", "sensor-a#0"),
        ("readings-2026-11-23", "sensor-a#1"),
        ("readings-2026-11-23", "sensor-a#2"),
        ("readings-2026-11-23", "sensor-a#3"),
    ]


def test_a_suffix_that_disappears_and_returns_is_read_only_while_it_exists() -> None:
    # Given a calculated layout whose N goes 4 -> 2 at 07:00 and back to 4 at 08:00
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    shard_map = (
        ShardMap.initial(layout.bucket, 4)
        .with_global(2, T0 + HOUR, now_ms=T0)
        .with_global(4, T0 + 2 * HOUR, now_ms=T0 + HOUR // 2)
    )
    # When 06:00-09:00 is planned
    plan = layout.plan_entity("sensor-a", T0, T0 + 3 * HOUR, shard_map)
    # Then suffixes 0 and 1 are one query each; 2 and 3 are two, skipping 07:00-08:00
    assert sorted((p.pk, p.from_ms - T0, p.to_ms - T0) for p in plan.partitions) == [
        ("sensor-a#0", 0, 3 * HOUR),
        ("sensor-a#1", 0, 3 * HOUR),
        ("sensor-a#2", 0, HOUR),
        ("sensor-a#2", 2 * HOUR, 3 * HOUR),
        ("sensor-a#3", 0, HOUR),
        ("sensor-a#3", 2 * HOUR, 3 * HOUR),
    ]
    first = next(p for p in plan.partitions if p.pk == "sensor-a#0")
    assert (first.sk_low, first.sk_high) == ("2026-11-22T06:00:00.000Z", "2026-11-22T08:59:59.999Z#~")


def test_range_plans_need_the_hybrid_layout() -> None:
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    with pytest.raises(InvalidInput) as caught:
        layout.plan_range(T0, T0 + HOUR, ShardMap.initial(layout.bucket, 2))
    assert caught.value.field == "layout"


@pytest.mark.parametrize("kind", ["random", "calculated", "hybrid"])
def test_what_a_layout_says_it_supports_is_what_its_plans_do(kind: str) -> None:
    # Given a layout with a 2-shard map
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 2)

    # When it plans an entity's two hours, and is asked for every entity's
    plan = layout.plan_entity("sensor-a", T0, T0 + 2 * HOUR, shard_map)
    try:
        layout.plan_range(T0, T0 + HOUR, shard_map)
        range_reads = True
    except InvalidInput:
        range_reads = False

    # Then its capabilities say so: range reads, dedupe (every layout: blocks), and time buckets
    assert layout.can.range_reads is range_reads is (kind == "hybrid")
    assert plan.dedupe is True
    buckets = {(p.from_ms, p.to_ms) for p in plan.partitions}
    assert layout.can.shared_partitions is (len(buckets) == 2)
    # And its partitions are shared (keyed by shard and bucket) or the entity's own
    own = all(p.pk.startswith("sensor-a#") for p in plan.partitions)
    assert own is not layout.can.shared_partitions


@pytest.mark.parametrize(
    ("from_ms", "to_ms", "field"),
    [
        (T0, T0, "from"),
        (T0 + 1, T0, "from"),
        (-1, T0, "from"),
        (MAX_TS_MS + 1, MAX_TS_MS + 1, "from"),
        (MAX_TS_MS + 5, 100, "from"),
        (T0, MAX_TS_MS + 2, "to"),
        (T0, -5, "to"),
    ],
)
@pytest.mark.parametrize("kind", ["random", "calculated", "hybrid"])
def test_plans_refuse_empty_or_out_of_range_ranges(kind: str, from_ms: int, to_ms: int, field: str) -> None:
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    with pytest.raises(InvalidInput) as caught:
        layout.plan_entity("sensor-a", from_ms, to_ms, ShardMap.initial(layout.bucket, 2))
    assert caught.value.field == field


def test_plans_reach_the_end_of_the_supported_range_with_monthly_tables() -> None:
    # Given monthly tables, a range that ends at the last supported instant
    layout = Layout.from_settings(kind="hybrid", bucket="1d", table_prefix="readings", table_period="month")
    shard_map = ShardMap.initial(layout.bucket, 2)
    item = reading("sensor-a", MAX_TS_MS, "ev-1")
    # When it is planned (December 9999: the next month would be year 10000)
    plan = layout.plan_entity("sensor-a", MAX_TS_MS - 40 * 24 * HOUR, MAX_TS_MS + 1, shard_map)
    # Then the last reading is found in the December 9999 table
    (block,) = layout.pack([(item, 1)], shard_map)
    assert block.key.table == "readings-9999-12"
    assert any(covers(p, block.key, item.ts_ms) for p in plan.partitions)
    assert plan.tables == ("readings-9999-11", "readings-9999-12")
