"""The lazy parallel k-way merge of block streams, on an in-memory reader with DynamoDB's paging semantics."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.partition_reader import CorruptBlock, Page, PageRequest, StoredBlock
from doubles.memory_dynamo import MemoryReader
from keydesign import Block, Layout, PartitionQuery, Reading, ShardMap, format_ts, parse_timestamp
from keydesign.blocks import MAX_BLOCK_SPAN_MS, read_header
from keydesign.layouts import ItemKey
from query.merge import (
    FIRST_PAGE_BLOCKS,
    POSITION_MAX_SK,
    STOP_SCAN_ITEMS,
    MergeOptions,
    Merger,
    PartitionStream,
    Placement,
    Position,
    ReadStats,
)

T0 = 1_795_000_000_000 - 1_795_000_000_000 % 3_600_000  # an hour boundary
TABLE = "readings"
LAYOUT = Layout.from_settings(kind="calculated", bucket="1h", table_prefix=TABLE)
SHARD_MAP = ShardMap.initial(LAYOUT.bucket, 1)
PLACEMENT = Placement(LAYOUT, "e1")


def reading(ms: int, eid: str, value: int | None = None) -> Reading:
    return Reading("e1", eid, T0 + ms, {"v": ms if value is None else value})


def put(reader: MemoryReader, pk: str, version: int, readings: Sequence[Reading]) -> list[Block]:
    """One ingest batch of ``version`` holding ``readings``, stored in partition ``pk``."""
    blocks = [
        dataclasses.replace(block, key=ItemKey(TABLE, pk, block.key.sk))
        for block in LAYOUT.pack([(r, version) for r in readings], SHARD_MAP)
    ]
    reader.add(blocks)
    return blocks


def stream(
    pk: str,
    from_ms: int,
    to_ms: int,
    *,
    descending: bool = False,
    after: Position | None = None,
    placement: Placement = PLACEMENT,
) -> PartitionStream:
    low, high = T0 + from_ms, T0 + to_ms
    sk_range = LAYOUT.block_sk_from("e1", low), LAYOUT.block_sk_through("e1", high - 1)
    part = PartitionQuery(TABLE, pk, *sk_range, low, high)
    sk_low = sk_high = None
    if after is not None:
        at = parse_timestamp(after.anchor)
        if descending:
            sk_high = LAYOUT.block_sk_through("e1", at)
        else:
            sk_low = LAYOUT.block_sk_from("e1", at)
    open_key = Position(format_ts(high - 1), POSITION_MAX_SK) if descending else Position(format_ts(low), "")
    return PartitionStream(
        PageRequest(part, descending=descending),
        part,
        placement=placement,
        open_key=open_key,
        after=after,
        sk_low=sk_low,
        sk_high=sk_high,
    )


def run(
    reader: MemoryReader, streams: list[PartitionStream], options: MergeOptions, take: int | None = None
) -> tuple[list[tuple[Position, Reading]], ReadStats, Merger]:
    stats = ReadStats()
    with ThreadPoolExecutor(max_workers=4) as pool:

        def submit(request: PageRequest) -> Future[Page]:
            return pool.submit(reader.read_page, request)

        merger = Merger(streams, submit, options, stats)
        merged: Iterator[tuple[Position, Reading]] = iter(merger)
        found = list(itertools.islice(merged, take))
    return found, stats, merger


def ids(found: list[tuple[Position, Reading]]) -> list[str]:
    return [r.event_id for _, r in found]


def test_partitions_are_merged_in_time_order_and_each_followed_through_its_pages() -> None:
    # Given three partitions over one range, readings interleaved, a batch per 5 readings, 2 blocks per page
    reader = MemoryReader(page_items=2)
    for n in range(3):
        mine = [reading(t * 4000, f"x{t:03d}") for t in range(n, 30, 3)]
        for start in range(0, len(mine), 5):
            put(reader, f"e1#{n}", start, mine[start : start + 5])

    found, stats, _ = run(reader, [stream(f"e1#{n}", 0, 200_000) for n in range(3)], MergeOptions())

    assert ids(found) == [f"x{t:03d}" for t in range(30)]
    assert stats.queries >= 6  # every page of every partition was read


def test_overlapping_blocks_come_out_in_order_and_the_newest_copy_of_a_reading_wins() -> None:
    # Given, in one partition, three batches whose blocks overlap in time, two of them
    # holding a reading (x005) that a later batch corrected
    reader = MemoryReader(page_items=1)
    put(reader, "e1#0", 1, [reading(t * 1000, f"x{t:03d}") for t in range(0, 9, 2)])  # 0 2 4 6 8 s
    put(reader, "e1#0", 2, [reading(t * 1000, f"x{t:03d}") for t in (1, 3, 5, 7)])
    put(reader, "e1#0", 3, [reading(5000, "x005", value=-1), reading(9000, "x009")])

    for descending in (False, True):
        found, _, _ = run(
            reader, [stream("e1#0", 0, 60_000, descending=descending)], MergeOptions(descending=descending)
        )

        order = [f"x{t:03d}" for t in range(10)]
        assert ids(found) == (order[::-1] if descending else order)
        assert {r.event_id: r.measures["v"] for _, r in found}["x005"] == -1


def test_a_reading_stored_in_two_partitions_comes_once_as_its_newest_version_has_it() -> None:
    reader = MemoryReader()
    put(reader, "e1#0", 7, [reading(1, "a"), reading(2, "b", value=70)])
    put(reader, "e1#1", 9, [reading(2, "b", value=90), reading(3, "c")])
    put(reader, "e1#2", 8, [reading(2, "b", value=80)])

    for descending in (False, True):
        streams = [stream(f"e1#{n}", 0, 10, descending=descending) for n in range(3)]
        found, _, _ = run(reader, streams, MergeOptions(descending=descending))

        assert sorted(ids(found)) == ["a", "b", "c"]
        assert [r.measures["v"] for _, r in found if r.event_id == "b"] == [90]


def test_resuming_inside_a_block_skips_exactly_what_was_returned() -> None:
    # Given many readings in one millisecond and around it, in overlapping blocks of three partitions
    reader = MemoryReader()
    for n in range(3):
        put(reader, f"e1#{n}", n, [reading(5, f"x{k:02d}") for k in range(n, 12, 3)])
        put(reader, f"e1#{n}", 10 + n, [reading(t, f"y{t}") for t in range(n, 9, 3)])
    every, _, _ = run(reader, [stream(f"e1#{n}", 0, 10) for n in range(3)], MergeOptions())

    for descending in (False, True):
        ordered = every[::-1] if descending else every
        for cut in range(len(ordered) - 1):
            after = ordered[cut][0]
            streams = [stream(f"e1#{n}", 0, 10, descending=descending, after=after) for n in range(3)]
            rest, _, _ = run(reader, streams, MergeOptions(descending=descending))

            assert rest == ordered[cut + 1 :]


def test_blocks_outside_the_range_or_before_the_resume_point_are_not_decoded() -> None:
    # Given blocks of 10 readings over 2.7 s, one every 10 s, and one more at 29.0-29.9 s
    reader = MemoryReader()
    for b in range(6):
        put(reader, "e1#0", b, [reading(b * 10_000 + t * 300, f"x{b}{t}") for t in range(10)])
    put(reader, "e1#0", 9, [reading(29_000 + t * 100, f"y{t}") for t in range(10)])

    # When [25 s, 32 s) is read (its blocks start from 15 s: the one at 20 s is in the key range)
    found, stats, _ = run(reader, [stream("e1#0", 25_000, 32_000)], MergeOptions())
    # and read again after the fifth reading of the block at 30 s
    after = found[-3][0]
    rest, resumed, _ = run(reader, [stream("e1#0", 25_000, 32_000, after=after)], MergeOptions())

    # Then only the blocks that hold readings wanted were decoded: the one at 20 s ends before
    # the range, and the one at 29 s before the resume point
    assert ids(found) == [f"y{t}" for t in range(10)] + [f"x3{t}" for t in range(7)]
    assert ids(rest) == ["x35", "x36"]
    assert stats.decoded == 20
    assert resumed.decoded == 10


def test_expired_readings_are_dropped_and_expired_blocks_not_decoded() -> None:
    reader = MemoryReader()
    put(reader, "e1#0", 1, [reading(t * 1000, f"x{t}") for t in range(5)])  # 0..4 s
    put(reader, "e1#0", 2, [reading(20_000 + t * 1000, f"y{t}") for t in range(5)])  # 20..24 s
    live = dataclasses.replace(PLACEMENT, live_from_ms=T0 + 22_000)

    found, stats, _ = run(reader, [stream("e1#0", 0, 60_000, placement=live)], MergeOptions())

    assert ids(found) == ["y2", "y3", "y4"]
    assert stats.decoded == 5


def test_later_buckets_are_not_opened_while_earlier_ones_fill_the_page() -> None:
    # Given ten one-bucket partitions in time order, each with five readings
    reader = MemoryReader()
    for b in range(10):
        put(reader, f"b{b}", b, [reading(b * 100 + t, f"x{t}") for t in range(5)])
    streams = [stream(f"b{b}", b * 100, (b + 1) * 100) for b in range(10)]

    # When a page of 7 (+1) is taken
    found, stats, _ = run(reader, streams, MergeOptions(target=8), take=8)

    # Then only the two buckets that hold them were queried
    assert len(found) == 8
    assert {r.partition.pk for r in reader.requests} == {"b0", "b1"}
    assert stats.partitions_queried == 2


def test_sparse_ranges_open_batches_that_double() -> None:
    # Given sixteen empty buckets before one that holds data
    reader = MemoryReader()
    put(reader, "b16", 1, [reading(1600 + t, f"x{t}") for t in range(3)])
    reader.tables.add(TABLE)
    streams = [stream(f"b{b}", b * 100, (b + 1) * 100) for b in range(17)]

    rounds: list[int] = []
    done: list[Page] = []

    class Deferred:
        """Runs the read when the merge waits for it, so rounds are observable."""

        def __init__(self, request: PageRequest) -> None:
            self.request = request
            rounds.append(len(done))  # reads finished before this one was asked for

        def result(self, timeout: float | None = None) -> Page:
            page = reader.read_page(self.request)
            done.append(page)
            return page

    stats = ReadStats()
    merger = Merger(streams, Deferred, MergeOptions(target=2, window=16), stats)  # type: ignore[arg-type]
    found = list(itertools.islice(iter(merger), 2))

    # Then the buckets were opened 1, 2, 4, 8 at a time, then the last two: five rounds, not seventeen
    assert len(found) == 2
    assert stats.partitions_queried == 17
    assert [len(list(group)) for _, group in itertools.groupby(rounds)] == [1, 2, 4, 8, 2]


def test_a_hot_partition_is_read_a_few_blocks_at_a_time() -> None:
    # Given an entity whose blocks hold 500 readings each (one per 10 ms)
    reader = MemoryReader()
    for b in range(20):
        put(reader, "e1#0", b, [reading(b * 5000 + t * 10, f"x{b:02d}{t:03d}") for t in range(500)])

    # When a page of 100 (+1) is taken
    found, stats, _ = run(reader, [stream("e1#0", 0, 100_000)], MergeOptions(target=101), take=101)

    # Then one Query of FIRST_PAGE_BLOCKS blocks served it, and only the first block was decoded
    assert len(found) == 101
    assert [r.limit for r in reader.requests] == [FIRST_PAGE_BLOCKS]
    assert stats.scanned == FIRST_PAGE_BLOCKS and stats.decoded == 500


def test_a_sparse_partition_grows_its_limit_to_what_the_page_needs() -> None:
    # Given an entity whose every reading is alone in its block
    reader = MemoryReader()
    for t in range(400):
        put(reader, "e1#0", t, [reading(t * 1000, f"x{t:03d}")])

    found, _, _ = run(reader, [stream("e1#0", 0, 400_000)], MergeOptions(target=101), take=101)

    # Then after the first small Query, one more asks for what the page needs, as soon as the first
    # block is decoded (the readings at hand cannot fill the page)
    limits = [r.limit for r in reader.requests]
    assert ids(found) == [f"x{t:03d}" for t in range(101)]
    assert limits == [FIRST_PAGE_BLOCKS, 101 + 1]


def dealt(readings: int, *, partitions: int) -> tuple[MemoryReader, list[PartitionStream]]:
    """``readings`` seconds of one reading each, alone in its block, dealt in turn to ``partitions``
    partitions sharing a range; and a stream of each partition."""
    reader = MemoryReader()
    for n in range(partitions):
        for t in range(n, readings, partitions):
            put(reader, f"e1#{n}", t, [reading(t * 1000, f"x{t:03d}")])
    return reader, [stream(f"e1#{n}", 0, 1_000_000) for n in range(partitions)]


def test_partitions_read_together_wait_for_their_next_pages_together() -> None:
    # Given 16 partitions sharing a range, each reading alone in its block
    reader, streams = dealt(640, partitions=16)
    clock = [0]  # round trips: a call sent at round r is answered at round r + 1

    class Deferred:
        def __init__(self, request: PageRequest) -> None:
            self.request, self.sent = request, clock[0]

        def result(self, timeout: float | None = None) -> Page:
            clock[0] = max(clock[0], self.sent + 1)
            return reader.read_page(self.request)

    # When a page of 100 (+1) is taken
    merger = Merger(streams, Deferred, MergeOptions(target=101), ReadStats())  # type: ignore[arg-type]
    found = list(itertools.islice(iter(merger), 101))

    # Then each partition's second Query went out as soon as its first block was decoded: two round
    # trips in all, not one more per partition that runs out of blocks
    assert ids(found) == [f"x{t:03d}" for t in range(101)]
    assert clock[0] == 2


def test_query_limits_split_a_groups_share_at_the_density_seen() -> None:
    reader, streams = dealt(400, partitions=8)

    found, _, _ = run(reader, streams, MergeOptions(target=21), take=21)

    assert len(found) == 21
    first, second = reader.requests[:8], reader.requests[8:16]
    assert [r.limit for r in first] == [FIRST_PAGE_BLOCKS] * 8
    # At one reading per block each partition's second Query asks for about twice its share of the
    # page (ceil(2 x 21 / 8) + 8 readings, and the block that bounds them), not for the whole page
    assert {r.partition.pk for r in second} == {f"e1#{n}" for n in range(8)}
    assert all(r.limit is not None and r.limit <= 14 + 1 for r in second)
    # and one read again asks for no more than the page can use
    assert all(r.limit is not None and r.limit <= 21 + 1 for r in reader.requests)


def test_the_decoding_budget_stops_a_merge_that_has_moved_and_only_then() -> None:
    # Given 40 blocks of 10 readings, and a budget of 35 readings
    reader = MemoryReader(page_items=3)
    for b in range(40):
        put(reader, "e1#0", b, [reading(b * 10_000 + t, f"x{b:02d}{t}") for t in range(10)])

    found, stats, merger = run(reader, [stream("e1#0", 0, 400_000)], MergeOptions(max_decoded=35))

    # Then it stopped, no block decoded once it had 35, with what it had returned: its frontier is the last
    assert merger.stopped == STOP_SCAN_ITEMS
    assert stats.decoded == 40
    assert merger.frontier == found[-1][0] and len(found) >= 30

    # And a budget smaller than the first block still returns something: a merge always moves
    found, _, merger = run(reader, [stream("e1#0", 0, 400_000)], MergeOptions(max_decoded=3))
    assert merger.stopped == STOP_SCAN_ITEMS and len(found) >= 1


def test_a_missing_table_reads_as_empty_and_is_reported() -> None:
    reader = MemoryReader()
    put(reader, "e1#0", 1, [reading(1, "a")])
    gone = PartitionQuery("readings-2020-01", "e1#0", None, None, T0, T0 + 10)
    streams = [
        stream("e1#0", 0, 10),
        PartitionStream(PageRequest(gone), gone, placement=PLACEMENT, open_key=Position(format_ts(T0), ""), after=None),
    ]

    found, stats, _ = run(reader, streams, MergeOptions())

    assert len(found) == 1
    assert stats.missing_tables == {"readings-2020-01"}


def _body_cut(payload: bytes) -> bytes:
    return payload[: read_header(payload).body_at] + b"not deflate"


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda sk, payload: (f"{format_ts(T0 + 40_000)}#junk", payload), "the sort key is not a block's"),
        (lambda sk, payload: (sk, b""), "the payload is empty"),
        (lambda sk, payload: (sk, _body_cut(payload)), "the checksum does not match"),
        (lambda sk, payload: (sk, b"\x09" + payload[1:]), "block format 9"),
    ],
)
def test_a_block_that_does_not_decode_fails_the_read_naming_it(damage: Any, reason: str) -> None:
    # Given a partition whose second block is damaged
    reader = MemoryReader()
    first, second = (put(reader, "e1#0", v, [reading(v * 20_000, f"x{v}")])[0] for v in (1, 2))
    rows = reader.partitions[(TABLE, "e1#0")]
    sk, payload = damage(second.key.sk, second.encoded.payload)
    rows[1] = dataclasses.replace(rows[1], block=StoredBlock(sk, payload), sk=sk)
    rows.sort(key=lambda row: row.sk)

    # When it is read, it fails with the block's key and what is wrong, rather than skipping it
    with pytest.raises(CorruptBlock) as failed:
        run(reader, [stream("e1#0", 0, 60_000)], MergeOptions())

    assert (failed.value.table, failed.value.pk, failed.value.sk) == (TABLE, "e1#0", sk)
    assert reason in failed.value.reason
    assert first.key.sk != failed.value.sk


batches = st.lists(
    st.tuples(
        st.integers(0, 3),  # partition
        st.lists(st.tuples(st.integers(0, 30_000), st.sampled_from("abcdef"), st.integers(0, 9)), max_size=12),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(data=batches, page=st.integers(1, 9), page_items=st.integers(1, 4), descending=st.booleans())
def test_paging_by_position_returns_the_newest_copy_of_each_reading_once_in_order(
    data: list[tuple[int, list[tuple[int, str, int]]]], page: int, page_items: int, descending: bool
) -> None:
    """Property: batches (each a version) store readings in overlapping blocks of any partition, copies and
    corrections included; following positions page by page yields every reading once, its newest copy, in order."""
    reader = MemoryReader(page_items=page_items)
    reader.tables.add(TABLE)
    newest: dict[tuple[int, str], tuple[int, int]] = {}
    for version, (partition, rows) in enumerate(data):
        batch = {(ms, eid): value for ms, eid, value in rows}
        if batch:
            put(reader, f"e1#{partition}", version, [reading(ms, eid, value) for (ms, eid), value in batch.items()])
        for key, value in batch.items():
            newest[key] = (version, value)
    expected = sorted(((ms, eid, value) for (ms, eid), (_, value) in newest.items()), reverse=descending)

    got: list[tuple[int, str, int | float]] = []
    after: Position | None = None
    for _ in range(len(expected) + 2):
        streams = [stream(f"e1#{n}", 0, 30_001, descending=descending, after=after) for n in range(4)]
        found, _, _ = run(reader, streams, MergeOptions(descending=descending, target=page + 1), take=page + 1)
        got.extend((r.ts_ms - T0, r.event_id, r.measures["v"]) for _, r in found[:page])
        if len(found) <= page:
            break
        after = found[page - 1][0]

    assert got == expected


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(("random", "calculated", "hybrid")),
    bucket=st.sampled_from(("1m", "5m", "1h", "1d")),
    offsets=st.lists(st.integers(0, 3 * 86_400_000), min_size=1, max_size=5),
    entity=st.sampled_from(("e1", "sensor.a/b:c", "x" * 128)),
)
def test_what_a_stream_reads_from_a_sort_key_is_what_the_layout_says_of_it(
    kind: str, bucket: str, offsets: list[int], entity: str
) -> None:
    layout = Layout.from_settings(kind=kind, bucket=bucket, table_prefix=TABLE)
    shard_map = ShardMap.initial(layout.bucket, 3)
    blocks = layout.pack([(Reading(entity, "e", T0 + ms, {"v": 1}), 1) for ms in offsets], shard_map)
    for block in blocks:
        # What the key alone says: the block's first reading, and a span on inside its bucket.
        prefix = f"{entity}#" if layout.can.shared_partitions else ""
        first = format_ts(block.first_ms)
        bucket_end = layout.bucket.start(block.first_ms) + layout.bucket.width_ms
        last = format_ts(min(block.first_ms + MAX_BLOCK_SPAN_MS, bucket_end) - 1)
        part = PartitionQuery(TABLE, block.key.pk, None, None, 0, 1)
        for placement, anchor in ((Placement(layout, entity), None), (Placement(layout, None), "anchor")):
            if placement.entity is None and not layout.can.shared_partitions:
                continue  # cross-entity reads are the hybrid layout's only
            stored = StoredBlock(block.key.sk, block.encoded.payload)
            up = placement.reach(part, stored, anchor, descending=False)
            down = placement.reach(part, stored, anchor, descending=True)
            assert (up.first_ms, up.entity) == (down.first_ms, down.entity) == (block.first_ms, entity)
            assert up.bound == (anchor or first, f"{prefix}{first}")
            assert down.bound == (anchor or last, f"{prefix}{last}#~")
            for reading in block.readings:
                assert up.bound.sk <= layout.reading_key(entity, reading.ts, reading.event_id) <= down.bound.sk
