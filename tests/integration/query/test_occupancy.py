"""Occupancy on moto: ingest's records and the query function's pruning with real boto3 calls
(expressions, conditional marker, projections), end to end through the real Ingestor."""

from __future__ import annotations

import random
from typing import Any

import boto3
import pytest

from adapters.batch_writer import BatchWriter
from adapters.observability import metrics
from adapters.occupancy import OccupancyReader, OccupancyRecorder, OccupancyStore
from adapters.partition_reader import DynamoPartitionReader
from adapters.shard_map_source import StaticShardMap
from ingest.kinesis_records import parse_records
from ingest.logic import Ingestor
from ingest.rejects import RejectsPublisher
from keydesign import Layout, ShardMap
from keydesign.occupancy import SINCE_PK
from query.cursor import CursorCodec
from query.logic import QueryService
from query.models import ReadingsPage
from query.params import PageArgs, ReadArgs, TimeRange
from query.settings import DEFAULT_LIMIT, QueryLimits
from tests.integration.mocked_aws import create_readings_table, mocked_aws
from tests.integration.query.conftest import HOUR, NOW, REGION
from tests.unit.ingest.kinesis_events import as_json, kinesis_event, reading

pytestmark = pytest.mark.integration

CONTROL = "occupancy-control"
DAY = 24 * HOUR


class _NoRejects:
    def send_message_batch(self, **kwargs: Any) -> Any:
        return {"Successful": [{"Id": e["Id"]} for e in kwargs["Entries"]], "Failed": []}


def test_ingested_partitions_are_recorded_and_reads_query_only_those(monkeypatch: pytest.MonkeyPatch) -> None:
    with mocked_aws(monkeypatch, REGION):
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        create_readings_table(dynamodb, "readings")
        create_readings_table(dynamodb, CONTROL)
        layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
        shard_map = ShardMap.initial(layout.bucket, 8)
        store = OccupancyStore(dynamodb, CONTROL, "readings")
        # Given recording that started before these readings (the ingest's own marker is then refused)
        assert store.mark_since(NOW - 10 * DAY) is True
        ingestor = Ingestor(
            layout=layout,
            shard_maps=StaticShardMap(shard_map),
            writer=BatchWriter(dynamodb, concurrency=2),
            rejects=RejectsPublisher(_NoRejects(), "https://sqs.eu-west-1.amazonaws.com/123456789012/rejects"),
            retention_ms=30 * DAY,
            max_future_ms=300_000,
            max_age_ms=7 * DAY,
            wall_clock_ms=lambda: NOW,
            rng=random.Random(1),
            occupancy=OccupancyRecorder(store, max_future_ms=300_000),
        )
        batch = [
            as_json(reading("sensor-a", NOW - 2 * DAY + 60_000, "a1")),
            as_json(reading("sensor-a", NOW - 2 * DAY + 120_000, "a2")),
            as_json(reading("sensor-b", NOW - HOUR, "b1")),
        ]
        try:
            outcome = ingestor.ingest(parse_records(kinesis_event(batch)), 60_000)
        finally:
            ingestor.close()
            metrics.clear_metrics()
        assert outcome.written == 3
        marker = dynamodb.get_item(TableName=CONTROL, Key={"pk": {"S": SINCE_PK}, "sk": {"S": "readings"}})
        assert int(marker["Item"]["since"]["N"]) == NOW - 10 * DAY

        svc = QueryService(
            layout=layout,
            shard_maps=StaticShardMap(shard_map),
            reader=DynamoPartitionReader(dynamodb),
            cursors=CursorCodec(lambda: b"integration-cursor-key-0123456789abcdef"),
            limits=QueryLimits(),
            clock_ms=lambda: NOW,
            occupancy=OccupancyReader(store),
        )
        # When three days are read across entities, and per entity (one consistently)
        page = PageArgs(TimeRange(NOW - 3 * DAY, NOW), DEFAULT_LIMIT)
        everything = svc.range_readings(page)
        one = svc.entity_readings("sensor-a", page, ReadArgs(consistent=True))
        # Then every reading comes back, and only the two occupied partitions were queried
        assert isinstance(everything, ReadingsPage) and isinstance(one, ReadingsPage)
        assert [i.event_id for i in everything.items] == ["a1", "a2", "b1"]
        assert everything.cost.partitions_queried == 2 and everything.complete
        assert [i.event_id for i in one.items] == ["a1", "a2"]
        assert one.cost.partitions_queried == 1
        metrics.clear_metrics()
