"""The compaction function on moto: group items written with the key design (as ingest writes them),
compacted into per-entity blocks, each reading once, through faults: a write that fails mid-step,
a run cut by its deadline, days of downtime, per-period tables that do not exist, corrupt items,
and dense entities whose blocks hold newer and older copies."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from adapters.batch_writer import serialize_item
from adapters.partition_reader import DynamoPartitionReader, Page, PageRequest
from adapters.retry import Deadline
from compaction import logic
from compaction.logic import StepNotStored
from doubles.clocks import ManualClock
from keydesign.writetier import (
    KEEP_MS,
    Clustered,
    CompactionState,
    EarlierGroups,
    WriteTier,
    cluster_of,
    dense_mark_sk,
    slice_start,
    state_key,
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
    advanced_at,
    cluster_block_of,
    compacted,
    hot_beside_its_blocks,
    identities,
    publish,
    put_dense,
    put_start,
    reading,
    retrying_runner,
    runner,
    save_state,
    sparse_fleet,
    state,
    table,
)

pytestmark = pytest.mark.integration


def test_a_first_run_starts_at_the_earliest_start_item_and_compacts_each_reading_once(db: Any) -> None:
    # Given a sparse fleet's readings of an hour in the write tier (hourly tables: only that hour's exists),
    # written after the start item of a container whose batch started 3 hours before it
    put_start(db, H - 3 * HOUR + 25 * MINUTE)
    fleet = sparse_fleet(H)
    publish(db, fleet, version=5)
    # When the compaction function first runs once the hour has settled
    report = runner([SETTLED]).run(Deadline.never())
    # Then it starts at the start item's hour (the tables of the hours before H do not exist: they read as
    # empty), compacts every hour through H, and stores every reading once, in cluster blocks of the
    # write tier's version, the hours' G recorded from the first one on
    assert report.hours == 4 and report.through_ms == H + HOUR
    clustered = (Clustered((8,), H - 3 * HOUR),)
    assert state(db) == CompactionState(H + HOUR, 8, clustered=clustered)
    assert CompactionState.from_item(_raw_state(db)).through == H + HOUR
    assert advanced_at(db) == SETTLED  # when the watermark moved, on the function's clock (the rollups' totals_through)
    stored = compacted(db)
    assert stored.keys() == identities(fleet) and all(len(copies) == 1 for copies in stored.values())
    assert all(version == 5 for copies in stored.values() for version, _ in copies)
    assert report.readings_compacted == len(fleet) and report.group_items >= TIER.groups
    # the devices' hour is one block per cluster of a group's devices (cluster blocks span the hour, not the
    # layout's 15-minute buckets)
    assert report.compacted_blocks == len({(TIER.group_of(r.entity_id), cluster_of(r.entity_id)) for r in fleet})
    assert report.corrupt == [] and report.lag_ms == SETTLED - (H + HOUR)


@pytest.mark.parametrize("started", [False, True], ids=["no start item", "a start item of this hour"])
def test_a_first_run_with_no_earlier_start_item_starts_at_the_hour_a_batch_in_flight_may_write(
    db: Any, started: bool
) -> None:
    # Given no ingest container has written group items yet (a new deployment: no start item), or only
    # one whose batch started in this hour
    if started:
        put_start(db, H + MINUTE)
    clock = [H + 2 * MINUTE]  # within SETTLE of H: a batch that started in the hour before may be in flight
    # When the compaction function first runs
    report = runner(clock).run(Deadline.never())
    # Then it starts at the hour of now - SETTLE (not KEEP back): no hour has settled, no group is compacted
    # (the re-pack, a first one, starts at the hour after those the ingest before it may write: 07:00)
    assert report.hours == 0 and report.groups == 0
    assert state(db) == CompactionState(H - HOUR, 8, repack_from=H + HOUR, repacked=H + HOUR)
    # and what a container writes after that read, from a batch that started before it, is compacted
    fleet = [reading("late-batch", H - HOUR + 59 * MINUTE), *sparse_fleet(H, devices=3)]
    publish(db, fleet, version=2)
    clock[0] = SETTLED
    again = runner(clock).run(Deadline.never())
    assert again.hours == 2 and compacted(db).keys() == identities(fleet)


def test_a_first_run_never_starts_before_keep_whatever_the_start_items_say(db: Any) -> None:
    # Given a start item older than KEEP_MS (a container that ran days ago; its group items have expired)
    put_start(db, SETTLED - KEEP_MS - 5 * HOUR)
    publish(db, sparse_fleet(H, devices=3), version=1)
    # When the compaction function first runs, then it starts at the hour of now - KEEP_MS
    clock = [SETTLED]
    report = runner(clock).run(Deadline.never())
    first = slice_start(SETTLED - KEEP_MS)
    assert report.hours == (H + HOUR - first) // HOUR and report.through_ms == H + HOUR


def _raw_state(db: Any) -> dict[str, object]:
    key = {k: {"S": v} for k, v in state_key(PREFIX).items()}
    raw = db.get_item(TableName="control", Key=key)["Item"]
    return {"through": int(raw["through"]["N"])}


def test_an_hour_is_compacted_only_once_it_has_settled(db: Any) -> None:
    publish(db, sparse_fleet(H, devices=5), version=1)
    clock = [SETTLED - 1]  # SETTLE has passed, but not the grace too: a batch may still be writing the hour
    report = runner(clock).run(Deadline.never())
    assert report.through_ms == H and compacted(db) == {}
    clock[0] = SETTLED
    assert runner(clock).run(Deadline.never()).hours == 1 and len(compacted(db)) == 15


def test_dense_entities_blocks_newer_copies_win_and_older_ones_lose(db: Any) -> None:
    # Given hot's readings 0-4 in the tier at version 20 beside its own blocks of 3-9 (version 30) and of 0
    # (version 10), and a sparse entity's two in the tier
    sparse, hot = hot_beside_its_blocks(db, step_ms=60_000)
    # (and an entity dense in every batch of the hour: nothing of it is in the tier)
    put_dense(db, [reading("busy", H + n * 60_000, f"b{n}") for n in range(5)], version=25)
    report = runner([SETTLED]).run(Deadline.never())
    stored = compacted(db)
    # Then the readings whose newest copy is in the tier are compacted (hot 0-2; its 3-9 stay in blocks)
    assert stored.keys() == identities([*sparse, *hot[:3]])
    # hot's compacted block has the largest version of its write-tier copies (20), above its older block copy
    # (not its blocks' 30: docs/writetier.md, "What is stored where")
    assert {v for e, copies in stored.items() for v, _ in copies if e[0] == "hot"} == {20}
    assert {v for e, copies in stored.items() for v, _ in copies if e[0] == "s-1"} == {20}
    # and only hot's blocks were read (7 of version 30, 1 of version 10): busy has nothing to compact
    assert report.dense_marks == 2 and report.blocks_read == 8


class SlowReader:
    """A partition reader that takes ``per_read_s`` of the test's clock per page."""

    def __init__(self, clock: ManualClock[float], per_read_s: float) -> None:
        self.inner = DynamoPartitionReader(boto3.client("dynamodb", region_name=REGION))
        self.clock = clock
        self.per_read_s = per_read_s

    def read_page(self, request: PageRequest) -> Page:
        self.clock.advance(self.per_read_s)
        return self.inner.read_page(request)


def test_a_step_whose_blocks_are_throttled_past_the_deadline_is_redone_next_run_nothing_lost_or_doubled(
    db: Any,
) -> None:
    # Given two hours of a fleet in the tier, compacted 2 groups a step (4 steps an hour)
    fleet = [*sparse_fleet(H - HOUR), *sparse_fleet(H)]
    publish(db, fleet, version=3)
    save_state(db, CompactionState(H - HOUR))
    # and DynamoDB throttles the writes of one device of group 5 (the third step of H) for a while
    victim = next(f"dev-{d:03d}" for d in range(40) if TIER.group_of(f"dev-{d:03d}") == 5)
    throttling = RefusingWrites(cluster_block_of({victim}))
    compact, clock = retrying_runner(throttling, SETTLED)
    # When a run meets it: the writer retries until the deadline, then the run stops on that step
    failed = compact.run(Deadline.after_ms(60_000, clock))
    assert isinstance(failed.error, StepNotStored)
    assert "groups 4-5 of 2026-11-22T06:00:00.000Z not stored" in str(failed.error)
    # Then the state holds H-1 done and H's first two steps, and the report the lag to H
    clustered = (Clustered((8,), H - HOUR),)
    assert state(db) == CompactionState(H, 8, group=4, group_tier=8, clustered=clustered)
    assert (failed.hours, failed.through_ms, failed.lag_ms) == (1, H, SETTLED - H)
    # And the next run, the throttling over, redoes the step: every reading stored once
    throttling.on = False
    report = compact.run(Deadline.after_ms(60_000, clock))
    assert report.hours == 1 and state(db) == CompactionState(H + HOUR, 8, clustered=clustered)
    stored = compacted(db)
    assert stored.keys() == identities(fleet) and all(len(copies) == 1 for copies in stored.values())


def test_a_run_stopped_by_its_deadline_goes_on_from_its_last_step(db: Any) -> None:
    fleet = sparse_fleet(H)
    publish(db, fleet, version=3)
    save_state(db, CompactionState(H))
    # Given reads that take a second of the run's clock each, and a run of 5 seconds
    clock = ManualClock(0.0)
    compact = runner([SETTLED], reader=SlowReader(clock, per_read_s=1.0), concurrency=2)
    first = compact.run(Deadline.after_ms(5_000, clock))
    # Then it stops after the steps that fit, saving where it got to, with nothing compacted twice
    assert first.hours == 0 and 0 < first.steps < 4
    assert state(db) == CompactionState(H, 8, group=2 * first.steps, group_tier=8)
    # And the next runs go on from there until the hour is done
    runs = 1
    while state(db) != CompactionState(H + HOUR, 8, clustered=(Clustered((8,), H),)):
        compact.run(Deadline.after_ms(5_000, clock))
        runs += 1
        assert runs < 10
    stored = compacted(db)
    assert stored.keys() == identities(fleet) and all(len(copies) == 1 for copies in stored.values())


def test_after_downtime_a_run_catches_up_every_hour_in_order(db: Any) -> None:
    hours = [H - 3 * HOUR, H - 2 * HOUR, H - HOUR, H]
    fleets = {hour: sparse_fleet(hour, devices=10) for hour in hours}
    for fleet in fleets.values():
        publish(db, fleet, version=2)
    save_state(db, CompactionState(H - 5 * HOUR))
    # When the function comes back after five hours of not running
    report = runner([SETTLED]).run(Deadline.never())
    # Then one run compacts every hour since (the ones without a table too), in order
    assert report.hours == 6 and report.through_ms == H + HOUR
    assert compacted(db).keys() == identities([r for fleet in fleets.values() for r in fleet])


def test_a_corrupt_item_is_logged_counted_and_left_and_the_rest_compacted(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged: list[dict[str, Any]] = []
    monkeypatch.setattr(logic.logger, "error", lambda message, extra: logged.append({"message": message, **extra}))
    fleet = sparse_fleet(H, devices=10)
    publish(db, fleet, version=4)
    name = table(db, H)
    # Given a group item whose payload is damaged, and a dense mark that names no entity
    bad_pk = TIER.group_pk(3, H)
    db.put_item(
        TableName=name, Item=serialize_item({"pk": bad_pk, "sk": "2026-11-22T06:00:01.000Z#abc#1", "b": b"\x04junk"})
    )
    db.put_item(TableName=name, Item=serialize_item({"pk": TIER.group_pk(4, H), "sk": dense_mark_sk("a#b")}))
    report = runner([SETTLED]).run(Deadline.never())
    # Then both are counted and logged with their table, key and reason, and left where they are
    assert len(report.corrupt) == 2 and report.through_ms == H + HOUR
    assert any(c.startswith(f"table {name} {bad_pk} / 2026-11-22T06:00:01.000Z#abc#1: ") for c in report.corrupt)
    assert {(e["message"], e["table"], e["pk"]) for e in logged} == {
        ("corrupt write-tier item left in place", name, bad_pk),
        ("corrupt write-tier item left in place", name, TIER.group_pk(4, H)),
    }
    assert sorted(e["reason"] for e in logged) == [
        "a dense mark of no entity: must not contain '#', the key separator",
        "the payload ends inside its header",
    ]
    assert db.get_item(TableName=name, Key={"pk": {"S": bad_pk}, "sk": {"S": "2026-11-22T06:00:01.000Z#abc#1"}})["Item"]
    # and every reading of the good items is compacted
    assert compacted(db).keys() == identities(fleet)


@pytest.mark.parametrize(("before", "after"), [(4, 8), (8, 4), (8, 3)])
def test_a_change_of_the_group_count_mid_hour_compacts_every_reading_written_under_either(
    db: Any, before: int, after: int
) -> None:
    # Given compaction running with `before` groups, and the first half of an hour written with them
    fleet = sparse_fleet(H, devices=60)
    first, second = [r for r in fleet if r.ts_ms < H + 30 * MINUTE], [r for r in fleet if r.ts_ms >= H + 30 * MINUTE]
    old, new = WriteTier(before), WriteTier(after)
    save_state(db, CompactionState(H, before))
    publish(db, first, version=1, tier=old)
    # When the deployment changes to `after` groups mid-hour: compaction's first run after it records
    # the change (its ingest finishes within the settle time: `before` may hold the hours up to the
    # end of the one holding now + settle + max_future), the rest of the hour is written with `after`
    clock = [H + 30 * MINUTE]
    assert runner(clock, tier=new).run(Deadline.never()).hours == 0
    # (and its re-pack, a first one, starts at the hour after those the ingest before it may write)
    repacked = {"repack_from": H + HOUR, "repacked": H + HOUR}
    assert state(db) == CompactionState(H, after, (EarlierGroups(before, H + HOUR),), **repacked)
    publish(db, second, version=2, tier=new)
    # Then the hour's compaction, cut by its deadline into steps (2 groups each), reads the groups of
    # the larger count, saving its cursor in that count, and compacts every reading once
    clock[0] = SETTLED
    run_clock = ManualClock(0.0)
    compact = runner(clock, tier=new, reader=SlowReader(run_clock, per_read_s=1.0), concurrency=2)
    cursors = []
    while (now := state(db)) is not None and now.through == H:
        compact.run(Deadline.after_ms(5_000, run_clock))
        cursors.append((state(db) or now).group_tier)
        assert len(cursors) < 10
    stored = compacted(db)
    assert stored.keys() == identities(fleet) and all(len(copies) == 1 for copies in stored.values())
    assert max(before, after) in cursors[:-1]
    # and once the watermark passed the hour, the earlier count is forgotten; the hour's G's are recorded for
    # readers (the larger first: its cluster blocks are under the group partitions of both)
    clustered = (Clustered((max(before, after), min(before, after)), H),)
    assert state(db) == CompactionState(H + HOUR, after, **repacked, clustered=clustered)
