"""Packing a batch between blocks and group items (``keydesign.tiering.pack_batch``): every entry is
stored exactly once, the last copy of a reading winning; dense entities and late readings go to
blocks, the rest to group items within the block limits; a redelivery makes the same items."""

from __future__ import annotations

import random
import string
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from keydesign import Layout, Reading, ShardMap
from keydesign.blocks import (
    MAX_BLOCK_ITEM_BYTES,
    MAX_BLOCK_READINGS,
    MAX_BLOCK_SPAN_MS,
    decode_block,
    decode_group,
    read_header,
)
from keydesign.periods import DAY_MS
from keydesign.tiering import BatchPacking, pack_batch
from keydesign.writetier import (
    DENSE_READINGS,
    GRACE_MS,
    KEEP_MS,
    REPACK_MS,
    SLICE_MS,
    START_EVERY_MS,
    START_KEEP_MS,
    WriteTier,
    dense_mark_sk,
    hour_open,
    in_write_tier,
    repack_start,
    slice_start,
    tier_stamp,
)

from .strategies import ENTITIES, PROPERTY, layouts
from .test_blocks import T0

#: 06:30: readings from 06:30 on are in the write tier, of 06:00 to 06:29 late past their slice (blocks,
#: dense-marked: their hour is open), of 05:xx late
BATCH_START = T0 + 30 * 60_000
ENTITY_POOL = (*ENTITIES, "dev-1", "dev-2", "dev-3")


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[Reading, int]]:
    """Entries in arrival order (versions never decrease): copies of readings, late readings, an hour
    boundary (05:59:5x and 06:00:0x), the late edge (06:24:5x is late, 06:25:0x within the grace), a slice
    boundary (06:34:5x and 06:35:0x), and entities dense
    enough to keep their own blocks."""
    times = st.one_of(
        st.integers(T0 - 15_000, T0 + 15_000),  # across the hour boundary; 05:xx is late
        st.integers(BATCH_START - 20_000, BATCH_START + 20_000),
        st.integers(BATCH_START - REPACK_MS - 5_000, BATCH_START - REPACK_MS + 5_000),  # the late edge (grace)
        st.integers(BATCH_START + REPACK_MS - 5_000, BATCH_START + REPACK_MS + 5_000),  # a slice boundary
        st.integers(T0 + SLICE_MS - 5_000, T0 + SLICE_MS + 5_000),  # a later hour (clock skew)
    )
    one = st.tuples(st.sampled_from(ENTITY_POOL), times, st.sampled_from(("a", "b", None)), st.integers(0, 3))
    drawn = draw(st.lists(one, min_size=1, max_size=60))
    drawn += [(drawn[i][0], drawn[i][1], drawn[i][2], 9) for i in draw(st.lists(st.integers(0, len(drawn) - 1)))]
    entries: list[tuple[Reading, int]] = []
    version = 100
    for entity, ts, event_id, value in drawn:
        version += draw(st.integers(0, 2))
        raw: dict[str, object] = {"entity_id": entity, "timestamp": ts, "measures": {"v": value}}
        if event_id is not None:
            raw["event_id"] = event_id
        entries.append((Reading.parse(raw), version))
    return entries


def pack(entries: list[tuple[Reading, int]], tier: WriteTier, layout: Layout, seed: int = 1) -> BatchPacking:
    shard_map = ShardMap.initial(layout.bucket, 4)
    return pack_batch(
        entries,
        tier,
        layout,
        shard_map,
        batch_start_ms=BATCH_START,
        retention_ms=7 * 86_400_000,
        rng=random.Random(seed),
    )


def identity(reading: Reading) -> tuple[str, int, str]:
    return (reading.entity_id, reading.ts_ms, reading.event_id)


@PROPERTY
@given(entries=batches(), layout=layouts(), groups=st.integers(1, 5))
def test_every_entry_is_stored_once_in_a_block_or_a_group_item_and_its_last_copy_wins(
    entries: list[tuple[Reading, int]], layout: Layout, groups: int
) -> None:
    tier = WriteTier(groups)
    packing = pack(entries, tier, layout)
    items = [*packing.blocks, *packing.group_items]
    origins = Counter(i for item in items for i in item.origins)
    assert origins == Counter(range(len(entries)))  # every entry, once: never in a block and an item both
    last = {identity(r): (r, v) for r, v in entries}
    stored = [r for item in items for r in item.readings]
    assert len(stored) == len(last) == len({identity(r) for r in stored})
    for reading in stored:
        assert reading == last[identity(reading)][0]
    dense = {e for e, n in Counter(e for e, _, _ in last).items() if n >= DENSE_READINGS}
    for block in packing.blocks:
        for reading in block.readings:
            assert block.entity_id in dense or not in_write_tier(reading.ts_ms, BATCH_START)
    for item in packing.group_items:
        hour = slice_start(item.first_ms)
        assert hour >= slice_start(BATCH_START)  # never before the hour of the batch's start item (compaction)
        header, decoded = decode_group(item.encoded.payload)
        assert decoded == list(item.readings)
        assert header.version == max(last[identity(r)][1] for r in item.readings)
        assert len(item.readings) <= MAX_BLOCK_READINGS and item.size <= MAX_BLOCK_ITEM_BYTES
        assert item.last_ms - item.first_ms < MAX_BLOCK_SPAN_MS
        assert repack_start(item.first_ms) == repack_start(item.last_ms)  # one slice: the re-pack reads it by key
        assert item.key.pk == tier.group_pk(item.group, hour) and item.key.table == layout.table_for(hour)
        assert item.key.sk.endswith(f"#{item.write_units}")
        for reading in item.readings:
            assert tier.group_of(reading.entity_id) == item.group and slice_start(reading.ts_ms) == hour
            assert reading.entity_id not in dense and in_write_tier(reading.ts_ms, BATCH_START)
        assert item.ttl == min(hour + SLICE_MS + KEEP_MS, item.last_ms + 7 * 86_400_000) // 1000
    for block in packing.blocks:  # blocks decode as before
        assert decode_block(block.entity_id, block.encoded.payload)[1] == list(block.readings)
    # every block holding a reading whose hour is still in the write tier (a dense entity's, or one late
    # past its slice only) waits for its entity's dense mark of that hour
    needed = {
        (tier.group_pk(tier.group_of(b.entity_id), r.ts_ms), dense_mark_sk(b.entity_id), i)
        for i, b in enumerate(packing.blocks)
        for r in b.readings
        if hour_open(r.ts_ms, BATCH_START)
    }
    marked = {(m.pk, m.sk, i) for m, indexes in packing.dense_marks.items() for i in indexes}
    assert marked == needed
    # a redelivery of the batch makes the same items (the random layout: given the same draws)
    assert pack(entries, tier, layout) == packing


def test_a_start_item_outlives_every_group_item_of_the_batches_it_covers() -> None:
    # A container's start item of hour S covers its batches that start before S + START_EVERY_MS (then it
    # puts another), a container's stamps being its batches' starts less the grace (tier_stamp); such a
    # batch's readings lie at most max_future ahead of its start (the stack's bound: a day, infra.config),
    # and their group items expire KEEP_MS after their hour ends.
    start_hour = slice_start(tier_stamp(BATCH_START))
    last_batch = start_hour + START_EVERY_MS + GRACE_MS - 1
    latest_item_hour = slice_start(last_batch + DAY_MS)
    entries = [(Reading.parse({"entity_id": "dev-1", "timestamp": last_batch + DAY_MS, "measures": {"v": 1}}), 1)]
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    packing = pack_batch(
        entries,
        WriteTier(2),
        layout,
        ShardMap.initial(layout.bucket, 4),
        batch_start_ms=last_batch,
        retention_ms=30 * DAY_MS,
        rng=random.Random(1),
    )
    (item,) = packing.group_items
    assert slice_start(item.first_ms) == latest_item_hour
    assert item.ttl is not None and item.ttl <= (start_hour + START_KEEP_MS) // 1000


@given(layout=layouts(("calculated", "hybrid")))
@PROPERTY
def test_a_batch_regrouped_on_redelivery_still_stores_its_group_readings_in_the_same_partitions(
    layout: Layout,
) -> None:
    """A redelivered record in another batch makes other items, but in the same group partition: the
    reader keeps one copy of each reading (the newest), as for blocks."""
    tier = WriteTier(3)
    entries = [
        (Reading.parse({"entity_id": f"d{i}", "timestamp": BATCH_START + i, "measures": {"v": i}}), i) for i in range(6)
    ]
    whole, half = pack(entries, tier, layout), pack(entries[3:], tier, layout)
    where = {identity(r): item.key.pk for item in whole.group_items for r in item.readings}
    assert all(where[identity(r)] == item.key.pk for item in half.group_items for r in item.readings)


def test_a_dense_entity_keeps_its_blocks_and_marks_its_group_once_per_hour() -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="day")
    tier = WriteTier(32)
    hot = [
        (Reading.parse({"entity_id": "hot", "timestamp": T0 + SLICE_MS - 4_000 + 1_000 * i, "measures": {"v": i}}), 7)
        for i in range(DENSE_READINGS)
    ]  # 06:59:56 to 07:00:03: two hours, both in the write tier at 06:30
    sparse = [(Reading.parse({"entity_id": "cold", "timestamp": BATCH_START, "measures": {"v": 1}}), 8)]
    packing = pack(hot + sparse, tier, layout)
    assert [b.entity_id for b in packing.blocks] == ["hot", "hot"]  # cut at the hour's bucket
    assert [r.entity_id for item in packing.group_items for r in item.readings] == ["cold"]
    marks = sorted(packing.dense_marks.items(), key=lambda kv: kv[0].pk)
    group = tier.group_of("hot")
    assert [(m.pk, m.sk, m.table, blocks) for m, blocks in marks] == [
        (tier.group_pk(group, T0), "!dense#hot", "readings-2026-11-22", [0]),
        (tier.group_pk(group, T0 + SLICE_MS), "!dense#hot", "readings-2026-11-22", [1]),
    ]
    assert marks[0][0].item() == {"pk": marks[0][0].pk, "sk": "!dense#hot", "ttl": marks[0][0].ttl}
    assert marks[0][0].ttl == (T0 + SLICE_MS + KEEP_MS) // 1000
    # one reading fewer: the entity is sparse, and all its readings go to its group's items, no mark
    packing = pack(hot[1:] + sparse, tier, layout)
    assert not packing.blocks and not packing.dense_marks


def test_late_readings_go_to_blocks_without_marks() -> None:
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    late = [(Reading.parse({"entity_id": f"d{i}", "timestamp": T0 - 1 - i, "measures": {"v": i}}), 1) for i in range(3)]
    packing = pack(late, WriteTier(4), layout)
    assert len(packing.blocks) == 3 and not packing.group_items and not packing.dense_marks


def test_a_reading_of_a_slice_that_ended_within_the_grace_before_its_batch_still_goes_to_the_write_tier() -> None:
    # 06:29:59.999 (its slice ends at 06:30) in a batch that started at 06:30:30: within the grace (a minute)
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    tier = WriteTier(4)
    reading = Reading.parse({"entity_id": "d-1", "timestamp": BATCH_START - 1, "measures": {"v": 1}})
    shard_map = ShardMap.initial(layout.bucket, 4)
    packing = pack_batch([(reading, 1)], tier, layout, shard_map, batch_start_ms=BATCH_START + 30_000)
    assert not packing.blocks and not packing.dense_marks
    assert [r.entity_id for item in packing.group_items for r in item.readings] == ["d-1"]


def test_a_reading_late_past_its_slice_but_not_its_hour_goes_to_a_block_after_its_entitys_mark() -> None:
    # 06:29:59.999 in a batch that started at 06:31:01: its slice's grace had ended, its hour had not
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    tier = WriteTier(4)
    late = Reading.parse({"entity_id": "d-late", "timestamp": BATCH_START - 1, "measures": {"v": 1}})
    now = Reading.parse({"entity_id": "d-now", "timestamp": BATCH_START + 61_000, "measures": {"v": 2}})
    shard_map = ShardMap.initial(layout.bucket, 4)
    packing = pack_batch([(late, 1), (now, 1)], tier, layout, shard_map, batch_start_ms=BATCH_START + 61_000)
    assert [b.entity_id for b in packing.blocks] == ["d-late"]
    assert [r.entity_id for item in packing.group_items for r in item.readings] == ["d-now"]
    marks = [(m.pk, m.sk, blocks) for m, blocks in packing.dense_marks.items()]
    assert marks == [(tier.group_pk(tier.group_of("d-late"), T0), "!dense#d-late", [0])]


def test_group_items_are_cut_by_count_span_and_size() -> None:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    rng = random.Random(5)
    noise = "".join(rng.choice(string.ascii_letters) for _ in range(200_000))
    entries = [
        (
            Reading.parse(
                {
                    "entity_id": f"dev-{i:05d}",
                    "timestamp": BATCH_START + i * 7,  # 2,500 readings over 17.5 s
                    "measures": {"v": i},
                    "dimensions": {"note": noise[i * 60 : i * 60 + 60]} if i < 1_500 else {},
                }
            ),
            1,
        )
        for i in range(2_500)
    ]
    items = pack(entries, WriteTier(1), layout).group_items
    assert sum(len(item.readings) for item in items) == 2_500
    assert all(read_header(i.encoded.payload, group=True).count == len(i.readings) for i in items)
    assert max(len(item.readings) for item in items) == MAX_BLOCK_READINGS  # the plain readings: by count
    assert max(item.size for item in items) <= MAX_BLOCK_ITEM_BYTES
    assert any(len(item.readings) < 700 for item in items[:3])  # the noisy ones: by size
    assert all(item.last_ms - item.first_ms < MAX_BLOCK_SPAN_MS for item in items)
