"""Faults moto never produces, injected inside the real client: throttling, retried by botocore's
standard mode, and a 503 with Retry-After only when the retries run out; and an item in a readings
partition that is not a block this code reads, which fails the read rather than leave a hole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from moto.core.botocore_stubber import MockRawResponse

from adapters.clients import client
from adapters.partition_reader import DynamoPartitionReader
from keydesign import format_ts
from tests.integration.query.conftest import HOUR, NOW, Store, StoreFactory, api_for, reading, to_dynamodb
from tests.unit.query.apigw import entity_path

pytestmark = pytest.mark.integration

PATH = entity_path("sensor-1", "readings")
PARAMS = {"from_": format_ts(NOW - 2 * HOUR), "to": format_ts(NOW)}


class Throttle:
    """A before-send hook: the first ``times`` Query calls come back throttled, as on the wire."""

    def __init__(self, times: int) -> None:
        self.times = times
        self.sent = 0

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        self.sent += 1
        if self.sent > self.times:
            return None  # let moto answer
        body = json.dumps(
            {"__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException", "message": "slow"}
        ).encode()
        return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.0"}, MockRawResponse(body))


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    made = make_store("hybrid")
    for n in range(5):
        made.write(reading("sensor-1", NOW - HOUR + n, f"e{n}"))
    return made


def throttled_reader(times: int) -> tuple[DynamoPartitionReader, Throttle]:
    dynamodb = client("dynamodb")  # the production client: standard retries, 3 attempts
    hook = Throttle(times)
    dynamodb.meta.events.register_first("before-send.dynamodb.Query", hook)
    return DynamoPartitionReader(dynamodb), hook


def test_a_throttled_query_is_retried_by_the_client_and_the_page_is_complete(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)  # botocore's backoff, not the test's time
    reader, hook = throttled_reader(times=2)

    reply = api_for(store, reader=reader).get(PATH, **PARAMS)

    assert reply.status == 200
    assert [i["event_id"] for i in reply.body["items"]] == [f"e{n}" for n in range(5)]
    assert hook.sent >= 3


def test_throttling_beyond_the_retries_is_a_503_with_retry_after(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("time.sleep", lambda _: None)
    reader, hook = throttled_reader(times=10_000)

    reply = api_for(store, reader=reader).get(PATH, **PARAMS)

    assert reply.status == 503
    assert reply.headers["Retry-After"] == "1"
    assert reply.body == {"error": "the store is busy; retry in a moment", "parameter": None}
    assert hook.sent >= 3


@pytest.mark.parametrize("payload", [None, b"\x01\x05"])
def test_an_item_that_is_not_a_readable_block_fails_the_read_with_a_500(store: Store, payload: bytes | None) -> None:
    # Given, among the entity's blocks, an item with a block's key and no payload, or a cut one
    (block,) = store.layout.pack([(reading("sensor-1", NOW - HOUR + 10, "e9"), 9)], store.shard_map)
    item = {"pk": block.key.pk, "sk": block.key.sk} | ({} if payload is None else {"b": payload})
    store.dynamodb.put_item(TableName=block.key.table, Item=to_dynamodb(item))

    reply = api_for(store).get(PATH, **PARAMS)

    assert reply.status == 500
    assert reply.body["error"].startswith("a stored block of readings in this range cannot be decoded")
