"""Concurrent BatchWriteItem calls into fresh partitions of one table, on moto's server: nothing is lost
while the local runtime's moto changes are installed (and, without them, the same stress loses items).

moto stores an item in ``items[partition][sort key]``; two request threads writing the first items of a
partition can each find it missing and each insert a fresh one, the second replacing the first. The
window is a few bytecodes wide, so the stress widens it the way a loaded machine does: moto's key hash
(called inside that window) gives up the interpreter lock on every call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.server import ThreadedMotoServer

from local_runtime import moto_speedups
from tests.integration.mocked_aws import create_readings_table

pytestmark = pytest.mark.integration
WRITERS, PARTITIONS, ROUNDS = 16, 25, 10


@pytest.fixture(scope="module")
def dynamodb() -> Iterator[Any]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield boto3.client(
            "dynamodb",
            endpoint_url=f"http://{host}:{port}",
            region_name="eu-west-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
    finally:
        server.stop()


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


def test_concurrent_writes_into_new_partitions_lose_nothing(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given moto's server with the local runtime's changes, as local mode runs it
    assert moto_speedups.install()
    try:
        # When 16 threads write 4,000 items into 250 new partitions, all at once, and the table is counted
        lost = lost_items(dynamodb, "locked", monkeypatch)
    finally:
        moto_speedups.uninstall()
    # Then every item is there
    assert lost == 0


def test_without_the_write_lock_the_same_stress_loses_items(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given moto's server as moto ships it; when the same stress runs; then items are lost:
    # the test above is strong enough to catch what the lock prevents
    assert lost_items(dynamodb, "unlocked", monkeypatch) > 0
