"""Builders for Lambda Kinesis events shaped like the real ones, and a fake Lambda context.

Shared by the unit and integration tests of the ingest function.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from typing import Any

from ingest.kinesis_records import StreamRecord, parse_records

REGION = "eu-west-1"
STREAM_ARN = f"arn:aws:kinesis:{REGION}:123456789012:stream/readings"
SHARD_ID = "shardId-000000000003"
# Real sequence numbers are 56-digit decimals that grow along a shard.
_BASE_SEQUENCE = 49_654_218_476_232_045_811_574_011_298_011_519_327_409_148_734_259_150_898
_SEQUENCE_STEP = 7_919_000_000_000_000_000
ARRIVAL_S = 1_795_000_000.0


def sequence_number(position: int) -> str:
    return str(_BASE_SEQUENCE + position * _SEQUENCE_STEP)


def kinesis_record(
    data: bytes,
    position: int,
    *,
    partition_key: str = "sensor-0001",
    shard_id: str = SHARD_ID,
    arrival_s: float = ARRIVAL_S,
) -> dict[str, Any]:
    """One event record as Lambda's Kinesis event source mapping builds it."""
    seq = sequence_number(position)
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": partition_key,
            "sequenceNumber": seq,
            "data": base64.b64encode(data).decode("ascii"),
            "approximateArrivalTimestamp": arrival_s + position / 1000,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{shard_id}:{seq}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/ingest",
        "awsRegion": REGION,
        "eventSourceARN": STREAM_ARN,
    }


def kinesis_event(payloads: Sequence[bytes], *, first_position: int = 0) -> dict[str, Any]:
    return {"Records": [kinesis_record(p, first_position + i) for i, p in enumerate(payloads)]}


def parsed(event: dict[str, Any] | list[dict[str, Any]]) -> list[StreamRecord]:
    """The typed records the handler hands the logic, from an event or a list of its records."""
    return parse_records(event if isinstance(event, dict) else {"Records": event})


def batch(payloads: Sequence[bytes], *, first_position: int = 0) -> list[StreamRecord]:
    """One record per payload, parsed as the handler parses them."""
    return parsed(kinesis_event(payloads, first_position=first_position))


def as_json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def reading(entity: str, ts_ms: int, event_id: str | None = None, **measures: float) -> dict[str, Any]:
    out: dict[str, Any] = {"entity_id": entity, "timestamp": ts_ms, "measures": measures or {"temp": 21.5}}
    if event_id is not None:
        out["event_id"] = event_id
    return out


def failed_sequences(response: dict[str, Any]) -> list[str]:
    return [f["itemIdentifier"] for f in response["batchItemFailures"]]


def readings_in(payloads: Iterable[bytes]) -> int:
    """How many reading candidates the JSON payloads carry (an object is one, an array its length)."""
    total = 0
    for payload in payloads:
        try:
            value = json.loads(payload)
        except ValueError:
            total += 1
            continue
        total += len(value) if isinstance(value, list) else 1
    return total
