"""The soak: the whole local system as ``tsctl serve`` runs it, fed one reading per Kinesis record through
plain PutRecords, in real time, from thousands of entities; every acknowledged reading is then found
through the query API (each entity's readings), once.

It runs for minutes, so ``make test`` skips it: ``make soak`` runs it (``SOAK=1``). It prints what it
measured (how fast ingest kept up; docs/local.md quotes a run) and writes it to ``out/soak/report.json``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from client.api_client import QueryClient
from infra.config import Context, load_cdk_json_context
from keydesign import format_ts
from local_runtime import LocalOptions, LocalSystem
from local_runtime.event_source_mapping import EventSourceMapping
from producer.packing import PackedRecord
from producer.publisher import Publisher, kinesis_client

from .conftest import REPO_ROOT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("SOAK") != "1", reason="the soak runs for minutes: make soak"),
]

ENTITIES = 10_000
RATE = 500  # records (= readings) a second: each entity sends one every ENTITIES / RATE = 20 s
READINGS = 100_000  # so the publishing lasts READINGS / RATE = 200 s
TICK_S = 0.25  # a PutRecords call per tick per publishing thread
PUBLISHERS = 4  # threads calling PutRecords at once, as several producers do
CATCH_UP_S = 900.0  # how long ingest may take to catch up once publishing stops (a generous deadline)
REPORT = REPO_ROOT / "out" / "soak" / "report.json"


def reading(n: int, timestamp_ms: int) -> dict[str, Any]:
    return {
        "entity_id": f"soak-{n % ENTITIES:05d}",
        "event_id": f"soak-{n}",
        "timestamp": timestamp_ms,
        "measures": {"temp": round(15 + (n % 200) / 10, 1), "n": n},
    }


def one_reading_record(item: dict[str, Any]) -> PackedRecord:
    data = json.dumps([item], separators=(",", ":")).encode()
    return PackedRecord(partition_key=item["entity_id"], data=data, readings=1)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSystem]:
    # What `tsctl serve` starts (cdk.json's configuration, every function) but the rollups: their run each
    # minute over 10,000 entities holds the handlers' one invocation gate for minutes (docs/local.md).
    config = Context.parse(load_cdk_json_context(REPO_ROOT / "cdk.json"))
    log = tmp_path_factory.mktemp("soak") / "functions.log"
    with LocalSystem(config, LocalOptions(function_log=log)) as running:
        yield running


def ingest(system: LocalSystem) -> EventSourceMapping:
    mapping = system.mappings.named("ingest")
    assert mapping is not None
    return mapping


def publish_in_real_time(system: LocalSystem) -> tuple[dict[str, dict[str, Any]], float, float]:
    """Publish READINGS one-reading records at RATE a second; the readings Kinesis acknowledged, by event
    id, and when publishing began and ended (monotonic)."""
    endpoints = system.endpoints
    api = kinesis_client(endpoint_url=endpoints.endpoint_url, region=endpoints.region)
    publishers = [Publisher(api, endpoints.stream_name) for _ in range(PUBLISHERS)]
    acknowledged: dict[str, dict[str, Any]] = {}
    per_tick = int(RATE * TICK_S)
    started = time.monotonic()
    calls: list[tuple[list[dict[str, Any]], Future[list[PackedRecord]]]] = []
    with ThreadPoolExecutor(PUBLISHERS) as pool:
        for tick, first in enumerate(range(0, READINGS, per_tick)):
            time.sleep(max(0.0, started + tick * TICK_S - time.monotonic()))  # real time: the producers' pace
            now_ms = int(time.time() * 1000)
            items = [reading(n, now_ms) for n in range(first, min(first + per_tick, READINGS))]
            share = -(-len(items) // PUBLISHERS)
            for p, publisher in enumerate(publishers):
                part = items[p * share : (p + 1) * share]
                if part:
                    calls.append((part, pool.submit(publisher.send, [one_reading_record(i) for i in part])))
        for part, call in calls:
            refused = {json.loads(r.data)[0]["event_id"] for r in call.result()}
            acknowledged.update((i["event_id"], i) for i in part if i["event_id"] not in refused)
    return acknowledged, started, time.monotonic()


@pytest.mark.timeout(3600)  # minutes of publishing, catching up and reading back: past the suite's 600 s
def test_every_acknowledged_reading_is_read_back_through_the_api(system: LocalSystem) -> None:
    # Given the system `tsctl serve` runs; when 100,000 one-reading records are published in real time
    acknowledged, started, published = publish_in_real_time(system)
    behind_at_end = len(acknowledged) - ingest(system).snapshot()["records_succeeded"]
    # Then ingest catches up (waited for as a condition, with a deadline), and the rest of the system after it
    assert ingest(system).wait_until_caught_up(CATCH_UP_S), f"ingest did not catch up within {CATCH_UP_S:.0f} s"
    caught_up = time.monotonic()
    assert system.wait_until_idle(CATCH_UP_S), f"the system was not idle within {CATCH_UP_S:.0f} s"
    stats = ingest(system).snapshot()

    # and every acknowledged reading is found through the API, once, as published
    api = QueryClient(system.endpoints.api_url or "")
    low = min(int(r["timestamp"]) for r in acknowledged.values())
    high = max(int(r["timestamp"]) for r in acknowledged.values()) + 1
    found: dict[str, Any] = {}
    duplicates = 0
    read_from = time.monotonic()
    entities = sorted({r["entity_id"] for r in acknowledged.values()})
    with ThreadPoolExecutor(PUBLISHERS) as pool:  # each entity's readings, as a dashboard reads them
        for answer in pool.map(lambda e: list(api.readings(e, format_ts(low), format_ts(high), limit=1000)), entities):
            for r in answer:
                duplicates += r.event_id in found
                found[r.event_id] = r
    read_s = time.monotonic() - read_from
    missing = sorted(set(acknowledged) - set(found))
    wrong = [
        e
        for e, r in found.items()
        if e in acknowledged
        and (r.entity_id, r.measures) != (acknowledged[e]["entity_id"], acknowledged[e]["measures"])
    ]
    report = {
        "readings_published": READINGS,
        "readings_acknowledged": len(acknowledged),
        "entities": ENTITIES,
        "publish_rate_per_s": RATE,
        "publishing_s": round(published - started, 1),
        "ingest_behind_when_publishing_stopped": behind_at_end,
        "catch_up_after_publishing_s": round(caught_up - published, 1),
        "ingest_rate_per_s": round(len(acknowledged) / (caught_up - started), 1),
        "found_through_api": len(found),
        "missing": len(missing),
        "missing_examples": missing[:10],
        "duplicates": duplicates,
        "wrong": len(wrong),
        "api_read_s": round(read_s, 1),
        "cpus": os.cpu_count(),
        "ingest_mapping": stats,
    }
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(report, indent=2) + "\n")
    # The console: while the system runs, stdout is the functions' log.
    system.console.write(json.dumps({k: v for k, v in report.items() if k != "ingest_mapping"}, indent=2) + "\n")
    assert len(acknowledged) == READINGS
    assert (missing, duplicates, wrong) == ([], 0, [])
    assert len(found) == READINGS
    assert stats["records_skipped"] == 0
