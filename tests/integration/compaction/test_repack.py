"""The re-pack on moto: each settled slice of the newest hour's group items, re-packed by the compaction
function into sub-items (one per sub-group of each group partition), each reading once, through faults:
a write throttled past the deadline, a run cut by its deadline, downtime, dense entities' block copies,
and a change of the group count; and with rollups, each group's slice partial and the fresh parts of the
slice's minutes (docs/rollups.md, "Fresh minute totals")."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.retry import Deadline
from adapters.rollup_store import ReadCount
from compaction.logic import StepNotStored
from doubles.clocks import ManualClock
from keydesign import Reading
from keydesign.writetier import (
    GRACE_MS,
    REPACK_MS,
    Clustered,
    CompactionState,
    EarlierGroups,
    WriteTier,
    sub_group_of,
)
from tests.integration.compaction.conftest import (
    HOUR,
    MINUTE,
    SETTLED,
    TIER,
    H,
    RefusingWrites,
    compacted,
    hot_beside_its_blocks,
    identities,
    publish,
    retrying_runner,
    rollup_store,
    runner,
    save_state,
    sparse_fleet,
    stamps,
    state,
    sub_items,
)
from tests.integration.compaction.test_compaction import SlowReader
from tests.integration.compaction.test_rollups import by_minute

pytestmark = pytest.mark.integration

#: 06:29: the slices 06:00 to 06:20 have settled (their grace, a minute, and SETTLE, 3 minutes, after
#: their end); 06:25 has not.
NOW = H + 29 * MINUTE
#: A state whose re-pack goes on at H (an empty range there), as a run before H left it.
REPACKING = {"repack_from": H, "repacked": H}


def settled(readings: list[Reading], through: int) -> list[Reading]:
    return [r for r in readings if r.ts_ms < through]


def once_each(db: Any, readings: list[Reading], version: int | None = None) -> None:
    """Each of ``readings`` is in exactly one sub-item, of its group's partition and its sub-group; nothing else is."""
    stored = sub_items(db)
    assert stored.keys() == identities(readings)
    for (entity, _, _), copies in stored.items():
        assert len(copies) == 1, f"{entity} is in {len(copies)} sub-items"
        (held, _, pk, sk) = copies[0]
        assert pk == TIER.sub_pk(TIER.group_of(entity), H) and sk.startswith(f"{sub_group_of(entity):02d}#")
        assert version is None or held == version


def test_each_settled_slice_of_the_newest_hour_is_re_packed_once_into_its_readings_sub_groups(db: Any) -> None:
    # Given a sparse fleet's readings of the hour at H in the write tier, compaction through H
    fleet = sparse_fleet(H, devices=40, per_device=8)
    publish(db, fleet, version=5)
    save_state(db, CompactionState(H, 8, **REPACKING))
    # When the compaction function runs at 06:29
    clock = [NOW]
    report = runner(clock).run(Deadline.never())
    # Then it re-packs the five settled slices, every group of each, and records them; no hour is compacted
    assert report.slices_repacked == 5 and report.hours == 0 and report.error is None
    assert state(db) == CompactionState(H, 8, repack_from=H, repacked=H + 25 * MINUTE)
    once_each(db, settled(fleet, H + 25 * MINUTE), version=5)
    assert report.sub_items == len({(pk, sk) for copies in sub_items(db).values() for _, _, pk, sk in copies})
    assert report.repacked_ms == H + 25 * MINUTE and report.repack_lag_ms == 4 * MINUTE
    # And a run a slice later re-packs the next slice only, a run at the same time nothing
    clock[0] += REPACK_MS
    assert runner(clock).run(Deadline.never()).slices_repacked == 1
    assert runner(clock).run(Deadline.never()).slices_repacked == 0
    once_each(db, settled(fleet, H + 30 * MINUTE), version=5)


def test_a_slice_is_re_packed_only_once_its_grace_and_settle_have_passed(db: Any) -> None:
    # Given the slice 06:00 in the write tier: a batch that started up to 06:05:59.999 may have written it
    fleet = sparse_fleet(H, devices=10)
    publish(db, fleet, version=1)
    save_state(db, CompactionState(H, 8, **REPACKING))
    settle = 3 * MINUTE  # COMPACTION_SETTLE
    # When the function runs SETTLE after the slice's end, then the slice is not yet re-packed
    report = runner([H + REPACK_MS + settle]).run(Deadline.never())
    assert report.slices_repacked == 0 and sub_items(db) == {}
    report = runner([H + REPACK_MS + GRACE_MS + settle - 1]).run(Deadline.never())
    assert report.slices_repacked == 0 and sub_items(db) == {}
    # and once the grace has passed too, it is
    report = runner([H + REPACK_MS + GRACE_MS + settle]).run(Deadline.never())
    assert report.slices_repacked == 1
    once_each(db, settled(fleet, H + REPACK_MS), version=1)


def test_a_first_re_pack_starts_at_the_hour_after_those_the_ingest_before_it_may_write(db: Any) -> None:
    # Given a deployment compacting through H that has never re-packed (new, or upgraded to the re-pack)
    fleet = sparse_fleet(H, devices=10)
    publish(db, fleet, version=1)
    save_state(db, CompactionState(H, 8))
    clock = [NOW]
    # When it runs at 06:29, then it starts an empty range at 07:00 (the hour after 06:29 + settle +
    # max_future): the hour at H may hold group items an ingest of the version before wrote late
    report = runner(clock).run(Deadline.never())
    assert report.slices_repacked == 0 and sub_items(db) == {}
    assert state(db) == CompactionState(H, 8, repack_from=H + HOUR, repacked=H + HOUR)
    # and re-packs from 07:00 once it has settled
    clock[0] = H + HOUR + 9 * MINUTE
    report = runner(clock).run(Deadline.never())
    assert report.slices_repacked == 1 and report.hours == 1
    clustered = (Clustered((8,), H),)  # the hour compacted, under 8 groups
    assert state(db) == CompactionState(
        H + HOUR, 8, repack_from=H + HOUR, repacked=H + HOUR + REPACK_MS, clustered=clustered
    )


def test_the_last_slice_of_an_hour_is_re_packed_as_the_hour_settles_and_the_hour_compacted_after(db: Any) -> None:
    fleet = sparse_fleet(H, devices=20, per_device=12)
    publish(db, fleet, version=2)
    save_state(db, CompactionState(H, 8, repack_from=H, repacked=H + HOUR - REPACK_MS, repacked_at=H + HOUR))
    # When the function runs as the hour settles: its last slice, then the hour's compaction
    report = runner([SETTLED]).run(Deadline.never())
    assert report.slices_repacked == 1 and report.hours == 1
    clustered = (Clustered((8,), H),)
    assert state(db) == CompactionState(H + HOUR, 8, repack_from=H, repacked=H + HOUR, clustered=clustered)
    once_each(db, [r for r in fleet if r.ts_ms >= H + HOUR - REPACK_MS], version=2)
    assert compacted(db).keys() == identities(fleet)


def test_after_downtime_the_re_pack_skips_to_the_newest_hour_and_compaction_does_the_rest(db: Any) -> None:
    # Given two hours in the tier and a re-pack stopped in the first, then five hours of downtime
    older, newest = sparse_fleet(H - HOUR, devices=10), sparse_fleet(H, devices=10, per_device=6)
    publish(db, [*older, *newest], version=3)
    save_state(db, CompactionState(H - HOUR, 8, repack_from=H - HOUR, repacked=H - HOUR + 10 * MINUTE))
    # When the function comes back at 06:29: the hour before has settled (compacted), the newest has not
    report = runner([NOW]).run(Deadline.never())
    # Then the re-pack starts a new range at the newest hour, and the settled hour is compacted
    assert report.slices_repacked == 5 and report.hours == 1
    clustered = (Clustered((8,), H - HOUR),)
    assert state(db) == CompactionState(H, 8, repack_from=H, repacked=H + 25 * MINUTE, clustered=clustered)
    stored = sub_items(db)
    assert identities(settled(newest, H + 25 * MINUTE)) <= stored.keys()
    assert compacted(db).keys() == identities(older)


def test_a_step_whose_sub_items_are_throttled_past_the_deadline_is_redone_next_run_nothing_lost_or_doubled(
    db: Any,
) -> None:
    fleet = sparse_fleet(H, devices=40, per_device=8)
    publish(db, fleet, version=4)
    save_state(db, CompactionState(H, 8, **REPACKING))
    # Given DynamoDB throttles the sub-items of group 5 (the third step of 2 groups) for a while
    throttling = RefusingWrites(lambda item: item["pk"]["S"] == TIER.sub_pk(5, H))
    repack, clock = retrying_runner(throttling, NOW)
    # When a run meets it: the writer retries until the deadline, then the re-pack stops on that step
    failed = repack.run(Deadline.after_ms(60_000, clock))
    assert isinstance(failed.error, StepNotStored)
    assert "sub-items of groups 4-5 of 2026-11-22T06:00:00.000Z not stored" in str(failed.error)
    # Then the state holds the slice's first two steps (an empty range at it), nothing more
    assert state(db) == CompactionState(H, 8, repack_from=H, repacked=H, repack_group=4)
    assert failed.slices_repacked == 0 and failed.repack_lag_ms == NOW - H
    # And the next run, the throttling over, goes on from that step: every reading of the settled slices once
    throttling.on = False
    report = repack.run(Deadline.after_ms(60_000, clock))
    assert report.error is None and report.slices_repacked == 5
    once_each(db, settled(fleet, H + 25 * MINUTE), version=4)


def test_a_run_stopped_by_its_deadline_goes_on_from_its_last_step(db: Any) -> None:
    fleet = sparse_fleet(H, devices=40, per_device=8)
    publish(db, fleet, version=3)
    save_state(db, CompactionState(H, 8, **REPACKING))
    # Given reads that take half a second of the run's clock each (two a group), and runs of 5 seconds
    clock = ManualClock(0.0)
    repack = runner([NOW], reader=SlowReader(clock, per_read_s=0.5), concurrency=2)
    first = repack.run(Deadline.after_ms(5_000, clock))
    # Then it stops after the steps that fit, saving where it got to
    assert first.slices_repacked == 0 and 0 < (state(db) or CompactionState()).repack_group < TIER.groups
    runs = 1
    while (state(db) or CompactionState()).repacked < H + 25 * MINUTE:
        repack.run(Deadline.after_ms(5_000, clock))
        runs += 1
        assert runs < 40
    once_each(db, settled(fleet, H + 25 * MINUTE), version=3)


def test_dense_entities_newer_block_copies_win_and_older_ones_lose(db: Any) -> None:
    # Given hot's readings 0-4 in the tier at version 20 beside its own blocks of 3-9 (version 30) and of 0
    # (version 10), and a sparse entity's two in the tier
    sparse, hot = hot_beside_its_blocks(db, step_ms=20_000)
    save_state(db, CompactionState(H, 8, **REPACKING))
    report = runner([H + 9 * MINUTE]).run(Deadline.never())
    # Then the slice's sub-items hold the readings whose newest copy is in the tier (hot's 0-2), of its
    # version, and only hot's blocks of the slice were read
    assert report.slices_repacked == 1 and report.dense_marks == 1 and report.blocks_read > 0
    stored = sub_items(db)
    assert stored.keys() == identities([*sparse, *hot[:3]])
    assert {v for copies in stored.values() for v, _, _, _ in copies} == {20}


def test_a_change_of_the_group_count_re_packs_each_partition_under_its_own_number(db: Any) -> None:
    # Given the slice 06:00's first half written with 4 groups and its second with 8 (the state records both)
    fleet = sparse_fleet(H, devices=60, per_device=30)
    first = [r for r in fleet if r.ts_ms < H + 150_000]
    second = [r for r in fleet if H + 150_000 <= r.ts_ms < H + REPACK_MS]
    old, new = WriteTier(4), WriteTier(8)
    publish(db, first, version=1, tier=old)
    publish(db, second, version=2, tier=new)
    save_state(db, CompactionState(H, 8, (EarlierGroups(4, H + HOUR),), **REPACKING))
    # When the slice is re-packed (the hour's largest G: 8 partitions)
    report = runner([H + 9 * MINUTE], tier=new).run(Deadline.never())
    assert report.slices_repacked == 1
    # Then each reading is in one sub-item, in the partition numbered as the group item it came from
    stored = sub_items(db)
    assert stored.keys() == identities([*first, *second])
    for r in first:
        ((_, _, pk, _),) = stored[r.entity_id, r.ts_ms, r.event_id]
        assert pk == new.sub_pk(old.group_of(r.entity_id), H)
    for r in second:
        ((_, _, pk, _),) = stored[r.entity_id, r.ts_ms, r.event_id]
        assert pk == new.sub_pk(new.group_of(r.entity_id), H)


def test_each_slice_has_its_groups_partials_and_its_minutes_fresh_parts_without_the_minutes_of_block_readings(
    db: Any,
) -> None:
    # Given a sparse entity's readings and a hot one's in the group items of 06:00-06:05, the hot one dense
    # in other batches: its own blocks (a dense mark) hold readings of every minute but 06:01
    sparse, hot = hot_beside_its_blocks(db, 40_000)
    save_state(db, CompactionState(H, 8, **REPACKING))
    # When the re-pack does the settled slices
    report = runner([NOW]).run(Deadline.never())
    assert report.error is None and report.slices_repacked == 5
    # Then the slice's partials count the sparse entity's readings and the hot one's of 06:01 alone (its
    # other minutes hold block readings, which ingest marked: the rollup function's), group by group
    owned = [*sparse, hot[2]]
    found = rollup_store().slice_partials(H, H, ReadCount())
    groups = {TIER.group_of(r.entity_id) for r in owned}
    assert {p.group: {m: f.item() for m, f in p.intervals.items()} for p in found} == {
        g: by_minute(r for r in owned if TIER.group_of(r.entity_id) == g) for g in groups
    }
    assert all(p.slice_ms == H and p.hour_ms == H for p in found) and report.slice_partials == len(found)
    # and the fresh parts of its minutes are their sum (the empty slices after it have none)
    fresh = rollup_store().totals(MINUTE, H, NOW, ReadCount(), fresh_from=H)
    assert {m: f.item() for m, f in fresh.items()} == by_minute(owned) and report.fresh_parts == 2
    # and the state says when the re-pack last moved
    assert stamps(db)[1] == NOW


def test_a_range_re_packed_by_code_without_slice_partials_starts_the_fresh_totals_at_its_next_slice(db: Any) -> None:
    # Given a state whose slices 06:00-06:10 were re-packed by code that put no slice partials (no repacked_at)
    fleet = sparse_fleet(H, devices=10, per_device=6)
    publish(db, fleet, version=2)
    save_state(db, CompactionState(H, 8, repack_from=H, repacked=H + 10 * MINUTE))
    # When this code re-packs the next slices
    report = runner([NOW]).run(Deadline.never())
    # Then its range starts at 06:10: readers read the slices before it from the group items, and the rollup
    # function serves no fresh total before it (no partials there)
    assert report.slices_repacked == 3
    assert state(db) == CompactionState(H, 8, repack_from=H + 10 * MINUTE, repacked=H + 25 * MINUTE)
    assert {p.slice_ms for p in rollup_store().slice_partials(H, H, ReadCount())} == set()
    assert stamps(db)[1] == NOW
