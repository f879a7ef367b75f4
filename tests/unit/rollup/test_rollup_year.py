"""The rollup function's watermark over simulated months (issue 29, item 8), in memory, with the real code.

Ingest's :class:`MarkRecorder` and the :class:`RollupRunner` run on a moved clock against
:class:`doubles.memory_dynamo.MemoryDynamo` (the control table; its TTL swept every 6 hours,
as DynamoDB's would) and a :class:`doubles.memory_dynamo.MemoryReader` (hourly tables of raw
blocks). The function runs every simulated minute, as its schedule does, except during a pause
(the function failing for PAUSE); a few entities send a reading every few minutes, one a day
MAX_AGE / 2 late, and each day one entity is split and the one split the day before scaled down
(the map compacted past retention, as the detector does).

Each run's deadline is the function's timeout less the handler's margin, on a clock that every
DynamoDB call moves by CALL_MS, one call after another (in AWS a run reads 16 at once, so it does
more per run: the bound is the deadline either way).

``make test`` runs 3 days at a retention of 6 hours (about 3 s of CPU a simulated day). The figures in
docs/rollups.md ("Over months"): ``ROLLUP_YEAR_DAYS=365 ROLLUP_YEAR_RETENTION_HOURS=720
pytest -s tests/unit/rollup/test_rollup_year.py`` (30 days' retention, a day's pause).
"""

from __future__ import annotations

import math
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from adapters.batch_writer import BatchWriter
from adapters.partition_reader import Page, PageRequest
from adapters.retry import Deadline
from adapters.rollup_store import MarkRecorder, RollupStore
from doubles.memory_dynamo import MemoryDynamo, MemoryReader
from keydesign import Layout, Reading, ShardMap, parse_timestamp
from keydesign.rollup import MARK_SHARDS, SLOT_MS, TTL_SLACK_MS, Granularities
from rollup.logic import CONCURRENCY, RollupRunner

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
DAYS = int(os.environ.get("ROLLUP_YEAR_DAYS", "3"))
RETENTION_MS = int(os.environ.get("ROLLUP_YEAR_RETENTION_HOURS", "6")) * HOUR
#: The function down this long (more minutes than a run can apply) from noon three days before the end.
PAUSE_MS = 8 * HOUR if RETENTION_MS < DAY else DAY
T0 = parse_timestamp("2026-01-01T00:00:00Z")
LEVELS = Granularities.parse("1m,1h,1d")  # the default ROLLUPS
CONTROL = "control"
#: ROLLUP_SETTLE as the stack sets it (ingest's 120 s timeout + 60 s); the schedule fires RUN_AT into a minute.
SETTLE_MS = 3 * MINUTE
RUN_AT = 20_000
#: The rollup function's 120 s timeout (infra/config.py) less the handler's MARGIN_MS (importing the
#: handler parses the environment); what each call takes on the deadline's clock.
BUDGET_MS = 120_000 - 5_000
CALL_MS = 10
ENTITIES = tuple(f"sensor-{n:03d}" for n in range(4))
#: A batch of one reading per entity every INGEST_EVERY minutes.
INGEST_EVERY = 7
SWEEP = 6 * HOUR


class CallClock:
    """The deadline's clock: CALL_MS a call, one after another; the calls by name (thread-safe)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def tick(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1

    def seconds(self) -> float:
        return self.calls.total() * CALL_MS / 1000


class Timed:
    """A client, or a partition reader, whose every call ticks ``clock``."""

    def __init__(self, inner: Any, clock: CallClock) -> None:
        self._inner = inner
        self._clock = clock

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self._clock.tick(name)
            return method(*args, **kwargs)

        return call

    def read_page(self, request: PageRequest) -> Page:
        self._clock.tick("read_page")
        page: Page = self._inner.read_page(request)
        return page


@dataclass
class Runs:
    """The largest figures of a kind of run (steady: every minute; catching up: after the pause)."""

    runs: int = 0
    slots: int = 0
    calls: int = 0
    queries: int = 0
    lag_ms: int = 0

    def keep(self, slots: int, calls: Counter[str], lag_ms: int) -> None:
        self.runs += 1
        self.slots = max(self.slots, slots)
        self.calls = max(self.calls, calls.total())
        self.queries = max(self.queries, calls["query"])
        self.lag_ms = max(self.lag_ms, lag_ms)


@dataclass
class Observed:
    first_through_ms: int = 0
    first_calls: int = 0
    steady: Runs = field(default_factory=Runs)
    catching_up: Runs = field(default_factory=Runs)
    #: (time, live control items by kind) after each TTL sweep.
    live: list[tuple[int, dict[str, int]]] = field(default_factory=list)


def live_items(db: MemoryDynamo) -> dict[str, int]:
    """The control table's items by kind: marks, start items, marked-minutes index items, rollups, totals,
    the state."""
    kinds: Counter[str] = Counter()
    for item in db.items(CONTROL):
        pk = item["pk"]["S"]
        kind = "start" if pk.endswith("#start") else "minutes" if "#minutes#" in pk else pk.split("#", 1)[0]
        kinds[kind] += 1
    return {k: kinds[k] for k in ("rollmark", "start", "minutes", "rollup", "rollall", "rollstate")}


class Deployment:
    """Ingest, the detector's shard map and the rollup function of one deployment, at ``now``."""

    def __init__(self) -> None:
        self.now = T0
        self.max_age_ms = min(RETENTION_MS, 3 * DAY)  # MAX_AGE: 3 days by default, never past retention
        self.layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings", table_period="hour")
        self.shard_map = ShardMap.initial(self.layout.bucket, 100)
        self.clock = CallClock()
        self.db = MemoryDynamo(page_items=1000, get_limit=100)
        self.raw = MemoryReader()
        control = Timed(self.db, self.clock)
        self.store = RollupStore(control, BatchWriter(control), CONTROL, "readings", RETENTION_MS)
        self.runner = RollupRunner(
            layout=self.layout,
            shard_maps=self,
            reader=Timed(self.raw, self.clock),
            store=self.store,
            granularities=LEVELS,
            lateness_ms=self.max_age_ms,
            settle_ms=SETTLE_MS,
            concurrency=CONCURRENCY,
            clock_ms=lambda: self.now,
        )
        self.marks = MarkRecorder(self.store, LEVELS.finest)

    def current(self) -> ShardMap:  # the runner's shard map source
        return self.shard_map

    def ingest(self, readings: list[Reading]) -> None:
        """One batch as ingest stores it: its blocks, then its marks stamped with the batch's start."""
        self.raw.store(self.layout, self.shard_map, [(r, self.now) for r in readings], retention_ms=RETENTION_MS)
        indexed = [(n, r.entity_id, r.ts_ms) for n, r in enumerate(readings)]
        assert self.marks.write(indexed, self.now, Deadline.never()) == {}

    def new_day(self, day: int) -> None:
        """A new ingest container (a start item); one entity split from the next hour, yesterday's scaled
        down; the map compacted past retention; a reading MAX_AGE / 2 late."""
        self.marks = MarkRecorder(self.store, LEVELS.finest)
        start = self.now - self.now % HOUR + HOUR
        changed = self.shard_map.with_entity(ENTITIES[day % len(ENTITIES)], 4, start, now_ms=self.now)
        if day:
            changed = changed.with_entity(ENTITIES[(day - 1) % len(ENTITIES)], 1, start, now_ms=self.now)
            late = self.now - self.max_age_ms // 2
            self.ingest([Reading(entity_id=ENTITIES[0], event_id=f"late-{day}", ts_ms=late, measures={"v": day})])
        self.shard_map = changed.compacted(self.now - RETENTION_MS, entity_default=1)

    def run(self) -> tuple[int, Counter[str], int]:
        """One scheduled run: its slots, its calls, the lag it leaves. A run that raises (a step started
        without the time to write it, say) fails the test."""
        before = Counter(self.clock.calls)
        report = self.runner.run(Deadline.after_ms(BUDGET_MS, self.clock.seconds))
        return report.slots, self.clock.calls - before, report.lag_ms


def simulate(world: Deployment, pause: range) -> Observed:
    seen = Observed()
    catching_up = False
    for minute in range(DAYS * 24 * 60):
        world.now = T0 + minute * MINUTE + RUN_AT
        if minute % (24 * 60) == 0:
            world.new_day(minute // (24 * 60))
        if minute % INGEST_EVERY == 1:
            values = {"v": minute}
            world.ingest(
                [Reading(entity_id=e, event_id=f"{minute}", ts_ms=world.now - 5_000, measures=values) for e in ENTITIES]
            )
        if world.now in pause:
            catching_up = True
            continue
        slots, calls, lag = world.run()
        if minute == 0:
            first = world.store.state()
            seen.first_through_ms, seen.first_calls = (first.through_ms if first else 0), calls.total()
        elif catching_up:
            seen.catching_up.keep(slots, calls, lag)
            catching_up = lag > SETTLE_MS + 2 * SLOT_MS
        else:
            seen.steady.keep(slots, calls, lag)
        if (world.now - RUN_AT + MINUTE) % SWEEP == 0:  # DynamoDB's TTL, then what it leaves
            world.db.expire(world.now // 1000)
            world.raw.requests.clear()
            seen.live.append((world.now, live_items(world.db)))
    return seen


def test_months_of_runs_keep_the_watermark_up_each_run_bounded_and_the_control_items_bounded_by_retention() -> None:
    # Given a deployment whose rollup function first runs before any reading, and is down for PAUSE_MS
    world = Deployment()
    pause_from = T0 + (DAYS - 3) * DAY + 12 * HOUR
    pause = range(pause_from, pause_from + PAUSE_MS)

    # When DAYS days pass, a run every minute but during the pause
    try:
        seen = simulate(world, pause)
    finally:
        world.runner.close()
    state = world.store.state()
    print(f"\n{DAYS} days, retention {RETENTION_MS // HOUR} h, pause {PAUSE_MS // HOUR} h: {seen}")

    # Then the first run started at the deployment's start (its last closed minute: nothing before it to
    # read), not MAX_AGE back, and read no mark
    assert T0 - SETTLE_MS - SLOT_MS <= seen.first_through_ms <= T0 and seen.first_calls <= 3
    # And after every scheduled run the watermark trails the clock by at most SETTLE + 2 minutes,
    # applying one minute a run: 32 mark Queries, and 32 per total recomputed (a minute, an hour and a
    # day of the minute's readings, and as many of a late reading's)
    assert seen.steady.lag_ms <= SETTLE_MS + 2 * SLOT_MS and seen.steady.slots <= 2
    assert seen.steady.queries <= MARK_SHARDS * (1 + 2 * len(LEVELS.levels)) * seen.steady.slots
    # And after the pause no run does more than its deadline allows (BUDGET_MS of CALL_MS calls, and the
    # last slot it started), nor more runs than reading every slot's mark keys would take
    per_run = BUDGET_MS // CALL_MS
    assert seen.catching_up.calls <= per_run + MARK_SHARDS + 1
    slots_per_run = per_run // (MARK_SHARDS + 1) - 1
    assert seen.catching_up.runs <= math.ceil(PAUSE_MS / SLOT_MS / slots_per_run) + 1
    # And an empty minute costs no mark Query (the marked-minutes index: a Query an hour): a run's Queries
    # are the marked minutes' (a batch every INGEST_EVERY minutes, the deferred hour and day marks), 32 for
    # the marks and 32 for the minute's total, and 32 per hour or day total
    hours = math.ceil(seen.catching_up.slots / 60) + 1
    marked = math.ceil(seen.catching_up.slots / INGEST_EVERY) + hours + 1
    assert seen.catching_up.queries <= 2 * MARK_SHARDS * marked + MARK_SHARDS * (hours + 1) + hours
    assert state is not None and state.late == 0 and state.step == 0  # late readings within MAX_AGE: applied
    # And what the control table holds once TTL has run stops growing one retention + TTL_SLACK + a day
    # in: every item outlives its readings by a day at most, and nothing but the state lives longer
    steady_from = T0 + RETENTION_MS + TTL_SLACK_MS + DAY
    live = [counts for at, counts in seen.live if at >= steady_from - MINUTE]
    assert len(live) >= 3, "too short a simulation to see the steady state"
    first, last = live[0], live[-1]
    assert all(last[kind] <= first[kind] * 1.05 + 2 for kind in first), (first, last)
    assert last["rollstate"] == 1
    # (the bound: a mark per entity and minute marked, with the hour's and day's it defers)
    marked_minutes = (RETENTION_MS + TTL_SLACK_MS + DAY) // MINUTE / INGEST_EVERY
    assert last["rollmark"] <= len(ENTITIES) * marked_minutes * 1.1 + len(ENTITIES) * (RETENTION_MS + 3 * DAY) / HOUR
