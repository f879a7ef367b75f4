"""The ingest handler end to end on moto: realistic Kinesis events in, readings in DynamoDB."""

from __future__ import annotations

import gc
import importlib
import random
import string
import sys
from types import ModuleType
from typing import Any

import pytest

import keydesign.model
from adapters.collector import YOUNG_COLLECTION_ALLOCATIONS
from adapters.observability import logger
from adapters.settings import SettingsError
from adapters.shard_map_store import ShardMapStore
from adapters.stream_events import NotAStreamEvent
from doubles.lambda_context import FakeLambdaContext
from tests.integration.ingest.conftest import Aws, base_env, now_ms
from tests.integration.ingest.helpers import invoke
from tests.integration.mocked_aws import create_readings_table, fresh_handler
from tests.unit.ingest.kinesis_events import as_json, kinesis_event, reading, sequence_number
from tests.unit.ingest.kpl import aggregate
from tests.unit.ingest.stored import block_of

pytestmark = pytest.mark.integration

HOUR = 3_600_000


def _mixed_batch(start_ms: int) -> tuple[list[bytes], dict[str, set[str]]]:
    """30 records over 10 entities: single readings and arrays of 20; every event id unique."""
    payloads: list[bytes] = []
    expected: dict[str, set[str]] = {}
    for r in range(30):
        entity = f"sensor-{r % 10:04d}"
        if r % 3 == 0:
            event_id = f"ev-{r}-0"
            payloads.append(as_json(reading(entity, start_ms + r * 1000, event_id, temp=20.0 + r)))
            expected.setdefault(entity, set()).add(event_id)
        else:
            batch = []
            for i in range(20):
                event_id = f"ev-{r}-{i}"
                batch.append(reading(entity, start_ms + r * 1000 + i, event_id, temp=0.1 * i, rh=40))
                expected.setdefault(entity, set()).add(event_id)
            payloads.append(as_json(batch))
    return payloads, expected


def test_every_valid_reading_lands_exactly_once_and_reads_back_through_the_plans(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch of 30 records carrying 410 readings of 10 entities
    start = now_ms() - HOUR
    payloads, expected = _mixed_batch(start)

    # When Lambda delivers it
    result = invoke(handler_module, kinesis_event(payloads), capsys)

    # Then nothing is reported failed, every reading is stored once, and each
    # entity's readings come back through the key-design layer's query plan
    assert result.failed == []
    total = sum(len(ids) for ids in expected.values())
    assert total == 410
    assert result.outcome.written == total
    assert len(aws.readings()) == total
    for entity, ids in expected.items():
        readings = aws.query_entity(entity, start, start + HOUR)
        assert sorted(r.event_id for r in readings) == sorted(ids)
        assert all(r.entity_id == entity for r in readings)
    assert aws.rejects() == []
    # And the metrics say so: each entity's readings of a record 3 s apart share blocks (spans of 10 s),
    # one write unit each, in the fewest calls
    items = aws.table_items()
    units = sum(int(i["sk"]["S"].rsplit("#", 1)[1]) for i in items)
    assert result.metric("ReadingsReceived") == total
    assert result.metric("ReadingsWritten") == total
    assert result.metric("ReadingsRejected") == 0
    assert result.metric("BlocksWritten") == len(items) < total / 10
    assert all("ItemsWritten" not in blob for blob in result.emf), "blocks are the items: one metric counts them"
    assert result.metric("WriteUnitsBilled") == units == len(items)
    assert result.metric("ReadingsPerBlock") == total / len(items)
    assert result.metric("BatchWriteCalls") == -(-len(items) // 25)


def test_blocks_carry_ttl_of_event_time_plus_retention_and_exact_numbers(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    ts = now_ms() - 5_000
    payload = as_json(
        {
            "entity_id": "sensor-ttl",
            "timestamp": ts,
            "event_id": "e1",
            "measures": {"temp": 21.5, "tiny": 1e-7, "big": 12345678901234567890, "third": 0.1 + 0.2},
            "dimensions": {"site": "plant-7"},
        }
    )
    result = invoke(handler_module, kinesis_event([payload]), capsys)
    assert result.failed == []
    (item,) = aws.table_items()
    assert int(item["ttl"]["N"]) == (ts + 30 * 24 * HOUR) // 1000
    (stored,) = block_of(item)
    assert stored.dimensions == {"site": "plant-7"}
    measures = dict(stored.measures)
    assert measures == {"temp": 21.5, "tiny": 1e-7, "big": 12345678901234567890, "third": 0.1 + 0.2}
    assert isinstance(measures["big"], int)  # the integer as sent, not a float


def test_redelivering_the_same_batch_leaves_the_table_unchanged(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch that was ingested once (readings with and without event ids)
    start = now_ms() - HOUR
    payloads, _ = _mixed_batch(start)
    payloads.append(as_json([reading("sensor-noid", start + i, None, temp=float(i)) for i in range(30)]))
    event = kinesis_event(payloads)
    first = invoke(handler_module, event, capsys)
    before = sorted(aws.table_items(), key=lambda i: (i["pk"]["S"], i["sk"]["S"]))

    # When Lambda delivers the very same batch again (at-least-once)
    second = invoke(handler_module, event, capsys)

    # Then the table holds exactly the same items, attribute for attribute (payloads byte for byte)
    after = sorted(aws.table_items(), key=lambda i: (i["pk"]["S"], i["sk"]["S"]))
    assert first.failed == second.failed == []
    assert after == before
    assert len(aws.readings()) == 410 + 30


def test_bad_readings_go_to_the_rejects_queue_and_never_block_good_ones(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given non-JSON, JSON that is not a reading, a half-valid array and a good record
    ts = now_ms() - 60_000
    good = reading("sensor-good", ts, "g1")
    half = [
        reading("sensor-half", ts, "h0"),
        {"entity_id": "sensor-half", "timestamp": ts, "measures": {"temp": "warm"}},
        reading("sensor-half", ts + 1, "h2"),
        {"entity_id": "bad#id", "timestamp": ts, "measures": {"temp": 1}},
        "not an object",
    ]
    payloads = [
        b"temp=21.5 sensor=alpha",  # not JSON
        as_json(42),  # JSON, but not a reading
        as_json(half),
        as_json({"entity_id": "sensor-x", "timestamp": ts, "mesures": {"temp": 1}}),  # typo'd field
        as_json(good),
        b"\xff\xfe\x00garbage",  # not UTF-8
    ]

    result = invoke(handler_module, kinesis_event(payloads), capsys)

    # Then nothing is retried, the good readings are stored ...
    assert result.failed == []
    stored = sorted(r.event_id for r in aws.readings())
    assert stored == ["g1", "h0", "h2"]
    # ... and every bad one is on the rejects queue with its reason and origin
    rejects = {(r["source"]["sequence_number"], r["source"]["index"]): r for r in aws.rejects()}
    assert len(rejects) == 7
    assert rejects[(sequence_number(0), None)]["field"] == "data"
    assert "not JSON" in rejects[(sequence_number(0), None)]["reason"]
    assert rejects[(sequence_number(0), None)]["payload"] == "temp=21.5 sensor=alpha"
    assert "got a number" in rejects[(sequence_number(1), None)]["reason"]
    assert rejects[(sequence_number(2), 1)]["field"] == "measures.temp"
    assert rejects[(sequence_number(2), 3)]["field"] == "entity_id"
    assert rejects[(sequence_number(2), 4)]["field"] == "reading"
    assert rejects[(sequence_number(3), None)]["field"] == "mesures"
    binary = rejects[(sequence_number(5), None)]
    assert binary["payload"] is None and binary["payload_base64"] == "//4AZ2FyYmFnZQ=="
    for r in rejects.values():
        assert r["source"]["shard_id"] == "shardId-000000000003"
        assert r["reject_id"].startswith("shardId-000000000003/")
    assert result.metric("ReadingsRejected") == 7
    assert result.outcome.rejected == 7 and result.outcome.written == 3


def test_kpl_aggregated_records_are_deaggregated_with_sub_sequence_numbers(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    ts = now_ms() - 60_000
    members = [
        (f"sensor-{m}", as_json([reading(f"sensor-{m}", ts + i, f"k{m}-{i}") for i in range(3)])) for m in range(4)
    ]
    members.append(("sensor-bad", b"{not json"))
    aggregated = aggregate(members)
    corrupt = bytearray(aggregate(members[:2]))
    corrupt[10] ^= 0xFF

    result = invoke(handler_module, kinesis_event([aggregated, bytes(corrupt)]), capsys)

    assert result.failed == []
    assert len(aws.readings()) == 12
    rejects = sorted(aws.rejects(), key=lambda r: r["source"]["sequence_number"])
    assert [(r["field"], r["source"]["sub_sequence_number"]) for r in rejects] == [("data", 4), ("kpl", None)]
    assert "MD5" in rejects[1]["reason"]
    assert result.metric("KplMembers") == 5


def test_duplicate_keys_in_one_batch_are_collapsed_last_one_wins(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the same reading (same entity, time and event id) three times, and
    # a redelivered copy of a whole record inside the same batch
    ts = now_ms() - 60_000
    first = as_json(reading("sensor-dup", ts, "same", temp=1.0))
    later = as_json(reading("sensor-dup", ts, "same", temp=3.0))
    bulk = as_json([reading("sensor-bulk", ts + i, f"b{i}") for i in range(40)])
    payloads = [first, bulk, as_json(reading("sensor-dup", ts, "same", temp=2.0)), bulk, later]

    result = invoke(handler_module, kinesis_event(payloads), capsys)

    # Then each reading is stored once, the last copy won, and the collapse is counted
    assert result.failed == []
    readings = aws.readings()
    assert len(readings) == 41
    (dup,) = [r for r in readings if r.entity_id == "sensor-dup"]
    assert dup.measures == {"temp": 3.0}
    assert result.metric("DuplicatesCollapsed") == 42
    assert result.outcome.written == 83


def test_a_block_over_400_kb_is_rejected_not_retried(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a key-design layer that lets a 600 KB dimension through, of text that compresses no
    # further than 6 bits a character (today's limits keep a reading's block far below 400 KB, so
    # ingest does not size blocks: DynamoDB's refusal is what rejects this one)
    monkeypatch.setattr(keydesign.model, "DIMENSION_VALUE_MAX", 1_000_000)
    ts = now_ms() - 60_000
    huge = reading("sensor-huge", ts, "big")
    huge["dimensions"] = {"blob": "".join(random.Random(0).choices(string.ascii_letters + string.digits, k=600_000))}
    payloads = [as_json([reading("sensor-ok", ts, "ok1"), huge, reading("sensor-ok", ts + 1, "ok2")])]

    result = invoke(handler_module, kinesis_event(payloads), capsys)

    # Then the neighbours are written, the big one is a reject whose payload is cut with a note
    assert result.failed == []
    assert sorted(r.event_id for r in aws.readings()) == ["ok1", "ok2"]
    (reject,) = aws.rejects()
    assert reject["field"] == "item"
    assert reject["reason"] == "DynamoDB refused the item: Item size has exceeded the maximum allowed size"
    assert reject["payload_truncated"] is True
    assert reject["payload_bytes"] > 600_000
    assert len(reject["payload"]) <= 64 * 1024
    assert reject["source"]["index"] == 1
    assert result.metric("RejectsTruncated") == 1


def test_readings_outside_the_accepted_time_window_are_rejected(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    now = now_ms()
    payloads = [
        as_json(reading("sensor-t", now + 3_600_000, "future")),
        as_json(reading("sensor-t", now - 8 * 24 * HOUR, "ancient")),
        as_json(reading("sensor-t", now - 1000, "fine")),
    ]
    result = invoke(handler_module, kinesis_event(payloads), capsys)
    assert result.failed == []
    assert [r.event_id for r in aws.readings()] == ["fine"]
    reasons = sorted(r["reason"] for r in aws.rejects())
    assert any("future" in r for r in reasons) and any("older" in r for r in reasons)


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"REJECTS_QUEUE_URL": ""}, "REJECTS_QUEUE_URL"),
        ({"SHARDS": "many"}, "SHARDS"),
        ({"TABLE_PREFIX": ""}, "TABLE_PREFIX"),
        ({"MAX_AGE": "60d"}, "MAX_AGE"),
        ({"MAX_FUTURE": "soon"}, "MAX_FUTURE"),
        ({"LAYOUT": "striped"}, "LAYOUT"),
    ],
)
def test_importing_the_handler_with_a_bad_environment_fails_naming_the_variable(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, overrides: dict[str, str], variable: str
) -> None:
    for name, value in base_env(aws.queue_url, **overrides).items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("ingest.handler", None)
    with pytest.raises(SettingsError) as caught:
        importlib.import_module("ingest.handler")
    sys.modules.pop("ingest.handler", None)
    assert caught.value.variable == variable
    assert str(caught.value).startswith(f"environment variable {variable}:")


def test_the_handler_tunes_the_garbage_collector_once_its_init_is_done(
    aws: Aws, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = gc.get_threshold()
    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(len(sys.modules)))
    monkeypatch.setattr(gc, "get_freeze_count", lambda: len(frozen))  # as in a fresh container
    modules = []
    try:
        for _ in range(2):
            sys.modules.pop("ingest.handler", None)
            modules.append(importlib.import_module("ingest.handler"))
            # Frozen after the handler's imports (what init built leaves the collector's walks), once a process
            assert len(frozen) == 1 and "ingest.logic" in sys.modules
            assert gc.get_threshold() == (YOUNG_COLLECTION_ALLOCATIONS, *before[1:])
    finally:
        for module in modules:
            module.INGESTOR.close()
        sys.modules.pop("ingest.handler", None)
        gc.set_threshold(*before)


def _control_table(aws: Aws, name: str = "readings-control") -> str:
    create_readings_table(aws.dynamodb, name)
    return name


def test_writers_follow_the_shard_map_in_the_control_table(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a control table whose map split sensor-hot into 4 sub-shards from the last boundary
    table = _control_table(aws)
    now = now_ms()
    boundary = now - now % HOUR
    store = ShardMapStore(aws.dynamodb, table, aws.shard_map, clock_ms=lambda: boundary - HOUR)
    store.apply(lambda m: m.with_entity("sensor-hot", 4, boundary, now_ms=boundary - HOUR), reason="test split")
    monkeypatch.setenv("CONTROL_TABLE", table)
    with fresh_handler("ingest.handler", "INGESTOR") as module:
        # When 200 readings of the hot sensor since the boundary are ingested, one a second: 20 blocks
        payloads = [as_json([reading("sensor-hot", boundary + i * 1_000, f"h{i}") for i in range(200)])]
        result = invoke(module, kinesis_event(payloads), capsys)
    # Then their blocks are spread over the entity's own 4 partitions, and the plan made
    # from the stored map finds every one of them
    assert result.failed == []
    partitions = {i["pk"]["S"] for i in aws.table_items()}
    assert len(partitions) == 4 and all("#sensor-hot#" in pk for pk in partitions)
    aws.shard_map = store.load()
    found = aws.query_entity("sensor-hot", boundary, boundary + HOUR)
    assert sorted(r.event_id for r in found) == sorted(f"h{i}" for i in range(200))


def test_the_first_writer_stores_the_initial_map_when_the_control_table_is_empty(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _control_table(aws)
    monkeypatch.setenv("CONTROL_TABLE", table)
    with fresh_handler("ingest.handler", "INGESTOR") as module:
        result = invoke(module, kinesis_event([as_json(reading("sensor-a", now_ms() - 1000, "a1"))]), capsys)
    assert result.failed == []
    stored = ShardMapStore(aws.dynamodb, table, aws.shard_map).peek()
    assert stored is not None and stored.global_shards_at(now_ms()) == 4


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({}, "no Records list"),
        ([], "must be a JSON object"),
        ({"Records": [{"eventID": "shardId-0:1"}]}, "Records[0] has no kinesis.sequenceNumber"),
        ({"Records": ["x"]}, "Records[0] has no kinesis.sequenceNumber"),
        (
            {"Records": [{"kinesis": {"sequenceNumber": "49x"}}]},
            "Records[0] has kinesis.sequenceNumber '49x', not a Kinesis sequence number",
        ),
    ],
    ids=repr,
)
def test_an_event_no_mapping_sends_fails_with_one_clear_logged_error(
    handler_module: ModuleType, monkeypatch: pytest.MonkeyPatch, event: Any, reason: str
) -> None:
    # Given an event Lambda's Kinesis mapping never sends (it cannot be answered record by record)
    errors: list[str] = []
    monkeypatch.setattr(logger, "error", lambda message, **_: errors.append(message))
    # When the handler gets it, Then it fails with the reason, not a traceback from inside Powertools
    with pytest.raises(NotAStreamEvent) as caught:
        handler_module.handler(event, FakeLambdaContext())
    assert reason in str(caught.value)
    assert errors == ["not a Kinesis stream event; nothing was ingested"]
