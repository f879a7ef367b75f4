"""The write tier on moto for the compaction tests: tables, group items and dense entities' blocks
written with the key design (as ingest writes them), and what compaction stored, read back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from adapters.batch_writer import BatchWriter, serialize_item
from adapters.partition_reader import DynamoPartitionReader
from adapters.rollup_store import RollupStore
from adapters.shard_map_source import StaticShardMap
from adapters.start_items import write_tier_starts
from compaction.logic import CompactionRunner, StateStore
from compaction.settings import CompactionSettings
from doubles.clocks import ManualClock
from keydesign import Reading, ShardMap, parse_timestamp
from keydesign.blocks import decode_group, encode_group, keyed_item
from keydesign.rollup import RedoRequest, redo_pk
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    MAX_COMPACTED_SPAN_MS,
    REPACK_MS,
    SUB_PK_PREFIX,
    CompactionState,
    WriteTier,
    dense_mark_sk,
    group_sk_stem,
    repack_start,
    slice_start,
)
from tests.integration.mocked_aws import create_readings_table, mocked_aws

REGION = "eu-west-1"
PREFIX = "readings"
HOUR = 3_600_000
MINUTE = 60_000
#: The hour compacted in most tests, and a clock that has let it settle (the slice rule's grace, a minute,
#: and SETTLE, 3 minutes).
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
    "ROLLUPS": "1m,1h,1d",
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


def put_group_item(db: Any, readings: Sequence[Reading], version: int, tier: WriteTier = TIER) -> None:
    """One group item as ingest writes it (one group, one hour): format 4, its keys, its expiry; after the
    start item of a container whose batch started in that hour (:func:`put_start`)."""
    ordered = sorted(readings, key=lambda r: (r.ts_ms, r.entity_id, r.event_id))
    (group,) = {tier.group_of(r.entity_id) for r in ordered}
    hour = slice_start(ordered[0].ts_ms)
    put_start(db, hour)
    encoded = encode_group(ordered, version)
    item, _, _ = keyed_item(tier.group_pk(group, hour), group_sk_stem(encoded), encoded.payload, None)
    db.put_item(TableName=table(db, hour), Item=serialize_item(item))


def put_start(db: Any, stamp_ms: int) -> None:
    """The write tier's start item of the hour of ``stamp_ms``, as an ingest container puts it before its
    first group items (compaction's first run starts at the earliest)."""
    start = write_tier_starts("control", PREFIX).write(stamp_ms)
    db.put_item(TableName=start.table, Item=start.item)


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
    """Every reading in a cluster block of any readings table, with the block's version: every copy."""
    found: dict[Identity, list[tuple[int, Reading]]] = {}
    for name in db.list_tables()["TableNames"]:
        if not name.startswith(f"{PREFIX}-"):
            continue
        for page in db.get_paginator("scan").paginate(TableName=name):
            for item in page["Items"]:
                if not item["pk"]["S"].startswith(CLUSTER_PK_PREFIX):
                    continue
                header, readings = decode_group(item["b"]["B"], span_limit_ms=MAX_COMPACTED_SPAN_MS)
                for r in readings:
                    found.setdefault((r.entity_id, r.ts_ms, r.event_id), []).append((header.version, r))
    return found


def sub_items(db: Any) -> dict[Identity, list[tuple[int, Reading, str, str]]]:
    """Every reading in a sub-item of any readings table, with the sub-item's version and key: every copy."""
    found: dict[Identity, list[tuple[int, Reading, str, str]]] = {}
    for name in db.list_tables()["TableNames"]:
        if not name.startswith(f"{PREFIX}-"):
            continue
        for page in db.get_paginator("scan").paginate(TableName=name):
            for item in page["Items"]:
                pk, sk = item["pk"]["S"], item["sk"]["S"]
                if pk.startswith(SUB_PK_PREFIX):
                    header, readings = decode_group(item["b"]["B"], span_limit_ms=REPACK_MS)
                    for r in readings:
                        found.setdefault((r.entity_id, r.ts_ms, r.event_id), []).append((header.version, r, pk, sk))
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
        "rollups": rollup_store(),
        "levels": SETTINGS.granularities,
        "retention_ms": SETTINGS.retention_ms,
        "settle_ms": SETTINGS.settle_ms,
        "max_future_ms": SETTINGS.max_future_ms,
        "clock_ms": lambda: clock[0],
    }
    return CompactionRunner(**{**defaults, **parts})


def retrying_runner(api: Any, now_ms: int) -> tuple[CompactionRunner, ManualClock[float]]:
    """A runner at ``now_ms`` writing to ``api`` through a writer that retries on a manual clock (its sleeps
    move the clock, so a run given ``Deadline.after_ms(..., clock)`` retries until that deadline)."""
    clock = ManualClock(0.0)
    writer = BatchWriter(api, clock=clock, sleep=clock.sleep)
    return runner([now_ms], writer=writer, concurrency=2), clock


class RefusingWrites:
    """DynamoDB refusing (``code``) every BatchWriteItem that puts an item ``refuses`` picks, while ``on``."""

    def __init__(
        self, refuses: Callable[[dict[str, Any]], bool], code: str = "ProvisionedThroughputExceededException"
    ) -> None:
        self.api = boto3.client("dynamodb", region_name=REGION)
        self.refuses = refuses
        self.code = code
        self.on = True

    def batch_write_item(self, **kwargs: Any) -> Any:
        items = [r["PutRequest"]["Item"] for rs in kwargs["RequestItems"].values() for r in rs]
        if self.on and any(self.refuses(i) for i in items):
            raise ClientError({"Error": {"Code": self.code, "Message": "refused"}}, "BatchWriteItem")
        return self.api.batch_write_item(**kwargs)


def cluster_block_of(entities: set[str]) -> Callable[[dict[str, Any]], bool]:
    """Picks a cluster block of 06:00's hour holding a reading of ``entities``."""

    def picks(item: dict[str, Any]) -> bool:
        pk = item["pk"]["S"]
        if not pk.startswith(CLUSTER_PK_PREFIX) or pk[7:20] != "2026-11-22T06":
            return False
        return bool(
            {r.entity_id for r in decode_group(item["b"]["B"], span_limit_ms=MAX_COMPACTED_SPAN_MS)[1]} & entities
        )

    return picks


def rollup_store() -> RollupStore:
    client = boto3.client("dynamodb", region_name=REGION)
    return RollupStore(client, BatchWriter(client), "control", PREFIX, SETTINGS.retention_ms)


def put_redo(db: Any, request: RedoRequest) -> None:
    """A redo request as the rollup function puts it (the control table's key of it)."""
    pk, sk = request.key(PREFIX)
    db.put_item(TableName="control", Item=serialize_item({"pk": pk, "sk": sk}))


def redos(db: Any) -> list[RedoRequest]:
    items = db.query(
        TableName="control",
        KeyConditionExpression="pk = :pk",
        ExpressionAttributeValues={":pk": {"S": redo_pk(PREFIX)}},
    )["Items"]
    return [RedoRequest.parse(item["sk"]["S"]) for item in items]


def state(db: Any) -> CompactionState | None:
    """The stored state, but when it moved, when it last re-marked and when it last re-packed
    (``advanced_at``: :func:`advanced_at`; the others: :func:`stamps`)."""
    stored = StateStore(db, "control", PREFIX).load()
    return None if stored is None else dataclasses.replace(stored, advanced_at=0, remarked_at=None, repacked_at=0)


def stamps(db: Any) -> tuple[int | None, int]:
    """The stored state's ``remarked_at`` and ``repacked_at``."""
    stored = StateStore(db, "control", PREFIX).load()
    assert stored is not None
    return stored.remarked_at, stored.repacked_at


def save_state(db: Any, saved: CompactionState) -> None:
    """``saved`` stored as compaction's state, as a run stores it."""
    StateStore(db, "control", PREFIX).save(saved)


def advanced_at(db: Any) -> int:
    stored = StateStore(db, "control", PREFIX).load()
    return 0 if stored is None else stored.advanced_at


def sparse_fleet(hour: int, devices: int = 40, per_device: int = 3) -> list[Reading]:
    """Sparse devices' readings of ``hour``: each a few, spread over the hour (and its 15-minute buckets)."""
    return [
        reading(f"dev-{d:03d}", hour + (d * 7_919 + n * 1_234_567) % HOUR, f"r{n}", float(d + n))
        for d in range(devices)
        for n in range(per_device)
    ]


def hot_beside_its_blocks(db: Any, step_ms: int) -> tuple[list[Reading], list[Reading]]:
    """A sparse entity's two readings and ten of a hot one (``step_ms`` apart) from ``H``: the tier holds copies
    of version 20 of hot's readings 0-4 and of the sparse entity's two, and hot, dense in other batches, wrote
    its own blocks: readings 3-9 at version 30 (newer: 3 and 4 corrected), and an older copy of reading 0 at
    version 10. Returns (sparse, hot)."""
    sparse = [reading("s-1", H + 1_000, "a"), reading("s-1", H + 2_000, "b")]
    hot = [reading("hot", H + n * step_ms, f"h{n}") for n in range(10)]
    publish(db, [*sparse, *hot[:5]], version=20)
    put_dense(db, [dataclasses.replace(r, measures={"v": 9.0}) for r in hot[3:]], version=30)
    put_blocks(db, [hot[0]], version=10)
    return sparse, hot


def publish(db: Any, readings: Sequence[Reading], version: int, tier: WriteTier = TIER) -> None:
    """``readings`` as ingest batches write them with ``tier``: per group, items of up to 10 s (a group
    item's span), each in one re-pack slice."""
    by_group: dict[int, list[Reading]] = {}
    for r in sorted(readings, key=lambda r: (r.ts_ms, r.entity_id, r.event_id)):
        by_group.setdefault(tier.group_of(r.entity_id), []).append(r)
    for members in by_group.values():
        item: list[Reading] = []
        for r in members:
            if item and (r.ts_ms - item[0].ts_ms >= 10_000 or repack_start(r.ts_ms) != repack_start(item[0].ts_ms)):
                put_group_item(db, item, version, tier)
                item = []
            item.append(r)
        put_group_item(db, item, version, tier)
