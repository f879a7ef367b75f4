"""The write tier's state over simulated days (issue 38: the year simulations extended to compaction).

A sparse fleet writes through the write tier, as ingest writes it (``doubles/tier_items.py``: group
items, dense marks, blocks; and the write tier's start items, one a day), a dense entity writes blocks
for an hour a day and, in the same hour, a reading of its own in a group item (a mixed hour: flagged
blocks and re-marks), and each day a reading arrives two hours late (a block and a mark of an hour
compaction has counted: a redo request). The real :class:`CompactionRunner` runs every 5 simulated
minutes and the real :class:`RollupRunner` every minute, on one :class:`doubles.memory_dynamo.MemoryDynamo`
(the readings table and the control table) whose TTL is swept every 6 hours, as DynamoDB's would. Each
run's deadline is its function's timeout less the handler's margin, on a clock that every DynamoDB call
moves by CALL_MS.

What it shows: every item either side writes (group items, dense marks, sub-items, blocks, cluster blocks,
marks, rollups, totals, compaction's partials and parts of totals, redo requests, both watermarks)
stops growing once the longest-lived of them (the write tier's KEEP_MS, 4 days after its hour) has
expired (the start items, kept 8 days, stay within the days one is kept), every redo request is
handled within a run or two, compaction catches up after 8 hours down, and no run of either function
does more than its deadline allows.

``make test`` runs 7 days at a retention of 6 hours (about 20 s). Longer:
``COMPACTION_YEAR_DAYS=365 COMPACTION_YEAR_RETENTION_HOURS=720 pytest -s tests/unit/rollup/test_compaction_year.py``.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from adapters.batch_writer import BatchWriter, serialize_item
from adapters.compaction_state import CachedWatermark
from adapters.partition_reader import DynamoPartitionReader
from adapters.retry import Deadline
from adapters.rollup_store import MarkRecorder, RollupStore
from adapters.shard_map_source import StaticShardMap
from adapters.start_items import StartRecorder, write_tier_starts
from compaction.logic import REDO_LIMIT, CompactionRunner, StateStore
from doubles.memory_dynamo import MemoryDynamo
from doubles.tier_items import TierWriter
from keydesign import Layout, Reading, ShardMap, parse_timestamp
from keydesign.rollup import REDO_PREFIX, TTL_SLACK_MS, Granularities
from keydesign.writetier import (
    DENSE_READINGS,
    KEEP_MS,
    SLICE_MS,
    START_EVERY_MS,
    START_KEEP_MS,
    WriteTier,
    slice_start,
)
from rollup.logic import RollupRunner
from tests.unit.rollup.test_rollup_year import CALL_MS, CallClock, Timed

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
DAYS = int(os.environ.get("COMPACTION_YEAR_DAYS", "7"))
RETENTION_MS = int(os.environ.get("COMPACTION_YEAR_RETENTION_HOURS", "6")) * HOUR
T0 = parse_timestamp("2026-01-01T00:00:00Z")
LEVELS = Granularities.parse("1m,1h,1d")  # the default ROLLUPS
PREFIX, CONTROL = "readings", "control"
SETTLE_MS = 3 * MINUTE
MAX_FUTURE_MS = 2 * MINUTE
RUN_AT = 20_000
#: The functions' timeouts (infra/config.py: rollups 120 s, compaction 300 s) less the handlers' margin.
ROLLUP_BUDGET_MS = 120_000 - 5_000
COMPACTION_BUDGET_MS = 300_000 - 5_000
COMPACTION_EVERY = 5
GROUPS = 4
#: 24 sparse devices, each a reading every 4 minutes (6 a batch: group items).
SPARSE = tuple(f"device-{n:02d}" for n in range(24))
DENSE = "dense-1"
#: The hour of each day in which DENSE writes blocks (and, from its half, a reading of its own in a group item).
DENSE_HOUR = 3
LATE_HOUR = 22
SWEEP = 6 * HOUR
#: Compaction down this long (its runs failing), from noon two days before the end.
PAUSE_MS = 8 * HOUR


@dataclass
class Observed:
    rollup_calls: int = 0
    compaction_calls: int = 0
    redos_made: int = 0
    redos_done: int = 0
    #: Redo requests stored right after each compaction run, at most.
    redos_waiting: int = 0
    remarks: int = 0
    #: The hours the first compaction run after the pause compacted (catching up).
    caught_up: int = 0
    #: (time, live items by kind) after each TTL sweep.
    live: list[tuple[int, dict[str, int]]] = field(default_factory=list)


def live_items(db: MemoryDynamo) -> dict[str, int]:
    """Every item either function or ingest writes, by kind."""
    kinds: Counter[str] = Counter()
    for item in db.items(CONTROL):
        pk, sk = item["pk"]["S"], item["sk"]["S"]
        kind = "start" if pk.endswith("#start") else pk.split("#", 1)[0]
        kinds[f"{kind}#c" if kind == "rollall" and sk.endswith("#c") else kind] += 1
    for item in db.items(PREFIX):
        pk, sk = item["pk"]["S"], item["sk"]["S"]
        if pk.startswith("w#"):
            kinds["dense mark" if sk.startswith("!dense#") else "group item"] += 1
        elif pk.startswith("s#"):
            kinds["sub-item"] += 1
        elif pk.startswith("c#"):
            kinds["cluster block"] += 1
        else:
            kinds["block"] += 1
    return dict(kinds)


def redo_requests(db: MemoryDynamo) -> int:
    """The redo requests stored: the control table's items under a ``compactredo#`` key, counted a
    partition at a time (this runs after every compaction run; reading every control item each time
    was a tenth of the test's time)."""
    return sum(
        len(rows) for (table, pk), rows in db.partitions.items() if table == CONTROL and pk.startswith(REDO_PREFIX)
    )


class Deployment:
    def __init__(self) -> None:
        self.now = T0
        self.max_age_ms = min(RETENTION_MS, 3 * DAY)
        self.layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=PREFIX, table_period=None)
        shard_map = ShardMap.initial(self.layout.bucket, 8)
        self.tier = WriteTier(GROUPS)
        self.db = MemoryDynamo(page_items=1000, get_limit=100)
        self.rollup_clock, self.compaction_clock = CallClock(), CallClock()
        control = Timed(self.db, self.rollup_clock)
        self.store = RollupStore(control, BatchWriter(control), CONTROL, PREFIX, RETENTION_MS)
        self.rollups = RollupRunner(
            layout=self.layout,
            shard_maps=StaticShardMap(shard_map),
            reader=Timed(DynamoPartitionReader(self.db), self.rollup_clock),
            store=self.store,
            granularities=LEVELS,
            lateness_ms=self.max_age_ms,
            settle_ms=SETTLE_MS,
            write_tier=self.tier,
            watermark=CachedWatermark(control, CONTROL, PREFIX, ttl_ms=0),
            clock_ms=lambda: self.now,
        )
        compaction_db = Timed(self.db, self.compaction_clock)
        self.compaction = CompactionRunner(
            layout=self.layout,
            tier=self.tier,
            shard_maps=StaticShardMap(shard_map),
            reader=Timed(DynamoPartitionReader(self.db), self.compaction_clock),
            writer=BatchWriter(compaction_db),
            state=StateStore(compaction_db, CONTROL, PREFIX),
            retention_ms=RETENTION_MS,
            settle_ms=SETTLE_MS,
            max_future_ms=MAX_FUTURE_MS,
            rollups=RollupStore(compaction_db, BatchWriter(compaction_db), CONTROL, PREFIX, RETENTION_MS),
            levels=LEVELS,
            clock_ms=lambda: self.now,
        )
        self.writer = TierWriter(self.layout, self.tier, shard_map, RETENTION_MS)
        self.marks = MarkRecorder(self.store, LEVELS.finest)
        self.tier_start = StartRecorder(write_tier_starts(CONTROL, PREFIX), START_EVERY_MS)
        self.version = 0

    def close(self) -> None:
        self.rollups.close()
        self.compaction.close()

    def ingest(self, readings: list[Reading]) -> None:
        """One batch as ingest stores it: group items, dense marks and blocks, then the marks of the
        readings written as blocks (a dense entity's, late ones), stamped with the batch's start."""
        self.version += 1
        written = self.writer.ingest([(r, self.version) for r in readings], self.now)
        # the write tier's start item first, with the container's first group items and once a day after
        tiered = any("b" in item and item["pk"].startswith("w#") for _, item in written)
        if tiered and (start := self.tier_start.due(self.now)) is not None:
            self.db.put_item(TableName=start.table, Item=start.item)
            self.tier_start.written(self.now)
        for table, item in written:
            self.db.put_item(TableName=table, Item=serialize_item(item))
        counts = Counter(r.entity_id for r in readings)
        blocks = [
            (n, r.entity_id, r.ts_ms)
            for n, r in enumerate(readings)
            if counts[r.entity_id] >= DENSE_READINGS or slice_start(r.ts_ms) + SLICE_MS <= self.now
        ]
        assert self.marks.write(blocks, self.now, Deadline.never()) == {}
        # The model keeps every copy for its own compaction, which nothing here calls: what the simulation
        # holds stays as bounded as what it simulates.
        for hour in [h for h in self.writer.copies if h < self.now - 2 * self.max_age_ms]:
            del self.writer.copies[hour]
            self.writer.dense.pop(hour, None)

    def batch(self, minute: int) -> list[Reading]:
        at = self.now - 5_000
        readings = [
            Reading(entity_id=e, event_id=f"{minute}", ts_ms=at, measures={"v": minute % 97})
            for n, e in enumerate(SPARSE)
            if (minute + n) % 4 == 0
        ]
        hour_of_day, minute_of_hour = divmod(minute % (24 * 60), 60)
        if hour_of_day == DENSE_HOUR:
            if minute_of_hour < 30:  # blocks and a dense mark
                readings += [
                    Reading(entity_id=DENSE, event_id=f"{minute}-{k}", ts_ms=at - k * 100, measures={"v": k})
                    for k in range(DENSE_READINGS + 2)
                ]
            elif minute_of_hour % 10 == 0:  # then alone: a group item of a dense-marked entity
                readings.append(Reading(entity_id=DENSE, event_id=f"{minute}", ts_ms=at, measures={"v": 1}))
        if hour_of_day == LATE_HOUR and minute_of_hour == 0:  # two hours late: a compacted hour's block
            readings.append(
                Reading(entity_id=SPARSE[0], event_id=f"late-{minute}", ts_ms=at - 2 * HOUR, measures={"v": 5})
            )
        return readings

    def sweep(self) -> None:
        """DynamoDB's TTL: the control table's ``expires_at``, the readings table's ``ttl``."""
        now_s = self.now // 1000
        self.db.expire(now_s)
        self.db.expire(now_s, attribute="ttl")


def simulate(world: Deployment) -> Observed:
    seen = Observed()
    paused_from = T0 + (DAYS - 2) * DAY + 12 * HOUR
    pause = range(paused_from, paused_from + PAUSE_MS)
    for minute in range(DAYS * 24 * 60):
        world.now = T0 + minute * MINUTE + RUN_AT
        world.ingest(world.batch(minute))
        before = world.rollup_clock.calls.total()
        report = world.rollups.run(Deadline.after_ms(ROLLUP_BUDGET_MS, world.rollup_clock.seconds))
        assert not report.set_aside, report.set_aside
        seen.rollup_calls = max(seen.rollup_calls, world.rollup_clock.calls.total() - before)
        seen.redos_made += report.redos
        if minute % COMPACTION_EVERY == 0 and world.now not in pause:
            before = world.compaction_clock.calls.total()
            compacted = world.compaction.run(Deadline.after_ms(COMPACTION_BUDGET_MS, world.compaction_clock.seconds))
            assert compacted.error is None and not compacted.corrupt, compacted.summary()
            assert not compacted.redos_expired
            seen.compaction_calls = max(seen.compaction_calls, world.compaction_clock.calls.total() - before)
            seen.redos_done += compacted.redos
            seen.remarks += compacted.remarks
            if world.now - COMPACTION_EVERY * MINUTE in pause:
                seen.caught_up = compacted.hours
            seen.redos_waiting = max(seen.redos_waiting, redo_requests(world.db))
        if (world.now - RUN_AT + MINUTE) % SWEEP == 0:
            world.sweep()
            seen.live.append((world.now, live_items(world.db)))
    return seen


def test_days_of_compaction_and_rollups_keep_every_item_bounded_and_every_redo_done() -> None:
    # Given a deployment with the write tier on (compaction and rollups from its first minute)
    world = Deployment()

    # When DAYS days pass: ingest and the rollup function every minute, compaction every 5
    try:
        seen = simulate(world)
    finally:
        world.close()
    print(f"\n{DAYS} days, retention {RETENTION_MS // HOUR} h: {seen}")

    # Then each day's late reading asked compaction for a redo, and compaction did each, in its next run
    assert seen.redos_made >= DAYS - 1 and seen.redos_done == seen.redos_made
    assert seen.redos_waiting <= 1 < REDO_LIMIT
    # And each day's mixed hour (the dense entity's blocks and a group item of its own) was re-marked
    assert seen.remarks >= DAYS - 1
    # And after its pause compaction caught up the hours it missed (one run at that scale: a step is quick)
    assert seen.caught_up >= PAUSE_MS // HOUR
    # And no run did more than its deadline allows, at CALL_MS a call
    assert seen.rollup_calls <= ROLLUP_BUDGET_MS // CALL_MS
    assert seen.compaction_calls <= COMPACTION_BUDGET_MS // CALL_MS
    # And once the longest-lived item could expire (a partial or a redo request, KEEP_MS after its hour; a
    # group item is kept as long, or to the retention if shorter) and a sweep has run, nothing grows: the
    # most of each kind over the last day of sweeps is at most the most over the first day of them
    steady_from = T0 + SLICE_MS + max(KEEP_MS, RETENTION_MS + TTL_SLACK_MS) + SWEEP
    live = [counts for at, counts in seen.live if at >= steady_from]
    per_day = DAY // SWEEP
    assert len(live) >= 2 * per_day, "too short a simulation to see the steady state"
    first: Counter[str] = Counter()
    last: Counter[str] = Counter()
    for counts in live[:per_day]:
        first |= Counter(counts)
    for counts in live[-per_day:]:
        last |= Counter(counts)
    kinds = {"group item", "dense mark", "sub-item", "block", "cluster block", "rollall", "rollall#c", "rollgrp"}
    kinds.add("rollmark")
    assert kinds <= first.keys(), first
    assert all(last[kind] <= first[kind] * 1.05 + 2 for kind in last if kind != "compactstart"), (first, last)
    # The write tier's start items (the simulation's one container puts one a day, each kept START_KEEP_MS,
    # longer than the days simulated by default): never more than the days one is kept, and one at least
    assert all(1 <= counts.get("compactstart", 0) <= START_KEEP_MS // START_EVERY_MS + 1 for _, counts in seen.live)
    # And one watermark each
    assert live[-1]["rollstate"] == 1 and live[-1]["compactstate"] == 1
