"""The compaction function on moto: group items written with the key design (as ingest writes them),
compacted into per-entity blocks, each reading once, through faults: a write that fails mid-step,
a run cut by its deadline, days of downtime, per-period tables that do not exist, corrupt items,
and dense entities whose blocks hold newer and older copies."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from adapters.batch_writer import BatchWriter, serialize_item
from adapters.partition_reader import DynamoPartitionReader, Page, PageRequest
from adapters.retry import Deadline
from adapters.shard_map_source import StaticShardMap
from compaction import logic
from compaction.logic import CompactionRunner, CompactionState, StateStore, StepNotStored
from compaction.settings import CompactionSettings
from keydesign import Reading, ShardMap, decode_block, parse_timestamp
from keydesign.blocks import encode_group, keyed_item
from keydesign.writetier import (
    KEEP_MS,
    MAX_COMPACTED_SPAN_MS,
    WriteTier,
    compacted_through,
    dense_mark_sk,
    group_sk_stem,
    slice_start,
    state_key,
)
from tests.integration.mocked_aws import create_readings_table, mocked_aws

pytestmark = pytest.mark.integration

REGION = "eu-west-1"
PREFIX = "readings"
HOUR = 3_600_000
MINUTE = 60_000
#: The hour compacted in most tests, and a clock that has let it settle (3 minutes).
H = parse_timestamp("2026-11-22T06:00:00Z")
SETTLED = H + HOUR + 4 * MINUTE
ENV = {
    "LAYOUT": "hybrid",
    "SHARDS": "4",
    "BUCKET": "15m",
    "TABLE_PREFIX": PREFIX,
    "TABLE_PERIOD": "hour",
    "CONTROL_TABLE": "control",
    "WRITE_TIER_GROUPS": "8",
    "RETENTION": "30d",
    "COMPACTION_SETTLE": "3m",
}
SETTINGS = CompactionSettings.from_env(ENV)
LAYOUT = SETTINGS.layout
TIER = WriteTier(8)
SHARD_MAP = ShardMap.initial(LAYOUT.bucket, 4)
Identity = tuple[str, int, str]


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with mocked_aws(monkeypatch, REGION):
        client = boto3.client("dynamodb", region_name=REGION)
        create_readings_table(client, "control")
        yield client


def table(db: Any, hour: int) -> str:
    name = LAYOUT.table_for(hour)
    if name not in db.list_tables()["TableNames"]:
        create_readings_table(db, name)
    return name


def reading(entity: str, ts: int, event_id: str = "e", v: float = 1.0) -> Reading:
    return Reading.parse({"entity_id": entity, "timestamp": ts, "event_id": event_id, "measures": {"v": v}})


def put_group_item(db: Any, readings: Sequence[Reading], version: int) -> None:
    """One group item as ingest writes it (one group, one hour): format 4, its keys, its expiry."""
    ordered = sorted(readings, key=lambda r: (r.ts_ms, r.entity_id, r.event_id))
    (group,) = {TIER.group_of(r.entity_id) for r in ordered}
    hour = slice_start(ordered[0].ts_ms)
    encoded = encode_group(ordered, version)
    item, _, _ = keyed_item(TIER.group_pk(group, hour), group_sk_stem(encoded), encoded.payload, None)
    db.put_item(TableName=table(db, hour), Item=serialize_item(item))


def put_dense(db: Any, readings: Sequence[Reading], version: int) -> None:
    """A dense entity's readings as ingest writes them: its dense mark, then its own blocks."""
    for r in readings:
        hour = slice_start(r.ts_ms)
        mark = {"pk": TIER.group_pk(TIER.group_of(r.entity_id), hour), "sk": dense_mark_sk(r.entity_id)}
        db.put_item(TableName=table(db, hour), Item=serialize_item(mark))
    put_blocks(db, readings, version)


def put_blocks(db: Any, readings: Sequence[Reading], version: int) -> None:
    for block in LAYOUT.pack([(r, version) for r in readings], SHARD_MAP):
        db.put_item(TableName=table(db, block.first_ms), Item=serialize_item(block.item()))


def compacted(db: Any) -> dict[Identity, list[tuple[int, Reading]]]:
    """Every reading in a compacted block of any readings table, with the block's version: every copy."""
    found: dict[Identity, list[tuple[int, Reading]]] = {}
    for name in db.list_tables()["TableNames"]:
        if not name.startswith(f"{PREFIX}-"):
            continue
        for page in db.get_paginator("scan").paginate(TableName=name):
            for item in page["Items"]:
                if not item["pk"]["S"].endswith("#c"):
                    continue
                entity = item["sk"]["S"].split("#")[0]
                header, readings = decode_block(entity, item["b"]["B"], span_limit_ms=MAX_COMPACTED_SPAN_MS)
                for r in readings:
                    found.setdefault((r.entity_id, r.ts_ms, r.event_id), []).append((header.version, r))
    return found


def identities(readings: Sequence[Reading]) -> set[Identity]:
    return {(r.entity_id, r.ts_ms, r.event_id) for r in readings}


def runner(clock: list[int], **parts: Any) -> CompactionRunner:
    made = CompactionRunner.from_settings(SETTINGS, clock_ms=lambda: clock[0])
    if not parts:
        return made
    made.close()
    defaults: dict[str, Any] = {
        "layout": LAYOUT,
        "tier": TIER,
        "shard_maps": StaticShardMap(SHARD_MAP),
        "reader": DynamoPartitionReader(boto3.client("dynamodb", region_name=REGION)),
        "writer": BatchWriter(boto3.client("dynamodb", region_name=REGION)),
        "state": StateStore(boto3.client("dynamodb", region_name=REGION), "control", PREFIX),
        "retention_ms": SETTINGS.retention_ms,
        "settle_ms": SETTINGS.settle_ms,
        "clock_ms": lambda: clock[0],
    }
    return CompactionRunner(**{**defaults, **parts})


def state(db: Any) -> CompactionState | None:
    return StateStore(db, "control", PREFIX).load()


def sparse_fleet(hour: int, devices: int = 40, per_device: int = 3) -> list[Reading]:
    """Sparse devices' readings of ``hour``: each a few, spread over the hour (and its 15-minute buckets)."""
    return [
        reading(f"dev-{d:03d}", hour + (d * 7_919 + n * 1_234_567) % HOUR, f"r{n}", float(d + n))
        for d in range(devices)
        for n in range(per_device)
    ]


def publish(db: Any, readings: Sequence[Reading], version: int) -> None:
    """``readings`` as ingest batches write them: per group, items of up to 10 s (a group item's span)."""
    by_group: dict[int, list[Reading]] = {}
    for r in sorted(readings, key=lambda r: (r.ts_ms, r.entity_id, r.event_id)):
        by_group.setdefault(TIER.group_of(r.entity_id), []).append(r)
    for members in by_group.values():
        item: list[Reading] = []
        for r in members:
            if item and r.ts_ms - item[0].ts_ms >= 10_000:
                put_group_item(db, item, version)
                item = []
            item.append(r)
        put_group_item(db, item, version)


def test_a_first_run_compacts_every_settled_hour_since_keep_and_each_reading_once(db: Any) -> None:
    # Given a sparse fleet's readings of an hour in the write tier (hourly tables: only that hour's exists)
    fleet = sparse_fleet(H)
    publish(db, fleet, version=5)
    # When the compaction function first runs once the hour has settled
    report = runner([SETTLED]).run(Deadline.never())
    # Then it starts KEEP back (the tables of those hours do not exist: they read as empty), compacts
    # every hour through H, and stores every reading once, in compacted blocks of the write tier's version
    first = slice_start(SETTLED - KEEP_MS)
    assert report.hours == (H + HOUR - first) // HOUR and report.through_ms == H + HOUR
    assert state(db) == CompactionState(H + HOUR) and compacted_through(_raw_state(db)) == H + HOUR
    stored = compacted(db)
    assert stored.keys() == identities(fleet) and all(len(copies) == 1 for copies in stored.values())
    assert all(version == 5 for copies in stored.values() for version, _ in copies)
    assert report.readings_compacted == len(fleet) and report.group_items >= TIER.groups
    # each device's hour is one block per 15-minute bucket it has readings in
    assert report.compacted_blocks == len({(r.entity_id, LAYOUT.bucket.start(r.ts_ms)) for r in fleet})
    assert report.corrupt == [] and report.lag_ms == SETTLED - (H + HOUR)


def _raw_state(db: Any) -> dict[str, object]:
    key = {k: {"S": v} for k, v in state_key(PREFIX).items()}
    raw = db.get_item(TableName="control", Key=key)["Item"]
    return {"through": int(raw["through"]["N"])}


def test_an_hour_is_compacted_only_once_it_has_settled(db: Any) -> None:
    publish(db, sparse_fleet(H, devices=5), version=1)
    clock = [H + HOUR + 2 * MINUTE]  # the hour has ended, but an ingest batch may still be writing it
    report = runner(clock).run(Deadline.never())
    assert report.through_ms == H and compacted(db) == {}
    clock[0] = SETTLED
    assert runner(clock).run(Deadline.never()).hours == 1 and len(compacted(db)) == 15


def test_dense_entities_blocks_newer_copies_win_and_older_ones_only_raise_the_version(db: Any) -> None:
    sparse = [reading("s-1", H + 1_000, "a"), reading("s-1", H + 2_000, "b")]
    hot = [reading("hot", H + n * 60_000, f"h{n}") for n in range(10)]
    # Given the tier holds copies of version 20 of hot's readings 0-4 and of the sparse entity's two
    publish(db, [*sparse, *hot[:5]], version=20)
    # and hot, dense in other batches, wrote its own blocks: readings 3-9 at version 30 (newer: 3 and 4
    # corrected), and an older copy of reading 0 at version 10
    put_dense(db, [replace(r, measures={"v": 9.0}) for r in hot[3:]], version=30)
    put_blocks(db, [hot[0]], version=10)
    report = runner([SETTLED]).run(Deadline.never())
    stored = compacted(db)
    # Then the readings whose newest copy is in the tier are compacted (hot 0-2; its 3-9 stay in blocks)
    assert stored.keys() == identities([*sparse, *hot[:3]])
    # hot's compacted block has the largest version of every copy read (30), above its older block copy
    assert {v for e, copies in stored.items() for v, _ in copies if e[0] == "hot"} == {30}
    assert {v for e, copies in stored.items() for v, _ in copies if e[0] == "s-1"} == {20}
    assert report.dense_marks == 1 and report.blocks_read >= 2


class Throttling:
    """DynamoDB throttling every BatchWriteItem that holds a compacted block of ``entities`` in 06:00's hour."""

    def __init__(self, api: Any, entities: set[str]) -> None:
        self.api = api
        self.entities = entities
        self.on = True

    def batch_write_item(self, **kwargs: Any) -> Any:
        items = [r["PutRequest"]["Item"] for rs in kwargs["RequestItems"].values() for r in rs]
        if self.on and any(
            i["pk"]["S"][5:18] == "2026-11-22T06" and i["sk"]["S"].split("#")[0] in self.entities for i in items
        ):
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"}
            raise ClientError({"Error": error}, "BatchWriteItem")
        return self.api.batch_write_item(**kwargs)


@dataclass
class FakeTime:
    """A monotonic clock the test owns: sleeps move it, as does every read (``per_read_s``)."""

    now: float = 0.0
    per_read_s: float = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class SlowReader:
    """A partition reader that takes ``time.per_read_s`` of the test's clock per page."""

    def __init__(self, time: FakeTime) -> None:
        self.inner = DynamoPartitionReader(boto3.client("dynamodb", region_name=REGION))
        self.time = time

    def read_page(self, request: PageRequest) -> Page:
        self.time.now += self.time.per_read_s
        return self.inner.read_page(request)


def test_a_step_whose_blocks_are_throttled_past_the_deadline_is_redone_next_run_nothing_lost_or_doubled(
    db: Any,
) -> None:
    # Given two hours of a fleet in the tier, compacted 2 groups a step (4 steps an hour)
    fleet = [*sparse_fleet(H - HOUR), *sparse_fleet(H)]
    publish(db, fleet, version=3)
    StateStore(db, "control", PREFIX).save(CompactionState(H - HOUR))
    # and DynamoDB throttles the writes of one device of group 5 (the third step of H) for a while
    victim = next(f"dev-{d:03d}" for d in range(40) if TIER.group_of(f"dev-{d:03d}") == 5)
    throttling = Throttling(boto3.client("dynamodb", region_name=REGION), {victim})
    time = FakeTime()
    writer = BatchWriter(throttling, clock=time.clock, sleep=time.sleep)
    compact = runner([SETTLED], writer=writer, concurrency=2)
    # When a run meets it: the writer retries until the deadline, then the run fails on that step
    with pytest.raises(StepNotStored, match=r"groups 4-5 of 2026-11-22T06:00:00.000Z not stored"):
        compact.run(Deadline.after_ms(60_000, time.clock))
    # Then the state holds H-1 done and H's first two steps, and H's third step's other writes are stored
    assert state(db) == CompactionState(H, group=4)
    # And the next run, the throttling over, redoes the step: every reading stored once
    throttling.on = False
    report = compact.run(Deadline.after_ms(60_000, time.clock))
    assert report.hours == 1 and state(db) == CompactionState(H + HOUR)
    stored = compacted(db)
    assert stored.keys() == identities(fleet) and all(len(copies) == 1 for copies in stored.values())


def test_a_run_stopped_by_its_deadline_goes_on_from_its_last_step(db: Any) -> None:
    fleet = sparse_fleet(H)
    publish(db, fleet, version=3)
    StateStore(db, "control", PREFIX).save(CompactionState(H))
    # Given reads that take a second of the run's clock each, and a run of 5 seconds
    time = FakeTime(per_read_s=1.0)
    compact = runner([SETTLED], reader=SlowReader(time), concurrency=2)
    first = compact.run(Deadline.after_ms(5_000, time.clock))
    # Then it stops after the steps that fit, saving where it got to, with nothing compacted twice
    assert first.hours == 0 and 0 < first.steps < 4
    assert state(db) == CompactionState(H, group=2 * first.steps)
    # And the next runs go on from there until the hour is done
    runs = 1
    while state(db) != CompactionState(H + HOUR):
        compact.run(Deadline.after_ms(5_000, time.clock))
        runs += 1
        assert runs < 10
    stored = compacted(db)
    assert stored.keys() == identities(fleet) and all(len(copies) == 1 for copies in stored.values())


def test_after_downtime_a_run_catches_up_every_hour_in_order(db: Any) -> None:
    hours = [H - 3 * HOUR, H - 2 * HOUR, H - HOUR, H]
    fleets = {hour: sparse_fleet(hour, devices=10) for hour in hours}
    for fleet in fleets.values():
        publish(db, fleet, version=2)
    StateStore(db, "control", PREFIX).save(CompactionState(H - 5 * HOUR))
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
