"""Rollups on the local stack: ingest marks, the rollup function (run as it would a minute later) recomputes,
and the API answers from them with the figures the raw readings give.

Its sensors are dense (a hundred readings each in a batch: blocks, marks): their hours are the rollup
function's. Totals are served once compaction's watermark has passed them too (docs/rollups.md); the
test stores that watermark as compaction would leave it after the hour (it would compact nothing here:
no reading is in the write tier) rather than run compaction on a clock an hour ahead."""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from adapters.batch_writer import serialize_item
from infra.config import LambdaFunction
from keydesign import format_ts
from keydesign.writetier import SLICE_MS, slice_start, state_key
from tests.integration.local_runtime.conftest import ingest_only, local_config, publish_readings, readings, stored

pytestmark = pytest.mark.integration
MINUTE = 60_000


def _get(base_url: str, path: str, **params: str) -> dict[str, Any]:
    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", f"{parts.path}{path}?{urlencode(params)}")
        response = connection.getresponse()
        body = json.loads(response.read())
        assert response.status == 200, body
        return body
    finally:
        connection.close()


def test_the_api_answers_from_rollups_with_the_raw_figures(running: Any) -> None:
    # Given the local stack with rollups, its rollup function's clock 160 s ahead (settle 10 s), so its
    # watermark passes the window's end (at most 90 s from now) wherever in the minute now falls
    options = ingest_only(
        query_api=True,
        rollups=True,
        rollup_ahead_s=160.0,
        rollup_every_s=3600.0,
        environment={LambdaFunction.ROLLUP: {"ROLLUP_SETTLE": "10s"}},
    )
    config = local_config()
    system = running(config, options)
    now = int(time.time() * 1000)
    # the end of the hour holding the window's end (below: at most 90 s from now)
    state = {**state_key(config.layout().table_prefix), "through": slice_start(now + 3 * MINUTE) + SLICE_MS}
    system.client("dynamodb").put_item(TableName=config.control_table, Item=serialize_item(state))
    items = readings(400, entities=4, start_ms=now - 90_000)
    publish_readings(system, items)
    deadline = time.monotonic() + 60
    while len(stored(system)) < len(items) and time.monotonic() < deadline:
        time.sleep(0.2)
    # When the rollup function runs
    schedule = system.schedule_of(LambdaFunction.ROLLUP)
    assert schedule is not None
    summary = schedule.run_once()
    assert summary is not None and summary["marks"] >= 4
    # Then per entity, 1-minute rollups answer what the raw readings answer
    start = (now - 90_000) - (now - 90_000) % MINUTE
    window = {"from": format_ts(start), "to": format_ts(start + 3 * MINUTE)}
    api = system.endpoints.api_url
    rolled = _get(api, "/entities/sensor-0001/aggregates", **window, interval="1m")
    raw = _get(api, "/entities/sensor-0001/aggregates", **window, interval="30s")
    assert rolled["source"] == "rollups" and raw["source"] == "raw"
    assert rolled["readings"] == raw["readings"] == 100
    sums = {}
    for interval in raw["intervals"]:
        minute = interval["start"][:17] + "00.000Z"
        sums[minute] = sums.get(minute, 0) + interval["measures"]["temp"]["sum"]
    assert {i["start"]: round(i["measures"]["temp"]["sum"], 6) for i in rolled["intervals"]} == {
        k: round(v, 6) for k, v in sums.items()
    }
    # And across every entity, seed 003's question reads the totals only
    total = _get(api, "/aggregates", **window, interval="1m")
    assert total["readings"] == len(items) and total["cost"]["items_read"] <= 3
