"""The workload simulator's own speed: a simulated hour of the seed scenario at 50,000 readings/s, in blocks."""

from __future__ import annotations

import time

from benchmarks.harness import Result, benchmark
from keydesign import parse_timestamp
from simulator import Simulation, SimWorkload, parse_layout_spec
from simulator.engine import default_shards
from tsctl import seed
from tsctl.commands.simulate import DEFAULT_LAYOUTS, DEFAULT_START, parse_hot


@benchmark("simulator", "tsctl simulate's engine: a simulated hour of 50,000 readings/s in blocks under five layouts")
def simulator_speed(quick: bool) -> Result:
    return simulate(600 if quick else 3_600)


def simulate(duration: int) -> Result:
    """The seed scenario over ``duration`` simulated seconds, every default layout side by side."""
    workload = SimWorkload(
        rate=seed.GLOBAL_RATE,
        entities=seed.SENSORS,
        start_ms=parse_timestamp(DEFAULT_START),
        duration_s=duration,
        hot=parse_hot(None, none=False),
    )
    hybrid_n, suffixes = default_shards(workload, 0.5)
    layouts = [parse_layout_spec(s, hybrid_shards=hybrid_n, suffixes=suffixes) for s in DEFAULT_LAYOUTS.split(",")]
    started = time.perf_counter()
    outcome = Simulation(workload, layouts).run()  # reads: the default pattern
    wall = time.perf_counter() - started
    labels = ", ".join(r.spec.label for r in outcome.layouts)
    result = Result(
        params={"simulated_s": duration, "layouts": labels, "chunk_seconds": outcome.chunk_seconds},
        method=(
            f"Simulation.run() on the seed scenario (tsctl simulate's defaults: {workload.batching_window_s} s batches "
            "packed into blocks), every layout side by side on the same blocks, reads included; wall time of the call "
            "(the process's only work)"
        ),
    )
    result.add(f"simulated {duration // 60} min at 50,000 readings/s: wall time", round(wall, 1), "s", labels)
    result.add("simulated readings", outcome.simulated_writes, "readings")
    result.add(
        "simulated readings per wall second",
        round(outcome.simulated_writes / wall),
        "readings/s",
        "all layouts at once",
    )
    return result
