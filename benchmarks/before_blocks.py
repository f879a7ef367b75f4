"""Ingest and query CPU per reading, blocks against the code as it was before blocks, side by side in one run.

The code before blocks is commit ``BEFORE`` (the last commit whose ingest wrote one item per reading).
Its ``functions/`` and ``benchmarks/`` are unpacked with ``git archive`` under ``out/bench/`` (once) and
its own benchmarks run from there, in fresh interpreters of this virtual environment, alternating with
this tree's:

* ingest: each tree's ``ingest-cpu`` (10,000 generated readings of 1,000 entities in one Lambda event of
  packed records, network stubbed, the handler's collector settings); its best warm run's CPU per reading.
* query: each tree's ``query-cpu`` child (``query.handler`` imported as Lambda's init does, then 1,000-reading
  pages of one entity through the API, 16 partitions answered from memory); the median CPU per page over
  the run's pages. Blocks are measured at 25 readings to a block (a 5-readings/s sensor under the default
  5 s batching window), at 14 (a seed 003 device's hour as compaction stores it: a compacted block is a
  block of the same format) and at one (a sparse entity without the write tier: the most work per reading).

Rerun: ``python -m benchmarks before-blocks`` (needs git and this repository's history).

The same runs compare this tree with any earlier commit on the hot paths (ingest, query pages at 25, 14
and 1 readings to a block, a compaction step), e.g. to see that a refactor made none of them slower:
``python -m benchmarks.before_blocks <commit>`` prints the side-by-side table (3 rounds, the first tree alternating).
"""

from __future__ import annotations

import os
import statistics
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.cold_start import ROOT, run_child
from benchmarks.harness import Result, benchmark

#: The last commit that stored one item per reading.
BEFORE = "b224d42"
#: Readings per block: a 5-readings/s sensor in 5 s batches, a seed 003 device's compacted hour (one
#: reading every 259 s: 14 to a compacted block, the same block format), and a block of one reading.
DENSITIES = (25, 14, 1)
#: What the benchmarks of that commit import (the rest of its tree is not needed).
_PARTS = ("functions", "benchmarks", "local_runtime", "infra", "producer", "cdk.json")


def before_tree(commit: str = BEFORE) -> Path:
    """The code of ``commit`` (before blocks by default), unpacked from git under out/bench (reused once unpacked)."""
    tree = ROOT / "out" / "bench" / f"before-{commit}"
    if not (tree / "functions").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(  # noqa: S603 - git over this repository
            ["git", "-C", str(ROOT), "archive", commit, *_PARTS],  # noqa: S607
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise RuntimeError(f"cannot unpack commit {commit} (needs git and the history): {archive.stderr!r}")
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)  # noqa: S603, S607
    return tree


def _in(tree: Path, code: str) -> dict[str, Any]:
    """Run ``code`` (which prints one JSON line last) with ``tree``'s code first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree / "functions"), str(tree)]))
    return run_child(["-c", code], env, what=f"the run in {tree}", timeout=900, cwd=tree)[0]


_INGEST = """
import json
from benchmarks.ingest import ingest_cpu
figures = {{f.name: f.value for f in ingest_cpu({quick}).figures}}
print(json.dumps({{"us": 1e6 / figures["readings/s/core (packed)"]}}))
"""

_QUERY = """
import json, statistics
from benchmarks.query_cpu import _run_child
child = _run_child("tuned", {pages}{density})
print(json.dumps({{"ms": statistics.median(child["cpu_ms"])}}))
"""

_COMPACTION = """
import json
from benchmarks.compaction import run
print(json.dumps({"s": run()["step_cpu_seconds"]}))
"""


@benchmark("before-blocks", "ingest and query CPU per reading: blocks against the code before blocks, side by side")
def before_blocks(quick: bool) -> Result:
    before, now = before_tree(), ROOT
    rounds, pages = (1, 50) if quick else (3, 200)
    ingest: dict[str, list[float]] = {"before": [], "blocks": []}
    query: dict[str, list[float]] = {"before": [], **{f"blocks, {d} to a block": [] for d in DENSITIES}}
    for _ in range(rounds):  # alternating: every kind of run sees the same load on a shared machine
        ingest["before"].append(_in(before, _INGEST.format(quick=quick))["us"])
        ingest["blocks"].append(_in(now, _INGEST.format(quick=quick))["us"])
        query["before"].append(_in(before, _QUERY.format(pages=pages, density=""))["ms"])
        for d in DENSITIES:
            query[f"blocks, {d} to a block"].append(_in(now, _QUERY.format(pages=pages, density=f", {d}"))["ms"])
    result = Result(
        params={"before": BEFORE, "rounds": rounds, "pages_per_query_run": pages, "readings_per_block": DENSITIES},
        method=(
            f"commit {BEFORE}'s benchmarks (git archive under out/bench) and this tree's, in fresh interpreters, "
            f"alternating, {rounds} rounds: ingest-cpu's best warm CPU per reading (packed records); query-cpu's "
            f"child with the handler's collector, median CPU of {pages} 1,000-reading pages; medians over rounds"
        ),
    )
    ingest_us = {label: statistics.median(runs) for label, runs in ingest.items()}
    for label, us in ingest_us.items():
        each = ", ".join(f"{v:.1f}" for v in ingest[label])
        result.add(f"ingest CPU per reading ({label})", round(us, 1), "us", f"rounds: {each}")
    result.add("ingest CPU per reading, blocks / before", round(ingest_us["blocks"] / ingest_us["before"], 2), "x")
    query_us = {label: statistics.median(runs) for label, runs in query.items()}  # ms per 1,000 readings = us each
    for label, us in query_us.items():
        each = ", ".join(f"{v:.1f}" for v in query[label])
        result.add(f"query CPU per reading returned ({label})", round(us, 1), "us", f"rounds: {each}")
    for d in DENSITIES:
        label = f"blocks, {d} to a block"
        result.add(f"query CPU per reading, {label} / before", round(query_us[label] / query_us["before"], 2), "x")
    return result


def side_by_side(commit: str, rounds: int = 3, pages: int = 200) -> dict[str, dict[str, float]]:
    """Medians over ``rounds`` of this tree's and ``commit``'s hot paths, alternating: ingest CPU per reading
    (us), query CPU per page of 1,000 readings at each of :data:`DENSITIES` (ms), a compaction step's CPU (s)."""
    trees = {commit: before_tree(commit), "this tree": ROOT}
    runs: dict[str, dict[str, list[float]]] = {label: {} for label in trees}
    for round_ in range(rounds):
        # Which tree runs first alternates: on a shared 2-core machine the order alone moved a figure by a fifth.
        for label, tree in list(trees.items())[:: -1 if round_ % 2 else 1]:
            figures = runs[label]
            figures.setdefault("ingest, us a reading", []).append(_in(tree, _INGEST.format(quick=False))["us"])
            for d in DENSITIES:
                page = _in(tree, _QUERY.format(pages=pages, density=f", {d}"))["ms"]
                figures.setdefault(f"query, ms a page, {d} to a block", []).append(page)
            figures.setdefault("compaction, CPU s a step", []).append(_in(tree, _COMPACTION)["s"])
    return {label: {k: statistics.median(v) for k, v in figures.items()} for label, figures in runs.items()}


if __name__ == "__main__":
    import sys

    medians = side_by_side(sys.argv[1])
    base, now = medians[sys.argv[1]], medians["this tree"]
    print(f"| hot path | {sys.argv[1]} | this tree | this tree / {sys.argv[1]} |\n| --- | ---: | ---: | ---: |")
    for name, value in base.items():
        print(f"| {name} | {value:.2f} | {now[name]:.2f} | {now[name] / value:.2f}x |")
