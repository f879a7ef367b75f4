"""A block's payload through ingest's write client (prebuilt JSON, Binary as base64 text) on moto:
what is read back is the payload, byte for byte."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from adapters.batch_writer import BatchWriter, PendingWrite, send_prebuilt_json, serialize_item
from adapters.clients import client
from adapters.retry import Deadline
from keydesign import Layout, Reading, ShardMap, decode_block
from tests.integration.mocked_aws import create_readings_table, mocked_aws
from tests.unit.ingest.kinesis_events import REGION

pytestmark = pytest.mark.integration

NOW = 1_795_000_000_000


def test_blocks_written_through_the_prebuilt_json_read_back_byte_for_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given blocks of readings with every kind of value, and ingest's write client as from_settings makes it
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    rng = random.Random(2)
    readings = [
        Reading.parse(
            {
                "entity_id": f"sensor-{n % 7}",
                "timestamp": NOW - n * 400,
                "event_id": None if n % 3 else f"ev-{n}",
                "measures": {"t": rng.uniform(-40, 40), "n": rng.randrange(10**20), "z": -0.0},
                "dimensions": {"site": "plant-é-\U0001f600"} if n % 2 else {},
            }
        )
        for n in range(300)
    ]
    blocks = layout.pack([(r, 4965) for r in readings], ShardMap.initial(layout.bucket, 4), retention_ms=86_400_000)
    with mocked_aws(monkeypatch, REGION):
        dynamodb = client("dynamodb", max_attempts=1, validate=False)
        send_prebuilt_json(dynamodb)
        sent: list[Any] = []
        dynamodb.meta.events.register_first(  # what botocore's serializer made: nothing, the JSON was prebuilt
            "before-call.dynamodb.BatchWriteItem", lambda params, **_: sent.append(json.loads(params["body"]))
        )
        create_readings_table(dynamodb, "readings")
        writes = [PendingWrite(b.key.table, b.key.pk, b.key.sk, serialize_item(b.item())) for b in blocks]
        # When they are written
        writer = BatchWriter(dynamodb, concurrency=2)
        try:
            report = writer.write(writes, Deadline.never())
        finally:
            writer.close()
        # Then each reads back as it was sent, and decodes to its readings
        assert report.written == set(range(len(blocks))) and len(blocks) > 25
        assert all(body["RequestItems"] == {"readings": []} for body in sent)
        for block in blocks:
            item = dynamodb.get_item(TableName="readings", Key={"pk": {"S": block.key.pk}, "sk": {"S": block.key.sk}})
            assert item["Item"]["b"]["B"] == block.encoded.payload
            assert decode_block(block.entity_id, item["Item"]["b"]["B"])[1] == list(block.readings)
