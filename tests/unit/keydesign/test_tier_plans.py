"""Plans with the write tier: every item that can hold a reading of the range is read, and nothing else.

Items are written as ingest and compaction write them (``doubles/tier_items.py``): blocks,
group items, dense marks, sub-items, cluster blocks. For a plan of one entity (every layout, buckets
shorter and longer than an hour, hourly tables, any watermark and re-packed range), every item holding
one of the entity's readings in the range is in one of its partitions (same table and key, sort key
within the range, the reading within the partition's time range): its blocks always, its group items in
hours after the watermark outside the re-packed slices, its sub-items in those slices, its cluster
blocks in hours by it (the G's each was compacted under as the compaction state records them). An item
of another entity is read only from a group, sub-item or cluster partition (the reader keeps the read's
entity of each; a sub-item or cluster block of its sub-group or cluster), never a dense mark. A cross-entity
plan (hybrid) reads every item holding a reading of the range, from partitions whose time range
starts where the reading's bucket meets the range (the order cross-entity reads merge by).
"""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from doubles.tier_items import TierWriter
from keydesign import Layout, PartitionQuery, Reading, ShardMap, decode_block
from keydesign.blocks import decode_group, encode_group, keyed_item
from keydesign.writetier import (
    MAX_COMPACTED_SPAN_MS,
    REPACK_MS,
    SLICE_MS,
    Clustered,
    CompactionState,
    EarlierGroups,
    WriteTier,
    cluster_of,
    group_sk_stem,
    slice_start,
    sub_group_of,
)
from tests.unit.keydesign.strategies import PROPERTY

T0 = 1_795_305_600_000  # 2026-11-22T00:00:00Z
HOUR = 3_600_000
ENTITIES = ("a-1", "b-2", "c-3", "d-4", "f-6", "h-8")  # groups of 1 to 4 that differ

SPANS = st.one_of(
    st.just((0, 6 * HOUR)),
    st.tuples(st.sampled_from(range(0, 6 * HOUR, 450_000)), st.sampled_from(range(450_000, 6 * HOUR, 450_000))),
    st.tuples(st.integers(0, 6 * HOUR - 1), st.integers(1, 6 * HOUR)),
)

Stored = tuple[str, str, str, str, tuple[Reading, ...]]  # table, pk, sk, kind, readings
#: layout, shard map, the deployed write tier, the watermark, the items stored, the earlier group counts, the
#: re-packed slices, the G's of the compacted hours
World = tuple[
    Layout,
    ShardMap,
    WriteTier,
    int,
    list[Stored],
    tuple[EarlierGroups, ...],
    tuple[int, int],
    tuple[Clustered, ...],
]


@st.composite
def stored_worlds(draw: st.DrawFn) -> World:
    kind = draw(st.sampled_from(("random", "calculated", "hybrid")))
    period = draw(st.sampled_from((None, "hour", "day")))
    bucket = draw(st.sampled_from(("1h", "15m", "2h") if period == "hour" else ("1h", "15m", "2h", "1d")))
    if period == "hour" and bucket == "2h":
        bucket = "1h"
    layout = Layout.from_settings(kind=kind, bucket=bucket, table_prefix="readings", table_period=period)
    shard_map = ShardMap.initial(layout.bucket, draw(st.integers(1, 3)))
    tier = WriteTier(draw(st.integers(1, 3)))
    # Often the batches before a change of the group count were written with another one (earlier)
    old = draw(st.one_of(st.none(), st.integers(1, 4).filter(lambda g: g != tier.groups).map(WriteTier)))
    writer = TierWriter(layout, old or tier, shard_map, 30 * 24 * HOUR)
    through = T0 + draw(st.sampled_from(range(7))) * HOUR
    items = []
    # Readings in any of the six hours, often near their ends and quarters (a group item there reaches on)
    at = st.builds(
        lambda hour, offset: hour * HOUR + offset,
        st.sampled_from(range(6)),
        st.one_of(
            st.integers(0, HOUR - 1),
            st.integers(HOUR - 20_000, HOUR - 1),
            st.builds(
                lambda q, j: min(HOUR - 1, max(0, q * 900_000 + j)),
                st.sampled_from(range(5)),
                st.integers(-4_000, 4_000),
            ),
        ),
    )
    reading = st.tuples(st.sampled_from(ENTITIES), at, st.sampled_from(("e1", "e2")))
    batches = draw(st.lists(st.lists(reading, min_size=1, max_size=12), min_size=3, max_size=10))
    change = draw(st.integers(0, len(batches))) if old is not None else 0
    old_hours = [T0]  # the hours of the group items written with the earlier G
    for version, batch in enumerate(batches):
        writer.tier = tier if version >= change else writer.tier
        late = draw(st.booleans())
        entries = [(Reading(e, ev, T0 + at, {"v": 1}), version) for e, at, ev in batch]
        start = T0 + 6 * HOUR if late else T0 + min(at for _, at, _ in batch)
        written = writer.ingest(entries, start, random.Random(version))
        if version < change:
            old_hours += [
                slice_start(r.ts_ms) for _, item in written if str(item["pk"]).startswith("w#") for r in _group(item)
            ]
        items += written
    # the earlier G may hold the hours up to the last one it wrote a group item in (the state says so)
    earlier = () if old is None else (EarlierGroups(old.groups, max(old_hours) + SLICE_MS),)
    state = CompactionState(T0)
    for hour in range(T0, through, SLICE_MS):
        items += writer.compact(hour)
        counts = {tier.groups, *(e.groups for e in earlier if e.holds(hour))}
        state = state.advanced(0, sorted(counts, reverse=True))  # as compaction records them: the largest first
    repack_from = T0 + draw(st.sampled_from(range(6))) * HOUR
    repacked = repack_from + draw(st.integers(0, 24)) * REPACK_MS
    for start in range(repack_from, repacked, REPACK_MS):
        items += writer.repack(start)
    stored = [_stored(layout, table, item) for table, item in items]
    return layout, shard_map, tier, through, stored, earlier, (repack_from, repacked), state.clustered


def _group(item: dict[str, object]) -> list[Reading]:
    """The readings of a group item; none of another item."""
    payload = item.get("b")
    grouped = str(item["pk"]).startswith("w#") and isinstance(payload, bytes)
    return list(decode_group(payload)[1]) if grouped and isinstance(payload, bytes) else []


def _near_quarter(quarter: int, jitter: int) -> int:
    return min(HOUR - 1, max(0, quarter * 900_000 + jitter))


def _stored(layout: Layout, table: str, item: dict[str, object]) -> Stored:
    pk, sk, payload = str(item["pk"]), str(item["sk"]), item.get("b")
    if not isinstance(payload, bytes):
        return table, pk, sk, "mark", ()
    if pk.startswith("w#"):
        return table, pk, sk, "group", tuple(decode_group(payload)[1])
    if pk.startswith("s#"):
        return table, pk, sk, "sub", tuple(decode_group(payload, span_limit_ms=REPACK_MS)[1])
    if pk.startswith("c#"):
        return table, pk, sk, "cluster", tuple(decode_group(payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)[1])
    compacted = pk.endswith("#c")
    entity = sk.split("#", 1)[0] if layout.can.shared_partitions else pk.rsplit("#", 1)[0]
    span = MAX_COMPACTED_SPAN_MS if compacted else 10_000
    return (
        table,
        pk,
        sk,
        "compacted" if compacted else "blocks",
        tuple(decode_block(entity, payload, span_limit_ms=span)[1]),
    )


def _reads(part: PartitionQuery, table: str, pk: str, sk: str) -> bool:
    return (
        part.table == table
        and part.pk == pk
        and (part.sk_low is None or part.sk_low <= sk)
        and (part.sk_high is None or sk <= part.sk_high)
    )


def _needed(kind: str, ts_ms: int, through: int, repacked: tuple[int, int] = (0, 0)) -> bool:
    """Whether a read of a reading at ``ts_ms`` needs its copy in an item of ``kind``."""
    if kind == "blocks":
        return True
    if slice_start(ts_ms) + SLICE_MS <= through:
        return kind == "cluster"
    return kind == ("sub" if repacked[0] <= ts_ms < repacked[1] else "group")


@PROPERTY
@given(
    world=stored_worlds(),
    entity=st.sampled_from(ENTITIES),
    span=SPANS,
)
def test_an_entitys_plan_reads_every_item_of_its_readings_and_no_other_entitys_but_group_items(
    world: World, entity: str, span: tuple[int, int]
) -> None:
    layout, shard_map, tier, through, stored, earlier, repacked, clustered = world
    from_ms = T0 + span[0]
    to_ms = min(T0 + 6 * HOUR, from_ms + span[1])
    plan = layout.plan_entity(
        entity,
        from_ms,
        to_ms,
        shard_map,
        write_tier=tier,
        compacted_through_ms=through,
        earlier=earlier,
        repacked=repacked,
        clustered=clustered,
    )
    assert len(set(plan.partitions)) == len(plan.partitions)  # no partition read twice (two G's, one group)
    for table, pk, sk, kind, readings in stored:
        parts = [p for p in plan.partitions if _reads(p, table, pk, sk)]
        if kind == "mark":
            assert not parts, (pk, sk)  # a dense mark is never in a read's range
            continue
        for part in parts:
            assert part.kind == kind, (part, pk, sk)
            if kind == "sub":  # its sub-group's items only
                assert sub_group_of(entity) in {sub_group_of(r.entity_id) for r in readings}, (part, pk, sk)
            elif kind == "cluster":  # its cluster's blocks only
                assert {cluster_of(r.entity_id) for r in readings} == {cluster_of(entity)}, (part, pk, sk)
            elif kind != "group":
                assert {r.entity_id for r in readings} == {entity}, (part, pk, sk)
        for r in readings:
            if r.entity_id == entity and from_ms <= r.ts_ms < to_ms and _needed(kind, r.ts_ms, through, repacked):
                assert any(p.from_ms <= r.ts_ms < p.to_ms for p in parts), (kind, pk, sk, r)


@PROPERTY
@given(world=stored_worlds(), span=SPANS)
def test_a_range_plan_reads_every_item_of_its_readings_from_partitions_anchored_at_their_bucket(
    world: World, span: tuple[int, int]
) -> None:
    layout, shard_map, tier, through, stored, earlier, _, clustered = world  # a range read reads no sub-items
    if not layout.can.range_reads:
        return
    from_ms = T0 + span[0]
    to_ms = min(T0 + 6 * HOUR, from_ms + span[1])
    plan = layout.plan_range(
        from_ms, to_ms, shard_map, write_tier=tier, compacted_through_ms=through, earlier=earlier, clustered=clustered
    )
    assert len(set(plan.partitions)) == len(plan.partitions)
    for table, pk, sk, kind, readings in stored:
        parts = [p for p in plan.partitions if _reads(p, table, pk, sk)]
        if kind == "mark":
            assert not parts, (pk, sk)
            continue
        assert all(p.kind == kind for p in parts) and (kind != "sub" or not parts)
        for r in readings:
            if from_ms <= r.ts_ms < to_ms and _needed(kind, r.ts_ms, through):
                anchor = max(from_ms, layout.bucket.start(r.ts_ms))
                assert any(p.from_ms == anchor and r.ts_ms < p.to_ms for p in parts), (kind, pk, sk, r)


def test_a_group_item_that_reaches_into_the_next_bucket_is_read_by_that_buckets_plans() -> None:
    # Given a group item of readings on both sides of a 15-minute bucket's start (items are cut by time and
    # re-pack slice, not bucket; this one as ingest wrote them before they were cut at slices)
    layout = Layout.from_settings(kind="hybrid", bucket="15m", table_prefix="readings")
    shard_map, tier = ShardMap.initial(layout.bucket, 2), WriteTier(1)
    edge = T0 + 900_000
    encoded = encode_group(
        [Reading("a-1", "e1", edge - 2_000, {"v": 1}), Reading("b-2", "e1", edge + 1_000, {"v": 2})], 1
    )
    item, _, _ = keyed_item(tier.group_pk(0, edge), group_sk_stem(encoded), encoded.payload, None)
    table, sk = layout.table_for(edge), str(item["sk"])

    # Then the plans of the next bucket read it, from a partition of that bucket (entity: of its time)
    for plan in (
        layout.plan_range(edge, edge + 900_000, shard_map, write_tier=tier),
        layout.plan_entity("b-2", edge, edge + 900_000, shard_map, write_tier=tier),
    ):
        (part,) = [p for p in plan.partitions if _reads(p, table, str(item["pk"]), sk)]
        assert part.kind == "group"
        assert part.from_ms == edge


def test_an_entitys_readings_of_an_earlier_group_count_are_read_from_its_group_until_compacted() -> None:
    # Given f-6's readings of an hour written with 2 groups (its group 1), then with 4 (its group 3)
    layout = Layout.from_settings(kind="hybrid", bucket="15m", table_prefix="readings")
    shard_map, old, new = ShardMap.initial(layout.bucket, 2), WriteTier(2), WriteTier(4)
    writer = TierWriter(layout, old, shard_map, 30 * 24 * HOUR)
    ((_, before),) = writer.ingest([(Reading("f-6", "e1", T0 + 60_000, {"v": 1}), 1)], T0 + 60_000)
    writer.tier = new
    ((_, after),) = writer.ingest([(Reading("f-6", "e2", T0 + 120_000, {"v": 2}), 2)], T0 + 120_000)
    assert (before["pk"], after["pk"]) == (old.group_pk(1, T0), new.group_pk(3, T0))
    earlier = (EarlierGroups(2, T0 + HOUR),)

    def read(plan_earlier: tuple[EarlierGroups, ...], through: int = 0) -> set[str]:
        entity = layout.plan_entity("f-6", T0, T0 + 2 * HOUR, shard_map, write_tier=new, earlier=plan_earlier,
                                    compacted_through_ms=through)  # fmt: skip
        every = layout.plan_range(T0, T0 + 2 * HOUR, shard_map, write_tier=new, earlier=plan_earlier,
                                  compacted_through_ms=through)  # fmt: skip
        for plan in (entity, every):  # every G's group partitions are among the largest one's: read once
            assert len(set(plan.partitions)) == len(plan.partitions)
        pks = {p.pk for p in entity.partitions if p.kind == "group"}
        assert pks <= {p.pk for p in every.partitions if p.kind == "group"}
        return pks

    # Then before compaction the plans read its group under both counts, the earlier one only in the
    # hours it may hold (not the next hour), and nothing of it once the hour is compacted
    assert read(earlier) == {old.group_pk(1, T0), new.group_pk(3, T0), new.group_pk(3, T0 + HOUR)}
    assert read(()) == {new.group_pk(3, T0), new.group_pk(3, T0 + HOUR)}  # what was lost before
    assert read(earlier, through=T0 + HOUR) == {new.group_pk(3, T0 + HOUR)}


def test_an_uncompacted_hours_re_packed_slices_are_read_from_the_entitys_sub_group_then_its_group_items() -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    shard_map, tier, old = ShardMap.initial(layout.bucket, 2), WriteTier(4), WriteTier(2)
    group, sub, minute = tier.group_of("f-6"), f"{sub_group_of('f-6'):02d}#", 60_000
    # Given the slices 00:00 to 00:20 re-packed, of the hour at T0 (not compacted)
    plan = layout.plan_entity(
        "f-6", T0 + 7 * minute, T0 + HOUR, shard_map, write_tier=tier, repacked=(T0, T0 + 25 * minute)
    )
    parts = [(p.kind, p.pk, p.sk_low, p.sk_high, p.from_ms, p.to_ms) for p in plan.partitions if p.kind != "blocks"]
    # Then its sub-group's sort keys of them (from the slice holding the range's start), and its group's
    # items after them (from a group item's span before the watermark: the reader drops what is before it)
    assert parts == [
        ("sub", tier.sub_pk(group, T0), f"{sub}2026-11-22T00:05:00.000Z", f"{sub}2026-11-22T00:24:59.999Z#~",
         T0 + 7 * minute, T0 + 25 * minute),
        ("group", tier.group_pk(group, T0), "2026-11-22T00:24:50.001Z", "2026-11-22T00:59:59.999Z#~",
         T0 + 25 * minute, T0 + HOUR),
    ]  # fmt: skip
    # and under an earlier group count too, each partition once
    plan = layout.plan_entity(
        "f-6", T0, T0 + HOUR, shard_map, write_tier=tier, repacked=(T0, T0 + HOUR), earlier=(EarlierGroups(2, FAR),)
    )
    subs = {p.pk for p in plan.partitions if p.kind == "sub"}
    assert subs == {tier.sub_pk(group, T0), old.sub_pk(old.group_of("f-6"), T0)}
    assert not [p for p in plan.partitions if p.kind == "group"]
    # A compacted hour reads none of them
    plan = layout.plan_entity(
        "f-6", T0, T0 + HOUR, shard_map, write_tier=tier, compacted_through_ms=T0 + HOUR, repacked=(T0, T0 + HOUR)
    )
    assert {p.kind for p in plan.partitions} == {"blocks", "compacted"}


FAR = T0 + 100 * HOUR


def test_hours_compacted_before_cluster_blocks_are_read_from_their_entitys_compacted_blocks() -> None:
    # Given a deployment whose compaction wrote per-entity compacted blocks until T0 + 2 h (an upgrade), then
    # cluster blocks under 4 groups, then under 8 and 4 (a change of G whose group items that hour held both)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="hour")
    shard_map, tier = ShardMap.initial(layout.bucket, 2), WriteTier(8)
    clustered = (Clustered((4,), T0 + 2 * HOUR), Clustered((8, 4), T0 + 3 * HOUR))
    entity = next(e for e in (f"d-{n}" for n in range(100)) if WriteTier(8).group_of(e) != WriteTier(4).group_of(e))
    # When a plan reads its first four hours, all compacted
    plan = layout.plan_entity(
        entity, T0, T0 + 4 * HOUR, shard_map, write_tier=tier, compacted_through_ms=T0 + 4 * HOUR, clustered=clustered
    )
    compacted = [(p.from_ms, p.kind, p.pk, p.sk_low) for p in plan.partitions if p.kind != "blocks"]
    # Then the first two hours are its compacted partitions; the third its group's cluster partition under 4
    # groups; the fourth under both 8 and 4 groups; the cluster ones from its cluster's sort keys
    prefix = f"{cluster_of(entity):03d}#"
    hours = [T0 + h * HOUR for h in range(4)]
    four, eight = WriteTier(4), WriteTier(8)

    def stamp(hour: int) -> str:
        return f"2026-11-22T0{hour}:00:00.000Z"

    def own(hour: int) -> str:
        return f"{layout.hybrid_base(entity, hours[hour], shard_map)}#c"

    assert compacted == [
        (hours[0], "compacted", own(0), f"{entity}#{stamp(0)}"),
        (hours[1], "compacted", own(1), f"{entity}#{stamp(1)}"),
        (hours[2], "cluster", four.cluster_pk(four.group_of(entity), hours[2]), f"{prefix}{stamp(2)}"),
        (hours[3], "cluster", eight.cluster_pk(eight.group_of(entity), hours[3]), f"{prefix}{stamp(3)}"),
        (hours[3], "cluster", four.cluster_pk(four.group_of(entity), hours[3]), f"{prefix}{stamp(3)}"),
    ]
    # And a cross-entity read of the fourth hour reads every cluster partition of the wider G, whole
    every = layout.plan_range(
        hours[3], hours[3] + HOUR, shard_map, write_tier=tier, compacted_through_ms=T0 + 4 * HOUR, clustered=clustered
    )
    clusters = [p for p in every.partitions if p.kind == "cluster"]
    assert [p.pk for p in clusters] == [tier.cluster_pk(g, hours[3]) for g in range(8)]
    assert all(p.sk_low is None and p.sk_high is None and p.time_filter for p in clusters)
    assert not [p for p in every.partitions if p.kind == "compacted"]


def test_an_entitys_partition_over_a_buckets_hours_is_one_query() -> None:
    # Given 1-day buckets, the write tier cutting a plan at hours and a watermark 30 hours in
    layout = Layout.from_settings(kind="hybrid", bucket="1d", table_prefix="readings")
    shard_map, tier = ShardMap.initial(layout.bucket, 2), WriteTier(4)
    through = T0 + 30 * HOUR
    # When an entity's first two days are planned
    plan = layout.plan_entity(
        "a-1",
        T0,
        T0 + 48 * HOUR,
        shard_map,
        write_tier=tier,
        compacted_through_ms=through,
        clustered=(Clustered((4,), 0),),
    )
    by_kind: dict[str, list[PartitionQuery]] = {}
    for part in plan.partitions:
        by_kind.setdefault(part.kind, []).append(part)
    # Then its block partition of each day and its cluster partition of each day's compacted hours are one Query
    # each, over all their hours; its group's partitions, one an hour after the watermark
    days = [(T0, T0 + 24 * HOUR), (T0 + 24 * HOUR, T0 + 48 * HOUR)]
    assert [(p.from_ms, p.to_ms) for p in by_kind["blocks"]] == days
    assert [(p.from_ms, p.to_ms) for p in by_kind["cluster"]] == [days[0], (days[1][0], through)]
    assert [p.from_ms for p in by_kind["group"]] == list(range(through, T0 + 48 * HOUR, HOUR))
    assert len({p.pk for p in by_kind["blocks"]}) == len({p.pk for p in by_kind["cluster"]}) == 2
