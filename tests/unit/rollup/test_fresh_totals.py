"""Fresh minute totals (docs/rollups.md): the finest totals of the hours compaction has not done yet.

The re-pack puts a *slice partial* per group and settled slice (the readings whose newest copy is a group
item's, but the (entity, minute) pairs holding a block reading it read, which ingest marked) and, after the
slice's last group, the fleet's fresh part of each of its minutes (``<start>#p``). ``GET /aggregates`` serves
the finest level up to ``fresh_through`` as the rollup function's item plus the fresh part, where ``fresh``
follows on from ``totals_through``. A reading late past its slice *holds* the fresh totals at its slice until
compaction has done its hour. The whole system runs here (``test_rollup_exact``'s: the real ingest packing,
compaction, rollup and query functions on one in-memory DynamoDB), compaction and the rollup function every
minute; every answer is checked against the raw readings stamped before the rollup function's ``through``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.retry import Deadline
from keydesign import format_ts, parse_timestamp
from keydesign.rollup import floor_to
from keydesign.writetier import DENSE_READINGS
from query.params import TimeRange
from rollup.logic import RunReport
from tests.unit.keydesign.strategies import PROPERTY
from tests.unit.rollup.test_rollup_exact import (
    ENTITIES,
    LATENESS,
    LEVELS,
    MINUTE,
    T0,
    Batch,
    Raw,
    System,
    build_system,
    check_fresh_totals,
    ingest_system,
)


@dataclass
class Run:
    """A system and what was sent to it: the batches (arrival, version, batch), each reading's newest
    copy, and the (entity, minute) of the readings marked past the rollup function's lateness (counted,
    not applied)."""

    world: System
    history: list[tuple[int, int, Batch]] = field(default_factory=list)
    raw: Raw = field(default_factory=dict)
    stale: set[tuple[str, int]] = field(default_factory=set)
    report: RunReport = field(default_factory=RunReport)

    def minute(self, minute: int, batches: list[Batch]) -> int:
        """One minute of the system: compaction's run, the minute's batches (each its own version), the
        rollup function's run; then the totals served against raw. Returns the fresh intervals compared."""
        world = self.world
        world.now = T0 + minute * MINUTE
        world.compact()
        for batch in batches:
            version = len(self.history)
            self.history.append((world.now, version, batch))
            for entity, ts in ingest_system(world, batch, version, self.raw, world.now):
                if floor_to(ts, MINUTE) + MINUTE + LATENESS < floor_to(world.now, MINUTE):
                    self.stale.add((entity, floor_to(ts, MINUTE)))
        self.report = world.runner.run(Deadline.never())
        return check_fresh_totals(world, self.history, self.stale)


def _sparse(minute: int, n: int) -> Batch:
    """Each entity's reading of ``minute`` (its ``n``-th), sent 20 s after it: group items, no mark."""
    at = minute * MINUTE
    return Batch(minute, tuple((e, at - 20_000 - 1_000 * i, f"r{n}", n + i) for i, e in enumerate(ENTITIES)), False)


def test_a_sparse_fleets_minute_totals_are_served_minutes_behind_not_an_hour() -> None:
    # Given a fleet whose readings all go to group items, compaction and the rollup function every minute
    run = Run(world := build_system(None, False, tiered=True))
    compared, lags = 0, []
    # When 100 minutes pass
    for minute in range(100):
        compared += run.minute(minute, [_sparse(minute, minute)])
        reached = world.service.total_aggregates(_window(world), LEVELS.finest).reached
        assert reached is not None
        lags.append(world.now - _ms(reached))
        # (the run's report says as much: MinuteTotalsLagSeconds)
        assert run.report.minute_totals_lag_ms == lags[-1] or minute < 3
    # Then every minute total served was exact, and past the first hour (compaction's start) the newest one
    # served was at most 10 minutes old: its 5-minute slice, 3 of settle, a minute's run and a grace
    assert compared > 300
    assert max(lags[60:]) <= 10 * MINUTE, [lag // MINUTE for lag in lags]
    # (the same state without its fresh window serves up to the hour compaction is at)
    state = world.store.state()
    assert state is not None
    world.store.save_state(replace(state, fresh_from=0, fresh_through=0))
    reached = world.service.total_aggregates(_window(world), LEVELS.finest).reached
    assert reached is not None and world.now - _ms(reached) > 30 * MINUTE


def test_a_reading_late_past_its_slice_holds_the_fresh_totals_until_its_hour_is_compacted() -> None:
    # Given a sparse fleet served fresh
    run = Run(world := build_system(None, False, tiered=True))
    for minute in range(70):
        run.minute(minute, [_sparse(minute, minute)])
    state = world.store.state()
    assert state is not None and not state.holds
    # When a reading of 65:30 arrives at minute 71 with a correction of a group-item reading of 64:40 (sent
    # at 65:00): both late past their slice, so blocks with marks. The 64:40 one's slice was re-packed before
    # it; the 65:30 one's after it, which reads its block, leaves its minute to the rollup function and marks
    # it again
    late_ts = T0 + 65 * MINUTE + 30_000
    late = Batch(71, (("sensor-b", late_ts - T0, "late", 1000), ("sensor-a", 65 * MINUTE - 20_000, "r65", -5)), False)
    for minute in range(70, 130):
        run.minute(minute, [_sparse(minute, minute), *([late] if minute == 71 else [])])
        state = world.store.state()
        assert state is not None
        if T0 + 75 * MINUTE <= world.now < T0 + 120 * MINUTE:  # its marks read, its hour not compacted yet
            # Then the correction's slice is held: nothing from 60:00 on is served fresh (its partial counted
            # the older copy), and what is served is exact (checked each minute)
            assert state.holds == (T0 + 60 * MINUTE,)
            assert state.fresh_through <= T0 + 60 * MINUTE
    # And once compaction has done the hour, the hold is gone and the totals are fresh and exact again
    state = world.store.state()
    assert state is not None and not state.holds and state.totals_through == T0 + 120 * MINUTE
    totals = world.service.total_aggregates(_window(world), LEVELS.finest)
    got = {i.start: i.readings for i in totals.intervals}
    assert got[format_ts(T0 + 65 * MINUTE)] == 4  # the 3 readings sent at 66:00, and the late one


def test_a_group_item_reading_after_its_minutes_block_mark_was_applied_is_counted() -> None:
    # Given hot-1 dense at 21:00 (blocks of 20:56-20:59, marked, applied by the rollup function at about 24:00),
    # and then a reading of hot-1 at 20:00 sent at 25:00 (in time for its slice: a group item, no mark)
    run = Run(build_system("hour", False, tiered=True))
    dense = Batch(21, tuple(("hot-1", 21 * MINUTE - 500 * i, f"d{i}", i) for i in range(DENSE_READINGS)), False)
    late_group_item = Batch(25, (("hot-1", 20 * MINUTE, "e1", 100),), False)
    for minute in range(40):
        # Then every total served, fresh ones too, counts both (the re-pack left hot-1's 20:00 out of its
        # partial and marked it again once the slice's group items were final: checked each minute)
        run.minute(minute, {21: [dense], 25: [late_group_item]}.get(minute, []))
    state = run.world.store.state()
    assert state is not None and state.fresh_through >= T0 + 25 * MINUTE
    totals = run.world.service.total_aggregates(_window(run.world), LEVELS.finest)
    assert {i.start: i.readings for i in totals.intervals}[format_ts(T0 + 20 * MINUTE)] == DENSE_READINGS


on_time = st.integers(0, 50_000)
#: How long before its batch a reading was taken: mostly in time, sometimes late past its slice (or hour).
delays = st.one_of(on_time, on_time, on_time, st.integers(0, 70 * MINUTE))
values = st.one_of(st.integers(-1000, 1000), st.floats(-1e6, 1e6, allow_nan=False))
readings = st.tuples(st.sampled_from(ENTITIES), delays, st.sampled_from(("e1", "e2", "e3")), values)
#: A minute's batch: a few readings, or a dense entity's (blocks, a dense mark), or none.
batch_at = st.one_of(
    st.lists(readings, max_size=4),
    st.tuples(st.sampled_from(ENTITIES), on_time).map(
        lambda r: [(r[0], r[1] + 500 * i, f"d{i}", i) for i in range(DENSE_READINGS)]
    ),
    st.just([]),
)


@settings(PROPERTY, max_examples=25)
@given(minutes=st.lists(batch_at, min_size=70, max_size=100), hourly=st.booleans())
def test_fresh_minute_totals_equal_the_raw_readings(
    minutes: list[list[tuple[str, int, str, float]]], hourly: bool
) -> None:
    # Given minutes of batches (readings in time, dense entities, corrections, readings late past their
    # slice or hour) and compaction and the rollup function every minute, on one table or hourly tables
    run = Run(build_system("hour" if hourly else None, False, tiered=True))
    for minute, found in enumerate(minutes):
        batch = Batch(minute, tuple((e, minute * MINUTE - delay, i, v) for e, delay, i, v in found), False)
        # Then at every minute, every minute total served equals the raw readings stamped before it
        run.minute(minute, [batch] if found else [])


def _window(world: System) -> TimeRange:
    return TimeRange(T0, world.now)


def _ms(text: str) -> int:
    return parse_timestamp(text)
