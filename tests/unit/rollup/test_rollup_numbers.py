"""Rollups and raw aggregates give the same numbers, exactly, and an interval that cannot be computed or
stored is set aside without stopping the others.

Sums are exact (``keydesign.rollup.Stat``) on both paths and rounded once, so neither the order readings
are decoded in, nor the order BatchGetItem hands back the finer rollups in, changes a digit; minima and
maxima keep their type (``3.0`` stays a float) though DynamoDB gives back a stored ``3.0`` as ``3``: the
store here does the same, and shuffles every BatchGetItem's answer.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.partition_reader import StoredBlock
from adapters.retry import Deadline
from adapters.rollup_store import ReadCount
from doubles.memory_dynamo import MemoryDynamo
from keydesign import Reading, parse_timestamp
from keydesign.rollup import Figures
from query.logic import QueryService
from query.models import AggregateSeries
from query.params import TimeRange
from query.rollups import RollupAnswers
from tests.unit.keydesign.strategies import PROPERTY
from tests.unit.query.apigw import memory_service
from tests.unit.rollup import test_rollup_exact as exact
from tests.unit.rollup.oracles import marks_of
from tests.unit.rollup.test_rollup_exact import LEVELS, MINUTE, T0, World

HOURS = 3
WINDOW = TimeRange(T0, T0 + HOURS * 60 * MINUTE)


class DynamoLike(MemoryDynamo):
    """Numbers kept as DynamoDB gives them back (``3.0`` as ``3``), BatchGetItem answered in any order."""

    rng = random.Random(5)

    def _store(self, table: str, item: dict[str, Any]) -> None:
        super()._store(table, _normalised(item))

    def batch_get_item(self, **kwargs: Any) -> dict[str, Any]:
        answer = super().batch_get_item(**kwargs)
        for items in answer["Responses"].values():
            self.rng.shuffle(items)
        return answer


def _normalised(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"N"}:
            number = Decimal(value["N"])
            return {"N": str(int(number)) if number == number.to_integral_value() else value["N"]}
        return {k: _normalised(v) for k, v in value.items()}
    return value


@pytest.fixture(autouse=True)
def dynamodb_like(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exact, "FakeDynamo", DynamoLike)


def ingest(world: World, readings: list[Reading], version: int) -> None:
    """One ingest batch: its readings as blocks of ``version``, then their marks, stamped now."""
    world.reader.store(world.layout, world.shard_map, [(r, version) for r in readings])  # type: ignore[attr-defined]
    marks = marks_of(world.now, LEVELS.finest, [(r.entity_id, r.ts_ms) for r in readings])
    world.store.write(world.store.marks_writes(marks), Deadline.never())


def service(world: World, *, rollups: bool) -> QueryService:
    return memory_service(
        world.layout,
        world.shard_map,  # type: ignore[attr-defined]
        world.reader,
        now_ms=world.now,
        rollups=RollupAnswers(world.store, LEVELS) if rollups else None,
    )


def shown(series: object) -> str:
    """The intervals as the API writes them: ``3`` and ``3.0``, ``0.0`` and ``-0.0`` differ."""
    assert isinstance(series, AggregateSeries)
    return json.dumps(series.model_dump(mode="json")["intervals"])


#: Values that make a float sum depend on its order (1e16 + 1.0 - 1e16), or its type show (3 and 3.0).
adversarial = st.one_of(
    st.sampled_from([0.1, 0.2, 0.3, 1e16, -1e16, 1.0, 3.0, 3, -0.0, 0.0, 2**53 + 1, 1e-130, 9.999999999999998e125]),
    st.floats(-1e20, 1e20, allow_nan=False).filter(lambda v: v == 0 or abs(v) >= 1e-130),
    st.integers(-(10**38) + 1, 10**38 - 1),
)
readings_drawn = st.lists(
    st.tuples(st.integers(0, HOURS * 60 - 1), st.integers(0, 59_999), adversarial, st.integers(0, 2)),
    min_size=1,
    max_size=40,
)


@settings(PROPERTY, max_examples=40)
@given(drawn=readings_drawn)
def test_rollups_and_raw_readings_give_the_same_numbers_for_every_interval(
    drawn: list[tuple[int, int, int | float, int]],
) -> None:
    # Given readings of adversarial values over three hours, in up to three batches (blocks of any grouping)
    world = exact.build(None, split=False)
    world.runner._lateness_ms = 2 * WINDOW.to_ms  # readings hours late are rolled up (MAX_AGE is days)
    world.now = WINDOW.to_ms - 5 * MINUTE  # the first run: the watermark starts a few minutes before it
    world.runner.run(Deadline.never())
    batches: dict[int, list[Reading]] = {}
    for n, (minute, ms, value, batch) in enumerate(drawn):
        reading = Reading("sensor-a", f"e{n}", T0 + minute * MINUTE + ms, {"v": value})
        batches.setdefault(batch, []).append(reading)
    world.now = T0 + HOURS * 60 * MINUTE
    for version, batch in sorted(batches.items()):
        ingest(world, batch, version)
    # When the rollups are applied
    world.now += 10 * MINUTE
    world.runner.run(Deadline.never())

    # Then per minute, 5 and 30 minutes and hour, rollups and raw readings answer alike, one entity or all
    rolled, raw = service(world, rollups=True), service(world, rollups=False)
    for interval in (MINUTE, 5 * MINUTE, 30 * MINUTE, 60 * MINUTE):
        from_rollups = rolled.aggregates("sensor-a", WINDOW, interval)
        from_raw = raw.aggregates("sensor-a", WINDOW, interval)
        assert (from_rollups.source, from_raw.source) == ("rollups", "raw")  # type: ignore[union-attr]
        assert shown(from_rollups) == shown(from_raw), interval
        assert shown(rolled.total_aggregates(WINDOW, interval)) == shown(from_raw)
    # And each hour's sum is the exact sum rounded once (math.fsum's, for floats alone) when a float is a term
    hourly = raw.aggregates("sensor-a", WINDOW, 60 * MINUTE)
    assert isinstance(hourly, AggregateSeries)
    for interval in hourly.intervals:
        hour = (parse_timestamp(interval.start, "start") - T0) // (60 * MINUTE)
        values = [value for minute, _, value, _ in drawn if minute // 60 == hour]
        total = interval.measures["v"]["sum"]
        if any(isinstance(v, float) for v in values):
            assert total == float(sum(map(Fraction, values))) and isinstance(total, float)
            if all(isinstance(v, float) for v in values):
                assert total == math.fsum(values)
        else:
            assert total == sum(values) and isinstance(total, int)


def test_a_float_minimum_stays_a_float_though_dynamodb_gives_it_back_whole() -> None:
    world = exact.build(None, split=False)
    world.now = T0 - MINUTE
    world.runner.run(Deadline.never())
    world.now = T0 + 2 * MINUTE
    ingest(world, [Reading("sensor-a", "e1", T0, {"v": 3.0}), Reading("sensor-a", "e2", T0 + 1, {"v": 3})], 1)
    world.now += 10 * MINUTE
    world.runner.run(Deadline.never())
    window = TimeRange(T0, T0 + MINUTE)
    rolled = service(world, rollups=True).aggregates("sensor-a", window, MINUTE)
    assert shown(rolled) == shown(service(world, rollups=False).aggregates("sensor-a", window, MINUTE))
    assert '"min": 3.0, "max": 3.0' in shown(rolled) and '"sum": 6.0' in shown(rolled)


def two_entities(world: World) -> None:
    """sensor-a in minutes 0 and 1 (one run of reads), sensor-b in minute 1; rollups run up to now."""
    world.now = T0 - MINUTE
    world.runner.run(Deadline.never())
    world.now = T0 + 3 * MINUTE
    entities = ("sensor-a", "sensor-b")
    readings = [Reading(e, f"{e}-{m}", T0 + m * MINUTE + 5, {"v": 1.5}) for e in entities for m in (0, 1)]
    ingest(world, readings, 1)
    world.now += 5 * MINUTE


def test_a_block_that_does_not_decode_sets_its_interval_aside_and_the_rest_goes_on() -> None:
    # Given sensor-a's block of minute 1 corrupt (its other minute and sensor-b's readings sound)
    world = exact.build(None, split=False)
    two_entities(world)
    plan = world.layout.plan_entity("sensor-a", T0 + MINUTE, T0 + 2 * MINUTE, world.shard_map)  # type: ignore[attr-defined]
    for partition in plan.partitions:
        rows = world.reader.partitions.get((partition.table, partition.pk), [])
        for at, row in enumerate(rows):
            if row.sk.startswith("sensor-a#") and partition.sk_low <= row.sk <= partition.sk_high:  # type: ignore[operator]
                rows[at] = dataclasses.replace(row, block=StoredBlock(row.sk, b"\x07not a block"))

    # When the rollups are applied
    report = world.runner.run(Deadline.never())

    # Then the watermark moves past the minute, with that one interval set aside and its reason kept
    assert report.through_ms >= T0 + 2 * MINUTE
    assert len(report.set_aside) == 1 and report.summary()["set_aside"] == 1
    assert all(part in report.set_aside[0] for part in ("1m ", "sensor-a", "block format 7"))
    rollups = world.store.entity_rollups(MINUTE, [T0, T0 + MINUTE], "sensor-a", ReadCount())
    assert rollups[T0].readings == 1 and rollups[T0].aside is None
    assert rollups[T0 + MINUTE].aside is not None and "block format 7" in rollups[T0 + MINUTE].aside
    assert world.store.entity_rollups(MINUTE, [T0 + MINUTE], "sensor-b", ReadCount())[T0 + MINUTE].readings == 1
    # And the API says so, for the minute, the 5 minutes over it and every entity's total of it
    api = service(world, rollups=True)
    minute = api.aggregates("sensor-a", TimeRange(T0, T0 + 2 * MINUTE), MINUTE)
    assert isinstance(minute, AggregateSeries)
    assert [i.set_aside is not None for i in minute.intervals] == [False, True]
    five = api.aggregates("sensor-a", TimeRange(T0, T0 + 5 * MINUTE), 5 * MINUTE)
    assert isinstance(five, AggregateSeries) and five.intervals[0].readings == 1
    assert "block format 7" in (five.intervals[0].set_aside or "")
    total = api.total_aggregates(TimeRange(T0 + MINUTE, T0 + 2 * MINUTE), MINUTE)
    assert total.intervals[0].readings == 1 and total.intervals[0].set_aside is not None
    assert '"set_aside"' not in shown(api.aggregates("sensor-b", TimeRange(T0, T0 + 2 * MINUTE), MINUTE))


def test_a_rollup_dynamodb_refuses_is_set_aside_and_the_watermark_moves_on() -> None:
    # Given DynamoDB refusing sensor-b's figures of minute 1 (a ValidationException: moto cannot make one)
    world = exact.build(None, split=False)
    real = world.db.batch_write_item

    def refusing(**kwargs: Any) -> Any:
        for requests in kwargs["RequestItems"].values():
            for request in requests:
                item = request["PutRequest"]["Item"]
                key = item["pk"]["S"], item["sk"]["S"]
                refused = world.store.rollup_write(MINUTE, T0 + MINUTE, "sensor-b", Figures())
                if key == (refused.pk, refused.sk) and "aside" not in item:
                    error = {"Error": {"Code": "ValidationException", "Message": "Item size has exceeded the maximum"}}
                    raise ClientError(error, "BatchWriteItem")  # type: ignore[arg-type]
        return real(**kwargs)

    world.db.batch_write_item = refusing  # type: ignore[method-assign]
    two_entities(world)

    # When the rollups are applied
    report = world.runner.run(Deadline.never())

    # Then sensor-b's minute is stored set aside with DynamoDB's reason, and everything else as usual
    assert report.through_ms >= T0 + 2 * MINUTE
    assert len(report.set_aside) == 1 and "Item size has exceeded" in report.set_aside[0]
    stored = world.store.entity_rollups(MINUTE, [T0 + MINUTE], "sensor-b", ReadCount())[T0 + MINUTE]
    assert stored.aside is not None and "Item size has exceeded" in stored.aside
    sound = world.store.entity_rollups(MINUTE, [T0 + MINUTE], "sensor-a", ReadCount())[T0 + MINUTE]
    assert (sound.readings, sound.aside, sound.measures["v"].total) == (1, None, 1.5)


def test_changes_sent_into_minutes_already_rolled_up_are_in_the_rollups_once_the_watermark_passes() -> None:
    # Given 30 readings of two measures, rolled up
    world = exact.build("hour", split=False)
    world.now = T0 - MINUTE
    world.runner.run(Deadline.never())
    world.now = T0 + 2 * MINUTE
    first = [Reading("sensor-a", f"e{n}", T0 + n * 3_000, {"kw": 100.0 + n, "temp": 20.0}) for n in range(30)]
    ingest(world, first, 10)
    world.now = T0 + 10 * MINUTE
    assert world.runner.run(Deadline.never()).through_ms > T0 + 2 * MINUTE
    # When corrections carrying fewer measures, a redelivery, a new reading and a new entity come for them
    later = [
        Reading("sensor-a", "e5", T0 + 15_000, {"kw": 1.0}),
        Reading("sensor-a", "e25", T0 + 75_000, {"kw": 2.0}),
        first[7],
        Reading("sensor-a", "new", T0 + 20_500, {"kw": 3.0}),
        Reading("sensor-new", "x", T0 + 30_000, {"kw": 4.0}),
    ]
    ingest(world, later, 20)
    stored_by = world.now
    world.now += 5 * MINUTE
    assert world.runner.run(Deadline.never()).through_ms > stored_by
    # Then every interval from the rollups is what the stored readings give
    rolled, raw = service(world, rollups=True), service(world, rollups=False)
    window = TimeRange(T0, T0 + 10 * MINUTE)
    for entity in ("sensor-a", "sensor-new"):
        for interval in (MINUTE, 5 * MINUTE):
            from_rollups = rolled.aggregates(entity, window, interval)
            assert from_rollups.source == "rollups"  # type: ignore[union-attr]
            assert shown(from_rollups) == shown(raw.aggregates(entity, window, interval))
    minute = rolled.aggregates("sensor-a", TimeRange(T0, T0 + MINUTE), MINUTE)
    assert isinstance(minute, AggregateSeries)
    assert minute.intervals[0].readings == 21 and minute.intervals[0].measures["temp"]["count"] == 19
