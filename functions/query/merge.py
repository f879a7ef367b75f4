"""The lazy, parallel k-way merge of partition reads.

Every partition of a plan becomes a :class:`PartitionStream`: an iterator over
its items in sort-key order that fetches one page (``LastEvaluatedKey``) at a
time, only when the merge needs its next item. The merge orders items by a
:class:`Position` ``(anchor, sk)``:

* per-entity reads: ``anchor`` is the item's timestamp, so the merge is in
  time order (ties broken by the sort key, which holds the event id);
* cross-entity reads: ``anchor`` is the start of the item's bucket (clipped
  to the range), so the order is bucket by bucket, and inside a bucket the
  partitions' own order (entity, then time).

Within one partition that is exactly the order DynamoDB returns, so a heap
merge of the streams is correct. A partition is opened (its first page
fetched) only once the merge could need it: when no open stream has an item
that must come first (its ``open_key``, the earliest position it can hold,
is not after the merge head). Partitions opened together are fetched in
parallel. When every open stream has run dry without yielding anything, the
next batch opened doubles in size (up to the concurrency window), so a run of
empty buckets costs a few round trips, not one per bucket, while dense data
never pays for speculative reads.

Items at the same position (the random layout's redelivered copies) are
returned once.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from adapters.partition_reader import Page, PageRequest, StoredReading
from keydesign import PartitionQuery


class Position(NamedTuple):
    """A place in the merged order, compared as a tuple."""

    anchor: str
    sk: str


#: Sorts after every sort key: closes the "anything at this anchor" range.
POSITION_MAX_SK = "\U0010ffff"

KeyOf = Callable[[StoredReading], Position]
Submit = Callable[[PageRequest], "Future[Page]"]


class BudgetExhausted(Exception):  # noqa: N818 - reads as the condition
    """More items were read than ``MergeOptions.max_scanned`` allows."""

    def __init__(self, scanned: int) -> None:
        self.scanned = scanned
        super().__init__(f"{scanned} items read")


@dataclass(slots=True)
class ReadStats:
    """What a request cost; only the merging thread writes it."""

    partitions_planned: int = 0
    partitions_queried: int = 0
    queries: int = 0
    scanned: int = 0
    read_units: float = 0.0
    missing_tables: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class MergeOptions:
    """``target``: the most items the consumer will take (None: all), which
    bounds each Query's ``Limit``; ``window``: partitions fetched at once;
    ``read_ahead``: ask for a partition's next page as soon as one arrives;
    ``prefetch``: keep the first pages of the next ``window`` partitions in
    flight (for reads that will need every partition); ``max_scanned``: the
    items a request may read before :class:`BudgetExhausted`."""

    descending: bool = False
    target: int | None = None
    window: int = 16
    read_ahead: bool = False
    prefetch: bool = False
    max_scanned: int | None = None


class PartitionStream:
    """One partition's items in merge order, fetched a page at a time."""

    __slots__ = (
        "_after",
        "_buffer",
        "_finished",
        "_future",
        "_key_of",
        "_next_key",
        "open_key",
        "partition",
        "sk_high",
        "sk_low",
        "submitted",
        "template",
    )

    def __init__(
        self,
        template: PageRequest,
        partition: PartitionQuery,
        *,
        key_of: KeyOf,
        open_key: Position,
        after: Position | None,
        sk_low: str | None = None,
        sk_high: str | None = None,
    ) -> None:
        # The request is built only when the partition is opened: a long plan
        # has thousands of partitions and a page opens a few of them.
        self.template = template
        self.partition = partition
        self.sk_low = sk_low
        self.sk_high = sk_high
        self.open_key = open_key
        self.submitted = False
        self._key_of = key_of
        self._after = after
        self._buffer: deque[tuple[Position, StoredReading]] = deque()
        self._next_key: Any = None
        self._future: Future[Page] | None = None
        self._finished = False

    def submit(self, merger: Merger, group: int = 1) -> None:
        self._fetch(merger, group)

    def _fetch(self, merger: Merger, group: int = 1) -> Future[Page]:
        request = replace(
            self.template,
            partition=self.partition,
            sk_low=self.sk_low,
            sk_high=self.sk_high,
            limit=merger.page_limit(group),
            start_key=self._next_key,
        )
        future = self._future = merger.submit(request)
        self.submitted = True
        return future

    def head(self, merger: Merger) -> tuple[Position, StoredReading] | None:
        """The next item, fetching pages until there is one or the partition ends."""
        while not self._buffer:
            future = self._future
            if future is None:
                if self._finished:
                    return None
                future = self._fetch(merger)
            page = future.result()
            self._future = None
            merger.account(page, self.partition.table)
            descending = self.template.descending
            after = self._after
            for item in page.items:
                key = self._key_of(item)
                # Skip what a previous page already returned (resume is strictly after).
                if after is None or (key < after if descending else key > after):
                    self._buffer.append((key, item))
            self._next_key = page.next_key
            if page.next_key is None:
                self._finished = True
            elif merger.options.read_ahead:
                self.submit(merger)
        return self._buffer[0]

    def pop(self) -> tuple[Position, StoredReading]:
        return self._buffer.popleft()


class _Entry:
    __slots__ = ("descending", "key", "seq", "stream")

    def __init__(self, key: Position, seq: int, stream: PartitionStream, descending: bool) -> None:
        self.key = key
        self.seq = seq
        self.stream = stream
        self.descending = descending

    def __lt__(self, other: _Entry) -> bool:
        if self.key != other.key:
            return self.key > other.key if self.descending else self.key < other.key
        return self.seq < other.seq


class Merger:
    """Merges ``streams`` (any order) into one iterator of ``(position, item)``."""

    def __init__(
        self, streams: Sequence[PartitionStream], submit: Submit, options: MergeOptions, stats: ReadStats
    ) -> None:
        self._streams = streams
        self.submit = submit
        self.options = options
        self.stats = stats
        self.yielded = 0
        stats.partitions_planned += len(streams)

    def page_limit(self, group: int) -> int | None:
        """``Limit`` of the next Query: no more than the consumer can still take
        (plus the one that tells it there is more), split over a group of
        partitions that share the range, and within the scan budget."""
        limit: int | None = None
        if self.options.target is not None:
            need = max(1, self.options.target - self.yielded)
            # Partitions of one group share the range's items: each is asked for
            # about twice its share; a partition that holds more is read again.
            limit = need if group <= 1 else min(need, math.ceil(2 * need / group) + 8)
        if self.options.max_scanned is not None:
            left = max(1, self.options.max_scanned - self.stats.scanned + 1)
            limit = left if limit is None else min(limit, left)
        return limit

    def account(self, page: Page, table: str) -> None:
        stats = self.stats
        stats.queries += 1
        stats.scanned += page.scanned
        stats.read_units += page.read_units
        if page.table_missing:
            stats.missing_tables.add(table)
        if self.options.max_scanned is not None and stats.scanned > self.options.max_scanned:
            raise BudgetExhausted(stats.scanned)

    def _may_hold(self, open_key: Position, head: Position) -> bool:
        """Could a stream that opens at ``open_key`` hold an item due before ``head``?"""
        return open_key >= head if self.options.descending else open_key <= head

    def __iter__(self) -> Iterator[tuple[Position, StoredReading]]:
        descending = self.options.descending
        pending = deque(sorted(self._streams, key=lambda s: s.open_key, reverse=descending))
        heap: list[_Entry] = []
        seq = itertools.count()
        last: Position | None = None
        last_batch = 0  # size of the last batch opened because every stream was dry
        yielded_before = 0
        while True:
            batch: list[PartitionStream] = []
            if heap:
                head = heap[0].key
                while pending and self._may_hold(pending[0].open_key, head):
                    batch.append(pending.popleft())
            elif pending:
                # Every open stream is dry: open the next group. If the last
                # batch held nothing the data is sparse, so open more behind it
                # (twice as many each time); if it held items, one group again.
                sparse = last_batch > 0 and self.yielded == yielded_before
                burst = min(self.options.window, 2 * last_batch) if sparse else 1
                first = pending[0].open_key
                while pending and (pending[0].open_key == first or len(batch) < burst):
                    batch.append(pending.popleft())
                last_batch, yielded_before = len(batch), self.yielded
            else:
                return
            if batch:
                self._open(batch, pending)
                for stream in batch:
                    found = stream.head(self)
                    if found is not None:
                        heapq.heappush(heap, _Entry(found[0], next(seq), stream, descending))
                continue
            entry = heapq.heappop(heap)
            key, item = entry.stream.pop()
            if key != last:
                last = key
                self.yielded += 1
                yield key, item
            found = entry.stream.head(self)
            if found is not None:
                heapq.heappush(heap, _Entry(found[0], next(seq), entry.stream, descending))

    def _open(self, batch: list[PartitionStream], pending: deque[PartitionStream]) -> None:
        groups = Counter(stream.open_key for stream in batch)
        for stream in batch:
            if not stream.submitted:
                stream.submit(self, groups[stream.open_key])
        if self.options.prefetch:
            for stream in itertools.islice(pending, self.options.window):
                if not stream.submitted:
                    stream.submit(self)
        self.stats.partitions_queried += len(batch)
