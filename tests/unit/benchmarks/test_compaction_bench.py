"""The compaction benchmark's quick run: the real pass compacts every reading of its step, and the
seed 003 hour is the step's time scaled by its groups; the re-pack, by the same function, writes the
settled slices' sub-items."""

from __future__ import annotations

from benchmarks.compaction import GROUPS, run, to_result


def test_the_quick_run_compacts_its_step_and_scales_it_to_seed_003s_hour() -> None:
    figures = run(quick=True)
    assert figures["groups"] == 4 and figures["readings"] > 4 * 100 * 13
    assert figures["compacted_blocks"] == 4 * 100  # one per device: its hour in one block
    assert figures["seed_003_hour_seconds"] == figures["step_seconds"] * GROUPS / 4
    # a device's 14 readings of an hour take one write unit: about 0.07 a reading
    assert 0.05 < figures["compacted_write_units_per_reading"] < 0.1
    # and the re-pack, by the same function, re-packs the 7 settled slices of 35 minutes: every group's
    # slice into a sub-item per sub-group that has readings (16 at most), each a write unit or more
    sub = figures["repack"]
    assert sub["slices"] == 7 and 0 < sub["readings_repacked"] < figures["readings"]
    assert 4 * 7 <= sub["sub_items"] <= 4 * 7 * 16
    assert sub["sub_item_write_units_per_reading"] >= sub["sub_items"] / sub["readings_repacked"]
    names = [f.name for f in to_result(figures).figures]
    assert "seed 003: per minute of readings" in names and names[-2] == "re-pack: sub-item write units"
