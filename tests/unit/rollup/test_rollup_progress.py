"""A run makes progress inside a busy minute of marks, and reads an entity's neighbouring minutes once.

A slot's work is planned as steps; the state records how many are done, so a
run cut short (deadline, crash) is taken up at the next step instead of
redoing the slot, and a step is only started when the run has room for it.
"""

from __future__ import annotations

import pytest

from adapters.retry import Deadline
from adapters.rollup_store import ReadCount
from keydesign.rollup import Figures
from rollup.logic import FIRST_STEP_S
from tests.unit.rollup.oracles import same_figures
from tests.unit.rollup.test_rollup_exact import (
    LEVELS,
    MINUTE,
    T0,
    Batch,
    Raw,
    World,
    build,
    expected,
    fail_after,
    ingest,
)

ENTITIES = [f"sensor-{n:02d}" for n in range(12)]


def busy_minute(world: World) -> Raw:
    """12 entities, each with readings in 10 neighbouring minutes, all marked in one slot."""
    raw: Raw = {}
    world.now = T0 + 10 * MINUTE
    readings = tuple((e, m * MINUTE + 1_000 * n, f"e{n}", n + m) for e in ENTITIES for m in range(10) for n in range(2))
    ingest(world, Batch(10, readings, False), 1, raw, world.now)
    return raw


def rollups_equal_raw(world: World, raw: Raw) -> None:
    level = LEVELS.finest
    starts = range(T0, T0 + 10 * MINUTE, level)
    for entity in ENTITIES:
        got = world.store.entity_rollups(level, starts, entity, ReadCount())
        want = expected(raw, level, entity)
        assert all(same_figures(got[s], want[s]) for s in starts), entity
    totals = world.store.totals(level, starts.start, starts.stop, ReadCount())
    everything = expected(raw, level, None)
    assert all(same_figures(totals.get(s, Figures()), everything[s]) for s in starts)


def test_a_run_that_dies_inside_a_slot_is_taken_up_at_its_next_step() -> None:
    # Given a slot of 120 marked minutes (steps of 8 intervals: concurrency 2), and a run dying on its 4th write
    world = build(None, split=False)
    world.runner.run(Deadline.never())  # the first run: the watermark starts LATENESS back
    raw = busy_minute(world)
    world.now = T0 + 20 * MINUTE
    fail_after(world, 3)
    with pytest.raises(RuntimeError):
        world.runner.run(Deadline.never())
    # Then the state holds the slot's 3 steps done
    state = world.store.state()
    assert state is not None and state.through_ms == T0 + 10 * MINUTE and state.step == 3

    # When the next run comes
    world.db.__dict__.pop("batch_write_item")
    report = world.runner.run(Deadline.never())

    # Then it recomputed only what the first left, and every minute equals its raw readings
    assert report.recomputed[LEVELS.finest] == 120 - 3 * 8
    rollups_equal_raw(world, raw)


def test_no_step_starts_without_room_for_it_before_the_deadline() -> None:
    world = build(None, split=False)
    through = world.runner.run(Deadline.never()).through_ms
    busy_minute(world)
    world.now = T0 + 20 * MINUTE
    world.runner._longest_step_s = 10.0  # what this container has seen a step take
    report = world.runner.run(Deadline.after_ms(5_000))
    assert report.steps == 0 and report.through_ms == through


def test_a_container_that_has_timed_no_step_yet_keeps_room_for_one() -> None:
    # Given a container that has only applied empty minutes (no step timed), and a busy minute to apply
    world = build(None, split=False)
    through = world.runner.run(Deadline.never()).through_ms
    busy_minute(world)
    world.now = T0 + 20 * MINUTE
    # When a run has 1.2 s left, less than FIRST_STEP_S and a half, it starts no step (whose writes the deadline
    # would refuse, failing the run), and the watermark stays where it was
    assert 1.5 * FIRST_STEP_S > 1.2
    report = world.runner.run(Deadline.after_ms(1_200))
    assert report.steps == 0 and report.through_ms == through
    # And with room, the next run applies it all
    assert world.runner.run(Deadline.after_ms(60_000)).through_ms > through


def test_neighbouring_minutes_of_an_entity_are_read_in_one_pass() -> None:
    # Given 10 marked minutes of 12 entities in one 15-minute bucket of 3 shards
    world = build(None, split=False)
    world.reader.page_items = 1_000
    world.runner._chunk = 1_000  # the whole slot in one step (a step boundary splits a run in two)
    world.runner.run(Deadline.never())
    raw = busy_minute(world)
    world.now = T0 + 20 * MINUTE
    report = world.runner.run(Deadline.never())
    # Then each entity's minutes cost one Query per partition, not one per minute and partition
    shard_map = world.shard_map  # type: ignore[attr-defined]
    partitions = [len(world.layout.plan_entity(e, T0, T0 + MINUTE, shard_map).partitions) for e in ENTITIES]
    assert report.recomputed[LEVELS.finest] == 120
    assert report.raw.calls == sum(partitions) > 0
    rollups_equal_raw(world, raw)
