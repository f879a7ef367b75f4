"""The marked-minutes index: the rollup function reads a minute's MARK_SHARDS mark keys only when the
minute's index item says it has marks, and every mark writer puts that item with its marks.

Ingest's :class:`MarkRecorder` (once per container and minute, its marks counting as written only with
it), the rollup function's own deferred marks (:meth:`RollupRunner._write_marks`) and compaction's
re-marks (``RollupStore.marks_writes``: tests/integration/compaction/test_rollups.py checks the item is
stored with them). A state written before the index reads every key until ``indexed_from``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from adapters.batch_writer import BatchWriter
from adapters.retry import Deadline
from adapters.rollup_store import MarkRecorder, ReadCount, RollupState, RollupStore
from doubles.memory_dynamo import MemoryDynamo
from keydesign.rollup import MARK_SHARDS, Mark, floor_to, minute_key
from rollup.logic import UPGRADE_REACH_MS
from tests.unit.rollup.oracles import same_figures
from tests.unit.rollup.test_rollup_exact import LEVELS, MINUTE, T0, Batch, Raw, World, build, expected, ingest

HOUR = 60 * MINUTE


def count_queries(world: World) -> Counter[str]:
    """The Query calls on the control table from now on, by kind: a minute's mark keys, the index, others."""
    seen: Counter[str] = Counter()
    query = world.db.query

    def counted(**kwargs: Any) -> Any:
        pk = kwargs["ExpressionAttributeValues"][":pk"]["S"]
        kind = "other"
        if "#minutes#" in pk:
            kind = "index"
        elif pk.startswith("rollmark#") and not pk.endswith("#start"):
            kind = "marks"
        seen[kind] += 1
        return query(**kwargs)

    world.db.query = counted  # type: ignore[method-assign]
    return seen


def recorded(world: World, recorder: MarkRecorder, batch: Batch, raw: Raw) -> None:
    """One batch as ingest stores it: its blocks, then its marks through the container's ``recorder``."""
    ingest(world, batch, 1, raw, None)
    readings = [(n, entity, T0 + offset) for n, (entity, offset, _, _) in enumerate(batch.readings)]
    assert recorder.write(readings, world.now, Deadline.never()) == {}


def rollups_equal_raw(world: World, raw: Raw, entity: str) -> None:
    for level in LEVELS.levels:
        want = expected(raw, level, entity)
        got = world.store.entity_rollups(level, want, entity, ReadCount())
        assert want and all(same_figures(got[start], figures) for start, figures in want.items()), level


def test_an_empty_minute_costs_no_mark_query_only_its_hours_index() -> None:
    # Given a new deployment's rollup function, caught up
    world = build(None, split=False)
    first = world.runner.run(Deadline.never())
    state = world.store.state()
    assert state is not None and state.indexed_from == first.through_ms == T0 - 2 * MINUTE
    # When three hours pass without a mark
    seen = count_queries(world)
    world.now = T0 + 3 * HOUR
    report = world.runner.run(Deadline.never())
    # Then the run applies their 180 minutes with one index Query an hour (the 2 minutes before T0 too),
    # where reading every minute's keys took 180 x MARK_SHARDS Queries
    assert report.slots == 180 and report.marks == 0
    assert seen == Counter(index=4)


def test_ingests_marks_and_the_deferred_ones_are_applied_and_only_their_minutes_read() -> None:
    # Given a deployment whose ingest container writes marks in two minutes (twice in the second)
    world = build(None, split=False)
    world.runner.run(Deadline.never())
    recorder, raw = MarkRecorder(world.store, LEVELS.finest), {}
    world.now = T0 + MINUTE
    recorded(world, recorder, Batch(1, (("sensor-a", 1_000, "e1", 3), ("sensor-a", 7 * MINUTE, "e2", 4)), False), raw)
    world.now = T0 + 12 * MINUTE
    recorded(world, recorder, Batch(12, (("sensor-a", 11 * MINUTE, "e3", 5),), False), raw)
    recorded(world, recorder, Batch(12, (("sensor-a", 11 * MINUTE + 1, "e4", 6),), False), raw)
    # When one run applies the next 40 minutes
    seen = count_queries(world)
    world.now = T0 + 40 * MINUTE
    report = world.runner.run(Deadline.never())
    # Then the minute, 5-minute and 30-minute rollups equal the raw readings: the coarse ones were deferred
    # by this same run into later minutes of an hour whose index it had read (the index it holds has them)
    rollups_equal_raw(world, raw, "sensor-a")
    # And only the marked minutes' keys were read: the two ingest stamped, the 5-minute intervals' last
    # minutes (4, 9, 14) and the 30-minute one's (29)
    assert report.deferred == 4
    assert seen["marks"] == 6 * MARK_SHARDS and seen["index"] == 2  # the hour before T0's 2 minutes, T0's
    # And the container wrote its minutes' index items once each
    stored = {(i["pk"]["S"], i["sk"]["S"]) for i in world.db.items("control")}
    index = {key for key in stored if "#minutes#" in key[0]}
    assert index == {minute_key("readings", T0 + m * MINUTE) for m in (1, 4, 9, 12, 14, 29)}


def test_a_state_written_before_the_index_reads_every_mark_key_until_it_is_trusted() -> None:
    # Given a rollup state written by a function older than the index (no indexed_from)
    world = build(None, split=False)
    world.store.save_state(RollupState(T0 - 10 * MINUTE))
    assert world.store.state() == RollupState(T0 - 10 * MINUTE)
    # When the new function first runs, it trusts the index only from a coarsest interval two days on
    world.runner.run(Deadline.never())
    state = world.store.state()
    coarsest = LEVELS.levels[-1]
    assert state is not None and state.indexed_from == floor_to(T0 + UPGRADE_REACH_MS, coarsest) + coarsest
    # And a mark an older ingest wrote without its index item (a container still running the old code)
    raw: Raw = {}
    world.now = T0 + 5 * MINUTE
    ingest(world, Batch(5, (("sensor-b", 4 * MINUTE, "e1", 2.5),), False), 1, raw, None)
    old = Mark.of(world.now, LEVELS.finest, T0 + 4 * MINUTE, "sensor-b")
    assert world.store.write([world.store.mark_write(old)], Deadline.never()) == {}
    seen = count_queries(world)
    world.now = T0 + 40 * MINUTE
    report = world.runner.run(Deadline.never())
    # Then it is applied: every minute's keys were read, as before the index
    assert report.slots == 40 and report.marks >= 1
    assert seen["marks"] == 40 * MARK_SHARDS and seen["index"] == 0
    rollups_equal_raw(world, raw, "sensor-b")


def test_the_recorder_writes_a_minutes_index_item_once_and_hands_readings_back_without_it() -> None:
    refusing = [True]
    db = MemoryDynamo(
        record_calls=True, refuse=lambda item: "no" if refusing[0] and "#minutes#" in item["pk"]["S"] else None
    )
    store = RollupStore(db, BatchWriter(db, concurrency=1), "control", "readings", retention_ms=86_400_000)
    recorder = MarkRecorder(store, LEVELS.finest)
    readings = [(0, "sensor-a", T0), (1, "sensor-b", T0)]
    # When the index item of the minute is refused, no mark of the call counts as written
    failed = recorder.write(readings, T0 + 1_000, Deadline.never())
    assert sorted(failed) == [0, 1]
    assert all(why.startswith("rollup minute index not written") for why in failed.values())
    # And the redelivery writes them again with it
    refusing[0] = False
    before = len(db.calls)
    assert recorder.write(readings, T0 + 2_000, Deadline.never()) == {}
    # And later marks of that minute go without it, those of the next minute with the next minute's
    assert recorder.write([(0, "sensor-c", T0)], T0 + 3_000, Deadline.never()) == {}
    assert recorder.write([(0, "sensor-a", T0)], T0 + MINUTE, Deadline.never()) == {}
    puts = [request["PutRequest"]["Item"] for call in db.calls[before:] for request in call["control"]]
    # (the start item was stored with the refused call, so it is not put again)
    assert len(puts) == 2 + 1 + 1 + 1 + 1  # the two marks and the index; a mark; a mark and its index
    index = [(item["pk"]["S"], item["sk"]["S"]) for item in puts if "#minutes#" in item["pk"]["S"]]
    assert index == [minute_key("readings", T0), minute_key("readings", T0 + MINUTE)]
