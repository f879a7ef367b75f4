"""Rollups equal the raw readings, whatever the delivery does.

Random workloads interleave ingest batches and rollup runs. A batch writes its
readings as blocks of the batch's version (its place in publication order), then
the marks of :func:`tests.unit.rollup.oracles.marks_of`; a batch whose marks were
lost (the write failed, so ingest handed the records back) is delivered again
later, with its version. A reading sent again in a later batch (a correction) is
stored again in that batch's blocks: the copy of the highest version counts.
Readings arrive up to MAX_FUTURE early and up to far past LATENESS late, an
entity is split mid-workload, tables may be per-period, and a run may die
half-way. With the write tier on, batches are stored as ingest stores them then
(``doubles/tier_items.py``: group items, dense marks, late readings in blocks)
and each hour is compacted once it has settled, the rollup function reading both
tiers at the watermark. The marks here stand for every reading, group items' too
(ingest now marks only its blocks' readings, leaving group-item entity-hours to
compaction): every entity-hour is the rollup function's, so every entity's rollups
must equal raw; a late mark is applied once compaction has done its hour. After a
final run, every rollup and every total equals the figures computed from the raw
readings, except the intervals a late mark could not update, which are exactly the
ones counted as late.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.batch_writer import BatchWriter, serialize_item
from adapters.compaction_state import CachedWatermark
from adapters.partition_reader import DynamoPartitionReader
from adapters.retry import Deadline
from adapters.rollup_store import RollupStore
from adapters.shard_map_source import StaticShardMap
from compaction.logic import CompactionRunner, StateStore
from doubles.memory_dynamo import MemoryDynamo as FakeDynamo
from doubles.memory_dynamo import MemoryReader
from doubles.tier_items import TierWriter
from keydesign import Layout, Reading, ShardMap, format_ts, parse_timestamp
from keydesign.rollup import Figures, Granularities, floor_to, hottest_rollup_keys
from keydesign.writetier import (
    DENSE_READINGS,
    SLICE_MS,
    Clustered,
    CompactionState,
    EarlierGroups,
    WriteTier,
    in_write_tier,
)
from query.aggregate import interval_of
from query.cursor import CursorCodec
from query.logic import QueryService
from query.models import Explanation
from query.params import STATS, TimeRange
from query.rollups import RollupAnswers
from query.settings import QueryLimits
from rollup.logic import RollupRunner
from tests.unit.keydesign.strategies import PROPERTY
from tests.unit.rollup.oracles import marks_of

MINUTE = 60_000
T0 = 1_795_000_000_000 - 1_795_000_000_000 % (3_600_000)  # an hour boundary in 2026
LEVELS = Granularities.parse("1m,5m,30m")
LATENESS = 20 * MINUTE
SETTLE = 2 * MINUTE
ENTITIES = ("sensor-a", "sensor-b", "hot-1")  # sensor-a: group 0 of 2, group 2 of 3
#: When the write tier's group count changes in a ``changed`` world.
CHANGE_AT = T0 + 45 * 60_000


@dataclass(frozen=True)
class Batch:
    arrival: int  # minutes after T0
    readings: tuple[tuple[str, int, str, int | float], ...]  # entity, ts offset (ms), event id, value
    marks_lost: bool


values = st.one_of(st.integers(-1000, 1000), st.floats(-1e6, 1e6, allow_nan=False))
#: Event times: anywhere, or one of a few, so that batches often send a reading again with another value.
offsets = st.one_of(
    st.integers(-40 * MINUTE, 90 * MINUTE), st.sampled_from(range(-35 * MINUTE, 90 * MINUTE, 9 * MINUTE))
)
readings = st.tuples(st.sampled_from(ENTITIES), offsets, st.sampled_from(("e1", "e2", "e3")), values)
batches = st.builds(Batch, st.integers(0, 90), st.lists(readings, min_size=1, max_size=6).map(tuple), st.booleans())


# The rollup function's own world (blocks and marks in memory, the compaction watermark a field): the
# other rollup tests build on it. The property test below runs the whole system (:class:`System`).
@dataclass
class World:
    layout: Layout
    reader: MemoryReader
    db: FakeDynamo
    store: RollupStore
    runner: RollupRunner
    now: int = T0
    writer: TierWriter | None = None
    #: The compaction watermark (the end of the last hour compacted), as the runner reads it.
    through: int = 0
    #: The group count ingest writes with before CHANGE_AT (another one than the runner's 2: a change of G).
    first_groups: int = 2
    #: When ``through`` last moved.
    advanced_at: int = 0
    #: The copy of the state the runner's cache holds when older than the stored one (None: the stored one).
    cached: CompactionState | None = None

    def state(self) -> CompactionState:
        return self.consistent() if self.cached is None else self.cached

    def consistent(self) -> CompactionState:
        """The state as compaction records it: with a change of G, the earlier G may hold the hours of
        every reading written before it (up to 90 minutes after T0)."""
        earlier = () if self.first_groups == 2 else (EarlierGroups(self.first_groups, T0 + 2 * SLICE_MS),)
        # and the G's it compacted each hour into cluster blocks under: both while the earlier may hold it
        both = tuple(sorted({2, self.first_groups}, reverse=True))
        clustered = (Clustered(both, 0),) if both == (2,) else (Clustered(both, 0), Clustered((2,), T0 + 2 * SLICE_MS))
        return CompactionState(self.through, 2, earlier, advanced_at=self.advanced_at, clustered=clustered)

    def compact(self) -> None:
        """Compact every hour that has settled (ingest's timeout and a minute after it ended)."""
        if self.writer is None:
            return
        hour = self.through or floor_to(T0 - 2 * SLICE_MS, SLICE_MS)
        while hour + SLICE_MS + SETTLE <= self.now:
            for table, item in self.writer.compact(hour):
                self.reader.add_item(table, item)
            hour += SLICE_MS
            self.through, self.advanced_at = hour, self.now


def build(period: str | None, split: bool, tiered: bool = False, changed: bool = False) -> World:
    layout = Layout.from_settings(kind="hybrid", bucket="15m", table_prefix="readings", table_period=period)
    shard_map = ShardMap.initial(layout.bucket, 3)
    if split:  # hot-1 gets 4 partitions of its own from 45 minutes in
        shard_map = shard_map.with_entity("hot-1", 4, T0 + 45 * MINUTE, now_ms=T0 - 3_600_000)
    db = FakeDynamo()
    # (no sleeps between its reads' retries of unprocessed keys: see build_system)
    store = RollupStore(
        db, BatchWriter(db, concurrency=2), "control", "readings", retention_ms=30 * 86_400_000, sleep=lambda _s: None
    )
    world = World(layout, MemoryReader(page_items=3), db, store, None)  # type: ignore[arg-type]
    world.runner = RollupRunner(
        layout=layout,
        shard_maps=StaticShardMap(shard_map),
        reader=world.reader,
        store=store,
        granularities=LEVELS,
        lateness_ms=LATENESS,
        settle_ms=SETTLE,
        concurrency=2,
        clock_ms=lambda: world.now,
        write_tier=WriteTier(2) if tiered else None,
        watermark=world,
    )
    if tiered:
        world.writer = TierWriter(layout, WriteTier(2), shard_map, 30 * 86_400_000)
        world.first_groups = 3 if changed else 2
    world.shard_map = shard_map  # type: ignore[attr-defined]
    return world


Raw = dict[tuple[str, int, str], tuple[int, int | float]]


def ingest(world: World, batch: Batch, version: int, raw: Raw, stamp: int | None) -> None:
    """What ingest does with one batch: its readings as blocks of ``version``, then the marks (``stamp``
    None: the marks' write failed, so none are stored). ``raw`` keeps each reading's newest version."""
    entries = [
        (Reading(entity_id=entity, event_id=event_id, ts_ms=T0 + offset, measures={"v": value}), version)
        for entity, offset, event_id, value in batch.readings
    ]
    if world.writer is not None:
        world.writer.tier = WriteTier(world.first_groups if world.now < CHANGE_AT else 2)
        for table, item in world.writer.ingest(entries, world.now):
            world.reader.add_item(table, item)
    else:
        world.reader.store(world.layout, world.shard_map, entries)  # type: ignore[attr-defined]
    for entity, offset, event_id, value in batch.readings:
        held = raw.get((entity, T0 + offset, event_id))
        if held is None or version >= held[0]:  # within a batch, the later entry wins
            raw[(entity, T0 + offset, event_id)] = (version, value)
    if stamp is None:
        return
    marks = marks_of(stamp, LEVELS.finest, [(e, T0 + o) for e, o, _, _ in batch.readings])
    world.store.write(world.store.marks_writes(marks), Deadline.never())


def expected(raw: Raw, level: int, entity: str | None) -> dict[int, Figures]:
    out: dict[int, Figures] = {}
    for (e, ts, _), (_, value) in sorted(raw.items()):
        if entity is None or e == entity:
            out.setdefault(floor_to(ts, level), Figures()).add({"v": value})
    return out


PREFIX = "readings"
RETENTION_MS = 30 * 86_400_000


@dataclass
class System:
    layout: Layout
    shard_map: ShardMap
    db: FakeDynamo
    store: RollupStore
    runner: RollupRunner
    service: QueryService
    now: int = T0
    writer: TierWriter | None = None
    #: The group count ingest (and compaction) run with before CHANGE_AT (another one than 2: a change of G).
    first_groups: int = 2

    def put(self, items: list[tuple[str, dict[str, object]]]) -> None:
        for table, item in items:
            self.db.put_item(TableName=table, Item=serialize_item(item))

    def tier(self) -> WriteTier:
        return WriteTier(self.first_groups if self.now < CHANGE_AT else 2)

    def compact(self) -> None:
        """The compaction function's run at ``now`` (the deployed group count then): every settled hour,
        and the redos asked for."""
        if self.writer is None:
            return
        runner = CompactionRunner(
            layout=self.layout,
            tier=self.tier(),
            shard_maps=StaticShardMap(self.shard_map),
            reader=DynamoPartitionReader(self.db),
            writer=BatchWriter(self.db, concurrency=2),
            state=StateStore(self.db, "control", PREFIX),
            retention_ms=RETENTION_MS,
            settle_ms=SETTLE,
            max_future_ms=120 * MINUTE,  # readings come up to 90 minutes ahead (no ingest here to refuse them)
            rollups=self.store,
            levels=LEVELS,
            concurrency=2,
            clock_ms=lambda: self.now,
        )
        try:
            report = runner.run(Deadline.never())
        finally:
            runner.close()
        assert report.error is None and not report.corrupt, report.summary()


def build_system(period: str | None, split: bool, tiered: bool = False, changed: bool = False) -> System:
    layout = Layout.from_settings(kind="hybrid", bucket="15m", table_prefix=PREFIX, table_period=period)
    shard_map = ShardMap.initial(layout.bucket, 3)
    if split:  # hot-1 gets 4 partitions of its own from 45 minutes in
        shard_map = shard_map.with_entity("hot-1", 4, T0 + 45 * MINUTE, now_ms=T0 - 3_600_000)
    db = FakeDynamo(page_items=3)
    store = RollupStore(db, BatchWriter(db, concurrency=2), "control", PREFIX, retention_ms=RETENTION_MS)
    tier = WriteTier(2) if tiered else None
    # Every read of the compaction state goes to the table (no cache): the functions see it as stored.
    watermark = CachedWatermark(db, "control", PREFIX, ttl_ms=0)
    reader = DynamoPartitionReader(db)
    runner = RollupRunner(
        layout=layout,
        shard_maps=StaticShardMap(shard_map),
        reader=reader,
        store=store,
        granularities=LEVELS,
        lateness_ms=LATENESS,
        settle_ms=SETTLE,
        concurrency=2,
        write_tier=tier,
        **({"watermark": watermark} if tiered else {}),
    )
    service = QueryService(
        layout=layout,
        shard_maps=StaticShardMap(shard_map),
        reader=reader,
        cursors=CursorCodec(lambda: b"exactness-test-cursor-key-0123456789"),
        limits=QueryLimits(concurrency=2),
        # A read of more rollups than the double's BatchGetItem answers retries the unprocessed keys, the same
        # calls with or without the backoff's sleeps (no deadline): those were half this test's time.
        rollups=RollupAnswers(RollupStore(db, None, "control", PREFIX, RETENTION_MS, sleep=lambda _s: None), LEVELS),
        retention_ms=RETENTION_MS,
        write_tier=tier,
        **({"watermark": watermark} if tiered else {}),
    )
    world = System(layout, shard_map, db, store, runner, service)
    runner._clock_ms = lambda: world.now
    service._clock_ms = lambda: world.now
    if tiered:
        world.first_groups = 3 if changed else 2
        world.writer = TierWriter(layout, world.tier(), shard_map, RETENTION_MS)
        # A deployment whose compaction and re-pack start two hours before the workload (not KEEP back, nor
        # the hours a first re-pack waits out for an ingest of the version before the slice rule).
        start = T0 - 2 * SLICE_MS
        state = CompactionState(start, world.first_groups, repack_from=start, repacked=start)
        StateStore(db, "control", PREFIX).save(state)
    return world


def ingest_system(world: System, batch: Batch, version: int, raw: Raw, stamp: int | None) -> list[tuple[str, int]]:
    """What ingest does with one batch: its readings (with the write tier: group items, dense marks,
    blocks) of ``version``, then the marks of the readings written as blocks (``stamp`` None: the marks'
    write failed, so none are stored). ``raw`` keeps each reading's newest version. Returns what is
    marked (entity, event time)."""
    entries = [
        (Reading(entity_id=entity, event_id=event_id, ts_ms=T0 + offset, measures={"v": value}), version)
        for entity, offset, event_id, value in batch.readings
    ]
    marked = [(r.entity_id, r.ts_ms) for r, _ in entries]
    if world.writer is not None:
        world.writer.tier = world.tier()
        world.put(world.writer.ingest(entries, world.now))
        # ingest marks only what it writes as blocks: a dense entity's readings, and late ones
        latest = {(r.entity_id, r.ts_ms, r.event_id): r for r, _ in entries}
        counts = Counter(entity for entity, _, _ in latest)
        marked = [
            (r.entity_id, r.ts_ms)
            for r in latest.values()
            if counts[r.entity_id] >= DENSE_READINGS or not in_write_tier(r.ts_ms, world.now)
        ]
    else:
        world.put(
            [(b.key.table, b.item()) for b in world.layout.pack(entries, world.shard_map, retention_ms=RETENTION_MS)]
        )
    for entity, offset, event_id, value in batch.readings:
        held = raw.get((entity, T0 + offset, event_id))
        if held is None or version >= held[0]:  # within a batch, the later entry wins
            raw[(entity, T0 + offset, event_id)] = (version, value)
    if stamp is None or not marked:
        return marked
    marks = marks_of(stamp, LEVELS.finest, marked)
    world.store.write(world.store.marks_writes(marks), Deadline.never())
    return marked


def shown(figures: dict[int, Figures]) -> dict[str, dict[str, object]]:
    """Figures as the query function shows them, by interval start (intervals with readings)."""
    return {
        format_ts(start): interval_of(format_ts(start), f.readings, f.measures, STATS).model_dump()
        for start, f in figures.items()
        if f.readings
    }


# Each example runs a whole world of batches, marks and rollup runs: 60 of them, not the usual 120, keep
# it under half a minute of make test.
@settings(PROPERTY, max_examples=60)
@given(
    batches=st.lists(batches, min_size=1, max_size=12),
    runs=st.lists(st.integers(0, 100), max_size=6),
    period=st.sampled_from((None, "hour")),
    split=st.booleans(),
    die_at=st.sampled_from((None, 0, 1, 3, 6)),
    tiered=st.booleans(),
    changed=st.booleans(),
)
def test_every_rollup_equals_its_raw_readings(  # noqa: PLR0917 - Hypothesis passes them
    batches: list[Batch],
    runs: list[int],
    period: str | None,
    split: bool,
    die_at: int | None,
    tiered: bool,
    changed: bool,
) -> None:
    # Given a world, and batches and runs in time order (a lost-marks batch is redelivered 3 minutes later);
    # with the write tier, maybe written with 3 groups before CHANGE_AT and with the runner's 2 after it
    world = build_system(period, split, tiered, changed)
    # A batch's version is its place in publication (arrival) order; a redelivery keeps its batch's.
    events: list[tuple[int, int, object, int]] = []
    for version, batch in enumerate(sorted(batches, key=lambda b: b.arrival)):
        events.append((batch.arrival * MINUTE, 1, batch, version))
        if batch.marks_lost:
            redelivered = Batch(batch.arrival + 3, batch.readings, False)
            events.append(((batch.arrival + 3) * MINUTE, 1, redelivered, version))
    # The function is deployed before the first reading: its first run starts LATENESS back.
    events += [(minute * MINUTE, 0, None, 0) for minute in [-1, *runs]]
    raw: Raw = {}
    stale: set[tuple[str, int]] = set()
    late = set()
    history: list[tuple[int, int, Batch]] = []
    for at, _, batch, version in sorted(events, key=lambda e: (e[0], e[1])):
        world.now = T0 + at
        world.compact()
        if batch is None:
            if die_at is not None:  # the run dies after die_at writes, maybe inside a slot's steps
                fail_after(world, die_at)
            with contextlib.suppress(RuntimeError):  # a run that dies half-way is taken up by the next
                world.runner.run(Deadline.never())
            world.db.__dict__.pop("batch_write_item", None)
            check_fresh_totals(world, history, stale)
            continue
        assert isinstance(batch, Batch)
        history.append((world.now, version, batch))
        marked = ingest_system(world, batch, version, raw, None if batch.marks_lost else world.now)
        if batch.marks_lost:
            continue
        for entity, ts in marked:
            minute = floor_to(ts, MINUTE)
            if minute + MINUTE + LATENESS < floor_to(world.now, MINUTE):
                stale.add((entity, minute))
                late.add((floor_to(world.now, MINUTE), entity, minute))

    # When a last compaction comes well after everything has closed, and the rollup function after it
    # (past the minute compaction moved its watermark in, so the totals are served through it)
    world.now = T0 + 300 * MINUTE
    world.compact()
    world.now += 5 * MINUTE
    report = world.runner.run(Deadline.never())
    world.compact()  # the redos the last run asked for, if any
    world.now += 5 * MINUTE
    world.runner.run(Deadline.never())

    # Then every interval the query function answers, per entity and across entities, equals the raw
    # figures, outside the intervals late marks could not update. (With the write tier, a late mark of an
    # hour compaction has done reaches KEEP_MS back, so whether one counts as late depends on when the
    # rollup function planned its minute: the test counts every candidate, and checks the count as a bound.)
    state = world.store.state()
    assert state is not None
    assert state.late == len(late) if world.writer is None else state.late <= len(late)
    check_answers(world, raw, stale)
    assert report.lag_ms < 3 * MINUTE


def check_answers(world: System, raw: Raw, stale: set[tuple[str, int]]) -> None:
    """Every interval of every level the query function answers over the workload's span, per entity
    (from rollups and compaction's figures: ``source`` rollups) and across entities (the totals, reached
    to the end), equals the raw figures, but the intervals holding a stale minute."""

    def skipped(entities: tuple[str, ...], start: str, level: int) -> bool:
        first = parse_timestamp(start)
        return any((e, m) in stale for e in entities for m in range(first, first + level, MINUTE))

    window = TimeRange(T0 - 60 * MINUTE, T0 + 120 * MINUTE)
    for level in LEVELS.levels:
        for entity in ENTITIES:
            want = shown(expected(raw, level, entity))
            series = world.service.aggregates(entity, window, level)
            assert not isinstance(series, Explanation)
            assert series.source == "rollups", (series.source, series.rollups_through)
            got = {i.start: i.model_dump() for i in series.intervals}
            for start in {*want, *got}:
                if not skipped((entity,), start, level):
                    assert got.get(start) == want.get(start), (level, entity, start)
        everything = shown(expected(raw, level, None))
        totals = world.service.total_aggregates(window, level)
        assert totals.reached == format_ts(window.to_ms)
        got = {i.start: i.model_dump() for i in totals.intervals}
        for start in {*everything, *got}:
            if not skipped(ENTITIES, start, level):
                assert got.get(start) == everything.get(start), (level, start)


def check_fresh_totals(world: System, history: list[tuple[int, int, Batch]], stale: set[tuple[str, int]]) -> int:
    """With the write tier, every finest total served now (``GET /aggregates`` up to ``reached``: compaction's
    hours from the rollup function's items and compaction's parts, the hours after them from the re-pack's
    fresh parts, docs/rollups.md "Fresh minute totals") equals the raw figures, each reading's newest copy;
    but the minutes holding a reading of a batch whose marks were lost (this test stores its blocks without
    them, where ingest would write neither), a stale minute, a minute with a reading stamped from
    ``through`` on (the rollup function recomputes a minute from raw as it applies a mark: whatever is
    stored then), and in compaction's hours the hour of a reading sent after it had ended (the redo's
    transients, docs/rollups.md, reach every minute of the entity's hour). Returns how many fresh intervals
    it compared."""
    state = world.store.state()
    if world.writer is None or state is None or not state.totals_through:
        return 0
    raw: Raw = {}
    skipped = {minute for _, minute in stale}
    for arrival, version, batch in history:
        for entity, offset, event_id, value in batch.readings:
            minute, hour = floor_to(T0 + offset, MINUTE), floor_to(T0 + offset, SLICE_MS)
            stamped_after = floor_to(arrival, MINUTE) >= state.through_ms
            if batch.marks_lost or stamped_after:
                skipped.add(minute)
            if hour < state.totals_through and arrival >= hour + SLICE_MS:
                skipped.update(range(hour, hour + SLICE_MS, MINUTE))
            held = raw.get((entity, T0 + offset, event_id))
            if held is None or version >= held[0]:
                raw[(entity, T0 + offset, event_id)] = (version, value)
    fresh = state.fresh_through if state.fresh_through and state.fresh_from == state.totals_through else 0
    window = TimeRange(T0 - 60 * MINUTE, max(state.totals_through, fresh, T0 - 60 * MINUTE + MINUTE))
    totals = world.service.total_aggregates(window, LEVELS.finest)
    want = shown({s: f for s, f in expected(raw, LEVELS.finest, None).items() if window.from_ms <= s < window.to_ms})
    got = {i.start: i.model_dump() for i in totals.intervals}
    compared = 0
    for start in {*want, *got}:
        if parse_timestamp(start) not in skipped:
            assert got.get(start) == want.get(start), (start, state)
            compared += parse_timestamp(start) >= state.totals_through
    return compared


def fail_after(world: World | System, calls: int) -> None:
    """BatchWriteItem succeeds ``calls`` times, then the run dies (until the wrapper is removed)."""
    real = world.db.batch_write_item
    left = [calls]

    def write(**kwargs: Any) -> Any:
        if left[0] == 0:
            raise ConnectionError("injected: the run dies here")
        left[0] -= 1
        return real(**kwargs)

    world.db.batch_write_item = write  # type: ignore[method-assign]


def test_rollup_keys_stay_far_below_a_partitions_limit_at_the_seed_scenario() -> None:
    # 10,000 sensors: one mark per sensor-minute over 32 keys, a run's puts over 32 keys
    mark_wcu, burst = hottest_rollup_keys(10_000)
    assert mark_wcu == 10_000 / 32 / 60 < 6
    assert burst == 312.5
    assert burst < 1_000
