"""CPU of a 1,000-reading query page through the real API, with Python's collector and as the handler sets it.

Each run is a fresh interpreter that imports ``query.handler`` with the function's environment, as
Lambda's init does (``adapters.collector.tune_collector`` runs last: init's objects frozen, young
collections every 10,000 allocations). The "python" runs undo that straight after the import
(``gc.unfreeze()``, thresholds 700/10/10). Then the child builds the API (``query.api.create_app``)
on a ``QueryService`` whose reader answers from memory (``doubles.memory_dynamo.MemoryReader``,
16 random-layout suffixes, no latency), holding 1,600 readings of one entity, 100 ms apart, stored
as blocks of ``per_block`` consecutive readings (one ingest batch each, ``Layout.pack``). It serves
the entity's 1,000-reading page through ``app.resolve`` again and again: parameters validated,
partitions read in parallel, blocks decoded, merged, the response serialised. For each page it
takes the CPU time of the process and the collector's time (a ``gc.callbacks`` clock). The
reader's blocks are built after the import, so they are walked by the collector in both modes.
Before serving, each child also times one full collection (``gc.collect()``): with init's
objects, or with them frozen.

Rerun: ``python -m benchmarks query-cpu``.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from benchmarks.cold_start import FUNCTIONS, ROOT, handler_env, run_child
from benchmarks.harness import Result, benchmark, collector_time
from doubles.lambda_context import FakeLambdaContext

if TYPE_CHECKING:  # the child imports what it runs after query.handler, as Lambda's init would
    from aws_lambda_powertools.event_handler import APIGatewayRestResolver

    from doubles.memory_dynamo import MemoryReader
    from keydesign import Layout
    from keydesign.tiering import CompactedBlock

PAGE = 1_000
MODES = ("python", "tuned")
READINGS = 1_600
#: Readings per block: one (a sparse entity, every reading alone in its block: the most work per
#: reading) for the collector comparison, then denser entities with the handler's collector.
DENSITIES = (1, 10, 100)
#: ``per_block`` for a seed 003 device's compacted hours instead: a reading every 259 s (about 14 an hour),
#: compacted into cluster blocks (block format 5) beside :data:`CLUSTER_MATES` other devices of its cluster,
#: as ``tsctl plan``'s G auto puts about 8 in one; the hybrid layout with 1-day buckets, so a page reads
#: three days of its cluster partition in a few Queries (with 1-hour buckets, one an hour).
CLUSTERED = 0
CLUSTER_MATES = 7
#: The compacted shape's time between a device's readings: seed 003's.
CLUSTERED_GAP_MS = 259_000


def child(mode: str, pages: int, per_block: int = 1) -> dict[str, Any]:
    """One run, in this (fresh) interpreter: CPU and collector time of ``pages`` pages, the readings
    stored ``per_block`` to a block."""
    import gc  # noqa: PLC0415 - the child's imports are what is measured
    import time  # noqa: PLC0415

    import query.handler  # noqa: F401, PLC0415 - init, as Lambda runs it: tunes the collector last

    frozen = gc.get_freeze_count()
    if mode == "python":
        gc.unfreeze()
        gc.set_threshold(700, 10, 10)
    walk = time.perf_counter()
    gc.collect()  # what one full collection costs from here on: every object init built, or none of them
    walk = time.perf_counter() - walk
    from adapters.observability import metrics  # noqa: PLC0415

    app, event = _api(per_block)

    cpu: list[float] = []
    gc_ms: list[float] = []
    fulls = 0
    for n in range(pages + 20):  # the first 20 warm the container (threads, caches) and are not counted
        with collector_time() as collecting:  # this page's collector time and full collections
            started = time.process_time()
            answer = app.resolve(event, FakeLambdaContext(28_000, function_name="query"))  # type: ignore[arg-type]
            spent = time.process_time() - started
        metrics.clear_metrics()
        if answer["statusCode"] != 200 or len(json.loads(answer["body"])["items"]) != PAGE:
            raise AssertionError(f"the page was not served: {answer['statusCode']} {answer['body'][:200]}")
        if n >= 20:
            cpu.append(spent * 1000)
            gc_ms.append(collecting[0] * 1000)
            fulls += int(collecting[1])
    return {
        "mode": mode,
        "per_block": per_block,
        "cpu_ms": cpu,
        "gc_ms": gc_ms,
        "full_collections": fulls,
        "frozen": frozen,
        "full_collection_ms": walk * 1000,
    }


def _api(per_block: int) -> tuple[APIGatewayRestResolver, dict[str, Any]]:
    """The API over the readings stored ``per_block`` to a block (or :data:`CLUSTERED`), and the event of the
    page it serves."""
    import random  # noqa: PLC0415

    from benchmarks import query_fanout  # noqa: PLC0415
    from doubles.memory_dynamo import SEQUENCE_BASE, MemoryReader  # noqa: PLC0415
    from keydesign import Layout, Reading, ShardMap, format_ts  # noqa: PLC0415
    from local_runtime.api_gateway import HttpRequest, proxy_event  # noqa: PLC0415
    from query.api import create_app  # noqa: PLC0415
    from query.settings import QueryLimits  # noqa: PLC0415

    memory, rng = MemoryReader(), random.Random(16)
    if per_block == CLUSTERED:
        layout = Layout.from_settings(kind="hybrid", bucket="1d", table_prefix="readings")
        shard_map = ShardMap.initial(layout.bucket, 16)
        start, extra = _compacted(layout, memory, SEQUENCE_BASE)
    else:
        layout = Layout.from_settings(kind="random", bucket="1h", table_prefix="readings")
        shard_map = ShardMap.initial(layout.bucket, 16)
        start, extra = query_fanout.NOW - query_fanout.HOUR, {}
        readings = [Reading("sensor-1", f"e{n:06d}", start + 100 * n, {"v": n}) for n in range(READINGS)]
        for at in range(0, READINGS, per_block):  # one ingest batch (a Kinesis sequence number) per block
            batch = [(reading, SEQUENCE_BASE + at) for reading in readings[at : at + per_block]]
            memory.store(layout, shard_map, batch, rng=rng)
    limits = QueryLimits(concurrency=16)
    app = create_app(query_fanout.timed_service(layout, shard_map, memory, 0.0, limits, **extra))
    params = urlencode({"from": format_ts(start), "to": format_ts(query_fanout.NOW), "limit": PAGE})
    request = HttpRequest("GET", f"/prod/entities/sensor-1/readings?{params}", [], b"", "127.0.0.1", "localhost")
    event = proxy_event(request, stage="prod", request_id="bench", now_ms=query_fanout.NOW)
    if event is None:
        raise AssertionError("the page's path is outside the stage")
    return app, event


def _compacted(layout: Layout, memory: MemoryReader, version: int) -> tuple[int, dict[str, Any]]:
    """Store :func:`cluster_blocks` in ``memory``; the first reading's time and the service's write tier and
    watermark (every hour before the one ``query_fanout.NOW`` is in compacted)."""
    from doubles.tier_items import FixedWatermark  # noqa: PLC0415
    from keydesign.writetier import WriteTier  # noqa: PLC0415

    start, through, blocks = cluster_blocks(layout, version)
    for block in blocks:
        memory.add_item(block.table, block.item())
    return start, {"write_tier": WriteTier(1), "watermark": FixedWatermark(through, 1)}


def cluster_blocks(layout: Layout, version: int) -> tuple[int, int, list[CompactedBlock]]:
    """``sensor-1``'s :data:`READINGS` readings, one every :data:`CLUSTERED_GAP_MS`, and as many of each of its
    :data:`CLUSTER_MATES`, as compaction stores them (their group's hours in cluster blocks, one group), in the hours
    before the one ``query_fanout.NOW`` is in: the first reading's time, the end of the last hour, the blocks."""
    from benchmarks import query_fanout  # noqa: PLC0415
    from keydesign import Reading  # noqa: PLC0415
    from keydesign.tiering import compact_hour  # noqa: PLC0415
    from keydesign.writetier import SLICE_MS, WriteTier, cluster_of, slice_start  # noqa: PLC0415

    gap, tier = CLUSTERED_GAP_MS, WriteTier(1)
    mates = (f"sensor-{n}" for n in itertools.count(2) if cluster_of(f"sensor-{n}") == cluster_of("sensor-1"))
    entities = ["sensor-1", *itertools.islice(mates, CLUSTER_MATES)]
    through = slice_start(query_fanout.NOW)
    start = slice_start(through - READINGS * gap)
    hours: dict[int, list[Reading]] = {}
    for k, entity in enumerate(entities):
        for n in range(READINGS):
            reading = Reading(entity, f"e{n:06d}", start + n * gap + k * 1_000, {"v": n})
            hours.setdefault(slice_start(reading.ts_ms), []).append(reading)
    if max(hours) + SLICE_MS > through:
        raise AssertionError("the readings reach into the hour compaction has not done")
    blocks = []
    for hour, readings in sorted(hours.items()):
        pk = tier.cluster_pk(0, layout.cluster_span(hour))
        blocks += compact_hour(hour, [(version, readings)], table=layout.table_for(hour), pk=pk)
    return start, through, blocks


def _run_child(mode: str, pages: int, per_block: int = 1) -> dict[str, Any]:
    env = handler_env("query")
    env.update(
        POWERTOOLS_TRACE_DISABLED="true",  # no X-Ray daemon here; as the other benchmarks run
        POWERTOOLS_LOG_LEVEL="WARNING",
        PYTHONPATH=os.pathsep.join([str(FUNCTIONS), str(ROOT)]),
    )
    argv = ["-m", "benchmarks.query_cpu", mode, str(pages), str(per_block)]
    return run_child(argv, env, what=f"the {mode} run", timeout=600)[0]


@benchmark("query-cpu", "CPU of a 1,000-reading query page through the API: Python's collector vs the handler's")
def query_cpu(quick: bool) -> Result:
    runs, pages = (1, 100) if quick else (5, 300)
    found: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    dense: dict[int, list[dict[str, Any]]] = {per_block: [] for per_block in DENSITIES[1:]}
    for _ in range(runs):  # alternating: every kind of run sees the same load on a shared machine
        for mode in MODES:
            found[mode].append(_run_child(mode, pages))
        for per_block, children in dense.items():
            children.append(_run_child("tuned", pages, per_block))
    result = Result(
        params={
            "page": PAGE,
            "runs_per_mode": runs,
            "pages_per_run": pages,
            "partitions": 16,
            "readings_per_block": DENSITIES,
        },
        method=(
            f"{runs} fresh interpreters per mode, alternating; each imports query.handler with the function's "
            f"environment (init tunes the collector; 'python' undoes it), then serves {pages} pages of {PAGE} "
            "readings of one entity through create_app(...).resolve, the reader answering from memory (16 "
            f"random-layout suffixes, no latency; {READINGS:,} readings 100 ms apart, one to a block), after 20 "
            "unclocked pages; CPU time of the process per page; the collector's time per page from gc.callbacks; "
            "medians of the runs' medians, the 99th percentile over every page of a mode; then the handler's "
            f"collector with {' and '.join(map(str, DENSITIES[1:]))} readings to a block"
        ),
    )
    figures: dict[str, dict[str, float]] = {}
    for mode, children in found.items():
        every = [ms for c in children for ms in c["cpu_ms"]]
        figures[mode] = {
            "median": statistics.median(statistics.median(c["cpu_ms"]) for c in children),
            "p99": statistics.quantiles(every, n=100)[98],
            "gc": statistics.median(statistics.mean(c["gc_ms"]) for c in children),
            "full": sum(c["full_collections"] for c in children) * 100 / (runs * pages),
        }
        label = "Python's collector" if mode == "python" else "as the handler sets it"
        each = ", ".join(f"{statistics.median(c['cpu_ms']):.1f}" for c in children)
        result.add(f"CPU per page, median ({label})", round(figures[mode]["median"], 1), "ms", f"runs: {each}")
        result.add(f"CPU per page, 99th percentile ({label})", round(figures[mode]["p99"], 1), "ms")
        result.add(f"collector per page, mean ({label})", round(figures[mode]["gc"], 2), "ms")
        result.add(f"full collections per 100 pages ({label})", round(figures[mode]["full"], 1), "")
        walk = statistics.median(c["full_collection_ms"] for c in children)
        result.add(f"one full collection after init ({label})", round(walk, 1), "ms")
    result.add("objects init leaves, frozen by the handler", statistics.median(c["frozen"] for c in found["tuned"]), "")
    for stat in ("median", "p99"):
        ratio = figures["tuned"][stat] / figures["python"][stat]
        result.add(f"CPU per page, {stat}: tuned / Python's", round(ratio, 2), "x")
    per_reading = {1: figures["tuned"]["median"]}
    for per_block, children in dense.items():
        per_reading[per_block] = statistics.median(statistics.median(c["cpu_ms"]) for c in children)
        each = ", ".join(f"{statistics.median(c['cpu_ms']):.1f}" for c in children)
        result.add(
            f"CPU per page, median (as the handler sets it, {per_block} readings to a block)",
            round(per_reading[per_block], 1),
            "ms",
            f"runs: {each}",
        )
    for per_block, ms in per_reading.items():
        result.add(f"CPU per reading returned ({per_block} to a block)", round(ms * 1000 / PAGE, 1), "us")
    return result


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1)))
