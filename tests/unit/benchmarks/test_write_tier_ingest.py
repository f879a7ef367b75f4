"""The write tier's real-path benchmark: every reading through the real Ingestor, each decoded back once, and
`tsctl plan`'s figures (keydesign.capacity) within a few percent of what it measures."""

from __future__ import annotations

import pytest

from benchmarks import write_tier_ingest as wti
from benchmarks.blocks import SEED_003, SPARSE, Fleet
from keydesign.writetier import WriteTier


@pytest.mark.parametrize("fleet", [SPARSE, SEED_003])
def test_plan_prints_what_the_real_ingestor_writes(fleet: Fleet) -> None:
    figures = wti.run_fleet(fleet, quick=True)
    # every reading went to a group item (the run asserts each is decoded back once)
    assert figures["readings_in_group_items"] == figures["readings"] > 1_000
    assert figures["wu_per_reading blocks"] == figures["wu_per_reading dense marks"] == 0
    # tsctl plan's group items per reading are the measured ones, within 10%
    measured = figures["wu_per_reading group items"]
    assert figures["plan wu_per_reading group items"] == pytest.approx(measured, rel=0.1)
    assert figures["plan readings_per_group_item"] == pytest.approx(figures["readings_per_group_item"], rel=0.1)
    assert figures["plan billed_bytes group items, per reading in them"] == pytest.approx(
        figures["billed_bytes group items, per reading in them"], rel=0.1
    )


def test_a_group_lives_on_one_stream_shard() -> None:
    tier = WriteTier(32)
    shards = {
        wti.stream_shard(tier.partition_key(SPARSE.sensor(i)))
        for i in range(SPARSE.sensors)
        if tier.group_of(SPARSE.sensor(i)) == 3
    }
    assert len(shards) == 1
