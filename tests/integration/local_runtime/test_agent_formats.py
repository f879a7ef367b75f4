"""Each agent's format end to end on one running local system: ``tsctl publish --record-format`` writes what
Telegraf, the OpenTelemetry Collector or an IoT Core topic rule would put into the stream, ingest stores it, and
``GET /entities/{id}/readings`` answers what the agent sent (as its mapping names it); a bad reading of each
format reaches the rejects queue with its reason.

One system serves the module; every format publishes its own entities, so the cases do not depend on each other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from client import QueryClient
from infra.config import IotTopicRule
from keydesign import format_ts
from local_runtime import LocalSystem
from producer.formats import AgentPacker
from tests.integration.local_runtime.conftest import WAIT_S, ingest_only, local_config, queue_messages
from tsctl.cli import main

pytestmark = pytest.mark.integration

IOT_RULE = '{"topic_filter": "fleet/+/telemetry", "entity_level": 2}'
#: format -> (tsctl's options, the field its bad reading is refused on, the reason's words)
CASES: dict[str, tuple[list[str], str, str]] = {
    "influx": (["--measurement", "env"], "entity_id", "no tag names the entity"),
    "telegraf_json": (["--measurement", "env"], "entity_id", "no tag names the entity"),
    "otlp_proto": (["--compression", "gzip"], "entity_id", "no attribute names the entity"),
    "otlp_json": (["--compression", "none"], "entity_id", "no attribute names the entity"),
    "iot": (["--iot-topic-rule", IOT_RULE], "timestamp", "is required"),
}


@dataclass(frozen=True)
class Published:
    system: LocalSystem
    sent: dict[str, list[dict[str, Any]]]
    rejects: list[dict[str, Any]]


def _readings(fmt: str, start_ms: int) -> list[dict[str, Any]]:
    # Whole seconds: Telegraf's JSON carries seconds (json_timestamp_units' default, and ingest's).
    return [
        {
            "entity_id": f"{fmt}-dev-{n % 2}",
            "timestamp": start_ms + 1000 * n,
            "measures": {"temp": 20 + n / 4, "count": n},
            "dimensions": {"site": "plant 7", "line": "a,b=c"},
        }
        for n in range(6)
    ]


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    folder = tmp_path_factory.mktemp("agents")
    start = (int(time.time() * 1000) - 120_000) // 1000 * 1000
    with LocalSystem(local_config(), ingest_only(query_api=True, function_log=folder / "functions.log")) as system:
        endpoints = system.endpoints
        sent: dict[str, list[dict[str, Any]]] = {}
        for fmt, (options, _, _) in CASES.items():
            sent[fmt] = _readings(fmt, start)
            # the bad one: no entity for the agents' tags (from IoT Core: a device's message without a time)
            bad: dict[str, Any] = {"measures": {f"bad_{fmt}": 1}}
            bad |= {"entity_id": f"{fmt}-bad"} if fmt == "iot" else {"timestamp": start}
            path = folder / f"{fmt}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in [*sent[fmt], bad]))
            argv = ["publish", "--stream", endpoints.stream_name, "--endpoint-url", endpoints.endpoint_url]
            argv += ["--region", endpoints.region, "--input", str(path), "--no-validate", "--no-progress"]
            assert main([*argv, "--record-format", fmt, *options]) == 0
        assert system.wait_until_idle(WAIT_S)
        yield Published(system, sent, queue_messages(system, endpoints.rejects_queue_url))


@pytest.mark.parametrize("fmt", list(CASES))
def test_what_the_agent_sent_is_what_the_api_answers(published: Published, fmt: str) -> None:
    options = CASES[fmt][0]
    writer = AgentPacker(
        fmt,
        measurement="env",
        compression=options[1] if options[0] == "--compression" else "none",
        iot_rule=IotTopicRule("fleet/+/telemetry", 2),
    )
    client = QueryClient(str(published.system.endpoints.api_url))
    sent = published.sent[fmt]
    low, high = sent[0]["timestamp"], sent[-1]["timestamp"] + 1
    for entity in sorted({r["entity_id"] for r in sent}):
        expected = sorted(
            (format_ts(r["timestamp"]), json.dumps(r["measures"], sort_keys=True), r["dimensions"])
            for reading in sent
            if reading["entity_id"] == entity
            for r in writer.stored(reading)
        )
        got = sorted(
            (r.timestamp, json.dumps(r.measures, sort_keys=True), r.dimensions)
            for r in client.readings(entity, low, high)
        )
        assert got == expected, entity
    # OTLP: a gauge per measure, so a data point per reading per measure; the others, a reading a reading
    assert sum(len(writer.stored(r)) for r in sent) == (12 if fmt.startswith("otlp") else 6)


@pytest.mark.parametrize("fmt", list(CASES))
def test_the_bad_reading_of_each_format_is_rejected_with_its_reason(published: Published, fmt: str) -> None:
    _, field, words = CASES[fmt]
    mine = [r for r in published.rejects if _format_of(r) == fmt]
    assert [(r["field"], words in r["reason"]) for r in mine] == [(field, True)], mine


def _format_of(reject: dict[str, Any]) -> str:
    """Which format's record a reject came from: its bad reading's measure, ``bad_<format>``, is in its payload
    (or, for an OTLP data point, in the reason naming the metric)."""
    text = f"{reject.get('payload')} {reject['reason']}"
    return next((fmt for fmt in CASES if f"bad_{fmt}" in text), "?")


def test_rejects_are_those_five_and_nothing_else(published: Published) -> None:
    assert sorted(_format_of(r) for r in published.rejects) == sorted(CASES)


def test_nothing_was_handed_back(published: Published) -> None:
    system = published.system
    assert queue_messages(system, system.endpoints.ingest_failures_queue_url) == []
