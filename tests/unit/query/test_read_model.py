"""Every read returns exactly the model: the newest version of each live reading in range, in order, once.

Random batches (each a version, in publication order) store readings as ingest does, in
blocks (``Layout.pack``): batches overlap in time, send readings again with other values
(corrections), are delivered twice (copies in other partitions on the random layout, in
other sub-shards of a split entity), under shard-map changes, in one table or hourly
tables, on all three layouts; the first few may be items of the format before blocks
(one reading each, ``keydesign.legacy``), some sent again as blocks after the upgrade.
Following the cursors of every paged read, in both orders and with any page size and
call cap, returns what a brute-force model of the stored readings says; ``latest`` and
raw aggregates too.

With the write tier on (``keydesign.writetier``), batches are stored as ingest stores them then
(``doubles/tier_items.py``): sparse entities' readings of an hour still open as group items,
dense entities' as blocks with a dense mark, late ones as blocks; a batch may be retried after its
hour ended (its readings then go to blocks, same version); the first hours may be compacted (their
group items' newest copies written again as compacted blocks), settled slices may be re-packed (their
group items' newest copies written again as sub-items, ``keydesign.tiering.repack_slice``), and the
reader may hold an older state than compaction's (a stale cache): every read still returns the model.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doubles.memory_dynamo import MemoryReader
from doubles.tier_items import TierWriter
from keydesign import Layout, Reading, ShardMap, format_ts, parse_timestamp, ttl_for
from keydesign.writetier import REPACK_MS, SLICE_MS, Clustered, CompactionState, WriteTier
from query.logic import QueryService
from query.models import AggregateSeries, LatestReading, ReadingsPage
from query.params import PageArgs, ReadArgs, TimeRange
from query.settings import QueryLimits
from tests.legacy_items import legacy_item
from tests.unit.query.apigw import memory_service

NOW = parse_timestamp("2026-11-22T12:00:00Z")
SECOND, MINUTE, HOUR = 1_000, 60_000, 3_600_000
START = NOW - 3 * HOUR
ENTITIES = ("a-1", "b-2", "c-3")
RETENTION_MS = 2 * HOUR + 17 * MINUTE
#: Instants readings cluster after (by whole seconds, so that blocks hold several, overlap, and a
#: reading is often sent again): inside a bucket, across a bucket's end, across the retention edge.
MOMENTS = (START + 20 * MINUTE, START + HOUR - 4 * SECOND, NOW - RETENTION_MS - 6 * SECOND, NOW - 13 * SECOND)

Identity = tuple[str, int, str]
#: Compaction works an hour once ingest's timeout and a minute have passed since it ended.
SETTLE_MS = 3 * MINUTE


@dataclass(frozen=True)
class Watermark:
    through: int
    repacked: tuple[int, int] = (0, 0)
    groups: int | None = None  # the G every compacted hour was compacted into cluster blocks under

    def state(self) -> CompactionState:
        clustered = () if self.groups is None else (Clustered((self.groups,), 0),)
        return CompactionState(
            self.through, repack_from=self.repacked[0], repacked=self.repacked[1], clustered=clustered
        )

    def consistent(self) -> CompactionState:
        return self.state()


@dataclass(frozen=True)
class Tiers:
    """The write tier of a world (None: off), and the compaction state its reader holds: the hours compacted
    and the slices re-packed."""

    tier: WriteTier | None = None
    through: int = 0
    repacked: tuple[int, int] = (0, 0)


@dataclass
class Model:
    """What is stored: per reading identity, the version and reading of its newest copy."""

    layout: Layout
    retention_ms: int
    newest: dict[Identity, tuple[int, Reading]] = field(default_factory=dict)

    def add(self, version: int, readings: list[Reading]) -> None:
        for reading in readings:  # a batch's later entry of a reading replaces its earlier one
            key = (reading.entity_id, reading.ts_ms, reading.event_id)
            held = self.newest.get(key)
            if held is None or version >= held[0]:
                self.newest[key] = (version, reading)

    def live(self, entity: str | None, from_ms: int, to_ms: int) -> list[Reading]:
        return [
            r
            for _, r in self.newest.values()
            if (entity is None or r.entity_id == entity)
            and from_ms <= r.ts_ms < to_ms
            and (r.ts_ms + self.retention_ms) // 1000 >= NOW // 1000
        ]

    def position(self, reading: Reading, from_ms: int, per_entity: bool) -> tuple[Any, ...]:
        key = self.layout.reading_key(reading.entity_id, reading.ts, reading.event_id)
        if per_entity:
            return (reading.ts, key)
        return (max(from_ms, self.layout.bucket.start(reading.ts_ms)), key)


@st.composite
def worlds(draw: st.DrawFn, tiered: bool = False) -> tuple[Layout, ShardMap, Model, MemoryReader, Tiers]:
    kind = draw(st.sampled_from(("random", "calculated", "hybrid")))
    period = draw(st.sampled_from((None, "hour", "day")))
    # The write tier works by hours: with it, buckets shorter and longer than an hour too (a day's: what
    # `tsctl plan` gives a sparse fleet, with daily tables).
    bucket = draw(st.sampled_from(("1h", "15m") if period == "hour" else ("1h", "15m", "1d"))) if tiered else "1h"
    layout = Layout.from_settings(kind=kind, bucket=bucket, table_prefix="readings", table_period=period)
    shard_map = ShardMap.initial(layout.bucket, draw(st.integers(1, 3)))
    changes = draw(st.lists(st.integers(1, 2), max_size=2, unique=True)) if bucket != "1d" else []
    for hour in sorted(changes):
        at = START + hour * HOUR  # a split or a new global count, at a bucket boundary
        if draw(st.booleans()):
            shard_map = shard_map.with_global(draw(st.integers(1, 4)), at, now_ms=at - 1)
        else:
            shard_map = shard_map.with_entity(
                draw(st.sampled_from(ENTITIES)), draw(st.integers(2, 3)), at, now_ms=at - 1
            )
    retention_ms = draw(st.sampled_from((30 * 24 * HOUR, RETENTION_MS)))
    model = Model(layout, retention_ms)
    reader = MemoryReader(page_items=draw(st.integers(1, 4)))
    rng = random.Random(draw(st.integers(0, 99)))
    # A batch holds readings of a few seconds after one instant: a block of each entity with several
    # readings, overlapping the blocks of other batches near the same instant.
    reading = st.builds(
        lambda entity, seconds, event, value: (entity, seconds, event, value),
        st.sampled_from(ENTITIES),
        st.integers(0, 12),
        st.one_of(st.none(), st.sampled_from(("e1", "e2", "e3"))),  # None: a derived event id
        st.integers(-9, 9),
    )
    batch = st.tuples(
        st.one_of(st.sampled_from(MOMENTS), st.integers(START, NOW - 13 * SECOND)),
        st.lists(reading, min_size=2, max_size=12),
    )
    batches = [
        [
            Reading.parse(
                {"entity_id": entity, "timestamp": at + seconds * SECOND, "measures": {"v": value}}
                | ({} if event is None else {"event_id": event})
            )
            for entity, seconds, event, value in rows
        ]
        for at, rows in draw(st.lists(batch, min_size=2, max_size=8))
    ]
    originals = len(batches)
    # Corrections: later batches send readings of earlier ones again (same identity) with other values.
    for fixes in draw(st.lists(st.lists(st.tuples(st.integers(0, 99), st.integers(-9, 9)), min_size=1), max_size=3)):
        earlier = [r for batch in batches for r in batch]
        batches.append(
            [
                Reading(r.entity_id, r.event_id, r.ts_ms, {"v": v})
                for r, v in ((earlier[n % len(earlier)], v) for n, v in fixes)
            ]
        )
    # A deployment upgraded from the format before blocks: its first batches were stored one item per
    # reading (a batch's later copy of a reading overwriting the earlier), and some come again as blocks.
    upgraded = draw(st.integers(0, 3))
    for batch in batches[:upgraded]:
        for r in batch:
            reader.add_legacy(
                layout.table_for(r.ts_ms), legacy_item(r, layout, shard_map, ttl=ttl_for(r, retention_ms))
            )
        model.add(-1, batch)  # older than any block's (versions here are 0 and up): a block's copy wins
    redelivered = draw(st.lists(st.integers(0, len(batches) - 1), max_size=3))
    if tiered:
        world = (layout, shard_map, model, reader)
        tiers = _tiered(draw, world, rng, batches[upgraded:], originals - upgraded, upgraded)
    else:
        tiers = Tiers()
        for version, batch in [*enumerate(batches[upgraded:], upgraded), *((v, batches[v]) for v in redelivered)]:
            reader.store(layout, shard_map, [(r, version) for r in batch], retention_ms=retention_ms, rng=rng)
            model.add(version, batch)
    reader.tables.add(layout.table_for(START))
    return layout, shard_map, model, reader, tiers


def _tiered(  # noqa: PLR0917 - the world's parts
    draw: st.DrawFn,
    world: tuple[Layout, ShardMap, Model, MemoryReader],
    rng: random.Random,
    batches: list[list[Reading]],
    originals: int,
    first_version: int,
) -> Tiers:
    """Store ``batches`` as ingest does with the write tier on, in publication order: a batch starts
    after its newest reading (later still when it is delayed) and after the batch before it; a
    batch may be retried at once, later (after its hour ended: its readings then go to blocks).
    Compaction works each hour up to its watermark once the hour has settled, and re-packs each slice of
    its range once it has settled; the reader's state may be older (a stale cache)."""
    layout, shard_map, model, reader = world
    tier = WriteTier(draw(st.integers(1, 3)))
    writer = TierWriter(layout, tier, shard_map, model.retention_ms)
    through = draw(st.sampled_from((0, START + HOUR, START + 2 * HOUR)))
    pending = list(range(slice_start_of(START), through, SLICE_MS))  # hours compaction will do, in order
    repack_from = draw(st.sampled_from((START, START + HOUR, START + 2 * HOUR)))
    repacked = draw(st.integers(repack_from, NOW).map(lambda end: end - (end - repack_from) % REPACK_MS))
    slices = list(range(repack_from, repacked, REPACK_MS))  # slices the re-pack will do, in order
    delay = st.sampled_from((0, 0, 5 * SECOND, 10 * MINUTE, 70 * MINUTE))
    started = 0
    # Readings sent on time come in time order; the corrections (the last batches) come after them.
    ordered = sorted(batches[:originals], key=lambda batch: min(r.ts_ms for r in batch)) + batches[originals:]
    for version, batch in enumerate(ordered, first_version):
        attempts = 2 if draw(st.integers(0, 4)) == 0 else 1  # a retry: the same records, the same version
        for _ in range(attempts):
            started = min(NOW, max(started, max(r.ts_ms for r in batch) + SECOND + draw(delay)))
            while pending and pending[0] + SLICE_MS + SETTLE_MS <= started:
                for table, item in writer.compact(pending.pop(0)):
                    reader.add_item(table, item)
            while slices and slices[0] + REPACK_MS + SETTLE_MS <= started:
                for table, item in writer.repack(slices.pop(0)):
                    reader.add_item(table, item)
            for table, item in writer.ingest([(r, version) for r in batch], started, rng):
                reader.add_item(table, item)
        model.add(version, batch)
    for hour in pending:
        for table, item in writer.compact(hour):
            reader.add_item(table, item)
    for start in slices:
        for table, item in writer.repack(start):
            reader.add_item(table, item)
    seen = draw(st.sampled_from([0, *range(START + HOUR, through + 1, HOUR)]))  # the reader's, maybe stale
    seen_repacked = draw(
        st.sampled_from([(0, 0), *((repack_from, end) for end in range(repack_from, repacked + 1, REPACK_MS))])
    )
    return Tiers(tier, seen, seen_repacked)


def slice_start_of(ts_ms: int) -> int:
    return ts_ms - ts_ms % SLICE_MS


def service(
    layout: Layout, shard_map: ShardMap, model: Model, reader: MemoryReader, tiers: Tiers = Tiers(), **limits: Any
) -> QueryService:
    return memory_service(
        layout,
        shard_map,
        reader,
        now_ms=NOW,
        limits=QueryLimits(**limits),
        write_tier=tiers.tier,
        watermark=Watermark(tiers.through, tiers.repacked, tiers.tier and tiers.tier.groups),
        retention_ms=model.retention_ms,
    )


def follow(read: Any, window: TimeRange, limit: int, order: Any, **params: Any) -> list[ReadingsPage]:
    pages: list[ReadingsPage] = []
    cursor = None
    for _ in range(2_000):
        page = read(page=PageArgs(window, limit, cursor, order), **params)
        assert isinstance(page, ReadingsPage)
        assert page.count <= limit
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return pages
    raise AssertionError("the cursors never reached the end of the range")


def shown(reading: Reading) -> tuple[str, str, str, dict[str, int | float]]:
    return reading.entity_id, reading.ts, reading.event_id, dict(reading.measures)


SPANS = st.one_of(st.just((0, 3 * HOUR)), st.tuples(st.integers(0, 3 * HOUR - 1), st.integers(1, 3 * HOUR)))
SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("tiered", [False, True], ids=["blocks", "both-tiers"])
@SETTINGS
@given(
    data=st.data(),
    span=SPANS,
    limit=st.integers(1, 7),
    cap=st.integers(1, 6),
    descending=st.booleans(),
    entity=st.sampled_from(ENTITIES),
)
def test_every_read_returns_the_newest_copy_of_each_live_reading_once_in_order(  # noqa: PLR0917 - Hypothesis passes them
    tiered: bool,
    data: st.DataObject,
    span: tuple[int, int],
    limit: int,
    cap: int,
    descending: bool,
    entity: str,
) -> None:
    """Readings stored as blocks only, or with the write tier on as well (``tiered``: both tiers read)."""
    layout, shard_map, model, reader, tiers = data.draw(worlds(tiered=tiered), label="world")
    svc = service(layout, shard_map, model, reader, tiers, max_query_calls=cap, concurrency=3)
    from_ms = START + span[0]
    window = TimeRange(from_ms, min(NOW, from_ms + span[1]))
    order = "desc" if descending else "asc"

    # One entity's readings, paged
    pages = follow(svc.entity_readings, window, limit, order, entity=entity)
    want = sorted(model.live(entity, window.from_ms, window.to_ms), key=lambda r: model.position(r, 0, True))
    got = [(i.entity_id, i.timestamp, i.event_id, i.measures) for p in pages for i in p.items]
    assert got == [shown(r) for r in (want[::-1] if descending else want)]
    assert pages[-1].complete

    # Every entity's readings, paged (hybrid only)
    if layout.can.range_reads:
        pages = follow(svc.range_readings, window, limit, order)
        every = model.live(None, window.from_ms, window.to_ms)
        every.sort(key=lambda r: model.position(r, window.from_ms, False), reverse=descending)
        got = [(i.entity_id, i.timestamp, i.event_id, i.measures) for p in pages for i in p.items]
        assert got == [shown(r) for r in every]

    # The newest reading, and a raw aggregate of the range
    latest = svc.latest(entity, NOW - window.from_ms, ReadArgs())
    assert isinstance(latest, LatestReading)
    newest = max(model.live(entity, window.from_ms, NOW + 1), key=lambda r: (r.ts_ms, r.event_id), default=None)
    assert (latest.reading and (latest.reading.timestamp, latest.reading.event_id, latest.reading.measures)) == (
        newest and (newest.ts, newest.event_id, dict(newest.measures))
    )
    series = service(layout, shard_map, model, reader, tiers).aggregates(entity, window, 15 * MINUTE)
    assert isinstance(series, AggregateSeries)
    buckets: dict[str, list[int | float]] = {}
    for r in want:
        buckets.setdefault(format_ts(r.ts_ms - r.ts_ms % (15 * MINUTE)), []).append(r.measures["v"])
    assert [(i.start, i.readings, i.measures["v"]["sum"], i.measures["v"]["min"]) for i in series.intervals] == [
        (start, len(values), sum(values), min(values)) for start, values in sorted(buckets.items())
    ]
