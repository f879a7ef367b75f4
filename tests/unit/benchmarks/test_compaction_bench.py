"""The compaction benchmark's quick run: the real pass compacts every reading of its step, and the
seed 003 hour is the step's time scaled by its groups."""

from __future__ import annotations

from benchmarks.compaction import GROUPS, run, to_result


def test_the_quick_run_compacts_its_step_and_scales_it_to_seed_003s_hour() -> None:
    figures = run(quick=True)
    assert figures["groups"] == 4 and figures["readings"] > 4 * 100 * 13
    assert figures["compacted_blocks"] == 4 * 100  # one per device: its hour in one block
    assert figures["seed_003_hour_seconds"] == figures["step_seconds"] * GROUPS / 4
    # a device's 14 readings of an hour take one write unit: about 0.07 a reading
    assert 0.05 < figures["compacted_write_units_per_reading"] < 0.1
    assert [f.name for f in to_result(figures).figures][-1] == "seed 003: per minute of readings"
