"""explain's read-unit estimate assumes a reading's share of a block, which these sizes back."""

from __future__ import annotations

import random

import pytest

from doubles.memory_dynamo import SEQUENCE_BASE, MemoryReader
from keydesign import Layout, Reading, ShardMap, read_units
from query.logic import NOMINAL_READING_BYTES
from query.models import Explanation
from query.params import PageArgs, ReadArgs, TimeRange
from tests.unit.query.apigw import memory_service

T0 = 1_795_000_000_000
LAYOUT = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
SHARD_MAP = ShardMap.initial(LAYOUT.bucket, 100)


def bytes_per_reading(per_block: int) -> float:
    """Stored bytes per reading of a sensor with three measures and a site, ``per_block`` to a block."""
    rng = random.Random(per_block)
    readings = [
        Reading(
            "sensor-alpha-001",
            f"evt-{n:08d}",
            T0 + n * (9_000 // per_block),
            {
                "temp": round(20 + 5 * rng.random(), 2),
                "rh": rng.randrange(30, 60),
                "battery": round(3 + rng.random() / 5, 3),
            },
            {"site": "plant-7"},
        )
        for n in range(per_block)
    ]
    entries = [(r, SEQUENCE_BASE + n) for n, r in enumerate(readings)]  # Kinesis sequence numbers: 56 digits
    blocks = LAYOUT.pack(entries, SHARD_MAP, retention_ms=30 * 86_400_000)
    assert len(blocks) == 1
    return blocks[0].size / per_block


@pytest.mark.parametrize(("per_block", "low", "high"), [(1, 190, 220), (10, 25, NOMINAL_READING_BYTES), (1000, 5, 10)])
def test_a_readings_share_of_its_block(per_block: int, low: float, high: float) -> None:
    assert low <= bytes_per_reading(per_block) <= high


def test_the_estimate_is_the_minimum_plus_the_readings_at_the_nominal_share() -> None:
    service = memory_service(LAYOUT, SHARD_MAP, MemoryReader(), now_ms=T0)

    plan = service.entity_readings(
        "sensor-alpha-001", PageArgs(TimeRange(T0 - 86_400_000, T0), 1000), ReadArgs(explain=True)
    )

    assert isinstance(plan, Explanation)
    assert plan.nominal_item_bytes == NOMINAL_READING_BYTES
    assert plan.minimum_read_units == 0.5 * plan.partition_count == 12.5  # 25 hourly buckets
    assert plan.estimated_read_units == 12.5 + read_units(1000 * NOMINAL_READING_BYTES)
