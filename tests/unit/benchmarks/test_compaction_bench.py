"""The compaction benchmark's quick run: the real pass compacts every reading of its step, and the
seed 003 hour is the step's time scaled by its groups; the re-pack, by the same function, writes the
settled slices' sub-items."""

from __future__ import annotations

import math
import random

from benchmarks.compaction import GROUPS, H, cluster_blocks, cluster_table, entity_blocks, run, to_result
from keydesign import Reading
from keydesign.blocks import decode_block, decode_group
from keydesign.writetier import CLUSTERS, MAX_COMPACTED_SPAN_MS, cluster_of


def test_the_quick_run_compacts_its_step_and_scales_it_to_seed_003s_hour() -> None:
    figures = run(quick=True)
    assert figures["groups"] == 4 and figures["readings"] > 4 * 100 * 13
    # cluster blocks: a group's 100 devices in its clusters (256), so fewer blocks than devices, each of a
    # cluster's hour: a write unit for one or a few devices' 14 readings each, under 0.07 a reading
    assert figures["compacted_blocks"] < 4 * 100
    assert figures["compacted_write_units_per_reading"] < 0.07
    assert figures["seed_003_hour_seconds"] == figures["step_seconds"] * GROUPS / 4
    # and the re-pack, by the same function, re-packs the 7 settled slices of 35 minutes: every group's
    # slice into a sub-item per sub-group that has readings (16 at most), each a write unit or more
    sub = figures["repack"]
    assert sub["slices"] == 7 and 0 < sub["readings_repacked"] < figures["readings"]
    assert 4 * 7 <= sub["sub_items"] <= 4 * 7 * 16
    assert sub["sub_item_write_units_per_reading"] >= sub["sub_items"] / sub["readings_repacked"]
    names = [f.name for f in to_result(figures).figures]
    assert "seed 003: per minute of readings" in names and names[-2] == "re-pack: sub-item write units"


def test_the_quick_clusters_table_prices_a_groups_hour_both_ways() -> None:
    # seed 003 at G 512 (an eighth of a group's devices): an entity's hour a block against 256 clusters a group
    (rows,) = cluster_table(quick=True).values()
    own, clusters = rows["one entity's hour (before clusters)"], rows["clusters, K = 256"]
    # a device's hour, 14 readings, is a block of about 200 bytes: a write unit; a cluster's share one
    assert 0.05 < own["write_units_per_reading"] < 0.1 and own["blocks"] > clusters["blocks"]
    assert clusters["write_units_per_reading"] < own["write_units_per_reading"]
    assert clusters["billed_bytes_per_reading"] < own["billed_bytes_per_reading"]
    # a device's compacted hour is one Query of half a unit either way; decoding it from its cluster costs more
    assert own["device_hour_read_units"] == clusters["device_hour_read_units"] == 0.5
    assert clusters["device_hour_bytes"] >= own["device_hour_bytes"]
    # its CPU is a multiple of today's: the own blocks' row is today's, exactly 1; the clusters' a number
    assert own["decode_cpu_ratio"] == 1.0 and 0 < clusters["decode_cpu_ratio"] < math.inf


def test_a_device_decoded_from_its_clusters_blocks_reads_what_its_own_block_holds() -> None:
    # Given a group's hour of 600 devices, 12 readings each: as cluster blocks (K = 256, a few devices a
    # cluster) and as a block per device, the two the clusters table decodes and times against each other
    rng = random.Random(7)
    hour: dict[str, list[Reading]] = {}
    for n in range(600):
        entity, first = f"device-{n:07d}", H + rng.randrange(300_000)
        hour[entity] = [
            Reading.parse({"entity_id": entity, "timestamp": first + i * 300_000, "measures": {"value": n + i / 4}})
            for i in range(12)
        ]
    clusters, own = cluster_blocks(hour, CLUSTERS), entity_blocks(hour)
    assert max(len({e for e in hour if cluster_of(e) == c}) for c in clusters) > 1
    # Then each device's readings read from its cluster's blocks (the cluster the write tier gives it) are
    # its own block's, which are the hour's
    for entity, readings in hour.items():
        _, alone = decode_block(entity, own[entity][2], span_limit_ms=MAX_COMPACTED_SPAN_MS)
        shared = [
            r
            for _, _, payload in clusters[cluster_of(entity)]
            for r in decode_group(payload, entity, span_limit_ms=MAX_COMPACTED_SPAN_MS)[1]
        ]
        assert shared == alone == readings
