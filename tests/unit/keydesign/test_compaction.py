"""Compacting a group's hour (keydesign.tiering.compact_hour): every reading whose newest copy is in
the write tier lands in exactly one compacted block, none whose newest copy is in a block; versions,
keys and limits as the module says; the same copies always make the same items."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import Layout, Reading, ShardMap, decode_block
from keydesign.blocks import MAX_BLOCK_ITEM_BYTES, MAX_BLOCK_READINGS, encode_block
from keydesign.periods import HOUR_MS
from keydesign.tiering import CompactedBlock, compact_hour
from keydesign.writetier import (
    MAX_COMPACTED_SPAN_MS,
    compacted_pk,
)

from .strategies import ENTITIES, PROPERTY, layouts
from .test_blocks import T0, same

#: An hour that starts a day (T0 is 06:00): buckets up to a day nest around it.
HOUR = T0 - 6 * HOUR_MS + 5 * HOUR_MS
DAY_MS = 24 * HOUR_MS
Identity = tuple[str, int, str]


def copy_of(identity: Identity, version: int) -> Reading:
    """A copy of the reading ``identity`` as published with ``version``: its content follows the version,
    so two copies of one version are equal (they come from the same record)."""
    entity, ts, event_id = identity
    return Reading.parse({"entity_id": entity, "timestamp": ts, "event_id": event_id, "measures": {"v": version}})


@st.composite
def hours(draw: st.DrawFn) -> tuple[list[tuple[int, list[Reading]]], list[tuple[int, list[Reading]]]]:
    """Group items and dense entities' blocks of HOUR: copies of a few readings, at random versions,
    some of the blocks' readings outside the hour (a block partition holds its whole bucket)."""
    identities = draw(
        st.lists(
            st.tuples(st.sampled_from(ENTITIES), st.integers(HOUR, HOUR + HOUR_MS - 1), st.sampled_from("abc")),
            min_size=1,
            max_size=25,
            unique=True,
        )
    )
    outside = draw(st.lists(st.tuples(st.sampled_from(ENTITIES), st.integers(HOUR - HOUR_MS, HOUR - 1)), max_size=3))

    def items(ids: list[Identity]) -> list[tuple[int, list[Reading]]]:
        out = []
        for chunk in draw(st.lists(st.lists(st.sampled_from(ids), min_size=1, max_size=6), max_size=6)):
            version = draw(st.integers(1, 9))
            out.append((version, [copy_of(i, version) for i in sorted(set(chunk), key=lambda i: (i[1], i[2]))]))
        return out

    tier = items(identities)
    blocks = items([*identities, *((e, ts, "z") for e, ts in outside)])
    return tier, blocks


def model(tier: list[tuple[int, list[Reading]]], blocks: list[tuple[int, list[Reading]]]) -> dict[Identity, Reading]:
    """The readings compaction must store: :func:`newest_in_tier` of the hour."""
    return newest_in_tier(HOUR, HOUR + HOUR_MS, tier, blocks)


def newest_in_tier(
    start: int, end: int, tier: list[tuple[int, list[Reading]]], blocks: list[tuple[int, list[Reading]]]
) -> dict[Identity, Reading]:
    """The readings of ``[start, end)`` compaction (an hour) or the re-pack (a slice) must store, by the rule:
    the newest copy wins, a block's on a tie; kept where that copy is in the write tier."""
    best: dict[Identity, tuple[int, int]] = {}  # identity -> (version, 1 for a block copy)
    for source, copies in ((1, blocks), (0, tier)):
        for version, readings in copies:
            for r in readings:
                if start <= r.ts_ms < end:
                    key = (r.entity_id, r.ts_ms, r.event_id)
                    best[key] = max(best.get(key, (0, 0)), (version, source))
    return {key: copy_of(key, version) for key, (version, source) in best.items() if source == 0}


@PROPERTY
@given(layout=layouts(), hour=hours(), global_shards=st.integers(1, 12), retention_days=st.integers(1, 30))
def test_each_reading_whose_newest_copy_is_in_the_write_tier_is_compacted_once_and_no_other(
    layout: Layout,
    hour: tuple[list[tuple[int, list[Reading]]], list[tuple[int, list[Reading]]]],
    global_shards: int,
    retention_days: int,
) -> None:
    tier, blocks = hour
    shard_map = ShardMap.initial(layout.bucket, global_shards)
    retention = retention_days * DAY_MS
    compacted = compact_hour(layout, shard_map, HOUR, tier, blocks, retention_ms=retention)
    stored: dict[Identity, Reading] = {}
    for block in compacted:
        header, readings = decode_block(block.entity_id, block.payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        assert all(same(a, b) for a, b in zip(readings, block.readings, strict=True))
        for r in readings:
            key = (r.entity_id, r.ts_ms, r.event_id)
            assert key not in stored, f"{key} is in two compacted blocks"
            stored[key] = r
        # versions: the largest of every copy read of the entity's readings of the hour
        assert (
            header.version
            == block.version
            == max(
                v
                for v, rs in (*tier, *blocks)
                for r in rs
                if r.entity_id == block.entity_id and HOUR <= r.ts_ms < HOUR + HOUR_MS
            )
        )
        # keys: beside the hybrid base (or the entity's own), the layout's block sort key, the bucket's table
        bucket = layout.bucket.start(readings[0].ts_ms)
        assert all(layout.bucket.start(r.ts_ms) == bucket for r in readings)
        assert block.pk == compacted_pk(block.entity_id, layout.hybrid_base(block.entity_id, bucket, shard_map))
        assert block.table == layout.table_for(bucket)
        encoded = encode_block(list(readings), block.version, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        assert block.sk == f"{layout.block_sk_stem(block.entity_id, encoded)}#{block.write_units}"
        assert block.ttl == (readings[-1].ts_ms + retention) // 1000
        assert len(readings) <= MAX_BLOCK_READINGS and (block.size <= MAX_BLOCK_ITEM_BYTES or len(readings) == 1)
    expected = model(tier, blocks)
    assert stored.keys() == expected.keys()
    assert all(same(stored[k], expected[k]) for k in expected)
    # the same copies make the same items: a second pass over the hour overwrites the first's
    assert compact_hour(layout, shard_map, HOUR, tier, blocks, retention_ms=retention) == compacted


def reading(entity: str, ts: int, event_id: str, **measures: float) -> Reading:
    return Reading.parse({"entity_id": entity, "timestamp": ts, "event_id": event_id, "measures": measures or {"v": 1}})


def test_a_block_copy_newer_or_as_new_wins_and_an_older_one_loses_but_raises_the_version() -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 4)
    a, b, c = (reading("d-1", HOUR + n * 1000, f"e{n}") for n in range(3))
    tier = [(10, [a, b, c])]
    blocks = [(12, [dataclasses.replace(a, measures={"v": 2})]), (10, [b]), (4, [c])]
    (block,) = compact_hour(layout, shard_map, HOUR, tier, blocks)
    # a: the block's copy is newer; b: as new (a block copy stays where it is); c: the tier's is newer
    assert [r.event_id for r in block.readings] == ["e2"]
    assert block.version == 12  # above the older block copy of c, and every copy read
    assert block.pk == f"{layout.hybrid_base('d-1', HOUR, shard_map)}#c" and block.sk.startswith("d-1#")


def test_compacted_blocks_are_cut_at_buckets_and_by_the_block_limits() -> None:
    shard_map_of = ShardMap.initial
    # 15-minute buckets: an hour's readings make four blocks, one per bucket, each in its own partition
    layout = Layout.from_settings(kind="hybrid", bucket="15m", table_prefix="readings", table_period="hour")
    quarter = [reading("d-1", HOUR + q * 15 * 60_000 + 5, "e") for q in range(4)]
    blocks = compact_hour(layout, shard_map_of(layout.bucket, 2), HOUR, [(1, quarter)])
    assert [len(b.readings) for b in blocks] == [1, 1, 1, 1] and len({b.pk for b in blocks}) == 4
    # 2,500 readings of one entity in an hour: cut by the count limit, the whole hour in one partition
    layout = Layout.from_settings(kind="random", bucket="1d", table_prefix="readings")
    many = [reading("d-1", HOUR + n * 1_000, "e") for n in range(2_500)]
    blocks = compact_hour(
        layout, shard_map_of(layout.bucket, 2), HOUR, [(1, many[i : i + 500]) for i in range(0, 2_500, 500)]
    )
    assert [len(b.readings) for b in blocks] == [1_000, 1_000, 500] and {b.pk for b in blocks} == {"d-1#c"}
    # readings that compress badly: cut by the item size
    noise = random.Random(7)
    big = [reading("d-2", HOUR + n, "e", **{f"m{k}": noise.random() for k in range(60)}) for n in range(200)]
    blocks = compact_hour(layout, shard_map_of(layout.bucket, 2), HOUR, [(1, big)])
    assert len(blocks) > 1 and all(b.size <= MAX_BLOCK_ITEM_BYTES for b in blocks)
    assert [r for b in blocks for r in b.readings] == big


def test_a_group_item_reading_outside_its_hour_is_refused() -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    stray = reading("d-1", HOUR + HOUR_MS, "e")
    with pytest.raises(ValueError, match="holds a reading at"):
        compact_hour(layout, ShardMap.initial(layout.bucket, 2), HOUR, [(1, [stray])])
    with pytest.raises(ValueError, match="not the start of an hour"):
        compact_hour(layout, ShardMap.initial(layout.bucket, 2), HOUR + 1, [])


def test_compacted_block_item() -> None:
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    (block,) = compact_hour(layout, ShardMap.initial(layout.bucket, 2), HOUR, [(3, [reading("d-1", HOUR, "e")])])
    assert isinstance(block, CompactedBlock)
    assert block.item() == {"pk": "d-1#c", "sk": block.sk, "b": block.payload}
