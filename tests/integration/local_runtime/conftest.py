"""Helpers for the local runtime's integration tests: a configuration, publishing, reading back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.config import Context, load_cdk_json_context
from keydesign import Reading
from local_runtime import LocalOptions, LocalSystem
from producer.packing import Packer
from producer.publisher import Publisher, PublishSummary, kinesis_client, publish
from tests.integration.local_runtime import recordings
from tests.unit.ingest.stored import stored_readings

REPO_ROOT = Path(__file__).resolve().parents[3]
WAIT_S = 120.0

pytestmark = pytest.mark.integration


def local_config(**overrides: object) -> Context:
    """cdk.json's configuration, with a batching window of 0 (tests need no window), one readings
    table (the single-table path; a test that wants per-period tables says so) and ``overrides``."""
    context = {
        **load_cdk_json_context(REPO_ROOT / "cdk.json"),
        "ingest_batching_window_s": 0,
        "shards": 8,
        "table_period": None,
    }
    return Context.parse({**context, **overrides})


def ingest_only(**overrides: Any) -> LocalOptions:
    """Options that start ingest alone (no query API, hot-key detector or rotator), polling quickly."""
    return LocalOptions(
        **{"poll_interval_s": 0.05, "query_api": False, "hot_keys": False, "rotator": False, **overrides}
    )


@pytest.fixture
def clean_recordings() -> Iterator[None]:
    """What the recorder handlers saw (:mod:`.recordings`), empty before the test and after it."""
    recordings.clear()
    yield
    recordings.clear()


@pytest.fixture
def running() -> Iterator[Any]:
    """A factory: ``running(config, options)`` starts a system that is stopped after the test
    (by default with ingest alone: :func:`ingest_only`)."""
    started: list[LocalSystem] = []

    def start(config: Context | None = None, options: LocalOptions | None = None) -> LocalSystem:
        system = LocalSystem(config or local_config(), options or ingest_only())
        system.start()
        started.append(system)
        return system

    yield start
    for system in reversed(started):
        system.stop()


def readings(count: int, *, entities: int = 50, start_ms: int | None = None, prefix: str = "r") -> list[dict[str, Any]]:
    """``count`` readings a millisecond apart from ``start_ms``; by default from 30 s ago: in the past (a
    reading ahead of the query's clock is not yet ``latest``), and in a re-pack slice that ended less than
    the grace (a minute) before a batch that starts within 30 s, so in the write tier
    (``keydesign.writetier.in_write_tier``; a reading of a slice that ended longer before its batch started
    is late, a block of its own entity)."""
    now = int(time.time() * 1000)
    base = start_ms if start_ms is not None else now - 30_000
    return [
        {
            "entity_id": f"sensor-{n % entities:04d}",
            "event_id": f"{prefix}-{n}",
            "timestamp": base + n,
            "measures": {"temp": round(20 + (n % 70) / 10, 1)},
        }
        for n in range(count)
    ]


def publish_readings(
    system: LocalSystem, items: list[dict[str, Any]], *, validate: bool = True, record_bytes: int = 4096
) -> PublishSummary:
    endpoints = system.endpoints
    publisher = Publisher(
        kinesis_client(endpoint_url=endpoints.endpoint_url, region=endpoints.region), endpoints.stream_name
    )
    summary = publish([(0.0, r) for r in items], publisher, Packer(max_record_bytes=record_bytes), validate=validate)
    assert summary.readings_failed == 0
    return summary


def stored_items(system: LocalSystem) -> list[dict[str, Any]]:
    """Every item of the readings tables (blocks), as the client returns them."""
    dynamodb = system.client("dynamodb")
    items: list[dict[str, Any]] = []
    for table in system.readings_tables():
        for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            items.extend(page["Items"])
    return items


def stored(system: LocalSystem) -> list[Reading]:
    """Every reading the tables hold, once (the newest copy), as readers read them."""
    return stored_readings(stored_items(system), system.config.layout().kind)


def queue_messages(system: LocalSystem, queue_url: str) -> list[dict[str, Any]]:
    sqs = system.client("sqs")
    out: list[dict[str, Any]] = []
    for _ in range(10_000):
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=600).get(
            "Messages", []
        )
        if not messages:
            return out
        out.extend(json.loads(m["Body"]) for m in messages)
    raise AssertionError("the queue did not empty")


def event_ids(stored: list[Reading]) -> list[str]:
    return sorted(r.event_id for r in stored)
