"""Builders for Lambda DynamoDB stream events shaped like the real ones, and a fake Lambda context.

The shape is what Lambda's DynamoDB event source mapping delivers (not what
boto3's ``get_records`` returns): ``ApproximateCreationDateTime`` is epoch
seconds as a number, keys and images are DynamoDB JSON, ``SizeBytes`` is the
size of the stream record, and a TTL deletion carries ``userIdentity``
``{"type": "Service", "principalId": "dynamodb.amazonaws.com"}``.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from keydesign import Layout, Reading, ShardMap, item_size

REGION = "eu-west-1"
ACCOUNT = "123456789012"
TABLE = "readings"
STREAM_LABEL = "2026-11-22T06:00:00.000"
_sequence = itertools.count(100_000_000_000_000_000_000)


def stream_arn(table: str = TABLE) -> str:
    return f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}/stream/{STREAM_LABEL}"


def next_sequence() -> str:
    """Stream sequence numbers are decimal strings that grow along a shard."""
    return str(next(_sequence))


def ddb_json(value: object) -> dict[str, Any]:
    """A plain value in DynamoDB JSON, as stream records carry keys and images."""
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        return {"N": repr(value) if isinstance(value, float) else str(value)}
    if isinstance(value, Mapping):
        return {"M": {str(k): ddb_json(v) for k, v in value.items()}}
    if isinstance(value, list):
        return {"L": [ddb_json(v) for v in value]}
    raise TypeError(type(value).__name__)


def stream_record(
    pk: str,
    sk: str,
    *,
    approx_s: float,
    event_name: str = "INSERT",
    size_bytes: int | None = None,
    sequence: str | None = None,
    table: str = TABLE,
    ttl: bool = False,
    new_image: Mapping[str, object] | None = None,
    keys: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One record of a KEYS_ONLY stream (or NEW_IMAGE when ``new_image`` is given)."""
    key_json = dict(keys) if keys is not None else {"pk": {"S": pk}, "sk": {"S": sk}}
    body: dict[str, Any] = {
        "ApproximateCreationDateTime": float(int(approx_s)),
        "Keys": key_json,
        "SequenceNumber": sequence or next_sequence(),
        # KEYS_ONLY: the record holds the keys, so that is its size.
        "SizeBytes": size_bytes if size_bytes is not None else item_size({"pk": pk, "sk": sk}),
        "StreamViewType": "KEYS_ONLY",
    }
    if new_image is not None:
        body["NewImage"] = {k: ddb_json(v) for k, v in new_image.items()}
        body["StreamViewType"] = "NEW_IMAGE"
        if size_bytes is None:
            body["SizeBytes"] = item_size(dict(new_image)) + item_size({"pk": pk, "sk": sk})
    record: dict[str, Any] = {
        "eventID": hashlib.md5(body["SequenceNumber"].encode(), usedforsecurity=False).hexdigest(),
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": REGION,
        "dynamodb": body,
        "eventSourceARN": stream_arn(table),
    }
    if ttl:
        record["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return record


def item_record(
    item: Mapping[str, object], *, approx_s: float, event_name: str = "INSERT", **kw: Any
) -> dict[str, Any]:
    """The stream record of writing (or deleting) ``item`` (a block's ``Block.item()``)."""
    return stream_record(str(item["pk"]), str(item["sk"]), approx_s=approx_s, event_name=event_name, **kw)


def block_keys(
    layout: Layout, shard_map: ShardMap, entity: str, ts_ms: int, *, units: int = 1, event_id: str | None = None
) -> tuple[str, str]:
    """The keys of a block holding one reading of ``entity`` at ``ts_ms``, as ingest would key it
    with ``shard_map``, its sort key saying it was billed ``units`` write units (a block of many
    readings, as far as the stream can tell)."""
    reading = Reading(entity, event_id or f"{entity}-{ts_ms}", ts_ms, {"v": 1.0})
    (block,) = layout.pack([(reading, 1)], shard_map)
    return block.key.pk, f"{block.key.sk.rpartition('#')[0]}#{units}"


def block_record(
    layout: Layout,
    shard_map: ShardMap,
    entity: str,
    ts_ms: int,
    *,
    units: int = 1,
    event_id: str | None = None,
    approx_s: float | None = None,
    **kw: Any,
) -> dict[str, Any]:
    """The stream record of writing (or deleting) such a block, written at ``approx_s`` (default: ``ts_ms``)."""
    pk, sk = block_keys(layout, shard_map, entity, ts_ms, units=units, event_id=event_id)
    return stream_record(pk, sk, approx_s=ts_ms / 1000 if approx_s is None else approx_s, **kw)


def stream_event(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return {"Records": list(records)}


def failed_sequences(response: Mapping[str, Any]) -> list[str]:
    return [str(f["itemIdentifier"]) for f in response.get("batchItemFailures", [])]
