"""Re-packing a group's settled slice (keydesign.tiering.repack_slice): every reading whose newest copy
is in the slice's group items lands in exactly one sub-item, of its sub-group, none whose newest copy is
in a block; versions, keys and limits as keydesign.writetier says; the same copies make the same items."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import Reading
from keydesign.blocks import MAX_BLOCK_ITEM_BYTES, MAX_BLOCK_READINGS, decode_group, encode_group
from keydesign.tiering import repack_slice
from keydesign.writetier import REPACK_MS, WriteTier, sub_group_of, sub_sk_stem, tier_ttl

from .strategies import PROPERTY
from .test_blocks import T0, same
from .test_compaction import Copies, Identity, copy_of, newest_in_tier, window_copies

#: A slice in the middle of T0's hour.
START = T0 + 7 * REPACK_MS
DAY_MS = 86_400_000


def slices() -> st.SearchStrategy[tuple[Copies, Copies]]:
    """Group items of the slice and dense entities' blocks: copies of a few readings at random versions,
    some of the blocks' readings outside the slice (a block partition holds its bucket)."""
    return window_copies(START, START + REPACK_MS, T0, most=40, chunk=8, order=lambda i: (i[1], i[0], i[2]))


def winners(items: Copies, blocks: Copies) -> dict[Identity, Reading]:
    """The readings the re-pack must store: the newest copy wins, a block's on a tie; kept where that copy is
    a group item's (the rule compaction's model states, over the slice)."""
    return newest_in_tier(START, START + REPACK_MS, items, blocks)


@PROPERTY
@given(
    copies=slices(),
    groups=st.integers(1, 64),
    group=st.integers(0, 63),
    retention_days=st.one_of(st.none(), st.integers(1, 30)),
)
def test_each_reading_whose_newest_copy_is_in_the_slices_group_items_is_in_one_sub_item_of_its_sub_group(
    copies: tuple[Copies, Copies], groups: int, group: int, retention_days: int | None
) -> None:
    items, blocks = copies
    tier = WriteTier(groups)
    group %= groups
    retention = None if retention_days is None else retention_days * DAY_MS
    made = repack_slice(tier, group, START, items, blocks, table="readings-t", retention_ms=retention)
    expected = winners(items, blocks)
    stored: dict[Identity, Reading] = {}
    for sub in made:
        header, readings = decode_group(sub.encoded.payload, span_limit_ms=REPACK_MS)
        assert all(same(a, b) for a, b in zip(readings, sub.readings, strict=True))
        assert readings == sorted(readings, key=lambda r: (r.ts_ms, r.entity_id, r.event_id))
        for r in readings:
            key = (r.entity_id, r.ts_ms, r.event_id)
            assert key not in stored, f"{key} is in two sub-items"
            stored[key] = r
            assert sub_group_of(r.entity_id) == sub.sub
        # its version: the largest of its readings' winning copies, so at least every copy of them read
        assert header.version == max(r.measures["v"] for r in readings)
        held = {(r.entity_id, r.ts_ms, r.event_id) for r in readings}
        assert all(
            v <= header.version for v, rs in (*items, *blocks) for r in rs if (r.entity_id, r.ts_ms, r.event_id) in held
        )
        assert sub.key.table == "readings-t" and sub.key.pk == tier.sub_pk(group, START) and sub.group == group
        encoded = encode_group(readings, header.version, span_limit_ms=REPACK_MS)
        assert sub.key.sk == f"{sub_sk_stem(sub.sub, encoded)}#{sub.write_units}"
        assert sub.ttl == tier_ttl(T0, readings[-1].ts_ms, retention) and sub.origins == ()
        assert len(readings) <= MAX_BLOCK_READINGS and (sub.size <= MAX_BLOCK_ITEM_BYTES or len(readings) == 1)
    assert stored.keys() == expected.keys()
    assert all(same(stored[k], expected[k]) for k in expected)
    # the same copies make the same items: a redo puts what the first run put
    assert repack_slice(tier, group, START, items, blocks, table="readings-t", retention_ms=retention) == made


def test_a_sub_item_loses_to_a_block_copy_as_new_or_newer_and_beats_an_older_one() -> None:
    a, b, c = (copy_of(("d-1", START + n * 1000, f"e{n}"), 1) for n in range(3))
    other = copy_of(("d-2", START + 4000, "e9"), 30)
    items = [(10, [a, b, c]), (30, [other])]
    blocks = [(12, [dataclasses.replace(a, measures={"v": 2})]), (10, [b]), (4, [c])]
    made = repack_slice(WriteTier(1), 0, START, items, blocks, table="t")
    # a: the block's copy is newer; b: as new (a block copy stays where readers look); c: the item's is newer
    held = {r.event_id: sub for sub in made for r in sub.readings}
    assert set(held) == {"e2", "e9"}
    # c's sub-item is of version 10 (its copy's), or 30 when d-2 shares its sub-group: above c's block copy
    version = decode_group(held["e2"].encoded.payload, span_limit_ms=REPACK_MS)[0].version
    assert version == (30 if sub_group_of("d-1") == sub_group_of("d-2") else 10)


def test_a_sub_item_spans_up_to_its_slice_and_refuses_a_group_item_outside_it() -> None:
    first = copy_of(("d-1", START, "a"), 1)
    last = copy_of(("d-1", START + REPACK_MS - 1, "b"), 1)
    (sub,) = repack_slice(WriteTier(4), 1, START, [(1, [first]), (1, [last])], table="t")
    assert sub.readings == (first, last) and sub.last_ms - sub.first_ms == REPACK_MS - 1
    with pytest.raises(ValueError, match="holds a reading at"):
        repack_slice(WriteTier(4), 1, START, [(1, [copy_of(("d-1", START + REPACK_MS, "c"), 1)])], table="t")
    with pytest.raises(ValueError, match="not the start of a re-pack slice"):
        repack_slice(WriteTier(4), 1, START + 1, [], table="t")
