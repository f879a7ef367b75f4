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

A merge may also stop before its consumer is satisfied: once ``max_queries``
Query calls have been started, or at ``deadline``. It then ends its iteration
and leaves ``stopped`` (why) and ``frontier``: a position such that every item
at or before it (in merge order) has been yielded and nothing after it has.
That is the last item yielded, or, when every partition opened so far ran dry,
the ``open_key`` of the first partition not yet opened, so a run of empty
partitions read before the stop is not read again. A stop never comes before
the merge has moved past where it started (the first batch of partitions is
always opened, and the call cap only counts once the frontier has moved), so
following frontiers always makes progress; only the deadline can end a merge
that has not.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
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
#: Sorts before every sort key: with an anchor, "nothing at this anchor yet".
POSITION_MIN_SK = ""


def narrows(position: Position) -> bool:
    """Whether a resume at ``position`` narrows a partition's sort-key range: an
    anchor's open or close (``POSITION_MIN_SK``/``POSITION_MAX_SK``) does not,
    since every item of the anchor lies on the right side of it."""
    return position.sk not in (POSITION_MIN_SK, POSITION_MAX_SK)


#: Why a merge stopped before its consumer was satisfied.
STOP_DEADLINE = "deadline"
STOP_QUERY_CALLS = "query_calls"

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
    items a request may read before :class:`BudgetExhausted`; ``max_queries``:
    Query calls the merge may start before it stops; ``deadline``: the
    :func:`time.monotonic` instant at which it stops, even while waiting."""

    descending: bool = False
    target: int | None = None
    window: int = 16
    read_ahead: bool = False
    prefetch: bool = False
    max_scanned: int | None = None
    max_queries: int | None = None
    deadline: float | None = None


class _Stop(Exception):  # noqa: N818 - internal signal, never leaves the merge
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


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

    def speculate(self, merger: Merger) -> None:
        """Ask for the next page ahead of need, unless the budget is spent."""
        if merger.over_budget() is None:
            self._fetch(merger)

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
        merger.started += 1
        self.submitted = True
        return future

    def head(self, merger: Merger) -> tuple[Position, StoredReading] | None:
        """The next item, fetching pages until there is one or the partition ends."""
        while not self._buffer:
            future = self._future
            if future is None:
                if self._finished:
                    return None
                reason = merger.over_budget()
                if reason is not None:
                    raise _Stop(reason)
                future = self._fetch(merger)
            try:
                page = future.result(timeout=merger.wait_s())
            except FutureTimeout:
                raise _Stop(STOP_DEADLINE) from None
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
                self.speculate(merger)
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
        #: Query calls started (``stats.queries`` counts those answered).
        self.started = 0
        #: Why the merge stopped early (None: it ran to the end or its consumer stopped it).
        self.stopped: str | None = None
        #: Every item at or before this position has been yielded (see the module doc).
        self.frontier: Position | None = None
        self._moved = False
        stats.partitions_planned += len(streams)

    def over_budget(self) -> str | None:
        """Why no further Query may start, or None. The call cap holds only once
        the frontier has moved, so every merge makes progress."""
        options = self.options
        if options.deadline is not None and time.monotonic() >= options.deadline:
            return STOP_DEADLINE
        if options.max_queries is not None and self._moved and self.started >= options.max_queries:
            return STOP_QUERY_CALLS
        return None

    def wait_s(self) -> float | None:
        """How long a fetch may still be waited for."""
        if self.options.deadline is None:
            return None
        return max(0.0, self.options.deadline - time.monotonic())

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
        try:
            yield from self._merge()
        except _Stop as stop:
            self.stopped = stop.reason

    def _merge(self) -> Iterator[tuple[Position, StoredReading]]:
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
                if batch and (reason := self.over_budget()) is not None:
                    raise _Stop(reason)
            elif pending:
                # Every stream opened so far ran dry: nothing before the next
                # one's earliest position is left unread.
                self.frontier = pending[0].open_key
                self._moved = self._moved or last_batch > 0
                if (reason := self.over_budget()) is not None:
                    raise _Stop(reason)
                # Open the next group. If the last batch held nothing the data
                # is sparse, so open more behind it (twice as many each time);
                # if it held items, one group again.
                sparse = last_batch > 0 and self.yielded == yielded_before
                burst = min(self.options.window, 2 * last_batch) if sparse else 1
                if self.options.max_queries is not None:
                    burst = min(burst, max(1, self.options.max_queries - self.started))
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
                self.frontier = key
                self._moved = True
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
                    stream.speculate(self)
        self.stats.partitions_queried += len(batch)
