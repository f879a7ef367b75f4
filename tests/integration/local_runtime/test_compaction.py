"""Compaction on the local stack: the compaction function, run by its schedule, compacts the write
tier's settled hours into blocks in the readings table. (Ingest's group items are written here with
the key design, as ingest writes them.)"""

from __future__ import annotations

import time
from typing import Any

import pytest

from adapters.batch_writer import serialize_item
from infra.config import LambdaFunction
from keydesign import Reading
from keydesign.blocks import decode_group, encode_group, keyed_item
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    MAX_COMPACTED_SPAN_MS,
    SLICE_MS,
    WriteTier,
    cluster_of,
    group_sk_stem,
    slice_start,
    state_key,
)
from tests.integration.local_runtime.conftest import ingest_only, local_config

pytestmark = pytest.mark.integration


def test_the_scheduled_compaction_function_compacts_settled_hours_of_the_write_tier(running: Any) -> None:
    # Given the local stack with the write tier (32 groups) and the compaction function on its schedule
    config = local_config()
    system = running(config, ingest_only(compaction=True, compaction_every_s=3600.0))
    layout, tier = config.layout(), WriteTier(config.write_tier_groups)
    dynamodb = system.client("dynamodb")
    # and a sparse fleet's group items of the hour two hours ago, its watermark just before that hour
    hour = slice_start(int(time.time() * 1000)) - 2 * SLICE_MS
    fleet = [
        Reading.parse({"entity_id": f"dev-{d:03d}", "timestamp": hour + d * 60_000 + n, "measures": {"v": d + n}})
        for d in range(50)
        for n in range(2)
    ]
    for reading in fleet:
        encoded = encode_group([reading], 1)
        pk = tier.group_pk(tier.group_of(reading.entity_id), hour)
        item, _, _ = keyed_item(pk, group_sk_stem(encoded), encoded.payload, None)
        dynamodb.put_item(TableName=layout.table_for(hour), Item=serialize_item(item))
    dynamodb.put_item(
        TableName=config.control_table, Item=serialize_item({**state_key(layout.table_prefix), "through": hour})
    )
    # When its schedule runs it
    schedule = system.schedule_of(LambdaFunction.COMPACTION)
    assert schedule is not None
    summary = schedule.run_once()
    # Then the hour is compacted: one block per cluster of a group's devices, each reading once
    clusters = {(tier.group_of(r.entity_id), cluster_of(r.entity_id)) for r in fleet}
    assert summary is not None and summary["hours"] >= 1 and summary["corrupt_items"] == 0
    assert summary["readings_compacted"] == len(fleet) and summary["compacted_blocks_written"] == len(clusters)
    found = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=layout.table_for(hour)):
        for item in page["Items"]:
            if item["pk"]["S"].startswith(CLUSTER_PK_PREFIX):
                found += decode_group(item["b"]["B"], span_limit_ms=MAX_COMPACTED_SPAN_MS)[1]
    assert sorted((r.entity_id, r.ts_ms) for r in found) == sorted((r.entity_id, r.ts_ms) for r in fleet)
