"""Compaction's part of the rollups on moto: each group's partial of an hour, its parts of the totals
(``<start>#c``), the re-marks of a mixed entity's minutes, and the redo the rollup function asks for
when a late reading makes an entity's hour its own (keydesign.rollup, "compaction's figures")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import boto3
import pytest

from adapters.batch_writer import BatchWriter
from adapters.retry import Deadline
from adapters.rollup_store import ReadCount
from compaction import logic
from compaction.logic import StepNotStored
from keydesign import Reading
from keydesign.blocks import decode_group
from keydesign.periods import DAY_MS
from keydesign.rollup import Figures, Mark, RedoRequest, floor_to, minute_key
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    KEEP_MS,
    MAX_COMPACTED_SPAN_MS,
    Clustered,
    CompactionState,
    WriteTier,
    dense_mark_sk,
)
from tests.integration.compaction.conftest import (
    HOUR,
    MINUTE,
    PREFIX,
    REGION,
    SETTLED,
    TIER,
    H,
    RefusingWrites,
    publish,
    put_blocks,
    put_dense,
    put_redo,
    reading,
    redos,
    rollup_store,
    runner,
    save_state,
    sparse_fleet,
    stamps,
    state,
    table,
)

pytestmark = pytest.mark.integration


def figures(readings: Iterable[Reading]) -> dict[str, object]:
    out = Figures()
    for r in readings:
        out.add(r.measures)
    return out.item()


def parts(level: int, start: int, end: int) -> dict[int, dict[str, object]]:
    """Compaction's parts of the totals of ``level`` in ``[start, end)``, as item figures."""
    found = rollup_store().fleet_parts_of(level, start, end, ReadCount())
    return {s: f.item() for s, f in found.items()}


def expected_parts(readings: Sequence[Reading], level: int, start: int, end: int) -> dict[int, dict[str, object]]:
    return {s: figures(r for r in readings if s <= r.ts_ms < s + level) for s in range(start, end, level)}


def partials(hour: int) -> dict[int, dict[int, dict[str, object]]]:
    """Every group's partial of ``hour``: group -> finest interval start -> figures."""
    found = rollup_store().partials(hour, ReadCount())
    return {p.group: {s: f.item() for s, f in p.intervals.items()} for p in found}


def by_minute(readings: Iterable[Reading]) -> dict[int, dict[str, object]]:
    minutes: dict[int, list[Reading]] = {}
    for r in readings:
        minutes.setdefault(floor_to(r.ts_ms, MINUTE), []).append(r)
    return {s: figures(rs) for s, rs in minutes.items()}


def compacted_items(db: Any, entity: str) -> list[dict[str, Any]]:
    """Every cluster block item holding readings of ``entity`` (every one for ""; its hour's tables)."""
    found = []
    for name in db.list_tables()["TableNames"]:
        if name.startswith(f"{PREFIX}-"):
            for page in db.get_paginator("scan").paginate(TableName=name):
                found += [
                    i
                    for i in page["Items"]
                    if i["pk"]["S"].startswith(CLUSTER_PK_PREFIX)
                    and decode_group(i["b"]["B"], entity or None, span_limit_ms=MAX_COMPACTED_SPAN_MS)[1]
                ]
    return found


def flagged(item: dict[str, Any], entity: str) -> bool:
    """Whether the cluster block ``item`` names ``entity`` in its ``r`` set: its hour the rollup function's."""
    return entity in item.get("r", {}).get("SS", [])


def remarked(db: Any, stamp: int, entity: str, starts: Iterable[int]) -> list[bool]:
    """Whether each re-mark of ``entity``'s minute ``starts`` stamped at ``stamp`` is stored where the rollup
    function reads it: with the marked-minutes index item of its stamp's minute."""

    def stored(pk: str, sk: str) -> bool:
        return "Item" in db.get_item(TableName="control", Key={"pk": {"S": pk}, "sk": {"S": sk}})

    indexed = stored(*minute_key(PREFIX, stamp))
    return [indexed and stored(*Mark.of(stamp, MINUTE, start, entity).key(PREFIX)) for start in starts]


def control_items(db: Any) -> dict[tuple[str, str], dict[str, Any]]:
    items = [i for page in db.get_paginator("scan").paginate(TableName="control") for i in page["Items"]]
    return {(i["pk"]["S"], i["sk"]["S"]): i for i in items}


def to_compact(db: Any, grouped: list[Reading], *, dense_mix: bool = False) -> None:
    """``grouped`` in group items (and with ``dense_mix`` the entity "mix" dense in one batch of the hour's
    50th minute: its own blocks and a dense mark); the state at H, the hour to compact next, with no re-mark
    put yet."""
    publish(db, grouped, version=2)
    if dense_mix:
        put_dense(db, [reading("mix", H + 50 * MINUTE + n * 1_000, f"d{n}") for n in range(8)], version=3)
    save_state(db, CompactionState(H, remarked_at=0))


def test_each_groups_partial_is_its_readings_figures_and_the_fleet_parts_are_every_readings(db: Any) -> None:
    # Given two hours of a sparse fleet in the write tier, over every group, after an hour of none
    fleet = [*sparse_fleet(H - HOUR), *sparse_fleet(H)]
    publish(db, fleet, version=2)
    save_state(db, CompactionState(H - 2 * HOUR))
    # When compaction does the three hours
    report = runner([SETTLED]).run(Deadline.never())
    assert report.hours == 3 and report.error is None and report.partials == 2 * TIER.groups
    # Then the empty hour has no partial and no part of a total (absent: no readings)
    assert partials(H - 2 * HOUR) == {} and parts(MINUTE, H - 2 * HOUR, H - HOUR) == {}
    # Then each group's partial of H holds the raw figures of its readings, minute by minute
    hour = [r for r in fleet if r.ts_ms >= H]
    assert partials(H) == {g: by_minute(r for r in hour if TIER.group_of(r.entity_id) == g) for g in range(TIER.groups)}
    # and compaction's parts of the totals are the figures of every reading: each minute of both
    # hours (the empty ones put empty), each hour, and the day (combined from the hours)
    assert parts(MINUTE, H - HOUR, H + HOUR) == expected_parts(fleet, MINUTE, H - HOUR, H + HOUR)
    assert parts(HOUR, H - HOUR, H + HOUR) == expected_parts(fleet, HOUR, H - HOUR, H + HOUR)
    day = floor_to(H, DAY_MS)
    assert parts(DAY_MS, day, day + DAY_MS) == {day: figures(fleet)}
    assert report.fleet_parts == 2 * (60 + 1 + 1)


def test_a_mixed_entity_is_flagged_left_out_of_the_partial_and_its_minutes_re_marked(db: Any) -> None:
    # Given a sparse fleet, and an entity with readings in the group items that also wrote its own
    # blocks in the hour (dense in one batch: a dense mark)
    fleet = sparse_fleet(H, devices=10)
    mixed = [reading("mix", H + n * 7 * MINUTE + 500, f"t{n}", 10.0 + n) for n in range(4)]
    to_compact(db, [*fleet, *mixed], dense_mix=True)
    report = runner([SETTLED]).run(Deadline.never())
    assert report.hours == 1 and report.error is None
    # Then its compacted blocks are flagged, and its readings are in no partial nor part of a total
    assert {flagged(i, "mix") for i in compacted_items(db, "mix")} == {True}
    assert {flagged(i, "dev-001") for i in compacted_items(db, "dev-001")} == {False}
    group = TIER.group_of("mix")
    assert partials(H)[group] == by_minute(r for r in fleet if TIER.group_of(r.entity_id) == group)
    assert parts(HOUR, H, H + HOUR) == {H: figures(fleet)}
    # and each minute holding its write-tier readings is re-marked (stamped now) for the rollup function
    assert remarked(db, SETTLED, "mix", sorted(by_minute(mixed))) == [True] * 4
    assert report.remarks == 4
    # and the state records when (the rollup function's totals are whole once it has applied that minute)
    assert stamps(db)[0] == SETTLED


@pytest.mark.parametrize("prefix", ["rollgrp#", "rollmark#", "rollall#"])
def test_a_step_whose_partials_re_marks_or_parts_are_not_stored_does_not_move_the_state(db: Any, prefix: str) -> None:
    fleet = sparse_fleet(H, devices=10)
    to_compact(db, [*fleet, reading("mix", H + 1_000, "t")], dense_mix=True)
    # Given DynamoDB refuses the partials (or the re-marks, or compaction's parts of the totals)
    refusing = RefusingWrites(lambda item: item["pk"]["S"].startswith(prefix), code="ValidationException")
    compact = runner([SETTLED], writer=BatchWriter(refusing))
    # When compaction runs: the run stops on that write, and the state stays where it was
    failed = compact.run(Deadline.never())
    assert isinstance(failed.error, StepNotStored) and failed.hours == 0
    assert state(db) == CompactionState(H, 8)
    # And the next run, once they are taken, stores them and moves on
    refusing.on = False
    clustered = (Clustered((8,), H),)
    assert compact.run(Deadline.never()).hours == 1 and state(db) == CompactionState(H + HOUR, 8, clustered=clustered)
    assert parts(HOUR, H, H + HOUR) == {H: figures(fleet)} and remarked(db, SETTLED, "mix", [H]) == [True]


def test_a_redo_makes_the_entitys_hour_the_rollup_functions_and_one_of_an_hour_not_compacted_waits(
    db: Any,
) -> None:
    # Given a compacted hour of a sparse fleet
    fleet = sparse_fleet(H, devices=10)
    to_compact(db, fleet)
    clock = [SETTLED]
    assert runner(clock).run(Deadline.never()).hours == 1
    late_entity = "dev-003"
    tier_readings = [r for r in fleet if r.entity_id == late_entity]
    assert parts(HOUR, H, H + HOUR) == {H: figures(fleet)}
    # and then a late reading of one device in that hour and a correction of one of its readings (its own
    # block, no dense mark: the redo's cluster block holds one reading fewer, so it is another item), and the
    # rollup function's request to redo the hour for it; and a request for an hour not yet compacted
    corrected = replace(tier_readings[0], measures={"v": -1.0})
    put_blocks(
        db, sorted([reading(late_entity, H + 30 * MINUTE, "late", 99.0), corrected], key=lambda r: r.ts_ms), version=7
    )
    group = TIER.group_of(late_entity)
    put_redo(db, RedoRequest(H, group, late_entity))
    waiting = RedoRequest(H + HOUR, TIER.group_of("dev-004"), "dev-004")
    put_redo(db, waiting)
    # (and one of an hour whose group items are expiring: it cannot be done)
    put_redo(db, RedoRequest(H - KEEP_MS, TIER.group_of("dev-005"), "dev-005"))
    # When compaction next runs (a minute later)
    clock[0] += MINUTE
    report = runner(clock).run(Deadline.never())
    assert report.error is None and (report.redos, report.redos_waiting, report.redos_expired) == (1, 1, 1)
    # Then the device's dense mark is in its group's partition of the hour, every compacted block of it
    # is flagged (the one compacted before too), and it is out of the partial and the parts of the totals
    key = {"pk": {"S": TIER.group_pk(group, H)}, "sk": {"S": dense_mark_sk(late_entity)}}
    assert "Item" in db.get_item(TableName=table(db, H), Key=key)
    assert len(compacted_items(db, late_entity)) >= 2
    assert {flagged(i, late_entity) for i in compacted_items(db, late_entity)} == {True}
    others = [r for r in fleet if r.entity_id != late_entity]
    assert partials(H)[group] == by_minute(r for r in others if TIER.group_of(r.entity_id) == group)
    assert parts(MINUTE, H, H + HOUR) == expected_parts(others, MINUTE, H, H + HOUR)
    day = floor_to(H, DAY_MS)
    assert parts(HOUR, H, H + HOUR) == {H: figures(others)}
    assert parts(DAY_MS, day, day + DAY_MS) == {day: figures(others)}
    # its write-tier minutes are re-marked (stamped now), and the request is gone (and the one that
    # cannot be done); the one of the hour not yet compacted is left
    # (but the corrected reading's: its newest copy is its block's, which ingest marks)
    still = tier_readings[1:]
    assert remarked(db, clock[0], late_entity, sorted(by_minute(still))) == [True] * len(still)
    assert redos(db) == [waiting]
    # and the other devices' compacted blocks are untouched
    assert {flagged(i, r.entity_id) for r in others for i in compacted_items(db, r.entity_id)} == {False}


def test_a_redo_that_leaves_a_group_without_readings_puts_its_partial_and_parts_empty(db: Any) -> None:
    # Given a compacted hour of one device alone
    only = "dev-000"
    fleet = [r for r in sparse_fleet(H, devices=1) if r.entity_id == only]
    to_compact(db, fleet)
    clock = [SETTLED]
    assert runner(clock).run(Deadline.never()).hours == 1
    assert parts(HOUR, H, H + HOUR) == {H: figures(fleet)}
    # When a late reading of it makes its hour the rollup function's (a redo)
    put_blocks(db, [reading(only, H + 30 * MINUTE, "late", 1.0)], version=7)
    put_redo(db, RedoRequest(H, TIER.group_of(only), only))
    clock[0] += MINUTE
    assert runner(clock).run(Deadline.never()).redos == 1
    # Then its group's partial and the hour's parts are put empty, over the ones that counted it
    assert partials(H) == {TIER.group_of(only): {}}
    assert parts(HOUR, H, H + HOUR) == {H: Figures().item()}
    assert parts(DAY_MS, floor_to(H, DAY_MS), floor_to(H, DAY_MS) + DAY_MS) == {floor_to(H, DAY_MS): Figures().item()}


def test_an_entity_written_under_two_group_counts_in_an_hour_is_counted_once(db: Any) -> None:
    # Given an hour whose first half was written with 4 groups and second half with 8 (a change of G), every
    # device sending in both halves
    old, new = WriteTier(4), WriteTier(8)
    fleet = sparse_fleet(H, devices=24, per_device=4)
    first, second = [r for r in fleet if r.ts_ms < H + 30 * MINUTE], [r for r in fleet if r.ts_ms >= H + 30 * MINUTE]
    save_state(db, CompactionState(H, 4))
    publish(db, first, version=1, tier=old)
    clock = [H + 30 * MINUTE]
    assert runner(clock, tier=new).run(Deadline.never()).hours == 0  # records the change
    publish(db, second, version=2, tier=new)
    # When the hour is compacted (under the larger count, 8 groups)
    clock[0] = SETTLED
    report = runner(clock, tier=new).run(Deadline.never())
    assert report.hours == 1 and report.error is None
    # Then compaction's parts of the totals count every reading once: a device whose partitions under the two
    # counts differ (its readings of the hour lie in two partitions, each compacted in its own pass) is
    # handed to the rollup function (flagged, out of every partial, its minutes re-marked); the others stay
    # compaction's
    split = {r.entity_id for r in fleet if old.group_of(r.entity_id) != new.group_of(r.entity_id)}
    kept = [r for r in fleet if r.entity_id not in split]
    assert split and kept
    assert parts(HOUR, H, H + HOUR) == {H: figures(kept)}
    for entity in sorted(split):
        assert {flagged(i, entity) for i in compacted_items(db, entity)} == {True}, entity
        minutes = sorted(by_minute(r for r in fleet if r.entity_id == entity))
        assert all(remarked(db, SETTLED, entity, minutes)), entity
    assert {flagged(i, r.entity_id) for r in kept for i in compacted_items(db, r.entity_id)} == {False}
    assert all(p == [4] for p in ([*partial.others] for partial in rollup_store().partials(H, ReadCount())))


def test_compacting_an_hour_again_puts_the_same_items(db: Any) -> None:
    fleet = sparse_fleet(H, devices=10)
    to_compact(db, [*fleet, reading("mix", H + 1_000, "t")], dense_mix=True)
    runner([SETTLED]).run(Deadline.never())
    first = control_items(db), compacted_items(db, "")
    # When the hour is compacted again (a run that stopped before saving its state)
    save_state(db, CompactionState(H))
    assert runner([SETTLED]).run(Deadline.never()).hours == 1
    # Then every item is the same
    assert (control_items(db), compacted_items(db, "")) == first


class Slow:
    """DynamoDB whose every BatchWriteItem takes ``seconds`` of the test's wall clock."""

    def __init__(self, clock: list[int], seconds: int) -> None:
        self.api = boto3.client("dynamodb", region_name=REGION)
        self.clock = clock
        self.seconds = seconds

    def batch_write_item(self, **kwargs: Any) -> Any:
        self.clock[0] += self.seconds * 1000
        return self.api.batch_write_item(**kwargs)


def test_re_marks_stored_settle_or_more_after_their_stamp_are_put_again_before_the_state_moves(db: Any) -> None:
    to_compact(db, [reading("mix", H + 1_000, "t")], dense_mix=True)
    # Given writes so slow that the step's re-marks are stored a settle time (3 minutes) after their
    # stamp: the rollup function may have closed their slot by then
    clock = [SETTLED]
    slow = Slow(clock, 180)
    failed = runner(clock, writer=BatchWriter(slow)).run(Deadline.never())
    # Then the step counts as not stored and the state stays
    assert isinstance(failed.error, StepNotStored) and "re-marks" in str(failed.error)
    assert state(db) == CompactionState(H, 8)
    # And a run whose writes are quick puts them again, stamped anew, and moves on
    slow.seconds = 0
    assert runner(clock, writer=BatchWriter(slow)).run(Deadline.never()).hours == 1
    assert remarked(db, clock[0], "mix", [H]) == [True]


def test_a_redo_of_an_hour_compacted_under_a_group_count_since_forgotten_redoes_the_entitys_partition(
    db: Any,
) -> None:
    # Given an hour compacted with 8 groups, and since then the deployment runs 4 (the state no longer
    # records 8 as an earlier count: every hour 8 may have written is compacted; its `clustered` still says
    # the hour was compacted under 8, for readers)
    fleet = sparse_fleet(H, devices=10)
    to_compact(db, fleet)
    assert runner([SETTLED]).run(Deadline.never()).hours == 1
    save_state(db, CompactionState(H + HOUR, 4, clustered=(Clustered((8,), H),)))
    four = WriteTier(4)
    late_entity = next(r.entity_id for r in fleet if four.group_of(r.entity_id) != TIER.group_of(r.entity_id))
    # When the rollup function asks for a redo with the group it sees (under 4), for a late reading
    put_blocks(db, [reading(late_entity, H + 30 * MINUTE, "late", 99.0)], version=7)
    put_redo(db, RedoRequest(H, four.group_of(late_entity), late_entity))
    report = runner([SETTLED + MINUTE], tier=four).run(Deadline.never())
    # Then the partition its readings are in (its group under 8, which the partials record) is redone:
    # its blocks flagged, it is out of the partials and the parts of the totals
    assert report.error is None and report.redos == 1
    assert {flagged(i, late_entity) for i in compacted_items(db, late_entity)} == {True}
    others = [r for r in fleet if r.entity_id != late_entity]
    assert parts(HOUR, H, H + HOUR) == {H: figures(others)}
    assert {p.groups for p in rollup_store().partials(H, ReadCount())} == {8}


def test_a_redo_that_fails_leaves_its_requests_and_the_new_hours_are_compacted_all_the_same(db: Any) -> None:
    to_compact(db, sparse_fleet(H, devices=10))
    assert runner([SETTLED]).run(Deadline.never()).hours == 1
    request = RedoRequest(H, TIER.group_of("dev-003"), "dev-003")
    put_redo(db, request)
    publish(db, sparse_fleet(H + HOUR, devices=10), version=3)
    # Given DynamoDB refuses the redo's dense marks (w#...)
    refusing = RefusingWrites(lambda item: item["pk"]["S"].startswith("w#"), code="ValidationException")
    clock = [SETTLED + HOUR]
    failed = runner(clock, writer=BatchWriter(refusing)).run(Deadline.never())
    # Then the run reports the redo's error, keeps the request, and compacts the next hour all the same
    assert isinstance(failed.error, StepNotStored) and "redo" in str(failed.error)
    assert failed.hours == 1 and redos(db) == [request]
    # And the next run, the writes taken, does the redo
    refusing.on = False
    assert runner(clock, writer=BatchWriter(refusing)).run(Deadline.never()).redos == 1 and redos(db) == []


def test_a_run_handles_at_most_redo_limit_requests(db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    to_compact(db, sparse_fleet(H, devices=10))
    assert runner([SETTLED]).run(Deadline.never()).hours == 1
    requests = [RedoRequest(H, TIER.group_of(e), e) for e in ("dev-001", "dev-002", "dev-003")]
    for request in requests:
        put_redo(db, request)
    monkeypatch.setattr(logic, "REDO_LIMIT", 2)
    assert runner([SETTLED]).run(Deadline.never()).redos == 2 and len(redos(db)) == 1
    assert runner([SETTLED]).run(Deadline.never()).redos == 1 and redos(db) == []
