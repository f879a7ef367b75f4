"""The ingest handler with the write tier on (WRITE_TIER_GROUPS), end to end on moto: sparse readings of the
current hour land in group items, a dense entity's in its blocks after its dense mark, each reading once."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from keydesign.blocks import decode_group
from keydesign.writetier import (
    DENSE_MARK_PREFIX,
    GROUP_PK_PREFIX,
    SLICE_MS,
    WriteTier,
    in_write_tier,
    slice_start,
)
from tests.integration.ingest.conftest import Aws, now_ms
from tests.integration.ingest.helpers import invoke
from tests.integration.mocked_aws import fresh_handler
from tests.unit.ingest.kinesis_events import as_json, kinesis_event, reading
from tests.unit.ingest.stored import stored_readings

pytestmark = pytest.mark.integration

TIER = WriteTier(8)


@pytest.fixture
def tiered_handler(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.setenv("WRITE_TIER_GROUPS", str(TIER.groups))
    with fresh_handler("ingest.handler", "INGESTOR") as module:
        yield module


def test_sparse_readings_land_in_group_items_and_a_dense_entitys_in_blocks_after_its_mark(
    aws: Aws, tiered_handler: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given 40 devices with a reading each and a sensor with 12, all of the last few seconds
    start = now_ms()
    sparse = [reading(f"device-{i:03d}", start - 3_000 + i, f"d{i}") for i in range(40)]
    dense = [reading("hot-1", start - 3_000 + 100 * i, f"h{i}") for i in range(12)]
    before = now_ms()
    result = invoke(
        tiered_handler, kinesis_event([as_json(sparse[:20] + dense[:6]), as_json(sparse[20:] + dense[6:])]), capsys
    )
    after = now_ms()
    # Then every record is settled, and every reading stored once
    assert result.failed == [] and result.outcome.written == 52
    items = aws.table_items()
    groups = [i for i in items if i["pk"]["S"].startswith(GROUP_PK_PREFIX) and "b" in i]
    marks = [(i["pk"]["S"], i["sk"]["S"]) for i in items if i["sk"]["S"].startswith(DENSE_MARK_PREFIX)]
    in_groups = [r for item in groups for r in decode_group(item["b"]["B"])[1]]
    in_blocks = stored_readings([i for i in items if not i["pk"]["S"].startswith(GROUP_PK_PREFIX)])
    assert sorted(r.event_id for r in in_groups + in_blocks) == sorted(
        [f"d{i}" for i in range(40)] + [f"h{i}" for i in range(12)]
    )
    # the dense sensor's readings are in its blocks; a device's in a group item, unless its re-pack slice
    # had ended a grace before the invocation started (then late: a block of its own), whenever in
    # [before, after] it started (the product's rule: a run just past a slice's end is within its grace)
    assert {r.entity_id for r in in_groups} <= {f"device-{i:03d}" for i in range(40)}
    assert {r.event_id for r in in_blocks if r.entity_id == "hot-1"} == {f"h{i}" for i in range(12)}
    for r in in_blocks:
        if r.entity_id != "hot-1":
            assert not in_write_tier(r.ts_ms, after)
    for r in in_groups:
        assert in_write_tier(r.ts_ms, before)
    for item in groups:
        (first, *_) = decode_group(item["b"]["B"])[1]
        assert item["pk"]["S"] == TIER.group_pk(TIER.group_of(first.entity_id), first.ts_ms)
    # the dense sensor (and a device late past its slice only) marked its group's partition of each hour
    # its blocks hold, still in the write tier
    expected = {
        (TIER.group_pk(TIER.group_of(r.entity_id), r.ts_ms), f"!dense#{r.entity_id}")
        for r in in_blocks
        if slice_start(r.ts_ms) + SLICE_MS > after
    }
    assert sorted(marks) == sorted(expected)
    if in_groups:
        assert result.metric("GroupItemsWritten") == len(groups)
        assert result.metric("ReadingsInWriteTier") == len(in_groups)
