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

Both trees' query runs answer from memory: the code before blocks' reader held its readings decoded, this
tree's holds each block's payload. Neither pays what Lambda's client pays for every item a Query returns:
botocore reading the response against DynamoDB's service model, an item of 5 attributes a reading before
blocks, an item of 2 a block. The run measures that apart (:func:`wire_page`, in this tree, alternating with
the rest) and gives the ratios with it added to both sides too.

Rerun: ``python -m benchmarks before-blocks`` (needs git and this repository's history).

The same runs compare this tree with any earlier commit on the hot paths (ingest, query pages at 25, 14
and 1 readings to a block, a compaction step), e.g. to see that a refactor made none of them slower:
``python -m benchmarks.before_blocks <commit>`` prints the side-by-side table (3 rounds, the first tree alternating).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.cold_start import ROOT, run_child
from benchmarks.harness import Result, benchmark
from benchmarks.query_cpu import CLUSTERED, CLUSTERED_GAP_MS, cluster_blocks
from keydesign.writetier import SLICE_MS, slice_start

#: The last commit that stored one item per reading.
BEFORE = "b224d42"
#: Readings per block: a 5-readings/s sensor in 5 s batches, a seed 003 device's compacted hour (one
#: reading every 259 s: 14 to a compacted block, the same block format), and a block of one reading.
DENSITIES = (25, 14, 1)
#: And a seed 003 device's compacted hours as compaction stores them: cluster blocks of several devices
#: (``query-cpu``'s :data:`~benchmarks.query_cpu.CLUSTERED` shape).
CLUSTERED_SHAPE = "cluster blocks, a seed 003 device's compacted hours"
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

_WIRE = """
import json
from benchmarks.before_blocks import wire_page
print(json.dumps({{"us": wire_page({density}, {pages})}}))
"""

_COMPACTION = """
import json
from benchmarks.compaction import run
print(json.dumps({"s": run()["step_cpu_seconds"]}))
"""


#: The Query calls of a page in ``query-cpu`` (16 random-layout suffixes), and the readings it returns.
_CALLS, _PAGE = 16, 1_000


def wire_page(per_block: int | None, pages: int) -> float:
    """CPU per reading (us) of a real botocore DynamoDB client reading the Query responses that hold one
    1,000-reading page of ``query-cpu``'s entity, in 16 calls: stored ``per_block`` to a block (one ingest batch
    each, as ``query-cpu`` stores them), in the cluster blocks holding them (``per_block``
    :data:`~benchmarks.query_cpu.CLUSTERED`: the hours of the device's first 1,000 readings, in its cluster's
    blocks), or one item each in the format before blocks (``per_block`` None;
    ``keydesign.legacy.legacy_item`` less its key, which the Query's projection leaves out). Each call's
    request is built and signed as in Lambda; a ``before-send`` handler (botocore's hook for answering a
    request without the network) hands back the response's JSON body, which botocore parses against the
    service model. The median over ``pages`` pages."""
    import base64  # noqa: PLC0415 - the child's imports
    import time  # noqa: PLC0415

    import boto3  # noqa: PLC0415
    from boto3.dynamodb.types import TypeSerializer  # noqa: PLC0415
    from botocore.awsrequest import AWSResponse  # noqa: PLC0415

    from benchmarks import query_fanout  # noqa: PLC0415
    from keydesign import Layout, Reading, ShardMap  # noqa: PLC0415
    from keydesign.legacy import legacy_item  # noqa: PLC0415

    layout = Layout.from_settings(kind="random", bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, _CALLS)
    start = query_fanout.NOW - query_fanout.HOUR
    readings = [Reading("sensor-1", f"e{n:06d}", start + 100 * n, {"v": n}) for n in range(_PAGE)]
    items: list[dict[str, Any]] = []
    serialize = TypeSerializer().serialize
    if per_block is None:
        for reading in readings:
            item = legacy_item(reading, layout, shard_map)
            items.append({name: serialize(value) for name, value in item.items() if name != "pk"})
    elif per_block == CLUSTERED:  # the cluster blocks of the hours holding the device's first 1,000 readings
        hybrid = Layout.from_settings(kind="hybrid", bucket="1d", table_prefix="readings")
        start, _, compacted = cluster_blocks(hybrid, 1)
        for cluster in compacted:
            if cluster.readings[0].ts_ms < slice_start(start + _PAGE * CLUSTERED_GAP_MS) + SLICE_MS:
                items.append({"sk": {"S": cluster.sk}, "b": {"B": base64.b64encode(cluster.payload).decode()}})
    else:
        for at in range(0, _PAGE, per_block):
            for block in layout.pack([(r, at) for r in readings[at : at + per_block]], shard_map):
                items.append({"sk": {"S": block.key.sk}, "b": {"B": base64.b64encode(block.encoded.payload).decode()}})
    each = -(-len(items) // _CALLS)
    bodies = [
        json.dumps({"Items": part, "Count": len(part), "ScannedCount": len(part)}).encode()
        for part in (items[at : at + each] for at in range(0, len(items), each))
    ]

    class Body:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def stream(self, **_: Any) -> Iterator[bytes]:
            yield self.data

    pending: list[bytes] = []

    def answer(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 200, {"content-type": "application/x-amz-json-1.0"}, Body(pending.pop()))

    client = boto3.client(
        "dynamodb",
        region_name="us-east-1",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",  # noqa: S106 - signs requests that never leave the process
        endpoint_url="http://127.0.0.1:9",
    )
    client.meta.events.register("before-send.dynamodb.Query", answer)
    query = {
        "TableName": "readings",
        "KeyConditionExpression": "#pk = :pk",
        "ExpressionAttributeNames": {"#pk": "pk"},
        "ExpressionAttributeValues": {":pk": {"S": "p"}},
    }
    spent: list[float] = []
    for n in range(pages + 5):  # the first 5 warm the client's caches
        started, got = time.process_time(), 0
        for body in bodies:
            pending.append(body)
            got += len(client.query(**query)["Items"])
        if got != len(items):
            raise AssertionError(f"the responses held {got} items, not {len(items)}")
        if n >= 5:
            spent.append((time.process_time() - started) * 1e6 / _PAGE)
    return statistics.median(spent)


@benchmark("before-blocks", "ingest and query CPU per reading: blocks against the code before blocks, side by side")
def before_blocks(quick: bool) -> Result:
    before, now = before_tree(), ROOT
    rounds, pages = (1, 50) if quick else (3, 200)
    ingest: dict[str, list[float]] = {"before": [], "blocks": []}
    shapes = {**{f"blocks, {d} to a block": d for d in DENSITIES}, CLUSTERED_SHAPE: CLUSTERED}
    labels: dict[str, int | None] = {"before": None, **shapes}
    query: dict[str, list[float]] = {label: [] for label in labels}
    wire: dict[str, list[float]] = {label: [] for label in labels}
    for _ in range(rounds):  # alternating: every kind of run sees the same load on a shared machine
        ingest["before"].append(_in(before, _INGEST.format(quick=quick))["us"])
        ingest["blocks"].append(_in(now, _INGEST.format(quick=quick))["us"])
        query["before"].append(_in(before, _QUERY.format(pages=pages, density=""))["ms"])
        for label, per_block in shapes.items():
            query[label].append(_in(now, _QUERY.format(pages=pages, density=f", {per_block}"))["ms"])
        for label, shape in labels.items():
            wire[label].append(_in(now, _WIRE.format(density=shape, pages=pages // 4))["us"])
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
    for label in shapes:
        result.add(f"query CPU per reading, {label} / before", round(query_us[label] / query_us["before"], 2), "x")
    wire_us = {label: statistics.median(runs) for label, runs in wire.items()}
    for label, us in wire_us.items():
        each = ", ".join(f"{v:.1f}" for v in wire[label])
        result.add(f"botocore's read of the items a reading returned ({label})", round(us, 1), "us", f"rounds: {each}")
    whole = {label: query_us[label] + wire_us[label] for label in labels}
    for label in shapes:
        ratio = round(whole[label] / whole["before"], 2)
        result.add(f"query CPU per reading with botocore's read of the items, {label} / before", ratio, "x")
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
