"""End to end: blocks written to a moto table, exported by moto's ExportTableToPointInTime to its S3, read
back by ``tsctl archive`` as exactly the readings written (each once, the newest copy).

moto's export writes the data file (gzip'd DynamoDB JSON lines) but no manifest. The test reads it as it
is (``--without-manifest``), then adds the two manifests DynamoDB writes beside it (the closest faithful
equivalent of AWS's export) and reads it from S3 and from a copy on disk with every check on.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from archives import LocalStore, ReadStats, S3Store, read_readings
from keydesign import Layout, Reading, ShardMap
from tests.integration.mocked_aws import create_readings_table, mocked_aws
from tests.legacy_items import legacy_item
from tests.unit.tsctl.exports import T0, manifests, reading
from tests.unit.tsctl.running import run_archive

pytestmark = pytest.mark.integration

REGION = "eu-west-1"
TABLE = "timeseries-readings-2026-11-22-06"
BUCKET = "timeseries-exports"
PREFIX = f"dynamodb-exports/{TABLE}"
LAYOUT = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="timeseries-readings", table_period="hour")


def batches() -> tuple[list[list[tuple[Reading, int]]], list[Reading]]:
    """Three ingest batches (a fleet, a hot sensor, and a regrouped redelivery of part of both with corrections,
    published later) and the readings a reader must get back."""
    fleet = [reading(f"sensor-{e:03d}", T0 + i * 200 + e, 20.0 + i / 10, None) for e in range(30) for i in range(100)]
    hot = [reading("sensor-alpha-001", T0 + i * 5, float(i), f"alpha-{i}") for i in range(3_000)]
    corrected = [reading(r.entity_id, r.ts_ms, -1.0, r.event_id) for r in hot[1_000:1_500]]
    redelivered = fleet[500:700]  # the same readings, grouped into other blocks
    sent = [[(r, 11) for r in fleet], [(r, 12) for r in hot], [(r, 13) for r in [*redelivered, *corrected]]]
    newest = {(r.entity_id, r.ts_ms, r.event_id): r for batch in sent for r, _ in batch}
    return sent, sorted(newest.values(), key=lambda r: (r.entity_id, r.ts_ms, r.event_id))


def export_table(dynamodb: Any, s3: Any) -> str:
    """The table exported as the rotator asks for it; the key of the data file moto wrote."""
    arn = dynamodb.describe_table(TableName=TABLE)["Table"]["TableArn"]
    started = dynamodb.export_table_to_point_in_time(
        TableArn=arn, S3Bucket=BUCKET, S3Prefix=PREFIX, ExportFormat="DYNAMODB_JSON"
    )["ExportDescription"]
    deadline = time.monotonic() + 30
    while dynamodb.describe_export(ExportArn=started["ExportArn"])["ExportDescription"]["ExportStatus"] != "COMPLETED":
        assert time.monotonic() < deadline, "moto's export did not complete"
        time.sleep(0.05)
    (key,) = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)["Contents"]]
    return str(key)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Any]]:
    """DynamoDB and S3 clients on moto, with TABLE (point-in-time recovery on, as an export needs)
    and the bucket exports go to."""
    with mocked_aws(monkeypatch, REGION):
        dynamodb, s3 = boto3.client("dynamodb", region_name=REGION), boto3.client("s3", region_name=REGION)
        create_readings_table(dynamodb, TABLE)
        dynamodb.update_continuous_backups(
            TableName=TABLE, PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True}
        )
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        yield dynamodb, s3


def test_an_exported_table_of_blocks_reads_back_as_the_readings_written(aws: tuple[Any, Any], tmp_path: Path) -> None:
    dynamodb, s3 = aws
    sent, expected = batches()
    # Given a table holding the blocks ingest makes of three batches, one of them a regrouped redelivery,
    # with a split sensor whose blocks lie in partitions of its own
    shard_map = ShardMap.initial(LAYOUT.bucket, 16).with_entity("sensor-alpha-001", 4, T0, now_ms=T0 - 7_200_000)
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    written = 0
    with table.batch_writer() as writer:
        for batch in sent:
            for block in LAYOUT.pack(batch, shard_map, retention_ms=30 * 86_400_000):
                assert block.key.table == TABLE
                writer.put_item(Item=block.item())
                written += 1
    assert dynamodb.describe_table(TableName=TABLE)["Table"]["ItemCount"] == written

    # When moto exports it, and tsctl archive reads the export from S3 as moto wrote it
    data_key = export_table(dynamodb, s3)
    raw = tmp_path / "as-moto-wrote-it.jsonl"
    assert run_archive([f"s3://{BUCKET}/{PREFIX}/", "-o", str(raw), "--without-manifest"]) == 0

    # Then it holds exactly the readings written, each once, the newest copy
    assert [json.loads(line) for line in raw.read_text().splitlines()] == [r.to_json() for r in expected]
    assert [r.measures["temp"] for r in expected if r.event_id == "alpha-1200"] == [-1.0]

    # And with the manifests DynamoDB writes beside the data file, it reads with every check on:
    # from S3, within a memory bound (the split sensor's busiest 10 s window: 2,000 readings and 500 corrections),
    # and from a copy on disk (aws s3 sync)
    for key, body in manifests([(data_key, written)], prefix=PREFIX, export_id=data_key.split("/")[-3]).items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    stats = ReadStats()
    from_s3 = list(read_readings(S3Store.parse(s3, f"s3://{BUCKET}/{PREFIX}"), max_readings=2_500, stats=stats))
    assert sorted(from_s3, key=lambda r: (r.entity_id, r.ts_ms, r.event_id)) == expected
    assert stats.held_max <= 2_500 < stats.copies and stats.spill_files > 1
    assert stats.duplicates == 700 and stats.items == written
    for listed in s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX)["Contents"]:
        local = tmp_path / "copy" / listed["Key"].removeprefix(PREFIX + "/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(s3.get_object(Bucket=BUCKET, Key=listed["Key"])["Body"].read())
    assert list(read_readings(LocalStore(tmp_path / "copy"))) == expected


def test_an_exported_table_holding_items_from_before_blocks_reads_back_with_its_blocks(
    aws: tuple[Any, Any],
) -> None:
    dynamodb, s3 = aws
    # Given a table deployed before blocks: items of one reading (with a dimension, a whole-number measure),
    # the blocks written since, and two old readings sent again after the upgrade, one with another value
    shard_map = ShardMap.initial(LAYOUT.bucket, 4)
    old = [reading("sensor-1", T0 + i * 300, i + 0.5, f"o{i}") for i in range(20)]
    old.append(
        Reading.parse({"entity_id": "sensor-2", "timestamp": T0, "measures": {"n": 7}, "dimensions": {"s": "a"}})
    )
    new = [(reading("sensor-1", T0 + 9_000 + i * 100, -1.0 * i, f"b{i}"), 21) for i in range(10)]
    new += [(old[3], 22), (reading("sensor-1", old[4].ts_ms, 99.0, "o4"), 22)]
    for r in old:
        dynamodb.put_item(TableName=TABLE, Item=legacy_item(r, LAYOUT, shard_map, ttl=T0 // 1000 + 86_400))
    table = boto3.resource("dynamodb", region_name=REGION).Table(TABLE)
    with table.batch_writer() as writer:
        for block in LAYOUT.pack(new, shard_map, retention_ms=30 * 86_400_000):
            writer.put_item(Item=block.item())

    # When moto exports it and the archive reader reads the export
    export_table(dynamodb, s3)
    got = list(read_readings(S3Store.parse(s3, f"s3://{BUCKET}/{PREFIX}"), without_manifest=True))

    # Then every reading comes back once, in order, o4 as its block has it
    newest = {(r.entity_id, r.ts_ms, r.event_id): r for r in [*old, *(r for r, _ in new)]}
    assert got == sorted(newest.values(), key=lambda r: (r.entity_id, r.ts_ms, r.event_id))
    assert [r.measures["temp"] for r in got if r.event_id in {"o3", "o4"}] == [3.5, 99.0]
    assert (got[-1].measures, got[-1].dimensions) == ({"n": 7}, {"s": "a"})
