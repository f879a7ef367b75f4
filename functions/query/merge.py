"""The lazy, parallel k-way merge of partition reads.

Every partition of a plan becomes a :class:`PartitionStream`: an iterator over
its readings in merge order that fetches one page of blocks
(``LastEvaluatedKey``) at a time, and decodes one block at a time, only when
the merge needs its next reading. The merge orders readings by a
:class:`Position` ``(anchor, reading key)``, the reading key being
``Layout.reading_key`` (the sort key a reading alone would have):

* per-entity reads: ``anchor`` is the reading's timestamp, so the merge is in
  time order (ties broken by the reading key, which holds the event id);
* cross-entity reads: ``anchor`` is the start of the partition's bucket
  (clipped to the range), so the order is bucket by bucket, and inside a
  bucket by entity, then time.

**Blocks and copies.** How a stream orders the readings of blocks that overlap
in time (a reorder buffer, one sorted run per block, released past the bound
the next undecoded block sets, :meth:`Placement.reach`), and why a reading
stored in several blocks comes once, as its newest version, is docs/query.md,
"Blocks". A block whose header (first and last reading, no decompression)
shows it holds nothing the read wants (outside the partition's time range,
past retention, or wholly before the resume position) is never decoded.

Within one partition that is exactly the order of the blocks' readings, so a
heap merge of the streams is correct. A partition is opened (its first page
fetched) only once the merge could need it: when no open stream has a
reading that must come first (its ``open_key``, the earliest position it can
hold, is not after the merge head). Partitions opened together are fetched
in parallel. When every open stream has run dry without yielding anything,
the next batch opened doubles in size (up to the concurrency window), so a
run of empty buckets costs a few round trips, not one per bucket, while
dense data never pays for speculative reads.

A merge may also stop before its consumer is satisfied: once ``max_queries``
Query calls have been started, once it has decoded ``max_decoded`` readings,
or at ``deadline``. It then ends its iteration and leaves ``stopped`` (why)
and ``frontier``: a position such that every reading at or before it (in
merge order) has been yielded and nothing after it has. That is the last
reading yielded, or, when every partition opened so far ran dry, the
``open_key`` of the first partition not yet opened, so a run of empty
partitions read before the stop is not read again; never a position before
the one a resumed read started from (a page cut before it read anything
hands back the cursor it was given). A stop never comes before
the merge has moved past where it started (the first batch of partitions is
always opened, and the call cap and the decoding budget only count once the
frontier has moved), so following frontiers always makes progress; only the
deadline can end a merge that has not.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, NamedTuple

from adapters.partition_reader import CorruptBlock, Page, PageRequest, StoredBlock, decode, header_of
from keydesign import KeyDesignError, Layout, PartitionQuery, Reading, format_ts
from keydesign.blocks import HIGH, MAX_BLOCK_SPAN_MS
from keydesign.layouts import GROUPED_KINDS
from keydesign.timefmt import second_text, stamp_ms
from keydesign.writetier import REPACK_MS, SLICE_MS, repack_start, slice_start


class Position(NamedTuple):
    """A place in the merged order, compared as a tuple."""

    anchor: str
    sk: str


#: Builds a named tuple (a Position, a _Fetched) as the tuple it is, on the hot paths: a named
#: tuple's own ``__new__`` is Python code.
_new = tuple.__new__
#: Sorts after every sort key: closes the "anything at this anchor" range.
POSITION_MAX_SK = "\U0010ffff"
#: Sorts before every sort key: with an anchor, "nothing at this anchor yet".
POSITION_MIN_SK = ""
#: Blocks the first Query of a read asks for: the fewest from which a reading can be
#: emitted (the second block bounds what the first may release). Later Queries ask for
#: as many as the readings still wanted fill, at the density seen so far.
FIRST_PAGE_BLOCKS = 2
_TS_CHARS = 24


def narrows(position: Position) -> bool:
    """Whether a resume at ``position`` narrows a partition's sort-key range: an
    anchor's open or close (``POSITION_MIN_SK``/``POSITION_MAX_SK``) does not,
    since every reading of the anchor lies on the right side of it."""
    return position.sk not in (POSITION_MIN_SK, POSITION_MAX_SK)


#: Why a merge stopped before its consumer was satisfied (a page's ``cut_short_by`` says the same).
Stop = Literal["deadline", "query_calls", "scan_items"]
STOP_DEADLINE: Final = "deadline"
STOP_QUERY_CALLS: Final = "query_calls"
STOP_SCAN_ITEMS: Final = "scan_items"

Submit = Callable[[PageRequest], "Future[Page]"]


@dataclass(slots=True)
class ReadStats:
    """What a request cost; only the merging thread writes it. ``scanned`` counts the
    items (blocks) DynamoDB evaluated, ``decoded`` the readings decompressed from them."""

    partitions_planned: int = 0
    partitions_queried: int = 0
    queries: int = 0
    scanned: int = 0
    read_units: float = 0.0
    decoded: int = 0
    missing_tables: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class MergeOptions:
    """``target``: the most readings the consumer will take (None: all), which
    bounds each Query's ``Limit``; ``window``: partitions fetched at once;
    ``read_ahead``: ask for a partition's next page as soon as one arrives;
    ``prefetch``: keep the first pages of the next ``window`` partitions in
    flight (for reads that will need every partition); ``max_decoded``: the
    readings a request may decode; ``max_queries``: Query calls the merge may
    start before it stops; ``deadline``: the :func:`time.monotonic` instant at
    which it stops, even while waiting."""

    descending: bool = False
    target: int | None = None
    window: int = 16
    read_ahead: bool = False
    prefetch: bool = False
    max_decoded: int | None = None
    max_queries: int | None = None
    deadline: float | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a read's readings go in the merged order; one per read, shared by its streams.

    ``entity``: the entity of a per-entity read, None for a cross-entity read (each
    block's entity is then in its sort key). ``live_from_ms``: readings older than
    this are past retention (DynamoDB's rule, expiry below now, solved for the time).
    """

    layout: Layout
    entity: str | None
    live_from_ms: int = 0

    def reach(self, partition: PartitionQuery, block: StoredBlock, anchor: str | None, *, descending: bool) -> _Fetched:
        """What the sort key of ``block`` says of it before it is decoded: its first reading, and
        the lowest (ascending) or highest (descending) position it can hold, with the first
        reading's time and entity; the anchor of a cross-entity read is filled in. An item of the
        format before blocks is a block of one reading (``keydesign.legacy``).

        The partition's kind says the sort key's shape and how far past its first reading an item
        reaches: a group item (the write tier's) has no entity prefix and holds many entities' readings
        of one hour, so across entities it bounds nothing (:meth:`reads_whole`); a sub-item is read for
        one entity only (its sub-group's prefix, then a group item's key), spanning up to its slice; a
        cluster block the same (its cluster's prefix), spanning up to its hour, and across entities read
        whole as a group partition is; a compacted block spans up to an hour of its bucket."""
        # <prefix><first ts> | #<block id>#<write units>, or before blocks <prefix><ts> | #<event id>
        sk, kind = block.sk, partition.kind
        layout = self.layout
        start = sk.find("#") + 1 if kind in ("sub", "cluster") or layout.sk_entity_prefixed(kind) else 0
        cut = start + _TS_CHARS
        low = sk[:cut]
        try:
            if sk[cut : cut + 1] != "#" or sk.count("#", cut) != (1 if block.legacy is not None else 2):
                raise ValueError("not <time>#<block id>#<write units> (or <time>#<event id> before blocks)")
            first_ms = stamp_ms(low[start:])
        except (KeyDesignError, ValueError):
            raise CorruptBlock(partition.table, partition.pk, sk, "the sort key is not a block's") from None
        if kind in GROUPED_KINDS:
            entity = self.entity or ""
            if not entity:  # a cross-entity read sorts a group partition whole: nothing is released before
                return _Fetched(first_ms, entity, Position(anchor or "", POSITION_MAX_SK if descending else ""))
            key, stamp = layout.reading_key, low[start:]
            if not descending:
                return _Fetched(first_ms, entity, Position(stamp, key(entity, stamp, "")))
            if kind == "sub":  # a sub-item lies in its slice
                end = repack_start(first_ms) + REPACK_MS
            elif kind == "cluster":  # a cluster block in its hour
                end = slice_start(first_ms) + SLICE_MS
            else:
                end = min(first_ms + MAX_BLOCK_SPAN_MS, slice_start(first_ms) + SLICE_MS)
            last = format_ts(end - 1)
            return _Fetched(first_ms, entity, Position(last, key(entity, last, HIGH)))
        entity = self.entity if self.entity is not None else low[: start - 1]
        if not descending:
            return _new(_Fetched, (first_ms, entity, _new(Position, (anchor or low[-_TS_CHARS:], low))))
        bucket = layout.bucket
        end = first_ms + partition.span_limit_ms
        if kind == "blocks" or layout.can.shared_partitions:  # a block lies in its bucket (hybrid: its partition's)
            end = min(end, bucket.start(first_ms) + bucket.width_ms)
        if kind == "compacted":  # and a compacted block in its hour
            end = min(end, slice_start(first_ms) + SLICE_MS)
        last = format_ts(end - 1)
        return _new(_Fetched, (first_ms, entity, _new(Position, (anchor or last, f"{low[:-_TS_CHARS]}{last}#{HIGH}"))))

    def reads_whole(self, partition: PartitionQuery) -> bool:
        """Whether a stream of ``partition`` decodes all of its range before it yields: a group
        partition in a cross-entity read, whose items are in time order across entities while the
        read is in entity order (its range is one group's hour at most); a cluster partition too (its items
        are in time order per cluster)."""
        return partition.kind in ("group", "cluster") and self.entity is None

    def span(self, entity: str, first_ms: int, last_ms: int, anchor: str | None) -> tuple[Position, Position]:
        """Positions at or below, and at or above, every reading of ``entity`` in ``[first_ms, last_ms]``."""
        first, last = format_ts(first_ms), format_ts(last_ms)
        key = self.layout.reading_key
        return Position(anchor or first, key(entity, first, "")), Position(anchor or last, key(entity, last, HIGH))


class _Fetched(NamedTuple):
    """A fetched block's first reading and entity, and the bound of the positions it can hold."""

    first_ms: int
    entity: str
    bound: Position


class _Stop(Exception):  # noqa: N818 - internal signal, never leaves the merge
    def __init__(self, reason: Stop) -> None:
        self.reason: Stop = reason
        super().__init__(reason)


class _Run:
    """The readings one decoded block adds to a stream, in merge order, and the block's version."""

    __slots__ = ("at", "descending", "items", "key", "reading", "version")

    def __init__(self, items: list[tuple[Position, Reading]], version: int, descending: bool) -> None:
        self.items = items
        self.at = 0
        self.version = version
        self.descending = descending
        self.key, self.reading = items[0]

    def advance(self) -> bool:
        self.at += 1
        if self.at == len(self.items):
            return False
        self.key, self.reading = self.items[self.at]
        return True

    def __lt__(self, other: _Run) -> bool:
        if self.key != other.key:
            return self.key > other.key if self.descending else self.key < other.key
        return self.version > other.version  # a reading's newest copy first


class PartitionStream:
    """One partition's readings in merge order, fetched a page of blocks at a time."""

    __slots__ = (
        "_after",
        "_anchor",
        "_blocks",
        "_finished",
        "_future",
        "_group",
        "_high_ms",
        "_lookback",
        "_low_ms",
        "_next_key",
        "_runs",
        "open_key",
        "partition",
        "placement",
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
        placement: Placement,
        open_key: Position,
        after: Position | None,
        anchor: str | None = None,
        sk_low: str | None = None,
        sk_high: str | None = None,
        lookback: str | None = None,
    ) -> None:
        # The request is built only when the partition is opened: a long plan
        # has thousands of partitions and a page opens a few of them.
        self.template = template
        self.partition = partition
        self.placement = placement
        self.sk_low = sk_low
        self.sk_high = sk_high
        self.open_key = open_key
        self.submitted = False
        self._anchor = anchor
        self._after = after
        self._low_ms = max(partition.from_ms, placement.live_from_ms)
        self._high_ms = partition.to_ms
        # Fetched, not yet decoded: each block with what its sort key says of it.
        self._blocks: deque[tuple[StoredBlock, _Fetched]] = deque()
        # Decoded, not yet emitted: a heap of runs by their next reading.
        self._runs: list[_Run] = []
        # An ascending read resumed at an instant first reads the blocks that start by it (from
        # ``sk_low``, a span before it, to ``lookback``) in one Query: their number is that span's
        # worth of data, not something ``Limit`` can size from the readings the page needs.
        self._lookback = lookback
        self._group = 1  # partitions opened together that share this one's range (submit sets it)
        self._next_key: Any = None
        self._future: Future[Page] | None = None
        self._finished = False

    def submit(self, merger: Merger, group: int = 1) -> None:
        self._group = group
        self._fetch(merger)

    def speculate(self, merger: Merger) -> None:
        """Ask for the next page ahead of need, unless the budget is spent."""
        if merger.over_budget() is None:
            self._fetch(merger)

    def _fetch(self, merger: Merger) -> Future[Page]:
        lookback = self._lookback
        limit = None
        if lookback is None and not self.placement.reads_whole(self.partition):  # read whole: 1 MB pages
            limit = merger.page_limit(self._group)
            if merger.density_known():
                # The first Limit sized by the readings per block is its share of the group's range;
                # a partition read again after that holds more than its share: the page's need.
                self._group = 1
        request = replace(
            self.template,
            partition=self.partition,
            sk_low=self.sk_low,
            sk_high=self.sk_high if lookback is None else lookback,
            limit=limit,
            start_key=self._next_key,
        )
        future = self._future = merger.submit(request)
        merger.started += 1
        self.submitted = True
        return future

    def head(self, merger: Merger) -> _Run | None:
        """The run holding the next reading, once no block still unread can hold an earlier one;
        None when the partition has no more. Fetches and decodes only as far as that needs."""
        descending = self.template.descending
        blocks, runs = self._blocks, self._runs
        while True:
            if blocks:
                if runs:
                    key, bound = runs[0].key, blocks[0][1].bound
                    if key > bound if descending else key < bound:
                        return runs[0]
                self._decode(*blocks.popleft(), merger)
                # The page's last block only bounds the readings decoded: past them, the next page
                # is needed. Ask for it now if they may not be enough, so that partitions read in
                # parallel wait for it in parallel.
                if (
                    len(blocks) == 1
                    and self._future is None
                    and not self._finished
                    and merger.wants_more(sum(len(run.items) - run.at for run in runs))
                ):
                    self.speculate(merger)
            elif self._future is None and self._finished:
                return runs[0] if runs else None
            else:
                self._receive(merger)

    def pop(self) -> tuple[Position, Reading]:
        runs = self._runs
        run = runs[0]
        found = run.key, run.reading
        if not run.advance():
            heapq.heappop(runs)
        elif len(runs) > 1:
            heapq.heapreplace(runs, run)  # re-sift the run whose next reading came up
        return found

    def _receive(self, merger: Merger) -> None:
        future = self._future
        if future is None:
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
        descending, anchor, part, placement = self.template.descending, self._anchor, self.partition, self.placement
        self._blocks.extend(
            (block, placement.reach(part, block, anchor, descending=descending)) for block in page.blocks
        )
        self._next_key = page.next_key
        if page.next_key is None:
            lookback = self._lookback
            highs = [high for high in (self.partition.sk_high, self.sk_high) if high is not None]
            if lookback is None or page.table_missing or (highs and min(highs) <= lookback):
                self._finished = True
            else:  # the look-back is read: on from the first block that starts after it
                self.sk_low, self._lookback = lookback, None
        if not self._finished and merger.options.read_ahead:
            self.speculate(merger)

    def _decode(self, block: StoredBlock, fetched: _Fetched, merger: Merger) -> None:
        """Add ``block``'s wanted readings to the reorder buffer, unless it provably has none. Its
        sort key says where it starts; when that is near the range's start or the resume point,
        its header (no decompression) says where it ends."""
        part, placement, after, anchor = self.partition, self.placement, self._after, self._anchor
        descending = self.template.descending
        low_ms, high_ms = self._low_ms, self._high_ms
        first_ms, entity, bound = fetched
        if first_ms >= high_ms:
            return
        # Wholly on the wanted side of the range's start and the resume point, from its key alone?
        inside = first_ms >= low_ms and (after is None or (bound < after if descending else bound > after))
        whole = placement.reads_whole(part)
        if not inside:
            header = header_of(part, block)
            # (a group item's or sub-item's readings are mostly other entities': none counts as the read's)
            seen = 0 if part.kind in GROUPED_KINDS else header.count
            if header.last_ms < low_ms:
                merger.looked_at(seen)
                return
            if after is not None and not whole:
                lowest, highest = placement.span(entity, header.first_ms, header.last_ms, anchor)
                if lowest >= after if descending else highest <= after:
                    merger.looked_at(seen)
                    return  # an earlier page returned all of it
        merger.will_decode()
        header, readings = decode(part, block, None if whole else entity)
        merger.decoded(header.count, len(readings))
        if descending:
            readings.reverse()
        prefixed = placement.layout.can.shared_partitions
        beyond = None if inside else after  # readings at or before it were returned by an earlier page
        items: list[tuple[Position, Reading]] = []
        # The hot loop of a page (once per reading decoded): Position built as the tuple it is
        # (NamedTuple's own __new__ is Python code), the time formatted through the per-second cache,
        # the reading key (Layout.reading_key) written out.
        new, text_of_second = _new, second_text
        for reading in readings:
            ms = reading.ts_ms
            if low_ms <= ms < high_ms:
                ts = f"{text_of_second(ms // 1000)}.{ms % 1000:03d}Z"
                sk = f"{reading.entity_id}#{ts}#{reading.event_id}" if prefixed else f"{ts}#{reading.event_id}"
                key = new(Position, (anchor or ts, sk))
                if beyond is None or (key < beyond if descending else key > beyond):
                    items.append((key, reading))
        if items:
            if whole:  # a group item's readings are in time order; the read's order is by entity first
                items.sort(key=_first, reverse=descending)
            heapq.heappush(self._runs, _Run(items, header.version, descending))


def _first(item: tuple[Position, Reading]) -> Position:
    return item[0]


class _Entry:
    __slots__ = ("descending", "key", "seq", "stream", "version")

    def __init__(self, run: _Run, seq: int, stream: PartitionStream, descending: bool) -> None:
        self.key = run.key
        self.version = run.version
        self.seq = seq
        self.stream = stream
        self.descending = descending

    def __lt__(self, other: _Entry) -> bool:
        if self.key != other.key:
            return self.key > other.key if self.descending else self.key < other.key
        if self.version != other.version:
            return self.version > other.version  # a reading's newest copy first
        return self.seq < other.seq


class Merger:
    """Merges ``streams`` (any order) into one iterator of ``(position, reading)``."""

    def __init__(
        self,
        streams: Sequence[PartitionStream],
        submit: Submit,
        options: MergeOptions,
        stats: ReadStats,
        start: Position | None = None,
    ) -> None:
        """``start``: the position a resumed read goes on from (its cursor's); the frontier never falls behind it."""
        self._streams = streams
        self.submit = submit
        self.options = options
        self.stats = stats
        self.yielded = 0
        #: Query calls started (``stats.queries`` counts those answered).
        self.started = 0
        #: Why the merge stopped early (None: it ran to the end or its consumer stopped it).
        self.stopped: Stop | None = None
        #: Every reading at or before this position has been yielded (see the module doc).
        self.frontier: Position | None = start
        self._moved = False
        # Blocks whose header was read, and the readings they hold: the density Limits are set by.
        self._blocks_seen = 0
        self._readings_seen = 0
        # Blocks decoded and the readings decompressed from them: the decoding budget's density.
        self._blocks_decoded = 0
        stats.partitions_planned += len(streams)

    def over_budget(self) -> Stop | None:
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

    def density_known(self) -> bool:
        return self._blocks_seen > 0

    def wants_more(self, buffered: int) -> bool:
        """Whether a stream holding ``buffered`` readings may have to give the consumer more."""
        target = self.options.target
        return target is None or buffered < target - self.yielded

    def looked_at(self, readings: int) -> None:
        """Count a block of ``readings`` the merge has looked at (the density Limits are set by)."""
        self._blocks_seen += 1
        self._readings_seen += readings

    def will_decode(self) -> None:
        """Stop rather than decode another block: at the deadline, or once the merge has moved and
        decoded ``max_decoded`` readings (so it decodes at most a block's worth past them)."""
        options = self.options
        if options.deadline is not None and time.monotonic() >= options.deadline:
            raise _Stop(STOP_DEADLINE)
        if options.max_decoded is not None and self._moved and self.stats.decoded >= options.max_decoded:
            raise _Stop(STOP_SCAN_ITEMS)

    def decoded(self, readings: int, kept: int) -> None:
        """Count a block decoded: ``readings`` decompressed, ``kept`` of them the read's (fewer in a
        group item, which holds other entities' too: the density Limits are set by is the read's)."""
        self.stats.decoded += readings
        self._blocks_decoded += 1
        self.looked_at(kept)

    def page_limit(self, group: int) -> int | None:
        """``Limit`` (in blocks) of the next Query: the blocks that hold what the consumer
        can still take (plus the one that bounds them), at the readings per block seen so
        far, split over a group of partitions that share the range, and within the
        decoding budget. Before any block is seen: FIRST_PAGE_BLOCKS."""
        options = self.options
        # At least one reading in all the blocks seen: group items may have held none of the read's.
        per_block = max(1, self._readings_seen) / self._blocks_seen if self._blocks_seen else None
        limit: int | None = None
        if options.target is not None:
            need = max(1, options.target - self.yielded)
            # Partitions of one group share the range's readings: each is asked for about
            # twice its share; a partition that holds more is read again.
            share = need if group <= 1 else min(need, math.ceil(2 * need / group) + 8)
            limit = FIRST_PAGE_BLOCKS if per_block is None else math.ceil(share / per_block) + 1
        if options.max_decoded is not None and self._blocks_decoded:
            left = max(1, options.max_decoded - self.stats.decoded)
            cap = math.ceil(left * self._blocks_decoded / max(1, self.stats.decoded)) + 1
            limit = cap if limit is None else min(limit, cap)
        return None if limit is None else max(FIRST_PAGE_BLOCKS, limit)

    def account(self, page: Page, table: str) -> None:
        stats = self.stats
        stats.queries += 1
        stats.scanned += page.scanned
        stats.read_units += page.read_units
        if page.table_missing:
            stats.missing_tables.add(table)

    def _reach(self, opens: Position) -> None:
        """Move the frontier to ``opens`` if it lies past it (a resumed read's first partition may open
        before its cursor: the frontier stays there)."""
        frontier = self.frontier
        if frontier is None or (opens < frontier if self.options.descending else opens > frontier):
            self.frontier = opens

    def _may_hold(self, open_key: Position, head: Position) -> bool:
        """Could a stream that opens at ``open_key`` hold a reading due before ``head``?"""
        return open_key >= head if self.options.descending else open_key <= head

    def __iter__(self) -> Generator[tuple[Position, Reading], None, None]:
        try:
            yield from self._merge()
        except _Stop as stop:
            self.stopped = stop.reason

    def _merge(self) -> Generator[tuple[Position, Reading], None, None]:
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
                self._reach(pending[0].open_key)
                self._moved = self._moved or last_batch > 0
                if (reason := self.over_budget()) is not None:
                    raise _Stop(reason)
                # Open the next group. If the last batch held nothing the data
                # is sparse, so open more behind it (twice as many each time);
                # if it held readings, one group again.
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
                        heapq.heappush(heap, _Entry(found, next(seq), stream, descending))
                continue
            entry = heap[0]
            key, reading = entry.stream.pop()
            if key != last:  # a copy of the reading just yielded (an older version) is not
                last = key
                self.yielded += 1
                self.frontier = key
                self._moved = True
                yield key, reading
            found = entry.stream.head(self)
            if found is None:
                heapq.heappop(heap)
            else:  # the stream's next reading takes its place: one sift, not a pop and a push
                entry.key, entry.version, entry.seq = found.key, found.version, next(seq)
                # Most often (a block's readings are consecutive) it still comes before both of the
                # root's children, and the heap is in order as it stands (the order is total: seq).
                if (len(heap) > 1 and heap[1] < entry) or (len(heap) > 2 and heap[2] < entry):
                    heapq.heapreplace(heap, entry)

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
