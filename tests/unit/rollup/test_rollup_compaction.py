"""The rollup function beside compaction (docs/rollups.md, "Rollups from the compaction pass").

A late reading (its block written after its hour ended) is marked by ingest. While compaction has not
done its hour, its mark is pending: re-stamped into the next slot. Once it has, the minute is recomputed,
and if the entity's hour was compaction's (an unflagged compacted block), a redo request asks compaction
to hand it over. Each slot is planned with the compaction watermark read when it was planned, kept in the
state, so a run cut short plans the same steps. ``totals_through`` follows the watermark once the rollup
function has applied every slot stamped before it read it.
"""

from __future__ import annotations

from typing import Any

import pytest

from adapters.retry import Deadline
from adapters.rollup_store import PLANNED_BEFORE_W, ReadCount, RollupState
from keydesign import Reading
from keydesign.rollup import STATE_PK, Figures, Mark, RedoRequest, floor_to, redo_pk
from keydesign.writetier import KEEP_MS, SLICE_MS, CompactionState, WriteTier
from tests.unit.rollup.oracles import same_figures
from tests.unit.rollup.test_rollup_exact import LEVELS, MINUTE, T0, World, build, fail_after

HOUR = SLICE_MS
ENTITY = "sensor-a"


def _block(world: World, entity: str, ts: int, value: float, version: int = 1) -> None:
    """A reading written as a block of its own entity (a late reading, or a dense entity's)."""
    reading = Reading(entity_id=entity, event_id=f"e{ts}", ts_ms=ts, measures={"v": value})
    world.reader.store(world.layout, world.shard_map, [(reading, version)])  # type: ignore[attr-defined]


def _mark(world: World, stamp: int, entity: str, ts: int) -> None:
    world.store.write(world.store.marks_writes([Mark.of(stamp, LEVELS.finest, ts, entity)]), Deadline.never())


def _started(now: int, through: int, advanced_at: int = 0) -> World:
    """A tiered world whose rollup function first ran at ``now`` (its watermark starts there), compaction
    having done every hour before ``through``, moved its watermark at ``advanced_at``."""
    world = build(None, split=False, tiered=True)
    world.now, world.through, world.advanced_at = now, through, advanced_at
    world.runner.run(Deadline.never())
    return world


def _minute(world: World, entity: str, start: int) -> dict[int, Figures]:
    return world.store.entity_rollups(LEVELS.finest, [start], entity, ReadCount(), consistent=True)


def _redos(world: World) -> list[dict[str, Any]]:
    return [item for item in world.db.items("control") if item["pk"]["S"] == redo_pk("readings")]


def test_a_late_mark_waits_until_compaction_has_done_its_hour_then_is_recomputed() -> None:
    # Given a late reading of the hour T0 (written at T0+1h+2m, after the hour ended) and its mark, and
    # compaction not past that hour
    world = _started(T0 + HOUR + MINUTE, through=T0)
    late_ts = T0 + 59 * MINUTE + 5_000
    _block(world, ENTITY, late_ts, 7.5)
    _mark(world, T0 + HOUR + 2 * MINUTE, ENTITY, late_ts)
    # When the rollup function runs over the next minutes
    world.now = T0 + HOUR + 10 * MINUTE
    report = world.runner.run(Deadline.never())
    # Then the mark is pending: re-stamped slot after slot (6 of them), the minute not recomputed
    assert report.pending == 6 and report.recomputed == {} and report.redos == 0
    assert _minute(world, ENTITY, late_ts - late_ts % MINUTE) == {}
    stamped = floor_to(report.through_ms, MINUTE)
    assert world.store.marks(stamped, ReadCount()) == [Mark.of(stamped, MINUTE, late_ts, ENTITY)]
    # When compaction passes the hour, the next slot recomputes the minute from raw: the late reading is in it
    world.through = T0 + HOUR
    world.now += 2 * MINUTE
    report = world.runner.run(Deadline.never())
    assert report.pending == 0 and report.recomputed[LEVELS.finest] == 1
    (figures,) = _minute(world, ENTITY, late_ts - late_ts % MINUTE).values()
    assert same_figures(figures, _one(7.5))
    # and, the entity having no compacted block of the hour, no redo is asked for
    assert report.redos == 0 and _redos(world) == []


def _compacted(world: World, entity: str, ts: int, *, flagged: bool, version: int = 1) -> None:
    """``entity``'s reading at ``ts`` stored in a group item, and the hour compacted (flagged: the block's
    ``r`` set names it, the entity's hour is the rollup function's)."""
    assert world.writer is not None
    reading = Reading(entity_id=entity, event_id="g", ts_ms=ts, measures={"v": 1.0})
    for table, item in world.writer.ingest([(reading, version)], ts):
        world.reader.add_item(table, item)
    hour = ts - ts % HOUR
    for table, item in world.writer.compact(hour):
        world.reader.add_item(table, {**item, "r": {entity}} if flagged else item)


OWNERS = ["compaction", "rollups (flagged block)", "rollups (no compacted block)", "rollups (redone)"]


@pytest.mark.parametrize("cached", [None, CompactionState()], ids=["state as stored", "state cached before"])
@pytest.mark.parametrize("owner", OWNERS)
def test_a_late_reading_of_an_entity_hour_compaction_counted_asks_for_a_redo(
    owner: str, cached: CompactionState | None
) -> None:
    # Given the entity's hour T0: a reading in a group item, compacted (unflagged: compaction's; flagged:
    # the rollup function's; redone: a flagged block beside the unflagged one it replaced, of another
    # version), or no group-item reading at all; then a late reading of the hour, marked. The runner's
    # cached compaction state is the stored one, or one from before any hour was compacted (nor any into
    # cluster blocks): the owner is asked of the state read again
    world = _started(T0 + HOUR + MINUTE, through=T0 + HOUR)
    world.cached = cached
    if owner != "rollups (no compacted block)":
        _compacted(world, ENTITY, T0 + 10 * MINUTE, flagged=owner == "rollups (flagged block)")
    if owner == "rollups (redone)":
        _compacted(world, ENTITY, T0 + 10 * MINUTE, flagged=True, version=2)
    late_ts = T0 + 50 * MINUTE  # within LATENESS (20 minutes) of its mark
    _block(world, ENTITY, late_ts, 2.0, version=5)
    _mark(world, T0 + HOUR + 2 * MINUTE, ENTITY, late_ts)
    # When the rollup function applies the slot (compaction has done the hour)
    world.now = T0 + HOUR + 5 * MINUTE
    report = world.runner.run(Deadline.never())
    # Then the minute is recomputed; and only an entity-hour compaction counted gets a redo request, of its
    # group's hour, expiring with the hour's group items
    assert report.pending == 0 and report.recomputed[LEVELS.finest] == 1
    if owner == "compaction":
        assert report.redos == 1
        request = RedoRequest(T0, WriteTier(2).group_of(ENTITY), ENTITY)
        pk, sk = request.key("readings")
        assert _redos(world) == [{"pk": {"S": pk}, "sk": {"S": sk}, "expires_at": {"N": str((T0 + KEEP_MS) // 1000)}}]
        assert RedoRequest.parse(sk) == request
    else:
        assert report.redos == 0 and _redos(world) == []


def test_totals_through_moves_to_the_watermark_once_the_minute_compaction_moved_it_is_applied() -> None:
    # Given a rollup function that first ran at T0+10m, compaction done through W1, moved at T0+18m30s
    w1, w2 = T0 - HOUR, T0
    world = _started(T0 + 10 * MINUTE, through=w1, advanced_at=T0 + 18 * MINUTE + 30_000)
    # When it runs at T0+20m (slots T0+8m .. T0+17m; through T0+18m has not passed the minute T0+18m)
    world.now = T0 + 20 * MINUTE
    report = world.runner.run(Deadline.never())
    state = world.store.state()
    assert state is not None and state.totals_through == 0 and report.totals_through_ms == 0
    # When a run at T0+21m applies the slot T0+18m: through (T0+19m) passes it, totals_through = W1
    world.now = T0 + 21 * MINUTE
    report = world.runner.run(Deadline.never())
    assert report.totals_through_ms == w1 and report.totals_lag_ms == world.now - w1
    assert report.summary()["totals_through"].startswith("2026")
    # When compaction moves to W2 at T0+21m10s: totals_through stays W1 until through passes T0+21m
    world.through, world.advanced_at = w2, T0 + 21 * MINUTE + 10_000
    world.now = T0 + 23 * MINUTE  # slots up to T0+20m: through T0+21m
    assert world.runner.run(Deadline.never()).totals_through_ms == w1
    world.now = T0 + 24 * MINUTE  # slot T0+21m: through T0+22m
    assert world.runner.run(Deadline.never()).totals_through_ms == w2


def test_a_run_with_no_slot_to_apply_moves_totals_through_too() -> None:
    # Given a sparse fleet's deployment: no marks at all, compaction done through T0, moved at T0+2m
    world = _started(T0 + 10 * MINUTE, through=T0, advanced_at=T0 + 2 * MINUTE)
    # Then the first run (which starts at its own last closed minute: nothing to apply) moves totals_through
    state = world.store.state()
    assert state is not None and state.totals_through == T0
    # and a run with nothing new to apply moves it when compaction moves on
    world.through, world.advanced_at = T0 + HOUR, T0 + 3 * MINUTE
    world.now = T0 + 10 * MINUTE + 5_000
    assert world.runner.run(Deadline.never()).totals_through_ms == T0 + HOUR


def test_without_the_write_tier_totals_are_whole_up_to_through() -> None:
    world = build(None, split=False)
    world.now = T0 + 10 * MINUTE
    world.runner.run(Deadline.never())
    world.now = T0 + 20 * MINUTE
    report = world.runner.run(Deadline.never())
    assert report.totals_through_ms == report.through_ms == T0 + 18 * MINUTE


def test_the_state_round_trips_and_an_older_item_reads_its_new_fields_as_zero() -> None:
    world = build(None, split=False)
    state = RollupState(T0, 3, T0 - HOUR, 2, w=T0 - HOUR, totals_through=7)
    world.store.save_state(state)
    assert world.store.state() == state
    # an item an older rollup function wrote, between slots and inside one
    old = {"pk": {"S": STATE_PK}, "sk": {"S": "readings"}, "through": {"N": str(T0)}, "late": {"N": "0"}}
    world.db.put_item(TableName="control", Item=old)
    assert world.store.state() == RollupState(T0)
    world.db.put_item(TableName="control", Item={**old, "step": {"N": "2"}})
    # it planned every late mark to be recomputed: as a watermark past every hour plans it
    assert world.store.state() == RollupState(T0, step=2, w=PLANNED_BEFORE_W)


def test_a_slot_resumed_after_its_watermark_moved_plans_the_same_steps() -> None:
    # Given a slot with 20 entities' marked minutes of the current hour (several steps) and a late mark of the
    # hour before, which compaction has not done
    world = _started(T0 + HOUR + MINUTE, through=T0)
    stamp = T0 + HOUR + 2 * MINUTE
    for n in range(20):
        _block(world, f"dense-{n:02d}", stamp + n, float(n))
        _mark(world, stamp, f"dense-{n:02d}", stamp + n)
    late_ts = T0 + 50 * MINUTE
    _block(world, ENTITY, late_ts, 4.0)
    _mark(world, stamp, ENTITY, late_ts)
    # When a run dies inside the slot, after its first step
    world.now = T0 + HOUR + 5 * MINUTE
    fail_after(world, 1)
    with pytest.raises(RuntimeError):
        world.runner.run(Deadline.never())
    world.db.__dict__.pop("batch_write_item")
    state = world.store.state()
    assert state is not None and state.through_ms == stamp and state.step == 1 and state.w == T0
    # and compaction passes the hour before the next run
    world.through = T0 + HOUR
    world.now += 3 * MINUTE
    report = world.runner.run(Deadline.never())
    # Then the resumed slot keeps its plan: the late mark is re-stamped (pending), and recomputed in the next
    # slot, planned with the new watermark; every minute equals its readings
    assert report.pending == 1
    (figures,) = _minute(world, ENTITY, late_ts).values()
    assert same_figures(figures, _one(4.0))
    for n in range(20):
        (got,) = _minute(world, f"dense-{n:02d}", stamp).values()
        assert same_figures(got, _one(float(n)))


def _one(value: float) -> Figures:
    figures = Figures()
    figures.add({"v": value})
    return figures
