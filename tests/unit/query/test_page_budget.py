"""Every page stops within its budget (Query calls, deadline) and its cursor resumes
exactly where it stopped, including in the middle of a run of empty partitions."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.partition_reader import Page, PageRequest
from doubles.memory_dynamo import MemoryReader
from keydesign import Layout, Reading, ShardMap, format_ts, parse_timestamp
from query.errors import ScanLimitExceeded
from query.logic import QueryService
from query.models import ReadingsPage
from query.params import Order, PageArgs, TimeRange
from query.settings import DEFAULT_LIMIT, QueryLimits
from tests.unit.query.apigw import memory_service

NOW = parse_timestamp("2026-11-22T12:00:00Z")
HOUR = 3_600_000
MINUTE = 60_000
START = NOW - 48 * HOUR
ENTITIES = ("a-1", "b-2", "c-3", "d-4")


class CountingReader:
    """Counts Query calls, optionally taking ``delay_s`` over each."""

    def __init__(self, inner: MemoryReader, delay_s: float = 0.0) -> None:
        self.inner = inner
        self.delay_s = delay_s
        self.calls = 0
        self._lock = threading.Lock()

    def read_page(self, request: PageRequest) -> Page:
        with self._lock:
            self.calls += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.inner.read_page(request)


def service(
    store: MemoryReader | CountingReader, *, kind: str = "hybrid", shards: int = 4, **limits: Any
) -> QueryService:
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    return memory_service(
        layout, ShardMap.initial(layout.bucket, shards), store, now_ms=NOW, limits=QueryLimits(**limits)
    )


def stored(readings: list[tuple[int, int]], *, kind: str = "hybrid", shards: int = 4) -> MemoryReader:
    """An in-memory table holding one reading per (entity index, minute since START)."""
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, shards)
    store = MemoryReader(page_items=3)
    store.tables.add("readings")
    entries = [
        (Reading(ENTITIES[entity], f"ev{n:04d}", START + minute * MINUTE, {"v": n}), 1)
        for n, (entity, minute) in enumerate(readings)
    ]
    store.store(layout, shard_map, entries)
    return store


def window(from_ms: int, to_ms: int = NOW) -> TimeRange:
    return TimeRange(from_ms, to_ms)


def follow(
    read: Any, span: TimeRange, *, limit: int = DEFAULT_LIMIT, order: Order = "asc", **params: Any
) -> list[ReadingsPage]:
    pages: list[ReadingsPage] = []
    cursor = None
    for _ in range(10_000):
        page = read(page=PageArgs(span, limit, cursor, order), **params)
        assert isinstance(page, ReadingsPage)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return pages
    raise AssertionError("the cursors never reached the end of the range")


def test_an_empty_day_is_read_in_pages_that_stop_at_the_call_cap() -> None:
    # Given an empty store, 4 shards, 1-hour buckets: 96 partitions in a day
    reader = CountingReader(stored([]))
    svc = service(reader, max_query_calls=20)

    # When a cross-entity day is read page by page
    pages = follow(svc.range_readings, window(NOW - 24 * HOUR))

    # Then no page passes the cap by more than one bucket's shards, every page but
    # the last is cut short with a cursor further on, and the day is read once
    assert all(page.cost.queries <= 20 + 4 for page in pages)
    assert [page.complete for page in pages] == [False] * (len(pages) - 1) + [True]
    assert {page.cut_short_by for page in pages[:-1]} == {"query_calls"}
    reached = [parse_timestamp(page.reached, "reached") for page in pages]
    assert reached == sorted(reached) and len(set(reached)) == len(reached)
    assert reached[-1] == NOW
    assert reader.calls == 96


def test_a_page_cut_in_an_empty_run_resumes_after_the_empty_partitions_it_read() -> None:
    # Given one reading at the end of a silent day
    store = stored([(0, 48 * 60 - 1)])
    reader = CountingReader(store)
    svc = service(reader, max_query_calls=10)

    # When the entity's day is read with a cap of 10 calls per page
    pages = follow(svc.entity_readings, window(NOW - 24 * HOUR), entity="a-1")

    # Then the reading comes once, and no partition is queried twice
    assert [item.event_id for page in pages for item in page.items] == ["ev0000"]
    assert reader.calls == 24
    assert pages[0].complete is False and pages[0].cut_short_by == "query_calls"
    assert pages[0].count == 0 and pages[0].reached > format_ts(NOW - 24 * HOUR)


def test_a_page_stops_at_the_deadline_even_while_a_query_is_in_flight() -> None:
    # Given a store whose every Query takes 2 s, and 300 ms left before the margin
    reader = CountingReader(stored([(1, 60)]), delay_s=2.0)
    svc = service(reader, response_margin_ms=2_000)

    # When a page is asked for
    started = time.monotonic()
    page = svc.range_readings(PageArgs(window(NOW - 24 * HOUR), DEFAULT_LIMIT), time_left_ms=2_300)
    elapsed = time.monotonic() - started

    # Then it answers at the deadline, cut short, with a cursor from where it started
    assert isinstance(page, ReadingsPage)
    assert elapsed < 1.5
    assert page.complete is False and page.cut_short_by == "deadline"
    assert page.next_cursor is not None and page.count == 0
    assert page.reached == format_ts(NOW - 24 * HOUR)


def test_deadline_cut_pages_followed_return_everything() -> None:
    # Given readings spread over a day, and Query calls of 20 ms
    readings = [(n % 4, 24 * 60 + 37 * n) for n in range(30)]
    reader = CountingReader(stored(readings), delay_s=0.02)
    svc = service(reader)

    # When every page has 100 ms
    pages = follow(svc.range_readings, window(NOW - 24 * HOUR), limit=1000, time_left_ms=2_100)

    # Then some pages were cut by the deadline, and together they hold every reading once
    assert any(page.cut_short_by == "deadline" for page in pages)
    got = [item.event_id for page in pages for item in page.items]
    assert sorted(got) == sorted(f"ev{n:04d}" for n in range(30)) and len(got) == 30


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_a_resumed_page_cut_by_the_deadline_before_any_read_hands_back_where_it_resumed(order: Order) -> None:
    # Given a page that stopped inside an hour's bucket (two readings a page, four in the bucket)
    svc = service(stored([(0, 24 * 60 + 1), (1, 24 * 60 + 2), (2, 24 * 60 + 3), (3, 24 * 60 + 4)]))
    span = window(NOW - 24 * HOUR)
    first = svc.range_readings(PageArgs(span, 2, None, order))
    assert isinstance(first, ReadingsPage) and first.count == 2 and first.next_cursor is not None
    # When the next page's deadline has passed before it reads anything
    cut = svc.range_readings(PageArgs(span, 2, first.next_cursor, order), time_left_ms=2_000)
    # Then it is cut short and hands back the cursor it was given, not one behind it (which would
    # return the page's readings again)
    assert isinstance(cut, ReadingsPage) and cut.count == 0 and cut.cut_short_by == "deadline"
    assert cut.next_cursor == first.next_cursor
    rest = follow(svc.range_readings, span, limit=2, order=order)
    assert len([item for page in rest for item in page.items]) == 4


def test_an_aggregate_past_the_call_cap_is_refused_saying_how_far_it_got() -> None:
    svc = service(CountingReader(stored([(0, 47 * 60)])), max_query_calls=10)

    with pytest.raises(ScanLimitExceeded) as refused:
        svc.aggregates("a-1", window(NOW - 24 * HOUR), HOUR)

    assert refused.value.parameter == "to"
    assert "10 Query calls" in refused.value.reason
    assert "after reading [2026-11-21T12:00:00.000Z, 2026-11-21T" in refused.value.reason


sparse = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 48 * 60 - 1)), max_size=25)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    readings=sparse,
    cap=st.integers(1, 6),
    limit=st.integers(1, 7),
    span=st.tuples(st.integers(0, 47), st.integers(1, 48)),
    descending=st.booleans(),
    entity=st.sampled_from([None, 0, 2]),
    kind=st.sampled_from(["hybrid", "calculated"]),
)
def test_following_cursors_returns_exactly_the_range_in_order_once(  # noqa: PLR0917 - Hypothesis passes them
    readings: list[tuple[int, int]],
    cap: int,
    limit: int,
    span: tuple[int, int],
    descending: bool,
    entity: int | None,
    kind: str,
) -> None:
    """Property: for random sparse data and tiny call caps, following cursors returns
    exactly the readings in range, in the route's order, each once."""
    if entity is None:
        kind = "hybrid"  # cross-entity reads need it
    shards = 3
    store = stored(readings, kind=kind, shards=shards)
    svc = service(store, kind=kind, shards=shards, max_query_calls=cap)
    first = min(span[0], span[1] - 1)
    from_ms, to_ms = START + first * HOUR - 7 * MINUTE, START + span[1] * HOUR + 11 * MINUTE
    order: Order = "desc" if descending else "asc"

    if entity is None:
        pages = follow(svc.range_readings, window(from_ms, to_ms), limit=limit, order=order)
    else:
        pages = follow(svc.entity_readings, window(from_ms, to_ms), limit=limit, order=order, entity=ENTITIES[entity])

    def position(n: int) -> tuple[Any, ...]:
        who, minute = readings[n]
        ms = START + minute * MINUTE
        if entity is None:  # bucket by bucket, then entity, time, event id
            return (max(from_ms, ms - ms % HOUR), ENTITIES[who], ms, f"ev{n:04d}")
        return (ms, f"ev{n:04d}")

    wanted = [
        n
        for n, (who, minute) in enumerate(readings)
        if from_ms <= START + minute * MINUTE < to_ms and (entity is None or who == entity)
    ]
    expected = [f"ev{n:04d}" for n in sorted(wanted, key=position, reverse=descending)]
    got = [item.event_id for page in pages for item in page.items]
    assert got == expected
    assert all(page.count <= limit for page in pages)
    assert pages[-1].complete


def test_a_page_of_an_empty_month_plans_only_the_buckets_it_can_reach() -> None:
    # Given 100 shards and 1-hour buckets: 74,400 partitions in 31 days
    svc = service(CountingReader(stored([], shards=100)), shards=100)

    # When the first page of an empty month is read, and then the last, descending
    month = window(NOW - 31 * 24 * HOUR)
    first = svc.range_readings(PageArgs(month, DEFAULT_LIMIT))
    last = svc.range_readings(PageArgs(month, DEFAULT_LIMIT, order="desc"))

    # Then each plans a few buckets, stays within the cap plus one bucket, and moves on
    for page in (first, last):
        assert isinstance(page, ReadingsPage)
        assert page.cost.partitions_planned <= 500
        assert page.cost.queries <= 200 + 100
        assert page.complete is False and page.next_cursor is not None
    assert first.reached > format_ts(NOW - 31 * 24 * HOUR) and last.reached < format_ts(NOW)
