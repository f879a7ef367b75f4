"""The fan-out machinery around the merge: the benchmark module still measures what docs/query.md reports."""

from __future__ import annotations

from benchmarks.query_fanout import run


def test_the_fan_out_benchmark_reads_the_same_page_both_ways_and_pays_each_call() -> None:
    # The speed-up itself is a benchmark figure (docs/benchmarks.md), not a timed test: on a shared
    # machine a ratio of wall times is noise. What must hold on any machine is checked here.
    result = run(latency_ms=10.0, partition_counts=(8,), repeats=1)

    for case in result["cases"]:
        # (run() raises if the parallel and sequential reads returned different pages)
        # sequential: one sleep per Query call, at least; parallel: at least one round trip
        assert case["queries_per_page"] >= 8
        assert case["sequential_ms"] >= 10.0 * case["queries_per_page"]
        assert case["parallel_ms"] >= 10.0
        assert case["speedup"] == round(case["sequential_ms"] / case["parallel_ms"], 1)
