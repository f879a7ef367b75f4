"""Exports as DynamoDB writes them (docs/archives.md), built by hand from blocks that ``Layout.pack`` makes.

Shared by the unit tests of ``tsctl archive`` and the end-to-end test, which adds these
manifests to the data file moto's export writes (moto writes no manifest).
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from keydesign import Layout, Reading, ShardMap

EXPORT_ID = "01764000000000-1a2b3c4d"
PREFIX = "dynamodb-exports/timeseries-readings-2026-11-22-06"
T0 = 1_795_327_200_000  # 2026-11-22T06:00:00Z
HYBRID = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="timeseries-readings")


def reading(entity: str, ts_ms: int, value: float, event_id: str | None = None, **dims: str) -> Reading:
    raw: dict[str, Any] = {"entity_id": entity, "timestamp": ts_ms, "measures": {"temp": value}}
    if event_id is not None:
        raw["event_id"] = event_id
    if dims:
        raw["dimensions"] = dims
    return Reading.parse(raw)


def block_items(
    entries: Sequence[tuple[Reading, int]], *, layout: Layout = HYBRID, shard_map: ShardMap | None = None
) -> list[dict[str, Any]]:
    """The items ingest would write for one batch of (reading, version), as DynamoDB JSON."""
    chosen = shard_map or ShardMap.initial(layout.bucket, 8)
    # A seeded draw for the random layout's partitions: the same items on every run.
    blocks = layout.pack(entries, chosen, retention_ms=86_400_000, rng=random.Random(len(entries)))
    return [dynamodb_json(block.item()) for block in blocks]


def dynamodb_json(item: dict[str, object]) -> dict[str, Any]:
    """A block item in DynamoDB JSON, as an export holds it (Binary as base64)."""
    out: dict[str, Any] = {}
    for name, value in item.items():
        if isinstance(value, bytes):
            out[name] = {"B": base64.b64encode(value).decode()}
        elif isinstance(value, int):
            out[name] = {"N": str(value)}
        else:
            out[name] = {"S": str(value)}
    return out


def data_file(items: Sequence[dict[str, Any]]) -> bytes:
    """A data file: gzip of one ``{"Item": ...}`` per line."""
    return gzip.compress("".join(json.dumps({"Item": item}) + "\n" for item in items).encode())


def manifests(data: Sequence[tuple[str, int]], *, prefix: str = PREFIX, export_id: str = EXPORT_ID) -> dict[str, bytes]:
    """``manifest-summary.json`` and ``manifest-files.json`` (by the bucket's key) for data files given
    as (the bucket's key, item count), as DynamoDB writes them."""
    folder = f"{prefix}/AWSDynamoDB/{export_id}/"
    files = "".join(
        json.dumps({"itemCount": n, "md5Checksum": "", "etag": "", "dataFileS3Key": key}) + "\n" for key, n in data
    )
    summary = {
        "version": "2020-06-30",
        "exportArn": f"arn:aws:dynamodb:eu-west-1:123456789012:table/t/export/{export_id}",
        "startTime": "2026-11-23T08:00:00.000Z",
        "endTime": "2026-11-23T08:05:00.000Z",
        "tableArn": "arn:aws:dynamodb:eu-west-1:123456789012:table/t",
        "tableId": "12345a12-abcd-123a-ab12-1234abc12345",
        "exportTime": "2026-11-23T08:00:00.000Z",
        "s3Bucket": "exports",
        "s3Prefix": prefix,
        "s3SseAlgorithm": "AES256",
        "s3SseKmsKeyId": None,
        "manifestFilesS3Key": folder + "manifest-files.json",
        "billedSizeBytes": 0,
        "itemCount": sum(n for _, n in data),
        "outputFormat": "DYNAMODB_JSON",
    }
    return {
        folder + "manifest-summary.json": json.dumps(summary).encode(),
        folder + "manifest-files.json": files.encode(),
    }


def write_export(root: Path, files: Sequence[Sequence[dict[str, Any]]], *, export_id: str = EXPORT_ID) -> Path:
    """An export of ``files`` (each a list of items) as ``aws s3 sync s3://bucket/<PREFIX>/ root`` leaves it."""
    folder = f"{PREFIX}/AWSDynamoDB/{export_id}/"
    written: list[tuple[str, int]] = []
    for n, items in enumerate(files):
        key = f"{folder}data/file{n:03d}.json.gz"
        _put(root, key, data_file(items))
        written.append((key, len(items)))
    _put(root, folder + "_started", b"")
    for key, body in manifests(written, export_id=export_id).items():
        _put(root, key, body)
    return root


def _put(root: Path, key: str, body: bytes) -> None:
    path = root / key.removeprefix(PREFIX + "/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)


def folder(root: Path, export_id: str = EXPORT_ID) -> Path:
    return root / "AWSDynamoDB" / export_id
