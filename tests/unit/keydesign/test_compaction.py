"""Compacting a group's hour (keydesign.tiering.compact_hour): every reading whose newest copy is in
the write tier lands in exactly one cluster block, none whose newest copy is in a block; one cluster a
block, versions, keys, flags and limits as the module says; the same copies always make the same items."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import Reading, format_ts
from keydesign.blocks import (
    FORMAT_CLUSTER,
    MAX_BLOCK_ITEM_BYTES,
    MAX_BLOCK_READINGS,
    decode_group,
    encode_cluster,
)
from keydesign.periods import HOUR_MS
from keydesign.tiering import CompactedBlock, compact_hour
from keydesign.writetier import MAX_COMPACTED_SPAN_MS, ROLLUP_OWNED, WriteTier, cluster_of

from .strategies import ENTITIES, PROPERTY
from .test_blocks import T0, same

#: An hour that starts a day (T0 is 06:00): buckets up to a day nest around it.
HOUR = T0 - 6 * HOUR_MS + 5 * HOUR_MS
DAY_MS = 24 * HOUR_MS
#: The cluster partition the examples compact into (a group partition's, 2, of the hour).
PK = WriteTier(4).cluster_pk(2, HOUR)
Identity = tuple[str, int, str]


def copy_of(identity: Identity, version: int) -> Reading:
    """A copy of the reading ``identity`` as published with ``version``: its content follows the version,
    so two copies of one version are equal (they come from the same record)."""
    entity, ts, event_id = identity
    return Reading.parse({"entity_id": entity, "timestamp": ts, "event_id": event_id, "measures": {"v": version}})


Copies = list[tuple[int, list[Reading]]]


@st.composite
def window_copies(
    draw: st.DrawFn, start: int, end: int, outside_from: int, *, most: int, chunk: int, order: Callable[[Identity], Any]
) -> tuple[Copies, Copies]:
    """Group items of ``[start, end)`` and dense entities' blocks: copies of up to ``most`` readings at random
    versions, up to ``chunk`` items of up to ``chunk`` readings each (in ``order``), some of the blocks' readings
    outside the window, from ``outside_from`` on (a block partition holds its whole bucket)."""
    identities = draw(
        st.lists(
            st.tuples(st.sampled_from(ENTITIES), st.integers(start, end - 1), st.sampled_from("abc")),
            min_size=1,
            max_size=most,
            unique=True,
        )
    )
    outside = draw(st.lists(st.tuples(st.sampled_from(ENTITIES), st.integers(outside_from, start - 1)), max_size=3))

    def items(ids: list[Identity]) -> Copies:
        out = []
        for members in draw(st.lists(st.lists(st.sampled_from(ids), min_size=1, max_size=chunk), max_size=chunk)):
            version = draw(st.integers(1, 9))
            out.append((version, [copy_of(i, version) for i in sorted(set(members), key=order)]))
        return out

    return items(identities), items([*identities, *((e, ts, "z") for e, ts in outside)])


def hours() -> st.SearchStrategy[tuple[Copies, Copies]]:
    """Group items and dense entities' blocks of HOUR: copies of a few readings, at random versions,
    some of the blocks' readings outside the hour (a block partition holds its whole bucket)."""
    return window_copies(HOUR, HOUR + HOUR_MS, HOUR - HOUR_MS, most=25, chunk=6, order=lambda i: (i[1], i[2]))


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
@given(
    hour=hours(), groups=st.integers(1, 12), retention_days=st.integers(1, 30), dense=st.sets(st.sampled_from(ENTITIES))
)
def test_each_reading_whose_newest_copy_is_in_the_write_tier_is_compacted_once_and_no_other(
    hour: tuple[list[tuple[int, list[Reading]]], list[tuple[int, list[Reading]]]],
    groups: int,
    retention_days: int,
    dense: set[str],
) -> None:
    tier, blocks = hour
    write_tier = WriteTier(groups)
    group = groups - 1
    pk = write_tier.cluster_pk(group, HOUR)
    retention = retention_days * DAY_MS
    compacted = compact_hour(HOUR, tier, blocks, table="t", pk=pk, retention_ms=retention, dense=dense)
    stored: dict[Identity, Reading] = {}
    for block in compacted:
        header, readings = decode_group(block.payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        assert all(same(a, b) for a, b in zip(readings, block.readings, strict=True))
        for r in readings:
            key = (r.entity_id, r.ts_ms, r.event_id)
            assert key not in stored, f"{key} is in two compacted blocks"
            stored[key] = r
        # one cluster a block
        (cluster,) = {cluster_of(r.entity_id) for r in readings}
        # versions: the largest of its entities' write-tier copies (not of their blocks': see the test below)
        entities = {r.entity_id for r in readings}
        assert header.version == block.version
        assert block.version == max(v for v, rs in tier for r in rs if r.entity_id in entities)
        # keys: the group's cluster partition of the hour, the cluster's sort keys, the given table
        assert block.pk == pk == f"c#{group:04d}#2026-11-22T05:00"
        assert block.table == "t"
        assert header.format_version == FORMAT_CLUSTER  # a section an entity
        encoded = encode_cluster(list(readings), block.version, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        assert block.sk == f"{cluster:03d}#{format_ts(readings[0].ts_ms)}#{encoded.block_id}#{block.write_units}"
        assert block.ttl == (readings[-1].ts_ms + retention) // 1000
        assert len(readings) <= MAX_BLOCK_READINGS and (block.size <= MAX_BLOCK_ITEM_BYTES or len(readings) == 1)
        # flags: the dense entities among its own, in the item's string set
        assert block.rollups == entities & dense
        assert block.item().get(ROLLUP_OWNED) == (set(entities & dense) or None)
        assert block.owned_readings() == [r for r in block.readings if r.entity_id not in dense]
    expected = model(tier, blocks)
    assert stored.keys() == expected.keys()
    assert all(same(stored[k], expected[k]) for k in expected)
    # the same copies make the same items: a second pass over the hour overwrites the first's
    again = compact_hour(HOUR, tier, blocks, table="t", pk=pk, retention_ms=retention, dense=dense)
    assert again == compacted


def reading(entity: str, ts: int, event_id: str, **measures: float) -> Reading:
    return Reading.parse({"entity_id": entity, "timestamp": ts, "event_id": event_id, "measures": measures or {"v": 1}})


def mates(count: int, cluster: int = 0) -> list[str]:
    """``count`` entity ids of one cluster."""
    names = (f"d-{n}" for n in itertools.count())
    return list(itertools.islice((n for n in names if cluster_of(n) == cluster), count))


def test_a_block_copy_newer_or_as_new_wins_and_an_older_one_loses() -> None:
    one, other = mates(2)
    a, b, c = (reading(one, HOUR + n * 1000, f"e{n}") for n in range(3))
    d = reading(other, HOUR + 500, "e9")
    tier = [(10, [a, d, b, c])]
    blocks = [(12, [dataclasses.replace(a, measures={"v": 2})]), (10, [b]), (4, [c])]
    (block,) = compact_hour(HOUR, tier, blocks, table="t", pk=PK)
    # a: the block's copy is newer; b: as new (a block copy stays where it is); c: the tier's is newer;
    # d: another entity of the cluster, in the same block
    assert [r.event_id for r in block.readings] == ["e9", "e2"]
    assert block.version == 10  # above the older block copy of c: its entities' write-tier copies' largest
    assert block.pk == PK and block.sk.startswith("000#")


def test_cluster_blocks_are_one_cluster_each_and_cut_by_the_block_limits() -> None:
    # two clusters' entities: a block each, every block of one cluster
    first, second = mates(3, 0), mates(2, 7)
    readings = [reading(e, HOUR + n * 60_000, "e") for n, e in enumerate([*first, *second])]
    made = compact_hour(HOUR, [(1, readings)], table="t", pk=PK)
    assert sorted(sorted(b.entities) for b in made) == sorted([sorted(first), sorted(second)])
    assert sorted(b.sk[:4] for b in made) == ["000#", "007#"]
    # 2,500 readings of one cluster in an hour: cut by the count limit, the whole hour in one partition
    many = [reading(first[n % 3], HOUR + n * 1_000, "e") for n in range(2_500)]
    made = compact_hour(HOUR, [(1, many[i : i + 500]) for i in range(0, 2_500, 500)], table="t", pk=PK)
    assert [len(b.readings) for b in made] == [1_000, 1_000, 500] and {b.pk for b in made} == {
        "c#0002#2026-11-22T05:00"
    }
    # readings that compress badly: cut by the item size
    noise = random.Random(7)
    big = [reading(first[0], HOUR + n, "e", **{f"m{k}": noise.random() for k in range(60)}) for n in range(200)]
    made = compact_hour(HOUR, [(1, big)], table="t", pk=PK)
    assert len(made) > 1 and all(b.size <= MAX_BLOCK_ITEM_BYTES for b in made)
    assert [r for b in made for r in b.readings] == big


def test_a_group_item_reading_outside_its_hour_is_refused() -> None:
    stray = reading("d-1", HOUR + HOUR_MS, "e")
    with pytest.raises(ValueError, match="holds a reading at"):
        compact_hour(HOUR, [(1, [stray])], table="t", pk=PK)
    with pytest.raises(ValueError, match="not the start of an hour"):
        compact_hour(HOUR + 1, [], table="t", pk=PK)


def test_cluster_block_item() -> None:
    (block,) = compact_hour(HOUR, [(3, [reading("d-1", HOUR, "e")])], table="t", pk=PK)
    assert isinstance(block, CompactedBlock)
    assert block.item() == {"pk": "c#0002#2026-11-22T05:00", "sk": block.sk, "b": block.payload}
    (flagged,) = compact_hour(HOUR, [(3, [reading("d-1", HOUR, "e")])], table="t", pk=PK, dense={"d-1"})
    assert flagged.item()[ROLLUP_OWNED] == {"d-1"} and flagged.owned_readings() == []


def test_a_cluster_blocks_version_is_of_its_write_tier_copies_not_of_a_newer_block_of_the_hour() -> None:
    # An entity written under two G's in one hour: its first copy of a reading in the earlier G's group
    # partition (version 3), the correction in the later G's (version 5), and a late reading of the hour in a
    # block (version 8), read by both passes. The earlier pass's cluster block keeps version 3: given the
    # block's 8 it would tie the later pass's, and the first copy could win over the correction.
    first = Reading("sensor-a", "e1", HOUR + 46 * 60_000, {"v": -738})
    correction = Reading("sensor-a", "e1", HOUR + 46 * 60_000, {"v": 0})
    late = Reading("sensor-a", "e2", HOUR + 6, {"v": -215})
    earlier = compact_hour(HOUR, [(3, [first])], [(8, [late])], table="t", pk="c#0002#x", retention_ms=None)
    later = compact_hour(HOUR, [(5, [correction])], [(8, [late])], table="t", pk="c#0000#x", retention_ms=None)
    assert [(b.version, b.readings) for b in earlier] == [(3, (first,))]
    assert [(b.version, b.readings) for b in later] == [(5, (correction,))]
