"""The tables' DynamoDB streams, polled like Lambda polls them, for the hot-key handler's plug point."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from infra.config import READINGS_SCHEMA
from local_runtime.event_source_mapping import MappingConfig
from local_runtime.functions import FunctionSpec
from local_runtime.resources import TableDefinition, create_table
from tests.integration.local_runtime import recordings
from tests.integration.local_runtime.conftest import (
    WAIT_S,
    local_config,
    publish_readings,
    readings,
    stored,
    stored_items,
)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_recordings")]

RECORDER = "tests.integration.local_runtime.stream_recorder.handler"
STREAM_MAPPING = MappingConfig(batch_size=50, max_retries=5, poll_interval_s=0.05, retry_base_s=0.01)


def test_every_write_reaches_the_stream_handler_with_partial_failures_retried(running: Any) -> None:
    # Given the system with a stream handler on the readings table
    system = running()
    function = system.functions.load(FunctionSpec(name="hotkeys", handler=RECORDER))
    system.mappings.follow_tables(function, STREAM_MAPPING)
    # When readings are ingested and everything has drained (the stream, then the table's stream)
    publish_readings(system, readings(400, prefix="s"))
    assert system.wait_until_idle(WAIT_S)
    # Then the handler processed an INSERT of every stored item (block), and nothing else
    items = stored_items(system)
    seen = recordings.SEEN
    assert {s["sk"] for s in seen} == {i["sk"]["S"] for i in items}
    assert {s["event"] for s in seen} == {"INSERT"}
    # And the records carry what Lambda's carry: the table's stream ARN, the region, a size, a creation time
    (table,) = system.readings_tables()
    assert {s["source"] for s in seen} == {system.resources.table_stream_arns[table]}
    assert {s["region"] for s in seen} == {system.options.region}
    assert all(s["size_bytes"] > 0 for s in seen)
    assert all(abs(s["created"] - time.time()) < 600 for s in seen)
    # And the records failed once (the first of a batch of several) were retried from their sequence number:
    # the records after a failure in its batch are delivered again
    mapping = system.stats()["event_source_mappings"][f"hotkeys:{table}"]
    assert recordings.FAILED_ONCE and {s["sk"] for s in seen} >= recordings.FAILED_ONCE
    assert mapping["partial_failures"] >= 1 and mapping["records_skipped"] == 0
    redelivered = Counter(s["sk"] for s in seen)
    assert mapping["records_received"] == len(items)
    assert sum(redelivered.values()) > len(items)


def test_per_period_tables_are_followed_as_they_are_created(running: Any) -> None:
    # Given per-period tables: the current day's and the next day's exist from the start
    config = local_config(table_period="day", bucket="15m")
    system = running(config)
    function = system.functions.load(FunctionSpec(name="hotkeys", handler=RECORDER))
    system.mappings.follow_tables(function, STREAM_MAPPING)
    assert len(system.readings_tables()) == 2
    layout = config.layout()
    now_ms = int(time.time() * 1000)
    assert layout.table_period is not None
    start = max(now_ms - 2_000, layout.table_period.start(now_ms))
    publish_readings(system, readings(60, prefix="p", start_ms=start))
    assert system.wait_until_idle(WAIT_S)
    assert len(stored(system)) == 60
    assert {s["sk"] for s in recordings.SEEN} == {i["sk"]["S"] for i in stored_items(system)}
    # When the rotator creates another period's table and something is written to it
    later = layout.table_for(layout.table_period.next_start(layout.table_period.next_start(now_ms)))
    dynamodb = system.client("dynamodb")
    create_table(dynamodb, TableDefinition(later, READINGS_SCHEMA, "PAY_PER_REQUEST"))
    dynamodb.put_item(TableName=later, Item={"pk": {"S": "0001#x"}, "sk": {"S": "late-1"}})
    # Then its stream is followed too
    assert system.wait_until_idle(WAIT_S)
    assert "late-1" in {s["sk"] for s in recordings.SEEN}
    assert f"hotkeys:{later}" in system.stats()["event_source_mappings"]
    # And when the rotator drops it, its mapping goes and the system still comes to rest
    dynamodb.delete_table(TableName=later)
    assert system.wait_until_idle(WAIT_S)
    assert f"hotkeys:{later}" not in system.stats()["event_source_mappings"]
