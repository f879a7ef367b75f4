"""Concurrent writes on moto's server and through its in-process mock (the tests'): nothing acknowledged is
lost while the local runtime's moto changes are installed (one request at a time), and without them the
same stress loses some.

* DynamoDB: moto stores an item in ``items[partition][sort key]``; two request threads writing the first
  items of a partition can each find it missing and each insert a fresh one, the second replacing the first.
* Kinesis: moto numbers a record one past the shard's last, then stores it; two PutRecords at once can
  number two records alike, the second replacing the first, both acknowledged (the readings the local
  stack once lost), while a GetRecords walking the shard fails with an HTTP 500.

Each window is a few bytecodes wide, so the stress widens it the way a loaded machine does: a call moto
makes inside it gives up the interpreter lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core.utils import utcnow
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.server import ThreadedMotoServer

from local_runtime import moto_speedups
from tests.integration.mocked_aws import create_readings_table

pytestmark = pytest.mark.integration
WRITERS, PARTITIONS, ROUNDS = 16, 25, 10


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(service: str, endpoint: str) -> Any:
    # No retries: a request moto fails is counted, not hidden by a second attempt.
    config = Config(retries={"mode": "standard", "max_attempts": 1}, max_pool_connections=WRITERS + 1)
    credentials = {"aws_access_key_id": "x", "aws_secret_access_key": "x"}
    return boto3.client(service, endpoint_url=endpoint, region_name="eu-west-1", config=config, **credentials)


@pytest.fixture(scope="module")
def dynamodb(endpoint: str) -> Any:
    return client("dynamodb", endpoint)


def lost_items(dynamodb: Any, table: str, monkeypatch: pytest.MonkeyPatch) -> int:
    """Items missing after ``WRITERS`` threads each wrote one item into every one of ``PARTITIONS`` new
    partitions (one BatchWriteItem of 25 each), ``ROUNDS`` times."""
    create_readings_table(dynamodb, table)
    key_hash = DynamoType.__hash__

    def yielding_hash(self: DynamoType) -> int:
        time.sleep(0)  # lets another request thread run here, as a busy machine may
        return key_hash(self)

    monkeypatch.setattr(DynamoType, "__hash__", yielding_hash)

    def batch(round_and_writer: tuple[int, int]) -> None:
        r, w = round_and_writer
        puts = [{"PutRequest": {"Item": {"pk": {"S": f"{r}#{p}"}, "sk": {"S": str(w)}}}} for p in range(PARTITIONS)]
        assert not dynamodb.batch_write_item(RequestItems={table: puts})["UnprocessedItems"]

    with ThreadPoolExecutor(WRITERS) as pool:
        for r in range(ROUNDS):
            list(pool.map(batch, [(r, w) for w in range(WRITERS)]))
    monkeypatch.undo()
    pages = dynamodb.get_paginator("scan").paginate(TableName=table, Select="COUNT")
    return ROUNDS * PARTITIONS * WRITERS - sum(page["Count"] for page in pages)


@pytest.fixture(params=["server", "in-process mock"])
def writes_to(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A DynamoDB client on moto's server (as local mode runs it), or on its in-process mock (as the tests
    use it: a function under test writes from threads too, its batch writer's pool; compaction's blocks
    went missing so in 1 run of 7 of a test with both cores busy, before the mock took the lock)."""
    if request.param == "server":
        yield request.getfixturevalue("dynamodb")
        return
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    config = Config(retries={"mode": "standard", "max_attempts": 1}, max_pool_connections=WRITERS + 1)
    with mock_aws():
        yield boto3.client("dynamodb", region_name="eu-west-1", config=config)


def test_concurrent_writes_into_new_partitions_lose_nothing(writes_to: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given moto with the local runtime's changes
    assert moto_speedups.install()
    try:
        # When 16 threads write 4,000 items into 250 new partitions, all at once, and the table is counted
        lost = lost_items(writes_to, "locked", monkeypatch)
    finally:
        moto_speedups.uninstall()
    # Then every item is there
    assert lost == 0


def test_without_the_request_lock_the_same_stress_loses_items(writes_to: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given moto as moto ships it; when the same stress runs; then items are lost:
    # the test above is strong enough to catch what the lock prevents
    assert lost_items(writes_to, "unlocked", monkeypatch) > 0


SHARD = "shardId-000000000000"
RECORDS_PER_CALL = 25


def lost_records(endpoint: str, stream: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Records acknowledged but not in the stream after ``WRITERS`` threads each made ``ROUNDS`` PutRecords
    calls into one shard while a reader polled it, and the GetRecords calls that failed meanwhile."""
    kinesis = client("kinesis", endpoint)
    kinesis.create_stream(StreamName=stream, ShardCount=1)

    def yielding_utcnow() -> Any:
        time.sleep(0)  # lets another request thread run here (a record's arrival time), as a busy machine may
        return utcnow()

    monkeypatch.setattr("moto.kinesis.models.utcnow", yielding_utcnow)

    def put(writer: int) -> list[str]:
        acknowledged = []
        for r in range(ROUNDS):
            records = [{"Data": f"{writer}/{r}/{i}".encode(), "PartitionKey": str(i)} for i in range(RECORDS_PER_CALL)]
            answer = kinesis.put_records(StreamName=stream, Records=records)
            assert answer["FailedRecordCount"] == 0
            acknowledged += [record["Data"].decode() for record in records]
        return acknowledged

    def read_until(done: Any) -> int:
        failed = 0
        iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=SHARD, ShardIteratorType="TRIM_HORIZON")
        iterator = iterator["ShardIterator"]
        while not done.done():
            try:
                iterator = kinesis.get_records(ShardIterator=iterator)["NextShardIterator"]
            except ClientError:
                failed += 1
        return failed

    with ThreadPoolExecutor(WRITERS + 1) as pool:
        writers = [pool.submit(put, w) for w in range(WRITERS)]
        everything_put = pool.submit(lambda: [f.result() for f in writers])
        failed_reads = pool.submit(read_until, everything_put).result()
        acknowledged = [data for batch in everything_put.result() for data in batch]
    monkeypatch.undo()
    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=SHARD, ShardIteratorType="TRIM_HORIZON")
    page = kinesis.get_records(ShardIterator=iterator["ShardIterator"])  # 10,000 at most: all of them
    stored = {record["Data"].decode() for record in page["Records"]}
    assert len(acknowledged) == WRITERS * ROUNDS * RECORDS_PER_CALL
    return len(set(acknowledged) - stored), failed_reads


def test_concurrent_put_records_lose_nothing_and_reads_never_fail(
    endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given moto's server with the local runtime's changes, as local mode runs it
    assert moto_speedups.install()
    try:
        # When 16 threads put 4,000 records into one shard, 25 a call, while a reader polls it
        lost, failed_reads = lost_records(endpoint, "locked", monkeypatch)
    finally:
        moto_speedups.uninstall()
    # Then every acknowledged record is in the stream, and no read failed (moto's shard walk, when a put
    # lands in it, raises "OrderedDict mutated during iteration": an HTTP 500)
    assert (lost, failed_reads) == (0, 0)


def test_without_the_request_lock_put_records_lose_records(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given moto's server as moto ships it; when the same stress runs; then acknowledged records are gone
    lost, _ = lost_records(endpoint, "unlocked", monkeypatch)
    assert lost > 0
