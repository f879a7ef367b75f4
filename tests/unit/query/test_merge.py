"""The lazy parallel k-way merge, on an in-memory reader with DynamoDB's paging semantics."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.partition_reader import Page, PageRequest, StoredReading
from keydesign import PartitionQuery, format_ts
from query.merge import (
    POSITION_MAX_SK,
    BudgetExhausted,
    MergeOptions,
    Merger,
    PartitionStream,
    Position,
    ReadStats,
)
from tests.unit.query.fakes import FakeItem, InMemoryReader

T0 = 1_795_000_000_000
TABLE = "readings"


def item(ts_ms: int, eid: str, entity: str = "e1") -> FakeItem:
    ts = format_ts(ts_ms)
    return FakeItem(sk=f"{ts}#{eid}", entity_id=entity, ts=ts, event_id=eid, measures={"v": ts_ms - T0})


def time_key(found: StoredReading) -> Position:
    return Position(found.ts, found.sk)


def stream(
    pk: str, from_ms: int, to_ms: int, *, descending: bool = False, after: Position | None = None
) -> PartitionStream:
    part = PartitionQuery(TABLE, pk, format_ts(from_ms), f"{format_ts(to_ms - 1)}#~", from_ms, to_ms)
    sk_low = sk_high = None
    if after is not None:
        sk_high, sk_low = (after.sk, None) if descending else (None, after.sk)
    open_key = Position(format_ts(to_ms - 1), POSITION_MAX_SK) if descending else Position(format_ts(from_ms), "")
    template = PageRequest(part, descending=descending)
    return PartitionStream(
        template, part, key_of=time_key, open_key=open_key, after=after, sk_low=sk_low, sk_high=sk_high
    )


def run(
    reader: InMemoryReader, streams: list[PartitionStream], options: MergeOptions, take: int | None = None
) -> tuple[list[Position], ReadStats]:
    stats = ReadStats()
    with ThreadPoolExecutor(max_workers=4) as pool:

        def submit(request: PageRequest) -> Future[Page]:
            return pool.submit(reader.read_page, request)

        merged: Iterator[tuple[Position, StoredReading]] = iter(Merger(streams, submit, options, stats))
        keys = [key for key, _ in itertools.islice(merged, take)]
    return keys, stats


def test_partitions_are_merged_in_time_order_and_each_followed_through_its_pages() -> None:
    # Given three partitions over one range, items interleaved, 2 items per page
    reader = InMemoryReader(page_items=2)
    for n in range(3):
        reader.add(TABLE, f"e1#{n}", [item(T0 + t, f"x{t:03d}") for t in range(n, 30, 3)])
    streams = [stream(f"e1#{n}", T0, T0 + 100) for n in range(3)]

    keys, stats = run(reader, streams, MergeOptions())

    assert [k.anchor for k in keys] == [format_ts(T0 + t) for t in range(30)]
    assert stats.queries >= 15  # every page of every partition was read


def test_descending_is_the_exact_reverse() -> None:
    reader = InMemoryReader(page_items=3)
    for n in range(3):
        reader.add(TABLE, f"e1#{n}", [item(T0 + t, f"x{t:03d}") for t in range(n, 30, 3)])

    asc, _ = run(reader, [stream(f"e1#{n}", T0, T0 + 100) for n in range(3)], MergeOptions())
    desc, _ = run(
        reader, [stream(f"e1#{n}", T0, T0 + 100, descending=True) for n in range(3)], MergeOptions(descending=True)
    )

    assert desc == asc[::-1]


def test_a_reading_stored_in_two_partitions_comes_once() -> None:
    reader = InMemoryReader()
    reader.add(TABLE, "e1#0", [item(T0 + 1, "a"), item(T0 + 2, "b")])
    reader.add(TABLE, "e1#1", [item(T0 + 2, "b"), item(T0 + 3, "c")])

    keys, _ = run(reader, [stream("e1#0", T0, T0 + 10), stream("e1#1", T0, T0 + 10)], MergeOptions())

    assert [k.sk.split("#")[1] for k in keys] == ["a", "b", "c"]


def test_resuming_after_a_position_skips_exactly_what_was_returned() -> None:
    # Given many readings in the same millisecond spread over partitions
    reader = InMemoryReader()
    for n in range(3):
        reader.add(TABLE, f"e1#{n}", [item(T0 + 5, f"x{k:02d}") for k in range(n, 12, 3)])
    every, _ = run(reader, [stream(f"e1#{n}", T0, T0 + 10) for n in range(3)], MergeOptions())
    after = every[4]

    # When the merge resumes after the fifth
    rest, _ = run(reader, [stream(f"e1#{n}", T0, T0 + 10, after=after) for n in range(3)], MergeOptions())

    # Then it continues with the sixth, nothing skipped, nothing repeated
    assert rest == every[5:]


def test_later_buckets_are_not_opened_while_earlier_ones_fill_the_page() -> None:
    # Given ten one-bucket partitions in time order, each with five readings
    reader = InMemoryReader()
    for b in range(10):
        reader.add(TABLE, f"b{b}", [item(T0 + b * 100 + t, f"x{t}") for t in range(5)])
    streams = [stream(f"b{b}", T0 + b * 100, T0 + (b + 1) * 100) for b in range(10)]

    # When a page of 7 (+1) is taken
    keys, stats = run(reader, streams, MergeOptions(target=8), take=8)

    # Then only the two buckets that hold them were queried
    assert len(keys) == 8
    assert {r.partition.pk for r in reader.requests} == {"b0", "b1"}
    assert stats.partitions_queried == 2


def test_sparse_ranges_open_batches_that_double() -> None:
    # Given sixteen empty buckets before one that holds data
    reader = InMemoryReader()
    reader.add(TABLE, "b16", [item(T0 + 1600 + t, f"x{t}") for t in range(3)])
    for b in range(16):
        reader.add(TABLE, f"b{b}", [])
    streams = [stream(f"b{b}", T0 + b * 100, T0 + (b + 1) * 100) for b in range(17)]

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
    keys = [key for key, _ in itertools.islice(iter(merger), 2)]

    # Then the buckets were opened 1, 2, 4, 8 at a time, then the last two: five rounds, not seventeen
    assert len(keys) == 2
    assert stats.partitions_queried == 17
    assert [len(list(group)) for _, group in itertools.groupby(rounds)] == [1, 2, 4, 8, 2]


def test_query_limits_never_exceed_what_the_page_can_use() -> None:
    reader = InMemoryReader()
    for n in range(8):
        reader.add(TABLE, f"e1#{n}", [item(T0 + t, f"x{t:03d}") for t in range(n, 400, 8)])
    streams = [stream(f"e1#{n}", T0, T0 + 1000) for n in range(8)]

    keys, _ = run(reader, streams, MergeOptions(target=21), take=21)

    assert len(keys) == 21
    first_round = reader.requests[:8]
    # Eight partitions share the range: each is asked for about twice its share
    assert all(r.limit == 2 * 21 // 8 + 1 + 8 for r in first_round)
    assert all(r.limit is not None and r.limit <= 21 for r in reader.requests)


def test_a_skewed_partition_is_read_again_until_the_page_is_full() -> None:
    # Given every reading in one of eight partitions
    reader = InMemoryReader()
    reader.add(TABLE, "e1#0", [item(T0 + t, f"x{t:03d}") for t in range(100)])
    for n in range(1, 8):
        reader.add(TABLE, f"e1#{n}", [])
    streams = [stream(f"e1#{n}", T0, T0 + 1000) for n in range(8)]

    keys, _ = run(reader, streams, MergeOptions(target=51), take=51)

    assert [k.anchor for k in keys] == [format_ts(T0 + t) for t in range(51)]


def test_reading_more_than_the_budget_stops_the_merge() -> None:
    reader = InMemoryReader(page_items=10)
    reader.add(TABLE, "e1#0", [item(T0 + t, f"x{t:03d}") for t in range(100)])

    with pytest.raises(BudgetExhausted) as caught:
        run(reader, [stream("e1#0", T0, T0 + 1000)], MergeOptions(max_scanned=35, read_ahead=True))

    assert caught.value.scanned > 35
    # Each Query asked for no more than the budget had left (plus one, to prove the overrun)
    assert all(r.limit is not None and r.limit <= 36 for r in reader.requests)


def test_a_missing_table_reads_as_empty_and_is_reported() -> None:
    reader = InMemoryReader()
    reader.add(TABLE, "e1#0", [item(T0 + 1, "a")])
    gone = PartitionQuery("readings-2020-01", "e1#0", None, None, T0, T0 + 10)
    streams = [
        stream("e1#0", T0, T0 + 10),
        PartitionStream(PageRequest(gone), gone, key_of=time_key, open_key=Position(format_ts(T0), ""), after=None),
    ]

    keys, stats = run(reader, streams, MergeOptions())

    assert len(keys) == 1
    assert stats.missing_tables == {"readings-2020-01"}


partition_data = st.lists(
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from("abcdef")), max_size=25), min_size=1, max_size=6
)


@settings(max_examples=150, deadline=None)
@given(
    data=partition_data,
    page=st.integers(1, 9),
    page_items=st.integers(1, 7),
    descending=st.booleans(),
    overlapping=st.booleans(),
)
def test_paging_by_position_neither_skips_nor_repeats(
    data: list[list[tuple[int, str]]], page: int, page_items: int, descending: bool, overlapping: bool
) -> None:
    """Property: following positions page by page yields every distinct item once, in order."""
    reader = InMemoryReader(page_items=page_items)
    segments: list[tuple[str, int, int]] = []
    truth: set[Position] = set()
    for n, rows in enumerate(data):
        # Overlapping partitions share the whole range; otherwise each owns a slice of time.
        start, end = (0, 41) if overlapping else (n * 41, (n + 1) * 41)
        items = [item(T0 + start + t % (end - start), eid) for t, eid in rows]
        reader.add(TABLE, f"p{n}", items)
        segments.append((f"p{n}", T0 + start, T0 + end))
        truth.update(Position(i.ts, i.sk) for i in items)
    expected = sorted(truth, reverse=descending)

    got: list[Position] = []
    after: Position | None = None
    for _ in range(len(expected) + 2):
        streams = [stream(pk, lo, hi, descending=descending, after=after) for pk, lo, hi in segments]
        keys, _ = run(reader, streams, MergeOptions(descending=descending, target=page + 1), take=page + 1)
        got.extend(keys[:page])
        if len(keys) <= page:
            break
        after = keys[page - 1]

    assert got == expected
